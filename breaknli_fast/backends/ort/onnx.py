"""FP32 ONNX graphs of the two model kinds.

* Sequence classifiers (RoBERTa, BART / DistilBART, DeBERTa v1 / v2, and other encoders whose
  ``ForSequenceClassification`` traces): ``torch.onnx.export`` with the legacy TorchScript
  exporter (``dynamo=False``), dynamic batch and sequence axes, one output ``logits`` in the
  model's own label order. The dynamo exporter fails on BART in transformers 4.57 (a
  data-dependent check of the eos counts); the legacy tracer records the eos pooling of the
  traced inputs, which have the same number of ``</s>`` per row as every premise/hypothesis pair.
* Masked language models (the mask-filler role): the same exporter over
  :class:`~breaknli_fast.engines.hf.MaskedLogProbs`: inputs as the tokenizer produces them plus
  ``mask_index`` (flat positions of the masks in the batch), one output ``log_probs`` (masks, vocabulary), so
  the prediction head runs on the masked positions only.
* Text-to-text models (Flan-T5): the project's own T5 graphs, :mod:`.t5`.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import logging
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

from breaknli_fast.engines.model_info import input_limit
from breaknli_fast.backends.ort.runtime import INSTALL_ONNX
from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.export.errors import ExportError, UnsupportedModelError, first_line

CLASSIFIER_OPSET = 17
# bump when the traced classifier graph changes (part of the export cache key): 2 = traced with eager attention
CLASSIFIER_GRAPH_VERSION = 2
CLASSIFIER_FILE = "model.onnx"
MLM_FILE = "model.onnx"
MLM_OUTPUT = "log_probs"
# Families exported and validated by the test-suite; others are attempted and must pass validation.
TESTED_CLASSIFIER_FAMILIES = ("roberta", "bart", "deberta", "deberta-v2")
TESTED_SEQ2SEQ_FAMILIES = ("t5",)
# At most this much weight data inline; bigger graphs keep their weights in an external file.
INLINE_LIMIT = 1_800_000_000


def require_export_libs() -> None:
    """onnx and onnxruntime are installed (both optional: imported on use), or a one-line
    :class:`EngineUnavailable`. Every model kind exports with torch and onnx alone."""
    missing = []
    for mod in ("onnx", "onnxruntime"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod)
    if missing:
        raise EngineUnavailable(f"ONNX export needs {', '.join(missing)}: {INSTALL_ONNX}")


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """Silence the tracer's warnings and log chatter of an export."""
    loggers = [logging.getLogger(n) for n in ("transformers", "torch.onnx", "root")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with contextlib.redirect_stdout(io.StringIO()):
                yield
    finally:
        for lg, lv in zip(loggers, levels):
            lg.setLevel(lv)


def save_onnx(model: Any, path: Path) -> None:
    """Save a ModelProto; weights go to ``<name>.data`` beside it when they would pass protobuf's 2 GB."""
    import onnx

    size = sum(len(t.raw_data) for t in model.graph.initializer)
    if size > INLINE_LIMIT:
        onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                        location=path.name + ".data", size_threshold=1024)
    else:
        onnx.save_model(model, str(path))


def graph_io(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Names, element types and symbolic shapes of a graph's inputs and outputs."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)

    def dims(v: Any) -> list[Any]:
        return [d.dim_param or d.dim_value for d in v.type.tensor_type.shape.dim]

    def desc(vs: Any) -> list[dict[str, Any]]:
        return [{"name": v.name, "dtype": onnx.TensorProto.DataType.Name(v.type.tensor_type.elem_type).lower(),
                 "shape": dims(v)} for v in vs]

    return {"inputs": desc(m.graph.input), "outputs": desc(m.graph.output)}


def _eager(auto: Any, src_path: str, dtype: Any) -> Any:
    """The model with transformers' eager attention where it has a choice: the traced graph is then the plain
    attention pattern that ONNX Runtime's transformer optimizer fuses (on transformers 5.x the default attention
    traces into one it does not recognise), and the same graph on 4.57 and 5.x. The arithmetic is the same."""
    try:
        model = auto.from_pretrained(src_path, dtype=dtype, attn_implementation="eager")
    except (ValueError, TypeError):  # a model class without the choice
        model = auto.from_pretrained(src_path, dtype=dtype)
    return model.eval()


def _classifier_input_names(model: Any, tokenizer: Any) -> list[str]:
    params = inspect.signature(model.forward).parameters
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in params]
    produced = set(tokenizer("a", "b").keys())
    return [n for n in names if n in produced]


def export_classifier(src_path: str, out_dir: Path, sample_pairs: Sequence[tuple[str, str]],
                      opset: int = CLASSIFIER_OPSET, max_length: int = 256) -> dict[str, Any]:
    """Export a sequence classifier to ``out_dir/model.onnx`` (fp32) and copy its tokenizer and config. The
    traced inputs are truncated to ``max_length``, capped at the model's own limit (its position table)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src_path)
    model = _eager(AutoModelForSequenceClassification, src_path, torch.float32)
    family = model.config.model_type
    max_length = min(max_length, input_limit(model.config, tok)[0])
    names = _classifier_input_names(model, tok)
    if "input_ids" not in names:
        raise UnsupportedModelError(f"{family}: the classifier does not take input_ids; cannot export it")

    class Logits(torch.nn.Module):
        def __init__(self, m: Any):
            super().__init__()
            self.m = m

        def forward(self, *args: Any) -> Any:
            return self.m(**dict(zip(names, args))).logits

    # two pairs of different lengths: the tracer sees padding, and the same eos count per row (BART)
    pairs = list(sample_pairs[:2]) or [("A man is sleeping.", "A person rests."), ("Two dogs run.", "Animals move.")]
    if len(pairs) == 1:
        pairs.append((pairs[0][0] + " " + pairs[0][0], pairs[0][1]))
    enc = tok([p for p, _ in pairs], [h for _, h in pairs], padding=True, truncation=True, max_length=max_length,
              return_tensors="pt")
    args = tuple(enc[n] for n in names)
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["logits"] = {0: "batch"}
    out = out_dir / CLASSIFIER_FILE
    # The wrapper must be in eval mode: the exporter restores the *wrapper's* training flag afterwards,
    # and a fresh nn.Module is in training mode, which would switch dropout on in the model.
    wrapper = Logits(model).eval()
    try:
        with quiet(), torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(wrapper, args, str(out), input_names=names, output_names=["logits"],
                              dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
    except Exception as e:  # the tracer's errors are long; keep the first line
        raise ExportError(f"{family}: torch.onnx.export failed: {first_line(e)}") from e
    tok.save_pretrained(out_dir)
    model.config.save_pretrained(out_dir)
    io_ = graph_io(out)
    return {"family": family, "opset": opset, "exporter": "torch.onnx.export (legacy, dynamo=False)",
            "graphs": {CLASSIFIER_FILE: io_}}


# families whose graphs ONNX Runtime's transformer optimizer fuses (its model type for them)
FUSION_MODEL_TYPES = {"roberta": "bert", "bert": "bert", "xlm-roberta": "bert", "bart": "bart"}
# fused against unfused fp32 graph on the same pairs: rounding only (5.6e-7 on a roberta-base shape)
FUSION_MAX_ABS_DIFF = 1e-5


def fuse_transformer(path: Path, config: Any, feeds: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """ONNX Runtime's transformer optimizer (``onnxruntime.transformers.optimizer``: attention, skip
    LayerNorm, bias-GELU fusion) on a classifier graph, in place, where it keeps fp32 parity: the fused
    graph's logits on ``feeds`` must lie within :data:`FUSION_MAX_ABS_DIFF` of the unfused graph's, else the
    unfused graph stays. Returns the record (fused operators, the difference, or why nothing changed)."""
    import numpy as np

    from breaknli_fast.backends.ort.runtime import make_session

    family = getattr(config, "model_type", "?")
    model_type = FUSION_MODEL_TYPES.get(family)
    if model_type is None:
        return {"applied": False, "reason": f"no fusion recipe for {family}"}
    from onnxruntime.transformers.optimizer import optimize_model

    heads = int(getattr(config, "num_attention_heads", None) or getattr(config, "encoder_attention_heads", 0) or 0)
    hidden = int(getattr(config, "hidden_size", None) or getattr(config, "d_model", 0) or 0)
    fused_path = path.parent / f".fused-{path.name}"
    try:
        with quiet():
            opt = optimize_model(str(path), model_type=model_type, num_heads=heads, hidden_size=hidden, opt_level=0)
            stats = {k: v for k, v in opt.get_fused_operator_statistics().items() if v}
            opt.save_model_to_file(str(fused_path))
        if not stats:
            return {"applied": False, "reason": "the optimizer fused nothing"}
        plain = make_session(path, threads=1)[0]
        fused = make_session(fused_path, threads=1)[0]
        diff = 0.0
        for f in feeds:
            a = plain.run(["logits"], f)[0]
            b = fused.run(["logits"], f)[0]
            diff = max(diff, float(np.abs(a.astype(np.float64) - b).max()) if np.isfinite(b).all() else float("inf"))
        record = {"model_type": model_type, "fused": stats, "max_abs_diff_vs_unfused": diff,
                  "tolerance": FUSION_MAX_ABS_DIFF}
        if not diff <= FUSION_MAX_ABS_DIFF:
            return {"applied": False, "reason": f"fused logits {diff:.3g} from the unfused graph's", **record}
        fused_path.replace(path)
        return {"applied": True, **record}
    except Exception as e:  # noqa: BLE001 - the optimizer's failures leave the unfused graph, recorded
        return {"applied": False, "reason": f"optimizer failed: {first_line(e)}"}
    finally:
        fused_path.unlink(missing_ok=True)


def export_masked_lm(src_path: str, out_dir: Path, sample_texts: Sequence[tuple[str, ...]],
                     opset: int = CLASSIFIER_OPSET, max_length: int = 256) -> dict[str, Any]:
    """Export a masked LM to ``out_dir/model.onnx`` (fp32; :class:`~breaknli_fast.engines.hf.MaskedLogProbs`) and
    copy its tokenizer and config. ``sample_texts``: masked items (texts with the tokenizer's mask token) to
    trace with; two of different lengths are used."""
    import numpy as np
    import torch
    from transformers import AutoModelForMaskedLM, AutoTokenizer

    from breaknli_fast.engines.hf import MaskedLogProbs, masked_lm_inputs

    tok = AutoTokenizer.from_pretrained(src_path)
    model = AutoModelForMaskedLM.from_pretrained(src_path, dtype=torch.float32).eval()
    family = model.config.model_type
    if tok.mask_token_id is None:
        raise UnsupportedModelError(f"{family}: the tokenizer has no mask token")
    max_length = min(max_length, input_limit(model.config, tok)[0])
    names = masked_lm_inputs(model, tok)
    if "input_ids" not in names:
        raise UnsupportedModelError(f"{family}: the masked LM does not take input_ids; cannot export it")
    texts = [t for t in sample_texts[:2]] or [(f"A man is {tok.mask_token} a guitar.", "A person plays music."),
                                              (f"Two {tok.mask_token} run.", f"Two {tok.mask_token} move fast outside.")]
    if len(texts) == 1:
        texts.append((texts[0][0] + " " + texts[0][0],) + tuple(texts[0][1:]))
    if len({len(t) for t in texts}) > 1:
        texts = [t[:1] for t in texts]
    enc = (tok([t[0] for t in texts], padding=True, truncation=True, max_length=max_length, return_tensors="pt")
           if len(texts[0]) == 1 else
           tok([t[0] for t in texts], [t[1] for t in texts], padding=True, truncation=True, max_length=max_length,
               return_tensors="pt"))
    flat = np.flatnonzero(enc["input_ids"].numpy().reshape(-1) == tok.mask_token_id)
    if flat.size == 0:
        flat = np.array([1], dtype=np.int64)
    args = tuple(enc[n] for n in names) + (torch.from_numpy(flat.astype(np.int64)),)
    axes = {n: {0: "batch", 1: "sequence"} for n in names}
    axes["mask_index"] = {0: "masks"}
    axes[MLM_OUTPUT] = {0: "masks"}
    out = out_dir / MLM_FILE
    wrapper = MaskedLogProbs(model, names).eval()
    try:
        with quiet(), torch.inference_mode(False), torch.no_grad():
            torch.onnx.export(wrapper, args, str(out), input_names=[*names, "mask_index"], output_names=[MLM_OUTPUT],
                              dynamic_axes=axes, opset_version=opset, do_constant_folding=True, dynamo=False)
    except Exception as e:
        raise ExportError(f"{family}: torch.onnx.export of the masked LM failed: {first_line(e)}") from e
    untied = untie_initializers(out)
    tok.save_pretrained(out_dir)
    model.config.save_pretrained(out_dir)
    return {"family": family, "opset": opset, "exporter": "torch.onnx.export (legacy, dynamo=False)",
            "head_on_masks_only": wrapper.split, "untied_initializers": untied, "graphs": {MLM_FILE: graph_io(out)}}


def untie_initializers(path: Path) -> list[str]:
    """Give every ``MatMul`` / ``Gemm`` its own copy of a weight that another node reads too, in place. A masked
    LM's output layer shares its weight with the input embeddings, and the exporter writes one initializer read
    by the embeddings' ``Gather`` and the output ``Gemm`` (directly or through an ``Identity``); dynamic int8
    quantisation of the ``Gemm`` would rewrite the shared initializer under the ``Gather`` too (ONNX Runtime then
    refuses the graph). Returns the names of the copies."""
    import onnx

    model = onnx.load(str(path))
    g = model.graph
    inits = {i.name: i for i in g.initializer}
    nodes = []
    alias: dict[str, str] = {}
    for n in g.node:  # an Identity of an initializer: its readers read the initializer
        if n.op_type == "Identity" and n.input and n.input[0] in inits:
            alias[n.output[0]] = n.input[0]
        else:
            nodes.append(n)
    readers: dict[str, list[Any]] = {}
    for n in nodes:
        for k, name in enumerate(n.input):
            name = alias.get(name, name)
            if name in inits:
                n.input[k] = name
                readers.setdefault(name, []).append(n)
    copies = []
    for name, rs in readers.items():
        if len(rs) < 2 or not any(r.op_type in ("MatMul", "Gemm") for r in rs):
            continue
        for j, r in enumerate(x for x in rs if x.op_type in ("MatMul", "Gemm")):
            if j == 0 and all(x.op_type in ("MatMul", "Gemm") for x in rs):
                continue  # the first of several weight readers keeps the original
            t = onnx.TensorProto()
            t.CopyFrom(inits[name])
            t.name = f"{name}.untied{j}"
            g.initializer.append(t)
            r.input[list(r.input).index(name)] = t.name
            copies.append(t.name)
    if copies or alias:
        del g.node[:]
        g.node.extend(nodes)
        save_onnx(model, path)
    return copies
