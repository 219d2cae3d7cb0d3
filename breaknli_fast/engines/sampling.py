"""Seeded sampling for seq2seq generators, written once for every engine.

An engine supplies a :class:`Stepper` -- encode a batch of prompts once, then return the
next-token logits of every live row per step with a KV cache, and drop rows on request --
and :func:`sample` does the rest: the top-k / top-p / temperature warping, one random
generator per prompt (so a prompt's candidates never depend on its batch neighbours, a
resumed run gets the same candidates, and two engines given the same logits draw the same
tokens), stopping at eos, and *compaction*: rows that have finished are dropped from the
model batch (and their KV cache) instead of being fed padding until the longest row ends.

Two samplers (``Decoding.sampler``):

* ``fast`` (default): top-k by ``torch.topk`` (or by the stepper's own ``step_topk``) and
  top-p over those k values, then one uniform number per row (numpy PCG64 seeded per prompt)
  drawn through the inverse CDF. Same distribution as transformers' sampling, O(k) work per
  row after the top-k.
  The uniform numbers of a batch are drawn from those generators before its first step (a prompt
  draws ``n`` numbers per step while any of its rows is unfinished, so drawing ``max_new_tokens x n``
  up front gives the same numbers) and the whole step -- top-k, warping, draw, eos bookkeeping -- runs
  on the logits' device: on CUDA the host waits for the device only every :data:`CUDA_SYNC_EVERY`
  steps (to stop when every row has finished, to drop finished rows, to check the scores were finite).
* ``transformers``: exactly what ``model.generate(do_sample=True)`` gives for one prompt
  under ``torch.manual_seed(seed)`` (transformers' own warpers, one ``multinomial`` draw over
  the prompt's ``n`` rows per step; finished rows get a placeholder distribution, which does
  not change the draws of the others). Slower: the draw consumes n x vocab exponentials and
  top-p sorts the whole vocabulary every step.
"""

from __future__ import annotations

from typing import Any, Callable, Protocol, Sequence

import numpy as np
import torch

from breaknli_fast.engines.base import Decoding, DecodeWork, NonFiniteError

# drop finished rows from the model batch once they are at least this share of it
COMPACT_SHARE = 0.25
# on CUDA the fast sampler looks at the device's state (all finished? rows to drop? non-finite scores?) every this
# many steps, not after each one: every look waits for the GPU to finish the queued work
CUDA_SYNC_EVERY = 8
# text-to-text families whose decoder layers keep the cross-attention projections at
# ``decoder.block[i].layer[1].EncDecAttention.{k,v}`` (TorchStepper computes them once per prompt)
T5_FAMILIES = ("t5", "mt5", "umt5")


class Stepper(Protocol):
    """One engine's incremental decoder over a batch of ``rows = prompts x n`` sequences."""

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int) -> None:
        """Encode the prompts (``(b, L)`` CPU tensors) once; every prompt gets ``n`` rows."""

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        """Feed one token per live row (``(r,)`` long, CPU); return float logits ``(r, vocab)``."""

    def keep(self, positions: torch.Tensor) -> None:
        """Keep only these rows (positions in the current batch, ascending) in the cache."""

    # Optional (the ort engine's CPU stepper): a stepper whose ``supports_topk`` is true after
    # ``start`` and that has ``vocab_size`` also has ``step_topk(tokens, k) -> (values, ids)``, the
    # ``k`` largest logits per row in descending order; the ``fast`` sampler with top-k then calls it
    # instead of ``step`` for the whole batch (the first call after ``start`` decides).


class TorchStepper:
    """Stepper over any transformers seq2seq model object (the torch engine).

    A torch T5-family model gets its cross-attention keys and values computed once per *prompt* (the encoder
    output projected by every decoder layer's ``EncDecAttention.k`` / ``.v``) and handed to its ``n`` rows
    through a prefilled cache, instead of each row projecting its own copy of the encoder output at the first
    step; the attention itself is transformers' code, unchanged. Other models get the encoder
    output repeated per row, as transformers' ``generate`` does."""

    def __init__(self, model: Any):
        self.model = model
        self.device = getattr(model, "device", torch.device("cpu"))
        self.shared_cross = _t5_cross_layers(model) is not None

    def start(self, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int) -> None:
        from transformers.modeling_outputs import BaseModelOutput

        ids, mask = input_ids.to(self.device), attention_mask.to(self.device)
        with torch.inference_mode():
            hidden = self.model.get_encoder()(input_ids=ids, attention_mask=mask)[0]
            self._wrap = BaseModelOutput
            self.mask = mask.repeat_interleave(n, dim=0)
            self.past: Any = None
            if self.shared_cross:
                rows = torch.arange(ids.shape[0], device=self.device).repeat_interleave(n)
                self.past = _prefilled_cache(self.model, hidden, rows)
                self._hidden_shape = hidden.shape[1:]
                # the layers read their keys / values from the cache; the encoder output only gives the mask its
                # shape, so a zero-stride view stands in for the per-row copies
                self.hidden = self._stand_in(len(rows))
            else:
                self.hidden = hidden.repeat_interleave(n, dim=0)

    def _stand_in(self, rows: int) -> torch.Tensor:
        return torch.zeros((1, 1, 1), dtype=self.model.dtype, device=self.device).expand(rows, *self._hidden_shape)

    def step(self, tokens: torch.Tensor) -> torch.Tensor:
        with torch.inference_mode():
            out = self.model(encoder_outputs=self._wrap(last_hidden_state=self.hidden), attention_mask=self.mask,
                             decoder_input_ids=tokens.to(self.device)[:, None], past_key_values=self.past, use_cache=True)
        self.past = out.past_key_values
        return out.logits[:, -1, :].to(dtype=torch.float32)

    def fork(self) -> "TorchStepper":
        """Another stepper over the same model (its own batch state), for a worker thread."""
        return TorchStepper(self.model)

    def keep(self, positions: torch.Tensor) -> None:
        pos = positions.to(self.device)
        self.hidden = (self._stand_in(len(pos)) if self.shared_cross else self.hidden.index_select(0, pos))
        self.mask = self.mask.index_select(0, pos)
        self.past = select_cache(self.past, pos)


def _t5_cross_layers(model: Any) -> list[Any] | None:
    """The cross-attention modules of a torch T5-family model's decoder layers (``None`` for anything else)."""
    if not isinstance(model, torch.nn.Module) or getattr(getattr(model, "config", None), "model_type", None) not in T5_FAMILIES:
        return None
    try:
        return [blk.layer[1].EncDecAttention for blk in model.decoder.block]
    except AttributeError:
        return None


def _prefilled_cache(model: Any, hidden: torch.Tensor, rows: torch.Tensor) -> Any:
    """A transformers encoder-decoder cache whose cross-attention part holds every decoder layer's keys and values
    of the encoder output ``hidden`` ``(prompts, length, d_model)``, projected once per prompt and given to the
    rows ``rows`` (the prompt of each row), marked as computed so that the layers reuse them; the self-attention
    part is empty. The projections are the layer's own ``k`` / ``v`` modules with transformers' reshaping."""
    from transformers.cache_utils import DynamicCache, EncoderDecoderCache

    cross = DynamicCache()
    b, length = hidden.shape[:2]
    for i, att in enumerate(_t5_cross_layers(model) or []):
        d_kv = att.key_value_proj_dim
        k = att.k(hidden).view(b, length, -1, d_kv).transpose(1, 2).index_select(0, rows)
        v = att.v(hidden).view(b, length, -1, d_kv).transpose(1, 2).index_select(0, rows)
        cross.update(k, v, i)
    cache = EncoderDecoderCache(DynamicCache(), cross)
    for i in range(len(_t5_cross_layers(model) or [])):
        cache.is_updated[i] = True
    return cache


def select_cache(past: Any, pos: torch.Tensor) -> Any:
    """Rows ``pos`` of a transformers cache object or a legacy tuple-of-tuples cache."""
    if past is None:
        return None
    if hasattr(past, "reorder_cache"):
        past.reorder_cache(pos)
        return past
    return tuple(tuple(t.index_select(0, pos.to(t.device)) for t in layer) for layer in past)


def fast_candidates(scores: torch.Tensor, decoding: Decoding) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids ``(r, k)`` (descending score) and their cumulative kept probability ``(r, k)``
    after temperature, top-k and top-p -- the semantics of transformers' warpers: top-p removes
    the tokens whose ascending cumulative probability is at most ``1 - top_p``, keeping at
    least the most likely one."""
    vocab = scores.shape[-1]
    k = decoding.top_k if decoding.top_k and decoding.top_k < vocab else vocab
    vals, idx = torch.topk(scores, k, dim=-1)
    return warp_top(vals, idx, decoding)


def warp_top(vals: torch.Tensor, idx: torch.Tensor, decoding: Decoding) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`fast_candidates` from the top-k logits ``vals`` (descending) and their ids: temperature
    (applied after the top-k: dividing by T > 0 changes no order, and the kept values are the same
    numbers), softmax, top-p."""
    if decoding.temperature is not None and decoding.temperature != 1.0:
        vals = vals / decoding.temperature
    probs = torch.softmax(vals, dim=-1)
    if decoding.top_p is not None and decoding.top_p < 1.0:
        ascending = probs.flip(-1).cumsum(-1)
        remove = (ascending <= 1.0 - decoding.top_p).flip(-1)
        remove.select(1, 0).fill_(False)  # no Python-scalar tensor: the cudagraph engine captures this step
        probs = probs.masked_fill(remove, 0.0)
    return idx, probs.cumsum(-1)


def fast_draw(idx: torch.Tensor, cdf: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draw: for each row the first candidate whose cumulative probability exceeds
    ``u * total``."""
    target = (u.to(cdf.device, cdf.dtype) * cdf[:, -1]).unsqueeze(1)
    j = torch.searchsorted(cdf, target, right=True).clamp_(max=cdf.shape[1] - 1)
    return idx.gather(1, j).squeeze(1)


def _refuse(bad: torch.Tensor, step: int) -> None:
    """Raise :class:`NonFiniteError` when any of the rows flagged in ``bad`` ``(rows,)`` is set."""
    if bool(bad.any()):
        raise NonFiniteError(f"next-token scores of {int(bad.sum())} of {bad.shape[0]} sequences at decoding "
                             f"step {step + 1}")


def _check_finite(totals: torch.Tensor, step: int) -> None:
    """Each row's kept probability mass must be a positive number: NaN or infinite logits (an fp16 overflow,
    say) make it NaN, and a draw over them would pick an arbitrary token without a word."""
    _refuse(~(torch.isfinite(totals) & (totals > 0)), step)


def check_scores(scores: torch.Tensor, step: int) -> None:
    """Next-token scores ``(rows, vocab)`` (logits or log-probabilities) of the decoders that do not sample
    here (transformers' beam and greedy search, diverse beam): a NaN or +inf anywhere in a row, or a row of
    -inf only, is refused as in :func:`sample`. One pass: a row's maximum is NaN, +inf or -inf exactly then."""
    _refuse(~torch.isfinite(scores.amax(-1)), step)


class FiniteScores:
    """A logits processor for transformers' ``generate`` that applies :func:`check_scores` at every step."""

    def __init__(self) -> None:
        self.step = 0

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        check_scores(scores, self.step)
        self.step += 1
        return scores


def _hf_processors(decoding: Decoding, eos_id: int, device: Any) -> Any:
    from transformers.generation.logits_process import (LogitsProcessorList, MinNewTokensLengthLogitsProcessor,
                                                         TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper)

    procs = LogitsProcessorList()
    if decoding.min_new_tokens:
        procs.append(MinNewTokensLengthLogitsProcessor(1, decoding.min_new_tokens, eos_id, device=device))
    if decoding.temperature is not None and decoding.temperature != 1.0:
        procs.append(TemperatureLogitsWarper(decoding.temperature))
    if decoding.top_k:
        procs.append(TopKLogitsWarper(top_k=decoding.top_k, min_tokens_to_keep=1))
    if decoding.top_p is not None and decoding.top_p < 1.0:
        procs.append(TopPLogitsWarper(top_p=decoding.top_p, min_tokens_to_keep=1))
    return procs


def sample(stepper: Stepper, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int, decoding: Decoding,
           seeds: Sequence[int], start_id: int, eos_id: int, pad_id: int,
           compact_share: float | None = COMPACT_SHARE, sync_every: int | None = None,
           on_first_token: Callable[[list[int]], None] | None = None,
           rows: Sequence[int] | None = None, work: DecodeWork | None = None) -> list[list[list[int]]]:
    """``n`` sampled sequences per prompt (token ids after the decoder start token, up to and
    including eos, without padding), one random generator per prompt seeded with ``seeds[i]``.

    ``rows`` (``fast`` sampler): only these of the ``prompts x n`` rows (ascending; row ``e*n + j`` is prompt
    ``e``'s ``j``-th sequence), each with the tokens it gets in the whole batch (its uniform numbers are the same
    column of its prompt's draws); then each prompt's list holds its rows among them. A generator cuts a call
    into batches of near-equal rows this way, a prompt's rows split over two batches where needed.

    ``compact_share``: drop finished rows from the model batch once they make up this share of
    it (``None``: never, finished rows are fed padding as transformers does). ``sync_every``
    (``fast`` sampler): look at the device's state every this many steps (default: every step on
    the CPU, :data:`CUDA_SYNC_EVERY` on CUDA); the tokens do not depend on it. ``on_first_token``:
    called once, when the first token of every row has been drawn (on CUDA after the device has
    finished it), with those tokens, one per row of the ``prompts x n`` layout (``pad_id`` for a row
    outside ``rows``): a latency benchmark's time to first token, and the token it reports. ``work``: the
    encoder's padded prompts and every decoder step's rows are added to it
    (:class:`~breaknli_fast.engines.base.DecodeWork`, the computed side)."""
    sampler = decoding.sampler
    if sampler not in Decoding.SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose one of {', '.join(Decoding.SAMPLERS)}")
    if sampler == "fast":
        return _sample_fast(stepper, input_ids, attention_mask, n, decoding, seeds, start_id, eos_id, pad_id,
                            compact_share, sync_every, on_first_token, rows, work)
    if rows is not None:
        raise ValueError("a subset of rows is sampled by the fast sampler only")
    b, width = (int(x) for x in input_ids.shape)
    rows = b * n
    stepper.start(input_ids, attention_mask, n)
    if work is not None:
        work.add_encoder(b, width)
    active = torch.arange(rows)  # global row ids of the stepper's batch, ascending
    unfinished = torch.ones(rows, dtype=torch.bool)
    last = torch.full((rows,), start_id, dtype=torch.long)
    out: list[list[int]] = [[] for _ in range(rows)]
    # generators on the logits' device, as torch.manual_seed seeds transformers' draws there
    procs, gens = None, []
    for t in range(decoding.max_new_tokens):
        logits = stepper.step(last[active])
        if work is not None:
            work.add_step(int(active.shape[0]), t, width, b)
        act_unfinished = unfinished[active]
        live = [e for e in range(b) if bool(unfinished[e * n : (e + 1) * n].any())]
        if procs is None:
            procs = _hf_processors(decoding, eos_id, logits.device)
            gens = [torch.Generator(device=logits.device).manual_seed(int(sd)) for sd in seeds]
        length_view = torch.zeros((logits.shape[0], t + 1), dtype=torch.long, device=logits.device)
        probs = torch.softmax(procs(length_view, logits), dim=-1)
        _check_finite(probs.sum(-1), t)
        nxt = torch.full((logits.shape[0],), pad_id, dtype=torch.long)
        pos_of = {int(g): i for i, g in enumerate(active.tolist())}
        for e in live:
            here = [pos_of.get(r) for r in range(e * n, (e + 1) * n)]
            if all(p is not None for p in here):
                block = probs[here[0] : here[0] + n]
            else:  # compacted rows: a placeholder distribution keeps the generator's stream
                block = torch.zeros((n, probs.shape[1]), dtype=probs.dtype, device=probs.device)
                block[:, pad_id] = 1.0
                for j, p in enumerate(here):
                    if p is not None:
                        block[j] = probs[p]
            draw = torch.multinomial(block, num_samples=1, generator=gens[e]).squeeze(1).cpu()
            for j, p in enumerate(here):
                if p is not None:
                    nxt[p] = draw[j]
        nxt = torch.where(act_unfinished, nxt, torch.full_like(nxt, pad_id))
        for g, tok, live_row in zip(active.tolist(), nxt.tolist(), act_unfinished.tolist()):
            if live_row and tok != pad_id:
                out[g].append(tok)
        last[active] = nxt
        unfinished[active] = act_unfinished & (nxt != eos_id)
        if t == 0 and on_first_token is not None:
            on_first_token([row[0] if row else pad_id for row in out])
        if not unfinished.any():
            break
        if compact_share is not None:
            still = unfinished[active]
            dead = int((~still).sum())
            if dead and dead >= compact_share * len(active):
                keep = torch.nonzero(still).squeeze(1)
                stepper.keep(keep)
                active = active[keep]
    return [out[e * n : (e + 1) * n] for e in range(b)]


def uniforms(seeds: Sequence[int], steps: int, n: int) -> np.ndarray:
    """The ``fast`` sampler's uniform numbers ``(steps, prompts x n)``: prompt ``e``'s generator (numpy PCG64
    seeded with ``seeds[e]``) gives ``n`` numbers per step, for its rows ``e*n .. e*n+n-1``. A prompt draws them
    while any of its rows is unfinished and never again after, so drawing every step's numbers up front gives
    the same numbers to every step where they are used."""
    out = np.empty((steps, len(seeds) * n))
    for e, sd in enumerate(seeds):
        out[:, e * n:(e + 1) * n] = np.random.Generator(np.random.PCG64(int(sd) & (2**63 - 1))).random((steps, n))
    return out


def _sample_fast(stepper: Stepper, input_ids: torch.Tensor, attention_mask: torch.Tensor, n: int, decoding: Decoding,
                 seeds: Sequence[int], start_id: int, eos_id: int, pad_id: int, compact_share: float | None,
                 sync_every: int | None, on_first_token: Callable[[list[int]], None] | None = None,
                 subset: Sequence[int] | None = None, work: DecodeWork | None = None) -> list[list[list[int]]]:
    """The ``fast`` sampler (module notes): every tensor of the loop lives on the stepper's device. ``subset``:
    :func:`sample`'s ``rows``."""
    b, width_in = (int(x) for x in input_ids.shape)
    rows, steps = b * n, decoding.max_new_tokens
    dev = torch.device(getattr(stepper, "device", None) or "cpu")
    if sync_every is None:
        sync_every = CUDA_SYNC_EVERY if dev.type == "cuda" else 1
    stepper.start(input_ids, attention_mask, n)
    if work is not None:
        work.add_encoder(b, width_in)
    u = torch.from_numpy(uniforms(seeds, steps, n))
    u = u.pin_memory().to(dev, non_blocking=True) if dev.type == "cuda" else u  # no wait for the copy either
    active = torch.arange(rows, device=dev)  # global row ids of the stepper's batch, ascending
    unfinished = torch.ones(rows, dtype=torch.bool, device=dev)
    if subset is not None:
        keep = torch.as_tensor(list(subset), dtype=torch.long)
        if keep.numel() == 0 or bool((keep[1:] <= keep[:-1]).any()) or int(keep[0]) < 0 or int(keep[-1]) >= rows:
            raise ValueError(f"rows must be ascending row numbers below {rows}")
        if keep.numel() < rows:  # the other rows leave the batch before the first step
            stepper.keep(keep)
            active = keep.to(dev)
            unfinished = torch.zeros(rows, dtype=torch.bool, device=dev)
            unfinished[active] = True
    n_active = int(active.shape[0])
    last = torch.full((rows,), start_id, dtype=torch.long, device=dev)
    tokens = torch.full((rows, steps), pad_id, dtype=torch.long, device=dev)  # pad where a row emitted nothing
    bad = torch.zeros(steps, dtype=torch.long, device=dev)  # rows with non-finite scores, per step
    width = [0] * steps  # rows in the model batch, per step
    # the stepper's own top-k (``step_topk``), when it has one: only (rows, k) values leave the model
    k = decoding.top_k
    k_eos = k + 1 if decoding.min_new_tokens else k  # one more, to drop eos while it is not allowed yet
    use_topk = (k > 0 and getattr(stepper, "supports_topk", False) and k_eos <= getattr(stepper, "vocab_size", 0))
    checked = 0  # steps whose scores have been checked
    for t in range(steps):
        no_eos = bool(decoding.min_new_tokens) and t < decoding.min_new_tokens
        if use_topk:
            vals, idx = stepper.step_topk(last[active], k_eos if no_eos else k)
            if no_eos:  # the top k without eos: drop eos where it is among the k + 1, else the last
                drop = idx == eos_id
                drop[~drop.any(1), -1] = True
                vals, idx = vals[~drop].view(-1, k), idx[~drop].view(-1, k)
            idx, cdf = warp_top(vals.to(dev), idx.to(dev), decoding)
        else:
            logits = stepper.step(last[active]).to(dev)
            if no_eos:
                logits = logits.clone()
                logits[:, eos_id] = float("-inf")
            idx, cdf = fast_candidates(logits, decoding)
        totals = cdf[:, -1]
        bad[t] = (~(torch.isfinite(totals) & (totals > 0))).sum()
        width[t] = n_active
        if work is not None:
            work.add_step(n_active, t, width_in, b)
        act_unfinished = unfinished[active]
        nxt = torch.where(act_unfinished, fast_draw(idx, cdf, u[t].index_select(0, active)), pad_id)
        tokens[active, t] = nxt
        if t == 0 and on_first_token is not None:
            if dev.type == "cuda":
                torch.cuda.synchronize(dev)
            on_first_token(tokens[:, 0].tolist())
        last[active] = nxt
        unfinished[active] = act_unfinished & (nxt != eos_id)
        if (t + 1) % sync_every and t + 1 < steps:
            continue
        _check_steps(bad, width, checked, t + 1)
        checked = t + 1
        if not bool(unfinished.any()):
            break
        if compact_share is not None:
            still = unfinished[active]
            dead = n_active - int(still.sum())
            if dead and dead >= compact_share * n_active:
                keep = torch.nonzero(still).squeeze(1)
                stepper.keep(keep)
                active = active[keep]
                n_active = int(keep.shape[0])
    _check_steps(bad, width, checked, steps)
    flat = [[tok for tok in row if tok != pad_id] for row in tokens.cpu().tolist()]
    if subset is not None:
        return [[flat[r] for r in subset if r // n == e] for e in range(b)]
    return [flat[e * n : (e + 1) * n] for e in range(b)]


def _check_steps(bad: torch.Tensor, width: list[int], start: int, end: int) -> None:
    """Raise :class:`NonFiniteError` for the first of steps ``start .. end-1`` where a row's scores were not finite
    (as :func:`_check_finite` does at each step of the ``transformers`` sampler)."""
    if end <= start:
        return
    counts = bad[start:end].tolist()
    for t, c in enumerate(counts, start):
        if c:
            raise NonFiniteError(f"next-token scores of {c} of {width[t]} sequences at decoding step {t + 1}")
