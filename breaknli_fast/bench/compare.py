"""``--compare``: two saved benches side by side (each engine's speed and parity, with ratios B / A)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from breaknli_fast.bench.report import _classifier, _f, _md_table, _records, max_abs_breakage_diff, status_text
from breaknli_fast.bench.types import BenchReport, EngineResult, Memory, SpeedSummary, Speedup


def _speedup(e: EngineResult) -> Speedup:
    return (e.speed.speedup if e.speed else None) or Speedup()


def _summary(e: EngineResult) -> SpeedSummary:
    return (e.speed.summary if e.speed else None) or SpeedSummary()


def _memory(e: EngineResult) -> Memory:
    return e.memory or Memory()


# name, the figure of an engine, format, whether B / A is shown
COMPARE_METRICS: tuple[tuple[str, Callable[[EngineResult], Any], str, bool], ...] = (
    ("speed-up (workload)", lambda e: _speedup(e).workload, ".2f", True),
    ("speed-up (workload, best)", lambda e: _speedup(e).workload_best, ".2f", True),
    ("speed-up (e2e)", lambda e: _speedup(e).end_to_end, ".2f", True),
    ("clf pairs/s", lambda e: _summary(e).classifier_pairs_per_s, ".1f", True),
    ("gen tokens/s", lambda e: _summary(e).generated_tokens_per_s, ".1f", True),
    ("examples/s", lambda e: _summary(e).examples_per_s, ".3f", True),
    ("clf batch p95 ms", lambda e: _summary(e).classifier_batch_p95_ms, ".1f", True),
    ("gen call p95 ms", lambda e: _summary(e).generator_call_p95_ms, ".1f", True),
    ("peak RSS MiB", lambda e: _memory(e).peak_rss_mib, ".0f", True),
    ("GPU peak MiB", lambda e: _memory(e).gpu_peak_allocated_mib, ".0f", True),
    ("label agreement %", lambda e: _classifier(e).label_agreement_pct, ".2f", False),
    ("records with identical predictions %", lambda e: _records(e).identical_pct, ".2f", False),
    ("labels changed by batching", lambda e: e.batch_invariance.labels_changed if e.batch_invariance else None, "d",
     False),
    ("max |Δ Overall| pp", max_abs_breakage_diff, ".2f", False),
)


@dataclass
class CompareCell:
    a: Any
    b: Any
    ratio_b_over_a: float | None


@dataclass
class CompareRow:
    engine: str
    status_a: str
    status_b: str
    metrics: dict[str, CompareCell] = field(default_factory=dict)


@dataclass
class Comparison:
    """Two benches side by side (``compare.json``): who ran them, and a row per engine (for two LoadGen benches,
    per engine x role x scenario: :func:`breaknli_fast.bench.loadgen.report.compare_rows`)."""

    a: dict[str, Any]
    b: dict[str, Any]
    rows: list[Any]
    kind: str | None = None


def _who(d: Any) -> dict[str, Any]:
    """Who ran a bench (a :class:`BenchReport` or a scenario bench's
    :class:`~breaknli_fast.bench.loadgen.types.ScenarioReport`), on what."""
    from breaknli_fast.bench.types import to_json

    env = d.environment
    models = d.models if isinstance(d, BenchReport) else to_json(d.models)
    return {"command": d.command, "started": d.started, "cpu": env.get("cpu"),
            "gpus": (env.get("accelerators") or {}).get("gpus"), "git": env.get("git"),
            "models": models, "parity_meaningful": d.parity_meaningful}


def compare(a: Any, b: Any) -> Comparison:
    """Each engine's speed and parity in two benches (:class:`~breaknli_fast.bench.result.BenchResult`) side by
    side, with ratios B / A; two ``--scenario`` benches: each engine x role x scenario's LoadGen figures."""
    if (a.report is None) != (b.report is None):
        from breaknli_fast.errors import UserError

        kinds = ["a LoadGen scenario bench (--scenario)" if x.report is None else "a probe bench" for x in (a, b)]
        raise UserError(f"A is {kinds[0]} and B {kinds[1]}: they measure different things (LoadGen's latencies per "
                        "role and scenario; a probe's speed and parity), so no row of one is in the other")
    if a.report is None or b.report is None:
        from breaknli_fast.bench.loadgen.report import compare_rows as scenario_rows
        from breaknli_fast.bench.loadgen.types import ScenarioReport

        sa, sb = a.scenarios or ScenarioReport(), b.scenarios or ScenarioReport()  # a probe bench: no scenario rows
        return Comparison(_who(a.typed), _who(b.typed), scenario_rows(sa, sb), kind="scenarios")
    ea = {e.label: e for e in a.report.engines}
    eb = {e.label: e for e in b.report.engines}
    rows = []
    for lab in list(ea) + [x for x in eb if x not in ea]:
        x, y = ea.get(lab), eb.get(lab)
        row = CompareRow(lab, status_text(x) if x else "absent", status_text(y) if y else "absent")
        for name, figure, _, ratio in COMPARE_METRICS:
            va = figure(x) if x and x.ran else None
            vb = figure(y) if y and y.ran else None
            row.metrics[name] = CompareCell(va, vb, vb / va if ratio and va and vb is not None else None)
        rows.append(row)
    return Comparison(_who(a.report), _who(b.report), rows)


def compare_markdown(cmp: Comparison, name_a: str = "A", name_b: str = "B") -> str:
    lines = ["# breaknli-fast bench comparison", "",
             f"- A: `{name_a}` ({cmp.a.get('cpu')}, GPU {cmp.a.get('gpus') or 'none'}, {cmp.a.get('started')})",
             f"- B: `{name_b}` ({cmp.b.get('cpu')}, GPU {cmp.b.get('gpus') or 'none'}, {cmp.b.get('started')})", ""]
    if not (cmp.a.get("parity_meaningful", True) and cmp.b.get("parity_meaningful", True)):
        lines += ["> **Note:** at least one bench used random weights: its parity figures are not meaningful.", ""]
    lines += _md_table(["engine", "metric", "A", "B", "B / A"], compare_rows(cmp))
    return "\n".join(lines) + "\n"


def compare_rows(cmp: Comparison) -> list[list[str]]:
    if cmp.kind == "scenarios":
        from breaknli_fast.bench.loadgen.report import compare_table_rows

        return compare_table_rows(cmp.rows)
    rows = []
    for r in cmp.rows:
        rows.append([r.engine, "status", r.status_a, r.status_b, ""])
        for name, _, fmt, ratio in COMPARE_METRICS:
            m = r.metrics[name]
            if m.a is None and m.b is None:
                continue
            rows.append(["", name, _f(m.a, fmt), _f(m.b, fmt), _f(m.ratio_b_over_a, ".2f", "×") if ratio else ""])
    return rows


def compare_table(cmp: Comparison, name_a: str = "A", name_b: str = "B", width: int | None = None) -> Any:
    """The comparison on the terminal, fitted to ``width`` (default: the console's)."""
    from rich.table import Table

    from breaknli_fast.console import NAME_WIDTH, console, name_cell

    t = Table(title=f"bench comparison: A = {name_a}, B = {name_b}")
    rows = []
    for row in compare_rows(cmp):
        if row[1] == "status" and cmp.kind != "scenarios":
            row = [row[0], row[1], row[2].split(":")[0], row[3].split(":")[0], ""]
        rows.append([name_cell(row[0]), *row[1:]])

    def words(i: int) -> int:  # the longest word of a column: it wraps at spaces (and long names after ':')
        return max((len(w) for r in rows for w in str(r[i]).split()), default=1)

    def whole(i: int, head: str) -> int:  # the widest line of a column
        return max([len(head)] + [len(line) for r in rows for line in str(r[i]).splitlines()])

    # the figures never wrap; the names share what is left (rich crops, rather than wraps, a table a little too
    # wide), wrapping between words: at 80 columns every column stays, B / A included
    figures = [whole(i, h) for i, h in ((2, "A"), (3, "B"), (4, "B / A"))]
    left = (width if width is not None else console.width) - sum(figures) - 16
    engine = max(min(NAME_WIDTH, words(0)), min(whole(0, "engine"), left // 2))
    t.add_column("engine", overflow="fold", width=engine)
    t.add_column("metric", overflow="fold", width=max(words(1), min(whole(1, "metric"), left - engine)))
    for name, w in zip(("A", "B", "B / A"), figures):
        t.add_column(name, justify="right", no_wrap=True, min_width=w)
    for row in rows:
        t.add_row(*row, end_section=False)
    return t
