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

from breaknli_fast.bench.parity import confirmed_differences
from breaknli_fast.bench.types import BenchReport, EngineResult, EngineView, Parity, Recommendation


def _fmt_x(x: float | None) -> str:
    return f"{x:.2f}x" if x is not None else "-"


def differing_cells(e: EngineResult) -> list[str]:
    """The cells the engine differs in at 95 % each (what it may change), most different first."""
    out = [(abs(c.diff or 0.0), f"{where} {c.text()}") for where, c in e.cells() if c.verdict == "different"]
    return [text for _, text in sorted(out, reverse=True)]


def identical_candidates(e: EngineResult) -> bool:
    """Every sampled candidate the engine kept is the reference's (the same seeds and logits up to rounding)."""
    gen = e.parity.generator if e.parity is not None else None
    return gen is not None and bool(gen.sampled_candidates.n) and gen.sampled_candidates.identical_pct == 100.0


def shown_to_match(e: EngineResult) -> str:
    """One sentence per engine: shown to match (every cell equivalent), shown to differ, or not shown either way."""
    if not e.ran:
        return f"no: it did not run ({e.status}: {e.reason})"
    v = e.verdicts
    n = v.equivalent + v.different + v.inconclusive if v is not None else 0
    if v is None or not n:
        return "no parity verdicts recorded"
    small = f"; {v.too_small} of them on too few examples to show equivalence at all" if v.too_small else ""
    if v.different:
        confirmed = confirmed_differences(e.parity or Parity())
        if confirmed:
            return (f"no: {len(confirmed)} of {n} cells differ beyond the tolerance, still with all the cells judged "
                    f"together (Bonferroni){small}")
        return (f"not shown: {v.different} of {n} cells differ beyond the tolerance at 95 % each, but none stays "
                f"different with all the cells judged together (Bonferroni), so chance is not ruled out; "
                f"{v.equivalent} equivalent{small}")
    if v.inconclusive:
        return (f"not shown: {v.equivalent} of {n} cells equivalent, {v.inconclusive} inconclusive "
                f"(none shown to differ, but the intervals are too wide to show a match){small}")
    return f"yes: all {n} cells equivalent within the tolerance"


def _view(e: EngineResult, meaningful: bool) -> EngineView:
    return EngineView(label=e.shown_label, speedup=e.speedup,
                      confirmed=confirmed_differences(e.parity or Parity()) if meaningful else [],
                      different_at_95=differing_cells(e) if meaningful else [],
                      identical_candidates=identical_candidates(e),
                      failed_checks=list(e.checks.failures) if e.checks is not None else [])


def recommendation(report: BenchReport) -> Recommendation | None:
    """Over the engines that ran a model of the bench themselves (the reference excluded; an entry whose every role
    another engine ran measured that engine, :attr:`EngineResult.did_the_work`): ``pick``, the fastest that is
    faster than the reference, not shown to differ and passing every check (None where parity means nothing or no
    engine qualifies), and the fastest overall. Computed from the same :class:`EngineResult` objects -- and their
    :class:`~breaknli_fast.bench.types.Checks` -- the bench shows."""
    ran = [e for e in report.engines if e.ran and not e.reference and e.speedup is not None and e.did_the_work]
    if not ran:
        return None
    ran.sort(key=lambda e: -(e.speedup or 0.0))
    meaningful = report.parity_meaningful
    pick = next((e for e in ran if (e.speedup or 0.0) > 1.0 and not confirmed_differences(e.parity or Parity())
                 and e.passed_checks), None) if meaningful else None
    return Recommendation(meaningful=meaningful, reference=report.reference,
                          pick=_view(pick, meaningful) if pick is not None else None, fastest=_view(ran[0], meaningful))


def _describe(v: EngineView) -> str:
    parts = [f"`{v.label}`: {_fmt_x(v.speedup)} the reference's speed end to end"]
    if v.identical_candidates:
        parts.append("its sampled candidates are the reference's, token for token")
    if v.confirmed:
        parts.append(f"shown to differ in {len(v.confirmed)} cell(s) with all its cells judged together")
    elif v.different_at_95:
        parts.append("not shown to differ with all its cells judged together")
    else:
        parts.append("no cell different")
    if v.different_at_95:
        parts.append("may change: " + "; ".join(v.different_at_95[:3]) + " (at 95 % each)")
    if v.failed_checks:
        parts.append("fails: " + "; ".join(v.failed_checks[:2]))
    return ", ".join(parts)


def recommendation_lines(report: BenchReport) -> list[str]:
    """The recommendation as Markdown / console lines (empty when no engine but the reference ran), computed from
    the engines by the present rule (a file's stored ``recommendation`` is what the code that wrote it chose)."""
    rec = recommendation(report)
    idle = [e for e in report.engines if e.ran and not e.reference and not e.did_the_work]
    lines = ["Not ranked: " + "; ".join(f"`{e.shown_label}` ran none of the bench's models itself" for e in idle)
             + "."] if idle else []
    if rec is None:
        return lines
    if not rec.meaningful:
        return [f"Fastest: {_describe(rec.fastest)}. Random weights: parity is not judged here, so no engine is "
                "recommended for keeping the answer; judge that on the trained models (a bench without "
                "--random-weights)."] + lines
    if rec.pick is not None:
        head = [f"Pick: {_describe(rec.pick)}."]
    else:
        head = ["Pick: none of the engines is faster than the reference, free of a confirmed difference from it "
                f"and passing every check; use `{rec.reference}`."]
    if rec.pick is None or rec.fastest.label != rec.pick.label:
        head.append(f"Fastest: {_describe(rec.fastest)}.")
    return head + lines
