"""Plots are optional: matplotlib on its file-only backend, or None where it is not installed."""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or None without matplotlib (the ``bench`` extra): every
    plot of a report is optional."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    return plt
