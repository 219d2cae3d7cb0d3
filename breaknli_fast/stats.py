"""Rates with 95 % confidence intervals, differences of rates on the same examples, and the parity verdicts.

Which interval, and why (coverage shown by the seeded simulations of ``tests/test_stats.py``):

- **a share of examples** (0/1 per example: inequality, relaxed, accuracy): the Wilson score interval, honest at
  the boundary (0 of 40 gives [0, 8.8], not [0, 0]);
- **a mean of per-example fractions** (c_i, a share of draws) and **a pooled ratio** Σ num / Σ den over examples
  (per-candidate rates, MERGE's sample accuracy): a Student-t interval over examples (a ratio linearised: the
  delta method) whose half-width is never below ``z² / (n + z²)``, the distance Wilson's interval keeps from a
  boundary at 0 of n: n examples that all look alike cannot place a rate closer than that, so one example
  gives [0, 100], not [60, 60];
- **the difference of 0/1 outcomes on the same examples** (paired: engine and reference on identical inputs):
  Tango's asymptotic score interval (Tango 1998, *Stat. Med.* 17:891; recommended for paired proportions by
  Fagerland, Lydersen and Laake 2014, *BMC Med. Res. Methodol.* 14:116). It depends on the discordant
  examples only and keeps its width at zero discordance: 0 discordant of n gives ±z²/(n + z²), so 0 of 15
  is ±20.4 pp and 0 of 1,000 is ±0.38 pp;
- **the difference of fractions on the same examples**: the Student-t interval of the per-example differences
  with the same floor (it equals Tango's interval at zero discordance: an all-zero difference is not [0, 0]);
- **the difference of 0/1 outcomes over independent example sets**: Newcombe's hybrid score interval
  (Newcombe 1998, *Stat. Med.* 17:873, method 10).

No interval here is a bootstrap: a percentile bootstrap of a difference that is 0 in every resample is [0, 0]
whatever the number of examples. The verdicts (:func:`equivalence`) sit on top of these intervals.

Every routine is bounded in time: O(n) in the data to count or sum, then closed forms or searches of a fixed
number of steps (Tango's bounds: 60 bisection steps; the t quantile: closed forms, at most 12 Newton steps on a
distribution function of at most 500 terms, or a series; the examples a decision needs: a handful of rounds of at
most 32 projected intervals). A difference at the margin up to float rounding (:func:`margin_side`) is at the
margin: no number of examples decides it. tests/test_stats_bounded.py times the adversarial cases.
"""

from __future__ import annotations

import math
from functools import lru_cache
from statistics import NormalDist
from typing import Any, Callable, Sequence

import numpy as np

Z95 = 1.959963984540054
CONFIDENCE = 0.95
VERDICTS = ("equivalent", "different", "inconclusive")
MAX_PROJECTED_N = 10**9  # n_needed beyond this is reported as None (no decision at any practical size)
ROUNDING = 1e-10  # percentage points: a difference this close to the margin δ is at the margin (float noise)


# -- building blocks ---------------------------------------------------------------------------------------

DF_SERIES = 1000  # above this many degrees of freedom the t quantile is the Cornish-Fisher series in z
NEWTON_STEPS = 12  # the most Newton steps of the t quantile below DF_SERIES (from Hill's start: 2 to 4 suffice)


def z_quantile(confidence: float = CONFIDENCE) -> float:
    """The two-sided standard normal critical value: P(|Z| <= z) = ``confidence`` (from the tail, so a level
    near 1 keeps its precision)."""
    return Z95 if confidence == CONFIDENCE else -NormalDist().inv_cdf((1 - confidence) / 2)


def _t_central(t: float, df: int) -> float:
    """P(|T_df| <= t) in closed form (Abramowitz & Stegun 26.7.3-4): a finite sum of df / 2 terms."""
    theta = math.atan(t / math.sqrt(df))
    s, c2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        if df == 1:
            return 2 * theta / math.pi
        term = total = math.cos(theta)
        for k in range(3, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return 2 / math.pi * (theta + s * total)
    term = total = 1.0
    for k in range(2, df, 2):
        term *= c2 * (k - 1) / k
        total += term
    return s * total


def _t_series(x: float, df: int) -> float:
    """The Cornish-Fisher expansion of the t quantile in the normal one ``x`` to 1/df⁴ (A&S 26.7.5)."""
    x2, v = x * x, float(df)
    g1 = (x2 + 1) * x / 4
    g2 = ((5 * x2 + 16) * x2 + 3) * x / 96
    g3 = (((3 * x2 + 19) * x2 + 17) * x2 - 15) * x / 384
    g4 = ((((79 * x2 + 776) * x2 + 1482) * x2 - 1920) * x2 - 945) * x / 92160
    return x + (g1 + (g2 + (g3 + g4 / v) / v) / v) / v


def _t_hill(df: int, alpha: float, x: float) -> float:
    """Hill's approximation of the t quantile of two-sided tail ``alpha`` (Hill 1970, *Comm. ACM* 13:617,
    Algorithm 396; ``x``: the normal quantile of the same tail), good to about 5 digits: Newton's start."""
    a = 1 / (df - 0.5)
    b = 48 / (a * a)
    c = ((20700 * a / b - 98) * a - 16) * a + 96.36
    d = ((94.5 / (b + c) - 3) / b + 1) * math.sqrt(a * math.pi / 2) * df
    y = (d * alpha) ** (2 / df)
    if y > 0.05 + a:  # the expansion about the normal
        y = x * x
        if df < 5:
            c += 0.3 * (df - 4.5) * (0.6 - x)
        c = (((0.05 * d * x + 5) * x - 7) * x + 2) * x + b + c
        y = (((((0.4 * y + 6.3) * y + 36) * y + 94.5) / c - y - 3) / b + 1) * x
        y = math.expm1(a * y * y)
    else:
        y = ((1 / (((df + 6) / (df * y) - 0.089 * d - 0.822) * (df + 2) * 3) + 0.5 / (df + 4)) * y - 1) \
            * (df + 1) / (df + 2) + 1 / y
    return math.sqrt(df * y)


@lru_cache(maxsize=4096)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t critical value: P(|T_df| <= t) = ``confidence``, for integer ``df``, in bounded
    time whatever ``df``: closed forms at df = 1 and 2; up to ``DF_SERIES``, Hill's approximation refined by at
    most ``NEWTON_STEPS`` Newton steps on the closed-form distribution function (A&S 26.7.3-4, df / 2 terms);
    above, the Cornish-Fisher series (A&S 26.7.5). Relative error below 1e-11 for two-sided tails down to 1e-6
    and below 1e-6 down to 1e-9, df from 1 to 10⁹ (tests/test_stats.py checks it against mpmath)."""
    df = int(df)
    if df < 1:
        return math.inf
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"a confidence level lies strictly between 0 and 1, not {confidence}")
    alpha = 1.0 - confidence
    if df == 1:
        return 1 / math.tan(math.pi / 2 * alpha)
    if df == 2:
        return confidence * math.sqrt(2 / (alpha * (2 - alpha)))
    x = z_quantile(confidence)
    if df > DF_SERIES:
        return _t_series(x, df)
    t = _t_hill(df, alpha, x)
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    for _ in range(NEWTON_STEPS):
        density = 2 * math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))  # of |T| at t
        step = (_t_central(t, df) - confidence) / density
        t = max(t - step, t / 2)  # never a jump to or below 0
        if abs(step) <= 1e-15 * t:
            break
    return t


def floor_half_width(n: int, z: float = Z95) -> float:
    """The least half-width (a proportion) of an interval on ``n`` examples: ``z² / (n + z²)``, the distance of
    Wilson's bound from 0 at 0 of n, and the half-width of Tango's paired interval at zero discordance."""
    return z * z / (n + z * z) if n > 0 else 1.0


def is_binary(*arrays: np.ndarray) -> bool:
    return all(np.isin(a, (0.0, 1.0)).all() for a in arrays)


def wilson_ci(successes: float, n: int, z: float = Z95) -> list[float]:
    """The Wilson score interval of a proportion, in percent."""
    if n <= 0:
        return [0.0, 100.0]
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes <= 0 else max(0.0, centre - half)  # exact at the boundary (no rounding residue)
    hi = 1.0 if successes >= n else min(1.0, centre + half)
    return [float(100 * lo), float(100 * hi)]


def _t_floor(mean: float, sd: float, n: int, lo: float, hi: float, z: float = Z95,
             confidence: float = CONFIDENCE) -> list[float]:
    """mean ± max(t_{n-1} · sd / √n, z² / (n + z²)), clipped to [lo, hi] (proportions); ``z`` and the t quantile
    at the same ``confidence``."""
    half = floor_half_width(n, z)
    if n > 1 and sd > 0:
        half = max(half, t_quantile(n - 1, confidence) * sd / math.sqrt(n))
    return [max(lo, mean - half), min(hi, mean + half)]


def mean_ci(values: Sequence[float]) -> list[float] | None:
    """95 % interval (percent) of a mean of per-example values in [0, 1]: Wilson for 0/1 values, otherwise the
    Student-t interval with the floor ``z² / (n + z²)`` (module docstring). None when empty."""
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        return None
    if is_binary(arr):
        return wilson_ci(float(arr.sum()), int(arr.size))
    sd = float(arr.std(ddof=1)) if arr.size > 1 else 0.0
    return [100 * x for x in _t_floor(float(arr.mean()), sd, int(arr.size), 0.0, 1.0)]


def ratio_ci(num: Sequence[float], den: Sequence[float]) -> list[float] | None:
    """95 % interval (percent) of a pooled ratio Σ num / Σ den over examples (clusters: the candidates of one
    example, the variants of one problem): the ratio linearised per example (delta method), a Student-t interval
    over examples with the floor ``z² / (n + z²)``. None without a positive denominator."""
    num_a, den_a = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    keep = den_a > 0
    num_a, den_a = num_a[keep], den_a[keep]
    if den_a.size == 0:
        return None
    r = num_a.sum() / den_a.sum()
    z = (num_a - r * den_a) / den_a.mean()
    sd = float(z.std(ddof=1)) if z.size > 1 else 0.0
    return [100 * x for x in _t_floor(float(r), sd, int(z.size), 0.0, 1.0)]


def rate_ci(hits: Sequence[bool] | Sequence[float]) -> tuple[float | None, float | None, float | None]:
    """A rate in percent with its 95 % CI: (point, low, high); Nones when empty. 0/1 ``hits`` (a share of
    examples) get the Wilson interval; other values in [0, 1] (a mean of shares) the floored Student-t interval.
    The helper every probe's summary uses."""
    arr = np.asarray(hits, dtype=float)
    if arr.size == 0:
        return None, None, None
    lo, hi = mean_ci(arr)  # type: ignore[misc]
    return float(100 * arr.mean()), lo, hi


def rate_cell(values: Sequence[bool] | Sequence[float]) -> dict[str, Any]:
    """:func:`rate_ci` as a report cell: ``{"n", "rate", "ci"}`` (rate and CI None when empty)."""
    point, lo, hi = rate_ci(values)
    return {"n": len(values), "rate": point, "ci": None if point is None else [lo, hi]}


def ratio_cell(num: Sequence[float], den: Sequence[float]) -> dict[str, Any]:
    """:func:`ratio_ci` as a report cell: ``{"n" (examples with a positive denominator), "rate", "ci"}``."""
    num_a, den_a = np.asarray(num, dtype=float), np.asarray(den, dtype=float)
    keep = den_a > 0
    if not keep.any():
        return {"n": 0, "rate": None, "ci": None}
    return {"n": int(keep.sum()), "rate": float(100 * num_a[keep].sum() / den_a[keep].sum()),
            "ci": ratio_ci(num_a, den_a)}


# -- paired differences ------------------------------------------------------------------------------------

def tango_ci(up: Any, down: Any, n: Any, z: float = Z95, iterations: int = 60) -> tuple[np.ndarray, np.ndarray]:
    """Tango's score interval (proportions) of Δ = p(1, 0) - p(0, 1) from ``up`` examples where the first
    outcome is 1 and the second 0, ``down`` the other way round, ``n`` examples in all. Vectorised: arrays of
    counts give arrays of bounds (the simulations use this)."""
    b, c, n = np.broadcast_arrays(np.asarray(up, dtype=float), np.asarray(down, dtype=float),
                                  np.asarray(n, dtype=float))
    est = (b - c) / n

    def score(d: np.ndarray) -> np.ndarray:  # decreasing in d
        w = -b - c + (2 * n - b + c) * d
        q = (np.sqrt(np.maximum(w * w + 8 * n * c * d * (1 - d), 0.0)) - w) / (4 * n)  # restricted MLE of p(0, 1)
        var = n * (2 * q + d * (1 - d))
        num = b - c - n * d
        with np.errstate(divide="ignore", invalid="ignore"):
            t = num / np.sqrt(np.maximum(var, 1e-300))
        return np.where(num == 0, 0.0, t)

    lo_a, lo_b = np.full(b.shape, -1.0), est.copy()  # the lower bound: score(d) = z on [-1, est]
    hi_a, hi_b = est.copy(), np.full(b.shape, 1.0)  # the upper bound: score(d) = -z on [est, 1]
    for _ in range(iterations):
        m = (lo_a + lo_b) / 2
        above = score(m) > z
        lo_a, lo_b = np.where(above, m, lo_a), np.where(above, lo_b, m)
        m = (hi_a + hi_b) / 2
        below = score(m) < -z
        hi_a, hi_b = np.where(below, hi_a, m), np.where(below, m, hi_b)
    lower = np.where(score(np.full(b.shape, -1.0)) <= z, -1.0, lo_a)
    upper = np.where(score(np.full(b.shape, 1.0)) >= -z, 1.0, hi_b)
    return lower, upper


def paired_t_ci(mean: float, sd: float, n: int) -> list[float]:
    """Interval (proportions) of a mean difference of per-example fractions: Student-t with the floor."""
    return _t_floor(mean, sd, n, -1.0, 1.0)


def paired_diff(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Difference a - b (percentage points) of two rates over the *same* examples (aligned: a[i] and b[i] are one
    example), with its 95 % interval: Tango's score interval when both are 0/1 per example, else the floored
    Student-t interval of the per-example differences. The entry keeps what :func:`equivalence` needs to
    project the examples a decision would take."""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.shape != b_arr.shape:
        raise ValueError("a paired difference needs aligned arrays of equal length")
    n = int(a_arr.size)
    if n == 0:
        return {"n": 0, "diff": None, "ci": None, "method": None}
    out: dict[str, Any] = {"n": n, "a": float(100 * a_arr.mean()), "b": float(100 * b_arr.mean()),
                           "diff": float(100 * (a_arr.mean() - b_arr.mean()))}
    if is_binary(a_arr, b_arr):
        up, down = int(((a_arr == 1) & (b_arr == 0)).sum()), int(((a_arr == 0) & (b_arr == 1)).sum())
        lo, hi = tango_ci(up, down, n)
        out.update(method="tango", up=up, down=down, ci=[float(100 * lo), float(100 * hi)])
    else:
        d = a_arr - b_arr
        sd = float(d.std(ddof=1)) if n > 1 else 0.0
        out.update(method="t", sd=sd, ci=[100 * x for x in paired_t_ci(float(d.mean()), sd, n)],
                   changed=int((d != 0).sum()))
    return out


def paired_ratio_diff(num_a: Sequence[float], den_a: Sequence[float], num_b: Sequence[float],
                      den_b: Sequence[float]) -> dict[str, Any]:
    """Difference (percentage points) of two pooled ratios Σ num / Σ den over the same examples (clusters), with
    a 95 % interval: each example's contribution linearised (delta method), then the floored Student-t interval
    of the per-example differences. A ratio whose denominators are all 1 is a plain rate (:func:`paired_diff`)."""
    na, da, nb, db = (np.asarray(x, dtype=float) for x in (num_a, den_a, num_b, den_b))
    if not (na.shape == da.shape == nb.shape == db.shape):
        raise ValueError("a paired difference needs aligned arrays of equal length")
    keep = (da > 0) & (db > 0)
    na, da, nb, db = na[keep], da[keep], nb[keep], db[keep]
    n = int(na.size)
    if n == 0:
        return {"n": 0, "diff": None, "ci": None, "method": None}
    if (da == 1).all() and (db == 1).all():
        return paired_diff(na, nb)
    ra, rb = na.sum() / da.sum(), nb.sum() / db.sum()
    d = (na - ra * da) / da.mean() - (nb - rb * db) / db.mean()
    sd = float(d.std(ddof=1)) if n > 1 else 0.0
    return {"n": n, "a": float(100 * ra), "b": float(100 * rb), "diff": float(100 * (ra - rb)), "method": "t",
            "sd": sd, "ci": [100 * x for x in paired_t_ci(float(ra - rb), sd, n)],
            "changed": int(((na != nb) | (da != db)).sum())}


def unpaired_diff(a: Sequence[float], b: Sequence[float]) -> dict[str, Any]:
    """Difference a - b (percentage points) of two shares of *independent* example sets with Newcombe's hybrid
    score interval (method 10: the Wilson interval of each, combined); fractions get a Welch-t interval with the
    floor of the smaller set."""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if a_arr.size == 0 or b_arr.size == 0:
        return {"diff": None, "ci": None}
    pa, pb = float(a_arr.mean()), float(b_arr.mean())
    diff = pa - pb
    if is_binary(a_arr, b_arr):
        la, ua = (x / 100 for x in wilson_ci(float(a_arr.sum()), int(a_arr.size)))
        lb, ub = (x / 100 for x in wilson_ci(float(b_arr.sum()), int(b_arr.size)))
        lo = diff - math.sqrt((pa - la) ** 2 + (ub - pb) ** 2)
        hi = diff + math.sqrt((ua - pa) ** 2 + (pb - lb) ** 2)
    else:
        va = a_arr.var(ddof=1) / a_arr.size if a_arr.size > 1 else 0.0
        vb = b_arr.var(ddof=1) / b_arr.size if b_arr.size > 1 else 0.0
        se = math.sqrt(va + vb)
        df = (va + vb) ** 2 / (va**2 / max(a_arr.size - 1, 1) + vb**2 / max(b_arr.size - 1, 1)) if se > 0 else 1
        half = max(t_quantile(max(1, int(df))) * se, floor_half_width(min(a_arr.size, b_arr.size)))
        lo, hi = diff - half, diff + half
    return {"diff": float(100 * diff), "ci": [float(100 * max(-1.0, lo)), float(100 * min(1.0, hi))]}


# -- verdicts ----------------------------------------------------------------------------------------------

def min_examples(tolerance: float, z: float = Z95) -> int | None:
    """The fewest examples on which a paired difference can be shown equivalent within ±``tolerance``
    percentage points at all (every example agreeing): z² / (n + z²) <= δ. None for δ <= 0."""
    d = tolerance / 100
    if d <= 0:
        return None
    if d >= 1:
        return 1
    return int(math.ceil(z * z * (1 - d) / d - 1e-12))


def margin_side(diff: float, tolerance: float) -> int:
    """Where a difference |Δ| (percentage points) lies against the margin δ: -1 below, 1 above, 0 at the margin
    up to float rounding (within ``ROUNDING`` · max(1, δ): 19 of 40 against 21 of 40 per-candidate hits is
    -0.9999999999999996 pp, which is 1 pp)."""
    gap = abs(diff) - tolerance
    if abs(gap) <= ROUNDING * max(1.0, abs(tolerance)):
        return 0
    return 1 if gap > 0 else -1


def interval_at(entry: dict[str, Any], confidence: float = CONFIDENCE, n: int | None = None) -> list[float] | None:
    """The interval (percentage points) the same paired data give at another ``confidence``, or on ``n`` examples
    (the discordant shares, or the spread, kept): Tango's score interval for a yes/no per example, else the
    floored Student-t interval (the t quantile and the floor at that level). None where the entry keeps no
    statistics to recompute it from."""
    m, n0 = entry.get("method"), int(entry.get("n") or 0)
    if not n0 or entry.get("diff") is None:
        return None
    n = n0 if n is None else n
    z = z_quantile(confidence)
    if m == "tango":
        lo, hi = tango_ci(entry["up"] * n / n0, entry["down"] * n / n0, n, z=z)
        return [float(100 * lo), float(100 * hi)]
    if m == "t":
        return [100 * x for x in _t_floor(entry["diff"] / 100, float(entry.get("sd") or 0.0), n, -1.0, 1.0, z=z,
                                          confidence=confidence)]
    return None


def _decides(entry: dict[str, Any], ns: Sequence[int], done: Callable[[float, float], bool]) -> list[bool]:
    """Whether the interval projected onto each ``n`` of ``ns`` decides (``done(lo, hi)``, percentage points):
    Tango's intervals of all of them in one vectorised search, t intervals one O(1) quantile each."""
    if entry.get("method") == "tango":
        n0, arr = int(entry["n"]), np.asarray(ns, dtype=float)
        lo, hi = tango_ci(entry["up"] * arr / n0, entry["down"] * arr / n0, arr)
        return [done(float(100 * a), float(100 * b)) for a, b in zip(lo, hi)]
    out = []
    for n in ns:
        ci = interval_at(entry, n=int(n))
        out.append(ci is not None and done(ci[0], ci[1]))
    return out


def _n_needed(entry: dict[str, Any], done: Callable[[float, float], bool], points: int = 32,
              rounds: int = 12) -> int | None:
    """The fewest examples whose projected interval decides (to 0.1 %; exact below 2,000), None beyond
    ``MAX_PROJECTED_N``: the interval narrows as n grows, so a bounded search: each round evaluates at most
    ``points`` n strictly inside the bracket (geometric while it spans more than a doubling, then even) and
    keeps the one step where the decision starts; a round cuts the bracket about ``points``-fold, so a few
    rounds (at most ``rounds``) reach the resolution from any n."""
    n0 = int(entry["n"])
    if _decides(entry, [n0], done)[0]:
        return n0
    if n0 >= MAX_PROJECTED_N or not _decides(entry, [MAX_PROJECTED_N], done)[0]:
        return None
    lo, hi = n0, MAX_PROJECTED_N  # lo does not decide, hi does
    for _ in range(rounds):
        if hi - lo <= max(1, lo // 1000):
            break
        if hi > 2 * lo:
            grid = np.unique(np.round(np.geomspace(lo, hi, points + 2)[1:-1]).astype(np.int64))
        else:
            grid = np.unique(np.linspace(lo, hi, points + 2)[1:-1].astype(np.int64))
        grid = [int(g) for g in grid if lo < g < hi]
        if not grid:
            break
        ok = _decides(entry, grid, done)
        first = ok.index(True) if True in ok else len(grid)
        lo, hi = (grid[first - 1] if first else lo), (grid[first] if first < len(grid) else hi)
    return hi


def equivalence(entry: dict[str, Any], tolerance: float = 1.0) -> dict[str, Any]:
    """The parity verdict of a difference (percentage points) with its 95 % interval, against a tolerance δ:
    **equivalent** when the whole interval lies inside ±δ; **different** when |Δ| > δ and the interval excludes
    0; **inconclusive** otherwise. ``n_needed``: the examples a decision would take if the discordant shares (or
    the spread) stayed as observed (for equivalence when |Δ| < δ, for a difference when |Δ| > δ; None when |Δ|
    is δ up to rounding, :func:`margin_side`, which no number of examples decides, and beyond
    ``MAX_PROJECTED_N``). ``too_small``: fewer examples than any equivalence within δ needs
    (:func:`min_examples`), whatever they show. ``entry``: what :func:`paired_diff` returns (``diff``, ``ci``,
    ``n``, and the method's statistics). Bounded time: a closed-form check and at most a bounded search."""
    diff, ci, n = entry.get("diff"), entry.get("ci"), int(entry.get("n") or 0)
    need_min = min_examples(tolerance)
    small = bool(need_min is not None and n < need_min)
    if diff is None or ci is None:
        return {"verdict": "inconclusive", "n_needed": None, "too_small": True}
    lo, hi = ci
    eps = 1e-9
    side = margin_side(diff, tolerance)
    if -tolerance - eps <= lo and hi <= tolerance + eps:
        return {"verdict": "equivalent", "n_needed": None, "too_small": small}
    if side > 0 and (lo > 0 or hi < 0):
        return {"verdict": "different", "n_needed": None, "too_small": small}
    if side < 0:
        needed = _n_needed(entry, lambda a, b: -tolerance - eps <= a and b <= tolerance + eps)
    elif side > 0:
        needed = _n_needed(entry, lambda a, b: a > 0 or b < 0)
    else:
        needed = None
    return {"verdict": "inconclusive", "n_needed": needed, "too_small": small}


def familywise_different(entry: dict[str, Any], tolerance: float, cells: int,
                         alpha: float = 1 - CONFIDENCE) -> dict[str, Any]:
    """Whether a cell that is *different* at 95 % stays different when ``cells`` cells were judged together:
    its interval at ``1 - alpha / cells`` (Bonferroni) must still exclude 0 (and |Δ| > δ). A verdict per cell at
    95 % says "different" by chance in about 5 % of equal cells, so among the dozens of cells of one engine's
    parity a chance "different" is likely; the corrected interval keeps the chance that *any* cell of the engine
    is confirmed different, where none truly differs, at or below ``alpha`` (tests/test_stats.py simulates it).
    Returns ``{"cells", "confidence", "ci", "confirmed"}``."""
    level = 1 - alpha / max(1, int(cells))
    ci = interval_at(entry, level)
    confirmed = bool(ci is not None and margin_side(entry.get("diff") or 0.0, tolerance) > 0
                     and (ci[0] > 0 or ci[1] < 0))
    return {"cells": int(cells), "confidence": level, "ci": ci, "confirmed": confirmed}


def compare(a: Sequence[float], b: Sequence[float], tolerance: float = 1.0) -> dict[str, Any]:
    """:func:`paired_diff` with its :func:`equivalence` verdict, in one entry."""
    d = paired_diff(a, b)
    d.update(equivalence(d, tolerance))
    return d
