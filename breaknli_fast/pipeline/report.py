"""report.json and report.md of a run (the study's table shape: inequality% / relaxed%, with counts)."""

from __future__ import annotations

from typing import Any, Sequence

from breaknli_fast.data.labels import LABELS, SHORT
from breaknli_fast.pipeline.breaknli import LoopConfig, StageTimes, funnel
from breaknli_fast.pipeline.metrics import breakdown


def throughput(times: StageTimes, invocations: int = 1, this_invocation: StageTimes | None = None) -> dict[str, Any]:
    """Throughput of ``times``: the sum over the ``invocations`` that computed the run's records (a resume
    with nothing left to do adds none). ``this_invocation``: the current invocation's own timings."""
    s = times.seconds
    pairs = sum(times.pairs.values())
    cls_s = s["classify_ph"] + s["relation"] + s["evaluate"]
    cur = this_invocation if this_invocation is not None else times
    return {
        "invocations": invocations,
        "wall_seconds": round(times.wall, 3),
        "examples": times.examples,
        "examples_this_invocation": cur.examples,
        "wall_seconds_this_invocation": round(cur.wall, 3),
        "examples_per_s": round(times.examples / times.wall, 3) if times.wall > 0 and times.examples else None,
        "classifier_pairs": pairs,
        "classifier_pairs_per_s": round(pairs / cls_s, 2) if cls_s > 0 else None,
        "generated_sequences": times.sequences,
        "generated_tokens": times.new_tokens,
        "generated_tokens_per_s": round(times.new_tokens / s["generate"], 2) if s["generate"] > 0 else None,
        "stage_seconds": {k: round(v, 3) for k, v in s.items()},
    }


def build_report(records: Sequence[dict[str, Any]], data: Any, cfg: LoopConfig, times: StageTimes,
                 config: dict[str, Any], invocations: Sequence[dict[str, Any]] | None = None) -> dict[str, Any]:
    """The report of a run. ``invocations``: the timings of every invocation that did work (the run
    directory's ``invocations.jsonl``); throughput is their sum. Without it, ``times`` alone."""
    total = StageTimes.total(invocations) if invocations else times
    return {
        "funnel": funnel(records, data, cfg.modes),
        "metrics": breakdown(records),
        "throughput": throughput(total, len(invocations) if invocations else 1, this_invocation=times),
        "models": {"generator": config.get("generator"), "classifier": config.get("classifier")},
        "engine": config.get("engine"),
        "dataset": config.get("dataset"),
        "loop": cfg.to_dict(),
    }


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


def to_markdown(report: dict[str, Any]) -> str:
    lines = ["# BreakNLI report", ""]
    m = report.get("models", {})
    lines += [f"- generator: `{m.get('generator')}`", f"- classifier: `{m.get('classifier')}`",
              f"- engine: `{report.get('engine')}`", f"- dataset: `{report.get('dataset')}`", ""]
    lines += ["## Breakage (per example): inequality % / relaxed %", ""]
    header, rows = table_rows(report)
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for r in rows:
        lines.append("| " + " | ".join(r) + " |")
    if "contradictive" in report["metrics"]:
        lines += ["", CONTRADICTIVE_C_NOTE]
    lines += ["", "## Per candidate and 95 % bootstrap CIs", "",
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
    t = report["throughput"]
    n_inv = t.get("invocations", 1)
    scope = "one invocation" if n_inv == 1 else f"summed over the {n_inv} invocations that computed the records"
    lines += ["", f"## Throughput ({scope})", "",
              f"- wall: {t['wall_seconds']} s for {t.get('examples', t['examples_this_invocation'])} examples"
              + (f" ({t['examples_per_s']} examples/s)" if t["examples_per_s"] else ""),
              f"- classifier: {t['classifier_pairs']} pairs"
              + (f", {t['classifier_pairs_per_s']} pairs/s" if t["classifier_pairs_per_s"] else ""),
              f"- generator: {t['generated_sequences']} sequences, {t['generated_tokens']} tokens"
              + (f", {t['generated_tokens_per_s']} tokens/s" if t["generated_tokens_per_s"] else ""),
              "- stage seconds: " + ", ".join(f"{k} {v}" for k, v in t["stage_seconds"].items()), ""]
    return "\n".join(lines)
