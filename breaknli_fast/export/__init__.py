"""Exporters: ONNX (fp32 / fp16 / int8) and TensorRT engines of the NLI classifiers and Flan-T5,
validated against the PyTorch fp32 reference and cached with a manifest (see docs/export.md)."""

from breaknli_fast.export.api import ExportResult, export_model
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError

__all__ = ["ExportError", "ExportResult", "ExportValidationError", "UnsupportedModelError", "export_model"]
