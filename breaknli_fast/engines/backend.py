"""What a backend supports, declared once: :class:`Backend`.

A backend is one package under ``breaknli_fast/backends/`` (or anywhere, for a plugin): its loaders, its runtime,
its exporter and, in its ``__init__``, one ``BACKEND = Backend(...)``. The registry (:mod:`.registry`) reads that
declaration and nothing else to know the backend's roles, precisions per device, options class, libraries, export
format and whether ``--engine auto`` may pick it; every check of a precision, a role or a device goes through
:meth:`Backend.check`, so a backend says what it supports in one place.
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass, field
from typing import Any, Mapping

from breaknli_fast.engines.base import ROLES
from breaknli_fast.engines.model_info import ModelLoadError
from breaknli_fast.errors import UserError

DEVICE_KINDS = ("cpu", "cuda")


class EngineUnavailable(UserError):
    """An engine whose libraries or hardware are missing, or a role it does not have (one line saying what to do)."""


class PrecisionError(ModelLoadError, ValueError):
    """A precision, device or role that a backend does not run (one line naming what it does run)."""


def device_kind(device: str) -> str:
    """``cpu`` or ``cuda`` of a device string (``cuda:1`` -> ``cuda``); anything else is refused in one line."""
    kind, _, index = str(device).partition(":")
    if kind not in DEVICE_KINDS or (index and not index.isdigit()) or (kind == "cpu" and index):
        raise PrecisionError(f"unknown device {device!r}; use cpu or cuda[:N]")
    return kind


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent package missing or broken
        return False


@dataclass(frozen=True)
class Backend:
    """One backend's declaration.

    ``precisions``: role -> device kind -> the precisions its loaders run there (a role missing from the mapping
    is not supported; ``missing_roles`` may say why, in one line). ``loaders``: the module with
    ``load_classifier`` / ``load_generator`` / ``load_mask_filler`` (only those of its roles). ``options``:
    ``"module:Class"`` of its typed loader options (an :class:`~breaknli_fast.engines.options.EngineOptions`),
    or None. ``requires``: modules that must be importable (``install`` says how to get them). ``exporter``:
    ``"module:Class"`` of its :class:`~breaknli_fast.export.exporter.Exporter` subclass, which builds and judges
    the backend's exports of ``formats`` (``export_model`` reaches it through the registry). ``auto``: the precisions at which ``--engine auto`` picks this backend on the CPU (empty: never), for the roles
    ``auto_roles`` (empty: every role it runs).
    ``hf_models``: its models are Hugging Face model folders / hub ids, checked from their config before anything
    loads (``check_models``); a backend of other models says False and resolves its names itself. ``delegates``:
    role -> engine (``auto`` allowed) for a role it does not run, which then goes to that engine where this one is
    named for every role (``--engine ct2``: the classifier on ``auto``'s choice); no code of its own borrows."""

    name: str
    loaders: str
    precisions: Mapping[str, Mapping[str, tuple[str, ...]]]
    options: str | None = None
    requires: tuple[str, ...] = ()
    install: str = ""
    exporter: str | None = None
    formats: tuple[str, ...] = ()
    auto: tuple[str, ...] = ()
    # the roles for which --engine auto picks it at those precisions (empty: every role it runs)
    auto_roles: tuple[str, ...] = ()
    missing_roles: Mapping[str, str] = field(default_factory=dict)
    hf_models: bool = True
    delegates: Mapping[str, str] = field(default_factory=dict)
    # "module:function" (precision, device) -> None, or why this machine cannot run that precision (bf16 without
    # AVX-512 BF16 or AMX, say): asked by check() before anything loads
    gate: str | None = None
    # "module:function" (precision, device) -> None, or why --engine auto does not pick it on this machine at that
    # precision though it runs there (an int8 known to depend on the batch on this CPU's kernels, say)
    auto_gate: str | None = None
    # device kinds it offers that no machine of this project has run it on, "kind:precision" for one precision
    # there ("cuda:fp8"), or "kind:precision:role" for one role at it ("cuda:fp8:generator"): said "not verified on
    # a GPU" wherever it is offered (bench notes, help), and no figure is claimed
    unverified: tuple[str, ...] = ()

    def is_unverified(self, kind: str, precision: str | None = None, role: str | None = None) -> bool:
        """Whether this backend on device kind ``kind`` (at ``precision``, for ``role``, where given) is declared
        unverified."""
        return kind in self.unverified or (precision is not None and (
            f"{kind}:{precision}" in self.unverified
            or (role is not None and f"{kind}:{precision}:{role}" in self.unverified)))

    @property
    def roles(self) -> tuple[str, ...]:
        return tuple(r for r in ROLES if r in self.precisions)

    def all_precisions(self) -> tuple[str, ...]:
        seen: list[str] = []
        for per_device in self.precisions.values():
            for precs in per_device.values():
                seen += [p for p in precs if p not in seen]
        return tuple(seen)

    def installed(self) -> bool:
        return all(_installed(m) for m in self.requires)

    def require(self) -> None:
        """One line naming what to install when a library this backend needs is missing."""
        missing = [m for m in self.requires if not _installed(m)]
        if missing:
            raise EngineUnavailable(f"the {self.name} engine needs {', '.join(missing)}: {self.install}")

    def check(self, role: str, precision: str, device: str = "cpu") -> None:
        """Refuse in one line a role, precision or device this backend does not run (before anything loads)."""
        kind = device_kind(device)
        if role not in self.precisions:
            raise EngineUnavailable(self.missing_roles.get(role) or f"the {self.name} engine has no {role} role")
        per_device = self.precisions[role]
        if kind not in per_device or not per_device[kind]:
            where = " or ".join(f"--device {d}" for d in per_device if per_device[d])
            raise PrecisionError(f"the {self.name} engine's {role} runs on {where} only")
        if precision not in per_device[kind]:
            raise PrecisionError(f"the {self.name} engine's {role} runs {_words(per_device[kind])} on {kind}, "
                                 f"not {precision!r}")
        if self.gate:
            why = _ask(self.gate, precision, device)
            if why:
                raise PrecisionError(f"the {self.name} engine's {role} at {precision}: {why}")

    def auto_picks(self, precision: str, device: str, role: str | None = None) -> bool:
        """Whether ``--engine auto`` picks this backend for ``role`` (None: for every role) at ``precision``."""
        if role is None:
            fits = not self.auto_roles
        else:
            fits = role in self.precisions and (not self.auto_roles or role in self.auto_roles)
        if not (device_kind(device) == "cpu" and precision in self.auto and fits and self.installed()):
            return False
        return self.auto_refusal(precision, device) is None

    def auto_refusal(self, precision: str, device: str) -> str | None:
        """Why ``--engine auto`` passes this backend over at ``precision`` on this machine (None: it does not)."""
        return _ask(self.auto_gate, precision, device) if self.auto_gate else None

    def options_class(self) -> Any:
        if self.options is None:
            return None
        module, _, name = self.options.partition(":")
        return getattr(importlib.import_module(module), name)


def _ask(gate: str, precision: str, device: str) -> str | None:
    """A gate's answer (``"module:function"`` (precision, device) -> None, or why not)."""
    module, _, fn = gate.partition(":")
    return getattr(importlib.import_module(module), fn)(precision, device)


def _words(items: tuple[str, ...]) -> str:
    items = tuple(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]
