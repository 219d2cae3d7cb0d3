"""A test engine in one module: the whole contract a backend implements (``load_classifier`` and
``load_generator`` returning a :class:`Classifier` and a :class:`Generator`). Registered from the tests with
one line, ``registry.register("words", "tests.plugins.word_engine")``, it runs the BreakNLI loop.

The classifier is a bag of words (a hypothesis with "not" or "no" contradicts, one whose words all occur in the
premise is entailed, else neutral); the generator rewrites a hypothesis by seeded word drops and negation, so
the loop has candidates to filter and evaluate."""

from __future__ import annotations

import random
import re
from typing import Any, Iterable, Sequence

import numpy as np

from breaknli_fast.engines.base import Decoding, EngineInfo, Pair, Predictions


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z]+", text.lower())


class WordClassifier:
    def __init__(self, model: str, precision: str):
        self.info = EngineInfo("words", "classifier", model, precision)

    def classify(self, pairs: Sequence[Pair]) -> Predictions:
        rows = []
        for p, h in pairs:
            pw, hw = set(_words(p)), _words(h)
            neg = ({"not", "no"} & set(hw)) != ({"not", "no"} & pw)
            if neg:
                rows.append([0.0, 0.5, 2.0])
            elif hw and all(w in pw for w in hw):
                rows.append([2.0, 0.5, 0.0])
            else:
                rows.append([0.0, 2.0, 0.5])
        return Predictions(np.asarray(rows, dtype=np.float32).reshape(-1, 3))


class WordGenerator:
    def __init__(self, model: str, precision: str):
        self.info = EngineInfo("words", "generator", model, precision)

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        out = []
        for prompt, seed in zip(prompts, seeds):
            rng = random.Random(seed)
            h = prompt.split(":", 1)[-1].strip()
            ws = h.rstrip(".").split()
            cands = []
            for _ in range(n):
                w = [x for x in ws if rng.random() > 0.2] or ws
                if "contradicts" in prompt and rng.random() < 0.8:
                    w = w[:1] + ["is", "not"] + w[1:]
                cands.append(" ".join(w) + ".")
            out.append(cands)
        return out

    def count_tokens(self, texts: Iterable[str]) -> int:
        return sum(len(t.split()) for t in texts)


def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> WordClassifier:
    return WordClassifier(model, precision)


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> WordGenerator:
    return WordGenerator(model, precision)
