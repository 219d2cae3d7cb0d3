"""Timing and memory primitives of the bench: repeated measurement with warm-up, latency
percentiles, device synchronisation, peak process RSS and peak GPU memory."""

from __future__ import annotations

import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

PERCENTILES = (50, 90, 95, 99)


def latency_stats(seconds: Sequence[float]) -> dict[str, Any]:
    """n, mean, median / p90 / p95 / p99 (linear interpolation), min and max, in milliseconds."""
    xs = np.asarray(list(seconds), dtype=float) * 1000.0
    if xs.size == 0:
        return {"n": 0, "mean_ms": None, "median_ms": None, "p90_ms": None, "p95_ms": None, "p99_ms": None,
                "min_ms": None, "max_ms": None}
    p = np.percentile(xs, PERCENTILES)
    return {"n": int(xs.size), "mean_ms": float(xs.mean()), "median_ms": float(p[0]), "p90_ms": float(p[1]),
            "p95_ms": float(p[2]), "p99_ms": float(p[3]), "min_ms": float(xs.min()), "max_ms": float(xs.max())}


def synchronize(device: str) -> None:
    """Wait for queued GPU work before a timer stops (no-op on CPU)."""
    if device.startswith("cuda"):
        try:
            import torch

            if torch.cuda.is_available():
                torch.cuda.synchronize()
        except Exception:  # pragma: no cover
            pass


@dataclass
class Repeated:
    """Result of :func:`repeat`: per-iteration seconds of the measured iterations (warm-up excluded)."""

    seconds: list[float] = field(default_factory=list)
    warmup: int = 0
    result: Any = None  # what the first measured iteration returned

    @property
    def median(self) -> float:
        return float(np.median(self.seconds)) if self.seconds else float("nan")

    def summary(self) -> dict[str, Any]:
        s = np.asarray(self.seconds, dtype=float)
        return {"iterations": int(s.size), "warmup": self.warmup, "total_s": float(s.sum()),
                "median_s": float(np.median(s)), "mean_s": float(s.mean()), "min_s": float(s.min()),
                "std_s": float(s.std(ddof=1)) if s.size > 1 else 0.0}


@dataclass
class Task:
    """One thing to time repeatedly: ``fn`` (timed), ``before`` / ``after`` (untimed, around every iteration)."""

    fn: Callable[[], Any]
    before: Callable[[], None] | None = None
    after: Callable[[], None] | None = None
    rep: Repeated = field(default_factory=Repeated)
    error: BaseException | None = None


def repeat_interleaved(tasks: Sequence[Task], *, warmup: int = 1, min_iterations: int = 3, min_seconds: float = 1.0,
                       max_iterations: int = 1000, device: str = "cpu") -> list[Repeated]:
    """Time several tasks in rounds (A B C A B C ...), so slow drifts of the machine's load hit every
    task alike. Each task runs ``warmup`` times unmeasured, then until it has at least
    ``min_iterations`` iterations *and* ``min_seconds`` of measured time (as trtexec's --iterations /
    --duration and optimum-benchmark's latency tracker do), at most ``max_iterations``.

    ``before`` runs before every iteration and ``after`` after every measured one, both outside the
    timer. A task that raises is dropped from the rounds with its exception in ``task.error``."""
    warmup = max(0, int(warmup))

    def run(t: Task, timed: bool) -> None:
        try:
            if t.before:
                t.before()
            t0 = time.perf_counter()
            res = t.fn()
            synchronize(device)
            dt = time.perf_counter() - t0
            if timed:
                if not t.rep.seconds:
                    t.rep.result = res
                t.rep.seconds.append(dt)
                if t.after:
                    t.after()
        except Exception as e:  # noqa: BLE001 - reported by the caller
            t.error = e

    def done(t: Task) -> bool:
        n = len(t.rep.seconds)
        return t.error is not None or n >= max_iterations or (n >= max(1, min_iterations) and sum(t.rep.seconds) >= min_seconds)

    for t in tasks:
        t.rep.warmup = warmup
    for _ in range(warmup):
        for t in tasks:
            if t.error is None:
                run(t, timed=False)
    while not all(done(t) for t in tasks):
        for t in tasks:
            if not done(t):
                run(t, timed=True)
    return [t.rep for t in tasks]


def repeat(fn: Callable[[], Any], *, warmup: int = 1, min_iterations: int = 3, min_seconds: float = 1.0,
           max_iterations: int = 1000, device: str = "cpu", before: Callable[[], None] | None = None,
           after: Callable[[], None] | None = None) -> Repeated:
    """:func:`repeat_interleaved` for a single task; re-raises its exception."""
    t = Task(fn, before, after)
    repeat_interleaved([t], warmup=warmup, min_iterations=min_iterations, min_seconds=min_seconds,
                       max_iterations=max_iterations, device=device)
    if t.error is not None:
        raise t.error
    return t.rep


# -- memory ---------------------------------------------------------------------------------------

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _status_kib(key: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def rss_mib() -> float | None:
    kib = _status_kib("VmRSS")
    return round(kib / 1024, 1) if kib is not None else None


def ru_maxrss_mib() -> float:
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (1024 * 1024) if sys.platform == "darwin" else peak / 1024, 1)


class PeakMemory:
    """Peak resident memory of this process over a section, and peak GPU memory where torch sees one.

    On Linux the kernel's peak-RSS counter (VmHWM) is reset when the section starts (writing ``5``
    to ``/proc/self/clear_refs``), so each engine's peak is its own. Elsewhere it falls back to
    ``getrusage``'s ``ru_maxrss``: the process-wide peak since start (monotonic, not per engine)."""

    GPU_NOTE = ("torch.cuda.max_memory_allocated: tensors allocated through torch's caching allocator on "
                "this device only (torch engines' weights, activations and KV cache); memory held by "
                "onnxruntime / TensorRT arenas and the CUDA context is not included")

    def __init__(self, device: str = "cpu"):
        self.device = device
        self.method = ""
        self.rss_start_mib: float | None = None
        self._gpu = False

    def start(self) -> "PeakMemory":
        self.rss_start_mib = rss_mib()
        try:
            _CLEAR_REFS.write_text("5")
            self.method = "VmHWM of /proc/self/status, reset per engine via /proc/self/clear_refs"
        except OSError:
            self.method = "getrusage ru_maxrss: process-wide peak since start (not reset per engine)"
        if self.device.startswith("cuda"):
            try:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.reset_peak_memory_stats()
                    self._gpu = True
            except Exception:  # pragma: no cover
                self._gpu = False
        return self

    def read(self) -> dict[str, Any]:
        hwm = _status_kib("VmHWM") if self.method.startswith("VmHWM") else None
        out: dict[str, Any] = {
            "peak_rss_mib": round(hwm / 1024, 1) if hwm is not None else ru_maxrss_mib(),
            "rss_before_load_mib": self.rss_start_mib,
            "rss_now_mib": rss_mib(),
            "rss_method": self.method,
            "gpu_peak_allocated_mib": None,
            "gpu_note": None,
        }
        if self._gpu:
            import torch

            out["gpu_peak_allocated_mib"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
            out["gpu_note"] = self.GPU_NOTE
        return out
