"""Building TensorRT engines of the classifiers (TensorRT 10 Python API): ONNX graph -> serialized plan. The
plan is loaded and run by the tensorrt engine's runtime (:mod:`breaknli_fast.backends.tensorrt.runtime`).

Not yet run on a GPU (TensorRT for Hopper GPUs is not installable from the package index; docs/stack.md). This
module follows the TensorRT 10 API documentation (``Builder``, ``OnnxParser``,
``create_network(STRONGLY_TYPED)``, ``IBuilderConfig.set_memory_pool_limit``, optimization
profiles, timing caches); the test-suite only checks that it refuses cleanly without TensorRT.

Precisions follow current practice (TensorRT 10.1 deprecated implicit INT8 calibration and
TensorRT 11 removes the weakly typed FP16/INT8 builder flags):

* fp32: a weakly typed network with TF32 switched off (parity with PyTorch fp32);
* fp16: a *strongly typed* network built from the fp16 ONNX graph (the graph's own types decide,
  so the fp32 islands the converter kept stay fp32);
* int8: a strongly typed network built from the static symmetric QDQ ONNX graph (explicit
  quantization; calibrated on real premise/hypothesis pairs by ``quantize.int8_static_qdq``).

One optimization profile: batch 1..max_batch (opt = max_batch), length 1..max_length (never more
than the model's position table holds: ``engines.model_info.input_limit``), the
optimum length being the 90th percentile of the calibration pairs' token counts (rounded up to
a multiple of 8). A timing cache per GPU and TensorRT version is kept beside the export cache,
so later builds reuse kernel timings. tensorrt and torch are imported on use (TensorRT is optional).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines.model_info import input_limit
from breaknli_fast.backends.tensorrt.runtime import PLAN_FILE, require_tensorrt
from breaknli_fast.export.errors import ExportError, UnsupportedModelError
from breaknli_fast.export.exporter import ExportPlan, Exporter
from breaknli_fast.export.manifest import cache_root, slugify

WORKSPACE_GIB = 4


def shape_profile(lengths: Sequence[int], max_length: int, max_batch: int) -> dict[str, list[int]]:
    """min / opt / max (batch, length) from the data's token-length distribution."""
    lengths = sorted(int(x) for x in lengths) or [max_length]
    p90 = lengths[min(len(lengths) - 1, int(math.ceil(0.9 * len(lengths))) - 1)]
    opt_len = min(max_length, max(8, int(math.ceil(p90 / 8.0)) * 8))
    return {"min": [1, 1], "opt": [max_batch, opt_len], "max": [max_batch, max_length]}


def _timing_cache_path(trt: Any) -> Path:
    import torch

    gpu = slugify(torch.cuda.get_device_name(0))
    return cache_root() / "tensorrt" / f"timing-{gpu}-trt{trt.__version__}.cache"


def build_engine(onnx_path: Path, plan_path: Path, precision: str, profile: dict[str, list[int]],
                 workspace_gib: int = WORKSPACE_GIB) -> dict[str, Any]:
    """Parse ``onnx_path``, build and serialize a TensorRT engine to ``plan_path``."""
    trt = require_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    strongly_typed = precision in ("fp16", "int8")
    if strongly_typed:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errs = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise ExportError(f"TensorRT could not parse {onnx_path.name}: {errs[0] if errs else 'unknown error'}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gib) << 30)
    if precision == "fp32":
        config.clear_flag(trt.BuilderFlag.TF32)
    prof = builder.create_optimization_profile()
    inputs = []
    for i in range(network.num_inputs):
        inp = network.get_input(i)
        inputs.append(inp.name)
        prof.set_shape(inp.name, tuple(profile["min"]), tuple(profile["opt"]), tuple(profile["max"]))
    config.add_optimization_profile(prof)
    cache_path = _timing_cache_path(trt)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache = config.create_timing_cache(cache_path.read_bytes() if cache_path.exists() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise ExportError(f"TensorRT could not build an engine from {onnx_path.name} (see the TensorRT log above)")
    plan_path.write_bytes(bytes(memoryview(plan)))
    tmp = cache_path.with_suffix(".tmp")
    tmp.write_bytes(bytes(memoryview(config.get_timing_cache().serialize())))
    tmp.replace(cache_path)
    import torch

    return {
        "plan": plan_path.name,
        "tensorrt": trt.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "strongly_typed": strongly_typed,
        "tf32": False if precision == "fp32" else None,
        "workspace_gib": workspace_gib,
        "profile": {"inputs": inputs, **profile},
        "timing_cache": str(cache_path),
    }


def build_for_export(folder: Path, graph: str, precision: str, pairs: Sequence[tuple[str, str]], max_length: int,
                     max_batch: int) -> dict[str, Any]:
    """Build ``folder/model.plan`` from ``folder/<graph>`` with a profile fitted to ``pairs``; its longest
    sequence is ``max_length``, capped at the model's own limit (its position table)."""
    from transformers import AutoConfig, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(folder))
    max_length = min(max_length, input_limit(AutoConfig.from_pretrained(str(folder)), tok)[0])
    enc = tok([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=max_length)
    lengths = [len(x) for x in enc["input_ids"]]
    profile = shape_profile(lengths, max_length, max_batch)
    info = build_engine(folder / graph, folder / PLAN_FILE, precision, profile)
    info["length_distribution"] = {"n": len(lengths), "min": min(lengths, default=0), "max": max(lengths, default=0),
                                   "median": float(np.median(lengths)) if lengths else 0.0}
    return info


# -- the exporter of export_model (format "tensorrt")

FORMAT = "tensorrt"
PRECISIONS = ("fp32", "fp16", "int8")
LIBRARIES = ("torch", "transformers", "onnxruntime", "onnx", "tensorrt")


class TensorRTExporter(Exporter):
    """A TensorRT plan of a sequence classifier, built on the ort backend's ONNX graph at its precision."""

    FORMAT = FORMAT
    PRECISIONS = PRECISIONS
    LIBRARIES = LIBRARIES

    def target_device(self, device: str) -> str:
        """A TensorRT engine is built for a GPU: ``cuda`` when the caller named the CPU."""
        return device if device.split(":")[0] == "cuda" else "cuda"

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        if kind == "mlm":
            raise UnsupportedModelError("TensorRT engines of masked LMs are not supported: use --engine ort")
        if kind == "seq2seq":
            raise UnsupportedModelError(
                "TensorRT engines for text-to-text models (Flan-T5) are not supported yet: use --engine ort --device "
                "cuda (optionally with the TensorRT execution provider)")
        if quantization == "dynamic":
            raise UnsupportedModelError("int8 on the GPU is static (QDQ): quantization=dynamic is for the CPU")
        return "int8-qdq" if precision == "int8" else precision

    def calibrated(self, variant_name: str) -> bool:
        return variant_name == "int8-qdq"

    def require(self, kind: str) -> None:
        from breaknli_fast.backends.ort.onnx import require_export_libs

        require_tensorrt()  # fail fast, one line, before any work
        require_export_libs()

    def key_parts(self, plan: ExportPlan) -> dict[str, Any]:
        """An engine is specific to the GPU model, the TensorRT version and its optimization profile."""
        import torch

        from breaknli_fast.export.manifest import library_versions

        return {"libraries": library_versions(LIBRARIES), "max_length": plan.max_length, "max_batch": plan.max_batch,
                "gpu": torch.cuda.get_device_name(0)}

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        """The ort backend's ONNX graph of the classifier at the plan's precision (fp16 conversion, or static
        symmetric QDQ for int8), then the TensorRT plan built from it."""
        import time

        from breaknli_fast.backends.ort.exporter import OrtExporter

        info = OrtExporter().write_files(plan, stage)
        t0 = time.perf_counter()
        info["tensorrt"] = build_for_export(stage, "model.onnx", plan.precision, plan.calib or plan.val_pairs,
                                            plan.max_length, plan.max_batch)
        plan.say(f"  TensorRT engine in {time.perf_counter() - t0:.1f}s")
        return info

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        """The plan's figures against the torch fp32 reference, through the classifier contract."""
        from breaknli_fast.backends.tensorrt.engine import TensorRTOptions, TrtClassifier
        from breaknli_fast.export.validate import classifier_figures

        clf = TrtClassifier(folder, plan.src, plan.precision, plan.device,
                            TensorRTOptions(max_length=plan.max_length, label_map=plan.label_map))
        figs = classifier_figures(clf, plan.src, plan.val_pairs, min(plan.max_length, clf.max_length),
                                  plan.label_map, device=plan.device, batch=max(1, min(16, clf.runner.max_batch)))
        figs["providers"] = [f"TensorRT {clf.runner.trt.__version__}"]
        return figs
