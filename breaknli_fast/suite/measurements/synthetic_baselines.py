"""The shortcut checks of the synthetic corpora, as docs/synthetic.md quotes them (kind ``synthetic_baselines``; no
engine is timed, so no section of BENCHMARKS.md reads it).

For each generator (aenli, kinship), with the pair balance (the default) and without it (the pairs of generator
version 2): the label counts, the pair-level baselines on the first 4,000 pairs (``shortcut.pair_baselines``: each
surface feature of the pair alone, logistic regression and gradient-boosted trees on all of them), each feature's
accuracy alone, the hypothesis-only and premise-only baselines on the first ``n`` pairs, and the elimination
baseline (a test pair's label guessed as one its group's training pairs lack) with the group split every check uses
and, to show the leak it closes, with a row split. Seeded: the same figures on every machine.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from breaknli_fast.suite.base import Measurement, option


@dataclass
class SyntheticBaselinesConfig:
    n: int = option(10000, min=100, max=1_000_000, why="pairs generated per corpus", help="pairs per corpus")
    seed: int = option(0, help="the generators' seed")


@dataclass
class CorpusBaselines:
    generator: str | None = None
    pair_balance: bool | None = None
    n: int | None = None
    seed: int | None = None
    labels: dict[str, int] | None = None
    pair_level: dict[str, Any] | None = None
    hypothesis_only: dict[str, Any] | None = None
    premise_only: dict[str, Any] | None = None
    elimination: dict[str, Any] | None = None
    elimination_row_split: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class SyntheticBaselinesPayload:
    corpora: list[CorpusBaselines] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


class SyntheticBaselines(Measurement):
    name = "synthetic-baselines"
    summary = "the synthetic corpora's shortcut baselines (docs/synthetic.md); no engine is timed"
    kind = "synthetic_baselines"
    config_class = SyntheticBaselinesConfig
    payload_class = SyntheticBaselinesPayload
    legacy_scripts = ("synthetic_baselines.py",)

    def run(self, config: SyntheticBaselinesConfig, recorder: Any) -> SyntheticBaselinesPayload:
        from breaknli_fast.data.synthetic import aenli, kinship, shortcut

        out = SyntheticBaselinesPayload()
        gens = {"aenli": (aenli.generate, aenli.AenliConfig), "kinship": (kinship.generate, kinship.KinshipConfig)}
        for name, (gen, cfg) in gens.items():
            for balance in (False, True):
                rows = list(gen(config.n, config.seed, cfg(pair_balance=balance)))
                res = CorpusBaselines(
                    generator=name, pair_balance=balance, n=config.n, seed=config.seed,
                    labels=dict(Counter(r["label"] for r in rows)),
                    pair_level=shortcut.pair_baselines(rows[:shortcut.PAIR_ROWS]),
                    hypothesis_only=shortcut.hypothesis_only(rows),
                    premise_only=shortcut.hypothesis_only(rows, field="premise"),
                    elimination=shortcut.elimination(rows), elimination_row_split=shortcut.elimination(rows,
                                                                                                    by_group=False))
                out.corpora.append(res)
                print(f"== {name}, {'pair balance' if balance else 'generator version 2 (--no-pair-balance)'}: "
                      f"{config.n} pairs, seed {config.seed}: {res.labels}")
                for line in shortcut.describe_pairs(res.pair_level):
                    print(line)
                top = sorted(res.pair_level["single"].items(), key=lambda kv: -kv[1])[:4]
                print("  single features: " + ", ".join(f"{k} {v:.1f} %" for k, v in top))
                print(shortcut.describe(res.hypothesis_only))
                print(shortcut.describe(res.premise_only))
                for e in (res.elimination, res.elimination_row_split):
                    print(f"elimination, split {e['split']}: {e['accuracy']:.1f} % (majority {e['majority']:.1f} %)")
        return out
