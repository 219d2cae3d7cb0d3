"""The one base class of user errors.

A :class:`UserError` is a problem with what the user asked for (a missing file, a bad option value, a run
directory that cannot be used, a model that cannot be found), not a bug. Every command turns it into one
line, ``error: <first line of the message>``, and exit code 2 (``breaknli_fast.console.user_errors``).
Each layer raises its own subclass (``DataError``, ``ModelLoadError``, ``RunDirError``, ``ExportError``, ...).
"""

from __future__ import annotations

from pathlib import Path


class UserError(RuntimeError):
    """A problem with the user's input or environment, reported as one line (exit code 2)."""


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (or its type name)."""
    for line in str(exc).strip().splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__


def install_hint(extra: str) -> str:
    """The ``pip install`` of an optional extra: from the checkout this package runs from when it is one (an
    editable install of a clone: the extra's pins are the checkout's), else from the package index."""
    root = Path(__file__).resolve().parent.parent
    if (root / "pyproject.toml").is_file():
        return f"pip install -e '{root}[{extra}]'"
    return f"pip install 'breaknli-fast[{extra}]'"


def check_writable_dir(path: str | Path, what: str) -> Path:
    """Raise a one-line :class:`UserError` unless ``path`` is a folder that can be written, or one that can be
    created (its nearest existing parent is a writable folder). Nothing is left behind: the check writes and
    removes a temporary file. For output folders that are written only once the work is done."""
    import tempfile

    p = Path(path).expanduser()
    if p.exists() and not p.is_dir():
        raise UserError(f"cannot use {p} as {what}: it exists and is not a folder")
    nearest = p
    while not nearest.exists() and nearest != nearest.parent:
        nearest = nearest.parent
    if not nearest.is_dir():
        raise UserError(f"cannot create {what} {p}: {nearest} is not a folder")
    try:
        with tempfile.TemporaryFile(dir=nearest):
            pass
    except OSError as e:
        raise UserError(f"cannot write {what} {p}: {e.strerror or e}") from None
    return p
