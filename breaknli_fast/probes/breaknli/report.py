"""BreakNLI's report.md sections (the study's table shape: inequality % / relaxed %, with counts); the study
runner adds throughput."""

from __future__ import annotations

from typing import Any

from breaknli_fast.data.labels import LABELS, SHORT


# Why the contradictive ŷ=C cell is often near 100 %: the method's own first open problem.
CONTRADICTIVE_C_NOTE = (
    "Read the contradictive ŷ=C cell with care. When M(p, h) = contradiction, the verdict table expects entailment "
    "for (p, h') (h' read as \"not h\") and counts contradiction as an inequality; but a generated contradiction "
    "of h often contradicts p as well (p \"A man sleeps.\", h \"A man runs.\", h' \"A man walks.\"). Such a "
    "contradiction is correct, yet counted as a break (\"legit inequality\", the first open problem the method's "
    "authors raise), so this cell is often near 100 % and measures the generator as much as the classifier."
)


def fmt_rate(cell: dict[str, Any] | None, prefix: str = "") -> str:
    if not cell or cell.get("n", 0) == 0 or cell.get(prefix + "inequality") is None:
        return "–"
    return f"{cell[prefix + 'inequality']:.2f} / {cell[prefix + 'relaxed']:.2f}"


def table_rows(report: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: one row per mode, columns per ŷ label and Overall (``ineq% / relaxed% (n)``)."""
    header = ["mode"] + [f"{SHORT[l]}" for l in LABELS] + ["Overall"]
    rows = []
    for mode, table in report["metrics"].items():
        row = [mode]
        for key in list(LABELS) + ["overall"]:
            cell = table.get(key)
            row.append(f"{fmt_rate(cell)} (n={cell['n']})" if cell else "–")
        rows.append(row)
    return header, rows


def loop_lines(loop: dict[str, Any]) -> list[str]:
    """The loop's settings that move the figures most, and which source each follows (docs/methodology.md)."""
    if not loop:
        return []
    s, n = loop.get("s", 5), int(loop.get("top_up") or 0)
    both = loop.get("bidirectional", True)
    return [f"- loop: K = {loop.get('k')}, U = {loop.get('u')}, S = {s}; relation filter: "
            + ("M(h, h') and M(h', h) both on target (the study's code)" if both
               else "M(h, h') on target, one direction (the study's README)"),
            f"- top-up: up to {n} draws, one candidate at a time, for an example with fewer than S = {s} on target "
            "(the study's code draws up to 15)" if n else
            f"- top-up: none (an example with fewer than S = {s} on target is dropped at once; the study's code "
            "draws up to 15 more, `--top-up 15`)"]


def to_markdown(report: dict[str, Any]) -> str:
    lines = ["# BreakNLI report", ""]
    m = report.get("models", {})
    lines += [f"- generator: `{m.get('generator')}`", f"- classifier: `{m.get('classifier')}`",
              f"- engine: `{report.get('engine')}`", f"- dataset: `{report.get('dataset')}`"]
    lines += loop_lines(report.get("loop") or {}) + [""]
    lines += ["## Breakage (per example): inequality % / relaxed %", ""]
    header, rows = table_rows(report)
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    if "contradictive" in report["metrics"]:
        lines += ["", CONTRADICTIVE_C_NOTE]
    lines += ["", "## Per candidate, with 95 % CIs", "",
              "Per example: Wilson score intervals; per candidate (non-compliant candidates / evaluated candidates, "
              "the candidates of one example counted together): a Student-t interval over examples whose half-width is "
              "never below z²/(n + z²) of n examples, clipped to [0, 100] (one example: 79.35 points each side, so "
              "60 % gives [0, 100] and 100 % gives [20.65, 100]).", "",
              "| mode | ŷ | n | inequality % [CI] | relaxed % [CI] | per-candidate inequality % [CI] | per-candidate relaxed % [CI] |",
              "|---|---|---|---|---|---|---|"]
    for mode, table in report["metrics"].items():
        for key, cell in table.items():
            if cell["n"] == 0:
                continue

            def c(k: str) -> str:
                lo, hi = cell[k + "_ci"]
                return f"{cell[k]:.2f} [{lo:.2f}, {hi:.2f}]"

            lines.append(f"| {mode} | {key} | {cell['n']} | {c('inequality')} | {c('relaxed')} | "
                         f"{c('cand_inequality')} | {c('cand_relaxed')} |")
    f = report["funnel"]
    lines += ["", "## Funnel", "", f"- rows read: {f['read']}, skipped: {f['skipped']} "
              + ", ".join(f"{k}={v}" for k, v in f["skips"]["counts"].items() if v), f"- valid examples: {f['valid']}"]
    for k, lines_ in f["skips"]["first_lines"].items():
        if lines_:
            lines.append(f"  - {k}: first lines {', '.join(map(str, lines_))}")
    if f.get("accuracy_ph") is not None:
        lines.append(f"- classifier accuracy on (p, h): {f['accuracy_ph']:.2f} % (n={f['accuracy_ph_n']})")
    lines += ["", "| mode | selected | correct | generated | too few unique | too few on target | evaluated |",
              "|---|---|---|---|---|---|---|"]
    for mode in report["loop"]["modes"]:
        x = f.get(mode)
        if x:
            lines.append(f"| {mode} | {x['selected']} | {x['correct']} | {x['generated']} | {x['too_few_unique']} | "
                         f"{x['too_few_on_target']} | {x['evaluated']} |")
    for mode in report["loop"]["modes"]:
        t = (f.get(mode) or {}).get("top_up")
        if t is not None:
            lines.append(f"\n- {mode} top-up: {t['examples']} examples had fewer than S on target and drew "
                         f"{t['draws']} candidates; {t['evaluated']} of them reached S and were evaluated")
    return "\n".join(lines)
