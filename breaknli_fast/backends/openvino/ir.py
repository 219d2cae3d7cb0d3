"""The openvino backend's int8 recipe on the IR: every matrix product with constant weights gets int8 weights, one
scale per output channel (symmetric, zero point 0), written as the decompression pattern OpenVINO's CPU plugin
fuses into its fully connected kernels (``Constant(i8) -> Convert(f32) -> Multiply(scale)``); at run time the
plugin quantises the activations per token and per group of :func:`group_size` input channels
(``DYNAMIC_QUANTIZATION_GROUP_SIZE``) and multiplies in int8.

Each row of activations gets its own scales (per token, per group), so a sample's answer does not depend on the
other samples in its batch; the exporter checks that on the CPU at hand before the export is used (without the
dynamic quantisation the kernels dequantise the weights and a row's sums depend on the row count).

This is the transformation NNCF's ``compress_weights`` (INT8_SYM) applies; it is done here on the IR, in a few lines,
because NNCF brings scikit-learn, pandas and a usage-telemetry client for it (docs/stack.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SCHEME = "int8-weights-per-channel-sym/dynamic-activations-per-token-group-v1"  # part of the cache key
GROUPS = (128, 64, 32)  # the largest that divides every product's input width is used (docs/export.md: speeds)
MIN_WIDTH = 16  # products narrower than this keep fp32 weights (nothing to gain)


def _weights(node: Any) -> tuple[Any, bool] | None:
    """The constant weight node of a MatMul (and whether it is transposed), else None."""
    if node.get_type_name() != "MatMul":
        return None
    w = node.input_value(1).get_node()
    if w.get_type_name() != "Constant":
        return None
    shape = list(w.get_output_shape(0))
    if len(shape) != 2:
        return None
    return w, bool(node.get_attributes().get("transpose_b", False))


def compress_weights(model: Any) -> dict[str, Any]:
    """Give every MatMul of ``model`` with 2-D constant weights int8 weights, a scale per output channel (in place).
    Returns what was done: products compressed, their input widths, parameters in int8."""
    from openvino import opset13 as ops

    widths: set[int] = set()
    count = params = 0
    for node in model.get_ordered_ops():
        found = _weights(node)
        if found is None:
            continue
        w, transposed = found
        weights = np.asarray(w.get_data(), dtype=np.float32)  # (K, N), or (N, K) when transposed
        k_axis = 1 if transposed else 0
        if weights.shape[k_axis] < MIN_WIDTH:
            continue
        scale = np.abs(weights).max(axis=k_axis, keepdims=True) / 127.0
        scale[scale == 0] = 1.0
        q = np.clip(np.rint(weights / scale), -127, 127).astype(np.int8)
        dq = ops.multiply(ops.convert(ops.constant(q), "f32"), ops.constant(scale.astype(np.float32)))
        node.input(1).replace_source_output(dq.output(0))
        widths.add(int(weights.shape[k_axis]))
        count += 1
        params += int(q.size)
    return {"products": count, "int8_parameters": params, "input_widths": sorted(widths)}


SETTINGS = "openvino_int8.json"  # beside an int8 IR: what the engine compiles it with


def write_settings(folder: Any, settings: dict[str, Any]) -> None:
    import json
    from pathlib import Path

    (Path(folder) / SETTINGS).write_text(json.dumps(settings, indent=2) + "\n")


def read_settings(folder: Any) -> dict[str, Any]:
    """The int8 settings written beside an IR ({} for an fp32 IR)."""
    import json
    from pathlib import Path

    p = Path(folder) / SETTINGS
    return json.loads(p.read_text()) if p.is_file() else {}


def group_size(widths: list[int]) -> int:
    """The activations' quantisation group: the largest of :data:`GROUPS` that divides every input width (a group
    must not straddle a row's end); the smallest where none does."""
    for g in GROUPS:
        if all(w % g == 0 for w in widths):
            return g
    return GROUPS[-1]
