"""Property-based tests (hypothesis): the dataset loaders on random bytes, random columns, mixed
encodings and long lines, and the breakage metrics on random verdict tables.

Loaders: a file either loads, with every row read counted as a valid example or a skip, or raises
DataError with a one-line message; nothing else escapes. Metrics: every rate is a percentage, every
CI holds its point estimate, and Overall pools the examples (and candidates) of the label
cells. Each test draws a bounded number of examples without a deadline, so the file runs in seconds.
"""

from __future__ import annotations

import gzip
import json
import math
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.loaders import DataError, load_file
from breaknli_fast.probes.breaknli.metrics import RATE_KEYS, mode_label_rates as breakdown, rates
from breaknli_fast.stats import unpaired_diff
from breaknli_fast.probes.breaknli.verdicts import RULES, verdict

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SUFFIXES = (".jsonl", ".tsv", ".csv", ".jsonl.gz", ".tsv.gz", ".csv.gz", ".txt", ".ndjson")
COLUMNS = ("premise", "hypothesis", "label", "sentence1", "sentence2", "gold_label", "id", "pairID", "note", "")
LABEL_VALUES = ("entailment", "neutral", "contradiction", "E", "c", "-", "", "-1", "0", "1", "2", "7", "maybe", "²")
EOLS = (b"\n", b"\r\n", b"\r")

# Any text (no surrogates: a str with one cannot be written to a file), texts that latin-1 can
# encode (so a line can be written in either encoding), and values a JSON row may hold.
any_text = st.text(max_size=40)
latin1_text = st.text(alphabet=st.characters(max_codepoint=0xFF, exclude_categories=("Cs",)), max_size=40)
json_value = st.one_of(st.none(), st.booleans(), st.integers(-3, 3), st.floats(allow_nan=True), any_text,
                       st.sampled_from(LABEL_VALUES), st.lists(st.integers(), max_size=2))
# a gzip member whose deflate data is damaged (zlib's "invalid block type")
CORRUPT_GZIP = bytes(b ^ 0x55 if i == 10 else b for i, b in enumerate(gzip.compress(b'{"premise": "a"}\n' * 50)))
NO_ROWS, NO_COLUMNS = "has no data rows", "has premise/hypothesis/label columns"


def _load(data: bytes, suffix: str, compress: bool = True):
    """load_file on ``data`` written as a ``suffix`` file (gzip-compressed for .gz unless not
    ``compress``): (LoadedData, None), or (None, the DataError's one-line message); any other
    exception fails the test. An undecodable line is an invalid_utf8 skip, never a reason for the
    missing-columns error."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / f"data{suffix}"
        p.write_bytes(gzip.compress(data) if compress and suffix.endswith(".gz") else data)
        try:
            d = load_file(p)
        except DataError as e:
            msg = str(e)
            assert msg and "\n" not in msg
            if NO_COLUMNS in msg and (compress or not suffix.endswith(".gz")):
                assert not _undecodable(data), msg
            return None, msg
    s = d.skips
    assert s.read == len(d.examples) + s.skipped  # every row read is an example or a counted skip
    assert s.skipped == sum(s.counts.values()) and all(v >= 0 for v in s.counts.values())
    assert all(len(s.lines[k]) == min(v, 5) for k, v in s.counts.items())
    assert len({e.id for e in d.examples}) == len(d.examples)
    for e in d.examples:
        assert e.label in LABELS and e.premise[-1] in ".?!" and e.hypothesis[-1] in ".?!"
        e.premise.encode("utf-8"), e.hypothesis.encode("utf-8"), e.id.encode("utf-8")  # valid Unicode only
    return d, None


def _lines(data: bytes) -> list[bytes]:
    """The file's lines as the loader numbers them (ends at \\n, \\r\\n or \\r)."""
    return data.splitlines()


def _blank(line: bytes, first: bool) -> bool:
    """A line without a row: UTF-8 whitespace only (after the byte-order mark, on the first line)."""
    try:
        return not line.decode("utf-8").removeprefix("\ufeff" if first else "").strip()
    except UnicodeDecodeError:
        return False


def _undecodable(data: bytes) -> list[int]:
    out = []
    for i, line in enumerate(_lines(data), start=1):
        try:
            line.decode("utf-8")
        except UnicodeDecodeError:
            out.append(i)
    return out


@FUZZ
@given(data=st.binary(max_size=3000), suffix=st.sampled_from(SUFFIXES), compress=st.booleans())
@example(data=b"", suffix=".tsv", compress=True)
@example(data=b"\x1f\x8b\x08\x00garbage", suffix=".jsonl.gz", compress=False)
@example(data=CORRUPT_GZIP, suffix=".jsonl.gz", compress=False)
@example(data=b"[" * 50_000, suffix=".jsonl", compress=True)
@example(data=b'{"premise": "a", "hypothesis": "b", "label": ' + b"9" * 5000 + b"}\n", suffix=".jsonl", compress=True)
@example(data=b'premise,hypothesis,label\n"a\n\xff",b,c\n', suffix=".csv", compress=True)
def test_random_bytes_never_escape_as_anything_but_data_error(data, suffix, compress):
    """Random bytes, and gzip members that are not gzip (compress=False): a load or a DataError."""
    d, err = _load(data, suffix, compress)
    if suffix.startswith((".jsonl", ".ndjson")) and (compress or not suffix.endswith(".gz")):
        assert (err is not None and NO_ROWS in err) == all(_blank(x, i == 0) for i, x in enumerate(_lines(data)))


@st.composite
def jsonl_files(draw):
    """Lines of JSON objects with random keys and values, each written in UTF-8 or latin-1, some
    blank, some broken, with random line ends."""
    out, kinds = [], []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(("row", "row", "row", "blank", "broken", "array")))
        if kind == "row":
            keys = draw(st.lists(st.sampled_from(COLUMNS), max_size=6, unique=True))
            row = {k: draw(json_value) for k in keys}
            for k in draw(st.lists(st.sampled_from(("premise", "hypothesis", "label")), max_size=3, unique=True)):
                row[k] = draw(latin1_text if k != "label" else st.sampled_from(LABEL_VALUES))
            text = json.dumps(row, ensure_ascii=False)
        else:
            text = {"blank": draw(st.sampled_from(("", "  ", "\t"))), "broken": '{"premise": "a',
                    "array": "[1, 2]"}[kind]
        try:
            line = text.encode(draw(st.sampled_from(("utf-8", "latin-1"))))
        except UnicodeEncodeError:
            line = text.encode("utf-8")
        out.append(line)
        kinds.append(kind)
    eol = draw(st.sampled_from(EOLS))
    return eol.join(out) + (eol if out and draw(st.booleans()) else b""), kinds


@FUZZ
@given(f=jsonl_files(), gz=st.booleans())
def test_jsonl_mixed_encodings_are_counted_row_by_row(f, gz):
    data, kinds = f
    d, err = _load(data, ".jsonl.gz" if gz else ".jsonl")
    rows = sum(k != "blank" for k in kinds)
    bad = _undecodable(data)
    if err:  # no rows at all, or rows that are all malformed (then none is undecodable: see _load)
        assert (NO_ROWS in err) == (rows == 0), err
        return
    assert d.skips.read == rows
    assert d.skips.counts["invalid_utf8"] == len(bad) and d.skips.lines["invalid_utf8"] == bad[:5]
    assert not {e.line for e in d.examples} & set(bad)


@st.composite
def delimited_files(draw):
    """A header of random known and unknown columns, then rows of cells (no delimiter, quote or line
    break inside, so one row is one line), each row written in UTF-8 or latin-1; some rows are short."""
    sep = draw(st.sampled_from(("\t", ",")))
    header = draw(st.lists(st.sampled_from(COLUMNS[:-1]), min_size=1, max_size=6, unique=True))
    cell = st.text(alphabet=st.characters(max_codepoint=0xFF, exclude_categories=("Cs", "Cc", "Zl", "Zp"),
                                          exclude_characters='\t,"\x85'), max_size=30)
    lines = [sep.join(header).encode("utf-8")]
    for _ in range(draw(st.integers(0, 12))):
        n = len(header) if draw(st.integers(0, 4)) else draw(st.integers(1, len(header) + 2))
        cells = [draw(st.sampled_from(LABEL_VALUES)) if header[i % len(header)] in ("label", "gold_label")
                 else draw(cell) for i in range(n)]
        lines.append(sep.join(cells).encode(draw(st.sampled_from(("utf-8", "latin-1")))))
    eol = draw(st.sampled_from(EOLS))
    return eol.join(lines) + eol, (".tsv" if sep == "\t" else ".csv")


@FUZZ
@given(f=delimited_files())
def test_delimited_mixed_encodings_are_counted_row_by_row(f):
    data, suffix = f
    sep = "\t" if suffix == ".tsv" else ","
    rows = []  # the data lines the loader reads: undecodable ones, and those with a non-blank cell
    for i, line in enumerate(_lines(data)[1:], start=2):
        try:
            if any(c.strip() for c in line.decode("utf-8").split(sep)):
                rows.append(i)
        except UnicodeDecodeError:
            rows.append(i)
    bad = _undecodable(data)
    d, err = _load(data, suffix)
    if err:
        assert (NO_ROWS in err) == (not rows), err
        return
    assert d.skips.read == len(rows)
    assert d.skips.counts["invalid_utf8"] == len(bad) and d.skips.lines["invalid_utf8"] == bad[:5]
    assert {e.line for e in d.examples} <= set(rows) - set(bad)


@settings(max_examples=5, deadline=None)
@given(n=st.integers(100_000, 300_000), suffix=st.sampled_from((".jsonl", ".tsv", ".csv")), latin1=st.booleans())
def test_very_long_lines(n, suffix, latin1):
    """A premise of hundreds of thousands of characters (beyond csv's default field limit): one
    valid example in UTF-8, one invalid_utf8 skip in latin-1."""
    long = ("caf\u00e9 " * (n // 5 + 1))[:n]
    if suffix == ".jsonl":
        text = json.dumps({"premise": long, "hypothesis": "A b.", "label": "neutral"}, ensure_ascii=False) + "\n"
    else:
        sep = "\t" if suffix == ".tsv" else ","
        text = sep.join(("premise", "hypothesis", "label")) + "\n" + sep.join((long, "A b.", "neutral")) + "\n"
    d, err = _load(text.encode("latin-1" if latin1 else "utf-8"), suffix)
    assert err is None and d.skips.read == 1
    if latin1:
        assert d.skips.counts["invalid_utf8"] == 1
    else:
        assert len(d.examples) == 1 and d.examples[0].premise.startswith(long.strip())


# -- metrics ---------------------------------------------------------------------------------

CASES = sorted(RULES)  # (mode, ŷ) pairs the verdict table defines
E_NC = ("entailment", "neutral", "contradiction")


@st.composite
def records(draw):
    """A run's records, built like tests/test_verdicts_metrics.py: evaluated examples with the
    verdict of S predictions, mixed with records of the other statuses (which carry no verdict)."""
    out = []
    for i in range(draw(st.integers(0, 60))):
        mode, yhat = draw(st.sampled_from(CASES))
        status = draw(st.sampled_from(("evaluated", "evaluated", "evaluated", "incorrect", "too_few_unique",
                                       "too_few_on_target")))
        r = {"id": f"r{i}", "mode": mode, "yhat": yhat, "status": status}
        if status == "evaluated":
            preds = draw(st.lists(st.sampled_from(E_NC), min_size=1, max_size=6))
            r["verdict"] = verdict(mode, yhat, preds).to_dict()
        out.append(r)
    return out


def _in_ci(point, ci, eps=1e-9):
    return ci is not None and ci[0] - eps <= point <= ci[1] + eps


def _check_rates(r):
    if r["n"] == 0:
        assert all(r[k] is None and r[k + "_ci"] is None for k in RATE_KEYS)
        return
    for k in RATE_KEYS:
        lo, hi = r[k + "_ci"]
        assert 0.0 <= r[k] <= 100.0 and 0.0 <= lo <= hi <= 100.0, (k, r)
        assert _in_ci(r[k], r[k + "_ci"]), (k, r[k], r[k + "_ci"])


@FUZZ
@given(recs=records())
def test_breakdown_rates_cis_and_pooled_overall(recs):
    b = breakdown(recs)
    evaluated = [r for r in recs if r["status"] == "evaluated"]
    assert set(b) == {r["mode"] for r in evaluated}
    for mode, table in b.items():
        rows = [r for r in evaluated if r["mode"] == mode]
        cells = {lab: table[lab] for lab in LABELS if lab in table}
        assert set(table) == set(cells) | {"overall"} and set(cells) == {r["yhat"] for r in rows}
        for r in table.values():
            _check_rates(r)
        overall = table["overall"]
        assert overall["n"] == len(rows) == sum(c["n"] for c in cells.values())
        assert overall["n_candidates"] == sum(c["n_candidates"] for c in cells.values())
        # Overall pools examples: each label cell weighs by its examples (its candidates for the
        # per-candidate rates), not a mean of the label rates
        for k, weight in (("inequality", "n"), ("relaxed", "n"), ("cand_inequality", "n_candidates"),
                          ("cand_relaxed", "n_candidates")):
            pooled = sum(c[weight] * c[k] for c in cells.values()) / sum(c[weight] for c in cells.values())
            assert math.isclose(overall[k], pooled, rel_tol=1e-9, abs_tol=1e-9), (k, overall[k], pooled)
    assert breakdown(recs) == b  # reproducible


@FUZZ
@given(verdicts=st.lists(st.builds(lambda c, p: verdict(*c, p).to_dict(), st.sampled_from(CASES),
                                   st.lists(st.sampled_from(E_NC), min_size=1, max_size=6)), max_size=80))
def test_rates_are_percentages_with_cis_around_them(verdicts):
    r = rates(verdicts)
    assert r["n"] == len(verdicts) and r["n_candidates"] == sum(v["n_candidates"] for v in verdicts)
    _check_rates(r)
    if verdicts:  # every strictly non-compliant prediction is a relaxed one too
        assert r["inequality"] <= r["relaxed"] and r["cand_inequality"] <= r["cand_relaxed"]


@FUZZ
@given(a=st.lists(st.booleans(), max_size=60), b=st.lists(st.booleans(), max_size=60))
def test_diff_ci_is_a_percentage_difference_with_a_ci_around_it(a, b):
    d = unpaired_diff(a, b)
    if not a or not b:
        assert d == {"diff": None, "ci": None}
        return
    assert -100.0 <= d["diff"] <= 100.0 and -100.0 <= d["ci"][0] <= d["ci"][1] <= 100.0
    assert math.isclose(d["diff"], 100 * (sum(a) / len(a) - sum(b) / len(b)), abs_tol=1e-9)
    assert _in_ci(d["diff"], d["ci"]), d

