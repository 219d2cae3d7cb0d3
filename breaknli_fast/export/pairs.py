"""The premise/hypothesis pairs of an export: the given ones, else the embedded SNLI sample (validation) and its
held-out tuning slice (calibration), else the template pairs of :mod:`breaknli_fast.engines.random_weights`."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping, Sequence

from breaknli_fast.data.loaders import load_examples
from breaknli_fast.engines import random_weights
from breaknli_fast.export.errors import ExportError

Pair = tuple[str, str]


def as_pairs(items: Iterable[Any]) -> list[Pair]:
    """(premise, hypothesis) from tuples ``(p, h)`` / ``(p, h, label)``, dicts or objects with attributes."""
    out: list[Pair] = []
    for it in items:
        if isinstance(it, (tuple, list)):
            out.append((str(it[0]), str(it[1])))
        elif isinstance(it, Mapping):
            out.append((str(it["premise"]), str(it["hypothesis"])))
        else:
            out.append((str(it.premise), str(it.hypothesis)))
    return out


def default_pairs(n: int) -> tuple[list[Pair], str]:
    """The embedded SNLI sample when it is there, else the template pairs of
    :mod:`breaknli_fast.engines.random_weights`."""
    try:
        data = load_examples("sample", limit=n)
        ps = as_pairs(data.examples)
        if ps:
            return ps, "embedded snli sample"
    except Exception:  # sample missing or unreadable: fall back
        pass
    return as_pairs(random_weights.pairs(n)), "breaknli_fast.engines.random_weights.pairs"


def tuning_pairs(n: int) -> tuple[list[Pair], str]:
    """The first ``n`` pairs of the held-out tuning slice (``sample-tuning``; the evaluation slice, ``sample``,
    is what studies and benches measure on), else :func:`default_pairs`."""
    try:
        ps = as_pairs(load_examples("sample-tuning", limit=n).examples)
        if ps:
            return ps, "embedded snli tuning slice"
    except Exception:  # the slice missing or unreadable: fall back
        pass
    return default_pairs(n)


def split_pairs(pairs: Sequence[Pair], calibration_size: int, validation_size: int) -> tuple[list[Pair], list[Pair]]:
    """Calibration and validation pairs, disjoint when there are enough."""
    pairs = list(pairs)
    calib = pairs[:calibration_size]
    if len(pairs) >= calibration_size + validation_size:
        val_pairs = pairs[calibration_size:calibration_size + validation_size]
    else:
        val_pairs = pairs[:validation_size]
    return calib, val_pairs


def pairs_digest(pairs: Sequence[Pair]) -> str:
    """What the cache key records of the calibration pairs."""
    return hashlib.sha256(json.dumps(list(pairs)).encode()).hexdigest()[:16]


def export_pairs(calibration_pairs: Iterable[Any] | None, calibrated: bool, calibration_size: int,
                 validation_size: int) -> tuple[list[Pair], list[Pair], str]:
    """(calibration pairs, validation pairs, where the validation pairs come from)."""
    n_calib = calibration_size if calibrated else 0
    if calibration_pairs is not None:
        all_pairs = as_pairs(calibration_pairs)
        if not all_pairs:
            raise ExportError("no calibration/validation pairs were given")
        calib, val_pairs = split_pairs(all_pairs, n_calib, validation_size)
        return calib, val_pairs, "given"
    if calibrated:  # calibrated on the tuning slice, so that the evaluation slice stays unseen by the export
        calib, _ = tuning_pairs(n_calib)
        val_pairs, src = default_pairs(validation_size)
        return calib, val_pairs, src
    all_pairs, src = default_pairs(validation_size)
    return [], all_pairs[:validation_size], src
