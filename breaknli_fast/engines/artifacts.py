"""What an engine that builds its model on first use (ort, tensorrt) asks of the exporters, without importing them.

The exporters (:mod:`breaknli_fast.export`) sit above the engines: they validate their graphs on the engines'
runtimes. An engine asks for an exported model through :func:`build` with :class:`ExportOptions` and gets an
:class:`ExportResult`; the exporters provide the builder when they are imported (``breaknli_fast.export.api``
calls :func:`provide_builder`), which the study's loading (:mod:`breaknli_fast.study.loading`) and every command
do. A failure to build is an :class:`ExportError`, on which ``--engine auto`` falls back to torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from breaknli_fast.errors import UserError


class ExportError(UserError):
    """An export that cannot be made (bad options, exporter failure, an export that fails validation, ...)."""


VALIDATION_SIZE = 64
CALIBRATION_SIZE = 256

@dataclass
class ExportOptions:
    """The options of :func:`export_model` that an engine which exports on first use passes through from its
    loader's options (the engine itself decides the model, format, precision, device, length and batch)."""

    cache_dir: str | Path | None = None  # the export cache (default: ~/.cache/breaknli_fast)
    out_dir: str | Path | None = None  # export into this folder instead of the cache
    force: bool = False  # rebuild even when a cached export matches
    calibration_pairs: Iterable[Any] | None = None  # calibration / validation pairs (default: the embedded sample)
    calibration_size: int = CALIBRATION_SIZE
    validation_size: int = VALIDATION_SIZE
    tolerances: Mapping[str, Any] | None = None  # overrides of the validation tolerances
    validate: bool = True
    progress: bool = False  # engines export quietly; the export command shows progress
    # sequence classifiers: ONNX Runtime's transformer optimizer (attention / LayerNorm / GELU fusion) where it
    # keeps fp32 parity with the unfused graph (export.onnx.fuse_transformer); its own cache entry ("-fused")
    fuse: bool = False
    # int8 of a sequence classifier on the CPU: "dynamic" (the default: activation scales per batch tensor) or
    # "static" (scales fixed at export, so a pair's label does not depend on the pairs batched with it)
    quantization: str | None = None

    def __post_init__(self) -> None:
        for name in ("calibration_size", "validation_size"):  # 0 or fewer pairs: a numpy error deep in validation
            if int(getattr(self, name)) < 1:
                raise ExportError(f"{name} must be at least 1 pair, not {getattr(self, name)}")

    def kwargs(self) -> dict[str, Any]:
        """Keyword arguments of :func:`export_model`."""
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


_builder: Callable[..., ExportResult] | None = None


def provide_builder(builder: Callable[..., ExportResult]) -> None:
    """Set the function that builds exports (``export_model(model, format=, precision=, device=, max_length=,
    task=, **ExportOptions)``)."""
    global _builder
    _builder = builder


def build(model: str, **kwargs: Any) -> ExportResult:
    """The export of ``model`` (built, or reused from the cache) by the provided builder."""
    if _builder is None:
        raise ExportError("this engine builds its model with breaknli_fast.export, which is not loaded: import "
                          "breaknli_fast.export (breaknli_fast.study and the command line do)")
    return _builder(model, **kwargs)
