"""Plots are optional: matplotlib on its file-only backend, or None where it is not installed; and the bars of
rates that every bar plot of a report draws the same way (:func:`rate_bars`)."""

from __future__ import annotations

import textwrap
from typing import Any, Sequence

NA_TEXT = "n/a"
NA_LABEL = "n/a: not evaluated (no example)"
ZERO_LABEL = "0: a rate of 0 %"
NA_HEIGHT = 6.0  # height (in %) of the empty box that marks a cell that was not evaluated


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None without matplotlib (the ``bench`` extra): every
    plot of a report is optional."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt


def rate_bars(ax: Any, xs: Sequence[float], cells: Sequence[dict[str, Any] | None], width: float, color: Any,
              alpha: float = 1.0, ecolor: str = "black", hatched: Sequence[bool] | None = None,
              mark_zero: bool = True) -> dict[str, int]:
    """Bars of rate cells (``{"rate", "ci"}`` in percent) at ``xs`` with their 95 % interval whiskers, so that a
    rate of 0 % and a cell that was not evaluated never look alike: a 0 % bar is a thick line at 0 in the series'
    colour with "0" above it; a cell without a rate (None, or no cell) an empty dotted box with "n/a" above it
    and no whisker. ``hatched``: bars drawn hatched and lighter (too few examples); ``mark_zero`` False: a series
    drawn under another that marks its zeros already. Returns how many bars, zeros
    and n/a cells were drawn (for the legend: :func:`marker_handles`)."""
    drawn = {"bars": 0, "zeros": 0, "na": 0}
    hatched = list(hatched) if hatched is not None else [False] * len(xs)
    for x, c, h in zip(xs, cells, hatched):
        rate = None if not c else c.get("rate")
        if rate is None:
            ax.bar([x], [NA_HEIGHT], width, fill=False, edgecolor="grey", linestyle=":", linewidth=1)
            ax.text(x, NA_HEIGHT + 1, NA_TEXT, ha="center", va="bottom", fontsize=7, color="grey", rotation=90)
            drawn["na"] += 1
            continue
        lo, hi = (c.get("ci") or [rate, rate])
        err = [[max(0.0, rate - lo)], [max(0.0, hi - rate)]]  # max: rounding at 0 % and 100 %
        bar = ax.bar([x], [rate], width, color=color, alpha=alpha * (0.5 if h else 1.0))
        if h:
            bar.patches[0].set_hatch("//")
        if rate == 0 and mark_zero:
            ax.plot([x - width / 2, x + width / 2], [0, 0], color=color, linewidth=3, solid_capstyle="butt",
                    alpha=alpha, clip_on=False)
            ax.text(x, 2, "0", ha="center", va="bottom", fontsize=7, color=color,
                    bbox={"boxstyle": "square,pad=0.1", "facecolor": "white", "edgecolor": "none"})
            drawn["zeros"] += 1
        ax.errorbar([x], [rate], yerr=err, fmt="none", ecolor=ecolor, elinewidth=1, capsize=2)
        drawn["bars"] += 1
    return drawn


def marker_handles(na: bool, zeros: bool = False, hatched_label: str | None = None) -> list[Any]:
    """Legend entries that explain :func:`rate_bars`' markers: n/a boxes, 0 % lines, hatched bars (where drawn)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    out: list[Any] = []
    if zeros:
        out.append(Line2D([], [], color="black", linewidth=3, label=ZERO_LABEL))
    if na:
        out.append(Patch(fill=False, edgecolor="grey", linestyle=":", label=NA_LABEL))
    if hatched_label:
        out.append(Patch(facecolor="lightgrey", hatch="//", label=hatched_label))
    return out


def wrap_to_width(text: str, width_in: float, fontsize: float) -> str:
    """``text`` wrapped into lines that fit ``width_in`` inches at ``fontsize`` points (a title or caption that
    would otherwise run off the figure)."""
    chars = max(20, int(width_in * 72 / (0.6 * fontsize)))
    return "\n".join(textwrap.wrap(text, chars)) or text
