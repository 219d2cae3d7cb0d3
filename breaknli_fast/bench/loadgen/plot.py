"""The trade-off of a scenario bench as a picture (``bench.png``) and its HTML report (``bench.html``).

One panel per role x scenario: each engine x precision is a point at its accuracy (% of the torch fp32 reference's
score, MLPerf's 99 % and 99.9 % tiers drawn as lines) against the scenario's reported figure -- LoadGen's
early-stopping latency estimate for SingleStream / MultiStream / Server (the raw percentile drawn as
a triangle, where LoadGen printed no estimate: a run too short for it, or the generator with token latencies, whose
estimates are of TTFT and TPOT), samples/s for Offline -- and, where an energy counter
was readable, a second row of panels against the energy per query (per sample in Offline, whose one query holds
them all). The Pareto front (no other engine both more accurate and faster, or more frugal) is joined by a line and
its points filled; the others are drawn hollow. A bench without accuracy scores (random weights) has no picture.
"""

from __future__ import annotations

import base64
import html
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breaknli_fast.bench.loadgen.report import (Scenarios, compliance_legend, compliance_rows, energy_line,
                                               scenario_table_cells)
from breaknli_fast.bench.loadgen.settings import ROLE_TITLES, SCENARIOS
from breaknli_fast.bench.loadgen.types import ScenarioReport, ScenarioRow, read_report
from breaknli_fast.plotting import pyplot

TIERS = (99.0, 99.9)


@dataclass
class Point:
    engine: str
    x: float
    accuracy: float
    estimate: bool = True  # the early-stopping estimate (False: the raw percentile, too few queries)
    front: bool = False


@dataclass
class Panel:
    role: str
    scenario: str
    axis: str  # the x axis's title
    lower_is_better: bool
    points: list[Point] = field(default_factory=list)

    def mark_front(self) -> None:
        """The Pareto front: no other point at least as good on both axes and better on one."""
        sign = 1.0 if self.lower_is_better else -1.0
        for p in self.points:
            p.front = not any((sign * q.x <= sign * p.x and q.accuracy >= p.accuracy)
                              and (sign * q.x < sign * p.x or q.accuracy > p.accuracy) for q in self.points)


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _latency(row: ScenarioRow) -> tuple[float | None, bool]:
    """(the row's reported latency figure, whether it is LoadGen's early-stopping estimate: else the raw
    percentile, where the run was too short for the estimate or -- the generator with token latencies -- LoadGen
    estimates TTFT and TPOT instead)."""
    es = _num(row.metric("early_stop_ms"))
    if es is not None:
        return es, True
    pct = SCENARIOS[row.scenario].percentile if row.scenario in SCENARIOS else None
    return _num(row.metric("p99_ms" if pct == 99.0 else "p90_ms")), False


def _energy_x(row: ScenarioRow) -> float | None:
    e = row.energy
    if e is None or e.joules is None:
        return None
    if row.scenario == "offline":
        return e.joules * 1e3 / e.samples if e.samples else None
    return _num(row.metric("energy_mj_per_query"))


def panels(data: Scenarios) -> list[Panel]:
    """The panels of the picture (those with at least one point), latency first, then energy."""
    rep = read_report(data)
    keys = list(dict.fromkeys((r.role, r.scenario) for r in rep.scenarios))
    out: list[Panel] = []
    for kind in ("latency", "energy"):
        for role, scenario in keys:
            offline = scenario == "offline"
            if kind == "latency":
                pct = SCENARIOS[scenario].percentile if scenario in SCENARIOS else None
                axis = ("samples/s (higher is better)" if offline else
                        f"p{pct:g} latency (ms): LoadGen's early-stopping estimate")
                panel = Panel(role, scenario, axis, lower_is_better=not offline)
            else:
                panel = Panel(role, scenario, "energy per sample (mJ)" if offline else "energy per query (mJ)", True)
            for r in rep.scenarios:
                acc = _num(r.metric("of_reference_pct"))
                if (r.role, r.scenario) != (role, scenario) or acc is None:
                    continue
                if kind == "energy":
                    x, estimate = _energy_x(r), True
                elif offline:
                    x, estimate = _num(r.metric("samples_per_s")), True
                else:
                    x, estimate = _latency(r)
                if x is not None:
                    panel.points.append(Point(r.engine, x, acc, estimate))
            if panel.points:
                panel.mark_front()
                out.append(panel)
    return out


def _short(label: str) -> str:
    """An engine's label without options that do not change what it computes (``validate=false``)."""
    return ":".join(p for p in label.split(":") if not p.startswith("validate="))


def draw(data: Scenarios, path: str | Path | None = None) -> bytes | None:
    """The picture as PNG bytes (written to ``path`` when given); None without matplotlib or without a point."""
    plt = pyplot()
    ps = panels(data)
    if plt is None or not ps:
        return None
    cols = len({(p.role, p.scenario) for p in ps})
    rows = -(-len(ps) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.2 * cols, 4.4 * rows), squeeze=False)
    for ax in axes.flat[len(ps):]:
        ax.set_visible(False)
    for ax, p in zip(axes.flat, ps):
        _panel(ax, p)
    rep = read_report(data)
    title = f"Accuracy (% of {rep.reference}) against the reported figure, one point per engine x precision"
    if cols < 2:  # one panel's width holds about 60 characters at this size: the title on two lines
        title = title.replace(" against", "\nagainst")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout(rect=(0, 0, 1, 0.96 if cols > 1 else 0.93))
    for ax, p in zip(axes.flat, ps):  # once the axes are where they stay
        _labels(ax, p)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    png = buf.getvalue()
    if path is not None:
        Path(path).write_bytes(png)
    return png


OFFSETS = tuple((dx, dy) for dy in (6, -12, 16, -22, 26, -32) for dx in (6, -6))  # label positions, in points


def _panel(ax: Any, p: Panel) -> None:
    front = sorted((q for q in p.points if q.front), key=lambda q: q.x)
    if len(front) > 1:
        ax.plot([q.x for q in front], [q.accuracy for q in front], color="tab:blue", linewidth=1.2, zorder=1)
    said: set[str] = set()
    for q in sorted(p.points, key=lambda q: q.x):
        kind = ("Pareto front" if q.front else "dominated") + ("" if q.estimate else
                                                               ", raw percentile (no early-stopping estimate)")
        ax.scatter([q.x], [q.accuracy], s=50 if q.front else 36, zorder=2, marker="o" if q.estimate else "^",
                   facecolors="tab:blue" if q.front else "white",
                   edgecolors="tab:blue" if q.front else "tab:gray", linewidths=1.3,
                   label=None if kind in said else kind)
        said.add(kind)
    accs = [q.accuracy for q in p.points]
    lo, hi = min(accs + [98.6]), max(accs + [100.2])
    pad = 0.08 * (hi - lo)
    ax.set_ylim(lo - pad, hi + pad)
    for t, style in zip(TIERS, ("--", ":")):
        ax.axhline(t, color="tab:red", linestyle=style, linewidth=1, zorder=0, label=f"{t:g} % tier")
    xs = [q.x for q in p.points]
    span = max(xs) - min(xs)
    margin = 0.3 * (span or max(abs(max(xs)), 1e-9))
    ax.set_xlim(min(xs) - 0.12 * margin, max(xs) + margin)  # room on the right for the labels
    ax.set_xlabel(p.axis, fontsize=8.5)
    ax.set_ylabel("accuracy, % of fp32", fontsize=8.5)
    ax.set_title(f"{ROLE_TITLES.get(p.role, p.role)}, {p.scenario}", fontsize=9.5)
    ax.tick_params(labelsize=7.5)
    ax.grid(alpha=0.25)
    handles, names = ax.get_legend_handles_labels()
    order = sorted(range(len(names)), key=lambda i: (not names[i].startswith("Pareto"), "tier" in names[i]))
    ax.legend([handles[i] for i in order], [names[i] for i in order], loc="lower left", fontsize=7, framealpha=0.85)


def _labels(ax: Any, p: Panel) -> None:
    """Each point's engine beside it, at the first of :data:`OFFSETS` where it stays inside the axes and overlaps
    neither the legend nor a label placed before."""
    renderer = ax.figure.canvas.get_renderer()
    frame = ax.get_window_extent(renderer)
    legend = ax.get_legend()
    placed: list[Any] = [legend.get_window_extent(renderer)] if legend is not None else []
    for q in sorted(p.points, key=lambda q: (q.x, -q.accuracy)):
        for dx, dy in OFFSETS:
            t = ax.annotate(_short(q.engine), (q.x, q.accuracy), textcoords="offset points", xytext=(dx, dy),
                            ha="left" if dx > 0 else "right", fontsize=7.5,
                            color="black" if q.front else "dimgray")
            box = t.get_window_extent(renderer)
            inside = frame.x0 <= box.x0 and box.x1 <= frame.x1 and frame.y0 <= box.y0 and box.y1 <= frame.y1
            if inside and not any(box.overlaps(b) for b in placed):
                placed.append(box)
                break
            t.remove()
        else:  # every position taken: the first one, overlapping
            t = ax.annotate(_short(q.engine), (q.x, q.accuracy), textcoords="offset points", xytext=OFFSETS[0],
                            fontsize=7.5, color="black" if q.front else "dimgray")
            placed.append(t.get_window_extent(renderer))


# -- bench.html ---------------------------------------------------------------------------------------------------

def _inline(text: str) -> str:
    """Escaped text with Markdown's `code` spans and **bold** kept."""
    out = html.escape(str(text))
    out = re.sub(r"`([^`]+)`", r"<code>\1</code>", out)
    return re.sub(r"\*\*([^*]+)\*\*", r"<b>\1</b>", out)


def _table(header: list[str], rows: list[list[str]]) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def scenario_html(data: Scenarios, png: bytes | None = None) -> str:
    """bench.html: the picture (embedded) and the tables of bench.md, one self-contained page."""
    rep: ScenarioReport = read_report(data)
    parts = ["<!doctype html><html><head><meta charset='utf-8'><title>breaknli-fast bench: LoadGen scenarios</title>",
             "<style>body{font-family:sans-serif;margin:1.5em;max-width:1400px}table{border-collapse:collapse;"
             "margin:.5em 0 1.5em}td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px;text-align:right}"
             "td:first-child,th:first-child{text-align:left}img{max-width:100%}code{background:#f3f3f3}</style>"
             "</head><body>", "<h1>breaknli-fast bench: LoadGen scenarios</h1>"]
    if rep.command:
        parts.append(f"<pre>{html.escape(rep.command)}</pre>")
    line = energy_line(rep)
    if line:
        parts.append(f"<p>{_inline(line)}</p>")
    if png:
        parts.append("<h2>The trade-off: accuracy against latency (and energy where measured)</h2><p>One point per "
                     "engine x precision; filled and "
                     "joined: the Pareto front; dashed and dotted: the 99 % and 99.9 % tiers.</p>"
                     f"<img alt='trade-off' src='data:image/png;base64,{base64.b64encode(png).decode()}'>")
    parts.append("<h2>Scenarios</h2>")
    for title, header, rows in scenario_table_cells(rep):
        parts.append(f"<h3>{html.escape(title)}</h3>" + _table(header, rows))
    tests, crow = compliance_rows(rep)
    if crow:
        parts.append("<h3>MLPerf compliance tests</h3><p>" + _inline(compliance_legend(rep)) + "</p>"
                     + _table(["engine", "role", "scenario"] + tests, [i + c for i, c in crow]))
    parts.append("<h2>Verdict</h2><p>" + ("PASS" if rep.passed else "FAIL") + "</p>")
    if rep.failures:
        parts.append("<ul>" + "".join(f"<li>{_inline(f)}</li>" for f in rep.failures) + "</ul>")
    if rep.notes:
        parts.append("<ul>" + "".join(f"<li>note: {_inline(n)}</li>" for n in rep.notes) + "</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
