"""BreakNLI's top-up (``--top-up N``): an example with fewer than S of its U kept candidates on target draws more
candidates, one at a time, until S pass or N draws are spent, before it is dropped (what the study's code does,
with N = 15; docs/methodology.md says where this differs from it).

Draw j of an example is one sampled candidate under the seed ``derive_seed(run seed, mode, example id, "top-up",
j)``, so the draws depend only on the example: a resumed run, another ``--chunk-size`` and a study sharded over
Ray actors make the same draws. Each round makes one generator call for every example of the chunk still short
(one prompt with one sample each) and one or two classifier calls for their relations. A draw that normalises to
nothing, to h or to a candidate the example already has (kept or drawn) is counted and not classified.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from breaknli_fast.data.loaders import Example
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.engines.base import Classifier, Generator
from breaknli_fast.probes.base import SharedCache, StageTimes
from breaknli_fast.probes.breaknli.generation import generate_texts

DRAW = "top-up"  # the tag of a top-up draw in its seed and shared-cache key
MAX_TOP_UP = 1000  # draws per example


@dataclass
class TopUp:
    """One example's top-up: its draws in order (raw), the relation labels of each ([] for a draw that was not
    classified: empty, h, or a candidate it already had; None for a direction the lazy filter did not need), the
    normalised draws that passed, in draw order, and the relation pairs they cost."""

    generated: list[str] = field(default_factory=list)
    relations: list[list[Any]] = field(default_factory=list)
    passing: list[str] = field(default_factory=list)
    pairs: int = 0

    @property
    def draws(self) -> int:
        return len(self.generated)


def top_up(mode: str, examples: Sequence[Example], passing: dict[str, int], kept: dict[str, list[str]], target: str,
           cfg: Any, classifier: Classifier, generator: Generator | None, times: StageTimes,
           shared: SharedCache | None = None) -> dict[str, TopUp]:
    """Top up ``examples`` (each with ``passing[id]`` < S of its kept candidates on target) with up to
    ``cfg.top_up`` draws each; returns each example's :class:`TopUp`."""
    out = {ex.id: TopUp() for ex in examples}
    seen = {ex.id: {normalize_text(ex.hypothesis), *kept.get(ex.id, [])} for ex in examples}
    for draw in range(1, cfg.top_up + 1):
        short = [ex for ex in examples if passing[ex.id] + len(out[ex.id].passing) < cfg.s]
        if not short:
            break
        texts = generate_texts(mode, short, generator, cfg, 1, times, shared, draw=(DRAW, draw))
        new: list[tuple[Example, str]] = []
        for ex, cs in zip(short, texts):
            raw = cs[0] if cs else ""
            t = out[ex.id]
            t.generated.append(raw)
            t.relations.append([])
            c = normalize_text(raw)
            if c and c not in seen[ex.id]:
                seen[ex.id].add(c)
                new.append((ex, c))
        if new:
            t0 = time.perf_counter()
            rels = relations(new, target, cfg, classifier)
            times.add("relation", time.perf_counter() - t0, sum(sum(x is not None for x in r) for r in rels))
            for (ex, c), rel in zip(new, rels):
                t = out[ex.id]
                t.relations[-1] = rel
                t.pairs += sum(x is not None for x in rel)
                if all(x == target for x in rel):
                    t.passing.append(c)
    return out


def relations(new: Sequence[tuple[Example, str]], target: str, cfg: Any, classifier: Classifier) -> list[list[Any]]:
    """M(h, h') and, with ``cfg.bidirectional``, M(h', h) of each (example, draw): in one classifier call with
    ``--relation-filter full``; lazily (M(h', h) only where M(h, h') is on target, a second call) otherwise."""
    fw_pairs = [(ex.hypothesis, c) for ex, c in new]
    if not cfg.bidirectional:
        return [[x] for x in classifier.classify(fw_pairs).labels]
    if cfg.relation_filter == "full":
        labels = classifier.classify(fw_pairs + [(c, ex.hypothesis) for ex, c in new]).labels
        return [[labels[i], labels[len(new) + i]] for i in range(len(new))]
    fw = classifier.classify(fw_pairs).labels
    ask = [i for i, x in enumerate(fw) if x == target]
    bw = classifier.classify([(new[i][1], new[i][0].hypothesis) for i in ask]).labels if ask else []
    back: dict[int, Any] = dict(zip(ask, bw))
    return [[fw[i], back.get(i)] for i in range(len(new))]
