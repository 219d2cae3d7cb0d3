"""Lower precisions of an fp32 ONNX graph: FP16, INT8 dynamic (CPU), INT8 static symmetric QDQ (CUDA / TensorRT).

* FP16: ``onnxruntime.transformers.float16.convert_float_to_float16(keep_io_types=True)``
  (``onnxconverter-common`` 1.16 produced invalid models or hung here). For T5 the feed-forward
  output projection (``wo``), the residual additions and the RMS norms stay in fp32, as
  transformers keeps them (``_keep_in_fp32_modules = ["wo"]``, after which the residual stream is
  promoted to fp32): Flan-T5's ``wo`` outputs overflow fp16 and the model returns NaN or garbage
  otherwise. The converter treats every blocked node as an island (it casts each output back to
  fp16 and each input to fp32 again), which would re-introduce the overflow between two blocked
  nodes, and it emits identical duplicate casts when one fp16 value feeds two blocked nodes (an
  invalid model); :func:`fuse_cast_pairs` removes both problems.
* INT8 dynamic: ``quantize_dynamic(weight_type=QInt8)`` of the MatMul/Gemm weights, activations
  quantized at run time **per row** (:func:`rows_apart`): ONNX Runtime's ``DynamicQuantizeLinear`` takes one scale
  for the whole activation tensor, i.e. for the batch, so a pair's logits (and sometimes its label) moved with the
  pairs batched with it; each token's own scale makes every row's result its own. The per-tensor form stays
  available as ``quantization=dynamic-batch`` (for comparison; MLPerf's TEST01 fails it). CPU provider only.
* INT8 static QDQ: ``quantize_static`` in QDQ format, symmetric activations and weights
  (per-channel), calibrated (MinMax) on real premise/hypothesis pairs. This is what TensorRT
  consumes (explicit quantization); the CUDA provider runs it too.
* INT8 static for the CPU (``quantization="static"``, sequence classifiers): QDQ, activations QUInt8 with scales
  fixed at export (MinMax over calibration pairs), weights QInt8 symmetric per channel. Dynamic quantization
  takes each activation's scale from the whole batch tensor, so a pair's logits, and sometimes its label, depend on
  the pairs batched with it; with fixed scales each row is computed alone (its integer products are exact). The
  MatMul / Gemm fed by an activation function (the feed-forward output projections, whose GELU outputs carry
  outliers that a calibrated range clips or coarsens, and a head's output projection) stay fp32: quantizing them
  too cost mini-nli 5 points of label agreement with fp32 (94 % against 99 %), leaving them out 0.25 point
  (:func:`after_activation`).

``quant_pre_process`` (shape inference + basic graph optimisation, which lets the quantizer see
fused patterns) fails on RoBERTa/DeBERTa without ``skip_symbolic_shape=True`` and leaves
temporary files in the working directory; it is run inside a temporary directory, and skipped
(recorded in the manifest) where it fails.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterable, Iterator

from breaknli_fast.export.errors import ExportError, first_line
from breaknli_fast.backends.ort.onnx import INLINE_LIMIT, quiet, save_onnx

# T5 nodes kept in fp32, by the names the legacy tracer gives them: the scope of each module call, named within its
# parent (/encoder/block.0/layer.2/DenseReluDense/wo/ in the encoder, which runs transformers' forward; the decoder
# step calls the layers' modules itself, so /layer.2/DenseReluDense/wo_1/, /layer_norm_3/, and its own residual
# additions /residual_4/Add, see t5.py). tests/test_export.py counts what the pattern finds in both graphs.
T5_FP32_NODE = re.compile(r"(/DenseReluDense(_\d+)?/wo(_\d+)?/|/(final_)?layer_norm(_\d+)?/)")
T5_RESIDUAL_ADD = re.compile(r"(/block\.\d+/layer\.\d+|/layer\.\d+(_\d+)?|/residual(_\d+)?)/Add(_\d+)?$")
QUANTIZED_OPS = ["MatMul", "Gemm"]


def copy_side_files(src: Path, dst: Path) -> None:
    """Tokenizer, config and generation config of an export folder (everything that is not a graph)."""
    import shutil

    for f in src.iterdir():
        if f.is_file() and not f.name.endswith((".onnx", ".onnx.data", ".data")):
            shutil.copy2(f, dst / f.name)


def t5_fp32_nodes(model: Any) -> list[str]:
    return [n.name for n in model.graph.node if T5_FP32_NODE.search(n.name) or T5_RESIDUAL_ADD.search(n.name)]


def _cast_to(node: Any) -> int | None:
    for a in node.attribute:
        if a.name == "to":
            return int(a.i)
    return None


def fuse_cast_pairs(model: Any) -> dict[str, int]:
    """Clean up ``convert_float_to_float16``'s output around blocked (fp32) nodes, in place:

    1. drop exact duplicate nodes (same op, inputs, outputs, name): the converter inserts one
       identical ``Cast`` per blocked consumer of a value, which makes the graph invalid;
    2. where a blocked node's fp32 output is cast to fp16 and straight back to fp32 for another
       blocked node, feed the fp32 value directly (so adjacent fp32 nodes form an fp32 region
       and values that overflow fp16 never pass through it);
    3. remove nodes whose outputs nobody uses any more.
    """
    from onnx import TensorProto

    g = model.graph
    seen: set[bytes] = set()
    nodes = []
    dups = 0
    for n in g.node:
        key = n.SerializeToString(deterministic=True)
        if key in seen:
            dups += 1
            continue
        seen.add(key)
        nodes.append(n)
    producer = {o: n for n in nodes for o in n.output}
    graph_outputs = {o.name for o in g.output}
    rename: dict[str, str] = {}
    for n in nodes:
        if n.op_type == "Cast" and _cast_to(n) == TensorProto.FLOAT and n.input:
            p = producer.get(n.input[0])
            if (p is not None and p.op_type == "Cast" and _cast_to(p) == TensorProto.FLOAT16
                    and p.name.endswith("_cast_to_fp16_node")):
                if n.output[0] in graph_outputs:
                    n.input[0] = p.input[0]  # keep the name: Cast fp32->fp32 is a no-op
                else:
                    rename[n.output[0]] = p.input[0]  # readers take the blocked node's fp32 output
    _rename_inputs(nodes, rename)
    fused = len(rename)
    removed = 0
    while True:
        used = _names_used(nodes) | graph_outputs
        keep = [n for n in nodes if any(o in used for o in n.output)]
        if len(keep) == len(nodes):
            break
        removed += len(nodes) - len(keep)
        nodes = keep
    del g.node[:]
    g.node.extend(nodes)
    return {"duplicates_dropped": dups, "cast_pairs_fused": fused, "dead_nodes_removed": removed}


def _rename_inputs(nodes: Any, rename: dict[str, str]) -> None:
    """Point every input in ``rename`` to its new name, in subgraphs too."""
    if not rename:
        return
    for n in nodes:
        for i, name in enumerate(n.input):
            if name in rename:
                n.input[i] = rename[name]
        for a in n.attribute:
            for sg in ([a.g] if a.HasField("g") else []) + list(a.graphs):
                _rename_inputs(sg.node, rename)
                for o in sg.output:
                    if o.name in rename:  # a subgraph output that is an outer value
                        o.name = rename[o.name]


def _names_used(nodes: Any) -> set[str]:
    """Every value name the nodes read, including outer-scope names read inside subgraphs (If, Loop)."""
    used: set[str] = set()
    for n in nodes:
        used.update(n.input)
        for a in n.attribute:
            subs = ([a.g] if a.HasField("g") else []) + list(a.graphs)
            for sg in subs:
                used.update(_names_used(sg.node))
                used.update(o.name for o in sg.output)
    return used


def _past_inline_limit(src: Path) -> bool:
    """Whether a graph with its external-data files is too big for one protobuf (then it is processed
    through files, with external data)."""
    return sum(f.stat().st_size for f in src.parent.glob(src.name + "*")) > INLINE_LIMIT


def _load_for_conversion(src: Path) -> tuple[Any, bool]:
    """Load a graph with shape information. Graphs past protobuf's 2 GB are shape-inferred through a
    file written beside the source (so the relative paths of their external weights still resolve)."""
    import onnx

    big = _past_inline_limit(src)
    if not big:
        return onnx.load(str(src)), False
    inferred = src.parent / f".inferred-{src.name}"
    try:
        onnx.shape_inference.infer_shapes_path(str(src), str(inferred))
        return onnx.load(str(inferred)), True
    finally:
        inferred.unlink(missing_ok=True)


def to_fp16(src: Path, dst: Path, keep_fp32: str | None = None) -> dict[str, Any]:
    """Convert one graph to fp16 (fp32 inputs/outputs). ``keep_fp32="t5"`` applies the T5 recipe."""
    from onnxruntime.transformers.float16 import convert_float_to_float16

    model, big = _load_for_conversion(src)
    block = t5_fp32_nodes(model) if keep_fp32 == "t5" else None
    try:
        with quiet():
            conv = convert_float_to_float16(model, keep_io_types=True, node_block_list=block, disable_shape_infer=big)
    except Exception as e:
        raise ExportError(f"fp16 conversion of {src.name} failed: {first_line(e)}") from e
    stats = fuse_cast_pairs(conv)
    save_onnx(conv, dst)
    return {"fp32_nodes": len(block or []), **stats}


@contextlib.contextmanager
def _in_dir(path: Path) -> Iterator[None]:
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


def preprocess(src: Path, workdir: Path) -> tuple[Path, str]:
    """``quant_pre_process`` into ``workdir`` (run from inside it); returns (graph to quantize, status)."""
    from onnxruntime.quantization.shape_inference import quant_pre_process

    src = Path(src).resolve()  # the pre-processor runs inside workdir
    out = workdir / ("pre-" + src.name)
    big = _past_inline_limit(src)
    try:
        with quiet(), _in_dir(workdir):
            quant_pre_process(str(src), str(out), skip_symbolic_shape=True, save_as_external_data=big)
        return out, "ok"
    except Exception as e:
        return src, f"skipped: {first_line(e)}"


def _quantize(src: Path, dst: Path, what: str, run: Any) -> str:
    """Pre-process ``src`` and call ``run(pre, dst, external_data)`` inside a temporary directory
    (the quantizers write side files into the working directory); returns the pre-processing status."""
    src, dst = Path(src).resolve(), Path(dst).resolve()  # the quantizer runs inside the temporary directory
    with tempfile.TemporaryDirectory() as tmp:
        pre, status = preprocess(src, Path(tmp))
        big = _past_inline_limit(src)
        try:
            with quiet(), _in_dir(Path(tmp)):
                run(str(pre), str(dst), big)
        except Exception as e:
            raise ExportError(f"{what} of {src.name} failed: {first_line(e)}") from e
    return status


# part of the int8-dynamic exports' cache key (a new scheme or a new graph form, a new export): asymmetric uint8 per
# row (rows_apart); v2 computes the same numbers as v1 with fused operators (QuantizeLinear, MatMulIntegerToFloat), v3
# with fewer (QuantizeLinear over blocks of the last axis at opset 21: no reshapes; it gives the zero points too)
ROW_SCHEME = "per-row-asymmetric-v3"
ROW_ACTIVATIONS = ("QUInt8 per row, asymmetric (dynamic: each token's scale (max(x, 0) - min(x, 0)) / 255 and zero "
                   "point round(-min(x, 0) / scale))")
# the rewritten graphs' opset: QuantizeLinear with a scale and zero point per block of the last axis (one block a row)
ROW_OPSET = 21


def _opset(model: Any) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 1)


def int8_dynamic(src: Path, dst: Path, fused: bool = False, per_row: bool = True) -> dict[str, Any]:
    """Dynamic int8 of the MatMul / Gemm weights (QInt8 per tensor), activations quantized at run time: per row
    (``per_row``, :func:`rows_apart`: each token's own scale, so a pair's answer does not depend on its batch) or, as
    ONNX Runtime does, per batch tensor (``per_row=False``, the ``dynamic-batch`` variant; with ``fused``, the fused
    ``Attention`` nodes too, as ``QAttention``, whose input scale is per tensor). A fused graph is quantized without
    the pre-processing (its shape inference does not know the fused operators)."""
    import onnx
    from onnx import TensorProto, version_converter
    from onnxruntime.quantization import QuantType, quantize_dynamic

    ops = QUANTIZED_OPS + (["Attention"] if fused and not per_row else [])
    extra = {"DefaultTensorType": TensorProto.FLOAT} if fused else {}
    rewritten: dict[str, int] = {}

    def run(pre: str, out: str, big: bool) -> None:
        quantize_dynamic(src_path if fused else pre, out, weight_type=QuantType.QInt8, op_types_to_quantize=ops,
                         per_channel=False, reduce_range=False, use_external_data_format=big, extra_options=extra)
        if per_row:
            model = onnx.load(out)
            if _opset(model) < ROW_OPSET:
                model = version_converter.convert_version(model, ROW_OPSET)
            rewritten.update(rows_apart(model))
            save_onnx(model, Path(out))

    src_path = str(Path(src).resolve())
    status = _quantize(src, dst, "int8 dynamic quantization", run)
    acts = ROW_ACTIVATIONS if per_row else "QUInt8 per batch tensor (dynamic; a pair's answer depends on its batch)"
    return {"scheme": "dynamic" if per_row else "dynamic-batch", "weight_type": "QInt8", "activations": acts,
            "row_scheme": ROW_SCHEME if per_row else None, "ops": ops, **rewritten,
            "pre_process": "skipped: fused graph" if fused else status}


# the int32 sums of a product go through float32 (MatMulIntegerToFloat) only where every one of them is exact in it
EXACT_IN_FLOAT32 = 2 ** 24


def rows_apart(model: Any) -> dict[str, int]:
    """Replace every ``DynamicQuantizeLinear`` (one scale and zero point for the whole tensor, i.e. for the batch) by
    the same asymmetric uint8 quantization per row, in place: over the last axis, ``lo = min(x, 0)``, ``hi = max(x,
    0)``, ``s = (hi - lo) / 255``, ``z = round(-lo / s)``, ``q = clip(round(x / s) + z, 0, 255)`` (two
    ``QuantizeLinear`` over blocks of the last axis, opset 21: ``z`` from ``-lo`` with a block per element, ``q``
    with one block per row; ONNX Runtime divides and rounds half to even as the ONNX operators do; the model must be
    at :data:`ROW_OPSET`). ``MatMulInteger`` takes a zero point per tensor only, so the row's zero point comes off the
    sums exactly, ``sum_k (q - z) w = sum_k q w - z * sum_k w`` (weights symmetric, zero point 0), in one of two forms:

    * in the product itself (where every sum stays below 2^24 in magnitude whatever the row, ``255 * sum_k |w_kn|
      < 2^24`` for every column n): each row gets ``r`` more columns holding ``z`` (one ``Concat``) and the weights
      ``r`` more rows that add up to ``-sum_k w_kn`` (``r = ceil(max_n |sum_k w_kn| / 127)``, int8 each), so one
      ``MatMulIntegerToFloat`` gives ``float(sum_k (q - z) w)``, converted in its kernel, exactly;
    * in int32 after it (``MatMulInteger`` with zero point 0, then ``- z * colsum``), with ONNX Runtime's ``Cast``.

    Both give the bits of the int32 arithmetic. The scale keeps its name and has shape ``[..., 1]``; it broadcasts in
    the ``Mul`` nodes that rescale the output. Each row's result depends on that row alone. Returns how many
    quantizations and products of each form were rewritten."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    g = model.graph
    opset = _opset(model)
    if opset < ROW_OPSET:
        raise ExportError(f"per-row int8 needs opset {ROW_OPSET} (blocked QuantizeLinear), the graph has {opset}")
    inits = {i.name: i for i in g.initializer}
    consumers: dict[str, list[Any]] = {}
    for n in g.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    consts = {"rows.255": np.array(255.0, np.float32), "rows.tiny": np.array(1e-30, np.float32),
              "rows.0": np.array(0.0, np.float32), "rows.1": np.array(1.0, np.float32),
              "rows.zp0": np.array(0, np.uint8), "rows.axes": np.array([-1], np.int64)}
    new_inits: list[Any] = []

    def reduce(op: str, x: str, y: str) -> Any:
        return helper.make_node(op, [x, "rows.axes"], [y], keepdims=1)

    def weights(mm: Any) -> Any:
        w = inits.get(mm.input[1])
        wz = inits.get(mm.input[3]) if len(mm.input) > 3 and mm.input[3] else None
        if w is None or (wz is not None and np.any(numpy_helper.to_array(wz) != 0)):
            raise ExportError(f"per-row int8: {mm.name} needs constant weights with zero point 0")
        return numpy_helper.to_array(w).astype(np.int64)

    def in_product(mm: Any, w: Any) -> bool:
        """Whether the zero point can go into the product (weights ``w``): the sums are exact in float32, and ONNX
        Runtime casts the product's output to float32 and nothing else."""
        users = consumers.get(mm.output[0], [])
        cast = len(users) == 1 and users[0].op_type == "Cast" and _cast_to(users[0]) == TensorProto.FLOAT
        return cast and w.ndim == 2 and 255 * int(np.abs(w).sum(axis=0).max()) < EXACT_IN_FLOAT32

    stats = {"activations_rewritten": 0, "products_in_float32": 0, "products_in_int32": 0}
    in_float: dict[str, tuple[str, str]] = {}  # product output -> (its input with the zero points, its weights)
    in_int32: dict[str, tuple[str, str]] = {}  # product output -> (its input's zero points as int32, column sums)
    casts_done: set[str] = set()
    nodes: list[Any] = []
    for n in g.node:
        if n.op_type == "MatMulInteger" and n.output[0] in in_float:
            a, w_ext = in_float[n.output[0]]
            cast = consumers[n.output[0]][0]
            casts_done.add(n.output[0])
            # zero points given (0), the weights' one of their own: ONNX Runtime's u8 x u8 rewrite for CPUs without
            # VNNI (session.x64quantprecision) replaces each product's weights and their zero point
            nodes.append(helper.make_node("MatMulIntegerToFloat", [a, w_ext, "rows.1", "rows.1", "rows.zp0",
                                                                   w_ext + ".zp"],
                                          [cast.output[0]], name=n.name, domain="com.microsoft"))
            stats["products_in_float32"] += 1
            continue
        if n.op_type == "MatMulInteger" and n.output[0] in in_int32:
            (z32, cs), raw = in_int32[n.output[0]], n.output[0] + "/rows.raw"
            nodes += [helper.make_node("MatMulInteger", [n.input[0], n.input[1], "rows.zp0", *n.input[3:]], [raw],
                                       name=n.name),
                      helper.make_node("Mul", [z32, cs], [raw + "/zw"]),
                      helper.make_node("Sub", [raw, raw + "/zw"], [n.output[0]])]
            stats["products_in_int32"] += 1
            continue
        if n.op_type == "Cast" and n.input[0] in casts_done:
            continue  # the product converts its sums itself
        if n.op_type != "DynamicQuantizeLinear":
            nodes.append(n)
            continue
        users = list({id(c): c for o in n.output for c in consumers.get(o, [])}.values())  # a product reads q and z
        if not {c.op_type for c in users} <= {"Mul", "MatMulInteger"}:
            raise ExportError(f"per-row int8: {n.name} feeds {sorted({c.op_type for c in users})}, not only "
                              "MatMulInteger / Mul")
        x, (q, scale, _), p = n.input[0], n.output, n.name + "/rows"
        products = [(c, weights(c)) for c in users if c.op_type == "MatMulInteger"]  # each read once
        k = int(products[0][1].shape[-2])
        fused = [(c, w, w.sum(axis=0)) for c, w in products if in_product(c, w)]
        r = max([-(-int(np.abs(cs).max()) // 127) for _, _, cs in fused] + [0])
        # zero point round(-lo / s) lies in [0, 255] (-lo <= hi - lo), so it needs no clip
        nodes += [reduce("ReduceMin", x, p + "/min"), reduce("ReduceMax", x, p + "/max"),
                  helper.make_node("Min", [p + "/min", "rows.0"], [p + "/lo"]),
                  helper.make_node("Max", [p + "/max", "rows.0"], [p + "/hi"]),
                  helper.make_node("Sub", [p + "/hi", p + "/lo"], [p + "/span"]),
                  helper.make_node("Max", [p + "/span", "rows.tiny"], [p + "/span1"]),
                  helper.make_node("Div", [p + "/span1", "rows.255"], [scale]),
                  helper.make_node("Neg", [p + "/lo"], [p + "/nlo"]),
                  helper.make_node("QuantizeLinear", [p + "/nlo", scale], [p + "/z"], axis=-1, block_size=1),
                  helper.make_node("QuantizeLinear", [x, scale, p + "/z"], [q], axis=-1, block_size=k)]
        a = q
        if fused and r:  # each row's zero point r times after its values
            a = p + "/qz"
            nodes.append(helper.make_node("Concat", [q] + [p + "/z"] * r, [a], axis=-1))
        for c, w, colsum in fused:
            w_ext = c.output[0] + "/rows.weights"
            new_inits += [numpy_helper.from_array(np.concatenate([w, _spread(-colsum, r)]).astype(np.int8), w_ext),
                          numpy_helper.from_array(np.array(0, np.int8), w_ext + ".zp")]
            in_float[c.output[0]] = (a, w_ext)
        rest = [(c, w) for c, w in products if c.output[0] not in in_float]
        if rest:
            nodes.append(helper.make_node("Cast", [p + "/z"], [p + "/z32"], to=TensorProto.INT32))
        for c, w in rest:
            cs = c.output[0] + "/rows.colsum"
            new_inits.append(numpy_helper.from_array(w.sum(axis=-2).astype(np.int32), cs))
            in_int32[c.output[0]] = (p + "/z32", cs)
        stats["activations_rewritten"] += 1
    if stats["activations_rewritten"]:
        g.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items() if k not in inits)
        g.initializer.extend(new_inits)
        del g.node[:]
        g.node.extend(nodes)
        if stats["products_in_float32"] and not any(o.domain == "com.microsoft" for o in model.opset_import):
            model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return stats


def _spread(total: Any, r: int) -> Any:
    """``r`` rows of int8 values in [-127, 127] whose column sums are ``total`` (``|total| <= 127 r``)."""
    import numpy as np

    if r == 0:
        return np.zeros((0, len(total)), np.int64)
    m, sign = np.abs(total), np.sign(total)
    base, rem = m // r, m % r
    rows = base[None, :] + (np.arange(r)[:, None] < rem[None, :])
    return sign[None, :] * rows


class _Reader:
    """``CalibrationDataReader`` over a list of feed dicts."""

    def __init__(self, feeds: Iterable[dict[str, Any]]):
        self._feeds = list(feeds)
        self._it = iter(self._feeds)

    def get_next(self) -> dict[str, Any] | None:
        return next(self._it, None)

    def rewind(self) -> None:
        self._it = iter(self._feeds)


def int8_static_qdq(src: Path, dst: Path, feeds: list[dict[str, Any]]) -> dict[str, Any]:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if not feeds:
        raise ExportError("static int8 quantization needs calibration pairs")
    status = _quantize(src, dst, "int8 static (QDQ) quantization", lambda pre, out, big: quantize_static(
        pre, out, _Reader(feeds), quant_format=QuantFormat.QDQ, activation_type=QuantType.QInt8,
        weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=QUANTIZED_OPS,
        calibrate_method=CalibrationMethod.MinMax, use_external_data_format=big,
        extra_options={"ActivationSymmetric": True, "WeightSymmetric": True}))
    return {"scheme": "static-qdq", "weight_type": "QInt8 symmetric per-channel", "activations": "QInt8 symmetric",
            "calibration": "MinMax", "calibration_batches": len(feeds), "ops": QUANTIZED_OPS, "pre_process": status}


# ops that pass an activation function's output on elementwise, and the activation functions themselves
_ELEMENTWISE = {"Mul", "Add", "Div", "Sub", "Erf", "Tanh", "Pow", "Sqrt", "Cast", "Gelu", "FastGelu", "BiasGelu", "Relu",
                "Sigmoid", "QuickGelu"}
_ACTIVATIONS = {"Erf", "Tanh", "Gelu", "FastGelu", "BiasGelu", "Relu", "Sigmoid", "QuickGelu"}


def after_activation(model: Any, depth: int = 8) -> list[str]:
    """Names of the weight MatMul / Gemm nodes whose input comes, through elementwise ops only, from an activation
    function (GELU's Erf, tanh, ReLU, ...): the feed-forward output projections and a head's output layer."""
    g = model.graph
    producer = {o: n for n in g.node for o in n.output}
    weights = {i.name for i in g.initializer}
    out = []
    for n in g.node:
        if n.op_type not in QUANTIZED_OPS or not any(i in weights for i in n.input):
            continue
        todo, seen, hit = [(i, 0) for i in n.input if i in producer], set(), False
        while todo and not hit:
            name, d = todo.pop()
            p = producer[name]
            if p.name in seen or d > depth:
                continue
            seen.add(p.name)
            if p.op_type in _ACTIVATIONS:
                hit = True
            elif p.op_type in _ELEMENTWISE:
                todo += [(i, d + 1) for i in p.input if i in producer]
        if hit:
            out.append(n.name)
    return out


def int8_static_cpu(src: Path, dst: Path, feeds: list[dict[str, Any]]) -> dict[str, Any]:
    """Static int8 for the CPU provider (module docstring): labels that do not depend on batch neighbours."""
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if not feeds:
        raise ExportError("static int8 quantization needs calibration pairs")
    kept: list[str] = []

    def run(pre: str, out: str, big: bool) -> None:
        kept.extend(after_activation(onnx.load(pre, load_external_data=False)))
        quantize_static(pre, out, _Reader(feeds), quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8,
                        weight_type=QuantType.QInt8, per_channel=True, op_types_to_quantize=QUANTIZED_OPS,
                        nodes_to_exclude=kept, calibrate_method=CalibrationMethod.MinMax, use_external_data_format=big,
                        extra_options={"WeightSymmetric": True})

    status = _quantize(src, dst, "int8 static quantization", run)
    return {"scheme": "static", "weight_type": "QInt8 symmetric per-channel",
            "activations": "QUInt8, scales fixed at export (MinMax calibration)", "calibration": "MinMax",
            "calibration_batches": len(feeds), "ops": QUANTIZED_OPS, "kept_fp32": kept, "pre_process": status}
