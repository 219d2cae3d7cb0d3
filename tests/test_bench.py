"""``breaknli-fast bench`` on tiny random-weight models: fields, self-parity, --strict, --compare, skips, every probe."""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest
import typer
from typer.testing import CliRunner

from breaknli_fast.bench import parity as par
from breaknli_fast.bench.measure import Task, latency_stats, repeat, repeat_interleaved
from breaknli_fast.bench.result import BenchResult
from breaknli_fast.bench.types import Diff, EngineResult, Parity, VerdictCounts, from_json
from breaknli_fast.bench.runner import BenchConfig, run_bench
from breaknli_fast.bench.specs import BenchSpecError, parse_engines
from breaknli_fast.engines.base import Decoding
from breaknli_fast.study.loading import EngineConfig
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
from breaknli_fast.stats import compare

runner = CliRunner()

# Tiny run: wide sampling so the tiny T5 gives distinct candidates; seed 0 on the first 16
# examples leaves a few evaluated examples in the contradictive mode (the fixed triples).
COMMON = ["--limit", "16", "--seed", "0", "--k", "8", "--u", "4", "--s", "2", "--top-p", "1.0", "--top-k", "0",
          "--max-new-tokens", "10", "--min-iterations", "2", "--min-seconds", "0", "--gen-prompts", "2",
          "--greedy-prompts", "2"]


def _app() -> typer.Typer:
    from breaknli_fast.cli import app

    assert any(c.name == "bench" for c in app.registered_commands)
    return app


def _bench(tiny_t5, tiny_roberta, tiny_tsv, out: Path, engines: str, *extra: str):
    args = ["bench", "-e", engines, "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), *COMMON, "--out", str(out), *extra]
    return runner.invoke(_app(), args)


@pytest.fixture(scope="module")
def same_run(tiny_t5, tiny_roberta, tiny_tsv, tmp_path_factory):
    """Reference + an identical candidate + an engine that cannot load here (its library missing), with --strict.
    (An engine whose declaration excludes the device, tensorrt on the CPU, is refused before the bench runs.)"""
    from breaknli_fast.engines import registry

    registry.register("unavailable", "plugins.unavailable_engine")
    out = tmp_path_factory.mktemp("bench") / "same"
    try:
        r = _bench(tiny_t5, tiny_roberta, tiny_tsv, out, "torch:fp32,torch:fp32:label=same,unavailable:fp16", "--warmup",
                   "1", "--strict", "--no-component-split")
    finally:
        registry._ENGINES.pop("unavailable", None)
    return r, out


@pytest.fixture(scope="module")
def perm_run(tiny_t5, tiny_roberta, tiny_tsv, permuted, tmp_path_factory):
    """Reference + the permuted classifier as the candidate, with --strict."""
    out = tmp_path_factory.mktemp("bench") / "perm"
    r = _bench(tiny_t5, tiny_roberta, tiny_tsv, out, f"torch:fp32:label=perm:classifier={permuted}", "--warmup", "0",
               "--mode", "contradictive", "--interleave", "--strict")
    return r, out


def test_every_stage_has_its_share_of_the_ceilings(same_run):
    """The suite's quick ceilings (conftest): every stage of the engines that ran holds its token work (real and
    padded), its operations against the measured ceilings, and bench.md / the terminal show them."""
    r, out = same_run
    d = BenchResult.load(out).data
    c = d["ceilings"]
    assert c["source"] == "measured" and c["mode"] == "quick" and c["precisions"] == {"fp32": "measured"}
    assert c["bandwidth"]["bytes_per_s"] > 0 and c["gemm"] and all(g["ops_per_s"] > 0 for g in c["gemm"])
    for e in d["engines"][:2]:
        for stage, st in e["speed"]["stages"].items():
            rf = st["roofline"]
            assert rf["ceiling"] == "fp32" and rf["flops"] >= rf["useful_flops"] > 0, (e["label"], stage)
            assert 0 < rf["pct_of_ceiling"] and rf["binding"] in ("compute", "memory")
            assert rf["attained_ops_per_s"] == pytest.approx(rf["flops"] / st["median_s"])
            w = st["generator_work" if stage == "generate" else "classifier_work"]
            if stage == "generate":
                assert w["row_steps"] >= w["tokens"] == st["new_tokens_per_iteration"] > 0
                assert [p["name"] for p in rf["parts"]] == ["encoder", "decoder steps"]
            else:
                assert w["padded_tokens"] >= w["tokens"] > 0 and w["pairs"] == st["items"]
    md = (out / "bench.md").read_text()
    assert "## Stages against this machine's ceilings" in md and "| torch:fp32 | generate | fp32 |" in md
    assert "each stage: % of this CPU's measured ceiling" in r.output


def _contains(ci, x, eps=1e-9):
    return ci is not None and ci[0] - eps <= x <= ci[1] + eps


def test_identical_engine_passes_and_an_engine_that_did_not_run_fails_strict(same_run):
    r, out = same_run
    # the engine that could not load was not shown to match: a strict bench fails (exit 1), the others pass
    assert r.exit_code == 1, r.output
    for name in ("bench.json", "bench.md", "bench.png"):
        assert (out / name).exists() and (out / name).stat().st_size > 0, name
    res = BenchResult.load(out)
    d = res.data
    assert d["schema"] == "breaknli-fast-bench/3" and d["passed"] is False and d["probe"] == "breaknli"
    assert d["environment"]["packages"]["torch"] and d["command"].startswith("breaknli-fast bench")
    assert "--engines" in d["command"] and "--strict" in d["command"] and "--one-direction" not in d["command"]
    assert d["seeds"]["probe"] == 0 and d["config"]["probe_config"]["k"] == 8 and d["parity_meaningful"] is True
    assert [e["label"] for e in d["engines"]] == ["torch:fp32", "same", "unavailable:fp16"]
    ref, same, trt = d["engines"]
    assert ref["reference"] and d["reference"] == "torch:fp32"
    wl = d["workload"]
    assert wl["classify_ph_pairs"] == 16 and wl["generate_prompts"] == 2 and wl["relation_pairs"] > 0
    assert sum(wl["fixed_triples"].values()) > 0, "the tiny run should evaluate some examples"

    # the candidate is the reference engine again (same kernels, threads and batches): its parity with
    # the reference is exact on any CPU, hence the 0.0 and 100.0 below
    for e in (ref, same):
        assert e["status"] == "ok" and e["checks"]["passed"] is True
        sp = e["speed"]
        for stage in ("classify_ph", "generate", "relation", "evaluate"):
            st = sp["stages"][stage]
            assert st["items"] > 0 and st["iterations"] >= 2 and st["warmup"] == 1 and st["median_s"] > 0
            lat = st["call_latency" if stage == "generate" else "batch_latency"]
            assert lat["n"] > 0 and lat["median_ms"] <= lat["p90_ms"] <= lat["p95_ms"] <= lat["p99_ms"] <= lat["max_ms"]
        assert sp["stages"]["generate"]["tokens_per_s"] > 0 and sp["stages"]["classify_ph"]["pairs_per_s"] > 0
        e2e = sp["end_to_end"]
        assert e2e["examples"] == sum(f["processed"] for f in e2e["funnel"].values()) > 16
        assert e2e["examples_per_s"] > 0 and e2e["warmup_runs"] == 1
        assert set(e2e["stage_seconds"]) == {"classify_ph", "generate", "relation", "evaluate"}
        for key in ("classifier_pairs_per_s", "generated_tokens_per_s", "examples_per_s", "classifier_batch_p95_ms",
                    "generator_call_p95_ms"):
            assert sp["summary"][key] > 0, key
        assert set(sp["speedup"]["stages"]) == {"classify_ph", "generate", "relation", "evaluate"}
        m = e["memory"]
        assert m["peak_rss_load_mib"] >= m["rss_before_load_mib"] > 0 and m["peak_rss_mib"] > 0
        assert m["gpu_peak_allocated_mib"] is None

        p = e["parity"]
        assert p["classifier"]["all"]["label_agreement_pct"] == 100.0
        assert p["classifier"]["all"]["max_abs_logit_diff"] == 0.0
        assert p["classifier"]["all"]["n"] == wl["classify_ph_pairs"] + wl["relation_pairs"] + wl["evaluate_pairs"] + \
            p["classifier"]["fixed_triples"]["n"]
        g = p["generator"]
        assert g["greedy"]["token_agreement_pct"] == 100.0 and g["greedy"]["identical_sequences_pct"] == 100.0
        assert g["sampled_candidates"]["identical_pct"] == 100.0
        for block in ("fixed_triples", "end_to_end"):
            assert p[block], block
            for mode, table in p[block].items():
                assert "overall" in table
                for cell, entry in table.items():
                    for k in ("inequality", "relaxed"):
                        x = entry[k]
                        assert x["diff"] == 0.0 and _contains(x["ci"], 0.0), (block, mode, cell, k)
                        # nothing differs, yet a handful of examples is not a proof: never a [0, 0] interval
                        assert x["method"] == "tango" and x["ci"][1] - x["ci"][0] > 10 and x["too_small"]
                        assert x["verdict"] == "inconclusive", (block, mode, cell, k)
        h = p["headline"]
        assert h["records"]["identical_pct"] == 100.0 and h["records"]["only_engine"] == 0
        assert set(h["metrics"]) == {m["name"] for m in d["headline_metrics"]}
        assert {"accuracy (p, h)", "contradictive per-candidate inequality"} <= set(h["metrics"])
        assert all(m["diff"] == 0.0 and m["verdict"] == "inconclusive" for m in h["metrics"].values() if m["n"])
        inv = e["batch_invariance"]
        assert inv["pairs"] == wl["invariance_pairs"] > 16 and inv["labels_changed"] == 0
        for mode, table in p["fixed_triples"].items():
            for cell, entry in table.items():
                rt = entry["rates"]
                assert entry["examples_changed"] == 0
                for k in ("inequality", "relaxed"):
                    assert _contains(rt[k + "_ci"], rt[k])
        for mode, table in e2e["metrics"].items():
            for cell, rt in table.items():
                if rt["n"]:
                    assert _contains(rt["inequality_ci"], rt["inequality"]) and _contains(rt["relaxed_ci"], rt["relaxed"])

    assert ref["speed"]["speedup"]["workload"] == 1.0 and ref["speed"]["speedup"]["end_to_end"] == 1.0
    assert ref["speed"]["speedup"]["workload_best"] == 1.0
    assert all(v == 1.0 for v in ref["speed"]["speedup"]["stages"].values())
    assert same["speed"]["speedup"]["workload"] > 0
    # the candidate ran the very same loop
    assert same["speed"]["end_to_end"]["funnel"] == ref["speed"]["end_to_end"]["funnel"]

    assert trt["status"] == "skipped" and trt["reason"] and "\n" not in trt["reason"]
    assert trt["checks"]["passed"] is False and "engine skipped" in trt["checks"]["failures"][0]

    md = (out / "bench.md").read_text()
    assert "| engine | precision | speed-up (workload)" in md and "unavailable:fp16" in md and "skipped" in md
    assert "PASS" not in md and "FAIL:" in md and "did not run" in md and d["command"] in md
    assert "too few examples to judge" in md and "**paired**" in md and "unpaired" not in md
    assert "unavailable:fp16" in r.output and "skipped" in r.output
    # the bench ends with which engine to pick: the same engine, identical candidates, not shown to differ -- where
    # it measured faster than the reference (the same torch engine: either way, by the machine's noise)
    assert "## Which engine to pick" in md
    if same["speed"]["speedup"]["end_to_end"] > 1.0:
        assert "Pick: `same`" in md and "token for token" in md
    else:
        assert "Pick: none of the engines is faster than the reference" in md and "Fastest: `same`" in md
    assert ("Pick: same" if same["speed"]["speedup"]["end_to_end"] > 1.0 else "Fastest: same") in r.output


def test_permuted_classifier_fails_strict(perm_run):
    r, out = perm_run
    assert r.exit_code == 1, r.output
    assert "FAIL" in r.output and "label agreement" in r.output and "Traceback" not in r.output
    d = json.loads((out / "bench.json").read_text())
    assert d["passed"] is False
    ref, perm = d["engines"]
    assert ref["checks"]["passed"] is True and perm["checks"]["passed"] is False
    assert perm["models"]["classifier"].endswith("roberta-perm")
    assert perm["parity"]["classifier"]["all"]["label_agreement_pct"] == 0.0
    assert perm["parity"]["classifier"]["all"]["max_abs_logit_diff"] > 0
    assert any("label agreement" in f for f in perm["checks"]["failures"])
    # same generator, same seed: greedy tokens agree even though the classifier differs
    assert perm["parity"]["generator"]["greedy"]["token_agreement_pct"] == 100.0
    assert "FAIL" in (out / "bench.md").read_text()
    # --interleave: both engines loaded, timed in rounds, one shared run-time memory peak
    assert d["config"]["interleave"] is True
    assert ref["memory"]["shared"] is True and perm["memory"]["shared"] is True
    for e in (ref, perm):
        assert all(e["speed"]["stages"][k]["iterations"] >= 2 for k in ("classify_ph", "generate", "relation", "evaluate"))


def test_compare_two_saved_benches(same_run, perm_run, tmp_path):
    (_, a), (_, b) = same_run, perm_run
    r = runner.invoke(_app(), ["bench", "--compare", str(a), str(b / "bench.json"), "--out", str(tmp_path / "cmp")])
    assert r.exit_code == 0, r.output
    cmp = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    rows = {x["engine"]: x for x in cmp["rows"]}
    assert set(rows) == {"torch:fp32", "same", "unavailable:fp16", "perm"}
    m = rows["torch:fp32"]["metrics"]["clf pairs/s"]
    assert m["a"] > 0 and m["b"] > 0 and m["ratio_b_over_a"] == pytest.approx(m["b"] / m["a"])
    assert rows["same"]["status_b"] == "absent" and rows["perm"]["status_a"] == "absent"
    assert rows["perm"]["metrics"]["label agreement %"]["b"] == 0.0
    md = (tmp_path / "cmp" / "compare.md").read_text()
    assert "| engine | metric | A | B | B / A |" in md
    assert "torch:fp32" in r.output and "perm" in r.output
    bad = runner.invoke(_app(), ["bench", "--compare", str(tmp_path), str(a)])
    assert bad.exit_code == 2 and "no bench result" in bad.output


def test_reference_is_first_and_labels_are_unique():
    specs = parse_engines("ort:int8,torch:fp32,ort:int8,torch:bf16:label=b:clf.max_batch=8:classifier=/x")
    assert [s.label for s in specs] == ["torch:fp32", "ort:int8", "ort:int8#2", "b"]
    assert specs[3].classifier == "/x" and specs[3].config.extra == {"clf.max_batch": 8}
    assert isinstance(specs[3].config, EngineConfig) and specs[3].config.precision == "bf16"
    assert parse_engines("ort:fp16")[0].label == "torch:fp32"
    # the bench-wide settings are the base every entry starts from
    base = EngineConfig(threads=3, max_length=64)
    assert all(s.config.threads == 3 and s.config.max_length == 64 for s in parse_engines("ort:int8", base))
    # a torch:fp32 with another model is a candidate, not the reference
    specs = parse_engines("torch:fp32:classifier=/y")
    assert specs[0].is_plain_reference and specs[1].label == "torch:fp32:classifier=/y"  # named as written
    assert [s.label for s in parse_engines("ort:int8,ort:int8:quantization=static")][1:] == [
        "ort:int8", "ort:int8:quantization=static"]
    for bad in ("torch", "torch:fp64", "torch:fp32:oops", "bogus:fp32"):
        with pytest.raises(BenchSpecError):
            parse_engines(bad)


@pytest.mark.parametrize("args,match", [(["-e", "torch:fp99"], "unknown precision"),
                                        (["-e", "bogus:fp32", "--strict", "--require-equivalence"], "unknown engine"),
                                        (["--probe", "nope"], "unknown probe"),
                                        (["--probe", "accuracy", "--k", "4"], "--k is an option of --probe breaknli, not of --probe accuracy"),
                                        (["--probe", "accuracy", "--gen-prompts", "4"], "--gen-prompts shapes the BreakNLI loop only")])
def test_bad_bench_arguments_are_one_line_errors(tmp_path, args, match):
    r = runner.invoke(_app(), ["bench", *args, "--out", str(tmp_path)])
    assert r.exit_code == 2 and match in r.output and "Traceback" not in r.output, r.output


def test_tolerance_rule_and_checks():
    assert par.out_of_tolerance(Diff(diff=2.0, ci=[0.5, 3.5]), 1.0)
    assert par.out_of_tolerance(Diff(diff=-2.0, ci=[-3.5, -0.5]), 1.0)
    assert not par.out_of_tolerance(Diff(diff=2.0, ci=[-0.1, 3.5]), 1.0)  # CI includes 0
    assert not par.out_of_tolerance(Diff(diff=0.8, ci=[0.1, 1.5]), 1.0)  # within tolerance
    assert not par.out_of_tolerance(Diff(), 1.0)
    broken = compare([1] * 30 + [0] * 470, [0] * 500)  # 30 of 500 examples turn into breaks: different
    fails = par.check(from_json(Parity, {
        "classifier": {"all": {"label_agreement_pct": 97.0}},
        "fixed_triples": {"contradictive": {"overall": {"inequality": broken, "relaxed": compare([0] * 500, [0] * 500)}}},
        "end_to_end": {}}), 1.0, 98.0)
    assert len(fails) == 2 and "label agreement" in fails[0] and "contradictive overall inequality" in fails[1]


def test_verdicts_counted_and_checked_per_cell_and_headline_metric():
    rng = np.random.default_rng(0)
    ref = rng.random(40) < 0.3
    few = ref.copy()
    few[:2] = ~few[:2]  # 2 of 40 discordant: a small difference, a wide interval
    e = compare(few, ref)
    assert e["verdict"] == "inconclusive" and e["n_needed"] > 40 and e["too_small"]
    # the rule the bench applies: --strict fails on different only, --require-equivalence on inconclusive too
    block = from_json(Parity, {"end_to_end": {"entailed": {"overall": {"n": 40, "inequality": dict(e),
                                                                       "relaxed": dict(e)}}},
                               "headline": {"metrics": {"accuracy (p, h)": compare(ref, ref)}}})
    par.add_verdicts(block, 1.0)
    assert block.verdicts == VerdictCounts(equivalent=0, different=0, inconclusive=3, too_small=3,
                                           different_confirmed=0)
    assert par.check(block, 1.0, 0.0) == []
    fails = par.check(block, 1.0, 0.0, require_equivalence=True)
    assert len(fails) == 3 and "headline: accuracy (p, h)" in fails[2] and "too few examples" in fails[2]


def test_end_to_end_parity_is_paired_on_the_examples_both_runs_evaluated():
    def rec(i, ineq, yhat="entailment", status="evaluated"):
        return {"mode": "entailed", "id": f"x{i}", "yhat": yhat, "status": status,
                "verdict": {"inequality": ineq, "relaxed": ineq}}

    ref = [rec(0, True), rec(1, False), rec(2, False), rec(3, True, status="too_few_on_target")]
    eng = [rec(0, True), rec(1, True), rec(2, False, status="too_few_unique"), rec(3, False)]
    out = par.end_to_end_parity(ref, eng)["entailed"]["overall"]
    assert out.n == 2 and out.only_reference == 1 and out.only_engine == 1
    assert out.inequality.diff == pytest.approx(50.0)  # x1 turned into a break; x0 the same


def test_token_agreement_and_classifier_parity():
    t = par.token_agreement([[1, 2, 3], [4, 5], [7, 8]], [[1, 2, 4], [4, 5], [7, 8, 9]])
    assert t.positions == 3 + 2 + 3 and t.token_agreement_pct == pytest.approx(100 * 6 / 8)
    assert t.identical_sequences_pct == pytest.approx(100 / 3)
    x = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0]])
    y = np.array([[1.0, 0.5, 0.0], [3.0, 2.0, 0.0]])
    c = par.classifier_parity(x, y)
    assert c.label_agreement_pct == 50.0 and c.max_abs_logit_diff == 3.0


def test_interleaved_rounds_and_failing_task():
    order = []

    def boom():
        order.append("C")
        raise RuntimeError("engine died")

    tasks = [Task(lambda: order.append("A")), Task(lambda: order.append("B")), Task(boom)]
    reps = repeat_interleaved(tasks, warmup=1, min_iterations=2, min_seconds=0.0)
    assert order == ["A", "B", "C", "A", "B", "A", "B"]  # warm-up round, then measured rounds; C dropped
    assert [len(r.seconds) for r in reps] == [2, 2, 0] and isinstance(tasks[2].error, RuntimeError)
    with pytest.raises(RuntimeError):
        repeat(boom, warmup=0, min_iterations=1, min_seconds=0.0)


def test_repeat_honours_warmup_min_iterations_and_min_seconds():
    calls = []
    r = repeat(lambda: calls.append(1), warmup=2, min_iterations=3, min_seconds=0.0)
    assert len(calls) == 5 and len(r.seconds) == 3 and r.warmup == 2
    r = repeat(lambda: time.sleep(0.01), warmup=0, min_iterations=1, min_seconds=0.05)
    # it stops at the first iteration that brings the measured time to min_seconds, however long a
    # sleep takes on a loaded machine (so no count of iterations is asserted)
    assert sum(r.seconds[:-1]) < 0.05 <= sum(r.seconds)
    s = latency_stats([0.001 * i for i in range(1, 101)])
    assert s["n"] == 100 and s["median_ms"] == pytest.approx(50.5) and s["p99_ms"] == pytest.approx(99.01)
    assert latency_stats([])["p95_ms"] is None


# Public parameter counts of the checkpoints whose shapes are built in (Hugging Face model cards).
EXPECTED_PARAMS = {"flan-t5-small": 76_961_152, "flan-t5-base": 247_577_856, "flan-t5-large": 783_150_080,
                   "roberta-base": 124_647_939, "roberta-large": 355_362_819, "bart-large-mnli": 407_344_131}


def test_builtin_shapes_have_the_real_sizes():
    """Instantiated on the meta device: no memory, no weights, just the architecture."""
    import torch
    from transformers import AutoModelForSequenceClassification, BartConfig, RobertaConfig

    from breaknli_fast.bench.shapes import ID2LABEL, SHAPES, parse_random_weights
    from breaknli_fast.engines.compat import new_untied_t5

    for name, expected in EXPECTED_PARAMS.items():
        shape = dict(SHAPES[name])
        fam = shape.pop("family")
        with torch.device("meta"):
            if fam == "t5":  # the untied output layer as built for the bench (transformers 5.x would tie it)
                m = new_untied_t5(**{k: v for k, v in shape.items() if k != "tie_word_embeddings"})
            else:
                cls = {"roberta": RobertaConfig, "bart": BartConfig}[fam]
                m = AutoModelForSequenceClassification.from_config(cls(**shape, num_labels=3, id2label=ID2LABEL))
        assert sum(p.numel() for p in m.parameters()) == expected, name
    assert parse_random_weights("flan-t5-base,roberta-large-mnli") == {"generator": "flan-t5-base", "classifier": "roberta-large"}
    assert parse_random_weights("flan-t5-small,classifier=flan-t5-large") == {"generator": "flan-t5-small", "classifier": "flan-t5-large"}
    for bad in ("gpt-9", "generator=roberta-base", "roberta-base,deberta-base"):
        with pytest.raises(BenchSpecError):
            parse_random_weights(bad)


def test_random_weights_bench_is_fixed_length_and_flags_parity(tiny_tsv, tmp_path, monkeypatch):
    """The random-weight path end to end, on miniature shapes patched into the table."""
    from breaknli_fast.bench import shapes

    monkeypatch.setitem(shapes.SHAPES, "mini-t5-shape", {
        "family": "t5", "d_model": 32, "d_ff": 64, "d_kv": 8, "num_heads": 4, "num_layers": 1, "num_decoder_layers": 1,
        "vocab_size": 8200, "feed_forward_proj": "gated-gelu", "tie_word_embeddings": False})
    monkeypatch.setitem(shapes.SHAPES, "mini-roberta-shape", {
        "family": "roberta", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 4, "intermediate_size": 64,
        "vocab_size": 8200, "max_position_embeddings": 130, "type_vocab_size": 1})
    loop = BreakNLIConfig(k=4, u=2, s=1, decoding=Decoding(top_p=1.0, top_k=0, max_new_tokens=6), seed=0)
    cfg = BenchConfig(engines="torch:fp32", dataset=str(tiny_tsv), limit=6, probe_config=loop, warmup=0, min_iterations=1,
                      min_seconds=0.0, gen_prompts=2, greedy_prompts=2, cache_dir=str(tmp_path / "cache"),
                      random_weights={"generator": "mini-t5-shape", "classifier": "mini-roberta-shape"})
    res = run_bench(cfg)
    d = res.data
    assert d["parity_meaningful"] is False and any("NOT meaningful" in n for n in d["notes"])
    assert d["config"]["probe_config"]["decoding"]["min_new_tokens"] == 6
    info = d["models"]["random_weights"]
    gen_dir = Path(info["generator"]["path"])
    assert (gen_dir / ".complete").exists() and info["generator"]["tokenizer_size"] <= 8200
    assert d["engines"][0]["checks"] == {"applied": False, "failures": [], "passed": True}
    g = d["engines"][0]["speed"]["stages"]["generate"]
    # fixed length: 6 new tokens per sequence (a generated pad id would be dropped from the count)
    assert 0.8 * 2 * 4 * 6 <= g["new_tokens_per_iteration"] <= 2 * 4 * 6
    assert "not meaningful" in res.to_markdown()
    # the tokenizer is the shipped mini model's when installed (ids fit the vocabulary), else trained here
    meta = json.loads((gen_dir / "random_weights.json").read_text())
    shipped = shapes.shipped_tokenizer("t5", 8200)
    assert meta["tokenizer_source"] == (str(shipped) if shipped else "trained on the bench's texts")
    # the second run reuses the cached folders; a model whose files change mid-bench fails it
    from breaknli_fast.bench import runner as bench_runner

    calls = {"n": 0}
    real = bench_runner._fingerprint

    def drifting(model):
        calls["n"] += 1
        fp = real(model)
        return {**fp, "drift": calls["n"]} if model == str(gen_dir) else fp

    monkeypatch.setattr(bench_runner, "_fingerprint", drifting)
    again = run_bench(cfg)
    assert again.data["models"]["random_weights"]["generator"]["path"] == str(gen_dir)
    assert again.data["models"]["changed_during_bench"] == [str(gen_dir)] and again.passed is False
    assert any("changed while the bench ran" in f for f in again.data["failures"])


def test_component_split_measures_each_quantised_model_alone(tiny_t5, tiny_roberta, tiny_tsv, tmp_path):
    specs = parse_engines("ort:int8,torch:fp32", split=True)
    assert [(s.label, s.role_precision("classifier"), s.role_precision("generator")) for s in specs] == [
        ("torch:fp32", "fp32", "fp32"), ("ort:int8", "int8", "int8"),
        ("ort:int8 generator only", "fp32", "int8"), ("ort:int8 classifier only", "int8", "fp32")]
    assert parse_engines("ort:int8:clf.precision=fp32")[1].role_precision("classifier") == "fp32"
    # an entry with options is measured as a whole; a probe with one model has nothing to split; MERGE splits its
    # masked LM from its classifier
    assert [s.label for s in parse_engines("ort:int8:clf.quantization=static", split=True)] == [
        "torch:fp32", "ort:int8:clf.quantization=static"]
    assert len(parse_engines("ort:int8", split=True, roles=("classifier",))) == 2
    merge = parse_engines("ort:int8", split=True, roles=("classifier", "mlm"))
    assert [(s.label, s.role_precision("classifier"), s.role_precision("mlm")) for s in merge[1:]] == [
        ("ort:int8", "int8", "int8"), ("ort:int8 mlm only", "fp32", "int8"), ("ort:int8 classifier only", "int8", "fp32")]
    # on a tiny model, bf16 on torch: the split engines run each role at the precision they say
    r = _bench(tiny_t5, tiny_roberta, tiny_tsv, tmp_path / "split", "torch:bf16", "--warmup", "0", "--mode", "contradictive")
    assert r.exit_code == 0, r.output
    data = json.loads((tmp_path / "split" / "bench.json").read_text())
    by = {e["label"]: e for e in data["engines"]}
    assert set(by) == {"torch:fp32", "torch:bf16", "torch:bf16 generator only", "torch:bf16 classifier only"}
    gen_only, clf_only = by["torch:bf16 generator only"], by["torch:bf16 classifier only"]
    assert (gen_only["classifier_precision"], gen_only["generator_precision"]) == ("fp32", "bf16")
    assert gen_only["component_of"] == "torch:bf16"
    # identity where identity is the point: the fp32 role is the reference's own model on the same inputs
    cls = gen_only["parity"]["classifier"]["all"]
    assert cls["label_agreement_pct"] == 100.0 and cls["max_abs_logit_diff"] == 0.0
    assert clf_only["parity"]["generator"]["sampled_candidates"]["identical_pct"] == 100.0
    # bf16's parity with the fp32 reference is judged like any engine's (the tiny run's cells get verdicts where
    # examples were evaluated), and its classifier is compared on identical pairs
    bf16 = by["torch:bf16"]
    assert bf16["status"] == "ok" and {"equivalent", "different", "inconclusive"} <= set(bf16["parity"]["verdicts"])
    assert bf16["parity"]["classifier"]["all"]["label_agreement_pct"] is not None
    assert "`torch:bf16`" in (tmp_path / "split" / "bench.md").read_text()


def test_an_engine_is_shown_to_differ_only_when_a_cell_stays_different_judged_together():
    """bench.md's "shown to match?": a cell different at 95 % among many (n = 117, +4.3 pp, [+1.0, +9.6]) is not
    enough for "no" (its Bonferroni interval over the 37 cells includes 0); a large difference is."""
    from breaknli_fast.bench.report import shown_to_match
    from breaknli_fast.stats import compare

    ref = [0] * 117
    small = compare([1] * 10 + [0] * 107, [1] * 5 + [0] * 112, 1.0)  # 5 of 117 up, none down: +4.3 pp
    assert small["verdict"] == "different"
    equal = compare(ref, ref, 1.0)
    metrics = {f"m{i}": dict(equal) for i in range(36)}
    block = from_json(Parity, {"headline": {"metrics": {**metrics, "shifted": dict(small)}}})
    par.add_verdicts(block, 1.0)
    assert block.verdicts.different == 1 and block.verdicts.different_confirmed == 0
    fw = block.headline.metrics["shifted"].familywise
    assert fw["cells"] == 37 and fw["ci"][0] < 0 < fw["ci"][1] and not fw["confirmed"]
    engine = EngineResult("ort:int8", parity=block)
    assert shown_to_match(engine).startswith("not shown: 1 of 37 cells differ beyond the tolerance at 95 % each")
    big = compare([1] * 60 + [0] * 57, ref, 1.0)
    block = from_json(Parity, {"headline": {"metrics": {**metrics, "shifted": dict(big)}}})
    par.add_verdicts(block, 1.0)
    assert block.verdicts.different_confirmed == 1
    assert shown_to_match(EngineResult("ort:int8", parity=block)).startswith("no: 1 of 37 cells differ")
