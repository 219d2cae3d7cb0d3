"""scripts/gpu_check.sh (the gpu-check measurement): two dry runs on the CPU so the check cannot rot (this stack;
and the lent machine's stack, transformers 5.x without optimum, from a Python that has no breaknli-fast installed),
its time caps, budget, signals and files, and its steps' registry; the comparison of run directories it relies on
(the compare-runs measurement); and the GPU section of BENCHMARKS.md rendered from its result file (a synthetic
file the test writes, not a measurement)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from breaknli_fast.suite import document as D
from breaknli_fast.suite import provenance
from breaknli_fast.suite.main import main as suite_main
from breaknli_fast.suite.measurements import compare_runs
from breaknli_fast.suite.measurements import gpu_check, gpu_core, gpu_steps

ROOT = Path(__file__).resolve().parent.parent

SCRIPT = ROOT / "scripts" / "gpu_check.sh"
TINY = ["--", "--k", "4", "--u", "2", "--s", "1", "--max-new-tokens", "6"]
TINY_BENCH = ["--bench-args", "--warmup 0 --min-iterations 1 --min-seconds 0 --invariance-pairs 8 --gen-prompts 2 "
                              "--greedy-prompts 2"]
COMPAT = Path(__file__).resolve().parents[1] / ".venv-compat"  # this checkout's second stack (make test-compat builds it)
needs_shell = pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")


def _check(tmp_path: Path, python: str, *args: str, env: dict | None = None) -> tuple[subprocess.CompletedProcess, Path]:
    out = tmp_path / "out"
    # caps 4 times the GPU's: a 2-core machine shared with other work runs a step several times slower
    r = subprocess.run(["bash", str(SCRIPT), "--device", "cpu", "--limit", "2", "--out", str(out), "--work",
                        str(tmp_path / "work"), "--budget", "1500", "--cap-scale", "4", *args],
                       cwd=ROOT, env={**os.environ, "PYTHON": python, **(env or {})}, capture_output=True, text=True,
                       timeout=1800)
    return r, out


def _files_come_back(out: Path) -> None:
    """What the lent machine sends back from $OUT: at most 8 plain files of at most 16 MiB, plain names."""
    files = list(out.iterdir())
    assert 0 < len(files) <= 8 and all(f.is_file() for f in files)
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", f.name) and f.stat().st_size <= 16 * 2**20 for f in files)


def _steps(doc: dict) -> dict[str, dict]:
    return {s["step"]: s for s in doc["payload"]["steps"]}


@needs_shell
def test_gpu_check_dry_run_on_the_cpu(tmp_path):
    r, out = _check(tmp_path, sys.executable, "--steps",
                    "env,cpu-reference,cuda-tests,device-fp32,device-bf16,device-fp16-classifier,parity", *TINY)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    _files_come_back(out)
    assert sorted(p.name for p in out.iterdir()) == sorted(["gpu-check.json", "summary.md", "gpu-check.log",
                                                            "runs-reference.tar.gz", "runs-precisions.tar.gz",
                                                            "check.tar.gz"])
    doc = json.loads((out / "gpu-check.json").read_text())
    assert doc["kind"] == "gpu_check" and doc["commit"] and doc["machine"]["cpu"]
    steps, p = _steps(doc), doc["payload"]
    for s in ("env", "cpu-reference", "cuda-tests", "device-fp32", "device-bf16", "device-fp16-classifier", "parity"):
        assert steps[s]["status"] == "ok", steps[s]
        assert steps[s]["cap_s"] <= 4 * gpu_core.CAPS[s][0]  # each step ran under its hard cap
    assert steps["bench-mini"]["status"] == "skipped" and steps["bench-mini"]["detail"] == "not in --steps"
    assert p["device"] == "cpu" and p["gpu"] is None and p["package_path"] == "breaknli_fast"  # this checkout's, relative
    t = p["cuda_tests"]
    assert t["tests"] >= 8 and t["skipped"] == t["tests"]  # the CUDA-marked tests skip here, saying why
    assert all("no CUDA GPU" in c["message"] or "onnxruntime-gpu" in c["message"] for c in t["cases"])
    runs = p["runs"]
    assert set(runs) == {"reference-cpu-torch-fp32", "device-cpu-torch-fp32", "device-cpu-torch-bf16",
                         "device-cpu-torch-fp16-classifier"}
    assert all(x["finished"] and x["examples"] == 2 for x in runs.values())
    fp16 = runs["device-cpu-torch-fp16-classifier"]
    assert (fp16["classifier_precision"], fp16["generator_precision"]) == ("fp16", "fp32")
    kernels = p["parity"]["kernels"]["runs"][str(tmp_path / "work" / "runs" / "device-cpu-torch-fp32")]
    # the same engine, device and seeds as the reference: identical records
    assert kernels["passed"] and kernels["classifier"]["max_abs_prob_diff"] == 0.0
    assert kernels["generator"]["identical_samples_pct"] == 100.0
    precisions = p["parity"]["precisions"]["runs"]
    assert {Path(k).name for k in precisions} == {"device-cpu-torch-bf16", "device-cpu-torch-fp16-classifier"}
    assert {v["precision"] for v in precisions.values()} == {"bf16", "fp16/fp32"}
    with tarfile.open(out / "runs-reference.tar.gz") as tar:
        names = tar.getnames()
    assert "runs/reference-cpu-torch-fp32/samples.jsonl" in names and "runs/device-cpu-torch-fp32/config.json" in names
    summary = (out / "summary.md").read_text()
    assert "| device-bf16 | ok |" in summary and "torch fp32 on `cpu` against torch fp32 on the CPU" in summary


@needs_shell
def test_gpu_check_dry_run_runs_the_cudagraph_steps_inside_their_caps(tmp_path):
    """The cudagraph engine's steps (fused-step, natural-eos, quantised, parity-scale) on the CPU's mini models, each
    finished under its cap: the compiled fused step's kernels counted and its tokens those of the plain step at
    fp32 where run, generation ended by the end-of-sequence token with the torch engine's candidates at fp32, the
    fp8 / int8 classifiers batch-invariant to the bit, the accuracy bench of the four engines."""
    r, out = _check(tmp_path, sys.executable, "--steps", "env,fused-step,natural-eos,quantised,parity-scale",
                    *TINY_BENCH)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    _files_come_back(out)
    doc = json.loads((out / "gpu-check.json").read_text())
    steps, p = _steps(doc), doc["payload"]
    for s in ("fused-step", "natural-eos", "quantised", "parity-scale"):
        assert steps[s]["status"] == "ok" and steps[s]["cap_s"] <= 4 * gpu_core.CAPS[s][0], steps[s]
    fused = p["cudagraph"]["fused-step"]["shapes"]["mini"]
    assert set(fused) == {"generator", "bf16_off", "bf16_compile"}
    assert fused["bf16_compile"]["fused"] == "compile" and fused["bf16_compile"]["kernels"]["per_layer"]["library"] == 6
    assert fused["bf16_off"]["rows_identical_to_off_pct"] == 100.0 and fused["bf16_off"]["bytes"]["total"] > 0
    eos = p["cudagraph"]["natural-eos"]
    assert eos["reference"] == "torch:fp32" and "eos_bias" not in eos  # the trained mini model ends by itself
    engines = eos["engines"]
    assert set(engines) == {"torch:fp32", "cudagraph:fp32", "cudagraph:bf16"}
    assert all(e["ended_by_eos_pct"] > 50 and e["mean_length"] < eos["max_new_tokens"] for e in engines.values())
    assert engines["cudagraph:fp32"]["identical_to_first_pct"] == 100.0
    quantised = p["cudagraph"]["quantised"]["precisions"]
    assert set(quantised) == {"bf16", "fp8", "int8"} and "fp8" in p["cudagraph"]["quantised"]["speedup_vs_bf16"]
    for fmt in ("fp8", "int8"):
        assert quantised[fmt]["alone_vs_call_max_abs_diff"] == 0.0 and quantised[fmt]["labels_agree_pct"] >= 90
        assert quantised[fmt]["compute"]["product_kernels"] == {"emulated": 20}
    bench = p["parity_scale"]
    assert [e["label"] for e in bench["engines"]] == gpu_core.PARITY_ENGINES.split(",")
    assert all(e["status"] == "ok" for e in bench["engines"]) and bench["probe"] == "accuracy"
    with tarfile.open(out / "check.tar.gz") as tar:
        names = set(tar.getnames())
    assert {"fused-step.json", "natural-eos.json", "quantised.json", "bench-parity/bench.json"} <= names


def _device_like_python(tmp_path: Path) -> str:
    """A Python like the lent machine's: itself a virtual environment, with the compat stack's packages
    (transformers 5.x, no optimum) and no breaknli-fast installed (the site folder is on its path through a .pth
    line, so the editable install's own .pth there is not run)."""
    base = subprocess.run([str(COMPAT / "bin" / "python"), "-c", "import sys; print(sys._base_executable)"],
                          capture_output=True, text=True, check=True).stdout.strip()
    venv = tmp_path / "device-python"
    subprocess.run([base, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = subprocess.run([str(COMPAT / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    py = str(venv / "bin" / "python")
    own = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], capture_output=True,
                         text=True, check=True).stdout.strip()
    Path(own, "device_stack.pth").write_text(site + "\n")
    return py


@needs_shell
@pytest.mark.skipif(not (COMPAT / "bin" / "python").exists(),
                    reason=f"{COMPAT} (transformers 5.x, the lent machine's stack) is not built: make test-compat builds it")
def test_gpu_check_dry_run_on_the_lent_machines_stack_needs_nothing_installed(tmp_path):
    py = _device_like_python(tmp_path)
    clean = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    probe = subprocess.run([py, "-c", "import transformers, importlib.util as u; print(transformers.__version__, "
                                      "u.find_spec('optimum'), u.find_spec('breaknli_fast'))"],
                           cwd=tmp_path, env=clean, capture_output=True, text=True, timeout=120)
    version, optimum, package = probe.stdout.split()
    assert version.startswith("5.") and optimum == "None" and package == "None"  # nothing of this package installed
    # the CPU reference in the background as on a GPU: the device run goes beside it, the timed bench after it
    r, out = _check(tmp_path, py, "--reference-background", "--steps", "env,cpu-reference,device-fp32,bench-mini,parity",
                    *TINY_BENCH, *TINY, env={"PYTHONPATH": ""})
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-2000:]
    _files_come_back(out)
    doc = json.loads((out / "gpu-check.json").read_text())
    steps, p = _steps(doc), doc["payload"]
    assert all(steps[s]["status"] == "ok" for s in ("env", "cpu-reference", "device-fp32", "bench-mini", "parity"))
    order = [s["step"] for s in p["steps"] if s["status"] != "skipped"]
    assert order.index("cpu-reference") < order.index("bench-mini")  # the bench waited for the reference
    assert p["package_path"] == "breaknli_fast"  # this checkout's, relative and p["optimum"] is False
    assert p["environment"]["packages"]["transformers"].startswith("5.")
    bench = p["benches"]["mini"]["bench"]
    assert [e["label"] for e in bench["engines"]] == gpu_core.BENCH_ENGINES.split(",")
    assert all(e["status"] == "ok" and e["device"] == "cpu" for e in bench["engines"])
    assert bench["engines"][2]["classifier_precision"] == "fp16" and bench["engines"][2]["generator_precision"] == "fp32"
    assert p["parity"]["kernels"]["runs"] and p["parity"]["precisions"] is None


def _bare_check(tmp_path: Path, budget: int = 300) -> gpu_core.Check:
    args = SimpleNamespace(budget=budget, device="cpu", limit=2, run_args=[], bench_args="", real_limit=64,
                           real_shapes="none", large_shapes="none", real_engines=gpu_core.REAL_ENGINES,
                           large_engines=gpu_core.LARGE_ENGINES, real_repeats=3, bound_shapes=None,
                           steps=list(gpu_core.steps()), order="priority", cap_scale=1.0,
                           reference_background=False)
    (tmp_path / "logs").mkdir(parents=True, exist_ok=True)
    return gpu_core.Check(args, tmp_path / "out", tmp_path, sys.executable)


def test_a_step_stops_at_its_cap_and_a_step_that_does_not_fit_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setitem(gpu_core.CAPS, "bench-mini", (2, 1))
    monkeypatch.setitem(gpu_core.CAPS, "device-bf16", (2, 1))
    c = _bare_check(tmp_path)
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    rec = c.run("bench-mini", [sleep])
    assert rec.status == "failed" and "stopped at its cap of 2s (nothing kept)" in rec.detail
    rec = c.run("device-bf16", [sleep], partial_ok=True)  # a run's finished records are kept
    assert rec.status == "stopped" and "partial output kept" in rec.detail
    monkeypatch.setitem(gpu_core.CAPS, "cpu-reference", (2, 1))  # in the background: stopped at its cap too
    c.start_background("cpu-reference", sleep)
    assert c.poll_background() is True  # still running: the untimed steps may go beside it
    assert c.poll_background(wait=True) is False and c.bg is None
    assert c.records[-1].status == "stopped" and "stopped at its cap of 2s" in c.records[-1].detail
    c.start_background("cpu-reference", sleep)
    c.poll_background(stop_now="stopped by SIGTERM")  # the check was stopped: so is the reference
    assert c.records[-1].status == "stopped" and c.records[-1].detail.startswith("stopped by SIGTERM")
    c.args.budget = gpu_core.RESERVE_S + int(c.elapsed()) + 5  # 5 s left; parity needs 10
    rec = c.run("parity", [[sys.executable, "-c", "pass"]])
    assert rec.status == "skipped" and rec.detail.startswith("budget: ")


def test_the_bench_limit_is_what_the_device_runs_rate_fits(tmp_path, monkeypatch):
    c = _bare_check(tmp_path, budget=10_000)
    c.args.limit = 0
    run = tmp_path / "runs" / "device-cuda-torch-fp32"
    run.mkdir(parents=True)
    (run / "samples.jsonl").write_text("".join(json.dumps({"id": f"e{i}", "mode": m}) + "\n"
                                               for i in range(300) for m in ("contradictive", "entailed")))
    # unfinished (no report.json): the rate is the step's seconds less a run's start-up
    limit, why = gpu_steps.bench_limit(c, run, 15 + 3.0)  # 300 examples in 3 s: 100/s
    avail = gpu_core.CAPS["bench-mini"][0] * 0.8
    engines = len(gpu_core.BENCH_ENGINES.split(","))
    want = int(100 * ((avail - gpu_core.BENCH_START_S) / engines - gpu_core.BENCH_ENGINE_EXTRA_S)
               / (gpu_core.MINI_REPEATS + gpu_core.BENCH_LOOP_EXTRA))
    assert limit == str(want) and "100.0/s" in why
    (run / "report.json").write_text(json.dumps({"throughput": {"wall_seconds": 0.5}}))  # finished, and fast
    assert gpu_steps.bench_limit(c, run, 20.0)[0] == "0"  # all of the run's examples fit: --limit as given


def test_bundles_larger_than_what_comes_back_leave_their_largest_files_out(tmp_path, monkeypatch):
    work, out = tmp_path / "work", tmp_path / "out"
    run = work / "runs" / "device-cuda-torch-bf16"
    run.mkdir(parents=True)
    out.mkdir()
    (run / "config.json").write_text("{}")
    (run / "samples.jsonl").write_bytes(os.urandom(200_000))  # random bytes do not compress
    monkeypatch.setattr(gpu_check, "MAX_FILE", 50_000)
    done = gpu_check.pack(work, out)
    assert done["runs-precisions.tar.gz"]["left_out"] == ["runs/device-cuda-torch-bf16/samples.jsonl"]
    assert (out / "runs-precisions.tar.gz").stat().st_size <= 50_000 and "check.tar.gz" not in done


@needs_shell
def test_sigterm_stops_the_step_in_hand_and_still_writes_the_files(tmp_path):
    out = tmp_path / "out"
    p = subprocess.Popen(["bash", str(SCRIPT), "--device", "cpu", "--steps", "cuda-tests", "--out", str(out), "--work",
                          str(tmp_path / "work")], cwd=ROOT, env={**os.environ, "PYTHON": sys.executable},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    log = tmp_path / "work" / "gpu-check.log"
    for _ in range(200):  # until the step has started
        if log.exists() and "cuda-tests: up to" in log.read_text():
            break
        time.sleep(0.1)
    p.send_signal(signal.SIGTERM)
    stdout, stderr = p.communicate(timeout=120)
    assert p.returncode == 1, stdout[-2000:] + stderr[-2000:]
    doc = json.loads((out / "gpu-check.json").read_text())
    steps = _steps(doc)
    assert steps["check"]["status"] == "failed" and "SIGTERM" in steps["check"]["detail"]
    assert (out / "summary.md").exists() and (out / "gpu-check.log").exists()


def test_gpu_check_refuses_bad_options(tmp_path):
    for args, msg in ((["--device", "tpu"], "error: --device must be cpu or cuda"),
                      (["--steps", "env,nope"], "error: unknown step nope"),
                      (["--wheels", str(tmp_path)], "error: unrecognized arguments: --wheels"),
                      (["--limit", "-1"], "error: --limit -1: at least 0")):
        r = subprocess.run(["bash", str(SCRIPT), *args, "--out", str(tmp_path / "o")], capture_output=True, text=True,
                           timeout=60, env={**os.environ, "PYTHON": sys.executable})
        assert r.returncode == 2 and r.stderr.startswith(msg) and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "o").exists()  # refused before anything was written


def test_the_commit_given_in_the_environment_wins_over_a_copy_and_its_git(tmp_path, monkeypatch):
    """A sent copy may carry a .git that is not the sent tree's (the lent machine's did): the commit the sender names
    wins; without it, git's."""
    from breaknli_fast import envinfo

    monkeypatch.delenv(envinfo.COMMIT_ENV, raising=False)
    assert envinfo.git_commit(tmp_path) is None
    monkeypatch.setenv(envinfo.COMMIT_ENV, "0123abc")
    assert envinfo.git_commit(tmp_path) == "0123abc"
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q",
                    "--allow-empty", "-m", "x"], check=True)
    assert envinfo.git_commit(tmp_path) == "0123abc"
    monkeypatch.setenv(envinfo.COMMIT_ENV, " ")
    head = subprocess.run(["git", "-C", str(tmp_path), "rev-parse", "HEAD"], capture_output=True, text=True).stdout
    assert envinfo.git_commit(tmp_path) == head.strip()


# -- the compare-runs measurement --------------------------------------------------------------------------------

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


def test_compare_runs_reads_a_run_stopped_while_it_wrote(tmp_path, capsys):
    p = {"entailment": 0.7, "neutral": 0.2, "contradiction": 0.1}
    ref, run = tmp_path / "ref", tmp_path / "run"
    for d in (ref, run):
        d.mkdir()
    lines = [json.dumps(_rec("entailed", i, "entailment", p, ["a"])) for i in range(3)]
    (ref / "samples.jsonl").write_text("\n".join(lines) + "\n")
    (run / "samples.jsonl").write_text("\n".join(lines[:2]) + "\n" + lines[2][:17])  # torn last line
    out = tmp_path / "p.json"
    assert suite_main(["measure", "compare-runs", "--reference", str(ref), "--run", str(run), "--result", str(out)]) == 0
    res = json.loads(out.read_text())["payload"]["runs"][str(run)]
    assert res["examples_both"] == 2 and res["torn_last_line"] == {"reference": False, "run": True}
    capsys.readouterr()
    (run / "samples.jsonl").write_text(lines[0][:10] + "\n" + lines[1] + "\n")  # a bad line elsewhere: an error
    assert suite_main(["measure", "compare-runs", "--reference", str(ref), "--run", str(run), "--result",
                       str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "line 1 is not JSON" in err


# -- the GPU section of BENCHMARKS.md --------------------------------------------------------------------------

def _bench_engine(label: str, ref: bool, e2e: float, pairs: float, tokens: float, verdicts: dict) -> dict:
    engine, precision = label.split(":")[:2]
    return {"label": label, "engine": engine, "precision": precision, "reference": ref, "status": "ok",
            "classifier_precision": "fp16" if "gen.precision" in label else precision,
            "generator_precision": "fp32" if "gen.precision" in label else precision, "device": "cuda",
            "speed": {"speedup": {"end_to_end": e2e},
                      "summary": {"classifier_pairs_per_s": pairs, "generated_tokens_per_s": tokens,
                                  "examples_per_s": 10 * e2e}},
            "parity": {"verdicts": verdicts}}


def _synthetic_gpu_check(folder: Path, device: str = "cuda", gpu: str | None = "Synthetic GPU 80GB") -> None:
    """A gpu_check result file made up by this test (never a measurement: it is written to a temporary folder)."""
    bench = {"data": {"name": "sample", "examples": 2724}, "models": {"generator": "mini-t5", "classifier": "mini-nli"},
             "reference": "torch:fp32", "workload": {}, "engines": [
                 _bench_engine("torch:fp32", True, 1.0, 11111.0, 22222.0, {}),
                 _bench_engine("torch:bf16", False, 1.37, 15555.5, 30303.0,
                               {"equivalent": 4, "different": 0, "inconclusive": 8, "too_small": 6}),
                 _bench_engine("torch:fp16:gen.precision=fp32", False, 1.21, 19999.9, 21000.0,
                               {"equivalent": 5, "different": 0, "inconclusive": 7, "too_small": 6})]}
    payload = {"device": device, "gpu": gpu, "torch": "2.11.0+cu130", "torch_cuda_build": "13.0", "limit": 0,
               "budget_s": 480, "took_s": 455.0,
               "tf32": {"asked": None, "runs": {"device-cuda-torch-fp32": {"classifier": {
                   "matmul_allow_tf32": False, "cudnn_allow_tf32": False}}}},
               "steps": [{"step": "bench-real", "status": "skipped", "detail": "budget: 20s left"}],
               "cuda_tests": {"tests": 12, "failures": 0, "errors": 0, "skipped": 2, "cases": []},
               "runs": {"device-cuda-torch-fp32": {"device": "cuda", "precision": "fp32", "examples": 2724,
                                                   "finished": True, "throughput": {"examples_per_s": 123.4}}},
               "parity": {"kernels": None, "precisions": None},
               "benches": {"mini": {"limit": {"limit": "0", "why": "all 2724 of the run's examples"}, "bench": bench},
                           "real": {"limit": 64, "bench": None}}}
    doc = {"schema": provenance.SCHEMA, "kind": "gpu_check", "command": f"scripts/gpu_check.sh --device {device}",
           "date": "2030-01-02T03:04:05+00:00", "finished": "2030-01-02T03:12:05+00:00", "duration_s": 455.0,
           "commit": "feedbeef", "machine": {"cpu": "Synthetic CPU", "cores": 16, "packages": {}},
           "payload": payload}
    (folder / f"gpu-check-{device}.json").write_text(json.dumps(doc))


def _gpu_section(folder: Path) -> str:
    """Section 6 of BENCHMARKS.md rendered from the result files in ``folder``."""
    results, _ = D.load(folder)
    return D.render(results, "benchmarks/results").split("## 6. On a GPU")[1].split("\n## ")[0]


def test_benchmarks_say_no_gpu_has_been_lent_without_a_gpu_result(tmp_path):
    _synthetic_gpu_check(tmp_path, device="cpu", gpu=None)  # a dry run on the CPU is no GPU measurement
    section = _gpu_section(tmp_path)
    assert "Not measured: no GPU has been lent" in section and "Synthetic" not in section


def test_benchmarks_gpu_section_from_a_gpu_check_result(tmp_path):
    _synthetic_gpu_check(tmp_path)
    section = _gpu_section(tmp_path)
    assert "Synthetic GPU 80GB (`cuda`), torch 2.11.0+cu130" in section
    assert "| torch:bf16 | 1.37× | 15555.5 | 30303.0 |" in section  # loop speed-up, pairs/s, tokens/s
    assert "| torch:fp16:gen.precision=fp32 | 1.21× | 19999.9 | 21000.0 |" in section
    assert "4 / 0 (0) / 8 (6)" in section and "not shown: 4 of 12 cells equivalent" in section
    assert "allow_tf32: matmul False, cuDNN False" in section
    assert "10 passed, 0 failed, 0 errors, 2 skipped" in section
    assert "Not measured: step `bench-real` skipped (budget: 20s left)" in section
    assert "commit `feedbeef`" in section and "gpu-check-cuda.json" in section
    assert "cuDNN attention: not recorded, so torch's default" in section  # engine details without ``sdpa``


def test_benchmarks_gpu_section_says_whether_attention_used_cudnn_and_the_commit_note(tmp_path):
    _synthetic_gpu_check(tmp_path)
    path = tmp_path / "gpu-check-cuda.json"
    doc = json.loads(path.read_text())
    doc["commit_note"] = "the tree sent was commit 0123abc"
    for e in doc["payload"]["benches"]["mini"]["bench"]["engines"]:
        e["info"] = {role: {"details": {"sdpa": {"cudnn_requested": False, "cudnn_enabled": False},
                                        "tf32": {"matmul_allow_tf32": False, "cudnn_allow_tf32": False}}}
                     for role in ("classifier", "generator")}
    doc["payload"]["tf32"]["runs"] = {}  # the benches' engines alone record the switches
    path.write_text(json.dumps(doc))
    section = _gpu_section(tmp_path)
    assert "cuDNN attention off in the torch engines" in section
    assert "allow_tf32: matmul False, cuDNN False" in section
    assert "commit `feedbeef` (the tree sent was commit 0123abc)" in section


def test_benchmarks_gpu_section_judges_the_cudagraph_targets_from_the_check_alone(tmp_path):
    """The targets table of issue 53 reads each figure from the same check: a speed-up under its bar, a bound
    missed and an engine slower than torch on the mini models are each 'not met'."""
    _synthetic_gpu_check(tmp_path)
    path = tmp_path / "gpu-check-cuda.json"
    doc = json.loads(path.read_text())
    p = doc["payload"]

    def shapes_bench(gen: str, clf: str, speeds: dict[str, float]) -> dict:
        engines = [_bench_engine("torch:fp32", True, 1.0, 1.0, 1.0, {})]
        for label, x in speeds.items():
            e = _bench_engine(label, False, x, 1.0, 1.0, {})
            e["parity"]["headline"] = {"records": {"identical_pct": 98.5}}
            engines.append(e)
        return {"bench": {"data": {"name": "sample", "examples": 64}, "reference": "torch:fp32", "workload": {},
                          "parity_meaningful": False, "engines": engines,
                          "config": {"random_weights": {"generator": gen, "classifier": clf}}}}

    p["benches"]["real"] = shapes_bench("flan-t5-base", "roberta-base", {"cudagraph:fp32": 2.5, "cudagraph:bf16": 6.1})
    p["benches"]["large"] = shapes_bench("flan-t5-large", "roberta-large", {"cudagraph:bf16": 4.2})
    p["bounds"] = {"gpu": "Synthetic GPU 80GB", "reps": 20, "datasheet": {"bf16_tflops": 989.4, "fp32_tflops": 66.9,
                                                                         "hbm_tb_s": 3.35, "source": "test"},
                   "measured_peaks": {}, "shapes": {"large": {
                       "generator": "flan-t5-large", "classifier": "roberta-large",
                       "classifier_bf16": {"bucket": [512, 128], "median_ms": 90.0, "tflops": 440.0, "pct_of_peak": 44.5},
                       "decoder_bf16": {"rows": 160, "median_ms": 1.4, "floor_ms": 0.36, "times_floor": 3.9,
                                        "bytes": {"total": 1.2e9}}}}}
    path.write_text(json.dumps(doc))
    section = _gpu_section(tmp_path)
    assert "| flan-t5-base + roberta-base: cudagraph bf16 loop ≥ 5× torch fp32 eager | 6.10× | met |" in section
    assert ("| flan-t5-base + roberta-base: cudagraph fp32 loop ≥ 2×, records equal to eager fp32's | 2.50×, 98.5 % "
            "of records identical | met |") in section
    assert "| flan-t5-large + roberta-large: cudagraph bf16 loop ≥ 5× torch fp32 eager | 4.20× | **not met** |" in section
    assert "| roberta-large: the classifier's largest bucket ≥ 30 % of bf16 peak | 44 % | met |" in section
    assert "| flan-t5-large: the bf16 decoder step within 3× its bandwidth floor | 3.9× | **not met** |" in section
    assert "mini models: no engine slower than torch fp32 eager end to end" in section and "| met |" in section
    assert "| large | decoder step flan-t5-large, 160 rows | cudagraph bf16 | 1.400 ms |" in section


def test_a_new_step_is_a_function_and_its_registration(tmp_path, monkeypatch):
    """A step of the check is one function registered with ``gpu_core.step`` (its cap, its place in the queue):
    ``--steps`` names it, the queue runs it in its order under its cap, and its record lands in the payload."""
    ran: list[str] = []

    @gpu_core.step("hello", cap=30, need=1, priority=5)
    def hello(c):
        ran.append("hello")
        c.run("hello", [[sys.executable, "-c", "print('hello')"]], detail="said hello")

    try:
        assert gpu_core.steps()[-1] == "hello" and gpu_core.CAPS["hello"] == (30, 1)
        c = _bare_check(tmp_path)
        c.args.steps = ["hello", "parity"]
        gpu_check.execute(c)
        recs = {r.step: r for r in c.records}
        assert ran == ["hello"] and recs["hello"].status == "ok" and recs["hello"].detail == "said hello"
        assert recs["bench-mini"].status == "skipped" and recs["parity"].status == "skipped"  # no runs to compare
        assert [r.step for r in c.records if r.status != "skipped"] == ["hello"]
        config = gpu_check.GpuCheck().config({"steps": "env,hello", "device": "cpu"})
        assert config.steps == "env,hello"
    finally:
        gpu_core.STEP_REGISTRY.pop("hello", None)
        gpu_core.CAPS.pop("hello", None)
    with pytest.raises(Exception, match="unknown step hello"):
        gpu_check.GpuCheck().config({"steps": "hello"})


def test_order_listed_runs_the_queue_as_steps_lists_it(tmp_path):
    """``--order listed`` queues the steps as ``--steps`` gives them (what matters most first in a short budget);
    the default queues them by their registered priority; another word is a one-line error."""
    ran: list[str] = []
    for name, prio in (("first-reg", 5), ("second-reg", 6)):
        gpu_core.step(name, cap=30, need=1, priority=prio)(lambda c, name=name: ran.append(name))
    try:
        for order, want in (("priority", ["first-reg", "second-reg"]), ("listed", ["second-reg", "first-reg"])):
            ran.clear()
            c = _bare_check(tmp_path / order)
            c.args.steps, c.args.order = ["second-reg", "first-reg"], order
            gpu_check.execute(c)
            assert ran == want, order
    finally:
        for name in ("first-reg", "second-reg"):
            gpu_core.STEP_REGISTRY.pop(name, None)
            gpu_core.CAPS.pop(name, None)
    with pytest.raises(Exception, match="--order must be priority or listed"):
        gpu_check.GpuCheck().config({"order": "random", "device": "cpu"})


def test_benchmarks_gpu_section_renders_the_cudagraph_steps_and_judges_issues_65_66(tmp_path):
    """The cudagraph engine's own steps (fused-step, natural-eos, quantised, parity-scale) in section 6, and the
    targets of issues 65 / 66 each from the check's figures: a decoder step above 3× its floor, an fp8 classifier
    fast enough but not bit-invariant, parity cells too few, and a bar passed are each judged as they are."""
    _synthetic_gpu_check(tmp_path)
    path = tmp_path / "gpu-check-cuda.json"
    doc = json.loads(path.read_text())
    p = doc["payload"]
    p["steps"] += [{"step": s, "status": "ok", "detail": ""} for s in ("fused-step", "natural-eos", "quantised",
                                                                        "parity-scale")]
    step = {"precision": "bf16", "median_ms": 1.2, "times_floor_at_copy_bandwidth": 4.5, "rows_identical_to_off_pct": 100.0,
            "kernels": {"kernels_per_call": 233.0}, "capture_s": 0.4}
    p["cudagraph"] = {
        "fused-step": {"rows": [8, 20, 64, 48], "copy_bytes_per_s": 4.2e12, "shapes": {
            "base": {"generator": "g", "bf16_off": {**step, "fused": "off"},
                     "bf16_compile": {**step, "fused": "compile", "times_floor_at_copy_bandwidth": 2.5}},
            "large": {"generator": "g", "bf16_off": {**step, "fused": "off", "times_floor_at_copy_bandwidth": 9.2}}}},
        "natural-eos": {"prompts": 64, "k": 20, "max_new_tokens": 40, "rounds": 3, "reference": "torch:fp32",
                        "engines": {"torch:fp32": {"median_s": 0.76, "seconds": [0.72, 0.76, 0.96], "mean_length": 19.6,
                                                   "ended_by_eos_pct": 62.3, "identical_to_first_pct": 100.0,
                                                   "tokens_per_s": 32936},
                                    "cudagraph:bf16": {"error": "RuntimeError: boom"}}},
        "quantised": {"model": "roberta-large", "pairs": 512, "bucket": [512, 128], "speedup_vs_bf16": {"fp8": 1.7},
                      "precisions": {"bf16": {"speed": {"pairs_per_s": 5000}, "labels_agree_pct": 99.8,
                                              "max_abs_logit_diff_vs_torch_fp32": 0.02, "alone_vs_call_max_abs_diff": 0.01},
                                     "fp8": {"speed": {"pairs_per_s": 8500}, "labels_agree_pct": 99.9,
                                             "max_abs_logit_diff_vs_torch_fp32": 0.2, "alone_vs_call_max_abs_diff": 4e-7,
                                             "compute": {"product_kernels": {"scaled_mm": 96}}}}}}
    acc = lambda label, ref, x, eq: {**_bench_engine(label, ref, x, 1000.0 * x, 0.0, {}),  # noqa: E731
                                     "parity": {"verdicts": {"equivalent": eq, "different": 0, "inconclusive": 0,
                                                             "too_small": 0},
                                                "headline": {"records": {"identical_pct": 99.5,
                                                                         "label_agreement_pct": 99.5}}}}
    bf16 = acc("cudagraph:bf16", False, 1.1, 1)
    verdict = lambda v, small=False: {"accuracy (p, h)": {"verdict": v, **({"too_small": True} if small else {})}}  # noqa: E731
    bf16["parity"]["headline"]["by"] = {  # a category: only the group where it holds counts (the complement not)
        "negation_logic": {"kind": "category", "groups": [
            {"group": "negation_logic", "value": "1", "examples": 900, "metrics": verdict("equivalent")},
            {"group": "not negation_logic", "value": "0", "examples": 9000, "metrics": verdict("equivalent")}]},
        "taxonomic_knowledge": {"kind": "category", "groups": [
            {"group": "taxonomic_knowledge", "value": "1", "examples": 34, "metrics": verdict("inconclusive", True)},
            {"group": "not taxonomic_knowledge", "value": "0", "examples": 9866, "metrics": verdict("equivalent")}]}}
    p["parity_scale"] = {"data": {"name": "taxinli", "examples": 10071}, "models": {"classifier": "mini-nli"},
                         "reference": "torch:fp32", "workload": {}, "probe": "accuracy",
                         "engines": [acc("torch:fp32", True, 1.0, 0), acc("cudagraph:fp32", False, 0.7, 1), bf16]}
    path.write_text(json.dumps(doc))
    section = _gpu_section(tmp_path)
    assert "| base | bf16, fused=compile | 1.200 ms | 2.5× | 233 | 100.0 % | 0.4 s |" in section
    assert "| torch:fp32 | 0.760 s (0.720-0.960) | reference | 19.6 | 62.3 % | 100.0 % | 32936 |" in section
    assert "| cudagraph:bf16 | – | – | – | – | – | failed: RuntimeError: boom |" in section
    assert "| fp8 | 8500 | 1.70× | 99.9 % | 0.2 | 4e-07 | scaled_mm 96 |" in section
    assert "| cudagraph:bf16 | 1100 | 1.10× | 99.50 % | 99.50 % | 2 / 0 / 1 (1) |" in section  # overall + 2 categories
    targets = section.split("Issues 65 and 66's targets")[1]
    assert "| base shapes: the bf16 decoder step (160 rows) ≤ 3× its bandwidth floor | 2.5× (fused-step, the faster mode) | met |" in targets
    assert "| large shapes: the bf16 decoder step (160 rows) ≤ 3× its bandwidth floor | 9.2× (fused-step, the faster mode) | **not met** |" in targets
    assert "| mini models: the fp32 classifier ≥ 1.0× eager at every bucket | 0.70×" in targets and "**not met**" in targets
    assert ("| the fp8 classifier ≥ 1.6× cudagraph bf16 at the largest bucket, batch-invariant to the bit | 1.70×; alone "
            "vs in one call 4e-07 | **not met** |") in targets
    assert ("≥ 1,000 pairs (10071): ≥ 10 cells equivalent, none different | 2 equivalent, 0 different of 3 cells "
            "(overall and per group); labels 99.50 % as torch fp32 | **not met** |") in targets


def test_an_option_value_that_starts_with_a_dash_is_read_as_the_value():
    """``--bench-args --interleave``: argparse alone reads the value as another option and refuses the line; the
    measurement's parser joins it to its option, and the command it writes back (a suite entry's, the result
    file's) gives the same values again. A flag of the measurement itself stays an option."""
    from breaknli_fast.suite.args import argv_of
    from breaknli_fast.suite.registry import get_measurement
    from breaknli_fast.suite.runner import parse_measurement_args

    m = get_measurement("gpu-check")
    for argv in (["--bench-args", "--interleave", "--budget", "330"], ["--bench-args=--interleave", "--budget", "330"]):
        values = parse_measurement_args(m, argv)
        assert values == {"bench_args": "--interleave", "budget": 330}
        again = argv_of(m.arguments(values), values)
        assert "--bench-args=--interleave" in again and parse_measurement_args(m, again) == values
    with pytest.raises(Exception, match="--bench-args: expected one argument"):
        parse_measurement_args(m, ["--bench-args", "--budget", "330"])
