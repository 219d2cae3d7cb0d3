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
    assert c == {"no_gold_label": 2, "unknown_label": 1, "empty_text": 2, "malformed": 3}
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


def test_unknown_hub_split_is_a_clear_error():
    with pytest.raises(DataError, match="unknown split"):
        load_examples("mnli", split="train_x")
