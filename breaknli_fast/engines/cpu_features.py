"""The CPU's instruction-set features that decide which int8 and bf16 kernels are safe and fast, read at run time.

ONNX Runtime's default int8 kernels on x86-64 multiply unsigned 8-bit activations by signed 8-bit weights
(u8 × s8). On a CPU with VNNI (AVX-512 VNNI, AVX-VNNI, or AMX-INT8) each product is accumulated in 32 bits and the
result is exact. On an x86-64 CPU without VNNI (AVX2, AVX-512 without VNNI) the kernel adds *pairs* of products
in saturating 16-bit integers (``vpmaddubsw``): 255 × 127 × 2 exceeds 32,767, so the sums clip and an int8 model
gives other numbers there than on a VNNI CPU (labels near a tie flip). The session entry
``session.x64quantprecision = 1`` switches such CPUs to u8 × u8 kernels that do not saturate, but on a VNNI CPU
it replaces the fast u8 × s8 kernel too (3.8× slower for a roberta-base int8 classifier on a Xeon with AVX-512
VNNI and AMX: 66 against 253 pairs/s). :func:`int8_kernel` therefore sets it only where the CPU lacks VNNI.

bf16: torch runs bf16 matrix products with native instructions on CPUs with AVX-512 BF16 or AMX-BF16 and
emulates them (slower than fp32) elsewhere; :func:`has_native_bf16` says which.

``BREAKNLI_FAST_CPU_FLAGS`` (a space- or comma-separated flag list) replaces the flags read from the CPU: the
test-suite uses it to take the decisions of a CPU without VNNI on one that has it.
"""

from __future__ import annotations

import functools
import os
import platform
from typing import Any

FLAGS_ENV = "BREAKNLI_FAST_CPU_FLAGS"
VNNI_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# the flags worth recording beside an engine's choices
REPORTED = ("avx2", "avx512f", "avx512bw", *VNNI_FLAGS, *BF16_FLAGS, "amx_tile", "avx512_fp16")


def _cpuinfo() -> str:
    try:
        return open("/proc/cpuinfo", encoding="utf-8", errors="replace").read()
    except OSError:
        return ""


@functools.lru_cache(maxsize=1)
def _proc_flags() -> frozenset[str]:
    for line in _cpuinfo().splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86 / ARM
            return frozenset(value.split())
    return frozenset()


def cpu_flags() -> frozenset[str]:
    """The CPU's feature flags (``/proc/cpuinfo``; empty where it cannot be read), or those of
    ``$BREAKNLI_FAST_CPU_FLAGS`` when set."""
    env = os.environ.get(FLAGS_ENV)
    if env is not None:
        return frozenset(env.replace(",", " ").split())
    return _proc_flags()


def cpu_identity(text: str | None = None) -> dict[str, Any] | None:
    """The x86 CPU's family, model and :data:`REPORTED` flags, read from /proc/cpuinfo (or ``text`` in its
    format; the first processor's), never from ``$BREAKNLI_FAST_CPU_FLAGS``: what a result file records of the
    machine, since a cloud VM's model name ("AMD EPYC") names more than one generation. None without x86 fields."""
    fields: dict[str, str] = {}
    for line in (_cpuinfo() if text is None else text).splitlines():
        if not line.strip():
            break
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "flags" not in fields:
        return None
    flags = set(fields["flags"].split())

    def num(key: str) -> int | None:
        return int(fields[key]) if fields.get(key, "").isdigit() else None

    return {"family": num("cpu family"), "model": num("model"), "isa": [f for f in REPORTED if f in flags]}


def is_x86_64() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def has_vnni(flags: frozenset[str] | None = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in VNNI_FLAGS)


def has_native_bf16(flags: frozenset[str] | None = None) -> bool:
    flags = cpu_flags() if flags is None else flags
    return any(f in flags for f in BF16_FLAGS)


def int8_kernel(flags: frozenset[str] | None = None, x86: bool | None = None) -> dict[str, Any]:
    """Which of ONNX Runtime's int8 kernels a session on this CPU should use, and why: ``x64quantprecision``
    True (u8 × u8, no saturation) on an x86-64 CPU without VNNI, or when the flags cannot be read (the safe
    choice); False (the default u8 × s8 kernel, exact with VNNI) on a VNNI CPU and on other architectures
    (the entry applies to x86-64 only)."""
    flags = cpu_flags() if flags is None else flags
    x86 = is_x86_64() if x86 is None else x86
    if not x86:
        return {"x64quantprecision": False, "int8_kernel": "default (not x86-64: the entry does not apply)"}
    if not flags:
        return {"x64quantprecision": True, "int8_kernel": "u8u8 (CPU flags unreadable: the safe choice)"}
    if has_vnni(flags):
        found = [f for f in VNNI_FLAGS if f in flags]
        return {"x64quantprecision": False, "int8_kernel": f"u8s8 VNNI ({', '.join(found)}: exact 32-bit sums)"}
    return {"x64quantprecision": True, "int8_kernel": "u8u8 (no VNNI: u8s8 would saturate 16-bit sums)"}


def summary() -> dict[str, Any]:
    """The flags that matter for the engines' kernels (recorded in an engine's details)."""
    flags = cpu_flags()
    out: dict[str, Any] = {"flags": [f for f in REPORTED if f in flags], "vnni": has_vnni(flags),
                           "native_bf16": has_native_bf16(flags)}
    if os.environ.get(FLAGS_ENV) is not None:
        out["flags_from"] = FLAGS_ENV
    return out


def physical_cores() -> int:
    """Physical cores available to this process (hyper-threads share execution units, and ONNX Runtime's and
    CTranslate2's intra-op pools scale worse past them)."""
    from pathlib import Path

    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in allowed:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            pkg = (base / "physical_package_id").read_text().strip()
            core = (base / "core_id").read_text().strip()
            cores.add((pkg, core))
        except OSError:
            cores.add(("?", str(cpu)))
    return max(1, len(cores))
