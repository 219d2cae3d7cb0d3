"""A test engine with a known service time, registered from the tests with
``registry.register("sleep", "tests.plugins.sleep_engine")``.

Its classifier is the torch reference's own (the same model, the same labels) behind the shared
:class:`~breaknli_fast.engines.batching.BatchedClassifier`, so it has the pair cache and the de-duplication every
real classifier has; each pair it computes also sleeps ``sleep_ms`` milliseconds (no CPU), and ``wrong=true``
rotates every label (an engine that is fast and wrong), ``batch_noise=true`` adds 1e-3 x the batch's size to every
logit (an engine whose answer depends on its batch, as per-tensor dynamic int8 does). ``computed`` counts the pairs
it really computed."""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines.base import EngineInfo, Pair
from breaknli_fast.engines.batching import BatchedClassifier
from breaknli_fast.engines.options import parse_flag
from tests.plugins.word_engine import load_generator  # noqa: F401  (the generator role: the word engine's)


class SleepClassifier(BatchedClassifier):
    def __init__(self, model: str, precision: str, sleep_ms: float = 5.0, wrong: Any = False, batch_noise: Any = False):
        super().__init__(token_budget=10**6, max_batch=64)
        from breaknli_fast.engines import registry

        self.ref = registry.load_classifier("torch", model)
        self.ref.set_reuse(False)
        self.sleep_s, self.wrong, self.batch_noise = float(sleep_ms) / 1000.0, parse_flag(wrong), parse_flag(batch_noise)
        self.computed = 0
        self.info = EngineInfo("sleep", "classifier", model, precision, details={"sleep_ms": float(sleep_ms)})

    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        return [1] * len(pairs)

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        time.sleep(self.sleep_s * len(pairs))
        self.computed += len(pairs)
        logits = np.asarray(self.ref.classify(pairs).logits, dtype=np.float32)
        if self.batch_noise:
            logits = logits + np.float32(1e-3 * len(pairs))
        return np.roll(logits, 1, axis=1) if self.wrong else logits


def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", sleep_ms: float = 5.0,
                    wrong: Any = False, batch_noise: Any = False, **opts: Any) -> SleepClassifier:
    return SleepClassifier(model, precision, sleep_ms, wrong, batch_noise)
