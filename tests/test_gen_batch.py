"""The generator's batches (--gen-batch), the per-prompt cross-attention keys / values of the torch stepper, and the
fast sampler on the logits' device: the same tokens as the sampler before them (tests/legacy_sampling.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import legacy_sampling as legacy
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding, NonFiniteError
from breaknli_fast.engines.generation import GEN_BATCH_DEFAULTS, default_gen_batch
from breaknli_fast.study.loading import EngineConfig
from breaknli_fast.engines.sampling import TorchStepper, sample, uniforms
from breaknli_fast.prompts import CONTRADICT_PROMPT


@pytest.fixture(scope="module")
def mini_gen():
    return registry.load_generator("torch", "mini-t5", precision="fp32", device="cpu")


@pytest.fixture(scope="module")
def prompts():
    return [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in load_examples("sample", limit=12).examples]


def _legacy_ids(gen, prompts, n, decoding, seeds, per_call=8):
    """Token ids of the former sampler over the former stepper, ``per_call`` prompts per batch."""
    cfg = gen.config
    start, eos, pad = int(cfg.decoder_start_token_id or 0), int(cfg.eos_token_id), int(gen.tokenizer.pad_token_id)
    out = []
    for i in range(0, len(prompts), per_call):
        enc = gen.tokenizer(prompts[i:i + per_call], return_tensors="pt", padding=True, truncation=True,
                            max_length=gen.max_input_length)
        out += legacy.sample(legacy.TorchStepper(gen.model), enc["input_ids"], enc["attention_mask"], n, decoding,
                             seeds[i:i + per_call], start, eos, pad)
    return out


@pytest.mark.parametrize("decoding", [Decoding(), Decoding(top_k=0, top_p=0.9, temperature=0.7, min_new_tokens=3)],
                         ids=["default", "top_p-temperature-min_new_tokens"])
def test_fast_sampler_gives_the_former_samplers_tokens(mini_gen, prompts, decoding):
    """mini-t5 at fp32 on the CPU: the tokens of every prompt equal the former sampler's, whatever the batch."""
    seeds = [1000 + i for i in range(len(prompts))]
    want = _legacy_ids(mini_gen, prompts, 6, decoding, seeds)
    old = mini_gen.prompt_batch
    try:
        for batch in (8, 5, len(prompts)):
            mini_gen.prompt_batch = batch
            assert mini_gen.generate_ids(prompts, 6, decoding, seeds) == want, batch
    finally:
        mini_gen.prompt_batch = old
    assert sum(len(r) for rows in want for r in rows) > 100  # real sentences, not empty rows


def test_tokens_do_not_depend_on_how_often_the_host_looks(mini_gen, prompts):
    """``sync_every`` (CUDA: every 8 steps) changes when finished rows are dropped and when the loop stops, not the
    tokens; compaction on or off neither."""
    cfg, tok = mini_gen.config, mini_gen.tokenizer
    enc = tok(prompts[:6], return_tensors="pt", padding=True)
    args = (enc["input_ids"], enc["attention_mask"], 5, Decoding(), list(range(6)), int(cfg.decoder_start_token_id),
            int(cfg.eos_token_id), int(tok.pad_token_id))
    base = sample(TorchStepper(mini_gen.model), *args)
    for every, share in ((3, 0.25), (8, 0.25), (1, None), (40, 0.5)):
        assert sample(TorchStepper(mini_gen.model), *args, compact_share=share, sync_every=every) == base, every


def test_uniforms_are_the_per_step_draws_of_each_prompts_generator():
    u = uniforms([7, 8], steps=4, n=3)
    for e, seed in enumerate((7, 8)):
        rng = np.random.Generator(np.random.PCG64(seed))
        for t in range(4):
            assert np.array_equal(u[t, e * 3:(e + 1) * 3], rng.random(3))


def test_cross_attention_keys_are_computed_once_per_prompt_and_give_the_same_logits(tiny_t5):
    """The torch stepper projects the encoder output once per prompt (not per sample), and its logits equal those
    of the former stepper, which gave every sample its own copy; after dropping rows too."""
    from transformers import AutoTokenizer

    gen = registry.load_generator("torch", tiny_t5, precision="fp32", device="cpu")
    tok = AutoTokenizer.from_pretrained(tiny_t5)
    enc = tok(["A man is sleeping.", "Two dogs run in the park near the river."], return_tensors="pt", padding=True)
    new, old = TorchStepper(gen.model), legacy.TorchStepper(gen.model)
    assert new.shared_cross
    calls = []
    att = gen.model.decoder.block[0].layer[1].EncDecAttention
    hook = att.k.register_forward_hook(lambda mod, inp, out: calls.append(tuple(inp[0].shape)))
    try:
        new.start(enc["input_ids"], enc["attention_mask"], 4)
    finally:
        hook.remove()
    assert [c[0] for c in calls] == [2]  # one projection of the two prompts, not of 8 rows
    old.start(enc["input_ids"], enc["attention_mask"], 4)
    tokens = torch.tensor([0] * 8)
    for t in range(4):
        a, b = new.step(tokens), old.step(tokens)
        assert torch.allclose(a, b, atol=1e-5, rtol=0), t
        tokens = a.argmax(-1)
        if t == 1:
            keep = torch.tensor([0, 2, 5, 7])
            new.keep(keep)
            old.keep(keep)
            tokens = tokens[keep]


class NaNAtStep3:
    """A stepper whose logits (on ``device``) hold a NaN in the first row at the third step (tests/test_cuda.py
    runs it on CUDA)."""

    vocab = 12

    def __init__(self, device: str = "cpu"):
        self.device = torch.device(device)

    def start(self, input_ids, attention_mask, n):
        self.t = 0

    def step(self, tokens):
        self.t += 1
        logits = torch.zeros((tokens.shape[0], self.vocab), device=self.device)
        logits[:, 1] = -5.0  # eos unlikely: the rows stay alive
        if self.t == 3:
            logits[0, 4] = float("nan")
        return logits

    def keep(self, positions):
        pass


def test_nonfinite_scores_are_refused_at_their_step_when_the_host_looks_late():
    ids, mask = torch.ones((2, 3), dtype=torch.long), torch.ones((2, 3), dtype=torch.long)
    for every in (1, 8):
        with pytest.raises(NonFiniteError, match="1 of 4 sequences at decoding step 3"):
            sample(NaNAtStep3(), ids, mask, 2, Decoding(max_new_tokens=10), [0, 1], 0, 1, 0, sync_every=every)


def test_gen_batch_reaches_the_generator_with_a_default_per_device(tiny_t5):
    assert default_gen_batch("cpu") == GEN_BATCH_DEFAULTS["cpu"] == 8
    assert default_gen_batch("cuda:1") == GEN_BATCH_DEFAULTS["cuda"]
    assert EngineConfig(engine="torch", gen_batch=32).options("generator")["prompt_batch"] == 32
    assert "prompt_batch" not in EngineConfig(engine="torch").options("generator")
    gen = registry.load_generator("torch", tiny_t5, precision="fp32", device="cpu",
                                  **EngineConfig(engine="torch", gen_batch=3).options("generator"))
    assert gen.prompt_batch == 3 and gen.info.details["gen_batch"] == 3
    assert registry.load_generator("torch", tiny_t5, device="cpu").prompt_batch == 8
