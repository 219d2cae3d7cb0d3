"""The systems under test, one per role: what a LoadGen sample is and how the engine answers it.

* **classifier**: a sample is one (premise, hypothesis) pair of the data; a query's pairs go to the engine in one
  ``classify`` call (Offline: all of them, batched as the engine likes). Reuse is off: the pair cache and the
  de-duplication of identical pairs (:meth:`~breaknli_fast.engines.batching.BatchedClassifier.set_reuse`), and the
  cache is cleared before every query, so the same sample twice costs twice (MLPerf forbids caching beyond what
  the input shapes imply).
* **generator**: a sample is one BreakNLI prompt (the first selected examples of each mode), answered with K
  candidates under the loop's decoding settings and seed; its first token is reported to LoadGen when the engine
  reports it (:func:`first_token_source`), once every candidate of the call has its first token, and its tokens are
  the ids the engine generated for its K candidates, end-of-sequence tokens included (the loop's count).
* **study unit**: a sample is one BreakNLI example in one mode, through the whole loop as a user waits for it:
  classify (p, h), generate, de-duplicate, relation filter, evaluate (:func:`~breaknli_fast.probes.breaknli.loop.process_chunk`).
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from breaknli_fast.bench.loadgen.harness import FirstToken, Output
from breaknli_fast.data.loaders import Example
from breaknli_fast.engines.base import generate_counted
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, classify_premise_hypothesis, new_times, process_chunk
from breaknli_fast.progress import ProgressHook


@dataclass(frozen=True)
class GenSample:
    """One prompt of the generator role / one example of the study unit (mode, example, prompt, seed)."""

    mode: str
    example: Example
    prompt: str
    seed: int


def gen_samples(examples: Sequence[Example], items: Sequence[dict[str, Any]]) -> list[GenSample]:
    """The generator's and the study unit's library from the bench's workload prompts
    (:func:`breaknli_fast.bench.stages.workload_prompts`)."""
    by_id = {ex.id: ex for ex in examples}
    return [GenSample(it["mode"], by_id[it["id"]], it["prompt"], int(it["seed"])) for it in items]


# -- the classifier ---------------------------------------------------------------------------------------------

def reuse_off(clf: Any) -> bool:
    """Turn the engine's reuse of computed pairs off; False for an engine that has no such switch (its cache, if
    any, is still cleared before every query)."""
    target = getattr(clf, "_engine", clf)
    if hasattr(target, "set_reuse"):
        target.set_reuse(False)
        return True
    return False


def reuse_on(clf: Any) -> None:
    target = getattr(clf, "_engine", clf)
    if hasattr(target, "set_reuse"):
        target.set_reuse(True)


class ClassifierRunner:
    def __init__(self, clf: Any, pairs: Sequence[tuple[str, str]]):
        self.clf, self.pairs = clf, list(pairs)
        self.size = len(self.pairs)

    def process(self, indices: Sequence[int], first_token: FirstToken | None = None) -> list[Output]:
        self.clf.clear_cache()
        logits = np.asarray(self.clf.classify([self.pairs[i] for i in indices]).logits, dtype=np.float32)
        return [Output(int(row.argmax()), row.tobytes()) for row in logits]


# -- the generator ----------------------------------------------------------------------------------------------

def first_token_source(gen: Any) -> str | None:
    """How the engine tells its first token: the shared sampler's callback (torch, ort), CTranslate2's per-token
    callback (ct2), or None (another engine: LoadGen then gets no TTFT / TPOT)."""
    target = getattr(gen, "_engine", gen)
    if hasattr(target, "first_token_callback"):
        return "sampler callback"
    if hasattr(getattr(target, "translator", None), "translate_batch"):
        return "CTranslate2 callback"
    return None


class _FirstTokenTranslator:
    """CTranslate2's translator with a per-token callback that reports each batch entry's first token."""

    def __init__(self, inner: Any, report: Callable[[int], None]):
        self._inner, self._report = inner, report

    def translate_batch(self, *args: Any, **kwargs: Any) -> Any:
        seen: set[int] = set()

        def callback(step: Any) -> bool:
            if step.batch_id not in seen:
                seen.add(step.batch_id)
                self._report(int(step.batch_id))
            return False

        return self._inner.translate_batch(*args, callback=callback, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


@contextmanager
def first_token_hook(gen: Any, positions: Sequence[int], first_token: FirstToken | None) -> Iterator[None]:
    """While a call of ``gen`` on the prompts at ``positions`` of a query runs, report their first token."""
    target = getattr(gen, "_engine", gen)
    how = first_token_source(gen) if first_token is not None else None
    if how == "sampler callback":
        target.first_token_callback = lambda: first_token(positions)
        try:
            yield
        finally:
            target.first_token_callback = None
    elif how == "CTranslate2 callback":
        inner = target.translator
        target.translator = _FirstTokenTranslator(inner, lambda b: first_token([positions[b]]))
        try:
            yield
        finally:
            target.translator = inner
    else:
        yield


class GeneratorRunner:
    def __init__(self, gen: Any, samples: Sequence[GenSample], loop: BreakNLIConfig):
        self.gen, self.samples, self.loop = gen, list(samples), loop
        self.size = len(self.samples)
        target = getattr(gen, "_engine", gen)
        # one engine call per batch of the engine's own size, so a first token belongs to known prompts
        self.per_call = max(1, int(getattr(target, "prompt_batch", 0) or 8))

    def process(self, indices: Sequence[int], first_token: FirstToken | None = None) -> list[Output]:
        out: list[Output] = []
        for start in range(0, len(indices), self.per_call):
            part = [self.samples[i] for i in indices[start:start + self.per_call]]
            with first_token_hook(self.gen, range(start, start + len(part)), first_token):
                cands, counts, _ = generate_counted(self.gen, [s.prompt for s in part], self.loop.k,
                                                    self.loop.decoding, [s.seed for s in part])
            for cs, tokens in zip(cands, counts):  # the ids generated, end-of-sequence tokens included
                cs = list(cs)
                out.append(Output(cs, json.dumps(cs).encode(), int(tokens)))
        return out


# -- the study unit ---------------------------------------------------------------------------------------------

class StudyRunner:
    def __init__(self, clf: Any, gen: Any, samples: Sequence[GenSample], loop: BreakNLIConfig):
        self.clf, self.gen, self.samples, self.loop = clf, gen, list(samples), loop
        self.size = len(self.samples)
        self.hook = ProgressHook()

    def process(self, indices: Sequence[int], first_token: FirstToken | None = None) -> list[Output]:
        self.clf.clear_cache()
        records: dict[int, dict[str, Any]] = {}
        by_mode: dict[str, list[int]] = {}
        for pos, i in enumerate(indices):
            by_mode.setdefault(self.samples[i].mode, []).append(pos)
        for mode, positions in by_mode.items():
            # a sample asked for twice in one query is run twice: one chunk per occurrence
            rounds: list[list[int]] = []
            for pos in positions:
                ex_id = self.samples[indices[pos]].example.id
                slot = next((r for r in rounds if all(self.samples[indices[p]].example.id != ex_id for p in r)), None)
                (slot.append(pos) if slot is not None else rounds.append([pos]))
            for chunk_pos in rounds:
                chunk = [self.samples[indices[p]].example for p in chunk_pos]
                times = new_times()
                yhat = classify_premise_hypothesis(chunk, self.clf, None, times, self.hook)
                for p, rec in zip(chunk_pos, process_chunk(mode, chunk, yhat, self.clf, self.gen, self.loop, times)):
                    records[p] = rec
        out = []
        for pos in range(len(indices)):
            rec = records[pos]
            brief = {"status": rec.get("status"), "verdict": rec.get("verdict")}
            out.append(Output(rec, json.dumps(brief).encode()))
        return out


class ReplayGenerator:
    """A generator that answers each prompt with the candidates recorded for its seed (one seed per mode and
    example, as the loop derives it): the accuracy score re-runs the loop's filters on a generator's candidates
    with the reference classifier."""

    def __init__(self, by_seed: dict[int, list[str]]):
        self.by_seed = by_seed

    def generate(self, prompts: Sequence[str], n: int, decoding: Any, seeds: Sequence[int]) -> list[list[str]]:
        return [list(self.by_seed[int(s)]) for s in seeds]

    def count_tokens(self, texts: Any) -> int:
        return sum(len(t.split()) for t in texts)
