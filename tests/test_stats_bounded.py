"""Every statistical routine does bounded work, on adversarial cases too, and its values are the exact ones.

A difference that is the margin up to float rounding (19 of 40 against 21 of 40 per-candidate hits is
-0.9999999999999996 pp), one a hair inside it (δ - 1e-9), one example and a million: each verdict, interval and
projection of the examples needed computes a bounded number of intervals (counted, not timed: a wall-clock budget
fails under load; an unbounded search would not return at all).
The t quantile is checked against mpmath (a dependency of torch's sympy), and the intervals against the exact
t quantile by bisection on its closed-form distribution function.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from breaknli_fast import stats


# a verdict's work: each projected n the search evaluates and each interval computed; the search evaluates at most
# its 12 rounds of 32 points and the two ends, each an interval at most twice (t intervals through interval_at)
SEARCH_BOUND = 2 * (12 * 32 + 2) + 2


def _counted(fn, *args, **kwargs):
    """``fn``'s result and the intervals it computed (the bounded work that replaces a wall-clock budget)."""
    count = [0]
    real_decides, real_interval = stats._decides, stats.interval_at

    def decides(entry, ns, done):
        count[0] += len(ns)
        return real_decides(entry, ns, done)

    def interval(entry, *a, **k):
        count[0] += 1
        return real_interval(entry, *a, **k)

    stats._decides, stats.interval_at = decides, interval
    try:
        out = fn(*args, **kwargs)
    finally:
        stats._decides, stats.interval_at = real_decides, real_interval
    return out, count[0]


def _t_entry(diff: float, sd: float, n: int) -> dict:
    e = {"method": "t", "n": n, "diff": diff, "sd": sd}
    e["ci"] = stats.interval_at(e)
    return e


def test_the_margin_up_to_rounding_returns_in_milliseconds():
    d = stats.paired_ratio_diff([1] * 19 + [0] * 21, [5] * 40, [1] * 21 + [0] * 19, [5] * 40)
    assert d["diff"] != -1.0 and d["diff"] == pytest.approx(-1.0, abs=1e-12)  # the rounding residue is there
    out, work = _counted(stats.equivalence, d, 1.0)
    assert out == {"verdict": "inconclusive", "n_needed": None, "too_small": True}  # no n decides at |Δ| = δ
    assert work == 0, work  # closed form: no search
    assert stats.margin_side(d["diff"], 1.0) == 0
    assert stats.margin_side(-1.0 + 1e-9, 1.0) == -1 and stats.margin_side(1.0 + 1e-9, 1.0) == 1
    assert stats.familywise_different(d, 1.0, 36)["confirmed"] is False


@pytest.mark.parametrize("n", [1, 2, 40, 1000, 10**6])
@pytest.mark.parametrize("gap", [0.0, 1e-15, -1e-15, -1e-9, 1e-9, -0.1, 0.1, -0.5])
def test_verdicts_near_the_margin_are_bounded_in_work(n, gap):
    """|Δ| = δ + gap for δ = 1 pp on n examples (t intervals of spread 0.044 and 0.3, and Tango's interval for
    the yes/no counts nearest to it): each verdict with its projection computes a bounded number of intervals."""
    cases = [_t_entry(-(1.0 + gap), sd, n) for sd in (0.0, 0.044, 0.3)]
    up = round(n * (0.2 + (1.0 + gap) / 200))
    down = up - round(n * (1.0 + gap) / 100)
    if 0 <= down <= up <= n:
        lo, hi = stats.tango_ci(up, down, n)
        cases.append({"method": "tango", "n": n, "up": up, "down": down, "diff": 100 * (up - down) / n,
                      "ci": [float(100 * lo), float(100 * hi)]})
    for e in cases:
        out, work = _counted(stats.equivalence, e, 1.0)
        assert work <= SEARCH_BOUND, (e, work)
        side = stats.margin_side(e["diff"], 1.0)
        if side == 0:
            assert out["n_needed"] is None and out["verdict"] != "different"
        if out["n_needed"] is not None:  # the projection is honest: at n_needed the verdict is reached
            ci = stats.interval_at(e, n=out["n_needed"])
            decided = (ci[0] > 0 or ci[1] < 0) if side > 0 else (-1 - 1e-9 <= ci[0] and ci[1] <= 1 + 1e-9)
            assert decided, (e, out, ci)
            if out["n_needed"] > e["n"] + 1:  # and one example fewer (up to the 0.1 % resolution) does not
                below = stats.interval_at(e, n=int(out["n_needed"] * 0.998) - 1)
                assert not ((below[0] > 0 or below[1] < 0) if side > 0
                            else (-1 - 1e-9 <= below[0] and below[1] <= 1 + 1e-9)), (e, out, below)
        _, work = _counted(stats.familywise_different, e, 1.0, 36)
        assert work == 1, work


def test_a_hair_inside_the_margin_needs_more_than_any_practical_n():
    e = _t_entry(1.0 - 1e-9, 0.044, 40)
    out, work = _counted(stats.equivalence, e, 1.0)
    assert out["n_needed"] is None and work <= 4  # about (1.96 · 0.044 / 1e-11)² examples: beyond 10⁹, no search
    e = _t_entry(0.9, 0.044, 40)  # 0.1 pp inside: about (1.96 · 4.4 / 0.1)² ≈ 7,400
    out = stats.equivalence(e, 1.0)
    assert 7000 < out["n_needed"] < 8000


def test_a_million_examples_and_one():
    rng = np.random.default_rng(5)
    ref = rng.random(10**6) < 0.3
    eng = ref.copy()
    eng[rng.choice(10**6, 12_000, replace=False)] ^= True  # 1.2 % discordant
    e = stats.compare(eng, ref, tolerance=1.0)
    assert e["verdict"] == "equivalent" and e["method"] == "tango"
    den = rng.integers(1, 6, 10**6).astype(float)
    num = rng.binomial(den.astype(int), 0.2).astype(float)
    r = stats.paired_ratio_diff(num, den, np.maximum(num - (rng.random(10**6) < 0.05), 0), den)
    v = stats.equivalence(r, 1.0)
    assert r["method"] == "t" and v["verdict"] in stats.VERDICTS
    u = stats.unpaired_diff(num / den, rng.random(10**6))  # Welch df about 2·10⁶: the quantile's series
    assert u["ci"][0] < u["diff"] < u["ci"][1]
    one = stats.paired_ratio_diff([1], [5], [2], [5])
    out, work = _counted(stats.equivalence, one, 1.0)
    half = 100 * stats.floor_half_width(1)  # one example: ±z²/(1 + z²) around -20 pp
    assert one["ci"] == [pytest.approx(-20 - half), pytest.approx(-20 + half)]
    assert out["verdict"] == "inconclusive" and work <= SEARCH_BOUND
    assert stats.compare([1], [1])["n_needed"] == stats.min_examples(1.0)


def test_t_quantile_is_bounded_in_work_at_any_df(monkeypatch):
    """At most NEWTON_STEPS evaluations of the distribution function, each a sum of at most DF_SERIES / 2 terms
    (above DF_SERIES a closed-form series): bounded whatever df."""
    quantile = stats.t_quantile.__wrapped__  # uncached
    calls: list[int] = []
    real = stats._t_central
    monkeypatch.setattr(stats, "_t_central", lambda t, df: calls.append(df) or real(t, df))
    for df in (1, 2, 3, 999, 1000, 1001, 4 * 10**5, 10**9, 10**15):
        for conf in (0.95, 1 - 0.05 / 1000):
            calls.clear()
            quantile(df, conf)
            assert len(calls) <= stats.NEWTON_STEPS and all(d <= stats.DF_SERIES for d in calls), (df, calls)
    with pytest.raises(ValueError):
        quantile(10, 1.0)


def test_t_quantile_matches_mpmath_to_1e_minus_9_relative():
    """Against the root of mpmath's regularised incomplete beta (40 digits): relative error below 1e-9 for
    two-sided tails down to 1e-6, below 1e-6 at a tail of 1e-9, df from 1 to 10⁹."""
    mp = pytest.importorskip("mpmath", reason="mpmath (installed with torch's sympy) gives the reference")
    mp.mp.dps = 40

    def exact(df: int, confidence: float):
        a, nu = 1 - mp.mpf(confidence), mp.mpf(df)
        tail = lambda t: mp.betainc(nu / 2, mp.mpf(1) / 2, 0, nu / (nu + t * t), regularized=True)  # noqa: E731
        start = stats.z_quantile(confidence) * (1 + 2 / df)
        return mp.findroot(lambda t: mp.log(tail(t)) - mp.log(a), start)

    worst = {}
    for conf in (0.5, 0.95, 0.99, 1 - 0.05 / 36, 1 - 1e-6, 1 - 1e-9):
        for df in (1, 2, 3, 4, 5, 7, 10, 29, 30, 117, 999, 1000, 1001, 4 * 10**5, 10**9):
            ref = exact(df, conf)
            worst[(df, conf)] = float(abs(stats.t_quantile(df, conf) - ref) / ref)
    bad = {k: v for k, v in worst.items() if v > (1e-6 if k[1] > 1 - 1e-7 else 1e-9)}
    assert not bad, bad


def _t_quantile_bisection(df: int, confidence: float = stats.CONFIDENCE) -> float:
    """The exact quantile the slow way: 100 bisection steps on the closed-form distribution function."""
    df = int(df)
    if df < 1:
        return math.inf
    lo, hi = 0.0, 1.0
    while stats._t_central(hi, df) < confidence:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if stats._t_central(mid, df) < confidence else (lo, mid)
    return hi


def test_the_intervals_are_those_of_the_exact_quantile(monkeypatch):
    """Paired and single intervals with the bounded quantile equal those with the exact one by bisection (up to
    1e-9 pp), on a seeded grid of per-example fractions, pooled ratios and Bonferroni levels."""
    rng = np.random.default_rng(45)
    cases = []
    for n in (2, 3, 15, 40, 117, 300, 999, 1002, 1500):
        a = rng.integers(0, 6, n) / 5
        b = np.where(rng.random(n) < 0.8, a, rng.integers(0, 6, n) / 5)
        den = rng.integers(1, 41, n).astype(float)
        na = rng.binomial(den.astype(int), 0.3).astype(float)
        nb = np.where(rng.random(n) < 0.7, na, rng.binomial(den.astype(int), 0.3)).astype(float)
        cases.append((a, b, na, nb, den))

    def intervals() -> list[float]:
        out = []
        for a, b, na, nb, den in cases:
            e, r = stats.paired_diff(a, b), stats.paired_ratio_diff(na, den, nb, den)
            out += e["ci"] + r["ci"] + stats.mean_ci(a) + stats.ratio_ci(na, den)
            out += stats.unpaired_diff(a, b[: len(b) // 2 + 1])["ci"]
            for level in (0.99, 1 - 0.05 / 36):
                out += stats.interval_at(e, level) + stats.familywise_different(r, 1.0, 36)["ci"]
        return out

    fast = intervals()
    monkeypatch.setattr(stats, "t_quantile", _t_quantile_bisection)
    exact = intervals()
    assert np.max(np.abs(np.array(fast) - np.array(exact))) < 1e-9
