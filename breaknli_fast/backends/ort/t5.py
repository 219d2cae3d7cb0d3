"""Flan-T5 (T5 / mT5) on ONNX Runtime: the project's own export, no optimum, on transformers 4.57 and 5.x.

Two graphs, traced from transformers' own T5 modules with ``torch.onnx.export`` (legacy exporter, opset 17):

* ``step_encoder_model.onnx`` (``input_ids``, ``attention_mask`` -> ``cross_{k,v}_{i}``): the encoder and every
  decoder layer's cross-attention key / value projections, once per *prompt*, laid out
  ``(prompts, heads, length, d_kv)``.
* ``step_decoder_model.onnx``: one decoder step for every row. Inputs: ``input_ids (rows, 1)``; ``self_rel`` /
  ``self_mask`` ``(capacity + 1,)``, each cache slot's position relative to the query and 0 / the float32 minimum
  (transformers' own mask value) for filled / empty slots, the last entry for the row's new token;
  ``cross_bias (prompts, 1, 1, length)`` (0 on a prompt's real tokens, the minimum on padding); ``slot_rows
  (prompts x slots,)`` and ``row_slots (rows,)``, the grid that groups the rows by prompt; the cross keys /
  values; ``cache_{k,v}_{i} (rows, heads, capacity, d_kv)``; ``top_k``. Outputs: ``top_values``, ``top_ids
  (rows, k)``, ``new_{k,v}_{i} (rows, heads, d_kv)`` (the new token's keys and values, which the caller writes
  into its cache) and ``logits (rows, vocabulary)``. A caller asks ONNX Runtime for the outputs it needs: the
  fast sampler for the top ``k`` only (the full logits never leave the session), greedy and beam search, the
  ``transformers`` sampler and NLI scoring for ``logits``.

  Self-attention scores the row's query against the whole cache and its own new key, the empty slots at the
  minimum, so the softmax gives them exactly zero weight. Cross-attention gathers the queries into a
  ``(prompts, slots)`` grid (``slot_rows``), scores every prompt's queries against that prompt's keys only in one
  batched matrix product, and gathers the results back per row (``row_slots``); grid slots beyond a prompt's live
  rows repeat one of its rows and are not read back. The relative position bias of self-attention is computed
  from ``self_rel``.

Everything else is transformers' T5 code (the same modules and weights). The decoder step's own residual additions
run in a module named ``residual`` so that the fp16 recipe (:mod:`.quantize`: T5's ``wo``, residual stream and RMS
norms in fp32) finds them by name, as it finds transformers' own. umT5 (every layer its own relative position bias) is
not exported (:data:`STEP_FAMILIES`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from breaknli_fast.backends.ort.onnx import graph_io, quiet, save_onnx
# the file names are the runtime's (the ort engine's stepper opens them)
from breaknli_fast.backends.ort.runtime import STEP_DECODER, STEP_ENCODER, STEP_FILES  # noqa: F401
from breaknli_fast.engines.compat import load_seq2seq, t5_scales_output
from breaknli_fast.export.errors import ExportError, UnsupportedModelError, first_line

# bump when the graphs' inputs, outputs or arithmetic change (part of the export cache key)
STEP_GRAPHS_VERSION = 3
STEP_OPSET = 17
# the decoder's relative position bias lives in its first layer and is shared (T5 v1.0 / v1.1, Flan-T5,
# mT5); umT5 gives every layer its own, which these graphs do not model
STEP_FAMILIES = ("t5", "mt5")


def names(n_layers: int) -> dict[str, list[str]]:
    return {
        "cross": [f"cross_{kv}_{i}" for i in range(n_layers) for kv in "kv"],
        "cache": [f"cache_{kv}_{i}" for i in range(n_layers) for kv in "kv"],
        "new": [f"new_{kv}_{i}" for i in range(n_layers) for kv in "kv"],
    }


def _modules() -> tuple[Any, Any]:
    import torch
    from torch import nn

    class StepEncoder(nn.Module):
        def __init__(self, model: Any):
            super().__init__()
            self.encoder = model.get_encoder()
            self.blocks = model.decoder.block
            self.heads, self.d_kv = model.config.num_heads, model.config.d_kv

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            h = self.encoder(input_ids=input_ids, attention_mask=attention_mask)[0]
            b, length = input_ids.shape[0], input_ids.shape[1]
            outs = []
            for blk in self.blocks:
                att = blk.layer[1].EncDecAttention
                for proj in (att.k, att.v):
                    outs.append(proj(h).view(b, length, self.heads, self.d_kv).transpose(1, 2))
            return tuple(outs)

    class Residual(nn.Module):
        """``x + y``, in a module so that the node is named ``.../residual/Add`` (the fp16 recipe keeps it fp32)."""

        def forward(self, x: Any, y: Any) -> Any:
            return x + y

    class StepDecoder(nn.Module):
        def __init__(self, model: Any, k: int):
            super().__init__()
            self.m = model
            self.heads, self.d_kv, self.k = model.config.num_heads, model.config.d_kv, k
            self.tied = t5_scales_output(model.config)  # T5 v1.0 scales before its tied output layer
            self.scale = model.config.d_model ** -0.5
            self.residual = Residual()  # the self- and cross-attention residual additions (/residual_N/Add)

        def forward(self, input_ids: Any, self_rel: Any, self_mask: Any, cross_bias: Any, slot_rows: Any,
                    row_slots: Any, *kv: Any) -> Any:
            dec = self.m.decoder
            n = len(dec.block)
            cross, cache = kv[: 2 * n], kv[2 * n:]
            r, heads, d_kv = input_ids.shape[0], self.heads, self.d_kv
            hd = heads * d_kv
            prompts = cross[0].shape[0]
            x = dec.embed_tokens(input_ids[:, 0])  # (r, d_model)
            rel_att = dec.block[0].layer[0].SelfAttention
            bucket = rel_att._relative_position_bucket(self_rel, bidirectional=False,
                                                       num_buckets=rel_att.relative_attention_num_buckets,
                                                       max_distance=rel_att.relative_attention_max_distance)
            bias = (rel_att.relative_attention_bias(bucket).permute(1, 0) + self_mask).reshape(1, heads, 1, -1)
            news = []
            for i, blk in enumerate(dec.block):
                layer = blk.layer[0]
                att = layer.SelfAttention
                hs = layer.layer_norm(x)
                q = att.q(hs).view(r, heads, 1, d_kv)
                k_new = att.k(hs).view(r, heads, 1, d_kv)
                v_new = att.v(hs).view(r, heads, 1, d_kv)
                news += [k_new.view(r, heads, d_kv), v_new.view(r, heads, d_kv)]
                keys, values = cache[2 * i], cache[2 * i + 1]
                capacity = keys.shape[2]
                scores = torch.cat([torch.matmul(q, keys.transpose(3, 2)), (q * k_new).sum(-1, keepdim=True)], dim=-1)
                w = torch.softmax((scores + bias).float(), dim=-1)
                out = torch.matmul(w[..., :capacity], values) + w[..., capacity:] * v_new
                x = self.residual(x, att.o(out.reshape(r, hd)))
                layer = blk.layer[1]
                att = layer.EncDecAttention
                q = att.q(layer.layer_norm(x)).index_select(0, slot_rows).view(prompts, -1, heads, d_kv).transpose(1, 2)
                w = torch.softmax((torch.matmul(q, cross[2 * i].transpose(3, 2)) + cross_bias).float(), dim=-1)
                out = torch.matmul(w, cross[2 * i + 1]).transpose(1, 2).reshape(-1, hd)  # (prompts x slots, hd)
                x = self.residual(x, att.o(out.index_select(0, row_slots)))
                x = blk.layer[2](x)  # feed-forward with its residual
            x = dec.final_layer_norm(x)
            if self.tied:
                x = x * self.scale
            logits = self.m.lm_head(x)
            values, ids = torch.topk(logits, self.k, dim=-1)
            return (values, ids, *news, logits)

    return StepEncoder, StepDecoder


def check_family(family: str) -> None:
    if family not in STEP_FAMILIES:
        raise UnsupportedModelError(
            f"{family}: the ort engine exports T5 and mT5 text-to-text models (Flan-T5); {family} is not supported "
            "(umT5's layers each have their own position bias): use --engine torch")


def export_t5(src_path: str, out_dir: Path) -> dict[str, Any]:
    """Write :data:`STEP_FILES` (fp32) for the T5-family model at ``src_path`` into ``out_dir``, with its
    tokenizer, config and generation config."""
    import onnx
    import torch
    from transformers import AutoTokenizer

    model = load_seq2seq(src_path, torch.float32).eval()
    cfg = model.config
    check_family(cfg.model_type)
    n_layers, heads, d_kv = len(model.decoder.block), cfg.num_heads, cfg.d_kv
    nm = names(n_layers)
    StepEncoder, StepDecoder = _modules()
    k = min(8, cfg.vocab_size)
    rows, capacity, prompts, length = 6, 3, 2, 7
    try:
        with quiet(), torch.inference_mode(False), torch.no_grad():
            ids = torch.full((prompts, length), 5, dtype=torch.long)
            torch.onnx.export(StepEncoder(model).eval(), (ids, torch.ones_like(ids)), str(out_dir / STEP_ENCODER),
                              input_names=["input_ids", "attention_mask"], output_names=nm["cross"],
                              dynamic_axes={"input_ids": {0: "prompts", 1: "length"},
                                            "attention_mask": {0: "prompts", 1: "length"},
                                            **{x: {0: "prompts", 2: "length"} for x in nm["cross"]}},
                              opset_version=STEP_OPSET, do_constant_folding=True, dynamo=False)
            args = (torch.zeros(rows, 1, dtype=torch.long), torch.arange(capacity + 1) - capacity,
                    torch.zeros(capacity + 1), torch.zeros(prompts, 1, 1, length),
                    torch.arange(rows), torch.arange(rows),
                    *[torch.zeros(prompts, heads, length, d_kv) for _ in nm["cross"]],
                    *[torch.zeros(rows, heads, capacity, d_kv) for _ in nm["cache"]])
            axes = {"input_ids": {0: "rows"}, "self_rel": {0: "capacity_plus_1"}, "self_mask": {0: "capacity_plus_1"},
                    "cross_bias": {0: "prompts", 3: "length"}, "slot_rows": {0: "slots"}, "row_slots": {0: "rows"},
                    "top_values": {0: "rows", 1: "k"}, "top_ids": {0: "rows", 1: "k"}, "logits": {0: "rows"},
                    **{x: {0: "prompts", 2: "length"} for x in nm["cross"]},
                    **{x: {0: "rows", 2: "capacity"} for x in nm["cache"]},
                    **{x: {0: "rows"} for x in nm["new"]}}
            torch.onnx.export(StepDecoder(model, k).eval(), args, str(out_dir / STEP_DECODER),
                              input_names=["input_ids", "self_rel", "self_mask", "cross_bias", "slot_rows",
                                           "row_slots", *nm["cross"], *nm["cache"]],
                              output_names=["top_values", "top_ids", *nm["new"], "logits"], dynamic_axes=axes,
                              opset_version=STEP_OPSET, do_constant_folding=True, dynamo=False)
    except Exception as e:
        raise ExportError(f"{cfg.model_type}: exporting the T5 graphs failed: {first_line(e)}") from e
    # k becomes an input: the traced TopK reads a constant
    g = onnx.load(str(out_dir / STEP_DECODER))
    topk = [node for node in g.graph.node if node.op_type == "TopK"]
    if len(topk) != 1:
        raise ExportError(f"{cfg.model_type}: expected one TopK node in the step decoder, found {len(topk)}")
    old_k = topk[0].input[1]
    topk[0].input[1] = "top_k"
    g.graph.input.append(onnx.helper.make_tensor_value_info("top_k", onnx.TensorProto.INT64, [1]))
    if not any(old_k in node.input for node in g.graph.node):  # drop the constant nobody reads now
        keep = [node for node in g.graph.node if old_k not in node.output]
        del g.graph.node[:]
        g.graph.node.extend(keep)
        inits = [i for i in g.graph.initializer if i.name != old_k]
        del g.graph.initializer[:]
        g.graph.initializer.extend(inits)
    save_onnx(g, out_dir / STEP_DECODER)
    AutoTokenizer.from_pretrained(src_path).save_pretrained(out_dir)
    cfg.save_pretrained(out_dir)
    if model.generation_config is not None:
        model.generation_config.save_pretrained(out_dir)
    return {"family": cfg.model_type, "opset": STEP_OPSET, "layers": n_layers, "version": STEP_GRAPHS_VERSION,
            "exporter": "torch.onnx.export (legacy, dynamo=False) of transformers' T5 modules",
            "graphs": {f: graph_io(out_dir / f) for f in STEP_FILES}}
