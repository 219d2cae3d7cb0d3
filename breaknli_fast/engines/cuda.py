"""torch's CUDA settings that change the numbers of an fp32 run: the TF32 switches.

On Ampere and later GPUs (A100, H100, H200) torch may run fp32 matrix products and convolutions in TF32 (10 bits of
mantissa instead of 23): faster, and no longer fp32 arithmetic. The torch engine is the fp32 *reference*, so where
it loads on CUDA it switches TF32 off (:func:`prepare`), unless ``BREAKNLI_FAST_TF32=1`` asks for it; the switches as
they then stand are recorded in the engine's details (``tf32`` in config.json and bench.json, :func:`tf32_state`).

The switches are set through the API that every torch from 1.7 has (``torch.backends.cuda.matmul.allow_tf32``,
``torch.backends.cudnn.allow_tf32``); torch 2.9 added ``fp32_precision`` attributes, and reading the old switches
raises where code in the same process set the new ones differently, so reading is guarded and says so.
"""

from __future__ import annotations

import os
from typing import Any

TF32_ENV = "BREAKNLI_FAST_TF32"


def tf32_requested() -> bool:
    """Whether ``BREAKNLI_FAST_TF32`` asks for TF32 (1, true, yes or on)."""
    return os.environ.get(TF32_ENV, "").strip().lower() in ("1", "true", "yes", "on")


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
    """On a CUDA ``device``: TF32 off for matrix products and cuDNN (on where ``BREAKNLI_FAST_TF32`` asks), and the
    switches as they then stand. On the CPU nothing is set (None)."""
    if not str(device).startswith("cuda"):
        return None
    import torch

    on = tf32_requested()
    torch.backends.cuda.matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    return tf32_state()
