"""The options an engine that exports on first use passes through to :func:`breaknli_fast.export.api.export_model`
(:class:`ExportOptions`, nested in the ort and tensorrt backends' loader options), and what it gets back
(:class:`ExportResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable, Mapping

from breaknli_fast.export.errors import ExportError

VALIDATION_SIZE = 64
CALIBRATION_SIZE = 256


@dataclass
class ExportOptions:
    """The options of :func:`~breaknli_fast.export.api.export_model` that an engine which exports on first use
    passes through from its loader's options (the engine itself decides the model, format, precision, device,
    length and batch)."""

    cache_dir: str | Path | None = None  # the export cache (default: ~/.cache/breaknli-fast/exports)
    out_dir: str | Path | None = None  # export into this folder instead of the cache
    force: bool = False  # rebuild even when a cached export matches
    calibration_pairs: Iterable[Any] | None = None  # calibration / validation pairs (default: the embedded sample)
    calibration_size: int = CALIBRATION_SIZE
    validation_size: int = VALIDATION_SIZE
    tolerances: Mapping[str, Any] | None = None  # overrides of the validation tolerances
    validate: bool = True
    progress: bool = False  # engines export quietly; the export command shows progress
    # sequence classifiers: ONNX Runtime's transformer optimizer (attention / LayerNorm / GELU fusion) where it
    # keeps fp32 parity with the unfused graph; its own cache entry ("-fused")
    fuse: bool = False
    # int8 of a sequence classifier on the CPU: "dynamic" (the default: activation scales per batch tensor) or
    # "static" (scales fixed at export, so a pair's label does not depend on the pairs batched with it)
    quantization: str | None = None

    def __post_init__(self) -> None:
        for name in ("calibration_size", "validation_size"):  # 0 or fewer pairs: nothing to calibrate or judge on
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ExportError(f"{name} must be a whole number of pairs, at least 1 (got {v!r})")

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`~breaknli_fast.export.api.export_model`."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


# the option names of ExportOptions (the keys an engine's loader passes through to export_model)
EXPORT_OPTS = tuple(f.name for f in fields(ExportOptions))


@dataclass
class ExportResult:
    path: Path  # the export folder
    manifest: dict[str, Any]
    reused: bool = False  # True when a cached export was reused
    seconds: float = 0.0
    messages: list[str] = field(default_factory=list)

    @property
    def validation(self) -> dict[str, Any] | None:
        return self.manifest.get("validation")

    @property
    def kind(self) -> str:
        return str(self.manifest["kind"])

    @property
    def graphs(self) -> list[str]:
        return list(self.manifest.get("graphs") or {})
