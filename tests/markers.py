"""Skip conditions shared by test modules (each with the reason the skip prints)."""

from __future__ import annotations

import importlib.util

import pytest


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _transformers_version() -> str:
    try:
        import transformers

        return transformers.__version__
    except ImportError:  # pragma: no cover
        return "missing"

