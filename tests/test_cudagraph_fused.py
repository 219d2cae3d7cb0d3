"""The cudagraph generator's decoder step written for fusion (option ``fused``, backends/cudagraph/fused.py) on the
CPU: run as plain torch operations (``eager``) and compiled by ``torch.compile`` (``compile``: inductor's C++ on the
CPU, its Triton kernels on CUDA), through the CPU stand-in of the graphs. At fp32 it gives transformers' greedy
tokens and the torch engine's sampled candidates; at bf16 its logits stay within bf16's rounding of the fp32
step's; the compiled layer's kernels are counted from the code the compiler wrote; a stale non-finite key in the
cache cannot reach the scores. (The GPU's timings: the GPU check's ``fused-step`` step.)"""

from __future__ import annotations

import pytest
import torch

from breaknli_fast.backends.cudagraph.fused import count_launches, decode_attention, step_kernels
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding
from breaknli_fast.engines.model_info import ModelLoadError
from breaknli_fast.prompts import CONTRADICT_PROMPT


@pytest.fixture(scope="module")
def prompts():
    return [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in load_examples("sample", limit=6).examples]


@pytest.fixture(scope="module")
def torch_gen():
    return registry.load_generator("torch", "mini-t5")


@pytest.fixture(scope="module")
def compiled_gen():
    return registry.load_generator("cudagraph", "mini-t5", graphs="standin", fused="compile")


def _state(dec, prompts_, k, steps, tokenizer, t=0):
    enc = tokenizer(prompts_, return_tensors="pt", padding=True)
    s = dec.new_state(len(prompts_), k, int(enc["input_ids"].shape[1]), steps)
    with torch.inference_mode():
        s.enc_ids.copy_(enc["input_ids"])
        s.enc_mask.copy_(enc["attention_mask"])
        dec.encode(s)
        s.last.copy_(torch.randint(2, dec.vocab, (s.rows,), generator=torch.Generator().manual_seed(1)))
        s.t.fill_(t)
    return s


@pytest.mark.parametrize("decoding,k", [(Decoding(), 6), (Decoding(strategy="greedy", max_new_tokens=24), 1),
                                        (Decoding(temperature=0.7, top_k=10, max_new_tokens=20), 3)],
                         ids=["sampling", "greedy", "top-k"])
@pytest.mark.parametrize("mode", ["eager", "compile"])
def test_the_fused_step_gives_the_torch_engines_tokens(torch_gen, compiled_gen, prompts, decoding, k, mode):
    """fp32: the torch engine's candidates (its greedy decoding is transformers' generate), whatever the batch."""
    gen = compiled_gen if mode == "compile" else registry.load_generator("cudagraph", "mini-t5", fused="eager")
    seeds = [11, 7, 3, 19, 5, 2]
    ref = torch_gen.generate_ids(prompts, k, decoding, seeds)
    assert gen.generate_ids(prompts, k, decoding, seeds) == ref
    assert gen.generate_ids(prompts[2:5], k, decoding, seeds[2:5]) == ref[2:5]
    compute = gen.info.details["compute"]
    assert compute["fused"] == mode  # not "compile failed (...)"
    if mode == "compile":
        assert gen.decoder.layer_fn.calls > 0 and gen.info.details["graphs"]["captured"] > 0


def test_bf16_fused_logits_stay_within_bf16_rounding_of_fp32(prompts):
    """One step of 6 prompts x 4 rows at bf16, plain and fused (compiled), against the fp32 step: within 2 % of the
    logits' range (bf16 keeps 8 bits), the same most likely token on at least 90 % of the rows, and the two bf16
    steps within the same bound of each other."""
    out = {}
    for name, precision, fused in (("fp32", "fp32", "off"), ("bf16", "bf16", "off"), ("bf16-fused", "bf16", "compile")):
        gen = registry.load_generator("cudagraph", "mini-t5", precision=precision, fused=fused)
        s = _state(gen.decoder, prompts, 4, 16, gen.tokenizer)
        with torch.inference_mode():
            first = gen.decoder.step_logits(s, 16).clone()
            s.last.copy_(first.argmax(-1))
            s.t.fill_(1)
            out[name] = torch.cat([first, gen.decoder.step_logits(s, 16)])
    ref = out["fp32"]
    scale = float(ref.abs().max())
    for name in ("bf16", "bf16-fused"):
        assert out[name].dtype == torch.float32 and torch.isfinite(out[name]).all()
        assert float((out[name] - ref).abs().max()) <= 0.02 * scale, name
        assert float((out[name].argmax(-1) == ref.argmax(-1)).float().mean()) >= 0.9, name
    assert float((out["bf16"] - out["bf16-fused"]).abs().max()) <= 0.02 * scale


def test_the_compiled_layer_is_a_dozen_kernels(compiled_gen, prompts):
    """The code inductor writes for one decoder layer: its six products (q/k/v, self-attention output, cross
    query, cross output, the feed-forward's two) as library calls, and six generated kernels: three norms each
    fused with the residual add before it (and the cast), the self-attention with its cache write, the
    cross-attention, the gated activation. (The plain step runs each norm, attention, activation and cast as
    several operations.)"""
    dec = compiled_gen.decoder
    s = _state(dec, prompts[:2], 3, 16, compiled_gen.tokenizer)
    got = step_kernels(dec, s, 16)
    per = got["per_layer"]
    print(f"fused=compile, {dec.layers} layers: {per['total']} kernels a layer ({per['generated']} generated, "
          f"{per['library']} library), {got['layers_total']} for the layers of a step; {per['by_name']}")
    assert per["library"] == 6 and per["generated"] <= 6 and got["layers_total"] == per["total"] * dec.layers
    names = " ".join(per["by_name"])
    assert "rsqrt" in names and "softmax" in names and "index_copy" in names and "gelu" in names


def test_count_launches_reads_cpu_and_cuda_wrappers():
    cpu = "class Runner:\n    def call(self, args):\n        buf0 = x\n        extern_kernels.mm(a, b, out=buf0)\n" \
          "        cpp_fused_add_rsqrt_0(buf0, buf1)\n        cpp_fused_add_rsqrt_1(buf0)\n\nother = 1\n"
    cuda = "def call(args):\n    with torch.cuda._DeviceGuard(0):\n        triton_poi_fused_gelu_mul_0.run(buf1, " \
           "grid=grid(8))\n        extern_kernels.addmm(a, b, c, out=d)\n"
    assert count_launches([cpu]) == {"generated": 2, "library": 1, "total": 3,
                                     "by_name": {"cpp_fused_add_rsqrt": 2, "extern_kernels.mm": 1}}
    assert count_launches([cuda])["by_name"] == {"triton_poi_fused_gelu_mul": 1, "extern_kernels.addmm": 1}


def test_stale_non_finite_keys_cannot_reach_the_scores():
    """Positions after the step are selected out, not added to -inf: a NaN key there leaves the output as it was
    (the plain step's additive mask gives NaN)."""
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 1, 8, generator=g), torch.randn(2, 3, 16, 8, generator=g),
               torch.randn(2, 3, 16, 8, generator=g))
    valid = (torch.arange(16) <= 4).view(1, 1, 1, 16)
    bias = torch.zeros(1, 3, 1, 16).masked_fill(~valid, float("-inf"))
    clean = decode_attention(q, k, v, bias, valid)
    k[:, :, 9] = float("nan")
    assert torch.equal(decode_attention(q, k, v, bias, valid), clean)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=1.0)
    assert torch.isnan(sdpa).all()
    ref = torch.softmax((q @ k[:, :, :5].transpose(-1, -2)), -1) @ v[:, :, :5]
    assert torch.allclose(clean, ref, atol=1e-6)


def test_a_bad_fused_option_is_one_line():
    with pytest.raises(ModelLoadError, match="fused='always'"):
        registry.load_generator("cudagraph", "mini-t5", fused="always")
