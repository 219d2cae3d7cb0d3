"""Text normalisation of the spec: strip surrounding whitespace, end with '.', '?' or '!'."""

from __future__ import annotations


def normalize_text(text: str) -> str:
    s = str(text).strip()
    if s and s[-1] not in ".?!":
        s += "."
    return s
