"""The cudagraph engine's GPU-check steps (backends/cudagraph/check.py) where a dry run on the mini models cannot
reach them: a random-weight T5, which never draws its end-of-sequence token, given the smallest output-row factor
that makes its greedy candidates end by themselves (the ``natural-eos`` step on real shapes), and a shape that needs
the random-weight builder refused in one line without it."""

from __future__ import annotations

import json

import pytest

from breaknli_fast.backends.cudagraph import check


def test_a_random_t5_ends_its_candidates_by_itself_after_the_eos_factor(tiny_t5, tmp_path):
    prompts = check._prompts(6)
    res = check.natural_eos(tiny_t5, "cpu", ["torch:fp32", "cudagraph:fp32"], prompts, 4, 40, 1, tmp_path,
                            biased=True, eos_target=20)
    bias = res["eos_bias"]
    assert bias["factor"] > 1 and bias["mean_greedy_length"] < 40 and len(bias["tried"]) == 8
    assert (tmp_path / "eos-model" / "config.json").exists()  # the scaled copy the engines loaded
    torch_, graph = res["engines"]["torch:fp32"], res["engines"]["cudagraph:fp32"]
    assert 0 < torch_["ended_by_eos_pct"] <= 100 and torch_["mean_length"] < 40
    assert graph["identical_to_first_pct"] == 100.0 and graph["candidates"] == 24
    unbiased = check.natural_eos(tiny_t5, "cpu", ["torch:fp32"], prompts, 4, 40, 1, tmp_path, biased=False)
    assert unbiased["engines"]["torch:fp32"]["ended_by_eos_pct"] < torch_["ended_by_eos_pct"]


def test_a_real_shape_without_the_builder_is_refused_in_one_line(tmp_path):
    with pytest.raises(SystemExit, match="shape 'base' needs the random-weight builder"):
        check.main(["natural-eos", "--device", "cpu", "--shapes", "base", "--out", str(tmp_path / "x.json")])
    assert check.common_prefix([1, 2, 3], [1, 2, 4, 5]) == 2
    assert json.loads(json.dumps(check.SHAPES))["mini"] == ["mini-t5", "mini-nli"]
