"""The export cache: where exports live, their ``manifest.json``, reuse and atomic replacement.

Layout: ``<cache root>/exports/<slug>-<hash>/`` where the cache root is ``$BREAKNLI_FAST_CACHE``
(default ``~/.cache/breaknli-fast``), ``slug`` is readable (model name, format, precision) and
``hash`` covers *what* was asked for (the model's resolved path or hub id, format, precision,
quantization scheme). *Whether* an existing export may be reused is decided by its manifest's
``key``: source file hashes, precision, format, quantization, opset, exporter schema and the
versions of the libraries that built it must all match; otherwise it is rebuilt in place.

Every export is built in a temporary sibling folder and renamed into place only once it is
complete (manifest written last), under a lock file, so an interrupted or concurrent export
never leaves a half-written folder behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from breaknli_fast.engines.model_info import file_sha256
from breaknli_fast.export.errors import ExportError

MANIFEST = "manifest.json"
# Bump when the layout or the export recipe changes: older exports are then rebuilt.
SCHEMA = 1
LIBRARIES = ("torch", "transformers", "onnxruntime", "onnx")  # the default set; an exporter names its own


def cache_root() -> Path:
    env = os.environ.get("BREAKNLI_FAST_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "breaknli-fast"


def exports_root(cache_dir: str | Path | None = None) -> Path:
    """``<cache_dir>`` as given, else ``<cache root>/exports``."""
    return Path(cache_dir).expanduser() if cache_dir else cache_root() / "exports"


def slugify(text: str) -> str:
    s = re.sub(r"[^A-Za-z0-9._-]+", "-", text.strip().strip("/")).strip("-.")
    return (s or "model")[-60:]


def export_dir_for(model: str, resolved: str, format: str, precision: str, variant: str,
                   cache_dir: str | Path | None = None) -> Path:
    ident = json.dumps({"model": resolved, "format": format, "precision": precision, "variant": variant}, sort_keys=True)
    h = hashlib.sha256(ident.encode()).hexdigest()[:12]
    name = Path(model.rstrip("/")).name if Path(model).expanduser().exists() else model
    return exports_root(cache_dir) / f"{slugify(name)}-{format}-{variant}-{h}"


def library_versions(names: tuple[str, ...] = LIBRARIES) -> dict[str, str | None]:
    """Installed versions of ``names`` (part of an export's cache key: an export is rebuilt when one changes)."""
    from importlib.metadata import PackageNotFoundError, version

    from breaknli_fast.envinfo import onnxruntime_distribution

    out: dict[str, str | None] = {}
    for name in names:
        if name == "onnxruntime":  # the build that runs (onnxruntime-gpu when it is installed over the CPU package)
            dist = onnxruntime_distribution()
            out[name] = f"{dist[1]} ({dist[0]})" if dist and dist[0] != "onnxruntime" else (dist[1] if dist else None)
            continue
        cands = ("tensorrt", "tensorrt-cu12", "tensorrt-cu13") if name == "tensorrt" else (name,)
        out[name] = None
        for c in cands:
            try:
                out[name] = version(c)
                break
            except PackageNotFoundError:
                continue
    return out


def files_manifest(folder: Path) -> dict[str, dict[str, Any]]:
    """sha256 and size of every file in an export folder (not the manifest itself)."""
    out = {}
    for f in sorted(folder.rglob("*")):
        if f.is_file() and f.name != MANIFEST:
            out[str(f.relative_to(folder))] = {"sha256": file_sha256(f), "bytes": f.stat().st_size}
    return out


def read_manifest(folder: Path) -> dict[str, Any] | None:
    try:
        return json.loads((Path(folder) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def write_manifest(folder: Path, manifest: dict[str, Any]) -> None:
    """Write (or rewrite) a manifest atomically."""
    folder = Path(folder)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".manifest.", suffix=".tmp")
    with os.fdopen(fd, "w") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=False, default=str)
        fh.write("\n")
    os.replace(tmp, folder / MANIFEST)


def mismatch(manifest: dict[str, Any] | None, key: dict[str, Any], folder: Path) -> str | None:
    """Why an existing export cannot be reused (None when it can)."""
    if manifest is None:
        return "no manifest"
    old = manifest.get("key") or {}
    for k in sorted(set(old) | set(key)):
        if old.get(k) != key.get(k):
            return f"{k} changed"
    for name, meta in (manifest.get("files") or {}).items():
        p = folder / name
        if not p.is_file() or p.stat().st_size != meta.get("bytes"):
            return f"file {name} missing or changed"
    return None


def lock_path(target: Path, cache_dir: str | Path | None = None) -> Path:
    """Where the lock of an export folder lives: ``<exports root>/.locks/`` for folders in the cache,
    ``<cache root>/locks/`` for folders given with ``--out`` (nothing is written beside them)."""
    root = exports_root(cache_dir)
    name = hashlib.sha256(str(target.resolve()).encode()).hexdigest()[:16] + ".lock"
    if target.resolve().parent == root.resolve():
        return root / ".locks" / name
    return cache_root() / "locks" / name


@contextlib.contextmanager
def locked(lock: Path) -> Iterator[None]:
    """An exclusive lock on the file ``lock`` (no-op where fcntl is missing or the folder is read-only)."""
    try:
        import fcntl

        lock.parent.mkdir(parents=True, exist_ok=True)
        fh = open(lock, "w")
    except (ImportError, OSError):  # pragma: no cover - Windows, read-only cache
        yield
        return
    with fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def staging_dir(target: Path) -> Iterator[Path]:
    """A temporary folder beside ``target``; removed on error (the caller installs it with :func:`install`).
    A cache folder that cannot be written (read-only, under a file) is a one-line :class:`ExportError`, which
    ``--engine auto`` answers by running on torch."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.tmp-"))
    except OSError as e:
        raise ExportError(f"cannot write the export cache {target.parent}: {e.strerror or e}; set "
                          "BREAKNLI_FAST_CACHE to a writable folder (or export with --out)") from None
    try:
        yield tmp
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def install(tmp: Path, target: Path) -> None:
    """Replace ``target`` by the complete folder ``tmp`` (two renames; the old one is then deleted)."""
    old = None
    if target.exists():
        old = target.parent / f".{target.name}.old-{os.getpid()}-{int(time.time() * 1000)}"
        os.replace(target, old)
    os.replace(tmp, target)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def now_iso() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S%z")
