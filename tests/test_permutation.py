"""The word-order permutation probe (UNLI): the permutation rules, the metrics on a hand-computed table, resume,
bad input, and an end-to-end run on a tiny test model."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.probes.permutation import (PermutationConfig, PermutationProbe, _metrics, bleu2, permutations,
                                              permute, tokenize)

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
    ("A dog runs.", "not_distinct"),  # 3 words: 2 derangements < q
    ("la la la la", "cannot_derange"),  # every word the same: no position can change its token
])
def test_sentences_that_cannot_give_q_distinct_permutations_are_dropped(text, reason):
    assert permutations(text, 10, seed=0) == (None, reason)


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
    assert m["P_c"]["rate"] == pytest.approx(100 * (1 + 2 / 6) / 2) and m["P_c"]["n"] == 2
    assert m["P_f"]["rate"] == pytest.approx(100 * (3 / 6 + 1 / 6) / 2) and m["flips"] == 2 and m["wrong"] == 3
    assert m["entropy_correct_orig_correct"] == pytest.approx(0.5)
    # a bag-of-words model: the permutations change nothing, P^c = 100 and no flip
    bow = [{"gold": "E", "yhat": "E", "c": 1.0, "n_correct": 6, "entropy_correct_sum": 1.0},
           {"gold": "E", "yhat": "N", "c": 0.0, "n_correct": 0, "entropy_correct_sum": 0.0}]
    m = _metrics(bow)
    assert m["P_c"]["rate"] == 100.0 and m["flips"] == 0 and m["P_f"]["n"] == 0


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
    import breaknli_fast.probes.permutation as mod

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
