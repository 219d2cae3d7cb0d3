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


# -- building blocks ---------------------------------------------------------------------------------------

@lru_cache(maxsize=4096)
def t_quantile(df: int, confidence: float = CONFIDENCE) -> float:
    """The two-sided Student-t critical value: P(|T_df| <= t) = ``confidence`` (exact for integer ``df``, by
    bisection on the closed-form distribution function, Abramowitz & Stegun 26.7.3-4)."""
    df = int(df)
    if df < 1:
        return math.inf

    def central(t: float) -> float:  # P(|T| <= t)
        theta = math.atan(t / math.sqrt(df))
        s, c2 = math.sin(theta), math.cos(theta) ** 2
        if df % 2 == 1:
            if df == 1:
                return 2 * theta / math.pi
            term, total = math.cos(theta), math.cos(theta)
            for k in range(3, df, 2):
                term *= c2 * (k - 1) / k
                total += term
            return 2 / math.pi * (theta + s * total)
        term, total = 1.0, 1.0
        for k in range(2, df, 2):
            term *= c2 * (k - 1) / k
            total += term
        return s * total

    lo, hi = 0.0, 1.0
    while central(hi) < confidence:
        hi *= 2
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if central(mid) < confidence else (lo, mid)
    return hi


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


def interval_at(entry: dict[str, Any], confidence: float = CONFIDENCE, n: int | None = None) -> list[float] | None:
    """The interval (percentage points) the same paired data give at another ``confidence``, or on ``n`` examples
    (the discordant shares, or the spread, kept): Tango's score interval for a yes/no per example, else the
    floored Student-t interval (the t quantile and the floor at that level). None where the entry keeps no
    statistics to recompute it from."""
    m, n0 = entry.get("method"), int(entry.get("n") or 0)
    if not n0 or entry.get("diff") is None:
        return None
    n = n0 if n is None else n
    z = Z95 if confidence == CONFIDENCE else NormalDist().inv_cdf(0.5 + confidence / 2)
    if m == "tango":
        lo, hi = tango_ci(entry["up"] * n / n0, entry["down"] * n / n0, n, z=z)
        return [float(100 * lo), float(100 * hi)]
    if m == "t":
        return [100 * x for x in _t_floor(entry["diff"] / 100, float(entry.get("sd") or 0.0), n, -1.0, 1.0, z=z,
                                          confidence=confidence)]
    return None


def _n_needed(entry: dict[str, Any], done: Callable[[list[float]], bool]) -> int | None:
    n0 = int(entry["n"])
    ci = interval_at(entry, n=n0)
    if ci is None:
        return None
    if done(ci):
        return n0
    hi = n0
    while True:  # doubling, then bisection: the smallest n whose projected interval decides
        hi *= 2
        if hi > MAX_PROJECTED_N:
            return None
        ci = interval_at(entry, n=hi)
        if ci is not None and done(ci):
            break
    lo = hi // 2
    while hi - lo > max(1, lo // 1000):
        mid = (lo + hi) // 2
        ci = interval_at(entry, n=mid)
        lo, hi = (lo, mid) if ci is not None and done(ci) else (mid, hi)
    return hi


def equivalence(entry: dict[str, Any], tolerance: float = 1.0) -> dict[str, Any]:
    """The parity verdict of a difference (percentage points) with its 95 % interval, against a tolerance δ:
    **equivalent** when the whole interval lies inside ±δ; **different** when |Δ| > δ and the interval excludes
    0; **inconclusive** otherwise. ``n_needed``: the examples a decision would take if the discordant shares (or
    the spread) stayed as observed (for equivalence when |Δ| < δ, for a difference when |Δ| > δ).
    ``too_small``: fewer examples than any equivalence within δ needs (:func:`min_examples`), whatever they show.
    ``entry``: what :func:`paired_diff` returns (``diff``, ``ci``, ``n``, and the method's statistics)."""
    diff, ci, n = entry.get("diff"), entry.get("ci"), int(entry.get("n") or 0)
    need_min = min_examples(tolerance)
    small = bool(need_min is not None and n < need_min)
    if diff is None or ci is None:
        return {"verdict": "inconclusive", "n_needed": None, "too_small": True}
    lo, hi = ci
    eps = 1e-9
    if -tolerance - eps <= lo and hi <= tolerance + eps:
        return {"verdict": "equivalent", "n_needed": None, "too_small": small}
    if abs(diff) > tolerance and (lo > 0 or hi < 0):
        return {"verdict": "different", "n_needed": None, "too_small": small}
    if abs(diff) < tolerance:
        needed = _n_needed(entry, lambda c: -tolerance - eps <= c[0] and c[1] <= tolerance + eps)
    elif abs(diff) > tolerance:
        needed = _n_needed(entry, lambda c: c[0] > 0 or c[1] < 0)
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
    confirmed = bool(ci is not None and abs(entry.get("diff") or 0.0) > tolerance and (ci[0] > 0 or ci[1] < 0))
    return {"cells": int(cells), "confidence": level, "ci": ci, "confirmed": confirmed}


def compare(a: Sequence[float], b: Sequence[float], tolerance: float = 1.0) -> dict[str, Any]:
    """:func:`paired_diff` with its :func:`equivalence` verdict, in one entry."""
    d = paired_diff(a, b)
    d.update(equivalence(d, tolerance))
    return d
