"""Synthetic NLI data whose labels are computed, never annotated (docs/synthetic.md).

- ``aenli``: an exhaustive logic corpus (quantifiers, negation, passive, adverbs, connectives) labelled by a
  model checker that enumerates every model over a small domain (:mod:`.logic`, :mod:`.aenli`);
- ``kinship``: kinship chains of k facts through random families, labelled through a composition table kept
  as data (:mod:`.kinship`).

Both stream rows (premise, hypothesis, label, id and flat feature columns for ``--by``), deterministic in the
seed: ``breaknli-fast generate aenli|kinship`` writes them to a JSONL file, and ``--dataset aenli[:N]`` /
``kinship[:N]`` generates them in memory (:func:`generate_named`). :mod:`.verify` checks the labels
independently.
"""

from __future__ import annotations

from typing import Any, Iterator

from breaknli_fast.data.synthetic.common import GENERATOR_VERSION, SyntheticError

GENERATED = ("aenli", "kinship")
DEFAULT_N = 3000  # pairs of a named dataset without :N
MAX_NAMED_N = 1_000_000  # a named dataset is held in memory; larger files: breaknli-fast generate
DEFAULT_BREAKDOWN = {"aenli": ["phenomenon"], "kinship": ["k"]}

__all__ = ["DEFAULT_N", "GENERATED", "GENERATOR_VERSION", "SyntheticError", "generate", "generate_named",
           "parse_name"]


def generate(name: str, n: int, seed: int = 0, **options: Any) -> Iterator[dict[str, Any]]:
    """``n`` rows of generator ``name`` (``aenli`` or ``kinship``) with its options (the fields of
    :class:`~.aenli.AenliConfig` or :class:`~.kinship.KinshipConfig`)."""
    if name == "aenli":
        from breaknli_fast.data.synthetic import aenli

        return aenli.generate(n, seed, aenli.AenliConfig(**options))
    if name == "kinship":
        from breaknli_fast.data.synthetic import kinship

        return kinship.generate(n, seed, kinship.KinshipConfig(**options))
    raise SyntheticError(f"unknown generator {name!r}: use {' or '.join(GENERATED)}")


def parse_name(name: str) -> tuple[str, int]:
    """``aenli`` -> ("aenli", DEFAULT_N); ``kinship:500`` -> ("kinship", 500)."""
    base, sep, size = name.partition(":")
    if base not in GENERATED:
        raise SyntheticError(f"unknown generated dataset {name!r}: use {' or '.join(f'{g}[:N]' for g in GENERATED)}")
    if not sep:
        return base, DEFAULT_N
    if not size.isdigit() or not 0 < int(size) <= MAX_NAMED_N:
        raise SyntheticError(f"{name!r}: N in {base}:N is a number of pairs from 1 to {MAX_NAMED_N:,} "
                             f"(larger: breaknli-fast generate {base} --out FILE)")
    return base, int(size)


def generate_named(name: str, seed: int = 0, limit: int | None = None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The rows of a named dataset (``aenli[:N]``, ``kinship[:N]``) generated from ``seed`` with the default
    options, and its source record. With ``limit`` only the first ``limit`` rows are made (the same rows)."""
    base, n = parse_name(name)
    rows = list(generate(base, n if limit is None else min(n, limit), seed))
    source = {"type": "generated", "name": base, "n": n, "seed": seed, "generator_version": GENERATOR_VERSION,
              "breakdown": list(DEFAULT_BREAKDOWN[base])}
    return rows, source
