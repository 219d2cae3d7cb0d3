"""The cudagraph engine's quantised precisions (``fp8``, ``int8``; backends/cudagraph/quant.py) on the CPU: the
scales and rounding, the exact emulation against a float reference and against the GPU path's own calls where torch
runs them on the CPU (``torch._int_mm``, ``torch._scaled_mm``), a row's result whatever its batch, T5's
feed-forward beyond fp16's range, the engines at fp8 / int8 against torch fp32, and the declaration's refusals.
(The GPU kernels themselves are not verified on a GPU: the GPU check's ``quantised`` step and tests/test_cuda.py.)"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from breaknli_fast.backends.cudagraph import quant
from breaknli_fast.backends.cudagraph.quant import QuantLinear, exact_product, quantise, scales
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.backend import PrecisionError
from breaknli_fast.engines.base import Decoding
from breaknli_fast.engines.model_info import ModelLoadError

FMTS = ("fp8", "int8")


def _data(rows=24, inp=64, out=48, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, inp, generator=g) * torch.logspace(-2, 2, rows).unsqueeze(1)  # rows of unlike scales
    w = torch.randn(out, inp, generator=g) * torch.logspace(-1, 1, out).unsqueeze(1)
    return x, w


def test_scales_and_rounding_follow_the_scheme():
    x = torch.tensor([[0.0, 0.0], [1.0, -254.0], [3.0, 0.5]])
    s = scales(x, "int8")
    assert torch.equal(s[:, 0], torch.tensor([torch.finfo(torch.float32).tiny, 2.0, 3.0 / 127]))  # max|row| / 127
    q = quantise(x, s, "int8")
    assert q.dtype == torch.int8 and q[1].tolist() == [0, -127] and q[0].tolist() == [0, 0]  # 0.5 -> 0: half to even
    assert quantise(torch.tensor([[2.5, -3.5, 1e9]]), torch.ones(1, 1), "int8").tolist() == [[2, -4, 127]]  # clamped
    f = quantise(torch.tensor([[448.0, 500.0, -1e9, 0.3]]), torch.ones(1, 1), "fp8")
    assert f.dtype == torch.float8_e4m3fn and f.float().tolist()[0][:3] == [448.0, 448.0, -448.0]
    assert f.float()[0, 3] == torch.tensor(0.3).to(torch.float8_e4m3fn).float()  # round to nearest e4m3
    row = torch.tensor([[1.0, float("inf")]])
    assert torch.isnan(quantise(row, scales(row, "fp8"), "fp8").float()).any()  # a non-finite row stays flagged


@pytest.mark.parametrize("fmt", FMTS)
def test_the_emulated_product_is_exact_and_close_to_the_float_one(fmt):
    """The quantised values multiplied in float64 equal their exact integer product; the layer's output is within
    the format's rounding of x W^T in fp32 (relative to each row's size: int8 3 %, fp8 e4m3 8 %)."""
    x, w = _data()
    layer = QuantLinear.of(w, None, fmt, torch.float32, "cpu")
    assert layer.kernel == "emulated" and layer.w_scale.shape == (1, 48)
    xq = quantise(x, scales(x, fmt), fmt)
    ints = (lambda t: t.to(torch.int64)) if fmt == "int8" else (lambda t: (t.float() * 512).to(torch.int64))
    exact = (ints(xq) @ ints(layer.wq).t()).double() / (1.0 if fmt == "int8" else 262144.0)
    assert torch.equal(exact_product(xq, layer.wq, fmt), exact)
    ref = x @ w.t()
    rel = ((layer(x) - ref).norm(dim=1) / ref.norm(dim=1)).max()
    assert rel <= (0.03 if fmt == "int8" else 0.08), float(rel)


@pytest.mark.parametrize("fmt", FMTS)
def test_a_rows_result_does_not_depend_on_its_batch(fmt):
    """Per-row scales and an exact product: every row alone, reversed or in chunks gives the same bits."""
    x, w = _data(rows=40)
    layer = QuantLinear.of(w, torch.randn(48), fmt, torch.bfloat16, "cpu")
    whole = layer(x)
    alone = torch.cat([layer(x[i:i + 1]) for i in range(len(x))])
    chunks = torch.cat([layer(x[i:i + 7]) for i in range(0, len(x), 7)])
    assert torch.equal(whole, alone) and torch.equal(whole, chunks) and torch.equal(layer(x.flip(0)).flip(0), whole)


def test_the_gpu_paths_calls_give_the_emulated_numbers_where_torch_runs_them_on_the_cpu():
    """torch._int_mm and torch._scaled_mm, as the CUDA path calls them (weights column-major, row-wise scales,
    bf16 output for fp8; fewer than 17 rows padded for int_mm), run on this CPU too: int8 gives the emulated
    numbers to the bit, fp8 within one bf16 rounding (its fp32 sums run in another order)."""
    x, w = _data(rows=9)
    b = torch.randn(48)
    emu = QuantLinear.of(w, b, "int8", torch.bfloat16, "cpu")
    native = QuantLinear.of(w, b, "int8", torch.bfloat16, "cpu", kernel="int_mm")
    assert torch.equal(native(x), emu(x)) and torch.equal(native(x[:3]), emu(x[:3]))
    emu8 = QuantLinear.of(w, b, "fp8", torch.bfloat16, "cpu")
    native8 = QuantLinear.of(w, b, "fp8", torch.bfloat16, "cpu", kernel="scaled_mm")
    try:
        got = native8(x)
    except (RuntimeError, NotImplementedError) as e:
        pytest.skip(f"torch {torch.__version__} has no CPU torch._scaled_mm with row-wise scales: {e}")
    want = emu8(x)
    assert got.dtype == want.dtype == torch.bfloat16
    assert torch.allclose(got.float(), want.float(), rtol=2 ** -7, atol=1e-3 * float(want.abs().max()))


def test_kernels_are_picked_by_device_and_sizes():
    assert quant.pick_kernel("fp8", torch.device("cpu"), (64, 64)) == "emulated"
    cuda = torch.device("cuda")
    assert quant.pick_kernel("fp8", cuda, (64, 64)) == "scaled_mm" and quant.pick_kernel("fp8", cuda, (64, 40)) == "emulated"
    assert quant.pick_kernel("int8", cuda, (64, 40)) == "int_mm" and quant.pick_kernel("int8", cuda, (63, 64)) == "emulated"


@pytest.mark.parametrize("fmt", FMTS)
def test_t5_feed_forward_beyond_fp16s_range_stays_finite(fmt):
    """mini-t5's first encoder feed-forward output projection (``wo``) on activations scaled past fp16's largest
    value (65,504; T5's feed-forward is where fp16 overflows) with one outlier channel 66 times the others: the
    fp16 product is inf, the quantised one finite and within 10 % of the fp32 one (each row at its own scale; at
    int8 the outlier sets the row's step, so the rest loses most)."""
    gen = registry.load_generator("torch", "mini-t5")
    wo = gen.model.encoder.block[0].layer[-1].DenseReluDense.wo.weight.detach().float()
    g = torch.Generator().manual_seed(1)
    h = torch.randn(8, wo.shape[1], generator=g) * 3e4
    h[:, 5] = 2e6  # one outlier channel, as T5's activations have
    ref = h @ wo.t()
    assert torch.isinf(h.half() @ wo.half().t()).any()  # fp16 overflows
    got = QuantLinear.of(wo, None, fmt, torch.bfloat16, "cpu")(h).float()
    assert torch.isfinite(got).all()
    rel = ((got - ref).norm(dim=1) / ref.norm(dim=1)).max()
    print(f"{fmt}: relative error {float(rel):.3f} with an outlier 66x the other channels")
    assert rel <= 0.1, float(rel)  # int8: the outlier sets the row's step (about 0.5 sigma of the rest)


@pytest.fixture(scope="module")
def pairs():
    return [(e.premise, e.hypothesis) for e in load_examples("sample", limit=200).examples]


@pytest.mark.parametrize("fmt", FMTS)
def test_the_quantised_classifier_keeps_torch_fp32s_labels(pairs, fmt):
    """mini-nli at fp8 / int8 (emulated) against torch fp32 on 200 sample pairs: at least 95 % of the labels, fp32
    logits, the products' scheme and kernels recorded."""
    ref = registry.load_classifier("torch", "mini-nli").classify(pairs)
    clf = registry.load_classifier("cudagraph", "mini-nli", precision=fmt)
    got = clf.classify(pairs)
    assert got.logits.dtype == np.float32 and np.isfinite(got.logits).all()
    agree = float(np.mean(np.array(got.labels) == np.array(ref.labels)))
    print(f"cudagraph:{fmt} classifier: {100 * agree:.1f} % of torch fp32's labels on 200 pairs, max |Δlogit| "
          f"{np.abs(got.logits - ref.logits).max():.3f}")
    assert agree >= 0.95
    compute = clf.info.details["compute"]
    assert compute["product_kernels"] == {"emulated": 4 * 5} and "per row" in compute["products"]
    assert "ran on a lent H200" in compute["gpu_kernels"]  # the classifier's kernels ran there; the generator's not


@pytest.mark.parametrize("fmt", FMTS)
def test_the_quantised_generator_runs_t5_through_its_loop(fmt):
    """mini-t5 at fp8 / int8: every product of the encoder and the decoder quantised, the output layer's logits
    fp32; greedy candidates that are sentences, their first tokens mostly fp32's."""
    prompts = [f"Write a sentence that contradicts: {e.hypothesis}" for e in load_examples("sample", limit=8).examples]
    d = Decoding(strategy="greedy", max_new_tokens=16)
    ref = registry.load_generator("cudagraph", "mini-t5").generate_ids(prompts, 1, d, [0] * 8)
    gen = registry.load_generator("cudagraph", "mini-t5", precision=fmt)
    got = gen.generate_ids(prompts, 1, d, [0] * 8)
    assert all(len(r[0]) >= 3 for r in got)
    assert sum(a[0][:2] == b[0][:2] for a, b in zip(got, ref)) >= 6
    dec = gen.decoder
    assert gen.info.details["compute"]["product_kernels"] == {"emulated": 6 * dec.layers + 4 * len(dec.enc_qkv)}
    assert "not verified on a GPU" in gen.info.details["compute"]["gpu_kernels"]


def test_quantised_precisions_are_declared_and_refused_in_one_line(monkeypatch):
    for role in ("classifier", "generator"):
        for fmt in FMTS:
            registry.check("cudagraph", role, fmt, "cpu")
    backend = registry.backend("cudagraph")
    # the classifier's fp8 / int8 kernels ran on a lent H200; the generator's quantised products have not run on a GPU
    assert backend.is_unverified("cuda", "fp8", "generator") and backend.is_unverified("cuda", "int8", "generator")
    assert not backend.is_unverified("cuda", "fp8", "classifier") and not backend.is_unverified("cuda", "fp8")
    assert not backend.is_unverified("cuda", "bf16", "generator") and not backend.is_unverified("cpu", "fp8", "generator")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Some GPU")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (8, 0))
    with pytest.raises(PrecisionError, match=r"fp8 needs a GPU of compute capability 8\.9 or later; Some GPU has 8\.0"):
        registry.check("cudagraph", "classifier", "fp8", "cuda")
    registry.check("cudagraph", "classifier", "int8", "cuda")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (9, 0))
    registry.check("cudagraph", "generator", "fp8", "cuda:0")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (7, 5))
    with pytest.raises(PrecisionError, match="int8 needs a GPU of compute capability 8.0"):
        registry.check("cudagraph", "generator", "int8", "cuda")
    with pytest.raises(PrecisionError, match="fp32 or bf16|fp32, bf16, fp8 or int8"):
        registry.check("cudagraph", "generator", "fp16", "cuda")
    with pytest.raises(ModelLoadError, match="fused=compile: the fused step runs unquantised products"):
        registry.load_generator("cudagraph", "mini-t5", precision="int8", fused="compile")


def test_a_bench_of_quantised_cuda_generators_says_they_are_not_verified_on_a_gpu():
    from breaknli_fast.bench.runner import _unverified

    assert _unverified("cudagraph", "cuda", "fp8", "generator") and _unverified("cudagraph", "cuda", "int8", "generator")
    assert not _unverified("cudagraph", "cuda", "fp8", "classifier") and not _unverified("cudagraph", "cuda", "bf16")
    assert not _unverified("cudagraph", "cuda")
