"""BreakNLI's rates per mode and ŷ label, pooled Overall, with 95 % confidence intervals (:mod:`breaknli_fast.stats`:
Wilson for the shares of examples, the floored Student-t interval over examples for the per-candidate ratios)."""

from __future__ import annotations

from typing import Any, Iterable, Sequence

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.stats import ratio_ci, wilson_ci

RATE_KEYS = ("inequality", "relaxed", "cand_inequality", "cand_relaxed")


def rates(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Rates (percent) over evaluated examples; each row has the verdict fields
    inequality, relaxed (bools), n_candidates, n_inequality, n_relaxed."""
    n = len(rows)
    out: dict[str, Any] = {"n": n, "n_candidates": int(sum(r["n_candidates"] for r in rows))}
    if n == 0:
        for k in RATE_KEYS:
            out[k] = None
            out[k + "_ci"] = None
        return out
    ineq = np.array([r["inequality"] for r in rows], dtype=float)
    rel = np.array([r["relaxed"] for r in rows], dtype=float)
    nc = np.array([r["n_candidates"] for r in rows], dtype=float)
    ni = np.array([r["n_inequality"] for r in rows], dtype=float)
    nr = np.array([r["n_relaxed"] for r in rows], dtype=float)
    out["inequality"] = 100 * ineq.mean()
    out["relaxed"] = 100 * rel.mean()
    out["cand_inequality"] = 100 * ni.sum() / nc.sum()
    out["cand_relaxed"] = 100 * nr.sum() / nc.sum()
    out["inequality_ci"] = wilson_ci(float(ineq.sum()), n)
    out["relaxed_ci"] = wilson_ci(float(rel.sum()), n)
    # the candidates of one example share p, h and the generator's draw: clusters, so the interval is over examples
    out["cand_inequality_ci"] = ratio_ci(ni, nc)
    out["cand_relaxed_ci"] = ratio_ci(nr, nc)
    return out


def mode_label_rates(records: Iterable[dict[str, Any]]) -> dict[str, Any]:
    """Per mode: per ŷ label and Overall (pooled over the examples of every label)."""
    by_mode: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        if r.get("status") == "evaluated":
            by_mode.setdefault(r["mode"], []).append(r)
    out: dict[str, Any] = {}
    for mode, rows in by_mode.items():
        table: dict[str, Any] = {}
        for lab in LABELS:
            sub = [x["verdict"] for x in rows if x["yhat"] == lab]
            if sub:
                table[lab] = rates(sub)
        table["overall"] = rates([x["verdict"] for x in rows])
        out[mode] = table
    return out
