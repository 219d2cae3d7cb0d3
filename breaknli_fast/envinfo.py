"""Versions, hardware and accelerator availability (``breaknli-fast env``, config.json, bench.json)."""

from __future__ import annotations

import importlib
import os
import platform
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

PACKAGES = ("torch", "transformers", "tokenizers", "onnxruntime", "onnx", "onnxscript", "openvino", "ctranslate2",
            "tensorrt", "mlcommons-loadgen", "ray", "spacy", "datasets", "huggingface_hub", "numpy", "typer", "rich")
# the entry-point groups plugins join by: the backends', the probes' and the suite's measurements' registries
PLUGIN_GROUPS = {"backend": "breaknli_fast.backends", "probe": "breaknli_fast.probes",
                 "measurement": "breaknli_fast.measurements"}
OWN_DISTRIBUTION = "breaknli-fast"

# ONNX Runtime's CUDA / TensorRT providers and TensorRT itself: the project's GPU machines cannot install them
# (onnxruntime-gpu's wheel is 256 MB, TensorRT's libraries come from NVIDIA's own index), so no run of them on a GPU
# has been made here; every place that offers them says so
NOT_VERIFIED = "not verified on a GPU"


def installed_entry_points(group: str) -> list[tuple[str, str]]:
    """(name, value) of the entry points installed packages declare in ``group`` (the backends' and probes'
    registries join by them); none where another package's metadata is broken, so the built-in ones still work."""
    from importlib.metadata import entry_points

    try:
        return [(ep.name, ep.value) for ep in entry_points(group=group)]
    except Exception:  # noqa: BLE001 - broken metadata of another package
        return []


def installed_plugins() -> list[dict[str, Any]]:
    """Every backend, probe and measurement another installed package declares (entry points of :data:`PLUGIN_GROUPS`): its
    kind, name, module, package and version (the built-in ones, declared by this package, are left out)."""
    from importlib.metadata import entry_points

    out: list[dict[str, Any]] = []
    for kind, group in PLUGIN_GROUPS.items():
        try:
            eps = list(entry_points(group=group))
        except Exception:  # noqa: BLE001 - broken metadata of another package
            continue
        for ep in eps:
            dist = getattr(ep, "dist", None)
            package = getattr(dist, "name", None) if dist is not None else None
            if package is not None and package.replace("_", "-").lower() == OWN_DISTRIBUTION:
                continue
            out.append({"kind": kind, "name": ep.name, "module": ep.value, "package": package,
                        "version": getattr(dist, "version", None) if dist is not None else None})
    return out


def package_version(name: str) -> str | None:
    try:
        from importlib.metadata import version

        if name == "onnxruntime":
            dist = onnxruntime_distribution()
            return dist[1] if dist else None
        return version(name)
    except Exception:
        return None


def onnxruntime_distribution() -> tuple[str, str] | None:
    """(distribution, version) of the ONNX Runtime that ``import onnxruntime`` runs: ``onnxruntime`` (CPU) or
    ``onnxruntime-gpu``. Both install into the same ``onnxruntime`` folder, so with both installed the files of
    the one installed last are what runs: the GPU package when the module has the CUDA provider."""
    from importlib.metadata import PackageNotFoundError, version

    installed = {}
    for cand in ("onnxruntime-gpu", "onnxruntime"):
        try:
            installed[cand] = version(cand)
        except PackageNotFoundError:
            continue
    if len(installed) < 2:
        return next(iter(installed.items()), None)
    try:
        ort = importlib.import_module("onnxruntime")
        gpu = "CUDAExecutionProvider" in ort.get_available_providers()
    except Exception:
        gpu = False
    name = "onnxruntime-gpu" if gpu else "onnxruntime"
    return name, installed[name]


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def memory_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    return None


@lru_cache(maxsize=1)
def git_hash() -> str | None:
    """:func:`git_commit` of this package's checkout, read once per process."""
    return git_commit(Path(__file__).resolve().parent.parent)


PACKAGE_DIR = Path(__file__).resolve().parent


def package_relative(path: str | Path) -> str:
    """A file of this package as ``breaknli_fast/...`` (the shipped data and models: where the package lies is no
    part of a record, so that a run directory or result file names no checkout's location), also one of another
    copy of the package recorded before (``.../breaknli_fast/assets/...``); any other path as it is."""
    p = Path(path)
    try:
        return (Path(PACKAGE_DIR.name) / p.resolve().relative_to(PACKAGE_DIR)).as_posix()
    except (ValueError, OSError):
        pass
    parts = p.parts
    for i in range(len(parts) - 1):
        if parts[i] == PACKAGE_DIR.name and parts[i + 1] == "assets":
            return Path(*parts[i:]).as_posix()
    return str(path)


@lru_cache(maxsize=1)
def code_digest() -> str:
    """The first 12 hex digits of the SHA-256 of this package's Python sources (their paths and bytes): which code
    ran, also where no git commit is known (an install from a copy) or where one commit's tree was changed."""
    import hashlib

    root = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for p in sorted(root.rglob("*.py")):
        h.update(p.relative_to(root).as_posix().encode() + b"\0")
        try:
            h.update(p.read_bytes())
        except OSError:
            continue
    return h.hexdigest()[:12]


COMMIT_ENV = "BREAKNLI_FAST_COMMIT"


def git_commit(root: Path, exclude: Sequence[str] = ()) -> str | None:
    """The commit of the checkout at ``root``: the one given in ``BREAKNLI_FAST_COMMIT`` where that is set (a copy of
    the tree sent to another machine: the copy's ``.git``, where one travels, need not be the sent tree's), else
    ``git rev-parse HEAD`` with ``-dirty`` when tracked files differ from it, leaving out the paths in ``exclude``;
    None without either. Not cached: the tree may change."""
    given = os.environ.get(COMMIT_ENV, "").strip()
    if given:
        return given
    if not (root / ".git").exists():
        return None
    git = ["git", "-C", str(root)]
    try:
        out = subprocess.run(git + ["rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(git + ["status", "--porcelain", "--untracked-files=no", "--", "."]
                               + [f":(exclude){p}" for p in exclude], capture_output=True, text=True, timeout=5)
        if out.returncode != 0 or dirty.returncode != 0:
            return None
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return None


def accelerators() -> dict[str, Any]:
    info: dict[str, Any] = {"cuda_available": False}
    try:
        import torch

        info["torch_cuda_build"] = torch.version.cuda
        if torch.cuda.is_available():
            info["cuda_available"] = True
            info["gpus"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as e:  # pragma: no cover
        info["torch_error"] = str(e)
    try:
        ort = importlib.import_module("onnxruntime")
        info["onnxruntime_providers"] = ort.get_available_providers()
        info["onnxruntime_distribution"] = (onnxruntime_distribution() or (None,))[0]
    except Exception:
        info["onnxruntime_providers"] = None
    try:
        trt = importlib.import_module("tensorrt")
        info["tensorrt"] = getattr(trt, "__version__", "unknown")
    except Exception:
        info["tensorrt"] = None
    return info


def environment(packages: Sequence[str] = ()) -> dict[str, Any]:
    import breaknli_fast

    try:
        import torch

        threads = torch.get_num_threads()
    except Exception:  # pragma: no cover
        threads = None
    return {
        "breaknli_fast": breaknli_fast.__version__,
        "git": git_hash(),
        "code": code_digest(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": threads,
        "memory_gib": memory_gib(),
        "packages": {p: package_version(p) for p in dict.fromkeys([*PACKAGES, *packages])},
        "plugins": installed_plugins(),
        "accelerators": accelerators(),
    }
