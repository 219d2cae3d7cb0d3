"""The T5 decoder step written for fusion (option ``fused``): the same arithmetic as :meth:`.t5.T5GraphDecoder.hidden`
in fewer, larger pieces, so that a compiler (``torch.compile``'s inductor: Triton kernels on CUDA, C++ loops on the
CPU) makes few kernels of a layer.

* **Residual and norm in one piece**: each sub-layer's output product is added to the residual stream and the next
  sub-layer's RMS norm is taken in the same expression (:func:`add_rms_norm`: the add, the fp32 statistics, the
  scaling, the cast to the compute dtype and the norm's weight), so that the product's output is read once;
  transformers' ``T5LayerNorm`` order (fp32 ``x * rsqrt(mean(x^2) + eps)``, cast, then the weight).
* **Gated activation in one piece**: ``act(g[:, :d_ff]) * g[:, d_ff:]`` on the fused input product's output.
* **Decode attention over the preallocated cache** (:func:`decode_attention`): one query per row against the
  cache's first ``span`` positions, written as reductions (the query times each key, summed over ``d_kv``; the
  probabilities times the values, summed over the positions) in fp32 at every precision, so a compiler makes them
  memory-bound kernels that read the cache once instead of a general attention kernel built for long queries.
  Positions after the step are *selected out* (``torch.where``), not added to ``-inf``: a stale non-finite key in
  them cannot reach the scores (``NaN + -inf`` is NaN; ``where`` does not propagate the unselected value). A stale
  non-finite *value* would still reach the output through ``0 x NaN``: the engine cleans a state's caches after
  any non-finite score (:meth:`.t5.T5GraphDecoder.clean`), on this path as on the plain one.
* **Cross-attention** the same way, the K queries of a prompt against its encoder keys (the shared keys and
  values of :mod:`.t5`), the prompt's padding selected out.

``fused=eager`` runs these functions as plain torch operations (the CPU reference of the compiled path, and its
numerics: equal to the plain step's but for the order of fp32 sums); ``fused=compile`` runs each decoder layer
(:func:`fused_layer`, every weight an argument, so one compilation serves every layer) through ``torch.compile``
with dynamic shapes: one compilation serves every bucket and span but for four variants (the span equal to the
cache's length or not; one sample per prompt or more), captured inside the bucket's CUDA graph like the plain
step. :func:`count_launches` counts the kernels a compiled layer launches from the code the compiler wrote (the
CPU's stand-in for the profiler's count on a GPU; :func:`step_kernels`).
"""

from __future__ import annotations

import re
import types
from typing import Any, Callable, Sequence

import torch

FUSED_MODES = ("off", "eager", "compile")


def add_rms_norm(x: torch.Tensor, delta: torch.Tensor | None, weight: torch.Tensor,
                 eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x + delta, rms_norm(x + delta) * weight)``: the residual stream after a sub-layer and the next sub-layer's
    normed input, the statistics in fp32 and the output in ``weight``'s dtype (``delta`` None: the norm alone)."""
    if delta is not None:
        x = x + delta
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return x, weight * y.to(weight.dtype)


def gated(g: torch.Tensor, d_ff: int, act: Callable[[torch.Tensor], torch.Tensor], is_gated: bool) -> torch.Tensor:
    """The feed-forward's activation on its input product's output: ``act(g[:, :d_ff]) * g[:, d_ff:]`` (gated) or
    ``act(g)``."""
    return act(g[..., :d_ff]) * g[..., d_ff:] if is_gated else act(g)


def decode_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, bias: torch.Tensor | None,
                     valid: torch.Tensor) -> torch.Tensor:
    """One query per row against cached keys and values, unscaled (T5): ``q`` ``(..., heads, Q, d)``, ``k`` / ``v``
    ``(..., heads, S, d)``, ``bias`` broadcastable to the scores ``(..., heads, Q, S)`` or None, ``valid`` (bool,
    broadcastable likewise) the positions that may be attended. Scores, softmax and the weighted sum in fp32; the
    output in ``q``'s dtype ``(..., heads, Q, d)``. A row without a valid position gives NaN (never here: position
    0 of the cache and a prompt's first token are always valid)."""
    scores = (q.float().unsqueeze(-2) * k.float().unsqueeze(-3)).sum(-1)  # (..., heads, Q, S)
    if bias is not None:
        scores = scores + bias.float()
    scores = torch.where(valid, scores, float("-inf"))
    p = torch.softmax(scores, dim=-1)
    out = (p.unsqueeze(-1) * v.float().unsqueeze(-3)).sum(-2)  # (..., heads, Q, d)
    return out.to(q.dtype)


def fused_layer(x: torch.Tensor, y: torch.Tensor, t: torch.Tensor, kv: torch.Tensor, cross_k: torch.Tensor,
                cross_v: torch.Tensor, enc_valid: torch.Tensor, bias: torch.Tensor, valid: torch.Tensor,
                w_qkv: torch.Tensor, w_o: torch.Tensor, ln_cross: torch.Tensor, w_q_cross: torch.Tensor,
                w_o_cross: torch.Tensor, ln_ff: torch.Tensor, w_in: torch.Tensor, w_out: torch.Tensor,
                ln_next: torch.Tensor, eps: float, gated_act: bool, act: Callable[[torch.Tensor], torch.Tensor],
                span: int) -> tuple[torch.Tensor, torch.Tensor]:
    """One decoder layer of every row (module notes): ``x`` the residual stream ``(rows, d_model)``, ``y`` its
    self-attention norm's output; the layer's keys and values written into ``kv`` ``(rows, 2, heads, steps, d_kv)``
    at ``t``. Returns the residual stream after the layer and the next norm's output (``ln_next``: the next layer's
    self-attention norm, or the final norm). Every tensor comes in as an argument, so one compilation serves every
    layer."""
    rows, heads, d = x.shape[0], kv.shape[2], kv.shape[4]
    prompts = cross_k.shape[0]
    qkv = torch.nn.functional.linear(y, w_qkv).view(rows, 3, heads, d)
    kv.index_copy_(3, t, qkv[:, 1:].unsqueeze(3))
    a = decode_attention(qkv[:, 0].unsqueeze(2), kv[:, 0, :, :span], kv[:, 1, :, :span], bias, valid)
    x, y = add_rms_norm(x, torch.nn.functional.linear(a.reshape(rows, heads * d), w_o), ln_cross, eps)
    q = torch.nn.functional.linear(y, w_q_cross).view(prompts, rows // prompts, heads, d).transpose(1, 2)
    a = decode_attention(q, cross_k, cross_v, None, enc_valid)  # (prompts, heads, K, d)
    x, y = add_rms_norm(x, torch.nn.functional.linear(a.transpose(1, 2).reshape(rows, heads * d), w_o_cross), ln_ff,
                        eps)
    g = gated(torch.nn.functional.linear(y, w_in), w_out.shape[1], act, gated_act)
    return add_rms_norm(x, torch.nn.functional.linear(g, w_out), ln_next, eps)


def fused_logits(dec: Any, layer: Callable[..., tuple[torch.Tensor, torch.Tensor]], last: torch.Tensor,
                 t: torch.Tensor, self_kv: torch.Tensor, cross: torch.Tensor, enc_bias: torch.Tensor,
                 table: torch.Tensor, span: int) -> torch.Tensor:
    """fp32 next-token logits of one decoder step of every row (the keys and values of the step written into
    ``self_kv`` at ``t``): :meth:`.t5.T5GraphDecoder.hidden` and ``logits`` written for fusion (module notes).
    ``dec``: the :class:`.t5.T5GraphDecoder` (its fused weights); ``layer``: :func:`fused_layer` or its compiled
    form; ``enc_bias`` ``(prompts, 1, 1, enc_len)``: 0 at the prompts' real tokens, ``-inf`` at their padding;
    ``table``: the decoder's position bias ``(heads, steps, steps)`` (``self_bias``)."""
    bias = table[:, :, :span].index_select(1, t).unsqueeze(0)  # (1, heads, 1, span)
    valid = (torch.arange(span, device=last.device) <= t).view(1, 1, 1, span)
    enc_valid = enc_bias == 0
    x, y = add_rms_norm(torch.nn.functional.embedding(last, dec.embed), None, dec.ln_self[0], dec.eps)
    for i in range(dec.layers):
        nxt = dec.ln_self[i + 1] if i + 1 < dec.layers else dec.ln_final
        x, y = layer(x, y, t, self_kv[i], cross[i, 0], cross[i, 1], enc_valid, bias, valid, dec.w_qkv[i], dec.w_o[i],
                     dec.ln_cross[i], dec.w_q_cross[i], dec.w_o_cross[i], dec.ln_ff[i], dec.w_in[i], dec.w_out[i], nxt,
                     dec.eps, dec.gated, dec.act, span)
    return dec.head(y)


RECOMPILE_LIMIT = 64  # compilations of one function torch keeps (its default, 8, is shared by every engine's layers)


class Compiled:
    """``fn`` through ``torch.compile`` (inductor, dynamic shapes, no "duck" sizing: two sizes that happen to be
    equal in one bucket are not assumed equal, which would compile again for the next bucket). Where compiling
    fails, ``fn`` runs as written from then on and :attr:`failure` says why (one line; the engine's details)."""

    def __init__(self, fn: Callable[..., Any]) -> None:
        import torch._dynamo

        limit = getattr(torch._dynamo.config, "recompile_limit", None)
        name = "recompile_limit" if limit is not None else "cache_size_limit"
        if int(getattr(torch._dynamo.config, name)) < RECOMPILE_LIMIT:
            setattr(torch._dynamo.config, name, RECOMPILE_LIMIT)
        self.fn = fn
        self.inner = torch.compile(fn, dynamic=True, fullgraph=True)
        self.failure: str | None = None
        self.calls = 0

    def __call__(self, *args: Any) -> Any:
        if self.failure is not None:
            return self.fn(*args)
        from torch.fx.experimental import _config as fx_config

        try:
            with fx_config.patch(use_duck_shape=False):
                out = self.inner(*args)
        except Exception as e:  # noqa: BLE001 - a compiler's failure: the function as written instead
            if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
                raise  # inside a CUDA graph's capture: the graph runner records it
            self.failure = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[0][:200]}"
            return self.fn(*args)
        self.calls += 1
        return out


def compiled(fn: Callable[..., Any]) -> Compiled:
    """:class:`Compiled` of ``fn``."""
    return Compiled(fn)


_LAUNCH = re.compile(r"^\s*(?:\w+\s*=\s*)?((?:cpp_fused|triton)\w*|extern_kernels\.\w+|aten\.\w+|torch\.ops\.\w+\.\w+)"
                     r"(?:\.\w+)?\(")


def _call_bodies(code: str) -> list[str]:
    """The bodies of the ``call`` functions of a compiler's output code (the lines indented under them)."""
    lines, out = code.splitlines(), []
    for i, line in enumerate(lines):
        m = re.match(r"^(\s*)def call\((?:self, )?args\):", line)
        if not m:
            continue
        indent, body = len(m.group(1)), []
        for nxt in lines[i + 1:]:
            if nxt.strip() and len(nxt) - len(nxt.lstrip()) <= indent:
                break
            body.append(nxt)
        out.append("\n".join(body))
    return out


def count_launches(codes: Sequence[str]) -> dict[str, Any]:
    """Kernels a compiled function launches per call, read from the code the compiler wrote (its ``call``
    functions): the kernels it generated (``cpp_fused_*`` on the CPU, ``triton_*`` on CUDA) and the library
    kernels it calls (``extern_kernels.mm`` and other ATen operations), by name (the numbered suffix dropped)."""
    names: dict[str, int] = {}
    for code in codes:
        for body in _call_bodies(code):
            for line in body.splitlines():
                m = _LAUNCH.match(line)
                if m:
                    name = re.sub(r"_\d+$", "", m.group(1))
                    names[name] = names.get(name, 0) + 1
    generated = sum(v for k, v in names.items() if k.startswith(("cpp_fused", "triton")))
    return {"generated": generated, "library": sum(names.values()) - generated, "total": sum(names.values()),
            "by_name": dict(sorted(names.items(), key=lambda kv: -kv[1]))}


def step_kernels(dec: Any, s: Any, span: int) -> dict[str, Any]:
    """The kernels of one compiled decoder layer, counted from the code the compiler writes for it
    (:func:`count_launches`), and per step (the layers' kernels; the embedding, the final norm's output layer and
    the sampler run outside the compiled layers). ``dec`` a :class:`.t5.T5GraphDecoder`, ``s`` one of its states
    (its step ``s.t`` runs once: its cache position is written). A fresh copy of :func:`fused_layer` is compiled,
    so the count does not depend on what was compiled before in the process."""
    from torch._inductor.utils import run_and_get_code

    fresh = types.FunctionType(fused_layer.__code__.replace(), fused_layer.__globals__, "fused_layer_counted",
                               fused_layer.__defaults__, fused_layer.__closure__)
    layer = Compiled(fresh)
    with torch.inference_mode():
        _, codes = run_and_get_code(lambda: fused_logits(dec, layer, s.last, s.t, s.self_kv, s.cross, s.enc_bias,
                                                          dec.self_bias(s.steps), span))
    if layer.failure:
        return {"error": layer.failure}
    per_layer = count_launches(codes)
    return {"per_layer": per_layer, "layers": dec.layers, "layers_total": per_layer["total"] * dec.layers,
            "device": str(dec.device)}
