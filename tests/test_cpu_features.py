"""The per-CPU int8 kernel choice of ONNX Runtime sessions (engines.cpu_features): u8 x s8 with VNNI (exact and
fast), u8 x u8 (``session.x64quantprecision = 1``) without it, recorded in the engine's details; and the same
int8 numbers from both kernels where the CPU has VNNI (both sum exactly there)."""

from __future__ import annotations

import numpy as np
import pytest

from breaknli_fast.engines import cpu_features as cf

AVX2 = frozenset("sse4_2 avx2 fma".split())
AVX512_NO_VNNI = AVX2 | {"avx512f", "avx512bw"}  # Skylake-X: AVX-512 without VNNI saturates too


@pytest.mark.parametrize("flags, x64", [
    (AVX2, True), (AVX512_NO_VNNI, True), (AVX512_NO_VNNI | {"avx512_vnni"}, False), (AVX2 | {"avx_vnni"}, False),
    (AVX512_NO_VNNI | {"amx_int8", "amx_tile"}, False), (frozenset(), True),
])
def test_int8_kernel_per_cpu(flags, x64):
    choice = cf.int8_kernel(flags, x86=True)
    assert choice["x64quantprecision"] is x64
    assert ("u8u8" if x64 else "u8s8 VNNI") in choice["int8_kernel"]


def test_other_architectures_keep_the_default():
    assert cf.int8_kernel(frozenset({"asimd", "bf16"}), x86=False)["x64quantprecision"] is False


def test_flags_override_and_bf16(monkeypatch):
    monkeypatch.setenv(cf.FLAGS_ENV, "avx2,avx512_bf16")
    assert cf.cpu_flags() == {"avx2", "avx512_bf16"}
    assert cf.has_native_bf16() and not cf.has_vnni()
    s = cf.summary()
    assert s["flags"] == ["avx2", "avx512_bf16"] and s["flags_from"] == cf.FLAGS_ENV
    monkeypatch.delenv(cf.FLAGS_ENV)
    assert cf.cpu_flags() == cf._proc_flags()


def test_session_records_the_choice_and_vnni_kernels_agree(tiny_dir, monkeypatch):
    """Each kernel choice is recorded in the classifier's details (config.json); on a VNNI CPU the u8 x s8 and
    u8 x u8 kernels give the same logits (exact integer sums both), so the per-CPU choice changes speed only."""
    pytest.importorskip("onnxruntime")
    import tiny_models as testing

    from breaknli_fast.engines import registry

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tiny_dir / "cache-root"))
    model = tiny_dir / "cpu-roberta"
    if not (model / "model.safetensors").exists():
        testing.make_tiny_classifier(model, "roberta", init_std=0.3)
    pairs = [(p, h) for p, h, _ in testing.pairs(24, seed=7)]
    opts = {"cache_dir": tiny_dir / "export-cache", "validation_size": 8,
            "tolerances": {"max_abs_logit": None, "min_agreement": None}}
    out = {}
    for name, flags in (("no-vnni", " ".join(AVX512_NO_VNNI)), ("vnni", " ".join(AVX2 | {"avx512_vnni"}))):
        monkeypatch.setenv(cf.FLAGS_ENV, flags)
        clf = registry.load_classifier("ort", str(model), precision="int8", **opts)
        d = clf.info.details
        assert d["x64quantprecision"] is (name == "no-vnni") and d["cpu"]["flags_from"] == cf.FLAGS_ENV
        assert ("u8u8" if name == "no-vnni" else "VNNI") in d["int8_kernel"]
        out[name] = clf.classify(pairs).logits
        assert np.isfinite(out[name]).all()
    monkeypatch.delenv(cf.FLAGS_ENV)
    if not (cf.has_vnni() and cf.is_x86_64()):
        pytest.skip("this CPU has no VNNI: its u8 x s8 kernels saturate, so only the u8 x u8 choice is exact here")
    np.testing.assert_allclose(out["vnni"], out["no-vnni"], atol=1e-5)
