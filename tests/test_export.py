"""Exporters: ONNX fp32 / fp16 / int8 for every classifier family and for T5, validation against
PyTorch fp32, the export cache (reuse, invalidation, force, atomic writes), clean refusals and the
``export`` command. CPU only, offline; tiny random-weight models.

Tolerances hold on any x86-64 CPU (with or without AVX-512 VNNI): fp32 exports differ from PyTorch by
rounding only; fp16 by what the format's precision loses; int8 on random weights is not judged by
agreement at all, since ONNX Runtime's int8 kernels give other numbers on CPUs without VNNI and a
random model's near-tied labels follow them (the int8 agreement target is on the trained mini-nli,
tests/test_mini_models.py)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

import tiny_models as testing  # noqa: E402
from breaknli_fast.engines.registry import EngineUnavailable  # noqa: E402
from breaknli_fast.export import (ExportValidationError, UnsupportedModelError,  # noqa: E402
                                  export_model)
from breaknli_fast.export import manifest as mf  # noqa: E402

FAMILIES = ("roberta", "bart", "distilbart", "deberta", "deberta-v2")
PAIRS = [(p, h) for p, h, _ in testing.pairs(24, seed=5)]
# Validation meant for random weights (fp16 and int8): no agreement gates and no absolute logit bound
# (the tests below bound fp16 relative to the logit scale); non-finite outputs still fail. The
# models (init_std=0.3) have labels that vary with the input and logits of a few units.
RANDOM_WEIGHTS = {"max_abs_logit": None, "min_agreement": None, "min_token_agreement": None}


@pytest.fixture(scope="session")
def models(tiny_dir) -> dict[str, str]:
    root = tiny_dir / "export-models"
    out = {}
    for fam in FAMILIES:
        out[fam] = str(testing.make_tiny_classifier(root / fam, fam, init_std=0.3))
    out["t5"] = str(testing.make_tiny_t5(root / "t5"))
    return out


@pytest.fixture(scope="session")
def cache(tiny_dir) -> Path:
    return tiny_dir / "export-cache"


@pytest.fixture(autouse=True)
def _cache_root(tiny_dir, monkeypatch):
    """Nothing is written under ~/.cache by the tests."""
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tiny_dir / "cache-root"))


def _export(model, precision, cache, **kw):
    tol = kw.pop("tolerances", RANDOM_WEIGHTS if precision in ("int8", "fp16") else None)
    return export_model(model, precision=precision, cache_dir=cache, calibration_pairs=PAIRS, validation_size=16,
                        tolerances=tol, progress=False, **kw)


@pytest.mark.parametrize("precision", ["fp32", "fp16", "int8"])
@pytest.mark.parametrize("family", FAMILIES)
def test_classifier_export_validates(models, cache, family, precision):
    res = _export(models[family], precision, cache)
    v = res.validation
    assert v["passed"] and v["n"] == 16 and v["nonfinite"] == 0
    if precision == "fp32":
        # rounding only: <= 5e-6 measured; the validation pairs' smallest top-two margin is 2.4e-3
        # (deberta), so every label agrees on any CPU
        assert v["max_abs_logit"] <= 1e-4 and v["agreement"] == 100.0
    elif precision == "fp16":
        # fp16 loses at most 3e-3 of the logit scale here (bound: 5e-2). Of the 16 pairs, only one
        # (deberta, margin 2.4e-3) has a top-two margin within 6e-2, the reach of three times the
        # largest fp16 error measured: at most one label flips, 93.75 % >= 90 %
        assert v["max_abs_logit"] <= 5e-2 * max(1.0, v["max_abs_ref_logit"]) and v["agreement"] >= 90.0
    m = res.manifest
    assert m["family"] == ("bart" if family == "distilbart" else family)
    assert m["variant"] == {"fp32": "fp32", "fp16": "fp16", "int8": "int8-dynamic"}[precision]
    assert (res.path / "model.onnx").exists() and (res.path / "tokenizer_config.json").exists()
    names = [i["name"] for i in m["graphs"]["model.onnx"]["inputs"]]
    assert names[:2] == ["input_ids", "attention_mask"]
    assert m["graphs"]["model.onnx"]["inputs"][0]["shape"] == ["batch", "sequence"]


def test_manifest_contents(models, cache):
    res = _export(models["roberta"], "fp32", cache)
    m = json.loads((res.path / "manifest.json").read_text())
    for k in ("source", "files", "precision", "format", "opset", "libraries", "validation", "created", "key", "graphs"):
        assert k in m, k
    assert m["source"]["files_sha256"]["model.safetensors"]
    assert set(m["key"]["libraries"]) == {"torch", "transformers", "onnxruntime", "onnx"}  # what builds an onnx export
    for name, meta in m["files"].items():
        assert mf.file_sha256(res.path / name) == meta["sha256"]
    assert m["validation"]["tolerances"]["max_abs_logit"] == 1e-4


def test_t5_fp32_export_validates_greedy_identical(models, cache):
    res = _export(models["t5"], "fp32", cache)
    v = res.validation
    # the project's own two graphs, no optimum
    assert sorted(res.graphs) == ["step_decoder_model.onnx", "step_encoder_model.onnx"]
    assert res.manifest["exporter"].startswith("torch.onnx.export")
    # fp32 against fp32 (3e-6 apart); the answer-score margins (>= 5.8e-2) and the greedy top-two
    # gaps (>= 4e-2) of this model are far beyond that, so labels and greedy tokens agree on any CPU
    assert v["max_abs_logit"] < 1e-3 and v["agreement"] == 100.0
    assert v["generation"]["token_agreement"] == 100.0
    assert v["generation"]["identical_sequences"] == v["generation"]["prompts"]
    # the ort engine's sampling graphs, validated alike (batched, padded NLI prompts; greedy generation)
    step = v["step_graphs"]
    assert step["max_abs_top_logit"] < 1e-3 and step["nonfinite"] == 0
    # top-k ids in order: two reference logits closer than twice the error may swap (this model has one
    # such pair among its top 50, 1.4e-5 apart), and a swap moves two positions
    ties = _near_ties(models["t5"], PAIRS[:v["n"]], step["k"], 2 * step["max_abs_top_logit"])
    assert step["top_ids_identical"] >= 100.0 * (1 - 2 * ties / (v["n"] * step["k"]))
    assert step["token_agreement"] == 100.0 and step["identical_sequences"] == step["prompts"] > 0
    assert res.manifest["key"]["t5_graphs"] == res.manifest["version"]
    names = [i["name"] for i in res.manifest["graphs"]["step_decoder_model.onnx"]["inputs"]]
    assert names[:6] == ["input_ids", "self_rel", "self_mask", "cross_bias", "slot_rows", "row_slots"]
    assert names[-1] == "top_k" and "cache_k_0" in names
    outputs = [o["name"] for o in res.manifest["graphs"]["step_decoder_model.onnx"]["outputs"]]
    assert outputs[:2] == ["top_values", "top_ids"] and outputs[-1] == "logits"
    from rich.console import Console

    from breaknli_fast.export.command import validation_table

    console = Console(record=True, width=200)
    console.print(validation_table(res))
    text = console.export_text()
    assert f"step graphs: greedy token agreement ({step['prompts']} prompts)" in text and "step graphs: max |Δ top-" in text


def _near_ties(model: str, pairs, k: int, gap: float) -> int:
    """Adjacent logits of the PyTorch first decoder step's top k + 1 closer than ``gap``, over the NLI
    prompts of the pairs, padded in one batch as the validation pads them."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS

    tok = AutoTokenizer.from_pretrained(model)
    m = AutoModelForSeq2SeqLM.from_pretrained(model, dtype=torch.float32).eval()
    enc = tok([NLI_PROMPTS[DEFAULT_NLI_PROMPT].format(premise=p, hypothesis=h) for p, h in pairs], padding=True,
              return_tensors="pt")
    with torch.inference_mode():
        logits = m(**enc, decoder_input_ids=torch.zeros((len(pairs), 1), dtype=torch.long)).logits[:, 0, :]
    top = torch.topk(logits, min(k + 1, logits.shape[-1])).values
    return int(((top[:, :-1] - top[:, 1:]) < gap).sum())


def test_t5_step_graphs_failing_validation_fails_the_export(models, cache, monkeypatch):
    """The graph's top-k path is judged like its logits: a wrong top-k stops the export."""
    from breaknli_fast.export import validate_t5 as ort_val

    real = ort_val._topk_figures

    def broken(*a, **kw):
        figs = real(*a, **kw)
        return {**figs, "token_agreement": 50.0}

    monkeypatch.setattr(ort_val, "_topk_figures", broken)
    with pytest.raises(ExportValidationError, match="step graphs: greedy token agreement"):
        _export(models["t5"], "fp32", cache, force=True)


def test_t5_fp16_keeps_wo_and_residual_stream_fp32(models, cache):
    import onnx
    from onnx import TensorProto

    res = _export(models["t5"], "fp16", cache)
    assert res.validation["passed"] and res.validation["nonfinite"] == 0
    for graph in res.graphs:
        m = onnx.load(str(res.path / graph))
        names = [n.name for n in m.graph.node]
        assert len(names) == len(set(names)), "duplicate node names (invalid model)"
        inits = {i.name: i for i in m.graph.initializer}
        producer = {o: n for n in m.graph.node for o in n.output}
        consumers: dict[str, list] = {}
        for n in m.graph.node:
            for i in n.input:
                consumers.setdefault(i, []).append(n)
        wo = [n for n in m.graph.node if n.op_type == "MatMul" and re.search(r"/DenseReluDense/wo(_\d+)?/", n.name)]
        cfg = json.loads((res.path / "config.json").read_text())
        layers = cfg["num_decoder_layers"] if graph.startswith("step_decoder") else cfg["num_layers"]
        assert len(wo) == layers, graph  # every layer's (encoder: transformers' names; decoder step: its own)
        for n in wo:
            assert inits[n.input[1]].data_type == TensorProto.FLOAT  # fp32 weight
            # the output goes straight into the fp32 residual Add (no fp16 round trip)
            assert any(c.op_type == "Add" and re.search(r"/layer\.\d+(_\d+)?/Add$", c.name)
                       for c in consumers[n.output[0]])
            assert all(c.op_type != "Cast" for c in consumers[n.output[0]])
        # the residual stream of the decoder step's attention (its own additions) stays fp32 too
        residual = [n for n in m.graph.node if re.search(r"/residual(_\d+)?/Add$", n.name)]
        assert len(residual) == (2 * layers if graph.startswith("step_decoder") else 0)
        types = {v.name: v.type.tensor_type.elem_type for v in onnx.shape_inference.infer_shapes(m).graph.value_info}
        assert all(types[n.output[0]] == TensorProto.FLOAT for n in residual)
        # some computation really is fp16
        assert any(i.data_type == TensorProto.FLOAT16 for i in m.graph.initializer)
        assert producer  # graph is non-empty


def test_t5_int8_export(models, cache):
    res = _export(models["t5"], "int8", cache)
    assert res.validation["passed"] and res.validation["nonfinite"] == 0
    assert res.manifest["quantization"]["scheme"] == "dynamic"
    assert set(res.manifest["quantization"]["graphs"]) >= {"step_encoder_model.onnx", "step_decoder_model.onnx"}
    assert res.validation["step_graphs"]["nonfinite"] == 0


def test_static_qdq_int8_for_gpu_runs_on_cpu(models, cache):
    """The TensorRT/CUDA int8 graph (symmetric QDQ, calibrated on pairs) is validated on the CPU here."""
    import onnx

    res = _export(models["roberta"], "int8", cache, device="cuda", calibration_size=8)
    assert res.manifest["variant"] == "int8-qdq"
    assert res.validation["passed"]
    if "CUDAExecutionProvider" not in __import__("onnxruntime").get_available_providers():
        assert "CPU provider" in res.validation.get("note", "")
    ops = {n.op_type for n in onnx.load(str(res.path / "model.onnx")).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    q = res.manifest["quantization"]
    assert q["scheme"] == "static-qdq" and q["calibration_pairs"] == 8


# -- cache -----------------------------------------------------------------------------------


def test_cache_reuse_invalidation_and_force(models, tmp_path):
    src = tmp_path / "model"
    shutil.copytree(models["roberta"], src)
    cache = tmp_path / "cache"
    first = _export(str(src), "fp32", cache)
    assert not first.reused
    mtime = (first.path / "model.onnx").stat().st_mtime_ns
    created = first.manifest["created"]

    again = _export(str(src), "fp32", cache)
    assert again.reused and again.path == first.path
    assert (again.path / "model.onnx").stat().st_mtime_ns == mtime
    assert again.manifest["created"] == created

    forced = _export(str(src), "fp32", cache, force=True)
    assert not forced.reused and forced.path == first.path
    assert (forced.path / "model.onnx").stat().st_mtime_ns != mtime

    cfg = json.loads((src / "config.json").read_text())
    cfg["note"] = "changed"
    (src / "config.json").write_text(json.dumps(cfg))
    changed = _export(str(src), "fp32", cache)
    assert not changed.reused and changed.path == first.path
    # one folder per (model, format, precision): no stale copies, no temporary folders left
    assert [p.name for p in cache.iterdir() if p.name != ".locks"] == [first.path.name]


def test_cache_rebuilds_when_library_versions_change(models, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = _export(models["roberta"], "fp32", cache)
    real = mf.library_versions

    monkeypatch.setattr(mf, "library_versions", lambda names=mf.LIBRARIES: {**real(names), "onnxruntime": "0.0.1"})
    second = _export(models["roberta"], "fp32", cache)
    assert not second.reused and second.manifest["libraries"]["onnxruntime"] == "0.0.1"
    assert first.path == second.path


def test_default_cache_dir_follows_env(models, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "c"))
    res = export_model(models["roberta"], precision="fp32", calibration_pairs=PAIRS, validation_size=8, progress=False)
    assert res.path.parent == tmp_path / "c" / "exports"
    assert res.path.name.startswith("roberta-onnx-fp32-")


@pytest.mark.parametrize("precision", ["int8", "int8-static"])
def test_relative_cache_dir(models, tmp_path, monkeypatch, precision):
    """A relative cache folder works for the quantizers too (they run inside a temporary directory)."""
    monkeypatch.chdir(tmp_path)
    device = "cuda" if precision == "int8-static" else "cpu"
    if device == "cuda":  # the static QDQ graph is built the same way; only its validation needs the CUDA provider
        from breaknli_fast.backends.ort import quantize as qz

        fp32 = _export(models["roberta"], "fp32", Path("rel-cache"))
        feeds = [{"input_ids": np.ones((1, 4), dtype=np.int64), "attention_mask": np.ones((1, 4), dtype=np.int64)}]
        qz.int8_static_qdq(Path("rel-cache") / fp32.path.name / "model.onnx", Path("qdq.onnx"), feeds)
        assert (tmp_path / "qdq.onnx").is_file()
        return
    res = _export(models["roberta"], "int8", Path("rel-cache"))
    assert res.validation["passed"] and (tmp_path / "rel-cache").is_dir()


def test_out_dir_and_failed_validation_leaves_nothing(models, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # quant_pre_process must not litter the working directory
    out = tmp_path / "out"
    with pytest.raises(ExportValidationError) as ei:  # int8 logits are never within 1e-12 of fp32's
        _export(models["roberta"], "int8", None, out_dir=out, tolerances={"max_abs_logit": 1e-12})
    assert "max|Δlogit|" in str(ei.value) and "\n" not in str(ei.value)
    assert ei.value.validation["passed"] is False
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp folders, no litter


def test_reused_export_rechecks_tolerances(models, cache):
    _export(models["roberta"], "int8", cache)
    with pytest.raises(ExportValidationError):
        _export(models["roberta"], "int8", cache, tolerances={"max_abs_logit": 1e-12})


# -- refusals --------------------------------------------------------------------------------


def test_refuses_unsupported_architecture(models, tmp_path):
    d = tmp_path / "mlm"
    shutil.copytree(models["roberta"], d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(architectures=["RobertaForMaskedLM"], id2label={"0": "LABEL_0", "1": "LABEL_1"},
               label2id={"LABEL_0": 0, "LABEL_1": 1})
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="unsupported model type 'roberta'"):
        export_model(str(d), progress=False)


def test_refuses_bad_precision_and_format(models):
    with pytest.raises(UnsupportedModelError, match="bf16: .*the torch engine, without an export"):
        export_model(models["roberta"], precision="bf16", progress=False)
    with pytest.raises(UnsupportedModelError, match="unknown export format"):
        export_model(models["roberta"], format="tflite", progress=False)


def test_refuses_gpu_int8_and_tensorrt_for_t5(models):
    with pytest.raises(UnsupportedModelError, match="int8 for text-to-text models on the GPU"):
        export_model(models["t5"], precision="int8", device="cuda", progress=False)
    with pytest.raises(UnsupportedModelError, match="TensorRT engines for text-to-text"):
        export_model(models["t5"], format="tensorrt", progress=False)


def _tensorrt_usable() -> str | None:
    try:
        from breaknli_fast.backends.tensorrt.runtime import require_tensorrt

        require_tensorrt()
        return None
    except EngineUnavailable as e:
        return str(e)


def test_tensorrt_missing_is_one_line(models):
    reason = _tensorrt_usable()
    if reason is None:
        pytest.skip("TensorRT and a GPU are present: the refusal cannot be observed")
    assert "\n" not in reason and "pip install 'breaknli-fast[tensorrt]'" in reason
    from breaknli_fast.engines import registry

    with pytest.raises(EngineUnavailable) as ei:
        registry.load_classifier("tensorrt", models["roberta"], device="cuda")
    assert "\n" not in str(ei.value) and "tensorrt" in str(ei.value).lower()
    with pytest.raises(EngineUnavailable):
        export_model(models["roberta"], format="tensorrt", progress=False)


def test_tensorrt_generator_not_supported():
    from breaknli_fast.engines import registry

    with pytest.raises(EngineUnavailable, match="does not support generators"):
        registry.load_generator("tensorrt", "any-model", device="cuda")


def test_tensorrt_build_on_gpu(models, tmp_path):
    reason = _tensorrt_usable()
    if reason is not None:
        pytest.skip(f"TensorRT engine build needs TensorRT 10 and a CUDA GPU: {reason}")
    res = export_model(models["roberta"], format="tensorrt", precision="fp32", out_dir=tmp_path / "trt",
                       calibration_pairs=PAIRS, validation_size=16, progress=False)
    assert res.validation["passed"] and (res.path / "model.plan").exists()


def test_shape_profile_from_lengths():
    from breaknli_fast.backends.tensorrt.exporter import shape_profile

    p = shape_profile([10, 12, 20, 31, 33, 40, 41, 50, 60, 200], max_length=256, max_batch=32)
    assert p["min"] == [1, 1] and p["max"] == [32, 256] and p["opt"] == [32, 64]


# -- command ---------------------------------------------------------------------------------


def _app():
    import typer

    from breaknli_fast.export.command import export

    app = typer.Typer()
    app.command("export")(export)

    @app.command("other")
    def other() -> None:  # a second command keeps typer in multi-command mode, as in cli.py
        pass

    return app


def test_export_command_success_and_reuse(models, tmp_path):
    from typer.testing import CliRunner

    out = tmp_path / "cli-out"
    runner = CliRunner()
    # random weights at int8: agreement is reported, not gated (--min-agreement 0), as it depends on the CPU
    args = ["export", "--model", models["bart"], "--precision", "int8", "--out", str(out), "--validation-size", "8",
            "--min-agreement", "0"]
    r = runner.invoke(_app(), args)
    assert r.exit_code == 0, r.output
    assert "label agreement" in r.output and "passed" in r.output and (out / "manifest.json").exists()
    r2 = runner.invoke(_app(), args)
    assert r2.exit_code == 0 and "reused" in r2.output


def test_export_command_errors_are_one_line(models, tmp_path):
    from typer.testing import CliRunner

    runner = CliRunner()
    r = runner.invoke(_app(), ["export", "--model", str(tmp_path / "nope")])
    assert r.exit_code == 2 and "error:" in r.output and "Traceback" not in r.output
    # ONNX Runtime's and PyTorch's fp32 kernels round differently (a few 1e-6 apart, never 1e-15)
    r = runner.invoke(_app(), ["export", "--model", models["roberta"], "--out", str(tmp_path / "o"),
                               "--validation-size", "8", "--max-abs-logit", "1e-15"])
    assert r.exit_code == 2 and "failed validation" in r.output and "Traceback" not in r.output
    assert not (tmp_path / "o").exists()


def test_export_command_calibration_data_file(models, tmp_path):
    from typer.testing import CliRunner

    loaders = pytest.importorskip("breaknli_fast.data.loaders")
    assert hasattr(loaders, "load_examples")
    f = tmp_path / "pairs.jsonl"
    f.write_text("".join(json.dumps({"premise": p, "hypothesis": h, "label": lab}) + "\n"
                         for p, h, lab in testing.pairs(12, seed=9)))
    r = CliRunner().invoke(_app(), ["export", "--model", models["roberta"], "--out", str(tmp_path / "o"),
                                    "--calibration-data", str(f), "--validation-size", "12"])
    assert r.exit_code == 0, r.output
    m = json.loads((tmp_path / "o" / "manifest.json").read_text())
    assert m["validation"]["n"] == 12 and m["validation"]["pairs_source"] == "given"
    assert np.isfinite(m["validation"]["max_abs_logit"])
    assert os.path.exists(tmp_path / "o" / "model.onnx")
