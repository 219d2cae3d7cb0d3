"""Provenance of a measurement: the :class:`Recorder` that measures around it (date, commit, machine, load average
before and after) and writes its result file, and the helpers that keep a recorded command or path valid in any
fresh clone (:func:`portable`, :func:`portable_command`, :func:`portable_strings`).

A result file (``benchmarks/results/<name>.json``, :class:`breaknli_fast.suite.result.ResultFile`)::

    {
      "schema": "breaknli-fast-result/1",
      "kind": "run_loop",                 # the measurement's result kind (its payload type)
      "command": "breaknli-fast suite measure run-loop --limit 200 ...",   # the command that measures it again
      "measurement": {"name": "run-loop", "args": {"limit": 200, ...}, "entry": "run-loop"},
      "date": "2026-01-01T12:00:00+00:00",  # UTC, when the measurement started
      "finished": "2026-01-01T12:03:10+00:00",
      "duration_s": 190.2,
      "commit": "<git rev-parse HEAD>[-dirty]",
      "machine": {"cpu": ..., "cores": ..., "usable_cores": ..., "memory_gib": ..., "python": ...,
                  "platform": ..., "packages": {"torch": ..., "onnxruntime": ..., ...},
                  "env": {"OMP_WAIT_POLICY": ...},      # measurement-relevant variables that were set
                  "load_average_before": [1, 5, 15 min], "load_average_after": [...]},
      "payload": {...}                   # what was measured: the measurement's payload type
    }

Files written before the measurements joined the package record the script command that wrote them and no
``measurement``; they read the same way.
"""

from __future__ import annotations

import json
import os
import platform
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

ROOT = Path(__file__).resolve().parent.parent.parent  # the checkout (benchmarks/, scripts/, tests/ beside the package)
SCHEMA = "breaknli-fast-result/1"
# variables that change what a measurement sees; recorded (and put before the command) when set
ENV_VARS = ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "CUDA_VISIBLE_DEVICES")
PACKAGES = ("torch", "onnxruntime", "transformers", "optimum", "numpy", "ctranslate2")  # optimum: a peer only


def load_average() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def utc_now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _env_settings() -> dict[str, str]:
    import breaknli_fast

    # importing breaknli_fast sets OMP_WAIT_POLICY for its own process: recorded only where the user set it
    return {k: os.environ[k] for k in ENV_VARS
            if k in os.environ and (k not in PACKAGE_DEFAULTS or k in breaknli_fast.USER_SET_ENV)}


PACKAGE_DEFAULTS = ("OMP_WAIT_POLICY",)  # what importing breaknli_fast sets where the user did not
_ENV_AT_START = _env_settings()


def env_settings() -> dict[str, str]:
    """The measurement-relevant environment variables the user set (as at this module's import)."""
    return dict(_ENV_AT_START)


def portable(arg: str) -> str:
    """An argument as it runs from any fresh clone: a path inside the checkout relative to it, another absolute
    path (a scratch folder of one machine) as ``$WORK/<its name>``, and the lent GPU's output folder as ``$OUT``."""
    if not arg.startswith("/"):
        return arg
    root = ROOT
    p = Path(arg)
    try:
        return str(p.resolve().relative_to(root))
    except ValueError:
        pass
    # a path inside another checkout of the repository (a run from a copy at another commit, or this checkout
    # cloned elsewhere since): the part from a top-level folder of the repository on, where that folder holds it
    parts = p.parts
    for i in range(1, len(parts) - 1):
        inside = Path(*parts[i:])
        if (root / parts[i]).is_dir() and (root / inside).parent.is_dir():
            return str(inside)
    if arg.rstrip("/") == "/root/out":
        return "$OUT"
    return f"$WORK/{p.name}"


# the repository's top-level folders: an absolute path through one of them into a file this checkout has is a
# path of some checkout of the repository (this one, another clone, the copy on a lent machine)
TOP_LEVEL = ("breaknli_fast", "scripts", "benchmarks", "tests", "docs")
_ABSOLUTE = re.compile(r"(?<![\w.~$-])(/[^\s\"'`;,()<>|]+)")


def checkout_relative(path: str, root: Path | None = None) -> str | None:
    """``path`` relative to the checkout it lies in, where it is a path into some checkout of the repository: the
    part from a top-level folder on, when this checkout has that file or folder (a cache such as
    ``~/.cache/breaknli_fast`` or an installed package under ``site-packages`` is not a checkout); else None."""
    root = root or ROOT
    parts = PurePosixPath(path).parts
    for i in range(1, len(parts)):
        if parts[i] in TOP_LEVEL:
            if any(x.startswith(".") or x == "site-packages" for x in parts[1:i]):
                return None
            inside = PurePosixPath(*parts[i:])
            return str(inside) if (root / inside).exists() else None
    return None


def portable_strings(obj: Any, root: Path | None = None) -> Any:
    """``obj`` (a result document, or any part of it) with every absolute path into a checkout of the repository
    made relative to it, wherever it stands in a string: a result file names no checkout's location."""
    if isinstance(obj, str):
        return _ABSOLUTE.sub(lambda m: checkout_relative(m.group(1), root) or m.group(1), obj)
    if isinstance(obj, dict):
        return {k: portable_strings(v, root) for k, v in obj.items()}
    if isinstance(obj, list):
        return [portable_strings(v, root) for v in obj]
    return obj


def portable_command(command: str) -> str:
    """:func:`portable` applied to every word of a recorded command line."""
    try:
        words = shlex.split(command)
    except ValueError:
        return command
    return " ".join(w if w.startswith("$") else shlex.quote(w) for w in (portable(x) for x in words))


def measure_command(measurement: str, argv: list[str]) -> str:
    """``breaknli-fast suite measure NAME ARGS`` as it measures again (``argv``: the arguments, ``--result`` with
    them), every path portable (:func:`portable`), preceded by the measurement-relevant environment variables
    that are set."""
    args = [portable(a) for a in argv]
    env = [f"{k}={v}" for k, v in env_settings().items()]
    return " ".join(env + [" ".join(a if a.startswith("$") else shlex.quote(a)
                                    for a in ["breaknli-fast", "suite", "measure", measurement, *args])])


# what the measurements themselves write: a change there does not make the measured code differ from the commit
OUTPUTS = ("benchmarks/results", "BENCHMARKS.md")


def commit(root: Path | None = None) -> str | None:
    """``git rev-parse HEAD`` of the checkout, with ``-dirty`` when tracked files other than the benchmark
    outputs (:data:`OUTPUTS`) differ from it: ``scripts/run_benchmarks.sh`` rewrites result files as it goes,
    and that alone must not mark the later steps' code as uncommitted. None outside a git checkout."""
    from breaknli_fast.envinfo import git_commit

    return git_commit(root or ROOT, exclude=OUTPUTS)


def machine(load_before: list[float] | None, load_after: list[float] | None) -> dict[str, Any]:
    from breaknli_fast.engines.cpu_features import cpu_identity
    from breaknli_fast.envinfo import cpu_model, memory_gib, package_version

    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        usable = os.cpu_count()
    import breaknli_fast

    return {"cpu": cpu_model(), "cpu_id": cpu_identity(), "cores": os.cpu_count(), "usable_cores": usable,
            "memory_gib": memory_gib(),
            "python": platform.python_version(), "platform": platform.platform(),
            "breaknli_fast": breaknli_fast.__version__,
            "packages": {p: package_version(p) for p in PACKAGES}, "env": env_settings(),
            "load_average_before": load_before, "load_average_after": load_after}


class Recorder:
    """Provenance of one measurement: created before it starts (its date, the commit, the load average), handed to
    the measurement's ``run`` (which may note more: ``work`` is its scratch folder), and :meth:`save` writes the
    result file around the payload the measurement returns.

    ``kind``: the result's kind (the payload type a reader takes); ``command``: the command line that measures it
    again; ``measurement``: the measurement's name and arguments (and the suite entry), recorded as such."""

    def __init__(self, kind: str, command: str, measurement: dict[str, Any] | None = None,
                 work: Path | None = None):
        if not re.fullmatch(r"[a-z][a-z0-9_]*", kind or ""):
            raise ValueError(f"a result kind is a lower-case name, not {kind!r}")
        self.kind, self.command, self.measurement, self.work = kind, command, measurement, work
        self.exit_code = 0  # what the measure command exits with once the file is written (a strict bench: 1)
        self.result_path: Path | None = None  # where the result file goes (set by the measure command)
        self.date = utc_now()
        self.commit = commit()  # the tree as it is when the measurement starts
        self.load_before = load_average()
        self._t0 = time.perf_counter()

    def document(self, payload: Any) -> dict[str, Any]:
        """The result file's document (the payload through the one serialiser); every path into the checkout
        relative to it (:func:`portable_strings`)."""
        from breaknli_fast.bench.types import to_json

        doc: dict[str, Any] = {"schema": SCHEMA, "kind": self.kind, "command": self.command}
        if self.measurement is not None:
            doc["measurement"] = self.measurement
        doc.update({"date": self.date, "finished": utc_now(), "duration_s": round(time.perf_counter() - self._t0, 1),
                    "commit": self.commit, "machine": machine(self.load_before, load_average()),
                    "payload": to_json(payload)})
        return portable_strings(doc)

    def save(self, path: str | Path, payload: Any, quiet: bool = False) -> Path:
        doc = self.document(payload)
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(p.name + ".tmp")
        tmp.write_text(json.dumps(doc, indent=2, default=_json_default) + "\n")
        tmp.replace(p)
        if not quiet:
            print(f"result written to {p}", file=sys.stderr)
        return p

    def checkpoint(self, payload: Any) -> None:
        """The result file so far, where one is to be written: a measurement that may be stopped (a step at its
        time cap) keeps what it measured."""
        if self.result_path is not None:
            self.save(self.result_path, payload, quiet=True)


def run_timed(cmd: list[str], env: dict[str, str] | None = None, log: Path | None = None,
              timeout: float | None = None, start: threading.Barrier | None = None) -> dict[str, Any]:
    """Run ``cmd`` to its end; its wall seconds, exit code, peak RSS and CPU seconds (the kernel's
    rusage of that process), and whether ``timeout`` stopped it. stdout and stderr go to ``log``
    (or nowhere). With ``start``, the process starts once every party of the barrier is ready, so
    that several processes begin at the same moment."""
    out = open(log, "w") if log is not None else subprocess.DEVNULL
    try:
        if start is not None:
            start.wait()
        t0 = time.perf_counter()
        p = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        killed = threading.Event()

        def kill() -> None:
            killed.set()
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(timeout, kill) if timeout else None
        if timer is not None:
            timer.start()
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
        if timer is not None:
            timer.cancel()
        p.returncode = os.waitstatus_to_exitcode(status)
    finally:
        if log is not None:
            out.close()
    return {"returncode": p.returncode, "wall_seconds": round(wall, 3), "timed_out": killed.is_set(),
            "peak_rss_mib": round(ru.ru_maxrss / 1024, 1),  # Linux: KiB
            "cpu_seconds": round(ru.ru_utime + ru.ru_stime, 2)}


def tail(path: Path, chars: int = 600) -> str:
    try:
        return path.read_text(errors="replace")[-chars:].strip()
    except OSError:
        return ""


def _json_default(o: Any) -> Any:
    try:
        import numpy as np

        if isinstance(o, np.integer):
            return int(o)
        if isinstance(o, np.floating):
            return float(o)
        if isinstance(o, np.bool_):
            return bool(o)
        if isinstance(o, np.ndarray):
            return o.tolist()
    except ImportError:  # pragma: no cover
        pass
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)
