"""A study in one process against the same study sharded over Ray actors (kind ``ray``; the ``ray`` extra), on the
mini models: wall time, per-worker throughput, the overhead per chunk, and whether the records are the same; then a
paper estimate of a full study from the measured per-worker rate.

Configurations: one process with 1 and with 2 torch threads; Ray with 1 worker x 1 thread and 2 workers x 1 thread
(a local instance). The estimate: examples of a study / (per-worker rate x N workers), for the BreakNLI seed's
study (MNLI matched, 9,815 pairs, ten classifiers); it scales the rate measured here (CPU, mini models), so it says
how the sharding scales, not how fast real models run on GPUs.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import f, of_kind, table, yes_no
from breaknli_fast.suite.result import ResultFile

MNLI_MATCHED = 9815
SEED_STUDY_CLASSIFIERS = 10


@dataclass
class RayConfig:
    limit: int = option(300, min=1, help="sample examples")
    engine: str = option("torch", help="the engine of every configuration")
    chunk_size: int = option(16, min=1, max=4096, help="examples per chunk (a Ray task)")


@dataclass
class RayWorker:
    worker: Any = None
    chunks: int | None = None
    examples_per_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RayRun:
    label: str | None = None
    threads: int | None = None
    workers: int | None = None
    wall_s: float | None = None
    loop_s: float | None = None
    examples: int | None = None
    examples_per_s: float | None = None
    chunks: int | None = None
    per_worker: list[RayWorker] | None = None
    same_records_as_first: bool | None = None
    speedup_vs_first: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RayEstimate:
    units: int | None = None
    hours_by_workers: dict[str, float] | None = None
    assumes: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RayPayload:
    limit: int | None = None
    engine: str | None = None
    chunk_size: int | None = None
    runs: list[RayRun] | None = None
    ray_overhead_s_per_chunk: float | None = None
    per_worker_examples_per_s: float | None = None
    estimate: RayEstimate | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _key(r: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in r.items() if k != "line"}, sort_keys=True)


class Ray(Measurement):
    name = "ray"
    summary = "a study in one process against the same study sharded over Ray actors"
    kind = "ray"
    config_class = RayConfig
    payload_class = RayPayload
    requires = ("ray",)
    legacy_scripts = ("bench_ray.py",)

    def engines(self, config: RayConfig) -> list[str]:
        return [config.engine]

    def run(self, config: RayConfig, recorder: Any) -> RayPayload:
        from breaknli_fast.bench.types import from_json
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
        from breaknli_fast.study import run_study
        from breaknli_fast.study.distributed import RayConfig as Sharding
        from breaknli_fast.study.loading import EngineConfig

        data = load_examples("sample", limit=config.limit)
        loop = BreakNLIConfig(chunk_size=config.chunk_size)
        runs, keys = [], {}
        configs = [("one process, 1 thread", 1, None), ("one process, 2 threads", 2, None),
                   ("Ray, 1 worker x 1 thread", 1, Sharding(workers=1, threads_per_worker=1)),
                   ("Ray, 2 workers x 1 thread", 1, Sharding(workers=2, threads_per_worker=1))]
        for label, threads, ray in configs:
            print(f"[{label}]", file=sys.stderr)
            t0 = time.perf_counter()
            res = run_study("breaknli", loop, data=data, dataset="sample",
                            engine=EngineConfig(engine=config.engine, threads=threads), ray=ray)
            wall = time.perf_counter() - t0
            t = res.report["throughput"]
            chunks = sum(-(-len(exs) // config.chunk_size) for _, exs in res.probe.groups(data))
            workers = t.get("workers")
            runs.append(RayRun(label=label, threads=threads, workers=ray.workers if ray else None,
                               wall_s=round(wall, 2), loop_s=t["wall_seconds"], examples=t["examples"],
                               examples_per_s=t["examples_per_s"], chunks=chunks,
                               per_worker=[from_json(RayWorker, w) for w in workers] if workers else workers))
            keys[label] = sorted(map(_key, res.records))
        ref = runs[0]
        for r in runs:
            r.same_records_as_first = keys[r.label] == keys[ref.label]
            r.speedup_vs_first = round(ref.loop_s / r.loop_s, 3) if r.loop_s else None
        one = next(r for r in runs if r.label.startswith("Ray, 1 worker"))
        overhead = (one.loop_s - ref.loop_s) / max(1, one.chunks)
        rates = [w.examples_per_s for r in runs if r.per_worker for w in r.per_worker if w.examples_per_s]
        rate = sum(rates) / len(rates) if rates else None
        units = 2 * MNLI_MATCHED * SEED_STUDY_CLASSIFIERS  # both modes select most pairs; an upper bound
        return RayPayload(
            limit=config.limit, engine=config.engine, chunk_size=config.chunk_size, runs=runs,
            ray_overhead_s_per_chunk=round(overhead, 4), per_worker_examples_per_s=rate,
            estimate=RayEstimate(units=units, hours_by_workers=({str(n): round(units / (rate * n) / 3600, 2)
                                                                 for n in (1, 2, 4, 8, 16)} if rate else None),
                                 assumes="the per-worker rate measured here (CPU, one thread, mini models) for every "
                                         "unit of the BreakNLI seed's study (MNLI matched, both modes, ten "
                                         "classifiers); real models on GPUs run at other rates: scale by their "
                                         "measured rate"))


def ray_runs(doc: ResultFile) -> str:
    p: RayPayload = doc.payload
    rows = [[r.label, f(r.loop_s, ".1f"), f(r.speedup_vs_first, ".2f", "×"),
             f(r.examples_per_s, ".2f"), yes_no(r.same_records_as_first),
             "; ".join(f"worker {w.worker}: {w.chunks} chunks, {f(w.examples_per_s, '.2f')} ex/s"
                       for w in (r.per_worker or [])) or "–"] for r in p.runs or []]
    est = p.estimate or RayEstimate()
    erows = [[n, h] for n, h in (est.hours_by_workers or {}).items()]
    return "\n".join([f"BreakNLI on {p.limit} sample examples (mini models, engine {p.engine}, chunks of "
                      f"{p.chunk_size}). Ray's overhead per chunk (1 worker against one process, both 1 thread): "
                      f"{f(p.ray_overhead_s_per_chunk, '.3f')} s.", "",
                      table(["configuration", "loop s", "speed-up vs first", "examples/s", "same records as first",
                             "per worker"], rows), "",
                      f"Paper estimate of a full study ({est.units} units): hours = units / (per-worker rate "
                      f"{f(p.per_worker_examples_per_s, '.2f')} examples/s × N workers); assumes {est.assumes}.",
                      "", table(["workers N", "hours"], erows)])


Ray.sections = (
    Section("2c/ray", "1 vs 2 workers on this machine", "a Ray measurement", of_kind("ray"), 10, render=ray_runs),
)
