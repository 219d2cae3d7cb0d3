"""The ort backend's exporter (format ``onnx``), :class:`OrtExporter`, called by
:func:`breaknli_fast.export.api.export_model`: which recipe (:func:`variant`), building the graphs
(:meth:`OrtExporter.write_files`: :mod:`.onnx` for classifiers and masked LMs, :mod:`.t5` for Flan-T5,
:mod:`.quantize` for fp16 / int8) and measuring them against the torch fp32 reference (:meth:`OrtExporter.compare`:
through the engine contract, :mod:`breaknli_fast.export.validate`, plus :mod:`breaknli_fast.export.validate_t5` for a
T5's logits over the whole vocabulary).
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.backends.ort import onnx as ox
from breaknli_fast.backends.ort import quantize as qz
from breaknli_fast.backends.ort import t5
from breaknli_fast.backends.ort.runtime import STEP_FILES, classifier_feeds
from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.export import manifest as mf
from breaknli_fast.export import validate as val
from breaknli_fast.export.errors import UnsupportedModelError
from breaknli_fast.export.exporter import ExportPlan, Exporter

FORMAT = "onnx"
PRECISIONS = ("fp32", "fp16", "int8")
LIBRARIES = ("torch", "transformers", "onnxruntime", "onnx")
QUANTIZATIONS = ("dynamic", "static", "dynamic-batch")
STATIC = ("int8-qdq", "int8-static")  # the variants calibrated on pairs
Pair = tuple[str, str]


def variant(kind: str, precision: str, device: str, fuse: bool = False, quantization: str | None = None) -> str:
    """The recipe of an export: ``fp32``, ``fp16``, ``int8-dynamic`` (activations per row) / ``int8-static`` /
    ``int8-dynamic-batch`` (activations per batch tensor: answers depend on the batch) on the CPU, ``int8-qdq``
    (CUDA), with ``-fused`` for a classifier through ONNX Runtime's transformer optimizer."""
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UnsupportedModelError(f"quantization={quantization!r}: use dynamic, static or dynamic-batch")
    if fuse and kind == "seq-cls" and device == "cpu":
        if quantization == "static" and precision == "int8":
            raise UnsupportedModelError("fuse=true with quantization=static is not supported: use one of them")
        return variant(kind, precision, device, quantization=quantization) + "-fused"
    if precision != "int8":
        if quantization is not None:
            raise UnsupportedModelError(f"quantization={quantization} is an int8 setting, not one of {precision}")
        return precision
    if device == "cpu":
        if quantization != "static":
            return "int8-dynamic-batch" if quantization == "dynamic-batch" else "int8-dynamic"
        if kind != "seq-cls":
            raise UnsupportedModelError(
                f"static int8 on the CPU is for sequence classifiers, not {kind} models (give it to the classifier "
                "alone: clf.quantization=static)")
        return "int8-static"
    if quantization in ("dynamic", "dynamic-batch"):
        raise UnsupportedModelError(f"int8 on the GPU is static (QDQ): quantization={quantization} is for the CPU")
    if kind == "mlm":
        raise UnsupportedModelError("int8 masked LMs on the GPU are not supported (no static calibration of the "
                                    "mask positions): use fp16 on cuda, or int8 on the CPU")
    if kind == "seq2seq":
        raise UnsupportedModelError(
            "int8 for text-to-text models on the GPU is not supported (static QDQ calibration of the decoder step "
            "is not implemented): use fp16 on cuda, or int8 on the CPU")
    return "int8-qdq"


def _calibration_feeds(folder: Path, graph: str, pairs: Sequence[Pair], max_length: int,
                       batch: int = 16) -> list[dict[str, Any]]:
    import onnx
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    inputs = onnx.load(str(folder / graph), load_external_data=False).graph.input
    return [classifier_feeds(tok, pairs[i:i + batch], inputs, max_length) for i in range(0, len(pairs), batch)]


def fp32_graphs(src: str, kind: str, out: Path, val_pairs: Sequence[Pair], max_length: int, fuse: bool,
                say: Any) -> tuple[dict[str, Any], list[str]]:
    """The fp32 graphs of ``src`` in ``out`` with its tokenizer and config: (what the manifest records, the
    graph files)."""
    t0 = time.perf_counter()
    if kind == "seq-cls":
        info = ox.export_classifier(src, out, val_pairs, max_length=max_length)
        graphs = [ox.CLASSIFIER_FILE]
        if fuse:
            from transformers import AutoConfig

            t1 = time.perf_counter()
            feeds = _calibration_feeds(out, ox.CLASSIFIER_FILE, val_pairs, max_length)
            info["fusion"] = ox.fuse_transformer(out / ox.CLASSIFIER_FILE, AutoConfig.from_pretrained(str(out)), feeds)
            say(f"  transformer fusion: {info['fusion'].get('fused') or info['fusion'].get('reason')} "
                f"in {time.perf_counter() - t1:.1f}s")
    elif kind == "mlm":
        from transformers import AutoTokenizer

        mask = AutoTokenizer.from_pretrained(src).mask_token
        items = [tuple(x.replace(val.MASK, mask or "") for x in it) for it in val.masked_items(val_pairs[:2])]
        info = ox.export_masked_lm(src, out, items, max_length=max_length)
        graphs = [ox.MLM_FILE]
    else:
        info = t5.export_t5(src, out)
        graphs = list(STEP_FILES)
    say(f"  fp32 ONNX ({info['exporter']}, opset {info['opset']}) in {time.perf_counter() - t0:.1f}s")
    return info, graphs


def convert(info: dict[str, Any], kind: str, precision: str, variant_name: str, fp32_dir: Path, stage: Path,
            graphs: list[str], calib: Sequence[Pair], max_length: int, fuse: bool, say: Any) -> None:
    """fp16 / int8 graphs of ``fp32_dir`` in ``stage`` (with the side files), recorded in ``info``."""
    qz.copy_side_files(fp32_dir, stage)
    t0 = time.perf_counter()
    if precision == "fp16":
        recipe = "t5" if kind == "seq2seq" else None
        stats = {g: qz.to_fp16(fp32_dir / g, stage / g, keep_fp32=recipe) for g in graphs}
        info["fp16"] = {"converter": "onnxruntime.transformers.float16 (keep_io_types=True)",
                        "kept_fp32": "T5 wo / residual adds / RMS norms" if recipe else "none", "graphs": stats}
    elif variant_name.startswith("int8-dynamic"):
        per_row = not variant_name.startswith("int8-dynamic-batch")
        stats = {g: qz.int8_dynamic(fp32_dir / g, stage / g, fused=fuse and kind == "seq-cls", per_row=per_row)
                 for g in graphs}
        info["quantization"] = {"scheme": "dynamic" if per_row else "dynamic-batch",
                                "activations": "per row" if per_row else "per batch tensor", "graphs": stats}
    elif variant_name == "int8-static":
        feeds = _calibration_feeds(fp32_dir, graphs[0], calib, max_length)
        stats = {g: qz.int8_static_cpu(fp32_dir / g, stage / g, feeds) for g in graphs}
        info["quantization"] = {"scheme": "static", "calibration_pairs": len(calib),
                                "calibration_source": "sample-tuning (held-out tuning slice)", "graphs": stats}
    else:
        feeds = _calibration_feeds(fp32_dir, graphs[0], calib, max_length)
        stats = {g: qz.int8_static_qdq(fp32_dir / g, stage / g, feeds) for g in graphs}
        info["quantization"] = {"scheme": "static-qdq", "calibration_pairs": len(calib), "graphs": stats}
    say(f"  {variant_name} conversion in {time.perf_counter() - t0:.1f}s")
    info["graphs"] = {g: ox.graph_io(stage / g) for g in graphs}


class OrtExporter(Exporter):
    """ONNX graphs at fp32, fp16 and int8 (dynamic or static on the CPU, static QDQ on CUDA)."""

    FORMAT = FORMAT
    PRECISIONS = PRECISIONS
    LIBRARIES = LIBRARIES

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        return variant(kind, precision, device, fuse, quantization)

    def calibrated(self, variant_name: str) -> bool:
        return variant_name in STATIC

    def require(self, kind: str) -> None:
        ox.require_export_libs()

    def key_parts(self, plan: ExportPlan) -> dict[str, Any]:
        key: dict[str, Any] = {"libraries": mf.library_versions(LIBRARIES)}
        if plan.kind == "seq2seq":
            key["t5_graphs"] = t5.STEP_GRAPHS_VERSION
        elif plan.kind == "seq-cls":
            key["classifier_graph"] = ox.CLASSIFIER_GRAPH_VERSION
        if plan.variant.startswith("int8-dynamic") and not plan.variant.startswith("int8-dynamic-batch"):
            key["int8_rows"] = qz.ROW_SCHEME
        return key

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        """The fp32 graphs, converted to fp16 / int8 from a temporary fp32 folder beside ``stage``."""
        fuse = plan.variant.endswith("-fused")
        if plan.precision == "fp32":
            info, _ = fp32_graphs(plan.src, plan.kind, stage, plan.val_pairs, plan.max_length, fuse, plan.say)
            return info
        with tempfile.TemporaryDirectory(dir=stage.parent, prefix=f".{stage.name}.fp32-") as tmp:
            fp32_dir = Path(tmp)
            info, graphs = fp32_graphs(plan.src, plan.kind, fp32_dir, plan.val_pairs, plan.max_length, fuse, plan.say)
            fuse = bool((info.get("fusion") or {}).get("applied"))
            convert(info, plan.kind, plan.precision, plan.variant, fp32_dir, stage, graphs, plan.calib,
                    plan.max_length, fuse, plan.say)
        return info

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        """The export's figures against the torch fp32 reference, on the target device where this machine runs it
        (else on the CPU, recorded)."""
        from breaknli_fast.backends.ort import engine
        from breaknli_fast.export.validate_t5 import t5_figures

        kind, src, pairs, max_length, label_map = plan.kind, plan.src, plan.val_pairs, plan.max_length, plan.label_map

        def run(dev: str) -> dict[str, Any]:
            opts = engine.OrtOptions(max_length=max_length, label_map=label_map, max_input_length=max_length)
            if kind == "seq-cls":
                clf = engine.open_classifier(folder, src, plan.precision, dev, opts)
                return val.classifier_figures(clf, src, pairs, max_length, label_map, device=dev)
            if kind == "mlm":
                return val.masked_lm_figures(engine.open_mask_filler(folder, src, plan.precision, dev, opts), src,
                                             pairs, max_length, device=dev)
            return t5_figures(folder, src, pairs, dev, max_length,
                              engine.open_generator(folder, src, plan.precision, dev, opts))

        return val.on_device(run, plan.device, EngineUnavailable)
