"""The real-shapes measurement end to end on tiny models (``--model``): every contender (the engines and the peers,
loaders-only engines of the contract) loaded, timed in rounds, the same fixed amount of work for each, each figure's
ratios from the same run, and a typed result file with provenance. The CTranslate2 contenders run when CTranslate2
is installed, the ort ones when ONNX Runtime is, and optimum's ORTModel (a peer only: no path of the package uses
optimum) where optimum-onnx is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from breaknli_fast.suite.main import main as suite_main

HAVE_CT2 = importlib.util.find_spec("ctranslate2") is not None
HAVE_ORT = importlib.util.find_spec("onnxruntime") is not None
HAVE_OPTIMUM = HAVE_ORT and importlib.util.find_spec("optimum") is not None


def _run(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "result.json"
    assert suite_main(["measure", "real-shapes", *args, "--warmup", "0", "--min-iterations", "1", "--result",
                       str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["kind"] == "real_shapes" and doc["commit"] and doc["machine"]["cores"]
    assert doc["measurement"]["name"] == "real-shapes" and doc["measurement"]["args"]["warmup"] == 0
    return doc["payload"]


def test_generate_job_on_a_tiny_t5(tiny_t5, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    contenders = "torch:fp32,peer:transformers,peer:nonsense" + (",ct2:int8,peer:ct2-int8" if HAVE_CT2 else "")
    p = _run(tmp_path, "--job", "generate", "--model", tiny_t5, "--prompts", "4", "--k", "3", "--max-new-tokens", "5",
             "--contenders", contenders)
    rows = {r["contender"]: r for r in p["rows"]}
    assert set(rows) == {"breaknli-fast torch:fp32", "peer:transformers"} | (
        {"breaknli-fast ct2:int8", "peer:ct2-int8"} if HAVE_CT2 else set())
    for r in rows.values():  # fixed length: 4 prompts x K=3 x 5 new tokens for every contender
        assert r["sequences"] == 12 and r["new_tokens"] == 60
        assert r["tokens_per_s"] == pytest.approx(60 / r["median_s"])
    assert rows["breaknli-fast torch:fp32"]["vs_torch_fp32"] == pytest.approx(1.0)
    if HAVE_CT2:
        ref = rows["peer:ct2-int8"]
        assert ref["vs_reference"] == pytest.approx(1.0)
        t = rows["breaknli-fast torch:fp32"]
        assert t["vs_reference"] == pytest.approx(t["tokens_per_s"] / ref["tokens_per_s"])
    assert [s["contender"] for s in p["skipped"]] == ["peer:nonsense"]
    assert p["workload"] == {"prompts": 4, "k": 3, "max_new_tokens": 5, "fixed_length": True, "top_k": 50,
                             "top_p": 0.95, "peer_batch_prompts": 8}
    assert p["random_weights"] is False and p["parameters"] > 0


def test_classify_job_on_a_tiny_roberta(tiny_dir, tmp_path, monkeypatch):
    import tiny_models as testing

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    model = tiny_dir / "real-shapes-roberta"  # init std 0.3: logits within the exporters' fp32 bound of 1e-4
    if not (model / "model.safetensors").exists():
        testing.make_tiny_classifier(model, "roberta", init_std=0.3)
    contenders = ("torch:fp32,peer:transformers" + (",ort:fp32" if HAVE_ORT else "")
                  + (",peer:optimum" if HAVE_OPTIMUM else ""))
    p = _run(tmp_path, "--job", "classify", "--model", str(model), "--pairs", "20", "--contenders", contenders)
    assert p["skipped"] == []
    rows = {r["contender"]: r for r in p["rows"]}
    assert rows["breaknli-fast torch:fp32"]["max_abs_logit_vs_torch_fp32"] == 0.0
    # every fp32 path computes the same logits, in the canonical label order, up to rounding (a wrong label order
    # or a broken path is off by far more)
    for name, r in rows.items():
        assert r["pairs"] == 20 and r["max_abs_logit_vs_torch_fp32"] <= 1e-4, name
        assert r["label_agreement_vs_torch_fp32_pct"] == 100.0, name
        assert r["vs_torch_fp32"] == pytest.approx(r["pairs_per_s"] / rows["breaknli-fast torch:fp32"]["pairs_per_s"])
    assert len(rows) == 2 + HAVE_ORT + HAVE_OPTIMUM
