"""The GPU check in one call, for a lent machine with a CUDA GPU and no network (kind ``gpu_check``; docs/stack.md,
"GPU"): many steps (tests, runs, benches, bounds) in one time budget, and their files collected.

    scripts/gpu_check.sh [--out DIR] [--device cuda|cuda:N|cpu] [--limit N] [--budget S] [--steps A,B,...]
                         [--real-shapes SPEC|none] [--real-limit N] [--bench-args "ARGS"] [--work DIR]
                         [--cap-scale F] [--reference-background] [-- RUN_ARGS...]

(``breaknli-fast suite measure gpu-check ...`` where the package is installed; nothing needs to be: the machine's
own Python runs this checkout from PYTHONPATH.) The steps, each a function registered with :func:`step` (its hard
time cap, the least time worth starting it with, whether it is timed, whether it needs the GPU and its place in the
queue); each runs under its cap (its process group is stopped there) and is skipped, saying so, when less time is
left in ``budget`` than it needs. Built in, in the order ``--steps`` lists them:

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
  bounds                  the gpu-bounds measurement: the cudagraph engine's largest classifier bucket against the
                          GPU's peak FLOP/s and its decoder step against its memory-bandwidth floor
  device-bf16             torch bf16 on --device
  device-fp16-classifier  the classifier at fp16, the generator at fp32, on --device
  parity                  the compare-runs measurement: device fp32 against the CPU reference (fp32 tolerances),
                          bf16 and fp16 against device fp32 (the bench's verdicts)
  fused-step, natural-eos, quantised
                          the cudagraph engine's own checks (breaknli_fast/backends/cudagraph/check.py, each one
                          JSON file): the decoder step written for fusion and compiled against the plain one (time,
                          kernels, bytes), generation ended by the end-of-sequence token at real shapes (torch fp32
                          against cudagraph fp32 / bf16, interleaved), the fp8 / int8 classifier against bf16
  parity-scale            breaknli-fast bench --probe accuracy --dataset taxinli on the mini models: torch fp32 against
                          cudagraph fp32, bf16 and fp8 on the device, every pair of TaxiNLI (10,071; --limit on the
                          CPU), the paired verdicts overall and per reasoning category (its 15 cells)

The timed steps (the benches) never run beside the background CPU reference: the untimed device runs go first while
it runs. At the end, whatever happened, at most 8 files are in ``out`` (default $OUT when set, else the scratch
folder's ``out``): gpu-check.json (the result file, unless ``--result`` names another), summary.md, gpu-check.log
and tarballs of the run directories and benches (runs-reference.tar.gz, runs-precisions.tar.gz, check.tar.gz), each
under 16 MiB. The work folder (``work``, default a new temporary folder) keeps everything.

``device = "cpu"`` runs every step on the CPU (a dry run; tests/test_gpu_check.py runs it with tiny limits). The
words after ``--`` go to every ``breaknli-fast run`` and ``bench`` (probe options such as --k 8); ``bench_args`` to
both benches only. The commit is BREAKNLI_FAST_COMMIT's where it is set, else git's. BREAKNLI_FAST_TF32=1 asks for
TF32 (recorded). Exit 0 when no step failed, 1 otherwise, 2 on a bad option.
"""

from __future__ import annotations

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
from pathlib import Path
from typing import Any, Callable, Optional

from breaknli_fast.bench.types import BenchReport
from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Measurement, option
from breaknli_fast.suite.provenance import ROOT

RESERVE_S = 25  # kept at the end of the budget for the result file and the tarballs
DEFAULT_BUDGET = 480  # fits `timeout 540` on the lent machine, start-up and transfers aside
DEFAULT_REAL_SHAPES = "flan-t5-base,roberta-base"
DEFAULT_LARGE_SHAPES = "flan-t5-large,roberta-large"
# bench-mini's engines: torch fp32 (its reference), bf16, fp16 for the classifier only, the cudagraph engine
BENCH_ENGINES = "torch:fp32,torch:bf16,torch:fp16:gen.precision=fp32,cudagraph:fp32,cudagraph:bf16"
REAL_ENGINES = "torch:fp32,cudagraph:fp32,cudagraph:bf16"  # bench-real's
# the cudagraph engine's checks: its module's main, given the bench's random-weight builder for the real shapes
CUDAGRAPH_CHECK = ("import sys; from breaknli_fast.bench.shapes import build_random_model as build; "
                   "from breaknli_fast.backends.cudagraph.check import main; sys.exit(main(sys.argv[1:], build))")
CUDAGRAPH_STEPS = ("fused-step", "natural-eos", "quantised")
PARITY_ENGINES = "torch:fp32,cudagraph:fp32,cudagraph:bf16,cudagraph:fp8"  # parity-scale's (fp8: on the CPU emulated)
# parity-scale's pairs: TaxiNLI, whose 15 reasoning categories each give a cell (the embedded SNLI sample gives the
# accuracy probe one cell: on the H200 its 2,724 pairs judged one cell per engine)
PARITY_DATASET = "taxinli"
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


# -- the steps: each a function of the check, registered with its cap -------------------------------------------

@dataclass(frozen=True)
class Step:
    """One step of the GPU check: ``run(check)`` does it (through :meth:`Check.run` for its processes, so that
    its cap holds); ``timed``: never beside the background CPU reference; ``gpu``: skipped when torch sees no CUDA
    GPU on a CUDA device; ``start``: run before the queue, in registration order (env, the CPU reference), else
    queued by ``priority`` (lower first); ``after_reference``: waits for what the background reference finished."""

    name: str
    run: Callable[["Check"], None]
    timed: bool = False
    gpu: bool = False
    start: bool = False
    priority: int = 50
    after_reference: bool = False


STEP_REGISTRY: dict[str, Step] = {}
# seconds: (cap, the least worth starting with). On an H200 (gpu-check-h200*.json): env 7, cuda-tests 26-30,
# device-fp32 67 (all 2,724 examples), the CPU reference 165 in the background, bench-mini 128 at --limit 738,
# bench-real 64-68, parity 2; the bf16 and fp16-classifier runs do the fp32 run's work, so they get 80
CAPS: dict[str, tuple[float, float]] = {}


def step(name: str, *, cap: float, need: float, timed: bool = False, gpu: bool = False, start: bool = False,
         priority: int = 50, after_reference: bool = False) -> Callable[[Callable[["Check"], None]], Callable]:
    """Register ``fn(check)`` as the step ``name`` with its hard cap and the least time worth starting it with
    (seconds, times ``cap_scale``); ``--steps`` lists the steps in registration order."""
    def register(fn: Callable[["Check"], None]) -> Callable[["Check"], None]:
        STEP_REGISTRY[name] = Step(name, fn, timed=timed, gpu=gpu, start=start, priority=priority,
                                   after_reference=after_reference)
        CAPS[name] = (cap, need)
        return fn
    return register


def steps() -> tuple[str, ...]:
    return tuple(STEP_REGISTRY)


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
    args: Any  # GpuCheckConfig
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

    def cap(self, name: str) -> tuple[float, float]:
        """(cap, the least worth starting with) of step ``name``, in seconds, times ``cap_scale``."""
        cap, need = CAPS[name]
        return cap * self.args.cap_scale, need * self.args.cap_scale

    def record(self, rec: Record) -> Record:
        self.records.append(rec)
        self.say(f"{rec.step}: {rec.status}" + (f" ({rec.detail})" if rec.detail else "")
                 + (f" in {rec.seconds:.0f}s" if rec.seconds else ""))
        return rec

    def skip(self, name: str, why: str) -> Record:
        return self.record(Record(name, "skipped", why))

    def status(self, name: str) -> str | None:
        return next((r.status for r in reversed(self.records) if r.step == name), None)

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

    def run(self, name: str, cmds: list[list[str]], partial_ok: bool = False, detail: str = "") -> Record:
        """Run ``cmds`` one after another under the step's cap (or what is left of the budget)."""
        cap, need = self.cap(name)
        left = self.left()
        if left < need:
            return self.skip(name, f"budget: {max(0, left):.0f}s left of {self.args.budget}s, it needs about "
                                   f"{need:.0f}s")
        limit = min(cap, left)
        log = self.work / "logs" / f"{name}.log"
        t = time.monotonic()
        rc, stopped = 0, False
        self.say(f"{name}: up to {limit:.0f}s: " + " ; ".join(shlex.join(c) for c in cmds))
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
            return self.record(Record(name, "stopped" if partial_ok else "failed", f"stopped at its cap of {limit:.0f}s "
                                      f"({what}); log logs/{name}.log", took, limit, None, cmd_text))
        if rc != 0:
            return self.record(Record(name, "failed", f"exit {rc}: {tail(log)}", took, limit, rc, cmd_text))
        return self.record(Record(name, "ok", detail, took, limit, 0, cmd_text))

    def start_background(self, name: str, cmd: list[str]) -> None:
        cap, need = self.cap(name)
        left = self.left()
        if left < need:
            self.skip(name, f"budget: {max(0, left):.0f}s left, it needs about {need:.0f}s")
            return
        log = self.work / "logs" / f"{name}.log"
        self.say(f"{name}: in the background, up to {min(cap, left):.0f}s: {shlex.join(cmd)}")
        self.bg = {"step": name, "proc": self.start(cmd, log), "t": time.monotonic(), "cap": min(cap, left),
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

    # -- what the steps share ------------------------------------------------------------------------------------
    @property
    def tag(self) -> str:
        return self.args.device.split(":")[0]

    @property
    def runs(self) -> Path:
        return self.work / "runs"

    @property
    def fp32(self) -> Path:
        """The device's torch fp32 run directory (the reference of the precisions)."""
        return self.runs / f"device-{self.tag}-torch-fp32"

    def run_cmd(self, name: str, precision: str, device: str, extra: list[str] = ()) -> list[str]:
        return [self.py, "-m", "breaknli_fast.cli", "run", "--limit", str(self.args.limit), "--seed", "0",
                "--overwrite", *self.args.run_args, "--engine", "torch", "--precision", precision, *extra, "--device",
                device, "--out", str(self.runs / name)]

    def bench_cmd(self, name: str, limit: str, extra: list[str], engines: str = BENCH_ENGINES) -> list[str]:
        return [self.py, "-m", "breaknli_fast.cli", "bench", "--device", self.args.device, "--engines", engines,
                "--no-component-split", "--no-plot", "--limit", limit, *self.args.run_args, *extra,
                *shlex.split(self.args.bench_args), "--out", str(self.work / name)]

    def measure_cmd(self, name: str, result: Path, args: list[str]) -> list[str]:
        """A measurement of this package in a process of its own, its result file in the work folder."""
        return [self.py, "-m", "breaknli_fast.suite", "measure", name, *args, "--result", str(result),
                "--scratch", str(self.work / f"scratch-{name}")]

    def device_run(self, name: str, run: str, precision: str, extra: list[str] = ()) -> None:
        rec = self.run(name, [self.run_cmd(run, precision, self.args.device, list(extra))], partial_ok=True)
        self.notes.setdefault("run_seconds", {})[run] = rec.seconds


def tail(path: Path, lines: int = 3, chars: int = 400) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    text = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", text)
    keep = [ln.strip() for ln in text.splitlines() if ln.strip()][-lines:]
    return " | ".join(keep)[-chars:]


def load_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


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


def execute(c: Check) -> None:
    """The start steps in order, then the queue by priority (or as --steps lists them, ``--order listed``): a timed step never runs beside the background CPU
    reference (the untimed ones go first while it runs)."""
    wanted = set(c.args.steps)
    for name in STEP_REGISTRY:
        if name not in wanted:
            c.skip(name, "not in --steps")
    for s in STEP_REGISTRY.values():
        if s.start and s.name in wanted:
            s.run(c)
            if c.notes.get("no_gpu"):
                for g in STEP_REGISTRY.values():
                    if g.gpu and g.name in wanted:
                        wanted.discard(g.name)
                        c.skip(g.name, "torch sees no CUDA GPU")
    listed = {name: i for i, name in enumerate(c.args.steps)}
    rank = (lambda s: listed[s.name]) if c.args.order == "listed" else (lambda s: s.priority)
    queue = sorted((s for s in STEP_REGISTRY.values() if not s.start and s.name in wanted), key=rank)
    while queue:
        running = c.poll_background()
        pick = next((s for s in queue if not (running and s.timed)), None)
        if pick is None:  # only timed steps are left: wait for the CPU reference (its cap at most)
            c.say("waiting for the CPU reference before the timed steps")
            c.poll_background(wait=True)
            continue
        queue.remove(pick)
        if pick.after_reference and running:  # it compares the reference: wait for what it finished
            c.poll_background(wait=True)
        pick.run(c)
    c.poll_background(wait=True)


# -- the result -------------------------------------------------------------------------------------------------

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
            "classifier_precision": eng.get("classifier_precision"),
            "generator_precision": eng.get("generator_precision"),
            "threads": eng.get("threads"), "workers": eng.get("workers"), "examples": rows, "records": records,
            "finished": done, "throughput": rep.get("throughput"), "funnel": rep.get("funnel"),
            "tf32": {role: d.get("tf32") for role, d in details.items() if d.get("tf32") is not None} or None}


def _payload_of(path: Path) -> Any:
    """The payload of a measurement's result file in the work folder (None where it wrote none)."""
    doc = load_json(path)
    return doc.get("payload") if isinstance(doc, dict) else None


def payload(c: Check) -> dict[str, Any]:
    from breaknli_fast.engines.cuda import TF32_ENV  # torch-free module top
    from breaknli_fast.envinfo import COMMIT_ENV

    env = load_json(c.work / "env.json") or {}
    cuda = env.get("cuda") or {}
    runs = {d.name: run_summary(d) for d in sorted((c.work / "runs").glob("*")) if d.is_dir()}
    return {
        "device": c.args.device, "gpu": ", ".join(d["name"] for d in cuda.get("devices") or []) or None,
        "gpus": cuda.get("devices"), "torch": cuda.get("torch"), "torch_cuda_build": cuda.get("torch_cuda_build"),
        "limit": c.args.limit, "budget_s": c.args.budget, "took_s": round(c.elapsed(), 1),
        "steps_asked": list(c.args.steps), "real_shapes": c.args.real_shapes, "large_shapes": c.args.large_shapes,
        "run_args": list(c.args.run_args), "bench_args": c.args.bench_args,
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
        "parity": {"kernels": _payload_of(c.work / "parity-cpu.json"),
                   "precisions": _payload_of(c.work / "parity-device.json")},
        "benches": {"mini": {"limit": c.notes.get("bench_mini_limit"), "bench": load_json(c.work / "bench-mini" /
                                                                                        "bench.json")},
                    "real": {"limit": c.args.real_limit, "bench": load_json(c.work / "bench-real" / "bench.json")},
                    "large": {"limit": c.args.real_limit, "bench": load_json(c.work / "bench-large" / "bench.json")}},
        "bounds": _payload_of(c.work / "bounds.json"),
        "cudagraph": {name: load_json(c.work / f"{name}.json") for name in CUDAGRAPH_STEPS},
        "parity_scale": load_json(c.work / "bench-parity" / "bench.json"),
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


def summary(c: Check, body: dict[str, Any], commit: str | None) -> str:
    from breaknli_fast.bench.types import from_json
    from breaknli_fast.suite.measurements.gpu_report import gpu_check_body

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
    lines += ["", gpu_check_body(from_json(GpuCheckPayload, body))]
    return "\n".join(lines).rstrip() + "\n"


def finish(c: Check, commit: str | None) -> tuple[dict[str, Any], bool]:
    """The payload, summary.md, the tarballs and the log in ``out``; and whether anything failed."""
    if c.bg is not None:
        c.poll_background(wait=True)
    failed = [r.step for r in c.records if r.status == "failed"]
    c.say(f"finished in {c.elapsed():.0f}s: " + (f"failed: {', '.join(failed)}" if failed else "no step failed"))
    # each part guarded: whatever breaks here, the result file and the log still come back
    problems: list[str] = []
    try:
        body = payload(c)
    except Exception as e:  # noqa: BLE001
        problems.append(f"the payload: {type(e).__name__}: {e}")
        body = {"device": c.args.device, "steps": [vars(r) for r in c.records]}
    try:
        text = summary(c, body, commit)
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
    for name in ("summary.md", "gpu-check.log"):
        (c.out / name).write_bytes((c.work / name).read_bytes())
    print(text)
    return body, bool(failed or problems)


# -- the measurement ----------------------------------------------------------------------------------------------

@dataclass
class GpuCheckConfig:
    out: Optional[str] = option(None, help="where the (at most 8) files go (default: $OUT when set, else the scratch "
                                           "folder's out)")
    work: Optional[str] = option(None, help="the run directories, benches and logs (default: a new temporary folder)")
    device: str = option("cuda", help="cuda, cuda:N or cpu (a dry run)")
    limit: int = option(0, min=0, help="examples of every run, and bench-mini's most (0 = all 2,724 of the embedded "
                                       "sample)")
    budget: int = option(DEFAULT_BUDGET, min=RESERVE_S + 10, max=86_400, why="a day",
                         help=f"seconds for the whole check ({RESERVE_S} of them kept for the files at the end)")
    steps: str = option("", help="the steps to run, comma-separated (default: all)")
    order: str = option("priority", help="the queue after the start steps: priority (each step's place, the "
                                         "default) or listed (the order --steps gives, so that what matters most "
                                         "runs first in a short budget)")
    real_shapes: Optional[str] = option(None, help=f"bench-real's --random-weights (default {DEFAULT_REAL_SHAPES} on "
                                                   "CUDA, none on the CPU)")
    real_limit: int = option(64, min=1, help="bench-real's and bench-large's --limit")
    real_engines: str = option(REAL_ENGINES, help="bench-real's --engines")
    real_repeats: int = option(3, min=1, max=100, why="docs/limits.md: more only lengthens the bench",
                               help="the real-shape benches' end-to-end --repeats")
    large_shapes: Optional[str] = option(None, help=f"bench-large's --random-weights (default {DEFAULT_LARGE_SHAPES} "
                                                    "on CUDA, none on the CPU)")
    large_engines: str = option(LARGE_ENGINES, help="bench-large's --engines")
    bound_shapes: Optional[str] = option(None, help="the bounds step's shapes: base, large, mini (default base,large "
                                                    "on CUDA, mini on the CPU)")
    bench_args: str = option("", help="more options for both benches, e.g. \"--warmup 0\"")
    cap_scale: float = option(1.0, min=0.0, max=100.0, why="a hundred times the GPU's caps",
                              help="multiply every step's cap by this (a slow or busy machine's dry run)")
    reference_background: bool = option(False, help="run the CPU reference in the background with --device cpu too "
                                                    "(as on CUDA; for the tests)")
    run_args: tuple[str, ...] = option((), flag="--run-arg",
                                       help="one more argument of every run and bench (repeatable; the words after "
                                            "-- on the command line)")


@dataclass
class StepRecord:
    step: str | None = None
    status: str | None = None
    detail: str | None = None
    seconds: float | None = None
    cap_s: float | None = None
    exit: int | None = None
    command: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GpuBench:
    """One bench of the check: its ``--limit`` (and why) and its bench.json."""

    limit: Any = None
    bench: BenchReport | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GpuCheckPayload:
    device: str | None = None
    gpu: str | None = None
    gpus: list[dict[str, Any]] | None = None
    torch: str | None = None
    torch_cuda_build: str | None = None
    limit: int | None = None
    budget_s: int | None = None
    took_s: float | None = None
    steps_asked: list[str] | None = None
    real_shapes: str | None = None
    large_shapes: str | None = None
    run_args: list[str] | None = None
    bench_args: str | None = None
    commit_source: str | None = None
    tf32: dict[str, Any] | None = None
    package_path: str | None = None
    optimum: bool | None = None
    steps: list[StepRecord] | None = None
    environment: dict[str, Any] | None = None
    distributions: list[str] | None = None
    cuda_tests: dict[str, Any] | None = None  # the junit of tests/test_cuda.py: tests, failures, ..., cases
    runs: dict[str, dict[str, Any]] | None = None  # run directory -> run_summary()
    parity: dict[str, Any] | None = None  # kernels / precisions: the compare-runs payloads
    benches: dict[str, GpuBench] | None = None
    bounds: dict[str, Any] | None = None  # the gpu-bounds payload
    cudagraph: dict[str, Any] | None = None  # step -> the cudagraph engine's check's JSON (backends/cudagraph/check.py)
    parity_scale: BenchReport | None = None  # the parity-scale step's bench.json
    work: str | None = None
    files: dict[str, Any] | None = None
    problems: list[str] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class GpuCheck(Measurement):
    name = "gpu-check"
    summary = "the GPU check: CUDA tests, runs, benches and bounds in one time budget on a lent GPU"
    kind = "gpu_check"
    config_class = GpuCheckConfig
    payload_class = GpuCheckPayload
    legacy_scripts = ("gpu_check.sh",)
    scratch_flags = ("--out", "--work")
    remainder = "run_arg"

    def config(self, values: Any) -> GpuCheckConfig:
        c: GpuCheckConfig = super().config(values)
        if not re.fullmatch(r"cpu|cuda(:\d+)?", c.device):
            raise UserError(f"--device must be cpu or cuda[:N], not {c.device}")
        if c.cap_scale <= 0:
            raise UserError("--cap-scale must be > 0")
        if c.order not in ("priority", "listed"):
            raise UserError(f"--order must be priority or listed, not {c.order}")
        names = [s.strip() for s in c.steps.split(",") if s.strip()] if c.steps else list(STEP_REGISTRY)
        bad = [s for s in names if s not in STEP_REGISTRY]
        if bad or not names:
            raise UserError(f"unknown step {', '.join(bad) or '(none given)'}; the steps: {', '.join(STEP_REGISTRY)}")
        try:
            shlex.split(c.bench_args)
        except ValueError as e:
            raise UserError(f"--bench-args: {e}") from None
        c.steps = ",".join(names)
        if c.real_shapes is None:
            c.real_shapes = "none" if c.device == "cpu" else DEFAULT_REAL_SHAPES
        if c.large_shapes is None:
            c.large_shapes = "none" if c.device == "cpu" else DEFAULT_LARGE_SHAPES
        return c

    def requirements(self, config: GpuCheckConfig) -> tuple[list[str], list[str]]:
        return (["cuda"] if config.device.startswith("cuda") else []), []

    def default_result(self, config: GpuCheckConfig, work: Path) -> Path:
        return self._out(config, work) / "gpu-check.json"

    @staticmethod
    def _out(config: GpuCheckConfig, work: Path) -> Path:
        return Path(config.out or os.environ.get("OUT") or work / "out")

    def run(self, config: GpuCheckConfig, recorder: Any) -> GpuCheckPayload:
        from breaknli_fast.bench.types import from_json

        out = self._out(config, recorder.work)
        try:
            out.mkdir(parents=True, exist_ok=True)
            work = Path(config.work) if config.work else Path(tempfile.mkdtemp(prefix="gpu-check-"))
            (work / "logs").mkdir(parents=True, exist_ok=True)
            (work / "runs").mkdir(exist_ok=True)
        except OSError as e:
            raise UserError(f"cannot create the output folders: {e}") from None
        args = _Args(config)
        c = Check(args, out.resolve(), work.resolve(), sys.executable)
        signal.signal(signal.SIGTERM, _stop)
        signal.signal(signal.SIGINT, _stop)
        c.say(f"checkout {ROOT}, out {c.out}, work {c.work}, device {config.device}, limit {config.limit or 'all'}, "
              f"budget {config.budget}s, python {c.py}")
        try:
            execute(c)
        except Stopped as e:
            c.poll_background(stop_now=f"stopped by {e}")
            c.record(Record("check", "failed", f"stopped by {e}: the files hold what finished"))
        signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the files are written whatever comes now
        body, failed = finish(c, recorder.commit)
        recorder.exit_code = 1 if failed else 0
        return from_json(GpuCheckPayload, body)


class _Args:
    """The config as the check reads it (``steps`` a list)."""

    def __init__(self, config: GpuCheckConfig):
        self.__dict__.update(vars(config))
        self.steps = [s for s in config.steps.split(",") if s]
        self.run_args = list(config.run_args)


from breaknli_fast.suite.measurements.gpu_report import SECTIONS  # noqa: E402 - the renderers read the payload type

GpuCheck.sections = SECTIONS
