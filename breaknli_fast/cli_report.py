"""``breaknli-fast report RUN_DIR...`` and what ``run -c A,B -d X,Y`` prints: the comparison table of run
directories (:mod:`breaknli_fast.study.compare`), its files and the HTML report (:mod:`breaknli_fast.study.html`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from breaknli_fast.console import RichHook, console, literal, make_progress, out_path, user_errors


SHORT_ROWS = {"Entailment": "E", "Neutral": "N", "Contradiction": "C"}  # ŷ on an 80-column terminal


def comparison_table(comp: Any) -> Table:
    """The comparison on the terminal: rates and n per cell (the files hold the intervals too)."""
    from breaknli_fast.study.table_files import accuracy_text, cell_text

    t = Table(title=f"{comp.probe}: {' / '.join(comp.measures)} % (n); intervals in table.md / report.html",
              title_justify="left")
    t.add_column("dataset", min_width=7, overflow="fold")
    t.add_column(comp.header[0] or "", min_width=13, overflow="fold")
    t.add_column(comp.header[1].split(" ")[0], min_width=5, overflow="fold")
    for m in comp.models:
        acc = accuracy_text(comp, m, sep="\n")
        t.add_column(literal(m) + (f"\n[dim]{literal(acc)}[/]" if acc else ""), justify="right", no_wrap=True)
    prev: tuple[str, str] | None = None
    for i, (ds, block, label) in enumerate(comp.rows):
        cells = []
        for m in comp.models:
            rates, _, n = cell_text(comp.cells.get((ds, block, label, m)))
            cells.append(rates if rates == "–" else f"{rates} ({n})")
        last = i + 1 == len(comp.rows) or comp.rows[i + 1][:2] != (ds, block)
        t.add_row(literal(ds) if prev is None or prev[0] != ds else "",
                  literal(block.split(" ")[0].lower()) if prev != (ds, block) else "", literal(SHORT_ROWS.get(label, label)), *cells,
                  style="bold" if label == "Overall" else None, end_section=last)
        prev = (ds, block)
    return t


def print_files(files: list[Path], where: Path) -> None:
    console.print(f"written to [bold]{literal(where)}[/]: {', '.join(literal(p.name) for p in files)}")


def run_grid_command(probe: str, config: Any, classifiers: str, datasets: str, limits: dict[str, Any],
                     **kwargs: Any) -> None:
    """``run`` with several classifiers or datasets: the study, its table on the terminal, its files."""
    from breaknli_fast.study.grid import run_grid, split_names

    with make_progress() as progress:
        result = run_grid(probe, config, classifiers=split_names(classifiers),
                          datasets=split_names(datasets, "--dataset"), limit=limits, hook=RichHook(progress),
                          **kwargs)
    if result.comparison is not None and result.comparison.rows:
        console.print(comparison_table(result.comparison))
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
    """The comparison table of run directories in BreakNLI's layout (rows dataset x mode x ŷ and Overall, one
    column per model with its accuracy, cells inequality / relaxed with 95 % intervals) as Markdown, CSV and LaTeX,
    with a plot; runs whose settings differ (other than the model and the dataset) are refused."""
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
        console.print(comparison_table(comp))
    else:
        console.print(f"the {literal(comp.probe)} probe has no comparison table (its runs' report.md hold its results)")
    print_files(files, out)
