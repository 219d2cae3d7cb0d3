"""The ``ort`` engine against the torch fp32 reference: classifier parity per family, Flan-T5 as
classifier, generator identity (greedy, seeded sampling, beam) at fp32, lower precisions, export on
first use through the cache, and the one-line errors. CPU only, offline, tiny models.

Every tolerance here holds on any x86-64 CPU (Intel or AMD, with or without AVX-512 VNNI): fp32
engines differ by rounding (a few 1e-6 on these logits), far below the asserted bounds and the
models' label margins; fp16 is judged by a bound set by the format's precision. int8 on random
weights is compared with itself only: ONNX Runtime's u8s8 kernels saturate 16-bit sums on CPUs
without VNNI, so its numbers, and the near-tied labels of a random model, depend on the CPU. The
int8 agreement target is asserted on the trained mini-nli (tests/test_mini_models.py)."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnxruntime")

import tiny_models as testing  # noqa: E402
from breaknli_fast.engines import registry  # noqa: E402
from breaknli_fast.engines.base import Decoding, derive_seed  # noqa: E402
from breaknli_fast.engines.model_info import ModelLoadError  # noqa: E402
from breaknli_fast.engines.registry import EngineUnavailable  # noqa: E402

FAMILIES = ("roberta", "bart", "distilbart", "deberta", "deberta-v2")
CAL = [(p, h) for p, h, _ in testing.pairs(24, seed=5)]
PAIRS = [(p, h) for p, h, _ in testing.pairs(40, seed=11)]
# Export validation meant for random weights: no label or greedy-token agreement gate (near-tied
# logits make those figures depend on the CPU's kernels at fp16/int8); outputs must still be finite.
RANDOM_WEIGHTS = {"max_abs_logit": None, "min_agreement": None, "min_token_agreement": None}
# fp16 logits differ from fp32 by what fp16's 11-bit mantissa loses through a few layers: 3e-3 of
# the logit scale at most on these models (and CPUs); a bound of 5e-2 of the scale cannot be met by
# a broken conversion and cannot be missed on another CPU.
FP16_REL = 5e-2


def _margins(logits) -> np.ndarray:
    """Each row's gap between its two largest logits (a label can only change where an error of
    half this size reaches it)."""
    top = np.sort(np.asarray(logits), axis=1)
    return top[:, -1] - top[:, -2]


@pytest.fixture(scope="session")
def ort_models(tiny_dir) -> dict[str, str]:
    """The same tiny models as tests/test_export.py (built once per session, shared folder)."""
    root = tiny_dir / "export-models"
    out = {}
    for fam in FAMILIES:
        d = root / fam
        if not (d / "model.safetensors").exists():
            testing.make_tiny_classifier(d, fam, init_std=0.3)
        out[fam] = str(d)
    if not (root / "t5" / "model.safetensors").exists():
        testing.make_tiny_t5(root / "t5")
    out["t5"] = str(root / "t5")
    return out


@pytest.fixture(autouse=True)
def _cache_root(tiny_dir, monkeypatch):
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tiny_dir / "cache-root"))


def _opts(tiny_dir, **kw):
    return {"cache_dir": tiny_dir / "export-cache", "calibration_pairs": CAL, "validation_size": 16, **kw}


@pytest.mark.parametrize("family", FAMILIES)
def test_ort_fp32_classifier_matches_torch(ort_models, tiny_dir, family):
    loop_opts = dict(label_map=None, max_length=128, token_budget=600, max_batch=16)
    ref = registry.load_classifier("torch", ort_models[family], **loop_opts)
    clf = registry.load_classifier("ort", ort_models[family], precision="fp32", **loop_opts, **_opts(tiny_dir))
    a, b = ref.classify(PAIRS), clf.classify(PAIRS)
    # fp32 against fp32: 2e-6 to 5e-6 apart (rounding order of the kernels), 20x below the bound
    assert float(np.abs(a.logits - b.logits).max()) <= 1e-4
    # the smallest top-two margin of these models on PAIRS is 9e-3 (deberta), 45x twice the bound
    # above, so no CPU's rounding can flip a label
    assert (a.label_ids == b.label_ids).all()
    assert len(set(a.labels)) >= 2  # the tiny model's labels do vary, so agreement means something
    d = clf.info.details
    assert clf.info.engine == "ort" and d["providers"] == ["CPUExecutionProvider"]
    assert d["graph_optimization"] == "all" and d["intra_op_threads"] >= 1
    assert d["validation"]["passed"] and d["export_dir"]
    # each call is tokenized once; every batch is padded from those tokens exactly as the tokenizer pads to the
    # width its longest pair's length decides (on the CPU that length itself: length_step 1)
    from breaknli_fast.backends.ort.runtime import classifier_feeds

    assert clf.length_step == 1 and d["length_step"] == 1
    batch = PAIRS[3:11]
    longest = max(len(x) for x in clf._tokenize(batch)["input_ids"])
    width = clf._width(longest)
    assert width == longest
    want = classifier_feeds(clf.tokenizer, batch, clf.inputs, width, padding="max_length")
    got = clf._feeds(clf._tokenize(PAIRS), range(3, 11))
    assert sorted(got) == sorted(want) and all(np.array_equal(got[k], want[k]) for k in want)
    assert ref._width(longest) % 8 == 0  # the torch engine keeps multiples of 8
    want_pt = ref.tokenizer([p for p, _ in batch], [h for _, h in batch], padding="max_length", truncation=True,
                            max_length=ref._width(longest), return_tensors="pt")
    got_pt = ref._feeds(ref._tokenize(PAIRS), range(3, 11))
    assert sorted(got_pt) == sorted(want_pt) and all((got_pt[k] == want_pt[k]).all() for k in want_pt)


@pytest.mark.parametrize("family", ["roberta", "deberta-v2"])
def test_ort_int8_and_fp16_classifiers_run(ort_models, tiny_dir, family):
    """fp16 stays within its precision bound of the torch fp32 logits, and its labels change only
    where that error can reach; int8 (random weights: compared with itself) is finite, deterministic
    and labels by its own argmax."""
    ref = registry.load_classifier("torch", ort_models[family]).classify(PAIRS)
    for precision in ("int8", "fp16"):
        clf = registry.load_classifier("ort", ort_models[family], precision=precision,
                                       **_opts(tiny_dir, tolerances=RANDOM_WEIGHTS))
        out = clf.classify(PAIRS)
        assert np.isfinite(out.logits).all()
        assert (out.label_ids == out.logits.argmax(1)).all()
        assert clf.info.details["variant"] == {"int8": "int8-dynamic", "fp16": "fp16"}[precision]
        assert 0.0 <= clf.info.details["validation"]["agreement"] <= 100.0
        if precision == "int8":
            # the same pairs in the same batches again: identical logits (int8 is deterministic)
            np.testing.assert_array_equal(clf.classify(PAIRS).logits, out.logits)
            continue
        err = float(np.abs(out.logits - ref.logits).max())
        assert err <= FP16_REL * max(1.0, float(np.abs(ref.logits).max()))  # 7e-3 measured, bound 0.13
        reachable = _margins(ref.logits) <= 2 * err
        assert (out.label_ids == ref.label_ids)[~reachable].all()


def test_export_on_first_use_then_reuse(ort_models, tmp_path):
    opts = {"cache_dir": tmp_path / "cache", "calibration_pairs": CAL, "validation_size": 8}
    first = registry.load_classifier("ort", ort_models["bart"], **opts)
    second = registry.load_classifier("ort", ort_models["bart"], **opts)
    assert not first.info.details["export_reused"] and second.info.details["export_reused"]
    assert first.info.details["export_dir"] == second.info.details["export_dir"]


def test_ort_seq2seq_classifier_matches_torch(ort_models, tiny_dir):
    for method in ("score", "generate"):
        kw = dict(prompt="infer", method=method, max_length=256, token_budget=2048, max_batch=8, label_map=None)
        ref = registry.load_classifier("torch", ort_models["t5"], **kw)
        clf = registry.load_classifier("ort", ort_models["t5"], **kw, **_opts(tiny_dir))
        some = PAIRS[:16] if method == "score" else PAIRS[:6]
        a, b = ref.classify(some), clf.classify(some)
        # fp32 against fp32: 3e-6 apart ('generate' scores are 0/1 indicators: equal), 300x below
        assert float(np.abs(a.logits - b.logits).max()) <= 1e-3
        assert (a.label_ids == b.label_ids).all()  # answer-score margins are >= 5.8e-2 here
        assert clf.info.details["kind"] == "seq2seq" and clf.info.details["method"] == method


PROMPTS = [
    "Generate a statement that contradicts the following statement: A man is sleeping in the park.",
    "Rephrase the following sentence while preserving its original meaning: Two dogs run near the river.",
]


@pytest.fixture(scope="module")
def generators(ort_models, tiny_dir):
    mp = pytest.MonkeyPatch()
    mp.setenv("BREAKNLI_FAST_CACHE", str(tiny_dir / "cache-root"))
    torch_gen = registry.load_generator("torch", ort_models["t5"])
    ort_gen = registry.load_generator("ort", ort_models["t5"], precision="fp32", max_input_length=256, workers=1,
                                     **_opts(tiny_dir))
    yield torch_gen, ort_gen
    mp.undo()


@pytest.mark.parametrize("decoding,n", [(Decoding(strategy="greedy"), 1), (Decoding(), 20),
                                        (Decoding(sampler="transformers"), 20), (Decoding(strategy="beam"), 4),
                                        (Decoding(strategy="diverse-beam", max_new_tokens=12), 4)])
def test_ort_fp32_generator_identical_to_torch(generators, decoding, n):
    """Identical token ids: the fp32 engines' logits differ by rounding (~3e-6 on any CPU). A greedy
    or beam choice changes only where two candidates' scores are that close (the greedy top-two gaps
    on these prompts are >= 2e-2), a seeded draw only where it falls that close to a boundary of the
    cumulative distribution (odds of about 1e-6 per token)."""
    torch_gen, ort_gen = generators
    seeds = [derive_seed(7, "gen", i) for i in range(len(PROMPTS))]
    a = torch_gen.generate_ids(PROMPTS, n, decoding, seeds)
    b = ort_gen.generate_ids(PROMPTS, n, decoding, seeds)
    assert a == b
    assert all(len(rows) == n for rows in b)
    if decoding.strategy == "sampling":
        assert len({tuple(r) for r in b[0]}) > 1  # really sampled
    assert ort_gen.info.engine == "ort" and ort_gen.info.role == "generator"
    assert ort_gen.info.details["intra_op_spinning"] is False  # sessions of per-token runs do not spin
    assert ort_gen.count_tokens(["a b c"]) == torch_gen.count_tokens(["a b c"])


def test_the_stepper_on_full_logits_samples_the_same(generators):
    """The fast sampler on the decoder graph's full logits (graph_topk off: torch.topk over them) draws what it
    draws on the graph's own top-k and what the torch engine draws: one decoder graph, two outputs."""
    from breaknli_fast.engines.sampling import sample

    torch_gen, ort_gen = generators
    d = Decoding(max_new_tokens=16)
    seeds = [derive_seed(3, "gen", i) for i in range(len(PROMPTS))]
    ref = ort_gen.generate_ids(PROMPTS, 12, d, seeds)
    enc = ort_gen.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    cfg = ort_gen.config
    stepper = ort_gen.stepper.fork()
    stepper.supports_topk = False
    got = sample(stepper, enc["input_ids"], enc["attention_mask"], 12, d, seeds,
                 int(cfg.decoder_start_token_id or 0), int(cfg.eos_token_id), int(ort_gen.tokenizer.pad_token_id),
                 compact_share=0.0)
    assert got == ref == torch_gen.generate_ids(PROMPTS, 12, d, seeds)


@pytest.mark.parametrize("decoding", [Decoding(max_new_tokens=16), Decoding(max_new_tokens=16, min_new_tokens=5),
                                      Decoding(max_new_tokens=16, top_k=7, top_p=0.8, temperature=0.7)])
def test_step_graphs_sample_what_the_torch_engine_samples(generators, decoding):
    """On the CPU the fast sampler with top-k runs the export's step graphs (per-prompt cross
    attention, top-k in the graph): the same candidates as the torch engine, with compaction, with
    eos held back by min_new_tokens (the graph's top k + 1 without eos) and with temperature."""
    from breaknli_fast.engines.sampling import sample

    torch_gen, ort_gen = generators
    stepper = ort_gen.stepper
    assert stepper.supports_topk
    seeds = [derive_seed(5, "gen", i) for i in range(len(PROMPTS))]
    ref = torch_gen.generate_ids(PROMPTS, 10, decoding, seeds)
    calls = []
    real = stepper.step_topk

    def counting(*args):
        calls.append(1)
        return real(*args)

    stepper.step_topk = counting
    try:
        assert ort_gen.generate_ids(PROMPTS, 10, decoding, seeds) == ref
    finally:
        del stepper.step_topk
    assert calls  # the graph's top-k served the fast sampler
    if decoding.min_new_tokens:
        assert all(len(r) >= decoding.min_new_tokens for rows in ref for r in rows)
    enc = ort_gen.tokenizer(PROMPTS, return_tensors="pt", padding=True)
    cfg = ort_gen.config
    args = (enc["input_ids"], enc["attention_mask"], 10, decoding, seeds, int(cfg.decoder_start_token_id or 0),
            int(cfg.eos_token_id), int(ort_gen.tokenizer.pad_token_id))
    assert sample(stepper, *args, compact_share=None) == ref  # no compaction: the same draws
    assert sample(stepper, *args, compact_share=0.0) == ref  # compaction at every finished row
    # top-k 0 (the whole vocabulary) takes the graph's full logits through step()
    d = Decoding(max_new_tokens=12, top_k=0)
    assert ort_gen.generate_ids(PROMPTS, 6, d, seeds) == torch_gen.generate_ids(PROMPTS, 6, d, seeds)


def test_a_call_smaller_than_the_batch_still_gives_each_core_a_batch(generators, ort_models, tiny_dir):
    """On the CPU the ort generator cuts a call of 2+ prompts into at least 2 batches (one per core when its
    workers run them side by side), whatever --workers is; fp32 candidates stay the torch engine's."""
    torch_gen, ort_gen = generators
    assert ort_gen.min_batches == 2 and ort_gen.info.details["min_batches"] == 2
    d = Decoding(max_new_tokens=6)
    prompts = [f"{p} ({i})" for i in range(2) for p in PROMPTS]
    seeds = [derive_seed(4, i) for i in range(len(prompts))]
    before = len(ort_gen.stats.call_seconds)
    assert ort_gen.generate_ids(prompts, 3, d, seeds) == torch_gen.generate_ids(prompts, 3, d, seeds)
    assert len(ort_gen.stats.call_seconds) - before == 2  # 4 prompts under --gen-batch 8: two batches of 2
    one = registry.load_generator("ort", ort_models["t5"], precision="fp32", min_batches=1, **_opts(tiny_dir))
    assert one.generate_ids(prompts, 3, d, seeds) == torch_gen.generate_ids(prompts, 3, d, seeds)
    assert len(one.stats.call_seconds) == 1
    with pytest.raises(ModelLoadError, match="min_batches must be a whole number"):
        registry.load_generator("ort", ort_models["t5"], precision="fp32", min_batches=0, **_opts(tiny_dir))


def test_rows_of_a_prompt_split_over_batches_get_the_same_tokens(generators):
    """The fast sampler on a subset of a batch's rows (how a generator splits a prompt's rows over two batches so
    that its workers finish together) gives each row the tokens it gets in the whole batch, on both steppers."""
    from breaknli_fast.engines.sampling import TorchStepper, sample

    torch_gen, ort_gen = generators
    prompts = [f"{p} ({i})" for i in range(3) for p in PROMPTS][:5]
    seeds = [derive_seed(6, i) for i in range(len(prompts))]
    d = Decoding(max_new_tokens=10, min_new_tokens=2)
    enc = ort_gen.tokenizer(prompts, return_tensors="pt", padding=True)
    cfg = ort_gen.config
    args = (enc["input_ids"], enc["attention_mask"], 4, d, seeds, int(cfg.decoder_start_token_id or 0),
            int(cfg.eos_token_id), int(ort_gen.tokenizer.pad_token_id))
    for stepper in (ort_gen.stepper.fork(), TorchStepper(torch_gen.model)):
        whole = sample(stepper, *args)
        flat = [r for rows in whole for r in rows]
        for subset in ([0, 1, 2, 3, 4, 5], [6, 7, 9, 10, 11, 12, 13, 19], [17], list(range(20))):
            got = sample(stepper, *args, rows=subset, compact_share=0.0)
            assert [r for rows in got for r in rows] == [flat[i] for i in subset]
            assert [len(rows) for rows in got] == [sum(1 for i in subset if i // 4 == e) for e in range(5)]
        with pytest.raises(ValueError, match="ascending"):
            sample(stepper, *args, rows=[3, 1])
    assert whole == torch_gen.generate_ids(prompts, 4, d, seeds)
    with pytest.raises(ValueError, match="fast sampler"):
        sample(TorchStepper(torch_gen.model), *args[:3], Decoding(sampler="transformers"), *args[4:], rows=[0])
    # a call of 5 prompts x 4 on the ort engine: two batches of 10 rows, prompt 2 in both; the torch engine's tokens
    before = len(ort_gen.stats.call_seconds)
    assert ort_gen.generate_ids(prompts, 4, d, seeds) == whole
    assert len(ort_gen.stats.call_seconds) - before == 2


def test_large_prompt_batches_use_the_step_graphs(generators):
    """A batch of many prompts still samples through the step graphs (each row attends to its own prompt's
    keys only, so the cost per prompt does not grow with the batch): the same candidates as the torch engine
    and as smaller batches, with rows finishing unevenly across prompts (compaction regroups them)."""
    torch_gen, ort_gen = generators
    prompts = [f"{p} ({i})" for i in range(9) for p in PROMPTS]
    seeds = [derive_seed(2, i) for i in range(len(prompts))]
    d = Decoding(max_new_tokens=6)
    ref = torch_gen.generate_ids(prompts, 3, d, seeds)
    old = ort_gen.prompt_batch
    try:
        ort_gen.prompt_batch = len(prompts)
        assert ort_gen.generate_ids(prompts, 3, d, seeds) == ref
        ort_gen.prompt_batch = 5
        assert ort_gen.generate_ids(prompts, 3, d, seeds) == ref
    finally:
        ort_gen.prompt_batch = old


def test_graph_topk_can_be_switched_off(generators, ort_models, tiny_dir):
    torch_gen, _ = generators
    gen = registry.load_generator("ort", ort_models["t5"], precision="fp32", graph_topk="false", **_opts(tiny_dir))
    assert not gen.stepper.supports_topk and gen.info.details["graph_topk"] is False
    d = Decoding(max_new_tokens=12)
    assert gen.generate_ids(PROMPTS, 5, d, [8, 9]) == torch_gen.generate_ids(PROMPTS, 5, d, [8, 9])
    with pytest.raises(ModelLoadError, match="true or false"):
        registry.load_generator("ort", ort_models["t5"], precision="fp32", graph_topk="maybe", **_opts(tiny_dir))


def test_fp16_t5_export_samples_and_keeps_t5s_fp32_nodes(ort_models, tiny_dir):
    """fp16 T5 graphs (the recipe keeps wo, the residual stream and the RMS norms in fp32, found by name in the
    step decoder too) sample on the graph's top-k, with finite scores."""
    gen = registry.load_generator("ort", ort_models["t5"], precision="fp16", **_opts(tiny_dir, tolerances=RANDOM_WEIGHTS))
    assert gen.stepper.supports_topk and gen.info.details["variant"] == "fp16"
    out = gen.generate_ids(PROMPTS, 4, Decoding(max_new_tokens=8), [1, 2])
    assert [len(rows) for rows in out] == [4, 4]
    figs = gen.info.details["validation"]
    assert figs["step_graphs"]["nonfinite"] == 0 and figs["generation"]["token_agreement"] >= 0
    from breaknli_fast.export import manifest as mf

    graphs = mf.read_manifest(gen.info.details["export_dir"])["fp16"]["graphs"]
    layers = gen.config.num_decoder_layers
    # per decoder layer: wo, 2 + 1 residual additions, 3 RMS norms (several nodes each), and the final norm
    assert graphs["step_decoder_model.onnx"]["fp32_nodes"] >= layers * (1 + 3 + 3) + 1


def test_ort_int8_generator_greedy_agreement(ort_models, tiny_dir):
    seeds = [0] * len(PROMPTS)
    ref = registry.load_generator("torch", ort_models["t5"]).generate_ids(PROMPTS, 1, Decoding(strategy="greedy"), seeds)
    gen = registry.load_generator("ort", ort_models["t5"], precision="int8", **_opts(tiny_dir, tolerances=RANDOM_WEIGHTS))
    out = gen.generate_ids(PROMPTS, 1, Decoding(strategy="greedy"), seeds)
    assert all(len(r[0]) > 0 for r in out)
    assert len(ref) == len(out)
    # at int8 the spec asks for greedy token agreement to be reported, not for identity; a random
    # tiny T5 diverges after the first differing token, and where that token is depends on the CPU's
    # int8 kernels (VNNI or not), so no threshold here
    # the lean CPU stepper samples from the int8 graphs, deterministically (dynamic quantization
    # scales activations per batch, so unlike fp32 the tokens may depend on the batch's make-up)
    d = Decoding(max_new_tokens=12)
    sampled = gen.generate_ids(PROMPTS, 8, d, [3, 4])
    assert gen.generate_ids(PROMPTS, 8, d, [3, 4]) == sampled and all(len(r) == 8 for r in sampled)
    gen_figs = gen.info.details["validation"]["generation"]
    assert 0.0 <= gen_figs["token_agreement"] <= 100.0 and gen.info.details["variant"] == "int8-dynamic"


def test_cuda_without_gpu_is_one_line(ort_models):
    import onnxruntime as ort

    if "CUDAExecutionProvider" in ort.get_available_providers():
        pytest.skip("onnxruntime-gpu is installed: the refusal cannot be observed here")
    for load in (registry.load_classifier, registry.load_generator):
        model = ort_models["roberta"] if load is registry.load_classifier else ort_models["t5"]
        with pytest.raises(EngineUnavailable) as ei:
            load("ort", model, device="cuda")
        msg = str(ei.value)
        assert "\n" not in msg and "onnxruntime-gpu" in msg and "--device cuda" in msg


def test_cuda_provider_runs_when_present(ort_models, tiny_dir):
    import onnxruntime as ort

    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.skip("needs onnxruntime-gpu and a CUDA GPU")
    clf = registry.load_classifier("ort", ort_models["roberta"], device="cuda", **_opts(tiny_dir))
    ref = registry.load_classifier("torch", ort_models["roberta"]).classify(PAIRS)
    out = clf.classify(PAIRS)
    # CUDA kernels (TF32 where the GPU has it) round differently from the CPU: judged like fp16, with
    # labels compared where that difference cannot reach
    err = float(np.abs(out.logits - ref.logits).max())
    assert err <= FP16_REL * max(1.0, float(np.abs(ref.logits).max()))
    assert (out.label_ids == ref.label_ids)[_margins(ref.logits) > 2 * err].all()


def test_bad_precision_and_device(ort_models):
    with pytest.raises(ModelLoadError, match="fp32, fp16 or int8"):
        registry.load_classifier("ort", ort_models["roberta"], precision="bf16")
    with pytest.raises(ModelLoadError, match="unknown device"):
        registry.load_classifier("ort", ort_models["roberta"], device="tpu")
    with pytest.raises(ModelLoadError, match="cannot generate"):
        registry.load_generator("ort", ort_models["roberta"])


def test_classifier_batch_size_defaults(ort_models, tiny_dir):
    """Without max_batch the classifiers on the CPU batch 16 pairs (ort) and 32 (torch), the sizes that
    ran fastest there; an explicit max_batch wins; the value is in the engine's details."""
    opts = _opts(tiny_dir)
    pairs = PAIRS + [(h, p) for p, h in PAIRS]
    # multiples of 8 as widths, so that the pairs fill batches of 16 (exact widths split them by length)
    ort = registry.load_classifier("ort", ort_models["roberta"], precision="fp32", workers=1, length_step=8, **opts)
    assert ort.max_batch == 16 and ort.info.details["max_batch"] == 16
    ref = registry.load_classifier("torch", ort_models["roberta"], precision="fp32")
    assert ref.max_batch == 32 and ref.info.details["max_batch"] == 32
    big = registry.load_classifier("ort", ort_models["roberta"], precision="fp32", workers=1, max_batch=40,
                                   length_step=8, **opts)
    assert big.max_batch == 40
    a, b = ort.classify(pairs * 3), big.classify(pairs * 3)
    assert ort.stats.batches > big.stats.batches
    # other batches pad to other lengths: fp32 rounding at most (0 measured; logits of scale 2.6)
    np.testing.assert_allclose(a.logits, b.logits, atol=1e-5)


def test_length_step_sets_the_padded_widths(ort_models, tiny_dir):
    """On the CPU the classifier pads a pair to its own length (length_step 1); length_step=8 pads to multiples of 8,
    and the answers move by fp32 rounding at most (other widths, other reduction lengths); a bad step is one line."""
    opts = _opts(tiny_dir)
    pairs = PAIRS + [(h, p) for p, h in PAIRS]
    exact = registry.load_classifier("ort", ort_models["roberta"], precision="fp32", **opts)
    eights = registry.load_classifier("ort", ort_models["roberta"], precision="fp32", length_step=8, **opts)
    assert (exact.length_step, eights.length_step, eights.info.details["length_step"]) == (1, 8, 8)
    a, b = exact.classify(pairs), eights.classify(pairs)
    lengths = [len(x) for x in exact._tokenize(pairs)["input_ids"]]
    assert exact.stats.work.padded_tokens == exact.stats.work.tokens < eights.stats.work.padded_tokens
    assert set(exact.stats.work.by_width) == {str(n) for n in lengths}
    assert all(int(w) % 8 == 0 for w in eights.stats.work.by_width)
    np.testing.assert_allclose(a.logits, b.logits, atol=1e-5)
    for bad in (0, 65, "wide"):
        with pytest.raises(ModelLoadError, match="length_step must be a whole number from 1 to 64"):
            registry.load_classifier("ort", ort_models["roberta"], precision="fp32", length_step=bad, **opts)


def test_workers_change_nothing_but_the_threads(ort_models, tiny_dir):
    """Batches on two worker threads (one intra-op thread each) give exactly what one worker on one
    thread gives, for the int8 graphs too (the batches are the same), for both engines: classifier
    logits, and sampled candidates over several prompt batches with compaction (each worker steps its
    own fork of the stepper over the shared sessions). Both sides run every batch on one intra-op
    thread: the kernels' results may depend on the thread count (torch's fp32 logits on 2 threads
    differ from 1 thread by 2e-6 here), never on which worker runs a batch, so the equality is exact
    on any CPU. The int8 export is the engine compared with itself (random-weight tolerances)."""
    opts = _opts(tiny_dir, tolerances=RANDOM_WEIGHTS)
    loop_opts = dict(max_length=128, token_budget=300, max_batch=8)
    pairs = PAIRS + [(h, p) for p, h in PAIRS]
    prompts = [f"Generate a statement that contradicts the following statement: {h}" for _, h in PAIRS[:7]]
    seeds = [derive_seed(9, "w", i) for i in range(len(prompts))]
    d = Decoding(max_new_tokens=12)
    for engine, precision in (("ort", "int8"), ("torch", "fp32")):
        extra = opts if engine == "ort" else {}
        one = registry.load_classifier(engine, ort_models["roberta"], precision=precision, threads=1, workers=1,
                                       **loop_opts, **extra)
        two = registry.load_classifier(engine, ort_models["roberta"], precision=precision, threads=2, workers=2,
                                       **loop_opts, **extra)
        assert (one.workers.n, two.workers.n) == (1, 2) and two.info.details["workers"] == 2
        a, b = one.classify(pairs), two.classify(pairs)
        assert two.stats.batches == one.stats.batches > 2
        # the ort classifier's batches come in pairs on the CPU whatever the workers (the torch reference's do not)
        assert one.batch_multiple == two.batch_multiple == (2 if engine == "ort" else 1)
        if engine == "ort":
            assert one.stats.batches % 2 == 0 and one.info.details["batch_multiple"] == 2
        np.testing.assert_array_equal(a.logits, b.logits)
        g1 = registry.load_generator(engine, ort_models["t5"], precision=precision, threads=1, workers=1,
                                     prompt_batch=2, **extra)
        g2 = registry.load_generator(engine, ort_models["t5"], precision=precision, threads=2, workers=2,
                                     prompt_batch=2, **extra)
        assert g2.info.details["workers"] == 2
        ref = g1.generate_ids(prompts, 6, d, seeds)
        assert g2.generate_ids(prompts, 6, d, seeds) == ref
        assert g2.generate_ids(prompts, 6, d, seeds) == ref  # the forks again, their state reset
        assert len({tuple(r) for r in ref[0]}) > 1
        assert g2.stats.prompts == 2 * len(prompts) and len(g2.stats.call_seconds) == 8  # 42 rows in 4 batches of 10 or 11, twice


def test_workers_split_and_batches():
    from breaknli_fast.engines.batching import split_threads
    from breaknli_fast.engines.generation import HFGenerator

    assert split_threads(2, None) == split_threads(2, "auto") == (2, 1)
    assert split_threads(1, "auto") == (1, 1) and split_threads(8, "auto") == (2, 4)
    assert split_threads(4, 8) == (4, 1) and split_threads(6, 4) == (4, 1) and split_threads(4, "1") == (1, 4)
    with pytest.raises(ValueError, match="workers"):
        split_threads(2, "many")
    with pytest.raises(ValueError, match=">= 1"):
        split_threads(2, 0)
    assert HFGenerator._batches(11, 8) == [(0, 6), (6, 11)]
    assert HFGenerator._batches(16, 8) == [(0, 8), (8, 16)]
    assert HFGenerator._batches(3, 1) == [(0, 1), (1, 2), (2, 3)]
    assert HFGenerator._batches(0, 8) == []
    # at least min_batches, never more than the prompts
    assert HFGenerator._batches(5, 8, 2) == [(0, 2), (2, 5)] and HFGenerator._batches(1, 8, 2) == [(0, 1)]
    assert HFGenerator._batches(20, 8, 2) == HFGenerator._batches(20, 8)
    # the fast sampler's batches: near-equal rows, a prompt's rows split where needed
    assert HFGenerator._row_batches(5, 20, 8, 2) == [(0, 3, list(range(0, 50)), 2), (2, 5, list(range(10, 60)), 3)]
    assert HFGenerator._row_batches(8, 20, 8, 2) == [(0, 4, None, 4), (4, 8, None, 4)]  # whole prompts when even
    assert HFGenerator._row_batches(1, 20, 8, 2) == [(0, 1, list(range(10)), 0), (0, 1, list(range(10, 20)), 1)]
    assert HFGenerator._row_batches(1, 1, 8, 2) == [(0, 1, None, 1)]  # never more batches than rows
    assert HFGenerator._row_batches(0, 20, 8, 2) == []
    for count, n, per_call, least in ((11, 20, 8, 2), (7, 6, 2, 2), (3, 5, 1, 1), (40, 3, 16, 2), (9, 20, 4, 2)):
        plan = HFGenerator._row_batches(count, n, per_call, least)
        sizes = [len(r) if r is not None else (j - i) * n for i, j, r, _ in plan]
        assert sum(sizes) == count * n and max(sizes) - min(sizes) <= 1 and max(sizes) <= per_call * n
        assert sum(done for *_, done in plan) == count
        got = [(i * n + r0) for i, j, r, _ in plan for r0 in (r if r is not None else range((j - i) * n))]
        assert got == list(range(count * n))  # every row once, in order


def test_workers_bad_value_is_one_line(ort_models, tiny_dir):
    with pytest.raises(ModelLoadError, match="workers must be"):
        registry.load_classifier("ort", ort_models["roberta"], precision="fp32", workers="lots", **_opts(tiny_dir))


@pytest.mark.parametrize("family, fused", [("roberta", True), ("deberta", False)])
def test_transformer_fusion_keeps_fp32_parity(ort_models, tiny_dir, family, fused):
    """fuse=true: ONNX Runtime's transformer optimizer on the classifier graph, kept only where the fused graph
    matches the unfused one (1e-5); the fp32 export then still passes torch's 1e-4 validation and int8
    quantizes the fused attention. A family without a recipe (DeBERTa) exports unfused, saying why."""
    ref = registry.load_classifier("torch", ort_models[family]).classify(PAIRS)
    clf = registry.load_classifier("ort", ort_models[family], precision="fp32", fuse=True, **_opts(tiny_dir))
    d = clf.info.details
    assert d["variant"] == "fp32-fused" and d["validation"]["passed"]
    assert d["fusion"]["applied"] is fused
    if fused:
        # attention, GELU and LayerNorm fused on transformers 4.57 and 5.x alike (exported with eager attention)
        assert d["fusion"]["fused"].get("Attention") == 2 and d["fusion"]["fused"].get("BiasGelu") == 2
        assert d["fusion"]["max_abs_diff_vs_unfused"] <= 1e-5
    else:
        assert "no fusion recipe" in d["fusion"]["reason"]
    out = clf.classify(PAIRS)
    assert float(np.abs(out.logits - ref.logits).max()) <= 1e-4
    if fused:
        int8 = registry.load_classifier("ort", ort_models[family], precision="int8", fuse=True,
                                        **_opts(tiny_dir, tolerances=RANDOM_WEIGHTS))
        assert int8.info.details["variant"] == "int8-dynamic-fused"
        assert np.isfinite(int8.classify(PAIRS).logits).all()


def test_a_library_user_loads_the_ort_engines_with_no_other_import(ort_models, tiny_dir):
    """``registry.load_generator("ort", ...)`` in a fresh interpreter, with nothing else of the package imported
    first: the ort backend reaches its exporter itself (no side-effect import to remember)."""
    import subprocess
    import sys

    code = ("from breaknli_fast.engines import registry\n"
            "from breaknli_fast.engines.base import Decoding\n"
            f"g = registry.load_generator('ort', {ort_models['t5']!r}, cache_dir={str(tiny_dir / 'export-cache')!r})\n"
            f"c = registry.load_classifier('ort', {ort_models['roberta']!r}, cache_dir={str(tiny_dir / 'export-cache')!r})\n"
            "print(len(g.generate(['A man sleeps.'], 2, Decoding(max_new_tokens=4), [1])[0]), "
            "c.classify([('A man sleeps.', 'A person rests.')]).labels[0] in ('entailment', 'neutral', 'contradiction'))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["2", "True"]


def _per_row_reference(x, wq, sw):
    """The per-row scheme in float32, operation by operation as the graph's ONNX operators compute it: lo / hi,
    scale (hi - lo) / 255, zero point round(-lo / s) (half to even, as ``Round`` and ``QuantizeLinear``), q, the
    exact integer sums of (q - z) w, then float32(sums) * float32(s * sw)."""
    f = np.float32
    rows = x.reshape(-1, x.shape[-1])
    out = []
    for row in rows:
        lo, hi = min(row.min(), f(0)), max(row.max(), f(0))
        s = f(max(f(hi - lo), f(1e-30)) / f(255))
        z = np.round(-(f(lo) / s))
        q = np.clip(np.round(row / s) + z, 0, 255)
        acc = (q.astype(np.int64) - int(z)) @ wq.astype(np.int64)
        out.append(acc.astype(np.float32) * f(s * f(sw)))
    return np.array(out, np.float32).reshape(*x.shape[:-1], wq.shape[1])


def test_the_per_row_int8_graph_computes_its_scheme_to_the_bit(tmp_path):
    """The rewritten graph computes the scheme the manifest names, to the bit, in both of its forms: the zero point
    inside the product (``MatMulIntegerToFloat`` on rows extended by their zero point, wherever the sums are exact in
    float32: 2-D and 3-D rows, two products sharing one quantization) and in int32 after it (a product whose sums
    can pass 2^24: 600 weights of magnitude 127 per column). A symmetric scheme (max |x| / 127, zero point 128: the
    words the manifest once had) gives other numbers."""
    pytest.importorskip("onnxruntime")
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    from breaknli_fast.backends.ort import quantize as qz
    from breaknli_fast.backends.ort.runtime import make_session

    rng = np.random.default_rng(3)
    ws = {"w1a": rng.normal(size=(16, 8)), "w1b": rng.normal(size=(16, 5)), "w3": rng.normal(size=(16, 6)),
          "w2": np.where(rng.random((600, 4)) < 0.5, -1.0, 1.0), "w2b": rng.normal(size=(600, 3))}
    ws = {k: v.astype(np.float32) for k, v in ws.items()}
    feeds_of = {"w1a": "x", "w1b": "x", "w3": "x3", "w2": "x2", "w2b": "x2"}
    graph = helper.make_graph(
        [helper.make_node("MatMul", [feeds_of[k], k], ["y_" + k]) for k in ws], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 16]),
         helper.make_tensor_value_info("x3", TensorProto.FLOAT, ["b", "t", 16]),
         helper.make_tensor_value_info("x2", TensorProto.FLOAT, ["m", 600])],
        [helper.make_tensor_value_info("y_" + k, TensorProto.FLOAT, None) for k in ws],
        [numpy_helper.from_array(v, k) for k, v in ws.items()])
    src, dst = tmp_path / "m.onnx", tmp_path / "q.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8), src)
    info = qz.int8_dynamic(src, dst)
    assert info["row_scheme"] == "per-row-asymmetric-v3" and info["activations"] == qz.ROW_ACTIVATIONS
    assert "(max(x, 0) - min(x, 0)) / 255" in info["activations"] and "127" not in info["activations"]
    assert (info["activations_rewritten"], info["products_in_float32"], info["products_in_int32"]) == (3, 4, 1)
    quantized = onnx.load(str(dst))
    ops = {n.op_type for n in quantized.graph.node}
    assert {"MatMulIntegerToFloat", "MatMulInteger", "QuantizeLinear"} <= ops and "DynamicQuantizeLinear" not in ops
    assert qz._opset(quantized) == qz.ROW_OPSET
    names = [i.name for i in quantized.graph.initializer]  # each product's weights once (a product reads q and z)
    assert len(names) == len(set(names))

    inits = {i.name: numpy_helper.to_array(i) for i in quantized.graph.initializer}
    feeds = {"x": np.concatenate([rng.uniform(0.1, 3.0, (2, 16)), rng.uniform(-2.0, -0.5, (2, 16)),
                                  rng.normal(size=(3, 16)) * 40, np.zeros((1, 16))]).astype(np.float32),
             "x3": rng.normal(size=(2, 3, 16)).astype(np.float32),
             "x2": np.concatenate([rng.normal(size=(3, 600)), rng.uniform(0, 5, (1, 600))]).astype(np.float32)}
    sess, _ = make_session(dst)  # the engines' session (u8 x u8 kernels on a CPU without VNNI)
    outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
    for k in ws:
        wq, sw = inits[k + "_quantized"], inits[k + "_scale"]
        assert wq.dtype == np.int8 and np.abs(wq).max() <= 127
        ref = _per_row_reference(feeds[feeds_of[k]], wq, sw)
        assert outs["y_" + k].dtype == np.float32 and np.array_equal(outs["y_" + k], ref), k
    # the int32 form's product can pass 2^24 for some row; this one is the one that does not take the float path
    assert 255 * np.abs(inits["w2_quantized"].astype(np.int64)).sum(axis=0).max() >= qz.EXACT_IN_FLOAT32

    x = feeds["x"][:2].astype(np.float64)
    wq, sw = inits["w1a_quantized"], float(inits["w1a_scale"])
    sym = []
    for row in x:
        s = np.abs(row).max() / 127
        q = np.clip(np.round(row / s) + 128, 0, 255)
        sym.append(s * sw * ((q - 128) @ wq))
    assert not np.allclose(outs["y_w1a"][:2], np.array(sym), rtol=1e-5, atol=1e-5)
