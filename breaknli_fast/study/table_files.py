"""The files of a comparison table (:mod:`breaknli_fast.study.compare`): Markdown, CSV (one line per cell, numbers
in their own columns), LaTeX (booktabs) and a plot of the rates with their interval bars. They depend on the run
directories' files alone, so the same directories give the same bytes."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

from breaknli_fast.plotting import marker_handles, pyplot, rate_bars, wrap_to_width
from breaknli_fast.study.compare import Comparison


def _num(x: Any, nd: int = 2) -> str:
    return "–" if x is None else f"{float(x):.{nd}f}"


def cell_text(cells: list[dict[str, Any]] | None) -> tuple[str, str, int]:
    """(rates, their intervals, n) of a table cell: ``"29.01 / 49.61"``, ``"[24.1, 34.4] / [44.0, 55.2]"``."""
    if not cells or all(c is None or c.get("rate") is None for c in cells):
        return "–", "", max((int(c.get("n") or 0) for c in cells or [] if c), default=0)
    rates = " / ".join(_num(c.get("rate")) if c else "–" for c in cells)
    cis = " / ".join(f"[{_num(c['ci'][0], 1)}, {_num(c['ci'][1], 1)}]" if c and c.get("ci") else "–" for c in cells)
    return rates, cis, max(int(c.get("n") or 0) for c in cells if c)


def accuracy_text(comp: Comparison, model: str, sep: str = ", ") -> str:
    """The header's accuracy of a model: ``76.00 %`` for one dataset, ``sample 76.00 %, taxinli 40.10 %`` else."""
    parts = []
    for ds in comp.datasets:
        a = comp.accuracy.get((ds, model))
        if a is None or a.get("rate") is None:
            continue
        parts.append((ds, f"{a['rate']:.2f} %"))
    if not parts:
        return ""
    if len(comp.datasets) == 1:
        return parts[0][1]
    return sep.join(f"{ds} {v}" for ds, v in parts)


def _blocks(comp: Comparison) -> list[tuple[str, bool, str, bool, str]]:
    """Rows with whether each starts its dataset and its block: (dataset, new dataset, block, new block, row)."""
    out = []
    prev: tuple[str, str] | None = None
    for ds, block, label in comp.rows:
        out.append((ds, prev is None or prev[0] != ds, block, prev != (ds, block), label))
        prev = (ds, block)
    return out


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def to_markdown(comp: Comparison) -> str:
    head = ["Dataset", comp.header[0] or "", comp.header[1]]
    for m in comp.models:
        acc = accuracy_text(comp, m)
        head.append(_md_escape(m) + (f" ({acc})" if acc else ""))
    what = " / ".join(comp.measures)
    lines = [f"# {comp.probe}: {len(comp.models)} model{'s' * (len(comp.models) != 1)} × "
             f"{len(comp.datasets)} dataset{'s' * (len(comp.datasets) != 1)}", ""]
    lines += [f"- {_md_escape(s)}" for s in comp.settings]
    lines += ["", f"Cells: {what} % (n), and below them the 95 % intervals. Header: accuracy of M on (p, h)"
              + (" per dataset." if len(comp.datasets) > 1 else "."), ""]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "---|" * len(head))
    for ds, new_ds, block, new_block, label in _blocks(comp):
        row = [_md_escape(ds) if new_ds else "", _md_escape(block) if new_block else "",
               f"**{_md_escape(label)}**" if label == "Overall" else _md_escape(label)]
        for m in comp.models:
            rates, cis, n = cell_text(comp.cells.get((ds, block, label, m)))
            row.append(rates if rates == "–" else f"{rates} (n={n})<br>{cis}")
        lines.append("| " + " | ".join(row) + " |")
    if comp.note:
        lines += ["", comp.note]
    lines += ["", "Runs: " + "; ".join(f"{r.model} on {r.dataset}: `{r.path.name}`" for r in comp.runs), ""]
    return "\n".join(lines)


def to_csv(comp: Comparison) -> str:
    """One line per (row, model): the table's cells with their numbers in columns of their own."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    head = ["dataset", comp.header[0] or "block", comp.header[1], "model", "accuracy", "accuracy_n", "n"]
    for m in comp.measures:
        head += [m, f"{m}_ci_low", f"{m}_ci_high"]
    w.writerow(head)
    for ds, block, label in comp.rows:
        for model in comp.models:
            cells = comp.cells.get((ds, block, label, model))
            if cells is None:
                continue
            acc = comp.accuracy.get((ds, model)) or {}
            row = [ds, block, label, model, _num(acc.get("rate"), 4) if acc.get("rate") is not None else "",
                   acc.get("n", ""), max((int(c.get("n") or 0) for c in cells if c), default=0)]
            for c in cells:
                ci = (c or {}).get("ci") or [None, None]
                row += ["" if not c or c.get("rate") is None else _num(c["rate"], 4),
                        "" if ci[0] is None else _num(ci[0], 4), "" if ci[1] is None else _num(ci[1], 4)]
            w.writerow(row)
    return buf.getvalue()


LATEX_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
                 "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}


def tex(text: Any) -> str:
    s = "".join(LATEX_SPECIAL.get(ch, ch) for ch in str(text))
    return s.replace("ŷ", r"$\hat{y}$").replace("×", r"$\times$").replace("–", "--")


def to_latex(comp: Comparison) -> str:
    """A booktabs tabular (``\\usepackage{booktabs}``); each cell the rates over their intervals."""
    lines = [f"% breaknli-fast report: {comp.probe}, {len(comp.models)} models x {len(comp.datasets)} datasets; "
             r"needs \usepackage{booktabs}",
             r"\begin{tabular}{lll" + "c" * len(comp.models) + "}", r"\toprule"]
    head = ["Dataset", tex(comp.header[0]), tex(comp.header[1])]
    for m in comp.models:
        accs = [tex(a) for a in accuracy_text(comp, m, sep="\n").split("\n") if a]
        head.append(r"\shortstack{" + r"\\".join([tex(m), *accs]) + "}" if accs else tex(m))
    lines.append(" & ".join(head) + r" \\")
    for ds, new_ds, block, new_block, label in _blocks(comp):
        if new_ds:
            lines.append(r"\midrule")
        elif new_block:
            lines.append(r"\cmidrule(l){2-" + str(3 + len(comp.models)) + "}")
        row = [tex(ds) if new_ds else "", tex(block) if new_block else "", tex(label)]
        for m in comp.models:
            rates, cis, n = cell_text(comp.cells.get((ds, block, label, m)))
            row.append(tex(rates) if rates == "–" else
                       r"\shortstack{" + tex(rates) + r"\\{\scriptsize " + tex(cis) + f" (n={n})" + "}}")
        lines.append(" & ".join(row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", ""]
    return "\n".join(lines)


def figure(comp: Comparison) -> Any:
    """The table as bars with 95 % interval bars: one panel per dataset × block, one bar per model and row; with
    two measures (BreakNLI) the first (inequality) is drawn dark over the second (relaxed, light), since every
    inequality is a relaxed inequality. A rate of 0 % and a cell that was not evaluated are marked apart
    (:func:`~breaknli_fast.plotting.rate_bars`). A matplotlib figure, or None without matplotlib or rows."""
    plt = pyplot()
    if plt is None or not comp.rows:
        return None
    panels = list(dict.fromkeys((ds, block) for ds, block, _ in comp.rows))
    ncol = min(2, len(panels))
    nrow = (len(panels) + ncol - 1) // ncol
    fig, axes = plt.subplots(nrow, ncol, figsize=(6.2 * ncol, 3.4 * nrow), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / max(1, len(comp.models))
    na = zeros = False
    for ax, (ds, block) in zip(axes.flat, panels):
        labels = [lab for d, b, lab in comp.rows if (d, b) == (ds, block)]
        for j, m in enumerate(comp.models):
            xs = [i - 0.4 + width * (j + 0.5) for i in range(len(labels))]
            for k in reversed(range(len(comp.measures))):  # the light (later) measure first, under the dark one
                cells = []
                for lab in labels:
                    row = comp.cells.get((ds, block, lab, m)) or []
                    cells.append(row[k] if k < len(row) else None)
                if k > 0:  # a cell not evaluated is marked once, by the first measure
                    keep = [(x, c) for x, c in zip(xs, cells) if c and c.get("rate") is not None]
                    xs_k, cells_k = [x for x, _ in keep], [c for _, c in keep]
                else:
                    xs_k, cells_k = xs, cells
                # a later measure is 0 only where the first is (an inequality is a relaxed inequality): the first
                # measure marks the zeros
                drawn = rate_bars(ax, xs_k, cells_k, width * 0.9, colors[j % len(colors)],
                                  alpha=1.0 if k == 0 else 0.35, ecolor="black" if k == 0 else "grey", mark_zero=k == 0)
                na, zeros = na or drawn["na"] > 0, zeros or drawn["zeros"] > 0
        ax.set_xticks(range(len(labels)))
        ax.set_xticklabels(labels, fontsize=8)
        ax.set_ylim(0, 105)
        ax.set_title(f"{ds}: {block}", fontsize=10)
        ax.set_ylabel("%", fontsize=8)
        ax.grid(axis="y", alpha=0.3)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    from matplotlib.patches import Patch

    handles = [Patch(color=colors[j % len(colors)], label=m) for j, m in enumerate(comp.models)]
    handles += marker_handles(na, zeros)
    what = (f"dark: {comp.measures[0]}, light: {comp.measures[1]}; " if len(comp.measures) > 1 else "") + \
        "bars: 95 % intervals"
    fig.legend(handles=handles, loc="lower center", ncol=min(len(handles), 4), fontsize=8, frameon=False,
               bbox_to_anchor=(0.5, 0.0))
    fig.suptitle(wrap_to_width(f"{comp.probe}: {what}", 6.2 * ncol, 10), fontsize=10)
    rows_of_legend = (len(handles) + 3) // 4
    fig.tight_layout(rect=(0, 0.035 * rows_of_legend / nrow + 0.03, 1, 0.95))
    return fig


def plot(comp: Comparison, out: Any) -> bool:
    """table.png (:func:`figure`) into ``out``: a path or a binary file. False without matplotlib."""
    fig = figure(comp)
    if fig is None:
        return False
    fig.savefig(out, dpi=100, format="png", metadata={"Software": None})
    pyplot().close(fig)
    return True


def write_table(comp: Comparison, out_dir: Path) -> list[Path]:
    """table.md, table.csv, table.tex and (with matplotlib) table.png in ``out_dir``; nothing for a probe without a
    comparison table (:meth:`~breaknli_fast.probes.base.Probe.comparison`)."""
    from breaknli_fast.study.rundir import write_text_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    written: list[Path] = []
    if not comp.rows:
        return written
    for name, text in (("table.md", to_markdown(comp)), ("table.csv", to_csv(comp)), ("table.tex", to_latex(comp))):
        write_text_atomic(out_dir / name, text)
        written.append(out_dir / name)
    buf = io.BytesIO()
    if plot(comp, buf):
        (out_dir / "table.png").write_bytes(buf.getvalue())
        written.append(out_dir / "table.png")
    return written
