"""Exporters: ONNX (fp32 / fp16 / int8) and TensorRT engines of the NLI classifiers and Flan-T5,
validated against the PyTorch fp32 reference and cached with a manifest (see docs/export.md). They build and
validate only; the runtimes that load the exports belong to the engines (``engines.ort_runtime``,
``engines.tensorrt_runtime``)."""

from breaknli_fast.export.api import EXPORT_OPTS, ExportOptions, ExportResult, export_model
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError

__all__ = ["EXPORT_OPTS", "ExportError", "ExportOptions", "ExportResult", "ExportValidationError",
           "UnsupportedModelError", "export_model"]
