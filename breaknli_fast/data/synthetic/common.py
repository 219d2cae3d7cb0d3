"""What the generators share: errors, the asset folder, the balanced label schedule, and streamed writing."""

from __future__ import annotations

import gzip
import json
import os
import random
from pathlib import Path
from typing import Any, Callable, Hashable, Iterable, Iterator

from breaknli_fast.data.labels import LABELS
from breaknli_fast.errors import UserError

GENERATOR_VERSION = "3"  # bump when a generator's output for a given seed changes


class SyntheticError(UserError, ValueError):
    """A bad option of a generator (one line for the CLI)."""


def asset_path(name: str) -> Path:
    return Path(__file__).resolve().parent.parent.parent / "assets" / "synthetic" / name


def load_json(path: Path) -> Any:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as e:
        raise SyntheticError(f"cannot read {path}: {e.strerror or e}") from None
    except ValueError as e:
        raise SyntheticError(f"{path} is not valid JSON: {e}") from None


def check_rate(name: str, value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise SyntheticError(f"--{name} must be between 0 and 1 (got {value})")
    return value


def label_schedule(rng: random.Random) -> Iterator[str]:
    """Target labels in blocks of three, each block a random order of the three labels: any prefix of the
    stream is balanced to within one example per label."""
    while True:
        block = list(LABELS)
        rng.shuffle(block)
        yield from block


def check_out(out: str | Path) -> Path:
    """An output path that :func:`write_jsonl` can write (``.jsonl`` or ``.jsonl.gz``, not a folder)."""
    out = Path(out).expanduser()
    name = out.name.lower()
    if not (name.endswith(".jsonl") or name.endswith(".jsonl.gz")):
        raise SyntheticError(f"--out must name a .jsonl or .jsonl.gz file (got {out.name})")
    if out.is_dir():
        raise SyntheticError(f"{out} is a directory")
    return out


def write_jsonl(rows: Iterable[dict[str, Any]], out: str | Path,
                advance: Callable[[int], None] | None = None) -> dict[str, int]:
    """Stream ``rows`` to ``out`` (``.jsonl`` or ``.jsonl.gz``) through a temporary file renamed at the end, so an
    interrupted run leaves no partial file. Returns the label counts."""
    out = check_out(out)
    name = out.name.lower()
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise SyntheticError(f"cannot create {out.parent}: {e.strerror or e}") from None
    tmp = out.with_name(f".{out.name}.{os.getpid()}.tmp")
    counts = {lab: 0 for lab in LABELS}
    try:
        opener = (lambda: gzip.open(tmp, "wt", encoding="utf-8", compresslevel=6)) if name.endswith(".gz") \
            else (lambda: open(tmp, "w", encoding="utf-8"))
        with opener() as fh:
            done = 0
            for row in rows:
                fh.write(json.dumps(row, ensure_ascii=False) + "\n")
                counts[row["label"]] += 1
                done += 1
                if advance is not None and done % 1000 == 0:
                    advance(1000)
            if advance is not None and done % 1000:
                advance(done % 1000)
        os.replace(tmp, out)
    except OSError as e:
        raise SyntheticError(f"cannot write {out}: {e.strerror or e}") from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return counts


def shared_skeletons(schedule: Iterator[str], n: int, labels: Iterable[str],
                     draw: Callable[[], Any]) -> Iterator[tuple[int, str, Any]]:
    """(i, target label, skeleton, k) for ``n`` pairs whose labels come from ``schedule``: the k-th pair of every
    label shares the k-th skeleton ``draw()`` makes, so no skeleton tells the label. A skeleton is drawn when a
    label first reaches its rank and forgotten once every label has used it. ``k`` is the pairs' group: pairs of
    one group share their surface, so a split that puts some of a group on each side lets the label of a test pair
    be guessed by elimination (the label its training twins lack); every split keeps a group on one side."""
    labels = tuple(labels)
    skeletons: dict[int, list[Any]] = {}  # rank -> [skeleton, labels still to use it]
    drawn = 0
    seen = {lab: 0 for lab in labels}
    for i in range(n):
        target = next(schedule)
        k = seen[target]
        seen[target] += 1
        while drawn <= k:
            skeletons[drawn] = [draw(), len(labels)]
            drawn += 1
        entry = skeletons[k]
        entry[1] -= 1
        if not entry[1]:
            del skeletons[k]
        yield i, target, entry[0], k


MATCH_ROUNDS = 60  # candidates built per label before a rank's three pairs are left unmatched


def matched_triple(build: Callable[[str], Any], signature: Callable[[Any], Hashable], labels: Iterable[str],
                   rng: random.Random, rounds: int = MATCH_ROUNDS) -> tuple[dict[str, Any], bool]:
    """One candidate per label, all with the same ``signature``: candidates are built for each label in turn
    (``build(label)``, None where a try fails) and kept by signature until some signature has one of every
    label (one of those found in the same round, at random). After ``rounds`` rounds without one, the first
    candidate of each label, unmatched. Returns (label -> candidate, matched)."""
    labels = tuple(labels)
    pools: dict[str, dict[Hashable, Any]] = {lab: {} for lab in labels}
    first: dict[str, Any] = {}
    for _ in range(rounds):
        for lab in labels:
            c = build(lab)
            if c is not None:
                first.setdefault(lab, c)
                pools[lab].setdefault(signature(c), c)
        common = set(pools[labels[0]]).intersection(*(pools[lab] for lab in labels[1:]))
        if common:
            sig = sorted(common)[int(rng.random() * len(common))]
            return {lab: pools[lab][sig] for lab in labels}, True
    missing = [lab for lab in labels if lab not in first]
    if missing:
        raise SyntheticError(f"no {', '.join(missing)} pair could be built in {rounds} tries with these rates")
    return first, False
