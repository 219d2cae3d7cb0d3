"""The data slice of a run: its gold-label counts and warnings (TaxiNLI's first 300 rows hold no neutral example),
the seeded stratified draw (--sample N, --sample-seed S), and the slice in a run's identity."""

import json
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.data.loaders import DataError
from breaknli_fast.data.slicing import allocate, describe, draw_sample, load_slice
from breaknli_fast.study import run_study
from breaknli_fast.study.rundir import RunDirError

runner = CliRunner()


def test_the_first_300_taxinli_rows_hold_no_neutral_and_warn():
    data = load_slice("taxinli", limit=300)
    info = describe(data.slice, data.examples)
    assert info["labels"] == {"entailment": 148, "neutral": 0, "contradiction": 152}
    assert info["how"] == "first" and info["examples"] == 300
    assert len(info["warnings"]) == 1 and "no neutral" in info["warnings"][0] and "--sample" in info["warnings"][0]
    # the first 1,000 hold some neutrals, too few: very skewed
    info = describe(*(lambda d: (d.slice, d.examples))(load_slice("taxinli", limit=1000)))
    assert info["labels"]["neutral"] == 143 and "very skewed" in info["warnings"][0]
    # the embedded sample is balanced: no warning
    assert describe(*(lambda d: (d.slice, d.examples))(load_slice("sample", limit=300)))["warnings"] == []


def test_sample_is_stratified_reproducible_and_in_file_order():
    every = load_slice("taxinli").examples
    a = load_slice("taxinli", sample=300, sample_seed=7)
    b = load_slice("taxinli", sample=300, sample_seed=7)
    c = load_slice("taxinli", sample=300, sample_seed=8)
    ids = [ex.id for ex in a.examples]
    assert ids == [ex.id for ex in b.examples] and ids != [ex.id for ex in c.examples]
    assert len(set(ids)) == 300
    order = {ex.id: i for i, ex in enumerate(every)}
    assert [order[i] for i in ids] == sorted(order[i] for i in ids)  # file order kept
    info = describe(a.slice, a.examples)
    # TaxiNLI's 3,495 E / 3,201 N / 3,375 C of 10,071: each label its share of 300 (largest remainder)
    assert info["labels"] == {"entailment": 104, "neutral": 95, "contradiction": 101} and not info["warnings"]
    assert a.slice == {"how": "sample", "n": 300, "seed": 7, "of": 10071}
    assert load_slice("taxinli", sample=300, seed=7).slice["seed"] == 7  # the draw's seed defaults to the run's
    # the draw depends on the examples and the seed alone: the same ids when drawn again from the list
    assert [ex.id for ex in draw_sample(every, 300, 7)] == ids


def test_allocation_and_draw_on_edge_cases():
    assert allocate({"entailment": 1, "neutral": 1, "contradiction": 1}, 2) == {"entailment": 1, "neutral": 1,
                                                                               "contradiction": 0}
    assert allocate({"entailment": 5, "neutral": 0, "contradiction": 5}, 10) == {"entailment": 5, "neutral": 0,
                                                                                "contradiction": 5}
    assert sum(allocate({"entailment": 3333, "neutral": 3333, "contradiction": 3334}, 1).values()) == 1
    exs = [SimpleNamespace(id=str(i), label=("entailment", "contradiction")[i % 2]) for i in range(10)]
    assert [e.id for e in draw_sample(exs, 10, 0)] == [e.id for e in exs]
    with pytest.raises(DataError, match="only 10 valid examples"):
        draw_sample(exs, 11, 0)
    with pytest.raises(DataError, match="give one of them"):
        load_slice("sample", limit=10, sample=10)


def test_a_run_directory_refuses_another_slice(tiny_roberta, tiny_tsv, tmp_path):
    common = dict(dataset=str(tiny_tsv), classifier=tiny_roberta, engine="torch", out=tmp_path / "run")
    first = run_study("accuracy", limit=20, **common)
    assert first.report["slice"]["how"] == "first" and sum(first.report["slice"]["labels"].values()) == 20
    with pytest.raises(RunDirError, match="sample"):
        run_study("accuracy", sample=20, **common)
    common["out"] = tmp_path / "drawn"
    drawn = run_study("accuracy", sample=20, sample_seed=1, **common)
    cfg = json.loads((tmp_path / "drawn" / "config.json").read_text())
    assert cfg["identity"]["sample"] == {"n": 20, "seed": 1} and cfg["dataset"]["slice"]["how"] == "sample"
    assert "## Data slice" in (tmp_path / "drawn" / "report.md").read_text()
    again = run_study("accuracy", sample=20, sample_seed=1, **common)  # the same slice: resumes
    assert again.records == drawn.records
    with pytest.raises(RunDirError, match="sample"):
        run_study("accuracy", sample=20, sample_seed=2, **common)


def test_the_console_shows_the_slice_and_its_warning(tmp_path):
    r = runner.invoke(app, ["run", "--probe", "accuracy", "-d", "taxinli", "--limit", "300", "--engine", "torch",
                            "--out", str(tmp_path / "t")], terminal_width=200)
    assert r.exit_code == 0, r.output
    assert "gold labels E 148 / N 0 / C 152" in r.output and "holds no neutral example" in r.output
    rep = json.loads((tmp_path / "t" / "report.json").read_text())
    assert rep["slice"]["labels"]["neutral"] == 0 and rep["slice"]["warnings"]
    r = runner.invoke(app, ["run", "--probe", "accuracy", "-d", "taxinli", "--sample", "30", "--limit", "30",
                            "--out", str(tmp_path / "u")])
    assert r.exit_code == 2 and "error:" in r.output and not (tmp_path / "u").exists()
    r = runner.invoke(app, ["run", "-h"], terminal_width=200)
    assert "--sample" in r.output and "--sample-seed" in r.output


def test_bench_reports_its_slice(tiny_roberta, tmp_path):
    fast = ["--probe", "accuracy", "-c", tiny_roberta, "-e", "torch:fp32", "--warmup", "0", "--min-iterations", "1",
            "--min-seconds", "0", "--invariance-pairs", "4", "--no-plot"]
    r = runner.invoke(app, ["bench", *fast, "-d", "taxinli", "--limit", "20", "--out", str(tmp_path / "a")],
                      terminal_width=200)
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "a" / "bench.json").read_text())
    assert d["data"]["slice"]["labels"] == {"entailment": 5, "neutral": 0, "contradiction": 15}
    assert "data slice: first 20 valid examples" in r.output
    assert any("holds no neutral" in n for n in d["notes"])
    assert "gold labels E 5 / N 0 / C 15" in (tmp_path / "a" / "bench.md").read_text()
    r = runner.invoke(app, ["bench", *fast, "-d", "taxinli", "--sample", "20", "--sample-seed", "3", "--out",
                            str(tmp_path / "b")], terminal_width=200)
    assert r.exit_code == 0, r.output
    d = json.loads((tmp_path / "b" / "bench.json").read_text())
    assert d["data"]["slice"]["how"] == "sample" and d["data"]["slice"]["seed"] == 3 and d["data"]["examples"] == 20
    drawn = load_slice("taxinli", sample=20, sample_seed=3)
    assert d["data"]["slice"]["labels"] == describe(drawn.slice, drawn.examples)["labels"]
