"""ONNX Runtime sessions: providers per device, session options, and the one-line errors when
the libraries or the hardware are missing. Shared by the exporters' validation and the ``ort`` engine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from breaknli_fast.engines.registry import EngineUnavailable

INSTALL_ONNX = "pip install 'breaknli-fast[onnx]'"
INSTALL_GPU = "pip install 'breaknli-fast[gpu]' (onnxruntime-gpu) on a machine with a CUDA GPU"

PROVIDER_NAMES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}


def import_ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise EngineUnavailable(f"the ort engine needs onnxruntime and optimum: {INSTALL_ONNX}") from None
    ort.set_default_logger_severity(3)  # errors only: the CPU provider warns about every unfused fp16 node
    return ort


def require_export_libs() -> None:
    missing = []
    for mod in ("onnx", "onnxruntime", "optimum.exporters.onnx"):
        try:
            __import__(mod)
        except ImportError:
            missing.append(mod.split(".")[0])
    if missing:
        raise EngineUnavailable(f"ONNX export needs {', '.join(sorted(set(missing)))}: {INSTALL_ONNX}")


def physical_cores() -> int:
    """Physical cores available to this process (hyper-threads share execution units, and ORT's
    intra-op pool scales worse past them)."""
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


def session_options(threads: int | None = None, optimization: str = "all", spin: bool = True) -> tuple[Any, dict[str, Any]]:
    """Session options and a record of the choices (for ``EngineInfo.details``). ``spin=False`` stops
    idle intra-op threads from spinning (for the per-token runs of generation)."""
    ort = import_ort()
    so = ort.SessionOptions()
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    so.graph_optimization_level = levels[optimization]
    n = int(threads) if threads else physical_cores()
    so.intra_op_num_threads = n
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if not spin:
        # idle intra-op threads otherwise spin after each run() and take the CPU from the Python work
        # between runs: generation (a short run per token, sampling in Python in between) was 1.5-2x
        # slower on 2 cores with spinning threads; classifiers (long runs back to back) gain ~20 % from it
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return so, {"graph_optimization": optimization, "intra_op_threads": n, "inter_op_threads": 1,
                "execution_mode": "sequential", "intra_op_spinning": spin}


def providers_for(device: str, provider: str | None = None, trt_cache_dir: str | Path | None = None,
                  fp16: bool = False) -> list[Any]:
    """Execution providers for a device (``cpu``, ``cuda[:N]``), optionally the TensorRT EP
    (``provider="tensorrt"``) in front of CUDA. Raises :class:`EngineUnavailable` with one line
    when the provider is missing from this onnxruntime build."""
    ort = import_ort()
    available = ort.get_available_providers()
    dev = device.split(":")[0]
    index = int(device.split(":")[1]) if ":" in device else 0
    if dev not in ("cpu", "cuda"):
        raise EngineUnavailable(f"unknown device {device!r}; use cpu or cuda[:N]")
    provider = (provider or dev).lower()
    if provider not in PROVIDER_NAMES:
        raise EngineUnavailable(f"unknown ONNX Runtime provider {provider!r}; use cpu, cuda or tensorrt")
    if dev == "cpu":
        if provider != "cpu":
            raise EngineUnavailable(f"the {provider} provider needs --device cuda")
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        raise EngineUnavailable(
            f"--device cuda needs onnxruntime-gpu (this onnxruntime has only {', '.join(available)}): {INSTALL_GPU}"
        )
    cuda = ("CUDAExecutionProvider", {"device_id": index})
    if provider == "tensorrt":
        if "TensorrtExecutionProvider" not in available:
            raise EngineUnavailable(
                "the TensorRT execution provider is missing from this onnxruntime-gpu build: install TensorRT 10 "
                "libraries (pip install 'breaknli-fast[tensorrt]') on a machine with a CUDA GPU"
            )
        opts: dict[str, Any] = {"device_id": index, "trt_fp16_enable": bool(fp16), "trt_int8_enable": False}
        if trt_cache_dir:
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(trt_cache_dir),
                        trt_timing_cache_enable=True, trt_timing_cache_path=str(trt_cache_dir))
        return [("TensorrtExecutionProvider", opts), cuda, "CPUExecutionProvider"]
    return [cuda, "CPUExecutionProvider"]


def provider_label(providers: list[Any]) -> list[str]:
    return [p[0] if isinstance(p, tuple) else p for p in providers]


def make_session(path: str | Path, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                 optimization: str = "all", fp16: bool = False, trt_cache_dir: str | Path | None = None,
                 spin: bool = True) -> tuple[Any, dict[str, Any]]:
    """An ``InferenceSession`` on the device; checks that the requested provider really loaded
    (onnxruntime-gpu silently falls back to the CPU when no GPU is visible)."""
    ort = import_ort()
    providers = providers_for(device, provider, trt_cache_dir=trt_cache_dir, fp16=fp16)
    so, details = session_options(threads, optimization, spin=spin)
    names = [p[0] if isinstance(p, tuple) else p for p in providers]
    opts = [p[1] if isinstance(p, tuple) else {} for p in providers]
    sess = ort.InferenceSession(str(path), sess_options=so, providers=names, provider_options=opts)
    active = sess.get_providers()
    if names[0] != "CPUExecutionProvider" and names[0] not in active:
        raise EngineUnavailable(
            f"onnxruntime could not start {names[0]} (no usable CUDA GPU or CUDA/cuDNN libraries?); active: {', '.join(active)}"
        )
    details["providers"] = active
    return sess, details


def load_ort_seq2seq(folder: str | Path, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                     optimization: str = "all") -> tuple[Any, dict[str, Any]]:
    """optimum's ``ORTModelForSeq2SeqLM`` over an export folder (unmerged decoders, KV cache).

    On CUDA it binds inputs and outputs on the GPU (IO binding) when torch can see the GPU too;
    with a CPU build of torch, tensors go through host memory instead (optimum would otherwise try
    to move its outputs to a CUDA device that torch does not have)."""
    import torch

    import_ort()
    try:
        from optimum.onnxruntime import ORTModelForSeq2SeqLM
    except ImportError:
        raise EngineUnavailable(f"the ort engine needs optimum[onnxruntime]: {INSTALL_ONNX}") from None
    providers = providers_for(device, provider)
    so, details = session_options(threads, optimization, spin=False)
    names = [p[0] if isinstance(p, tuple) else p for p in providers]
    opts = [p[1] if isinstance(p, tuple) else {} for p in providers]
    on_gpu = names[0] != "CPUExecutionProvider"
    io_binding = bool(on_gpu and torch.cuda.is_available())
    with _quiet_logs():
        model = ORTModelForSeq2SeqLM.from_pretrained(
            str(folder), use_merged=False, use_cache=True, providers=names, provider_options=opts,
            session_options=so, use_io_binding=io_binding,
        )
    active = model.encoder.session.get_providers()
    if on_gpu and names[0] not in active:
        raise EngineUnavailable(
            f"onnxruntime could not start {names[0]} (no usable CUDA GPU or CUDA/cuDNN libraries?); active: {', '.join(active)}"
        )
    if on_gpu and not io_binding:
        for part in model.parts:
            part._device = torch.device("cpu")
    details.update(providers=active, io_binding=io_binding, decoders="unmerged (decoder + decoder_with_past)")
    return model, details


def _quiet_logs() -> Any:
    import contextlib
    import logging

    @contextlib.contextmanager
    def cm() -> Any:
        lg = logging.getLogger("optimum")
        old = lg.level
        lg.setLevel(logging.ERROR)
        try:
            yield
        finally:
            lg.setLevel(old)

    return cm()


def classifier_feeds(tokenizer: Any, pairs: Any, inputs: Any, max_length: int) -> dict[str, Any]:
    """Numpy feeds for a classifier graph: the tokenizer's encoding of the pairs (padded to the
    longest), restricted to the graph's inputs; a ``token_type_ids`` input the tokenizer does not
    produce is fed zeros."""
    enc = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True, truncation=True,
                    max_length=max_length, return_tensors="np")
    return graph_feeds(enc, inputs)


def graph_feeds(enc: Any, inputs: Any) -> dict[str, Any]:
    """A padded encoding (arrays) restricted to a graph's inputs, as int64; a ``token_type_ids`` input
    the tokenizer does not produce is fed zeros."""
    import numpy as np

    feeds = {}
    for meta in inputs:
        name = meta.name
        if name in enc:
            feeds[name] = np.asarray(enc[name]).astype(np.int64, copy=False)
        elif name == "token_type_ids":
            feeds[name] = np.zeros_like(enc["input_ids"], dtype=np.int64)
        else:
            raise EngineUnavailable(f"the graph needs an input {name!r} that the tokenizer does not produce")
    return feeds
