"""The machine's ceilings, measured once per CPU and cached: the peak rate of matrix products at the stages' shapes
for each precision an engine runs, and the memory bandwidth (:func:`measure_ceilings`); on a GPU the datasheet's
figures (:func:`gpu_ceilings`, :data:`DATASHEET`).

**Products.** Each (precision, m, k, n) is timed with every kernel that runs it here, at the engines' thread count,
and the fastest kernel's rate is the ceiling (each kernel's figure is kept beside it):

* fp32: torch's ``F.linear`` (MKL on x86, in the reproducibility mode the package sets, as the torch engines run
  it) and ONNX Runtime's ``MatMul`` (MLAS, as the ort engine runs it);
* bf16 / fp16: torch's ``F.linear`` at that precision, only where the CPU computes it natively (AVX-512 BF16 or
  AMX-BF16; AVX-512 FP16 or AMX-FP16): elsewhere torch emulates it and there is no ceiling to hold an engine to;
* int8: ONNX Runtime's ``MatMulInteger`` (u8 x s8, the int8 ort engine's product; u8 x u8 on an x86 CPU without
  VNNI, as :func:`~breaknli_fast.engines.cpu_features.int8_kernel` chooses for the engines) and
  ``torch._int_mm`` (s8 x s8 through oneDNN).

A kernel runs once unmeasured, then until it has ``min_reps`` calls and ``min_s`` seconds (at most ``max_reps``);
its best call is its figure (a peak: the least disturbed call). Operations: 2 m k n per product. Each kernel also
runs on one thread, its rate counted once per thread ("1 thread x N"): engines that run batches side by side, one
thread each (the ort engine's two workers), can reach that sum where one product on all the threads does not, and a
ceiling below what an engine reaches would hold it to less than the machine does.

**Bandwidth.** A copy and a STREAM triad (``a = b + 3 c``) over float32 arrays far larger than the last-level cache,
on torch at the engines' threads; bytes counted as STREAM counts them (2 and 3 arrays per element). The better
of the two is the bandwidth ceiling.

**Cache.** ``<cache>/ceilings/ceilings-<hash>.json`` (the cache root: ``$BREAKNLI_FAST_CACHE``, else
``~/.cache/breaknli-fast``), keyed by the CPU's model, its flags, the CPUs this process may use, the threads, the
mode, and the versions of torch and ONNX Runtime and MKL's reproducibility mode: a shape measured once is read
back by every later bench on the same machine and stack; ``refresh`` measures again. Every entry records when it
was measured and the load average then (figures measured on a busy machine are low: measure them again with
``bench --ceilings fresh`` on a quiet one). The measuring is bounded: ``budget_s`` in all (the shapes left when it
runs out are listed, and their stages get no ceiling).
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable

from breaknli_fast.bench.types import Bandwidth, GemmCeiling, KernelTiming, MachineCeilings, from_json, to_json
from breaknli_fast.engines import cpu_features

CACHE_SCHEMA = 2  # 2: the one-thread-per-product figures
MODES = ("full", "quick")
NATIVE = {"bf16": cpu_features.BF16_FLAGS, "fp16": ("avx512_fp16", "amx_fp16")}


@dataclass(frozen=True)
class Budget:
    """How long each measurement runs: a kernel's calls (``min_reps``, ``min_s``, ``max_reps``), the bandwidth
    arrays (float32 elements) and calls, and the whole measuring (``budget_s``)."""

    min_reps: int
    min_s: float
    max_reps: int
    bw_elements: int
    bw_reps: int
    budget_s: float


BUDGETS = {
    "full": Budget(min_reps=3, min_s=0.05, max_reps=20, bw_elements=1 << 24, bw_reps=5, budget_s=30.0),
    # the smoke form (tests): one timed call per kernel, small arrays; cached apart from the full figures
    "quick": Budget(min_reps=1, min_s=0.0, max_reps=1, bw_elements=1 << 20, bw_reps=1, budget_s=5.0),
}

# name fragment -> dense peaks (no sparsity): bf16 / fp16 and fp32 (without TF32) TFLOP/s, int8 TOP/s, HBM TB/s;
# NVIDIA's datasheets
DATASHEET = (
    ("H100 PCIe", {"bf16_tflops": 756.0, "fp32_tflops": 51.0, "int8_tops": 1513.0, "hbm_tb_s": 2.0}),
    ("H100 NVL", {"bf16_tflops": 835.0, "fp32_tflops": 60.0, "int8_tops": 1670.5, "hbm_tb_s": 3.9}),
    ("H200 NVL", {"bf16_tflops": 835.0, "fp32_tflops": 60.0, "int8_tops": 1670.5, "hbm_tb_s": 4.8}),
    ("H200", {"bf16_tflops": 989.4, "fp32_tflops": 66.9, "int8_tops": 1979.0, "hbm_tb_s": 4.8}),
    ("H100", {"bf16_tflops": 989.4, "fp32_tflops": 66.9, "int8_tops": 1979.0, "hbm_tb_s": 3.35}),
)


def datasheet(name: str | None) -> dict[str, Any] | None:
    """The datasheet peaks of the GPU ``name`` (the first :data:`DATASHEET` fragment it contains), or None."""
    for frag, peaks in DATASHEET:
        if name and frag.lower() in name.lower():
            return {"gpu": name, "matched": frag, **peaks, "source": "NVIDIA datasheet, dense (no sparsity)"}
    return None


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def precision_status(precision: str, flags: frozenset[str] | None = None) -> str:
    """``measured`` where this CPU computes ``precision`` natively, else why it has no ceiling."""
    flags = cpu_features.cpu_flags() if flags is None else flags
    if precision in NATIVE and not any(f in flags for f in NATIVE[precision]):
        return (f"not computed natively on this CPU (no {' / '.join(NATIVE[precision])}): torch emulates it, "
                "no ceiling to hold an engine to")
    if precision not in ("fp32", "bf16", "fp16", "int8"):
        return f"unknown precision {precision!r}"
    return "measured"


def cache_key(threads: int, mode: str) -> dict[str, Any]:
    """What the cached figures depend on."""
    from breaknli_fast.engines.blas import mkl_reproducibility
    from breaknli_fast.envinfo import cpu_model, package_version

    flags = sorted(cpu_features.cpu_flags())
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    mkl = mkl_reproducibility()
    return {"schema": CACHE_SCHEMA, "cpu": cpu_model(), "flags": hashlib.sha256(" ".join(flags).encode()).hexdigest()[:16],
            "cpus": cpus, "threads": int(threads), "mode": mode, "torch": package_version("torch"),
            "onnxruntime": package_version("onnxruntime"), "mkl_cbwr": mkl.get("cbwr") or mkl.get("blas")}


def cache_file(key: dict[str, Any], root: str | Path | None = None) -> Path:
    from breaknli_fast.export.manifest import cache_root

    h = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return Path(root).expanduser() if root else cache_root() / "ceilings" / f"ceilings-{h}.json"


def _read_cache(path: Path, key: dict[str, Any]) -> tuple[dict[str, GemmCeiling], Bandwidth | None]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}, None
    if not isinstance(data, dict) or data.get("key") != key:
        return {}, None
    gemm = {k: from_json(GemmCeiling, v) for k, v in (data.get("gemm") or {}).items() if isinstance(v, dict)}
    bw = data.get("bandwidth")
    return gemm, from_json(Bandwidth, bw) if isinstance(bw, dict) else None


def _write_cache(path: Path, key: dict[str, Any], gemm: dict[str, GemmCeiling], bw: Bandwidth | None) -> str | None:
    """Write the cache file (atomically); the reason where it cannot be written."""
    def plain(g: GemmCeiling) -> Any:
        d = to_json(g)
        d.pop("reused", None)  # type: ignore[union-attr]
        return d

    body = {"key": key, "gemm": {k: plain(g) for k, g in sorted(gemm.items())},
            "bandwidth": ({k: v for k, v in to_json(bw).items() if k != "reused"}  # type: ignore[union-attr]
                          if bw is not None else None)}
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(body, indent=1) + "\n")
        os.replace(tmp, path)
    except OSError as e:
        return f"the ceilings were not cached ({path}: {e.strerror or e})"
    return None


def shape_key(precision: str, m: int, k: int, n: int) -> str:
    return f"{precision} {m}x{k}x{n}"


# -- kernels --------------------------------------------------------------------------------------------------------

def _time(fn: Callable[[], Any], b: Budget) -> tuple[float, int]:
    fn()  # warm-up: first-call allocations, kernel selection, a session's first run
    best, total, reps = math.inf, 0.0, 0
    while reps < b.max_reps and (reps < max(1, b.min_reps) or total < b.min_s):
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        best, total, reps = min(best, dt), total + dt, reps + 1
    return best, reps


def _torch_linear(dtype_name: str) -> tuple[str, Callable[[int, int, int, int], Callable[[], Any]]]:
    def make(m: int, k: int, n: int, threads: int) -> Callable[[], Any]:
        import torch
        import torch.nn.functional as F

        dtype = getattr(torch, {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}[dtype_name])
        g = torch.Generator().manual_seed(0)
        x, w = torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(dtype)

        def run() -> Any:
            with torch.inference_mode():
                return F.linear(x, w)
        return run

    return f"torch F.linear {dtype_name}", make


def _torch_int_mm(m: int, k: int, n: int, threads: int) -> Callable[[], Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    a = torch.randint(-128, 128, (m, k), dtype=torch.int8, generator=g)
    b = torch.randint(-128, 128, (k, n), dtype=torch.int8, generator=g)
    torch._int_mm(a, b)  # raises here where the shape or the build does not run it
    return lambda: torch._int_mm(a, b)


def _ort_session(model: Any, threads: int) -> Any:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = int(threads)
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.log_severity_level = 3
    if cpu_features.int8_kernel()["x64quantprecision"]:  # the int8 kernel the ort engine chooses on this CPU
        so.add_session_config_entry("session.x64quantprecision", "1")
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def _ort_matmul(integer: bool) -> Callable[[int, int, int, int], Callable[[], Any]]:
    def make(m: int, k: int, n: int, threads: int) -> Callable[[], Any]:
        import numpy as np
        from onnx import TensorProto, helper, numpy_helper

        rng = np.random.default_rng(0)
        if integer:
            a = rng.integers(0, 256, (m, k), dtype=np.uint8)
            w = numpy_helper.from_array(rng.integers(-128, 128, (k, n), dtype=np.int8), "w")
            zp = [numpy_helper.from_array(np.array(128, dtype=np.uint8), "za"),
                  numpy_helper.from_array(np.array(0, dtype=np.int8), "zw")]
            node = helper.make_node("MatMulInteger", ["a", "w", "za", "zw"], ["y"])
            types = (TensorProto.UINT8, TensorProto.INT32)
        else:
            a = rng.standard_normal((m, k), dtype=np.float32)
            w = numpy_helper.from_array(rng.standard_normal((k, n), dtype=np.float32), "w")
            zp = []
            node = helper.make_node("MatMul", ["a", "w"], ["y"])
            types = (TensorProto.FLOAT, TensorProto.FLOAT)
        graph = helper.make_graph([node], "gemm", [helper.make_tensor_value_info("a", types[0], [m, k])],
                                  [helper.make_tensor_value_info("y", types[1], [m, n])], [w, *zp])
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
        model.ir_version = 8
        sess = _ort_session(model, threads)
        feeds = {"a": a}
        return lambda: sess.run(None, feeds)

    return make


def kernels(precision: str) -> list[tuple[str, Callable[[int, int, int, int], Callable[[], Any]]]]:
    """The kernels tried for ``precision``: (name, make(m, k, n, threads) -> the call)."""
    if precision == "int8":
        return [("onnxruntime MatMulInteger u8 x s8 (MLAS)" if not cpu_features.int8_kernel()["x64quantprecision"]
                 else "onnxruntime MatMulInteger u8 x u8 (MLAS, x64quantprecision)", _ort_matmul(True)),
                ("torch._int_mm s8 x s8", _torch_int_mm)]
    if precision == "fp32":
        return [_torch_linear("fp32"), ("onnxruntime MatMul fp32 (MLAS)", _ort_matmul(False))]
    return [_torch_linear(precision)]


def measure_gemm(precision: str, m: int, k: int, n: int, threads: int, b: Budget) -> GemmCeiling:
    """Every kernel of ``precision`` at one shape, on all ``threads`` and (where more than one) on one thread counted
    ``threads`` times (module notes); the fastest is the ceiling."""
    out = GemmCeiling(precision, m, k, n, measured_at=_now(), load_average=_loadavg())
    for name, make in kernels(precision):
        for t in ((threads, 1) if threads > 1 else (threads,)):
            label = name if t == threads else f"{name}, 1 thread x {threads}"
            try:
                with _Threads(t):
                    fn = make(m, k, n, t)
                    secs, reps = _time(fn, b)
                per = secs * t / threads  # seconds per product with every thread at work
                out.kernels.append(KernelTiming(label, per, 2.0 * m * k * n / per, reps))
            except Exception as e:  # noqa: BLE001 - a kernel missing here (no onnxruntime, a shape it refuses) is recorded
                msg = str(e).strip().splitlines()[0][:160] if str(e).strip() else type(e).__name__
                out.kernels.append(KernelTiming(label, error=f"{type(e).__name__}: {msg}"))
    ran = [kt for kt in out.kernels if kt.ops_per_s]
    if ran:
        best = max(ran, key=lambda kt: kt.ops_per_s or 0.0)
        out.kernel, out.ops_per_s, out.seconds = best.kernel, best.ops_per_s, best.seconds
    return out


def measure_bandwidth(b: Budget) -> Bandwidth:
    import torch

    n = int(b.bw_elements)
    x, y, z = torch.empty(n), torch.rand(n), torch.rand(n)
    copy, _ = _time(lambda: x.copy_(y), Budget(b.bw_reps, 0.0, b.bw_reps, n, b.bw_reps, b.budget_s))
    triad, _ = _time(lambda: torch.add(y, z, alpha=3.0, out=x), Budget(b.bw_reps, 0.0, b.bw_reps, n, b.bw_reps,
                                                                     b.budget_s))
    c, t = 2 * 4 * n / copy, 3 * 4 * n / triad
    return Bandwidth(max(c, t), c, t, 4 * n, b.bw_reps, "torch float32 copy_ and add(out=) (STREAM copy, triad)",
                     _now(), _loadavg())


class _Threads:
    """torch's intra-op threads set to ``n`` for the measuring, restored after."""

    def __init__(self, n: int):
        self.n = int(n)
        self.before: int | None = None

    def __enter__(self) -> "_Threads":
        import torch

        self.before = torch.get_num_threads()
        torch.set_num_threads(self.n)
        return self

    def __exit__(self, *exc: Any) -> None:
        import torch

        if self.before is not None:
            torch.set_num_threads(self.before)


def measure_ceilings(shapes: Iterable[tuple[str, int, int, int]], threads: int, mode: str = "full",
                     refresh: bool = False, cache: str | Path | None = None, budget_s: float | None = None,
                     log: Callable[[str], None] | None = None) -> MachineCeilings:
    """The ceilings of these (precision, m, k, n) products and the bandwidth: read from the cache where it holds
    them (unless ``refresh``), measured otherwise within ``budget_s`` (default the mode's), and cached.
    ``cache``: the cache file (default :func:`cache_file` of the key)."""
    if mode not in MODES:
        raise ValueError(f"ceilings mode {mode!r}: use {', '.join(MODES)}")
    b = BUDGETS[mode]
    budget = b.budget_s if budget_s is None else float(budget_s)
    key = cache_key(threads, mode)
    path = cache_file(key, cache)
    cached, bw = _read_cache(path, key)  # refresh: kept for the shapes not measured again, not reused
    if refresh:
        bw = None
    flags = cpu_features.cpu_flags()
    wanted = list(dict.fromkeys(shapes))
    status = {p: precision_status(p, flags) for p in dict.fromkeys(s[0] for s in wanted)}
    out = MachineCeilings(source="measured", mode=mode, device="cpu", threads=int(threads), key=key, file=str(path),
                          precisions=status, budget_s=budget)
    start = time.perf_counter()
    changed = False
    with _Threads(threads):
        if bw is not None:
            bw.reused = True
        elif time.perf_counter() - start < budget:
            if log:
                log(f"ceilings: memory bandwidth ({mode}, {threads} threads)")
            bw, changed = measure_bandwidth(b), True
        out.bandwidth = bw
        for prec, m, k, n in wanted:
            if status[prec] != "measured":
                continue
            sk = shape_key(prec, m, k, n)
            if sk in cached and not refresh:
                g = cached[sk]
                g.reused = True
                out.gemm.append(g)
                continue
            if time.perf_counter() - start >= budget:
                out.not_measured.append(sk)
                continue
            if log:
                log(f"ceilings: {prec} product {m} x {k} x {n}")
            g = measure_gemm(prec, m, k, n, threads, b)
            cached[sk] = g
            out.gemm.append(g)
            out.measured_now += 1
            changed = True
    out.seconds = time.perf_counter() - start
    if out.not_measured:
        out.notes.append(f"{len(out.not_measured)} product shapes not measured: the ceilings' time budget "
                         f"({budget:g} s) ran out; their stages have no ceiling")
    if changed:
        why = _write_cache(path, key, cached, bw)
        if why:
            out.notes.append(why)
    return out


def gpu_ceilings(name: str | None, shapes: Iterable[tuple[str, int, int, int]], device: str) -> MachineCeilings:
    """The datasheet's peaks of the GPU ``name`` as ceilings (every product shape at its precision's dense peak),
    or ceilings without figures where the GPU is not in :data:`DATASHEET`."""
    ds = datasheet(name)
    out = MachineCeilings(source="datasheet", mode="datasheet", device=device, key={"gpu": name})
    if ds is None:
        out.notes.append(f"no datasheet peaks for the GPU {name!r}: its stages have no ceiling")
        return out
    peak = {"bf16": ds["bf16_tflops"] * 1e12, "fp16": ds["bf16_tflops"] * 1e12, "fp32": ds["fp32_tflops"] * 1e12,
            "int8": ds["int8_tops"] * 1e12}
    out.bandwidth = Bandwidth(bytes_per_s=ds["hbm_tb_s"] * 1e12, kernel=ds["source"])
    for prec, m, k, n in dict.fromkeys(shapes):
        out.precisions[prec] = "datasheet" if prec in peak else f"unknown precision {prec!r}"
        if prec in peak:
            out.gemm.append(GemmCeiling(prec, m, k, n, kernel=f"{ds['matched']} datasheet, dense",
                                        ops_per_s=peak[prec]))
    out.notes.append(f"{ds['gpu']}: {ds['source']} (a GPU's ceilings are not measured by the bench; "
                     "the gpu-bounds measurement measures a product and a copy on it)")
    return out
