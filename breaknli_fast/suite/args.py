"""A measurement's arguments, from the one declaration of its config (:func:`breaknli_fast.options.option` fields,
and the parts of an :func:`~breaknli_fast.options.options` field): a suite entry's ``args`` table, the command line
of ``breaknli-fast suite measure NAME``, and the command line a result file records all name an argument as its
long flag does, without the dashes (``--max-new-tokens`` is ``max_new_tokens``), and give it the value typed on the
command line (before the option's ``parse``).

- :func:`arguments`: the :class:`Arg` of each option of a config class;
- :func:`check_values`: a suite entry's values checked (an unknown name, a wrong type or a value outside the
  option's bounds is a one-line error naming the entry);
- :func:`parse_argv` / :func:`argv_of`: a command line into values and back;
- :func:`build_config`: the config object from values (unnamed options at their defaults).

Standard library only (and :mod:`breaknli_fast.options`).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import types
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from breaknli_fast.errors import UserError
from breaknli_fast.options import CLI, UNSET, CliOption, field_default

SIMPLE = (int, float, str, bool, Path)


@dataclass(frozen=True)
class Arg:
    """One option of a config: its argument ``name``, the ``path`` of the field it sets (a field, or a field and
    the part of a nested dataclass or dict), its declaration, the value type on the command line (``list`` for a
    repeatable option), its default there, and whether it may be left unset (None)."""

    name: str
    path: tuple[str, ...]
    spec: CliOption
    type: Any
    default: Any
    optional: bool

    @property
    def flag(self) -> str:
        return (self.spec.flag or "--" + self.path[-1].replace("_", "-")).split("/")[0]

    @property
    def off_flag(self) -> str | None:
        """The second flag of a switch pair (``--no-x``), None for any other option."""
        pair = (self.spec.flag or "").split("/")
        return pair[1] if len(pair) > 1 else None


def _value_type(annotation: Any) -> tuple[Any, bool]:
    """(the command-line value type, whether None is allowed) of a field's annotation."""
    optional = False
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        optional = len(args) < len(typing.get_args(annotation))
        annotation = args[0] if len(args) == 1 else str
    origin = typing.get_origin(annotation)
    if origin in (list, tuple) and typing.get_args(annotation)[:1] == (str,):
        return list, optional
    return (annotation if annotation in SIMPLE else str), optional


def _arg(path: tuple[str, ...], spec: CliOption, annotation: Any, default: Any) -> Arg:
    typ, optional = _value_type(annotation)
    if spec.type is not None:
        typ = spec.type if spec.type in SIMPLE else str
    if spec.cli_default is not UNSET:
        default = spec.cli_default
    flag = (spec.flag or "--" + path[-1].replace("_", "-")).split("/")[0]
    return Arg(flag.lstrip("-").replace("-", "_"), path, spec, typ, default, optional or default is None)


def arguments(config_class: type | None, exclude: Iterable[str] = ()) -> list[Arg]:
    """The arguments of ``config_class``'s options, in declaration order (none for None); ``exclude``: field
    names left out. Two options of one name is a programming error (RuntimeError)."""
    if config_class is None:
        return []
    hints = typing.get_type_hints(config_class)
    out: list[Arg] = []
    skip = set(exclude)
    for f in dataclasses.fields(config_class):
        spec = f.metadata.get(CLI)
        if f.name in skip or spec is None:
            continue
        if isinstance(spec, CliOption):
            out.append(_arg((f.name,), spec, hints[f.name], field_default(f)))
        elif isinstance(spec, dict):  # a nested dataclass or a dict: one argument per part
            whole = field_default(f)
            sub = typing.get_type_hints(type(whole)) if dataclasses.is_dataclass(whole) else {}
            for part, pspec in spec.items():
                value = getattr(whole, part) if dataclasses.is_dataclass(whole) else whole[part]
                out.append(_arg((f.name, part), pspec, sub.get(part, type(value)), value))
    seen: dict[str, Arg] = {}
    for a in out:
        if a.name in seen:
            raise RuntimeError(f"{config_class.__name__}: two options named {a.name!r}")
        seen[a.name] = a
    return out


def _bad_type(a: Arg, value: Any) -> str | None:
    """Why ``value`` cannot be argument ``a``'s (None: it can)."""
    if a.type is bool:
        return None if isinstance(value, bool) else "true or false"
    if a.type is int:
        return None if isinstance(value, int) and not isinstance(value, bool) else "a whole number"
    if a.type is float:
        return None if isinstance(value, (int, float)) and not isinstance(value, bool) else "a number"
    if a.type is list:
        return None if isinstance(value, list) and all(isinstance(x, str) for x in value) else "a list of strings"
    return None if isinstance(value, str) else "a string"


def check_values(args: Sequence[Arg], values: Mapping[str, Any], where: str | None) -> dict[str, Any]:
    """``values`` checked against ``args``: every name known, every value of its type (an int where a float is
    asked becomes a float) and within the option's bounds. A problem is a one-line :class:`UserError` that
    starts with ``where`` (the entry); without ``where`` (the command line) it names the option's flag."""
    by = {a.name: a for a in args}
    out: dict[str, Any] = {}
    for name, value in values.items():
        a = by.get(name)
        if a is None:
            close = difflib.get_close_matches(name, list(by), n=3, cutoff=0.6)
            hint = f"; close: {', '.join(close)}" if close else f"; its arguments: {', '.join(by) or 'none'}"
            raise UserError(f"{where}: unknown argument {name!r}{hint}")
        said = f"{where}: argument {name}" if where else a.flag
        why = _bad_type(a, value)
        if why is not None:
            raise UserError(f"{said} must be {why}, not {value!r}")
        if a.type is float:
            value = float(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            shown = f"{said} = {value}" if where else f"{said} {value}"
            if a.spec.min is not None and value < a.spec.min:
                raise UserError(f"{shown}: at least {a.spec.min:g}")
            if a.spec.max is not None and value > a.spec.max:
                raise UserError(f"{shown}: at most {a.spec.max:g}" + (f" ({a.spec.why})" if a.spec.why else ""))
        out[name] = value
    return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # noqa: D401 - one line, as UserError
        raise UserError(f"{message} (`{self.prog} --help` lists the options)")


def parser(args: Sequence[Arg], prog: str, description: str = "") -> argparse.ArgumentParser:
    """An argument parser of ``args`` (``--help`` lists them with their declarations' help); values it does not
    see stay unset (argparse.SUPPRESS), so that :func:`parse_argv` returns only what was typed."""
    ap = _Parser(prog=prog, description=description, argument_default=argparse.SUPPRESS, allow_abbrev=False)
    for a in args:
        names = [a.flag] + ([a.spec.short] if a.spec.short else [])
        help_text = a.spec.help.replace("%", "%%")
        if a.type is bool:
            ap.add_argument(*names, dest=a.name, action="store_true", help=help_text)
            if a.off_flag:
                ap.add_argument(a.off_flag, dest=a.name, action="store_false", help=argparse.SUPPRESS)
        elif a.type is list:
            ap.add_argument(*names, dest=a.name, action="append", metavar=a.spec.metavar, help=help_text)
        else:
            conv = {int: int, float: float}.get(a.type, str)
            ap.add_argument(*names, dest=a.name, type=conv, metavar=a.spec.metavar, help=help_text)
    return ap


def join_dash_values(args: Sequence[Arg], argv: Sequence[str]) -> list[str]:
    """``argv`` with an option's value that starts with ``-`` joined to it (``--bench-args --interleave`` ->
    ``--bench-args=--interleave``): argparse reads such a value as the next option, then says the option expected
    one argument. A word that is itself one of ``args``' flags stays an option."""
    flags = {f for a in args for f in (a.flag, a.spec.short, a.off_flag) if f}
    takes = {f for a in args if a.type is not bool for f in (a.flag, a.spec.short) if f}
    out: list[str] = []
    words = list(argv)
    i = 0
    while i < len(words):
        w = words[i]
        if w in takes and i + 1 < len(words) and words[i + 1].startswith("-") and words[i + 1] not in flags:
            out.append(f"{w}={words[i + 1]}")
            i += 2
            continue
        out.append(w)
        i += 1
    return out


def parse_argv(args: Sequence[Arg], argv: Sequence[str], prog: str) -> dict[str, Any]:
    """The values of a command line (only the options it names); a bad one is a one-line :class:`UserError`."""
    values = vars(parser(args, prog).parse_args(join_dash_values(args, argv)))
    return check_values(args, values, None)


def argv_of(args: Sequence[Arg], values: Mapping[str, Any]) -> list[str]:
    """The command line that gives ``values`` (in the order of ``args``)."""
    out: list[str] = []
    for a in args:
        if a.name not in values:
            continue
        v = values[a.name]
        if a.type is bool:
            if v:
                out.append(a.flag)
            elif a.off_flag:
                out.append(a.off_flag)
        elif a.type is list:
            for x in v:
                out += [f"{a.flag}={x}"] if str(x).startswith("-") else [a.flag, str(x)]
        else:
            out += [f"{a.flag}={v}"] if str(v).startswith("-") else [a.flag, str(v)]  # a value like an option
    return out


def build_config(config_class: type, args: Sequence[Arg], values: Mapping[str, Any]) -> Any:
    """``config_class`` with ``values`` set (each through its option's ``parse``), the rest at their defaults."""
    by = {a.name: a for a in args}
    kwargs: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for name, value in values.items():
        a = by[name]
        if a.type is list:
            value = tuple(value)
        elif a.type is Path and value is not None:
            value = Path(value)
        if a.spec.parse is not None:
            value = a.spec.parse(value)
        if len(a.path) == 1:
            kwargs[a.path[0]] = value
        else:
            nested.setdefault(a.path[0], {})[a.path[1]] = value
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    for name, parts in nested.items():
        whole = field_default(fields[name])
        kwargs[name] = dataclasses.replace(whole, **parts) if dataclasses.is_dataclass(whole) else {**whole, **parts}
    try:
        return config_class(**kwargs)
    except (TypeError, ValueError) as e:  # a value the config refuses (its __post_init__)
        raise UserError(str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__) from None
