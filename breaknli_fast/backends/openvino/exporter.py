"""The openvino backend's exporter (format ``openvino``), :class:`OpenVinoExporter`, called by
:func:`breaknli_fast.export.api.export_model`: the project's fp32 ONNX graphs of a model (``export_model(format=
"onnx")``, traced and cached there: a sequence classifier's graph, a masked LM's, or Flan-T5's two step graphs)
converted to OpenVINO's IR by the runtime's ONNX frontend (``Core.read_model``; not ``openvino.convert_model``, whose
tool sends usage telemetry over the network by default) and saved with fp32 weights (``compress_to_fp16=False``).
fp32 and bf16 share that IR (the precision is the compile-time hint); ``int8`` gets int8 weights (:mod:`.ir`).

Judged against the torch fp32 reference through the engine contract at the export's precision
(:mod:`breaknli_fast.export.validate`, :mod:`breaknli_fast.export.validate_t5`), and for batch invariance on this
CPU: a pair's logits (a prompt's greedy tokens) alone and among the others must be equal to the bit, else the export
is refused."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np

from breaknli_fast.engines.cpu_features import (BF16_FLAGS, VNNI_FLAGS, cpu_flags, has_native_bf16, has_vnni,
                                                summary as cpu_summary)
from breaknli_fast.export import manifest as mf
from breaknli_fast.export.errors import ExportError, UnsupportedModelError
from breaknli_fast.export.exporter import ExportPlan, Exporter, ExportValidationError

FORMAT = "openvino"
PRECISIONS = ("fp32", "bf16", "int8")
LIBRARIES = ("openvino", "torch", "transformers", "onnxruntime", "onnx")
IR_VERSION = "3"  # part of the cache key: a change of the conversion, a new export
INVARIANCE_PAIRS = 8  # validation pairs (prompts) checked alone against one call
QUANTIZATIONS = ("static", "dynamic")  # int8's activations (.ir); a sequence classifier's default is static
CALIBRATION_BATCH = 16


def precision_gate(precision: str, device: str) -> str | None:
    """Why this CPU cannot run ``precision`` (None when it can): bf16 needs AVX-512 BF16 or AMX."""
    if precision == "bf16" and not has_native_bf16(cpu_flags()):
        return (f"this CPU has neither {' nor '.join(BF16_FLAGS)} (OpenVINO would emulate bf16, slower than fp32); "
                "use fp32 (`breaknli-fast env` lists the CPU flags)")
    return None


def auto_gate(precision: str, device: str) -> str | None:
    """Why ``--engine auto`` does not pick OpenVINO at ``precision`` on this CPU (None: it does): int8 needs VNNI
    (AVX-512 VNNI, AVX-VNNI or AMX-INT8). On QEMU's emulated Intel Haswell (AVX2, no VNNI) the mini classifier's
    int8 IR gave 16 pairs alone other logits than in one call (by 3.8e-6), and its export was refused."""
    if precision == "int8" and not has_vnni(cpu_flags()):
        return f"this CPU has none of {', '.join(VNNI_FLAGS)}: OpenVINO's int8 here depends on the batch"
    return None


def _graphs(kind: str) -> list[tuple[str, str]]:
    """(ONNX graph, IR graph) file names of a kind."""
    from breaknli_fast.backends.openvino.engine import CLASSIFIER_GRAPH, MLM_GRAPH, STEP_GRAPHS
    from breaknli_fast.engines.stepgraph import STEP_GRAPHS as ONNX_STEPS

    if kind == "seq2seq":
        return list(zip(ONNX_STEPS, STEP_GRAPHS))
    return [("model.onnx", MLM_GRAPH if kind == "mlm" else CLASSIFIER_GRAPH)]


class OpenVinoExporter(Exporter):
    """OpenVINO IR of a classifier, masked LM or Flan-T5 (fp32 weights, or int8 weights for ``int8``)."""

    FORMAT = FORMAT
    PRECISIONS = PRECISIONS
    LIBRARIES = LIBRARIES

    def default_tolerances(self, kind: str, precision: str) -> dict[str, float | None] | None:
        """fp32 / int8: the shared defaults; bf16 (8 bits of mantissa): labels only, as int8's (the accuracy tiers
        of ``bench --probe accuracy`` judge it on real pairs)."""
        from breaknli_fast.export.validate import DEFAULT_TOLERANCES

        if precision == "bf16":
            return dict(DEFAULT_TOLERANCES[(kind, "int8")])
        return None

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        """``ir-<precision>``; a sequence classifier's int8 is ``ir-int8-static`` unless ``quantization="dynamic"``
        (:mod:`.ir`: its two recipes)."""
        if kind not in ("seq-cls", "mlm", "seq2seq"):
            raise UnsupportedModelError(f"the openvino engine exports classifiers, masked LMs and Flan-T5, not {kind}")
        if fuse:
            raise UnsupportedModelError("fuse is an ONNX Runtime export setting, not OpenVINO's")
        if quantization is not None:
            if precision != "int8":
                raise UnsupportedModelError(f"quantization applies to int8, not {precision}")
            if quantization not in QUANTIZATIONS:
                raise UnsupportedModelError(f"the openvino engine's int8 quantization is {' or '.join(QUANTIZATIONS)}, "
                                            f"not {quantization!r}")
            if quantization == "static" and kind != "seq-cls":
                raise UnsupportedModelError("static int8 (calibrated activation ranges) is for sequence classifiers; "
                                            "masked LMs and Flan-T5 quantise activations per token at run time "
                                            "(quantization=dynamic, their default)")
        if device != "cpu":
            raise UnsupportedModelError("the openvino engine runs on the CPU")
        if precision == "int8" and kind == "seq-cls" and quantization != "dynamic":
            return "ir-int8-static"
        return f"ir-{precision}"

    def calibrated(self, variant: str) -> bool:
        return variant == "ir-int8-static"

    def require(self, kind: str) -> None:
        from breaknli_fast.backends.openvino import BACKEND

        BACKEND.require()

    def key_parts(self, plan: ExportPlan) -> dict[str, Any]:
        key: dict[str, Any] = {"libraries": mf.library_versions(LIBRARIES), "ir": IR_VERSION}
        if plan.precision == "int8":
            from breaknli_fast.backends.openvino.ir import SCHEME, STATIC_SCHEME

            # int8's kernels and its batch invariance are the CPU's: judged again on another CPU
            key["int8"] = STATIC_SCHEME if plan.variant == "ir-int8-static" else SCHEME
            key["cpu"] = cpu_summary()
        return key

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        """The project's fp32 ONNX export (cached there), read by OpenVINO's ONNX frontend and saved as IR."""
        import openvino as ov

        from breaknli_fast.backends.openvino import ir
        from breaknli_fast.export.api import export_model

        task = {"mlm": "mlm", "seq2seq": None, "seq-cls": None}[plan.kind]
        # the intermediate ONNX graphs are not judged on their own: the IR built from them is, at its precision
        onnx = export_model(plan.src, format="onnx", precision="fp32", device="cpu", max_length=plan.max_length,
                            task=task, progress=False, validate=False)
        info: dict[str, Any] = {"exporter": f"openvino.Core.read_model (ONNX frontend) {ov.__version__}",
                                "onnx_export": str(onnx.path), "graphs": {}}
        widths: set[int] = set()
        static = plan.variant == "ir-int8-static"
        for src_name, ir_name in _graphs(plan.kind):
            model = ov.Core().read_model(str(Path(onnx.path) / src_name))
            entry: dict[str, Any] = {"inputs": [p.get_any_name() for p in model.inputs]}
            if static:
                peaks = ir.calibrate(model, calibration_feeds(Path(onnx.path), plan.calib, plan.max_length,
                                                              entry["inputs"]))
                entry["int8"] = ir.quantize_static(model, peaks)
                entry["int8"]["ranges"] = {"inputs": len(peaks), "largest": max(peaks.values(), default=0.0),
                                           "smallest": min(peaks.values(), default=0.0)}
            elif plan.precision == "int8":
                entry["int8"] = ir.compress_weights(model)
            if plan.precision == "int8":
                widths.update(entry["int8"]["input_widths"])
            ov.save_model(model, str(stage / ir_name), compress_to_fp16=False)
            info["graphs"][ir_name] = entry
        if plan.precision == "int8":
            dynamic = "int8 per token and group of input channels, at run time"
            info["int8"] = {"scheme": ir.STATIC_SCHEME if static else ir.SCHEME,
                            "weights": "int8, one scale per output channel (symmetric)",
                            "activations": (f"int8, one symmetric range per product input fixed at export (the largest "
                                            f"|x| over {len(plan.calib)} calibration pairs' tokens); the products fed "
                                            f"by an activation function: {dynamic}") if static else dynamic,
                            "group_size": ir.group_size(sorted(widths))}
            if static:
                info["int8"]["calibration_pairs"] = len(plan.calib)
            ir.write_settings(stage, info["int8"])
        for f in Path(onnx.path).iterdir():  # tokenizer and config
            if f.is_file() and not f.name.endswith((".onnx", ".onnx.data", ".data")) and f.name != "manifest.json":
                shutil.copy2(f, stage / f.name)
        plan.say(f"  OpenVINO IR ({ov.__version__}) from {', '.join(s for s, _ in _graphs(plan.kind))}"
                 + (f", int8 weights ({'calibrated activation ranges, ' if static else ''}activation group "
                    f"{info['int8']['group_size']})" if "int8" in info else ""))
        return info

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        from breaknli_fast.backends.openvino import engine
        from breaknli_fast.export import validate as val
        from breaknli_fast.export.validate_t5 import t5_figures

        opts = engine.OvOptions(max_length=plan.max_length, label_map=plan.label_map,
                                max_input_length=plan.max_length)
        exported = None
        pairs = plan.val_pairs
        if plan.kind == "seq-cls":
            clf = engine.open_classifier(folder, plan.src, plan.precision, opts, exported)
            figs = val.classifier_figures(clf, plan.src, pairs, plan.max_length, plan.label_map)
            figs["batch_invariance"] = classifier_invariance(clf, pairs[:INVARIANCE_PAIRS * 2])
        elif plan.kind == "mlm":
            filler = engine.open_mask_filler(folder, plan.src, plan.precision, opts, exported)
            figs = val.masked_lm_figures(filler, plan.src, pairs, plan.max_length)
            figs["batch_invariance"] = mask_filler_invariance(filler, val.masked_items(pairs[:INVARIANCE_PAIRS]))
        else:
            gen = engine.open_generator(folder, plan.src, plan.precision, opts, exported)
            figs = t5_figures(folder, plan.src, pairs, "cpu", plan.max_length, gen)
            figs["batch_invariance"] = generator_invariance(gen, val.generator_prompts(pairs, INVARIANCE_PAIRS))
        return figs

    def judge(self, plan: ExportPlan, figs: dict[str, Any]) -> None:
        """The shared tolerances, and batch invariance to the bit on this CPU."""
        inv = figs.get("batch_invariance") or {}
        if inv and not inv.get("invariant"):
            figs["tolerances"] = plan.tolerances
            figs["passed"] = False
            figs["failures"] = [f"not batch-invariant on this CPU ({inv.get('what')})"]
            raise ExportValidationError(
                f"{plan.model} openvino {plan.precision} is not batch-invariant on this CPU: {inv.get('what')}; "
                "a sample's answer would depend on its batch (use another engine or precision for this role)", figs)
        super().judge(plan, figs)


def calibration_feeds(folder: Path, pairs: Any, max_length: int, inputs: list[str]) -> list[dict[str, np.ndarray]]:
    """Batches of the calibration pairs as the classifier graph's inputs (padded to each batch's longest pair;
    :func:`~breaknli_fast.engines.stepgraph.graph_feeds` maps the encoding to the inputs, as the engine does)."""
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from breaknli_fast.engines.stepgraph import graph_feeds

    if not pairs:
        raise ExportError("static int8 needs calibration pairs (none were given)")
    tok = AutoTokenizer.from_pretrained(str(folder))
    metas = [SimpleNamespace(name=n) for n in inputs]
    batches = []
    for i in range(0, len(pairs), CALIBRATION_BATCH):
        chunk = pairs[i:i + CALIBRATION_BATCH]
        enc = tok([p for p, _ in chunk], [h for _, h in chunk], padding=True, truncation=True, max_length=max_length,
                  return_tensors="np")
        batches.append(graph_feeds(enc, metas))
    return batches


def classifier_invariance(clf: Any, pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """A classifier's logits for ``pairs`` in one call against each pair alone and the reversed call."""
    clf.clear_cache()
    together = np.asarray(clf.classify(pairs).logits, dtype=np.float64)
    clf.clear_cache()
    alone = np.concatenate([np.asarray(clf.classify([p]).logits, dtype=np.float64) for p in pairs])
    clf.clear_cache()
    rev = np.asarray(clf.classify(pairs[::-1]).logits, dtype=np.float64)[::-1]
    clf.clear_cache()
    diff = float(max(np.abs(alone - together).max(), np.abs(rev - together).max())) if pairs else 0.0
    return {"pairs": len(pairs), "max_abs_logit_diff": diff, "invariant": diff == 0.0,
            "what": f"{len(pairs)} pairs alone / reversed against one call: max |Δ logit| {diff:.3g}"}


def mask_filler_invariance(filler: Any, items: list[tuple[str, ...]]) -> dict[str, Any]:
    """A mask filler's suggestions for ``items`` in one call against each item alone."""
    def fills(batch: list[tuple[str, ...]]) -> list[Any]:
        filler.clear_cache()
        return [(f.words, f.logprobs.tolist()) for f in filler.fill_mask(batch, 10)]

    together = fills(items)
    alone = [fills([it])[0] for it in items]
    same = sum(a == t for a, t in zip(alone, together))
    return {"items": len(items), "identical": same, "invariant": same == len(items),
            "what": f"{len(items) - same} of {len(items)} masked items alone got other suggestions than in one call"}


def generator_invariance(gen: Any, prompts: list[str]) -> dict[str, Any]:
    """A generator's greedy tokens for ``prompts`` in one call against each prompt alone."""
    from breaknli_fast.engines.base import Decoding

    d = Decoding(strategy="greedy", max_new_tokens=12)
    seeds = list(range(len(prompts)))
    together = gen.generate_ids(prompts, 1, d, seeds)
    alone = [gen.generate_ids([p], 1, d, [s])[0] for p, s in zip(prompts, seeds)]
    same = sum(a == t for a, t in zip(alone, together))
    return {"prompts": len(prompts), "identical": same, "invariant": same == len(prompts),
            "what": f"{len(prompts) - same} of {len(prompts)} prompts alone got other greedy tokens than in one call"}
