"""Parity of any probe between two engines on the same data, from their records (``bench --probe``), and the batch
invariance of a classifier's labels.

- **per-record prediction agreement**: records paired by the probe's resume key (group, example id); two engines
  agree on a record when the classifier's labels in it (:meth:`~breaknli_fast.probes.base.Probe.predictions`,
  keyed by input) are equal; labels are also compared one by one where both records classified the same input;
- **headline metrics**: each metric per engine over its own examples (with its 95 % interval), and the paired
  difference engine - reference over the examples both runs scored (:meth:`~breaknli_fast.probes.base.Probe.per_example`),
  with its 95 % interval (:func:`breaknli_fast.stats.paired_diff` / :func:`~breaknli_fast.stats.paired_ratio_diff`)
  and verdict;
- **by column** (``--by``, TaxiNLI's categories by default on TaxiNLI): the same paired differences on each group's
  examples (informative: these cells are not part of the pass / fail checks);
- **batch invariance**: how many labels change between classifying pairs one at a time and in the engine's own
  batches. Dynamic int8 quantisation scales activations per batch tensor, so a pair's label can depend on its batch
  neighbours; static quantisation (``quantization=static``) fixes the scales at export.
"""

from __future__ import annotations

from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from breaknli_fast.bench.types import (BatchInvariance, ColumnParity, Diff, GroupParity, HeadlineParity,
                                      MetricValue, RecordAgreement)
from breaknli_fast.data.loaders import LoadedData
from breaknli_fast.probes.base import Metric, Probe
from breaknli_fast.study.breakdown import column_groups
from breaknli_fast.stats import equivalence, paired_diff, paired_ratio_diff, ratio_cell, rate_cell, wilson_ci


def record_agreement(probe: Probe, ref_records: Sequence[dict[str, Any]],
                     records: Sequence[dict[str, Any]]) -> RecordAgreement:
    """Records with identical predictions (of those both runs wrote), and labels equal input by input."""
    ref = {probe.key(r): probe.predictions(r) for r in ref_records}
    eng = {probe.key(r): probe.predictions(r) for r in records}
    both = [k for k in ref if k in eng]
    out = RecordAgreement(len(both), sum(k not in eng for k in ref), sum(k not in ref for k in eng))
    if not any(ref.values()) and not any(eng.values()):
        return out
    same = sum(ref[k] == eng[k] for k in both)
    compared = sum(1 for k in both for x in ref[k] if x in eng[k])
    equal = sum(1 for k in both for x, lab in ref[k].items() if eng[k].get(x) == lab)
    out.available, out.identical = True, same
    out.identical_pct = 100.0 * same / len(both) if both else None
    out.identical_ci = wilson_ci(same, len(both)) if both else None
    out.labels_compared, out.labels_equal = compared, equal
    out.label_agreement_pct = 100.0 * equal / compared if compared else None
    out.inputs_in_one_run_only = sum(len(set(ref[k]) ^ set(eng[k])) for k in both)
    return out


PerExample = Mapping[Hashable, "float | tuple[float, float]"]  # a metric's value per example (a ratio: num, den)


def metric_value(metric: Metric, values: PerExample) -> MetricValue:
    """The metric over one engine's own examples: n, rate and its interval (percent)."""
    if metric.kind == "ratio":
        cell = ratio_cell([v[0] for v in values.values()], [v[1] for v in values.values()])  # type: ignore[index]
    else:
        cell = rate_cell([float(v) for v in values.values()])  # type: ignore[arg-type]
    return MetricValue(cell["n"], cell["rate"], cell["ci"], metric.kind)


def metric_diff(metric: Metric, ref: PerExample, eng: PerExample, tolerance: float) -> Diff:
    """Engine - reference over the examples both scored, with its interval and verdict."""
    keys = [k for k in ref if k in eng]
    if metric.kind == "ratio":
        d = paired_ratio_diff([eng[k][0] for k in keys], [eng[k][1] for k in keys],
                              [ref[k][0] for k in keys], [ref[k][1] for k in keys])
    else:
        d = paired_diff([float(eng[k]) for k in keys], [float(ref[k]) for k in keys])
    d.update(equivalence(d, tolerance))
    d["only_reference"] = sum(k not in eng for k in ref)
    d["only_engine"] = sum(k not in ref for k in eng)
    return Diff.of(d)


def headline_values(probe: Probe, records: Sequence[dict[str, Any]]) -> dict[str, MetricValue]:
    """Each headline metric over one engine's own examples."""
    per = probe.per_example(records)
    return {m.name: metric_value(m, per.get(m.name, {})) for m in probe.headline_metrics()}


def probe_parity(probe: Probe, ref_records: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
                 tolerance: float) -> HeadlineParity:
    """Per-record prediction agreement, and each headline metric's paired difference with its verdict."""
    per_ref, per_eng = probe.per_example(ref_records), probe.per_example(records)
    metrics = {}
    for m in probe.headline_metrics():
        d = metric_diff(m, per_ref.get(m.name, {}), per_eng.get(m.name, {}), tolerance)
        d.kind, d.description = m.kind, m.description
        metrics[m.name] = d
    return HeadlineParity(record_agreement(probe, ref_records, records), metrics)


def parity_by(probe: Probe, ref_records: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
              data: LoadedData, columns: Sequence[str], tolerance: float) -> dict[str, ColumnParity]:
    """Each headline metric's paired difference on the examples of each group of each column (the groups of
    :func:`breaknli_fast.study.breakdown.column_groups`; values paired by example id, the probes' ``pair_key``)."""
    per_ref, per_eng = probe.per_example(ref_records), probe.per_example(records)
    out: dict[str, ColumnParity] = {}
    for column in columns:
        spec = column_groups(data, column)
        groups = []
        for label, value, ids in spec["groups"]:
            metrics = {}
            for m in probe.headline_metrics():
                ref = {k: v for k, v in per_ref.get(m.name, {}).items() if k in ids}
                eng = {k: v for k, v in per_eng.get(m.name, {}).items() if k in ids}
                metrics[m.name] = metric_diff(m, ref, eng, tolerance)
            groups.append(GroupParity(label, value, len(ids), metrics))
        out[column] = ColumnParity(spec["kind"], groups)
    return out


def invariance_pairs(data_pairs: Sequence[tuple[str, str]], extra: Sequence[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """The pairs of the batch-invariance check: distinct pairs, the data's (p, h) first, at most ``limit``."""
    out = list(dict.fromkeys([*data_pairs, *extra]))
    return out[: max(0, limit)]


CHUNK = 7  # pairs per call of the chunked arrangement


def batch_invariance(clf: Any, pairs: Sequence[tuple[str, str]]) -> BatchInvariance:
    """Labels and logits of ``pairs`` classified in the engine's own batches (one call) against one pair per call
    (batch size 1), the reversed call and calls of :data:`CHUNK` pairs; the classifier's cache is cleared before
    each pass and after."""
    pairs = list(pairs)
    if not pairs:
        return BatchInvariance()

    def logits(calls: list[list[tuple[str, str]]]) -> np.ndarray:
        clf.clear_cache()
        return np.concatenate([np.asarray(clf.classify(c).logits, dtype=np.float64) for c in calls])

    batched = logits([pairs])
    single = logits([[p] for p in pairs])
    reversed_ = logits([pairs[::-1]])[::-1]
    chunked = logits([pairs[i:i + CHUNK] for i in range(0, len(pairs), CHUNK)])
    clf.clear_cache()
    changed = int((batched.argmax(1) != single.argmax(1)).sum())
    return BatchInvariance(len(pairs), changed, 100.0 * changed / len(pairs), float(np.abs(batched - single).max()),
                           getattr(clf, "max_batch", None), getattr(clf, "token_budget", None),
                           float(np.abs(batched - reversed_).max()), float(np.abs(batched - chunked).max()))

