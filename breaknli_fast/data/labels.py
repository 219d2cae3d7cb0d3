"""Canonical NLI labels and mapping of model / dataset labels onto them."""

from __future__ import annotations

from typing import Mapping

from breaknli_fast.errors import UserError

ENTAILMENT = "entailment"
NEUTRAL = "neutral"
CONTRADICTION = "contradiction"
LABELS = (ENTAILMENT, NEUTRAL, CONTRADICTION)
SHORT = {ENTAILMENT: "E", NEUTRAL: "N", CONTRADICTION: "C"}

# Hub datasets (glue/mnli, snli, anli) order labels entailment=0, neutral=1, contradiction=2; -1 = no gold.
HUB_INDEX = {0: ENTAILMENT, 1: NEUTRAL, 2: CONTRADICTION}

_ALIASES = {
    "entailment": ENTAILMENT,
    "entail": ENTAILMENT,
    "entails": ENTAILMENT,
    "entailed": ENTAILMENT,
    "e": ENTAILMENT,
    "neutral": NEUTRAL,
    "n": NEUTRAL,
    "contradiction": CONTRADICTION,
    "contradict": CONTRADICTION,
    "contradicts": CONTRADICTION,
    "contradictory": CONTRADICTION,
    "c": CONTRADICTION,
}


class LabelMappingError(UserError, ValueError):
    """A label set that cannot be mapped onto entailment / neutral / contradiction."""


def canonical_label(value: object) -> str | None:
    """Map a label name (any case, common aliases) to the canonical name; None when unknown.

    Integers are *not* accepted here: an index only means something together with a
    mapping (dataset or model specific). Use :func:`dataset_label` for dataset values.
    """
    if not isinstance(value, str):
        return None
    return _ALIASES.get(value.strip().lower())


def dataset_label(value: object) -> str | None:
    """Gold label of a dataset row: a name, or the hub's integers (0=E, 1=N, 2=C).

    Returns None for "no gold label" (-1, '-', '', None) and for unknown values; callers
    distinguish the two with :func:`is_missing_label`.
    """
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return HUB_INDEX.get(value)
    if isinstance(value, float) and value.is_integer():
        return HUB_INDEX.get(int(value))
    if isinstance(value, str):
        s = value.strip()
        if s.lstrip("-").isdigit():
            try:
                return HUB_INDEX.get(int(s))
            except ValueError:  # digits int() refuses (superscripts, more than Python converts): not a label
                return None
        return canonical_label(s)
    return None


def is_missing_label(value: object) -> bool:
    """True for the values datasets use for "no gold label"."""
    if value is None:
        return True
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return value == -1
    if isinstance(value, str):
        return value.strip() in ("", "-", "-1")
    return False


def map_id2label(id2label: Mapping[int | str, str], explicit: Mapping[str, str] | None = None) -> list[str]:
    """Turn a model's ``config.id2label`` into a list of canonical labels, one per output index.

    ``explicit`` maps the model's own label names (e.g. ``LABEL_0``) to canonical names and is
    consulted first. Raises :class:`LabelMappingError` when some output cannot be mapped or the
    three canonical labels are not each present exactly once.
    """
    items = sorted(((int(k), v) for k, v in id2label.items()), key=lambda kv: kv[0])
    if len(items) != len(LABELS):
        raise LabelMappingError(
            f"the model has {len(items)} output{'s' if len(items) != 1 else ''} ({', '.join(v for _, v in items)}): "
            "only 3-way NLI classifiers are supported (entailment, neutral and contradiction, in any order; a label "
            "map names outputs such as LABEL_0), not 2-way ones such as entailment / not_entailment")
    out: list[str] = []
    bad: list[str] = []
    for idx, name in items:
        lab = None
        if explicit:
            lab = canonical_label(explicit.get(name, "")) or canonical_label(explicit.get(str(idx), ""))
        lab = lab or canonical_label(name)
        if lab is None:
            bad.append(f"{idx}={name!r}")
        out.append(lab or "")
    if bad:
        raise LabelMappingError(
            "cannot map the model's labels " + ", ".join(bad) + " to entailment/neutral/contradiction; "
            "pass an explicit mapping, e.g. --label-map LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment"
        )
    if sorted(out) != sorted(LABELS):
        raise LabelMappingError(
            f"the model's labels {dict(items)} do not map one-to-one onto entailment/neutral/contradiction"
        )
    return out


def parse_label_map(text: str | None) -> dict[str, str] | None:
    """Parse ``LABEL_0=contradiction,LABEL_1=neutral`` into a dict (None for empty)."""
    if not text:
        return None
    out = {}
    for part in text.split(","):
        if "=" not in part:
            raise LabelMappingError(f"bad --label-map entry {part!r}: expected NAME=label")
        k, v = part.split("=", 1)
        if canonical_label(v) is None:
            raise LabelMappingError(f"bad --label-map entry {part!r}: {v!r} is not entailment/neutral/contradiction")
        out[k.strip()] = canonical_label(v)  # type: ignore[assignment]
    return out
