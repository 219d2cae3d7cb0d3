"""An argparse parser whose help and usage errors are drawn like those of the Typer commands.

``breaknli-fast mini train`` passes its arguments to :func:`breaknli_fast.mini.train.main`, which parses them with
argparse (the training options also serve ``python -m breaknli_fast.mini.train``). :class:`RichArgumentParser`
prints ``--help`` as Typer does: a ``Usage:`` line, the description, then one rich panel per argument group
listing every option with its value, help, default and whether it is required; a usage error is the usage line,
a ``Try '... --help'`` hint and an ``Error`` panel on stderr, exit code 2.
"""

from __future__ import annotations

import argparse
import sys
from typing import IO, NoReturn

from rich import box
from rich.console import Console, Group
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

# the styles of Typer's rich help (typer.rich_utils)
STYLE_OPTION = "bold cyan"
STYLE_SWITCH = "bold green"
STYLE_METAVAR = "bold yellow"
STYLE_DEFAULT = "dim"
STYLE_REQUIRED = "red"
STYLE_REQUIRED_LONG = "dim red"
STYLE_USAGE = "yellow"
STYLE_PANEL_BORDER = "dim"
STYLE_ERROR_BORDER = "red"
STYLE_HINT = "dim"

_TYPE_NAMES = {int: "<int>", float: "<float>", str: "<str>"}


def _value(action: argparse.Action) -> str:
    """What follows the option on the command line: its metavar, its choices, or its type."""
    if action.nargs == 0:
        return ""
    if action.metavar is not None:
        return str(action.metavar)
    if action.choices is not None:
        return "[" + "|".join(str(c) for c in action.choices) + "]"
    return _TYPE_NAMES.get(action.type or str, "<value>")


def _help(action: argparse.Action) -> Text:
    text = Text(action.help or "")
    default = action.default
    if action.nargs != 0 and default not in (None, argparse.SUPPRESS, "") and not action.required:
        text.append(f" [default: {default}]" if text else f"[default: {default}]", style=STYLE_DEFAULT)
    if action.required:
        text.append(" [required]" if text else "[required]", style=STYLE_REQUIRED_LONG)
    return text


class RichArgumentParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` with Typer-style help and usage errors (parsing unchanged)."""

    def usage_line(self) -> Text:
        return Text.assemble(("Usage: ", STYLE_USAGE), f"{self.prog} [OPTIONS]", style="bold")

    def _panels(self) -> list[Panel]:
        panels = []
        for group in self._action_groups:
            actions = [a for a in group._group_actions if a.help != argparse.SUPPRESS]
            if not actions:
                continue
            grid = Table(box=None, show_header=False, show_edge=False, pad_edge=False, padding=(0, 1), expand=True)
            grid.add_column(width=1, no_wrap=True)
            grid.add_column(no_wrap=True)
            grid.add_column(no_wrap=True)
            grid.add_column(no_wrap=True)
            grid.add_column(ratio=1)
            for a in actions:
                long = ",".join(o for o in a.option_strings if o.startswith("--"))
                short = ",".join(o for o in a.option_strings if not o.startswith("--"))
                grid.add_row(Text("*", style=STYLE_REQUIRED) if a.required else "", Text(long, style=STYLE_OPTION),
                             Text(short, style=STYLE_SWITCH), Text(_value(a), style=STYLE_METAVAR), _help(a))
            title = group.title if group.title not in ("options", "optional arguments", None) else "Options"
            panels.append(Panel(grid, title=title, title_align="left", border_style=STYLE_PANEL_BORDER,
                                box=box.ROUNDED))
        return panels

    def print_help(self, file: IO[str] | None = None) -> None:
        parts = [Padding(self.usage_line(), 1)]
        if self.description:
            parts.append(Padding(Text(self.description), (0, 1, 1, 1)))
        parts += self._panels()
        if self.epilog:
            parts.append(Padding(Text(self.epilog, style=STYLE_HINT), 1))
        Console(file=file or sys.stdout, highlight=False).print(Group(*parts))

    def print_usage(self, file: IO[str] | None = None) -> None:
        Console(file=file or sys.stdout, highlight=False).print(self.usage_line())

    def error(self, message: str) -> NoReturn:
        console = Console(file=sys.stderr, highlight=False)
        console.print(self.usage_line())
        console.print(Text(f"Try '{self.prog} --help' for help.", style=STYLE_HINT))
        console.print(Panel(Text(message), title="Error", title_align="left", border_style=STYLE_ERROR_BORDER,
                            box=box.ROUNDED))
        self.exit(2)
