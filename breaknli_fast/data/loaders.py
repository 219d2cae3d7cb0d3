"""Dataset loaders: the embedded sample, local JSONL / CSV / TSV files, and hub datasets.

Every loader returns :class:`LoadedData`: valid examples (canonical labels, normalised texts)
plus :class:`SkipStats` counting each kind of skipped row with the first few line numbers; every
row read is either a valid example or a counted skip. A file that cannot be read at all, or has no
data rows, raises :class:`DataError` (one line, for the CLI).

Files are read as bytes and decoded line by line (UTF-8, a leading byte-order mark dropped), so a
row with bytes that are not UTF-8 is skipped as ``invalid_utf8`` with its own line number instead
of being read with replacement characters. Lines end at ``\n``, ``\r\n`` or ``\r``.
"""

from __future__ import annotations

import csv
import gzip
import itertools
import json
import zlib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import IO, Any, Iterable, Iterator

from breaknli_fast.data.hub import require_hub
from breaknli_fast.data.labels import dataset_label, is_missing_label
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.envinfo import package_relative
from breaknli_fast.errors import UserError

SAMPLE_NAME = "sample"  # the evaluation slice of the shipped held-out SNLI pairs (the default dataset)
TUNING_NAME = "sample-tuning"  # the tuning slice (mini-nli's checkpoint selection, the recipe's comparisons)
TAXINLI_NAME = "taxinli"
# TaxiNLI's 15 reasoning categories (0/1 columns of taxinli10k.tsv), in the paper's order
TAXINLI_CATEGORIES = ("lexical_linguistic", "syntactic_linguistic", "factivity_linguistic", "negation_logic",
                      "boolean_logic", "quantifier_logic", "conditional_logic", "comparative_logic",
                      "relational_reasoning", "spatial_reasoning", "temporal_reasoning", "causal_reasoning",
                      "coreference_reasoning", "world_knowledge", "taxonomic_knowledge")
HUB_DATASETS = ("mnli", "snli", "anli")
GENERATED_DATASETS = ("aenli", "kinship")  # name[:N], generated in memory (breaknli_fast.data.synthetic)
MAX_LINES_KEPT = 5
# csv's own limit on a field (131,072 characters) would make a row with a long text malformed; the
# loader raises it, process-wide, to this many characters.
MAX_FIELD_CHARS = 1 << 30

# Column name fallbacks: ours, then SNLI's own files.
PREMISE_KEYS = ("premise", "sentence1", "prem")
HYPOTHESIS_KEYS = ("hypothesis", "sentence2", "hyp")
LABEL_KEYS = ("label", "gold_label")
ID_KEYS = ("id", "pairID", "uid", "idx")

SKIP_REASONS = ("no_gold_label", "unknown_label", "empty_text", "malformed", "invalid_utf8")


class _InvalidUtf8:
    """The row of a line (JSONL) or record (CSV/TSV) whose bytes are not UTF-8."""

    def __repr__(self) -> str:
        return "INVALID_UTF8"


INVALID_UTF8 = _InvalidUtf8()


class DataError(UserError):
    """A dataset that cannot be read at all."""


@dataclass
class Example:
    id: str
    premise: str
    hypothesis: str
    label: str  # canonical
    line: int  # 1-based line / row number in the source (hub: row index + 1)
    meta: dict[str, Any] = field(default_factory=dict)  # the row's other columns (scalars): for --by breakdowns

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class SkipStats:
    counts: dict[str, int] = field(default_factory=lambda: {r: 0 for r in SKIP_REASONS})
    lines: dict[str, list[int]] = field(default_factory=lambda: {r: [] for r in SKIP_REASONS})
    read: int = 0
    # rows kept whose id repeats an earlier row's: renamed <id>#1, <id>#2, ... (resume keys on unique ids)
    renamed_ids: int = 0
    renamed_lines: list[int] = field(default_factory=list)

    def rename(self, line: int) -> None:
        self.renamed_ids += 1
        if len(self.renamed_lines) < MAX_LINES_KEPT:
            self.renamed_lines.append(line)

    def skip(self, reason: str, line: int) -> None:
        self.counts[reason] += 1
        if len(self.lines[reason]) < MAX_LINES_KEPT:
            self.lines[reason].append(line)

    @property
    def skipped(self) -> int:
        return sum(self.counts.values())

    def to_dict(self) -> dict[str, Any]:
        return {"read": self.read, "skipped": self.skipped, "counts": dict(self.counts), "first_lines": dict(self.lines),
                **({"renamed_ids": self.renamed_ids, "renamed_first_lines": list(self.renamed_lines)}
                   if self.renamed_ids else {})}

    def renamed_text(self) -> str:
        """One line on the rows whose repeated id was renamed ("" when none was)."""
        if not self.renamed_ids:
            return ""
        lines = ", ".join(map(str, self.renamed_lines)) + (", ..." if self.renamed_ids > len(self.renamed_lines) else "")
        return (f"{self.renamed_ids} row{'s' if self.renamed_ids > 1 else ''} repeat an earlier row's id and "
                f"{'are' if self.renamed_ids > 1 else 'is'} renamed <id>#1, <id>#2, ... (lines {lines})")


@dataclass
class LoadedData:
    examples: list[Example]
    skips: SkipStats
    source: dict[str, Any]
    # the examples kept (breaknli_fast.data.slicing.load_slice): {"how": "all"}, {"how": "first", "limit": N}
    # or {"how": "sample", "n": N, "seed": S, "of": the valid examples drawn from}
    slice: dict[str, Any] = field(default_factory=lambda: {"how": "all"})

    def __len__(self) -> int:
        return len(self.examples)


@dataclass
class Columns:
    premise: str | None = None
    hypothesis: str | None = None
    label: str | None = None
    id: str | None = None


def sample_path() -> Path:
    """The evaluation slice: held-out SNLI pairs no training or tuning step of the mini models read."""
    return Path(__file__).resolve().parent.parent / "assets" / "data" / "snli_sample.jsonl"


def tuning_path() -> Path:
    """The tuning slice: the held-out SNLI pairs mini-nli's checkpoints were selected on."""
    return sample_path().with_name("snli_tuning.jsonl")


def taxinli_path() -> Path:
    """TaxiNLI (Joshi et al., CoNLL 2020), shipped with its README and C-UDA licence beside it."""
    return Path(__file__).resolve().parent.parent / "assets" / "data" / "taxinli" / "taxinli10k.tsv.gz"


def _pick(row: dict[str, Any], explicit: str | None, keys: tuple[str, ...]) -> tuple[bool, Any]:
    key = _pick_key(row, explicit, keys)
    return (key is not None, row.get(key) if key is not None else None)


def _pick_key(row: dict[str, Any], explicit: str | None, keys: tuple[str, ...]) -> str | None:
    """The column a field is read from: the explicit one, else the first fallback present."""
    if explicit:
        return explicit if explicit in row else None
    return next((k for k in keys if k in row), None)


def _meta(row: dict[str, Any], used: set[str | None]) -> dict[str, Any]:
    """The row's other columns with scalar values (text, numbers, booleans), for breakdowns."""
    return {k: v for k, v in row.items()
            if k not in used and isinstance(k, str) and (v is None or isinstance(v, (str, int, float, bool)))}


def rows_to_examples(rows: Iterable[tuple[int, Any]], cols: Columns, limit: int | None, stats: SkipStats,
                     label_values: dict[str, str] | None = None) -> list[Example]:
    """Validate (line, row) pairs; rows that are not dicts count as malformed, :data:`INVALID_UTF8`
    rows and texts that are not valid Unicode (a JSON escape of a lone surrogate) as invalid_utf8."""
    out: list[Example] = []
    seen_ids: dict[str, int] = {}
    for line, row in rows:
        if limit is not None and len(out) >= limit:
            break
        stats.read += 1
        if row is INVALID_UTF8:
            stats.skip("invalid_utf8", line)
            continue
        if not isinstance(row, dict):
            stats.skip("malformed", line)
            continue
        okp, prem = _pick(row, cols.premise, PREMISE_KEYS)
        okh, hyp = _pick(row, cols.hypothesis, HYPOTHESIS_KEYS)
        okl, lab = _pick(row, cols.label, LABEL_KEYS)
        if not (okp and okh and okl):
            stats.skip("malformed", line)
            continue
        if cols.id and cols.id not in row:  # never line numbers in place of the ids asked for
            where = "there is no such column" if not out else f"line {line} has no such column"
            raise DataError(f"the id column {cols.id} (--id-col): {where} (its columns: {', '.join(map(str, row))})")
        _, rid = _pick(row, cols.id, ID_KEYS)
        if not all(_is_unicode(v) for v in (prem, hyp, lab, rid)):
            stats.skip("invalid_utf8", line)
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
        try:
            gold = dataset_label(lab)
        except ValueError:  # digits int() refuses: a superscript, or more than Python converts
            gold = None
        if gold is None:
            stats.skip("unknown_label", line)
            continue
        p, h = normalize_text(prem), normalize_text(hyp)
        if not p or not h:
            stats.skip("empty_text", line)
            continue
        eid = str(rid) if rid not in (None, "") else f"row-{line}"
        if eid in seen_ids:  # keep ids unique (resume keys on them), counted
            seen_ids[eid] += 1
            eid = f"{eid}#{seen_ids[eid]}"
            stats.rename(line)
        else:
            seen_ids[eid] = 0
        used = {_pick_key(row, c, keys) for c, keys in ((cols.premise, PREMISE_KEYS), (cols.hypothesis, HYPOTHESIS_KEYS),
                                                       (cols.label, LABEL_KEYS), (cols.id, ID_KEYS))}
        out.append(Example(eid, p, h, gold, line, _meta(row, used)))
    return out


def _is_unicode(value: Any) -> bool:
    """False for a string that UTF-8 cannot encode (a lone surrogate); True for anything else."""
    if not isinstance(value, str):
        return True
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _open_bytes(path: Path) -> IO[bytes]:
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


def _inner_suffix(path: Path) -> str:
    return Path(path.stem).suffix.lower() if path.suffix == ".gz" else path.suffix.lower()


def _lines(fh: IO[bytes]) -> Iterator[tuple[str, bool]]:
    """(text, valid) per line, ends kept: ``valid`` False where the bytes are not UTF-8, and then
    ``text`` has them as lone surrogates (``surrogateescape``), which no valid line decodes to."""
    first = True
    for chunk in fh:  # ends at b"\n"; splitlines also ends lines at a lone b"\r"
        for raw in chunk.splitlines(keepends=True):
            if first:
                raw, first = raw.removeprefix(b"\xef\xbb\xbf"), False
            try:
                yield raw.decode("utf-8"), True
            except UnicodeDecodeError:
                yield raw.decode("utf-8", errors="surrogateescape"), False


class _Counted:
    """Rows handed out by a file's row iterator (a file with none has no data rows)."""

    def __init__(self, rows: Iterator[tuple[int, Any]]):
        self.rows, self.n = rows, 0

    def __iter__(self) -> Iterator[tuple[int, Any]]:
        for row in self.rows:
            self.n += 1
            yield row


def _iter_jsonl(lines: Iterator[tuple[str, bool]]) -> Iterator[tuple[int, Any]]:
    for i, (text, valid) in enumerate(lines, start=1):
        if not text.strip():
            continue
        if not valid:
            yield i, INVALID_UTF8
            continue
        try:
            yield i, json.loads(text)
        except (ValueError, RecursionError):  # bad JSON, an int of more digits than Python converts, deep nesting
            yield i, None


def _iter_delimited(lines: Iterator[tuple[str, bool]], delimiter: str, path: Path) -> Iterator[tuple[int, Any]]:
    invalid: set[int] = set()  # line numbers of lines that are not UTF-8

    def texts() -> Iterator[str]:
        for i, (text, valid) in enumerate(lines, start=1):
            if not valid:
                invalid.add(i)
            yield text

    if csv.field_size_limit() < MAX_FIELD_CHARS:
        csv.field_size_limit(MAX_FIELD_CHARS)
    quoting = csv.QUOTE_NONE if delimiter == "\t" else csv.QUOTE_MINIMAL
    reader = csv.reader(texts(), delimiter=delimiter, quoting=quoting)
    header: list[str] = []
    while not header:  # blank lines before the header are skipped
        try:
            cells = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            raise DataError(f"cannot parse the header of {path}: {e}") from None
        if invalid:
            raise DataError(f"the header of {path} (line {reader.line_num}) is not valid UTF-8")
        if cells and any(c.strip() for c in cells):
            header = [h.strip() for h in cells]
    last = reader.line_num  # the last line of the previous record
    while True:
        try:
            rec: list[str] | None = next(reader)
        except StopIteration:
            return
        except csv.Error:
            rec = None
        first, last = last + 1, reader.line_num
        if any(i in invalid for i in range(first, last + 1)):
            yield last, INVALID_UTF8
            continue
        if rec is None:  # csv could not parse the record
            yield last, None
            continue
        if not rec or all(not c.strip() for c in rec):
            continue
        if len(rec) != len(header):
            yield last, None
            continue
        yield last, dict(zip(header, rec))


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
    if suffix not in (".jsonl", ".json", ".ndjson", ".csv", ".tsv", ".txt"):
        raise DataError(f"unknown dataset file type {path.name!r}: use .jsonl, .csv or .tsv (optionally .gz)")
    try:
        with _open_bytes(path) as fh:
            if suffix in (".jsonl", ".json", ".ndjson"):
                rows = _Counted(_iter_jsonl(_lines(fh)))
            else:
                rows = _Counted(_iter_delimited(_lines(fh), "," if suffix == ".csv" else "\t", path))
            examples = rows_to_examples(rows, cols, limit, stats, label_values)
    except (OSError, EOFError, zlib.error) as e:  # gzip.BadGzipFile is an OSError
        raise DataError(f"cannot read {path}: {' '.join(str(e).split())}") from None
    if not rows.n:
        raise DataError(f"{path} has no data rows")
    if stats.read and not examples and stats.counts["malformed"] == stats.read:
        raise DataError(f"no row of {path} has premise/hypothesis/label columns: {_found(path, suffix, cols)}")
    return LoadedData(examples, stats, {"type": "file", "path": str(path.resolve()), "format": suffix.lstrip(".")})


def _found(path: Path, suffix: str, cols: Columns) -> str:
    """What the first rows of a file that gave no example hold, and what to do about it (one clause)."""
    hint = "name them with --premise-col/--hypothesis-col/--label-col"
    try:
        with _open_bytes(path) as fh:
            lines = [t for t, _ in itertools.islice(_lines(fh), 200) if t.strip()][:20]
    except (OSError, EOFError, zlib.error):
        return hint
    if not lines:
        return hint
    if suffix in (".jsonl", ".json", ".ndjson"):
        first = lines[0].strip()
        try:
            row = json.loads(first)
        except (ValueError, RecursionError):
            if first.startswith("["):
                return "it holds a JSON array; write each object on a line of its own (JSONL)"
            return f"its first line is not JSON ({first[:40]!r}); write one JSON object per line"
        if isinstance(row, list) and row and all(isinstance(x, dict) for x in row):
            return "it holds a JSON array of objects; write each object on a line of its own (JSONL)"
        if isinstance(row, list):
            return "its lines are JSON arrays; write one JSON object per line (JSONL), with keys"
        if not isinstance(row, dict):
            return f"its lines are JSON {type(row).__name__}s, not objects; write one JSON object per line"
        keys = [str(k) for k in row]
    else:
        delimiter = "," if suffix == ".csv" else "\t"
        rows = list(csv.reader(lines, delimiter=delimiter))
        keys = [h.strip() for h in rows[0]]
        if len(keys) == 1:
            return (f"its header is one column ({keys[0][:40]!r}): a {suffix} file is read as "
                    f"{'comma' if delimiter == ',' else 'tab'}-separated")
        widths = sorted({len(r) for r in rows[1:] if r})
        if widths and len(keys) not in widths:
            return (f"its rows have {'/'.join(map(str, widths))} fields where its header has {len(keys)} "
                    f"({', '.join(keys[:8])})")
    for flag, name in (("--premise-col", cols.premise), ("--hypothesis-col", cols.hypothesis),
                       ("--label-col", cols.label)):
        if name and name not in keys:
            return f"{flag} {name}: there is no such column (its columns: {', '.join(keys[:12])})"
    return f"its columns are {', '.join(keys[:12])}; {hint}"


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
        raise DataError(f"unknown dataset {name!r}: use one of {', '.join(HUB_DATASETS)}, 'sample', 'sample-tuning', or a file path")
    repo, config, splits, default = HUB_SPLITS[base]
    want = split or inline_split or default
    if want not in splits:
        raise DataError(f"unknown split {want!r} for {base}: choose one of {', '.join(sorted(set(splits)))}")
    hub_splits = ["dev_r1", "dev_r2", "dev_r3"] if splits[want] == "all" else [splits[want]]
    require_hub(f"the dataset {repo}")  # no network: one line now, not half a minute of retries later
    try:
        import datasets
    except ImportError:  # the hub extra
        raise DataError(f"loading the hub dataset {base} needs the datasets package: pip install 'breaknli-fast[hub]'") from None
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
                  cols: Columns | None = None, label_values: dict[str, str] | None = None, seed: int = 0) -> LoadedData:
    """Load a dataset by short name (``sample`` (the evaluation slice), ``sample-tuning``, ``taxinli``, ``mnli[:mismatched]``, ``snli[:test]``,
    ``anli[:r1|r2|r3]``, ``aenli[:N]`` and ``kinship[:N]`` generated from ``seed``) or by file path. Every
    example keeps its row's other columns in ``meta``."""
    if limit is not None and limit < 0:
        raise DataError(f"limit (--limit) cannot be negative (got {limit})")
    base, _ = parse_hub_name(name_or_path)
    if split is not None and (base not in HUB_SPLITS or Path(name_or_path).exists()):
        raise DataError(f"--split {split}: only the hub datasets ({', '.join(HUB_SPLITS)}) have splits, not "
                        f"{name_or_path!r}")
    if name_or_path in (SAMPLE_NAME, TUNING_NAME):
        p = sample_path() if name_or_path == SAMPLE_NAME else tuning_path()
        if not p.exists():
            raise DataError(f"the embedded SNLI file is missing from {p}; reinstall breaknli-fast")
        data = load_file(p, cols, limit)
        data.source = {"type": "embedded", "name": "snli-sample" if name_or_path == SAMPLE_NAME else "snli-tuning",
                       "path": package_relative(p)}
        return data
    if name_or_path == TAXINLI_NAME:
        p = taxinli_path()
        if not p.exists():
            raise DataError(f"the shipped TaxiNLI file is missing from {p}; reinstall breaknli-fast")
        data = load_file(p, cols or Columns(premise="prem", hypothesis="hyp", label="label", id="pairID"), limit)
        data.source = {"type": "embedded", "name": "taxinli", "path": package_relative(p),
                       "breakdown": list(TAXINLI_CATEGORIES)}
        return data
    if name_or_path.partition(":")[0] in GENERATED_DATASETS and not Path(name_or_path).exists():
        from breaknli_fast.data.synthetic import SyntheticError, generate_named

        try:
            rows, source = generate_named(name_or_path, seed=seed, limit=limit)
        except SyntheticError as e:
            raise DataError(str(e)) from None
        stats = SkipStats()
        return LoadedData(rows_to_examples(enumerate(rows, start=1), Columns(id="id"), limit, stats), stats, source)
    if base in HUB_SPLITS and not Path(name_or_path).exists():
        return load_hub(name_or_path, split, limit)
    return load_file(name_or_path, cols, limit, label_values)
