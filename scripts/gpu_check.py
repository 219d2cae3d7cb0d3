"""The GPU check in one call, for a lent machine with a CUDA GPU and no network (docs/stack.md, "GPU").

A script, not a bench option: it runs many steps (tests, runs, benches, bounds) in one time budget on a lent GPU
machine and collects their files.

    scripts/gpu_check.sh [--out DIR] [--device cuda|cuda:N|cpu] [--limit N] [--budget S] [--steps A,B,...]
                         [--real-shapes SPEC|none] [--real-limit N] [--bench-args "ARGS"] [--work DIR]
                         [--cap-scale F] [--reference-background] [-- RUN_ARGS...]

Nothing is installed: the machine's own Python runs this checkout from PYTHONPATH (gpu_check.sh sets it). The steps,
in this order, each under a hard time cap (its process group is stopped there) and skipped, saying so, when less
time is left in --budget than it needs:

  env                     versions, packages, the GPU, torch's TF32 defaults (env.json), nvidia-smi
  cpu-reference           torch fp32 on the CPU: the reference of the kernels; on CUDA it runs in the background on
                          the cores the GPU runs leave, and whatever it finished by its cap is compared
  cuda-tests              pytest -m cuda tests/test_cuda.py
  device-fp32             torch fp32 on --device: the reference of the precisions (TF32 off: engines/cuda.py)
  bench-mini              breaknli-fast bench --device D on the mini models: torch fp32 / bf16 / fp16 classifier
                          (generator fp32: T5 overflows in fp16) and the cudagraph engine at fp32 / bf16, parity
                          verdicts against torch fp32 on the device; its --limit is what the device-fp32 run's rate
                          fits into the step's cap (--limit as given where that run did not run)
  bench-real              random-weight real shapes (--real-shapes, default flan-t5-base + roberta-base; speed only):
                          torch fp32 eager against the cudagraph engine at fp32 and bf16 (--real-engines), the
                          end-to-end loop repeated (--real-repeats) and its median taken
  bench-large             the same on flan-t5-large + roberta-large (--large-shapes, --large-engines)
  bounds                  scripts/gpu_bounds.py: the cudagraph engine's largest classifier bucket against the GPU's
                          peak FLOP/s and its decoder step against its memory-bandwidth floor, base and large shapes
  device-bf16             torch bf16 on --device
  device-fp16-classifier  the classifier at fp16, the generator at fp32, on --device
  parity                  scripts/compare_runs.py: device fp32 against the CPU reference (fp32 tolerances), bf16 and
                          fp16 against device fp32 (the bench's verdicts)
  fused-step, natural-eos, quantised
                          the cudagraph engine's own checks (breaknli_fast/backends/cudagraph/check.py, each one
                          JSON file): the decoder step written for fusion and compiled against the plain one (time,
                          kernels, bytes), generation ended by the end-of-sequence token at real shapes (torch fp32
                          against cudagraph fp32 / bf16, interleaved), the fp8 / int8 classifier against bf16
  parity-scale            breaknli-fast bench --probe accuracy on the mini models: torch fp32 against cudagraph fp32,
                          bf16 and fp8 on the device, every pair of the sample (--limit on the CPU)

The timed steps (the benches) never run beside the background CPU reference: the untimed device runs go first
while it runs. At the end, whatever happened, at most 8 files are written to --out (default $OUT when it is set):
gpu-check.json (a result file with provenance: scripts/provenance.py, kind gpu_check), summary.md, gpu-check.log and
tarballs of the run directories and benches (runs-reference.tar.gz, runs-precisions.tar.gz, check.tar.gz), each
under 16 MiB. The work folder (--work, default a new temporary folder) keeps everything.

--device cpu runs every step on the CPU (a dry run; tests/test_gpu_check.py runs it with tiny limits). Arguments
after -- go to every `breaknli-fast run` and `bench` (probe options such as --k 8); --bench-args to both benches
only. The commit is BREAKNLI_FAST_COMMIT's where it is set, else git's. BREAKNLI_FAST_TF32=1 asks for
TF32 (recorded). Exit 0 when no step failed, 1 otherwise, 2 on a bad option.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tarfile
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

STEPS = ("env", "cpu-reference", "cuda-tests", "device-fp32", "bench-mini", "bench-real", "bench-large", "bounds",
         "device-bf16", "device-fp16-classifier", "parity", "fused-step", "natural-eos", "quantised", "parity-scale")
# seconds: (cap, the least worth starting with). On an H200 (gpu-check-h200*.json): env 7, cuda-tests 26-30,
# device-fp32 67 (all 2,724 examples), the CPU reference 165 in the background, bench-mini 128 at --limit 738,
# bench-real 64-68, parity 2; the bf16 and fp16-classifier runs do the fp32 run's work, so they get 80
CAPS = {"env": (45, 10), "cpu-reference": (210, 30), "cuda-tests": (100, 30), "device-fp32": (100, 30),
        "bench-mini": (150, 60), "bench-real": (150, 45), "bench-large": (180, 60), "bounds": (120, 40),
        "device-bf16": (80, 25), "device-fp16-classifier": (80, 25), "parity": (30, 10),
        # not yet run on a GPU (estimates): the compile of the fused layer per shape and precision, the random-weight
        # T5's end-of-sequence factor found by bisection, four classifiers of the mini model, a bench of 4 engines
        "fused-step": (240, 60), "natural-eos": (150, 45), "quantised": (120, 30), "parity-scale": (150, 45)}
# the cudagraph engine's checks: its module's main, given the bench's random-weight builder for the real shapes
CUDAGRAPH_CHECK = ("import sys; from breaknli_fast.bench.shapes import build_random_model as build; "
                   "from breaknli_fast.backends.cudagraph.check import main; sys.exit(main(sys.argv[1:], build))")
PARITY_ENGINES = "torch:fp32,cudagraph:fp32,cudagraph:bf16,cudagraph:fp8"  # parity-scale's (fp8: on the CPU emulated)
RESERVE_S = 25  # kept at the end of --budget for the result file and the tarballs
DEFAULT_BUDGET = 480  # fits `timeout 540` on the lent machine, start-up and transfers aside
DEFAULT_REAL_SHAPES = "flan-t5-base,roberta-base"
DEFAULT_LARGE_SHAPES = "flan-t5-large,roberta-large"
# bench-mini's engines: torch fp32 (its reference), bf16, fp16 for the classifier only, the cudagraph engine
BENCH_ENGINES = "torch:fp32,torch:bf16,torch:fp16:gen.precision=fp32,cudagraph:fp32,cudagraph:bf16"
REAL_ENGINES = "torch:fp32,cudagraph:fp32,cudagraph:bf16"  # bench-real's
LARGE_ENGINES = "torch:fp32,cudagraph:bf16"  # bench-large's
# the real-shape benches' timing: the end-to-end loop 3 times (its median; a CUDA graph's capture for a new shape
# falls in one run), the fixed-workload stages at least twice, batch invariance on 200 pairs
REAL_BENCH_ARGS = ["--min-iterations", "2", "--min-seconds", "0.5", "--invariance-pairs", "200"]
# bench-mini's end to end: 3 runs per engine in rounds (A B C A B C ...), the median taken: on the mini models the
# torch engines run within a few per cent of each other, which one run cannot tell from the GPU's noise
MINI_REPEATS = 3
MINI_BENCH_ARGS = ["--repeats", str(MINI_REPEATS), "--interleave"]
# the bench-mini --limit estimate: its start-up, and per engine the work besides the loop (warm-up, stages, the
# greedy and batch-invariance checks), and the share the fixed triples' re-classification adds to the loop
BENCH_START_S, BENCH_ENGINE_EXTRA_S, BENCH_LOOP_EXTRA = 20.0, 15.0, 0.3
RUN_START_S = 15.0  # a run's start-up before its loop (imports, CUDA context, models), for its loop rate
MAX_FILE = 15 * 2**20  # what comes back from $OUT: files of at most 16 MiB
EXIT_BAD_OPTION = 2


class Stopped(Exception):
    """SIGTERM / SIGINT: stop the step in hand, then write what there is."""


def _stop(signum: int, frame: Any) -> None:
    raise Stopped(signal.Signals(signum).name)


@dataclass
class Record:
    step: str
    status: str  # ok | failed | stopped (its cap: partial output kept) | skipped
    detail: str = ""
    seconds: float = 0.0
    cap_s: float | None = None
    exit: int | None = None
    command: str | None = None


@dataclass
class Check:
    args: argparse.Namespace
    out: Path
    work: Path
    py: str
    t0: float = field(default_factory=time.monotonic)
    records: list[Record] = field(default_factory=list)
    bg: dict[str, Any] | None = None  # the background CPU reference: process, start, cap, log
    notes: dict[str, Any] = field(default_factory=dict)

    # -- time and logging ----------------------------------------------------------------------------------------
    def elapsed(self) -> float:
        return time.monotonic() - self.t0

    def left(self) -> float:
        """Seconds a step may still use (the reserve for the end kept)."""
        return self.args.budget - RESERVE_S - self.elapsed()

    def say(self, msg: str) -> None:
        line = f"[gpu_check {self.elapsed():4.0f}s] {msg}"
        print(line, flush=True)
        with open(self.work / "gpu-check.log", "a") as fh:
            fh.write(line + "\n")

    def cap(self, step: str) -> tuple[float, float]:
        """(cap, the least worth starting with) of ``step``, in seconds, times --cap-scale."""
        cap, need = CAPS[step]
        return cap * self.args.cap_scale, need * self.args.cap_scale

    def record(self, rec: Record) -> Record:
        self.records.append(rec)
        self.say(f"{rec.step}: {rec.status}" + (f" ({rec.detail})" if rec.detail else "")
                 + (f" in {rec.seconds:.0f}s" if rec.seconds else ""))
        return rec

    def skip(self, step: str, why: str) -> Record:
        return self.record(Record(step, "skipped", why))

    def status(self, step: str) -> str | None:
        return next((r.status for r in reversed(self.records) if r.step == step), None)

    # -- processes -----------------------------------------------------------------------------------------------
    def env(self) -> dict[str, str]:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1",
                   TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1", MPLBACKEND="Agg",
                   BREAKNLI_FAST_CACHE=str(self.work / "cache"))  # exports and random weights stay in the work folder
        return env

    def start(self, cmd: list[str], log: Path) -> subprocess.Popen:
        fh = open(log, "ab")
        fh.write(f"$ {shlex.join(cmd)}\n".encode())
        fh.flush()
        try:
            return subprocess.Popen(cmd, cwd=ROOT, env=self.env(), stdout=fh, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        finally:
            fh.close()

    @staticmethod
    def stop(proc: subprocess.Popen) -> None:
        """SIGTERM to the process group, SIGKILL 10 s later."""
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if proc.poll() is not None:
                return
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                proc.wait(wait)
            except subprocess.TimeoutExpired:
                continue

    def run(self, step: str, cmds: list[list[str]], partial_ok: bool = False, detail: str = "") -> Record:
        """Run ``cmds`` one after another under the step's cap (or what is left of the budget)."""
        cap, need = self.cap(step)
        left = self.left()
        if left < need:
            return self.skip(step, f"budget: {max(0, left):.0f}s left of {self.args.budget}s, it needs about {need:.0f}s")
        limit = min(cap, left)
        log = self.work / "logs" / f"{step}.log"
        t = time.monotonic()
        rc, stopped = 0, False
        self.say(f"{step}: up to {limit:.0f}s: " + " ; ".join(shlex.join(c) for c in cmds))
        for cmd in cmds:
            proc = self.start(cmd, log)
            try:
                rc = proc.wait(max(1.0, limit - (time.monotonic() - t)))
            except subprocess.TimeoutExpired:
                self.stop(proc)
                stopped = True
            except Stopped:
                self.stop(proc)
                raise
            if stopped or rc != 0:
                break
        took = time.monotonic() - t
        cmd_text = " ; ".join(shlex.join(c) for c in cmds)
        if stopped:
            what = "partial output kept" if partial_ok else "nothing kept"
            return self.record(Record(step, "stopped" if partial_ok else "failed", f"stopped at its cap of {limit:.0f}s "
                                      f"({what}); log logs/{step}.log", took, limit, None, cmd_text))
        if rc != 0:
            return self.record(Record(step, "failed", f"exit {rc}: {tail(log)}", took, limit, rc, cmd_text))
        return self.record(Record(step, "ok", detail, took, limit, 0, cmd_text))

    def start_background(self, step: str, cmd: list[str]) -> None:
        cap, need = self.cap(step)
        left = self.left()
        if left < need:
            self.skip(step, f"budget: {max(0, left):.0f}s left, it needs about {need:.0f}s")
            return
        log = self.work / "logs" / f"{step}.log"
        self.say(f"{step}: in the background, up to {min(cap, left):.0f}s: {shlex.join(cmd)}")
        self.bg = {"step": step, "proc": self.start(cmd, log), "t": time.monotonic(), "cap": min(cap, left),
                   "log": log, "cmd": shlex.join(cmd)}

    def poll_background(self, wait: bool = False, stop_now: str | None = None) -> bool:
        """Whether the background step is still running (with ``wait``: wait for its end or its cap first; with
        ``stop_now``, the reason, stop it now)."""
        if self.bg is None:
            return False
        b = self.bg
        deadline = b["t"] + b["cap"]
        proc: subprocess.Popen = b["proc"]
        why = stop_now
        if why is None:
            try:
                proc.wait(max(0.01, deadline - time.monotonic()) if wait else 0.01)
            except subprocess.TimeoutExpired:
                if time.monotonic() < deadline and not wait:
                    return True
                why = f"stopped at its cap of {b['cap']:.0f}s"
        if why is not None and proc.poll() is None:
            self.stop(proc)
        took = time.monotonic() - b["t"]
        if why is not None:
            self.record(Record(b["step"], "stopped", f"{why} (partial output kept); log logs/{b['step']}.log", took,
                               b["cap"], None, b["cmd"]))
        elif proc.returncode:
            self.record(Record(b["step"], "failed", f"exit {proc.returncode}: {tail(b['log'])}", took, b["cap"],
                               proc.returncode, b["cmd"]))
        else:
            self.record(Record(b["step"], "ok", "ran in the background", took, b["cap"], 0, b["cmd"]))
        self.bg = None
        return False


def tail(path: Path, lines: int = 3, chars: int = 400) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    keep = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(keep)[-chars:]


# -- the environment probe (run in its own process: this driver never imports torch) -----------------------------

def probe_env(path: Path) -> None:
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


# -- the steps ------------------------------------------------------------------------------------------------

def dev_tag(device: str) -> str:
    return device.split(":")[0]


def run_cmd(c: Check, name: str, precision: str, device: str, extra: list[str] = ()) -> list[str]:
    return [c.py, "-m", "breaknli_fast.cli", "run", "--limit", str(c.args.limit), "--seed", "0", "--overwrite",
            *c.args.run_args, "--engine", "torch", "--precision", precision, *extra, "--device", device,
            "--out", str(c.work / "runs" / name)]


def run_rows(run: Path) -> tuple[int, int, bool]:
    """(dataset rows, records) a run directory holds, and whether it finished (report.json)."""
    ids, n = set(), 0
    try:
        for line in (run / "samples.jsonl").read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            ids.add(r.get("id"))
            n += 1
    except OSError:
        pass
    return len(ids), n, (run / "report.json").exists()


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


def bench_cmd(c: Check, name: str, limit: str, extra: list[str], engines: str = BENCH_ENGINES) -> list[str]:
    return [c.py, "-m", "breaknli_fast.cli", "bench", "--device", c.args.device, "--engines", engines,
            "--no-component-split", "--no-plot", "--limit", limit, *c.args.run_args, *extra,
            *shlex.split(c.args.bench_args), "--out", str(c.work / name)]


def cpu_threads() -> tuple[int, int]:
    """The background CPU reference's threads and workers: the cores less four (the GPU runs' processes and
    tokenizers), two threads per worker."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    threads = max(1, cores - 4)
    return threads, max(1, threads // 2)


def plan(c: Check) -> list[tuple[str, bool, Callable[[], None]]]:
    """(step, timed, action) in priority order; the background CPU reference and env are started before."""
    a, dev = c.args, c.args.device
    tag = dev_tag(dev)
    runs = c.work / "runs"
    fp32 = runs / f"device-{tag}-torch-fp32"

    def device_run(step: str, name: str, precision: str, extra: list[str] = ()) -> Callable[[], None]:
        def go() -> None:
            rec = c.run(step, [run_cmd(c, name, precision, dev, list(extra))], partial_ok=True)
            c.notes.setdefault("run_seconds", {})[name] = rec.seconds
        return go

    def bench_mini() -> None:
        limit, why = bench_limit(c, fp32, (c.notes.get("run_seconds") or {}).get(fp32.name))
        c.notes["bench_mini_limit"] = {"limit": limit, "why": why}
        c.say(f"bench-mini: --limit {limit} ({why})")
        c.run("bench-mini", [bench_cmd(c, "bench-mini", limit, MINI_BENCH_ARGS)], detail=f"--limit {limit}")

    def bench_shapes(step: str, shapes: str, engines: str, flag: str) -> Callable[[], None]:
        def go() -> None:
            if shapes.lower() in ("", "none"):
                c.skip(step, f"{flag} none" + (" (the default with --device cpu: real shapes on the CPU are "
                                               "scripts/bench_real_shapes.py's)" if tag == "cpu" else ""))
                return
            extra = ["--random-weights", shapes, "--repeats", str(a.real_repeats), *REAL_BENCH_ARGS]
            c.run(step, [bench_cmd(c, step, str(a.real_limit), extra, engines)],
                  detail=f"--random-weights {shapes} --limit {a.real_limit} --engines {engines}")
        return go

    def bounds() -> None:
        shapes = a.bound_shapes or ("base,large" if tag == "cuda" else "mini")
        c.run("bounds", [[c.py, str(ROOT / "scripts" / "gpu_bounds.py"), "--out", str(c.work / "bounds.json"),
                          "--device", dev, "--shapes", shapes]], detail=f"--shapes {shapes}")

    def parity() -> None:
        ref = runs / "reference-cpu-torch-fp32"
        cmds, what = [], []
        if run_rows(ref)[1] and run_rows(fp32)[1]:
            cmds.append([c.py, "scripts/compare_runs.py", str(ref), str(fp32), "--json", str(c.work / "parity-cpu.json")])
            what.append("device fp32 vs the CPU reference")
        others = [runs / f"device-{tag}-torch-{p}" for p in ("bf16", "fp16-classifier")]
        others = [r for r in others if run_rows(r)[1]]
        if run_rows(fp32)[1] and others:
            cmds.append([c.py, "scripts/compare_runs.py", str(fp32), *map(str, others), "--json",
                         str(c.work / "parity-device.json")])
            what.append(f"{len(others)} run(s) vs device fp32")
        if not cmds:
            c.skip("parity", "no pair of runs with records to compare")
            return
        # compare_runs exits 1 when a run does not pass: a verdict, reported, not a failure of the step
        rec = c.run("parity", [cmd + ["--exit-zero"] for cmd in cmds], detail="; ".join(what))
        rec.detail = "; ".join(what) if rec.status == "ok" else rec.detail

    def cudagraph_check(step: str, *extra: str) -> Callable[[], None]:
        def go() -> None:
            c.run(step, [[c.py, "-c", CUDAGRAPH_CHECK, step, "--device", dev, "--out", str(c.work / f"{step}.json"),
                          "--cache-dir", str(c.work / "cache" / "random-weights"), *extra]])
        return go

    def parity_scale() -> None:
        limit = str(a.limit) if tag == "cpu" else "0"  # on a GPU every pair of the sample (2,724)
        cmd = bench_cmd(c, "bench-parity", limit, ["--probe", "accuracy"], PARITY_ENGINES)
        for flag in ("--gen-prompts", "--greedy-prompts"):  # --bench-args' options of the BreakNLI loop only
            while flag in cmd:
                del cmd[cmd.index(flag):cmd.index(flag) + 2]
        c.run("parity-scale", [cmd], detail=f"--limit {limit} --engines {PARITY_ENGINES}")

    # the measurements of the GPU engine first (a check stopped early keeps them), then the tests and the runs; a
    # timed step waits while the CPU reference runs in the background (the untimed ones go first then)
    steps: list[tuple[str, bool, Callable[[], None]]] = [
        ("bench-real", True, bench_shapes("bench-real", a.real_shapes, a.real_engines, "--real-shapes")),
        ("bench-large", True, bench_shapes("bench-large", a.large_shapes, a.large_engines, "--large-shapes")),
        ("bounds", True, bounds),
        ("fused-step", True, cudagraph_check("fused-step")),
        ("natural-eos", True, cudagraph_check("natural-eos", "--shapes", "mini" if tag == "cpu" else "base")),
        ("quantised", True, cudagraph_check("quantised", "--shapes", "mini" if tag == "cpu" else "large")),
        ("parity-scale", True, parity_scale),
        ("cuda-tests", False, lambda: c.run("cuda-tests", [[c.py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m",
                                                             "cuda", "-rs", "tests/test_cuda.py", "--junitxml",
                                                             str(c.work / "pytest-cuda.xml")]])),
        ("device-fp32", False, device_run("device-fp32", fp32.name, "fp32")),
        ("bench-mini", True, bench_mini),
        ("device-bf16", False, device_run("device-bf16", f"device-{tag}-torch-bf16", "bf16")),
        ("device-fp16-classifier", False, device_run("device-fp16-classifier", f"device-{tag}-torch-fp16-classifier",
                                                     "fp32", ["--classifier-precision", "fp16"])),
        ("parity", False, parity),
    ]
    return steps


def execute(c: Check) -> None:
    a = c.args
    wanted = set(a.steps)
    for s in STEPS:
        if s not in wanted:
            c.skip(s, "not in --steps")
    if "env" in wanted:
        rec = c.run("env", [[c.py, str(ROOT / "scripts" / "gpu_check.py"), "--probe-env", str(c.work / "env.json")]])
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
        if dev_tag(a.device) == "cuda" and env and not cuda.get("available"):
            c.record(Record("device", "failed", f"--device {a.device} but torch {cuda.get('torch')} sees no CUDA GPU"))
            for s in ("cuda-tests", "device-fp32", "bench-mini", "bench-real", "bench-large", "bounds", "device-bf16",
                      "device-fp16-classifier", "fused-step", "natural-eos", "quantised", "parity-scale"):
                wanted.discard(s)
                c.skip(s, "torch sees no CUDA GPU")
    ref_cmd = run_cmd(c, "reference-cpu-torch-fp32", "fp32", "cpu")
    if "cpu-reference" in wanted:
        if dev_tag(a.device) == "cpu" and not a.reference_background:
            c.run("cpu-reference", [ref_cmd], partial_ok=True)
        else:
            threads, workers = cpu_threads()
            c.start_background("cpu-reference", ref_cmd + ["--threads", str(threads), "--workers", str(workers)])
    queue = [s for s in plan(c) if s[0] in wanted]
    while queue:
        running = c.poll_background()
        pick = next((s for s in queue if not (running and s[1])), None)
        if pick is None:  # only timed steps are left: wait for the CPU reference (its cap at most)
            c.say("waiting for the CPU reference before the timed steps")
            c.poll_background(wait=True)
            continue
        queue.remove(pick)
        if pick[0] == "parity" and running:  # it compares the reference: wait for what it finished
            c.poll_background(wait=True)
        pick[2]()
    c.poll_background(wait=True)


# -- the result ----------------------------------------------------------------------------------------------

def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def junit(path: Path) -> dict[str, Any] | None:
    import xml.etree.ElementTree as ET

    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return None
    out: dict[str, Any] = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    cases = []
    for case in suite.iter("testcase"):
        outcome, msg = "passed", ""
        for tag in ("failure", "error", "skipped"):
            el = case.find(tag)
            if el is not None:
                outcome, msg = tag, (el.get("message") or "")[:300]
                break
        cases.append({"name": case.get("name"), "outcome": outcome, "message": msg})
    out["cases"] = cases
    return out


def run_summary(run: Path) -> dict[str, Any]:
    cfg, rep = load_json(run / "config.json") or {}, load_json(run / "report.json") or {}
    eng = cfg.get("engine") or {}
    rows, records, done = run_rows(run)
    details = {role: (eng.get(f"{role}_details") or {}).get("details", {}) for role in ("classifier", "generator")}
    return {"engine": eng.get("name"), "device": eng.get("device"), "precision": eng.get("precision"),
            "classifier_precision": eng.get("classifier_precision"), "generator_precision": eng.get("generator_precision"),
            "threads": eng.get("threads"), "workers": eng.get("workers"), "examples": rows, "records": records,
            "finished": done, "throughput": rep.get("throughput"), "funnel": rep.get("funnel"),
            "tf32": {role: d.get("tf32") for role, d in details.items() if d.get("tf32") is not None} or None}


def bench_summary(folder: Path) -> dict[str, Any] | None:
    data = load_json(folder / "bench.json")
    if data is None:
        return None
    return data


def payload(c: Check) -> dict[str, Any]:
    env = load_json(c.work / "env.json") or {}
    cuda = env.get("cuda") or {}
    runs = {d.name: run_summary(d) for d in sorted((c.work / "runs").glob("*")) if d.is_dir()}
    from breaknli_fast.engines.cuda import TF32_ENV  # torch-free module top

    from breaknli_fast.envinfo import COMMIT_ENV

    return {
        "device": c.args.device, "gpu": ", ".join(d["name"] for d in cuda.get("devices") or []) or None,
        "gpus": cuda.get("devices"), "torch": cuda.get("torch"), "torch_cuda_build": cuda.get("torch_cuda_build"),
        "limit": c.args.limit, "budget_s": c.args.budget, "took_s": round(c.elapsed(), 1),
        "steps_asked": c.args.steps, "real_shapes": c.args.real_shapes, "large_shapes": c.args.large_shapes,
        "run_args": c.args.run_args,
        "bench_args": c.args.bench_args,
        "commit_source": (COMMIT_ENV if os.environ.get(COMMIT_ENV, "").strip() else
                          "git" if (ROOT / ".git").exists() else None),
        "tf32": {"asked": os.environ.get(TF32_ENV), "as_found": cuda.get("tf32_as_found"),
                 "runs": {k: v["tf32"] for k, v in runs.items() if v.get("tf32")}},
        "package_path": env.get("package_path"),
        "optimum": env.get("optimum"),
        "steps": [vars(r) for r in c.records],
        "environment": env.get("environment"), "distributions": env.get("distributions"),
        "cuda_tests": junit(c.work / "pytest-cuda.xml"),
        "runs": runs,
        "parity": {"kernels": load_json(c.work / "parity-cpu.json"), "precisions": load_json(c.work / "parity-device.json")},
        "benches": {"mini": {"limit": c.notes.get("bench_mini_limit"), "bench": bench_summary(c.work / "bench-mini")},
                    "real": {"limit": c.args.real_limit, "bench": bench_summary(c.work / "bench-real")},
                    "large": {"limit": c.args.real_limit, "bench": bench_summary(c.work / "bench-large")}},
        "bounds": load_json(c.work / "bounds.json"),
        "cudagraph": {step: load_json(c.work / f"{step}.json") for step in ("fused-step", "natural-eos", "quantised")},
        "parity_scale": bench_summary(c.work / "bench-parity"),
        "work": str(c.work),
    }


BUNDLES = {  # tarball -> paths under the work folder
    "runs-reference.tar.gz": ["runs/reference-cpu-torch-fp32", "runs/device-*-torch-fp32"],
    "runs-precisions.tar.gz": ["runs/device-*-torch-bf16", "runs/device-*-torch-fp16-classifier"],
    "check.tar.gz": ["env.json", "nvidia-smi.txt", "pytest-cuda.xml", "parity-*.json", "logs", "bench-mini",
                     "bench-real", "bench-large", "bounds.json", "summary.md", "fused-step.json", "natural-eos.json",
                     "quantised.json", "bench-parity"],
}


def pack(work: Path, out: Path) -> dict[str, Any]:
    """Each bundle as one tar.gz under :data:`MAX_FILE`; where one is larger, its largest files are left out until
    it fits (named in the result)."""
    done: dict[str, Any] = {}
    for name, patterns in BUNDLES.items():
        members = sorted({p for pat in patterns for p in work.glob(pat)})
        files = sorted((f for m in members for f in ([m] if m.is_file() else m.rglob("*")) if f.is_file()),
                       key=lambda f: f.stat().st_size)
        if not files:
            continue
        left_out: list[str] = []
        while True:
            target = out / name
            with tarfile.open(target, "w:gz", compresslevel=6) as tar:
                for f in files:
                    tar.add(f, arcname=f.relative_to(work).as_posix())
            if target.stat().st_size <= MAX_FILE or not files:
                break
            left_out.append(files.pop().relative_to(work).as_posix())
        done[name] = {"bytes": target.stat().st_size, "files": len(files), "left_out": left_out}
    return done


def finish(c: Check, command: str) -> int:
    from provenance import Recorder

    if c.bg is not None:
        c.poll_background(wait=True)
    failed = [r.step for r in c.records if r.status == "failed"]
    c.say(f"finished in {c.elapsed():.0f}s: " + (f"failed: {', '.join(failed)}" if failed else "no step failed"))
    rec = Recorder("gpu_check", command)
    rec.date = datetime.fromtimestamp(time.time() - c.elapsed(), timezone.utc).isoformat(timespec="seconds")
    rec._t0 = time.perf_counter() - c.elapsed()
    # each part guarded: whatever breaks here, the result file and the log still come back
    problems: list[str] = []
    try:
        body = payload(c)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the payload: {type(e).__name__}: {e}")
        body = {"device": c.args.device, "steps": [vars(r) for r in c.records]}
    try:
        text = summary(c, body, rec.commit)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the summary: {type(e).__name__}: {e}")
        text = "# GPU check\n\n" + "\n".join(f"- {r.step}: {r.status} {r.detail}" for r in c.records) + "\n"
    (c.work / "summary.md").write_text(text)
    try:
        body["files"] = pack(c.work, c.out)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the tarballs: {type(e).__name__}: {e}")
    for p in problems:
        c.say(f"writing {p}")
    body["problems"] = problems
    rec.save(c.out / "gpu-check.json", body)
    for name in ("summary.md", "gpu-check.log"):
        (c.out / name).write_bytes((c.work / name).read_bytes())
    print(text)
    return 1 if failed or problems else 0


def summary(c: Check, body: dict[str, Any], commit: str | None) -> str:
    import make_benchmarks as mb

    lines = ["# GPU check", "",
             f"- device `{body['device']}` ({body.get('gpu') or 'no GPU'}), torch {body.get('torch')}; "
             f"examples per run: {body['limit'] or 'all'}; budget {body['budget_s']}s; took {body['took_s']:.0f}s",
             f"- commit {commit} (from {body.get('commit_source')})" if commit else
             "- commit unknown: no .git here and BREAKNLI_FAST_COMMIT is not set",
             f"- checkout `{ROOT}` (breaknli_fast imported from `{body.get('package_path')}`); work folder "
             f"`{c.work}`",
             f"- files in `{c.out}`: gpu-check.json (the result file), summary.md, gpu-check.log, "
             + ", ".join(BUNDLES), "",
             "| step | status | seconds | detail |", "|---|---|---|---|"]
    for r in c.records:
        lines.append(f"| {r.step} | {r.status} | {r.seconds:.0f} | {r.detail.replace('|', '/')} |")
    lines += ["", mb.gpu_check_body(body)]
    return "\n".join(lines).rstrip() + "\n"


class Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # one line, exit 2
        self.exit(EXIT_BAD_OPTION, f"error: {message} (see --help)\n")


def parse(argv: list[str]) -> argparse.Namespace:
    run_args: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, run_args = argv[:i], argv[i + 1:]
    ap = Parser(prog="scripts/gpu_check.sh", description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__.split("\n", 1)[1])
    ap.add_argument("--out", type=Path, default=None, help="where the (at most 8) result files go (default: $OUT "
                    "when set, else runs/gpu-check-<UTC time>)")
    ap.add_argument("--work", type=Path, default=None, help="the run directories, benches and logs (default: a new "
                    "temporary folder)")
    ap.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu (a dry run)")
    ap.add_argument("--limit", type=int, default=0, help="examples of every run, and bench-mini's most "
                    "(0 = all 2,724 of the embedded sample; default 0)")
    ap.add_argument("--budget", type=int, default=DEFAULT_BUDGET, help=f"seconds for the whole check (default "
                    f"{DEFAULT_BUDGET}; {RESERVE_S} of them kept for the files at the end)")
    ap.add_argument("--steps", default=",".join(STEPS), help="the steps to run, comma-separated (default: all)")
    ap.add_argument("--real-shapes", default=None, help=f"bench-real's --random-weights (default {DEFAULT_REAL_SHAPES} "
                    "on CUDA, none on the CPU)")
    ap.add_argument("--real-limit", type=int, default=64, help="bench-real's and bench-large's --limit (default 64)")
    ap.add_argument("--real-engines", default=REAL_ENGINES, help=f"bench-real's --engines (default {REAL_ENGINES})")
    ap.add_argument("--real-repeats", type=int, default=3, help="the real-shape benches' end-to-end --repeats "
                    "(default 3)")
    ap.add_argument("--large-shapes", default=None, help=f"bench-large's --random-weights (default "
                    f"{DEFAULT_LARGE_SHAPES} on CUDA, none on the CPU)")
    ap.add_argument("--large-engines", default=LARGE_ENGINES, help=f"bench-large's --engines (default {LARGE_ENGINES})")
    ap.add_argument("--bound-shapes", default=None, help="the bounds step's shapes: base, large, mini (default "
                    "base,large on CUDA, mini on the CPU)")
    ap.add_argument("--bench-args", default="", help="more options for both benches, e.g. \"--warmup 0\"")
    ap.add_argument("--cap-scale", type=float, default=1.0, help="multiply every step's cap by this (a slow or "
                    "busy machine's dry run; default 1)")
    ap.add_argument("--reference-background", action="store_true", help="run the CPU reference in the background "
                    "with --device cpu too (as on CUDA; for the tests)")
    ap.add_argument("--probe-env", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.run_args = run_args
    if args.probe_env is not None:
        return args
    if not re.fullmatch(r"cpu|cuda(:\d+)?", args.device):
        ap.exit(EXIT_BAD_OPTION, f"error: --device must be cpu or cuda[:N], not {args.device}\n")
    if args.cap_scale <= 0:
        ap.exit(EXIT_BAD_OPTION, "error: --cap-scale must be > 0\n")
    if args.limit < 0 or args.real_limit < 1:
        ap.exit(EXIT_BAD_OPTION, "error: --limit must be >= 0 and --real-limit >= 1\n")
    if args.budget < RESERVE_S + 10:
        ap.exit(EXIT_BAD_OPTION, f"error: --budget must be at least {RESERVE_S + 10} seconds\n")
    steps = [s.strip() for s in args.steps.split(",") if s.strip()]
    bad = [s for s in steps if s not in STEPS]
    if bad or not steps:
        ap.exit(EXIT_BAD_OPTION, f"error: unknown step {', '.join(bad) or '(none given)'}; the steps: {', '.join(STEPS)}\n")
    args.steps = steps
    try:
        shlex.split(args.bench_args)
    except ValueError as e:
        ap.exit(EXIT_BAD_OPTION, f"error: --bench-args: {e}\n")
    if args.real_shapes is None:
        args.real_shapes = "none" if args.device == "cpu" else DEFAULT_REAL_SHAPES
    if args.large_shapes is None:
        args.large_shapes = "none" if args.device == "cpu" else DEFAULT_LARGE_SHAPES
    if args.real_repeats < 1:
        ap.exit(EXIT_BAD_OPTION, "error: --real-repeats must be >= 1\n")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    if args.probe_env is not None:
        probe_env(args.probe_env)
        return 0
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else
                       ROOT / "runs" / f"gpu-check-{datetime.now(timezone.utc):%Y%m%d-%H%M%S}")
    try:
        out.mkdir(parents=True, exist_ok=True)
        work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
        (work / "logs").mkdir(parents=True, exist_ok=True)
        (work / "runs").mkdir(exist_ok=True)
    except OSError as e:
        print(f"error: cannot create the output folders: {e}", file=sys.stderr)
        return EXIT_BAD_OPTION
    c = Check(args, out.resolve(), work.resolve(), sys.executable)
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    c.say(f"checkout {ROOT}, out {c.out}, work {c.work}, device {args.device}, limit {args.limit or 'all'}, "
          f"budget {args.budget}s, python {c.py}")
    try:
        execute(c)
    except Stopped as e:
        c.poll_background(stop_now=f"stopped by {e}")
        c.record(Record("check", "failed", f"stopped by {e}: the files hold what finished"))
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the files are written whatever comes now
    return finish(c, shlex.join(["scripts/gpu_check.sh", *argv]))


if __name__ == "__main__":
    sys.exit(main())
