"""Engine registry: name -> backend module. Backends import lazily, so ``torch`` works without onnxruntime or
tensorrt installed.

A backend is one module with ``load_classifier(model, precision, device, **opts)`` and
``load_generator(model, precision, device, **opts)`` (and ``load_mask_filler(...)`` for the masked-LM role,
which a backend may lack), returning engines of the contract of
:mod:`breaknli_fast.engines.base`, and optionally ``OPTIONS``: its typed options class (an
:class:`~breaknli_fast.engines.options.EngineOptions` subclass; the loaders build it from ``opts`` and refuse
unknown keys). Adding an engine is that module and one :func:`register` call (or one line in ``_ENGINES``).
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any, Mapping

from breaknli_fast.engines.base import (CLASSIFIER, GENERATOR, MASK_FILLER, ROLES, ClassifierBase, GeneratorBase, MaskFillerBase, as_classifier, as_generator, as_mask_filler)
from breaknli_fast.engines.options import EngineOptionError, EngineOptions
from breaknli_fast.errors import UserError

# engine name -> module path
_ENGINES: dict[str, str] = {
    "torch": "breaknli_fast.engines.torch_ref",
    "ort": "breaknli_fast.engines.ort", "tensorrt": "breaknli_fast.engines.tensorrt",
    "ct2": "breaknli_fast.engines.ct2",  # CTranslate2: the generator only (the classifier on ort / torch)
}

PRECISIONS = ("fp32", "fp16", "bf16", "int8")
AUTO = "auto"
# prefixes of an option meant for one role only (bench specs, EngineConfig.extra)
ROLE_PREFIXES = {"clf.": CLASSIFIER, "gen.": GENERATOR, "mlm.": MASK_FILLER}


class EngineUnavailable(UserError):
    """An engine whose libraries or hardware are missing (one-line message saying what to install)."""


def register(name: str, module: str) -> None:
    _ENGINES[name] = module


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
    try:
        return all(importlib.util.find_spec(m) is not None for m in modules)
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


def _module(engine: str) -> Any:
    if engine not in _ENGINES:
        raise EngineUnavailable(f"unknown engine {engine!r}; choose one of {', '.join(_ENGINES)}")
    return importlib.import_module(_ENGINES[engine])


def options_class(engine: str) -> type[EngineOptions] | None:
    """The typed options class of ``engine``'s loaders (``None`` for a backend that declares none)."""
    return getattr(_module(engine), "OPTIONS", None)


def role_options(engine: str, role: str, opts: Mapping[str, Any]) -> dict[str, Any]:
    """The options of ``engine``'s ``role`` loader from options meant for any role: ``clf.key`` / ``gen.key`` /
    ``mlm.key`` go to that role only; a plain key goes to each role whose loader takes it (to every role for a
    backend without an options class). A plain key that no role takes raises the one-line
    :class:`~breaknli_fast.engines.options.EngineOptionError`; prefixed keys are checked by the loaders."""
    cls = options_class(engine)
    out: dict[str, Any] = {}
    for key, value in opts.items():
        prefix = next((p for p in ROLE_PREFIXES if key.startswith(p)), None)
        if prefix is not None:
            if ROLE_PREFIXES[prefix] == role:
                out[key[len(prefix):]] = value
        elif cls is None or key in cls.keys(role):
            out[key] = value
        elif not any(key in cls.keys(r) for r in ROLES):
            valid = sorted({k for r in ROLES for k in cls.keys(r)})
            raise EngineOptionError(f"unknown {engine} option {key!r}; valid: {', '.join(valid)}")
    return out


def split_options(engine: str, opts: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(classifier options, generator options) of ``engine`` (:func:`role_options` of both roles)."""
    return role_options(engine, CLASSIFIER, opts), role_options(engine, GENERATOR, opts)


def load_classifier(engine: str, model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> ClassifierBase:
    """``engine``'s classifier of ``model``, with every member of the contract (defaults where the backend
    implements only the :class:`~breaknli_fast.engines.base.Classifier` protocol)."""
    return as_classifier(_module(engine).load_classifier(model, precision=precision, device=device, **opts))


def load_generator(engine: str, model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> GeneratorBase:
    """``engine``'s generator of ``model``, with every member of the contract (defaults where the backend
    implements only the :class:`~breaknli_fast.engines.base.Generator` protocol)."""
    return as_generator(_module(engine).load_generator(model, precision=precision, device=device, **opts))


def load_mask_filler(engine: str, model: str, precision: str = "fp32", device: str = "cpu",
                     **opts: Any) -> MaskFillerBase:
    """``engine``'s mask filler (masked language model) of ``model``, with every member of the contract; a
    backend without the role raises :class:`EngineUnavailable`."""
    module = _module(engine)
    if not hasattr(module, "load_mask_filler"):
        raise EngineUnavailable(f"the {engine} engine has no masked-LM (mlm) role; use torch or ort")
    return as_mask_filler(module.load_mask_filler(model, precision=precision, device=device, **opts))
