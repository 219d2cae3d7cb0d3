"""The generator shared by every engine: one seed per prompt, so candidates do not depend on
batching, and a resumed or re-run example gets exactly the same candidates. Sampling is
:mod:`breaknli_fast.engines.sampling` over the engine's stepper; beam and greedy decoding use
Hugging Face's ``generate`` on the engine's model object where it has one (the torch reference) and
:mod:`breaknli_fast.engines.decoding` over the stepper otherwise; diverse beam search runs over the stepper
on every engine."""

from __future__ import annotations

import math
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import torch

from breaknli_fast.engines.base import (GENERATOR, Decoding, DecodeWork, EngineInfo, GeneratorBase, GeneratorStats,
                                        NonFiniteError, nonfinite_error)
from breaknli_fast.engines.decoding import beam_search, greedy_search
from breaknli_fast.engines.options import EngineOptions, option
from breaknli_fast.engines.batching import Workers, clip_text
from breaknli_fast.engines.hf import use_torch_threads
from breaknli_fast.engines.model_info import ModelLoadError, effective_max_length
from breaknli_fast.engines.sampling import COMPACT_SHARE, FiniteScores, TorchStepper, sample


@dataclass
class GenerationOptions(EngineOptions):
    """The options of :class:`HFGenerator` that its engines' generator loaders take (the torch and ort
    backends' options classes derive from this)."""

    max_input_length: int = option(256, roles=(GENERATOR,))  # prompt tokens (capped at the model's own limit)
    # prompts per generator batch (--gen-batch), each with its K samples; None: default_gen_batch(device)
    prompt_batch: int | None = option(None, roles=(GENERATOR,))


# Prompts per generator batch when none is asked for. CPU: 8 prompts x 20 samples (the mini-model loop runs about as
# fast with 16; larger batches only add padding there). CUDA: 64 prompts x 20 = 1,280 rows per decoder step, which
# keeps a GPU busy where 160 rows would leave it mostly idle; flan-t5-large's cross-attention keys and values of
# 64 prompts are a few hundred MB.
GEN_BATCH_DEFAULTS = {"cpu": 8, "cuda": 64}


def default_gen_batch(device: str) -> int:
    """The prompts per generator batch of :data:`GEN_BATCH_DEFAULTS` for ``device`` (``cpu``, ``cuda[:N]``)."""
    return GEN_BATCH_DEFAULTS.get(device.split(":")[0], GEN_BATCH_DEFAULTS["cpu"])


# generation_config fields whose processors the batched sampler does not apply (it then falls back
# to one transformers ``generate`` call per prompt); values are the neutral defaults.
_UNSUPPORTED_GEN_CONFIG = {
    "repetition_penalty": (None, 1.0), "encoder_repetition_penalty": (None, 1.0), "no_repeat_ngram_size": (None, 0),
    "encoder_no_repeat_ngram_size": (None, 0), "bad_words_ids": (None,), "forced_bos_token_id": (None,),
    "forced_eos_token_id": (None,), "suppress_tokens": (None,), "begin_suppress_tokens": (None,),
    "sequence_bias": (None,), "min_length": (None, 0), "min_p": (None,), "typical_p": (None, 1.0),
    "epsilon_cutoff": (None, 0.0), "eta_cutoff": (None, 0.0), "exponential_decay_length_penalty": (None,),
    "renormalize_logits": (None, False), "guidance_scale": (None, 1.0), "remove_invalid_values": (None, False),
}


def batched_sampling_supported(generation_config: Any) -> bool:
    """False when the model's generation config asks for logits processors that
    :func:`breaknli_fast.engines.sampling.sample` does not apply (then sampling falls back to one
    transformers ``generate`` call per prompt)."""
    if generation_config is None:
        return True
    return all(getattr(generation_config, k, None) in ok for k, ok in _UNSUPPORTED_GEN_CONFIG.items())


def generation_config_for(folder: Any, model: str, engine: str, instead: str) -> Any:
    """The model's generation config (None without one), refused in one line when it asks for logits processors
    that :func:`~breaknli_fast.engines.sampling.sample` does not apply (an engine without transformers' ``generate``
    to fall back on): ``instead`` names the engines to use."""
    from transformers import GenerationConfig

    try:
        gen_config = GenerationConfig.from_pretrained(str(folder))
    except (OSError, ValueError):
        gen_config = None
    if not batched_sampling_supported(gen_config):
        raise ModelLoadError(f"{model!r}: its generation_config asks for logits processors (repetition or n-gram "
                             f"penalties, forced or suppressed tokens, ...) that the {engine} engine does not apply; "
                             f"use {instead}")
    return gen_config


def _cut(tokens: list[int], eos: int, pad: int) -> list[int]:
    """Tokens up to and including the first eos, without pad ids: transformers pads a finished row after its eos,
    and a pad id a model generates before it decodes to nothing (every decoder here returns ids this way)."""
    out = tokens[: tokens.index(eos) + 1] if eos in tokens else tokens
    return [t for t in out if t != pad]


class HFGenerator(GeneratorBase):
    """A :class:`~breaknli_fast.engines.base.Generator` over a seq2seq model.

    Sampling (the default decoding) runs :func:`breaknli_fast.engines.sampling.sample` over the
    engine's :class:`~breaknli_fast.engines.sampling.Stepper` (``stepper``; by default a
    :class:`~breaknli_fast.engines.sampling.TorchStepper` over ``model``); beam and greedy go
    through transformers' ``generate`` where the engine has a transformers model object (``model``), and through
    :mod:`breaknli_fast.engines.decoding` over the stepper otherwise (``model=None``: the ort engine); diverse beam
    always through :func:`~breaknli_fast.engines.decoding.beam_search` over the stepper.

    ``workers > 1`` (CPU): sampling batches run side by side on worker threads, each on its own copy
    of the stepper (``stepper.fork()``: the same model or sessions, its own cache). The batches are
    the same with or without workers, so the candidates are too. ``torch_threads``: torch's
    process-wide intra-op threads, set before each call (the torch engine).

    ``max_input_length``: prompts longer than this many tokens are truncated, and never beyond the
    model's own limit (:func:`~breaknli_fast.engines.model_info.effective_max_length`: the tokenizer's
    ``model_max_length``, else 512 for T5's relative positions); the length used is recorded in
    ``info.details``."""

    stats: GeneratorStats

    def __init__(self, model: Any, tokenizer: Any, info: EngineInfo, device: str = "cpu", max_input_length: int = 256,
                 prompt_batch: int | None = None, stepper: Any = None, config: Any = None,
                 generation_config: Any = None, compact_share: float | None = COMPACT_SHARE, workers: int = 1,
                 torch_threads: int | None = None, min_batches: int = 1):
        if model is None and stepper is None:
            raise ValueError("HFGenerator needs a model or a stepper")
        self._model = model
        self.config = config if config is not None else model.config
        self.generation_config = (generation_config if generation_config is not None
                                  else getattr(model, "generation_config", None))
        self.stepper = stepper
        self.compact_share = compact_share
        self.prompt_batch = max(1, int(prompt_batch or default_gen_batch(device)))
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        # prompts are cut to this many tokens before the encoder, on every path (sampling steppers, beam,
        # greedy, diverse beam), so engines that share this class see the same encoder inputs
        self.max_input_length, limits = effective_max_length(max_input_length, self.config, tokenizer,
                                                             key="max_input_length")
        info.details.update(limits)
        info.details["gen_batch"] = self.prompt_batch
        self.stats = GeneratorStats()
        self.workers = Workers(workers)
        # sampling cuts a call of several prompts into at least this many batches (a CPU engine whose batches run
        # side by side on one core each gives a small call both cores); a constant of the engine, not the workers
        self.min_batches = max(1, int(min_batches))
        self.torch_threads = torch_threads  # the torch engine's intra-op threads, set before each call
        self._steppers: queue.SimpleQueue | None = None  # one stepper per worker, taken and given back per batch
        # called once per call, when every row of its sampling batches has its first token (sampling only; a latency
        # benchmark's time to first token: breaknli_fast.bench.loadgen)
        # with the first token of each of the call's prompts x n rows
        self.first_token_callback: Callable[[list[int]], None] | None = None

    @property
    def model(self) -> Any:
        if self._model is None:
            raise RuntimeError(f"the {self.info.engine} generator has no transformers model object")
        return self._model

    @property
    def has_model(self) -> bool:
        """Whether a transformers model object runs greedy and beam search (``generate``), as on the torch engine."""
        return self._model is not None

    def _stepper(self) -> Any:
        if self.stepper is None:
            self.stepper = TorchStepper(self.model)
        return self.stepper

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def _parallel(self) -> bool:
        return self.workers.n > 1 and hasattr(self._stepper(), "fork")

    def _first_token_hook(self, batches: int, prompts: int, n: int,
                          pad: int) -> Callable[[int, Sequence[int] | None], Callable[[list[int]], None] | None]:
        """``first_token_callback`` for a call of ``batches`` batches over ``prompts`` prompts x ``n`` rows: per
        batch (its first prompt, its rows among the batch's ``prompts x n``, None: all), the sampler's
        ``on_first_token``. The callback is called once, when the last batch has its first token (a call's first
        token is its every row's first token; batches may run one after another or side by side on workers), with
        every row's first token of the call (``pad`` where none was reported)."""
        cb = self.first_token_callback
        if cb is None:
            return lambda i, rows: None
        lock, left, first = threading.Lock(), [int(batches)], [int(pad)] * (int(prompts) * int(n))

        def batch(i: int, rows: Sequence[int] | None) -> Callable[[list[int]], None]:
            def one(tokens: list[int]) -> None:
                with lock:
                    for r in (range(len(tokens)) if rows is None else rows):
                        first[i * n + r] = int(tokens[r])
                    left[0] -= 1
                    last = left[0] == 0
                if last:
                    cb(list(first))

            return one

        return batch

    def _sample_on_worker(self, enc: Any, n: int, decoding: Decoding, seeds: list[int], ids: tuple[int, int, int],
                          rows: list[int] | None, on_first: Callable[[list[int]], None] | None = None) -> Any:
        st = self._steppers.get()  # the pool is filled by generate_ids before the first submit
        try:
            work = DecodeWork()
            t0 = time.perf_counter()
            res = sample(st, enc["input_ids"], enc["attention_mask"], n, decoding, seeds, *ids,
                         compact_share=self.compact_share, on_first_token=on_first, rows=rows, work=work)
            return res, time.perf_counter() - t0, work
        finally:
            self._steppers.put(st)

    @staticmethod
    def _batches(count: int, per_call: int, min_batches: int = 1) -> list[tuple[int, int]]:
        """(start, end) of each prompt batch: ``ceil(count / per_call)`` batches, at least ``min_batches`` (never
        more than the prompts), of sizes as equal as possible (11 prompts at 8 per batch: 6 + 5, not 8 + 3, so that
        workers share the work evenly). The split does not depend on the number of workers, so neither do the
        candidates. The row batches of :meth:`_row_batches` with one row per prompt."""
        return [(i, j) for i, j, _, _ in HFGenerator._row_batches(count, 1, per_call, min_batches)]

    @staticmethod
    def _row_batches(count: int, n: int, per_call: int,
                     min_batches: int = 1) -> list[tuple[int, int, list[int] | None, int]]:
        """The batches of the ``fast`` sampler: ``count`` prompts x ``n`` rows cut into ``ceil(count / per_call)``
        batches, at least ``min_batches`` (never more than the rows), of near-equal rows, so that workers side by
        side finish together (5 prompts x 20 at 2 batches: 50 + 50 rows, prompt 2's rows 0-9 in the first and
        10-19 in the second, where whole prompts would give 60 + 40). Each batch: ``(i, j, rows, done)``, its
        prompts ``i..j-1``, ``rows`` among their ``(j - i) x n`` (None: all), ``done`` the prompts whose last row
        it holds. A row's tokens do not depend on its batch (:func:`~breaknli_fast.engines.sampling.sample`), and
        the cut depends on neither the workers nor the machine."""
        total = int(count) * int(n)
        nb = min(max(math.ceil(count / per_call), int(min_batches)), total) if total else 0
        out = []
        bounds = [round(j * total / nb) for j in range(nb + 1)] if nb else []
        for a, b in zip(bounds, bounds[1:]):
            i, j = a // n, (b - 1) // n + 1
            rows = None if (a, b) == (i * n, j * n) else list(range(a - i * n, b - i * n))
            out.append((i, j, rows, sum(1 for e in range(i, j) if a <= e * n + n - 1 < b)))
        return out

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[list[int]]]:
        """Generated token ids (without the decoder start token and padding), ``n`` per prompt.

        Sampling runs ``prompt_batch`` prompts per batch with one random generator per prompt;
        beam and greedy decoding batch prompts through transformers' ``generate`` (deterministic);
        diverse beam runs per prompt."""
        if len(seeds) != len(prompts):
            raise ValueError("one seed per prompt is required")
        try:
            return self._generate_ids(prompts, n, decoding, seeds)
        except NonFiniteError as e:  # the sampler knows the step; the engine, which model and precision
            raise nonfinite_error(self.info, str(e)) from None

    def _generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                      seeds: Sequence[int]) -> list[list[list[int]]]:
        if self.torch_threads:
            use_torch_threads(self.torch_threads)
        prompts = [clip_text(self.tokenizer, p, self.max_input_length) for p in prompts]  # same tokens kept
        cfg = self.config
        start, eos, pad = int(cfg.decoder_start_token_id or 0), int(cfg.eos_token_id), int(self.tokenizer.pad_token_id)
        batched_sampling = (decoding.strategy == "sampling" and batched_sampling_supported(self.generation_config)
                            and (self.prompt_batch > 1 or decoding.sampler == "fast"))
        per_call = self.prompt_batch if (batched_sampling or decoding.strategy in ("beam", "greedy")) else 1
        parallel = batched_sampling and self._parallel()
        # the fast sampler's batches hold near-equal rows (a prompt's rows may span two); other decodings whole prompts
        if batched_sampling and decoding.sampler == "fast":
            plan = self._row_batches(len(prompts), n, per_call, self.min_batches)
        else:
            plan = [(i, j, None, j - i) for i, j in
                    self._batches(len(prompts), per_call, self.min_batches if batched_sampling else 1)]
        out: list[list[list[int]]] = [[] for _ in prompts]
        on_first = self._first_token_hook(len(plan), len(prompts), n, pad)  # the sampler calls it; beam and greedy do not
        lengths: dict[int, int] = {}  # each prompt's own tokens (the useful side of the call's work)

        def take(i: int, res: list[list[list[int]]]) -> None:
            for e, seqs in enumerate(res):
                out[i + e].extend(seqs)

        def encode(i: int, j: int) -> Any:
            enc = self.tokenizer(list(prompts[i:j]), return_tensors="pt", padding=True, truncation=True,
                                 max_length=self.max_input_length)
            lengths.update({i + e: int(m) for e, m in enumerate(enc["attention_mask"].sum(1).tolist())})
            return enc

        if parallel:
            if self._steppers is None:
                self._steppers = queue.SimpleQueue()
                first = self._stepper()
                for st in [first] + [first.fork() for _ in range(self.workers.n - 1)]:
                    self._steppers.put(st)
            futures = []
            for i, j, rows, done in plan:
                enc = encode(i, j)
                futures.append((i, done, self.workers.submit(self._sample_on_worker, enc, n, decoding,
                                                             list(seeds[i:j]), (start, eos, pad), rows, on_first(i, rows))))
            try:
                for i, done, fut in futures:
                    res, dt, work = fut.result()
                    self._count(res, done, dt, work)
                    take(i, res)
            finally:
                self.workers.shutdown()  # see Workers: idle worker threads slow torch elsewhere
            self._count_outputs(lengths, out)
            return out
        for i, j, rows, done in plan:
            part, part_seeds = list(prompts[i:j]), list(seeds[i:j])
            enc = encode(i, j)
            # the sampler counts what it computes; the other decodings' padding is not counted
            work = DecodeWork(computed=batched_sampling or (decoding.strategy == "sampling" and not self.has_model))
            t0 = time.perf_counter()
            if decoding.strategy == "diverse-beam":
                beams = max(decoding.num_beams or n, n)
                res = [[_cut(r, eos, pad) for r in beam_search(
                    self._stepper(), enc["input_ids"], enc["attention_mask"], n, decoding, start, eos, pad,
                    groups=decoding.num_beam_groups or beams, diversity_penalty=decoding.diversity_penalty)]]
            elif batched_sampling or (decoding.strategy == "sampling" and not self.has_model):
                res = sample(self._stepper(), enc["input_ids"], enc["attention_mask"], n, decoding, part_seeds,
                             start, eos, pad, compact_share=self.compact_share, on_first_token=on_first(i, rows),
                             rows=rows, work=work)
            elif not self.has_model:  # greedy / beam search over the stepper (engines without a transformers model)
                res = self._search(enc, n, decoding, start, eos, pad)
            else:
                enc = {k: v.to(self.device) for k, v in enc.items()}
                torch.manual_seed(int(part_seeds[0]))
                from transformers import LogitsProcessorList

                with torch.inference_mode():
                    seqs = self.model.generate(**enc, **decoding.hf_kwargs(n),
                                               logits_processor=LogitsProcessorList([FiniteScores()]))
                flat = [_cut(row[1:].tolist(), eos, pad) for row in seqs.detach().cpu()]
                res = [flat[j * n : (j + 1) * n] for j in range(len(part))]
            self._synchronize()
            self._count(res, done, time.perf_counter() - t0, work)
            take(i, res)
        self._count_outputs(lengths, out)
        return out

    def _search(self, enc: Any, n: int, decoding: Decoding, start: int, eos: int, pad: int) -> list[list[list[int]]]:
        """Greedy or beam search over the stepper, with the settings transformers' ``generate`` would read from the
        model's generation config (length penalty, early stopping)."""
        ids, mask = enc["input_ids"], enc["attention_mask"]
        if decoding.strategy == "greedy":
            decoding.hf_kwargs(n)  # one sequence per prompt, or the same one-line error as the torch engine
            rows = greedy_search(self._stepper(), ids, mask, decoding.max_new_tokens, start, eos,
                                 decoding.min_new_tokens)
            return [[_cut(r, eos, pad)] for r in rows]
        gc = self.generation_config  # unset fields: transformers' defaults (5.x leaves them None)
        lp = getattr(gc, "length_penalty", None)
        lp = 1.0 if lp is None else float(lp)
        early = getattr(gc, "early_stopping", None)
        early = False if early is None else early
        if early not in (True, False):
            raise ValueError(f"the model's generation config asks for early_stopping={early!r}, which the "
                             f"{self.info.engine} engine's beam search does not run; use --engine torch")
        return [[_cut(r, eos, pad) for r in beam_search(self._stepper(), ids[j:j + 1], mask[j:j + 1], n, decoding,
                                                         start, eos, pad, groups=1, length_penalty=lp,
                                                         early_stopping=bool(early))]
                for j in range(int(ids.shape[0]))]

    def _count(self, res: list[list[list[int]]], prompts: int, dt: float, work: DecodeWork | None = None) -> None:
        for rows in res:
            self.stats.new_tokens += sum(len(r) for r in rows)
            self.stats.sequences += len(rows)
        self.stats.prompts += prompts
        self.stats.seconds += dt
        self.stats.call_seconds.append(dt)
        if work is not None:
            self.stats.work.merge(work)

    def _count_outputs(self, lengths: dict[int, int], out: list[list[list[int]]]) -> None:
        """The useful side of a call's work: each prompt's own tokens, once, and the ids generated for it."""
        self.stats.work.add_outputs([lengths.get(i, 0) for i in range(len(out))], out)

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        return self.decode_ids(self.generate_ids(prompts, n, decoding, seeds))

    def decode_ids(self, ids: list[list[list[int]]]) -> list[list[str]]:
        return [[t.strip() for t in self.tokenizer.batch_decode(rows, skip_special_tokens=True)] for rows in ids]

    def count_tokens(self, texts: Iterable[str]) -> int:
        # verbose=False: texts longer than the model's limit are only counted here, not fed to it
        return sum(len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False, verbose=False)["input_ids"])
