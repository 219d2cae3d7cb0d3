"""``breaknli-fast report RUN_DIR...`` and what ``run -c A,B -d X,Y`` prints: the comparison table of run
directories (:mod:`breaknli_fast.study.compare`), its files and the HTML report (:mod:`breaknli_fast.study.html`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table
from rich.text import Text

from breaknli_fast.console import RichHook, console, literal, make_progress, out_path, user_errors


SHORT_ROWS = {"Entailment": "E", "Neutral": "N", "Contradiction": "C"}  # ŷ on an 80-column terminal
LABEL_MIN = 20  # a row label wraps at spaces, never narrower than this (or its own width)


def comparison_tables(comp: Any, width: int) -> list[Table]:
    """The comparison on the terminal, rates and n per cell (the files hold the intervals too), in as many tables
    as ``width`` needs: each repeats the row labels beside as many model columns as fit, so no cell is cropped.
    One dataset or one block is named in the title instead of a column of its own."""
    from breaknli_fast.console import tables_that_fit
    from breaknli_fast.study.table_files import accuracy_text, cell_text

    blocks = list(dict.fromkeys(block for _, block, _ in comp.rows))
    show_ds, show_block = len(comp.datasets) > 1, len(blocks) > 1
    labels = [SHORT_ROWS.get(label, label) for _, _, label in comp.rows]
    label_min = min(LABEL_MIN, max((len(x) for x in labels), default=1))
    where = ", ".join(([] if show_ds else comp.datasets[:1]) + ([] if show_block else blocks))

    def make(models: Any) -> Table:
        first, last = (comp.models.index(models[0]) + 1, comp.models.index(models[-1]) + 1) if models else (0, 0)
        part = ("" if len(models) == len(comp.models) else f" (model {first} of {len(comp.models)})" if first == last
                else f" (models {first}–{last} of {len(comp.models)})")
        t = Table(title=f"{comp.probe}{' on ' + literal(where) if where else ''}: {' / '.join(comp.measures)} % (n)"
                        f"{part}; intervals in table.md / report.html", title_justify="left")
        if show_ds:
            t.add_column("dataset", no_wrap=True)
        if show_block:
            t.add_column(comp.header[0] or "", no_wrap=True)
        t.add_column(comp.header[1].split(" ")[0], min_width=label_min)
        for m in models:
            acc = accuracy_text(comp, m, sep="\n")
            head = Text(str(m), overflow="fold", no_wrap=False)
            if acc:
                head.append("\n" + acc, style="dim")
            t.add_column(head, justify="right", no_wrap=True)
        prev: tuple[str, str] | None = None
        for i, (ds, block, label) in enumerate(comp.rows):
            cells = []
            for m in models:
                rates, _, n = cell_text(comp.cells.get((ds, block, label, m)))
                cells.append(rates if rates == "–" else f"{rates} ({n})")
            last = i + 1 == len(comp.rows) or comp.rows[i + 1][:2] != (ds, block)
            front = ([literal(ds) if prev is None or prev[0] != ds else ""] if show_ds else []) + \
                ([literal(block.split(" ")[0].lower()) if prev != (ds, block) else ""] if show_block else [])
            t.add_row(*front, literal(labels[i]), *cells, style="bold" if label == "Overall" else None,
                      end_section=last)
            prev = (ds, block)
        return t

    return tables_that_fit(make, comp.models, width)


def print_files(files: list[Path], where: Path) -> None:
    console.print(f"written to [bold]{literal(where)}[/]: {', '.join(literal(p.name) for p in files)}")


def run_grid_command(probe: str, config: Any, classifiers: str, datasets: str, **kwargs: Any) -> None:
    """``run`` with several classifiers or datasets: the study, its table on the terminal, its files."""
    from breaknli_fast.study.grid import run_grid, split_names

    with make_progress() as progress:
        result = run_grid(probe, config, classifiers=split_names(classifiers),
                          datasets=split_names(datasets, "--dataset"), hook=RichHook(progress),
                          **kwargs)
    if result.comparison is not None and result.comparison.rows:
        for table in comparison_tables(result.comparison, console.width):
            console.print(table)
    console.print("cells: " + "; ".join(f"{literal(c.classifier)} on {literal(c.dataset)} ({literal(c.dir)})"
                                        for c, _ in result.cells))
    print_files(result.files, result.study_dir)


def report(
    run_dirs: list[Path] = typer.Argument(..., metavar="RUN_DIR...", show_default=False,
                                          help="Run directories, or study directories (their cells, in order). "
                                               "Columns follow the order of the models' first appearance."),
    out: Path = typer.Option(Path("comparison"), "--out", "-o", parser=out_path, metavar="DIR",
                             help="Folder for table.md, table.csv, table.tex, table.png (and report.html)."),
    html: bool = typer.Option(False, "--html", help="Also write report.html: the table, the plots and an example "
                                                     "browser (one self-contained file)."),
    max_examples: Optional[int] = typer.Option(None, "--max-examples", min=0,
                                               help="Records of each run in the HTML example browser (0 = all; "
                                                    "default: 2000, as run writes it)."),
) -> None:
    """Put run directories side by side: their comparison table as Markdown, CSV, LaTeX and a plot.

    BreakNLI's layout: rows dataset x mode x ŷ and Overall, one column per model with its accuracy, cells
    inequality / relaxed with 95 % intervals. Runs whose settings differ (other than the model and the dataset)
    are refused."""
    from breaknli_fast.study.compare import compare, load_runs
    from breaknli_fast.study.table_files import write_table
    from breaknli_fast.study.html import MAX_EXAMPLES, write_html

    with user_errors():
        runs = load_runs(run_dirs)
        comp = compare(runs)
        try:
            files = write_table(comp, out)
            if html:
                files.append(write_html(run_dirs, out / "report.html",
                                        max_examples=MAX_EXAMPLES if max_examples is None else max_examples))
        except OSError as e:
            from breaknli_fast.console import fail

            fail(f"cannot write to {out}: {e.strerror or e}")
    if comp.rows:
        for table in comparison_tables(comp, console.width):
            console.print(table)
    else:
        console.print(f"the {literal(comp.probe)} probe has no comparison table (its runs' report.md hold its results)")
    print_files(files, out)
