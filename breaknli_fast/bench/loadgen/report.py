"""Renderings of a scenario bench (``bench --scenario``): bench.md, the terminal table and ``--compare``'s rows,
every column from the metric definitions (:mod:`.metrics`; a saved bench renders with the definitions it carries)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from breaknli_fast.bench.loadgen.compliance import ORDER, SPEED_TESTS, TESTS, label
from breaknli_fast.bench.loadgen.metrics import METRICS, Metric
from breaknli_fast.bench.loadgen.settings import ROLE_TITLES, SCENARIOS
from breaknli_fast.bench.loadgen.types import ComplianceResult, MetricCell, ScenarioReport, ScenarioRow, read_report
from breaknli_fast.bench.types import JSON

Scenarios = ScenarioReport | Mapping[str, JSON]  # a scenario bench, or its JSON (read with read_report)

GROUPS = (("latency", "Latency and throughput (LoadGen's figures)"),
          ("accuracy", "Accuracy against the torch fp32 reference (AccuracyOnly pass)"),
          ("edge", "Cold start, size and memory"),
          ("energy", "Energy (the hardware's counters over each performance run)"))


def metrics_of(data: Scenarios) -> tuple[Metric, ...]:
    """The metric definitions a bench was saved with (this version's where it carries none)."""
    return read_report(data).metric_definitions()


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    esc = lambda c: str(c).replace("|", "\\|")  # noqa: E731
    return (["| " + " | ".join(esc(h) for h in header) + " |", "|" + "---|" * len(header)]
            + ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows])


def _ident(row: ScenarioRow) -> list[str]:
    return [row.engine, ROLE_TITLES.get(row.role, row.role), row.scenario]


SHORT_ROLE = {"classifier": "clf", "generator": "gen", "study": "study"}


def _short_ident(row: ScenarioRow) -> list[str]:
    """The terminal's narrow names: ``clf`` / ``gen`` / ``study``, the scenario without ``-stream``."""
    return [row.engine, SHORT_ROLE.get(row.role, row.role), row.scenario.replace("-stream", "")]


Table = tuple[str, list[str], list[list[str]]]  # (title, header, rows of cells)


def scenario_table_cells(data: ScenarioReport) -> list[Table]:
    """The scenarios table, one table per group of metrics (rows: engine x role x scenario), as cells: the Markdown
    and the HTML report render the same."""
    ms = data.metric_definitions()
    rows = data.scenarios
    out: list[Table] = []
    for group, title in GROUPS:
        cols = [m for m in ms if m.group == group and any(r.metric(m.key) is not None for r in rows)]
        if cols:
            out.append((title, ["engine", "role", "scenario"] + [m.title for m in cols],
                        [_ident(r) + [m.text(r.metric(m.key)) for m in cols] for r in rows]))
    return out


def scenario_tables(data: ScenarioReport) -> list[str]:
    """The scenarios table, one Markdown table per group of metrics (rows: engine x role x scenario)."""
    out: list[str] = []
    for title, header, rows in scenario_table_cells(data):
        out += [f"### {title}", ""] + _md(header, rows) + [""]
    return out


def compliance_cell(c: ComplianceResult) -> str:
    """One compliance test of one row: PASS / FAIL (what failed), the speed against the performance run, TEST01's
    outputs, the generator tests' checks passed."""
    parts = [f"{(c.speed_ratio - 1) * 100:+.1f} %"] if c.speed_ratio and c.test in SPEED_TESTS else []
    if parts and c.first_speed_ratio:
        parts[0] += (f" on a re-run after {(c.first_speed_ratio - 1) * 100:+.1f} %"
                     + (", against a performance run made for it" if c.rerun_performance else ""))
    o = c.outputs
    if o:
        parts.append(f"{o.equal}/{o.compared} equal")
    if c.checks:
        parts.append(f"{sum(x.passed for x in c.checks)}/{len(c.checks)} checks")
    fail = f": {' and '.join(c.failed)}" if c.failed and c.result == "FAIL" else ""
    return c.result + fail + (f" ({', '.join(parts)})" if parts else "")


def compliance_rows(data: ScenarioReport) -> tuple[list[str], list[tuple[list[str], list[str]]]]:
    """(tests as labelled, [(the row's short names, a cell per test)]) of the rows that ran compliance tests."""
    rows = [(r, r.compliance) for r in data.scenarios if r.compliance]
    tests = sorted({t for _, c in rows for t in c}, key=lambda t: (ORDER.index(t) if t in ORDER else len(ORDER), t))
    return [label(t) for t in tests], [(_short_ident(r), [compliance_cell(c[t]) if t in c else "–" for t in tests])
                                       for r, c in rows]


def compliance_legend(data: ScenarioReport) -> str:
    """What each test that ran checks, under which rules."""
    ran = {t for r in data.scenarios for t in (r.compliance or {})}
    rules = data.loadgen.compliance_rules
    return ((f"As {rules} assigns them to each role. " if rules else "")
            + "; ".join(f"{label(t)}: {TESTS[t].what}" for t in TESTS if t in ran)
            + ". PASS needs LoadGen's VALID too; a FAIL names what failed (outputs, speed, LoadGen). In brackets: "
              "speed against the row's performance run (the tests with a speed criterion; a test failed on speed "
              "alone runs once more, and its cell gives both runs' speed), TEST01's responses equal, "
              "the generator tests' checks passed.")


def compliance_tables(data: ScenarioReport) -> list[str]:
    tests, rows = compliance_rows(data)
    if not rows:
        return []
    return (["### MLPerf compliance tests (LoadGen's audit.config)", "", compliance_legend(data), ""]
            + _md(["engine", "role", "scenario"] + tests, [ident + cells for ident, cells in rows]) + [""])


def energy_line(data: ScenarioReport) -> str | None:
    """How energy was measured (the counters, the idle power), or why not; None for a bench saved before."""
    e = data.energy
    if e is None:
        return None
    if not e.measured:
        return f"energy: not measured ({e.why_not})"
    idle = f"idle power {e.idle_w:.1f} W (measured {e.idle_s:.1f} s at rest before the engines)" \
        if e.idle_w is not None else "idle power not measured"
    return f"energy: {e.source}; {idle}" + (f"; not counted: {e.why_not}" if e.why_not else "")


def _header(data: ScenarioReport) -> list[str]:
    env, lg, wl = data.environment, data.loadgen, data.workload
    pk = env.get("packages") or {}
    seeds = data.seeds.loadgen or {}
    dec = wl.decoding or {}
    models = data.models
    return [
        f"- machine: {env.get('cpu')} ({env.get('cpu_count')} logical CPUs, {env.get('memory_gib')} GiB); load "
        "average in each row",
        f"- versions: breaknli-fast {env.get('breaknli_fast')} ({env.get('git')}), mlcommons-loadgen "
        f"{lg.version}, torch {pk.get('torch')}, onnxruntime {pk.get('onnxruntime')}",
        f"- rules: {lg.rules}; LoadGen seeds: " + ", ".join(f"{k} {v}" for k, v in seeds.items()),
        f"- models: classifier `{models.classifier}`, generator `{models.generator}`"
        + (" (random weights: speed only)" if models.random_weights else "")
        + f"; data `{data.data.name}`: "
        + "; ".join(x for x in (
            f"{wl.classifier_samples} classifier samples" if wl.classifier_samples else "",
            f"{wl.generator_samples} generator / study-unit samples (K = {wl.k}, {dec.get('strategy')}, "
            f"top-k {dec.get('top_k')}, top-p {dec.get('top_p')}, max_new_tokens {dec.get('max_new_tokens')})"
            if wl.generator_samples else "") if x),
        f"- accuracy: score as a percentage of `{data.reference}`'s on the same samples; tiers 99 % and "
        f"99.9 %; `--strict` requires the {data.accuracy_tier:g} % tier and VALID runs; paired "
        f"verdicts at ±{data.tolerance_pp} pp",
    ] + ([f"- {energy_line(data)}"] if energy_line(data) else []) + [""]


def _row_logs(r: ScenarioRow) -> str:
    assert r.logs is not None
    return (f"- {' '.join(_ident(r))}: `{r.logs.performance}`, `{r.logs.accuracy}`"
            + "".join(f", `{x.log}`" for x in (r.rounds or [])[1:])
            + "".join(f", `{c.log}`" for c in (r.compliance or {}).values()))


def scenario_markdown(data: Scenarios) -> str:
    data = read_report(data)
    lines = ["# breaknli-fast bench: LoadGen scenarios", ""]
    if data.command:
        lines += ["```", data.command, "```", ""]
    lines += _header(data)
    lines += [f"> **Note:** {n}" for n in data.notes] + ([""] if data.notes else [])
    lines += ["## Scenarios", ""] + scenario_tables(data) + compliance_tables(data)
    bad = [r for r in data.scenarios if r.reasons]
    if bad:
        lines += ["### Why LoadGen judged a run INVALID", ""]
        lines += [f"- {' '.join(_ident(r))}: " + "; ".join(r.reasons) for r in bad] + [""]
    warn = [r for r in data.scenarios if r.warnings]
    if warn:
        lines += ["### Warnings", ""] + [f"- {' '.join(_ident(r))}: " + "; ".join(r.warnings) for r in warn] + [""]
    lines += ["### Logs", "", "LoadGen's own logs (mlperf_log_summary.txt, mlperf_log_detail.txt, "
              "mlperf_log_accuracy.json) of each run, relative to this folder:", ""]
    lines += [_row_logs(r) for r in data.scenarios if r.logs] + [""]

    skipped = [e for e in data.engines if e.status != "ok"]
    if skipped:
        lines += ["## Skipped or failed engines", ""]
        lines += [f"- `{e.label}`: {e.status}: {e.reason}" for e in skipped] + [""]
    lines += ["## Verdict", "", "PASS: every run VALID, every engine at the required tier and every compliance test passed"
              if data.passed
              else "FAIL:"]
    lines += [f"- {f}" for f in data.failures]
    lines += ["", "## What the columns mean", ""]
    docs: dict[str, list[str]] = {}
    for m in data.metric_definitions():
        if m.doc:
            docs.setdefault(m.doc, []).append(m.title)
    lines += [f"- **{' / '.join(titles)}**: {doc}" for doc, titles in docs.items()]
    lines += ["", "Scenarios: " + "; ".join(f"{s.name} ({s.loadgen}): {s.what}" for s in SCENARIOS.values())
              + ". docs/latency.md explains how to read them."]
    return "\n".join(lines) + "\n"


def _narrow(text: str) -> str:
    """A cell as the terminal's narrow column shows it: "too few queries (5 of 64)" as "too few (5/64)"."""
    m = re.fullmatch(r"too few queries \((\S+) of (\S+)\)", text)
    return f"too few ({m.group(1)}/{m.group(2)})" if m else text


def scenario_rich_table(data: Scenarios) -> Any:
    from rich.table import Table

    data = read_report(data)
    ms = [m for m in data.metric_definitions() if m.terminal]
    rows = data.scenarios
    ms = [m for m in ms if any(r.metric(m.key) is not None for r in rows)]
    t = Table(title=f"LoadGen scenarios vs {data.reference}"
              + (" (random weights: accuracy not meaningful)" if not data.parity_meaningful else ""))
    from breaknli_fast.console import name_cell, name_width

    widths = {"engine": name_width([r.engine for r in rows] + [e.label for e in data.engines]),
              "role": len("study"), "scen.": len("single")}
    for name, just in [("engine", "left"), ("role", "left"), ("scen.", "left")] + [(m.short, "right") for m in ms]:
        t.add_column(name, justify=just, overflow="fold", min_width=widths.get(name))
    style = {"VALID": "[green]VALID[/]", "INVALID": "[bold red]INVALID[/]", "PASS": "[green]PASS[/]",
             "FAIL": "[bold red]FAIL[/]"}
    for r in rows:
        ident = _short_ident(r)
        texts = [_narrow(m.text(r.metric(m.key))) for m in ms]
        t.add_row(name_cell(ident[0]), *ident[1:], *[style.get(x, x) for x in texts])
    for e in data.engines:
        if e.status != "ok":
            t.add_row(e.label, "–", "–", *([f"[yellow]{e.status}[/]"] + ["–"] * (len(ms) - 1)))
    return t


def compliance_rich_table(data: Scenarios, width: int | None = None) -> Any:
    """The compliance tests in the terminal (None when none ran), in as many tables as ``width`` (default: the
    console's) needs for no cell to be cropped: each repeats engine, role and scenario beside the tests that fit."""
    from rich.console import Group
    from rich.table import Table

    tests, rows = compliance_rows(read_report(data))
    if not rows:
        return None
    from rich.markup import escape

    from breaknli_fast.console import console, name_cell, name_width, tables_that_fit

    rules = read_report(data).loadgen.compliance_rules
    total = width if width is not None else console.width
    widths = {"engine": name_width(ident[0] for ident, _ in rows), "role": len("study"), "scen.": len("single")}
    longest = {t: max((len(w) for _, cells in rows for w in cells[i].split()), default=4) for i, t in enumerate(tests)}
    whole = {t: max((len(cells[i]) for _, cells in rows), default=4) for i, t in enumerate(tests)}

    def make(shown: Any) -> Table:
        part = "" if len(shown) == len(tests) else f" ({', '.join(shown)})"
        t = Table(title=f"MLPerf compliance (audit.config){', ' + rules if rules else ''}{part}")
        for name in ["engine", "role", "scen."]:
            t.add_column(name, overflow="fold", min_width=widths.get(name))
        # the tests share what is left of the width (rich crops, rather than wraps, a table a little too wide); a
        # result wraps between its words, never inside one, and tests that do not fit go to the next table
        share = (total - sum(widths.values()) - 3 * (3 + len(shown)) - 1) // max(1, len(shown))
        for name in shown:
            t.add_column(name, overflow="fold", width=max(len(name), longest[name], min(whole[name], share)))
        for ident, cells in rows:
            shown_cells = [cells[tests.index(n)] for n in shown]
            t.add_row(name_cell(ident[0]), *ident[1:],
                      *[escape(c).replace("PASS", "[green]PASS[/]", 1).replace("FAIL", "[bold red]FAIL[/]", 1)
                        for c in shown_cells])
        return t

    return Group(*tables_that_fit(make, tests, total))


@dataclass
class ScenarioCompareRow:
    """One (engine, role, scenario) of two scenario benches: whether each has it, and every metric in A and B
    (``compare.json``)."""

    engine: str
    role: str
    scenario: str
    in_a: bool
    in_b: bool
    metrics: dict[str, MetricCell] = field(default_factory=dict)
    compliance: dict[str, MetricCell] = field(default_factory=dict)  # test as labelled -> its cell in A and B


def compare_rows(a: Scenarios, b: Scenarios) -> list[ScenarioCompareRow]:
    """Each (engine, role, scenario) of either bench with every metric in A and B, and B / A where the metric has
    a direction."""
    a, b = read_report(a), read_report(b)
    ms = (b if b.scenario_metrics else a).metric_definitions()
    ra = {r.key: r for r in a.scenarios}
    rb = {r.key: r for r in b.scenarios}
    out = []
    for key in list(ra) + [k for k in rb if k not in ra]:
        x, y = ra.get(key), rb.get(key)
        row = ScenarioCompareRow(*key, in_a=x is not None, in_b=y is not None)
        for m in ms:
            va, vb = x.metric(m.key) if x else None, y.metric(m.key) if y else None
            num = m.better is not None and isinstance(va, (int, float)) and isinstance(vb, (int, float))
            row.metrics[m.key] = MetricCell(va, vb, vb / va if num and va else None)  # type: ignore[operator]
        row.compliance = _compare_compliance(x, y)
        out.append(row)
    return out


def _compare_compliance(x: ScenarioRow | None, y: ScenarioRow | None) -> dict[str, MetricCell]:
    ca, cb = (x.compliance or {}) if x else {}, (y.compliance or {}) if y else {}
    tests = sorted(set(ca) | set(cb), key=lambda t: (ORDER.index(t) if t in ORDER else len(ORDER), t))
    return {label(t): MetricCell(compliance_cell(ca[t]) if t in ca else None,
                                 compliance_cell(cb[t]) if t in cb else None) for t in tests}


def compare_table_rows(compared: list[ScenarioCompareRow], defs: tuple[Metric, ...] = METRICS) -> list[list[str]]:
    """The rows of :func:`compare_rows` as table cells."""
    rows = []
    for r in compared:
        rows.append([f"{r.engine} {ROLE_TITLES.get(r.role, r.role)} {r.scenario}", "present",
                     "yes" if r.in_a else "absent", "yes" if r.in_b else "absent", ""])
        for m in defs:
            v = r.metrics.get(m.key) or MetricCell()
            if v.a is None and v.b is None:
                continue
            ratio = v.ratio_b_over_a
            rows.append(["", m.title, m.text(v.a), m.text(v.b), f"{ratio:.2f}×" if ratio is not None else ""])
        for test, v in r.compliance.items():
            rows.append(["", f"compliance {test}", str(v.a or "–"), str(v.b or "–"), ""])
    return rows
