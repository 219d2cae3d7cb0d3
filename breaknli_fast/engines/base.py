"""The engine contract: what every backend (torch, ort, tensorrt) implements.

Engines only *predict* and *generate*. The BreakNLI loop, verdicts and metrics live in
``breaknli_fast.pipeline`` and never know which engine runs.

Two roles:

* :class:`Classifier` -- maps (premise, hypothesis) pairs to logits over the canonical
  labels ``LABELS = (entailment, neutral, contradiction)`` (columns in that order, whatever
  the model's own output order), plus the argmax label and probabilities.
* :class:`Generator` -- maps prompts to ``n`` candidate texts each, under a
  :class:`Decoding` configuration and one seed per prompt (so results do not depend on
  how prompts are batched, which makes runs resumable and engines comparable).

Batching by token budget with length bucketing, and de-duplication of repeated pairs,
live here, once, in :class:`BatchedClassifier`: a backend implements only
``_token_lengths`` and ``_logits`` for one already-formed batch.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from breaknli_fast.data.labels import LABELS

Pair = tuple[str, str]


@dataclass
class Predictions:
    """Classifier output for a list of pairs, in input order."""

    logits: np.ndarray  # (n, 3) float32, columns = LABELS (entailment, neutral, contradiction)

    @property
    def probs(self) -> np.ndarray:
        z = self.logits - self.logits.max(axis=1, keepdims=True)
        e = np.exp(z)
        return e / e.sum(axis=1, keepdims=True)

    @property
    def label_ids(self) -> np.ndarray:
        return self.logits.argmax(axis=1)

    @property
    def labels(self) -> list[str]:
        return [LABELS[i] for i in self.label_ids]

    def __len__(self) -> int:
        return int(self.logits.shape[0])


@dataclass
class Decoding:
    """Decoding settings of the generator (spec defaults: sampling, top_p .95, top_k 50, T 1.0, 40 tokens)."""

    strategy: str = "sampling"  # sampling | beam | diverse-beam | greedy
    top_p: float = 0.95
    top_k: int = 50
    temperature: float = 1.0
    max_new_tokens: int = 40
    min_new_tokens: int = 0  # > 0 only for fixed-work benchmarks
    num_beams: int | None = None  # beam / diverse-beam: defaults to n (the number of candidates)
    num_beam_groups: int | None = None  # diverse-beam: defaults to n
    diversity_penalty: float = 1.0
    # sampling: "fast" (top-k first, inverse-CDF draw) or "transformers" (token-identical to
    # transformers' generate under torch.manual_seed); see engines.sampling
    sampler: str = "fast"

    STRATEGIES = ("sampling", "beam", "diverse-beam", "greedy")
    SAMPLERS = ("fast", "transformers")

    def __post_init__(self) -> None:
        if self.strategy not in self.STRATEGIES:
            raise ValueError(f"unknown decoding strategy {self.strategy!r}; choose one of {', '.join(self.STRATEGIES)}")
        if self.sampler not in self.SAMPLERS:
            raise ValueError(f"unknown sampler {self.sampler!r}; choose one of {', '.join(self.SAMPLERS)}")
        if self.strategy == "sampling":
            if self.temperature is None or not self.temperature > 0:
                raise ValueError(f"--temperature must be > 0 for sampling (got {self.temperature}); use --decoding greedy")
            if self.top_p is None or not 0 < self.top_p <= 1:
                raise ValueError(f"--top-p must be in (0, 1] (got {self.top_p})")
            if self.top_k is None or self.top_k < 0:
                raise ValueError(f"--top-k must be >= 0 (0 = no top-k; got {self.top_k})")
        if self.max_new_tokens < 1 or self.min_new_tokens < 0 or self.min_new_tokens > self.max_new_tokens:
            raise ValueError(f"need 1 <= max_new_tokens and 0 <= min_new_tokens <= max_new_tokens "
                             f"(got {self.max_new_tokens}, {self.min_new_tokens})")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def hf_kwargs(self, n: int) -> dict[str, Any]:
        """Keyword arguments for ``transformers``' ``generate`` producing ``n`` sequences per input."""
        kw: dict[str, Any] = {"max_new_tokens": self.max_new_tokens, "num_return_sequences": n}
        if self.min_new_tokens:
            kw["min_new_tokens"] = self.min_new_tokens
        if self.strategy == "sampling":
            kw.update(do_sample=True, top_p=self.top_p, top_k=self.top_k, temperature=self.temperature)
        elif self.strategy == "greedy":
            if n != 1:
                raise ValueError("greedy decoding yields one sequence per input; use n=1")
            kw.update(do_sample=False, num_beams=1)
        elif self.strategy == "beam":
            kw.update(do_sample=False, num_beams=max(self.num_beams or n, n))
        else:  # diverse-beam runs in engines.generation.diverse_beam_search, not in HF generate
            raise ValueError("diverse-beam decoding has no transformers generate() arguments")
        return kw


def derive_seed(*parts: object) -> int:
    """A stable 31-bit seed from any parts (run seed, mode, example id, ...)."""
    h = hashlib.sha256(":".join(str(p) for p in parts).encode()).digest()
    return int.from_bytes(h[:4], "little") & 0x7FFFFFFF


@dataclass
class EngineInfo:
    """What an engine reports about itself (recorded in config.json and bench reports)."""

    engine: str  # torch | ort | tensorrt
    role: str  # classifier | generator
    model: str  # id or path as given
    precision: str = "fp32"
    device: str = "cpu"
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@runtime_checkable
class Classifier(Protocol):
    info: EngineInfo

    def classify(self, pairs: Sequence[Pair]) -> Predictions: ...


@runtime_checkable
class Generator(Protocol):
    info: EngineInfo

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        """``n`` texts for each prompt; prompt i is decoded under ``seeds[i]``."""
        ...

    def count_tokens(self, texts: Iterable[str]) -> int:
        """Number of tokens of the texts under the generator's tokenizer (for tokens/s figures)."""
        ...


def plan_batches(lengths: Sequence[int], token_budget: int, max_batch: int) -> list[list[int]]:
    """Group item indices into batches: sorted by length (longest first, so memory peaks early),
    each batch bounded by ``max_batch`` items and ``len(batch) * longest <= token_budget``
    (a single over-long item still forms its own batch). Deterministic for equal inputs."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i in order:
        L = max(1, int(lengths[i]))
        new_max = max(cur_max, L)
        if cur and (len(cur) + 1 > max_batch or (len(cur) + 1) * new_max > token_budget):
            batches.append(cur)
            cur, new_max = [], L
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


@dataclass
class ClassifierStats:
    """Counters kept by :class:`BatchedClassifier` (for throughput and latency figures)."""

    pairs_requested: int = 0
    pairs_computed: int = 0  # after de-duplication
    batches: int = 0
    seconds: float = 0.0
    batch_seconds: list[float] = field(default_factory=list)

    def reset(self) -> None:
        self.pairs_requested = self.pairs_computed = self.batches = 0
        self.seconds = 0.0
        self.batch_seconds = []


class BatchedClassifier:
    """Shared machinery of every classifier engine: de-duplication and token-budget batching.

    Subclasses implement ``_token_lengths(pairs)`` (token count of each encoded pair, as the
    engine will see it) and ``_logits(pairs)`` (an (n, 3) float array, columns = LABELS, for
    one batch). Identical pairs are computed once per engine instance (a cache keyed by the
    exact texts), so a pair that comes back in another stage or mode is not recomputed.
    """

    info: EngineInfo

    def __init__(self, token_budget: int = 8192, max_batch: int = 64, cache: bool = True) -> None:
        self.token_budget = int(token_budget)
        self.max_batch = int(max_batch)
        self._cache: dict[Pair, np.ndarray] | None = {} if cache else None
        self.stats = ClassifierStats()

    # -- to implement -------------------------------------------------------------------
    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        raise NotImplementedError

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        raise NotImplementedError

    def _synchronize(self) -> None:
        """Wait for queued device work (GPU engines override); called before a timer stops."""

    # -- shared -------------------------------------------------------------------------
    def clear_cache(self) -> None:
        if self._cache is not None:
            self._cache.clear()

    def classify(self, pairs: Sequence[Pair]) -> Predictions:
        pairs = [(str(p), str(h)) for p, h in pairs]
        self.stats.pairs_requested += len(pairs)
        out = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        todo: dict[Pair, list[int]] = {}
        for i, pr in enumerate(pairs):
            if self._cache is not None and pr in self._cache:
                out[i] = self._cache[pr]
            else:
                todo.setdefault(pr, []).append(i)
        if todo:
            uniq = list(todo)
            logits = self._run_batched(uniq)
            for pr, row in zip(uniq, logits):
                for i in todo[pr]:
                    out[i] = row
                if self._cache is not None:
                    self._cache[pr] = row
        return Predictions(out)

    def _run_batched(self, pairs: list[Pair]) -> np.ndarray:
        lengths = self._token_lengths(pairs)
        res = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        for idx in plan_batches(lengths, self.token_budget, self.max_batch):
            t0 = time.perf_counter()
            logits = np.asarray(self._logits([pairs[i] for i in idx]), dtype=np.float32)
            self._synchronize()
            dt = time.perf_counter() - t0
            if logits.shape != (len(idx), len(LABELS)):
                raise RuntimeError(f"engine returned logits of shape {logits.shape}, expected {(len(idx), len(LABELS))}")
            res[idx] = logits
            self.stats.batches += 1
            self.stats.seconds += dt
            self.stats.batch_seconds.append(dt)
        self.stats.pairs_computed += len(pairs)
        return res
