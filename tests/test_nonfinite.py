"""NaN or infinite model outputs are reported as one error line naming the model, its precision and the way
out, never turned into labels or sampled tokens (an argmax or an inverse-CDF draw over NaN picks an arbitrary
entry without a word). The overflow is real at fp16: a mini-t5 whose logits pass 65,504 runs at fp32 and
stops with that error at fp16."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.engines.base import MASK, Decoding, EngineInfo, NonFiniteError
from breaknli_fast.engines.batching import BatchedClassifier
from breaknli_fast.engines.sampling import sample

VOCAB, EOS, PAD = 60, 1, 0


class _Stepper:
    """Finite logits, except ``bad`` in row ``row`` from decoding step ``at`` (0-based) on."""

    def __init__(self, bad: float, at: int, row: int = 0, all_row: bool = False):
        self.bad, self.at, self.row, self.all_row = bad, at, row, all_row

    def start(self, input_ids, attention_mask, n):
        self.rows, self.t = int(input_ids.shape[0]) * n, 0
        self.alive = torch.arange(self.rows)

    def step(self, tokens):
        g = torch.Generator().manual_seed(self.t)
        logits = torch.randn((self.rows, VOCAB), generator=g)
        logits[:, [PAD, EOS]] = -10.0  # no row ends early or draws padding
        if self.t >= self.at:
            if self.all_row:
                logits[self.row, :] = self.bad
            else:
                logits[self.row, 5] = self.bad
        self.t += 1
        return logits[self.alive]

    def keep(self, positions):
        self.alive = self.alive[positions]


def _sample(stepper, sampler="fast"):
    ids = torch.ones((2, 3), dtype=torch.long)
    dec = Decoding(max_new_tokens=6, sampler=sampler)
    return sample(stepper, ids, torch.ones_like(ids), 4, dec, [0, 1], 0, EOS, PAD)


@pytest.mark.parametrize("sampler", ["fast", "transformers"])
@pytest.mark.parametrize("bad,all_row", [(math.nan, False), (math.inf, False), (-math.inf, True)],
                         ids=["nan", "inf", "all -inf"])
def test_sampler_refuses_non_finite_scores(sampler, bad, all_row):
    out = _sample(_Stepper(0.0, at=99), sampler)  # finite throughout: 2 prompts x 4 rows x 6 tokens
    assert [len(r) for rows in out for r in rows] == [6] * 8
    with pytest.raises(NonFiniteError, match=r"1 of 8 sequences at decoding step 3"):
        _sample(_Stepper(bad, at=2, row=1, all_row=all_row), sampler)


class _Classifier(BatchedClassifier):
    def __init__(self, bad: set[str]):
        super().__init__(token_budget=64, max_batch=2)
        self.bad = bad
        self.info = EngineInfo("torch", "classifier", "toy-nli", "fp16", "cpu")

    def _token_lengths(self, pairs):
        return [len(p.split()) + len(h.split()) for p, h in pairs]

    def _logits(self, pairs):
        return np.array([[math.nan, 0.0, 0.0] if p in self.bad else [1.0, 0.0, -1.0] for p, _ in pairs],
                        dtype=np.float32)


def test_classifier_refuses_non_finite_logits():
    pairs = [("A dog runs.", "An animal moves."), ("A cat sleeps.", "A cat rests."), ("A man sings.", "He sings.")]
    assert _Classifier(set()).classify(pairs).labels == ["entailment"] * 3
    with pytest.raises(NonFiniteError) as e:
        _Classifier({"A man sings."}).classify(pairs)
    msg = str(e.value)
    assert "the classifier toy-nli (torch fp16 on cpu)" in msg and "1 of 1 pairs" in msg
    assert "'A man sings.'" in msg and "--classifier-precision" in msg


@pytest.fixture(scope="module")
def hot_t5(tmp_path_factory):
    """mini-t5 with its output projection scaled by 1e4: logits around 1e5, past fp16's largest number."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    from breaknli_fast.engines.compat import t5_scales_output
    from breaknli_fast.engines.model_info import assets_models_dir

    src = assets_models_dir() / "mini-t5"
    out = tmp_path_factory.mktemp("hot-t5")
    m = AutoModelForSeq2SeqLM.from_pretrained(src)
    assert not t5_scales_output(m.config) and m.lm_head.weight.data_ptr() != m.shared.weight.data_ptr()
    with torch.no_grad():
        m.lm_head.weight.mul_(1e4)
    m.save_pretrained(out)
    AutoTokenizer.from_pretrained(src).save_pretrained(out)
    for extra in ("MODEL_CARD.md",):
        if (src / extra).exists():
            shutil.copy(src / extra, out / extra)
    return out


def test_fp16_overflow_is_one_error_line_and_fp32_runs(hot_t5, tmp_path):
    runner = CliRunner()
    base = ["run", "--generator", str(hot_t5), "--engine", "torch", "--limit", "4"]
    ok = runner.invoke(app, base + ["--out", str(tmp_path / "fp32")])
    assert ok.exit_code == 0, ok.output
    r = runner.invoke(app, base + ["--precision", "fp16", "--out", str(tmp_path / "fp16")])
    assert r.exit_code == 2, r.output
    assert "Traceback" not in r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.output
    text = " ".join(r.output.split())
    assert f"the generator {hot_t5} (torch fp16 on cpu) returned non-finite scores (NaN/inf)" in text
    assert "run the generator at fp32 or bf16 (--generator-precision)" in text


@pytest.mark.parametrize("strategy,n", [("greedy", 1), ("beam", 3), ("diverse-beam", 2)])
def test_generate_and_beam_search_refuse_non_finite_scores(hot_t5, strategy, n):
    """The decoders that do not sample here (transformers' greedy and beam search, diverse beam) check every
    step too: fp16 stops with the error, fp32 generates."""
    from breaknli_fast.engines import registry

    prompts = ["Write a sentence that contradicts: A dog runs on the beach."]
    dec = Decoding(strategy=strategy, max_new_tokens=8)
    out = registry.load_generator("torch", str(hot_t5), "fp32").generate(prompts, n, dec, [0])
    assert len(out) == 1 and len(out[0]) == n
    gen16 = registry.load_generator("torch", str(hot_t5), "fp16")
    with pytest.raises(NonFiniteError, match=r"the generator .* \(torch fp16 on cpu\) .* decoding step 1"):
        gen16.generate(prompts, n, dec, [0])


def test_check_scores_rows():
    from breaknli_fast.engines.sampling import check_scores

    ok = torch.zeros((3, 5))
    ok[1, 2] = -math.inf  # a masked token (eos before min_new_tokens, say) is fine
    check_scores(ok, 0)
    for bad in (math.nan, math.inf):
        s = ok.clone()
        s[2, 4] = bad
        with pytest.raises(NonFiniteError, match="1 of 3 sequences at decoding step 5"):
            check_scores(s, 4)
    s = ok.clone()
    s[0] = -math.inf
    with pytest.raises(NonFiniteError, match="1 of 3 sequences"):
        check_scores(s, 0)


def test_mask_filler_refuses_non_finite_log_probabilities(monkeypatch):
    from breaknli_fast.engines import registry

    filler = registry.load_mask_filler("torch", "mini-mlm", "fp32")
    items = [(f"A {MASK} runs on the beach.",), (f"Two {MASK} sleep.",)]
    good = filler.fill_mask(items, 5)
    assert [f.masks for f in good] == [1, 1] and all(len(f.words) == 5 for f in good)
    run = filler._run

    def nan_run(arrays, mask_index):
        out = np.array(run(arrays, mask_index), dtype=np.float32)
        out[-1, 7] = math.nan
        return out

    filler.clear_cache()
    monkeypatch.setattr(filler, "_run", nan_run)
    filler.info.precision = "fp16"  # the advice names the way out below fp32
    with pytest.raises(NonFiniteError, match=r"the masked LM mini-mlm \(torch fp16 on cpu\) .* 1 of [12] mask positions"
                                             r".* run the masked LM at fp32 or bf16 \(--mlm-precision\)"):
        filler.fill_mask(items, 5)
