"""``export_model``: one export of any format, validated against the torch fp32 reference and cached.

The format is its backend's: the declared ``exporter="module:Class"`` of the backend whose ``formats`` holds it,
found through :mod:`breaknli_fast.engines.registry`, a subclass of
:class:`~breaknli_fast.export.exporter.Exporter`, whose steps (resolve, cache key, reuse, build, judge against
the reference, manifest) are shared and whose hooks are the format's (see there). A backend's loader calls
:func:`export_model` on first use; the ``export`` command calls it too. Nothing here imports a backend.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping

from breaknli_fast.export.errors import UnsupportedModelError
from breaknli_fast.export.exporter import ExportRequest, exporter, formats  # noqa: F401
from breaknli_fast.export.options import (CALIBRATION_SIZE, EXPORT_OPTS, VALIDATION_SIZE, ExportOptions,  # noqa: F401
                                          ExportResult)

TASKS = ("mlm",)  # roles exported only when asked (the kind of the other models follows from their config)


_timers: list[list[float]] = []


@contextlib.contextmanager
def timed() -> Iterator[list[float]]:
    """The seconds of every :func:`export_model` call made while the block runs (building an export, or checking
    a cached one): what an engine that exports on first use spends before it can load (bench's cold start)."""
    spent: list[float] = []
    _timers.append(spent)
    try:
        yield spent
    finally:
        _timers.remove(spent)


def export_model(model: str, *args: Any, **kwargs: Any) -> ExportResult:
    """:func:`build_export` (see there), timed for :func:`timed`."""
    t0 = time.perf_counter()
    try:
        return build_export(model, *args, **kwargs)
    finally:
        for spent in _timers:
            spent.append(time.perf_counter() - t0)


def build_export(
    model: str,
    format: str = "onnx",
    precision: str = "fp32",
    out_dir: str | Path | None = None,
    calibration_pairs: Iterable[Any] | None = None,
    calibration_size: int = CALIBRATION_SIZE,
    force: bool = False,
    validate: bool = True,
    tolerances: Mapping[str, Any] | None = None,
    progress: bool = True,
    device: str = "cpu",
    validation_size: int = VALIDATION_SIZE,
    cache_dir: str | Path | None = None,
    max_length: int = 256,
    max_batch: int = 64,
    task: str | None = None,
    fuse: bool = False,
    quantization: str | None = None,
    label_map: Mapping[str, str] | None = None,
) -> ExportResult:
    """Export ``model`` (a shipped mini-model name, a local folder or a hub id) in ``format`` and validate it.

    ``format="onnx"`` (the ort backend): fp32 graph(s), fp16 conversion, or int8 (dynamic quantization for
    ``device="cpu"``, static symmetric QDQ for ``cuda``). ``format="tensorrt"``: a serialized TensorRT engine
    (needs TensorRT 10 and a CUDA GPU). ``format="ct2"``: a CTranslate2 conversion of a T5 generator. The export
    folder (``out_dir``, else the cache) holds the graphs, the tokenizer and ``manifest.json``; an export whose
    manifest matches is reused unless ``force``. Validation compares with the torch fp32 reference on
    ``validation_size`` pairs and raises :class:`ExportValidationError` beyond ``tolerances``; ``label_map``
    names the classifier's labels where its config does not (as the engines' ``label_map`` option).

    ``max_length`` (tokens of a pair or prompt, for the traced inputs, the validation, the calibration and a
    TensorRT profile) is capped at the model's own limit
    (:func:`~breaknli_fast.engines.model_info.effective_max_length`).

    ``task="mlm"``: a masked language model for the mask-filler role (ONNX only), validated by top-1 and top-k
    agreement of the suggestions with torch fp32 on masked pairs.
    """
    request = ExportRequest(**locals())  # every argument, and the time it starts from
    if task is not None and task not in TASKS:
        raise UnsupportedModelError(f"unknown export task {task!r}; choose one of {', '.join(TASKS)}")
    return exporter(format).export(request)
