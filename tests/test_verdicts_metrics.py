import itertools

import pytest

from breaknli_fast.probes.breaknli.metrics import mode_label_rates as breakdown, rates
from breaknli_fast.probes.breaknli.verdicts import RULES, verdict

E, N, C = "entailment", "neutral", "contradiction"

# Hand-written from the spec's table: (mode, yhat, prediction) -> (inequality, relaxed)
EXPECTED = {
    ("contradictive", E, E): (True, True), ("contradictive", E, N): (False, True), ("contradictive", E, C): (False, False),
    ("contradictive", C, C): (True, True), ("contradictive", C, N): (False, True), ("contradictive", C, E): (False, False),
    ("entailed", E, C): (True, True), ("entailed", E, N): (False, True), ("entailed", E, E): (False, False),
    ("entailed", C, E): (True, True), ("entailed", C, N): (False, True), ("entailed", C, C): (False, False),
    ("entailed", N, E): (True, True), ("entailed", N, C): (True, True), ("entailed", N, N): (False, False),
}


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_every_case_of_the_verdict_table(case):
    mode, yhat, pred = case
    v = verdict(mode, yhat, [pred])
    assert (v.inequality, v.relaxed) == EXPECTED[case]


def test_table_covers_exactly_the_spec_cases():
    cases = {(m, y, p) for (m, y) in RULES for p in (E, N, C)}
    assert cases == set(EXPECTED)
    with pytest.raises(ValueError):
        verdict("contradictive", N, [E])


def test_expected_labels():
    assert RULES[("contradictive", E)].expected == C and RULES[("contradictive", C)].expected == E
    assert all(RULES[("entailed", y)].expected == y for y in (E, N, C))


def test_example_counts_once_and_candidates_are_counted():
    v = verdict("contradictive", E, [C, E, N, E, C])
    assert v.inequality and v.relaxed and v.n_candidates == 5 and v.n_inequality == 2 and v.n_relaxed == 3


def _row(mode, yhat, preds):
    return {"mode": mode, "yhat": yhat, "status": "evaluated", "verdict": verdict(mode, yhat, preds).to_dict()}


def test_overall_pools_examples_not_label_means():
    # contradictive: 3 E examples (1 broken), 1 C example (broken)
    rows = [_row("contradictive", E, [C, C]), _row("contradictive", E, [C, C]), _row("contradictive", E, [E, C]),
            _row("contradictive", C, [C, N])]
    b = breakdown(rows)["contradictive"]
    assert b[E]["inequality"] == pytest.approx(100 / 3)
    assert b[C]["inequality"] == pytest.approx(100.0)
    assert b["overall"]["inequality"] == pytest.approx(50.0)  # 2 of 4, not mean(33.3, 100) = 66.7
    assert b["overall"]["relaxed"] == pytest.approx(50.0)
    # per candidate: 2 inequalities of 8 candidates; relaxed: E, C, N -> 3 of 8
    assert b["overall"]["cand_inequality"] == pytest.approx(25.0)
    assert b["overall"]["cand_relaxed"] == pytest.approx(37.5)
    assert b["overall"]["n"] == 4 and b["overall"]["n_candidates"] == 8
    assert N not in b


def test_cis_bracket_the_point_estimate():
    preds = itertools.cycle([[C, C], [E, C], [N, C], [C, N], [N, N]])
    rows = [_row("contradictive", E, next(preds)) for _ in range(57)]
    r = rates([x["verdict"] for x in rows])
    for k in ("inequality", "relaxed", "cand_inequality", "cand_relaxed"):
        lo, hi = r[k + "_ci"]
        assert lo <= r[k] <= hi and lo < hi
    assert rates([x["verdict"] for x in rows]) == r  # no resampling: the same figures every time


def test_per_candidate_interval_of_one_example_is_not_a_point():
    # one evaluated example with 3 of 5 candidates non-compliant: the candidates share p, h and the draw, so
    # the interval is over examples, and one example pins nothing down (report.md printed [60.00, 60.00])
    r = rates([verdict("contradictive", E, [E, E, E, C, C]).to_dict()])
    assert r["cand_inequality"] == pytest.approx(60.0) and r["cand_inequality_ci"] == [0.0, 100.0]
    assert r["inequality_ci"][0] > 0 and r["inequality_ci"][1] == 100.0  # Wilson, 1 of 1


def test_empty_rates():
    r = rates([])
    assert r["n"] == 0 and r["inequality"] is None


def test_wilson_interval_holds_the_point_and_is_honest_at_the_boundary():
    from breaknli_fast.stats import wilson_ci

    for k, n in [(0, 3), (3, 3), (1, 7), (0, 40), (40, 40), (17, 40)]:
        lo, hi = wilson_ci(k, n)
        assert 0.0 <= lo <= 100 * k / n <= hi <= 100.0
    lo, hi = wilson_ci(40, 40)
    assert hi == 100.0 and lo == pytest.approx(91.24, abs=0.01)  # not [100, 100]
    assert wilson_ci(0, 40) == [0.0, pytest.approx(8.76, abs=0.01)]


def test_one_example_s_intervals_are_the_ones_report_md_describes():
    """report.md says what the per-candidate interval of one example is; the Python API gives the same figures."""
    import inspect

    from breaknli_fast.probes.breaknli import report as breaknli_report

    one = rates([{"inequality": True, "relaxed": True, "n_candidates": 1, "n_inequality": 1, "n_relaxed": 1}])
    assert [round(x, 2) for x in one["cand_inequality_ci"]] == [20.65, 100.0]
    assert [round(x, 2) for x in one["inequality_ci"]] == [20.65, 100.0]  # Wilson, 1 of 1
    three_of_five = rates([{"inequality": True, "relaxed": True, "n_candidates": 5, "n_inequality": 3,
                            "n_relaxed": 3}])
    assert three_of_five["cand_inequality_ci"] == [0.0, 100.0]
    text = inspect.getsource(breaknli_report)
    assert "100 % gives [20.65, 100]" in text and "60 % gives [0, 100]" in text
