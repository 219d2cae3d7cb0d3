"""The GPU check's machinery (the ``gpu-check`` measurement, :mod:`.gpu_check`): its settings, the registry of its
steps (:func:`step`: each step a function with its hard cap, the least time worth starting it with and its place in
the queue), and :class:`Check`, which runs a step's processes under its cap within the budget and records them.
The built-in steps are in :mod:`.gpu_steps`; the queue, the result file and the measurement in :mod:`.gpu_check`.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

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
    """One step of the GPU check: what :class:`Check` records as the step ends, and what the payload's ``steps``
    hold (:class:`~breaknli_fast.suite.measurements.gpu_check.GpuCheckPayload`, read back by ``from_json``)."""

    step: str
    status: str  # ok | failed | stopped (its cap: partial output kept) | skipped
    detail: str = ""
    seconds: float = 0.0
    cap_s: float | None = None
    exit: int | None = None
    command: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # keys of a file written by another version


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
