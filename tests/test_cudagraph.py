"""The cudagraph engine on the CPU (CI has no GPU): the same step functions that its CUDA graphs capture, run eagerly
or through the CPU stand-in of the graphs. Its own T5 decode loop gives transformers' greedy tokens and the torch
engine's sampled candidates; the cross-attention shared by a prompt's K samples equals K copies of it; the bucketed
classifier equals transformers' per-pair forward within 1e-5 and a pair's answer does not depend on its batch; the
graph runner copies in and out through its static buffers, and a bucket without a graph runs eagerly and says so.
The CUDA side (graphs captured and replayed, fp32 against torch eager on the same GPU) is in tests/test_cuda.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from breaknli_fast.backends.cudagraph.engine import CUDA_SMALL_BATCHES, PAIR_LADDER, bucket
from breaknli_fast.backends.cudagraph.graphs import GraphRunner, StandInGraph
from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import Decoding, NonFiniteError
from breaknli_fast.engines.backend import EngineUnavailable, PrecisionError
from breaknli_fast.engines.model_info import ModelLoadError
from breaknli_fast.prompts import CONTRADICT_PROMPT, GEN_PROMPTS


@pytest.fixture(scope="module")
def data():
    ex = load_examples("sample", limit=48).examples
    pairs = [(e.premise, e.hypothesis) for e in ex]
    prompts = [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in ex[:5]]
    prompts.append(GEN_PROMPTS["entailed"].format(h=ex[5].hypothesis))
    return pairs, prompts


@pytest.fixture(scope="module")
def torch_gen():
    return registry.load_generator("torch", "mini-t5")


@pytest.fixture(scope="module")
def graph_gen():
    return registry.load_generator("cudagraph", "mini-t5", graphs="standin")


def test_declaration_refuses_before_loading():
    with pytest.raises(PrecisionError, match="fp32, bf16, fp8 or int8 on cuda, not 'fp16'"):
        registry.check("cudagraph", "generator", "fp16", "cuda")  # T5 overflows in fp16
    with pytest.raises(PrecisionError):
        registry.check("cudagraph", "classifier", "fp16", "cpu")
    with pytest.raises(EngineUnavailable, match="no mask-filler role"):
        registry.check("cudagraph", "mlm", "fp32", "cpu")
    registry.check("cudagraph", "classifier", "fp16", "cuda")
    with pytest.raises(ModelLoadError, match="graphs=cuda needs --device cuda"):
        registry.load_classifier("cudagraph", "mini-nli", graphs="cuda")
    with pytest.raises(ModelLoadError, match="graphs='sometimes'"):
        registry.load_classifier("cudagraph", "mini-nli", graphs="sometimes")


def test_greedy_loop_equals_transformers_generate(torch_gen, graph_gen, tiny_t5, data):
    """The own decode loop (no capture, and through the stand-in of the graphs) gives transformers' greedy tokens."""
    _, prompts = data
    d = Decoding(strategy="greedy", max_new_tokens=24)
    seeds = [0] * len(prompts)
    assert graph_gen.generate_ids(prompts, 1, d, seeds) == torch_gen.generate_ids(prompts, 1, d, seeds)
    eager = registry.load_generator("cudagraph", tiny_t5)
    ref = registry.load_generator("torch", tiny_t5)
    assert eager.generate_ids(prompts, 1, d, seeds) == ref.generate_ids(prompts, 1, d, seeds)
    assert eager.info.details["own_loop"]["greedy"] == len(prompts)
    with pytest.raises(ValueError, match="one sequence per input"):
        eager.generate_ids(prompts[:1], 2, d, [0])


@pytest.mark.parametrize("decoding", [Decoding(), Decoding(min_new_tokens=6, max_new_tokens=12, top_k=0, top_p=0.9),
                                      Decoding(temperature=0.7, top_k=10, max_new_tokens=20)])
def test_sampled_candidates_equal_the_torch_engine(torch_gen, graph_gen, data, decoding):
    """The fast sampler's draw on the device, with the project's per-prompt uniform numbers: the torch engine's
    candidates, whatever the batch (prompt buckets 1, 2, 4 and 8 here, the bucket's extra prompts dropped)."""
    _, prompts = data
    seeds = [11, 7, 3, 19, 5, 2]
    ref = torch_gen.generate_ids(prompts, 6, decoding, seeds)
    assert graph_gen.generate_ids(prompts, 6, decoding, seeds) == ref
    for part in ([0], [1, 2], [3, 4, 5]):
        assert graph_gen.generate_ids([prompts[i] for i in part], 6, decoding, [seeds[i] for i in part]) == \
            [ref[i] for i in part]
    stats = graph_gen.info.details["graphs"]
    assert stats["captured"] >= 3 and stats["replays"] > 0 and not stats["capture_failures"]


def test_the_transformers_sampler_and_beam_run_transformers_code(graph_gen, torch_gen, data):
    _, prompts = data
    d = Decoding(strategy="beam", num_beams=3, max_new_tokens=10)
    assert graph_gen.generate_ids(prompts[:2], 2, d, [0, 0]) == torch_gen.generate_ids(prompts[:2], 2, d, [0, 0])
    assert graph_gen.info.details["transformers_fallback"]["beam"] == 2


def test_shared_cross_attention_equals_copied(graph_gen, data):
    """K rows of a prompt attending to its keys and values together (a view of the queries) give the numbers of K
    rows each with its own copy of them."""
    _, prompts = data
    dec = graph_gen.decoder
    enc = graph_gen.tokenizer(prompts[:3], return_tensors="pt", padding=True)
    k, length = 4, int(enc["input_ids"].shape[1])
    shared = dec.new_state(3, k, length, 16)
    copied = dec.new_state(3 * k, 1, length, 16)
    with torch.inference_mode():
        for s, rep in ((shared, 1), (copied, k)):
            s.enc_ids.copy_(enc["input_ids"].repeat_interleave(rep, 0))
            s.enc_mask.copy_(enc["attention_mask"].repeat_interleave(rep, 0))
            dec.encode(s)
        gen = torch.Generator().manual_seed(0)
        last = torch.randint(2, dec.vocab, (3 * k,), generator=gen)
        outs = []
        for s in (shared, copied):
            s.last.copy_(last)
            s.t.zero_()
            outs.append([dec.hidden(s)])
            s.last.copy_(last.flip(0))
            s.t.fill_(1)
            outs[-1].append(dec.hidden(s))
    for a, b in zip(*outs):
        assert torch.allclose(a, b, rtol=0, atol=1e-5), float((a - b).abs().max())


def test_own_encoder_equals_transformers_encoder(graph_gen, torch_gen, data):
    """The encoder written as the graphs run it, on a padded bucket: transformers' encoder output projected to the
    cross-attention keys and values of the real tokens, within 1e-5."""
    _, prompts = data
    dec = graph_gen.decoder
    enc = graph_gen.tokenizer(prompts, return_tensors="pt", padding=True)
    p, length = enc["input_ids"].shape
    s = dec.new_state(8, 2, 64, 16)
    ids = torch.zeros((8, 64), dtype=torch.long)
    mask = torch.zeros((8, 64), dtype=torch.long)
    ids[:p, :length], mask[:p, :length] = enc["input_ids"], enc["attention_mask"]
    ids[p:], mask[p:] = ids[0], mask[0]
    with torch.inference_mode():
        s.enc_ids.copy_(ids)
        s.enc_mask.copy_(mask)
        dec.encode(s)
        hidden = torch_gen.model.get_encoder()(input_ids=enc["input_ids"], attention_mask=enc["attention_mask"])[0]
        ref = torch.nn.functional.linear(hidden, dec.w_kv_cross).view(p, length, dec.layers, 2, dec.heads, dec.d_kv)
        ref = ref.permute(2, 3, 0, 4, 1, 5)
    for e in range(p):
        real = int(mask[e].sum())
        got = s.cross[:, :, e, :, :real]
        want = ref[:, :, e, :, :real]
        assert torch.allclose(got, want, rtol=0, atol=1e-5), float((got - want).abs().max())
    assert torch.equal(s.enc_bias[:p, 0, 0] == 0, mask[:p].bool())


def test_bucketed_classifier_equals_the_per_pair_forward(data, tiny_roberta):
    """The own forward pass in (batch, length) buckets against transformers' model on each pair alone: within 1e-5 of
    the row's largest logit where that exceeds 1 (the random RoBERTa's reach 12, and transformers' own batch
    against its pairs alone differs by 1.8e-5 there), on the shipped classifier and a random RoBERTa whose labels
    vary; the same labels."""
    pairs, _ = data
    for model in ("mini-nli", tiny_roberta):
        ref = registry.load_classifier("torch", model)
        clf = registry.load_classifier("cudagraph", model, graphs="standin")
        alone = np.concatenate([ref.raw_logits([p])[:, ref.perm] for p in pairs])
        got = clf.classify(pairs).logits
        assert (np.abs(got - alone).max(1) <= 1e-5 * np.maximum(1.0, np.abs(alone).max(1))).all()
        assert (got.argmax(1) == alone.argmax(1)).all()
        assert clf.info.details["graphs"]["captured"] >= 1


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_pairs_answer_does_not_depend_on_its_batch(data, precision):
    """A pair's logits alone, in a call of 48, in reversed order and in chunks of 5: the same numbers (its own
    length decides its bucket's length)."""
    pairs, _ = data
    clf = registry.load_classifier("cudagraph", "mini-nli", precision=precision)
    clf.set_reuse(False)
    whole = clf.classify(pairs).logits
    rev = clf.classify(pairs[::-1]).logits[::-1]
    chunks = np.concatenate([clf.classify(pairs[i:i + 5]).logits for i in range(0, len(pairs), 5)])
    alone = np.concatenate([clf.classify([p]).logits for p in pairs])
    tol = 1e-6 if precision == "fp32" else 1e-2  # bf16: a batch's row count may change a product's blocking
    for other in (rev, chunks, alone):
        assert np.abs(other - whole).max() <= tol
        assert (other.argmax(1) == whole.argmax(1)).all()


def test_pair_buckets_follow_the_pairs_own_length(data):
    pairs, _ = data
    clf = registry.load_classifier("cudagraph", "mini-nli", max_batch=8)
    tokens = clf._tokenize(pairs)
    lengths = [len(x) for x in tokens["input_ids"]]
    plan = clf._plan(lengths)
    assert sorted(i for b in plan for i in b) == list(range(len(pairs)))
    for batch in plan:
        assert len(batch) <= 8
        assert len({bucket(lengths[i], clf.length_ladder)[0] for i in batch}) == 1
    assert clf.length_ladder[-1] == clf.max_length and set(clf.length_ladder[:-1]) <= set(PAIR_LADDER)


def test_the_same_pairs_in_any_order_make_the_same_batches(data):
    """A group is ordered by its pairs' tokens, not by their place in the call: reversed or shuffled, the call's
    batches hold the same pairs at the same row counts (on a GPU a row's bits can depend on its batch's row count,
    which made a reversed call differ on the H200 before). Without the call's tokens the plan follows the call's
    order, so the same pairs reversed land in other batches: the test can tell the two apart."""
    pairs, _ = data
    clf = registry.load_classifier("cudagraph", "mini-nli", max_batch=8)

    def batches(ps):
        tokens = clf._tokenize(ps)
        lengths = [len(x) for x in tokens["input_ids"]]
        plan = clf._plan(lengths, tokens)
        assert sorted(i for b in plan for i in b) == list(range(len(ps)))
        return sorted(tuple(sorted(ps[i] for i in b)) for b in plan), clf._plan(lengths)

    (whole, by_place), (rev, rev_by_place) = batches(pairs), batches(pairs[::-1])
    shuffled = [pairs[i] for i in np.random.default_rng(0).permutation(len(pairs))]
    assert whole == rev == batches(shuffled)[0]
    n = len(pairs)
    place = sorted(tuple(sorted(pairs[i] for i in b)) for b in by_place)
    place_rev = sorted(tuple(sorted(pairs[n - 1 - i] for i in b)) for b in rev_by_place)
    assert place != place_rev  # the order of the call alone moves pairs between batches


def test_graph_runner_copies_in_and_out_through_the_stand_in():
    runner = GraphRunner("cpu", "standin")
    x, y = torch.zeros(4), torch.zeros(4)
    calls = []

    def step():
        calls.append(1)
        y.copy_(x * 2 + 1)

    assert runner.ensure("b4", step)  # captured: the stand-in ran the step once (as CUDA's warm-up would)
    outs = []
    for value in (1.0, 5.0):
        x.copy_(torch.full((4,), value))  # copy in after ensure
        runner.run("b4", step)
        outs.append(y.clone())  # copy out before the next call overwrites the buffer
    assert [o.tolist() for o in outs] == [[3.0] * 4, [11.0] * 4]
    assert isinstance(runner.graphs["b4"], StandInGraph) and runner.graphs["b4"].replays == 2
    assert runner.stats.to_dict()["captured"] == 1 and runner.stats.replays == 2 and runner.stats.eager_runs == 0
    assert len(calls) == 3


def test_a_bucket_without_a_graph_runs_eagerly_and_says_so():
    said = []
    runner = GraphRunner("cpu", "standin", max_graphs=1, say=said.append)
    out = torch.zeros(1)

    def step():
        out.add_(1)

    assert runner.ensure("a", step)
    assert not runner.ensure("b", step)  # the graph limit
    runner.run("b", step)
    assert not runner.ensure("c", step, in_ladder=False)  # a shape off the ladder
    runner.run("c", step)
    assert runner.stats.misses == {"graph limit": 1, "not a bucket": 1} and runner.stats.eager_runs == 2
    assert len(said) == 2 and "max_graphs" in said[0] and "outside the buckets" in said[1]

    def broken():
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    fresh = GraphRunner("cpu", "standin", say=said.append)
    assert not fresh.ensure("x", broken)
    assert fresh.stats.failures == {"x": "RuntimeError: operation not permitted when stream is capturing"}
    assert "failed" in said[-1] and not fresh.ensure("x", broken)  # tried once, then eager
    fresh.run("x", step)
    assert fresh.stats.eager_runs == 1 and fresh.stats.misses == {"capture failed": 1}
    with pytest.raises(ValueError, match="CUDA device"):
        GraphRunner("cpu", "cuda")


def test_generator_off_the_ladder_runs_eagerly_with_the_same_tokens(data, torch_gen):
    _, prompts = data
    said = []
    gen = registry.load_generator("cudagraph", "mini-t5", graphs="standin", max_graphs=2)  # encoder + one span
    gen.runner.say = said.append
    d = Decoding(max_new_tokens=8)
    seeds = list(range(len(prompts)))
    assert gen.generate_ids(prompts, 3, d, seeds) == torch_gen.generate_ids(prompts, 3, d, seeds)
    assert gen.generate_ids(prompts[:1], 3, d, seeds[:1]) == torch_gen.generate_ids(prompts[:1], 3, d, seeds[:1])
    stats = gen.info.details["graphs"]
    # the second bucket: its encoder and its 8 steps run eagerly
    assert stats["captured"] == 2 and stats["misses"] == {"graph limit": 2} and stats["eager_runs"] == 9
    assert len(said) == 1


def test_non_finite_scores_are_one_line(data):
    _, prompts = data
    gen = registry.load_generator("cudagraph", "mini-t5")
    with torch.no_grad():
        gen.decoder.w_out[-1].fill_(float("nan"))
    with pytest.raises(NonFiniteError, match="decoding step 1"):
        gen.generate_ids(prompts[:2], 2, Decoding(max_new_tokens=4), [0, 1])


def test_other_models_are_refused_in_one_line(tiny_bart):
    with pytest.raises(ModelLoadError, match="cannot run .*family is 'bart'"):
        registry.load_classifier("cudagraph", tiny_bart)
    with pytest.raises(ModelLoadError, match="sequence classifiers"):
        registry.load_classifier("cudagraph", "mini-t5")


def test_a_study_on_the_engine_keeps_the_reference_records(tmp_path):
    """fp32 on the CPU: the loop's records (candidates, relations, verdicts) equal the torch engine's."""
    from breaknli_fast.study import run_study
    from breaknli_fast.study.loading import EngineConfig

    recs = {}
    for engine in ("torch", "cudagraph"):
        out = tmp_path / engine
        run_study("breaknli", None, dataset="sample", limit=12, engine=EngineConfig(engine=engine), out=out,
                  html=False)
        recs[engine] = [json.loads(line) for line in (out / "samples.jsonl").read_text().splitlines()]
        cfg = json.loads((out / "config.json").read_text())
        assert cfg["engine"]["name"] == engine
    probs = ("ph_probs", "eval_probs")  # rounded to 6 decimals: the last may differ by fp32 summation order
    assert [{k: v for k, v in r.items() if k not in probs} for r in recs["cudagraph"]] == \
        [{k: v for k, v in r.items() if k not in probs} for r in recs["torch"]]

    def flat(r):
        rows = [r.get("ph_probs", {})] + list(r.get("eval_probs", []))
        return [p for row in rows for p in row.values()]

    for a, b in zip(recs["cudagraph"], recs["torch"]):
        assert np.allclose(flat(a), flat(b), rtol=0, atol=2e-6)


@pytest.mark.parametrize("fused", ["off", "eager"])
def test_a_non_finite_call_leaves_the_next_call_of_its_bucket_correct(data, torch_gen, fused):
    """A NaN in one call's cache (a layer's q/k/v weights made NaN for that call) raises for that call; the next
    call of the same bucket, the weights restored, gives the torch engine's tokens. Without the cleaning, the stale
    cache positions reached it (NaN + -inf in the scores, 0 x NaN in the attention output): it raised too."""
    _, prompts = data
    gen = registry.load_generator("cudagraph", "mini-t5", graphs="standin", fused=fused)
    d, seeds = Decoding(max_new_tokens=8), [1, 2, 3]
    want = torch_gen.generate_ids(prompts[:3], 4, d, seeds)
    w = gen.decoder.w_qkv[0]
    keep = w.clone()
    with torch.no_grad():
        w.fill_(float("nan"))
    with pytest.raises(NonFiniteError, match="decoding step 1"):
        gen.generate_ids(prompts[:3], 4, d, seeds)
    with torch.no_grad():
        w.copy_(keep)
    assert gen.generate_ids(prompts[:3], 4, d, seeds) == want
    assert gen.generate_ids(prompts[1:4], 4, d, seeds) == torch_gen.generate_ids(prompts[1:4], 4, d, seeds)
    assert gen.info.details["caches_cleaned"] == 1 and gen.info.details["states"]["built"] == 1  # the same bucket


def test_decode_states_are_evicted_under_their_memory_budget(data, torch_gen):
    """A budget that holds two of the three buckets' states: the least recently used goes first, its graphs with
    it (captured on its buffers); a bucket seen again builds and captures anew and gives the same tokens."""
    _, prompts = data
    d = Decoding(max_new_tokens=8)
    calls = [prompts[:1], prompts[:2], prompts[:4], prompts[:1], prompts[:2]]
    probe = registry.load_generator("cudagraph", "mini-t5", graphs="standin")
    for part in calls[:3]:
        probe.generate_ids(part, 3, d, list(range(len(part))))
    keys = list(probe.states)  # (prompts, K, encoder tokens, cache positions) of the three buckets
    sizes = [probe.decoder.state_bytes(*key) for key in keys]
    budget = (sizes[1] + sizes[2] + sizes[0] // 2) / 2**20  # the two larger states fit, not all three
    assert sizes[0] < sizes[1] < sizes[2]
    gen = registry.load_generator("cudagraph", "mini-t5", graphs="standin", state_mib=budget)
    for part in calls:
        seeds = list(range(len(part)))
        assert gen.generate_ids(part, 3, d, seeds) == torch_gen.generate_ids(part, 3, d, seeds)
    st = gen.info.details["states"]
    assert st["held"] == 2 and st["built"] == 5 and st["evicted"] == 3 and st["over_budget"] == 0
    assert st["peak_mib"] <= budget + 1e-6 and st["budget_mib"] == round(budget, 1)
    assert list(gen.states) == [keys[0], keys[1]]  # least recently used first (the 4-prompt state went last)
    held = {k[:3] for k in gen.runner.graphs if k[0] != "encoder"} | {k[1:4] for k in gen.runner.graphs
                                                                      if k[0] == "encoder"}
    assert held == {keys[1][:3], keys[0][:3]}  # the evicted buckets' graphs went with their states
    assert gen.info.details["graphs"]["dropped"] == 3 * 2  # an encoder and one span's step each
    from breaknli_fast.backends.cudagraph.states import tensor_bytes

    for key, size in zip(keys, sizes):  # the size known before allocating
        assert tensor_bytes(probe.states.states[key]) == size
    small = registry.load_generator("cudagraph", "mini-t5", state_mib=sizes[0] / 2 / 2**20)  # below one state
    assert small.generate_ids(prompts[:1], 3, d, [0]) == torch_gen.generate_ids(prompts[:1], 3, d, [0])
    assert small.info.details["states"]["over_budget"] == 1
    with pytest.raises(ModelLoadError, match="state_mib must be a positive number"):
        registry.load_generator("cudagraph", "mini-t5", state_mib=0)


def test_classifier_buckets_pad_snli_pairs_about_as_the_torch_engine_does():
    """The embedded SNLI sample's pairs (2,724, 12-65 tokens) in calls of the sizes the loop makes (every pair in
    one call; chunks of 1,280 pairs, a chunk of 64 examples x 20 candidates; waves of 256 and 64): with the CUDA
    ladder, the tokens the buckets compute over the real tokens stay within 3 % of the torch engine's own padding
    (widths of multiples of 8, no padded rows) for calls of 256 pairs and more, and below 1.25 for calls of 64; the
    CPU's (batches of 8 rows at least) is printed beside it. The former ladder (16, 32, 48, 64, 96, ... tokens; 8
    ... 512 rows) padded 1.36x on the whole sample and more on smaller calls."""
    from breaknli_fast.engines.batching import plan_batches

    pairs = [(e.premise, e.hypothesis) for e in load_examples("sample").examples]
    clf = registry.load_classifier("cudagraph", "mini-nli", batch_tokens=65536)
    ref = registry.load_classifier("torch", "mini-nli")
    lengths = [len(x) for x in clf._tokenize(pairs)["input_ids"]]

    def torch_ratio(ls):
        plan = plan_batches([ref._width(n) for n in ls], 65536, 64, 1, one_width=True)
        return sum(len(b) * ref._width(max(ls[i] for i in b)) for b in plan) / sum(ls)

    cpu_ladder = clf.batch_ladder
    for device, ladder in (("cuda", CUDA_SMALL_BATCHES + cpu_ladder), ("cpu", cpu_ladder)):
        clf.batch_ladder = ladder  # the CUDA ladder also batches a group's last pairs in 1, 2 or 4 rows
        for size in (len(lengths), 1280, 256, 64):
            ratios = []
            for a in range(0, len(lengths) - size + 1, size):
                real, padded = clf.padding(lengths[a:a + size])
                ratios.append((padded / real, torch_ratio(lengths[a:a + size])))
            mean = sum(r for r, _ in ratios) / len(ratios)
            mean_torch = sum(t for _, t in ratios) / len(ratios)
            print(f"{device} ladder, calls of {size} pairs: buckets pad {mean:.3f}x the real tokens (torch "
                  f"{mean_torch:.3f}x)")
            if device == "cuda" and size >= 256:
                assert mean <= mean_torch * 1.03, size
            assert mean <= (1.25 if device == "cuda" else 1.6), (device, size)
