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
from breaknli_fast.engines.base import generate_with_ids
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
        self.lengths = [len(p) + len(h) for p, h in self.pairs]  # characters: which sample is longest (TEST04)

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
    """CTranslate2's translator with a per-token callback that reports each batch entry's first tokens, once each of
    its ``n`` hypotheses has one (``to_id``: CTranslate2's step result -> the model's token id)."""

    def __init__(self, inner: Any, report: Callable[[int, list[int]], None], n: int, to_id: Callable[[Any], int]):
        self._inner, self._report, self._n, self._to_id = inner, report, max(1, int(n)), to_id

    def translate_batch(self, *args: Any, **kwargs: Any) -> Any:
        firsts: dict[int, dict[int, int]] = {}

        def callback(step: Any) -> bool:
            got = firsts.setdefault(int(step.batch_id), {})
            hyp = int(getattr(step, "hypothesis_id", 0) or 0)
            if hyp not in got and len(got) < self._n:
                got[hyp] = self._to_id(step)
                if len(got) == self._n:
                    self._report(int(step.batch_id), [got[h] for h in sorted(got)])
            return False

        return self._inner.translate_batch(*args, callback=callback, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _ct2_token_id(target: Any) -> Callable[[Any], int]:
    vocab = getattr(target, "vocab", None)
    return lambda step: int(vocab[step.token]) if vocab is not None and step.token in vocab else int(step.token_id)


@contextmanager
def first_token_hook(gen: Any, positions: Sequence[int], first_token: FirstToken | None, n: int) -> Iterator[None]:
    """While a call of ``gen`` on the prompts at ``positions`` of a query runs (``n`` candidates each), report their
    first tokens: each prompt's ``n`` first token ids."""
    target = getattr(gen, "_engine", gen)
    how = first_token_source(gen) if first_token is not None else None
    positions = list(positions)
    if how == "sampler callback":
        def report(first: list[int]) -> None:  # the call's prompts x n rows
            first_token(positions, [first[k * n:(k + 1) * n] for k in range(len(positions))])

        target.first_token_callback = report
        try:
            yield
        finally:
            target.first_token_callback = None
    elif how == "CTranslate2 callback":
        inner = target.translator
        target.translator = _FirstTokenTranslator(inner, lambda b, ids: first_token([positions[b]], [ids]), n,
                                                  _ct2_token_id(target))
        try:
            yield
        finally:
            target.translator = inner
    else:
        yield


def eos_token_id(gen: Any) -> int | None:
    """The generator's end-of-sequence token id (its model config's, else its tokenizer's), None where it has
    neither (an engine with texts only)."""
    target = getattr(gen, "_engine", gen)
    for owner in (getattr(target, "config", None), getattr(target, "tokenizer", None)):
        v = getattr(owner, "eos_token_id", None)
        if isinstance(v, int) and not isinstance(v, bool):
            return v
    return None


def generator_payload(texts: Sequence[str], ids: Sequence[Sequence[int]] | None, tokens: int) -> bytes:
    """What LoadGen receives for one prompt (and writes to its accuracy log): its K candidates' texts with their
    token ids (``{"texts", "ids"}``), or with the engine's token count where it has texts only
    (``{"texts", "tokens"}``). The compliance tests read it back (:func:`read_generator_payload`)."""
    body: dict[str, Any] = {"texts": list(texts)}
    if ids is not None:
        body["ids"] = [list(map(int, r)) for r in ids]
    else:
        body["tokens"] = int(tokens)
    return json.dumps(body, separators=(",", ":")).encode()


def read_generator_payload(data: bytes) -> dict[str, Any] | None:
    """:func:`generator_payload` read back (None for bytes that are not one)."""
    try:
        body = json.loads(data.decode())
    except (UnicodeDecodeError, json.JSONDecodeError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("texts"), list) else None


class GeneratorRunner:
    def __init__(self, gen: Any, samples: Sequence[GenSample], loop: BreakNLIConfig):
        self.gen, self.samples, self.loop = gen, list(samples), loop
        self.size = len(self.samples)
        target = getattr(gen, "_engine", gen)
        # one engine call per batch of the engine's own size, so a first token belongs to known prompts
        self.per_call = max(1, int(getattr(target, "prompt_batch", 0) or 8))
        self.eos_id = eos_token_id(gen)
        self.lengths = [len(s.prompt) for s in self.samples]

    def process(self, indices: Sequence[int], first_token: FirstToken | None = None) -> list[Output]:
        out: list[Output] = []
        k = self.loop.k
        for start in range(0, len(indices), self.per_call):
            part = [self.samples[i] for i in indices[start:start + self.per_call]]
            with first_token_hook(self.gen, range(start, start + len(part)), first_token, k):
                texts, ids, counts, _ = generate_with_ids(self.gen, [s.prompt for s in part], k,
                                                          self.loop.decoding, [s.seed for s in part])
            for j, (cs, tokens) in enumerate(zip(texts, counts)):  # the ids generated, end-of-sequence included
                cs = list(cs)
                rows = ids[j] if ids is not None else None
                first = [r[0] if r else -1 for r in rows] if rows is not None else None
                out.append(Output(cs, generator_payload(cs, rows, int(tokens)), int(tokens),
                                  first=json.dumps(first).encode() if first is not None else None))
        return out


# -- the study unit ---------------------------------------------------------------------------------------------

class StudyRunner:
    def __init__(self, clf: Any, gen: Any, samples: Sequence[GenSample], loop: BreakNLIConfig):
        self.clf, self.gen, self.samples, self.loop = clf, gen, list(samples), loop
        self.size = len(self.samples)
        self.lengths = [len(s.example.premise) + len(s.example.hypothesis) for s in self.samples]
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
