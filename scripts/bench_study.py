#!/usr/bin/env python
"""What a study measures about the models: one probe on one engine through the study entry point, its headline
rates and its breakdown by dataset columns (95 % CIs), saved as a result file.

A script, not a bench option: it reports what a study measures about the models (rates by dataset columns), not the
engines.

    python scripts/bench_study.py --probe breaknli --dataset aenli:3000 --out benchmarks/results/study-aenli.json
    python scripts/bench_study.py --probe breaknli --dataset kinship:3000 --by k --out benchmarks/results/study-kinship.json

``--by`` defaults to the dataset's own breakdown (aenli: phenomenon, kinship: k, TaxiNLI: its categories).
The figures describe the shipped mini models on that data (torch fp32 by default, the reference), not an
engine's speed: ``breaknli-fast bench --probe`` compares engines.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import Recorder, script_command  # noqa: E402

from breaknli_fast.study.loading import EngineConfig  # noqa: E402
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig  # noqa: E402
from breaknli_fast.probes.accuracy import AccuracyConfig  # noqa: E402
from breaknli_fast.study import run_study  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", default="breaknli", choices=["breaknli", "accuracy"])
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--limit", type=int, default=0, help="0: every example")
    ap.add_argument("--by", default=None, help="comma-separated columns (default: the dataset's own breakdown)")
    ap.add_argument("--engine", default="torch:fp32", help="ENGINE:PRECISION (default the torch fp32 reference)")
    ap.add_argument("--classifier", default="mini-nli")
    ap.add_argument("--generator", default="mini-t5")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rec = Recorder("study", script_command(__file__, argv))

    engine, precision = (args.engine.split(":") + ["fp32"])[:2]
    config = BreakNLIConfig(seed=args.seed) if args.probe == "breaknli" else AccuracyConfig(seed=args.seed)
    res = run_study(args.probe, config, dataset=args.dataset, limit=args.limit or None,
                    classifier=args.classifier, generator=args.generator,
                    engine=EngineConfig(engine=engine, precision=precision, threads=args.threads), by=args.by)
    headline = res.probe.headline(res.records, res.data.examples)
    t = res.report["throughput"]
    payload = {"probe": args.probe, "dataset": args.dataset, "examples": len(res.data.examples),
               "skips": res.data.skips.to_dict(), "seed": args.seed,
               "models": {"classifier": args.classifier,
                          "generator": args.generator if args.probe == "breaknli" else None},
               "engine": res.report.get("engine"), "notes": res.notes,
               "headline": headline, "breakdown": res.report.get("breakdown") or {},
               "loop_s": t["wall_seconds"]}
    rec.save(args.out, payload)
    for name, r in headline["rates"].items():
        print(f"{name:>28}: {r['rate'] if r['rate'] is None else round(r['rate'], 1)} (n={r['n']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
