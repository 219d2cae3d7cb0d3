#!/usr/bin/env python
"""A study in one process against the same study sharded over Ray actors (the ``ray`` extra), on the mini models:
wall time, per-worker throughput, the overhead per chunk, and whether the records are the same; then a paper
estimate of a full study from the measured per-worker rate.

A script, not a bench option: it times a study sharded over Ray actors against one process; bench drives no study
runner.

    python scripts/bench_ray.py --limit 300 --out benchmarks/results/ray.json

Configurations: one process with 1 and with 2 torch threads; Ray with 1 worker x 1 thread and 2 workers x 1
thread (a local instance). The estimate: examples of a study / (per-worker rate x N workers), for the BreakNLI
seed's study (MNLI matched, 9,815 pairs, ten classifiers); it scales the rate measured here (CPU, mini models),
so it says how the sharding scales, not how fast real models run on GPUs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import Recorder, script_command  # noqa: E402

from breaknli_fast.data.loaders import load_examples  # noqa: E402
from breaknli_fast.study.loading import EngineConfig  # noqa: E402
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig  # noqa: E402
from breaknli_fast.study import run_study  # noqa: E402
from breaknli_fast.study.distributed import RayConfig  # noqa: E402

MNLI_MATCHED = 9815
SEED_STUDY_CLASSIFIERS = 10


def _key(r: dict[str, Any]) -> str:
    return json.dumps({k: v for k, v in r.items() if k != "line"}, sort_keys=True)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--limit", type=int, default=300)
    ap.add_argument("--engine", default="torch")
    ap.add_argument("--chunk-size", type=int, default=16)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rec = Recorder("ray", script_command(__file__, argv))
    data = load_examples("sample", limit=args.limit)
    loop = BreakNLIConfig(chunk_size=args.chunk_size)
    runs, keys = [], {}
    configs = [("one process, 1 thread", 1, None), ("one process, 2 threads", 2, None),
               ("Ray, 1 worker x 1 thread", 1, RayConfig(workers=1, threads_per_worker=1)),
               ("Ray, 2 workers x 1 thread", 1, RayConfig(workers=2, threads_per_worker=1))]
    for label, threads, ray in configs:
        print(f"[{label}]", file=sys.stderr)
        t0 = time.perf_counter()
        res = run_study("breaknli", loop, data=data, dataset="sample",
                        engine=EngineConfig(engine=args.engine, threads=threads), ray=ray)
        wall = time.perf_counter() - t0
        t = res.report["throughput"]
        chunks = sum(-(-len(exs) // args.chunk_size) for _, exs in res.probe.groups(data))
        runs.append({"label": label, "threads": threads, "workers": ray.workers if ray else None,
                     "wall_s": round(wall, 2), "loop_s": t["wall_seconds"], "examples": t["examples"],
                     "examples_per_s": t["examples_per_s"], "chunks": chunks, "per_worker": t.get("workers")})
        keys[label] = sorted(map(_key, res.records))
    ref = runs[0]
    for r in runs:
        r["same_records_as_first"] = keys[r["label"]] == keys[ref["label"]]
        r["speedup_vs_first"] = round(ref["loop_s"] / r["loop_s"], 3) if r["loop_s"] else None
    one = next(r for r in runs if r["label"].startswith("Ray, 1 worker"))
    single = ref
    overhead = (one["loop_s"] - single["loop_s"]) / max(1, one["chunks"])
    rates = [w["examples_per_s"] for r in runs if r["per_worker"] for w in r["per_worker"] if w.get("examples_per_s")]
    rate = sum(rates) / len(rates) if rates else None
    study_units = 2 * MNLI_MATCHED * SEED_STUDY_CLASSIFIERS  # both modes select most pairs; an upper bound
    estimate = ({str(n): round(study_units / (rate * n) / 3600, 2) for n in (1, 2, 4, 8, 16)} if rate else None)
    payload = {"limit": args.limit, "engine": args.engine, "chunk_size": args.chunk_size, "runs": runs,
               "ray_overhead_s_per_chunk": round(overhead, 4), "per_worker_examples_per_s": rate,
               "estimate": {"units": study_units, "hours_by_workers": estimate,
                            "assumes": "the per-worker rate measured here (CPU, one thread, mini models) for every "
                                       "unit of the BreakNLI seed's study (MNLI matched, both modes, ten classifiers); "
                                       "real models on GPUs run at other rates: scale by their measured rate"}}
    rec.save(args.out, payload)
    for r in runs:
        print(f"{r['label']:>28}: loop {r['loop_s']:.1f} s, speed-up {r['speedup_vs_first']}, same records "
              f"{r['same_records_as_first']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
