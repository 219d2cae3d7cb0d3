"""The engine contract: what every backend (torch, ort, tensorrt) implements.

Engines only *predict*, *generate* and *fill masks*. Probes (``breaknli_fast.probes``) call them and never know
which engine runs.

Three roles:

* :class:`Classifier` -- maps (premise, hypothesis) pairs to logits over the canonical
  labels ``LABELS = (entailment, neutral, contradiction)`` (columns in that order, whatever
  the model's own output order), plus the argmax label and probabilities.
* :class:`Generator` -- maps prompts to ``n`` candidate texts each, under a
  :class:`Decoding` configuration and one seed per prompt (so results do not depend on
  how prompts are batched, which makes runs resumable and engines comparable).
* :class:`MaskFiller` -- a masked language model: for texts with :data:`MASK` placeholders, the ``top_k``
  most probable whole-word suggestions (one vocabulary token each) with their log-probabilities, averaged
  over the text's mask positions, and the log-probability of a given word there (:class:`MaskFill`).

The contract has required members (the :class:`Classifier` / :class:`Generator` / :class:`MaskFiller` protocols:
what a study calls) and optional ones with defaults (:class:`ClassifierBase` / :class:`GeneratorBase` /
:class:`MaskFillerBase`: counters, a cache, token ids; what the bench measures). Backends subclass the bases
(usually through :mod:`breaknli_fast.engines.batching`, which batches by token budget once for every backend);
an engine that implements only the protocols is completed with the defaults by the registry
(:func:`as_classifier`, :func:`as_generator`, :func:`as_mask_filler`). Each backend's loader options are a typed
:class:`~breaknli_fast.engines.options.EngineOptions` subclass beside its implementation.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.errors import UserError
from breaknli_fast.limits import MAX_BEAMS, MAX_NEW_TOKENS

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
    """Decoding settings of the generator (spec defaults: sampling, top_p .95, top_k 50, T 1.0, 40 tokens).

    ``strategy`` picks how the ``n`` texts of a prompt are made (:meth:`Generator.generate`):

    * ``sampling``: ``n`` independent draws; each step keeps the ``top_k`` most likely tokens (0: all), then the
      smallest set of them holding ``top_p`` of the probability, divides the logits by ``temperature`` and draws
      one. ``sampler`` ``fast`` (default) draws with numpy's PCG64 seeded by the prompt's seed;
      ``transformers`` gives exactly what transformers' ``generate(do_sample=True)`` gives for that prompt
      under ``torch.manual_seed(seed)`` (slower). The seed decides the texts: same prompt, seed and settings,
      same texts, whatever the batch (``engines.sampling``);
    * ``beam``: the ``n`` best of ``num_beams`` beams (default ``n``; at least ``n``); no randomness;
    * ``diverse-beam``: group beam search with a Hamming ``diversity_penalty`` between ``num_beam_groups``
      groups (default one beam per group); no randomness;
    * ``greedy``: the most likely token at each step; one text per prompt (``n`` must be 1); no randomness.

    Every strategy stops a text at the end-of-sequence token or after ``max_new_tokens`` tokens (not before
    ``min_new_tokens``: fixed-work benchmarks only). Invalid settings raise ``ValueError`` here, before any
    model runs: ``Decoding(strategy="sampling", temperature=0)`` asks for greedy decoding instead.
    """

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
                raise ValueError(f"temperature (--temperature) must be > 0 for sampling (got {self.temperature}); "
                                 "use greedy decoding (--decoding greedy)")
            if self.top_p is None or not 0 < self.top_p <= 1:
                raise ValueError(f"top_p (--top-p) must be in (0, 1] (got {self.top_p})")
            if self.top_k is None or self.top_k < 0:
                raise ValueError(f"top_k (--top-k) must be >= 0 (0 = no top-k; got {self.top_k})")
        for name, value in (("num_beams", self.num_beams), ("num_beam_groups", self.num_beam_groups)):
            if value is not None and value < 1:
                raise ValueError(f"{name} (--{name.replace('_', '-')}) must be at least 1, not {value}")
        if self.max_new_tokens < 1 or self.min_new_tokens < 0 or self.min_new_tokens > self.max_new_tokens:
            raise ValueError(f"need 1 <= max_new_tokens and 0 <= min_new_tokens <= max_new_tokens "
                             f"(got {self.max_new_tokens}, {self.min_new_tokens})")
        # the bounds of docs/limits.md: each candidate and each beam is a sequence the generator holds in memory
        if self.max_new_tokens > MAX_NEW_TOKENS:
            raise ValueError(f"max_new_tokens (--max-new-tokens) {self.max_new_tokens}: at most {MAX_NEW_TOKENS} "
                             "(T5's configured length; every engine holds a decoder cache that long per sequence)")
        if self.num_beams is not None and self.num_beams > MAX_BEAMS:
            raise ValueError(f"num_beams (--num-beams) {self.num_beams}: at most {MAX_BEAMS} (as many as the "
                             "candidates per hypothesis allowed; each beam is a sequence the generator holds)")

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

    def __post_init__(self) -> None:
        # torch on CUDA: the TF32 switches its loader set (engines/cuda.py), since they change fp32's numbers, and
        # whether attention may use cuDNN (its per-shape plans cost half precision's speed)
        if self.engine == "torch" and str(self.device).startswith("cuda"):
            from breaknli_fast.engines.cuda import sdpa_state, tf32_state

            self.details.setdefault("tf32", tf32_state())
            self.details.setdefault("sdpa", sdpa_state())

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
        """``n`` texts for each prompt, as ``[[text, ...] per prompt]`` in the prompts' order; prompt i is decoded
        under ``seeds[i]`` (one seed per prompt, a non-negative int; :func:`derive_seed` makes stable ones from
        names, as the BreakNLI loop does from the run's seed, the mode and the example id).

        With ``decoding.strategy == "sampling"`` the seed decides the draws: the same prompt, seed and
        :class:`Decoding` give the same texts whichever prompts share its batch and in whatever order, so a run
        resumes exactly and two engines can be compared text for text (CTranslate2 is the exception: one random
        stream per engine, reproducible for the same calls in the same order). Beam, diverse-beam and greedy
        decoding use no randomness and ignore the seeds (still one per prompt). The texts are decoded without
        special tokens and may repeat (de-duplication is the caller's)."""
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


@dataclass
class BatchWork:
    """The token work of a classifier's batches, as counted by the engine (the analytic operation counts of
    :mod:`breaknli_fast.bench.roofline` read it): the pairs' own tokens and the padded batches the engine ran.

    The sums of squares are there for the attention, whose work grows with the square of a sequence's length: a
    pair alone at its own length needs ``len`` tokens and ``len ** 2`` attention positions, a batch of ``rows`` at
    ``width`` computes ``rows x width`` and ``rows x width ** 2``."""

    pairs: int = 0  # pairs computed (after de-duplication)
    tokens: int = 0  # their own tokens
    token_squares: int = 0  # sum of len ** 2
    batches: int = 0
    rows: int = 0  # rows the batches ran (an engine may pad the row count too: the cudagraph engine's buckets)
    padded_tokens: int = 0  # sum of rows x width over the batches
    padded_token_squares: int = 0  # sum of rows x width ** 2
    # the batches by width (str(width) -> [batches, rows, seconds]): each width's share of the time, from the
    # seconds each batch took on its worker (preparing its inputs and running it); ``workers``: the most that ran side
    # by side in a call, each on its share of the threads (a call of one batch runs on the calling thread alone)
    by_width: dict[str, list[float]] = field(default_factory=dict)
    workers: int = 1

    def add_pairs(self, lengths: Sequence[int]) -> None:
        self.pairs += len(lengths)
        self.tokens += sum(int(n) for n in lengths)
        self.token_squares += sum(int(n) ** 2 for n in lengths)

    def add_batch(self, rows: int, width: int, seconds: float = 0.0) -> None:
        self.batches += 1
        self.rows += int(rows)
        self.padded_tokens += int(rows) * int(width)
        self.padded_token_squares += int(rows) * int(width) ** 2
        b = self.by_width.setdefault(str(int(width)), [0, 0, 0.0])
        b[0] += 1
        b[1] += int(rows)
        b[2] += float(seconds)


@dataclass
class ClassifierStats:
    """Counters kept by :class:`BatchedClassifier` (for throughput and latency figures, and the token work of
    its batches)."""

    pairs_requested: int = 0
    pairs_computed: int = 0  # after de-duplication
    batches: int = 0
    seconds: float = 0.0  # summed over batches (with workers, more than the wall time)
    batch_seconds: list[float] = field(default_factory=list)
    work: BatchWork = field(default_factory=BatchWork)

    def reset(self) -> None:
        self.pairs_requested = self.pairs_computed = self.batches = 0
        self.seconds = 0.0
        self.batch_seconds = []
        self.work = BatchWork()


@dataclass
class DecodeWork:
    """The token work of a generator's calls, as counted by the engine (read by the analytic operation counts of
    :mod:`breaknli_fast.bench.roofline`).

    *Computed* (what the model ran, padding included; counted by the sampler, or by an engine that steps its own
    decoder): the encoder's padded prompts (``encoder_padded``: prompts x width per batch, and the sum of
    prompts x width ** 2 for its attention), the decoder's steps (``steps``: one per batch and position),
    ``row_steps`` (the rows each step ran, finished rows not yet dropped included), ``row_positions`` (the
    self-attention positions they attended: rows x (position + 1)), ``row_cross`` (rows x the encoder width they
    attended) and ``prompt_cross`` (prompts x encoder width per step: the cross-attention keys and values a step
    reads); ``batches``: the encoder's passes. *Useful* (the prompts' own tokens and the tokens generated, counted from the outputs): ``prompt_tokens``
    (and squares), ``tokens`` (generated ids, eos included), ``token_positions`` (n (n + 1) / 2 per sequence of n)
    and ``token_cross`` (n x its prompt's length). ``computed`` is False where an engine counts only the useful
    side (its padding is not known)."""

    prompts: int = 0
    prompt_tokens: int = 0
    prompt_token_squares: int = 0
    tokens: int = 0
    token_positions: int = 0
    token_cross: int = 0
    computed: bool = True
    batches: int = 0  # encoder passes (one per batch of prompts)
    encoded_prompts: int = 0
    encoder_padded: int = 0
    encoder_padded_squares: int = 0
    steps: int = 0
    row_steps: int = 0
    row_positions: int = 0
    row_cross: int = 0
    prompt_cross: int = 0

    def add_encoder(self, prompts: int, width: int) -> None:
        """A batch of ``prompts`` padded to ``width`` tokens, encoded."""
        self.batches += 1
        self.encoded_prompts += int(prompts)
        self.encoder_padded += int(prompts) * int(width)
        self.encoder_padded_squares += int(prompts) * int(width) ** 2

    def add_step(self, rows: int, position: int, width: int, prompts: int) -> None:
        """One decoder step of ``rows`` rows at ``position`` (0 for the first token) over an encoder output of
        ``width`` tokens for ``prompts`` prompts."""
        self.steps += 1
        self.row_steps += int(rows)
        self.row_positions += int(rows) * (int(position) + 1)
        self.row_cross += int(rows) * int(width)
        self.prompt_cross += int(prompts) * int(width)

    def add_outputs(self, prompt_lengths: Sequence[int], outputs: Sequence[Sequence[Sequence[int]]]) -> None:
        """The useful side of a call: its prompts' own lengths and the ids generated for each (per prompt, a list of
        sequences)."""
        self.prompts += len(prompt_lengths)
        self.prompt_tokens += sum(int(n) for n in prompt_lengths)
        self.prompt_token_squares += sum(int(n) ** 2 for n in prompt_lengths)
        for n_prompt, seqs in zip(prompt_lengths, outputs):
            for seq in seqs:
                n = len(seq)
                self.tokens += n
                self.token_positions += n * (n + 1) // 2
                self.token_cross += n * int(n_prompt)

    def merge(self, other: "DecodeWork") -> None:
        for f in fields(self):
            if f.name == "computed":
                self.computed = self.computed and other.computed
            else:
                setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))


@dataclass
class GeneratorStats:
    """Counters kept by a generator (for token rates and call latencies, and the token work of its calls)."""

    prompts: int = 0
    sequences: int = 0
    new_tokens: int = 0  # generated ids, padding excluded
    seconds: float = 0.0
    call_seconds: list[float] = field(default_factory=list)  # one entry per batch of prompts
    work: DecodeWork = field(default_factory=DecodeWork)

    def reset(self) -> None:
        self.prompts = self.sequences = self.new_tokens = 0
        self.seconds = 0.0
        self.call_seconds = []
        self.work = DecodeWork()


def as_pairs(pairs: Iterable[Pair]) -> list[Pair]:
    """``pairs`` as a list of (premise, hypothesis) string pairs, or a TypeError that says so (a list of texts
    would otherwise fail with "too many values to unpack", or a 2-character text pass as a pair)."""
    if isinstance(pairs, (str, bytes)):
        raise TypeError("classify takes a list of (premise, hypothesis) pairs, not one text")
    out = []
    for i, pair in enumerate(pairs):
        try:
            if isinstance(pair, (str, bytes)):
                raise ValueError
            p, h = pair
        except (TypeError, ValueError):
            raise TypeError(f"classify takes (premise, hypothesis) pairs; item {i} is {str(pair)[:60]!r} "
                            f"({type(pair).__name__}), e.g. classify([(\"A man sleeps.\", \"A man rests.\")])") from None
        out.append((str(p), str(h)))
    return out


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
        """``n`` texts per prompt, prompt i decoded under ``seeds[i]``: see :meth:`Generator.generate` and
        :class:`Decoding`."""
        raise NotImplementedError

    def count_tokens(self, texts: Iterable[str]) -> int:
        raise NotImplementedError

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                     seeds: Sequence[int]) -> list[list[list[int]]] | None:
        """``n`` rows of generated token ids per prompt (without the decoder start token and padding); ``None``:
        the engine has no token ids."""
        return None

    def generate_counted(self, prompts: Sequence[str], n: int, decoding: Decoding,
                         seeds: Sequence[int]) -> tuple[list[list[str]], list[int], str]:
        """:meth:`generate`'s texts, each prompt's generated tokens and how they were counted: the ids the engine
        generated (end-of-sequence tokens included, padding not) where it has them and decodes them
        (:meth:`decode_ids`), else its texts tokenised again (:meth:`count_tokens`: no end-of-sequence token)."""
        texts, ids, counts, how = generate_with_ids(self, prompts, n, decoding, seeds)
        return texts, counts, how

    def decode_ids(self, ids: list[list[list[int]]]) -> list[list[str]]:
        """The texts of :meth:`generate_ids`' rows as :meth:`generate` gives them (engines with ids override it)."""
        raise NotImplementedError

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
        return self._engine.classify(as_pairs(pairs))


COUNTED_IDS = "the generated ids (end-of-sequence tokens included, padding excluded)"
COUNTED_TEXTS = "count_tokens of the decoded texts (no end-of-sequence token)"


def generate_counted(gen: Any, prompts: Sequence[str], n: int, decoding: Decoding,
                     seeds: Sequence[int]) -> tuple[list[list[str]], list[int], str]:
    """:meth:`GeneratorBase.generate_counted` of any generator, also one that implements the protocol only."""
    if hasattr(gen, "generate_counted"):
        return gen.generate_counted(prompts, n, decoding, seeds)
    return _texts_counted(gen, prompts, n, decoding, seeds)


def generate_with_ids(gen: Any, prompts: Sequence[str], n: int, decoding: Decoding,
                      seeds: Sequence[int]) -> tuple[list[list[str]], list[list[list[int]]] | None, list[int], str]:
    """:meth:`GeneratorBase.generate_counted` with the ids behind the texts: (texts, ids or None for an engine with
    texts only, each prompt's generated tokens, how they were counted)."""
    if isinstance(gen, GeneratorBase) and type(gen).decode_ids is not GeneratorBase.decode_ids:  # decodes its ids
        ids = gen.generate_ids(prompts, n, decoding, seeds)
        if ids is not None:
            return gen.decode_ids(ids), ids, [sum(len(r) for r in rows) for rows in ids], COUNTED_IDS
    texts, counts, how = _texts_counted(gen, prompts, n, decoding, seeds)
    return texts, None, counts, how


def _texts_counted(gen: Any, prompts: Sequence[str], n: int, decoding: Decoding,
                   seeds: Sequence[int]) -> tuple[list[list[str]], list[int], str]:
    """One ``generate`` call, each prompt's texts tokenised again (``count_tokens``)."""
    texts = gen.generate(prompts, n, decoding, seeds)
    return texts, [gen.count_tokens(c) for c in texts], COUNTED_TEXTS


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
