"""How long the default ``breaknli-fast run`` takes on a busy machine (kind ``busy``).

For each engine (``engines``: ``ENGINE[:PRECISION]``), the default run (shipped mini models, embedded sample,
``limit`` examples) is timed as a subprocess into a fresh ``--out``: **alone**, one process; **contended**, two
identical processes started at the same moment, each into its own ``--out``.

The package sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it (breaknli_fast/__init__.py), so the engines run
under that default here (the variable is removed from their environment); with ``active`` (on by default) the
torch engine is timed once more with ``OMP_WAIT_POLICY=ACTIVE``, which shows what torch's OpenMP threads do
without that default.

Recorded per process: wall seconds (start to exit, model loading included), the loop's seconds
(``throughput.wall_seconds`` of its report.json), peak RSS and CPU seconds (the kernel's rusage), the exit code;
per contended process, whether its report.json metrics (and funnel) are identical to those of the run alone. A
warm-up run per engine (4 examples, not timed) fills the export cache first, so that no timed process exports.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breaknli_fast.bench.types import OMIT
from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import blank, dig, f, of_kind, table, yes_no
from breaknli_fast.suite.provenance import portable_command
from breaknli_fast.suite.result import ResultFile

WARMUP_LIMIT = 4
ENGINES = ("torch", "ort", "tensorrt", "auto")


@dataclass
class BusyConfig:
    engines: str = option("torch,ort", help="ENGINE[:PRECISION], comma-separated (torch, ort, tensorrt, auto)")
    limit: int = option(1000, min=1, help="examples of the embedded sample (breaknli-fast run's default)")
    active: bool = option(True, flag="--active/--no-active", help="also time torch with OMP_WAIT_POLICY=ACTIVE")
    timeout: float = option(3600.0, min=1.0, max=86400.0, why="a day per process",
                            help="seconds after which a process is stopped (recorded)")
    run_arg: tuple[str, ...] = option((), help="one more argument of every breaknli-fast run (repeatable)")


@dataclass
class BusyProcess:
    returncode: int | None = None
    wall_seconds: float | None = None
    timed_out: bool | None = None
    peak_rss_mib: float | None = None
    cpu_seconds: float | None = None
    loop_seconds: float | None = None
    examples: int | None = None
    error: str | None = field(default=None, metadata=OMIT)
    same_metrics_as_alone: bool | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BusyScenario:
    load_average_before: list[float] | None = None
    processes: list[BusyProcess] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BusyVariant:
    label: str | None = None
    engine: str | None = None
    precision: str | None = None
    env: dict[str, str] | None = None
    omp_wait_policy_in_process: str | None = None
    command: str | None = None
    alone: BusyScenario | None = None
    contended: BusyScenario | None = None
    slowdown_wall: float | None = None
    slowdown_loop: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BusyPayload:
    limit: int | None = None
    extra_args: list[str] | None = None
    timeout_s: float | None = None
    warmup_limit: int | None = None
    variants: list[BusyVariant] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def parse_engines(text: str) -> list[tuple[str, str | None]]:
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        engine, _, precision = item.partition(":")
        if engine not in ENGINES:
            raise UserError(f"unknown engine {engine!r} in engines ({', '.join(ENGINES)})")
        out.append((engine, precision or None))
    if not out:
        raise UserError("engines names no engine")
    return out


def _run_args(v: BusyVariant, limit: int, extra: list[str]) -> list[str]:
    args = ["run", "--limit", str(limit), "--engine", str(v.engine)]
    if v.precision:
        args += ["--precision", v.precision]
    return args + list(extra)


def _environment(v: BusyVariant) -> dict[str, str]:
    env = {k: x for k, x in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return {**env, "HF_HUB_OFFLINE": "1", **(v.env or {})}


def _wait_policy(v: BusyVariant) -> str | None:
    """OMP_WAIT_POLICY as a breaknli-fast process started with this variant's environment sees it."""
    code = "import os, breaknli_fast; print(os.environ.get('OMP_WAIT_POLICY', ''))"
    proc = subprocess.run([sys.executable, "-c", code], env=_environment(v), capture_output=True, text=True)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def _report(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _start(v: BusyVariant, limit: int, extra: list[str], outs: list[Path],
           timeout: float) -> list[tuple[BusyProcess, dict[str, Any] | None]]:
    """len(outs) identical runs, started together (a barrier), each into its own fresh folder."""
    from breaknli_fast.suite.provenance import run_timed, tail

    for out in outs:
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
    barrier = threading.Barrier(len(outs))
    results: list[dict[str, Any]] = [{} for _ in outs]

    def one(i: int, out: Path) -> None:
        cmd = [sys.executable, "-m", "breaknli_fast.cli", *_run_args(v, limit, extra), "--out", str(out)]
        results[i] = run_timed(cmd, env=_environment(v), log=out.with_name(out.name + ".log"), timeout=timeout,
                               start=barrier)

    threads = [threading.Thread(target=one, args=(i, out)) for i, out in enumerate(outs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    done = []
    for res, out in zip(results, outs):
        rep = _report(out) if res["returncode"] == 0 else None
        p = BusyProcess(returncode=res["returncode"], wall_seconds=res["wall_seconds"], timed_out=res["timed_out"],
                        peak_rss_mib=res["peak_rss_mib"], cpu_seconds=res["cpu_seconds"],
                        loop_seconds=rep["throughput"]["wall_seconds"] if rep else None,
                        examples=rep["throughput"]["examples"] if rep else None)
        if p.returncode != 0:
            why = "timed out" if p.timed_out else f"exit code {p.returncode}"
            p.error = f"{why}: {tail(out.with_name(out.name + '.log'), 300)}"
            print(f"  {v.label} -> {out.name}: {p.error}", file=sys.stderr)
        done.append((p, rep))
    return done


def _same(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool | None:
    if a is None or b is None:
        return None
    return a.get("metrics") == b.get("metrics") and a.get("funnel") == b.get("funnel")


class Busy(Measurement):
    name = "busy"
    summary = "the default run alone and beside a second one, per engine"
    kind = "busy"
    config_class = BusyConfig
    payload_class = BusyPayload
    whole_process = True
    remainder = "run_arg"
    legacy_scripts = ("bench_busy.py",)

    def engines(self, config: BusyConfig) -> list[str]:
        return [e for e, _ in parse_engines(config.engines)]

    def run(self, config: BusyConfig, recorder: Any) -> BusyPayload:
        from breaknli_fast.suite.provenance import load_average

        extra = list(config.run_arg)
        variants = []
        for engine, precision in parse_engines(config.engines):
            label = engine + (f":{precision}" if precision else "")
            variants.append(BusyVariant(label=label, engine=engine, precision=precision, env={}))
            if engine == "torch" and config.active:
                variants.append(BusyVariant(label=f"{label} OMP_WAIT_POLICY=ACTIVE", engine=engine,
                                            precision=precision, env={"OMP_WAIT_POLICY": "ACTIVE"}))

        def folder(v: BusyVariant, name: str) -> Path:
            return recorder.work / str(v.label).replace(":", "-").replace("=", "-").replace(" ", "-") / name

        warm = set()
        for v in variants:  # fills the export cache: no timed process exports, and no two export at once
            if (v.engine, v.precision) in warm:
                continue
            warm.add((v.engine, v.precision))
            print(f"warm-up {v.label}", file=sys.stderr, flush=True)
            p, _ = _start(v, WARMUP_LIMIT, extra, [folder(v, "warmup")], config.timeout)[0]
            if p.returncode != 0:
                raise UserError(f"the warm-up run of {v.label} failed: {p.error}")
        for v in variants:
            v.omp_wait_policy_in_process = _wait_policy(v)
            v.command = " ".join([f"{k}={x}" for k, x in (v.env or {}).items()]
                                 + [shlex.join(["breaknli-fast", *_run_args(v, config.limit, extra), "--out", "DIR"])])
            reports: dict[str, list[dict[str, Any] | None]] = {}
            for scenario, names in (("alone", ["alone"]), ("contended", ["contended-a", "contended-b"])):
                print(f"{v.label}: {scenario}", file=sys.stderr, flush=True)
                load = load_average()
                procs = _start(v, config.limit, extra, [folder(v, n) for n in names], config.timeout)
                setattr(v, scenario, BusyScenario(load_average_before=load, processes=[p for p, _ in procs]))
                reports[scenario] = [r for _, r in procs]
            quiet = v.alone.processes[0]
            for p, rep in zip(v.contended.processes, reports["contended"]):
                p.same_metrics_as_alone = _same(rep, reports["alone"][0])
            ok = [p for p in v.contended.processes if p.returncode == 0]
            if quiet.returncode == 0 and len(ok) == 2:
                v.slowdown_wall = round(max(p.wall_seconds for p in ok) / quiet.wall_seconds, 2)
                v.slowdown_loop = round(max(p.loop_seconds for p in ok) / quiet.loop_seconds, 2)
            print(f"{v.label}: alone {quiet.wall_seconds:.1f} s (loop {quiet.loop_seconds}); contended "
                  + ", ".join(f"{p.wall_seconds:.1f} s (loop {p.loop_seconds})" for p in v.contended.processes),
                  file=sys.stderr, flush=True)
        if any(p.returncode != 0 for v in variants for s in (v.alone, v.contended) for p in s.processes):
            recorder.exit_code = 1
        return BusyPayload(limit=config.limit, extra_args=extra, timeout_s=config.timeout,
                           warmup_limit=WARMUP_LIMIT, variants=variants)


# -- BENCHMARKS.md ----------------------------------------------------------------------------------------------

def busy_proc(p: BusyProcess | None) -> str:
    if blank(p):
        return "–"
    if p.returncode != 0:
        return "timed out" if p.timed_out else f"failed ({p.returncode})"
    return f"{f(p.wall_seconds, '.1f')} / {f(p.loop_seconds, '.1f')} / {f(p.cpu_seconds, '.1f')}"


def busy_title(doc: ResultFile) -> str:
    return f"{dig(doc, 'payload', 'limit')} examples of the embedded evaluation slice (`--dataset sample`)"


def busy(doc: ResultFile) -> str:
    p: BusyPayload = doc.payload
    rows = []
    for v in p.variants or []:
        c = dig(v, "contended", "processes") or []
        env = ", ".join(f"{k}={x} (set)" for k, x in (v.env or {}).items())
        if not env:
            env = f"not set; in the process: OMP_WAIT_POLICY={v.omp_wait_policy_in_process or 'unset'}"
        rows.append([v.label, env,
                     busy_proc(dig(v, "alone", "processes", 0)), busy_proc(dig(c, 0)), busy_proc(dig(c, 1)),
                     f(v.slowdown_wall, ".2f", "×"), f(v.slowdown_loop, ".2f", "×"),
                     ", ".join(yes_no(x.same_metrics_as_alone) for x in c) or "–",
                     f"{f(dig(v, 'alone', 'load_average_before', 0))} / "
                     f"{f(dig(v, 'contended', 'load_average_before', 0))}"])
    header = ["engine", "environment", "alone: wall / loop / CPU s", "contended, process 1: wall / loop / CPU s",
              "contended, process 2", "slowdown (wall)", "slowdown (loop)", "contended metrics identical to alone",
              "load avg before (alone / contended)"]
    cmds = "\n".join(f"- {v.label}: `{portable_command(str(v.command))}`" for v in p.variants or [])
    return "\n".join([f"The default `breaknli-fast run` (mini models, embedded evaluation slice, --limit {p.limit}) per "
                      "engine, as a subprocess into a fresh `--out`: alone, then two identical processes started at "
                      "the same moment. Wall = process start to exit (loading included); loop = the run's "
                      "`throughput.wall_seconds`; CPU = user + system seconds of the process; slowdown = the slower "
                      "contended process against the run alone. Processes stopped after "
                      f"{f(p.timeout_s, '.0f')} s are shown as timed out.", "", table(header, rows), "",
                      "Commands (DIR: a fresh folder per process):", "", cmds])


def busy_memory(doc: ResultFile) -> str:
    p: BusyPayload = doc.payload
    rows = []
    for v in p.variants or []:
        c = dig(v, "contended", "processes") or []
        rows.append([v.label, f(dig(v, "alone", "processes", 0, "peak_rss_mib"), ".0f"),
                     ", ".join(f(x.peak_rss_mib, ".0f") for x in c) or "–"])
    return "\n".join([f"Peak RSS of each `breaknli-fast run --limit {p.limit}` process of section 4.", "",
                      table(["engine", "alone MiB", "contended MiB (each)"], rows)])


Busy.sections = (
    Section("3/busy", "A `breaknli-fast run` process, alone and contended", "the busy-machine timing", of_kind("busy"),
            20, render=busy_memory),
    Section("4/busy", "The default run alone and beside a second one", "the busy-machine timing", of_kind("busy"), 10,
            render=busy, file_title=busy_title),
)
