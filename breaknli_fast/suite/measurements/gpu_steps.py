"""The GPU check's built-in steps (:mod:`.gpu_check` lists them in its notes): each a function of the check
registered with :func:`~breaknli_fast.suite.measurements.gpu_core.step` (its cap, the least time worth starting it
with, whether it is timed or needs the GPU, its place in the queue), in the order ``--steps`` lists them; and what
they share: bench-mini's --limit estimate, the background reference's threads, the environment probe.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from breaknli_fast.suite.measurements.gpu_core import (
    BENCH_ENGINE_EXTRA_S, BENCH_ENGINES, BENCH_LOOP_EXTRA, BENCH_START_S, Check, CUDAGRAPH_CHECK, load_json,
    MINI_BENCH_ARGS, MINI_REPEATS, PARITY_DATASET, PARITY_ENGINES, REAL_BENCH_ARGS, Record, run_rows, RUN_START_S,
    step)


def bench_limit(c: Check, run: Path, seconds: float | None) -> tuple[str, str]:
    """bench-mini's --limit: the examples the device fp32 run's loop rate fits into the step's cap."""
    rows, _, done = run_rows(run)
    loop_s = None
    try:
        loop_s = float(json.loads((run / "report.json").read_text())["throughput"]["wall_seconds"])
    except (OSError, KeyError, TypeError, ValueError, json.JSONDecodeError):
        if seconds:
            loop_s = max(1.0, seconds - RUN_START_S)
    if not rows or not loop_s:
        return str(c.args.limit), "the device fp32 run left no rate: --limit as given"
    rate = rows / loop_s
    avail = min(c.cap("bench-mini")[0], c.left()) * 0.8  # a fifth kept against a wrong estimate
    engines = len(BENCH_ENGINES.split(","))
    fit = int(rate * ((avail - BENCH_START_S) / engines - BENCH_ENGINE_EXTRA_S) / (MINI_REPEATS + BENCH_LOOP_EXTRA))
    why = (f"the device fp32 run did {rows} examples in {loop_s:.1f}s of loop ({rate:.1f}/s): "
           f"{max(fit, 0)} fit {engines} engines into {avail:.0f}s")
    if done and fit >= rows:
        return str(c.args.limit), why + f"; all {rows} of the run's examples"
    return str(max(32, min(fit, rows) if rows else fit)), why


def cpu_threads() -> tuple[int, int]:
    """The background CPU reference's threads and workers: the cores less four (the GPU runs' processes and
    tokenizers), two threads per worker."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    threads = max(1, cores - 4)
    return threads, max(1, threads // 2)


def probe_env(path: Path) -> None:
    """The environment probe, run in its own process (the check itself never imports torch): env.json."""
    import importlib.metadata as md
    import importlib.util

    import breaknli_fast
    from breaknli_fast.envinfo import environment

    def has(mod: str) -> bool:
        try:
            return importlib.util.find_spec(mod) is not None
        except (ImportError, ValueError):
            return False

    out: dict[str, Any] = {"environment": environment(),
                           "package_path": str(Path(breaknli_fast.__file__).resolve().parent),
                           "optimum": has("optimum.onnxruntime"),
                           "distributions": sorted({f"{d.metadata['Name']}=={d.version}" for d in md.distributions()
                                                    if d.metadata["Name"]}, key=str.lower)}
    import torch

    from breaknli_fast.engines.cuda import tf32_state

    cuda: dict[str, Any] = {"available": torch.cuda.is_available(), "torch": torch.__version__,
                            "torch_cuda_build": torch.version.cuda}
    if cuda["available"]:
        cuda["devices"] = []
        for i in range(torch.cuda.device_count()):
            prop = torch.cuda.get_device_properties(i)
            cuda["devices"].append({"name": prop.name, "capability": list(torch.cuda.get_device_capability(i)),
                                    "memory_gib": round(prop.total_memory / 2**30, 1)})
        cuda["cudnn"] = torch.backends.cudnn.version()
        cuda["tf32_as_found"] = tf32_state()  # before any engine set them
    out["cuda"] = cuda
    path.write_text(json.dumps(out, indent=2, default=str) + "\n")


# -- the built-in steps, in the order --steps lists them -------------------------------------------------------

@step("env", cap=45, need=10, start=True)
def _env(c: Check) -> None:
    code = f"from pathlib import Path; from {__name__} import probe_env; probe_env(Path({str(c.work / 'env.json')!r}))"
    rec = c.run("env", [[c.py, "-c", code]])
    smi = c.work / "nvidia-smi.txt"
    try:
        r = subprocess.run(["nvidia-smi"], capture_output=True, text=True, timeout=20)
        smi.write_text(r.stdout + r.stderr)
    except (OSError, subprocess.SubprocessError) as e:
        smi.write_text(f"nvidia-smi: {e}\n")
    env = load_json(c.work / "env.json") or {}
    cuda = env.get("cuda") or {}
    if rec.status == "ok":
        rec.detail = (f"torch {cuda.get('torch')} (CUDA build {cuda.get('torch_cuda_build')}); GPU: "
                      + (", ".join(d["name"] for d in cuda.get("devices") or []) or "none visible")
                      + f"; breaknli_fast from {env.get('package_path')}; optimum: {env.get('optimum')}")
        c.say(f"env: {rec.detail}")
    if c.tag == "cuda" and env and not cuda.get("available"):
        c.record(Record("device", "failed", f"--device {c.args.device} but torch {cuda.get('torch')} sees no CUDA GPU"))
        c.notes["no_gpu"] = True


@step("cpu-reference", cap=210, need=30, start=True)
def _cpu_reference(c: Check) -> None:
    cmd = c.run_cmd("reference-cpu-torch-fp32", "fp32", "cpu")
    if c.tag == "cpu" and not c.args.reference_background:
        c.run("cpu-reference", [cmd], partial_ok=True)
    else:
        threads, workers = cpu_threads()
        c.start_background("cpu-reference", cmd + ["--threads", str(threads), "--workers", str(workers)])


@step("cuda-tests", cap=100, need=30, gpu=True, priority=40)
def _cuda_tests(c: Check) -> None:
    c.run("cuda-tests", [[c.py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "cuda", "-rs",
                          "tests/test_cuda.py", "--junitxml", str(c.work / "pytest-cuda.xml")]])


@step("device-fp32", cap=100, need=30, gpu=True, priority=50)
def _device_fp32(c: Check) -> None:
    c.device_run("device-fp32", c.fp32.name, "fp32")


@step("bench-mini", cap=150, need=60, timed=True, gpu=True, priority=60)
def _bench_mini(c: Check) -> None:
    limit, why = bench_limit(c, c.fp32, (c.notes.get("run_seconds") or {}).get(c.fp32.name))
    c.notes["bench_mini_limit"] = {"limit": limit, "why": why}
    c.say(f"bench-mini: --limit {limit} ({why})")
    c.run("bench-mini", [c.bench_cmd("bench-mini", limit, MINI_BENCH_ARGS)], detail=f"--limit {limit}")


def _bench_shapes(c: Check, name: str, shapes: str, engines: str, flag: str) -> None:
    if shapes.lower() in ("", "none"):
        c.skip(name, f"{flag} none" + (" (the default with --device cpu: real shapes on the CPU are the real-shapes "
                                       "measurement's)" if c.tag == "cpu" else ""))
        return
    extra = ["--random-weights", shapes, "--repeats", str(c.args.real_repeats), *REAL_BENCH_ARGS]
    c.run(name, [c.bench_cmd(name, str(c.args.real_limit), extra, engines)],
          detail=f"--random-weights {shapes} --limit {c.args.real_limit} --engines {engines}")


@step("bench-real", cap=150, need=45, timed=True, gpu=True, priority=10)
def _bench_real(c: Check) -> None:
    _bench_shapes(c, "bench-real", c.args.real_shapes, c.args.real_engines, "--real-shapes")


@step("bench-large", cap=180, need=60, timed=True, gpu=True, priority=20)
def _bench_large(c: Check) -> None:
    _bench_shapes(c, "bench-large", c.args.large_shapes, c.args.large_engines, "--large-shapes")


@step("bounds", cap=120, need=40, timed=True, gpu=True, priority=30)
def _bounds(c: Check) -> None:
    shapes = c.args.bound_shapes or ("base,large" if c.tag == "cuda" else "mini")
    c.run("bounds", [c.measure_cmd("gpu-bounds", c.work / "bounds.json",
                                   ["--device", c.args.device, "--shapes", shapes])], detail=f"--shapes {shapes}")


@step("device-bf16", cap=80, need=25, gpu=True, priority=70)
def _device_bf16(c: Check) -> None:
    c.device_run("device-bf16", f"device-{c.tag}-torch-bf16", "bf16")


@step("device-fp16-classifier", cap=80, need=25, gpu=True, priority=80)
def _device_fp16_classifier(c: Check) -> None:
    c.device_run("device-fp16-classifier", f"device-{c.tag}-torch-fp16-classifier", "fp32",
                 ["--classifier-precision", "fp16"])


@step("parity", cap=30, need=10, priority=90, after_reference=True)
def _parity(c: Check) -> None:
    ref = c.runs / "reference-cpu-torch-fp32"
    cmds, what = [], []
    if run_rows(ref)[1] and run_rows(c.fp32)[1]:
        cmds.append(c.measure_cmd("compare-runs", c.work / "parity-cpu.json",
                                  ["--reference", str(ref), "--run", str(c.fp32)]))
        what.append("device fp32 vs the CPU reference")
    others = [c.runs / f"device-{c.tag}-torch-{p}" for p in ("bf16", "fp16-classifier")]
    others = [r for r in others if run_rows(r)[1]]
    if run_rows(c.fp32)[1] and others:
        cmds.append(c.measure_cmd("compare-runs", c.work / "parity-device.json",
                                  ["--reference", str(c.fp32)] + [w for r in others for w in ("--run", str(r))]))
        what.append(f"{len(others)} run(s) vs device fp32")
    if not cmds:
        c.skip("parity", "no pair of runs with records to compare")
        return
    # a run that does not pass is a verdict in the comparison's file, reported, not a failure of the step
    rec = c.run("parity", cmds, detail="; ".join(what))
    rec.detail = "; ".join(what) if rec.status == "ok" else rec.detail


# not yet run on a GPU (estimates): the compile of the fused layer per shape and precision, the random-weight T5's
# end-of-sequence factor found by bisection, four classifiers of the mini model, a bench of 4 engines
def _cudagraph_check(c: Check, name: str, *extra: str) -> None:
    c.run(name, [[c.py, "-c", CUDAGRAPH_CHECK, name, "--device", c.args.device, "--out", str(c.work / f"{name}.json"),
                  "--cache-dir", str(c.work / "cache" / "random-weights"), *extra]])


@step("fused-step", cap=240, need=60, timed=True, gpu=True, priority=32)
def _fused_step(c: Check) -> None:
    _cudagraph_check(c, "fused-step")


@step("natural-eos", cap=150, need=45, timed=True, gpu=True, priority=34)
def _natural_eos(c: Check) -> None:
    _cudagraph_check(c, "natural-eos", "--shapes", "mini" if c.tag == "cpu" else "base")


@step("quantised", cap=120, need=30, timed=True, gpu=True, priority=36)
def _quantised(c: Check) -> None:
    _cudagraph_check(c, "quantised", "--shapes", "mini" if c.tag == "cpu" else "large")


@step("parity-scale", cap=150, need=45, timed=True, gpu=True, priority=38)
def _parity_scale(c: Check) -> None:
    limit = str(c.args.limit) if c.tag == "cpu" else "0"  # on a GPU every pair of TaxiNLI (10,071)
    cmd = c.bench_cmd("bench-parity", limit, ["--probe", "accuracy", "--dataset", PARITY_DATASET], PARITY_ENGINES)
    for flag in ("--gen-prompts", "--greedy-prompts"):  # --bench-args' options of the BreakNLI loop only
        while flag in cmd:
            del cmd[cmd.index(flag):cmd.index(flag) + 2]
    c.run("parity-scale", [cmd], detail=f"--dataset {PARITY_DATASET} --limit {limit} --engines {PARITY_ENGINES}")
