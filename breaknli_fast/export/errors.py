"""Errors of the exporters. Each carries a one-line message meant for the CLI (no traceback)."""

from __future__ import annotations

from breaknli_fast.errors import UserError


class ExportError(UserError):
    """An export that cannot be made (bad options, exporter failure, an export that fails validation, ...); on it
    ``--engine auto`` falls back to the torch reference."""


class UnsupportedModelError(ExportError):
    """A model family / precision / format combination the exporters refuse, with the reason."""


class ExportValidationError(ExportError):
    """An exported model whose outputs differ from the PyTorch fp32 reference beyond the tolerances."""

    def __init__(self, message: str, validation: dict | None = None):
        super().__init__(message)
        self.validation = validation or {}


def first_line(exc: BaseException) -> str:
    """The first non-empty line of an exception's message (or its type name)."""
    for line in str(exc).strip().splitlines():
        if line.strip():
            return line.strip()
    return type(exc).__name__
