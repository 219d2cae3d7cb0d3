"""SNLI training data for the mini models: reading, the deterministic caption-level dev split, its tuning and
evaluation slices, the shipped samples.

The held-out (dev) captions are split once more, by file order: the captions of the first
:data:`TUNING_PAIRS` held-out pairs are the **tuning slice** (mini-nli's checkpoint selection, the pairs
mini-t5's rounds were judged on), the other held-out captions the **evaluation slice**, which no training
or tuning step reads; it is the default dataset of ``breaknli-fast run``."""

from __future__ import annotations

import gzip
import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from breaknli_fast.data.labels import LABELS, dataset_label, is_missing_label
from breaknli_fast.data.normalize import normalize_text

DEV_MODULUS = 20  # caption ids with sha1 % 20 == 0 are held out (about 5 %)
TUNING_PAIRS = 2000  # the captions of the first 2,000 held-out pairs (file order) form the tuning slice

SNLI_CITATION = (
    "Samuel R. Bowman, Gabor Angeli, Christopher Potts, and Christopher D. Manning. 2015. "
    "A large annotated corpus for learning natural language inference. In Proceedings of the 2015 "
    "Conference on Empirical Methods in Natural Language Processing (EMNLP)."
)
SNLI_BIBTEX = """@inproceedings{bowman-etal-2015-large,
  title = {A large annotated corpus for learning natural language inference},
  author = {Bowman, Samuel R. and Angeli, Gabor and Potts, Christopher and Manning, Christopher D.},
  booktitle = {Proceedings of the 2015 Conference on Empirical Methods in Natural Language Processing},
  year = {2015},
  publisher = {Association for Computational Linguistics},
  pages = {632--642},
}"""


@dataclass(frozen=True)
class Pair:
    pair_id: str
    caption_id: str
    premise: str  # normalised
    hypothesis: str  # normalised
    label: str  # canonical


def caption_id(pair_id: str) -> str:
    """``3416050480.jpg#4r1n`` -> ``3416050480.jpg#4`` (the premise / caption the pair was written for)."""
    return pair_id.rsplit("r", 1)[0]


def is_dev(cap_id: str) -> bool:
    """The split rule: a caption is held out when int(sha1(caption_id)) % 20 == 0."""
    return int(hashlib.sha1(cap_id.encode("utf-8")).hexdigest(), 16) % DEV_MODULUS == 0


def _open(path: str | Path):
    path = Path(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def iter_rows(path: str | Path) -> Iterator[dict]:
    with _open(path) as fh:
        for line in fh:
            line = line.strip()
            if line:
                yield json.loads(line)


@dataclass
class SnliSplit:
    train: list[Pair]
    dev: list[Pair]
    rows_read: int
    no_gold: int
    unknown: int

    @property
    def tuning_captions(self) -> set[str]:
        """Captions of the first :data:`TUNING_PAIRS` held-out pairs in file order."""
        return {p.caption_id for p in self.dev[:TUNING_PAIRS]}

    @property
    def tuning(self) -> list[Pair]:
        """Held-out pairs of the tuning captions (checkpoint selection and every other choice made on dev)."""
        caps = self.tuning_captions
        return [p for p in self.dev if p.caption_id in caps]

    @property
    def evaluation(self) -> list[Pair]:
        """Held-out pairs of the other captions: read by no training or tuning step."""
        caps = self.tuning_captions
        return [p for p in self.dev if p.caption_id not in caps]

    def summary(self) -> dict:
        tuning, evaluation = self.tuning, self.evaluation
        return {
            "rows_read": self.rows_read,
            "skipped_no_gold_label": self.no_gold,
            "skipped_unknown_label": self.unknown,
            "train_pairs": len(self.train),
            "dev_pairs": len(self.dev),
            "train_captions": len({p.caption_id for p in self.train}),
            "dev_captions": len({p.caption_id for p in self.dev}),
            "train_label_counts": dict(Counter(p.label for p in self.train)),
            "dev_label_counts": dict(Counter(p.label for p in self.dev)),
            "tuning_pairs": len(tuning),
            "tuning_captions": len({p.caption_id for p in tuning}),
            "evaluation_pairs": len(evaluation),
            "evaluation_captions": len({p.caption_id for p in evaluation}),
        }


def load_split(path: str | Path) -> SnliSplit:
    """Read the SNLI JSONL(.gz) file, skip rows without a gold label, split by caption id (file order kept)."""
    train: list[Pair] = []
    dev: list[Pair] = []
    n = no_gold = unknown = 0
    for row in iter_rows(path):
        n += 1
        raw = row.get("label", row.get("gold_label"))
        if is_missing_label(raw):
            no_gold += 1
            continue
        lab = dataset_label(raw)
        if lab is None:
            unknown += 1
            continue
        pid = str(row.get("pairID", row.get("pair_id", "")))
        cap = caption_id(pid)
        prem = normalize_text(row.get("premise", row.get("sentence1", "")))
        hyp = normalize_text(row.get("hypothesis", row.get("sentence2", "")))
        if not prem or not hyp:
            unknown += 1
            continue
        pair = Pair(pid, cap, prem, hyp, lab)
        (dev if is_dev(cap) else train).append(pair)
    return SnliSplit(train, dev, n, no_gold, unknown)


def held_out_rows(path: str | Path) -> list[dict]:
    """Every gold-labelled held-out pair of ``path`` in file order, texts as in the file."""
    out = []
    for row in iter_rows(path):
        raw = row.get("label", row.get("gold_label"))
        if is_missing_label(raw) or dataset_label(raw) is None:
            continue
        pid = str(row.get("pairID", row.get("pair_id", "")))
        if not is_dev(caption_id(pid)):
            continue
        prem = row.get("premise", row.get("sentence1", ""))
        hyp = row.get("hypothesis", row.get("sentence2", ""))
        if not normalize_text(prem) or not normalize_text(hyp):  # load_split skips these too
            continue
        out.append({"pairID": pid, "premise": prem, "hypothesis": hyp, "label": dataset_label(raw)})
    return out


def slice_rows(path: str | Path, tuning_pairs: int = TUNING_PAIRS) -> tuple[list[dict], list[dict]]:
    """(evaluation slice, tuning slice) of the held-out pairs of ``path``: the tuning slice is every held-out pair
    whose caption is among those of the first ``tuning_pairs`` held-out pairs (file order); the evaluation slice
    is the rest. The same rule as :attr:`SnliSplit.tuning` / :attr:`SnliSplit.evaluation`."""
    rows = held_out_rows(path)
    caps = {caption_id(r["pairID"]) for r in rows[:tuning_pairs]}
    tuning = [r for r in rows if caption_id(r["pairID"]) in caps]
    evaluation = [r for r in rows if caption_id(r["pairID"]) not in caps]
    return evaluation, tuning


def _write_jsonl(path: Path, rows: list[dict]) -> None:
    with open(path, "w", encoding="utf-8") as fh:
        for r in rows:
            fh.write(json.dumps(r, ensure_ascii=False) + "\n")


def _describe(rows: list[dict]) -> str:
    counts = Counter(r["label"] for r in rows)
    caps = len({caption_id(r["pairID"]) for r in rows})
    return (f"{len(rows):,} pairs from {caps:,} premises (captions); labels: "
            + ", ".join(f"{lab} {counts.get(lab, 0):,}" for lab in LABELS))


SAMPLE_FILE, TUNING_FILE = "snli_sample.jsonl", "snli_tuning.jsonl"


def write_sample(data_path: str | Path, out_dir: str | Path, tuning_pairs: int = TUNING_PAIRS) -> Path:
    """Write the evaluation slice (``snli_sample.jsonl``, the default dataset), the tuning slice
    (``snli_tuning.jsonl``) and their ``DATA_CARD.md`` into ``out_dir``; returns the evaluation slice's path."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    evaluation, tuning = slice_rows(data_path, tuning_pairs)
    path = out_dir / SAMPLE_FILE
    _write_jsonl(path, evaluation)
    _write_jsonl(out_dir / TUNING_FILE, tuning)
    card = f"""# Embedded SNLI held-out pairs (`{SAMPLE_FILE}`, `{TUNING_FILE}`)

`{SAMPLE_FILE}` is the default dataset of `breaknli-fast run` (`--dataset sample`), so that the tool
runs offline: the **evaluation slice**, which no training or tuning step of the shipped mini models
read. `{TUNING_FILE}` (`--dataset sample-tuning`) is the **tuning slice**: mini-nli's checkpoint
selection used it, and so did every comparison made while the mini models' recipe was developed.

## Source

Stanford Natural Language Inference (SNLI) corpus 1.0, training split
(<https://nlp.stanford.edu/projects/snli/>), read from `{Path(data_path).name}`.

## Selection rule

1. Rows without a gold label (`label == "-"`) are skipped.
2. The *caption id* of a pair is its `pairID` without the trailing `r<digit><letter>`
   (`pairID.rsplit('r', 1)[0]`, e.g. `3416050480.jpg#4r1n` -> `3416050480.jpg#4`).
3. A pair is **held out** when `int(sha1(caption_id).hexdigest(), 16) % 20 == 0` (about 5 % of the
   captions, so no premise is both in training and held out). The shipped mini models
   (`mini-mlm`, `mini-nli`, `mini-t5`) were never trained on held-out pairs.
4. The **tuning slice** is every held-out pair whose caption is among the captions of the first
   {tuning_pairs:,} held-out pairs in file order; the **evaluation slice** is every other held-out
   pair. The two share no caption (premise); both keep file order.

Code: `breaknli_fast/mini/data.py` (`slice_rows`, `write_sample`); `tests/test_mini_models.py` checks
that the slices share no caption and that neither holds a training caption.

## Size and labels

- evaluation slice (`{SAMPLE_FILE}`): {_describe(evaluation)}
- tuning slice (`{TUNING_FILE}`): {_describe(tuning)}

## Fields and changes made

`pairID`, `premise`, `hypothesis`, `label`. Changes: the `label` field holds the canonical name
(`entailment` / `neutral` / `contradiction`); `annotator_labels` and the other SNLI fields are dropped;
texts are unchanged (the loader normalises them at read time: strip, end with `.`, `?` or `!`).

## License and attribution

SNLI is distributed under the Creative Commons Attribution-ShareAlike 4.0 International license
(CC BY-SA 4.0, <https://creativecommons.org/licenses/by-sa/4.0/>). These files are a derivative
(a selection, with the label field renamed as described above) and are shared under the same license.
The premises are Flickr30k image captions (Young et al. 2014).

Please cite:

> {SNLI_CITATION}

```bibtex
{SNLI_BIBTEX}
```
"""
    (out_dir / "DATA_CARD.md").write_text(card, encoding="utf-8")
    return path
