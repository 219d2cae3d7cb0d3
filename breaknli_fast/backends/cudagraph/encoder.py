"""A BERT / RoBERTa-family sequence classifier as the cudagraph engine runs it: the weights of a transformers
``…ForSequenceClassification`` model, fused (q / k / v as one product), and a forward pass over static buffers,
so that one CUDA graph per (batch, length) bucket runs it (:mod:`.graphs`).

The arithmetic is transformers' post-norm encoder (embeddings of words, positions and token types, layer norm; per
layer self-attention, residual and layer norm, feed-forward, residual and layer norm), the attention through
``scaled_dot_product_attention`` with the padding as an additive ``-inf`` mask (softmax accumulated in fp32 at every
precision), and the classification head -- RoBERTa's dense + tanh + projection on ``<s>``, BERT's pooler + classifier
on ``[CLS]`` -- in fp32 at every precision, so the logits and their softmax are fp32. At ``fp8`` / ``int8``
(``quant``) every layer's four products are quantised (:mod:`.quant`: weights per output channel, activations per
row), the rest runs as at bf16.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from breaknli_fast.backends.cudagraph.quant import QuantLinear, linear

# model_type -> how positions are numbered ("roberta": from padding_idx + 1, skipping padding; "absolute": 0, 1, ...)
FAMILIES = {"roberta": "roberta", "xlm-roberta": "roberta", "camembert": "roberta", "bert": "absolute"}
_ACTS = {"gelu": F.gelu, "gelu_new": lambda x: F.gelu(x, approximate="tanh"),
         "gelu_pytorch_tanh": lambda x: F.gelu(x, approximate="tanh"), "relu": F.relu, "silu": F.silu}


def supported(config: Any) -> str | None:
    """None where :class:`BertFamilyEncoder` runs ``config``'s model, else why not (one line)."""
    family = getattr(config, "model_type", None)
    if family not in FAMILIES:
        return f"its family is {family!r}; the graph path has {', '.join(sorted(FAMILIES))}"
    if getattr(config, "position_embedding_type", "absolute") not in (None, "absolute"):
        return f"its position embeddings are {config.position_embedding_type!r}, not absolute"
    if not isinstance(getattr(config, "hidden_act", None), str) or config.hidden_act not in _ACTS:
        return f"its activation {getattr(config, 'hidden_act', None)!r} has no fused form here"
    return None


class BertFamilyEncoder:
    """``forward(ids, mask, types)`` -> fp32 logits in the model's own label order (module notes)."""

    def __init__(self, model: Any, dtype: torch.dtype, device: torch.device | str, quant: str | None = None):
        cfg = model.config
        why = supported(cfg)
        if why is not None:
            raise ValueError(why)
        self.device, self.dtype = torch.device(device), dtype
        self.family = cfg.model_type
        self.positions = FAMILIES[self.family]
        self.pad_id = int(getattr(cfg, "pad_token_id", 0) or 0)
        self.heads = int(cfg.num_attention_heads)
        self.hidden = int(cfg.hidden_size)
        self.eps = float(cfg.layer_norm_eps)
        self.act = _ACTS[cfg.hidden_act]
        base = getattr(model, model.base_model_prefix)

        def w(t: torch.Tensor | None, fp32: bool = False) -> torch.Tensor | None:
            if t is None:
                return None
            return t.detach().to(device=self.device, dtype=torch.float32 if fp32 else dtype).contiguous()

        emb = base.embeddings
        self.word, self.pos = w(emb.word_embeddings.weight), w(emb.position_embeddings.weight)
        self.type = w(emb.token_type_embeddings.weight)
        self.emb_ln = (w(emb.LayerNorm.weight), w(emb.LayerNorm.bias))
        self.layers = []
        self.quant = quant

        def lin(weight: torch.Tensor, bias: torch.Tensor | None) -> tuple[Any, Any]:
            """(weight, bias) of a layer's product: plain at the compute dtype, or quantised (its bias inside)."""
            if quant is None:
                return w(weight), w(bias)
            return QuantLinear.of(weight, bias, quant, dtype, self.device), None

        for layer in base.encoder.layer:
            att = layer.attention
            sa = att.self
            p: dict[str, Any] = {"ln1": (w(att.output.LayerNorm.weight), w(att.output.LayerNorm.bias)),
                                 "ln2": (w(layer.output.LayerNorm.weight), w(layer.output.LayerNorm.bias))}
            p["w_qkv"], p["b_qkv"] = lin(torch.cat([sa.query.weight, sa.key.weight, sa.value.weight], 0),
                                         torch.cat([sa.query.bias, sa.key.bias, sa.value.bias], 0))
            p["w_o"], p["b_o"] = lin(att.output.dense.weight, att.output.dense.bias)
            p["w_i"], p["b_i"] = lin(layer.intermediate.dense.weight, layer.intermediate.dense.bias)
            p["w_f"], p["b_f"] = lin(layer.output.dense.weight, layer.output.dense.bias)
            self.layers.append(p)
        if self.positions == "roberta":  # RobertaClassificationHead: dense, tanh, out_proj on <s>
            head = model.classifier
            self.head = [(w(head.dense.weight, True), w(head.dense.bias, True), torch.tanh),
                         (w(head.out_proj.weight, True), w(head.out_proj.bias, True), None)]
        else:  # BertForSequenceClassification: pooler (dense, tanh) on [CLS], then classifier
            pool = base.pooler.dense
            self.head = [(w(pool.weight, True), w(pool.bias, True), torch.tanh),
                         (w(model.classifier.weight, True), w(model.classifier.bias, True), None)]
        self.num_labels = int(self.head[-1][0].shape[0])

    def _ln(self, x: torch.Tensor, wb: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        return F.layer_norm(x, (self.hidden,), wb[0], wb[1], self.eps)

    def forward(self, ids: torch.Tensor, mask: torch.Tensor, types: torch.Tensor) -> torch.Tensor:
        """fp32 logits ``(batch, labels)`` of the pairs ``ids`` / ``mask`` / ``types`` ``(batch, length)``; padding
        positions are masked out of every attention (a row's logits are those of its tokens alone)."""
        b, length = ids.shape
        if self.positions == "roberta":
            real = ids.ne(self.pad_id).long()
            positions = torch.cumsum(real, dim=1) * real + self.pad_id
        else:
            positions = torch.arange(length, device=ids.device).expand(b, length)
        x = F.embedding(ids, self.word) + F.embedding(types, self.type) + F.embedding(positions, self.pos)  # HF's order
        x = self._ln(x, self.emb_ln)
        bias = torch.zeros((), dtype=self.dtype, device=ids.device).expand(b, 1, 1, length).masked_fill(
            ~mask.bool()[:, None, None, :], float("-inf"))
        h, d = self.heads, self.hidden // self.heads
        for p in self.layers:
            qkv = linear(x, p["w_qkv"], p["b_qkv"]).view(b, length, 3, h, d).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(qkv[0], qkv[1], qkv[2], attn_mask=bias)
            x = self._ln(x + linear(a.transpose(1, 2).reshape(b, length, self.hidden), p["w_o"], p["b_o"]), p["ln1"])
            y = self.act(linear(x, p["w_i"], p["b_i"]))
            x = self._ln(x + linear(y, p["w_f"], p["b_f"]), p["ln2"])
        y = x[:, 0].float()
        for weight, bias_, act in self.head:
            y = F.linear(y, weight, bias_)
            if act is not None:
                y = act(y)
        return y
