"""The runtime of the tensorrt engine: loading a serialized TensorRT 10 engine (a plan) and running it on one
GPU with torch CUDA tensors as buffers, and the one-line refusal when TensorRT or a GPU is missing. The
tensorrt engine (:mod:`breaknli_fast.backends.tensorrt.engine`) runs on it, and the exporters validate the plans they
build with it (the converter is :mod:`breaknli_fast.backends.tensorrt.exporter`); it imports nothing from the exporters.

Not yet run on a GPU (TensorRT for Hopper GPUs is not installable from the package index; docs/stack.md).
Written against the TensorRT 10 API
documentation (``Runtime.deserialize_cuda_engine``, ``IExecutionContext.set_input_shape /
set_tensor_address / execute_async_v3``); the test-suite only checks that it refuses cleanly without
TensorRT. tensorrt and torch are imported on use (TensorRT is optional; the command line imports this module
through the exporters at start-up).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from breaknli_fast.engines.registry import EngineUnavailable

PLAN_FILE = "model.plan"
INSTALL = "pip install 'breaknli-fast[tensorrt]' (TensorRT 10) with a CUDA build of torch, on a machine with a CUDA GPU"


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
