"""The pair-level shortcut check (breaknli_fast.data.synthetic.shortcut.pair_baselines) and the pair-balanced
corpora: the check finds the shortcuts of generator version 2 (still made with ``pair_balance=False``), its
models find planted ones, and the default corpora share every pair feature within a rank, so every baseline
stays at the majority class."""

from __future__ import annotations

import hashlib
import json
import random

import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.data.labels import ENTAILMENT, LABELS
from breaknli_fast.data.synthetic import aenli, kinship, logic, shortcut, verify

runner = CliRunner()
GENERATORS = {"aenli": (aenli.generate, aenli.AenliConfig), "kinship": (kinship.generate, kinship.KinshipConfig)}


def test_pair_features_read_the_pair():
    f = dict(zip(shortcut.PAIR_FEATURES, shortcut.pair_features(
        "Every man did not kick a ball and the woman carried an apple.", "A man kicked every ball.")))
    assert (f["p_negations"], f["h_negations"], f["diff_negations"]) == (1, 0, -1)
    assert (f["p_every"], f["p_a"], f["p_the"], f["p_quantifiers"]) == (1, 2, 1, 4)
    assert (f["p_words"], f["h_words"], f["diff_words"]) == (13, 5, -8)
    assert (f["shared_words"], f["h_only_words"]) == (4, 1)  # every, a, man, ball; only "kicked"
    f = dict(zip(shortcut.PAIR_FEATURES, shortcut.pair_features("Sam's father is Alex. Alex is Kai's son.",
                                                                "Kai is Sam's grandfather.")))
    assert (f["p_possessives"], f["h_possessives"], f["h_possessives_in_p"], f["h_words_possessive_in_p"]) == \
        (2, 1, 1, 1)  # Sam's in both; Kai, the hypothesis's holder, is a possessor in the premise


# sha256 of the (premise, hypothesis, label) of the first 300 pairs, seed 3, as the generators of version 2 wrote
# them (commit 03b1f29, before the pair balance): pair_balance=False writes those same pairs
VERSION_2 = {"aenli": "eb275cf400b938fcff06f8a1af1b51cc6cf791ce18a3858c64d9b86829d9375f",
             "kinship": "18640f1ba39ec62fa3a865b2fd1e949caea04e947e5e62cec2bb9f7c4d2b70c2"}


@pytest.mark.parametrize("name", ["aenli", "kinship"])
def test_no_pair_balance_writes_the_pairs_of_generator_version_2(name):
    gen, config = GENERATORS[name]
    rows = [[r["premise"], r["hypothesis"], r["label"]] for r in gen(300, seed=3, config=config(pair_balance=False))]
    assert hashlib.sha256(json.dumps(rows).encode()).hexdigest() == VERSION_2[name]


@pytest.mark.parametrize("name", ["aenli", "kinship"])
def test_the_check_flags_the_corpora_of_generator_version_2(name):
    """The pairs of version 2 (hypothesis skeletons only) carry pair-level shortcuts: the negation counts of
    the logic corpus, which chain end's name is a possessor in the kinship stories. The check reports them."""
    gen, config = GENERATORS[name]
    res = shortcut.pair_baselines(gen(2000, seed=5, config=config(pair_balance=False)))
    assert res["within"] is False and res["gap_pp"] > 15, res
    lead = {"aenli": "diff_negations", "kinship": "h_possessives_in_p"}[name]
    assert res["single"][lead] > res["majority"] + 15, res["single"]
    assert res["trees"] > res["majority"] + 15 and res["linear"] > res["majority"] + 10, res
    assert "OVER" in " ".join(shortcut.describe_pairs(res))


@pytest.mark.parametrize("name", ["aenli", "kinship"])
def test_the_three_pairs_of_a_rank_share_every_pair_feature(name):
    gen, _ = GENERATORS[name]
    rows = list(gen(1200, seed=9))
    by_label: dict[str, list[tuple[int, ...]]] = {lab: [] for lab in LABELS}
    for r in rows:
        by_label[r["label"]].append(tuple(shortcut.pair_features(r["premise"], r["hypothesis"])))
    ranks = list(zip(*by_label.values()))
    assert len(ranks) == 400 and all(e == n == c for e, n, c in ranks)
    assert len({r[0] for r in ranks}) > 40  # and the values vary from rank to rank
    res = shortcut.pair_baselines(rows)
    assert res["within"] and res["gap_pp"] <= shortcut.LIMIT_PP, res


def test_the_models_find_planted_pair_shortcuts():
    """A label written into the number of negations of the premise (one feature alone gives it), and into
    whether the two sides' counts agree (neither count shows it; their difference, and the models, do)."""
    rng = random.Random(1)
    single, pair = [], []
    for i in range(1200):
        lab = LABELS[i % 3]
        p_not, h_not = rng.randrange(3), rng.randrange(3)
        words = ["sam", "kai", "alex", "jo", "lee"]
        filler = " ".join(rng.sample(words, 3))
        single.append({"premise": f"{filler} " + "not " * LABELS.index(lab), "hypothesis": filler, "label": lab})
        if lab == ENTAILMENT:
            h_not = p_not
        elif h_not == p_not:
            h_not = (p_not + 1) % 3
        pair.append({"premise": f"{filler} " + "not " * p_not, "hypothesis": f"{filler} " + "not " * h_not,
                     "label": lab})
    res = shortcut.pair_baselines(single)
    assert res["single"]["p_negations"] > 95 and not res["within"]
    res = shortcut.pair_baselines(pair)
    assert max(res["single"][f] for f in ("p_negations", "h_negations")) < res["majority"] + 8, res["single"]
    assert res["single"]["diff_negations"] > res["majority"] + 20 and res["trees"] > res["majority"] + 20, res


def test_pair_baselines_are_bounded_and_handle_few_rows():
    rows = list(aenli.generate(60, seed=1))
    assert shortcut.pair_baselines(rows[:3]) == {"rows": 3, "within": None, "limit_pp": shortcut.LIMIT_PP}
    assert shortcut.describe_pairs(shortcut.pair_baselines(rows[:3]))[0].startswith("pair-level baselines: too few")
    res = shortcut.pair_baselines(list(kinship.generate(600, seed=1)))
    assert res["rows"] == 600 and res["test"] == 300


def test_pair_balanced_pairs_keep_their_labels_by_the_independent_checkers():
    rows = list(aenli.generate(240, seed=13))
    assert {r["distractor"] for r in rows if r["connective"] == "none"} == {1, 2}  # before or after
    assert all(r["distractor"] == 0 for r in rows if r["connective"] != "none")
    cache: dict = {}
    for r in rows:
        p, h = verify.parse_sentence(r["premise"]), verify.parse_sentence(r["hypothesis"])
        assert logic.label(p.sentence(), h.sentence()) == r["label"], r
        assert verify.brute_force_label(p, h, 4, 3, cache=cache) == r["label"], r
    assert {r["phenomenon"] for r in rows} >= {"other_vocabulary", "compound_and", "compound_or", "compound_if",
                                                "determiner"}
    for ex in kinship.examples(240, seed=13):
        assert verify.check_kinship(ex) == [], ex.row
        assert verify.kinship_label_from_text(ex.row["premise"], ex.row["hypothesis"]) == ex.row["label"]


def test_generate_prints_the_pair_level_baselines(tmp_path):
    for name, extra in (("aenli", []), ("kinship", ["--no-pair-balance"])):
        r = runner.invoke(app, ["generate", name, "-n", "120", "-o", str(tmp_path / f"{name}.jsonl"),
                                "--no-progress", *extra])
        assert r.exit_code == 0, r.output
        out = " ".join(r.output.split())
        assert "pair-level baselines (surface features of premise and hypothesis" in out
        assert "trained on 60 of the first 120 pairs" in out
        for what in ("best single feature (", "logistic regression on all features", "gradient-boosted trees"):
            assert what in out
