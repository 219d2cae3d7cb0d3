"""The loop as a user runs it (kind ``run_loop``): ``breaknli-fast run`` once per engine, a fresh process per run,
in rounds (the engines in turn).

Exports are cached beforehand by a warm-up run per engine (not timed). Per engine: the loop's wall time from the
run's ``report.json`` (model loading excluded) and the process's (included), median over the rounds, the stage
seconds of the median run, the speed-up over the first engine, and each run's peak RSS and CPU seconds (the
kernel's rusage of the process). An engine may carry options of ``breaknli-fast run`` for itself only, as
``key=value`` after the precision: ``torch:fp32:workers=2`` runs ``--engine torch --precision fp32 --workers 2``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breaknli_fast.errors import UserError
from breaknli_fast.limits import MAX_REPEATS
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import MODE_SHORT, STAGES, f, of_kind, table, yes_no
from breaknli_fast.suite.result import ResultFile


@dataclass
class RunLoopConfig:
    engines: str = option("torch:fp32,ort:fp32,ort:int8",
                          help="ENGINE:PRECISION[:key=value...], comma-separated (options of breaknli-fast run for "
                               "that engine alone)")
    limit: int = option(200, min=1, help="examples of each run (the embedded sample)")
    rounds: int = option(3, min=1, max=MAX_REPEATS, help="runs per engine, the engines in turn")
    run_arg: tuple[str, ...] = option((), help="one more argument of every breaknli-fast run (repeatable)")


@dataclass
class LoopRun:
    """One ``breaknli-fast run`` process."""

    process_seconds: float | None = None
    loop_seconds: float | None = None
    stages: dict[str, float] | None = None
    peak_rss_mib: float | None = None
    cpu_seconds: float | None = None
    examples: int | None = None
    classifier_pairs: int | None = None
    generated_tokens: int | None = None
    overall_inequality: dict[str, float | None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class LoopEngine:
    """One engine over the rounds."""

    loop_seconds_median: float | None = None
    loop_seconds_all: list[float] = field(default_factory=list)
    process_seconds_median: float | None = None
    peak_rss_mib_max: float | None = None
    overall_inequality_identical: bool | None = None
    stages_of_median_run: dict[str, float] | None = None
    examples: int | None = None
    classifier_pairs: int | None = None
    generated_tokens: int | None = None
    speedup_loop: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RunLoopPayload:
    limit: int | None = None
    rounds: int | None = None
    load_avg_1min: dict[str, float] | None = None
    engines: dict[str, LoopEngine] | None = None
    runs: dict[str, list[LoopRun]] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def run_args(spec: str) -> list[str]:
    """``ENGINE:PRECISION[:key=value...]`` -> arguments of ``breaknli-fast run``; checked as ``breaknli-fast
    bench --engines`` checks its entries (``label=`` names nothing for ``run`` and is left out)."""
    from breaknli_fast.bench.specs import BenchSpecError, parse_engine

    try:
        parsed = parse_engine(spec)
    except BenchSpecError as e:
        raise UserError(str(e)) from None
    args = ["--engine", parsed.engine, "--precision", parsed.precision]
    for kv in spec.split(":")[2:]:  # the values as written, for the command line
        key, val = (x.strip() for x in kv.split("=", 1))
        if key != "label":
            args += [f"--{key.replace('_', '-')}", val]
    return args


def one_run(spec: str, limit: int, out: Path, extra: list[str]) -> LoopRun:
    from breaknli_fast.suite.provenance import run_timed, tail

    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "breaknli_fast.cli", "run", "--limit", str(limit), *run_args(spec), "--out", str(out),
           *extra]
    log = out.with_name(out.name + ".log")
    proc = run_timed(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, log=log)
    if proc["returncode"] != 0:
        raise UserError(f"{spec} failed ({proc['returncode']}): {tail(log, 500)}")
    rep = json.loads((out / "report.json").read_text())
    t = rep["throughput"]
    return LoopRun(process_seconds=round(proc["wall_seconds"], 2), loop_seconds=t["wall_seconds"],
                   stages=t["stage_seconds"], peak_rss_mib=proc["peak_rss_mib"], cpu_seconds=proc["cpu_seconds"],
                   examples=t["examples_this_invocation"], classifier_pairs=t["classifier_pairs"],
                   generated_tokens=t["generated_tokens"],
                   overall_inequality={mode: m["overall"].get("inequality") for mode, m in rep["metrics"].items()})


class RunLoop(Measurement):
    name = "run-loop"
    summary = "breaknli-fast run per engine, a fresh process each, in rounds"
    kind = "run_loop"
    config_class = RunLoopConfig
    payload_class = RunLoopPayload
    whole_process = True
    remainder = "run_arg"
    legacy_scripts = ("bench_run_loop.py",)

    def run(self, config: RunLoopConfig, recorder: Any) -> RunLoopPayload:
        specs = [s.strip() for s in config.engines.split(",") if s.strip()]
        for spec in specs:
            run_args(spec)  # malformed specs stop here, before any run
        extra = list(config.run_arg)
        work = recorder.work

        def folder(spec: str, tag: str) -> Path:
            return work / f"{spec.replace(':', '-').replace('=', '')}-{tag}"

        for spec in specs:  # warm-up: exports, caches
            one_run(spec, 4, folder(spec, "warm"), extra)
        runs: dict[str, list[LoopRun]] = {spec: [] for spec in specs}
        loads = []
        for r in range(config.rounds):
            for spec in specs:
                try:
                    loads.append(os.getloadavg()[0])
                except OSError:
                    loads.append(float("nan"))
                res = one_run(spec, config.limit, folder(spec, f"r{r}"), extra)
                runs[spec].append(res)
                print(f"round {r + 1}/{config.rounds} {spec}: loop {res.loop_seconds:.2f} s, "
                      f"process {res.process_seconds:.2f} s", flush=True)
        summary: dict[str, LoopEngine] = {}
        for name, rs in runs.items():
            med = sorted(rs, key=lambda x: x.loop_seconds)[len(rs) // 2]
            summary[name] = LoopEngine(
                loop_seconds_median=med.loop_seconds, loop_seconds_all=[x.loop_seconds for x in rs],
                process_seconds_median=statistics.median(x.process_seconds for x in rs),
                peak_rss_mib_max=max(x.peak_rss_mib for x in rs),
                overall_inequality_identical=all(x.overall_inequality == rs[0].overall_inequality for x in rs),
                stages_of_median_run=med.stages, examples=med.examples, classifier_pairs=med.classifier_pairs,
                generated_tokens=med.generated_tokens)
        ref = summary[next(iter(summary))].loop_seconds_median
        for s in summary.values():
            s.speedup_loop = round(ref / s.loop_seconds_median, 2)
        return RunLoopPayload(limit=config.limit, rounds=config.rounds,
                              load_avg_1min={"min": min(loads), "max": max(loads)}, engines=summary, runs=runs)


# -- BENCHMARKS.md ----------------------------------------------------------------------------------------------

def run_loop_speed(doc: ResultFile) -> str:
    p: RunLoopPayload = doc.payload
    rows = []
    for name, s in (p.engines or {}).items():
        st = s.stages_of_median_run or {}
        rows.append([name, f(s.loop_seconds_median), ", ".join(f(x) for x in s.loop_seconds_all),
                     f(s.speedup_loop, ".2f", "×"), f(s.process_seconds_median, ".1f")]
                    + [f(st.get(k)) for k in STAGES] + [s.examples])
    header = ["engine", "loop s (median)", "loop s, every round", "speed-up (loop)", "process s (median)"] + \
             [f"{k} s" for k in STAGES] + ["example records"]
    return "\n".join([f"`breaknli-fast run --limit {p.limit}` per engine, a fresh process per run, "
                      f"rounds: {p.rounds} (engines in turn); loop = the run's `throughput.wall_seconds` "
                      "(model loading excluded), process = start to exit; stage seconds of the median run; "
                      "speed-up over the first engine.", "", table(header, rows)])


def run_loop_parity(doc: ResultFile) -> str:
    p: RunLoopPayload = doc.payload
    engines = p.engines or {}
    runs = p.runs or {}
    first = next(iter(runs.values()), [])
    ref = first[0].overall_inequality if first else None
    rows = []
    for name, rs in runs.items():
        vals = rs[0].overall_inequality if rs else {}
        cell = "; ".join(f"{MODE_SHORT.get(m, m)} {f(v, '.2f')}" for m, v in (vals or {}).items())
        same = engines[name].overall_inequality_identical if name in engines else None
        rows.append([name, cell, yes_no(same if same is not None else all(r.overall_inequality == vals for r in rs)),
                     yes_no(all(r.overall_inequality == ref for r in rs) if ref is not None else None)])
    return "\n".join([f"Overall inequality breakage (%) of each engine's own `breaknli-fast run --limit {p.limit}`.",
                      "", table(["engine", "Overall inequality %", "same in every round",
                                 f"same as {next(iter(runs), '–')}"], rows)])


def run_loop_memory(doc: ResultFile) -> str:
    p: RunLoopPayload = doc.payload
    rows = [[name, f(s.peak_rss_mib_max, ".0f"),
             ", ".join(f(r.peak_rss_mib, ".0f") for r in (p.runs or {}).get(name, []))]
            for name, s in (p.engines or {}).items()]
    return "\n".join([f"Peak RSS of each `breaknli-fast run --limit {p.limit}` process (the kernel's rusage).", "",
                      table(["engine", "peak RSS MiB (largest)", "every round"], rows)])


RunLoop.sections = (
    Section("1/run-loop", "The loop as a user runs it: `breaknli-fast run` per engine", "the run-loop timing",
            of_kind("run_loop"), 20, render=run_loop_speed),
    Section("2/run-loop", "The loop's breakage per engine", "the run-loop timing", of_kind("run_loop"), 30,
            render=run_loop_parity),
    Section("3/run-loop", "A `breaknli-fast run` process", "the run-loop timing", of_kind("run_loop"), 10,
            render=run_loop_memory),
)
