#!/usr/bin/env python
"""Speed and parity of a probe across engines: the same probe, data and seed on each engine (in one process,
through the study entry point, no run directory), then the paired difference of every headline metric against
the first engine (the torch fp32 reference) over the examples both runs scored, with its equivalence verdict.

    python scripts/bench_probe.py --probe permutation --limit 1000 --q 100 --out benchmarks/results/probe-permutation.json
    python scripts/bench_probe.py --probe breaknli --limit 500 --relation-filter lazy,full --engines torch:fp32,ort:fp32,ort:int8 --out ...
    python scripts/bench_probe.py --probe accuracy --dataset taxinli --limit 0 --by taxinli --out ...
    python scripts/bench_probe.py --probe permutation --random-weights roberta-large --limit 40 --q 20 --speed-only --out ...

An engine is ENGINE:PRECISION (e.g. ort:int8); ``--relation-filter`` (BreakNLI) runs every engine with each
filter. ``--by taxinli`` (or column names) adds the paired differences per category (examples where the 0/1
column is 1). ``--random-weights`` runs real shapes with random weights (speed only: parity is not meaningful).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from provenance import Recorder, script_command  # noqa: E402

from breaknli_fast.bench.parity import paired_diff_ci  # noqa: E402
from breaknli_fast.data.loaders import TAXINLI_CATEGORIES, load_examples  # noqa: E402
from breaknli_fast.study.loading import EngineConfig, load_models  # noqa: E402
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig  # noqa: E402
from breaknli_fast.stats import equivalence  # noqa: E402
from breaknli_fast.probes.accuracy import AccuracyConfig  # noqa: E402
from breaknli_fast.probes.permutation import PermutationConfig  # noqa: E402
from breaknli_fast.study import run_study  # noqa: E402
from breaknli_fast.study.breakdown import column_groups  # noqa: E402


def _probe_config(args: argparse.Namespace, relation_filter: str | None) -> Any:
    if args.probe == "permutation":
        return PermutationConfig(q=args.q, seed=args.seed)
    if args.probe == "accuracy":
        return AccuracyConfig(seed=args.seed)
    return BreakNLIConfig(seed=args.seed, relation_filter=relation_filter or "lazy")


def _paired(ref: dict[str, float], other: dict[str, float], tolerance: float) -> dict[str, Any]:
    keys = sorted(set(ref) & set(other))
    d = paired_diff_ci([other[k] for k in keys], [ref[k] for k in keys])
    d.update(equivalence(d["diff"], d["ci"], d["n"], tolerance))
    d["only_reference"] = len(set(ref) - set(other))
    d["only_engine"] = len(set(other) - set(ref))
    d["identical"] = bool(keys) and all(ref[k] == other[k] for k in keys) and not d["only_reference"] \
        and not d["only_engine"]
    return d


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--probe", default="permutation", choices=["permutation", "breaknli", "accuracy"])
    ap.add_argument("--dataset", default="sample")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--engines", default="torch:fp32,ort:fp32,ort:int8")
    ap.add_argument("--relation-filter", default=None, help="breaknli: comma-separated filters (lazy,full)")
    ap.add_argument("--q", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--by", default=None, help="taxinli, or comma-separated 0/1 columns")
    ap.add_argument("--random-weights", default=None, help="a classifier shape, e.g. roberta-large (speed only)")
    ap.add_argument("--speed-only", action="store_true")
    ap.add_argument("--tolerance", type=float, default=1.0)
    ap.add_argument("--out", required=True)
    args = ap.parse_args(argv)
    rec = Recorder("probe", script_command(__file__, argv))

    data = load_examples(args.dataset, limit=args.limit or None)
    classifier, generator = "mini-nli", "mini-t5"
    if args.random_weights:
        from breaknli_fast.bench.shapes import build_random_model

        texts = [t for ex in data.examples for t in (ex.premise, ex.hypothesis)]
        classifier = str(build_random_model(args.random_weights, texts=texts))
        args.speed_only = True
    by = list(TAXINLI_CATEGORIES) if args.by == "taxinli" else [c for c in (args.by or "").split(",") if c]
    categories = {}
    for col in by:
        g = column_groups(data, col)
        categories[col] = next((ids for _, v, ids in g["groups"] if v == "1"), set())

    filters = (args.relation_filter or "").split(",") if args.probe == "breaknli" and args.relation_filter else [None]
    runs: list[dict[str, Any]] = []
    per_example: dict[str, dict[str, dict[str, float]]] = {}
    for spec in args.engines.split(","):
        engine, precision = spec.split(":")[:2]
        models = load_models(EngineConfig(engine=engine, precision=precision, threads=args.threads), {"classifier": classifier,
                             "generator": generator if args.probe == "breaknli" else None})
        for rf in filters:
            label = spec + (f" ({rf})" if rf else "")
            print(f"[{label}] running", file=sys.stderr)
            # the engines keep the pairs they classified: a second run on the same models would reuse them
            for m in (models.classifier, *(models.mlm or {}).values()):
                m.clear_cache()
            t0 = time.perf_counter()
            res = run_study(args.probe, _probe_config(args, rf), data=data, dataset=args.dataset, models=models)
            wall = time.perf_counter() - t0
            t = res.report["throughput"]
            runs.append({"label": label, "engine": engine, "precision": precision, "relation_filter": rf,
                         "wall_s": round(wall, 3), "loop_s": t["wall_seconds"], "examples": t["examples"],
                         "classifier_pairs": t["classifier_pairs"], "classifier_pairs_per_s": t["classifier_pairs_per_s"],
                         "stage_seconds": t["stage_seconds"], "generated_tokens_per_s": t["generated_tokens_per_s"],
                         "relation_pairs": sum(r.get("relation_pairs", 0) for r in res.records),
                         "headline": res.probe.headline(res.records, data.examples)["rates"]})
            per_example[label] = res.probe.per_example(res.records)
    ref = runs[0]
    for r in runs:
        r["speedup"] = round(ref["loop_s"] / r["loop_s"], 3) if r["loop_s"] else None
        if args.speed_only or r is ref:
            continue
        pe, pr = per_example[r["label"]], per_example[ref["label"]]
        r["parity"] = {m: _paired(pr[m], pe.get(m, {}), args.tolerance) for m in pr}
        if categories:
            r["parity_by_category"] = {
                col: {m: _paired({k: v for k, v in pr[m].items() if k in ids},
                                 {k: v for k, v in pe.get(m, {}).items() if k in ids}, args.tolerance)
                      for m in pr if m.startswith("accuracy") or m == "A"}
                for col, ids in categories.items()}
    payload = {"probe": args.probe, "dataset": args.dataset, "examples": len(data.examples), "q": args.q,
               "classifier": args.random_weights or classifier,
               "generator": generator if args.probe == "breaknli" else None, "seed": args.seed,
               "tolerance_pp": args.tolerance, "speed_only": args.speed_only, "runs": runs,
               "category_sizes": {c: len(ids) for c, ids in categories.items()}}
    rec.save(args.out, payload)
    for r in runs:
        print(f"{r['label']:>24}: loop {r['loop_s']:.1f} s, {r['classifier_pairs_per_s']} pairs/s, "
              f"speed-up {r['speedup']}", file=sys.stderr)
        for m, p in (r.get("parity") or {}).items():
            print(f"{'':>24}  {m}: {p['diff']} [{p['ci']}] {p['verdict']} (n={p['n']})", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
