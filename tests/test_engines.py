import numpy as np
import pytest

import tiny_models as testing
from breaknli_fast.data.labels import LABELS
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding, derive_seed
from breaknli_fast.engines.batching import plan_batches
from breaknli_fast.engines.model_info import ModelLoadError
from breaknli_fast.engines.registry import EngineUnavailable


def test_plan_batches_respects_budget_and_covers_everything():
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(3, 120, size=500)]
    batches = plan_batches(lengths, token_budget=1000, max_batch=32)
    flat = sorted(i for b in batches for i in b)
    assert flat == list(range(500))
    for b in batches:
        assert len(b) <= 32
        assert len(b) == 1 or len(b) * max(lengths[i] for i in b) <= 1000
    # length bucketing: each batch is a contiguous run of the length-sorted order
    maxes = [max(lengths[i] for i in b) for b in batches]
    assert maxes == sorted(maxes, reverse=True)
    assert plan_batches([5000], 100, 8) == [[0]]  # over-long items still run, alone
    assert plan_batches(lengths, 1000, 32) == batches  # deterministic


def _padded(batch, lengths):
    return len(batch) * max(lengths[i] for i in batch)


def test_plan_batches_in_pairs_balances_the_batches():
    # the CPU engines with two workers: an even number of batches of near-equal padded size
    assert [len(b) for b in plan_batches([46] * 50, 8192, 16, multiple=2)] == [13, 13, 13, 11]
    assert [len(b) for b in plan_batches([80] * 20, 8192, 16, multiple=2)] == [10, 10]
    assert [len(b) for b in plan_batches([80] * 20, 8192, 16)] == [16, 4]  # the plain grouping is unchanged
    assert plan_batches([7], 8192, 16, multiple=2) == [[0]]  # never more batches than items
    assert plan_batches([5000, 3], 100, 8, multiple=2) == [[0], [1]]  # an over-long item: the plain grouping
    rng = np.random.default_rng(1)
    for trial in range(300):
        n = int(rng.integers(1, 60))
        lengths = [int(x) for x in rng.integers(1, 200, size=n)]
        budget, max_batch = int(rng.choice([250, 1000, 8192])), int(rng.choice([1, 3, 16]))
        plain = plan_batches(lengths, budget, max_batch)
        paired = plan_batches(lengths, budget, max_batch, multiple=2)
        assert sorted(i for b in paired for i in b) == list(range(n))
        for b in paired:
            assert len(b) <= max_batch and (len(b) == 1 or _padded(b, lengths) <= budget)
        target = min(n, -(-len(plain) // 2) * 2)
        assert len(paired) <= target
        # no worse than the plain grouping, and optimal: no contiguous split of the sorted order into
        # `target` batches has a smaller largest padded size (checked exhaustively where that is cheap)
        worst = max(_padded(b, lengths) for b in paired)
        assert worst <= max(_padded(b, lengths) for b in plain)
        if n <= 12 and max(lengths) <= budget:
            order = sorted(range(n), key=lambda i: (-lengths[i], i))
            best = min(_best_split(order, lengths, target, max_batch, budget))
            assert worst == best, (lengths, budget, max_batch)
    big = [int(x) for x in rng.integers(1, 512, size=200_000)]  # bounded: a bisection over the padded size
    assert sum(len(b) for b in plan_batches(big, 8192, 16, multiple=2)) == len(big)


def _best_split(order, lengths, parts, max_batch, budget):
    """The largest padded size of every split of ``order`` into at most ``parts`` consecutive batches."""
    from itertools import combinations

    n = len(order)
    for k in range(1, parts + 1):
        for cuts in combinations(range(1, n), k - 1):
            bounds = (0, *cuts, n)
            groups = [order[a:b] for a, b in zip(bounds, bounds[1:])]
            if all(len(g) <= max_batch for g in groups):
                sizes = [_padded(g, lengths) for g in groups]
                if all(len(g) == 1 or s <= budget for g, s in zip(groups, sizes)):
                    yield max(sizes)


def test_duplicate_pairs_are_classified_once(tiny_roberta):
    clf = registry.load_classifier("torch", tiny_roberta)
    pairs = [(p, h) for p, h, _ in testing.pairs(10)]
    out = clf.classify(pairs + pairs[:4] + pairs)
    assert clf.stats.pairs_requested == 24 and clf.stats.pairs_computed == 10
    np.testing.assert_array_equal(out.logits[:10], out.logits[14:])
    again = clf.classify(pairs[:3])
    assert clf.stats.pairs_computed == 10
    np.testing.assert_array_equal(again.logits, out.logits[:3])
    assert np.allclose(out.probs.sum(axis=1), 1.0)


def test_labels_follow_id2label_not_index(tiny_dir):
    """Two classifiers with the same weights but opposite id2label orders give the same canonical labels."""
    import json
    import shutil

    a = testing.make_tiny_classifier(tiny_dir / "order-a", "roberta", init_std=1.0)
    b = tiny_dir / "order-b"
    shutil.copytree(a, b)
    cfg = json.loads((b / "config.json").read_text())
    # relabel the outputs: index 0 is now called entailment, 2 contradiction
    cfg["id2label"] = {"0": "ENTAILMENT", "1": "NEUTRAL", "2": "CONTRADICTION"}
    cfg["label2id"] = {v: int(k) for k, v in cfg["id2label"].items()}
    (b / "config.json").write_text(json.dumps(cfg))
    pairs = [(p, h) for p, h, _ in testing.pairs(30)]
    ca, cb = registry.load_classifier("torch", str(a)), registry.load_classifier("torch", str(b))
    la, lb = ca.classify(pairs), cb.classify(pairs)
    raw = np.concatenate([ca.raw_logits([p]) for p in pairs])  # one pair at a time: the same logits as in batches
    np.testing.assert_allclose(la.logits[:, LABELS.index("contradiction")], raw[:, 0], rtol=1e-6)
    np.testing.assert_allclose(lb.logits[:, LABELS.index("entailment")], raw[:, 0], rtol=1e-6)
    swap = {"entailment": "contradiction", "contradiction": "entailment", "neutral": "neutral"}
    assert [swap[x] for x in la.labels] == lb.labels


def test_unmappable_model_labels_are_refused(tiny_dir):
    p = testing.make_tiny_classifier(tiny_dir / "label-n", "roberta", id2label={0: "LABEL_0", 1: "LABEL_1", 2: "LABEL_2"})
    with pytest.raises(Exception, match="--label-map"):
        registry.load_classifier("torch", str(p))
    clf = registry.load_classifier("torch", str(p), label_map={"LABEL_0": "contradiction", "LABEL_1": "neutral", "LABEL_2": "entailment"})
    assert len(clf.classify([("A b.", "C d.")])) == 1


@pytest.mark.parametrize("family", ["bart", "deberta", "deberta-v2"])
def test_other_classifier_families_run(tiny_dir, family):
    p = testing.make_tiny_classifier(tiny_dir / f"fam-{family}", family)
    clf = registry.load_classifier("torch", str(p))
    assert clf.classify([("A man sleeps.", "A man is awake.")]).logits.shape == (1, 3)


def test_generation_is_seeded_per_prompt_not_per_batch(tiny_t5):
    gen = registry.load_generator("torch", tiny_t5)
    d = Decoding(top_p=1.0, top_k=0, max_new_tokens=10)
    prompts = ["A man is sleeping.", "Two dogs run."]
    both = gen.generate(prompts, 5, d, [11, 12])
    alone = gen.generate(prompts[1:], 5, d, [12])
    assert both[1] == alone[0] and len(both[0]) == 5
    assert gen.generate(prompts[:1], 5, d, [13]) != both[:1]
    assert derive_seed(0, "contradictive", "x") == derive_seed(0, "contradictive", "x") != derive_seed(1, "contradictive", "x")


def test_beam_and_greedy_decoding(tiny_t5):
    gen = registry.load_generator("torch", tiny_t5)
    beams = gen.generate(["A man is sleeping."], 4, Decoding(strategy="beam", max_new_tokens=6), [0])
    assert len(beams[0]) == 4
    g = gen.generate(["A man is sleeping."], 1, Decoding(strategy="greedy", max_new_tokens=6), [0])
    assert g == gen.generate(["A man is sleeping."], 1, Decoding(strategy="greedy", max_new_tokens=6), [99])
    with pytest.raises(ValueError, match="multiple of num_beam_groups"):
        gen.generate(["x"], 4, Decoding(strategy="diverse-beam", num_beams=4, num_beam_groups=3), [0])


def test_diverse_beam_search(tiny_t5):
    """One group without penalty is plain beam search (checked against transformers' generate, 10 and 40 new
    tokens: beams that end at eos and beams cut at the last allowed token); groups with a penalty give n
    candidates, deterministically."""
    import torch

    gen = registry.load_generator("torch", tiny_t5)
    enc = gen.tokenizer(["A man is sleeping near the river."], return_tensors="pt")
    hf = gen.model.generate(**enc, num_beams=4, num_return_sequences=4, do_sample=False, max_new_tokens=10)
    # up to and including eos (transformers pads shorter beams after it), without pad ids, as every decoder returns
    hf_rows = [row[1:].tolist() for row in hf]
    hf_rows = [[t for t in (r[: r.index(1) + 1] if 1 in r else r) if t != 0] for r in hf_rows]
    plain = Decoding(strategy="diverse-beam", num_beams=4, num_beam_groups=1, diversity_penalty=0.0, max_new_tokens=10)
    assert gen.generate_ids(["A man is sleeping near the river."], 4, plain, [0])[0] == hf_rows
    long = Decoding(strategy="diverse-beam", num_beams=4, num_beam_groups=1, diversity_penalty=0.0, max_new_tokens=40)
    prompts = ["A man is sleeping near the river.", "Two dogs run near the river."]
    assert [gen.generate_ids([p], 4, long, [0])[0] for p in prompts] == gen.generate_ids(
        prompts, 4, Decoding(strategy="beam", num_beams=4, max_new_tokens=40), [0, 0])
    d = Decoding(strategy="diverse-beam", max_new_tokens=10, diversity_penalty=2.0)
    a = gen.generate(["A man is sleeping."], 6, d, [0])
    assert len(a[0]) == 6 and a == gen.generate(["A man is sleeping."], 6, d, [1])
    del torch


def test_seq2seq_classifier_score_and_generate(tiny_t5):
    pairs = [(p, h) for p, h, _ in testing.pairs(6)]
    s = registry.load_classifier("torch", tiny_t5)
    g = registry.load_classifier("torch", tiny_t5, method="generate")
    assert s.classify(pairs).logits.shape == g.classify(pairs).logits.shape == (6, 3)
    with pytest.raises(ModelLoadError, match="unknown NLI prompt"):
        registry.load_classifier("torch", tiny_t5, prompt="nope")


def test_parse_nli_answer():
    from breaknli_fast.engines.model_info import parse_nli_answer

    assert parse_nli_answer("Yes") == "entailment" and parse_nli_answer("no") == "contradiction"
    assert parse_nli_answer("not possible to tell") == "neutral" and parse_nli_answer("nobody") == "neutral"
    assert parse_nli_answer("it is not possible to tell") == "neutral"


def test_unknown_engine_and_cuda_without_gpu(tiny_roberta):
    import torch

    with pytest.raises(EngineUnavailable, match="unknown engine"):
        registry.load_classifier("jax", tiny_roberta)
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is present: the no-GPU refusal cannot be checked here")
    with pytest.raises(ModelLoadError, match="no CUDA GPU"):
        registry.load_classifier("torch", tiny_roberta, device="cuda")


def test_torch_workers_bad_value_is_one_line(tiny_roberta, tiny_t5):
    with pytest.raises(ModelLoadError, match="workers must be"):
        registry.load_classifier("torch", tiny_roberta, workers="lots")
    with pytest.raises(ModelLoadError, match=">= 1"):
        registry.load_generator("torch", tiny_t5, workers=0)


HF_DECODINGS = [Decoding(max_new_tokens=12, sampler="transformers"),
                Decoding(top_p=1.0, top_k=0, max_new_tokens=12, sampler="transformers"),
                Decoding(temperature=0.7, max_new_tokens=12, min_new_tokens=3, sampler="transformers")]


@pytest.mark.parametrize("compact", [None, 0.0, 0.25])
@pytest.mark.parametrize("decoding", HF_DECODINGS)
def test_batched_sampling_equals_transformers_generate_per_prompt(tiny_t5, decoding, compact):
    """With the ``transformers`` sampler, prompts sampled together, each under its own generator,
    give exactly what transformers' generate gives for each prompt alone under
    torch.manual_seed(seed) -- also when finished rows are dropped from the batch (compaction)."""
    gen = registry.load_generator("torch", tiny_t5)
    gen.compact_share = compact
    prompts = ["A man is sleeping.", "Two dogs run in the park near the river today.", "A cat.", "The boy reads a book."]
    seeds = [5, 6, 7, 8]
    gen.prompt_batch = 8
    batched = gen.generate_ids(prompts, 5, decoding, seeds)
    assert gen.stats.prompts == 4 and len(gen.stats.call_seconds) == 1
    gen.prompt_batch = 1  # one transformers generate() call per prompt
    assert gen.generate_ids(prompts, 5, decoding, seeds) == batched
    # a prompt's candidates do not depend on its batch neighbours
    gen.prompt_batch = 8
    assert gen.generate_ids(prompts[2:3], 5, decoding, seeds[2:3])[0] == batched[2]


@pytest.mark.parametrize("decoding", [Decoding(max_new_tokens=12), Decoding(top_p=0.5, top_k=5, max_new_tokens=12),
                                      Decoding(temperature=0.7, max_new_tokens=12, min_new_tokens=3)])
def test_fast_sampler_is_seeded_per_prompt_and_compaction_free(tiny_t5, decoding):
    """The fast sampler: the same candidates whatever the batch neighbours, the prompt batch size
    and whether finished rows are dropped from the model batch; different seeds differ; eos is
    never drawn before min_new_tokens."""
    gen = registry.load_generator("torch", tiny_t5)
    prompts = ["A man is sleeping.", "Two dogs run in the park near the river today.", "A cat.", "The boy reads a book."]
    seeds = [5, 6, 7, 8]
    gen.compact_share = None
    ref = gen.generate_ids(prompts, 6, decoding, seeds)
    for compact, batch in ((0.0, 8), (0.25, 3), (0.25, 1)):
        gen.compact_share, gen.prompt_batch = compact, batch
        assert gen.generate_ids(prompts, 6, decoding, seeds) == ref
    assert gen.generate_ids(prompts[1:2], 6, decoding, [99])[0] != ref[1]
    eos = gen.config.eos_token_id
    if decoding.top_p > 0.9:  # really sampled (a tiny random model is peaked under top-p 0.5)
        assert any(len({tuple(r) for r in rows}) > 1 for rows in ref)
    for rows in ref:
        for r in rows:
            assert len(r) <= 12 and (eos not in r or r.index(eos) == len(r) - 1)
            assert eos not in r[: decoding.min_new_tokens]


def test_fast_sampler_keeps_the_transformers_top_k_top_p_support():
    """The candidates the fast sampler can draw are exactly the tokens transformers' top-k and
    top-p warpers keep, with the same renormalised probabilities."""
    import torch
    from transformers.generation.logits_process import TopKLogitsWarper, TopPLogitsWarper

    from breaknli_fast.engines.sampling import fast_candidates, fast_draw

    g = torch.Generator().manual_seed(0)
    scores = torch.randn(16, 300, generator=g) * 3
    for top_k, top_p in ((50, 0.95), (10, 0.5), (300, 0.9), (7, 1.0)):
        d = Decoding(top_k=top_k, top_p=top_p)
        idx, cdf = fast_candidates(scores, d)
        hf = TopPLogitsWarper(top_p=top_p)(None, TopKLogitsWarper(top_k=top_k)(None, scores.clone())) if top_p < 1 \
            else TopKLogitsWarper(top_k=top_k)(None, scores.clone())
        hf_probs = torch.softmax(hf, dim=-1)
        probs = torch.diff(cdf, dim=1, prepend=torch.zeros(16, 1))
        ours = torch.zeros_like(hf_probs).scatter_(1, idx, probs / cdf[:, -1:])
        assert torch.equal(ours > 0, hf_probs > 0)
        assert torch.allclose(ours, hf_probs, atol=1e-5)
        u = torch.rand(16, generator=g)
        drawn = fast_draw(idx, cdf, u)
        assert bool((hf_probs.gather(1, drawn[:, None]) > 0).all())


def test_max_length_below_the_model_limit_is_kept_and_recorded(tiny_roberta, tiny_t5):
    clf = registry.load_classifier("torch", tiny_roberta, max_length=64)
    assert clf.max_length == 64
    assert {k: clf.info.details[k] for k in ("max_length", "max_length_requested", "model_max_length")} == {
        "max_length": 64, "max_length_requested": 64, "model_max_length": 128}
    s2s = registry.load_classifier("torch", tiny_t5, max_length=64)
    assert s2s.max_length == 64 and s2s.info.details["max_length"] == 64
    gen = registry.load_generator("torch", tiny_t5)
    assert gen.max_input_length == 256 and gen.info.details["max_input_length"] == 256


def test_unknown_options_are_one_line_naming_the_valid_ones(tiny_roberta, tiny_t5):
    from breaknli_fast.engines.options import EngineOptionError

    with pytest.raises(EngineOptionError, match=r"unknown torch classifier option 'max_lenght'; valid: .*max_length") as ei:
        registry.load_classifier("torch", tiny_roberta, max_lenght=64)
    assert "\n" not in str(ei.value)
    with pytest.raises(EngineOptionError, match="unknown torch generator option 'max_batch'"):
        registry.load_generator("torch", tiny_t5, max_batch=8)


def test_options_are_typed_per_backend_and_go_to_the_roles_that_take_them():
    from breaknli_fast.engines.options import EngineOptionError
    from breaknli_fast.backends.ort.engine import OrtOptions
    from breaknli_fast.backends.tensorrt.engine import TensorRTOptions
    from breaknli_fast.backends.pytorch.engine import TorchOptions
    from breaknli_fast.export.api import EXPORT_OPTS

    o = OrtOptions.build("generator", {"graph_topk": "false", "validate": False, "threads": 2})
    assert o.graph_topk is False and o.export.validate is False and o.threads == 2 and o.max_input_length == 256
    assert set(EXPORT_OPTS) <= set(OrtOptions.keys("classifier")) and set(EXPORT_OPTS) <= set(TensorRTOptions.keys("classifier"))
    assert "graph_topk" not in OrtOptions.keys("classifier") and "max_batch" not in TorchOptions.keys("generator")
    clf, gen = registry.split_options("ort", {"max_batch": 8, "graph_topk": False, "threads": 2, "validate": False,
                                              "gen.prompt_batch": 4, "clf.max_length": 64})
    assert clf == {"max_batch": 8, "threads": 2, "validate": False, "max_length": 64}
    assert gen == {"graph_topk": False, "threads": 2, "validate": False, "prompt_batch": 4}
    with pytest.raises(EngineOptionError, match="unknown torch option 'graph_topk'"):
        registry.split_options("torch", {"graph_topk": False})


def test_an_engine_with_only_the_protocol_gets_the_optional_members():
    """The registry completes an engine that implements only the Classifier / Generator protocols with the
    defaults of the contract's optional members (what the bench calls)."""
    registry.register("words", "tests.plugins.word_engine")
    try:
        clf, gen = registry.load_classifier("words", "any"), registry.load_generator("words", "any")
    finally:
        registry._ENGINES.pop("words", None)  # the registry has no removal: a test cleans up after itself
    assert clf.info.engine == gen.info.engine == "words" and clf.stats is None and gen.stats is None
    clf.clear_cache()
    clf.reset_stats()
    gen.reset_stats()
    assert clf.classify([("A man sleeps.", "A man sleeps.")]).labels == ["entailment"]
    assert gen.generate_ids(["Rewrite: A man sleeps."], 1, Decoding(), [0]) is None
    assert gen.count_tokens(["a b c"]) == 3


def test_the_shared_export_code_imports_no_backend_and_the_engines_import_neither():
    """Layering: export/ (what every format shares) reaches a backend's exporter only through the registry (never
    an import), the shared engine code imports neither export/ nor a backend, and each backend's files stay in its
    folder (a backend may use another's exporter, as tensorrt builds on the ort backend's ONNX graph)."""
    from tests.test_imports import import_graph

    graph = import_graph()
    for mod, deps in graph.items():
        if mod.startswith("breaknli_fast.export"):
            assert not {d for d in deps if d.startswith("breaknli_fast.backends")}, mod
        if mod.startswith("breaknli_fast.engines"):
            assert not {d for d in deps if d.startswith(("breaknli_fast.export", "breaknli_fast.backends"))}, mod
    assert {m for m in graph if m.startswith("breaknli_fast.backends.")} >= {
        "breaknli_fast.backends.ort.engine", "breaknli_fast.backends.ort.exporter", "breaknli_fast.backends.pytorch",
        "breaknli_fast.backends.tensorrt.exporter", "breaknli_fast.backends.ct2.exporter"}


def test_what_no_machine_of_the_project_ran_says_so_from_its_declaration():
    """ONNX Runtime's CUDA providers and TensorRT are offered "not verified on a GPU": the declarations say which,
    and the bench's note is built from them (no backend named outside its folder)."""
    from breaknli_fast.bench.runner import _unverified

    assert _unverified("ort", "cuda") and _unverified("tensorrt", "cuda")
    assert not _unverified("ort", "cpu") and not _unverified("torch", "cuda") and not _unverified("cudagraph", "cuda")
