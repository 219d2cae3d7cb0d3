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

from typing import Any, Sequence

import numpy as np

from breaknli_fast.data.loaders import LoadedData
from breaknli_fast.probes.base import Metric, Probe
from breaknli_fast.study.breakdown import column_groups
from breaknli_fast.stats import equivalence, paired_diff, paired_ratio_diff, ratio_cell, rate_cell, wilson_ci


def record_agreement(probe: Probe, ref_records: Sequence[dict[str, Any]],
                     records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Records with identical predictions (of those both runs wrote), and labels equal input by input."""
    ref = {probe.key(r): probe.predictions(r) for r in ref_records}
    eng = {probe.key(r): probe.predictions(r) for r in records}
    both = [k for k in ref if k in eng]
    out: dict[str, Any] = {"records": len(both), "only_reference": sum(k not in eng for k in ref),
                           "only_engine": sum(k not in ref for k in eng)}
    if not any(ref.values()) and not any(eng.values()):
        return {**out, "available": False}
    same = sum(ref[k] == eng[k] for k in both)
    compared = sum(1 for k in both for x in ref[k] if x in eng[k])
    equal = sum(1 for k in both for x, lab in ref[k].items() if eng[k].get(x) == lab)
    inputs_one = sum(len(set(ref[k]) ^ set(eng[k])) for k in both)
    return {**out, "available": True, "identical": same,
            "identical_pct": 100.0 * same / len(both) if both else None,
            "identical_ci": wilson_ci(same, len(both)) if both else None,
            "labels_compared": compared, "labels_equal": equal,
            "label_agreement_pct": 100.0 * equal / compared if compared else None,
            "inputs_in_one_run_only": inputs_one}


def metric_value(metric: Metric, values: dict[str, Any]) -> dict[str, Any]:
    """The metric over one engine's own examples: ``{"n", "rate", "ci"}`` (percent)."""
    if metric.kind == "ratio":
        return ratio_cell([v[0] for v in values.values()], [v[1] for v in values.values()])
    return rate_cell([float(v) for v in values.values()])


def metric_diff(metric: Metric, ref: dict[str, Any], eng: dict[str, Any], tolerance: float) -> dict[str, Any]:
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
    return d


def headline_values(probe: Probe, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Each headline metric over one engine's own examples."""
    per = probe.per_example(records)
    return {m.name: {**metric_value(m, per.get(m.name, {})), "kind": m.kind} for m in probe.headline_metrics()}


def probe_parity(probe: Probe, ref_records: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
                 tolerance: float) -> dict[str, Any]:
    """Per-record prediction agreement, and each headline metric's paired difference with its verdict."""
    per_ref, per_eng = probe.per_example(ref_records), probe.per_example(records)
    return {"records": record_agreement(probe, ref_records, records),
            "metrics": {m.name: {**metric_diff(m, per_ref.get(m.name, {}), per_eng.get(m.name, {}), tolerance),
                                 "kind": m.kind, "description": m.description}
                        for m in probe.headline_metrics()}}


def parity_by(probe: Probe, ref_records: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]],
              data: LoadedData, columns: Sequence[str], tolerance: float) -> dict[str, Any]:
    """Each headline metric's paired difference on the examples of each group of each column (the groups of
    :func:`breaknli_fast.study.breakdown.column_groups`; values paired by example id, the probes' ``pair_key``)."""
    per_ref, per_eng = probe.per_example(ref_records), probe.per_example(records)
    out: dict[str, Any] = {}
    for column in columns:
        spec = column_groups(data, column)
        groups = []
        for label, value, ids in spec["groups"]:
            metrics = {}
            for m in probe.headline_metrics():
                ref = {k: v for k, v in per_ref.get(m.name, {}).items() if k in ids}
                eng = {k: v for k, v in per_eng.get(m.name, {}).items() if k in ids}
                metrics[m.name] = metric_diff(m, ref, eng, tolerance)
            groups.append({"group": label, "value": value, "examples": len(ids), "metrics": metrics})
        out[column] = {"kind": spec["kind"], "groups": groups}
    return out


def invariance_pairs(data_pairs: Sequence[tuple[str, str]], extra: Sequence[tuple[str, str]], limit: int) -> list[tuple[str, str]]:
    """The pairs of the batch-invariance check: distinct pairs, the data's (p, h) first, at most ``limit``."""
    out = list(dict.fromkeys([*data_pairs, *extra]))
    return out[: max(0, limit)]


def batch_invariance(clf: Any, pairs: Sequence[tuple[str, str]]) -> dict[str, Any]:
    """Labels of ``pairs`` classified in the engine's own batches against one pair per call (batch size 1); the
    classifier's cache is cleared before each pass and after."""
    pairs = list(pairs)
    if not pairs:
        return {"pairs": 0, "labels_changed": None, "changed_pct": None, "max_abs_logit_diff": None}
    clf.clear_cache()
    batched = np.asarray(clf.classify(pairs).logits, dtype=np.float64)
    clf.clear_cache()
    single = np.concatenate([np.asarray(clf.classify([p]).logits, dtype=np.float64) for p in pairs])
    clf.clear_cache()
    changed = int((batched.argmax(1) != single.argmax(1)).sum())
    return {"pairs": len(pairs), "labels_changed": changed, "changed_pct": 100.0 * changed / len(pairs),
            "max_abs_logit_diff": float(np.abs(batched - single).max()),
            "max_batch": getattr(clf, "max_batch", None), "token_budget": getattr(clf, "token_budget", None)}

