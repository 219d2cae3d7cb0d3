"""The engine contract: what every backend (torch, ort, tensorrt) implements.

Engines only *predict*, *generate* and *fill masks*. The BreakNLI loop, verdicts and metrics live in
``breaknli_fast.pipeline`` and never know which engine runs.

Three roles:

* :class:`Classifier` -- maps (premise, hypothesis) pairs to logits over the canonical
  labels ``LABELS = (entailment, neutral, contradiction)`` (columns in that order, whatever
  the model's own output order), plus the argmax label and probabilities.
* :class:`Generator` -- maps prompts to ``n`` candidate texts each, under a
  :class:`Decoding` configuration and one seed per prompt (so results do not depend on
  how prompts are batched, which makes runs resumable and engines comparable).
* :class:`MaskFiller` -- a masked language model: for texts with :data:`MASK` placeholders, the ``top_k``
  most probable whole-word suggestions (one vocabulary token each) with their log-probabilities, averaged
  over the text's mask positions, and the log-probability of a given word there
  (:class:`MaskFill`). Batching by token budget and de-duplication live once, in :class:`BatchedMaskFiller`.

Batching by token budget with length bucketing, and de-duplication of repeated pairs,
live here, once, in :class:`BatchedClassifier`: a backend implements only
``_token_lengths`` and ``_logits`` for one already-formed batch -- or ``_tokenize`` / ``_feeds`` /
``_run`` (tokenize each call once on the calling thread, pad each batch from those tokens, run the
model on a worker thread), which lets ``workers > 1`` run batches side by side on the CPU
(:class:`Workers`).

The contract has required members (the :class:`Classifier` / :class:`Generator` protocols: what the
study loop calls) and optional ones with defaults (:class:`ClassifierBase` / :class:`GeneratorBase`:
counters, a pair cache, token ids; what the bench measures). Backends subclass the bases; an engine that
implements only the protocols is completed with the defaults by the registry (:func:`as_classifier`,
:func:`as_generator`). Each backend's loader options are a typed :class:`EngineOptions` subclass beside
its implementation, built from keyword options by :meth:`EngineOptions.build`, which refuses unknown keys.
"""

from __future__ import annotations

import hashlib
import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Callable, ClassVar, Iterable, Mapping, Protocol, Sequence, TypeVar, runtime_checkable

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.errors import UserError
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT

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


# the placeholder that marks a masked word in the texts given to a mask filler (each engine puts its
# tokenizer's own mask token there)
MASK = "<<mask>>"
MaskedItem = tuple[str, ...]  # one text, or a (premise, hypothesis) pair, with MASK placeholders


@dataclass
class MaskFill:
    """A mask filler's answer for one masked text. Scores are log-probabilities averaged over the text's mask
    positions (every placeholder of the text stands for the same word)."""

    words: list[str]  # the top-k whole-word suggestions, most probable first
    logprobs: np.ndarray  # (k,) float32, mean log-probability of each suggestion over the mask positions
    score: float | None = None  # the same for the word asked for; None when it is not one whole-word token
    masks: int = 0  # mask positions seen by the model (placeholders cut off by truncation do not count)


@runtime_checkable
class MaskFiller(Protocol):
    info: EngineInfo

    def fill_mask(self, items: Sequence[MaskedItem], top_k: int,
                  score: Sequence[str | None] | None = None) -> list[MaskFill]:
        """For each item, the ``top_k`` most probable whole-word tokens at its :data:`MASK` positions and, when
        ``score[i]`` is a word, that word's mean log-probability there."""
        ...


# -- typed loader options ---------------------------------------------------------------------------

CLASSIFIER, GENERATOR, MASK_FILLER = "classifier", "generator", "mlm"
ROLES = (CLASSIFIER, GENERATOR, MASK_FILLER)


class NonFiniteError(UserError):
    """A model returned NaN or infinite scores. They are reported, never turned into labels or tokens: an argmax
    or a sampling draw over NaN picks an arbitrary entry. At fp16 the usual cause is an overflow (T5's
    feed-forward output, or logits past 65,504)."""


def nonfinite_error(info: EngineInfo | None, detail: str) -> NonFiniteError:
    """The one-line error for non-finite outputs of the engine described by ``info``, with the way out."""
    role = {"mlm": "masked LM"}.get(info.role, info.role) if info is not None else ""
    who = (f"the {role} {info.model} ({info.engine} {info.precision} on {info.device})" if info is not None
           else "the model")
    advice = (f" At {info.precision} this is usually an overflow: run the {role} at fp32 or bf16 "
              f"(--{info.role}-precision)" if info is not None and info.precision not in ("fp32", "bf16") else "")
    return NonFiniteError(f"{who} returned non-finite scores (NaN/inf): {detail}.{advice}")


class EngineOptionError(UserError, ValueError):
    """An option that an engine's loader does not take (one line naming those it takes)."""


def option(default: Any = None, *, roles: tuple[str, ...] = ROLES) -> Any:
    """A field of an :class:`EngineOptions` subclass, taken by the loaders of ``roles``."""
    return field(default=default, metadata={"roles": roles})


def nested_options(cls: type, *, roles: tuple[str, ...] = ROLES) -> Any:
    """A field holding another options dataclass whose fields are given flat, by their own names (the export
    options of the engines that export on first use)."""
    return field(default_factory=cls, metadata={"roles": roles, "nested": cls})


_O = TypeVar("_O", bound="EngineOptions")


@dataclass
class EngineOptions:
    """The options of a backend's ``load_classifier`` / ``load_generator``, typed.

    The fields here are those every engine takes, since the study passes them to whichever engine runs
    (:class:`~breaknli_fast.engines.loading.EngineConfig`); each backend subclasses this beside its
    implementation with its own fields and sets :attr:`engine`. A field's metadata says which roles' loaders
    take it; :meth:`build` turns a loader's keyword options into the dataclass and refuses a key the role
    does not take."""

    engine: ClassVar[str] = "engine"

    threads: int | None = option()  # CPU threads in all (the engines split them into workers)
    workers: int | str | None = option()  # CPU batches side by side: a number, "auto" or None (the engine's default)
    label_map: Mapping[str, str] | None = option(roles=(CLASSIFIER,))  # model label name -> canonical label
    max_length: int = option(256, roles=(CLASSIFIER, MASK_FILLER))  # tokens of a pair (capped at the model's own limit)
    token_budget: int = option(8192, roles=(CLASSIFIER, MASK_FILLER))  # padded tokens per batch
    max_batch: int | None = option(roles=(CLASSIFIER, MASK_FILLER))  # pairs per batch (None: the engine's choice)
    prompt: str = option(DEFAULT_NLI_PROMPT, roles=(CLASSIFIER,))  # text-to-text NLI models: the prompt's name
    method: str = option("score", roles=(CLASSIFIER,))  # text-to-text NLI models: score or generate

    @classmethod
    def keys(cls, role: str) -> list[str]:
        """The option names the ``role`` loader takes, in field order (a nested options class's by their own names)."""
        out: list[str] = []
        for f in fields(cls):
            if role in f.metadata.get("roles", ROLES):
                sub = f.metadata.get("nested")
                out.extend(g.name for g in fields(sub)) if sub is not None else out.append(f.name)
        return out

    @classmethod
    def build(cls: type[_O], role: str, opts: Mapping[str, Any]) -> _O:
        """The options of a ``role`` loader from its keyword options; a key it does not take raises
        :class:`EngineOptionError`."""
        valid = cls.keys(role)
        unknown = [k for k in opts if k not in valid]
        if unknown:
            raise EngineOptionError(f"unknown {cls.engine} {role} option{'s' if len(unknown) > 1 else ''} "
                                    f"{', '.join(map(repr, unknown))}; valid: {', '.join(valid) or 'none'}")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            sub = f.metadata.get("nested")
            if sub is not None:
                names = {g.name for g in fields(sub)}
                kw[f.name] = sub(**{k: v for k, v in opts.items() if k in names})
            elif f.name in opts:
                kw[f.name] = opts[f.name]
        return cls(**kw)


def parse_flag(value: Any, error: type[Exception] = ValueError) -> bool:
    """A boolean option that may come from the command line as text (``step_graphs=false``)."""
    if isinstance(value, str):
        if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise error(f"expected true or false, not {value!r}")
        return value.lower() in ("1", "true", "yes")
    return bool(value)


DEFAULT_MAX_BATCH = 64  # pairs per classifier batch unless the engine or the user says otherwise


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


class Workers:
    """Worker threads for data parallelism on the CPU: ``n`` batches run side by side, each on its own
    thread with its own intra-op thread(s). ONNX Runtime (and torch) release the GIL while they compute,
    and on small models one batch per core beats spreading every operator over the cores (mini models,
    2 cores: BENCHMARKS.md). ``n <= 1`` runs everything on the calling thread. The threads start on
    first use; the engines call :meth:`shutdown` at the end of each call, because idle threads that
    have run torch operators slow torch's own OpenMP parallelism in the process (a torch generator
    ran 2x slower while an ort generator's idle workers lived, as fast again once they ended)."""

    def __init__(self, n: int = 1) -> None:
        self.n = max(1, int(n))
        self._pool: ThreadPoolExecutor | None = None

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        if self.n <= 1:
            fut: Future = Future()
            try:
                fut.set_result(fn(*args))
            except BaseException as e:  # re-raised by result(), as the executor would
                fut.set_exception(e)
            return fut
        if self._pool is None:  # submit and shutdown are called by the engine's calling thread only
            self._pool = ThreadPoolExecutor(self.n, thread_name_prefix="breaknli-worker")
        return self._pool.submit(fn, *args)

    def shutdown(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


def split_threads(threads: int, workers: int | str | None,
                  error: type[Exception] = ValueError) -> tuple[int, int]:
    """(workers, intra-op threads per worker) for ``threads`` CPU threads. ``workers`` ``None`` or
    ``"auto"``: two workers when there are at least two threads (the best split measured on the
    mini models, 2 cores), else one; a number is capped at ``threads``. A bad ``workers`` raises
    ``error`` (the engines pass their ModelLoadError)."""
    threads = max(1, int(threads))
    if workers is None or workers == "auto":
        w = 2 if threads >= 2 else 1
    else:
        try:
            w = int(workers)
        except (TypeError, ValueError):
            raise error(f"workers must be a number or 'auto', not {workers!r}") from None
        if w < 1:
            raise error(f"workers must be >= 1, not {w}")
        w = min(w, threads)
    return w, max(1, threads // w)


def pad_values(tokenizer: Any) -> dict[str, int]:
    """What a Hugging Face tokenizer pads each of its outputs with (for :func:`pad_tokens`)."""
    pad_id = tokenizer.pad_token_id
    if pad_id is None:
        raise ValueError("the tokenizer has no padding token")
    return {"input_ids": int(pad_id), "attention_mask": 0, "token_type_ids": int(getattr(tokenizer, "pad_token_type_id", 0)),
            "special_tokens_mask": 1}


def pad_tokens(tokens: Mapping[str, Sequence[Sequence[int]]], rows: Iterable[int], values: Mapping[str, int],
               side: str = "right") -> dict[str, np.ndarray]:
    """Rows of an unpadded tokenizer output (lists of ids per pair), padded to their longest as the
    tokenizer's own ``padding=True`` pads them: int64 arrays, one per output, padding on ``side``."""
    rows = list(rows)
    width = max((len(tokens["input_ids"][r]) for r in rows), default=0)
    out: dict[str, np.ndarray] = {}
    for key, seqs in tokens.items():
        if key not in values:
            raise ValueError(f"no padding value for the tokenizer output {key!r}")
        arr = np.full((len(rows), width), values[key], dtype=np.int64)
        for i, r in enumerate(rows):
            seq = seqs[r]
            if seq:
                if side == "left":
                    arr[i, width - len(seq):] = seq
                else:
                    arr[i, :len(seq)] = seq
        out[key] = arr
    return out


@dataclass
class ClassifierStats:
    """Counters kept by :class:`BatchedClassifier` (for throughput and latency figures)."""

    pairs_requested: int = 0
    pairs_computed: int = 0  # after de-duplication
    batches: int = 0
    seconds: float = 0.0  # summed over batches (with workers, more than the wall time)
    batch_seconds: list[float] = field(default_factory=list)

    def reset(self) -> None:
        self.pairs_requested = self.pairs_computed = self.batches = 0
        self.seconds = 0.0
        self.batch_seconds = []


@dataclass
class GeneratorStats:
    """Counters kept by a generator (for token rates and call latencies)."""

    prompts: int = 0
    sequences: int = 0
    new_tokens: int = 0  # generated ids, padding excluded
    seconds: float = 0.0
    call_seconds: list[float] = field(default_factory=list)  # one entry per batch of prompts

    def reset(self) -> None:
        self.prompts = self.sequences = self.new_tokens = 0
        self.seconds = 0.0
        self.call_seconds = []


class ClassifierBase:
    """A :class:`Classifier` with the optional members of the contract and their defaults:

    * ``stats``: the engine's counters, or ``None`` when it keeps none;
    * ``clear_cache()``: forget the pairs computed so far (default: nothing is cached);
    * ``reset_stats()``: zero the counters."""

    info: EngineInfo
    stats: ClassifierStats | None = None

    def classify(self, pairs: Sequence[Pair]) -> Predictions:
        raise NotImplementedError

    def clear_cache(self) -> None:
        """Nothing to forget: the engine caches no pairs."""

    def reset_stats(self) -> None:
        if self.stats is not None:
            self.stats.reset()


class GeneratorBase:
    """A :class:`Generator` with the optional members of the contract and their defaults:

    * ``stats``: the engine's counters, or ``None`` when it keeps none;
    * ``generate_ids(...)``: the token ids behind :meth:`generate`'s texts, or ``None`` from an engine that
      has texts only;
    * ``reset_stats()``: zero the counters."""

    info: EngineInfo
    stats: GeneratorStats | None = None

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        raise NotImplementedError

    def count_tokens(self, texts: Iterable[str]) -> int:
        raise NotImplementedError

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                     seeds: Sequence[int]) -> list[list[list[int]]] | None:
        """``n`` rows of generated token ids per prompt (without the decoder start token and padding); ``None``:
        the engine has no token ids."""
        return None

    def reset_stats(self) -> None:
        if self.stats is not None:
            self.stats.reset()


class _Completed:
    """An engine that implements only the protocol, completed with the defaults of its base class. Its other
    attributes are read from the engine (backend-specific members stay reachable)."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine

    @property
    def info(self) -> EngineInfo:
        return self._engine.info

    def __getattr__(self, name: str) -> Any:
        if name == "_engine":  # not set yet (copying, unpickling)
            raise AttributeError(name)
        return getattr(self._engine, name)


class _CompletedClassifier(_Completed, ClassifierBase):
    def classify(self, pairs: Sequence[Pair]) -> Predictions:
        return self._engine.classify(pairs)


class _CompletedGenerator(_Completed, GeneratorBase):
    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        return self._engine.generate(prompts, n, decoding, seeds)

    def count_tokens(self, texts: Iterable[str]) -> int:
        return self._engine.count_tokens(texts)


def as_classifier(engine: Classifier) -> ClassifierBase:
    """``engine`` with every member of the classifier contract (the defaults where it implements only
    :class:`Classifier`)."""
    return engine if isinstance(engine, ClassifierBase) else _CompletedClassifier(engine)


def as_generator(engine: Generator) -> GeneratorBase:
    """``engine`` with every member of the generator contract (the defaults where it implements only
    :class:`Generator`)."""
    return engine if isinstance(engine, GeneratorBase) else _CompletedGenerator(engine)


@dataclass
class MaskFillerStats:
    """Counters kept by :class:`BatchedMaskFiller`."""

    items_requested: int = 0
    items_computed: int = 0  # after de-duplication and the cache
    masks: int = 0  # mask positions computed
    batches: int = 0
    seconds: float = 0.0  # summed over batches (with workers, more than the wall time)
    batch_seconds: list[float] = field(default_factory=list)

    def reset(self) -> None:
        self.items_requested = self.items_computed = self.masks = self.batches = 0
        self.seconds = 0.0
        self.batch_seconds = []


class MaskFillerBase:
    """A :class:`MaskFiller` with the optional members of the contract and their defaults:

    * ``stats``: the engine's counters, or ``None`` when it keeps none;
    * ``score_tokens(items, words)``: only the scores of :meth:`fill_mask` (no suggestions);
    * ``clear_cache()`` / ``reset_stats()``."""

    info: EngineInfo
    stats: MaskFillerStats | None = None

    def fill_mask(self, items: Sequence[MaskedItem], top_k: int,
                  score: Sequence[str | None] | None = None) -> list[MaskFill]:
        raise NotImplementedError

    def score_tokens(self, items: Sequence[MaskedItem], words: Sequence[str | None]) -> list[float | None]:
        """The mean log-probability of ``words[i]`` at the mask positions of ``items[i]`` (None where the word is
        not one whole-word token of the model's vocabulary)."""
        return [f.score for f in self.fill_mask(items, 0, words)]

    def clear_cache(self) -> None:
        """Nothing to forget: the engine caches nothing."""

    def reset_stats(self) -> None:
        if self.stats is not None:
            self.stats.reset()


class _CompletedMaskFiller(_Completed, MaskFillerBase):
    def fill_mask(self, items: Sequence[MaskedItem], top_k: int,
                  score: Sequence[str | None] | None = None) -> list[MaskFill]:
        return self._engine.fill_mask(items, top_k, score)


def as_mask_filler(engine: MaskFiller) -> MaskFillerBase:
    """``engine`` with every member of the mask-filler contract."""
    return engine if isinstance(engine, MaskFillerBase) else _CompletedMaskFiller(engine)


class BatchedClassifier(ClassifierBase):
    """Shared machinery of every classifier engine: de-duplication and token-budget batching.

    Subclasses implement either ``_token_lengths(pairs)`` (token count of each encoded pair, as
    the engine will see it) and ``_logits(pairs)`` (an (n, 3) float array, columns = LABELS, for
    one batch), or three parts: ``_tokenize(pairs)`` (one unpadded tokenizer pass over all the pairs
    of a call, which also gives the lengths; on the calling thread, as Hugging Face tokenizers are
    not safe to share between threads), ``_feeds(tokens, rows)`` (the padded inputs of one batch,
    built from those tokens without tokenizing again) and ``_run(feeds)`` (the model; thread-safe).
    Engines with the parts run batches on ``workers`` threads side by side (the next batch's inputs
    are built while the workers compute); results do not depend on the number of workers, since
    every batch is formed as without them. Identical pairs are computed
    once per engine instance (a cache keyed by the exact texts), so a pair that comes back in
    another stage or mode is not recomputed.
    """

    info: EngineInfo
    stats: ClassifierStats
    cpu_max_batch: int | None = None  # the engine's pairs per batch on the CPU when ``max_batch`` is not given

    @classmethod
    def resolve_max_batch(cls, max_batch: int | None, device: str | None) -> int:
        """Pairs per batch: ``max_batch`` when given, else the engine's CPU choice on the CPU, else
        ``DEFAULT_MAX_BATCH``."""
        if max_batch is None:
            max_batch = cls.cpu_max_batch if device == "cpu" and cls.cpu_max_batch else DEFAULT_MAX_BATCH
        return int(max_batch)

    def __init__(self, token_budget: int = 8192, max_batch: int | None = None, cache: bool = True,
                 workers: int = 1, device: str | None = None) -> None:
        self.token_budget = int(token_budget)
        self.max_batch = self.resolve_max_batch(max_batch, device)
        self._cache: dict[Pair, np.ndarray] | None = {} if cache else None
        self.stats = ClassifierStats()
        self.workers = Workers(workers if self.parallel_capable else 1)

    # -- to implement: _token_lengths + _logits, or _tokenize + _feeds + _run ------------------
    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        return [len(x) for x in self._tokenize(pairs)["input_ids"]]

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        return self._run(self._encode(pairs))

    def _tokenize(self, pairs: Sequence[Pair]) -> Mapping[str, Sequence[Sequence[int]]]:
        raise NotImplementedError

    def _feeds(self, tokens: Mapping[str, Sequence[Sequence[int]]], rows: Sequence[int]) -> Any:
        raise NotImplementedError

    def _run(self, feeds: Any) -> np.ndarray:
        raise NotImplementedError

    def _encode(self, pairs: Sequence[Pair]) -> Any:
        """The padded inputs of these pairs as one batch (``_tokenize`` then ``_feeds``)."""
        return self._feeds(self._tokenize(pairs), range(len(pairs)))

    def _synchronize(self) -> None:
        """Wait for queued device work (GPU engines override); called before a timer stops."""

    @property
    def parallel_capable(self) -> bool:
        """True when the engine has the parts ``_tokenize`` / ``_feeds`` / ``_run`` (batches may run on workers)."""
        return type(self)._run is not BatchedClassifier._run

    # -- shared -------------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Forget the pairs computed so far (the next call computes them again)."""
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

    def _timed_run(self, feeds: Any, encode_seconds: float) -> tuple[np.ndarray, float]:
        t0 = time.perf_counter()
        logits = np.asarray(self._run(feeds), dtype=np.float32)
        self._synchronize()
        return logits, encode_seconds + time.perf_counter() - t0

    def _run_batched(self, pairs: list[Pair]) -> np.ndarray:
        tokens = self._tokenize(pairs) if self.parallel_capable else None  # one tokenizer pass for the call
        lengths = [len(x) for x in tokens["input_ids"]] if tokens is not None else self._token_lengths(pairs)
        res = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)
        pending: deque[tuple[list[int], Future]] = deque()

        def collect(idx: list[int], logits: np.ndarray, dt: float) -> None:
            if logits.shape != (len(idx), len(LABELS)):
                raise RuntimeError(f"engine returned logits of shape {logits.shape}, expected {(len(idx), len(LABELS))}")
            finite = np.isfinite(logits).all(axis=1)
            if not finite.all():
                bad = int((~finite).sum())
                first = pairs[idx[int(np.argmin(finite))]]
                raise nonfinite_error(getattr(self, "info", None),
                                      f"logits of {bad} of {len(idx)} pairs in a batch, the first for premise "
                                      f"{first[0][:60]!r}")
            res[idx] = logits
            self.stats.batches += 1
            self.stats.seconds += dt
            self.stats.batch_seconds.append(dt)

        batches = plan_batches(lengths, self.token_budget, self.max_batch)
        if not self.parallel_capable:
            for idx in batches:
                t0 = time.perf_counter()
                logits = np.asarray(self._logits([pairs[i] for i in idx]), dtype=np.float32)
                self._synchronize()
                collect(idx, logits, time.perf_counter() - t0)
        else:
            try:
                for idx in batches:
                    t0 = time.perf_counter()
                    feeds = self._feeds(tokens, idx)  # on this thread, while the workers compute
                    pending.append((idx, self.workers.submit(self._timed_run, feeds, time.perf_counter() - t0)))
                    while len(pending) > 2 * self.workers.n:  # bound what waits in memory
                        idx0, fut = pending.popleft()
                        collect(idx0, *fut.result())
                while pending:
                    idx0, fut = pending.popleft()
                    collect(idx0, *fut.result())
            finally:
                self.workers.shutdown()
        self.stats.pairs_computed += len(pairs)
        return res


def top_k_desc(values: np.ndarray, k: int) -> np.ndarray:
    """Indices of the ``k`` largest values, largest first; ties broken by the lower index (deterministic)."""
    n = values.shape[0]
    k = max(0, min(int(k), n))
    if k == 0:
        return np.zeros(0, dtype=np.int64)
    idx = np.arange(n) if k == n else np.argpartition(-values, k - 1)[:k]
    # the partition's k-th value may tie with values left out: take every index at or above it, then order
    if k < n:
        kth = values[idx].min()
        idx = np.flatnonzero(values >= kth)
    order = np.lexsort((idx, -values[idx]))
    return idx[order][:k].astype(np.int64)


class BatchedMaskFiller(MaskFillerBase):
    """Shared machinery of every mask-filler engine: de-duplication, a cache, token-budget batching with length
    buckets, the mean over an item's mask positions and the top-k among whole-word tokens.

    A subclass sets ``vocab`` (an object with ``candidate_ids``: the ids of whole-word tokens, an int64
    array; ``word(id)``: a token id's word; ``word_id(word)``: the id of a word that is one whole-word token,
    else None; see :class:`breaknli_fast.engines.fill_mask.WordVocab`) and ``mask_token_id``, and implements

    * ``_tokenize(items)``: one unpadded tokenizer pass over the items of a call (lists of ids per item, the
      model's mask token at every placeholder; on the calling thread);
    * ``_pad(tokens, rows)``: the padded int64 arrays of one batch (``input_ids`` among them);
    * ``_run(arrays, mask_index)``: the model on one batch; ``mask_index`` holds the flat positions
      (row * width + column) of the mask tokens in ``arrays["input_ids"]``; returns their log-probabilities
      over the vocabulary, (len(mask_index), vocabulary) float32, in that order. Thread-safe: batches run on
      ``workers`` threads side by side, and results do not depend on the number of workers.
    """

    info: EngineInfo
    stats: MaskFillerStats
    vocab: Any
    mask_token_id: int
    cpu_max_batch: int | None = None

    def __init__(self, token_budget: int = 8192, max_batch: int | None = None, cache: bool = True,
                 workers: int = 1, device: str | None = None) -> None:
        self.token_budget = int(token_budget)
        if max_batch is None:
            max_batch = self.cpu_max_batch if device == "cpu" and self.cpu_max_batch else DEFAULT_MAX_BATCH
        self.max_batch = int(max_batch)
        self._cache: dict[tuple[MaskedItem, int, str | None], MaskFill] | None = {} if cache else None
        self.stats = MaskFillerStats()
        self.workers = Workers(workers)

    def _tokenize(self, items: Sequence[MaskedItem]) -> Mapping[str, Sequence[Sequence[int]]]:
        raise NotImplementedError

    def _pad(self, tokens: Mapping[str, Sequence[Sequence[int]]], rows: Sequence[int]) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _run(self, arrays: dict[str, np.ndarray], mask_index: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _synchronize(self) -> None:
        """Wait for queued device work (GPU engines override); called before a timer stops."""

    def clear_cache(self) -> None:
        if self._cache is not None:
            self._cache.clear()

    def fill_mask(self, items: Sequence[MaskedItem], top_k: int,
                  score: Sequence[str | None] | None = None) -> list[MaskFill]:
        items = [tuple(str(x) for x in (it if isinstance(it, (tuple, list)) else (it,))) for it in items]
        words = list(score) if score is not None else [None] * len(items)
        if len(words) != len(items):
            raise ValueError(f"fill_mask: {len(items)} items but {len(words)} words to score")
        top_k = int(top_k)
        self.stats.items_requested += len(items)
        out: list[MaskFill | None] = [None] * len(items)
        todo: dict[MaskedItem, dict[tuple[int, str | None], list[int]]] = {}
        for i, (it, w) in enumerate(zip(items, words)):
            key = (it, top_k, w)
            if self._cache is not None and key in self._cache:
                out[i] = self._cache[key]
            else:
                todo.setdefault(it, {}).setdefault((top_k, w), []).append(i)
        if todo:
            uniq = list(todo)
            requests = [todo[it] for it in uniq]
            for it, req, fills in zip(uniq, requests, self._run_batched(uniq, requests)):
                for (k, w), fill in zip(req, fills):
                    for i in req[(k, w)]:
                        out[i] = fill
                    if self._cache is not None:
                        self._cache[(it, k, w)] = fill
        return out  # type: ignore[return-value]

    def _answer(self, row: np.ndarray | None, masks: int,
                requests: Mapping[tuple[int, str | None], list[int]]) -> list[MaskFill]:
        fills = []
        for k, w in requests:
            if row is None:
                fills.append(MaskFill([], np.zeros(0, dtype=np.float32), None, 0))
                continue
            cand = self.vocab.candidate_ids
            vals = row[cand]
            top = top_k_desc(vals, k)
            wid = self.vocab.word_id(w) if w is not None else None
            fills.append(MaskFill([self.vocab.word(int(cand[j])) for j in top], vals[top].astype(np.float32),
                                  None if wid is None else float(row[wid]), masks))
        return fills

    def _timed_run(self, arrays: dict[str, np.ndarray], mask_index: np.ndarray,
                   encode_seconds: float) -> tuple[np.ndarray, float]:
        t0 = time.perf_counter()
        logp = np.asarray(self._run(arrays, mask_index), dtype=np.float32)
        self._synchronize()
        return logp, encode_seconds + time.perf_counter() - t0

    def _run_batched(self, items: list[MaskedItem],
                     requests: list[dict[tuple[int, str | None], list[int]]]) -> list[list[MaskFill]]:
        tokens = self._tokenize(items)
        lengths = [len(x) for x in tokens["input_ids"]]
        results: list[list[MaskFill] | None] = [None] * len(items)
        pending: deque[tuple[list[int], np.ndarray, int, Future]] = deque()

        def collect(idx: list[int], rows_of: np.ndarray, width: int, fut: Future) -> None:
            logp, dt = fut.result()
            if logp.shape[0] != rows_of.shape[0]:
                raise RuntimeError(f"engine returned {logp.shape[0]} rows of log-probabilities for "
                                   f"{rows_of.shape[0]} mask positions")
            # a NaN or +inf anywhere in a row, or a row of -inf only: its maximum is not finite (one pass)
            bad = ~np.isfinite(logp.max(axis=1))
            if bad.any():
                raise nonfinite_error(getattr(self, "info", None), f"log-probabilities at {int(bad.sum())} of "
                                      f"{logp.shape[0]} mask positions in a batch")
            for b, i in enumerate(idx):
                sel = np.flatnonzero(rows_of == b)
                row = logp[sel].mean(axis=0) if sel.size else None
                results[i] = self._answer(row, int(sel.size), requests[i])
            self.stats.batches += 1
            self.stats.masks += int(rows_of.shape[0])
            self.stats.seconds += dt
            self.stats.batch_seconds.append(dt)

        try:
            for idx in plan_batches(lengths, self.token_budget, self.max_batch):
                t0 = time.perf_counter()
                arrays = self._pad(tokens, idx)
                ids = arrays["input_ids"]
                width = int(ids.shape[1])
                mask_index = np.flatnonzero(ids.reshape(-1) == self.mask_token_id).astype(np.int64)
                rows_of = mask_index // max(width, 1)
                if mask_index.size == 0:  # nothing to fill (placeholders truncated away)
                    for i in idx:
                        results[i] = self._answer(None, 0, requests[i])
                    continue
                fut = self.workers.submit(self._timed_run, arrays, mask_index, time.perf_counter() - t0)
                pending.append((idx, rows_of, width, fut))
                while len(pending) > 2 * self.workers.n:
                    collect(*pending.popleft())
            while pending:
                collect(*pending.popleft())
        finally:
            self.workers.shutdown()
        self.stats.items_computed += len(items)
        return results  # type: ignore[return-value]
