"""Engine registry: name -> (classifier loader, generator loader). Backends import lazily, so
``torch`` works without onnxruntime or tensorrt installed."""

from __future__ import annotations

import importlib
from typing import Any, Callable

from breaknli_fast.engines.base import Classifier, Generator
from breaknli_fast.errors import UserError

# engine name -> module path; each module provides load_classifier(model, precision, device, **opts)
# and load_generator(model, precision, device, **opts).
_ENGINES: dict[str, str] = {
    "torch": "breaknli_fast.engines.torch_ref",
    "ort": "breaknli_fast.engines.ort", "tensorrt": "breaknli_fast.engines.tensorrt",
}

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
AUTO = "auto"


class EngineUnavailable(UserError):
    """An engine whose libraries or hardware are missing (one-line message saying what to install)."""


def register(name: str, module: str) -> None:
    _ENGINES[name] = module


def unregister(name: str) -> None:
    _ENGINES.pop(name, None)


def engine_names() -> list[str]:
    return list(_ENGINES)


def resolve_engine(engine: str, precision: str = "fp32", device: str = "cpu") -> str:
    """The engine that ``auto`` stands for: ``ort`` on the CPU at fp32 or int8 when ONNX Runtime and optimum
    are installed (its fp32 gives the torch reference's labels and sampled candidates exactly, about twice as
    fast on 2 cores, and its one intra-op thread per worker does not spin when other processes share the
    cores: BENCHMARKS.md); ``torch`` otherwise. Any other name is returned as it is."""
    if engine != AUTO:
        return engine
    if device.split(":")[0] == "cpu" and precision in ("fp32", "int8") and _installed("onnxruntime", "optimum.onnxruntime"):
        return "ort"
    return "torch"


def _installed(*modules: str) -> bool:
    import importlib.util

    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def _module(engine: str) -> Any:
    if engine not in _ENGINES:
        raise EngineUnavailable(f"unknown engine {engine!r}; choose one of {', '.join(_ENGINES)}")
    return importlib.import_module(_ENGINES[engine])


def load_classifier(engine: str, model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> Classifier:
    fn: Callable[..., Classifier] = _module(engine).load_classifier
    return fn(model, precision=precision, device=device, **opts)


def load_generator(engine: str, model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> Generator:
    fn: Callable[..., Generator] = _module(engine).load_generator
    return fn(model, precision=precision, device=device, **opts)
