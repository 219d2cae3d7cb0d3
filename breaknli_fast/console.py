"""The one console of the commands: output, progress bars, and the path from a user error to ``error: …``.

User text (paths, dataset names, model ids, messages that quote them, install hints with ``[extras]``) is
never read as rich markup: it goes through :func:`literal` or ``markup=False``, so ``out[v2]`` prints as
``out[v2]``. Every command wraps its body in :func:`user_errors`, which turns a
:class:`~breaknli_fast.errors.UserError` (or a ``ValueError`` raised by option validation) into one line
``error: <first line>`` with exit code 2, and Ctrl-C or SIGTERM (what ``timeout``, Slurm and ``docker stop`` send)
into one line saying how to resume.
"""

from __future__ import annotations

import io
import os
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator, NoReturn, Sequence, TypeVar

import typer
from rich.console import Console
from rich.measure import Measurement
from rich.markup import escape
from rich.progress import (BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn,
                           TimeRemainingColumn)
from rich.table import Table
from rich.text import Text

from breaknli_fast.errors import UserError, first_line
from breaknli_fast.progress import ProgressHook

console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

T = TypeVar("T")

EXIT_USER_ERROR = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as shells report it
EXIT_TERMINATED = 143  # 128 + SIGTERM: what a scheduler expects of a job it stopped (not 130: it was not Ctrl-C)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread where Ctrl-C raises KeyboardInterrupt, so that the same cleanup runs
    (the chunk records and the invocation's timings written, the run directory's lock removed)."""


def _on_sigterm(signum: int, frame: Any) -> None:
    raise Terminated


@contextmanager
def _sigterm_raises() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` (in the main thread only: elsewhere a handler
    cannot be set, and the default stays)."""
    import signal
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def out_path(value: str | Path | None) -> Path | None:
    """The ``parser`` of every ``--out`` option: an empty value is refused (``Path("")`` is the current directory,
    so ``--out ''`` would write a run's files among the user's own)."""
    if value is None or isinstance(value, Path):
        return value
    if not value.strip():
        raise typer.BadParameter("an empty path; name a folder (or leave the option out for the default)")
    return Path(value)


def literal(text: Any) -> str:
    """``text`` escaped for a rich markup string (user text inside a styled message)."""
    return escape(str(text))


def print_error(msg: str) -> None:
    """``error: msg`` on stderr, on one line (``msg`` literally, never as markup)."""
    err_console.print(Text.assemble(("error:", "bold red"), " ", msg), soft_wrap=True)


def warn(msg: str) -> None:
    """``warning: msg`` on stderr, on one line (``msg`` literally)."""
    err_console.print(Text.assemble(("warning:", "bold yellow"), " ", msg), soft_wrap=True)


def fail(msg: str, code: int = EXIT_USER_ERROR) -> NoReturn:
    """Print ``error: msg`` (``msg`` literally, never as markup) on stderr and exit with ``code``."""
    print_error(msg)
    raise typer.Exit(code)


@contextmanager
def user_errors(resumable: bool = False, extra: tuple[type[BaseException], ...] = (),
                wrap_unexpected: bool = False) -> Iterator[None]:
    """Turn user errors into one ``error:`` line (exit 2) and Ctrl-C into one line (exit 130); SIGTERM likewise
    (exit 143), through the same cleanup as Ctrl-C.

    ``resumable``: the command writes a run directory that the same command resumes, and the
    interruption message says so. ``extra``: more exception types to treat as user errors.
    ``wrap_unexpected``: any other exception (a third-party converter failing inside ``export``) is one
    line too, with exit code 1. ``BREAKNLI_FAST_DEBUG=1`` re-raises instead, with the traceback."""
    try:
        with _sigterm_raises():
            yield
    except (typer.Exit, typer.Abort, typer.TyperException):  # already decided (fail() inside the block)
        raise
    except KeyboardInterrupt as e:
        if os.environ.get("BREAKNLI_FAST_DEBUG"):
            raise
        hint = ": re-run the same command to resume (finished examples are kept)" if resumable else ""
        what = "terminated (SIGTERM)" if isinstance(e, Terminated) else "interrupted"
        err_console.print(Text.assemble((what, "bold yellow"), hint), soft_wrap=True)
        raise typer.Exit(EXIT_TERMINATED if isinstance(e, Terminated) else EXIT_INTERRUPTED) from None
    except (UserError, ValueError, *extra) as e:
        if os.environ.get("BREAKNLI_FAST_DEBUG"):
            raise
        fail(first_line(e))
    except Exception as e:
        if not wrap_unexpected or os.environ.get("BREAKNLI_FAST_DEBUG"):
            raise
        fail(f"{type(e).__name__}: {first_line(e)} (BREAKNLI_FAST_DEBUG=1 shows the traceback)", code=1)


class RichHook(ProgressHook):
    """The loop's progress hook drawn as rich progress bars (one per stage)."""

    def __init__(self, progress: Progress):
        self.p = progress
        self.tasks: dict[str, Any] = {}

    def start(self, stage: str, total: int, completed: int = 0) -> None:
        self.tasks[stage] = self.p.add_task(literal(stage), total=total, completed=completed)

    def advance(self, stage: str, n: int = 1) -> None:
        self.p.advance(self.tasks[stage], n)

    def finish(self, stage: str) -> None:
        t = self.tasks.get(stage)
        if t is not None:  # tasks are looked up by id: removing a spinner row shifts the list
            total = next(task.total for task in self.p.tasks if task.id == t)
            self.p.update(t, completed=total)

    def remove(self, stage: str) -> None:
        t = self.tasks.pop(stage, None)
        if t is not None:
            self.p.remove_task(t)

    def message(self, text: str) -> None:
        self.p.console.print(Text(text))  # literally: paths and model ids are user text

    @contextmanager
    def status(self, text: str) -> Iterator[None]:
        task = self.p.add_task(literal(text), total=None)  # a spinner row inside the live progress display
        try:
            yield
        finally:
            self.p.remove_task(task)


class LazyProgress(Progress):
    """Progress bars whose display starts with the first bar: a command that stops before any (a bad input refused)
    prints its one ``error:`` line alone, without the empty line an empty display leaves where stderr is no
    terminal."""

    _wanted = False

    def start(self) -> None:
        self._wanted = True
        if self.tasks:
            super().start()

    def add_task(self, *args: Any, **kwargs: Any) -> Any:
        task = super().add_task(*args, **kwargs)
        if self._wanted and not self.live.is_started:
            super().start()
        return task

    def stop(self) -> None:
        self._wanted = False
        if self.live.is_started:
            super().stop()


def make_progress() -> Progress:
    """Progress bars on stderr (stdout stays the result)."""
    return LazyProgress(SpinnerColumn(), TextColumn("{task.description:<16}"), BarColumn(bar_width=24),
                        MofNCompleteColumn(), TimeElapsedColumn(), TimeRemainingColumn(), console=err_console,
                        transient=False)


def _cell_width(con: Console, renderable: Any) -> int:
    return Measurement.get(con, con.options.update_width(10_000), renderable).maximum


def min_table_width(table: Table) -> int:
    """The narrowest width at which ``table`` shows every cell whole: its ``no_wrap`` columns are first given a
    ``min_width`` of their widest cell (rich would otherwise crop them, ``…``, to fit the terminal); the other
    columns wrap at spaces down to their longest word or their ``min_width``."""
    con = Console(width=10_000, file=io.StringIO())  # measures only: nothing is printed
    for col in table.columns:
        if col.no_wrap:
            col.min_width = max([col.min_width or 0, *(_cell_width(con, c) for c in col.cells)])
    return Measurement.get(con, con.options, table).minimum


def tables_that_fit(make: Callable[[Sequence[T]], Table], items: Sequence[T], width: int) -> list[Table]:
    """``make(items)`` split into as few tables as fit ``width``: ``items`` are the table's repeated columns (the
    models of a comparison, the rates of a breakdown), kept in order, each table taking as many as fit beside the
    columns every table repeats (the row labels). One item too wide alone still gets a table of its own."""
    tables: list[Table] = []
    group: list[T] = []
    for item in items:
        if group and min_table_width(make([*group, item])) > width:
            tables.append(make(group))
            group = []
        group.append(item)
    if group or not tables:
        tables.append(make(group))
    for t in tables:
        min_table_width(t)  # the no_wrap columns of the returned tables keep their whole width too
    return tables


NAME_WIDTH = 24  # a name column never narrower than its longest name up to this many characters


def name_width(names: Any) -> int:
    """The ``min_width`` of a table column of names (engines, metrics): its longest name, at most
    :data:`NAME_WIDTH`, so that at 80 columns the numbers wrap before a name is cut mid-word (``torch:fp3`` /
    ``2``)."""
    return min(NAME_WIDTH, max((len(str(n)) for n in names), default=0))


def name_cell(name: str, width: int = NAME_WIDTH) -> str:
    """A name longer than ``width`` broken onto lines between its words, and a word longer than ``width`` after its
    ``:`` separators (``ort:int8:`` / ``quantization=static``), rather than cut mid-word; a part longer than
    ``width`` is left to the table."""
    name = str(name)
    if len(name) <= width:
        return name
    pieces: list[str] = []
    for word in name.split(" "):
        if len(word) <= width or ":" not in word:
            pieces.append(word)
        else:
            parts = word.split(":")
            pieces += [p + ":" for p in parts[:-1]] + [parts[-1]]
    lines, cur = [], ""
    for piece in pieces:
        glue = "" if not cur or cur.endswith(":") else " "
        if cur and len(cur) + len(glue) + len(piece) > width:
            lines.append(cur)
            cur, glue = "", ""
        cur += glue + piece
    return "\n".join(lines + [cur])
