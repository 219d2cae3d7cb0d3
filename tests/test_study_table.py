"""The study over classifiers × datasets (study.grid), the comparison table (study.compare) and report.html
(study.html), on tiny random-weight models: one study run once for the module, then what is read from it."""

from __future__ import annotations

import csv
import html
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tiny_models as testing
from breaknli_fast.cli import app
from breaknli_fast.engines.base import Decoding
from breaknli_fast.study.loading import EngineConfig
from breaknli_fast.probes.breaknli import BreakNLIConfig
from breaknli_fast.probes.breaknli.probe import verdict_code
from breaknli_fast.study import run_study
from breaknli_fast.study.compare import CompareError, compare, load_runs, records_digest
from breaknli_fast.errors import UserError
from breaknli_fast.study.grid import run_grid

runner = CliRunner()
LIMIT = 30
CLI_SETTINGS = ["--k", "6", "--u", "3", "--s", "1", "--one-direction", "--top-p", "1.0", "--top-k", "0", "--max-new-tokens", "10",
                "--chunk-size", "4", "--seed", "0", "--engine", "torch", "--threads", "1", "--limit", str(LIMIT),
                "--by", "genre"]
OUTPUTS = ("table.md", "table.csv", "table.tex", "table.png", "report.html")


def _cfg() -> BreakNLIConfig:
    # small K, U, S and one direction: tiny random models leave examples in every verdict
    return BreakNLIConfig(k=6, u=3, s=1, bidirectional=False, decoding=Decoding(top_p=1.0, top_k=0, max_new_tokens=10),
                          chunk_size=4)


def _write_tsv(path: Path, n: int, seed: int) -> str:
    with open(path, "w") as f:
        f.write("gold_label\tsentence1\tsentence2\tpairID\tgenre\n")
        for i, (p, h, lab) in enumerate(testing.pairs(n, seed=seed)):
            f.write(f"{lab}\t{p}\t{h}\tx{seed}-{i}\t{('fiction', 'travel', 'news')[i % 3 if i % 5 else 0]}\n")
    return str(path)


@pytest.fixture(scope="module")
def datasets(tmp_path_factory) -> list[str]:
    d = tmp_path_factory.mktemp("grid-data")
    return [_write_tsv(d / "alpha.tsv", 40, 1), _write_tsv(d / "beta.tsv", 40, 2)]


@pytest.fixture(scope="module")
def other_roberta(tiny_dir) -> str:
    """A second classifier: RoBERTa with other random weights (labels that vary with the input)."""
    return str(testing.make_tiny_classifier(tiny_dir / "roberta-b", "roberta", seed=1, init_std=1.0))


@pytest.fixture(scope="module")
def study(tmp_path_factory, tiny_t5, tiny_roberta, other_roberta, datasets):
    out = tmp_path_factory.mktemp("grid") / "study"
    res = run_grid("breaknli", _cfg(), classifiers=[tiny_roberta, other_roberta], datasets=datasets, limit=LIMIT,
                   generator=tiny_t5, engine=EngineConfig(engine="torch", threads=1), out=out, by="genre")
    return res


def _records(path: Path) -> list[dict]:
    return [json.loads(x) for x in (path / "samples.jsonl").read_text().splitlines()]


def test_grid_writes_one_run_directory_per_cell_and_the_table(study, tiny_roberta, other_roberta):
    d = study.study_dir
    cells = json.loads((d / "study.json").read_text())["cells"]
    assert [(c["dataset"].endswith(n), c["classifier"]) for c, n in zip(cells, ("alpha.tsv",) * 2 + ("beta.tsv",) * 2)] \
        == [(True, tiny_roberta), (True, other_roberta)] * 2
    for c in cells:
        for name in ("config.json", "samples.jsonl", "report.json", "report.md", "report.html"):
            assert (d / c["dir"] / name).exists(), (c["dir"], name)
    for name in OUTPUTS:
        assert (d / name).stat().st_size > 0, name
    # every number of the table is the cell's report.json, in BreakNLI's layout
    runs = load_runs([d])
    comp = compare(runs)
    assert comp.models == ["roberta", "roberta-b"] and comp.datasets == ["alpha.tsv", "beta.tsv"]
    assert [r[1:] for r in comp.rows[:7]] == [
        ("Contradictive generation", "Entailment"), ("Contradictive generation", "Contradiction"),
        ("Contradictive generation", "Overall"), ("Entailed generation", "Entailment"),
        ("Entailed generation", "Neutral"), ("Entailed generation", "Contradiction"), ("Entailed generation", "Overall")]
    rows = list(csv.DictReader(io.StringIO((d / "table.csv").read_text())))
    assert len(rows) == 4 * 7
    names = {"Entailment": "entailment", "Neutral": "neutral", "Contradiction": "contradiction", "Overall": "overall"}
    for row in rows:
        run = next(r for r in runs if r.model == row["model"] and r.dataset == row["dataset"])
        rep = run.report
        assert float(row["accuracy"]) == pytest.approx(rep["funnel"]["accuracy_ph"], abs=1e-4)
        mode = row["generation"].split()[0].lower()
        cell = rep["metrics"].get(mode, {}).get(names[row["ŷ = M(p, h)"]])
        if not cell:
            assert row["inequality"] == "" and row["n"] == "0"
            continue
        assert int(row["n"]) == cell["n"]
        for k in ("inequality", "relaxed"):
            assert float(row[k]) == pytest.approx(cell[k], abs=1e-4)
            assert [float(row[f"{k}_ci_low"]), float(row[f"{k}_ci_high"])] == pytest.approx(cell[f"{k}_ci"], abs=1e-4)
    md = (d / "table.md").read_text()
    acc = runs[0].report["funnel"]["accuracy_ph"]
    assert f"| roberta (alpha.tsv {acc:.2f} %, beta.tsv " in md
    tex = (d / "table.tex").read_text()
    assert tex.count("{") == tex.count("}") and "\\toprule" in tex and "\\bottomrule" in tex


def test_candidates_are_generated_once_per_dataset_and_reused(study):
    """The generate step does not depend on M: the second classifier takes the candidates of the examples the
    first one also got right from the study's cache, and generates only the others."""
    by_ds: dict[str, list] = {}
    for cell, res in study.cells:
        by_ds.setdefault(cell.dataset, []).append((cell, res))
    files = sorted((study.study_dir / "shared").glob("*.jsonl"))
    assert len(files) == 2
    for (c1, r1), (c2, r2) in by_ds.values():
        need1 = {(r["mode"], r["id"]) for r in r1.records if r["status"] != "incorrect"}
        need2 = {(r["mode"], r["id"]) for r in r2.records if r["status"] != "incorrect"}
        assert r1.shared["reused"] == 0 and r1.shared["added"] == len(need1)
        assert r2.shared["reused"] == len(need1 & need2) and r2.shared["added"] == len(need2 - need1)
        cache = Path(r1.shared["path"])
        assert cache == Path(r2.shared["path"])
        entries = [json.loads(x) for x in cache.read_text().splitlines()][1:]  # after the header line
        keys = [e["key"] for e in entries]
        assert len(keys) == len(set(keys)) == len(need1 | need2)  # each example's candidates generated once
        by_key = {e["key"]: e["generated"] for e in entries}
        for r in r1.records + r2.records:
            if r["status"] != "incorrect":
                assert r["generated"] == by_key[f"{r['mode']}\t{r['id']}"]


def test_a_cell_holds_the_records_of_the_same_run_made_alone(study, tiny_t5, other_roberta, datasets, tmp_path):
    cell, res = study.cells[1]
    assert cell.classifier == other_roberta
    alone = run_study("breaknli", _cfg(), dataset=datasets[0], limit=LIMIT, classifier=other_roberta, generator=tiny_t5,
                      engine=EngineConfig(engine="torch", threads=1), out=tmp_path / "alone", by="genre", html=False)
    assert _records(tmp_path / "alone") == _records(study.study_dir / cell.dir)
    assert alone.report["metrics"] == res.report["metrics"]


def test_report_on_the_study_gives_the_same_files(study, tmp_path):
    d = study.study_dir
    r = runner.invoke(app, ["report", str(d), "--html", "--out", str(tmp_path / "a")])
    assert r.exit_code == 0, r.output
    cells = [str(d / c["dir"]) for c in json.loads((d / "study.json").read_text())["cells"]]
    r = runner.invoke(app, ["report", *cells, "--html", "--out", str(tmp_path / "b")])
    assert r.exit_code == 0, r.output
    assert "Overall" in r.output and "roberta" in r.output
    for name in OUTPUTS:
        assert (tmp_path / "a" / name).read_bytes() == (d / name).read_bytes(), name
        assert (tmp_path / "b" / name).read_bytes() == (d / name).read_bytes(), name
    # one cell alone: the run's own report.html
    r = runner.invoke(app, ["report", cells[0], "--html", "--out", str(tmp_path / "c")])
    assert r.exit_code == 0, r.output
    assert (tmp_path / "c" / "report.html").read_bytes() == (Path(cells[0]) / "report.html").read_bytes()
    for twice in ([cells[0], cells[0]], [str(d), cells[0]]):  # one run twice: one line, not one column twice
        r = runner.invoke(app, ["report", *twice, "--out", str(tmp_path / "d")])
        assert r.exit_code == 2 and "is given twice" in r.output and not (tmp_path / "d").exists(), r.output


def _copy(src: Path, dst: Path, requested: str | None = None, **identity_changes) -> Path:
    shutil.copytree(src, dst)
    cfg = json.loads((dst / "config.json").read_text())
    if requested:
        cfg["engine"]["requested"] = requested
    for dotted, value in identity_changes.items():
        obj = cfg["identity"]
        *path, last = dotted.split("__")
        for p in path:
            obj = obj[p]
        obj[last] = value
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_report_refuses_runs_that_do_not_measure_the_same_thing(study, tmp_path):
    d = study.study_dir
    a, b = (d / study.cells[0][0].dir), (d / study.cells[1][0].dir)
    cases = [
        ([a, _copy(b, tmp_path / "k", loop__k=99)], "the setting loop.k differs"),
        ([a, _copy(b, tmp_path / "eng", engine="ort")], "the setting engine differs"),
        ([a, _copy(b, tmp_path / "lim", limit=10)], "for dataset alpha.tsv, limit differs"),
        ([a, _copy(a, tmp_path / "twice")], "are both roberta on alpha.tsv"),
        ([a, _copy(b, tmp_path / "lm", label_map={"LABEL_0": "entailment"}), d / study.cells[3][0].dir],
         "for classifier roberta-b, the setting label_map differs"),
    ]
    for dirs, msg in cases:
        r = runner.invoke(app, ["report", *map(str, dirs), "--out", str(tmp_path / "out")])
        assert r.exit_code == 2 and msg in r.output, (msg, r.output)
        assert "Traceback" not in r.output
    # --engine auto at fp32 picks ort or torch per model (the reference's results either way): not refused, named
    comp = compare(load_runs([_copy(a, tmp_path / "auto-a", requested="auto"),
                              _copy(b, tmp_path / "auto-b", requested="auto", engine="ort")]))
    assert "ort: roberta-b on alpha.tsv" in comp.settings[0] and "torch: roberta on alpha.tsv" in comp.settings[0]
    with pytest.raises(CompareError, match="the setting engine differs"):
        compare(load_runs([_copy(a, tmp_path / "auto-c", requested="auto", precision="int8"),
                           _copy(b, tmp_path / "auto-d", requested="auto", precision="int8", engine="ort")]))
    # the same data under another name is fine; other examples under the same name are refused
    recs = _records(b)
    (tmp_path / "other").mkdir()
    shutil.copytree(b, tmp_path / "other" / "b")
    (tmp_path / "other" / "b" / "samples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs[:-1]))
    with pytest.raises(CompareError, match="hold different examples"):
        compare(load_runs([a, tmp_path / "other" / "b"]))
    r = runner.invoke(app, ["report", str(tmp_path / "nothing"), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "is not a directory" in r.output
    unfinished = _copy(a, tmp_path / "unfinished")
    (unfinished / "report.json").unlink()
    r = runner.invoke(app, ["report", str(unfinished), "--out", str(tmp_path / "out")])
    assert r.exit_code == 2 and "has not finished" in r.output


def _payload(html_text: str) -> dict:
    m = re.search(r'<script type="application/json" id="data">(.*?)</script>', html_text, re.S)
    return json.loads(m.group(1))


def test_report_html_is_self_contained_and_holds_every_record(study):
    text = (study.study_dir / "report.html").read_text()
    assert not re.search(r'(src|href)\s*=\s*["\']?(https?:)?//', text, re.I)
    assert "<link" not in text and "@import" not in text and "url(" not in text
    assert text.count("data:image/png;base64,") >= 1
    data = _payload(text)
    assert [r["model"] for r in data["runs"]] == ["roberta", "roberta-b", "roberta", "roberta-b"]
    cats = set(data["cats"])
    assert {"genre=fiction", "genre=travel", "genre=news"} == cats
    for i, (cell, res) in enumerate(study.cells):
        mine = [e for e in data["examples"] if e["r"] == i]
        recs = _records(study.study_dir / cell.dir)
        assert sorted((e["g"], e["id"]) for e in mine) == sorted((r["mode"], r["id"]) for r in recs)
        by_key = {(r["mode"], r["id"]): r for r in recs}
        for e in mine:
            rec = by_key[(e["g"], e["id"])]
            assert e["v"] == verdict_code(rec) and e["y"] == rec["yhat"]
            view = e["view"]
            assert view["premise"] == rec["premise"] and view["hypothesis"] == rec["hypothesis"]
            if rec.get("generated"):
                raw = next(s for s in view["sections"] if s["kind"] == "list")
                assert raw["items"] == rec["generated"]
            if rec["status"] == "evaluated":
                kept = next(s for s in view["sections"] if s["title"].startswith("the U ="))
                assert [row[0] for row in kept["rows"]] == rec["candidates"]
                ev = [row for row in kept["rows"] if row[4] != "–"]
                assert [row[4] for row in ev] == rec["predictions"]
                assert [row[5] for row in ev] == [round(p["entailment"], 4) for p in rec["eval_probs"]]
                assert view["why"]


def _chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        path = shutil.which(name)
        if path:
            return path
    return None


def _dom(page: Path, fragment: str, tmp_path: Path) -> str:
    browser = _chromium()
    r = subprocess.run([browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                        f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.resolve().as_uri() + fragment],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


def _rows(dom: str) -> list[dict[str, str]]:
    return [dict(re.findall(r'data-(\w+)="([^"]*)"', m.group(1)))
            for m in re.finditer(r'<tr class="ex[^"]*"([^>]*)>', dom)]


@pytest.mark.skipif(_chromium() is None, reason="Chromium is not installed (apt-get install chromium): the example "
                                                  "browser is tested in a real browser only where there is one")
def test_example_browser_filters_in_chromium(study, tmp_path):
    """Headless Chromium loads report.html with filters in the address: the rows it draws are exactly the records
    of samples.jsonl that pass them, and an opened row shows that example's candidates."""
    page = study.study_dir / "report.html"
    recs = {i: _records(study.study_dir / cell.dir) for i, (cell, _) in enumerate(study.cells)}
    # the most frequent (mode, verdict) of the evaluated examples of the second dataset
    counts: dict = {}
    for i in (2, 3):
        for r in recs[i]:
            if r["status"] == "evaluated":
                counts[(r["mode"], verdict_code(r))] = counts.get((r["mode"], verdict_code(r)), 0) + 1
    (mode, verdict), _ = max(counts.items(), key=lambda kv: (kv[1], kv[0]))
    dom = _dom(page, f"#dataset=beta.tsv&mode={mode}&verdict={verdict}", tmp_path)
    got = sorted((int(r["run"]), r["group"], r["id"]) for r in _rows(dom))
    want = sorted((i, r["mode"], r["id"]) for i in (2, 3) for r in recs[i]
                  if r["mode"] == mode and verdict_code(r) == verdict)
    assert got == want and want
    assert f"{len(want)} of " in dom
    # a model, a category column and ŷ, then the first row opened: its K raw candidates are on the page
    genre = {}
    for path in (study.cells[0][0].dataset, study.cells[2][0].dataset):
        for line in Path(path).read_text().splitlines()[1:]:
            cols = line.split("\t")
            genre[cols[3]] = cols[4]
    # the ŷ most often given to fiction examples by the first model (the tiny models' random draws decide which)
    yhats: dict = {}
    for i in (0, 2):
        for r in recs[i]:
            if genre.get(r["id"]) == "fiction":
                yhats[r["yhat"]] = yhats.get(r["yhat"], 0) + 1
    yhat = max(sorted(yhats), key=lambda y: yhats[y])
    dom = _dom(page, f"#model=roberta&cat=genre%3Dfiction&y={yhat}&open=0", tmp_path)
    rows = _rows(dom)
    want = [(i, r["mode"], r["id"]) for i in (0, 2) for r in recs[i] if r["yhat"] == yhat
            and genre.get(r["id"]) == "fiction"]
    assert sorted((int(r["run"]), r["group"], r["id"]) for r in rows) == sorted(want) and want
    first = rows[0]
    rec = next(r for r in recs[int(first["run"])] if r["id"] == first["id"] and r["mode"] == first["group"])
    detail = dom.split('class="detail"', 1)[1]
    for cand in rec.get("generated") or [rec["premise"]]:
        assert cand.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;") in detail


def test_study_cli_resumes_after_kill_9_with_the_same_records(study, tiny_t5, tiny_roberta, other_roberta, datasets,
                                                              tmp_path):
    """``run -c A,B -d X,Y`` in a real process killed with SIGKILL inside its first cell, then the same command:
    every cell holds the records of the uninterrupted study (the module's), and ``report`` on the resumed study
    writes its files again byte for byte."""
    out = tmp_path / "killed"
    cmd = [sys.executable, "-m", "breaknli_fast.cli", "run", "-g", tiny_t5, "-c", f"{tiny_roberta},{other_roberta}",
           "-d", ",".join(datasets), "--out", str(out), *CLI_SETTINGS]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    first = out / study.cells[0][0].dir / "samples.jsonl"
    deadline = time.time() + 600
    while time.time() < deadline and proc.poll() is None:
        if first.exists() and first.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.01)
    assert proc.poll() is None, "the study finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (out / "table.md").exists()
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)  # a busy machine is slow
    assert r.returncode == 0, r.stderr[-3000:]
    assert "resuming" in r.stderr
    for cell, _ in study.cells:
        assert _records(out / cell.dir) == _records(study.study_dir / cell.dir), cell.dir
    r = runner.invoke(app, ["report", str(out), "--html", "--out", str(tmp_path / "again")])
    assert r.exit_code == 0, r.output
    for name in OUTPUTS:
        assert (tmp_path / "again" / name).read_bytes() == (out / name).read_bytes(), name
    assert records_digest(load_runs([out])[0]) == records_digest(load_runs([study.study_dir])[0])


# -- the other probes' views and tables --------------------------------------------------------------------

def test_permutation_run_writes_a_report_whose_examples_show_the_permutations(tiny_roberta, datasets, tmp_path):
    from breaknli_fast.probes.permutation import PermutationConfig, PermutationProbe, permutations

    res = run_study("permutation", PermutationConfig(q=4, save_permutations=True), dataset=datasets[0], limit=6,
                    classifier=tiny_roberta, engine=EngineConfig(engine="torch", threads=1), out=tmp_path / "perm")
    data = _payload((tmp_path / "perm" / "report.html").read_text())
    recs = {r["id"]: r for r in res.records}
    assert len(data["examples"]) == len(recs)
    for e in data["examples"]:
        rec = recs[e["id"]]
        if rec["status"] != "kept":
            assert e["v"] == "dropped"
            continue
        table = next(s for s in e["view"]["sections"] if s["title"].startswith("the permutations"))
        assert [row[:2] for row in table["rows"]] == rec["permutations"]
        assert [row[2] for row in table["rows"]] == rec["permutation_labels"]
        assert sum(lab == rec["gold"] for lab in rec["permutation_labels"]) / 4 == pytest.approx(rec["c"])
        # without the saved permutations the view draws the first few again from the seed: the run's own
        bare = {k: v for k, v in rec.items() if k not in ("permutations", "permutation_labels")}
        view = PermutationProbe.example_view(bare, res.report)
        again = next(s for s in view["sections"] if s["title"].startswith("the first"))
        assert [row[1] for row in again["rows"]] == [p[1] for p in rec["permutations"]]
        assert [row[1] for row in again["rows"]] == permutations(rec["hypothesis"], 4, 0)[0]
    comp = compare(load_runs([tmp_path / "perm"]))
    assert comp.rows[0][1:] == ("Word-order permutations", "A: accuracy, unpermuted")
    assert comp.cells[(comp.rows[0][0], *comp.rows[0][1:], comp.models[0])][0] == res.report["metrics"]["A"]


def test_merge_view_shows_each_variant_with_its_label():
    from breaknli_fast.probes.merge import MergeProbe

    rec = {"group": "merge", "id": "1", "premise": "A dog runs in a park.", "hypothesis": "A dog runs.",
           "gold": "entailment", "yhat": "entailment", "status": "kept",
           "probs": {"entailment": 0.9, "neutral": 0.05, "contradiction": 0.05},
           "words": [{"lemma": "dog", "category": "noun", "form": "dog", "p": [[2, 5, "NN"]], "h": [[2, 5, "NN"]],
                      "status": "kept", "survivors": 20}],
           "dropped_words": [{"lemma": "run", "category": "verb", "reason": "inflection_mismatch",
                              "forms": ["ran", "runs"]}],
           "variants": [{"cat": "noun", "w": 0, "sub": "cat", "src": "mini-mlm", "draws": [0, 1], "yhat": "entailment",
                         "ok": True},
                        {"cat": "noun", "w": 0, "sub": "owl", "src": "mini-mlm", "draws": [1], "yhat": "neutral",
                         "ok": False}]}
    view = MergeProbe.example_view(rec, {})
    assert view["verdict"] == "some_wrong" and "1 of 2 variants" in view["why"]
    table = next(s for s in view["sections"] if s["title"].startswith("the 2 distinct variants"))
    assert table["rows"][1][4:] == ["An owl runs in a park.", "An owl runs.", "neutral"]  # a/an agrees
    assert table["marks"] == ["ok", "bad"]
    words = next(s for s in view["sections"] if s["title"].startswith("candidate words"))
    assert words["rows"][1][:4] == ["ran/runs", "verb", "dropped", "inflection_mismatch"]


def test_one_progress_display_keeps_one_cell_at_a_time():
    from breaknli_fast.progress import ProgressHook
    from breaknli_fast.study.grid import CellHook, cells_of, split_names

    class Recorder(ProgressHook):
        def __init__(self):
            self.live: dict[str, int] = {}
            self.events: list[str] = []

        def start(self, stage, total, completed=0):
            self.live[stage] = completed
            self.events.append(f"start {stage}")

        def advance(self, stage, n=1):
            self.live[stage] += n

        def remove(self, stage):
            del self.live[stage]

    rec = Recorder()
    for prefix in ("1/2 ", "2/2 "):
        hook = CellHook(rec, prefix)
        hook.start("contradictive", 4)
        hook.advance("contradictive", 4)
        assert rec.live == {f"{prefix}contradictive": 4}
        hook.close()
        assert rec.live == {}
    assert rec.events == ["start 1/2 contradictive", "start 2/2 contradictive"]
    assert split_names(" a, b,,") == ["a", "b"]
    with pytest.raises(UserError, match="--classifier: 'a' is given twice"):
        split_names(" a, b,a")  # run -c mini-nli,mini-nli
    assert [c.dir for c in cells_of(["x/d.tsv", "y/d.tsv"], ["m"])] == ["d.tsv-m", "d.tsv-m-2"]


# report.html's example list in Node with a minimal DOM: what the page's own script draws, row by row
NODE_DOM = r"""
const fs = require('fs');
const page = fs.readFileSync(process.argv[1], 'utf8');
const data = page.match(/<script type="application\/json" id="data">([\s\S]*?)<\/script>/)[1];
const js = page.match(/<script>([\s\S]*?)<\/script><\/body>/)[1];
class El {
  constructor(tag, text) { this.tagName = tag; this.children = []; this._t = text || ''; this.dataset = {};
    this.classList = {add: () => {}}; this.className = ''; this.hidden = false; this.value = ''; }
  set textContent(v) { this._t = String(v); this.children = []; }
  get textContent() { return this._t + this.children.map(c => c.textContent).join(''); }
  appendChild(c) { this.children.push(c); return c; }
  addEventListener() {}
}
const ids = {data: new El('script', data)};
globalThis.document = {getElementById: id => ids[id] || (ids[id] = new El('div')),
                       createElement: tag => new El(tag), createTextNode: t => new El('#text', t)};
globalThis.Option = class extends El { constructor(t, v) { super('option', t); this.value = v; } };
globalThis.location = {hash: ''};
globalThis.history = {replaceState() {}};
globalThis.window = {addEventListener() {}};
eval(js);
console.log(JSON.stringify(ids.rows.children.map(tr => tr.children.map(td => td.textContent))));
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="Node.js is not installed: the example list's script is "
                                                         "run where there is one")
def test_the_example_list_shows_each_example_s_premise_and_hypothesis(study):
    page = study.study_dir / "report.html"
    text = page.read_text()
    head = re.search(r'<table id="examples"><thead><tr>(.*?)</tr></thead>', text).group(1)
    columns = re.findall(r"<th>(.*?)</th>", head)
    assert columns[-2:] == ["premise", "hypothesis"]
    r = subprocess.run(["node", "-e", NODE_DOM, str(page)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]
    rows = json.loads(r.stdout)
    examples = _payload(text)["examples"]
    assert rows and len(rows) == min(len(examples), _payload(text)["shown"])
    for row, e in zip(rows, examples):
        assert len(row) == len(columns)
        assert dict(zip(columns, row))["premise"] == e["view"]["premise"]
        assert dict(zip(columns, row))["hypothesis"] == e["view"]["hypothesis"]
    assert f"colSpan={len(columns)}" in text  # an opened example spans the whole row


def test_the_settings_read_as_text_not_as_python(study):
    from breaknli_fast.study.compare import setting_text

    text = (study.study_dir / "report.html").read_text()
    settings = re.findall(r"<li>(.*?)</li>", re.search(r'<ul class="settings">(.*?)</ul>', text).group(1))
    loop = next(s for s in settings if s.startswith("BreakNLI loop: "))
    assert "relation filter: one direction" in loop and "K = 6 candidates per hypothesis" in loop
    assert "decoding: sampling (top-p 1.0, top-k off, temperature 1.0, fast sampler), at most 10 new tokens" in loop
    for s in settings:
        assert not re.search(r"\b(True|False|None)\b|\w_\w", s), s  # no Python literal, no field_name
    assert f"- {html.unescape(loop)}" in (study.study_dir / "table.md").read_text()  # the same lines
    assert setting_text("bidirectional", True, {}) == "relation filter: both directions ((h, h′) and (h′, h))"
    assert setting_text("relation_filter", "lazy", {"bidirectional": False}) is None  # one direction: no second
    assert setting_text("top_up", 15, {}) == "top up: 15"  # a setting the table does not know: still words
    assert setting_text("save_permutations", False, {}) is None and setting_text("chunk_size", 16, {}) is None
