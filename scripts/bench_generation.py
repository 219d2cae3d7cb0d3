"""Generation alone: tokens/s of each generator engine under the sampling variants.

A script, not a bench option: it sweeps samplers and compaction per generator engine in one process; a bench runs
one sampler.

Same prompts (the contradiction prompt on the first ``--prompts`` sample hypotheses), K candidates
each, one seed per prompt; every variant is timed ``--repeats`` times after one warm-up call, in
rounds (all variants, then all again), median reported. Variants: the ``fast`` and
``transformers`` samplers, and compaction (dropping finished rows) on / off. Also reports whether
each engine's candidates equal those of the first engine under the same variant.

    python scripts/bench_generation.py --engines torch:fp32,ort:fp32,ort:int8 --prompts 32 --k 20 \\
        --result benchmarks/results/generation.json

Engines are written as for ``breaknli-fast bench`` (``ENGINE:PRECISION[:key=value...]``; numbers and
``true`` / ``false`` are converted, ``generator=`` overrides ``--generator``), e.g. ``ort:int8:graph_topk=false``
samples on the decoder graph's full logits instead of its own top-k, ``validate=false`` skips the export's
validation (random weights).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from provenance import Recorder, script_command

VARIANTS = {  # name: (sampler, compact_share)
    "fast": ("fast", 0.25),
    "fast-no-compaction": ("fast", None),
    "transformers": ("transformers", 0.25),
    "transformers-no-compaction": ("transformers", None),
}


def main(argv: list[str] | None = None) -> None:
    from breaknli_fast.bench.specs import parse_engine
    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines.base import Decoding
    from breaknli_fast.engines.registry import load_generator
    from breaknli_fast.prompts import CONTRADICT_PROMPT

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default="torch:fp32,ort:fp32,ort:int8")
    ap.add_argument("--generator", default="mini-t5")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads and ORT intra-op threads")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--prompt-batch", type=int, default=None, help="prompts per generator batch (default: the engine's, 8)")
    ap.add_argument("--out", type=Path, default=None, help="write generation.json here")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("generation", script_command("bench_generation.py", argv))
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    exs = load_examples("sample", limit=args.prompts).examples
    prompts = [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in exs]
    seeds = list(range(len(prompts)))
    engines = {}
    for text in args.engines.split(","):
        spec = parse_engine(text)  # the bench's own ENGINE:PRECISION[:key=value...] syntax
        kw = {"threads": args.threads} if args.threads else {}  # every engine's loader takes them (torch's too)
        engines[text] = load_generator(spec.engine, spec.generator or args.generator, spec.precision, "cpu",
                                       **kw, **spec.config.extra)
        if args.prompt_batch:
            engines[text].prompt_batch = args.prompt_batch
    variants = [v.strip() for v in args.variants.split(",")]
    times: dict[tuple[str, str], list[float]] = {}
    tokens: dict[tuple[str, str], int] = {}
    outputs: dict[tuple[str, str], list] = {}
    for spec, g in engines.items():  # warm-up
        g.generate_ids(prompts[:4], args.k, Decoding(max_new_tokens=8), seeds[:4])
    for _ in range(args.repeats):
        for v in variants:
            sampler, share = VARIANTS[v]
            dec = Decoding(sampler=sampler)
            for spec, g in engines.items():
                g.compact_share = share
                t0 = time.perf_counter()
                ids = g.generate_ids(prompts, args.k, dec, seeds)
                times.setdefault((spec, v), []).append(time.perf_counter() - t0)
                tokens[(spec, v)] = sum(len(r) for rows in ids for r in rows)
                outputs[(spec, v)] = ids
    first = next(iter(engines))
    rows = []
    base = statistics.median(times[(first, variants[0])])
    for v in variants:
        for spec in engines:
            med = statistics.median(times[(spec, v)])
            same = outputs[(spec, v)] == outputs[(first, v)]
            rows.append({"engine": spec, "variant": v, "median_s": round(med, 3), "tokens": tokens[(spec, v)],
                         "tokens_per_s": round(tokens[(spec, v)] / med, 1), "speedup_vs_first_fast": round(base / med, 2),
                         "same_candidates_as_first_engine": same})
    print("| engine | sampling | median s | tokens | tokens/s | speed-up vs first engine, first variant | same candidates as first engine |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['variant']} | {r['median_s']:.3f} | {r['tokens']} | {r['tokens_per_s']:.0f} | "
              f"{r['speedup_vs_first_fast']:.2f}× | {'yes' if r['same_candidates_as_first_engine'] else 'no'} |")
    print(f"\n{len(prompts)} prompts × K={args.k}, {args.repeats} repeats, threads {args.threads or 'default'}, "
          f"prompt batch {args.prompt_batch or 'default'}")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "generation.json").write_text(json.dumps({"args": {k: str(v) if isinstance(v, Path) else v
                                                                        for k, v in vars(args).items()}, "rows": rows},
                                                             indent=2) + "\n")
    if args.result:
        rec.save(args.result, {"generator": args.generator, "prompts": len(prompts), "k": args.k, "repeats": args.repeats,
                               "threads": args.threads, "prompt_batch": args.prompt_batch,
                               "engines": list(engines), "variants": variants,
                               "rows": rows})


if __name__ == "__main__":
    main()
