#!/usr/bin/env python
"""Parity of the ``ort`` engine with the torch fp32 reference, on real pairs.

A script, not a bench option: it compares the ort graphs with torch on raw tensors (logits, tokens, fp16), below the
probes' labels.

Classifier: label agreement % and max |Δ logit| of ORT fp32 / int8 (and fp16 with ``--fp16``)
against torch fp32 on the first ``--n`` pairs of a dataset (default: the embedded SNLI sample).
Generator: greedy and seeded sampling (``Decoding()`` defaults, ``--k`` candidates) token
identity at fp32, greedy token agreement at int8, on generator prompts built from the hypotheses.

    python scripts/ort_parity.py --classifier mini-nli --generator mini-t5 \\
        --result benchmarks/results/ort-parity.json
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from provenance import Recorder, script_command


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--classifier", default=None)
    ap.add_argument("--generator", default=None)
    ap.add_argument("--data", default="sample")
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--prompts", type=int, default=10)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--seed", type=int, default=13)
    ap.add_argument("--fp16", action="store_true")
    ap.add_argument("--max-length", type=int, default=256, help="maximum tokens of a pair (classifiers)")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("ort_parity", script_command("ort_parity.py", argv))
    payload: dict = {"data": args.data, "seed": args.seed, "classifier": None, "generator": None}

    import numpy as np

    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.base import Decoding, derive_seed
    from breaknli_fast.prompts import CONTRADICT_PROMPT, ENTAIL_PROMPT

    data = load_examples(args.data, limit=args.n)
    pairs = [(e.premise, e.hypothesis) for e in data.examples]
    gold = [e.label for e in data.examples]
    payload["pairs"] = len(pairs)
    print(f"{len(pairs)} pairs from {args.data}\n")
    if args.classifier:
        ref = registry.load_classifier("torch", args.classifier, max_length=args.max_length).classify(pairs)
        ref_acc = float(np.mean([a == b for a, b in zip(ref.labels, gold)]) * 100)
        clf_rows: list[dict] = []
        payload["classifier"] = {"model": args.classifier, "max_length": args.max_length, "torch_fp32_accuracy_pct": ref_acc,
                                 "rows": clf_rows}
        print(f"classifier {args.classifier}: torch fp32 accuracy {ref_acc:.1f} %\n")
        print("| engine | precision | label agreement vs torch fp32 | max abs Δ logit | accuracy | s |")
        print("|---|---|---:|---:|---:|---:|")
        for precision in ("fp32", "int8") + (("fp16",) if args.fp16 else ()):
            t0 = time.perf_counter()
            clf = registry.load_classifier("ort", args.classifier, precision=precision, max_length=args.max_length,
                                           tolerances={"min_agreement": 0.0, "max_abs_logit": None})
            out = clf.classify(pairs)
            dt = time.perf_counter() - t0
            agree = float((out.label_ids == ref.label_ids).mean() * 100)
            acc = float(np.mean([a == b for a, b in zip(out.labels, gold)]) * 100)
            dmax = float(np.abs(out.logits - ref.logits).max())
            clf_rows.append({"engine": "ort", "precision": precision, "label_agreement_pct": agree, "max_abs_logit_diff": dmax,
                             "accuracy_pct": acc, "seconds_with_load": round(dt, 2)})
            print(f"| ort | {precision} | {agree:.2f} % | {dmax:.3g} | {acc:.1f} % | {dt:.1f} |")
        print()
    if args.generator:
        hyps = [h for _, h in pairs[: args.prompts]]
        prompts = [CONTRADICT_PROMPT.format(h=h) for h in hyps] + [ENTAIL_PROMPT.format(h=h) for h in hyps]
        seeds = [derive_seed(args.seed, "parity", i) for i in range(len(prompts))]
        tg = registry.load_generator("torch", args.generator)
        gen_rows: list[dict] = []
        payload["generator"] = {"model": args.generator, "prompts": len(prompts), "k": args.k, "rows": gen_rows}
        print(f"generator {args.generator}: {len(prompts)} prompts\n")
        print("| engine | precision | decoding | identical outputs | token agreement |")
        print("|---|---|---|---:|---:|")
        for precision in ("fp32", "int8"):
            og = registry.load_generator("ort", args.generator, precision=precision,
                                         tolerances={"min_agreement": 0.0, "min_token_agreement": 0.0})
            for dec, n in ((Decoding(strategy="greedy"), 1), (Decoding(), args.k)):
                if precision != "fp32" and dec.strategy != "greedy":
                    continue
                a = tg.generate_ids(prompts, n, dec, seeds)
                b = og.generate_ids(prompts, n, dec, seeds)
                rows = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
                same = sum(p == q for x, y in rows for p, q in zip(x, y))
                total = sum(max(len(x), len(y)) for x, y in rows)
                ident = sum(x == y for x, y in rows)
                label = f"{dec.strategy}" + (f" K={n}, seeded" if dec.strategy == "sampling" else "")
                gen_rows.append({"engine": "ort", "precision": precision, "decoding": dec.strategy, "candidates": n,
                                 "seeded": dec.strategy == "sampling", "identical": ident, "sequences": len(rows),
                                 "token_agreement_pct": 100.0 * same / max(1, total)})
                print(f"| ort | {precision} | {label} | {ident}/{len(rows)} | {100.0 * same / max(1, total):.2f} % |")
    if args.result:
        rec.save(args.result, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
