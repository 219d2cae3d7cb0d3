"""Options declared once, on a dataclass field: the command line, the Python API and their checks read the same
declaration.

A field made with :func:`option` carries a :class:`CliOption` (help, flag, bounds, help panel) in its metadata.
Three kinds of dataclass declare their options this way: a probe's config (``run --probe X`` / ``bench --probe
X``), :class:`breaknli_fast.study.options.RunOptions` (``run``) and :class:`breaknli_fast.bench.options.BenchOptions`
(``bench``). The command line builds its options from the fields (:mod:`breaknli_fast.cli_options`); a Python user
builds the same dataclass and gets the same checks (:meth:`Options.check_bounds`, each class's ``check``).
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from typing import Any, Callable, Iterator

from breaknli_fast.errors import UserError

CLI = "cli"  # the key of a field's metadata that makes it a command-line option


class _Unset:
    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()  # a CliOption's default when the field's default is the option's too


@dataclass(frozen=True)
class CliOption:
    """How a field appears on the command line.

    ``flag``: the long option (default ``--`` and the field's name with dashes), ``--x/--no-x`` for a switch pair;
    ``short``: a one-letter alias; ``cli_default``: the option's default when it is not the field's (e.g. ``both``
    for a tuple of modes); ``parse``: turns the option's value into the field's; ``type``: the option's value type
    when it is not the field's annotation; ``min`` / ``max``: bounds, checked as the command line is read and by
    :meth:`Options.check_bounds`; ``panel``: the help panel (a probe's options default to the probe's own);
    ``parser``: Typer's parser of the raw text (e.g. refusing an empty ``--out``); ``show_default``: whether the
    help shows the default (default: when there is one); ``why``: why ``max`` is the bound (the refusal says it:
    :meth:`Options.check_bounds` checks such a bound, not the command line's parser, whose message would not)."""

    help: str
    flag: str | None = None
    short: str | None = None
    cli_default: Any = UNSET
    parse: Callable[[Any], Any] | None = None
    type: Any = None
    min: float | None = None
    max: float | None = None
    metavar: str | None = None
    panel: str | None = None
    parser: Callable[[Any], Any] | None = None
    show_default: bool | None = None
    why: str | None = None  # why ``max`` is the bound: said in the one-line refusal (docs/limits.md)

    def flag_of(self, name: str) -> str:
        """The long option of the field ``name`` (its first form for a switch pair)."""
        return (self.flag or "--" + name.replace("_", "-")).split("/")[0]


def option(default: Any = MISSING, *, help: str, default_factory: Any = MISSING, **cli: Any) -> Any:
    """A dataclass field that is also a command-line option with ``help`` (``cli``: :class:`CliOption`'s fields)."""
    return field(default=default, default_factory=default_factory, metadata={CLI: CliOption(help=help, **cli)})


def options(default_factory: Callable[[], Any], **parts: CliOption) -> Any:
    """A config field holding a nested dataclass or a dict whose ``parts`` (its fields or keys) are each a
    command-line option; the option's default is the part's value in ``default_factory()``."""
    return field(default_factory=default_factory, metadata={CLI: parts})


def option_fields(cls: Any) -> Iterator[tuple[Any, CliOption]]:
    """The fields of the dataclass ``cls`` that are single options, with their declarations, in order."""
    for f in fields(cls):
        spec = f.metadata.get(CLI)
        if isinstance(spec, CliOption):
            yield f, spec


def field_default(f: Any) -> Any:
    return f.default_factory() if f.default_factory is not MISSING else f.default


def _num(value: float) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


class Options:
    """A dataclass of command options (a mix-in): which options were given, and the bounds every option declares.

    The command line records the options the user typed (:meth:`mark_given`); built in Python, an option counts
    as given when its value is not its default."""

    _given: frozenset[str] | None = None

    def mark_given(self, names: Any) -> None:
        self._given = frozenset(names)

    def is_given(self, name: str) -> bool:
        if self._given is not None:
            return name in self._given
        f = next(f for f in fields(self) if f.name == name)  # type: ignore[arg-type]
        return getattr(self, name) != field_default(f)

    def flag(self, name: str) -> str:
        """The long option of the field ``name``, for messages."""
        spec = next(f for f in fields(self) if f.name == name).metadata.get(CLI)  # type: ignore[arg-type]
        return spec.flag_of(name) if isinstance(spec, CliOption) else name

    def check_bounds(self) -> None:
        """The ``min`` / ``max`` each option declares, as the command line checks them: a one-line error."""
        for f, spec in option_fields(type(self)):
            value = getattr(self, f.name)
            if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if spec.min is not None and value < spec.min:
                raise UserError(f"{spec.flag_of(f.name)} {value}: at least {spec.min:g}")
            if spec.max is not None and value > spec.max:
                if spec.why:
                    raise UserError(f"{spec.flag_of(f.name)} {_num(value)}: at most {spec.max:g} ({spec.why})")
                raise UserError(f"{spec.flag_of(f.name)} {value}: at most {spec.max:g}")
