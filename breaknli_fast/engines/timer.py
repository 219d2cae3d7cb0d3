"""Seconds of repeated calls of a function on a device: CUDA events on CUDA (after warm-up and a synchronise),
``time.perf_counter`` elsewhere. One timer for the GPU check's cudagraph steps and its bounds."""

from __future__ import annotations

import time
from typing import Any, Callable


def timer(device: str) -> Callable[[Callable[[], Any], int], list[float]]:
    """Seconds of each of ``reps`` calls of a function after warm-up: CUDA events on CUDA, perf_counter else."""
    import torch

    def cuda_time(fn: Callable[[], Any], reps: int) -> list[float]:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        out = []
        for _ in range(reps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            out.append(a.elapsed_time(b) / 1000.0)
        return out

    def cpu_time(fn: Callable[[], Any], reps: int) -> list[float]:
        fn()
        out = []
        for _ in range(reps):
            t0 = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t0)
        return out

    return cuda_time if device.startswith("cuda") else cpu_time
