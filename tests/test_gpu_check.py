"""scripts/gpu_check.sh end to end as a dry run on the CPU (--device cpu, a few examples), and the comparison of run
directories it relies on (scripts/compare_runs.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

import compare_runs  # noqa: E402


@pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None, reason="needs bash and timeout")
def test_gpu_check_dry_run_on_the_cpu(tmp_path):
    out = tmp_path / "check"
    env = {**os.environ, "PYTHON": sys.executable}
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "cpu", "--limit", "2", "--out",
                        str(out), "--budget", "400", "--", "--k", "4", "--u", "2", "--s", "1", "--max-new-tokens", "6"],
                       cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    steps = {ln.split("\t")[0]: ln.split("\t")[1:] for ln in (out / "steps.tsv").read_text().splitlines()}
    for s in ("env", "cuda-tests", "reference-cpu-torch-fp32", "device-cpu-torch-fp32", "device-cpu-torch-bf16",
              "parity"):
        assert steps[s][0] == "ok", (s, steps[s])
    assert steps["install"][0] == "skipped" and "--wheels" in steps["install"][1]
    assert steps["device-ort-fp32"][0] == "skipped" and steps["device-ort-fp32"][1]  # said why
    doc = json.loads((out / "gpu-check.json").read_text())
    assert doc["kind"] == "gpu_check" and doc["commit"] and doc["machine"]["cpu"]
    p = doc["payload"]
    assert p["device"] == "cpu" and p["cuda_tests"]["tests"] >= 4 and p["cuda_tests"]["skipped"] == p["cuda_tests"]["tests"]
    assert set(p["runs"]) == {"reference-cpu-torch-fp32", "device-cpu-torch-fp32", "device-cpu-torch-bf16"}
    assert p["runs"]["device-cpu-torch-bf16"]["engine"]["precision"] == "bf16"
    fp32 = p["parity"]["runs"][str(out / "runs" / "device-cpu-torch-fp32")]
    # the same engine, device and seeds as the reference: identical records
    assert fp32["passed"] and fp32["classifier"]["max_abs_prob_diff"] == 0.0
    assert fp32["generator"]["identical_samples_pct"] == 100.0
    summary = (out / "summary.md").read_text()
    assert "| device-cpu-torch-bf16 | ok |" in summary and "Parity with the CPU reference" in summary


def test_gpu_check_refuses_bad_options(tmp_path):
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--device", "tpu", "--out", str(tmp_path)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith("error: --device must be cpu or cuda")
    r = subprocess.run(["bash", str(ROOT / "scripts" / "gpu_check.sh"), "--wheels", str(tmp_path / "none"), "--out",
                        str(tmp_path / "o")], capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "is not a folder" in r.stderr


def _rec(mode, i, yhat, probs, generated, status="evaluated", inequality=False):
    r = {"mode": mode, "id": f"e{i}", "yhat": yhat, "ph_probs": probs, "generated": generated, "status": status}
    if status == "evaluated":
        r["verdict"] = {"inequality": inequality, "relaxed": inequality}
    return r


def test_compare_runs_flags_labels_probabilities_and_samples():
    p = {"entailment": 0.7, "neutral": 0.2, "contradiction": 0.1}
    tie = {"entailment": 0.4995, "neutral": 0.5, "contradiction": 0.0005}
    ref = [_rec("contradictive", i, "entailment", p, ["a", "b"]) for i in range(4)] + [
        _rec("contradictive", 9, "neutral", tie, ["c"], status="too_few_on_target")]
    same = compare_runs.compare(ref, [dict(r) for r in ref])
    assert same["passed"] and same["generator"]["identical_samples_pct"] == 100.0
    # a near tie may flip at fp32; a clear label may not, nor may probabilities move by more than the tolerance
    flipped_tie = [dict(r) for r in ref]
    flipped_tie[4] = dict(flipped_tie[4], yhat="entailment")
    res = compare_runs.compare(ref, flipped_tie)
    assert res["passed"] and res["classifier"]["near_ties"] == 1 and res["classifier"]["label_agreement_pct"] == 80.0
    moved = [dict(r) for r in ref]
    moved[0] = dict(moved[0], yhat="neutral", ph_probs={"entailment": 0.3, "neutral": 0.6, "contradiction": 0.1},
                    generated=["a", "x"])
    res = compare_runs.compare(ref, moved)
    assert not res["passed"] and res["generator"]["identical_samples_pct"] == 80.0
    assert any("labels outside near ties" in f for f in res["failures"])
    assert any("max |Δ probability|" in f for f in res["failures"])
    # at bf16 only the end-to-end verdicts judge
    assert compare_runs.compare(ref, moved, precision="bf16")["passed"]
    assert "FAIL" in compare_runs.summary_line("x", res) and "PASS" in compare_runs.summary_line("y", same)
