"""The runtime of the ort engine: ONNX Runtime sessions (providers per device, session options, and the
one-line errors when the libraries or the hardware are missing), the numpy feeds of a graph, and the masked-LM
session. The T5 stepper is :mod:`.t5_runtime`. onnxruntime is optional and imported on use (one-line
:class:`EngineUnavailable` without it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from breaknli_fast.envinfo import NOT_VERIFIED
from breaknli_fast.engines import cpu_features
from breaknli_fast.engines.cpu_features import physical_cores
from breaknli_fast.engines.base import MASK_FILLER, EngineInfo
from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.engines.stepgraph import STEP_DECODER, STEP_ENCODER, GraphMaskFiller, graph_feeds  # noqa: F401

# the T5 graphs that the ort exporter writes (breaknli_fast.backends.ort.t5) and the stepper runs
STEP_FILES = (STEP_ENCODER, STEP_DECODER)

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
        raise EngineUnavailable(f"the ort engine needs onnxruntime: {INSTALL_ONNX}") from None
    ort.set_default_logger_severity(3)  # errors only: the CPU provider warns about every unfused fp16 node
    return ort


def session_options(threads: int | None = None, optimization: str = "all", spin: bool = True,
                    x64quantprecision: bool | None = None) -> tuple[Any, dict[str, Any]]:
    """Session options and a record of the choices (for ``EngineInfo.details``). ``spin=False`` stops
    idle intra-op threads from spinning (for the per-token runs of generation). ``x64quantprecision``: the
    int8 kernel choice (``None``: per CPU, :func:`~breaknli_fast.engines.cpu_features.int8_kernel`)."""
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
        # between runs: generation (a short run per token, sampling in Python in between) slows down with
        # spinning threads; classifiers (long runs back to back) gain from spinning
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # int8 on x86-64 CPUs without VNNI (AVX2, AVX-512 without VNNI): ONNX Runtime's default u8 x s8 kernels add
    # pairs of products in saturating 16-bit integers, so an int8 model gives other numbers there than on a VNNI
    # CPU (and labels near a tie flip). The entry switches to u8 x u8 kernels, which do not saturate, but on a
    # VNNI CPU it also replaces the exact and much faster u8 x s8 VNNI kernel: set only where the CPU lacks VNNI
    # (cpu_features.int8_kernel); fp32 / fp16 graphs are not affected.
    kernel = cpu_features.int8_kernel()
    if x64quantprecision is not None:
        kernel = {"x64quantprecision": bool(x64quantprecision), "int8_kernel": "as requested"}
    if kernel["x64quantprecision"]:
        so.add_session_config_entry("session.x64quantprecision", "1")
    return so, {"graph_optimization": optimization, "intra_op_threads": n, "inter_op_threads": 1,
                "execution_mode": "sequential", "intra_op_spinning": spin, **kernel, "cpu": cpu_features.summary()}


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
    # TF32 (on by default in the CUDA provider) rounds the inputs of fp32 matrix products to 10-bit mantissas: fp32
    # graphs would miss the fp32 validation tolerances against torch, which runs true fp32 matmuls by default; off
    # for every graph (fp16 graphs' products are fp16 anyway)
    cuda = ("CUDAExecutionProvider", {"device_id": index, "use_tf32": 0})
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


def make_session(path: str | Path, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                 optimization: str = "all", fp16: bool = False, trt_cache_dir: str | Path | None = None,
                 spin: bool = True, x64quantprecision: bool | None = None) -> tuple[Any, dict[str, Any]]:
    """An ``InferenceSession`` on the device; checks that the requested provider really loaded
    (onnxruntime-gpu silently falls back to the CPU when no GPU is visible). ``x64quantprecision``: as
    :func:`session_options`."""
    ort = import_ort()
    providers = providers_for(device, provider, trt_cache_dir=trt_cache_dir, fp16=fp16)
    so, details = session_options(threads, optimization, spin=spin, x64quantprecision=x64quantprecision)
    names = [p[0] if isinstance(p, tuple) else p for p in providers]
    opts = [p[1] if isinstance(p, tuple) else {} for p in providers]
    sess = ort.InferenceSession(str(path), sess_options=so, providers=names, provider_options=opts)
    active = sess.get_providers()
    if names[0] != "CPUExecutionProvider" and names[0] not in active:
        raise EngineUnavailable(
            f"onnxruntime could not start {names[0]} (no usable CUDA GPU or CUDA/cuDNN libraries?); active: {', '.join(active)}"
        )
    details["providers"] = active  # what the session runs on (ONNX Runtime falls back to the CPU silently)
    if names[0] != "CPUExecutionProvider":
        details["gpu_path"] = f"{names[0]}: {NOT_VERIFIED}"
    return sess, details


def classifier_feeds(tokenizer: Any, pairs: Any, inputs: Any, max_length: int,
                     padding: bool | str = True) -> dict[str, Any]:
    """Numpy feeds for a classifier graph: the tokenizer's encoding of the pairs (padded to the
    longest; ``padding="max_length"``: to ``max_length``), restricted to the graph's inputs; a ``token_type_ids``
    input the tokenizer does not produce is fed zeros."""
    enc = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=padding, truncation=True,
                    max_length=max_length, return_tensors="np")
    return graph_feeds(enc, inputs)


class SessionMaskFiller(GraphMaskFiller):
    """A masked-LM graph on an ONNX Runtime session, behind the mask-filler contract
    (:class:`~breaknli_fast.engines.stepgraph.GraphMaskFiller`). The ort engine's mask filler is one (after its
    export); the exporters validate with one."""

    def __init__(self, graph: str | Path, tokenizer: Any, model_vocab_size: int, max_length: int, device: str = "cpu",
                 provider: str | None = None, threads: int | None = None, workers: int = 1, token_budget: int = 8192,
                 max_batch: int | None = None, info: EngineInfo | None = None, fp16: bool = False):
        session, details = make_session(graph, device=device, provider=provider, threads=threads, fp16=fp16)
        super().__init__(session, details, tokenizer, model_vocab_size, max_length, device=device, workers=workers,
                         token_budget=token_budget, max_batch=max_batch,
                         info=info or EngineInfo("ort", MASK_FILLER, str(graph), "fp32", device, {}))
