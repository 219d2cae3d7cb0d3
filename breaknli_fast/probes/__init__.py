"""The registry of probes: name -> the class that implements it (imported when first asked for).

To add a probe: write a :class:`~breaknli_fast.probes.base.Probe` subclass in a module of its own and declare it as
an entry point of group ``breaknli_fast.probes`` (``name = "package.module:Class"``) in its package's metadata, as the
built-in ones are in pyproject.toml (or call :func:`register` from your code or a test)."""

from __future__ import annotations

import importlib
from typing import Any

from breaknli_fast.errors import UserError, first_line

_PROBES: dict[str, str] = {
    "breaknli": "breaknli_fast.probes.breaknli:BreakNLIProbe",
    "accuracy": "breaknli_fast.probes.accuracy:AccuracyProbe",
    "permutation": "breaknli_fast.probes.permutation:PermutationProbe",
    "merge": "breaknli_fast.probes.merge:MergeProbe",
}


class UnknownProbe(UserError):
    """A probe name that is not registered."""


ENTRY_POINTS = "breaknli_fast.probes"  # the entry-point group a probe package joins by ("name = module:Class")
_PLUGINS_READ = False


def register(name: str, target: str) -> None:
    """Register ``"package.module:Class"`` under ``name``."""
    _PROBES[name] = target


def _read_plugins() -> None:
    """The probes installed packages declare (entry points of group :data:`ENTRY_POINTS`), read once."""
    global _PLUGINS_READ
    if _PLUGINS_READ:
        return
    _PLUGINS_READ = True
    from breaknli_fast.envinfo import installed_entry_points

    for name, value in installed_entry_points(ENTRY_POINTS):
        _PROBES.setdefault(name, value)


def rescan() -> None:
    """Read the entry points again (tests)."""
    global _PLUGINS_READ
    _PLUGINS_READ = False
    _read_plugins()


def probe_names() -> list[str]:
    """The registered probes, in registration order (the command line builds their options and lists them)."""
    _read_plugins()
    return list(_PROBES)


class BrokenProbe(UserError):
    """A registered probe whose module does not import or lacks its class (a plugin with a bug): one line; the
    commands list and offer the other probes."""


def probe_class(name: str) -> Any:
    _read_plugins()
    if name not in _PROBES:
        raise UnknownProbe(f"unknown probe {name!r}; choose one of {', '.join(_PROBES)}")
    module, _, cls = _PROBES[name].partition(":")
    try:
        return getattr(importlib.import_module(module), cls)
    except Exception as e:  # noqa: BLE001 - whatever the plugin's module raises
        raise BrokenProbe(f"the {name} probe ({_PROBES[name]}) does not import: {type(e).__name__}: "
                          f"{first_line(e)}") from e


def broken_probes() -> dict[str, str]:
    """name -> the one-line reason, for every registered probe that does not import."""
    out = {}
    for name in probe_names():
        try:
            probe_class(name)
        except BrokenProbe as e:
            out[name] = str(e)
    return out


def usable_probe_names() -> list[str]:
    """The registered probes whose class imports (the command line builds their options); a broken one is left
    out here, and ``--probe`` with its name says why in one line."""
    out = []
    for name in probe_names():
        try:
            probe_class(name)
        except BrokenProbe:
            continue
        out.append(name)
    return out


def get_probe(name: str, config: Any = None) -> Any:
    """An instance of the probe ``name`` with its ``config`` (the probe's own config object; None: defaults)."""
    cls = probe_class(name)
    return cls(config) if config is not None else cls()
