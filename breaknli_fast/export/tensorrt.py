"""TensorRT engines of the classifiers (TensorRT 10 Python API).

UNTESTED HERE: the development machines have neither TensorRT nor a GPU. This module was
written against the TensorRT 10 API documentation (``Builder``, ``OnnxParser``,
``create_network(STRONGLY_TYPED)``, ``IBuilderConfig.set_memory_pool_limit``, optimization
profiles, timing caches, ``IExecutionContext.set_input_shape / set_tensor_address /
execute_async_v3``); the test-suite only checks that it refuses cleanly without TensorRT.

Precisions follow current practice (TensorRT 10.1 deprecated implicit INT8 calibration and
TensorRT 11 removes the weakly typed FP16/INT8 builder flags):

* fp32: a weakly typed network with TF32 switched off (parity with PyTorch fp32);
* fp16: a *strongly typed* network built from the fp16 ONNX graph (the graph's own types decide,
  so the fp32 islands the converter kept stay fp32);
* int8: a strongly typed network built from the static symmetric QDQ ONNX graph (explicit
  quantization; calibrated on real premise/hypothesis pairs by ``quantize.int8_static_qdq``).

One optimization profile: batch 1..max_batch (opt = max_batch), length 1..max_length (never more
than the model's position table holds: ``engines.models.input_limit``), the
optimum length being the 90th percentile of the calibration pairs' token counts (rounded up to
a multiple of 8). A timing cache per GPU and TensorRT version is kept beside the export cache,
so later builds reuse kernel timings. Buffers are torch CUDA tensors (so a CUDA build of torch
is needed).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.export.errors import ExportError

PLAN_FILE = "model.plan"
INSTALL = "pip install 'breaknli-fast[tensorrt]' (TensorRT 10) with a CUDA build of torch, on a machine with a CUDA GPU"
WORKSPACE_GIB = 4


def require_tensorrt() -> Any:
    """The ``tensorrt`` module, or a one-line :class:`EngineUnavailable`."""
    try:
        import tensorrt as trt
    except ImportError:
        raise EngineUnavailable(f"TensorRT is not installed: {INSTALL}") from None
    except Exception as e:  # a broken install (missing libnvinfer) raises OSError & co
        raise EngineUnavailable(f"TensorRT does not load ({type(e).__name__}: {str(e).splitlines()[0][:120]}): {INSTALL}") from None
    major = int(str(trt.__version__).split(".")[0])
    if major < 10:
        raise EngineUnavailable(f"TensorRT {trt.__version__} is too old; TensorRT 10 or newer is needed: {INSTALL}")
    import torch

    if not torch.cuda.is_available():
        raise EngineUnavailable(f"TensorRT needs a CUDA GPU visible to torch (none found): {INSTALL}")
    return trt


def shape_profile(lengths: Sequence[int], max_length: int, max_batch: int) -> dict[str, list[int]]:
    """min / opt / max (batch, length) from the data's token-length distribution."""
    lengths = sorted(int(x) for x in lengths) or [max_length]
    p90 = lengths[min(len(lengths) - 1, int(math.ceil(0.9 * len(lengths))) - 1)]
    opt_len = min(max_length, max(8, int(math.ceil(p90 / 8.0)) * 8))
    return {"min": [1, 1], "opt": [max_batch, opt_len], "max": [max_batch, max_length]}


def _timing_cache_path(trt: Any) -> Path:
    import torch

    from breaknli_fast.export.manifest import cache_root, slugify

    gpu = slugify(torch.cuda.get_device_name(0))
    return cache_root() / "tensorrt" / f"timing-{gpu}-trt{trt.__version__}.cache"


def build_engine(onnx_path: Path, plan_path: Path, precision: str, profile: dict[str, list[int]],
                 workspace_gib: int = WORKSPACE_GIB) -> dict[str, Any]:
    """Parse ``onnx_path``, build and serialize a TensorRT engine to ``plan_path``."""
    trt = require_tensorrt()
    logger = trt.Logger(trt.Logger.WARNING)
    builder = trt.Builder(logger)
    flags = 0
    strongly_typed = precision in ("fp16", "int8")
    if strongly_typed:
        flags |= 1 << int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    network = builder.create_network(flags)
    parser = trt.OnnxParser(network, logger)
    if not parser.parse_from_file(str(onnx_path)):
        errs = [str(parser.get_error(i)) for i in range(parser.num_errors)]
        raise ExportError(f"TensorRT could not parse {onnx_path.name}: {errs[0] if errs else 'unknown error'}")
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, int(workspace_gib) << 30)
    if precision == "fp32":
        config.clear_flag(trt.BuilderFlag.TF32)
    prof = builder.create_optimization_profile()
    inputs = []
    for i in range(network.num_inputs):
        inp = network.get_input(i)
        inputs.append(inp.name)
        prof.set_shape(inp.name, tuple(profile["min"]), tuple(profile["opt"]), tuple(profile["max"]))
    config.add_optimization_profile(prof)
    cache_path = _timing_cache_path(trt)
    cache_path.parent.mkdir(parents=True, exist_ok=True)
    cache = config.create_timing_cache(cache_path.read_bytes() if cache_path.exists() else b"")
    config.set_timing_cache(cache, ignore_mismatch=False)
    plan = builder.build_serialized_network(network, config)
    if plan is None:
        raise ExportError(f"TensorRT could not build an engine from {onnx_path.name} (see the TensorRT log above)")
    plan_path.write_bytes(bytes(memoryview(plan)))
    tmp = cache_path.with_suffix(".tmp")
    tmp.write_bytes(bytes(memoryview(config.get_timing_cache().serialize())))
    tmp.replace(cache_path)
    import torch

    return {
        "plan": plan_path.name,
        "tensorrt": trt.__version__,
        "gpu": torch.cuda.get_device_name(0),
        "strongly_typed": strongly_typed,
        "tf32": False if precision == "fp32" else None,
        "workspace_gib": workspace_gib,
        "profile": {"inputs": inputs, **profile},
        "timing_cache": str(cache_path),
    }


def build_for_export(folder: Path, graph: str, precision: str, pairs: Sequence[tuple[str, str]], max_length: int,
                     max_batch: int) -> dict[str, Any]:
    """Build ``folder/model.plan`` from ``folder/<graph>`` with a profile fitted to ``pairs``; its longest
    sequence is ``max_length``, capped at the model's own limit (its position table)."""
    from transformers import AutoConfig, AutoTokenizer

    from breaknli_fast.engines.models import input_limit

    tok = AutoTokenizer.from_pretrained(str(folder))
    max_length = min(max_length, input_limit(AutoConfig.from_pretrained(str(folder)), tok)[0])
    enc = tok([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=max_length)
    lengths = [len(x) for x in enc["input_ids"]]
    profile = shape_profile(lengths, max_length, max_batch)
    info = build_engine(folder / graph, folder / PLAN_FILE, precision, profile)
    info["length_distribution"] = {"n": len(lengths), "min": min(lengths, default=0), "max": max(lengths, default=0),
                                   "median": float(np.median(lengths)) if lengths else 0.0}
    return info


def _torch_dtype(trt: Any, dt: Any) -> Any:
    import torch

    table = {trt.float32: torch.float32, trt.float16: torch.float16, trt.int32: torch.int32, trt.int8: torch.int8,
             trt.bool: torch.bool}
    if hasattr(trt, "int64"):
        table[trt.int64] = torch.int64
    if hasattr(trt, "bfloat16"):
        table[trt.bfloat16] = torch.bfloat16
    if dt not in table:
        raise EngineUnavailable(f"unsupported TensorRT tensor type {dt}")
    return table[dt]


class TrtRunner:
    """Runs a serialized engine on one GPU with torch CUDA tensors as buffers."""

    def __init__(self, plan_path: Path, device: str = "cuda"):
        import torch

        trt = require_tensorrt()
        self.trt = trt
        self.device = torch.device(device if device.startswith("cuda") else "cuda")
        self.logger = trt.Logger(trt.Logger.WARNING)
        self.runtime = trt.Runtime(self.logger)
        with torch.cuda.device(self.device):
            self.engine = self.runtime.deserialize_cuda_engine(Path(plan_path).read_bytes())
            if self.engine is None:
                raise EngineUnavailable(
                    f"TensorRT could not load {plan_path} (built by another TensorRT version or for another GPU?); "
                    "re-export with --force"
                )
            self.context = self.engine.create_execution_context()
            self.stream = torch.cuda.Stream(self.device)
        names = [self.engine.get_tensor_name(i) for i in range(self.engine.num_io_tensors)]
        self.inputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT]
        self.outputs = [n for n in names if self.engine.get_tensor_mode(n) == trt.TensorIOMode.OUTPUT]
        prof = self.engine.get_tensor_profile_shape(self.inputs[0], 0) if self.inputs else None
        # (min, opt, max) shapes of the first input: the limits the caller must respect
        self.max_batch = int(prof[2][0]) if prof is not None else 1
        self.max_length = int(prof[2][1]) if prof is not None and len(prof[2]) > 1 else 0

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        bufs: dict[str, Any] = {}
        with torch.cuda.device(self.device), torch.cuda.stream(self.stream):
            for name in self.inputs:
                dtype = _torch_dtype(self.trt, self.engine.get_tensor_dtype(name))
                t = torch.from_numpy(np.ascontiguousarray(feeds[name])).to(self.device, dtype=dtype, non_blocking=True)
                bufs[name] = t
                if not self.context.set_input_shape(name, tuple(t.shape)):
                    raise RuntimeError(f"input {name} of shape {tuple(t.shape)} is outside the engine's profile")
                self.context.set_tensor_address(name, t.data_ptr())
            for name in self.outputs:
                shape = tuple(self.context.get_tensor_shape(name))
                dtype = _torch_dtype(self.trt, self.engine.get_tensor_dtype(name))
                t = torch.empty(shape, dtype=dtype, device=self.device)
                bufs[name] = t
                self.context.set_tensor_address(name, t.data_ptr())
            if not self.context.execute_async_v3(self.stream.cuda_stream):
                raise RuntimeError("TensorRT execution failed")
        self.stream.synchronize()
        return {n: bufs[n].float().cpu().numpy() for n in self.outputs}


def validate_plan(folder: Path, src_path: str, pairs: Sequence[tuple[str, str]], device: str, max_length: int) -> dict[str, Any]:
    """Figures of the TensorRT engine against ``TorchClassifier.raw_logits`` (fp32, CPU)."""
    import onnx
    from transformers import AutoTokenizer

    from breaknli_fast.engines.torch_ref import TorchClassifier
    from breaknli_fast.export.runtime import classifier_feeds
    from breaknli_fast.export.validate import _logit_figures

    runner = TrtRunner(folder / PLAN_FILE, device)
    tok = AutoTokenizer.from_pretrained(str(folder))
    graph = next(p for p in sorted(folder.glob("*.onnx")))
    inputs = onnx.load(str(graph), load_external_data=False).graph.input
    ref_model = TorchClassifier(src_path, "fp32", "cpu", max_length=min(max_length, runner.max_length or max_length))
    step = max(1, min(16, runner.max_batch))
    refs, outs = [], []
    for i in range(0, len(pairs), step):
        chunk = list(pairs[i:i + step])
        refs.append(ref_model.raw_logits(chunk))
        outs.append(runner.run(classifier_feeds(tok, chunk, inputs, ref_model.max_length))["logits"])
    ref = np.concatenate(refs)
    out = np.concatenate(outs)
    figs = _logit_figures(ref, out)
    figs.update(n=len(pairs), agreement=float((ref.argmax(1) == out.argmax(1)).mean() * 100.0), device=device,
                providers=[f"TensorRT {runner.trt.__version__}"])
    return figs
