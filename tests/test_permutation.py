"""The word-order permutation probe (UNLI): the permutation rules, the metrics on a hand-computed table, resume,
bad input, and an end-to-end run on a tiny test model."""

from __future__ import annotations

import itertools
import json
import math
import random

import numpy as np
import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.probes.permutation import PermutationConfig, PermutationProbe
from breaknli_fast.probes.permutation.draws import (_enumerate, _sequential, bleu2, count_derangements, permutations,
                                                    permute, tokenize)
from breaknli_fast.probes.permutation.probe import _metrics, omega

runner = CliRunner()


def test_permutations_keep_punctuation_move_every_word_and_repeat_per_seed():
    text = "A man, in a red hat, plays the old guitar loudly."
    toks = tokenize(text)
    perms, why = permutations(text, 20, seed=4)
    assert why is None and len(perms) == 20 == len(set(perms))
    for p in perms:
        pt = p.split()
        assert len(pt) == len(toks)
        for a, b in zip(toks, pt):
            if a in {",", "."}:
                assert b == a  # punctuation in place
            else:
                assert b != a  # no word keeps its position
        assert sorted(pt) == sorted(toks)
    assert permutations(text, 20, seed=4)[0] == perms  # deterministic
    assert permutations(text, 20, seed=5)[0] != perms
    # permutation j is the same draw for both sentences of an example and for every example (seed j only)
    rng = np.random.default_rng(0)
    assert permute(["a", "b"], rng) == ["b", "a"]


@pytest.mark.parametrize("text,reason", [
    ("Hello.", "too_short"), ("!!! ...", "too_short"), ("", "too_short"),
    ("A dog runs.", "fewer_than_q"),  # 3 words: 2 derangements < q
    ("la la la la", "fewer_than_q"),  # every word the same: no position can change its word
])
def test_sentences_that_cannot_give_q_distinct_permutations_are_dropped(text, reason):
    assert permutations(text, 10, seed=0) == (None, reason)


def _brute_force(words):
    return {p for p in itertools.permutations(words) if all(a != b for a, b in zip(p, words))}


def test_derangements_are_counted_exactly():
    # distinct words: the derangement numbers; repeated words: distinct sequences only
    assert [count_derangements("abcdefgh"[:n]) for n in range(1, 9)] == [0, 1, 2, 9, 44, 265, 1854, 14833]
    assert count_derangements("aabb") == 1 and count_derangements("aaaa") == 0 and count_derangements("aab") == 0
    rng = random.Random(0)
    for _ in range(200):
        words = [rng.choice("abcd") for _ in range(rng.randint(1, 7))]
        every = _brute_force(words)
        assert count_derangements(words) == len(every) == len(_enumerate(words)), words
        assert set(_enumerate(words)) == every
    assert count_derangements([str(i) for i in range(20)]) == 895014631192902121  # !20, exact integers


def test_the_drop_rule_is_the_exact_count_not_collisions():
    # 6 distinct words have 265 derangements: kept at q = 100 (the thesis drops sentences of <= 5 words only)
    six = "Two dogs run across green grass."
    assert count_derangements(tokenize(six)[:-1]) == 265
    perms, why = permutations(six, 100, seed=0)
    assert why is None and len(set(perms)) == 100
    # 5 distinct words: 44 < 100, dropped; at q = 44 all of them, each once
    five = "Two dogs run across grass."
    assert permutations(five, 100, seed=0) == (None, "fewer_than_q")
    perms, why = permutations(five, 44, seed=0)
    assert why is None and len(set(perms)) == 44
    assert permutations(five, 45, seed=0) == (None, "fewer_than_q")
    # a 7-word sentence (1,854 derangements) and a longer one: q distinct, every word moved, for many seeds
    for text in ("A man plays an old red guitar.", "A woman in a red hat sings on the old stage tonight."):
        toks = tokenize(text)
        for seed in range(5):
            perms, why = permutations(text, 100, seed)
            assert why is None and len(set(perms)) == 100
            assert all(all(a != b or a == "." for a, b in zip(toks, p.split())) for p in perms)
    # many repeated words: few derangements among arrangements, drawn position by position, still exact
    words = ["la"] * 8 + ["x", "y", "z", "w", "v", "u", "t", "s", "r"]
    # the la's take 8 of the 9 other positions; the 9 words fill the rest, the leftover one's own word elsewhere
    assert count_derangements(words) == 9 * (math.factorial(9) - math.factorial(8))  # 0.03 % of arrangements
    perms, why = permutations(" ".join(words), 50, seed=1)
    assert why is None and len(set(perms)) == 50
    for p in perms:
        assert all(a != b for a, b in zip(words, p.split()))


def test_sequential_draws_are_uniform_over_the_derangements():
    words = list("aabbc")
    every = sorted(_brute_force(words))
    rng = np.random.default_rng(0)
    counts = {p: 0 for p in every}
    for _ in range(len(every) * 300):
        counts[tuple(_sequential(words, rng))] += 1
    assert set(counts) == set(every) and min(counts.values()) > 200 and max(counts.values()) < 400


def test_non_ascii_text_is_tokenised_and_permuted():
    perms, why = permutations("Ein Mädchen läuft über die grüne Straße, schnell und fröhlich.", 10, seed=1)
    assert why is None and all("Mädchen" in p and p.endswith(".") for p in perms)


def test_bleu2_of_the_original_is_one_and_of_a_reversal_low():
    t = "a b c d e".split()
    assert bleu2(t, t) == pytest.approx(1.0)
    assert bleu2(list(reversed(t)), t) == 0.0
    assert bleu2("b c a d e".split(), t) == pytest.approx(np.sqrt(2 / 4))


def test_metrics_on_a_hand_computed_table():
    # six examples, n = 6 permutations each, like the study's figure: three right unpermuted, three wrong
    rows = [("E", "E", 6), ("E", "E", 2), ("N", "N", 0), ("C", "N", 3), ("C", "E", 0), ("N", "E", 1)]
    kept = [{"gold": g, "yhat": y, "c": k / 6, "n_correct": k, "entropy_correct_sum": 0.5 * k} for g, y, k in rows]
    m = _metrics(kept)
    assert m["A"]["rate"] == pytest.approx(50.0)
    assert m["omega_max"]["rate"] == pytest.approx(100 * 4 / 6)  # c > 0: examples 1, 2, 4, 6
    assert m["omega_rand"]["rate"] == pytest.approx(100 * 2 / 6)  # c > 1/3: 6/6 and 3/6
    assert m["omega_1"]["rate"] == pytest.approx(100 * 1 / 6)  # every permutation accepted: example 1
    # P^c: mean c over every originally correct example (D^c), the one with c = 0 included (the thesis)
    assert m["P_c"]["rate"] == pytest.approx(100 * (1 + 2 / 6 + 0) / 3) and m["P_c"]["n"] == 3
    assert m["P_f"]["rate"] == pytest.approx(100 * (3 / 6 + 1 / 6) / 2) and m["flips"] == 2 and m["wrong"] == 3
    assert m["entropy_correct_orig_correct"] == pytest.approx(0.5)
    # a bag-of-words model: the permutations change nothing, P^c = 100 and no flip
    bow = [{"gold": "E", "yhat": "E", "c": 1.0, "n_correct": 6, "entropy_correct_sum": 1.0},
           {"gold": "E", "yhat": "N", "c": 0.0, "n_correct": 0, "entropy_correct_sum": 0.0}]
    m = _metrics(bow)
    assert m["P_c"]["rate"] == 100.0 and m["flips"] == 0 and m["P_f"]["n"] == 0


def test_omega_curve_uses_c_above_x_and_every_permutation_at_the_endpoint():
    c = np.array([0.0, 0.5, 1.0, 1.0])
    assert omega(c, 0.0) == 75.0 and omega(c, 0.5) == 50.0 and omega(c, 0.99) == 50.0
    assert omega(c, 1.0) == 50.0  # the thesis's Ω_1.0, not c > 1 (always 0)
    assert omega(np.array([]), 0.3) is None


@pytest.mark.parametrize("kw,match", [({"q": 0}, "--q must be between 1 and 10000"), ({"q": 10**8}, "--q must be between"),
                                      ({"scheme": "prem"}, "unknown --scheme")])
def test_bad_settings_are_one_line(kw, match):
    with pytest.raises(ValueError, match=match):
        PermutationConfig(**kw)


def _tsv(tmp_path):
    src = tmp_path / "long.tsv"
    rows = [("A man in a blue shirt is playing a guitar on the street.", "A person plays an instrument outside.", "entailment"),
            ("Two dogs run across a wide green field in the sun.", "The animals are sleeping inside the house today.", "contradiction"),
            ("A woman with a large hat reads a book in the park.", "The woman is reading a novel for her class.", "neutral"),
            ("Hi.", "Hello there.", "neutral")] * 3
    src.write_text("premise\thypothesis\tlabel\n" + "".join(f"{p}\t{h}\t{lab}\n" for p, h, lab in rows))
    return src


def _run(tmp_path, tiny_roberta, out, *extra):
    return runner.invoke(app, ["run", "--probe", "permutation", "-c", tiny_roberta, "-d", str(_tsv(tmp_path)),
                               "--engine", "torch", "--q", "12", "--chunk-size", "2", "--out", str(out), *extra])


def test_end_to_end_on_a_tiny_model_with_resume(tmp_path, tiny_roberta):
    r = _run(tmp_path, tiny_roberta, tmp_path / "full")
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "full" / "report.json").read_text())
    assert rep["probe"] == "permutation" and rep["examples"] == 12 and rep["kept"] == 9
    assert rep["dropped"]["too_short"] == 3
    recs = [json.loads(x) for x in (tmp_path / "full" / "samples.jsonl").read_text().splitlines()]
    kept = [x for x in recs if x["status"] == "kept"]
    assert all(sum(x["counts"].values()) == 12 and "permutations" not in x for x in kept)
    assert all(abs(x["c"] - x["counts"][x["gold"]] / 12) < 1e-6 for x in kept)
    assert all(len(x["labels"]) == 12 and x["labels"].count("E") == x["counts"]["entailment"] for x in kept)
    assert "Ω_max" in r.output and "Ω_rand" in (tmp_path / "full" / "report.md").read_text()
    # interrupted after two chunks, then the same command: the same records
    import breaknli_fast.probes.permutation.probe as mod

    calls = {"n": 0}
    original = mod.PermutationProbe.process

    def stop_after_two(self, ctx, group, chunk):
        calls["n"] += 1
        if calls["n"] > 2:
            raise KeyboardInterrupt
        return original(self, ctx, group, chunk)

    mod.PermutationProbe.process = stop_after_two
    try:
        r = _run(tmp_path, tiny_roberta, tmp_path / "cut")
    finally:
        mod.PermutationProbe.process = original
    assert r.exit_code == 130
    assert len((tmp_path / "cut" / "samples.jsonl").read_text().splitlines()) == 4
    r = _run(tmp_path, tiny_roberta, tmp_path / "cut")
    assert r.exit_code == 0, r.output
    again = [json.loads(x) for x in (tmp_path / "cut" / "samples.jsonl").read_text().splitlines()]
    assert again == recs
    # --save-permutations keeps the texts; q = 0 is a one-line error
    r = _run(tmp_path, tiny_roberta, tmp_path / "saved", "--save-permutations", "--limit", "1")
    assert r.exit_code == 0, r.output
    rec = json.loads((tmp_path / "saved" / "samples.jsonl").read_text().splitlines()[0])
    assert len(rec["permutations"]) == 12
    r = _run(tmp_path, tiny_roberta, tmp_path / "bad", "--q", "0")
    assert r.exit_code == 2 and "error: Invalid value for '--q'" in r.output and "Traceback" not in r.output


def test_probe_identity_and_groups():
    p = PermutationProbe(PermutationConfig(q=5, scheme="hyp", seed=2))
    assert p.identity() == {"permutation": {"q": 5, "scheme": "hyp", "seed": 2, "chunk_size": 16,
                                            "save_permutations": False}}
