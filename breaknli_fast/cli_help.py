"""How every command's help and usage errors look: help in rich panels that fit the terminal, errors on one line.

:func:`install` gives each command and group of a Typer app the classes below (before Typer builds them):

- help (``-h`` or ``--help`` everywhere): the usage line, the description, then one panel per group of options
  (``rich_help_panel`` of each option; the panels in :data:`PANEL_ORDER`). Each option's names, value and help
  are printed literally (``pip install 'x[ray]'`` keeps its ``[ray]``); an option whose names are too long for
  the left column gets a line of its own, so no name is ever cut, and the help wraps in the space left at
  spaces, a word longer than a line after a comma, ``=``, ``/`` or ``|`` (:func:`wrap_words`), so no word is split;
- a group's help lists its commands with the whole first sentence of each one's description;
- a usage error (an unknown option, a value out of range, a missing one) is one line, ``error: <what>``, exit
  code 2, like every other user error of the package (:mod:`breaknli_fast.console`).
"""

from __future__ import annotations

import io
import shutil
import sys
from typing import Any, Sequence

import typer
from rich import box
from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text
from typer.core import TyperCommand, TyperGroup

try:  # typer 0.2x carries its own copy of click; older typer runs on click itself
    from typer._click.exceptions import BadParameter, ClickException, UsageError
except ImportError:  # pragma: no cover - depends on the typer version
    from click.exceptions import BadParameter, ClickException, UsageError

from breaknli_fast.console import print_error

HELP_OPTIONS = ["-h", "--help"]
OPTIONS = "Options"  # the panel of options that name none
# panels in this order; any other panel (a probe's) goes where None stands
PANEL_ORDER: Sequence[str | None] = ("Study", "Data", "Engines compared", "Models and engines", "Generation", None,
                                     "Timing", "Parity checks", "Ray", "Speed and memory", "Output", OPTIONS)
NAME_COLUMN = 30  # the widest left column (option names and value), in characters
MAX_WIDTH = 120  # help is not drawn wider than this, however wide the terminal


def _width() -> int:
    return max(40, min(MAX_WIDTH, shutil.get_terminal_size((80, 24)).columns))


BREAK_AFTER = ",;=/|&"  # where a word longer than a line may be broken


def _break_word(word: str, width: int) -> list[str]:
    """``word`` (longer than ``width``) in pieces of at most ``width`` cells, each ending after the last
    :data:`BREAK_AFTER` character that fits; cut at the width only where there is none."""
    pieces = []
    while cell_len(word) > width:
        fit = 0
        while fit < len(word) and cell_len(word[:fit + 1]) <= width:
            fit += 1
        cut = max((i + 1 for i in range(fit) if word[i] in BREAK_AFTER), default=fit)
        pieces.append(word[:cut])
        word = word[cut:]
    return pieces + ([word] if word else [])


def wrap_words(text: str, width: int) -> list[str]:
    """``text`` in lines of at most ``width`` cells, broken at spaces; a word longer than a line is broken after
    punctuation (:func:`_break_word`), never inside a word that fits on a line of its own."""
    width = max(1, width)
    lines: list[str] = []
    line = ""
    for word in text.split():
        pieces = _break_word(word, width) if cell_len(word) > width else [word]
        for i, piece in enumerate(pieces):
            sep = " " if line and i == 0 else ""
            if line and cell_len(line + sep + piece) > width:
                lines.append(line)
                line = piece
            else:
                line += sep + piece
    return lines + ([line] if line else [])


def _panel_rank(title: str, first_seen: int) -> tuple[int, int]:
    order = list(PANEL_ORDER)
    return (order.index(title) if title in order else order.index(None), first_seen)


def _option_rows(ctx: Any, params: Sequence[Any]) -> dict[str, list[tuple[str, str]]]:
    panels: dict[str, list[tuple[str, str]]] = {}
    for p in params:
        rec = p.get_help_record(ctx)
        if rec is None:
            continue
        panel = getattr(p, "rich_help_panel", None) or OPTIONS
        panels.setdefault(panel, []).append((rec[0], rec[1]))
    return panels


def _panel(title: str, rows: Sequence[tuple[str, str]], width: int) -> Panel:
    inner = width - 4  # borders and padding
    left = min(NAME_COLUMN, max(len(name) for name, _ in rows), inner // 2)
    right = inner - left - 2  # the grid's gap between the columns
    parts: list[RenderableType] = []
    grid_rows: list[tuple[Text, Text]] = []

    def flush() -> None:
        if grid_rows:
            grid = Table.grid(padding=(0, 2))
            grid.add_column(width=left, no_wrap=True)
            grid.add_column(width=right, no_wrap=True)  # wrapped by wrap_words
            for row in grid_rows:
                grid.add_row(*row)
            parts.append(grid)
            grid_rows.clear()

    for name, text in rows:
        styled = Text(name, style="bold cyan")
        help_text = Text("\n".join(wrap_words(text, right)))
        if len(name) > left:  # the names on a line of their own, the help below in the right column
            flush()
            parts.append(styled)
            grid_rows.append((Text(""), help_text))
        else:
            grid_rows.append((styled, help_text))
    flush()
    return Panel(Group(*parts), title=title, title_align="left", border_style="dim", box=box.ROUNDED,
                 padding=(0, 1))


def render_help(ctx: Any, command: Any, commands: Sequence[tuple[str, str]] = ()) -> str:
    """The help of ``command`` (and of a group's ``commands``: (name, one line)) as text for the terminal."""
    width = _width()
    buf = io.StringIO()
    con = Console(file=buf, width=width, highlight=False, force_terminal=sys.stdout.isatty(), soft_wrap=False)
    pieces = " ".join(command.collect_usage_pieces(ctx))
    con.print(Text.assemble(("Usage: ", "yellow"), (f"{ctx.command_path} {pieces}".rstrip(), "bold")))
    if command.help:
        con.print()
        for para in (p.strip() for p in command.help.split("\n\n")):
            if para and para != "\b":
                lines = wrap_words(para.replace("\b", ""), width - 1)
                con.print(Padding(Text("\n".join(lines)), (0, 0, 1, 1)))
    else:
        con.print()
    panels = _option_rows(ctx, command.get_params(ctx))
    ranked = sorted(panels, key=lambda t: _panel_rank(t, list(panels).index(t)))
    for title in ranked:
        con.print(_panel(title, panels[title], width))
    if commands:
        con.print(_panel("Commands", list(commands), width))
    if command.epilog:
        con.print(Padding(Text("\n".join(wrap_words(command.epilog, width - 1)), style="dim"), (1, 0, 0, 1)))
    return buf.getvalue()


class _OneLineErrors:
    """``main`` of the command that is run (the root group, or a lone command): a usage error is one line."""

    def main(self, args: Sequence[str] | None = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        parent = super()
        if not standalone_mode:
            return parent.main(args, prog_name, complete_var, standalone_mode=False, **extra)  # type: ignore[misc]
        try:
            rv = parent.main(args, prog_name, complete_var, standalone_mode=False, **extra)  # type: ignore[misc]
        except ClickException as e:
            msg = " ".join(e.format_message().split())
            where = getattr(e, "ctx", None)
            if isinstance(e, UsageError) and where is not None:
                msg += f" (see '{where.command_path} -h')"
            print_error(msg)
            sys.exit(e.exit_code)
        except typer.Abort:
            print_error("aborted")
            sys.exit(1)
        sys.exit(rv if isinstance(rv, int) else 0)


class HelpCommand(_OneLineErrors, TyperCommand):
    """A command with this module's help (the package's look) and one-line usage errors; a number option given
    ``nan`` or ``inf`` is a usage error before the command runs (click's ranges let both through: ``nan`` compares
    false with every bound, so "≤ nan" checks passed and ``--target-qps inf`` made LoadGen queue without end)."""

    def invoke(self, ctx: Any) -> Any:
        import math

        for param in self.params:
            v = ctx.params.get(param.name)
            if isinstance(v, float) and not math.isfinite(v):
                raise BadParameter(f"must be a finite number, not {v}", ctx=ctx, param=param)
        return super().invoke(ctx)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        formatter.write(render_help(ctx, self))


class HelpGroup(_OneLineErrors, TyperGroup):
    """A group with this module's help and one-line usage errors."""

    def format_help(self, ctx: Any, formatter: Any) -> None:
        rows = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit=10_000)))  # the whole first sentence
        formatter.write(render_help(ctx, self, rows))


def install(app: typer.Typer) -> None:
    """Give every command and group of ``app`` (sub-apps included) the classes of this module, ``-h`` as a help
    option and literal (markup-free) rendering. Call once, after every command is registered."""
    if not app.info.cls or app.info.cls is TyperGroup:
        app.info.cls = HelpGroup
    app.rich_markup_mode = None  # typer's boxed error panels off: errors go through HelpGroup.main
    settings = app.info.context_settings if isinstance(app.info.context_settings, dict) else {}
    app.info.context_settings = {**settings, "help_option_names": HELP_OPTIONS}
    for info in app.registered_commands:
        if info.cls is None or info.cls is TyperCommand:  # a command that asks for a class of its own keeps it
            info.cls = HelpCommand
        own = info.context_settings if isinstance(info.context_settings, dict) else {}
        info.context_settings = {**own, "help_option_names": HELP_OPTIONS}  # a lone command has no group to inherit from
    for group in app.registered_groups:
        if group.typer_instance is not None:
            install(group.typer_instance)
