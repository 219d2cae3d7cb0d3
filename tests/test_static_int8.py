"""int8 with labels that do not depend on batch neighbours: the CPU's static quantization (``quantization=static``)
and dynamic int8 per row (the default), against ONNX Runtime's per-tensor dynamic int8 (``dynamic-batch``), whose
activation scales come from the whole batch."""

from __future__ import annotations

import pytest

pytest.importorskip("onnxruntime")

import tiny_models as testing  # noqa: E402

from breaknli_fast.bench.agreement import batch_invariance  # noqa: E402
from breaknli_fast.engines import registry  # noqa: E402
from breaknli_fast.export.errors import UnsupportedModelError  # noqa: E402

CAL = [(p, h) for p, h, _ in testing.pairs(24, seed=5)]
PAIRS = [(p, h) for p, h, _ in testing.pairs(40, seed=11)]
RANDOM_WEIGHTS = {"max_abs_logit": None, "min_agreement": None, "min_token_agreement": None}


@pytest.fixture(scope="module")
def roberta(tiny_dir) -> str:
    d = tiny_dir / "static-int8" / "roberta"
    if not (d / "model.safetensors").exists():
        testing.make_tiny_classifier(d, "roberta", init_std=0.3)
    return str(d)


def _load(model, tmp, **kw):
    return registry.load_classifier("ort", model, precision="int8", cache_dir=tmp / "exports", calibration_pairs=CAL,
                                    calibration_size=16, validation_size=8, tolerances=RANDOM_WEIGHTS, **kw)


def test_static_int8_labels_do_not_depend_on_the_batch(roberta, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    static = _load(roberta, tmp_path, quantization="static")
    assert static.info.details["variant"] == "int8-static"
    inv = batch_invariance(static, PAIRS)
    # fixed activation scales: each row is computed on its own, to the bit, whatever its batch neighbours
    assert inv.pairs == 40 and inv.labels_changed == 0 and inv.max_abs_logit_diff == 0.0
    dynamic = _load(roberta, tmp_path)
    assert dynamic.info.details["variant"] == "int8-dynamic"
    # the default dynamic int8: each row's own activation scale, to the bit as well
    inv = batch_invariance(dynamic, PAIRS)
    assert inv.labels_changed == 0 and inv.max_abs_logit_diff == 0.0
    per_batch = _load(roberta, tmp_path, quantization="dynamic-batch")
    assert per_batch.info.details["variant"] == "int8-dynamic-batch"
    # ONNX Runtime's per-tensor activation scales: the same pair's logits move with the pairs batched with it
    assert batch_invariance(per_batch, PAIRS).max_abs_logit_diff > 0.0


def test_static_int8_keeps_the_layers_after_activations_in_fp32(roberta, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    import json
    from pathlib import Path

    clf = _load(roberta, tmp_path, quantization="static")
    manifest = json.loads((Path(clf.info.details["export_dir"]) / "manifest.json").read_text())
    q = manifest["quantization"]
    kept = q["graphs"]["model.onnx"]["kept_fp32"]
    # the feed-forward output projection of each layer (after GELU) and the head's output layer (after tanh)
    assert kept and all("output/dense" in k or "out_proj" in k for k in kept)
    assert sum("output/dense" in k for k in kept) == 2  # the tiny model's two layers
    assert q["scheme"] == "static" and q["calibration_pairs"] == 16


def test_static_int8_is_for_classifiers_on_the_cpu(tmp_path, tiny_dir, monkeypatch):
    from breaknli_fast.backends.ort.exporter import variant as _variant

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    assert _variant("seq-cls", "int8", "cpu", quantization="static") == "int8-static"
    assert _variant("seq-cls", "int8", "cpu") == "int8-dynamic"
    assert _variant("seq-cls", "int8", "cuda", quantization="static") == "int8-qdq"
    for args, q, match in ((("seq2seq", "int8", "cpu"), "static", "clf.quantization=static"),
                           (("seq-cls", "fp32", "cpu"), "static", "int8 setting"),
                           (("seq-cls", "int8", "cpu"), "fixed", "dynamic, static or dynamic-batch"),
                           (("seq-cls", "int8", "cuda"), "dynamic", "for the CPU")):
        with pytest.raises(UnsupportedModelError, match=match):
            _variant(*args, quantization=q)
    with pytest.raises(UnsupportedModelError, match="fuse=true with quantization=static"):
        _variant("seq-cls", "int8", "cpu", fuse=True, quantization="static")
    t5 = tiny_dir / "static-int8" / "t5"
    if not (t5 / "model.safetensors").exists():
        testing.make_tiny_t5(t5)
    with pytest.raises(Exception, match="sequence classifiers"):
        registry.load_generator("ort", str(t5), precision="int8", quantization="static", cache_dir=tmp_path / "e")


def test_after_activation_finds_the_projections_fed_by_an_activation():
    from onnx import TensorProto, helper

    from breaknli_fast.backends.ort.quantize import after_activation

    w = [helper.make_tensor(n, TensorProto.FLOAT, [2, 2], [1.0, 0.0, 0.0, 1.0]) for n in ("w1", "w2", "w3")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="ffn_in"),
             helper.make_node("Erf", ["h"], ["e"], name="erf"),
             helper.make_node("Mul", ["h", "e"], ["g"], name="gelu_mul"),
             helper.make_node("MatMul", ["g", "w2"], ["y"], name="ffn_out"),
             helper.make_node("MatMul", ["y", "w3"], ["z"], name="next_proj")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 2])], initializer=w)
    assert after_activation(helper.make_model(graph)) == ["ffn_out"]
