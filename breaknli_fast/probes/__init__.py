"""The registry of probes: name -> the class that implements it (imported when first asked for).

To add a probe: write a :class:`~breaknli_fast.probes.base.Probe` subclass in a module of its own and add one
line here (or call :func:`register` from your code or a test)."""

from __future__ import annotations

import importlib
from typing import Any

from breaknli_fast.errors import UserError

_PROBES: dict[str, str] = {
    "breaknli": "breaknli_fast.probes.breaknli:BreakNLIProbe",
    "accuracy": "breaknli_fast.probes.accuracy:AccuracyProbe",
    "permutation": "breaknli_fast.probes.permutation:PermutationProbe",
    "merge": "breaknli_fast.probes.merge:MergeProbe",
}


class UnknownProbe(UserError):
    """A probe name that is not registered."""


def register(name: str, target: str) -> None:
    """Register ``"package.module:Class"`` under ``name``."""
    _PROBES[name] = target


def probe_names() -> list[str]:
    """The registered probes, in registration order (the command line builds their options and lists them)."""
    return list(_PROBES)


def probe_class(name: str) -> Any:
    if name not in _PROBES:
        raise UnknownProbe(f"unknown probe {name!r}; choose one of {', '.join(_PROBES)}")
    module, _, cls = _PROBES[name].partition(":")
    return getattr(importlib.import_module(module), cls)


def get_probe(name: str, config: Any = None) -> Any:
    """An instance of the probe ``name`` with its ``config`` (the probe's own config object; None: defaults)."""
    cls = probe_class(name)
    return cls(config) if config is not None else cls()
