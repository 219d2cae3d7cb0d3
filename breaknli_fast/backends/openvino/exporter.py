"""The openvino backend's exporter (format ``openvino``), :class:`OpenVinoExporter`, called by
:func:`breaknli_fast.export.api.export_model`: the project's fp32 ONNX export of a sequence classifier
(``export_model(format="onnx")``, traced and cached there) converted to OpenVINO's IR by the runtime's ONNX
frontend (``Core.read_model``; not ``openvino.convert_model``, whose tool sends usage telemetry over the network by
default) and saved with fp32 weights (``compress_to_fp16=False``); the precision is the compile-time inference
hint, so the IR is the same for fp32 and bf16. Judged against the torch fp32 reference through the engine contract
at the export's precision (:func:`breaknli_fast.export.validate.classifier_figures`)."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from breaknli_fast.engines.cpu_features import BF16_FLAGS, cpu_flags, has_native_bf16
from breaknli_fast.export import manifest as mf
from breaknli_fast.export.errors import UnsupportedModelError
from breaknli_fast.export.exporter import ExportPlan, Exporter

FORMAT = "openvino"
PRECISIONS = ("fp32", "bf16")
LIBRARIES = ("openvino", "torch", "transformers", "onnxruntime", "onnx")
GRAPH = "model.xml"
IR_VERSION = "2"  # part of the cache key: a change of the conversion, a new export


def precision_gate(precision: str, device: str) -> str | None:
    """Why this CPU cannot run ``precision`` (None when it can): bf16 needs AVX-512 BF16 or AMX."""
    if precision == "bf16" and not has_native_bf16(cpu_flags()):
        return (f"this CPU has neither {' nor '.join(BF16_FLAGS)} (OpenVINO would emulate bf16, slower than fp32); "
                "use fp32 (`breaknli-fast env` lists the CPU flags)")
    return None


class OpenVinoExporter(Exporter):
    """OpenVINO IR of a sequence classifier (fp32 weights; the precision is the compile-time hint)."""

    FORMAT = FORMAT
    PRECISIONS = PRECISIONS
    LIBRARIES = LIBRARIES

    def default_tolerances(self, kind: str, precision: str) -> dict[str, float | None]:
        """fp32: the logits within 1e-4 of torch's and every label equal; bf16 (8 bits of mantissa): labels only,
        as int8's (the accuracy tiers of ``bench --probe accuracy`` judge it on real pairs)."""
        if precision == "fp32":
            return {"max_abs_logit": 1e-4, "min_agreement": 100.0, "max_nonfinite": 0}
        return {"max_abs_logit": None, "min_agreement": 95.0, "max_nonfinite": 0}

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        if kind != "seq-cls":
            raise UnsupportedModelError(f"the openvino engine exports sequence classifiers, not {kind} models")
        if fuse or quantization is not None:
            raise UnsupportedModelError("fuse / quantization are ONNX Runtime export settings, not OpenVINO's")
        if device != "cpu":
            raise UnsupportedModelError("the openvino engine runs on the CPU")
        return f"ir-{precision}"

    def require(self, kind: str) -> None:
        from breaknli_fast.backends.openvino import BACKEND

        BACKEND.require()

    def key_parts(self, plan: ExportPlan) -> dict[str, Any]:
        return {"libraries": mf.library_versions(LIBRARIES), "ir": IR_VERSION}

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        """The project's fp32 ONNX export (cached there), read by OpenVINO's ONNX frontend and saved as IR."""
        import openvino as ov

        from breaknli_fast.export.api import export_model

        # the intermediate ONNX graph is not judged on its own: the IR built from it is, at its precision (compare)
        onnx = export_model(plan.src, format="onnx", precision="fp32", device="cpu", max_length=plan.max_length,
                            progress=False, validate=False)
        graph = next(Path(onnx.path).glob("*.onnx"))
        # the runtime's own ONNX frontend: openvino.convert_model (the ovc tool) sends usage telemetry over the
        # network by default, and nothing here may reach the network
        model = ov.Core().read_model(str(graph))
        ov.save_model(model, str(stage / GRAPH), compress_to_fp16=False)
        for f in Path(onnx.path).iterdir():  # tokenizer and config
            if f.is_file() and not f.name.endswith((".onnx", ".onnx.data", ".data")) and f.name != "manifest.json":
                shutil.copy2(f, stage / f.name)
        plan.say(f"  OpenVINO IR ({ov.__version__}) from {graph.name}")
        return {"exporter": f"openvino.Core.read_model (ONNX frontend) {ov.__version__}",
                "onnx_export": str(onnx.path), "inputs": [p.get_any_name() for p in model.inputs]}

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        from breaknli_fast.backends.openvino.engine import OvClassifier, OvOptions
        from breaknli_fast.export.validate import classifier_figures

        clf = OvClassifier(folder, plan.src, plan.precision, OvOptions(max_length=plan.max_length,
                                                                       label_map=plan.label_map))
        return classifier_figures(clf, plan.src, plan.val_pairs, plan.max_length, plan.label_map)
