"""What a new user tripped on (issue 63), each watched from outside the process: unbounded requests refused in one
line before anything loads, with no growth of threads or memory; a backend or probe plugin that does not import
reported by ``env`` in one line and ignored by every other command."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
IMPORT_BOUND_S = 30.0  # generous: the CLI's own import on a loaded 2-core machine; a model load would not fit anyway


def _status(pid: int) -> tuple[int, int] | None:
    """(threads, resident KiB) of a running process, from /proc."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                      if ":" in line)
        return int(fields["Threads"]), int(fields["VmRSS"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def watch(args: list[str], env: dict[str, str] | None = None, timeout: float = 120.0) -> dict:
    """Run the CLI with ``args`` in a process of its own and watch it: exit code, stderr, wall time, the peak
    thread count and resident memory seen while it ran (sampled every 10 ms)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-m", "breaknli_fast.cli", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            env={**os.environ, "COLUMNS": "200", **(env or {})})
    peak_threads = peak_kib = 0
    while proc.poll() is None and time.monotonic() - t0 < timeout:
        got = _status(proc.pid)
        if got:
            peak_threads, peak_kib = max(peak_threads, got[0]), max(peak_kib, got[1])
        time.sleep(0.01)
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    return {"rc": proc.returncode, "out": out, "err": err, "wall_s": time.monotonic() - t0,
            "threads": peak_threads, "rss_mib": peak_kib / 1024}


UNBOUNDED = [
    (["run", "--threads", "1000000"], "--threads 1000000: at most"),
    (["run", "--decoding", "beam", "--num-beams", "100000"], "--num-beams) 100000: at most 1000"),
    (["run", "--max-new-tokens", "100000000"], "--max-new-tokens) 100000000: at most 512"),
    (["bench", "--scenario", "server", "--target-qps", "1e9", "--target-latency-ms", "100"],
     "--target-qps 1e+09: at most"),
    (["bench", "--scenario", "single-stream", "--min-duration", "1e9"], "--min-duration 1e+09: at most 3600"),
    (["bench", "-e", "ort:int8:workers=1000000"], "workers= 1000000: at most"),
]


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="watches the process through /proc (Linux)")
@pytest.mark.parametrize("args,message", UNBOUNDED, ids=[" ".join(a[:3]) for a, _ in UNBOUNDED])
def test_an_unbounded_request_is_refused_in_one_line_before_anything_loads(args, message, tmp_path):
    out = tmp_path / "out"
    r = watch([*args, "--out", str(out)])
    lines = [ln for ln in r["err"].splitlines() if ln.strip()]
    assert r["rc"] == 2, r
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r["err"]
    assert "(" in lines[0].split("at most", 1)[-1], lines[0]  # the bound says why
    assert not out.exists()  # no run or bench folder: nothing ran
    assert r["wall_s"] < IMPORT_BOUND_S, r["wall_s"]
    # the CLI's own interpreter and imports only: no worker threads made, no model or LoadGen queries in memory
    assert r["threads"] < 64 and r["rss_mib"] < 1500, r


def test_the_bounds_hold_in_the_python_api_too():
    from breaknli_fast.bench.loadgen.settings import ScenarioSettings
    from breaknli_fast.engines.base import Decoding
    from breaknli_fast.errors import UserError
    from breaknli_fast.limits import MAX_PREPARED, max_threads
    from breaknli_fast.study.loading import EngineConfig
    from breaknli_fast.study.options import RunOptions

    with pytest.raises(UserError, match="at most"):
        RunOptions(threads=max_threads() + 1).check()
    RunOptions(threads=max_threads()).check()
    with pytest.raises(UserError, match="must be a number or 'auto'"):
        EngineConfig(extra={"clf.workers": "abc"}).check()
    with pytest.raises(ValueError, match="at most 512"):
        Decoding(max_new_tokens=513)
    with pytest.raises(ValueError, match="at most 1000"):
        Decoding(strategy="beam", num_beams=1001)
    with pytest.raises(UserError, match="hold them in memory"):  # arrival rate x duration: the queries prepared
        ScenarioSettings(("server",), target_qps=MAX_PREPARED / 10 + 1, target_latency_ms=100,
                         min_duration_s=10).check()
    ScenarioSettings(("server",), target_qps=MAX_PREPARED / 10, target_latency_ms=100, min_duration_s=10).check()


# -- a plugin that does not import -------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def broken_site(tmp_path_factory) -> dict[str, str]:
    """A package installed beside this one whose backend and probe entry points name a module that raises."""
    site = tmp_path_factory.mktemp("site")
    dist = site / "breaknli_fast_brokenplugin-0.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: breaknli-fast-brokenplugin\nVersion: 0.3\n")
    (dist / "entry_points.txt").write_text("[breaknli_fast.backends]\nbroken = plugins.broken_plugin\n\n"
                                           "[breaknli_fast.probes]\nbroken-probe = plugins.broken_plugin:Probe\n")
    return {"PYTHONPATH": os.pathsep.join([str(site), str(TESTS), os.environ.get("PYTHONPATH", "")])}


def test_help_works_with_a_broken_plugin(broken_site):
    for args in (["--help"], ["run", "--help"], ["bench", "--help"], ["export", "--help"]):
        r = watch(args, broken_site)
        assert r["rc"] == 0 and "Traceback" not in r["err"], (args, r["err"])
    r = watch(["run", "--help"], broken_site)
    assert "broken-probe" not in r["out"] and "accuracy" in r["out"]  # --probe lists the probes that import


def test_env_reports_a_broken_plugin_in_one_line(broken_site):
    r = watch(["env"], broken_site)
    assert r["rc"] == 0 and "Traceback" not in r["err"], r["err"]
    text = " ".join(r["out"].split())
    assert "backend broken" in text and "probe broken-probe" in text
    assert "does not import: ImportError: this plugin is broken on purpose" in text
    assert "breaknli-fast-brokenplugin 0.3" in text  # the package and version of an installed plugin
    info = __import__("json").loads(watch(["env", "--json"], broken_site)["out"])
    assert {"ctranslate2", "openvino", "mlcommons-loadgen", "ray", "spacy"} <= set(info["packages"])
    assert {"kind": "backend", "name": "broken", "module": "plugins.broken_plugin",
            "package": "breaknli-fast-brokenplugin", "version": "0.3"} in info["plugins"]
    assert info["broken_plugins"]["backend broken"].startswith("the broken backend (plugins.broken_plugin) does not")


def test_run_on_another_engine_works_with_a_broken_plugin(broken_site, tmp_path):
    r = watch(["run", "--probe", "accuracy", "-e", "torch", "-n", "4", "--out", str(tmp_path / "run")], broken_site,
              timeout=300)
    assert r["rc"] == 0 and "Traceback" not in r["err"], r["err"]
    r = watch(["run", "--probe", "accuracy", "-e", "broken", "-n", "4", "--out", str(tmp_path / "b")], broken_site)
    lines = [ln for ln in r["err"].splitlines() if ln.strip()]
    assert r["rc"] == 2 and len(lines) == 1 and "the broken backend (plugins.broken_plugin) does not import" in lines[0]


def test_auto_and_the_export_formats_skip_a_broken_backend(monkeypatch):
    from breaknli_fast.engines import registry

    monkeypatch.syspath_prepend(str(TESTS))
    registry.register("broken", "plugins.broken_plugin")
    try:
        monkeypatch.setitem(registry._ENGINES, "ort", "plugins.broken_plugin")  # auto's first choice broken too
        assert registry.resolve_engine("auto") == "torch"
        assert "broken" in registry.broken_backends() and "ort" in registry.broken_backends()
        assert "onnx" not in registry.export_formats() and registry.declared_packages()
    finally:
        registry._ENGINES.pop("broken", None)


# -- bench refuses what run refuses, before the reference runs ---------------------------------------------------

@pytest.mark.parametrize("args,message", [
    (["-e", "ort:int8:workers=abc"], "engine 'ort:int8:workers=abc': workers= must be a number or 'auto'"),
    (["-e", "mlm=ort:fp32"], "the breaknli probe has no masked LM"),
    (["-e", "ort:int8:mlm.precision=fp32"], "mlm.precision=: the breaknli probe has no masked LM"),
    (["--probe", "merge", "-e", "cudagraph:fp32"], "the cudagraph engine has no mask-filler role"),
    (["-e", "openvino:fp16"], "the openvino engine's classifier runs fp32, bf16 or int8 on cpu, not 'fp16'"),
    (["-e", "ct2:fp16"], "the ct2 engine's generator runs fp32 or int8 on cpu, not 'fp16'"),
    (["--probe", "accuracy", "-e", "gen=ort:fp32/clf=torch:fp32"], "the accuracy probe has no generator"),
])
def test_bench_refuses_what_run_refuses_before_the_reference_runs(args, message, tmp_path, monkeypatch):
    from typer.testing import CliRunner

    import breaknli_fast.bench.runner as runner_module
    from breaknli_fast.cli import app

    monkeypatch.setattr(runner_module, "run_bench", lambda *a, **k: pytest.fail("the bench ran"))
    r = CliRunner().invoke(app, ["bench", *args, "--out", str(tmp_path / "b")])
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and message in " ".join(r.output.split()), r.output
    assert not (tmp_path / "b").exists()


def test_the_hint_of_a_missing_role_is_a_bench_entry_in_bench():
    from breaknli_fast.bench.options import BenchOptions
    from breaknli_fast.errors import UserError

    with pytest.raises(UserError, match=r"in --engines, mlm=torch:fp32/clf=cudagraph:fp32 runs the mlm"):
        BenchOptions(probe="merge", engines="cudagraph:fp32").check()
    BenchOptions(probe="merge", engines="mlm=torch:fp32/clf=cudagraph:fp32").check()  # the hint itself is accepted


# -- make test on a fresh clone: SentencePiece trains once, on one thread ---------------------------------------

def test_the_t5_tokenizer_is_trained_once_per_process_on_one_thread(tmp_path, monkeypatch):
    """SentencePiece's trainer aborted a whole test run (``Fatal Python error: Aborted`` in train_spm_tokenizer
    while other runtimes' threads were alive): it trains on one thread, once per corpus, later calls copy it."""
    import sentencepiece as spm

    from breaknli_fast.engines import random_weights

    calls = []
    real = spm.SentencePieceTrainer.train
    monkeypatch.setattr(spm.SentencePieceTrainer, "train", lambda **kw: calls.append(kw) or real(**kw))
    monkeypatch.setattr(random_weights, "_SPM_TRAINED", {})
    texts = [f"sentence number {i} of a tiny corpus." for i in range(50)]
    a = random_weights.train_spm_tokenizer(tmp_path / "a", texts, vocab_size=60)
    b = random_weights.train_spm_tokenizer(tmp_path / "b", texts, vocab_size=60)
    assert len(calls) == 1 and calls[0]["num_threads"] == 1
    assert a("sentence number 7").input_ids == b("sentence number 7").input_ids and len(a) == len(b)
    random_weights.train_spm_tokenizer(tmp_path / "c", texts[:40], vocab_size=60)  # another corpus: trained
    assert len(calls) == 2


# -- smaller items -------------------------------------------------------------------------------------------------

def test_an_engine_named_twice_is_measured_twice_and_said_so():
    from breaknli_fast.bench.options import BenchOptions
    from breaknli_fast.bench.runner import plan_bench

    logged: list[str] = []
    cfg = BenchOptions(probe="accuracy", engines="torch:fp32,torch:fp32,ort:int8,ort:int8", limit=4).bench_config()
    plan = plan_bench(cfg, logged.append)
    said = [n for n in plan.notes if "named 2 times" in n]
    assert [s.split(" is named")[0] for s in said] == ["torch:fp32", "ort:int8"], plan.notes
    assert "as ort:int8, ort:int8#2" in said[1] and said[1] in logged


def test_a_run_of_another_probe_in_the_directory_is_named_not_dumped(tmp_path):
    import json

    from breaknli_fast.study.rundir import RunDir, RunDirError

    d = tmp_path / "run"
    d.mkdir()
    (d / "config.json").write_text(json.dumps({"identity": {"probe": "breaknli", "loop": {"k": 20, "u": 10}}}))
    (d / "samples.jsonl").write_text('{"id": "1"}\n')
    with pytest.raises(RunDirError) as e:
        RunDir(d).check({"probe": "permutation", "permutation": {"q": 100}})
    assert str(e.value) == (f"{d} holds a run of the breaknli probe, not of permutation; use another --out, or "
                            "--overwrite to replace it")


def test_an_error_line_stands_alone_on_stderr(tmp_path):
    """No empty line before ``error:`` (the progress display, started before the error, left one where stderr is
    no terminal)."""
    r = watch(["run", "-d", str(tmp_path / "missing.tsv"), "--out", str(tmp_path / "out")])
    assert r["rc"] == 2 and r["out"] == "" and r["err"] == f"error: dataset file {tmp_path / 'missing.tsv'} does " \
        "not exist\n", repr(r["err"])


def test_docs_limits_lists_every_bound_of_the_code():
    """docs/limits.md gives each bound of breaknli_fast/limits.py with the value the code holds."""
    from breaknli_fast import limits

    text = (ROOT / "docs" / "limits.md").read_text()
    for value in (limits.MAX_NEW_TOKENS, limits.MAX_BEAMS, limits.MAX_GEN_BATCH, limits.MAX_BATCH_PAIRS,
                  limits.MAX_TOKEN_BUDGET, limits.MAX_PREPARED, int(limits.MAX_TARGET_QPS), int(limits.MAX_MIN_DURATION_S),
                  limits.MAX_REPEATS, limits.MAX_WARMUP, limits.MAX_MIN_ITERATIONS, int(limits.MAX_MIN_SECONDS)):
        assert f"{value:,}" in text or str(value) in text, value
    assert f"{limits.THREADS_PER_CORE} per CPU core" in text
