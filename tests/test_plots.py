"""The report's bar plots, inspected as matplotlib figures (Agg): a rate of 0 % and a cell that was not evaluated
are drawn apart and the legend says which is which; titles and captions lie inside the figure; the legend names
only the series a panel draws."""

from __future__ import annotations

import pytest

from breaknli_fast.plotting import NA_LABEL, NA_TEXT, ZERO_LABEL, pyplot
from breaknli_fast.study.compare import Comparison

plt = pyplot()
pytestmark = pytest.mark.skipif(plt is None, reason="matplotlib is not installed (the bench extra)")


def _cell(rate, n=40):
    return {"n": n, "rate": rate, "ci": None if rate is None else [max(0.0, rate - 8), min(100.0, rate + 8)]}


def _inside(fig) -> None:
    """Everything drawn (each panel with its title, tick labels and legend; the figure's legend, title and
    captions) lies inside the figure."""
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    w, h = fig.bbox.width, fig.bbox.height
    parts = [(f"panel {ax.get_title()!r}", ax.get_tightbbox(r)) for ax in fig.axes if ax.get_visible()]
    parts += [("legend", leg.get_window_extent(r)) for leg in fig.legends]
    texts = list(fig.texts) + ([fig._suptitle] if fig._suptitle is not None else [])
    parts += [(t.get_text(), t.get_window_extent(r)) for t in texts if t.get_text()]
    assert parts
    for what, bb in parts:
        assert bb.x0 >= -0.5 and bb.y0 >= -0.5 and bb.x1 <= w + 0.5 and bb.y1 <= h + 0.5, (what, bb, (w, h))


def _legend_labels(legend) -> list[str]:
    return [t.get_text() for t in legend.get_texts()]


def _at(ax, text: str) -> list[float]:
    """The x positions of the texts ``text`` drawn in ``ax``."""
    return sorted(t.get_position()[0] for t in ax.texts if t.get_text() == text)


def test_breakdown_marks_zero_and_not_evaluated_apart_and_its_title_fits():
    from breaknli_fast.study.breakdown import figure

    keys = ["accuracy (p, h)", "contradictive inequality", "contradictive relaxed", "entailed inequality"]

    def group(name, value, rates):
        return {"group": name, "value": value, "examples": 40, "counts": {}, "small": [],
                "rates": {k: _cell(r, 40 if name != "quantifier_logic" else 7) for k, r in zip(keys, rates)}}

    # three 0/1 columns: "contradictive ..." is evaluated in no group (no contradictive example): no series;
    # entailed inequality is 0 % in one group and not evaluated in another
    bd = {c: {"kind": "category", "missing": 0, "non_binary": 0,
              "groups": [group(c, "1", rates), group(f"not {c}", "0", [50, None, None, 40])]}
          for c, rates in (("negation_logic", [60, None, None, 0.0]), ("quantifier_logic", [70, None, None, None]),
                           ("lexical_linguistic_and_a_long_category_name", [0.0, None, None, 25]))}
    fig = figure(bd)
    try:
        (ax,) = fig.axes
        labels = _legend_labels(ax.get_legend())
        assert labels[:2] == ["accuracy (p, h)", "entailed inequality"]  # only the rates the panel has a value of
        assert "contradictive inequality" not in labels and "contradictive relaxed" not in labels
        assert {NA_LABEL, ZERO_LABEL, "hatched: fewer than 30 examples"} <= set(labels)
        # groups in order: negation (0: x 0), quantifier (1), lexical (2); two series, width 0.4, at x -0.2 / +0.2
        assert _at(ax, NA_TEXT) == [pytest.approx(1.2)]  # entailed inequality on quantifier_logic
        assert _at(ax, "0") == [pytest.approx(0.2), pytest.approx(1.8)]
        # the not-evaluated cell has no filled bar and no whisker; the zeros have their whiskers
        filled = [p for p in ax.patches if p.get_fill()]
        assert not any(abs(p.get_x() + p.get_width() / 2 - 1.2) < 1e-6 for p in filled)
        assert "0/1 columns" in ax.get_title()
        _inside(fig)
    finally:
        plt.close(fig)


def test_breakdown_of_a_categorical_column_keeps_every_series_it_draws():
    from breaknli_fast.study.breakdown import figure

    bd = {"genre": {"kind": "categorical", "missing": 0, "non_binary": 0, "groups": [
        {"group": f"genre={g}", "value": g, "examples": 50, "counts": {}, "small": [],
         "rates": {"A": _cell(r), "P_f": _cell(None)}} for g, r in (("fiction", 10.0), ("travel", None))]}}
    fig = figure(bd)
    try:
        labels = _legend_labels(fig.axes[0].get_legend())
        assert labels == ["A", NA_LABEL] and _at(fig.axes[0], NA_TEXT) == [1.0]
        _inside(fig)
    finally:
        plt.close(fig)


def test_the_table_plot_marks_zero_and_not_evaluated_apart():
    from breaknli_fast.study.table_files import figure

    models = ["model-a", "model-b", "model-c"]
    rows = [("sample", "Entailed generation", lab) for lab in ("Entailment", "Neutral", "Overall")]
    rates = {("Entailment", "model-a"): (0.0, 0.0), ("Entailment", "model-b"): (None, None),
             ("Neutral", "model-c"): (0.0, 12.0)}
    cells = {(ds, b, lab, m): [_cell(r) for r in rates.get((lab, m), (30.0, 50.0))]
             for ds, b, lab in rows for m in models}
    comp = Comparison(probe="breaknli", measures=("inequality", "relaxed"), header=("generation", "ŷ = M(p, h)"),
                      note="", models=models, datasets=["sample"], rows=rows, cells=cells,
                      accuracy={("sample", m): _cell(80.0) for m in models}, runs=[], settings=[])
    fig = figure(comp)
    try:
        ax = fig.axes[0]
        width = 0.8 / 3
        x = [-0.4 + width * (j + 0.5) for j in range(3)]  # the models' bars at row 0
        assert _at(ax, NA_TEXT) == [pytest.approx(x[1])]  # model-b, Entailment: not evaluated
        assert _at(ax, "0") == [pytest.approx(x[0]), pytest.approx(1 + x[2])]  # zeros: a's E, c's N (dark)
        labels = _legend_labels(fig.legends[0])
        assert labels[:3] == models and NA_LABEL in labels and ZERO_LABEL in labels
        _inside(fig)
    finally:
        plt.close(fig)


def test_bench_png_draws_each_engine_s_interval_not_only_its_point(tmp_path, monkeypatch):
    """An engine with Δ 0.5 pp whose 95 % interval reaches ±32 pp (inconclusive) was drawn at 0.5, beside the
    engines shown to match: the plot now draws the interval's reach as a bar."""
    from breaknli_fast.bench import report as bench_report
    from breaknli_fast.bench.types import BenchReport, from_json

    def engine(label, diff, ci, ref=False):
        metric = {"n": 40, "diff": diff, "ci": ci, "method": "tango", "verdict": "inconclusive"}
        return {"label": label, "status": "ok", "reference": ref, "speed": {"speedup": {"end_to_end": 2.0}},
                "parity": {"headline": {"metrics": {"accuracy": metric}}}}

    data = from_json(BenchReport, {"probe": "accuracy", "reference": "torch:fp32", "tolerance_pp": 1.0,
                                   "engines": [engine("torch:fp32", 0.0, [0.0, 0.0], True),
                                               engine("wide", 0.5, [-31.5, 32.0])]})
    assert bench_report.max_abs_interval_reach(data.engines[1]) == 32.0
    figs = []
    monkeypatch.setattr(plt, "close", lambda fig: figs.append(fig))
    assert bench_report.plot_speed_vs_breakage(data, tmp_path / "bench.png").exists()
    ax = figs[0].axes[0]
    bars = [c for c in ax.containers if c.__class__.__name__ == "ErrorbarContainer"]
    assert len(bars) == 1  # the wide engine's; the reference's interval is 0
    segments = bars[0].lines[2][0].get_segments()
    assert [round(float(x), 6) for x in segments[0][:, 0]] == [0.5, 32.0]
    assert ax.get_xlim()[1] >= 32.0


def _scenario_bench(energy: bool = True) -> dict:
    from breaknli_fast.bench.loadgen.metrics import definitions, values

    def row(engine, scenario, acc, es=None, p90=None, sps=None, mj=None):
        r = {"engine": engine, "role": "classifier", "scenario": scenario, "reasons": [], "warnings": [],
             "metrics": values(result="VALID", early_stop_ms=es, p90_ms=p90, samples_per_s=sps, of_reference_pct=acc,
                               energy_mj_per_query=mj if energy else None)}
        if energy and mj is not None:
            r["energy"] = {"joules": mj * 100 / 1e3, "seconds": 2.0, "queries": 100, "samples": 100}
        return r

    rows = [row("torch:fp32", "single-stream", 100.0, es=10.0, p90=9.5, mj=30.0),
            row("ort:fp32", "single-stream", 100.0, es=4.0, p90=3.9, mj=12.0),
            row("ort:int8", "single-stream", 99.5, es=2.0, p90=1.9, mj=9.0),
            row("ort:int8:quantization=dynamic-batch", "single-stream", 98.0, es=2.5, p90=2.4, mj=8.0),
            row("openvino:bf16", "single-stream", 99.4, es="too few queries (20 of 64)", p90=1.5, mj=20.0),
            row("torch:fp32", "offline", 100.0, sps=500.0), row("ort:int8", "offline", 99.5, sps=1500.0)]
    return {"schema": "breaknli-fast-bench/3", "kind": "scenarios", "reference": "torch:fp32",
            "scenario_metrics": definitions(), "scenarios": rows, "engines": [], "passed": True, "failures": []}


def test_the_scenario_bench_draws_accuracy_against_the_reported_figure_with_the_pareto_front(tmp_path):
    """One point per engine x precision at its accuracy against the early-stopping latency (the raw percentile,
    marked, where the run was too short for the estimate), samples/s in Offline, energy per query where measured;
    the Pareto front is the engines that no other beats on both axes; bench.png and bench.html hold it."""
    from breaknli_fast.bench.loadgen.plot import draw, panels, scenario_html
    from breaknli_fast.bench.result import BenchResult

    ps = {(p.role, p.scenario, p.axis.split(" ")[0]): p for p in panels(_scenario_bench())}
    ss = ps[("classifier", "single-stream", "p90")]
    pts = {q.engine: q for q in ss.points}
    assert pts["ort:int8"].x == 2.0 and pts["torch:fp32"].x == 10.0  # the estimate, not the raw p90
    assert pts["openvino:bf16"].x == 1.5 and not pts["openvino:bf16"].estimate  # raw p90, marked
    assert {e for e, q in pts.items() if q.front} == {"openvino:bf16", "ort:int8", "ort:fp32"}
    assert not pts["ort:int8:quantization=dynamic-batch"].front  # ort:int8 is faster and more accurate
    off = {q.engine: q for q in ps[("classifier", "offline", "samples/s")].points}
    assert off["ort:int8"].front and off["torch:fp32"].front  # faster, or more accurate: both on the front
    energy = {q.engine: q for q in ps[("classifier", "single-stream", "energy")].points}
    assert energy["ort:int8:quantization=dynamic-batch"].x == 8.0 and energy["ort:int8:quantization=dynamic-batch"].front
    assert not energy["openvino:bf16"].front  # ort:int8 spends less and is more accurate
    assert ("classifier", "single-stream", "energy") not in {
        (p.role, p.scenario, p.axis.split(" ")[0]) for p in panels(_scenario_bench(energy=False))}
    png = draw(_scenario_bench(), tmp_path / "bench.png")
    assert png is not None and (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = scenario_html(_scenario_bench(), png)
    assert "data:image/png;base64," in html and "<td>too few queries (20 of 64)</td>" in html
    # random weights: no accuracy, no picture; the saved bench still has its HTML report
    blind = _scenario_bench()
    for r in blind["scenarios"]:
        r["metrics"]["of_reference_pct"] = None
    assert draw(blind) is None
    paths = BenchResult(blind).save(tmp_path / "blind")
    assert "plot" not in paths and paths["html"].exists() and not (tmp_path / "blind" / "bench.png").exists()
    paths = BenchResult(_scenario_bench()).save(tmp_path / "saved")
    assert paths["plot"].exists() and paths["html"].exists()
