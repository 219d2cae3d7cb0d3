"""The openvino engine: every role from the project's ONNX graphs on OpenVINO's CPU runtime, fp32 at torch's
logits (the generator token-identical to torch fp32, greedy and seeded sampling), bf16 where the CPU computes it
(refused in one line elsewhere, before anything loads), int8 with per-token activations judged batch-invariant before
use, any role mix with the other engines. Skips without OpenVINO (the openvino extra)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("openvino", reason="OpenVINO is not installed: pip install 'breaknli-fast[openvino]'")
pytest.importorskip("onnxruntime")

from typer.testing import CliRunner  # noqa: E402

import tiny_models as testing  # noqa: E402
from breaknli_fast.cli import app  # noqa: E402
from breaknli_fast.engines import registry  # noqa: E402
from breaknli_fast.engines.cpu_features import has_native_bf16  # noqa: E402

PAIRS = [(p, h) for p, h, _ in testing.pairs(40, seed=21)]
needs_bf16 = pytest.mark.skipif(not has_native_bf16(), reason="this CPU has neither AVX-512 BF16 nor AMX")


def test_fp32_gives_torch_s_logits_and_the_export_is_cached_and_judged(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    ov = registry.load_classifier("openvino", "mini-nli", precision="fp32")
    ref = registry.load_classifier("torch", "mini-nli")
    a, b = ov.classify(PAIRS), ref.classify(PAIRS)
    assert float(np.abs(a.logits - b.logits).max()) <= 1e-4 and a.labels == b.labels
    d = ov.info.details
    assert d["validation"]["passed"] and d["validation"]["max_abs_logit"] <= 1e-4 and d["variant"] == "ir-fp32"
    assert "float32" in d["compiled"]["INFERENCE_PRECISION_HINT"] and d["openvino"]
    again = registry.load_classifier("openvino", "mini-nli", precision="fp32")
    assert again.info.details["export_reused"] is True


@needs_bf16
def test_bf16_keeps_the_labels_and_says_so_in_its_compile_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    ov = registry.load_classifier("openvino", "mini-nli", precision="bf16")
    ref = registry.load_classifier("torch", "mini-nli")
    agree = np.mean(np.array(ov.classify(PAIRS).labels) == np.array(ref.classify(PAIRS).labels))
    assert agree >= 0.95 and "bfloat16" in ov.info.details["compiled"]["INFERENCE_PRECISION_HINT"]


def test_what_it_does_not_run_is_one_line_before_anything_loads(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    runner = CliRunner()
    r = runner.invoke(app, ["run", "--engine", "openvino", "--precision", "fp16", "--limit", "2",
                            "--out", str(tmp_path / "a")])
    said = " ".join(r.output.split())
    assert r.exit_code != 0 and "runs fp32, bf16 or int8 on cpu, not 'fp16'" in said, said
    monkeypatch.setenv("BREAKNLI_FAST_CPU_FLAGS", "avx2 avx512f")  # a CPU without bf16
    r = runner.invoke(app, ["run", "--generator-engine", "ort", "--classifier-engine", "openvino",
                            "--classifier-precision", "bf16", "--limit", "2", "--out", str(tmp_path / "b")])
    said = " ".join(r.output.split())
    assert r.exit_code != 0 and "this CPU has neither avx512_bf16 nor amx_bf16" in said
    assert not (tmp_path / "cache").exists() and not (tmp_path / "a" / "config.json").exists()


@pytest.mark.parametrize("gen_engine", ["ort", "openvino"])
def test_the_generator_on_ort_or_openvino_and_the_classifier_on_openvino(gen_engine, tiny_t5, tiny_tsv, tmp_path,
                                                                         monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    precision = "bf16" if has_native_bf16() else "fp32"
    # mini-nli (trained: its bf16 labels pass the export's judgement, a random tiny model's near-ties do not)
    common = ["run", "-g", tiny_t5, "-c", "mini-nli", "-d", str(tiny_tsv), "--limit", "4", "--k", "4", "--u", "2",
              "--s", "1", "--max-new-tokens", "6"]
    runner = CliRunner()
    r = runner.invoke(app, [*common, "--generator-engine", gen_engine, "--classifier-engine", "openvino",
                            "--classifier-precision", precision, "--out", str(tmp_path / "mixed")])
    assert r.exit_code == 0, r.output
    ref = runner.invoke(app, [*common, "--engine", "torch", "--out", str(tmp_path / "torch")])
    assert ref.exit_code == 0, ref.output
    cfg = json.loads((tmp_path / "mixed" / "config.json").read_text())
    roles = cfg["roles"]
    assert roles["generator"]["engine"] == gen_engine and roles["classifier"]["engine"] == "openvino"
    assert roles["classifier"]["precision"] == precision and roles["classifier"]["runtime"]["openvino"]
    assert cfg["environment"]["packages"]["openvino"]
    mine = [json.loads(x) for x in (tmp_path / "mixed" / "samples.jsonl").read_text().splitlines()]
    theirs = [json.loads(x) for x in (tmp_path / "torch" / "samples.jsonl").read_text().splitlines()]
    assert any(m.get("candidates") for m in mine)
    # the generator's candidates are the torch reference's (ort / openvino fp32): only the classifier differs
    assert [(m["id"], m.get("candidates")) for m in mine if m.get("candidates")] == \
        [(t["id"], t.get("candidates")) for t in theirs if t.get("candidates") and t["id"] in
         {m["id"] for m in mine if m.get("candidates")}]


PROMPTS = ["A man is sleeping on a bench in the park.", "Two dogs run.", "A woman reads a long book at home."]


def test_the_generator_at_fp32_gives_torch_s_tokens_greedy_and_sampled(tmp_path, monkeypatch):
    from breaknli_fast.engines.base import Decoding

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    ov = registry.load_generator("openvino", "mini-t5", precision="fp32")
    ref = registry.load_generator("torch", "mini-t5")
    for d, k in ((Decoding(top_p=0.95, top_k=50, max_new_tokens=20), 4),
                 (Decoding(strategy="greedy", max_new_tokens=20), 1)):
        assert ov.generate_ids(PROMPTS, k, d, [5, 6, 7]) == ref.generate_ids(PROMPTS, k, d, [5, 6, 7])
    v = ov.info.details["validation"]
    assert v["passed"] and v["generation"]["identical_sequences"] == v["generation"]["prompts"]
    assert v["batch_invariance"]["invariant"] and ov.info.details["variant"] == "ir-fp32"


def test_the_mask_filler_at_fp32_gives_torch_s_suggestions(tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    items = [("A man is <<mask>> on a bench.",), ("Two <<mask>> run in the park.", "Dogs run.")]
    ov = registry.load_mask_filler("openvino", "mini-mlm", precision="fp32").fill_mask(items, 5)
    ref = registry.load_mask_filler("torch", "mini-mlm").fill_mask(items, 5)
    assert [f.words for f in ov] == [f.words for f in ref]
    assert max(float(np.abs(a.logprobs - b.logprobs).max()) for a, b in zip(ov, ref)) < 1e-4


def test_int8_classifier_has_calibrated_ranges_and_per_token_activations_after_gelu(tmp_path, monkeypatch):
    """The classifier's default int8: int8 weights, a fixed calibrated range on the inputs of the products that no
    activation function feeds, per-token groups on the others (the feed-forward output after GELU and the head's
    output after tanh), all recorded; ``quantization=dynamic`` gives every product per-token groups."""
    import openvino as ov_lib

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    ov = registry.load_classifier("openvino", "mini-nli", precision="int8")
    d = ov.info.details
    assert d["variant"] == "ir-int8-static" and d["int8"]["group_size"] in (32, 64, 128)
    assert ov.max_batch == d["max_batch"] == 32  # the CPU default (engine.OvClassifier.cpu_max_batch)
    assert d["int8"]["calibration_pairs"] == 256 and "static" in d["int8"]["scheme"]
    assert d["compiled"]["DYNAMIC_QUANTIZATION_GROUP_SIZE"] == str(d["int8"]["group_size"])
    assert d["validation"]["batch_invariance"]["invariant"] and d["validation"]["passed"]
    graph = ov.info.details["export_dir"] + "/model.xml"
    kinds = [n.get_type_name() for n in ov_lib.Core().read_model(graph).get_ordered_ops()]
    manifest = json.loads((Path(d["export_dir"]) / "manifest.json").read_text())
    done = next(g["int8"] for g in manifest["graphs"].values() if "int8" in g)
    # per layer Q / K / V (one input), the attention output, FFN in: static; FFN out: dynamic; the head's dense
    # static, its out_proj (after tanh) dynamic
    layers = json.loads((Path(d["export_dir"]) / "config.json").read_text())["num_hidden_layers"]
    assert done["static_products"] == 5 * layers + 1 and done["dynamic_products"] == layers + 1
    assert kinds.count("FakeQuantize") == done["static_inputs"] == 3 * layers + 1
    ref = registry.load_classifier("torch", "mini-nli")
    assert np.mean(np.array(ov.classify(PAIRS).labels) == np.array(ref.classify(PAIRS).labels)) >= 0.95
    dyn = registry.load_classifier("openvino", "mini-nli", precision="int8", quantization="dynamic")
    assert dyn.info.details["variant"] == "ir-int8" and "calibration_pairs" not in dyn.info.details["int8"]
    assert "FakeQuantize" not in [n.get_type_name() for n in
                                  ov_lib.Core().read_model(dyn.info.details["export_dir"] + "/model.xml").get_ordered_ops()]


@pytest.mark.parametrize("role, precision, quantization, why", [
    ("classifier", "int8", "per-row", "int8 quantization is static or dynamic"),
    ("classifier", "fp32", "static", "quantization applies to int8"),
    ("mlm", "int8", "static", "static int8 (calibrated activation ranges) is for sequence classifiers"),
])
def test_openvino_quantization_refusals(role, precision, quantization, why, tmp_path, monkeypatch):
    from breaknli_fast.export.errors import UnsupportedModelError

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    load = registry.load_classifier if role == "classifier" else registry.load_mask_filler
    model = "mini-nli" if role == "classifier" else "mini-mlm"
    with pytest.raises(UnsupportedModelError, match=why.replace("(", r"\(").replace(")", r"\)")):
        load("openvino", model, precision=precision, quantization=quantization)


def test_an_int8_export_whose_answers_depend_on_the_batch_is_refused(tmp_path, monkeypatch):
    """Without the per-token quantisation of activations (group 0) the int8 kernels dequantise the weights and a
    pair's sums depend on the rows beside it: the judgement refuses the export, naming why."""
    from breaknli_fast.backends.openvino import runtime
    from breaknli_fast.export.errors import ExportValidationError

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    real = runtime.compile_properties
    monkeypatch.setattr(runtime, "compile_properties", lambda p, t, s=1, g=None: real(p, t, s, 0))
    import breaknli_fast.backends.openvino.engine as eng

    monkeypatch.setattr(eng, "compile_properties", runtime.compile_properties)
    with pytest.raises(ExportValidationError, match="not batch-invariant on this CPU"):
        registry.load_classifier("openvino", "mini-nli", precision="int8")


def test_auto_gives_the_int8_classifier_to_openvino_only_on_a_cpu_with_vnni(monkeypatch):
    """--engine auto at int8: OpenVINO for the classifier and the masked LM where the CPU has VNNI; without it
    (OpenVINO's int8 depended on the batch on the emulated AVX2 CPU) the batch-invariant ort int8; the generator on
    ort either way; fp32 never OpenVINO."""
    from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER
    from breaknli_fast.engines.cpu_features import FLAGS_ENV

    monkeypatch.setenv(FLAGS_ENV, "avx2 avx512f avx512_vnni")
    assert [registry.resolve_engine("auto", "int8", "cpu", r) for r in (CLASSIFIER, MASK_FILLER, GENERATOR)] == [
        "openvino", "openvino", "ort"]
    assert registry.resolve_engine("auto", "fp32", "cpu", CLASSIFIER) == "ort"
    monkeypatch.setenv(FLAGS_ENV, "avx2 fma")  # an AVX2 CPU without VNNI
    assert [registry.resolve_engine("auto", "int8", "cpu", r) for r in (CLASSIFIER, MASK_FILLER, GENERATOR)] == [
        "ort", "ort", "ort"]
    why = registry.backend("openvino").auto_refusal("int8", "cpu")
    assert why.startswith("this CPU has none of avx512_vnni") and "depends on the batch" in why
    assert registry.backend("openvino").auto_refusal("fp32", "cpu") is None


def test_the_classifier_s_default_widths_follow_the_model_s_size():
    """Without length_step the openvino classifier pads to each pair's own length from roberta-base's hidden size up
    (measured faster there) and to multiples of 8 below it (each new shape costs the CPU plugin a call's overhead)."""
    from types import SimpleNamespace

    from breaknli_fast.backends.openvino.engine import OvClassifier

    assert OvClassifier.default_step(SimpleNamespace(hidden_size=256)) == 8
    assert OvClassifier.default_step(SimpleNamespace(hidden_size=767)) == 8
    assert OvClassifier.default_step(SimpleNamespace(hidden_size=768)) == 1
    assert OvClassifier.default_step(SimpleNamespace(hidden_size=1024)) == 1
    assert OvClassifier.default_step(SimpleNamespace(d_model=768)) == 1
    assert OvClassifier.default_step(SimpleNamespace()) == 8
