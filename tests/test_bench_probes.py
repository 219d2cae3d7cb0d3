"""``bench --probe``: every registered probe through the study runner on every engine, its headline metrics paired
between engines, per-record prediction agreement, and the batch invariance of the labels."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from breaknli_fast.bench import agreement
from breaknli_fast.bench.runner import BenchConfig, run_bench
from breaknli_fast.engines.base import Predictions
from breaknli_fast.probes.accuracy import AccuracyProbe
from breaknli_fast.probes.breaknli import BreakNLIProbe
from breaknli_fast.probes.merge import MergeConfig, MergeProbe
from breaknli_fast.probes.permutation import PermutationConfig, PermutationProbe
from test_merge import FakeTagger

runner = CliRunner()
FAST = dict(warmup=0, min_iterations=1, min_seconds=0.0, invariance_pairs=12)


def test_accuracy_probe_from_the_command_line(tiny_roberta, tiny_tsv, permuted, tmp_path):
    from test_bench import _app

    out = tmp_path / "acc"
    r = runner.invoke(_app(), ["bench", "--probe", "accuracy", "-c", tiny_roberta, "-d", str(tiny_tsv), "--limit", "20",
                               "-e", f"torch:fp32,torch:fp32:label=same,torch:fp32:label=perm:classifier={permuted}", "--warmup",
                               "0", "--strict", "--out", str(out)])
    assert r.exit_code == 1, r.output  # the permuted classifier fails --strict (label agreement)
    d = json.loads((out / "bench.json").read_text())
    assert d["probe"] == "accuracy" and [m["name"] for m in d["headline_metrics"]] == ["accuracy (p, h)"]
    ref, same, perm = d["engines"]
    for e in (ref, same, perm):
        h = e["speed"]["end_to_end"]["headline"]["accuracy (p, h)"]
        assert h["n"] == 20 and h["ci"][0] <= h["rate"] <= h["ci"][1]
        assert e["batch_invariance"]["pairs"] == 20 and e["batch_invariance"]["labels_changed"] == 0
        assert e["speed"]["end_to_end"]["examples"] == 20 and e["speed"]["speedup"]["end_to_end"] > 0
    s = same["parity"]["headline"]
    assert s["records"]["identical"] == 20 and s["records"]["label_agreement_pct"] == 100.0
    m = s["metrics"]["accuracy (p, h)"]
    assert m["diff"] == 0.0 and m["up"] == m["down"] == 0 and m["verdict"] == "inconclusive" and m["too_small"]
    assert same["checks"]["passed"] is True
    p = perm["parity"]["headline"]
    assert p["records"]["identical"] == 0 and p["records"]["label_agreement_pct"] == 0.0
    assert p["metrics"]["accuracy (p, h)"]["up"] + p["metrics"]["accuracy (p, h)"]["down"] > 0
    assert any("label agreement" in f for f in perm["checks"]["failures"])
    md = (out / "bench.md").read_text()
    assert "## Paired differences from the reference" in md and "too few examples to judge" in md
    assert "records identical" in md and "labels changed by batching" in md and "## Stages" not in md


def test_permutation_probe_with_its_config_object(tiny_roberta, tiny_tsv):
    res = run_bench(BenchConfig(engines="torch:fp32,torch:fp32:label=same", probe="permutation",
                                probe_config=PermutationConfig(q=4, seed=1), classifier=tiny_roberta,
                                dataset=str(tiny_tsv), limit=16, **FAST))
    d = res.data
    assert d["config"]["probe_config"]["q"] == 4 and d["probe_identity"]["permutation"]["seed"] == 1
    assert [m["name"] for m in d["headline_metrics"]] == ["A", "omega_max", "omega_rand", "P_c", "P_f"]
    same = res.engine("same")
    rec = same.parity.headline.records
    assert rec.identical_pct == 100.0 and rec.labels_compared > rec.records  # (p, h) and each permutation
    metrics = same.parity.headline.metrics
    assert metrics["P_c"].kind == "mean" and metrics["A"].kind == "share"
    for name, m in metrics.items():
        if m.n:
            assert m.diff == 0.0 and m.ci[0] < 0 < m.ci[1], name  # identical engines: never a [0, 0]
    assert res.passed


def test_merge_probe_pairs_its_pooled_sample_accuracy(tiny_roberta, tiny_tsv, tiny_mlm):  # noqa: F811
    probe = MergeProbe(MergeConfig(top_k=40, min_suggestions=3, per_pos=4, seeds=3, chunk_size=5), tagger=FakeTagger())
    res = run_bench(BenchConfig(engines="torch:fp32,torch:fp32:label=same", probe=probe, classifier=tiny_roberta,
                                mlm=tiny_mlm, dataset=str(tiny_tsv), limit=24, **FAST))
    d = res.data
    assert d["probe"] == "merge" and d["models"]["mlm"] == [tiny_mlm]
    m = res.engine("same").parity.headline.metrics
    assert m["sample_accuracy"].kind == "ratio" and m["sample_accuracy"].n > 5
    assert m["sample_accuracy"].diff == 0.0 and m["sample_accuracy"].method == "t"
    ref_sa = res.engine("torch:fp32").speed.end_to_end.headline["sample_accuracy"]
    assert ref_sa.rate == pytest.approx(d["engines"][0]["speed"]["end_to_end"]["headline"]["sample_accuracy"]["rate"])
    assert res.engine("same").parity.headline.records.identical_pct == 100.0


def test_component_split_follows_the_probes_models():
    from breaknli_fast.bench.specs import parse_engines

    cfg = BenchConfig(engines="ort:int8", probe="accuracy")
    assert [s.label for s in cfg.specs()] == ["torch:fp32", "ort:int8"]
    cfg = BenchConfig(engines="ort:int8", probe="merge")
    assert [s.label for s in cfg.specs()] == ["torch:fp32", "ort:int8", "ort:int8 mlm only", "ort:int8 classifier only"]
    assert [s.label for s in parse_engines("ort:int8", split=True)][2:] == ["ort:int8 generator only",
                                                                           "ort:int8 classifier only"]


# -- the parts --------------------------------------------------------------------------------------------

class _BatchDependent:
    """A classifier whose logits move with the size of the call: a pair near a decision boundary changes label
    with its batch neighbours, as dynamic int8's per-batch activation scales can make it."""

    max_batch = 8

    def __init__(self, per_row: bool):
        self.per_row = per_row

    def clear_cache(self) -> None:
        pass

    def classify(self, pairs):
        base = np.array([[0.0, 0.1 * (len(p) % 3), 0.05] for p, _ in pairs])
        if not self.per_row:
            base[:, 2] += 0.1 * (len(pairs) > 1)  # the batch shifts the third logit
        return Predictions(base)


def test_batch_invariance_counts_the_labels_that_depend_on_batch_neighbours():
    pairs = [("a" * i, "h") for i in range(9)]
    moved = agreement.batch_invariance(_BatchDependent(per_row=False), pairs)
    # alone, a row's third logit is 0.05: rows with a second logit of 0.1 or 0.2 are neutral; in a batch it is 0.15,
    # which the rows at 0.1 lose to: 3 of 9 change
    assert moved.pairs == 9 and moved.labels_changed == 3 and moved.max_abs_logit_diff == pytest.approx(0.1)
    still = agreement.batch_invariance(_BatchDependent(per_row=True), pairs)
    assert still.labels_changed == 0 and still.max_abs_logit_diff == 0.0
    assert agreement.batch_invariance(_BatchDependent(True), []).labels_changed is None
    assert agreement.invariance_pairs([("p", "h"), ("p", "h")], [("p", "x")], 5) == [("p", "h"), ("p", "x")]


def test_record_agreement_compares_labels_input_by_input():
    probe = BreakNLIProbe()
    rec = {"mode": "contradictive", "id": "x", "yhat": "entailment", "candidates": ["a", "b"],
           "relations": [["contradiction", None], ["neutral", "neutral"]], "evaluated": ["a"],
           "predictions": ["contradiction"]}
    assert probe.predictions(rec) == {"(p, h)": "entailment", "(h, a)": "contradiction", "(h, b)": "neutral",
                                      "(b, h)": "neutral", "(p, a)": "contradiction"}
    other = {**rec, "candidates": ["a", "c"], "relations": [["contradiction", None], ["neutral", "neutral"]]}
    r = agreement.record_agreement(probe, [rec], [other])
    assert r.identical == 0 and r.labels_compared == 3 and r.labels_equal == 3
    assert r.inputs_in_one_run_only == 4  # (h, b), (b, h) against (h, c), (c, h)
    acc = AccuracyProbe()
    a = [{"group": "entailment", "id": str(i), "yhat": "entailment", "correct": True} for i in range(3)]
    b = [dict(x, yhat="neutral", correct=False) if x["id"] == "1" else x for x in a]
    r = agreement.record_agreement(acc, a, b[:2])
    assert (r.records, r.identical, r.only_reference, r.only_engine) == (2, 1, 1, 0)
    assert PermutationProbe().predictions({"yhat": "neutral", "labels": "ENC"}) == {
        "(p, h)": "neutral", "permutation 0": "entailment", "permutation 1": "neutral", "permutation 2": "contradiction"}


def test_by_column_pairs_each_group_and_stays_out_of_the_checks(tiny_roberta, permuted, tmp_path):
    import tiny_models as testing

    tsv = tmp_path / "cats.tsv"
    with open(tsv, "w") as f:
        f.write("gold_label\tsentence1\tsentence2\tpairID\tneg\n")
        for i, (p, h, lab) in enumerate(testing.pairs(20)):
            f.write(f"{lab}\t{p}\t{h}\tq{i}\t{i % 2}\n")
    res = run_bench(BenchConfig(engines=f"torch:fp32,torch:fp32:label=perm:classifier={permuted}", probe="accuracy",
                                classifier=tiny_roberta, dataset=str(tsv), by="neg", **FAST))
    perm = res.engine("perm")
    by = perm.parity.headline.by["neg"]
    assert by.kind == "category" and [g.examples for g in by.groups] == [10, 10]
    cells = [g.metrics["accuracy (p, h)"] for g in by.groups]
    assert sum(c.n for c in cells) == perm.parity.headline.metrics["accuracy (p, h)"].n == 20
    total = perm.verdicts
    assert total.equivalent + total.different + total.inconclusive == 1  # the groups are not counted
    assert "## Paired differences per group (--by)" in res.to_markdown()
    with pytest.raises(Exception, match="no column 'nope'"):
        run_bench(BenchConfig(engines="torch:fp32", probe="accuracy", classifier=tiny_roberta, dataset=str(tsv),
                              by="nope", **FAST))


def test_an_engine_per_role_in_one_bench_entry(tiny_t5, tiny_roberta, tiny_tsv, tmp_path, monkeypatch):
    """``gen=ort:fp32/clf=torch:fp32``: the generator on ort, the classifier on torch, measured as one engine;
    ort fp32 gives torch's candidates, so its records are the reference's. A malformed entry is one line."""
    pytest.importorskip("onnxruntime")
    from test_bench import _app

    from breaknli_fast.bench.specs import BenchSpecError, parse_engine

    with pytest.raises(BenchSpecError, match="ROLE=ENGINE:PRECISION"):
        parse_engine("generator=ort:fp32/clf=torch:fp32")
    with pytest.raises(BenchSpecError, match="named twice"):
        parse_engine("gen=ort:fp32/gen=torch:fp32")
    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "mixed"
    r = runner.invoke(_app(), ["bench", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--limit", "6",
                               "-e", "torch:fp32,gen=ort:fp32:validate=false/clf=torch:fp32", "--warmup", "0",
                               "--k", "4", "--u", "2", "--s", "1", "--max-new-tokens", "6", "--greedy-prompts", "2",
                               "--gen-prompts", "2", "--min-iterations", "1", "--no-component-split", "--out", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads((out / "bench.json").read_text())
    mixed = d["engines"][1]
    assert mixed["label"] == "gen=ort:fp32:validate=false/clf=torch:fp32" and mixed["status"] == "ok"
    cfg = mixed["spec"]["config"]
    assert cfg["generator_engine"] == "ort" and cfg["classifier_engine"] == "torch"
    assert mixed["info"]["generator"]["engine"] == "ort" and mixed["info"]["classifier"]["engine"] == "torch"
    assert mixed["parity"]["headline"]["records"]["identical_pct"] == 100.0
