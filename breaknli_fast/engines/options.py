"""Typed loader options: each backend declares the keyword options its loaders take as an :class:`EngineOptions`
subclass beside its implementation; :meth:`EngineOptions.build` turns keyword options into it and refuses unknown
keys with one line naming the valid ones."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Mapping, TypeVar

from breaknli_fast.engines.base import CLASSIFIER, MASK_FILLER, ROLES
from breaknli_fast.errors import UserError
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT


class EngineOptionError(UserError, ValueError):
    """An option that an engine's loader does not take (one line naming those it takes)."""


def option(default: Any = None, *, roles: tuple[str, ...] = ROLES) -> Any:
    """A field of an :class:`EngineOptions` subclass, taken by the loaders of ``roles``."""
    return field(default=default, metadata={"roles": roles})


def nested_options(cls: type, *, roles: tuple[str, ...] = ROLES) -> Any:
    """A field holding another options dataclass whose fields are given flat, by their own names (the export
    options of the engines that export on first use)."""
    return field(default_factory=cls, metadata={"roles": roles, "nested": cls})


_O = TypeVar("_O", bound="EngineOptions")


@dataclass
class EngineOptions:
    """The options of a backend's ``load_classifier`` / ``load_generator``, typed.

    The fields here are those every engine takes, since the study passes them to whichever engine runs
    (:class:`~breaknli_fast.study.loading.EngineConfig`); each backend subclasses this beside its
    implementation with its own fields and sets :attr:`engine`. A field's metadata says which roles' loaders
    take it; :meth:`build` turns a loader's keyword options into the dataclass and refuses a key the role
    does not take."""

    engine: ClassVar[str] = "engine"

    threads: int | None = option()  # CPU threads in all (the engines split them into workers)
    workers: int | str | None = option()  # CPU batches side by side: a number, "auto" or None (the engine's default)
    label_map: Mapping[str, str] | None = option(roles=(CLASSIFIER,))  # model label name -> canonical label
    max_length: int = option(256, roles=(CLASSIFIER, MASK_FILLER))  # tokens of a pair (capped at the model's own limit)
    token_budget: int = option(8192, roles=(CLASSIFIER, MASK_FILLER))  # padded tokens per batch
    max_batch: int | None = option(roles=(CLASSIFIER, MASK_FILLER))  # pairs per batch (None: the engine's choice)
    prompt: str = option(DEFAULT_NLI_PROMPT, roles=(CLASSIFIER,))  # text-to-text NLI models: the prompt's name
    method: str = option("score", roles=(CLASSIFIER,))  # text-to-text NLI models: score or generate

    @classmethod
    def keys(cls, role: str) -> list[str]:
        """The option names the ``role`` loader takes, in field order (a nested options class's by their own names)."""
        out: list[str] = []
        for f in fields(cls):
            if role in f.metadata.get("roles", ROLES):
                sub = f.metadata.get("nested")
                out.extend(g.name for g in fields(sub)) if sub is not None else out.append(f.name)
        return out

    @classmethod
    def build(cls: type[_O], role: str, opts: Mapping[str, Any]) -> _O:
        """The options of a ``role`` loader from its keyword options; a key it does not take raises
        :class:`EngineOptionError`."""
        valid = cls.keys(role)
        unknown = [k for k in opts if k not in valid]
        if unknown:
            raise EngineOptionError(f"unknown {cls.engine} {role} option{'s' if len(unknown) > 1 else ''} "
                                    f"{', '.join(map(repr, unknown))}; valid: {', '.join(valid) or 'none'}")
        kw: dict[str, Any] = {}
        for f in fields(cls):
            sub = f.metadata.get("nested")
            if sub is not None:
                names = {g.name for g in fields(sub)}
                kw[f.name] = sub(**{k: v for k, v in opts.items() if k in names})
            elif f.name in opts:
                kw[f.name] = opts[f.name]
        return cls(**kw)


def parse_flag(value: Any, error: type[Exception] = ValueError) -> bool:
    """A boolean option that may come from the command line as text (``step_graphs=false``)."""
    if isinstance(value, str):
        if value.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise error(f"expected true or false, not {value!r}")
        return value.lower() in ("1", "true", "yes")
    return bool(value)
