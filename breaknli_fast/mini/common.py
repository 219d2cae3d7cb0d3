"""Helpers shared by mini-model training, evaluation and the model cards: seeding, hardware description, fp16
saving, batch padding, JSON files, progress bars, the hypothesis-length buckets of the generator check.

The mini modules depend on each other in one direction: ``train`` -> ``evaluate`` -> ``cards`` -> ``data``,
``common``; nothing here or in ``data`` imports the other mini modules."""

from __future__ import annotations

import json
import logging
import os
import platform
import random
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np
import torch

log = logging.getLogger("breaknli_fast.mini")


def seed_everything(seed: int, deterministic: bool = True) -> None:
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    os.environ.setdefault("PYTHONHASHSEED", str(seed))
    if deterministic:
        try:
            torch.use_deterministic_algorithms(True, warn_only=True)
        except Exception:  # pragma: no cover - older torch
            pass


def set_threads(threads: int | None) -> int:
    if threads:
        torch.set_num_threads(int(threads))
    return torch.get_num_threads()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def hardware() -> dict[str, Any]:
    return {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "cpu": cpu_model(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": "cpu",
    }


def pad_batch(seqs: Sequence[Sequence[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token id lists right-padded with ``pad_id`` to the longest: ``(input_ids, attention_mask)``."""
    n = max(len(s) for s in seqs)
    ids = torch.full((len(seqs), n), pad_id, dtype=torch.long)
    mask = torch.zeros((len(seqs), n), dtype=torch.long)
    for i, s in enumerate(seqs):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        mask[i, : len(s)] = 1
    return ids, mask


LENGTH_BUCKETS = ("1-6 words", "7-9 words", "10+ words")


def length_bucket(hypothesis: str) -> str:
    """The hypothesis-length bucket of the generator check's breakdown (words split on whitespace)."""
    n = len(hypothesis.split())
    return LENGTH_BUCKETS[0] if n <= 6 else LENGTH_BUCKETS[1] if n <= 9 else LENGTH_BUCKETS[2]


def n_params(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def save_fp16(model: Any, out_dir: str | Path, tokenizer: Any | None = None) -> Path:
    """Save weights as fp16 safetensors while the config says float32 (``from_pretrained`` loads fp32).

    The in-memory model is left in fp32."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().clone() for k, v in model.state_dict().items()}
    model.half()
    try:
        model.config.torch_dtype = torch.float32
        model.save_pretrained(out, safe_serialization=True)
    finally:
        model.float()
        model.load_state_dict(state)
    cfg_path = out / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for key in ("torch_dtype", "dtype"):
        if key in cfg:
            cfg[key] = "float32"
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")
    if tokenizer is not None:
        tokenizer.save_pretrained(out)
    return out


def folder_size(path: str | Path) -> int:
    return sum(f.stat().st_size for f in Path(path).rglob("*") if f.is_file())


def write_json(path: str | Path, obj: Any) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n", encoding="utf-8")


def read_json(path: str | Path, default: Any = None) -> Any:
    p = Path(path)
    if not p.exists():
        return default
    return json.loads(p.read_text(encoding="utf-8"))


def make_progress(enabled: bool = True):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[info]}"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        disable=not enabled,
        transient=False,
    )


@contextmanager
def timed(name: str, store: dict[str, float]) -> Iterator[None]:
    t0 = time.perf_counter()
    try:
        yield
    finally:
        store[name] = store.get(name, 0.0) + time.perf_counter() - t0
