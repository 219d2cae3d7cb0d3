"""The registry of measurements: name -> the class that implements it (imported when first asked for).

To add a measurement: write a :class:`~breaknli_fast.suite.base.Measurement` subclass in a module of its own and
declare it as an entry point of group ``breaknli_fast.measurements`` (``name = "package.module:Class"``) in its
package's metadata, as the built-in ones are in pyproject.toml (or call :func:`register` from your code or a
test). A result file's ``kind`` finds the measurement that reads it (:func:`payload_class`)."""

from __future__ import annotations

import importlib
from typing import Any

from breaknli_fast.errors import UserError, first_line

PACKAGE = "breaknli_fast.suite.measurements"
_MEASUREMENTS: dict[str, str] = {
    "bench": f"{PACKAGE}.bench:Bench",
    "loadgen": f"{PACKAGE}.loadgen:LoadGen",
    "run-loop": f"{PACKAGE}.run_loop:RunLoop",
    "busy": f"{PACKAGE}.busy:Busy",
    "real-shapes": f"{PACKAGE}.real_shapes:RealShapes",
    "classifier-shapes": f"{PACKAGE}.classifier_shapes:ClassifierShapes",
    "generation": f"{PACKAGE}.generation:Generation",
    "generation-batch": f"{PACKAGE}.generation_batch:GenerationBatch",
    "classifier-variants": f"{PACKAGE}.classifier_variants:ClassifierVariants",
    "ort-parity": f"{PACKAGE}.ort_parity:OrtParity",
    "baselines": f"{PACKAGE}.baselines:Baselines",
    "merge": f"{PACKAGE}.merge:Merge",
    "ray": f"{PACKAGE}.ray:Ray",
    "study": f"{PACKAGE}.study:Study",
    "gpu-check": f"{PACKAGE}.gpu_check:GpuCheck",
    "gpu-bounds": f"{PACKAGE}.gpu_bounds:GpuBounds",
    "compare-runs": f"{PACKAGE}.compare_runs:CompareRuns",
    "synthetic-baselines": f"{PACKAGE}.synthetic_baselines:SyntheticBaselines",
}

ENTRY_POINTS = "breaknli_fast.measurements"  # the entry-point group a measurement package joins by
_PLUGINS_READ = False


class UnknownMeasurement(UserError):
    """A measurement name that is not registered."""


class BrokenMeasurement(UserError):
    """A registered measurement whose module does not import or lacks its class (a plugin with a bug): one line."""


def register(name: str, target: str) -> None:
    """Register ``"package.module:Class"`` under ``name``."""
    _MEASUREMENTS[name] = target


def _read_plugins() -> None:
    global _PLUGINS_READ
    if _PLUGINS_READ:
        return
    _PLUGINS_READ = True
    from breaknli_fast.envinfo import installed_entry_points

    for name, value in installed_entry_points(ENTRY_POINTS):
        _MEASUREMENTS.setdefault(name, value)


def rescan() -> None:
    """Read the entry points again (tests)."""
    global _PLUGINS_READ
    _PLUGINS_READ = False
    _read_plugins()


def names() -> list[str]:
    """The registered measurements, in registration order."""
    _read_plugins()
    return list(_MEASUREMENTS)


def measurement_class(name: str) -> Any:
    _read_plugins()
    if name not in _MEASUREMENTS:
        raise UnknownMeasurement(f"unknown measurement {name!r}; choose one of {', '.join(_MEASUREMENTS)}")
    module, _, cls = _MEASUREMENTS[name].partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except Exception as e:  # noqa: BLE001 - whatever the plugin's module raises
        raise BrokenMeasurement(f"the {name} measurement ({_MEASUREMENTS[name]}) does not import: "
                                f"{type(e).__name__}: {first_line(e)}") from e


def get_measurement(name: str) -> Any:
    """An instance of the measurement ``name``."""
    return measurement_class(name)()


def measurements() -> list[Any]:
    """An instance of every registered measurement that imports (a broken plugin is left out here; naming it says
    why)."""
    out = []
    for name in names():
        try:
            out.append(get_measurement(name))
        except BrokenMeasurement:
            continue
    return out


def payload_class(kind: str) -> type | None:
    """The payload type of result files of ``kind`` (None: no registered measurement writes that kind)."""
    for m in measurements():
        if m.kind == kind:
            return m.payload_class
    return None


def by_kind(kind: str) -> Any:
    """The measurement that writes ``kind``, or None."""
    return next((m for m in measurements() if m.kind == kind), None)
