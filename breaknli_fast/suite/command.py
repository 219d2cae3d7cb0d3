"""``breaknli-fast suite run | list | render | measure``: the command line's entry to the benchmark suite. Typer
hands every word after ``suite`` to :func:`breaknli_fast.suite.main.main` (argparse there: the measurements'
options are built from their configs), which ``python -m breaknli_fast.suite`` runs too."""

from __future__ import annotations

import typer


def suite(ctx: typer.Context) -> None:
    """The benchmark suite: run | list | render | measure (`breaknli-fast suite --help`; docs/benchmarks.md)."""
    from breaknli_fast.suite.main import main

    raise typer.Exit(main(list(ctx.args)))


SETTINGS = {"allow_extra_args": True, "ignore_unknown_options": True, "help_option_names": []}
