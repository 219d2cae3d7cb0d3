"""The declared benchmark suite: every result file in ``benchmarks/results`` is written by one named entry of
``benchmarks/suite.toml``, and every entry names a measurement of this package and its arguments.

The file holds the size variables once (``[sizes.full]``, ``[sizes.smoke]``), the variables that depend on the
machine (``[conditions.NAME]``: a value for a machine where the condition holds, another where it does not), and
one ``[[entry]]`` per result file:

- ``name``, ``what`` (one line), ``result`` (its file name in the results folder);
- ``measurement`` and ``args``: the measurement (:mod:`breaknli_fast.suite.registry`) and its arguments, named as
  its options are (``max_new_tokens = 8`` is ``--max-new-tokens 8``), checked against the measurement's config when
  the file loads (an unknown argument, a wrong type or a value outside its bounds is a one-line error naming the
  entry); ``smoke``: arguments that replace those under ``--smoke``;
- ``requires`` / ``optional``: requirements beyond those the measurement declares (skipped without / used where
  present); ``interpreter = "transformers5-venv"``: run with the transformers 5 venv's interpreter;
- ``minutes`` (the last run's duration on the 2 cores of the files' machine, unless ``machine`` says otherwise),
  ``feeds`` (the BENCHMARKS.md subsections that read its file, and ``README/parity``), ``at_commit`` (measured by
  that commit's own script of the measurement, from a copy of the checkout at that commit).

A string argument that is exactly ``{name}`` takes the variable's value as it is typed in the file (a number stays a
number); ``{name}`` inside a longer string is replaced by its text. A size variable whose upper-case name is set in
the environment takes that value (e.g. ``LG_GEN_QUERIES=256``).

Standard library only, besides the measurements' declarations (read when the file is checked).
"""

from __future__ import annotations

import difflib
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from breaknli_fast.errors import UserError
from breaknli_fast.suite.provenance import ROOT

DEFAULT_SUITE = ROOT / "benchmarks" / "suite.toml"
COMMITTED_RESULTS = ROOT / "benchmarks" / "results"
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENTRY_KEYS = frozenset({"name", "what", "measurement", "args", "result", "smoke", "requires", "optional", "minutes",
                        "feeds", "at_commit", "machine", "interpreter"})
NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")
INTERPRETERS = ("transformers5-venv",)
Value = Any  # a TOML value: str, int, float, bool, or a list of them


def _native_bf16() -> bool:
    from breaknli_fast.engines.cpu_features import has_native_bf16

    return has_native_bf16()


# conditions a suite may declare: name -> what it checks on the machine that runs the suite
CONDITIONS: dict[str, Callable[[], bool]] = {"native-bf16": _native_bf16}
_condition_cache: dict[str, bool] = {}


def condition_value(name: str) -> bool:
    """Whether the condition ``name`` holds on this machine (computed once per process)."""
    if name not in _condition_cache:
        try:
            _condition_cache[name] = bool(CONDITIONS[name]())
        except KeyError:
            raise UserError(f"unknown condition {name!r} (known: {', '.join(CONDITIONS)})") from None
        except Exception:  # noqa: BLE001 - a check that cannot run counts as the condition not holding
            _condition_cache[name] = False
    return _condition_cache[name]


def _env_value(full: Value, text: str) -> Value:
    """An environment variable's text as the type of the size it overrides."""
    if isinstance(full, bool):
        return text.lower() in ("1", "true", "yes")
    for typ in (int, float):
        if isinstance(full, typ):
            try:
                return typ(text)
            except ValueError:
                raise UserError(f"{text!r}: not a {typ.__name__} (a size variable's value)") from None
    return text


def fill(value: Value, variables: Mapping[str, Value], where: str) -> Value:
    """``value`` with its placeholders filled in (a string that is exactly ``{name}`` takes the variable's value
    and type; lists item by item)."""
    if isinstance(value, list):
        return [fill(v, variables, where) for v in value]
    if not isinstance(value, str):
        return value
    whole = PLACEHOLDER.fullmatch(value)
    if whole:
        if whole.group(1) not in variables:
            raise UserError(f"{where}: unknown placeholder {value}")
        return variables[whole.group(1)]

    def sub(m: re.Match[str]) -> str:
        if m.group(1) not in variables:
            raise UserError(f"{where}: unknown placeholder {{{m.group(1)}}}")
        return str(variables[m.group(1)])

    return PLACEHOLDER.sub(sub, value)


@dataclass(frozen=True)
class SuiteEntry:
    """One result file: the measurement that writes it and its arguments."""

    name: str
    what: str
    measurement: str
    result: str
    args: Mapping[str, Value] = field(default_factory=dict)
    smoke: Mapping[str, Value] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    minutes: float | None = None
    feeds: tuple[str, ...] = ()
    at_commit: str | None = None
    machine: str | None = None
    interpreter: str | None = None
    sizes: Mapping[str, Mapping[str, Value]] = field(default_factory=dict, repr=False, compare=False)
    conditions: Mapping[str, Mapping[str, Mapping[str, Value]]] = field(default_factory=dict, repr=False,
                                                                        compare=False)

    @property
    def results(self) -> tuple[str, ...]:
        return (self.result,)

    def variables(self, *, smoke: bool = False, condition_values: Mapping[str, bool] | None = None,
                  env: Mapping[str, str] | None = None) -> dict[str, Value]:
        """The values of the size and condition variables (full or smoke sizes; a size whose upper-case name is set
        in ``env`` takes that value)."""
        full = dict(self.sizes.get("full", {}))
        values = dict(self.sizes.get("smoke" if smoke else "full", {}))
        env = os.environ if env is None else env
        for k in values:
            if env.get(k.upper()):
                values[k] = _env_value(full.get(k, values[k]), env[k.upper()])
        for cname, branches in self.conditions.items():
            holds = (condition_values or {}).get(cname)
            if holds is None:
                holds = condition_value(cname)
            values.update(branches["true" if holds else "false"])
        return values

    def values(self, *, smoke: bool = False, condition_values: Mapping[str, bool] | None = None,
               env: Mapping[str, str] | None = None) -> dict[str, Value]:
        """The measurement's arguments, every placeholder filled in (under ``smoke`` the entry's smoke arguments
        replace its own)."""
        variables = self.variables(smoke=smoke, condition_values=condition_values, env=env)
        args = {**self.args, **(self.smoke if smoke else {})}
        return {k: fill(v, variables, f"suite entry {self.name}") for k, v in args.items()}

    def measure(self) -> Any:
        """The entry's measurement (an instance)."""
        from breaknli_fast.suite.registry import get_measurement

        return get_measurement(self.measurement)

    def checked(self, *, smoke: bool = False, condition_values: Mapping[str, bool] | None = None,
                env: Mapping[str, str] | None = None) -> tuple[Any, dict[str, Value]]:
        """(the measurement, its arguments checked against its config), as the runner runs them."""
        from breaknli_fast.suite.args import check_values

        m = self.measure()
        values = self.values(smoke=smoke, condition_values=condition_values, env=env)
        return m, check_values(m.arguments(values), values, f"suite entry {self.name}")

    def config(self, **kw: Any) -> Any:
        """The measurement's config object of these arguments."""
        m, values = self.checked(**kw)
        try:
            return m.config(values)
        except UserError as e:
            raise UserError(f"suite entry {self.name}: {e}") from None


@dataclass(frozen=True)
class Suite:
    """The entries of one suite file, in order."""

    path: Path
    entries: tuple[SuiteEntry, ...]

    def names(self) -> list[str]:
        return [e.name for e in self.entries]

    def entry(self, name: str) -> SuiteEntry:
        for e in self.entries:
            if e.name == name:
                return e
        close = difflib.get_close_matches(name, self.names(), n=3, cutoff=0.5)
        hint = f"; close: {', '.join(close)}" if close else f"; entries: {', '.join(self.names())}"
        raise UserError(f"no suite entry {name!r} in {self.path}{hint}")

    def entry_for_result(self, filename: str | Path) -> SuiteEntry | None:
        """The entry that writes the result file ``filename`` (a name in the results folder), None if none."""
        name = Path(filename).name
        return next((e for e in self.entries if e.result == name), None)

    def select(self, only: Sequence[str] | str | None = None, skip: Sequence[str] | str | None = None) -> list[str]:
        """The entry names to run: ``only`` these (default all), less ``skip``; names may be separated by spaces
        or commas. An unknown name is a one-line error."""
        def split(x: Sequence[str] | str | None) -> list[str]:
            if not x:
                return []
            words = x.replace(",", " ").split() if isinstance(x, str) else [w for s in x for w in
                                                                            s.replace(",", " ").split()]
            for w in words:
                self.entry(w)
            return words

        chosen, dropped = split(only), set(split(skip))
        return [n for n in self.names() if (not chosen or n in chosen) and n not in dropped]


def _strings(value: Any, where: str, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UserError(f"{where}: {what} must be a string or a list of strings")
    return tuple(value)


def _values(value: Any, where: str, what: str) -> dict[str, Value]:
    if not isinstance(value, dict):
        raise UserError(f"{where}: {what} must be a table")
    for k, v in value.items():
        items = v if isinstance(v, list) else [v]
        if isinstance(v, dict) or not all(isinstance(x, (str, int, float, bool)) for x in items):
            raise UserError(f"{where}: {what}.{k} must be a string, a number, true / false or a list of strings")
    return dict(value)


def load_suite(path: str | Path = DEFAULT_SUITE, check: bool = True) -> Suite:
    """Read and check a suite file; every problem is a one-line :class:`UserError`. With ``check`` (the default)
    each entry's measurement is found and its arguments, full and smoke, checked against the measurement's
    config, on a machine where each condition holds and where it does not."""
    path = Path(path)
    try:
        doc = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no suite file {path} (the suite is part of a checkout of the repository; --suite-file "
                        "names another)") from None
    except tomllib.TOMLDecodeError as e:
        raise UserError(f"{path}: not valid TOML ({str(e).splitlines()[0]})") from None
    unknown = set(doc) - {"sizes", "conditions", "entry"}
    if unknown:
        raise UserError(f"{path}: unknown table(s) {', '.join(sorted(unknown))} (expected sizes, conditions, entry)")
    sizes_doc = doc.get("sizes", {})
    if not isinstance(sizes_doc, dict) or set(sizes_doc) - {"full", "smoke"}:
        raise UserError(f"{path}: [sizes] holds the tables full and smoke only")
    sizes = {k: _values(sizes_doc.get(k, {}), str(path), f"sizes.{k}") for k in ("full", "smoke")}
    if set(sizes["full"]) != set(sizes["smoke"]):
        diff = sorted(set(sizes["full"]) ^ set(sizes["smoke"]))
        raise UserError(f"{path}: sizes.full and sizes.smoke name different variables ({', '.join(diff)})")
    conditions: dict[str, dict[str, dict[str, Value]]] = {}
    cond_doc = doc.get("conditions", {})
    if not isinstance(cond_doc, dict):
        raise UserError(f"{path}: [conditions] must be a table")
    for cname, c in cond_doc.items():
        where = f"{path}: conditions.{cname}"
        if cname not in CONDITIONS:
            raise UserError(f"{where}: unknown condition (known: {', '.join(CONDITIONS)})")
        if not isinstance(c, dict) or set(c) - {"what", "true", "false"} or "true" not in c or "false" not in c:
            raise UserError(f"{where}: needs the tables true and false (and a string what)")
        branches = {b: _values(c[b], where, b) for b in ("true", "false")}
        if set(branches["true"]) != set(branches["false"]):
            raise UserError(f"{where}: true and false name different variables")
        conditions[cname] = branches
    raw_entries = doc.get("entry", [])
    if not isinstance(raw_entries, list) or not raw_entries:
        raise UserError(f"{path}: no [[entry]]")
    entries: list[SuiteEntry] = []
    names: set[str] = set()
    owner: dict[str, str] = {}
    for i, raw in enumerate(raw_entries, 1):
        if not isinstance(raw, dict):
            raise UserError(f"{path}: entry {i} must be a table")
        name = raw.get("name")
        where = f"{path}: entry {name if isinstance(name, str) else i}"
        if not isinstance(name, str) or not NAME.match(name):
            raise UserError(f"{where}: needs a name of lower-case letters, digits, '-' and '.'")
        extra = set(raw) - ENTRY_KEYS
        if extra:
            raise UserError(f"{where}: unknown key(s) {', '.join(sorted(extra))}"
                            + (" (an entry names a measurement and its args, not a command)"
                               if "command" in extra else ""))
        if name in names:
            raise UserError(f"{path}: duplicate entry name {name!r}")
        names.add(name)
        for key in ("what", "measurement", "result"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise UserError(f"{where}: needs a non-empty string {key}")
        result = raw["result"]
        if "/" in result or not result.endswith(".json"):
            raise UserError(f"{where}: result {result!r} must be a .json file name in the results folder")
        if result in owner:
            raise UserError(f"{path}: result {result} is written by both {owner[result]} and {name}")
        owner[result] = name
        requires = _strings(raw.get("requires", []), where, "requires")
        optional = _strings(raw.get("optional", []), where, "optional")
        minutes = raw.get("minutes")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))):
            raise UserError(f"{where}: minutes must be a number")
        for key in ("at_commit", "machine", "interpreter"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise UserError(f"{where}: {key} must be a string")
        if raw.get("interpreter") not in (None, *INTERPRETERS):
            raise UserError(f"{where}: interpreter {raw['interpreter']!r}: one of {', '.join(INTERPRETERS)}")
        entries.append(SuiteEntry(
            name=name, what=raw["what"].strip(), measurement=raw["measurement"], result=result,
            args=_values(raw.get("args", {}), where, "args"), smoke=_values(raw.get("smoke", {}), where, "smoke"),
            requires=requires, optional=optional, minutes=None if minutes is None else float(minutes),
            feeds=_strings(raw.get("feeds", []), where, "feeds"), at_commit=raw.get("at_commit"),
            machine=raw.get("machine"), interpreter=raw.get("interpreter"), sizes=sizes, conditions=conditions))
    suite = Suite(path=path, entries=tuple(entries))
    if check:
        check_suite(suite)
    return suite


def check_suite(suite: Suite) -> None:
    """Every entry's measurement is registered, its requirements are known, and its arguments (full and smoke
    sizes, each condition holding and not) are its config's: one line naming the entry otherwise."""
    from breaknli_fast.suite.requirements import check_names

    for e in suite.entries:
        where = f"{suite.path}: entry {e.name}"
        try:
            m = e.measure()
        except UserError as err:
            raise UserError(f"{where}: {err}") from None
        check_names(e.requires + e.optional + tuple(m.requires), where)
        combos = [dict(zip(e.conditions, bits)) for bits in _bits(len(e.conditions))]
        for smoke in (False, True):
            for cv in combos:
                e.config(smoke=smoke, condition_values=cv, env={})


def _bits(n: int) -> list[tuple[bool, ...]]:
    out: list[tuple[bool, ...]] = [()]
    for _ in range(n):
        out = [b + (x,) for b in out for x in (True, False)]
    return out
