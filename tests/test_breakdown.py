"""TaxiNLI built in and the --by breakdown: counts equal those of the TSV itself, bad columns are one-line errors,
empty categories are shown with n = 0, and the breakdown works for any probe through the entry point."""

from __future__ import annotations

import csv
import gzip
import io
import json

import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.data.loaders import TAXINLI_CATEGORIES, DataError, load_examples, taxinli_path
from breaknli_fast.study.breakdown import breakdown, column_groups, default_columns

runner = CliRunner()


def _tsv_rows(n: int) -> list[dict[str, str]]:
    text = gzip.decompress(taxinli_path().read_bytes()).decode("utf-8")
    return list(csv.DictReader(io.StringIO(text), delimiter="\t", quoting=csv.QUOTE_NONE))[:n]


def test_taxinli_ships_with_its_attribution_and_licence():
    folder = taxinli_path().parent
    assert (folder / "README.md").read_text().count("Joshi") >= 1
    assert "Computational Use of Data Agreement" in (folder / "LICENSE-C-UDA.md").read_text()
    data = load_examples("taxinli")
    assert len(data.examples) == 10071 and data.skips.skipped == 0
    labels = {lab: sum(ex.label == lab for ex in data.examples) for lab in ("entailment", "neutral", "contradiction")}
    assert labels == {"entailment": 3495, "neutral": 3201, "contradiction": 3375}  # the README's counts
    ex = data.examples[0]
    assert {"annotated_label", "genre", *TAXINLI_CATEGORIES} <= set(ex.meta) and ex.id == "53438c"
    assert default_columns(data) == list(TAXINLI_CATEGORIES)


def test_category_counts_equal_the_tsv():
    data = load_examples("taxinli", limit=800)
    rows = _tsv_rows(800)
    for cat in TAXINLI_CATEGORIES:
        g = column_groups(data, cat)
        ones = next(ids for label, value, ids in g["groups"] if value == "1")
        zeros = next(ids for label, value, ids in g["groups"] if value == "0")
        assert len(ones) == sum(r[cat] == "1" for r in rows), cat
        assert len(ones) + len(zeros) == 800
    genre = column_groups(data, "genre")
    assert genre["kind"] == "categorical"
    assert {v: len(ids) for _, v, ids in genre["groups"]} == {g: sum(r["genre"] == g for r in rows)
                                                               for g in {r["genre"] for r in rows}}


class _Counting:
    """A probe headline that only counts (the breakdown's accounting, without models)."""

    def headline(self, records, examples):
        return {"rates": {"share": {"n": len(examples), "rate": None, "ci": None}}, "counts": {"records": len(records)}}


def test_a_category_with_no_example_is_shown_with_n_zero(tmp_path):
    src = tmp_path / "cats.tsv"
    src.write_text("premise\thypothesis\tlabel\tnegation\tnever\n"
                   "A man sleeps.\tA man rests.\tentailment\t1\t0\n"
                   "A dog runs.\tA cat runs.\tcontradiction\t0\t0\n")
    data = load_examples(str(src))
    bd = breakdown(_Counting(), [{"id": ex.id} for ex in data.examples], data, ["negation", "never"])
    never = {g["value"]: g for g in bd["never"]["groups"]}
    assert never["1"]["examples"] == 0 and never["0"]["examples"] == 2 and never["1"]["small"] == ["share"]
    assert bd["negation"]["groups"][0]["counts"] == {"records": 1}


@pytest.mark.parametrize("content,by,match", [
    ("premise\thypothesis\tlabel\nA.\tB.\tneutral\n", "negation_logic", "--by negation_logic: the dataset has no column"),
    ("premise\thypothesis\tlabel\tgenre\nA.\tB.\tneutral\tfiction\n", "negation_logic", "(its other columns: genre)"),
])
def test_a_missing_column_is_one_line(tmp_path, content, by, match):
    src = tmp_path / "x.tsv"
    src.write_text(content)
    r = runner.invoke(app, ["run", "-d", str(src), "--by", by, "--out", str(tmp_path / "run"), "--engine", "torch"])
    assert r.exit_code == 2 and "Traceback" not in r.output
    assert match in " ".join(r.output.split())
    assert not (tmp_path / "run" / "config.json").exists()  # refused before any model loads


def test_non_binary_values_make_a_column_categorical_and_ids_are_refused(tmp_path):
    src = tmp_path / "x.tsv"
    src.write_text("premise\thypothesis\tlabel\tneg\n" + "".join(f"P{i}.\tH{i}.\tneutral\t{i % 3}\n" for i in range(9)))
    data = load_examples(str(src))
    g = column_groups(data, "neg")
    assert g["kind"] == "categorical" and [v for _, v, _ in g["groups"]] == ["0", "1", "2"]
    src2 = tmp_path / "y.tsv"
    src2.write_text("premise\thypothesis\tlabel\tuid2\n" + "".join(f"P{i}.\tH{i}.\tneutral\tu{i}\n" for i in range(60)))
    with pytest.raises(DataError, match="distinct values"):
        column_groups(load_examples(str(src2)), "uid2")


def test_breakdown_through_run_on_taxinli(tmp_path):
    r = runner.invoke(app, ["run", "-d", "taxinli", "--limit", "40", "--engine", "torch", "--mode", "entailed",
                            "--k", "4", "--u", "2", "--s", "1", "--max-new-tokens", "8", "--by", "genre",
                            "--out", str(tmp_path / "run")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert list(rep["breakdown"]) == ["genre"]  # --by replaces the dataset's own default
    groups = rep["breakdown"]["genre"]["groups"]
    assert sum(g["examples"] for g in groups) == 40
    acc = [g["rates"]["accuracy (p, h)"] for g in groups]
    assert all(c["n"] == g["examples"] for c, g in zip(acc, groups))  # every example is classified once
    assert "## Breakdown by column" in (tmp_path / "run" / "report.md").read_text()
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return
    assert (tmp_path / "run" / "breakdown.png").stat().st_size > 1000


def test_accuracy_probe_per_category_on_taxinli(tmp_path):
    r = runner.invoke(app, ["run", "--probe", "accuracy", "-d", "taxinli", "--limit", "300", "--engine", "torch",
                            "--out", str(tmp_path / "acc")])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "acc" / "report.json").read_text())
    rows = _tsv_rows(300)
    assert rep["accuracy"]["n"] == 300 and sum(sum(v.values()) for v in rep["confusion"].values()) == 300
    assert list(rep["breakdown"]) == list(TAXINLI_CATEGORIES)
    for cat in TAXINLI_CATEGORIES:
        g = {x["value"]: x for x in rep["breakdown"][cat]["groups"]}
        assert g["1"]["examples"] == sum(r[cat] == "1" for r in rows)
        assert g["1"]["rates"]["accuracy (p, h)"]["n"] == g["1"]["examples"]
    assert "accuracy on (p, h)" in r.output


def test_a_stray_value_in_a_0_1_column_is_counted_and_left_out(tmp_path):
    src = tmp_path / "x.tsv"
    src.write_text("premise\thypothesis\tlabel\tnegation_logic\n"
                   + "".join(f"P{i}.\tH{i}.\tneutral\t{2 if i == 7 else i % 2}\n" for i in range(20)))
    g = column_groups(load_examples(str(src)), "negation_logic")
    assert g["kind"] == "category" and g["non_binary"] == 1
    assert sum(len(ids) for _, _, ids in g["groups"]) == 19
