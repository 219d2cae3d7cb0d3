"""Dataset loaders: the embedded sample, local JSONL / CSV / TSV files, and hub datasets.

Every loader returns :class:`LoadedData`: valid examples (canonical labels, normalised texts)
plus :class:`SkipStats` counting each kind of skipped row with the first few line numbers.
A file that cannot be read at all raises :class:`DataError` (one line, for the CLI).
"""

from __future__ import annotations

import csv
import gzip
import io
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from breaknli_fast.data.labels import dataset_label, is_missing_label
from breaknli_fast.data.normalize import normalize_text

SAMPLE_NAME = "sample"
HUB_DATASETS = ("mnli", "snli", "anli")
MAX_LINES_KEPT = 5

# Column name fallbacks: ours, then SNLI's own files.
PREMISE_KEYS = ("premise", "sentence1")
HYPOTHESIS_KEYS = ("hypothesis", "sentence2")
LABEL_KEYS = ("label", "gold_label")
ID_KEYS = ("id", "pairID", "uid", "idx")

SKIP_REASONS = ("no_gold_label", "unknown_label", "empty_text", "malformed")


class DataError(RuntimeError):
    """A dataset that cannot be read at all."""


@dataclass
class Example:
    id: str
    premise: str
    hypothesis: str
    label: str  # canonical
    line: int  # 1-based line / row number in the source (hub: row index + 1)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SkipStats:
    counts: dict[str, int] = field(default_factory=lambda: {r: 0 for r in SKIP_REASONS})
    lines: dict[str, list[int]] = field(default_factory=lambda: {r: [] for r in SKIP_REASONS})
    read: int = 0

    def skip(self, reason: str, line: int) -> None:
        self.counts[reason] += 1
        if len(self.lines[reason]) < MAX_LINES_KEPT:
            self.lines[reason].append(line)

    @property
    def skipped(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.read, "skipped": self.skipped, "counts": dict(self.counts), "first_lines": dict(self.lines)}


@dataclass
class LoadedData:
    examples: list[Example]
    skips: SkipStats
    source: dict[str, Any]

    def __len__(self) -> int:
        return len(self.examples)


@dataclass
class Columns:
    premise: str | None = None
    hypothesis: str | None = None
    label: str | None = None
    id: str | None = None


def sample_path() -> Path:
    return Path(__file__).resolve().parent.parent / "assets" / "data" / "snli_sample.jsonl"


def _pick(row: dict[str, Any], explicit: str | None, keys: tuple[str, ...]) -> tuple[bool, Any]:
    if explicit:
        return (explicit in row, row.get(explicit))
    for k in keys:
        if k in row:
            return True, row[k]
    return False, None


def rows_to_examples(rows: Iterable[tuple[int, Any]], cols: Columns, limit: int | None, stats: SkipStats,
                     label_values: dict[str, str] | None = None) -> list[Example]:
    """Validate (line, row) pairs; rows that are not dicts count as malformed."""
    out: list[Example] = []
    seen_ids: dict[str, int] = {}
    for line, row in rows:
        if limit is not None and len(out) >= limit:
            break
        stats.read += 1
        if not isinstance(row, dict):
            stats.skip("malformed", line)
            continue
        okp, prem = _pick(row, cols.premise, PREMISE_KEYS)
        okh, hyp = _pick(row, cols.hypothesis, HYPOTHESIS_KEYS)
        okl, lab = _pick(row, cols.label, LABEL_KEYS)
        if not (okp and okh and okl):
            stats.skip("malformed", line)
            continue
        if not isinstance(prem, str) or not isinstance(hyp, str):
            if prem is None or hyp is None:
                stats.skip("empty_text", line)
            else:
                stats.skip("malformed", line)
            continue
        if label_values and isinstance(lab, (str, int)) and str(lab).strip() in label_values:
            lab = label_values[str(lab).strip()]
        if is_missing_label(lab):
            stats.skip("no_gold_label", line)
            continue
        gold = dataset_label(lab)
        if gold is None:
            stats.skip("unknown_label", line)
            continue
        p, h = normalize_text(prem), normalize_text(hyp)
        if not p or not h:
            stats.skip("empty_text", line)
            continue
        _, rid = _pick(row, cols.id, ID_KEYS)
        eid = str(rid) if rid not in (None, "") else f"row-{line}"
        if eid in seen_ids:  # keep ids unique (resume keys on them)
            seen_ids[eid] += 1
            eid = f"{eid}#{seen_ids[eid]}"
        else:
            seen_ids[eid] = 0
        out.append(Example(eid, p, h, gold, line))
    return out


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace", newline="")
    return open(path, encoding="utf-8", errors="replace", newline="")


def _inner_suffix(path: Path) -> str:
    return Path(path.stem).suffix.lower() if path.suffix == ".gz" else path.suffix.lower()


def _iter_jsonl(fh: io.TextIOBase) -> Iterator[tuple[int, Any]]:
    for i, raw in enumerate(fh, start=1):
        if not raw.strip():
            continue
        try:
            yield i, json.loads(raw)
        except json.JSONDecodeError:
            yield i, None


def _iter_delimited(fh: io.TextIOBase, delimiter: str) -> Iterator[tuple[int, Any]]:
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(fh, delimiter=delimiter, quoting=quoting)
    try:
        header = next(reader)
    except StopIteration:
        return
    except csv.Error as e:
        raise DataError(f"cannot parse the header: {e}") from None
    header = [h.strip() for h in header]
    while True:
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error:
            yield reader.line_num, None
            continue
        if not cells or all(not c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            yield reader.line_num, None
            continue
        yield reader.line_num, dict(zip(header, cells))


def load_file(path: str | Path, cols: Columns | None = None, limit: int | None = None,
              label_values: dict[str, str] | None = None) -> LoadedData:
    path = Path(path).expanduser()
    cols = cols or Columns()
    if not path.exists():
        raise DataError(f"dataset file {path} does not exist")
    if path.is_dir():
        raise DataError(f"{path} is a directory, not a dataset file")
    suffix = _inner_suffix(path)
    stats = SkipStats()
    try:
        with _open_text(path) as fh:
            if suffix in (".jsonl", ".json", ".ndjson"):
                rows = _iter_jsonl(fh)
            elif suffix == ".csv":
                rows = _iter_delimited(fh, ",")
            elif suffix in (".tsv", ".txt"):
                rows = _iter_delimited(fh, "\t")
            else:
                raise DataError(f"unknown dataset file type {path.name!r}: use .jsonl, .csv or .tsv (optionally .gz)")
            examples = rows_to_examples(rows, cols, limit, stats, label_values)
    except (OSError, EOFError, gzip.BadGzipFile, UnicodeDecodeError) as e:
        raise DataError(f"cannot read {path}: {e}") from None
    if stats.read and not examples and stats.counts["malformed"] == stats.read:
        raise DataError(
            f"no row of {path} has premise/hypothesis/label columns; name them with --premise-col/--hypothesis-col/--label-col"
        )
    return LoadedData(examples, stats, {"type": "file", "path": str(path.resolve()), "format": suffix.lstrip(".")})


# -- hub datasets ---------------------------------------------------------------------------

HUB_SPLITS = {
    "mnli": ("nyu-mll/glue", "mnli", {"matched": "validation_matched", "validation_matched": "validation_matched",
                                      "mismatched": "validation_mismatched", "validation_mismatched": "validation_mismatched"},
             "validation_matched"),
    "snli": ("stanfordnlp/snli", None, {"validation": "validation", "test": "test"}, "validation"),
    "anli": ("facebook/anli", None, {"r1": "dev_r1", "r2": "dev_r2", "r3": "dev_r3", "dev_r1": "dev_r1",
                                     "dev_r2": "dev_r2", "dev_r3": "dev_r3", "all": "all"}, "all"),
}


def parse_hub_name(name: str) -> tuple[str, str | None]:
    """``mnli``, ``mnli:mismatched``, ``anli:r2`` -> (dataset, split or None)."""
    base, _, split = name.partition(":")
    return base.lower(), (split or None)


def load_hub(name: str, split: str | None = None, limit: int | None = None) -> LoadedData:
    base, inline_split = parse_hub_name(name)
    if base not in HUB_SPLITS:
        raise DataError(f"unknown dataset {name!r}: use one of {', '.join(HUB_DATASETS)}, 'sample', or a file path")
    repo, config, splits, default = HUB_SPLITS[base]
    want = split or inline_split or default
    if want not in splits:
        raise DataError(f"unknown split {want!r} for {base}: choose one of {', '.join(sorted(set(splits)))}")
    hub_splits = ["dev_r1", "dev_r2", "dev_r3"] if splits[want] == "all" else [splits[want]]
    try:
        import datasets
    except ImportError:  # pragma: no cover - datasets is a core dependency
        raise DataError("loading hub datasets needs the `datasets` package") from None
    stats = SkipStats()
    examples: list[Example] = []
    offset = 0
    for hs in hub_splits:
        try:
            ds = datasets.load_dataset(repo, config, split=hs) if config else datasets.load_dataset(repo, split=hs)
        except Exception as e:  # network, missing cache, ... -> one line
            msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise DataError(f"cannot load {repo} ({hs}) from the Hugging Face hub: {msg}") from None
        remaining = None if limit is None else limit - len(examples)
        if remaining is not None and remaining <= 0:
            break
        rows = ((offset + i + 1, dict(r, id=f"{hs}-{r.get('uid', r.get('idx', i))}")) for i, r in enumerate(ds))
        examples += rows_to_examples(rows, Columns(id="id"), remaining, stats)
        offset += len(ds)
    return LoadedData(examples, stats, {"type": "hub", "repo": repo, "config": config, "splits": hub_splits})


def load_examples(name_or_path: str = SAMPLE_NAME, split: str | None = None, limit: int | None = None,
                  cols: Columns | None = None, label_values: dict[str, str] | None = None) -> LoadedData:
    """Load a dataset by short name (``sample``, ``mnli[:mismatched]``, ``snli[:test]``, ``anli[:r1|r2|r3]``)
    or by file path."""
    if limit is not None and limit < 0:
        raise DataError("--limit must be positive")
    if name_or_path == SAMPLE_NAME:
        p = sample_path()
        if not p.exists():
            raise DataError(f"the embedded sample is missing from {p}; reinstall breaknli-fast")
        data = load_file(p, cols, limit)
        data.source = {"type": "embedded", "name": "snli-sample", "path": str(p)}
        return data
    base, _ = parse_hub_name(name_or_path)
    if base in HUB_SPLITS and not Path(name_or_path).exists():
        return load_hub(name_or_path, split, limit)
    return load_file(name_or_path, cols, limit, label_values)
