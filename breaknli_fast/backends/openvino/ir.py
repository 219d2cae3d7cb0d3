"""The openvino backend's int8 recipes on the IR. Every matrix product with constant weights gets int8 weights, one
scale per output channel (symmetric, zero point 0), written as the decompression pattern OpenVINO's CPU plugin
fuses into its fully connected kernels (``Constant(i8) -> Convert(f32) -> Multiply(scale)``). Its activations are
quantised one of two ways:

* **dynamic** (:data:`SCHEME`; every role): at run time the plugin quantises the activations per token and per
  group of :func:`group_size` input channels (``DYNAMIC_QUANTIZATION_GROUP_SIZE``) and multiplies in int8. Each row
  gets its own scales, so a sample's answer does not depend on the other samples in its batch (without the dynamic
  quantisation the kernels dequantise the weights and a row's sums depend on the row count).
* **static** (:data:`STATIC_SCHEME`; sequence classifiers, their default): a product's input gets one symmetric
  int8 range fixed at export (``FakeQuantize``, 255 levels over ``[-m, m]``, ``m`` the largest ``|x|`` over the
  calibration pairs' real tokens, :func:`calibrate`), which the plugin's low-precision transformations turn into
  its static int8 kernels, faster than the dynamic ones (docs/export.md); the products fed by an activation
  function (a feed-forward block's output projection after GELU, a head's output after tanh), whose inputs carry
  the outliers a fixed range coarsens, stay dynamic. Fixed scales and the dynamic per-row ones alike leave a
  row's answer independent of its batch.

The exporter checks the invariance on the CPU at hand before the export is used.

This is the transformation NNCF's ``compress_weights`` (INT8_SYM) applies; it is done here on the IR, in a few lines,
because NNCF brings scikit-learn, pandas and a usage-telemetry client for it (docs/stack.md).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SCHEME = "int8-weights-per-channel-sym/dynamic-activations-per-token-group-v1"  # part of the cache key
STATIC_SCHEME = "int8-weights-per-channel-sym/static-activations-calibrated-sym/dynamic-after-activation-v1"
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


# ops through which an activation function's output reaches a product unchanged in kind, and the functions
ACTIVATIONS = {"Gelu", "Erf", "Tanh", "Relu", "Sigmoid", "Swish", "HSwish", "Mish", "SoftPlus"}
_ELEMENTWISE = {"Multiply", "Add", "Divide", "Subtract", "Power", "Sqrt", "Convert", *ACTIVATIONS}
LEVELS = 255  # a symmetric int8 range: -127 .. 127 steps of m / 127


def after_activation(node: Any, depth: int = 8) -> bool:
    """Whether a product's input comes from an activation function through elementwise ops only."""
    todo, seen = [(node.input_value(0).get_node(), 0)], set()
    while todo:
        n, d = todo.pop()
        if id(n) in seen or d > depth:
            continue
        seen.add(id(n))
        kind = n.get_type_name()
        if kind in ACTIVATIONS:
            return True
        if kind in _ELEMENTWISE:
            todo += [(v.get_node(), d + 1) for v in n.input_values()]
    return False


def _static_input(node: Any) -> tuple[str, Any] | None:
    """A product whose activations get a fixed range: (a name of its input stable across reads of the same IR, the
    input), else None. Those are the products :func:`compress_weights` gives int8 weights, except the ones fed by an
    activation function."""
    found = _weights(node)
    if found is None:
        return None
    w, transposed = found
    if list(w.get_output_shape(0))[1 if transposed else 0] < MIN_WIDTH or after_activation(node):
        return None
    src = node.input_value(0)
    return f"{src.get_node().get_friendly_name()}:{src.get_index()}", src


def static_products(model: Any) -> dict[str, Any]:
    """The inputs of ``model``'s products whose activations get a fixed range (name -> output)."""
    return dict(filter(None, (_static_input(node) for node in model.get_ordered_ops())))


def calibrate(model: Any, feeds: list[dict[str, np.ndarray]]) -> dict[str, float]:
    """The largest |activation| of each static product's input over ``feeds`` (batches of the graph's inputs), on
    the real tokens only (``attention_mask``): a copy of the fp32 IR with those inputs as extra outputs (``model``
    itself is left as it was)."""
    import openvino as ov

    model = model.clone()  # the extra outputs go on the copy
    sources = static_products(model)
    names = list(sources)
    if not names:
        return {}
    model.add_outputs([sources[n] for n in names])
    props = {"INFERENCE_PRECISION_HINT": "f32", "DYNAMIC_QUANTIZATION_GROUP_SIZE": 0}
    compiled = ov.Core().compile_model(model, "CPU", props)
    outs = compiled.outputs[-len(names):]
    peak = dict.fromkeys(names, 0.0)
    request = compiled.create_infer_request()
    for f in feeds:
        res = request.infer(f)
        mask = f.get("attention_mask")
        for n, o in zip(names, outs):
            v = np.asarray(res[o])
            if mask is not None and v.ndim == 3 and v.shape[:2] == mask.shape:
                v = v[mask.astype(bool)]
            if v.size:
                peak[n] = max(peak[n], float(np.abs(v).max()))
    return peak


def quantize_static(model: Any, peaks: dict[str, float]) -> dict[str, Any]:
    """Fix the calibrated ranges on ``model``'s static products (one ``FakeQuantize`` per input, shared by the
    products that read it) and give every product int8 weights (:func:`compress_weights`); in place. Returns what
    was done."""
    from openvino import opset13 as ops

    fq: dict[str, Any] = {}
    static = 0
    for node in model.get_ordered_ops():
        found = _static_input(node)
        if found is None or found[0] not in peaks:
            continue
        name, src = found
        if name not in fq:
            m = np.float32(max(peaks[name], 1e-8))
            lo, hi = ops.constant(np.array(-m, np.float32)), ops.constant(np.array(m, np.float32))
            fq[name] = ops.fake_quantize(src, lo, hi, lo, hi, LEVELS)
        node.input(0).replace_source_output(fq[name].output(0))
        static += 1
    done = compress_weights(model)
    done.update({"static_products": static, "static_inputs": len(fq),
                 "dynamic_products": done["products"] - static})
    return done


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
