"""Whether torch's CPU BLAS gives a row the same bits whatever else is in the product.

torch's x86 builds multiply fp32 matrices with MKL. MKL chooses its code path by the product's shape: on Intel CPUs
it splits the reduction of a product with few rows between threads, so a row alone gets other fp32 sums than the
same row among many (every row count up to ~160 in a 1024 -> 256 linear on 2 threads, multiples of 8 included; on
AMD CPUs 1-3, 5-7 and 9-11 rows). MKL's conditional numerical reproducibility in strict mode
(``MKL_CBWR=AUTO,STRICT``) fixes the path whatever the row count; the package sets it at import
(``breaknli_fast/__init__.py``), and MKL reads it at its first call, so it takes effect unless a matrix product ran
before the package was imported. :func:`mkl_reproducibility` reads the mode MKL really runs in, for the engines'
records and the warning below."""

from __future__ import annotations

import ctypes
import logging
import os
from functools import lru_cache
from typing import Any

log = logging.getLogger(__name__)

STRICT = 0x10000  # MKL_CBWR_STRICT
# mkl_service.h's MKL_CBWR_* branches
BRANCHES = {1: "BRANCH_OFF", 2: "AUTO", 3: "COMPATIBLE", 4: "SSE2", 6: "SSSE3", 7: "SSE4_1", 8: "SSE4_2", 9: "AVX",
            10: "AVX2", 11: "AVX512_MIC", 12: "AVX512", 13: "AVX512_MIC_E1", 14: "AVX512_E1"}
ADVICE = ("import breaknli_fast before the first matrix product, or set MKL_CBWR=AUTO,STRICT in the environment")


@lru_cache(maxsize=1)
def _mkl_get() -> Any:
    """MKL's ``mkl_serv_cbwr_get`` inside torch's CPU library, or None (no MKL: aarch64, macOS, other builds)."""
    try:
        import torch
    except ImportError:
        return None
    lib_dir = os.path.join(os.path.dirname(torch.__file__), "lib")
    for name in ("libtorch_cpu.so", "libtorch_cpu.dylib", "torch_cpu.dll"):
        path = os.path.join(lib_dir, name)
        if not os.path.exists(path):
            continue
        try:
            fn = ctypes.CDLL(path).mkl_serv_cbwr_get
        except (OSError, AttributeError):
            return None
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        return fn
    return None


def mkl_reproducibility() -> dict[str, Any]:
    """The CPU BLAS's reproducibility mode as it runs now: ``blas`` (``mkl`` or ``none found``), ``cbwr`` (MKL's
    branch and ``STRICT``), ``strict`` (True: a row's result does not depend on the row count), ``env`` (the
    ``MKL_CBWR`` variable) and, where not strict, ``why``."""
    fn = _mkl_get()
    env = os.environ.get("MKL_CBWR")
    if fn is None:
        return {"blas": "none found (no MKL in torch)", "strict": None, "env": env}
    value = int(fn(-1))  # MKL_CBWR_ALL
    branch = BRANCHES.get(value & 0xFFFF, str(value & 0xFFFF))
    strict = bool(value & STRICT)
    out: dict[str, Any] = {"blas": "mkl", "cbwr": branch + (",STRICT" if strict else ""), "strict": strict,
                           "env": env}
    if not strict:
        out["why"] = (f"MKL_CBWR={env} has no STRICT" if env and "STRICT" not in env.upper()
                      else "MKL was initialised before breaknli_fast set MKL_CBWR")
    return out


_warned = False


def check_reproducible_blas() -> dict[str, Any]:
    """:func:`mkl_reproducibility`, with one warning per process where MKL is not in strict mode (the torch
    reference's answers may then depend on their batch, on Intel CPUs for certain)."""
    global _warned
    info = mkl_reproducibility()
    if info.get("strict") is False and not _warned:
        _warned = True
        log.warning("torch's MKL is not in strict reproducibility mode (%s): a pair's fp32 answer may depend on the "
                    "other pairs in its batch on this CPU; %s", info["why"], ADVICE)
    return info
