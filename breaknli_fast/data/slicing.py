"""Which examples of a dataset a run uses (its *slice*), and what the slice holds.

``--limit N`` keeps the first N valid examples in file order; a file sorted by anything (TaxiNLI's first 300 rows
hold no neutral example) gives a slice that is not what it seems. ``--sample N`` draws N examples instead,
stratified by gold label: each label gets its share of the dataset's valid examples (largest remainder, ties in
entailment, neutral, contradiction order), and within a label the examples are drawn by a seeded shuffle
(:class:`random.Random`, stable across Python versions and platforms). The drawn examples keep their file order.

Every run reports its slice's gold-label counts (:func:`describe`), with a warning when a label is absent or the
labels are very skewed (:func:`slice_warnings`).
"""

from __future__ import annotations

import random
from typing import Any, Sequence

from breaknli_fast.data.labels import LABELS, SHORT
from breaknli_fast.data.loaders import Columns, DataError, LoadedData, load_examples

SKEW_RATIO = 0.5  # a slice is "very skewed" when its rarest label has fewer than half the examples of its commonest


def label_counts(examples: Sequence[Any]) -> dict[str, int]:
    """Examples per gold label, every canonical label present (0 when absent), in E, N, C order."""
    counts = {lab: 0 for lab in LABELS}
    for ex in examples:
        counts[ex.label] = counts.get(ex.label, 0) + 1
    return counts


def allocate(counts: dict[str, int], n: int) -> dict[str, int]:
    """``n`` split over the labels in proportion to ``counts`` (largest remainder; ties in label order): each
    label's share of a stratified sample. ``n`` must not exceed the total."""
    total = sum(counts.values())
    if n > total:
        raise ValueError(f"cannot draw {n} of {total} examples")
    exact = {lab: n * c / total if total else 0.0 for lab, c in counts.items()}
    out = {lab: int(x) for lab, x in exact.items()}
    order = sorted(counts, key=lambda lab: (-(exact[lab] - out[lab]), list(counts).index(lab)))
    for lab in order[: n - sum(out.values())]:
        out[lab] += 1
    return out


def draw_sample(examples: Sequence[Any], n: int, seed: int) -> list[Any]:
    """``n`` examples stratified by gold label (:func:`allocate`), drawn within each label by a shuffle seeded
    with ``seed``; returned in their order in ``examples``. The same examples and seed give the same draw."""
    if n < 1:
        raise DataError(f"--sample {n}: draw at least one example")
    if n > len(examples):
        raise DataError(f"--sample {n}: the dataset has only {len(examples)} valid examples (use --sample "
                        f"{len(examples)} or --limit 0 for all of them)")
    by_label: dict[str, list[int]] = {}
    for i, ex in enumerate(examples):
        by_label.setdefault(ex.label, []).append(i)
    share = allocate({lab: len(ix) for lab, ix in by_label.items()}, n)
    rng = random.Random(seed)
    chosen: list[int] = []
    for lab in sorted(by_label, key=lambda x: (LABELS.index(x) if x in LABELS else len(LABELS), x)):
        ix = list(by_label[lab])
        rng.shuffle(ix)
        chosen += ix[: share[lab]]
    return [examples[i] for i in sorted(chosen)]


def load_slice(name_or_path: str, split: str | None = None, limit: int | None = None, cols: Columns | None = None,
               seed: int = 0, sample: int | None = None, sample_seed: int | None = None) -> LoadedData:
    """:func:`~breaknli_fast.data.loaders.load_examples` with the slice of a run: ``limit`` the first N valid
    examples, or ``sample`` N examples drawn by gold label under ``sample_seed`` (default ``seed``, the run's);
    the result's ``slice`` says which. Both at once is a one-line error."""
    if sample is None:
        data = load_examples(name_or_path, split=split, limit=limit, cols=cols, seed=seed)
        data.slice = {"how": "first", "limit": limit} if limit is not None else {"how": "all"}
        return data
    if limit is not None:
        raise DataError(f"--sample {sample} and --limit {limit}: give one of them (--limit keeps the first N valid "
                        "examples, --sample draws N by gold label)")
    data = load_examples(name_or_path, split=split, cols=cols, seed=seed)
    drawn = seed if sample_seed is None else sample_seed
    every = len(data.examples)
    data.examples = draw_sample(data.examples, sample, drawn)
    data.slice = {"how": "sample", "n": sample, "seed": drawn, "of": every}
    return data


def slice_warnings(counts: dict[str, int], how: str) -> list[str]:
    """One sentence per problem of a slice's label counts: a label with no example, or the rarest label with
    fewer than :data:`SKEW_RATIO` times the examples of the commonest. ``how``: the slice in words."""
    total = sum(counts.values())
    if not total:
        return []
    hint = (" (--limit N keeps the first N valid examples in file order; --sample N draws N by gold label)"
            if how.startswith("first") else "")
    absent = [lab for lab in LABELS if not counts.get(lab)]
    if absent:
        return [f"the slice ({how}) holds no {' and no '.join(absent)} example: {show_counts(counts)}{hint}"]
    low = min(LABELS, key=lambda lab: counts[lab])
    high = max(LABELS, key=lambda lab: counts[lab])
    if counts[low] < SKEW_RATIO * counts[high]:
        return [f"the slice ({how}) is very skewed: {counts[low]} {low} against {counts[high]} {high} "
                f"({show_counts(counts)}){hint}"]
    return []


def show_counts(counts: dict[str, int]) -> str:
    """``E 148 / N 0 / C 152``."""
    return " / ".join(f"{SHORT.get(lab, lab)} {counts.get(lab, 0)}" for lab in LABELS)


def slice_words(spec: dict[str, Any]) -> str:
    """A slice (``{"how": "all" | "first" | "sample", ...}``) in words."""
    how = spec.get("how")
    if how == "first":
        return f"first {spec['limit']} valid examples"
    if how == "sample":
        return f"{spec['n']} examples drawn by label (of {spec['of']}, seed {spec['seed']})"
    return "all valid examples"


def describe(spec: dict[str, Any], examples: Sequence[Any]) -> dict[str, Any]:
    """The slice as report.json and config.json keep it: how it was taken, its size, its gold-label counts and
    the warnings about them."""
    counts = label_counts(examples)
    words = slice_words(spec)
    if spec.get("how") == "first" and len(examples) < spec["limit"]:
        words = f"all {len(examples)} valid examples (--limit {spec['limit']})"
    return {**spec, "examples": len(examples), "labels": counts, "words": words,
            "warnings": slice_warnings(counts, words)}


def identity(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's identity that a drawn slice adds (empty for the first N or all examples, whose limit
    is in the identity already)."""
    return {"sample": {"n": spec["n"], "seed": spec["seed"]}} if spec.get("how") == "sample" else {}
