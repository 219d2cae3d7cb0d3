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

Single-row graphs (``single_after``, the int8 classifier of a small model by default: :mod:`.engine`): a call of one
row at a shape seen alone that many times runs on a graph compiled for that shape. The CPU plugin pays for every
change of input shape on a graph of dynamic shapes, and one-pair calls (LoadGen's SingleStream) change it nearly every
call. Both the graph of dynamic shapes and the single-row graphs are compiled without the plugin's snippets
(``SNIPPETS_MODE DISABLE``): with them, a graph of static shapes fuses other operations than one of dynamic shapes
and a pair's logits changed with the graph it ran on; without them they are equal to the bit (checked when the export
is judged, and by the tests).
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
# single-row graphs a session compiles at most: about 15 MiB each on the mini classifier (int8 weights repacked per
# graph; the embedding table is shared)
MAX_SINGLE_GRAPHS = 16


def total_threads(threads: int | None) -> int:
    """The threads asked for, or the cores this process may run on."""
    if threads:
        return int(threads)
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def compile_properties(precision: str, threads: int, streams: int = 1, group: int | None = None,
                       snippets: bool = True) -> dict[str, Any]:
    """The CPU plugin's properties for ``precision`` (``group``: int8's activation group, from the manifest;
    ``snippets`` False: without the plugin's snippets, as single-row graphs need)."""
    if precision not in HINTS:
        raise ModelLoadError(f"the openvino engine runs {', '.join(HINTS)}, not {precision!r}")
    props: dict[str, Any] = {"INFERENCE_PRECISION_HINT": HINTS[precision], "INFERENCE_NUM_THREADS": int(threads),
                             "NUM_STREAMS": int(streams)}
    if streams == 1:
        props["PERFORMANCE_HINT"] = "LATENCY"
    # 0 switches the run-time quantisation of activations off: fp32 / bf16 IRs have no int8 weights for it anyway,
    # and an int8 IR runs it with the export's group
    props["DYNAMIC_QUANTIZATION_GROUP_SIZE"] = int(group) if precision == "int8" and group else 0
    if not snippets:
        props["SNIPPETS_MODE"] = "DISABLE"
    return props


class OvSession:
    """An IR compiled for the CPU, run like an ONNX Runtime session (outputs copied out of the request).
    ``single_after``: a call of one row at a shape seen alone that many times runs on a graph compiled for that
    shape (at most :data:`MAX_SINGLE_GRAPHS`); 0 or None: every call on the graph of dynamic shapes."""

    def __init__(self, path: str | Path, props: dict[str, Any], single_after: int | None = None):
        import openvino as ov

        self.path = Path(path)
        self.single_after = max(0, int(single_after or 0))
        if self.single_after and props.get("SNIPPETS_MODE") != "DISABLE":
            raise ValueError("single-row graphs need the graphs compiled without snippets (module notes)")
        self._core = ov.Core()
        self._model = self._core.read_model(str(self.path))
        self._props = dict(props)
        self.compiled = self._core.compile_model(self._model, "CPU", props)
        if not self.single_after:
            self._model = None  # nothing else is compiled from it
        self._local = threading.local()
        self._inputs = [SimpleNamespace(name=p.get_any_name()) for p in self.compiled.inputs]
        self._outputs = [SimpleNamespace(name=p.get_any_name()) for p in self.compiled.outputs]
        self._seen: dict[tuple[tuple[str, tuple[int, ...]], ...], int] = {}  # a lone row's shapes -> calls
        self._singles: dict[tuple[tuple[str, tuple[int, ...]], ...], Any] = {}  # -> its graph's request
        self.details = {"openvino": ov.__version__,
                        "compiled": {k: str(self.compiled.get_property(k)) for k in props
                                     if k in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS", "NUM_STREAMS",
                                              "DYNAMIC_QUANTIZATION_GROUP_SIZE")},
                        # the plugin does not report it back: as asked
                        **({"snippets": "disabled"} if props.get("SNIPPETS_MODE") == "DISABLE" else {}),
                        **({"single_graphs": {"after": self.single_after, "at_most": MAX_SINGLE_GRAPHS}}
                           if self.single_after else {})}

    def single_shapes(self) -> list[tuple[tuple[str, tuple[int, ...]], ...]]:
        """The input shapes the session has single-row graphs for."""
        return list(self._singles)

    def get_inputs(self) -> list[Any]:
        return self._inputs

    def get_outputs(self) -> list[Any]:
        return self._outputs

    def _request(self) -> Any:
        req = getattr(self._local, "request", None)
        if req is None:
            req = self._local.request = self.compiled.create_infer_request()
        return req

    def _single(self, feeds: dict[str, np.ndarray]) -> Any:
        """The request of the single-row graph for these feeds' shapes, compiled on the call that makes the shape's
        ``single_after``-th; None for a call of more rows, a shape not seen that often, or when the cap is reached.
        Called under :data:`INFER_LOCK`."""
        if not self.single_after or any(np.ndim(a) == 0 or np.shape(a)[0] != 1 for a in feeds.values()):
            return None
        key = tuple(sorted((k, tuple(np.shape(a))) for k, a in feeds.items()))
        req = self._singles.get(key)
        if req is not None or len(self._singles) >= MAX_SINGLE_GRAPHS:
            return req
        seen = self._seen[key] = self._seen.get(key, 0) + 1
        if seen < self.single_after:
            return None
        model = self._model.clone()
        model.reshape({k: list(shape) for k, shape in key})
        req = self._singles[key] = self._core.compile_model(model, "CPU", self._props).create_infer_request()
        return req

    def run(self, output_names: list[str] | None, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
        names = output_names or [o.name for o in self._outputs]
        with INFER_LOCK:
            req = self._single(feeds) or self._request()
            req.infer(feeds, share_inputs=True)  # the feeds outlive the call: no copy into the request
            return [np.array(req.get_tensor(n).data) for n in names]
