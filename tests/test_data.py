import gzip
import json

import pytest

from breaknli_fast.data.loaders import Columns, DataError, load_examples, load_file


def _write_jsonl(path, rows):
    with open(path, "w") as f:
        for r in rows:
            f.write(r if isinstance(r, str) else json.dumps(r))
            f.write("\n")


def test_jsonl_with_every_kind_of_broken_row_gives_counted_skips(tmp_path):
    p = tmp_path / "d.jsonl"
    _write_jsonl(p, [
        {"premise": "A man sleeps", "hypothesis": "A man rests", "label": "entailment"},  # 1 ok
        {"premise": "A man sleeps.", "hypothesis": "A man runs.", "label": 2},  # 2 ok (hub int -> contradiction)
        {"premise": "A man sleeps.", "hypothesis": "A man is awake.", "label": -1},  # 3 no gold
        {"premise": "A man sleeps.", "hypothesis": "A man is awake.", "label": "-"},  # 4 no gold
        {"premise": "A man sleeps.", "hypothesis": "A man is awake.", "label": "maybe"},  # 5 unknown label
        {"premise": "   ", "hypothesis": "A man is awake.", "label": "neutral"},  # 6 empty
        {"premise": "A man sleeps.", "label": "neutral"},  # 7 missing column
        '{"premise": "A man', # 8 malformed JSON
        "[1, 2, 3]",  # 9 not an object
        {"premise": "A man sleeps.", "hypothesis": None, "label": "neutral"},  # 10 empty (null)
        {"premise": "A man sleeps.", "hypothesis": "A man is awake.", "label": "CONTRADICTION"},  # 11 ok
    ])
    d = load_file(p)
    assert [e.line for e in d.examples] == [1, 2, 11]
    assert [e.label for e in d.examples] == ["entailment", "contradiction", "contradiction"]
    assert d.examples[0].premise == "A man sleeps." and d.examples[0].hypothesis == "A man rests."
    c = d.skips.counts
    assert c == {"no_gold_label": 2, "unknown_label": 1, "empty_text": 2, "malformed": 3, "invalid_utf8": 0}
    assert d.skips.lines["malformed"] == [7, 8, 9] and d.skips.lines["no_gold_label"] == [3, 4]
    assert d.skips.read == 11 and d.skips.skipped == 8


def test_snli_tsv_field_names_and_limit(tiny_tsv):
    d = load_file(tiny_tsv, limit=7)
    assert len(d.examples) == 7 and d.examples[0].id == "p0"
    assert {e.label for e in load_file(tiny_tsv).examples} == {"entailment", "neutral", "contradiction"}


def test_csv_with_custom_columns_and_quotes(tmp_path):
    p = tmp_path / "d.csv"
    p.write_text('s1,s2,gold\n"A man, tall, sleeps",A man sleeps,0\nA dog,"A cat",1\nonly,two\n')
    d = load_file(p, Columns(premise="s1", hypothesis="s2", label="gold"))
    assert [(e.premise, e.label) for e in d.examples] == [("A man, tall, sleeps.", "entailment"), ("A dog.", "neutral")]
    assert d.skips.counts["malformed"] == 1 and d.skips.lines["malformed"] == [4]


def test_gzipped_jsonl(tmp_path):
    p = tmp_path / "d.jsonl.gz"
    with gzip.open(p, "wt") as f:
        f.write(json.dumps({"sentence1": "A b.", "sentence2": "C d.", "gold_label": "neutral", "pairID": "x"}) + "\n")
    d = load_examples(str(p))
    assert len(d.examples) == 1 and d.examples[0].id == "x"


def test_duplicate_ids_are_made_unique(tmp_path):
    p = tmp_path / "d.jsonl"
    row = {"id": "a", "premise": "A b.", "hypothesis": "C d.", "label": "neutral"}
    _write_jsonl(p, [row, row])
    assert [e.id for e in load_file(p).examples] == ["a", "a#1"]


@pytest.mark.parametrize("setup,match", [
    (lambda d: d / "missing.jsonl", "does not exist"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "x.parquet").write_text("x") and d / "x.parquet", "unknown dataset file type"),
    (lambda d: (d / "bad.jsonl.gz").write_bytes(b"not gzip") and d / "bad.jsonl.gz", "cannot read"),
    (lambda d: (d / "cols.csv").write_text("a,b\n1,2\n") and d / "cols.csv", "premise/hypothesis/label"),
])
def test_unreadable_files_give_one_line_errors(tmp_path, setup, match):
    with pytest.raises(DataError, match=match) as e:
        load_examples(str(setup(tmp_path)))
    assert "\n" not in str(e.value)


GOOD = b'{"premise": "A man sleeps.", "hypothesis": "A man rests.", "label": "entailment"}'


@pytest.mark.parametrize("name", ["d.jsonl", "d.jsonl.gz"])
def test_jsonl_lines_that_are_not_utf8_are_counted_skips(tmp_path, name):
    """Invalid UTF-8 bytes skip their line as invalid_utf8 (not replacement characters, not the
    missing-columns error), with the right line numbers; a JSON escape of a lone surrogate is no text
    either; a leading byte-order mark is dropped; every row read is a valid example or a skip."""
    lines = [
        b"\xef\xbb\xbf" + GOOD,  # 1 ok, after a byte-order mark
        b'{"premise": "Caf\xe9 au lait.", "hypothesis": "A drink.", "label": "neutral"}',  # 2 latin-1
        b"",  # 3 blank, not a row
        GOOD.replace(b"rests", b"r\xc3"),  # 4 truncated UTF-8 sequence
        b'{"premise": "A \\ud800 b.", "hypothesis": "A b.", "label": "neutral"}',  # 5 lone surrogate escape
        GOOD.replace(b"rests", b"caf\xc3\xa9"),  # 6 ok (valid UTF-8)
    ]
    raw = b"\r\n".join(lines) + b"\n"
    p = tmp_path / name
    p.write_bytes(gzip.compress(raw) if name.endswith(".gz") else raw)
    d = load_file(p)
    assert [e.line for e in d.examples] == [1, 6] and d.examples[1].hypothesis == "A man caf\u00e9."
    assert d.skips.counts["invalid_utf8"] == 3 and d.skips.lines["invalid_utf8"] == [2, 4, 5]
    assert d.skips.read == 5 == len(d.examples) + d.skips.skipped
    only_bad = tmp_path / ("bad" + name)
    bad = b"\xff\xfe\n" + GOOD.replace(b"man", b"m\xe4n") + b"\n"
    only_bad.write_bytes(gzip.compress(bad) if name.endswith(".gz") else bad)
    d = load_file(only_bad)  # all rows skipped, counted: no DataError about columns
    assert not d.examples and d.skips.counts["invalid_utf8"] == d.skips.read == 2


@pytest.mark.parametrize("sep", ["\t", ","])
def test_delimited_rows_that_are_not_utf8_are_counted_skips(tmp_path, sep):
    s = sep.encode()
    rows = [s.join(r) for r in ([b"gold_label", b"sentence1", b"sentence2", b"pairID"],
                                [b"neutral", b"A caf\xe9 sleeps.", b"A man rests.", b"p1"],  # 2 latin-1
                                [b"neutral", b"A man sleeps.", b"A man rests.", b"p\xff"],  # 3 bad id cell
                                [b"entailment", b"A man sleeps.", b"A man rests.", b"p3"],  # 4 ok
                                [b"entailment", "A caf\u00e9.".encode(), b"A man rests.", b"p4"])]  # 5 ok
    p = tmp_path / ("d.tsv" if sep == "\t" else "d.csv")
    p.write_bytes(b"\n".join(rows) + b"\n")
    d = load_file(p)
    assert [(e.line, e.id) for e in d.examples] == [(4, "p3"), (5, "p4")] and d.examples[1].premise == "A caf\u00e9."
    assert d.skips.counts["invalid_utf8"] == 2 and d.skips.lines["invalid_utf8"] == [2, 3]
    assert d.skips.read == 4 == len(d.examples) + d.skips.skipped
    assert all("\ufffd" not in e.premise + e.hypothesis for e in d.examples)


def test_csv_record_over_several_lines_is_judged_whole(tmp_path):
    p = tmp_path / "d.csv"
    p.write_bytes(b'premise,hypothesis,label\n"two\nlines \xff",A b.,e\n"two\nlines",A b.,e\nA b.,C d.,c\n')
    d = load_file(p)
    assert [e.line for e in d.examples] == [5, 6] and d.skips.lines["invalid_utf8"] == [3]
    bad_header = tmp_path / "h.csv"
    bad_header.write_bytes(b"prem\xefse,hypothesis,label\nA b.,C d.,c\n")
    with pytest.raises(DataError, match="header .* not valid UTF-8") as e:
        load_file(bad_header)
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name,content", [
    ("empty.jsonl", b""), ("empty.tsv", b""), ("blank.jsonl", b"\n  \r\n\n"), ("blank.csv", b"\n\n"),
    ("header.tsv", b"gold_label\tsentence1\tsentence2\tpairID\n"), ("header.csv", b"premise,hypothesis,label"),
    ("header-blanks.csv", b"\npremise,hypothesis,label\n\n\n"), ("empty.jsonl.gz", gzip.compress(b"")),
])
def test_files_without_data_rows_are_one_line_errors(tmp_path, name, content):
    p = tmp_path / name
    p.write_bytes(content)
    with pytest.raises(DataError) as e:
        load_examples(str(p))
    assert str(e.value) == f"{p} has no data rows"


def test_limit_zero_reads_nothing_and_is_no_error(tiny_tsv):
    d = load_file(tiny_tsv, limit=0)
    assert d.examples == [] and d.skips.read == 0


def test_blank_lines_before_the_header_and_old_mac_line_ends(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_bytes(b"\xef\xbb\xbf\n\r\ngold_label\tsentence1\tsentence2\tpairID\rneutral\tA b.\tC d.\tq1\r\n"
                  b"\ncontradiction\tA b.\tE f.\tq2\r")
    d = load_file(p)
    assert [(e.line, e.id, e.label) for e in d.examples] == [(4, "q1", "neutral"), (6, "q2", "contradiction")]


def test_label_digits_that_are_no_integer_are_unknown_labels(tmp_path):
    p = tmp_path / "d.tsv"
    p.write_text("label\tpremise\thypothesis\n\u00b2\tA b.\tC d.\n" + "1" * 5000 + "\tA b.\tC d.\n1\tA b.\tC d.\n")
    d = load_file(p)
    assert [e.label for e in d.examples] == ["neutral"] and d.skips.lines["unknown_label"] == [2, 3]


def test_unknown_hub_split_is_a_clear_error():
    with pytest.raises(DataError, match="unknown split"):
        load_examples("mnli", split="train_x")
