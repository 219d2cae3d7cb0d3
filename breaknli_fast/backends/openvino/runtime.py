"""The openvino engine's runtime: an IR compiled for OpenVINO's CPU plugin behind the session protocol the shared
runners call (``run(output_names, feeds)``, ``get_inputs()``, ``get_outputs()``, as ONNX Runtime's sessions answer:
:mod:`breaknli_fast.engines.stepgraph`), and the compile-time properties of each precision.

* ``fp32``: every operation in fp32 (``INFERENCE_PRECISION_HINT f32``);
* ``bf16``: OpenVINO's bf16 kernels (hint ``bf16``), on CPUs with AVX-512 BF16 or AMX;
* ``int8``: an IR with int8 weights (:mod:`.ir`), hint ``f32``; the activations without a range fixed at export
  are quantised per token and group at run time (``DYNAMIC_QUANTIZATION_GROUP_SIZE``, from the export's manifest).

One stream on all the threads (``NUM_STREAMS`` 1, ``INFERENCE_NUM_THREADS``), and one inference at a time in the
process (:data:`INFER_LOCK`): with two Python threads inferring at once on compiled models of this version, the
requests hung now and then inside the Python binding's input dispatch (both threads waiting, no CPU used; a
2,724-pair run of six engines hung in one start of three), and one stream on both cores ran the mini classifier as
fast as two streams of one core each (about 3,000 pairs/s either way on 2 cores).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np

from breaknli_fast.engines.model_info import ModelLoadError

HINTS = {"fp32": "f32", "bf16": "bf16", "int8": "f32"}
INFER_LOCK = threading.Lock()  # one OpenVINO inference at a time in the process (module notes)


def total_threads(threads: int | None) -> int:
    """The threads asked for, or the cores this process may run on."""
    if threads:
        return int(threads)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def compile_properties(precision: str, threads: int, streams: int = 1, group: int | None = None) -> dict[str, Any]:
    """The CPU plugin's properties for ``precision`` (``group``: int8's activation group, from the manifest)."""
    if precision not in HINTS:
        raise ModelLoadError(f"the openvino engine runs {', '.join(HINTS)}, not {precision!r}")
    props: dict[str, Any] = {"INFERENCE_PRECISION_HINT": HINTS[precision], "INFERENCE_NUM_THREADS": int(threads),
                             "NUM_STREAMS": int(streams)}
    if streams == 1:
        props["PERFORMANCE_HINT"] = "LATENCY"
    # 0 switches the run-time quantisation of activations off: fp32 / bf16 IRs have no int8 weights for it anyway,
    # and an int8 IR runs it with the export's group
    props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = int(group) if precision == "int8" and group else 0
    return props


class OvSession:
    """An IR compiled for the CPU, run like an ONNX Runtime session (outputs copied out of the request)."""

    def __init__(self, path: str | Path, props: dict[str, Any]):
        import openvino as ov

        self.path = Path(path)
        self.compiled = ov.Core().compile_model(str(self.path), "CPU", props)
        self._local = threading.local()
        self._inputs = [SimpleNamespace(name=p.get_any_name()) for p in self.compiled.inputs]
        self._outputs = [SimpleNamespace(name=p.get_any_name()) for p in self.compiled.outputs]
        self.details = {"openvino": ov.__version__,
                        "compiled": {k: str(self.compiled.get_property(k)) for k in props
                                     if k in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS",
                                              "DYNAMIC_QUANTIZATION_GROUP_SIZE")}}

    def get_inputs(self) -> list[Any]:
        return self._inputs

    def get_outputs(self) -> list[Any]:
        return self._outputs

    def _request(self) -> Any:
        req = getattr(self._local, "request", None)
        if req is None:
            req = self._local.request = self.compiled.create_infer_request()
        return req

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        names = output_names or [o.name for o in self._outputs]
        with INFER_LOCK:
            req = self._request()
            req.infer(feeds, share_inputs=True)  # the feeds outlive the call: no copy into the request
            return [np.array(req.get_tensor(n).data) for n in names]
