"""Batching shared by every backend: by token budget with length buckets (:func:`plan_batches`), de-duplication
and a cache of repeated inputs, and batches run side by side on CPU worker threads (:class:`Workers`), once for
the classifier (:class:`BatchedClassifier`) and the mask filler (:class:`BatchedMaskFiller`).

A classifier backend implements only ``_token_lengths`` and ``_logits`` for one already-formed batch -- or
``_tokenize`` / ``_feeds`` / ``_run`` (tokenize each call once on the calling thread, pad each batch from those
tokens, run the model on a worker thread), which lets ``workers > 1`` run batches side by side on the CPU.
"""

from __future__ import annotations

import time
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.engines.base import (ClassifierBase, ClassifierStats, EngineInfo, MaskedItem, MaskFill,
                                        MaskFillerBase, MaskFillerStats, Pair, Predictions, as_pairs,
                                        nonfinite_error)


DEFAULT_MAX_BATCH = 64  # pairs per classifier batch unless the engine or the user says otherwise
# A batch is padded to a width decided by each input's own length (rounded up to a multiple of this; at most the
# engine's max_length where that is longer than the input), and holds inputs of one width only: padded to the
# longest in its batch, a pair's logits moved with its neighbours (the attention's reductions run over the padded
# width: torch fp32 by up to 1e-4 on a tiny model, bf16 0.14, ONNX Runtime fp16 0.009), so its answer depended on
# the batch, the order and the chunking. tests/test_batch_independence.py holds every engine to the bit.
LENGTH_STEP = 8
MAX_LENGTH_STEP = 64  # the largest ``length_step`` an engine option may ask for
CLIP_CHARS_PER_TOKEN = 16  # a text longer than max_length x this many characters is cut before tokenising


def clip_text(tokenizer: Any, text: str, max_length: int) -> str:
    """``text`` as the tokenizer needs to see it when only its first ``max_length`` tokens are kept: a text of
    more than ``max_length * CLIP_CHARS_PER_TOKEN`` characters is cut to that many when the cut alone gives at
    least twice ``max_length`` tokens, so the kept tokens are those of the whole text (a tokenizer only
    reconsiders the words at the cut, far behind them), without tokenising megabytes first. A cut that gives
    fewer tokens (long runs of spaces, say) is not taken: the whole text is tokenised, as before."""
    limit = int(max_length) * CLIP_CHARS_PER_TOKEN
    if len(text) <= limit or max_length < 1:
        return text
    cut = text[:limit]
    n = len(tokenizer(cut, add_special_tokens=False, verbose=False)["input_ids"])
    return cut if n >= 2 * int(max_length) else text


def check_length_step(value: Any, error: type[Exception] = ValueError) -> int:
    """``value`` as a padded widths' step: a whole number from 1 to :data:`MAX_LENGTH_STEP`, else one line."""
    text = str(value).strip()
    if isinstance(value, bool) or not text.isdigit() or not 1 <= int(text) <= MAX_LENGTH_STEP:
        raise error(f"length_step must be a whole number from 1 to {MAX_LENGTH_STEP} (got {value!r})")
    return int(text)


def padded_width(n: int, step: int = LENGTH_STEP, cap: int | None = None) -> int:
    """The width an input of ``n`` tokens is padded to: ``n`` rounded up to a multiple of ``step``, but not past
    ``cap`` (the engine's max_length) unless ``n`` itself is longer. A function of ``n`` alone."""
    n = max(1, int(n))
    w = -(-n // max(1, int(step))) * max(1, int(step))
    return min(w, max(int(cap), n)) if cap else w


def _pack(lengths: Sequence[int], cap: int, max_batch: int, one_width: bool = False) -> list[list[int]]:
    """Positions ``0..n-1`` of ``lengths`` (sorted longest first) in consecutive groups, each as long as
    ``max_batch`` items and ``len(group) * its first (longest) length <= cap`` allow (an item longer than
    ``cap`` still forms its own group); ``one_width``: a group also ends where the length changes."""
    groups: list[list[int]] = []
    cur: list[int] = []
    first = 0
    for pos, length in enumerate(lengths):
        if cur and (len(cur) + 1 > max_batch or (len(cur) + 1) * first > cap or (one_width and length != first)):
            groups.append(cur)
            cur = []
        if not cur:
            first = length
        cur.append(pos)
    if cur:
        groups.append(cur)
    return groups


def plan_batches(lengths: Sequence[int], token_budget: int, max_batch: int, multiple: int = 1,
                 one_width: bool = False) -> list[list[int]]:
    """Group item indices into batches: sorted by length (longest first, so memory peaks early),
    each batch bounded by ``max_batch`` items and ``len(batch) * longest <= token_budget``
    (a single over-long item still forms its own batch). Deterministic for equal inputs.

    ``multiple`` > 1 (the CPU engines whose batches run on worker threads side by side): the number of batches is
    that of the plain grouping rounded up to a multiple of ``multiple`` (never more than the items), and the items
    are spread over them so that the largest batch's padded size (items x longest) is as small as it can be
    (a bounded bisection over the padded size): 50 pairs at 16 per batch give 13 + 13 + 13 + 11, not 16 + 16 +
    16 + 2, and 20 give 10 + 10, not 16 + 4, so two workers finish together. It is a constant of the engine,
    not the worker count.

    ``one_width``: ``lengths`` are padded widths (:func:`padded_width`) and a batch holds one width only."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    sorted_lengths = [max(1, int(lengths[i])) for i in order]
    groups = _pack(sorted_lengths, int(token_budget), int(max_batch), one_width)
    if multiple > 1 and sorted_lengths and sorted_lengths[0] <= token_budget:
        n = min(len(sorted_lengths), -(-len(groups) // int(multiple)) * int(multiple))
        lo, hi = sorted_lengths[0], int(token_budget)  # the plain grouping fits in n groups at the budget
        while lo < hi:  # the smallest padded size per batch that still fits the items in n batches
            mid = (lo + hi) // 2
            if len(_pack(sorted_lengths, mid, int(max_batch), one_width)) <= n:
                hi = mid
            else:
                lo = mid + 1
        groups = _pack(sorted_lengths, lo, int(max_batch), one_width)
    return [[order[pos] for pos in g] for g in groups]


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


def run_batches(batches: Iterable[list[int]], prepare: Callable[[list[int]], tuple[tuple[Any, ...], Any] | None],
                run: Callable[..., Any], collect: Callable[[list[int], Any, np.ndarray, float], None],
                workers: Workers, synchronize: Callable[[], None] = lambda: None) -> int:
    """The batching pipeline of every engine: for each batch of item indices, ``prepare(idx)`` builds the model's
    inputs on the calling thread (``(args of run, context for collect)``, or None when there is nothing to run),
    ``run(*args)`` runs the model on a worker thread while the next batch is prepared, and ``collect(idx, context,
    output, seconds)`` takes the outputs in batch order on the calling thread. ``seconds``: preparing plus running
    the batch (``synchronize`` waits for queued device work before the timer stops). At most two batches per worker
    wait in memory; the workers end with the call. Returns how many workers ran batches side by side (1 for a call
    of one batch, which runs on the calling thread)."""
    pending: deque[tuple[list[int], Any, Future]] = deque()

    def timed(args: tuple[Any, ...], prepare_seconds: float) -> tuple[np.ndarray, float]:
        t0 = time.perf_counter()
        out = np.asarray(run(*args), dtype=np.float32)
        synchronize()
        return out, prepare_seconds + time.perf_counter() - t0

    def take() -> None:
        idx, ctx, fut = pending.popleft()
        collect(idx, ctx, *fut.result())

    batches = list(batches)
    pool = workers
    if len(batches) <= 1:
        # one batch gains nothing from a worker, and starting one costs more than a small model's whole batch (the
        # mini classifier on ort fp32 at one pair: 2.0 ms on a worker, 1.1-1.6 ms here); the same session computes it
        # either way
        workers = Workers(1)
    try:
        for idx in batches:
            t0 = time.perf_counter()
            prepared = prepare(idx)
            if prepared is None:
                continue
            args, ctx = prepared
            pending.append((idx, ctx, workers.submit(timed, args, time.perf_counter() - t0)))
            while len(pending) > 2 * workers.n:
                take()
        while pending:
            take()
    finally:
        pool.shutdown()
    return workers.n


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
               side: str = "right", width: int | None = None) -> dict[str, np.ndarray]:
    """Rows of an unpadded tokenizer output (lists of ids per pair), padded to ``width`` (default: their
    longest, as the tokenizer's own ``padding=True`` pads them): int64 arrays, one per output, padding on
    ``side``."""
    rows = list(rows)
    longest = max((len(tokens["input_ids"][r]) for r in rows), default=0)
    width = longest if width is None else max(int(width), longest)
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


class PaddedWidths:
    """The padded width of an input, decided by its own length (:func:`padded_width`): the classifier and the mask
    filler pad each batch to it and batch inputs of one width together."""

    length_step: int = LENGTH_STEP  # padded widths: multiples of this
    # the CPU engines' own step where it is not LENGTH_STEP (ort's sequence classifier: 1, each pair's own length;
    # docs/export.md measures it); ``length_step`` given to the engine overrides both
    cpu_length_step: int | None = None

    def _set_length_step(self, length_step: int | None, device: str | None) -> None:
        """The padded widths' step: ``length_step`` when given, else the engine's CPU step on the CPU, else
        :data:`LENGTH_STEP`. A constant of the engine: every width stays a function of an input's own length."""
        if length_step is None:
            length_step = self.cpu_length_step if device == "cpu" and self.cpu_length_step else LENGTH_STEP
        self.length_step = check_length_step(length_step)

    def _width(self, length: int) -> int:
        """The padded width of a pair of ``length`` tokens (:func:`padded_width`; its own length decides it)."""
        return padded_width(length, self.length_step, getattr(self, "max_length", None))

    def _padded(self, tokens: Mapping[str, Sequence[Sequence[int]]], rows: Sequence[int], values: Mapping[str, int],
                side: str = "right") -> dict[str, np.ndarray]:
        """One batch of the call's tokens, padded to its width (:meth:`_width` of its longest pair)."""
        rows = list(rows)
        longest = max((len(tokens["input_ids"][r]) for r in rows), default=0)
        return pad_tokens(tokens, rows, values, side, width=self._width(longest) if rows else None)


class BatchedClassifier(PaddedWidths, ClassifierBase):
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
    # the batches of a call on the CPU come in multiples of this (plan_batches: engines whose batches run on two
    # worker threads there give 2, so that both finish together); 1 elsewhere
    cpu_batch_multiple: int = 1

    @classmethod
    def resolve_max_batch(cls, max_batch: int | None, device: str | None) -> int:
        """Pairs per batch: ``max_batch`` when given, else the engine's CPU choice on the CPU, else
        ``DEFAULT_MAX_BATCH``."""
        if max_batch is None:
            max_batch = cls.cpu_max_batch if device == "cpu" and cls.cpu_max_batch else DEFAULT_MAX_BATCH
        return int(max_batch)

    def __init__(self, token_budget: int = 8192, max_batch: int | None = None, cache: bool = True,
                 workers: int = 1, device: str | None = None, length_step: int | None = None) -> None:
        self.token_budget = int(token_budget)
        self.max_batch = self.resolve_max_batch(max_batch, device)
        self._set_length_step(length_step, device)
        self.batch_multiple = self.cpu_batch_multiple if device == "cpu" else 1
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

    def _plan(self, lengths: Sequence[int], tokens: Mapping[str, Sequence[Sequence[int]]] | None = None
              ) -> list[list[int]]:
        """The batches of one call's pairs of these token lengths (``tokens``: the call's tokens, where the engine
        tokenised it): one padded width per batch (:func:`plan_batches`; an engine with shapes of its own, such as
        the cudagraph engine's buckets, overrides it)."""
        return plan_batches([self._width(n) for n in lengths], self.token_budget, self.max_batch,
                            self.batch_multiple, one_width=True)

    def _batch_shape(self, lengths: Sequence[int]) -> tuple[int, int]:
        """(rows, width) the engine runs for a batch of pairs of these token lengths: as many rows as pairs, padded
        to :meth:`_width` of the longest (an engine that pads otherwise, such as the cudagraph engine's buckets,
        overrides it). Counted in ``stats.work``."""
        return len(lengths), self._width(max(lengths, default=1))

    @property
    def parallel_capable(self) -> bool:
        """True when the engine has the parts ``_tokenize`` / ``_feeds`` / ``_run`` (batches may run on workers)."""
        return type(self)._run is not BatchedClassifier._run

    # -- shared -------------------------------------------------------------------------
    def clear_cache(self) -> None:
        """Forget the pairs computed so far (the next call computes them again)."""
        if self._cache is not None:
            self._cache.clear()

    def set_reuse(self, enabled: bool) -> None:
        """Turn the reuse of computed pairs on (the default) or off. Off: no cache, and identical pairs within a
        call are each computed (a latency benchmark must not be credited with repeats, as MLPerf rules say)."""
        self._reuse = bool(enabled)
        if not enabled:
            self.clear_cache()

    def classify(self, pairs: Sequence[Pair]) -> Predictions:
        pairs = as_pairs(pairs)
        self.stats.pairs_requested += len(pairs)
        if not getattr(self, "_reuse", True):
            return Predictions(self._run_batched(pairs) if pairs else np.zeros((0, len(LABELS)), dtype=np.float32))
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
        tokenizer, max_length = getattr(self, "tokenizer", None), getattr(self, "max_length", None)
        if tokenizer is not None and max_length:  # over-long texts are cut before tokenising (same tokens kept)
            pairs = [(clip_text(tokenizer, p, max_length), clip_text(tokenizer, h, max_length)) for p, h in pairs]
        tokens = self._tokenize(pairs) if self.parallel_capable else None  # one tokenizer pass for the call
        lengths = [len(x) for x in tokens["input_ids"]] if tokens is not None else self._token_lengths(pairs)
        res = np.zeros((len(pairs), len(LABELS)), dtype=np.float32)

        def prepare(idx: list[int]) -> tuple[tuple[Any, ...], None]:
            # the parts: padded from the call's tokens here, the model on a worker; else the whole batch at once
            return ((self._feeds(tokens, idx),) if tokens is not None else ([pairs[i] for i in idx],)), None

        def collect(idx: list[int], _: None, logits: np.ndarray, dt: float) -> None:
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
            self.stats.work.add_batch(*self._batch_shape([lengths[i] for i in idx]), dt)

        side_by_side = run_batches(self._plan(lengths, tokens), prepare, self._run if tokens is not None else self._logits,
                                   collect, self.workers, self._synchronize)
        self.stats.work.workers = max(self.stats.work.workers, side_by_side)
        self.stats.pairs_computed += len(pairs)
        self.stats.work.add_pairs(lengths)
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


class BatchedMaskFiller(PaddedWidths, MaskFillerBase):
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
    cpu_batch_multiple: int = 1  # as BatchedClassifier's

    def __init__(self, token_budget: int = 8192, max_batch: int | None = None, cache: bool = True,
                 workers: int = 1, device: str | None = None) -> None:
        self.token_budget = int(token_budget)
        if max_batch is None:
            max_batch = self.cpu_max_batch if device == "cpu" and self.cpu_max_batch else DEFAULT_MAX_BATCH
        self.max_batch = int(max_batch)
        self.batch_multiple = self.cpu_batch_multiple if device == "cpu" else 1
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

    def _run_batched(self, items: list[MaskedItem],
                     requests: list[dict[tuple[int, str | None], list[int]]]) -> list[list[MaskFill]]:
        tokens = self._tokenize(items)
        lengths = [len(x) for x in tokens["input_ids"]]
        results: list[list[MaskFill] | None] = [None] * len(items)

        def prepare(idx: list[int]) -> tuple[tuple[Any, ...], np.ndarray] | None:
            arrays = self._pad(tokens, idx)
            ids = arrays["input_ids"]
            width = int(ids.shape[1])
            mask_index = np.flatnonzero(ids.reshape(-1) == self.mask_token_id).astype(np.int64)
            if mask_index.size == 0:  # nothing to fill (placeholders truncated away)
                for i in idx:
                    results[i] = self._answer(None, 0, requests[i])
                return None
            return (arrays, mask_index), mask_index // max(width, 1)

        def collect(idx: list[int], rows_of: np.ndarray, logp: np.ndarray, dt: float) -> None:
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

        run_batches(plan_batches([self._width(n) for n in lengths], self.token_budget, self.max_batch,
                                 self.batch_multiple, one_width=True), prepare, self._run,
                    collect, self.workers, self._synchronize)
        self.stats.items_computed += len(items)
        return results  # type: ignore[return-value]
