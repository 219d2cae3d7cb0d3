"""The intervals behind every rate and parity verdict: worked cases, and seeded simulations of their coverage.

The simulations draw data of known truth and count how often the 95 % interval holds it. A design cell whose
true difference is larger than its discordance allows (|Δ| > P(the two outcomes differ)) cannot exist and is
skipped, as is, for fractions, a Δ that the magnitudes drawn cannot reach; each test says which.
"""

from __future__ import annotations


import numpy as np
import pytest

from breaknli_fast import stats
from breaknli_fast.stats import (compare, equivalence, floor_half_width, mean_ci, min_examples, paired_diff,
                                 paired_ratio_diff, ratio_ci, rate_cell, t_quantile, tango_ci, unpaired_diff,
                                 wilson_ci)

NS = (15, 50, 200, 1000)
DISCORDANCE = (0.0, 0.01, 0.05, 0.20)
DELTA = 0.01  # δ = 1 percentage point
TRUE_DIFFS = (0.0, 2 * DELTA, -2 * DELTA)
MIN_COVERAGE = 0.93
MAX_FALSE_EQUIVALENCE = 0.05


def _judge(lo: np.ndarray, hi: np.ndarray, truth: float) -> tuple[float, float]:
    """(coverage, share of intervals inside ±δ, i.e. verdict *equivalent*)."""
    eps = 1e-12
    cov = float(np.mean((lo <= truth + eps) & (truth - eps <= hi)))
    eq = float(np.mean((lo >= -DELTA - 1e-9) & (hi <= DELTA + 1e-9)))
    return cov, eq


def _check_cells(rows: list[tuple[str, float, float, float]]) -> None:
    """rows: (cell, true Δ, coverage, P(equivalent)); every cell must keep the coverage, and no cell with
    |Δ| = 2δ may be called equivalent more than 5 % of the time."""
    bad = [r for r in rows if r[2] < MIN_COVERAGE]
    assert not bad, "coverage below 93 %: " + "; ".join(f"{c}: {cov:.3f}" for c, _, cov, _ in bad)
    false_eq = [r for r in rows if abs(r[1]) > DELTA and r[3] > MAX_FALSE_EQUIVALENCE]
    assert not false_eq, "equivalent at |Δ| = 2δ: " + "; ".join(f"{c}: {eq:.3f}" for c, _, _, eq in false_eq)


# -- worked cases ------------------------------------------------------------------------------------------

def test_zero_discordant_of_15_is_not_equivalent_and_of_1000_is():
    small = compare([0] * 15, [0] * 15, tolerance=1.0)
    assert small["method"] == "tango" and small["diff"] == 0.0
    assert small["ci"] == [pytest.approx(-20.388, abs=1e-3), pytest.approx(20.388, abs=1e-3)]  # ±z²/(n+z²)
    assert small["verdict"] == "inconclusive" and small["too_small"] is True
    assert small["n_needed"] == min_examples(1.0) == 381
    same_ones = compare([1] * 15, [1] * 15)  # all broken on both sides: still no discordance, the same width
    assert same_ones["ci"] == small["ci"]
    big = compare([1] * 300 + [0] * 700, [1] * 300 + [0] * 700, tolerance=1.0)
    assert big["ci"] == [pytest.approx(-0.3827, abs=1e-4), pytest.approx(0.3827, abs=1e-4)]
    assert big["verdict"] == "equivalent" and big["too_small"] is False


def test_tango_interval_matches_the_published_example_and_the_score_test():
    # Fagerland, Lydersen and Laake (2014), Table 2 (Bentur et al. 2009): 1 and 7 discordant of 21
    lo, hi = tango_ci(1, 7, 21)
    assert (float(lo), float(hi)) == (pytest.approx(-0.5172, abs=1e-4), pytest.approx(-0.0260, abs=1e-4))
    # one example, discordant: it says little either way
    lo, hi = tango_ci(0, 1, 1)
    assert float(lo) == -1.0 and 0.5 < float(hi) < 0.6
    e = compare([0], [1])
    assert e["verdict"] == "inconclusive" and e["too_small"] is True  # not "different" on one example


def test_an_all_zero_fraction_difference_is_not_a_point():
    e = compare([0.3, 0.7, 0.25] * 5, [0.3, 0.7, 0.25] * 5)
    assert e["method"] == "t" and e["diff"] == 0.0
    assert e["ci"] == [pytest.approx(-100 * floor_half_width(15)), pytest.approx(100 * floor_half_width(15))]
    assert e["verdict"] == "inconclusive" and e["n_needed"] == 381
    e = compare([0.3, 0.7, 0.25] * 400, [0.3, 0.7, 0.25] * 400)
    assert e["verdict"] == "equivalent" and e["ci"][1] == pytest.approx(100 * floor_half_width(1200))


def test_single_sample_intervals_are_never_points():
    assert rate_cell([0.6])["ci"] == [0.0, 100.0]  # one example of 3 candidates in 5: nothing to pin down
    assert ratio_ci([3], [5]) == [0.0, 100.0]
    lo, hi = mean_ci([1.0] * 50)
    assert hi == 100.0 and lo == pytest.approx(wilson_ci(50, 50)[0])  # at the boundary: Wilson's bound
    lo, hi = mean_ci([0.5, 0.6, 0.55, 0.45] * 25)
    assert lo < 52.5 < hi and hi - lo > 0
    assert mean_ci([]) is None and ratio_cell_empty()


def ratio_cell_empty() -> bool:
    return stats.ratio_cell([], [])["rate"] is None and stats.ratio_cell([1], [0])["n"] == 0


def test_verdicts_and_the_examples_a_decision_needs():
    rng = np.random.default_rng(0)
    ref = rng.random(4000) < 0.3
    flip = ref.copy()
    flip[:8] = ~flip[:8]  # 8 of 4,000 discordant: equivalent
    assert compare(flip, ref)["verdict"] == "equivalent"
    worse = ref.copy()  # 8 % of the examples turn into breaks: different
    worse[rng.choice(np.flatnonzero(~ref), 320, replace=False)] = True
    e = compare(worse, ref)
    assert e["diff"] > 1 and e["verdict"] == "different" and e["up"] == 320 and e["down"] == 0
    few_a, few_b = ref[:40].copy(), ref[:40].copy()  # 2 of 40 discordant: a small difference, a wide interval
    few_a[:2] = ~few_a[:2]
    e = compare(few_a, few_b)
    assert e["verdict"] == "inconclusive" and e["n_needed"] > 40
    # the projection is honest: at n_needed examples with the same discordant shares the verdict is reached
    grown = {**e, "n": e["n_needed"], "up": e["up"] * e["n_needed"] / 40, "down": e["down"] * e["n_needed"] / 40}
    lo, hi = tango_ci(grown["up"], grown["down"], grown["n"])
    decided = (100 * lo > 0 or 100 * hi < 0) if abs(e["diff"]) > 1 else (-1 <= 100 * lo and 100 * hi <= 1)
    assert decided
    assert equivalence({"diff": None, "ci": None, "n": 0})["verdict"] == "inconclusive"


def test_paired_ratio_and_unpaired_differences():
    same = paired_ratio_diff([3, 1, 4], [5, 5, 5], [3, 1, 4], [5, 5, 5])
    assert same["diff"] == 0.0 and same["ci"][0] < 0 < same["ci"][1]
    plain = paired_ratio_diff([1, 0, 1], [1, 1, 1], [0, 0, 1], [1, 1, 1])
    assert plain["method"] == "tango" and plain["up"] == 1
    d = unpaired_diff([1] * 10 + [0] * 10, [1] * 5 + [0] * 15)
    assert d["diff"] == pytest.approx(25.0) and d["ci"][0] < 25 < d["ci"][1]
    assert unpaired_diff([], [1])["ci"] is None


def test_t_quantiles():
    for df, t in ((1, 12.7062), (2, 4.3027), (3, 3.1824), (4, 2.7764), (9, 2.2622), (29, 2.0452), (200, 1.9719)):
        assert t_quantile(df) == pytest.approx(t, abs=2e-4), df


# -- simulations -------------------------------------------------------------------------------------------

def test_tango_coverage_and_false_equivalence_on_paired_yes_no_outcomes():
    """n x true discordance x true Δ, 10,000 draws per cell. Skipped as impossible: D = 0 and D = 1 % with
    |Δ| = 2 pp (a difference cannot exceed the share of examples on which the outcomes differ)."""
    rng = np.random.default_rng(20240601)
    rows = []
    for n in NS:
        for d in DISCORDANCE:
            for diff in TRUE_DIFFS:
                if abs(diff) > d:
                    continue
                counts = rng.multinomial(n, [(d + diff) / 2, (d - diff) / 2, 1 - d], size=10_000)[:, :2]
                uniq, inv = np.unique(counts, axis=0, return_inverse=True)
                lo, hi = tango_ci(uniq[:, 0], uniq[:, 1], n)
                cov, eq = _judge(lo[inv.ravel()], hi[inv.ravel()], diff)
                rows.append((f"n={n} D={d:.0%} Δ={diff:+.0%}", diff, cov, eq))
    assert len(rows) == 4 * (1 + 1 + 3 + 3)
    _check_cells(rows)
    # zero discordance: every interval holds Δ = 0; at n = 1,000 it is inside ±1 pp (equivalent), below not
    zero = {r[0]: r for r in rows if "D=0%" in r[0]}
    assert all(r[2] == 1.0 for r in zero.values())
    assert zero["n=1000 D=0% Δ=+0%"][3] == 1.0 and zero["n=200 D=0% Δ=+0%"][3] == 0.0


def _t_floor_vec(mean: np.ndarray, sd: np.ndarray, n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """The floored Student-t interval of ``stats`` on many samples at once (checked against it below)."""
    half = np.maximum(floor_half_width(n), np.where(sd > 0, t_quantile(n - 1) * sd / np.sqrt(n), 0.0))
    return np.maximum(lo, mean - half), np.minimum(hi, mean + half)


def test_the_vectorised_interval_is_the_library_one():
    rng = np.random.default_rng(1)
    for n in (2, 15, 300):
        a, b = rng.integers(0, 6, n) / 5, rng.integers(0, 6, n) / 5
        e = paired_diff(a, b)
        lo, hi = _t_floor_vec(np.array([(a - b).mean()]), np.array([(a - b).std(ddof=1)]), n, -1, 1)
        assert e["method"] == "t" and e["ci"] == [pytest.approx(100 * lo[0]), pytest.approx(100 * hi[0])]


@pytest.mark.parametrize("q,k_max", [(5, 5), (100, 20)], ids=["per-candidate-like (S=5)", "c_i-like (q=100)"])
def test_fraction_difference_coverage(q, k_max):
    """Per-example differences of fractions k/q: an example differs with probability D, by K/q (K uniform on
    1..k_max), upwards with the probability that makes the mean Δ. Skipped as unreachable: |Δ| > D·E[K]/q (for
    q = 5: D = 1 % with Δ = ±2 pp; for q = 100: D = 1 % and 5 % with Δ = ±2 pp) and Δ ≠ 0 at D = 0."""
    rng = np.random.default_rng(q)
    reps, rows = 2000, []
    mean_k = (k_max + 1) / 2 / q
    for n in NS:
        for d in DISCORDANCE:
            for diff in TRUE_DIFFS:
                if (d == 0 and diff) or (d and abs(diff) > d * mean_k):
                    continue
                up = 0.5 if d == 0 else 0.5 * (1 + diff / (d * mean_k))
                x = (rng.random((reps, n)) < d) * rng.integers(1, k_max + 1, (reps, n)) / q
                x = np.where(rng.random((reps, n)) < up, x, -x)
                lo, hi = _t_floor_vec(x.mean(1), x.std(1, ddof=1), n, -1.0, 1.0)
                cov, eq = _judge(lo, hi, diff)
                rows.append((f"n={n} D={d:.0%} Δ={diff:+.0%}", diff, cov, eq))
    _check_cells(rows)


def test_pooled_ratio_difference_coverage():
    """MERGE-like problems with 1..40 variants; a problem differs with probability D by K variants (K uniform on
    1..its variants), upwards with the probability that makes the pooled Δ. Skipped as unreachable: D = 1 % with
    Δ = ±2 pp, and Δ ≠ 0 at D = 0."""
    rng = np.random.default_rng(3)
    reps, rows = 2000, []
    share = (20.5 + 1) / 2 / 20.5  # E[K] / E[variants]
    for n in NS:
        for d in DISCORDANCE:
            for diff in TRUE_DIFFS:
                if (d == 0 and diff) or (d and abs(diff) > d * share):
                    continue
                up = 0.5 if d == 0 else 0.5 * (1 + diff / (d * share))
                den = rng.integers(1, 41, (reps, n)).astype(float)
                k = np.floor(rng.random((reps, n)) * den) + 1
                moved = (rng.random((reps, n)) < d) * np.where(rng.random((reps, n)) < up, k, -k)
                nb = rng.binomial(den.astype(int), 0.8).astype(float)
                na = nb + moved
                ra, rb = na.sum(1) / den.sum(1), nb.sum(1) / den.sum(1)
                lin = (na - ra[:, None] * den - (nb - rb[:, None] * den)) / den.mean(1)[:, None]
                lo, hi = _t_floor_vec(ra - rb, lin.std(1, ddof=1), n, -1.0, 1.0)
                cov, eq = _judge(lo, hi, diff)
                rows.append((f"n={n} D={d:.0%} Δ={diff:+.0%}", diff, cov, eq))
    _check_cells(rows)
    one = paired_ratio_diff([1, 2, 3], [4, 4, 4], [1, 1, 3], [4, 4, 4])  # the library on one sample, same formula
    lin = (np.array([1, 2, 3]) - 0.5 * 4 - (np.array([1, 1, 3]) - 5 / 12 * 4)) / 4
    lo, hi = _t_floor_vec(np.array([0.5 - 5 / 12]), np.array([lin.std(ddof=1)]), 3, -1, 1)
    assert one["ci"] == [pytest.approx(100 * lo[0]), pytest.approx(100 * hi[0])]


def test_single_sample_coverage_of_means_of_shares_and_pooled_ratios():
    """A mean of shares k/q (k binomial around a per-example rate drawn from a Beta) and a pooled ratio over
    clusters of 1..20 correlated trials, at means near 0, in the middle and near 1."""
    rng = np.random.default_rng(11)
    reps, bad = 1500, []
    for n in NS:
        for mu, conc in ((0.02, 5.0), (0.5, 0.5), (0.9, 5.0)):
            p = rng.beta(mu * conc, (1 - mu) * conc, (reps, n))
            x = rng.binomial(100, p) / 100
            lo, hi = _t_floor_vec(x.mean(1), x.std(1, ddof=1), n, 0.0, 1.0)
            cov = float(np.mean((lo <= mu) & (mu <= hi)))
            den = rng.integers(1, 21, (reps, n))
            num = rng.binomial(den, p)
            r = num.sum(1) / den.sum(1)
            lin = (num - r[:, None] * den) / den.mean(1)[:, None]
            lo, hi = _t_floor_vec(r, lin.std(1, ddof=1), n, 0.0, 1.0)
            cov_r = float(np.mean((lo <= mu) & (mu <= hi)))
            bad += [f"{what} n={n} mean={mu}: {c:.3f}" for what, c in (("mean", cov), ("ratio", cov_r))
                    if c < MIN_COVERAGE]
    assert not bad, bad


def test_familywise_confirmation_keeps_chance_differences_of_an_engine_below_five_percent():
    """An engine's parity has dozens of cells; judged at 95 % each, an engine that changes nothing still gets
    some cell "different" most of the time. Seeded simulation of 36 equal cells per engine (paired yes/no
    outcomes, 117 examples, 30 % discordant both ways, true Δ = 0) and of 36 equal cells of per-example
    fractions: the share of engines with any cell different at 95 % is far above 5 %, the share with any cell
    confirmed by :func:`stats.familywise_different` (Bonferroni over the 36) is at most 5 % (plus three
    Monte Carlo standard errors). A true 20 pp difference in one cell is still confirmed most of the time."""
    rng = np.random.default_rng(7)
    engines, m, n, tol = 600, 36, 117, 1.0
    z_m = stats.NormalDist().inv_cdf(1 - 0.025 / m)
    slack = 0.05 + 3 * np.sqrt(0.05 * 0.95 / engines)
    # yes/no cells: counts of (1, 0) and (0, 1) examples
    draws = rng.multinomial(n, [0.15, 0.15, 0.70], size=(engines, m))
    up, down = draws[..., 0], draws[..., 1]
    diff = 100 * (up - down) / n
    lo95, hi95 = stats.tango_ci(up, down, n)
    per_cell = (np.abs(diff) > tol) & ((lo95 > 0) | (hi95 < 0))
    lo_m, hi_m = stats.tango_ci(up, down, n, z=z_m)
    confirmed = per_cell & ((lo_m > 0) | (hi_m < 0))
    assert per_cell.any(axis=1).mean() > 0.5
    assert confirmed.any(axis=1).mean() <= slack
    # the library function gives the same decision as the vectorised one
    for e, c in [(0, 0), (1, 3), (2, 5)] + [tuple(x) for x in np.argwhere(per_cell)[:5]]:
        entry = {"method": "tango", "up": int(up[e, c]), "down": int(down[e, c]), "n": n, "diff": float(diff[e, c])}
        assert stats.familywise_different(entry, tol, m)["confirmed"] == bool(confirmed[e, c])
    # per-example fractions (the floored Student-t interval)
    reps, any95, hits = 300, 0, 0
    t95, t_m = stats.t_quantile(n - 1), stats.t_quantile(n - 1, 1 - 0.05 / m)
    for _ in range(reps):
        x = rng.integers(0, 6, size=(m, n)) / 5
        d = np.where(rng.random((m, n)) < 0.5, 0.0, x - rng.integers(0, 6, size=(m, n)) / 5)
        mean, sd = d.mean(axis=1), d.std(axis=1, ddof=1)
        half95 = np.maximum(t95 * sd / np.sqrt(n), stats.floor_half_width(n))
        different = (100 * np.abs(mean) > tol) & (np.abs(mean) > half95)
        any95 += different.any()
        fw = [stats.familywise_different({"method": "t", "n": n, "diff": 100 * mean[c], "sd": sd[c]}, tol, m)
              for c in np.flatnonzero(different)]
        hits += any(f["confirmed"] for f in fw)
        for f, c in zip(fw, np.flatnonzero(different)):  # the t quantile at the corrected level, and its floor
            half = max(t_m * sd[c] / np.sqrt(n), stats.floor_half_width(n, z_m))
            assert f["confirmed"] == bool(abs(mean[c]) > half)
    assert any95 / reps > 0.5
    assert hits / reps <= 0.05 + 3 * np.sqrt(0.05 * 0.95 / reps)
    # power: one cell that truly differs by 20 pp among 35 equal ones
    up1, down1 = rng.multinomial(n, [0.30, 0.10, 0.60], size=400)[:, :2].T
    lo1, hi1 = stats.tango_ci(up1, down1, n, z=z_m)
    assert ((lo1 > 0) & (100 * (up1 - down1) / n > tol)).mean() > 0.5
