"""The ct2 engine (CTranslate2 generator, classifier on another engine): conversion checked against torch fp32
and cached, K samples per prompt with the decoding options mapped, reproducible seeding, the one-line refusals.
Skips without CTranslate2 (``pip install 'breaknli-fast[ct2]'``), except the missing-library error itself."""

from __future__ import annotations

import sys

import pytest

import tiny_models as testing
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding
from breaknli_fast.engines.model_info import ModelLoadError
from breaknli_fast.errors import UserError

PROMPTS = ["Generate a statement that contradicts the following statement: A man is sleeping.",
           "Write a statement that follows from this one: Two dogs run in the park."]


def test_without_ctranslate2_is_one_line(monkeypatch, tiny_t5):
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import fails as when it is not installed
    with pytest.raises(registry.EngineUnavailable, match=r"(?i)ct2 engine needs CTranslate2: pip install"):
        registry.load_generator("ct2", tiny_t5)


@pytest.mark.skipif(__import__("importlib").util.find_spec("ctranslate2") is None, reason="CTranslate2 not installed")
def test_the_version_of_ctranslate2_is_recorded_with_the_generator():
    """config.json's roles (and bench.json's environment) name the version of the library that ran each role."""
    from breaknli_fast.envinfo import package_version
    from breaknli_fast.study.loading import EngineConfig, role_engines

    roles = role_engines(EngineConfig(engine="ct2"), ["classifier", "generator"])
    assert roles["generator"]["engine"] == "ct2"
    assert roles["generator"]["runtime"] == {"ctranslate2": package_version("ctranslate2")} != {"ctranslate2": None}
    assert "ctranslate2" in registry.declared_packages()


needs_ct2 = pytest.mark.skipif(
    __import__("importlib").util.find_spec("ctranslate2") is None,
    reason="CTranslate2 is not installed (optional: pip install 'breaknli-fast[ct2]')")


@pytest.fixture(scope="module")
def ct2_cache(tmp_path_factory):
    return tmp_path_factory.mktemp("ct2-cache")


def _load(model, cache, precision="int8", **kw):
    return registry.load_generator("ct2", model, precision=precision, cache_dir=str(cache), **kw)


@needs_ct2
def test_conversion_checked_cached_and_k_samples(tiny_t5, ct2_cache):
    gen = _load(tiny_t5, ct2_cache, precision="fp32")
    d = gen.info.details
    # fp32 against fp32: CTranslate2 scores torch's greedy tokens within rounding of torch's log-probabilities
    assert d["validation"]["passed"] and d["validation"]["max_abs_logprob"] <= 1e-3
    assert d["compute_type"] == "float32" and gen.info.engine == "ct2"
    dec = Decoding(max_new_tokens=7, min_new_tokens=7)
    ids = gen.generate_ids(PROMPTS, 5, dec, [1, 2])
    assert [len(rows) for rows in ids] == [5, 5]
    assert all(len(r) == 7 for rows in ids for r in rows)  # fixed length: no end token before 7
    assert gen.stats.new_tokens == 70 and gen.stats.sequences == 10 and gen.stats.prompts == 2
    assert len({tuple(r) for r in ids[0]}) > 1  # sampled, not five copies of one sequence
    texts = gen.generate(PROMPTS, 3, Decoding(max_new_tokens=5), [1, 2])
    assert [len(t) for t in texts] == [3, 3] and all(isinstance(x, str) for t in texts for x in t)
    again = _load(tiny_t5, ct2_cache, precision="int8")
    assert again.info.details["export_reused"] and again.info.details["compute_type"] == "int8"


@needs_ct2
def test_greedy_matches_the_conversion_check_and_beam_runs(tiny_t5, ct2_cache):
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    gen = _load(tiny_t5, ct2_cache, precision="fp32")
    got = gen.generate_ids(PROMPTS, 1, Decoding(strategy="greedy", max_new_tokens=6, min_new_tokens=6), [0, 0])
    tok = AutoTokenizer.from_pretrained(tiny_t5)
    model = AutoModelForSeq2SeqLM.from_pretrained(tiny_t5).eval()
    with torch.inference_mode():
        ref = model.generate(**tok(PROMPTS, return_tensors="pt", padding=True), do_sample=False, num_beams=1,
                             max_new_tokens=6, min_new_tokens=6)[:, 1:].tolist()
    same = sum(a == b for g, r in zip(got, ref) for a, b in zip(g[0], r))
    assert same >= 10, (got, ref)  # fp32 greedy: the same tokens but where two logits tie within rounding
    beams = gen.generate_ids(PROMPTS, 2, Decoding(strategy="beam", max_new_tokens=5), [0, 0])
    assert [len(b) for b in beams] == [2, 2]


@needs_ct2
def test_seeded_stream_is_reproducible(tiny_t5, ct2_cache):
    dec = Decoding(max_new_tokens=8, min_new_tokens=8)
    a = _load(tiny_t5, ct2_cache).generate_ids(PROMPTS, 4, dec, [11, 12])
    b = _load(tiny_t5, ct2_cache).generate_ids(PROMPTS, 4, dec, [11, 12])
    c = _load(tiny_t5, ct2_cache).generate_ids(PROMPTS, 4, dec, [13, 12])
    assert a == b  # a fresh engine, the same calls: the same candidates
    assert a != c  # another first seed: another stream


@needs_ct2
def test_a_wrong_conversion_fails_the_check(tiny_t5, ct2_cache, tiny_dir):
    from breaknli_fast.backends.ct2.exporter import check_conversion

    folder = _load(tiny_t5, ct2_cache).folder
    other = testing.make_tiny_t5(tiny_dir / "t5-other-seed", seed=1)  # same shapes and tokenizer, other weights
    figs = check_conversion(folder, str(other))
    assert not figs["passed"] and "log-probability" in figs["failures"][0]


@needs_ct2
def test_refusals_are_one_line(tiny_t5, ct2_cache, tiny_roberta):
    gen = _load(tiny_t5, ct2_cache)
    for dec, msg in ((Decoding(strategy="diverse-beam"), "no diverse-beam decoding"),
                     (Decoding(sampler="transformers"), "CTranslate2's own sampler")):
        with pytest.raises(UserError, match=msg):
            gen.generate(PROMPTS[:1], 2, dec, [0])
    with pytest.raises(ModelLoadError, match="T5 text-to-text models"):
        _load(tiny_roberta, ct2_cache)
    with pytest.raises(ModelLoadError, match="the ct2 engine's generator runs fp32 or int8 on cpu, not 'fp16'"):
        _load(tiny_t5, ct2_cache, precision="fp16")  # CPU: float32 and int8 only (the backend's declaration)


def test_classifier_role_goes_where_the_declaration_hands_it(tiny_roberta):
    """ct2 runs no classifier: named for every role, its declaration hands the classifier to auto's choice (no code
    of its own borrows one); --classifier-engine names another."""
    from breaknli_fast.study.loading import EngineConfig

    pairs = [(p, h) for p, h, _ in testing.pairs(6, seed=2)]
    auto = registry.resolve_engine("auto")
    # (random weights with large logits: the ort export is judged without the fp32 bound)
    opts = {"tolerances": {"max_abs_logit": None, "min_agreement": None}} if auto == "ort" else {}
    clf = registry.load_classifier("ct2", tiny_roberta, **opts)
    assert clf.info.engine == auto and registry.role_engine("ct2", "classifier") == auto
    ref = registry.load_classifier("torch", tiny_roberta)
    assert clf.classify(pairs).labels == ref.classify(pairs).labels
    assert EngineConfig(engine="ct2").engine_of("classifier") == auto
    assert EngineConfig(engine="ct2", classifier_engine="torch").engine_of("classifier") == "torch"
    assert EngineConfig(engine="ct2").engine_of("generator") == "ct2"
    with pytest.raises(Exception, match="option 'classifier_engine'"):
        registry.split_options("ct2", {"classifier_engine": "torch"})
