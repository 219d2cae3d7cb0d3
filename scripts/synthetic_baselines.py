#!/usr/bin/env python
"""The shortcut checks of the synthetic corpora, as docs/synthetic.md quotes them.

A script, not a bench option: it checks the synthetic corpora's shortcut baselines (docs/synthetic.md); no engine is
timed.

For each generator (aenli, kinship), with the pair balance (the default) and without it (the pairs of generator
version 2): the label counts, the pair-level baselines on the first 4,000 pairs
(``shortcut.pair_baselines``: each surface feature of the pair alone, logistic regression and gradient-boosted
trees on all of them), each feature's accuracy alone, the hypothesis-only and premise-only baselines on the
first 10,000 pairs, and the elimination baseline (a test pair's label guessed as one its group's training pairs
lack) with the group split every check uses and, to show the leak it closes, with a row split. Seeded: the same
figures on every machine.

    python scripts/synthetic_baselines.py [--n 10000] [--seed 0] [--out results.json]

CPU only, about a minute; no timing is measured.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter

from breaknli_fast.data.synthetic import aenli, kinship, shortcut


def measure(name: str, pair_balance: bool, n: int, seed: int) -> dict:
    gen, config = {"aenli": (aenli.generate, aenli.AenliConfig), "kinship": (kinship.generate, kinship.KinshipConfig)}[name]
    rows = list(gen(n, seed, config(pair_balance=pair_balance)))
    pairs = shortcut.pair_baselines(rows[:shortcut.PAIR_ROWS])
    return {"generator": name, "pair_balance": pair_balance, "n": n, "seed": seed,
            "labels": dict(Counter(r["label"] for r in rows)), "pair_level": pairs,
            "hypothesis_only": shortcut.hypothesis_only(rows), "premise_only": shortcut.hypothesis_only(rows, field="premise"),
            "elimination": shortcut.elimination(rows), "elimination_row_split": shortcut.elimination(rows, by_group=False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=10000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="also write the figures as JSON")
    args = ap.parse_args()
    results = []
    for name in ("aenli", "kinship"):
        for balance in (False, True):
            res = measure(name, balance, args.n, args.seed)
            results.append(res)
            print(f"== {name}, {'pair balance' if balance else 'generator version 2 (--no-pair-balance)'}: "
                  f"{args.n} pairs, seed {args.seed}: {res['labels']}")
            for line in shortcut.describe_pairs(res["pair_level"]):
                print(line)
            top = sorted(res["pair_level"]["single"].items(), key=lambda kv: -kv[1])[:4]
            print("  single features: " + ", ".join(f"{k} {v:.1f} %" for k, v in top))
            print(shortcut.describe(res["hypothesis_only"]))
            print(shortcut.describe(res["premise_only"]))
            for key in ("elimination", "elimination_row_split"):
                e = res[key]
                print(f"elimination, split {e['split']}: {e['accuracy']:.1f} % (majority {e['majority']:.1f} %)")
    if args.out:
        with open(args.out, "w", encoding="utf-8") as fh:
            json.dump(results, fh, indent=1)


if __name__ == "__main__":
    main()
