"""The loop on tiny random-weight models (no stubs): funnel, dedup, drops, resume."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from breaknli_fast.data.loaders import load_file
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, dedup_candidates, funnel
from study_helpers import run_loop
from breaknli_fast.study.rundir import RunDir

# Wide sampling so the tiny T5 gives enough distinct candidates.
WIDE = Decoding(top_p=1.0, top_k=0, temperature=1.0, max_new_tokens=12)


def test_dedup_keeps_generation_order_and_drops_h():
    kept, n = dedup_candidates("A man sleeps", ["b", "A man sleeps.", "a ", "b.", "c", "", "d"], 3)
    assert kept == ["b.", "a.", "c."] and n == 4


@pytest.fixture(scope="module")
def models(tiny_t5, tiny_roberta):
    return registry.load_classifier("torch", tiny_roberta), registry.load_generator("torch", tiny_t5)


def _cfg(**kw):
    base = dict(k=12, u=4, s=2, decoding=WIDE, seed=3, chunk_size=5)
    base.update(kw)
    return BreakNLIConfig(**base)


def test_funnel_counts_add_up(models, tiny_tsv, tmp_path):
    clf, gen = models
    data = load_file(tiny_tsv)
    cfg = _cfg()
    records, times = run_loop(data, clf, gen, cfg, RunDir(tmp_path / "r"))
    f = funnel(records, data, cfg.modes)
    for mode in cfg.modes:
        m = f[mode]
        assert m["selected"] == m["processed"] == (40 if mode == "contradictive" else 60)
        assert m["correct"] == m["too_few_unique"] + m["too_few_on_target"] + m["evaluated"]
        assert m["evaluated"] == sum(m["by_label"].values())
    assert sum(f[m]["evaluated"] for m in cfg.modes) > 0, "the tiny run should evaluate some examples"
    assert 0 < f["contradictive"]["correct"] < 40  # 40 pairs of a random classifier: neither none nor all right
    for r in records:
        assert r["status"] in ("incorrect", "too_few_unique", "too_few_on_target", "evaluated")
        if r["status"] == "incorrect":
            assert r["yhat"] != r["gold"] and "candidates" not in r
            continue
        assert r["yhat"] == r["gold"]
        target = "contradiction" if r["mode"] == "contradictive" else "entailment"
        if r["status"] == "evaluated":
            assert len(r["evaluated"]) == cfg.s == len(r["predictions"])
            target = "contradiction" if r["mode"] == "contradictive" else "entailment"
            # the S evaluated candidates are the first S passing ones, in candidate order
            passing = [c for c, rel in zip(r["candidates"], r["relations"]) if rel == [target, target]]
            assert r["evaluated"] == passing[: cfg.s]
            assert r["verdict"]["n_candidates"] == cfg.s
        if r["status"] == "too_few_on_target":  # lazy filter: fewer than S pass among the relations computed
            known = sum(rel == [target, target] for rel in r["relations"])
            assert known < cfg.s and len(r["candidates"]) == cfg.u
    assert times.pairs["relation"] > 0


def test_too_few_unique_is_dropped_and_counted(models, tiny_tsv):
    clf, gen = models
    data = load_file(tiny_tsv, limit=12)
    # greedy-like decoding (top_k=1) repeats itself: never 4 distinct candidates
    cfg = _cfg(decoding=Decoding(top_k=1, max_new_tokens=8), modes=("entailed",))
    records, _ = run_loop(data, clf, gen, cfg)
    correct = [r for r in records if r["status"] != "incorrect"]
    assert correct and all(r["status"] == "too_few_unique" and r["n_distinct"] < 4 for r in correct)


def test_one_direction_filter_classifies_half_the_pairs(models, tiny_tsv):
    clf, gen = models
    data = load_file(tiny_tsv, limit=15)
    clf.clear_cache()
    _, t2 = run_loop(data, clf, gen, _cfg(modes=("entailed",), relation_filter="full"))
    clf.clear_cache()
    _, t1 = run_loop(data, clf, gen, _cfg(modes=("entailed",), bidirectional=False, relation_filter="full"))
    assert t2.pairs["relation"] == 2 * t1.pairs["relation"] > 0
    clf.clear_cache()  # lazy: the forward pairs of full's one direction, and (h', h) only where needed
    _, tl = run_loop(data, clf, gen, _cfg(modes=("entailed",)))
    assert t1.pairs["relation"] <= tl.pairs["relation"] < t2.pairs["relation"]


def _strip(records):
    return sorted(json.dumps(r, sort_keys=True) for r in records)


def test_resume_in_process_equals_uninterrupted(models, tiny_tsv, tmp_path):
    clf, gen = models
    data = load_file(tiny_tsv)
    full, _ = run_loop(data, clf, gen, _cfg(), RunDir(tmp_path / "full"))
    rd = RunDir(tmp_path / "part")
    part, t = run_loop(data, clf, gen, _cfg(), rd, stop_after=20)
    assert t.examples == 20
    rest, t2 = run_loop(data, clf, gen, _cfg(), RunDir(tmp_path / "part"))
    assert t2.examples == len(full) - 20
    assert _strip(rest) == _strip(full)  # the same engines and threads in one process: exact on any CPU
    lines = (tmp_path / "part" / "samples.jsonl").read_text().splitlines()
    assert len(lines) == len(full) == len({(json.loads(x)["mode"], json.loads(x)["id"]) for x in lines})


def test_torn_last_line_is_cut_and_recomputed(models, tiny_tsv, tmp_path):
    clf, gen = models
    data = load_file(tiny_tsv, limit=20)
    full, _ = run_loop(data, clf, gen, _cfg(), RunDir(tmp_path / "a"))
    rd = RunDir(tmp_path / "b")
    run_loop(data, clf, gen, _cfg(), rd, stop_after=10)
    with open(tmp_path / "b" / "samples.jsonl", "ab") as fh:
        fh.write(b'{"mode": "contradictive", "id": "p9", "prem')  # torn write
    rd2 = RunDir(tmp_path / "b")
    rest, _ = run_loop(data, clf, gen, _cfg(), rd2)
    assert rd2.repaired_bytes > 0
    assert _strip(rest) == _strip(full)


def _cli(*args):
    return [sys.executable, "-m", "breaknli_fast.cli", "run", *args]


def test_kill_minus_9_then_rerun_equals_uninterrupted(tiny_t5, tiny_roberta, tmp_path):
    """A real process killed with SIGKILL mid-run, then the same command again."""
    src = tmp_path / "big.tsv"
    import tiny_models as testing

    with open(src, "w") as f:
        f.write("gold_label\tsentence1\tsentence2\tpairID\n")
        for i, (p, h, lab) in enumerate(testing.pairs(240, seed=1)):
            f.write(f"{lab}\t{p}\t{h}\tq{i}\n")
    common = ["-g", tiny_t5, "-c", tiny_roberta, "-d", str(src), "--k", "12", "--u", "4", "--s", "2", "--top-p", "1.0",
              "--top-k", "0", "--max-new-tokens", "12", "--chunk-size", "2", "--seed", "5", "--threads", "1", "--engine", "torch"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cli(*common, "--out", str(killed)), env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    samples = killed / "samples.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if samples.exists() and samples.stat().st_size > 0 and samples.read_bytes().count(b"\n") >= 6:
            break
        time.sleep(0.02)
    assert proc.poll() is None, "the run finished before it could be killed"
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    n_at_kill = samples.read_bytes().count(b"\n")
    assert 0 < n_at_kill < 400
    r = subprocess.run(_cli(*common, "--out", str(killed)), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "resuming" in r.stderr  # notices go to stderr with the progress bars; stdout holds the results
    full = tmp_path / "full"
    r = subprocess.run(_cli(*common, "--out", str(full)), env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr

    def load(p):
        return [json.loads(x) for x in (p / "samples.jsonl").read_text().splitlines()]

    a, b = load(killed), load(full)
    assert len(a) == len(b) == 400  # 160 E/C for contradictive + 240 for entailed
    # both processes run torch on one thread (its fp32 results depend on the thread count), so the
    # records are equal exactly, on any CPU
    assert _strip(a) == _strip(b)
    ra, rb = json.loads((killed / "report.json").read_text()), json.loads((full / "report.json").read_text())
    assert ra["metrics"] == rb["metrics"] and ra["funnel"] == rb["funnel"]
