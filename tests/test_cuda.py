"""CUDA: device placement, fp32 on the GPU against fp32 on the CPU, bf16 parity, the sampler's host
synchronisations, and ONNX Runtime's CUDA provider. Every test here is marked ``cuda`` and skips, saying why,
where torch sees no CUDA GPU (``scripts/gpu_check.sh`` runs them on a GPU machine: ``pytest -m cuda``). The CPU
tests at the end check the CUDA code paths that run without a GPU (provider options, the ONNX Runtime build that
is recorded).

Tolerances (docs/stack.md, "GPU"): fp32 on CUDA against fp32 on the CPU differ by kernel rounding only (TF32 is
off in torch by default and switched off in ONNX Runtime's CUDA provider): classifier logits within 1e-4,
first-step generator logits within 1e-3; a sampled token can only change where a uniform number falls within
that distance of a boundary of the cumulative distribution, so at most one prompt of the 16 here may differ.
bf16 keeps 8 bits of mantissa: labels agree on at least 90 % of the sample pairs, and its effect on the
study is judged by the bench's verdicts (``bench --engines torch:bf16``)."""

from __future__ import annotations

import importlib.util
import types

import numpy as np
import pytest
import torch

from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding
from breaknli_fast.prompts import CONTRADICT_PROMPT

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason=f"no CUDA GPU visible to torch {torch.__version__} (built for CUDA "
                                                 f"{torch.version.cuda or 'none: a CPU build'})")


def _ort_cuda() -> bool:
    if importlib.util.find_spec("onnxruntime") is None:
        return False
    import onnxruntime as ort

    return "CUDAExecutionProvider" in ort.get_available_providers()


needs_ort_cuda = pytest.mark.skipif(not (CUDA and _ort_cuda()),
                                    reason="needs a CUDA GPU and onnxruntime-gpu (the CUDA execution provider)")


@pytest.fixture(scope="module")
def sample():
    ex = load_examples("sample", limit=64).examples
    return [(e.premise, e.hypothesis) for e in ex], [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in ex[:16]]


@pytest.mark.cuda
@needs_cuda
def test_models_and_outputs_are_on_the_device(sample):
    pairs, prompts = sample
    clf = registry.load_classifier("torch", "mini-nli", device="cuda")
    gen = registry.load_generator("torch", "mini-t5", device="cuda")
    assert next(clf.model.parameters()).device.type == "cuda"
    assert next(gen.model.parameters()).device.type == "cuda"
    assert gen.prompt_batch == 64 and gen.info.details["gen_batch"] == 64  # the CUDA default
    res = clf.classify(pairs[:8])
    assert res.logits.shape == (8, 3) and np.isfinite(res.logits).all()
    out = gen.generate_ids(prompts[:2], 3, Decoding(max_new_tokens=8), [0, 1])
    assert len(out) == 2 and all(len(rows) == 3 for rows in out)
    assert gen._stepper().device.type == "cuda" and gen._stepper().shared_cross


@pytest.mark.cuda
@needs_cuda
def test_fp32_on_cuda_matches_fp32_on_the_cpu(sample):
    pairs, prompts = sample
    cpu = registry.load_classifier("torch", "mini-nli", device="cpu").classify(pairs)
    gpu = registry.load_classifier("torch", "mini-nli", device="cuda").classify(pairs)
    assert float(np.abs(cpu.logits - gpu.logits).max()) <= 1e-4
    assert cpu.labels == gpu.labels
    g_cpu = registry.load_generator("torch", "mini-t5", device="cpu")
    g_gpu = registry.load_generator("torch", "mini-t5", device="cuda")
    enc = g_cpu.tokenizer(prompts, return_tensors="pt", padding=True)
    start = torch.zeros((len(prompts), 1), dtype=torch.long)
    with torch.inference_mode():
        a = g_cpu.model(**enc, decoder_input_ids=start).logits
        b = g_gpu.model(**{k: v.cuda() for k, v in enc.items()}, decoder_input_ids=start.cuda()).logits.cpu()
    assert float((a - b).abs().max()) <= 1e-3
    seeds = list(range(len(prompts)))
    ids_cpu = g_cpu.generate_ids(prompts, 8, Decoding(), seeds)
    ids_gpu = g_gpu.generate_ids(prompts, 8, Decoding(), seeds)
    assert sum(x != y for x, y in zip(ids_cpu, ids_gpu)) <= 1


@pytest.mark.cuda
@needs_cuda
def test_bf16_on_cuda_agrees_with_fp32(sample):
    pairs, prompts = sample
    ref = registry.load_classifier("torch", "mini-nli", device="cpu").classify(pairs)
    bf = registry.load_classifier("torch", "mini-nli", precision="bf16", device="cuda").classify(pairs)
    assert np.isfinite(bf.logits).all()
    assert np.mean(np.array(ref.labels) == np.array(bf.labels)) >= 0.9
    gen = registry.load_generator("torch", "mini-t5", precision="bf16", device="cuda")
    rows = gen.generate(prompts[:4], 4, Decoding(), [0, 1, 2, 3])
    assert all(len(r) == 4 for r in rows) and any(t for r in rows for t in r)


@pytest.mark.cuda
@needs_cuda
def test_the_fast_sampler_waits_for_the_gpu_only_every_few_steps(monkeypatch):
    """From the first decoder step to the host's first look (``sync_every`` steps later) the sampler queues its work
    without a synchronising call: torch's sync debug mode, on for exactly that stretch, raises on any."""
    import breaknli_fast.engines.sampling as sampling

    looks = []

    class DeviceStepper:
        device = torch.device("cuda")

        def start(self, input_ids, attention_mask, n):
            g = torch.Generator(device="cuda").manual_seed(0)
            self.table = torch.randn((50, 64), device="cuda", generator=g)
            self.first = True

        def step(self, tokens):
            if self.first:
                self.first = False
                torch.cuda.synchronize()
                torch.cuda.set_sync_debug_mode("error")
            return self.table.index_select(0, tokens % 50)

        def keep(self, positions):
            pass

    real = sampling._check_steps

    def look(bad, width, start, end):
        torch.cuda.set_sync_debug_mode("default")
        looks.append((start, end))
        return real(bad, width, start, end)

    monkeypatch.setattr(sampling, "_check_steps", look)
    ids = torch.ones((3, 4), dtype=torch.long)
    dec = Decoding(max_new_tokens=12, min_new_tokens=12)  # no row stops early
    try:
        out = sampling.sample(DeviceStepper(), ids, ids, 5, dec, [1, 2, 3], 0, 1, 0, sync_every=6)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert looks[0] == (0, 6) and all(len(r) == 12 for rows in out for r in rows)


@pytest.mark.cuda
@needs_ort_cuda
def test_ort_cuda_provider_classifier_matches_torch(sample, tmp_path, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path))
    pairs, _ = sample
    ref = registry.load_classifier("torch", "mini-nli", device="cpu").classify(pairs)
    clf = registry.load_classifier("ort", "mini-nli", device="cuda")
    assert clf.info.details["providers"][0] == "CUDAExecutionProvider"
    opts = clf.session.get_provider_options()["CUDAExecutionProvider"]
    assert opts.get("use_tf32") == "0"
    out = clf.classify(pairs)
    assert float(np.abs(ref.logits - out.logits).max()) <= 1e-4 and ref.labels == out.labels


@pytest.mark.cuda
@needs_ort_cuda
def test_t5_export_validates_on_cuda(tiny_t5, tmp_path):
    from breaknli_fast.export import export_model

    res = export_model(tiny_t5, precision="fp32", device="cuda", cache_dir=str(tmp_path), progress=False)
    assert res.manifest["validation"]["passed"] and res.manifest["validation"]["device"] == "cuda"


# -- without a GPU: the CUDA code paths that run on the CPU -----------------------------------------------------

def test_cuda_provider_options_switch_tf32_off(monkeypatch):
    ort = pytest.importorskip("onnxruntime")
    from breaknli_fast.backends.ort import runtime as ort_runtime

    monkeypatch.setattr(ort, "get_available_providers", lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    providers = ort_runtime.providers_for("cuda:1")
    assert providers[0] == ("CUDAExecutionProvider", {"device_id": 1, "use_tf32": 0})


def test_the_gpu_build_is_recorded_when_both_onnxruntime_packages_are_installed(monkeypatch):
    import importlib.metadata as md

    from breaknli_fast import envinfo
    from breaknli_fast.export import manifest

    versions = {"onnxruntime": "1.30.0", "onnxruntime-gpu": "1.31.1"}

    def version(name):
        if name in versions:
            return versions[name]
        raise md.PackageNotFoundError(name)

    monkeypatch.setattr(md, "version", version)
    fake = types.SimpleNamespace(get_available_providers=lambda: ["CUDAExecutionProvider", "CPUExecutionProvider"])
    monkeypatch.setattr(envinfo.importlib, "import_module", lambda name: fake)
    assert envinfo.onnxruntime_distribution() == ("onnxruntime-gpu", "1.31.1")
    assert envinfo.package_version("onnxruntime") == "1.31.1"
    assert manifest.library_versions()["onnxruntime"] == "1.31.1 (onnxruntime-gpu)"
    fake.get_available_providers = lambda: ["CPUExecutionProvider"]  # the CPU package installed last
    assert envinfo.onnxruntime_distribution() == ("onnxruntime", "1.30.0")
    del versions["onnxruntime-gpu"]
    assert envinfo.onnxruntime_distribution() == ("onnxruntime", "1.30.0")

