"""The T5 decoder step that the cudagraph engine captures: weights taken from a transformers T5 model, fused, and one
step of every row -- the decoder, the output layer and the sampler's draw -- written against static buffers, so
that one CUDA graph per bucket runs every step (:mod:`.graphs`).

What the step computes is transformers' T5 decoder (``T5ForConditionalGeneration``: pre-norm RMS layer norms,
unscaled attention with a relative-position bias in the self-attention, gated or plain feed-forward, the output
layer scaled by ``d_model ** -0.5`` where the embeddings are tied), with these choices, none of which changes the
arithmetic beyond rounding:

* the self-attention's q / k / v projections are one matrix product, and so are a gated feed-forward's two input
  projections (``wi_0``, ``wi_1``); the output projections add into the residual stream in place (``addmm_``: one
  kernel for the product and the residual);
* keys and values of the self-attention live in a preallocated buffer ``[rows, 2, heads, T, d_kv]``, written at the
  step index, which is a device tensor (one graph serves many steps); a step attends to the buffer's first
  ``span`` positions (a multiple of 16 that holds the step: one graph per span, so early steps read less of the
  cache), the positions after the step masked with ``-inf`` in the bias table (computed once per length: the
  relative-position buckets of every (query, key) pair);
* the cross-attention's keys and values are computed once per *prompt* (all layers in one product) and the rows of
  a prompt's K samples attend to them together: the queries are viewed as ``[prompts, heads, K, d_kv]``. Exact, as
  T5's cross-attention has no position bias -- the same numbers as K copies of them;
* attention runs through ``scaled_dot_product_attention`` with ``scale=1`` (T5 does not scale), the bias as its
  additive mask; its softmax accumulates in fp32 at every precision;
* layer norms run as ``rms_norm`` (fp32 statistics at every precision), the output layer's logits are fp32 at every
  precision (bf16 products accumulated and returned in fp32 where torch can, else from fp32 copies of the output
  layer), and the sampler's warping and draw are fp32: :func:`~breaknli_fast.engines.sampling.warp_top` and
  :func:`~breaknli_fast.engines.sampling.fast_draw`, the very functions of the other engines' ``fast`` sampler, on
  the project's per-prompt uniform numbers, so a token equals the torch engine's wherever the two distributions
  agree.

At ``fp8`` / ``int8`` every product of the decoder's and the encoder's layers is a quantised layer (:mod:`.quant`;
``add_product`` adds its output to the residual stream instead of ``addmm_``); ``fused`` runs the step written for
fusion instead (:mod:`.fused`). A state's caches are zeroed after a step that produced a non-finite score in any
row (:meth:`T5GraphDecoder.clean`).

The encoder is transformers' T5 encoder written the same way (fused q / k / v, the bidirectional relative-position
bias table computed once per length, padding as ``-inf``), followed by every decoder layer's cross-attention
projections in one product: one more graph per bucket, run once per call.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Any, Callable

import torch
import torch.nn.functional as F

from breaknli_fast.backends.cudagraph.fused import FUSED_MODES, compiled, fused_layer, fused_logits
from breaknli_fast.backends.cudagraph.quant import QuantLinear, linear
from breaknli_fast.engines.base import Decoding
from breaknli_fast.engines.compat import t5_scales_output
from breaknli_fast.engines.sampling import fast_draw, warp_top

# activations of T5 configs (dense_act_fn) as single kernels; others run transformers' own module
_ACTS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "gelu_new": lambda x: F.gelu(x, approximate="tanh"), "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "gelu": F.gelu, "relu": F.relu, "silu": F.silu, "swish": F.silu,
}


def relative_position_bucket(relative: torch.Tensor, bidirectional: bool, num_buckets: int,
                             max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position (memory position - query position), as Mesh TensorFlow and
    transformers compute it."""
    buckets = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        buckets = buckets + (relative > 0).to(torch.long) * num_buckets
        relative = relative.abs()
    else:
        relative = -torch.clamp(relative, max=0)
    max_exact = num_buckets // 2
    large = max_exact + (torch.log(relative.float() / max_exact) / math.log(max_distance / max_exact)
                         * (num_buckets - max_exact)).to(torch.long)
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(relative < max_exact, relative, large)


def add_product(x: torch.Tensor, a: torch.Tensor, weight: Any) -> None:
    """``x += a @ weight^T`` in place: one ``addmm_`` of a plain weight (the product adds the residual), or the
    quantised layer's product added (:mod:`.quant`)."""
    if isinstance(weight, QuantLinear):
        x.add_(weight(a))
    else:
        x.addmm_(a, weight.t())


def mm_fp32_out(device: torch.device) -> bool:
    """Whether ``torch.mm(a, b, out_dtype=torch.float32)`` takes bf16 operands on ``device`` (fp32 accumulation
    and output: the bf16 output layer's logits stay fp32)."""
    try:
        a = torch.ones((2, 2), dtype=torch.bfloat16, device=device)
        return torch.mm(a, a, out_dtype=torch.float32).dtype == torch.float32
    except (TypeError, RuntimeError, NotImplementedError):
        return False


@dataclass
class DecodeState:
    """The static buffers of one bucket: ``prompts`` x ``k`` rows, encoder length ``enc_len``, ``steps`` positions
    of self-attention cache (the step function reads and writes only these)."""

    prompts: int
    k: int
    enc_len: int
    steps: int
    last: torch.Tensor  # (rows,) long: each row's last token
    t: torch.Tensor  # (1,) long: the step index
    unfinished: torch.Tensor  # (rows,) bool
    real: torch.Tensor  # (rows,) bool: rows of real prompts (the bucket's padding rows are False)
    tokens: torch.Tensor  # (rows, steps) long: the drawn tokens, pad after a row's eos
    u: torch.Tensor  # (steps, rows) fp32: the uniform numbers of each step
    bad: torch.Tensor  # (steps,) long: rows whose scores were not finite, per step
    dirty: torch.Tensor  # (1,) bool: a non-finite score in any row (the bucket's padding rows too) since cleaned
    self_kv: torch.Tensor  # (layers, rows, 2, heads, steps, d_kv)
    cross: torch.Tensor  # (layers, 2, prompts, heads, enc_len, d_kv)
    enc_bias: torch.Tensor  # (prompts, 1, 1, enc_len): 0 or -inf (padding of the prompt)
    enc_ids: torch.Tensor  # (prompts, enc_len) long: the prompts' tokens
    enc_mask: torch.Tensor  # (prompts, enc_len) long: 1 for a token, 0 for padding

    @property
    def rows(self) -> int:
        return self.prompts * self.k


class T5GraphDecoder:
    """A T5 model's decoder as fused weights on ``device`` at ``dtype`` (module notes), with its encoder kept as
    transformers' module. ``step(state, decoding, ...)`` is one decoder step of every row of a :class:`DecodeState`,
    sampling included."""

    def __init__(self, model: Any, dtype: torch.dtype, device: torch.device | str, fused: str = "off",
                 quant: str | None = None):
        if fused not in FUSED_MODES:
            raise ValueError(f"fused={fused!r}: use {', '.join(FUSED_MODES)}")
        if quant is not None and fused != "off":
            raise ValueError("the fused step runs unquantised products only (fused=off at fp8 / int8)")
        self.fused, self.quant = fused, quant
        cfg = model.config
        self.device = torch.device(device)
        self.dtype = dtype
        dec = model.decoder
        self.layers = len(dec.block)
        self.heads, self.d_kv, self.d_model = int(cfg.num_heads), int(cfg.d_kv), int(cfg.d_model)
        self.inner = self.heads * self.d_kv
        self.eps = float(cfg.layer_norm_epsilon)
        self.gated = bool(getattr(cfg, "is_gated_act", False))
        act_name = str(getattr(cfg, "dense_act_fn", "relu"))
        if act_name in _ACTS:
            self.act = _ACTS[act_name]
        else:
            from transformers.activations import ACT2FN

            self.act = ACT2FN[act_name]
        self.act_name = act_name
        self.scaled = t5_scales_output(cfg)  # T5 v1.0: the output scaled by d_model ** -0.5 (v1.1 / Flan-T5: not)
        self.num_buckets = int(cfg.relative_attention_num_buckets)
        self.max_distance = int(getattr(cfg, "relative_attention_max_distance", 128))

        def w(t: torch.Tensor) -> torch.Tensor:
            return t.detach().to(device=self.device, dtype=dtype).contiguous()

        def lin(t: torch.Tensor) -> Any:
            """A layer's product weight: at the compute dtype, or quantised (:mod:`.quant`)."""
            return QuantLinear.of(t, None, quant, dtype, self.device) if quant else w(t)

        self.ln_self, self.ln_cross, self.ln_ff = [], [], []
        self.w_qkv, self.w_o, self.w_q_cross, self.w_o_cross, self.w_in, self.w_out = [], [], [], [], [], []
        kv_cross = []
        for blk in dec.block:
            sa, ca, ff = blk.layer[0].SelfAttention, blk.layer[1].EncDecAttention, blk.layer[-1].DenseReluDense
            self.ln_self.append(w(blk.layer[0].layer_norm.weight))
            self.ln_cross.append(w(blk.layer[1].layer_norm.weight))
            self.ln_ff.append(w(blk.layer[-1].layer_norm.weight))
            self.w_qkv.append(lin(torch.cat([sa.q.weight, sa.k.weight, sa.v.weight], 0)))
            self.w_o.append(lin(sa.o.weight))
            self.w_q_cross.append(lin(ca.q.weight))
            self.w_o_cross.append(lin(ca.o.weight))
            kv_cross += [ca.k.weight, ca.v.weight]
            if self.gated:
                self.w_in.append(lin(torch.cat([ff.wi_0.weight, ff.wi_1.weight], 0)))
            else:
                self.w_in.append(lin(ff.wi.weight))
            self.w_out.append(lin(ff.wo.weight))
        self.d_ff = int(dec.block[0].layer[-1].DenseReluDense.wo.weight.shape[1])
        enc = model.get_encoder()
        self.enc_ln_att, self.enc_ln_ff, self.enc_qkv, self.enc_o, self.enc_in, self.enc_out = [], [], [], [], [], []
        for blk in enc.block:
            sa, ff = blk.layer[0].SelfAttention, blk.layer[-1].DenseReluDense
            self.enc_ln_att.append(w(blk.layer[0].layer_norm.weight))
            self.enc_ln_ff.append(w(blk.layer[-1].layer_norm.weight))
            self.enc_qkv.append(lin(torch.cat([sa.q.weight, sa.k.weight, sa.v.weight], 0)))
            self.enc_o.append(lin(sa.o.weight))
            self.enc_in.append(lin(torch.cat([ff.wi_0.weight, ff.wi_1.weight], 0)) if self.gated else lin(ff.wi.weight))
            self.enc_out.append(lin(ff.wo.weight))
        self.enc_ln_final = w(enc.final_layer_norm.weight)
        self.enc_embed = w(enc.embed_tokens.weight)
        self.enc_rel_bias = enc.block[0].layer[0].SelfAttention.relative_attention_bias.weight.detach().to(
            self.device, torch.float32)
        self.w_kv_cross = w(torch.cat(kv_cross, 0))  # (layers x 2 x inner, d_model): every layer's k and v
        self.ln_final = w(dec.final_layer_norm.weight)
        self.embed = w(dec.embed_tokens.weight)
        self.lm_head = w(model.lm_head.weight)
        self.vocab = int(self.lm_head.shape[0])
        self.rel_bias = dec.block[0].layer[0].SelfAttention.relative_attention_bias.weight.detach().to(
            self.device, torch.float32)
        # fp32 logits from bf16 / fp16 weights: mm with an fp32 output where torch has it, else an fp32 copy
        self.logits_via = "fp32"
        self.lm_head_f32: torch.Tensor | None = None
        if dtype != torch.float32:
            if mm_fp32_out(self.device):
                self.logits_via = "mm out_dtype=fp32"
            else:
                self.logits_via = "fp32 copy of the output layer"
                self.lm_head_f32 = self.lm_head.float()
        self._bias_tables: dict[int, torch.Tensor] = {}
        self._enc_tables: dict[int, torch.Tensor] = {}
        self._fused: Callable[..., torch.Tensor] | None = None
        self.layer_fn: Callable[..., Any] | None = None
        if fused != "off":
            self.layer_fn = compiled(fused_layer) if fused == "compile" else fused_layer
            self._fused = functools.partial(fused_logits, self, self.layer_fn)

    # -- per-call parts, outside the graphs ------------------------------------------------------------------------
    def self_bias(self, steps: int) -> torch.Tensor:
        """``(heads, steps, steps)`` at the compute dtype: the decoder's relative-position bias of query position i
        and key position j, ``-inf`` where j > i (a position not yet written)."""
        if steps not in self._bias_tables:
            pos = torch.arange(steps, device=self.device)
            rel = pos[None, :] - pos[:, None]
            bucket = relative_position_bucket(rel, False, self.num_buckets, self.max_distance)
            table = self.rel_bias[bucket].permute(2, 0, 1).to(self.dtype)  # (heads, q, k)
            table = table.masked_fill((rel > 0)[None], float("-inf"))
            self._bias_tables[steps] = table.contiguous()
        return self._bias_tables[steps]

    def new_state(self, prompts: int, k: int, enc_len: int, steps: int) -> DecodeState:
        dev, rows = self.device, prompts * k
        zeros = dict(device=dev)
        return DecodeState(
            prompts, k, enc_len, steps,
            last=torch.zeros(rows, dtype=torch.long, **zeros), t=torch.zeros(1, dtype=torch.long, **zeros),
            unfinished=torch.zeros(rows, dtype=torch.bool, **zeros), real=torch.zeros(rows, dtype=torch.bool, **zeros),
            tokens=torch.zeros((rows, steps), dtype=torch.long, **zeros),
            u=torch.full((steps, rows), 0.5, dtype=torch.float32, **zeros),
            bad=torch.zeros(steps, dtype=torch.long, **zeros), dirty=torch.zeros(1, dtype=torch.bool, **zeros),
            self_kv=torch.zeros((self.layers, rows, 2, self.heads, steps, self.d_kv), dtype=self.dtype, **zeros),
            cross=torch.zeros((self.layers, 2, prompts, self.heads, enc_len, self.d_kv), dtype=self.dtype, **zeros),
            enc_bias=torch.zeros((prompts, 1, 1, enc_len), dtype=self.dtype, **zeros),
            enc_ids=torch.zeros((prompts, enc_len), dtype=torch.long, **zeros),
            enc_mask=torch.ones((prompts, enc_len), dtype=torch.long, **zeros))

    def quantised(self) -> list[Any]:
        """Every product weight of the decoder and the encoder (quantised layers among them at fp8 / int8)."""
        return [w for group in (self.w_qkv, self.w_o, self.w_q_cross, self.w_o_cross, self.w_in, self.w_out,
                                self.enc_qkv, self.enc_o, self.enc_in, self.enc_out) for w in group]

    def fused_state(self) -> str:
        """What the ``fused`` option runs: ``off``, ``eager``, ``compile`` or why compiling failed."""
        failure = getattr(self.layer_fn, "failure", None)
        return f"compile failed ({failure}): the fused step runs eagerly" if failure else self.fused

    def state_bytes(self, prompts: int, k: int, enc_len: int, steps: int) -> int:
        """The bytes :meth:`new_state` allocates for these shapes (before allocating them)."""
        rows, item = prompts * k, torch.empty((), dtype=self.dtype).element_size()
        longs = rows + 1 + rows * steps + prompts * enc_len * 2  # last, t, tokens, enc_ids, enc_mask
        bools = rows * 2 + 1  # unfinished, real, dirty
        cache = self.layers * 2 * self.heads * self.d_kv * (rows * steps + prompts * enc_len)  # self_kv, cross
        return 8 * (longs + steps) + bools + 4 * steps * rows + item * (cache + prompts * enc_len)

    def clean(self, s: DecodeState) -> None:
        """Zero a state's caches and buffers in place (after a non-finite score: a NaN or inf left in a cache
        position that a later call masks would still reach its scores, ``NaN + -inf`` being NaN, and its
        attention output, ``0 x NaN`` being NaN). The addresses stay: the bucket's graphs remain valid."""
        for t in (s.self_kv, s.cross, s.enc_bias, s.tokens, s.last, s.bad):
            t.zero_()
        s.dirty.zero_()

    def enc_bias(self, length: int) -> torch.Tensor:
        """``(heads, length, length)`` at the compute dtype: the encoder's (bidirectional) relative-position bias."""
        if length not in self._enc_tables:
            pos = torch.arange(length, device=self.device)
            bucket = relative_position_bucket(pos[None, :] - pos[:, None], True, self.num_buckets, self.max_distance)
            self._enc_tables[length] = self.enc_rel_bias[bucket].permute(2, 0, 1).to(self.dtype).contiguous()
        return self._enc_tables[length]

    def encode(self, s: DecodeState) -> None:
        """The encoder on the bucket's prompts (``s.enc_ids`` / ``s.enc_mask``) and every decoder layer's
        cross-attention keys and values of its output, written into ``s`` (capturable, as :meth:`step`)."""
        p, length, h, d = s.prompts, s.enc_len, self.heads, self.d_kv
        pad = torch.zeros((), dtype=self.dtype, device=self.device).expand(p, 1, 1, length).masked_fill(
            s.enc_mask[:, None, None, :] == 0, float("-inf"))
        bias = self.enc_bias(length).unsqueeze(0) + pad  # (prompts, heads, length, length)
        x = F.embedding(s.enc_ids, self.enc_embed)
        flat = x.view(p * length, self.d_model)  # the residual stream, added to by the products in place
        for i in range(len(self.enc_qkv)):
            y = self._norm(x, self.enc_ln_att[i])
            qkv = linear(y, self.enc_qkv[i]).view(p, length, 3, h, d).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=bias, scale=1.0)
            add_product(flat, a.transpose(1, 2).reshape(p * length, self.inner), self.enc_o[i])
            y = self._norm(x, self.enc_ln_ff[i])
            g = linear(y, self.enc_in[i])
            g = self.act(g[..., :self.d_ff]) * g[..., self.d_ff:] if self.gated else self.act(g)
            add_product(flat, g.view(p * length, -1), self.enc_out[i])
        hidden = self._norm(x, self.enc_ln_final)
        kv = F.linear(hidden, self.w_kv_cross).view(p, length, self.layers, 2, self.heads, self.d_kv)
        s.cross.copy_(kv.permute(2, 3, 0, 4, 1, 5))
        s.enc_bias.copy_(pad)

    # -- the step --------------------------------------------------------------------------------------------------
    def _norm(self, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x, (self.d_model,), weight, self.eps)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 next-token logits of the decoder's last hidden states ``(rows, d_model)``."""
        return self.head(self._norm(x, self.ln_final))

    def head(self, x: torch.Tensor) -> torch.Tensor:
        """fp32 next-token logits of the final layer norm's output ``(rows, d_model)``: the output layer."""
        if self.scaled:
            x = x * (self.d_model ** -0.5)
        if self.dtype == torch.float32:
            return F.linear(x, self.lm_head)
        if self.lm_head_f32 is not None:
            return F.linear(x.float(), self.lm_head_f32)
        return torch.mm(x, self.lm_head.t(), out_dtype=torch.float32)

    def hidden(self, s: DecodeState, span: int | None = None) -> torch.Tensor:
        """The decoder's output of the step ``s.t`` for every row's last token (before the final layer norm), its
        keys and values written into the self-attention cache. ``span``: the cache positions attended (the first
        ``span``, which must hold ``s.t``; default all): a step early in the sequence reads less of the cache."""
        rows, h, d = s.rows, self.heads, self.d_kv
        span = s.steps if span is None else int(span)
        x = F.embedding(s.last, self.embed)
        bias = self.self_bias(s.steps)[:, :, :span].index_select(1, s.t).unsqueeze(0)  # (1, heads, 1, span)
        for i in range(self.layers):
            y = self._norm(x, self.ln_self[i])
            qkv = linear(y, self.w_qkv[i]).view(rows, 3, h, d)
            kv = s.self_kv[i]
            kv.index_copy_(3, s.t, qkv[:, 1:].unsqueeze(3))
            a = F.scaled_dot_product_attention(qkv[:, 0].unsqueeze(2), kv[:, 0, :, :span], kv[:, 1, :, :span],
                                               attn_mask=bias, scale=1.0)
            add_product(x, a.reshape(rows, self.inner), self.w_o[i])  # the residual added by the product itself
            y = self._norm(x, self.ln_cross[i])
            q = linear(y, self.w_q_cross[i]).view(s.prompts, s.k, h, d).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, s.cross[i, 0], s.cross[i, 1], attn_mask=s.enc_bias, scale=1.0)
            add_product(x, a.transpose(1, 2).reshape(rows, self.inner), self.w_o_cross[i])
            y = self._norm(x, self.ln_ff[i])
            g = linear(y, self.w_in[i])
            g = self.act(g[:, :self.d_ff]) * g[:, self.d_ff:] if self.gated else self.act(g)
            add_product(x, g, self.w_out[i])
        return x

    def step_logits(self, s: DecodeState, span: int | None = None) -> torch.Tensor:
        """fp32 next-token logits of the step ``s.t`` of every row, its keys and values written into the cache: the
        plain step (:meth:`hidden`) or, with ``fused``, the step written for fusion (:mod:`.fused`)."""
        span = s.steps if span is None else int(span)
        if self._fused is None:
            return self.logits(self.hidden(s, span))
        return self._fused(s.last, s.t, s.self_kv, s.cross, s.enc_bias, self.self_bias(s.steps), span)

    def step(self, s: DecodeState, decoding: Decoding, greedy: bool, eos_id: int, pad_id: int,
             span: int | None = None) -> None:
        """One step of every row: logits, the draw (or the most likely token), the bookkeeping of finished rows;
        all on the device, all in ``s`` (capturable: no host synchronisation, no shape that depends on data).
        ``span``: as :meth:`hidden`'s."""
        logits = self.step_logits(s, span)
        if decoding.min_new_tokens:  # no eos before min_new_tokens (the sampler's own rule)
            col = logits[:, eos_id]
            logits[:, eos_id] = torch.where(s.t < decoding.min_new_tokens, float("-inf"), col)
        if greedy:
            nxt = logits.argmax(-1)
            bad = ~torch.isfinite(logits.amax(-1))
        else:
            k = decoding.top_k if decoding.top_k and decoding.top_k < self.vocab else self.vocab
            vals, idx = torch.topk(logits, k, dim=-1)
            idx, cdf = warp_top(vals, idx, decoding)
            totals = cdf[:, -1]
            bad = ~(torch.isfinite(totals) & (totals > 0))
            nxt = fast_draw(idx, cdf, s.u.index_select(0, s.t).squeeze(0))
        s.bad.index_add_(0, s.t, (bad & s.real).sum().view(1))
        s.dirty.logical_or_(bad.any().view(1))  # any row, padding included: its cache is cleaned after the call
        nxt = torch.where(s.unfinished, nxt, pad_id)
        s.tokens.index_copy_(1, s.t, nxt.unsqueeze(1))
        s.last.copy_(nxt)
        s.unfinished.logical_and_(nxt != eos_id)
        s.t.add_(1)
