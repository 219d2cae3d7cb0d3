"""Rates with 95 % confidence intervals, differences of rates, and the parity verdicts on top of them.

A share of examples (a 0/1 outcome per example: inequality, relaxed, accuracy) gets the Wilson score
interval, which stays honest at the boundary (0 of 40 gives [0, 8.8], not the bootstrap's [0, 0]); a rate
per candidate (a ratio of sums over examples) and a mean of shares get a bootstrap interval over examples.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


N_BOOT = 1000
BOOT_SEED = 12345


def bootstrap_indices(n: int, n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> np.ndarray:
    """(n_boot, n) resampling indices, fixed by the seed."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n, size=(n_boot, n))


def _ci(samples: np.ndarray) -> list[float]:
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return [float(lo), float(hi)]


Z95 = 1.959963984540054


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


def rate_ci(hits: Sequence[bool] | Sequence[float], n_boot: int = N_BOOT,
            seed: int = BOOT_SEED) -> tuple[float | None, float | None, float | None]:
    """A rate in percent with its 95 % CI: (point, low, high); Nones when empty. 0/1 ``hits`` (a share of
    examples) get the Wilson interval; other values in [0, 1] (a mean of shares) a bootstrap interval over
    examples. The helper every probe's summary uses."""
    arr = np.asarray(hits, dtype=float)
    if arr.size == 0:
        return None, None, None
    if np.isin(arr, (0.0, 1.0)).all():
        lo, hi = wilson_ci(float(arr.sum()), int(arr.size))
    else:
        lo, hi = _ci(100 * arr[bootstrap_indices(arr.size, n_boot, seed)].mean(axis=1))
    return float(100 * arr.mean()), lo, hi


def rate_cell(values: Sequence[bool] | Sequence[float], n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict[str, Any]:
    """:func:`rate_ci` as a report cell: ``{"n", "rate", "ci"}`` (rate and CI None when empty)."""
    point, lo, hi = rate_ci(values, n_boot, seed)
    return {"n": len(values), "rate": point, "ci": None if point is None else [lo, hi]}


def diff_ci(a: Sequence[float], b: Sequence[float], n_boot: int = N_BOOT, seed: int = BOOT_SEED) -> dict[str, Any]:
    """Difference of two rates (percent, a - b) with an unpaired bootstrap CI: a and b are 0/1
    indicators over independent example sets, each resampled on its own. (Paired differences on the
    same examples: ``breaknli_fast.bench.parity.paired_diff_ci``.)"""
    a_arr, b_arr = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a_arr) == 0 or len(b_arr) == 0:
        return {"diff": None, "ci": None}
    rng = np.random.default_rng(seed)
    ia = rng.integers(0, len(a_arr), size=(n_boot, len(a_arr)))
    ib = rng.integers(0, len(b_arr), size=(n_boot, len(b_arr)))
    d = 100 * (a_arr[ia].mean(axis=1) - b_arr[ib].mean(axis=1))
    return {"diff": float(100 * (a_arr.mean() - b_arr.mean())), "ci": _ci(d)}


VERDICTS = ("equivalent", "different", "inconclusive")


def equivalence(diff: float | None, ci: Sequence[float] | None, n: int, tolerance: float = 1.0) -> dict[str, Any]:
    """The parity verdict of a difference (percentage points) with its 95 % CI, against a tolerance δ:
    **equivalent** when the whole CI lies inside ±δ; **different** when |Δ| > δ and the CI excludes 0;
    **inconclusive** otherwise. ``n_needed``: the examples a decision would need at the observed variance
    (the CI's half-width shrinks as 1/√n): for equivalence when |Δ| < δ, for a difference when |Δ| > δ."""
    if diff is None or ci is None:
        return {"verdict": "inconclusive", "n_needed": None}
    lo, hi = ci
    eps = 1e-9  # percentile arithmetic leaves residues like -1.0000000000000009 for a bound of exactly -1
    if -tolerance - eps <= lo and hi <= tolerance + eps:
        return {"verdict": "equivalent", "n_needed": None}
    if abs(diff) > tolerance and (lo > 0 or hi < 0):
        return {"verdict": "different", "n_needed": None}
    half = (hi - lo) / 2
    room = tolerance - abs(diff) if abs(diff) < tolerance else abs(diff) if abs(diff) > tolerance else 0.0
    needed = int(np.ceil(n * (half / room) ** 2)) if room > 0 and half > 0 and n > 0 else None
    return {"verdict": "inconclusive", "n_needed": needed}
