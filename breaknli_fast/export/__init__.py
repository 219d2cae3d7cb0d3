"""What every export format shares (the cache, the lock, the manifest, the calibration and validation pairs, judging
against the torch fp32 reference: the steps of :class:`~breaknli_fast.export.exporter.Exporter`) and
:func:`export_model`, the one entry point (see docs/export.md). Each format's exporter is its backend's subclass of
``Exporter`` (``breaknli_fast.backends.<name>.exporter``), reached through the engine registry."""

from breaknli_fast.export.api import EXPORT_OPTS, ExportOptions, ExportResult, export_model
from breaknli_fast.export.errors import ExportError, ExportValidationError, UnsupportedModelError
from breaknli_fast.export.exporter import ExportPlan, Exporter, ExportRequest

__all__ = ["EXPORT_OPTS", "ExportError", "ExportOptions", "ExportPlan", "ExportRequest", "ExportResult",
           "ExportValidationError", "Exporter", "UnsupportedModelError", "export_model"]
