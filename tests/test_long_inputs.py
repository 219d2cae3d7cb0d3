"""Inputs longer than a model's position window: every engine truncates to min(--max-length, the
model's own limit), exports and TensorRT profiles stay within that limit, torch and ort agree on the
truncated rows, generators cap their prompts alike, and ``run`` finishes on a row of thousands of words."""

from __future__ import annotations

import json

import numpy as np
import pytest

import tiny_models as testing
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding, derive_seed
from breaknli_fast.engines.model_info import DEFAULT_INPUT_LIMIT, effective_max_length, input_limit, position_limit

# about 5,000 words in the vocabulary of the tiny tokenizers (which were trained on these sentences)
LONG = " ".join(testing.corpus(400) * 2)
SHORT = [(p, h) for p, h, _ in testing.pairs(6, seed=3)]
PAIRS = SHORT + [(SHORT[0][0], LONG), (LONG, SHORT[1][1]), (LONG, LONG[::-1]), (SHORT[2][0], LONG + " " + LONG)]


def test_the_long_text_is_long():
    assert len(LONG.split()) > 4000


class _Tok:
    def __init__(self, n):
        self.model_max_length = n


def test_input_limit_per_architecture():
    from transformers import BartConfig, BertConfig, DebertaConfig, DebertaV2Config, RobertaConfig, T5Config

    # RoBERTa: positions start after the padding index
    assert position_limit(RobertaConfig(max_position_embeddings=514, pad_token_id=1))[0] == 512
    assert position_limit(RobertaConfig(max_position_embeddings=130, pad_token_id=1))[0] == 128
    # BART's table adds its offset itself; DeBERTa and BERT count from 0
    assert position_limit(BartConfig(max_position_embeddings=1024))[0] == 1024
    assert position_limit(DebertaConfig(max_position_embeddings=512))[0] == 512
    assert position_limit(DebertaV2Config(max_position_embeddings=512))[0] == 512
    assert position_limit(BertConfig(max_position_embeddings=512))[0] == 512
    # T5: relative positions, no table; the tokenizer's model_max_length, else the default
    assert position_limit(T5Config())[0] is None
    assert input_limit(T5Config(), _Tok(512)) == (512, "tokenizer model_max_length 512")
    assert input_limit(T5Config(), _Tok(int(1e30)))[0] == DEFAULT_INPUT_LIMIT  # transformers' "unset" placeholder
    assert input_limit(T5Config())[0] == DEFAULT_INPUT_LIMIT
    # the smaller of the table and the tokenizer
    assert input_limit(RobertaConfig(max_position_embeddings=130), _Tok(512))[0] == 128
    assert input_limit(RobertaConfig(max_position_embeddings=514), _Tok(256))[0] == 256
    used, rec = effective_max_length(256, RobertaConfig(max_position_embeddings=130), _Tok(512))
    assert used == 128 and rec == {"max_length": 128, "max_length_requested": 256, "model_max_length": 128,
                                   "model_max_length_from": "roberta max_position_embeddings 130 - padding_idx 1 - 1"}
    assert effective_max_length(64, RobertaConfig(max_position_embeddings=130))[0] == 64


@pytest.fixture(autouse=True)
def _cache_root(tiny_dir, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tiny_dir / "cache-root"))


def _ort_opts(tiny_dir):
    # the conftest classifiers have weights of std 1 (logits up to ~15): fp32 rounding passes 1e-4 there
    return {"cache_dir": tiny_dir / "export-cache", "calibration_pairs": SHORT * 3, "validation_size": 12,
            "tolerances": {"max_abs_logit": 1e-3}}


@pytest.fixture(params=["tiny_roberta", "tiny_bart", "mini-nli"])
def classifier_model(request):
    return request.getfixturevalue(request.param) if request.param.startswith("tiny") else request.param


def test_torch_and_ort_classify_very_long_rows_alike(classifier_model, tiny_dir):
    """Default --max-length 256 on models whose position window is 128 tokens."""
    ref = registry.load_classifier("torch", classifier_model, max_length=256)
    assert ref.max_length == 128 and ref.info.details["max_length"] == 128
    assert ref.info.details["max_length_requested"] == 256 and ref.info.details["model_max_length"] == 128
    assert max(ref._token_lengths(PAIRS)) == 128
    a = ref.classify(PAIRS)
    clf = registry.load_classifier("ort", classifier_model, precision="fp32", max_length=256, **_ort_opts(tiny_dir))
    assert clf.max_length == 128 and clf.info.details["max_length"] == 128
    assert max(len(x) for x in clf._tokenize(PAIRS)["input_ids"]) == 128
    b = clf.classify(PAIRS)
    assert np.isfinite(a.logits).all() and np.isfinite(b.logits).all()
    # fp32 graph vs eager fp32: rounding only. The conftest classifiers (weights of std 1) amplify it: on the
    # long rows torch fp32 itself differs from torch fp64 by up to 5e-3 (tiny_bart)
    np.testing.assert_allclose(b.logits, a.logits, rtol=0, atol=1e-2)
    assert a.labels == b.labels


def test_export_shapes_stay_within_the_limit(tiny_roberta, tiny_dir, monkeypatch):
    """The export records the model's limit and validates at the capped length; a TensorRT profile built
    from it (the builder itself replaced: no TensorRT here) never asks for more positions."""
    from breaknli_fast.export import export_model
    from breaknli_fast.backends.tensorrt import exporter as trt_export

    res = export_model(tiny_roberta, max_length=4096, progress=False, **_ort_opts(tiny_dir))
    assert res.manifest["model_max_length"] == 128 and res.validation["max_length"] == 128
    seen = {}

    def fake_build(onnx_path, plan_path, precision, profile, workspace_gib=4):
        seen.update(profile)
        return {"profile": profile}

    monkeypatch.setattr(trt_export, "build_engine", fake_build)
    trt_export.build_for_export(res.path, "model.onnx", "fp32", PAIRS, 4096, 8)
    assert seen["max"] == [8, 128] and seen["opt"][1] <= 128


def test_seq2seq_classifier_on_very_long_rows(tiny_t5, tiny_dir):
    kw = dict(method="score", max_length=10_000, token_budget=4096, max_batch=4)
    ref = registry.load_classifier("torch", tiny_t5, **kw)
    clf = registry.load_classifier("ort", tiny_t5, **kw, **_ort_opts(tiny_dir))
    for c in (ref, clf):  # the tiny tokenizer records no length: T5's default cap
        assert c.max_length == DEFAULT_INPUT_LIMIT and c.info.details["max_length"] == DEFAULT_INPUT_LIMIT
    a, b = ref.classify(PAIRS), clf.classify(PAIRS)
    assert float(np.abs(a.logits - b.logits).max()) <= 1e-3
    assert a.labels == b.labels


def test_generators_cap_very_long_prompts_alike(tiny_t5, tiny_dir):
    prompts = ["Generate a statement that contradicts the following statement: " + LONG, "A man is sleeping."]
    seeds = [derive_seed(3, "long", i) for i in range(len(prompts))]
    torch_gen = registry.load_generator("torch", tiny_t5, max_input_length=10_000)
    ort_gen = registry.load_generator("ort", tiny_t5, precision="fp32", max_input_length=10_000, workers=1,
                                      **_ort_opts(tiny_dir))
    for g in (torch_gen, ort_gen):
        assert g.max_input_length == DEFAULT_INPUT_LIMIT
        assert g.info.details["max_input_length"] == DEFAULT_INPUT_LIMIT
        assert g.info.details["max_input_length_requested"] == 10_000
    for decoding, n in ((Decoding(max_new_tokens=6), 4), (Decoding(strategy="greedy", max_new_tokens=6), 1)):
        a = torch_gen.generate_ids(prompts, n, decoding, seeds)
        assert a == ort_gen.generate_ids(prompts, n, decoding, seeds)
        assert all(len(rows) == n for rows in a)
    assert torch_gen.count_tokens([LONG]) > DEFAULT_INPUT_LIMIT  # counting is not truncated


@pytest.fixture
def long_tsv(tiny_dir):
    p = tiny_dir / "long.tsv"
    rows = [(p_, h, lab) for p_, h, lab in testing.pairs(3, seed=1)]
    rows[1] = (rows[1][0], LONG, rows[1][2])
    rows[2] = (LONG, rows[2][1], rows[2][2])
    with open(p, "w") as f:
        f.write("gold_label\tsentence1\tsentence2\tpairID\n")
        for i, (prem, hyp, lab) in enumerate(rows):
            f.write(f"{lab}\t{prem}\t{hyp}\tlong{i}\n")
    return p


@pytest.mark.parametrize("classifier", ["tiny_roberta", "mini-nli"])
def test_run_finishes_on_a_very_long_row(tmp_path, tiny_t5, long_tsv, classifier, request):
    from typer.testing import CliRunner

    from breaknli_fast.cli import app

    clf = request.getfixturevalue(classifier) if classifier.startswith("tiny") else classifier
    r = CliRunner().invoke(app, ["run", "-g", tiny_t5, "-c", clf, "-d", str(long_tsv), "--out", str(tmp_path / "run"),
                                 "--limit", "3", "--k", "4", "--u", "2", "--s", "1", "--max-new-tokens", "6"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    details = cfg["engine"]["classifier_details"]["details"]
    assert details["max_length"] == 128 and details["max_length_requested"] == 256
    assert json.loads((tmp_path / "run" / "report.json").read_text())["funnel"]["valid"] == 3


def test_over_long_texts_are_cut_before_tokenising_keeping_the_same_tokens(tiny_roberta, tiny_t5):
    """A long text is cut by characters before the tokenizer sees it, only where the cut still gives at least
    twice max_length tokens: the tokens kept after truncation are exactly those of the whole text. (The whole
    text of a pair of long texts is tokenised here at moderate length only: the tokenizer's overflow windows of
    two long texts multiply, which is what took gigabytes on megabyte inputs.)"""
    from breaknli_fast.engines.batching import clip_text
    from breaknli_fast.engines.model_info import load_tokenizer

    assert len(LONG) > 16 * 512
    for path in (tiny_roberta, tiny_t5):
        tok = load_tokenizer(path)
        for n in (64, 512):
            assert len(clip_text(tok, LONG, n)) <= 16 * n
            mid = LONG[:17 * n]  # two long texts: just past the cut (the whole pair's tokenisation is the slow one)
            cases = [(LONG, SHORT[0][1]), (SHORT[0][0], LONG), (mid, mid[::-1])]
            for first, second in cases:
                full = tok(first, second, truncation=True, max_length=n)["input_ids"]
                clipped = tok(clip_text(tok, first, n), clip_text(tok, second, n), truncation=True,
                              max_length=n)["input_ids"]
                assert clipped == full, (path, n)
        assert clip_text(tok, SHORT[0][0], 16) == SHORT[0][0]
    t5 = load_tokenizer(tiny_t5)
    spaces = " " * 20_000 + "word"  # many characters, few tokens (runs of spaces are one): not cut
    assert clip_text(t5, spaces, 16) == spaces


class _Spy:
    """A tokenizer that records the longest text it is given (and does what the real one does)."""

    def __init__(self, inner):
        self.inner, self.longest = inner, 0

    def _texts(self, x):
        if isinstance(x, str):
            yield x
        elif isinstance(x, (list, tuple)):
            for y in x:
                yield from self._texts(y)

    def __call__(self, *args, **kwargs):
        for t in self._texts([*args, *kwargs.values()]):
            self.longest = max(self.longest, len(t))
        return self.inner(*args, **kwargs)

    def __getattr__(self, name):
        return getattr(self.inner, name)


def test_a_classifier_on_a_megabyte_premise_tokenises_a_bounded_text_and_is_exact(tiny_roberta):
    from breaknli_fast.engines.batching import CLIP_CHARS_PER_TOKEN

    clf = registry.load_classifier("torch", tiny_roberta, max_length=64)
    spy = clf.tokenizer = _Spy(clf.tokenizer)
    huge = (LONG + " ") * 200  # about 6 MB
    probs = clf.classify([(huge, SHORT[0][1]), (SHORT[1][0], huge)]).probs
    # tokenising the whole text first took minutes at 50 MB: the tokenizer sees the cut only
    assert 0 < spy.longest <= 64 * CLIP_CHARS_PER_TOKEN < len(huge)
    fresh = registry.load_classifier("torch", tiny_roberta, max_length=64)
    ref = fresh.classify([(huge[:100_000], SHORT[0][1]), (SHORT[1][0], huge[:100_000])]).probs
    assert np.array_equal(probs, ref)
