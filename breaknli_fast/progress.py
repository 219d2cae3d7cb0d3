"""What a study tells a user interface (progress of its stages, notices, spinners). The default does nothing;
the command line draws rich progress bars (:class:`breaknli_fast.console.RichHook`)."""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, ContextManager


class ProgressHook:
    """What a study tells a UI. The default does nothing; the CLI draws rich progress bars."""

    def start(self, stage: str, total: int, completed: int = 0) -> None: ...

    def advance(self, stage: str, n: int = 1) -> None: ...

    def finish(self, stage: str) -> None: ...

    def remove(self, stage: str) -> None:
        """Take a finished stage off the display (a study over several runs keeps one run's stages at a time)."""

    def message(self, text: str) -> None:
        """A one-line notice (resuming, an engine fallback)."""

    def status(self, text: str) -> ContextManager[Any]:
        """A spinner around a step without a count (loading models)."""
        return nullcontext()
