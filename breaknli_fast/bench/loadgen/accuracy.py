"""The accuracy gate of ``bench --scenario``: each role's score from its AccuracyOnly pass (every sample of the
library once, on the code that was timed), as a percentage of the torch fp32 reference's score on the same
samples, with MLPerf's tiers (at least 99 % / 99.9 % of the reference), and the paired difference from the
reference with its 95 % interval and equivalence verdict (:mod:`breaknli_fast.stats`).

The scores (higher is better, per sample, then averaged):

* **classifier**: accuracy against the data's gold labels (1 when the label is right); beside it the label
  agreement with the reference;
* **generator**: usable candidates: the loop's filters run on the engine's K candidates with the *reference*
  classifier (de-duplicate to U, relation filter in both directions, as ``--relation-filter full``); a sample scores
  the share of its U candidate slots holding an on-target candidate (0 when fewer than U distinct candidates came
  out); examples the reference classifier gets wrong are not scored (the loop skips them). The same records give
  the BreakNLI breakage rates of those candidates, paired with the reference's
  (:func:`breaknli_fast.bench.agreement.probe_parity`);
* **study unit**: the share of evaluated examples that did not break (100 − Overall inequality breakage), with
  the paired breakage rates and verdicts of the probe's headline metrics.

The tiers are one-sided, as MLPerf's are (an engine above the reference passes); the paired verdict is the
two-sided check.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

from breaknli_fast.bench import agreement
from breaknli_fast.bench.loadgen.roles import GenSample, ReplayGenerator
from breaknli_fast.bench.loadgen.types import AccuracyGate, PairedDiff
from breaknli_fast.bench.types import HeadlineParity, from_json
from breaknli_fast.data.labels import LABELS
from breaknli_fast.probes.base import Probe
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, classify_premise_hypothesis, new_times, process_chunk
from breaknli_fast.progress import ProgressHook
from breaknli_fast.stats import equivalence, paired_diff

TIERS = (99.0, 99.9)
SCORE_NAMES = {"classifier": "accuracy vs gold labels", "generator": "usable candidates (reference classifier)",
               "study": "examples not broken (100 - Overall inequality)"}


def classifier_scores(labels: dict[int, int], gold: Sequence[str]) -> dict[int, float]:
    return {i: float(LABELS[lab] == gold[i]) for i, lab in labels.items()}


def replay_records(samples: Sequence[GenSample], cands: dict[int, list[str]], clf: Any,
                   loop: BreakNLIConfig) -> dict[int, dict[str, Any]]:
    """The loop's records of recorded candidates, judged by ``clf`` (every relation in both directions)."""
    full = replace(loop, relation_filter="full")
    out: dict[int, dict[str, Any]] = {}
    hook = ProgressHook()
    for mode in dict.fromkeys(s.mode for s in samples):
        idx = [i for i in sorted(cands) if samples[i].mode == mode]
        if not idx:
            continue
        chunk = [samples[i].example for i in idx]
        replay = ReplayGenerator({samples[i].seed: cands[i] for i in idx})
        times = new_times()
        yhat = classify_premise_hypothesis(chunk, clf, None, times, hook)
        for i, rec in zip(idx, process_chunk(mode, chunk, yhat, clf, replay, full, times)):
            out[i] = rec
    return out


def generator_scores(records: dict[int, dict[str, Any]], u: int) -> dict[int, float]:
    out = {}
    for i, rec in records.items():
        if rec.get("status") == "too_few_unique":
            out[i] = 0.0
        elif rec.get("status") in ("too_few_on_target", "evaluated"):
            out[i] = float(rec.get("n_on_target") or 0) / float(u)
    return out


def study_scores(records: dict[int, dict[str, Any]]) -> dict[int, float]:
    return {i: 1.0 - float(rec["verdict"]["inequality"]) for i, rec in records.items()
            if rec.get("status") == "evaluated"}


def gate(scores: dict[int, float], ref_scores: dict[int, float], tolerance: float) -> AccuracyGate:
    """The engine's score, the reference's, the percentage of the reference, the tiers and the paired verdict."""
    score = 100.0 * sum(scores.values()) / len(scores) if scores else None
    ref = 100.0 * sum(ref_scores.values()) / len(ref_scores) if ref_scores else None
    of_ref = 100.0 * score / ref if score is not None and ref else None
    both = sorted(set(scores) & set(ref_scores))
    diff = paired_diff([scores[i] for i in both], [ref_scores[i] for i in both])
    diff.update(equivalence(diff, tolerance))
    return AccuracyGate(score_pct=score, reference_pct=ref, of_reference_pct=of_ref, n=len(scores),
                        tiers={f"{t:g}": (of_ref >= t - 1e-9) if of_ref is not None else None for t in TIERS},
                        paired=from_json(PairedDiff, diff))


def label_agreement(labels: dict[int, int], ref_labels: dict[int, int]) -> float | None:
    both = [i for i in labels if i in ref_labels]
    return 100.0 * sum(labels[i] == ref_labels[i] for i in both) / len(both) if both else None


def records_parity(probe: Probe, records: dict[int, dict[str, Any]], ref_records: dict[int, dict[str, Any]],
                   tolerance: float) -> HeadlineParity:
    """The probe's headline metrics on these records against the reference's (paired by mode and example)."""
    return agreement.probe_parity(probe, list(ref_records.values()), list(records.values()), tolerance)


def verdict_text(g: AccuracyGate | None) -> str | None:
    """``equivalent``, ``different`` or ``inconclusive``, with ``(too few)`` where no outcome could show
    equivalence on so few samples."""
    if g is None or g.paired is None:
        return None
    v = g.paired.verdict
    return f"{v} (too few)" if v and g.paired.too_small and v != "different" else v
