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
