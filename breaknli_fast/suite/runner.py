"""Running measurements: :func:`measure` (one measurement with its arguments, into a result file: what
``breaknli-fast suite measure NAME`` does) and :func:`run_entries` (entries of the suite, each
``breaknli-fast suite measure`` in a process of its own, one after another).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from breaknli_fast.errors import UserError
from breaknli_fast.suite.args import argv_of, join_dash_values, parse_argv, parser
from breaknli_fast.suite.provenance import ROOT, Recorder, measure_command
from breaknli_fast.suite.result import mark_smoke
from breaknli_fast.suite.spec import COMMITTED_RESULTS, Suite

Log = Callable[[str], None]


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def parse_measurement_args(m: Any, argv: Sequence[str]) -> dict[str, Any]:
    """A measurement's arguments from its command line (the words after ``--`` to its :attr:`remainder`); a bad
    one is a one-line :class:`UserError`."""
    words = list(argv)
    rest: list[str] = []
    if "--" in words:
        i = words.index("--")
        words, rest = words[:i], words[i + 1:]
        if m.remainder is None:
            raise UserError(f"{m.name} takes no words after --")
    prog = f"breaknli-fast suite measure {m.name}"
    first = m.arguments({})
    hint, _ = parser(first, prog).parse_known_args(join_dash_values(first, words))  # e.g. the bench's probe
    values = parse_argv(m.arguments(vars(hint)), words, prog)
    if rest:
        values[m.remainder] = list(values.get(m.remainder, [])) + rest
    return values


def measure(name: str, argv: Sequence[str], *, result: str | Path | None = None, scratch: str | Path | None = None,
            entry: str | None = None, smoke: bool = False, log: Log = _stderr) -> int:
    """Measure ``name`` with the arguments of the command line ``argv`` into the result file ``result``: every
    check first (its arguments, what it requires), then the measurement, then the file. Returns the exit code the
    measurement asked for (a bench under --strict that failed a check: 1)."""
    from breaknli_fast.suite.registry import get_measurement
    from breaknli_fast.suite.requirements import missing

    m = get_measurement(name)
    values = parse_measurement_args(m, argv)
    config = m.config(values)
    required, optional = m.requirements(config)
    lacking = missing(required)
    if lacking:
        raise UserError(f"the {name} measurement needs {'; '.join(lacking)}")
    for x in missing(optional):
        log(f"{name}: without {x}: those contenders are reported as skipped")
    work = Path(scratch) if scratch else Path(tempfile.mkdtemp(prefix=f"breaknli-{name}-"))
    work.mkdir(parents=True, exist_ok=True)
    path = Path(result) if result else m.default_result(config, work)
    if path is None:
        raise UserError(f"breaknli-fast suite measure {name}: --result FILE names the result file to write")
    words = argv_of(m.arguments(values), values)
    recorder = Recorder(m.kind, measure_command(name, [*words, "--result", str(path)]),
                        measurement={"name": name, "args": without_scratch(m, values),
                                     **({"entry": entry} if entry else {})},
                        work=work)
    recorder.exit_code = 0
    recorder.result_path = path
    payload = m.run(config, recorder)
    recorder.save(path, payload)
    if smoke:
        mark_smoke(path)
    if not scratch:
        try:  # a scratch folder of its own that the measurement left empty is not left behind
            work.rmdir()
        except OSError:
            pass
    return int(recorder.exit_code or 0)


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


def is_committed_results(folder: str | Path) -> bool:
    """Whether ``folder`` is the checkout's committed results folder (benchmarks/results)."""
    return Path(folder).resolve() == COMMITTED_RESULTS.resolve()


def entry_command(suite: Suite, name: str, *, python: str, results: Path, work: Path, smoke: bool = False,
                  python_tf5: str | None = None, checkout: bool = True) -> tuple[list[str], Path, list[str], list[str]]:
    """(the command that measures entry ``name``, the folder it runs from, what it requires, what it may use);
    an ``at_commit`` entry's copy of the checkout is made only with ``checkout``."""
    from breaknli_fast.suite.requirements import tf5_python

    e = suite.entry(name)
    m, values = e.checked(smoke=smoke)
    config = e.config(smoke=smoke)
    required, optional = m.requirements(config)
    required = list(dict.fromkeys([*required, *e.requires, *(["git"] if e.at_commit else []),
                                   *([e.interpreter] if e.interpreter else [])]))
    optional = list(dict.fromkeys(x for x in (*optional, *e.optional) if x not in required))
    py = tf5_python(python_tf5) if e.interpreter == "transformers5-venv" else python
    result = results / e.result
    if e.at_commit:  # measured by that commit's own script of the measurement
        cwd = _checkout_at(e.at_commit, work) if checkout else work / f"checkout-{e.at_commit[:12]}"
        return [py, *m.legacy_argv(values, str(result))], cwd, required, optional
    cmd = [py, "-m", "breaknli_fast.suite", "measure", m.name, *argv_of(m.arguments(values), values),
           "--result", str(result), "--scratch", str(work / e.name), "--entry", e.name]
    return cmd + (["--smoke"] if smoke else []), ROOT, required, optional


def run_entries(suite: Suite, names: Sequence[str] | None, *, python: str, results: str | Path, work: str | Path,
                smoke: bool = False, log: Log | None = None) -> int:
    """Run the entries ``names`` (None: all, in the suite's order) one after another, each a process of its own.
    Each is reported as it starts and ends (``== NAME: PASS in 12 s`` / ``FAIL (exit 1) after 3 s`` / ``SKIP:
    needs ...`` when a requirement is missing); a failure does not stop the others. Returns 0 when none failed,
    else 1. With ``smoke`` each result file written says so (``"smoke": true``), and the committed results folder
    is refused: smoke figures never replace a measurement."""
    import breaknli_fast
    from breaknli_fast.suite.requirements import missing, tf5_python

    log = log or _stderr
    if smoke and is_committed_results(results):
        raise UserError(f"--smoke writes figures that mean nothing: not into the committed {COMMITTED_RESULTS} "
                        "(give another results folder)")
    chosen = suite.names() if names is None else list(names)
    for n in chosen:
        suite.entry(n)
    results, work = Path(results).resolve(), Path(work).resolve()
    results.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    python_abs = _abs_python(python)
    tf5 = tf5_python()
    # what importing breaknli_fast set in this process is not passed on: a result file records what the user set
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY" or k in breaknli_fast.USER_SET_ENV}
    env["HF_HUB_OFFLINE"] = "1"
    failed: list[str] = []
    for name in chosen:
        t0 = time.monotonic()
        try:
            cmd, cwd, required, optional = entry_command(suite, name, python=python_abs, results=results, work=work,
                                                         smoke=smoke, python_tf5=tf5)
            lacking = missing(required, python=cmd[0], python_tf5=tf5)
            if lacking:
                log(f"== {name}: SKIP: needs {'; '.join(lacking)}")
                continue
            for x in missing(optional, python=cmd[0], python_tf5=tf5):
                log(f"== {name}: without {x}: those contenders are reported as skipped")
            run_env = env if cwd == ROOT else {**env, "PYTHONPATH": str(cwd) + os.pathsep + env.get("PYTHONPATH", "")}
            log(f"== {name}: {shlex.join(cmd)}" + (f"  (from {cwd})" if cwd != ROOT else ""))
            rc = subprocess.run(cmd, cwd=cwd, env=run_env).returncode
            if rc == 0 and smoke:
                mark_smoke(results / suite.entry(name).result)
        except (OSError, subprocess.SubprocessError, UserError) as exc:
            log(f"== {name}: {type(exc).__name__}: {exc}")
            rc = -1
        took = time.monotonic() - t0
        if rc == 0:
            log(f"== {name}: PASS in {took:.0f} s")
        else:
            log(f"== {name}: FAIL (exit {rc}) after {took:.0f} s")
            failed.append(name)
    if failed:
        log(f"failed: {' '.join(failed)}")
    return 1 if failed else 0


def default_results(update: bool, smoke: bool, out: str | Path | None, suite: Suite, flag: str = "--results") -> Path:
    """Where a suite run writes: the committed results only when asked (``--update-results``), else ``out`` (the
    option ``flag``) or a new scratch folder (runs/suite-<time>), so that no run replaces a measurement by mistake."""
    from datetime import datetime

    if update and (smoke or out is not None):
        raise UserError("--update-results writes the committed results; "
                        + ("smoke figures mean nothing there" if smoke else f"leave {flag} out"))
    if update:
        return suite.path.parent / "results"
    return Path(out) if out is not None else Path("runs") / f"suite-{datetime.now().strftime('%Y%m%d-%H%M%S')}"


def without_scratch(m: Any, values: dict[str, Any]) -> dict[str, Any]:
    """The arguments that define a measurement's figures: those naming a scratch folder of one machine (its
    ``scratch_flags``: where the files went, ``--out`` on the lent GPU) left out."""
    scratch = {f.lstrip("-").replace("-", "_") for f in m.scratch_flags}
    return {k: v for k, v in values.items() if k not in scratch}


def recorded_args(doc: Any) -> tuple[str, dict[str, Any]]:
    """(the measurement, its arguments) that wrote a result file: what a file written by ``suite measure`` records,
    or, for a file of the scripts that measured before the measurements joined the package, its recorded command
    read as the measurement's arguments (the scripts had the same options; those that named a scratch folder or
    the result file left out)."""
    from breaknli_fast.suite.registry import by_kind, get_measurement, measurements

    if doc.measurement is not None:
        return doc.measurement.name, without_scratch(get_measurement(doc.measurement.name), dict(doc.measurement.args))
    words = shlex.split(str(doc.command))
    while words and "=" in words[0] and not words[0].startswith("-"):  # VAR=value before the command
        words = words[1:]
    script = next((Path(w).name for w in words if w.startswith("scripts/")), None)
    if script is None:
        raise UserError(f"{doc.name}: its command names no script of the suite: {doc.command}")
    words = words[[Path(w).name for w in words].index(script) + 1:]
    if script == "bench_save.py":  # the bench's own options after --, kind bench or loadgen
        m = by_kind(doc.kind)
        words = words[words.index("--") + 1:] if "--" in words else []
    else:
        m = next((x for x in measurements() if script in x.legacy_scripts), None)
        if m is None:
            raise UserError(f"{doc.name}: no measurement took over {script}")
        kept: list[str] = []
        i = 0
        while i < len(words):
            if words[i] in m.scratch_flags:
                i += 2
                continue
            kept.append(words[i])
            i += 1
        words = kept
    return m.name, parse_measurement_args(m, words)
