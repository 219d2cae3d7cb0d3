"""Which engine a user should pick, from one bench: whether each engine was shown to match the reference, and the
recommendation that ends every bench -- the fastest configuration not shown to differ from the reference, beside the
fastest overall and what it may change.

"Not shown to differ" is the multiplicity-aware rule of :func:`~breaknli_fast.bench.parity.confirmed_differences`:
no cell of the engine stays different from the reference with all its cells judged together. An engine that fails a
check the bench prints (label agreement below ``--min-agreement``, labels that change with the batch, an engine that
did not run) is never the pick, whatever its cells say. An engine whose sampled
candidates are all the reference's (the ort engine's fp32 generator: token for token) is said so. With random
weights parity means nothing, so only the speed is ranked and the note says to judge on a trained-model bench.
"""

from __future__ import annotations

from typing import Any

from breaknli_fast.bench.parity import cells, confirmed_differences


def _get(d: Any, *keys: Any) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def speedup(e: dict[str, Any]) -> float | None:
    """The engine's end-to-end speed-up over the reference (reference wall time / engine wall time)."""
    return _get(e, "speed", "speedup", "end_to_end")


def _fmt_x(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "-"


def _diff(entry: dict[str, Any]) -> str:
    d, ci = entry.get("diff"), entry.get("ci") or [None, None]
    if d is None:
        return "?"
    lo, hi = ci[0], ci[1]
    return f"{d:+.2f} pp" + (f" [{lo:+.2f}, {hi:+.2f}]" if lo is not None and hi is not None else "")


def differing_cells(e: dict[str, Any]) -> list[str]:
    """The cells the engine differs in at 95 % each (what it may change), most different first."""
    out = [(abs(x.get("diff") or 0.0), f"{where} {_diff(x)}") for where, x in cells(e.get("parity") or {})
           if x.get("verdict") == "different"]
    return [text for _, text in sorted(out, reverse=True)]


def identical_candidates(e: dict[str, Any]) -> bool:
    """Every sampled candidate the engine kept is the reference's (the same seeds and logits up to rounding)."""
    s = _get(e, "parity", "generator", "sampled_candidates") or {}
    return bool(s.get("n")) and s.get("identical_pct") == 100.0


def shown_to_match(e: dict[str, Any]) -> str:
    """One sentence per engine: shown to match (every cell equivalent), shown to differ, or not shown either way."""
    if e.get("status") != "ok":
        return f"no: it did not run ({e.get('status')}: {e.get('reason')})"
    v = _get(e, "parity", "verdicts") or {}
    n = sum(v.get(k, 0) for k in ("equivalent", "different", "inconclusive"))
    if not n:
        return "no parity verdicts recorded"
    small = (f"; {v['too_small']} of them on too few examples to show equivalence at all"
             if v.get("too_small") else "")
    if v.get("different"):
        confirmed = confirmed_differences(e.get("parity") or {})
        if confirmed:
            return (f"no: {len(confirmed)} of {n} cells differ beyond the tolerance, still with all the cells judged "
                    f"together (Bonferroni){small}")
        return (f"not shown: {v['different']} of {n} cells differ beyond the tolerance at 95 % each, but none stays "
                f"different with all the cells judged together (Bonferroni), so chance is not ruled out; "
                f"{v.get('equivalent', 0)} equivalent{small}")
    if v.get("inconclusive"):
        return (f"not shown: {v.get('equivalent', 0)} of {n} cells equivalent, {v['inconclusive']} inconclusive "
                f"(none shown to differ, but the intervals are too wide to show a match){small}")
    return f"yes: all {n} cells equivalent within the tolerance"


def checks_pass(e: dict[str, Any]) -> bool:
    """Whether the engine passed every check of the bench (``checks.passed``; not judged counts as passed)."""
    return _get(e, "checks", "passed") is not False


def recommendation(data: dict[str, Any]) -> dict[str, Any] | None:
    """``{"meaningful", "pick", "fastest"}`` over the engines that ran (the reference excluded); ``pick`` is the
    fastest not shown to differ (None where parity means nothing or every engine differs), each with its label,
    speed-up, confirmed differences, cells different at 95 % and whether its candidates are the reference's."""
    ran = [e for e in data.get("engines", []) if e.get("status") == "ok" and not e.get("reference")
           and speedup(e) is not None]
    if not ran:
        return None
    ran.sort(key=lambda e: -speedup(e))
    meaningful = bool(data.get("parity_meaningful", True))

    def view(e: dict[str, Any]) -> dict[str, Any]:
        return {"label": e["label"], "speedup": speedup(e),
                "confirmed": confirmed_differences(e.get("parity") or {}) if meaningful else [],
                "different_at_95": differing_cells(e) if meaningful else [],
                "identical_candidates": identical_candidates(e),
                "failed_checks": list(_get(e, "checks", "failures") or [])}

    pick = next((e for e in ran if not confirmed_differences(e.get("parity") or {}) and checks_pass(e)),
                None) if meaningful else None
    return {"meaningful": meaningful, "reference": data.get("reference"),
            "pick": view(pick) if pick is not None else None, "fastest": view(ran[0])}


def _describe(v: dict[str, Any]) -> str:
    parts = [f"`{v['label']}`: {_fmt_x(v['speedup'])} the reference's speed end to end"]
    if v["identical_candidates"]:
        parts.append("its sampled candidates are the reference's, token for token")
    if v["confirmed"]:
        parts.append(f"shown to differ in {len(v['confirmed'])} cell(s) with all its cells judged together")
    elif v["different_at_95"]:
        parts.append("not shown to differ with all its cells judged together")
    else:
        parts.append("no cell different")
    if v["different_at_95"]:
        parts.append("may change: " + "; ".join(v["different_at_95"][:3]) + " (at 95 % each)")
    if v.get("failed_checks"):
        parts.append("fails: " + "; ".join(v["failed_checks"][:2]))
    return ", ".join(parts)


def recommendation_lines(data: dict[str, Any]) -> list[str]:
    """The recommendation as Markdown / console lines (empty when no engine but the reference ran)."""
    rec = recommendation(data)
    if rec is None:
        return []
    if not rec["meaningful"]:
        return [f"Fastest: {_describe(rec['fastest'])}. Random weights: parity is not judged here, so no engine is "
                "recommended for keeping the answer; judge that on the trained models (a bench without "
                "--random-weights)."]
    lines = []
    if rec["pick"] is not None:
        lines.append(f"Pick: {_describe(rec['pick'])}.")
    else:
        lines.append("Pick: none of the engines is free of a confirmed difference from the reference and passes "
                     f"every check; use `{rec['reference']}` where the answer must not change.")
    if rec["pick"] is None or rec["fastest"]["label"] != rec["pick"]["label"]:
        lines.append(f"Fastest: {_describe(rec['fastest'])}.")
    return lines
