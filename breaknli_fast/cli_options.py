"""Command-line options built from dataclass fields (:mod:`breaknli_fast.options`): a command whose options are
one dataclass (:class:`OptionsCommand`: ``run`` takes :class:`~breaknli_fast.study.options.RunOptions`, ``bench``
:class:`~breaknli_fast.bench.options.BenchOptions`), and the options every registered probe declares in its config
(:class:`ProbeOptions`).

A probe's config is a dataclass whose fields made with :func:`breaknli_fast.probes.base.option` (or
:func:`~breaknli_fast.probes.base.options` for a nested dataclass or dict) carry their help and flag. A command
registered as ``ProbeOptions(func)`` takes every registered probe's options, each probe's in a help panel of
its own (``--probe NAME``); :func:`probe_config` turns the values of the current command line into the chosen
probe's config object. Adding a probe to the command line is therefore its module and its registry line.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import types
import typing
from pathlib import Path
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import typer

from breaknli_fast import limits
from breaknli_fast.console import warn
from breaknli_fast.errors import UserError
from breaknli_fast.options import CliOption, option_fields

MODE = typer.Option("both", "--mode", help="contradictive, entailed or both.")


def warn_threads(threads: int | None) -> None:
    """A one-line warning when ``--threads`` asks for more threads than there are cores to run them (more than
    :func:`breaknli_fast.limits.max_threads` is refused before this, by the options' check)."""
    cores = limits.usable_cores()
    if threads and cores < threads <= limits.max_threads():
        warn(f"--threads {threads} is more than the {cores} CPU cores this process may use: threads beyond the "
             "cores wait for one another and make the run slower, not faster")


# -- the options of the registered probes ------------------------------------------------------------------

PREFIX = "probe__"  # the parameter names of generated options (never a name of a command's own parameter)
_VALUES: ContextVar[dict[str, Any]] = ContextVar("probe_option_values", default={})


@dataclass
class ProbeParam:
    """One generated option: the config class and the field (or (field, part)) it sets, and the probes
    (one, or several registered with the same config class) that take it."""

    probes: tuple[str, ...]
    config_class: type
    path: tuple[str, ...]
    name: str  # the parameter's name
    flags: tuple[str, ...]
    annotation: Any
    option: Any  # the typer.Option of the parameter
    default: Any
    parse: Callable[[Any], Any] | None


SIMPLE = (int, float, str, bool, Path)


def _value_type(annotation: Any) -> Any:
    """``int`` of ``int | None``, ``Optional[int]`` or ``int`` (``str`` for anything else)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 and args[0] in SIMPLE else str
    return annotation if annotation in SIMPLE else str


def _param(probes: tuple[str, ...], cls: type, path: tuple[str, ...], spec: Any, annotation: Any,
           default: Any) -> ProbeParam:
    from breaknli_fast.options import UNSET

    flag = spec.flag or "--" + path[-1].replace("_", "-")
    typ = spec.type or _value_type(annotation)
    default = default if spec.cli_default is UNSET else spec.cli_default
    # a probe's option: a name no command parameter has; a command's own (``probes`` empty): the field's name
    name = PREFIX + "__".join((probes[0].replace("-", "_"), *path)) if probes else path[-1]
    decls = (flag, *([spec.short] if spec.short else ()))
    # a bound with a reason is checked by Options.check_bounds, whose one line says why
    bounds = {k: v for k, v in (("min", spec.min), ("max", None if spec.why else spec.max)) if v is not None}
    option = typer.Option(default, *decls, help=spec.help, metavar=spec.metavar, parser=spec.parser,
                          show_default=default is not None if spec.show_default is None else spec.show_default,
                          rich_help_panel=spec.panel or (f"--probe {' / '.join(probes)}" if probes else None),
                          **bounds)
    flags = tuple(f for d in decls for f in d.split("/"))
    return ProbeParam(probes, cls, path, name, flags, typ if default is not None else Optional[typ], option, default,
                      spec.parse)


def probe_params(probes: Sequence[str] | None = None) -> list[ProbeParam]:
    """The options that ``probes`` (default: every registered probe) declare in their configs, in declaration
    order; probes registered with the same config class share its options. Two config classes declaring the
    same flag is a programming error (RuntimeError naming both)."""
    from breaknli_fast.probes import probe_class, usable_probe_names
    from breaknli_fast.options import CLI

    by_class: dict[type, list[str]] = {}
    for name in probes if probes is not None else usable_probe_names():
        cls = probe_class(name).config_class
        if cls is not None:
            by_class.setdefault(cls, []).append(name)
    out: list[ProbeParam] = []
    for cls, names in by_class.items():
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            spec = f.metadata.get(CLI)
            if isinstance(spec, CliOption):
                default = f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]
                out.append(_param(tuple(names), cls, (f.name,), spec, hints[f.name], default))
            elif isinstance(spec, dict):  # a nested dataclass or a dict: one option per part
                whole = f.default_factory()  # type: ignore[misc]
                sub = typing.get_type_hints(type(whole)) if dataclasses.is_dataclass(whole) else {}
                for part, pspec in spec.items():
                    value = getattr(whole, part) if dataclasses.is_dataclass(whole) else whole[part]
                    out.append(_param(tuple(names), cls, (f.name, part), pspec, sub.get(part, type(value)), value))
    seen: dict[str, ProbeParam] = {}
    for p in out:
        for flag in p.flags:
            if flag in seen and seen[flag].config_class is not p.config_class:
                raise RuntimeError(f"probes {seen[flag].probes[0]} and {p.probes[0]} both declare the option {flag}")
            seen[flag] = p
    return out


class ProbeOptions:
    """A command function with the options of the registered probes (``probes``: of these alone) added to its
    signature, so that Typer builds them like the function's own: each probe's in a help panel of its own. The
    signature is read when Typer builds the command, so a probe registered before that (a plug-in, a test) is
    there. The values wait for :func:`probe_config`; ``--probe``'s help lists the registered probes."""

    def __init__(self, func: Callable[..., Any], probes: Sequence[str] | None = None):
        self.func, self.probes = func, tuple(probes) if probes is not None else None
        self.__name__, self.__doc__, self.__module__ = func.__name__, func.__doc__, func.__module__

    def params(self) -> list[ProbeParam]:
        return probe_params(self.probes)

    @property
    def __signature__(self) -> inspect.Signature:  # noqa: PLW3201 - read by inspect.signature (Typer)
        from breaknli_fast.probes import probe_class, usable_probe_names

        sig = inspect.signature(self.func, eval_str=True)
        own = {d for p in sig.parameters.values() for decl in getattr(p.default, "param_decls", None) or ()
               for d in decl.split("/")}
        params = []
        for p in sig.parameters.values():
            if p.name == "probe" and hasattr(p.default, "help"):  # --probe lists the registered probes
                names = self.probes or usable_probe_names()
                listed = "; ".join(n + (f" ({probe_class(n).summary})" if probe_class(n).summary else "") for n in names)
                info = copy.copy(p.default)
                info.help = f"The study: {listed}. Each probe's options are in its panel."
                p = p.replace(default=info)
            params.append(p)
        for pp in self.params():
            clash = [f for f in pp.flags if f in own]
            if clash:
                raise RuntimeError(f"probe {pp.probes[0]}'s option {clash[0]} is an option of {self.__name__} itself")
            params.append(inspect.Parameter(pp.name, inspect.Parameter.KEYWORD_ONLY, default=pp.option,
                                            annotation=pp.annotation))
        return sig.replace(parameters=params)

    @property
    def __annotations__(self) -> dict[str, Any]:  # read by typing.get_type_hints (Typer)
        return {p.name: p.annotation for p in self.__signature__.parameters.values()
                if p.annotation is not inspect.Parameter.empty}

    def __call__(self, **values: Any) -> Any:
        token = _VALUES.set({k: values.pop(k) for k in list(values) if k.startswith(PREFIX)})
        try:
            return self.func(**values)
        finally:
            _VALUES.reset(token)


def probe_config(probe: str, **common: Any) -> Any:
    """The config of ``probe`` built from the generated options of the command being run (a
    :class:`ProbeOptions`), with ``common`` (``seed``, ``chunk_size``: set where the config has the field and
    the value is not None). Another probe's option set to other than its default is a one-line error; so is
    a value the config refuses."""
    from breaknli_fast.probes import probe_class

    values = _VALUES.get()
    cls = probe_class(probe).config_class
    params = [p for p in probe_params(None) if p.name in values] or probe_params([probe])
    for p in params:
        if p.config_class is not cls and values.get(p.name, p.default) != p.default:
            raise UserError(f"{p.flags[0]} is an option of --probe {' / '.join(p.probes)}, not of --probe {probe}")
    if cls is None:
        return None
    kwargs: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    for p in params:
        if p.config_class is not cls or p.name not in values:
            continue
        value = p.parse(values[p.name]) if p.parse is not None else values[p.name]
        if len(p.path) == 1:
            kwargs[p.path[0]] = value
        else:
            nested.setdefault(p.path[0], {})[p.path[1]] = value
    fields = {f.name: f for f in dataclasses.fields(cls)}
    for name, parts in nested.items():
        whole = fields[name].default_factory()  # type: ignore[misc]
        kwargs[name] = dataclasses.replace(whole, **parts) if dataclasses.is_dataclass(whole) else {**whole, **parts}
    kwargs.update({k: v for k, v in common.items() if v is not None and k in fields})
    return cls(**kwargs)


# -- commands whose options are a dataclass ------------------------------------------------------------------

class OptionsCommand:
    """A command function ``func(options)`` whose options are the fields of the dataclass ``cls`` (declared with
    :func:`breaknli_fast.options.option`): Typer reads them as the command's signature; a call builds ``cls`` from
    the values, records which options were typed (:meth:`~breaknli_fast.options.Options.mark_given`) and hands it to
    ``func``. The Python API takes the same class, so both get the same checks."""

    def __init__(self, func: Callable[..., Any], cls: type):
        self.func, self.cls = func, cls
        self.__name__, self.__doc__, self.__module__ = func.__name__, func.__doc__, func.__module__
        hints = typing.get_type_hints(cls)
        # named as the fields, so that ctx.get_parameter_source finds them
        self.params = [_param((), cls, (f.name,), spec, hints[f.name], f.default) for f, spec in option_fields(cls)]

    @property
    def __signature__(self) -> inspect.Signature:  # noqa: PLW3201 - read by inspect.signature (Typer)
        ctx = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)
        return inspect.Signature([ctx] + [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.option,
                                                            annotation=p.annotation) for p in self.params])

    @property
    def __annotations__(self) -> dict[str, Any]:  # read by typing.get_type_hints (Typer)
        return {p.name: p.annotation for p in self.__signature__.parameters.values()}

    def __call__(self, ctx: typer.Context, **values: Any) -> Any:
        parsed = {p.name: p.parse(values[p.name]) if p.parse is not None else values[p.name] for p in self.params}
        options = self.cls(**parsed)
        options.mark_given(n for n in parsed
                           if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP"))
        return self.func(options)
