"""torch's CUDA settings of the torch engine: the TF32 switches, which change the numbers of an fp32 run, and the
cuDNN attention backend, which changes the speed of a half-precision one.

On Ampere and later GPUs (A100, H100, H200) torch may run fp32 matrix products and convolutions in TF32 (10 bits of
mantissa instead of 23): faster, and no longer fp32 arithmetic. The torch engine is the fp32 *reference*, so where
it loads on CUDA it switches TF32 off (:func:`prepare`), unless ``BREAKNLI_FAST_TF32=1`` asks for it; the switches as
they then stand are recorded in the engine's details (``tf32`` in config.json and bench.json, :func:`tf32_state`).

The switches are set through the API that every torch from 1.7 has (``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.cudnn.allow_tf32``); torch 2.9 added ``fp32_precision`` attributes, and reading the old switches
raises where code in the same process set the new ones differently, so reading is guarded and says so.

On Hopper GPUs (H100, H200) torch 2.11 sends fp16 / bf16 ``scaled_dot_product_attention`` with a padding mask (what
transformers' sdpa attention passes for a padded batch) to cuDNN first, and cuDNN builds an execution plan for every
new (batch, length) shape: tens of milliseconds each. The loop's classifier batches come in ever new shapes, so on an
H200 the bf16 / fp16 classifier's batches took a median 45 to 51 ms in a bench's end-to-end pass against 3.9 ms at
fp32, while the same batches, repeated, took 2.6 ms (benchmarks/results/gpu-check-h200.json, bench-mini). Where it
loads on CUDA the torch engine takes cuDNN out of torch's attention backends (the flash and memory-efficient kernels
remain), unless ``BREAKNLI_FAST_CUDNN_SDPA=1`` asks for it; the state is recorded in the engine's details (``sdpa``).
"""

from __future__ import annotations

import os
from typing import Any

TF32_ENV = "BREAKNLI_FAST_TF32"
CUDNN_SDPA_ENV = "BREAKNLI_FAST_CUDNN_SDPA"


def _env_on(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def tf32_requested() -> bool:
    """Whether ``BREAKNLI_FAST_TF32`` asks for TF32 (1, true, yes or on)."""
    return _env_on(TF32_ENV)


def sdpa_state() -> dict[str, Any]:
    """Whether torch's attention may use cuDNN, and whether ``BREAKNLI_FAST_CUDNN_SDPA`` asked for it."""
    import torch

    out: dict[str, Any] = {"cudnn_requested": _env_on(CUDNN_SDPA_ENV)}
    read = getattr(torch.backends.cuda, "cudnn_sdp_enabled", None)
    out["cudnn_enabled"] = bool(read()) if read is not None else "not in this torch"
    return out


def tf32_state() -> dict[str, Any]:
    """torch's TF32 switches as they stand, and whether ``BREAKNLI_FAST_TF32`` asked for TF32."""
    import torch

    out: dict[str, Any] = {"requested": tf32_requested(), "env": os.environ.get(TF32_ENV)}
    for key, read in (("matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
                      ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32),
                      ("float32_matmul_precision", torch.get_float32_matmul_precision)):
        try:
            out[key] = read()
        except Exception as e:  # noqa: BLE001 - torch >= 2.9 refuses to read mixed old / new settings
            out[key] = f"unreadable: {str(e).splitlines()[0][:160]}"
    return out


def prepare(device: str) -> dict[str, Any] | None:
    """On a CUDA ``device``: TF32 off for matrix products and cuDNN (on where ``BREAKNLI_FAST_TF32`` asks), cuDNN's
    attention off (on where ``BREAKNLI_FAST_CUDNN_SDPA`` asks), and the TF32 switches as they then stand. On the CPU
    nothing is set (None)."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    on = tf32_requested()
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    enable = getattr(torch.backends.cuda, "enable_cudnn_sdp", None)
    if enable is not None:
        enable(_env_on(CUDNN_SDPA_ENV))
    return tf32_state()
