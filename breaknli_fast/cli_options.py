"""Command-line options: those shared by ``run`` and ``bench`` (one definition each, so the two commands cannot
drift apart), and the options every registered probe declares in its config (:class:`ProbeOptions`).

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
import os
import types
import typing
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import typer

from breaknli_fast.console import warn
from breaknli_fast.data.loaders import SAMPLE_NAME
from breaknli_fast.errors import UserError
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS

STUDY, DATA, MODELS, RAY, SPEED, OUTPUT = "Study", "Data", "Models and engines", "Ray", "Speed and memory", "Output"
ENGINES, TIMING, PARITY = "Engines compared", "Timing", "Parity checks"  # bench's own panels

GENERATOR = typer.Option("mini-t5", "--generator", "-g", rich_help_panel=MODELS,
                         help="Generator: hub id, local folder, or a shipped mini model.")
CLASSIFIER = typer.Option("mini-nli", "--classifier", "-c", rich_help_panel=MODELS,
                          help="NLI model: sequence classifier or Flan-T5-style seq2seq.")
DATASET = typer.Option(SAMPLE_NAME, "--dataset", "-d", rich_help_panel=DATA,
    help="'sample' (embedded SNLI evaluation slice: 2,724 held-out pairs no mini model was trained or tuned on), 'sample-tuning' (the 2,002 held-out pairs mini-nli was tuned on), 'taxinli' (embedded TaxiNLI, 10,071 MNLI pairs with 15 reasoning categories), "
         "aenli[:N] / kinship[:N] (generated from --seed, labels computed by logic), mnli[:mismatched], snli[:test], "
         "anli[:r1|r2|r3], or a .jsonl/.csv/.tsv file (its other columns work with --by).")
SPLIT = typer.Option(None, "--split", rich_help_panel=DATA, help="Split of a hub dataset (mnli, snli, anli), e.g. mismatched, test, r2.")
MODE = typer.Option("both", "--mode", help="contradictive, entailed or both.")
DEVICE = typer.Option("cpu", "--device", rich_help_panel=MODELS, help="cpu or cuda[:N].")
NLI_PROMPT = typer.Option(DEFAULT_NLI_PROMPT, "--nli-prompt", rich_help_panel=MODELS, help=f"Seq2seq classifier prompt: {', '.join(NLI_PROMPTS)}.")
NLI_METHOD = typer.Option("score", "--nli-method", rich_help_panel=MODELS, help="Seq2seq classifier: score (first-step logits) or generate.")
LABEL_MAP = typer.Option(None, "--label-map", rich_help_panel=MODELS, help="Model label names to canonical, e.g. LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment.")
MAX_LENGTH = typer.Option(256, "--max-length", min=1, rich_help_panel=SPEED, help="Truncate classifier inputs to this many tokens, or to the model's own limit when lower (its position table; recorded in config.json).")
TOKEN_BUDGET = typer.Option(8192, "--token-budget", min=1, rich_help_panel=SPEED, help="Classifier batch bound: batch size x longest sequence.")
GEN_BATCH = typer.Option(None, "--gen-batch", min=1, rich_help_panel=SPEED, show_default=False,
                         help="Prompts per generator batch, each with its K samples (default: 8 on the CPU, 64 on CUDA); "
                              "sampling cuts a call into batches of equal rows, so a prompt's samples may span two. "
                              "The candidates do not depend on it.")
MAX_BATCH = typer.Option(None, "--max-batch", min=1, rich_help_panel=SPEED, help="Classifier batch bound: pairs per batch (default: the engine's: on the CPU 16 for ort, 32 for torch sequence classifiers; else 64).", show_default=False)
SAMPLE = typer.Option(None, "--sample", min=1, rich_help_panel=DATA, show_default=False,
                      help="Draw N examples stratified by gold label (each label its share of the dataset, a seeded "
                           "shuffle within it) instead of the first N (--limit). Reported with its label counts.")
SAMPLE_SEED = typer.Option(None, "--sample-seed", rich_help_panel=DATA, show_default=False,
                           help="Seed of the --sample draw (default: --seed), to vary one and keep the other.")
PREMISE_COL = typer.Option(None, "--premise-col", rich_help_panel=DATA, help="Column of the premise in a dataset file (default: premise, then sentence1).")
HYPOTHESIS_COL = typer.Option(None, "--hypothesis-col", rich_help_panel=DATA, help="Column of the hypothesis (default: hypothesis, then sentence2).")
LABEL_COL = typer.Option(None, "--label-col", rich_help_panel=DATA, help="Column of the gold label (default: label, then gold_label).")
ID_COL = typer.Option(None, "--id-col", rich_help_panel=DATA, help="Column of a unique example id (default: id, pairID, uid or idx; else the line number).")
BY = typer.Option(None, "--by", rich_help_panel=DATA, help="Break the headline metrics down by dataset columns, e.g. genre or negation_logic,quantifier_logic "
                 "(0/1 columns: the examples where it is 1 and the rest; others: per value). Default: TaxiNLI's categories on taxinli.")


def effective_limit(dataset: str, limit: int | None, sample: int | None, sample_default: int) -> int | None:
    """The ``--limit`` a command runs with: none with ``--sample`` (both given: load_slice's one-line error),
    ``sample_default`` for the embedded sample when it is not given, none for 0."""
    if sample is not None:
        return limit
    if limit is None:
        return sample_default if dataset == SAMPLE_NAME else None
    return limit or None


def usable_cores() -> int:
    """The CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return os.cpu_count() or 1


def warn_threads(threads: int | None) -> None:
    """A one-line warning when ``--threads`` asks for more threads than there are cores to run them."""
    cores = usable_cores()
    if threads and threads > cores:
        warn(f"--threads {threads} is more than the {cores} CPU cores this process may use: threads beyond the "
             "cores wait for one another and make the run slower, not faster")


def set_help_panels(func: Callable[..., Any], panels: dict[str, Sequence[str]]) -> None:
    """Put the options of ``func`` named in ``panels`` (panel title -> parameter names) into those panels of its
    help: one table beside a long signature instead of ``rich_help_panel=`` on each option. A name that is not a
    parameter, or an option that already has another panel (a shared one, such as ``--dataset``), is an error."""
    params = inspect.signature(func).parameters
    for title, names in panels.items():
        for name in names:
            info = params[name].default if name in params else None
            if not hasattr(info, "rich_help_panel"):
                raise RuntimeError(f"{func.__name__} has no option {name}")
            if info.rich_help_panel not in (None, title):
                raise RuntimeError(f"{func.__name__}'s option {name} is in the panel {info.rich_help_panel!r}")
            info.rich_help_panel = title


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


def _value_type(annotation: Any) -> Any:
    """``int`` of ``int | None``, ``Optional[int]`` or ``int`` (``str`` for anything else)."""
    if isinstance(annotation, types.UnionType) or typing.get_origin(annotation) is typing.Union:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        return args[0] if len(args) == 1 and args[0] in (int, float, str, bool) else str
    return annotation if annotation in (int, float, str, bool) else str


def _param(probes: tuple[str, ...], cls: type, path: tuple[str, ...], spec: Any, annotation: Any,
           default: Any) -> ProbeParam:
    from breaknli_fast.probes.base import UNSET

    flag = spec.flag or "--" + path[-1].replace("_", "-")
    typ = spec.type or _value_type(annotation)
    default = default if spec.cli_default is UNSET else spec.cli_default
    name = PREFIX + "__".join((probes[0].replace("-", "_"), *path))
    decls = (flag, *([spec.short] if spec.short else ()))
    bounds = {k: v for k, v in (("min", spec.min), ("max", spec.max)) if v is not None}
    option = typer.Option(default, *decls, help=spec.help, metavar=spec.metavar, show_default=default is not None,
                          rich_help_panel=spec.panel or f"--probe {' / '.join(probes)}", **bounds)
    flags = tuple(f for d in decls for f in d.split("/"))
    return ProbeParam(probes, cls, path, name, flags, typ if default is not None else Optional[typ], option, default,
                      spec.parse)


def probe_params(probes: Sequence[str] | None = None) -> list[ProbeParam]:
    """The options that ``probes`` (default: every registered probe) declare in their configs, in declaration
    order; probes registered with the same config class share its options. Two config classes declaring the
    same flag is a programming error (RuntimeError naming both)."""
    from breaknli_fast.probes import probe_class, probe_names
    from breaknli_fast.probes.base import CLI, CliOption

    by_class: dict[type, list[str]] = {}
    for name in probes if probes is not None else probe_names():
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
        from breaknli_fast.probes import probe_class, probe_names

        sig = inspect.signature(self.func, eval_str=True)
        own = {d for p in sig.parameters.values() for decl in getattr(p.default, "param_decls", None) or ()
               for d in decl.split("/")}
        params = []
        for p in sig.parameters.values():
            if p.name == "probe" and hasattr(p.default, "help"):  # --probe lists the registered probes
                names = self.probes or probe_names()
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
