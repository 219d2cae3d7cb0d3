"""What an edge user reads beside the latency: cold start (building the model or checking its cached copy, loading
and session creation, the first inference, each timed on its own), the engine's files on disk, peak memory."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any, Mapping

from breaknli_fast.engines.model_info import resolve_model
from breaknli_fast.export.api import timed
from breaknli_fast.study.loading import EngineConfig, Models, load_models


def load_timed(config: EngineConfig, requests: Mapping[str, Any]) -> tuple[Models, dict[str, float]]:
    """Load ``requests`` as the study does; ``{"export_s", "load_s"}``: the time in ``export_model`` (building or
    checking the export; None when the engine exports nothing), and the rest (reading the weights, creating the
    sessions)."""
    with timed() as spent:
        t0 = time.perf_counter()
        models = load_models(config, requests)
        total = time.perf_counter() - t0
    export = sum(spent)
    # an engine that builds nothing (torch) has no export step: None, not 0
    return models, {"export_s": export if spent else None, "load_s": max(0.0, total - export)}


def folder_mib(path: str | Path) -> float | None:
    """Size of a file or of every file under a folder (links followed), MiB."""
    p = Path(path)
    if p.is_file():
        return p.stat().st_size / 2**20
    if not p.is_dir():
        return None
    total = 0
    for root, _, files in os.walk(p, followlinks=True):
        for name in files:
            try:
                total += (Path(root) / name).stat().st_size
            except OSError:
                continue
    return total / 2**20


def size_on_disk(engine: Any) -> float | None:
    """The files the engine runs: its export folder where it built one, else the model's own folder."""
    info = getattr(engine, "info", None)
    details = getattr(info, "details", None) or {}
    where = details.get("export_dir")
    if not where and info is not None:
        try:
            where = resolve_model(info.model)
        except Exception:  # noqa: BLE001 - a test engine's made-up model name has no folder
            return None
    return folder_mib(where) if where else None
