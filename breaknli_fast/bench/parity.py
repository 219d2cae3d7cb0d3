"""BreakNLI's parity of an engine with the torch:fp32 reference (spec: "Parity with the PyTorch reference").

* classifier parity on identical pairs: label agreement and max |Δ logit|;
* breakage on one fixed set of (p, h, h') triples taken from the reference's own run, so generation noise is
  excluded: paired differences (the same triples for both) with Tango's score interval;
* end-to-end: each engine's own loop on the same examples and seeds; paired differences over the examples both
  runs evaluated (the others are counted);
* generator: greedy-token agreement, and identity of sampled candidates.

Verdicts come from :func:`breaknli_fast.probes.breaknli.verdicts.verdict` and rates from
:func:`breaknli_fast.probes.breaknli.metrics.rates`; nothing here re-implements the loop. Every difference gets
an equivalence verdict (:func:`breaknli_fast.stats.equivalence`): equivalent, different or inconclusive, with the
examples a decision would need, and ``too_small`` where no outcome on so few examples could show equivalence.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from breaknli_fast.data.labels import LABELS
from breaknli_fast.probes.breaknli.metrics import rates
from breaknli_fast.probes.breaknli.verdicts import Verdict, verdict
from breaknli_fast.bench.types import (ClassifierParity, Diff, Parity, SampledIdentity, TokenAgreement, TripleCell,
                                      VerdictCounts)
from breaknli_fast.stats import familywise_different, equivalence, paired_diff

CELLS = tuple(LABELS) + ("overall",)
DIFF_KEYS = ("inequality", "relaxed")


def classifier_parity(ref_logits: np.ndarray, logits: np.ndarray) -> ClassifierParity:
    ref_logits, logits = np.asarray(ref_logits, dtype=np.float64), np.asarray(logits, dtype=np.float64)
    n = int(ref_logits.shape[0])
    if n == 0:
        return ClassifierParity()
    d = np.abs(ref_logits - logits)
    return ClassifierParity(n, float(100.0 * np.mean(ref_logits.argmax(1) == logits.argmax(1))), float(d.max()),
                            float(d.mean()))


# -- fixed triples ----------------------------------------------------------------------------------

@dataclass(frozen=True)
class FixedTriple:
    """One example the reference evaluated: its mode, id, label ŷ, premise, hypothesis and its S kept h'."""

    mode: str
    id: str
    yhat: str
    premise: str
    hypothesis: str
    evaluated: tuple[str, ...]


def fixed_triples(records: Sequence[dict[str, Any]]) -> list[FixedTriple]:
    """The reference run's evaluated examples with their S kept h' (from its records)."""
    return [FixedTriple(r["mode"], r["id"], r["yhat"], r["premise"], r["hypothesis"], tuple(r["evaluated"]))
            for r in records if r.get("status") == "evaluated"]


def triple_pairs(triples: Sequence[FixedTriple]) -> list[tuple[str, str]]:
    return [(t.premise, c) for t in triples for c in t.evaluated]


def triple_verdicts(triples: Sequence[FixedTriple], labels: Sequence[str]) -> list[Verdict]:
    """Verdict of each fixed triple under the predictions ``labels`` of (p, h') (in triple_pairs order).
    The rule is keyed by the example's label (gold = the reference's ŷ), so the example set is the same
    for every engine and the comparison is paired."""
    out, pos = [], 0
    for t in triples:
        n = len(t.evaluated)
        out.append(verdict(t.mode, t.yhat, list(labels[pos : pos + n])))
        pos += n
    if pos != len(labels):
        raise ValueError("predictions do not match the fixed triples")
    return out


def _cells(triples: Sequence[FixedTriple]) -> dict[str, dict[str, list[int]]]:
    """mode -> cell (label / overall) -> indices into triples."""
    out: dict[str, dict[str, list[int]]] = {}
    for i, t in enumerate(triples):
        m = out.setdefault(t.mode, {})
        m.setdefault(t.yhat, []).append(i)
        m.setdefault("overall", []).append(i)
    return out


def fixed_triple_parity(triples: Sequence[FixedTriple], ref_verdicts: Sequence[Verdict],
                        verdicts: Sequence[Verdict]) -> dict[str, dict[str, TripleCell]]:
    """Per mode x (label, overall): the engine's rates, and the paired difference engine - reference
    of inequality and relaxed with its 95 % interval (:func:`breaknli_fast.stats.paired_diff`)."""
    out: dict[str, dict[str, TripleCell]] = {}
    for mode, cells in _cells(triples).items():
        table = {}
        for cell in CELLS:
            idx = cells.get(cell)
            if not idx:
                continue
            diffs = {key: Diff.of(paired_diff([float(getattr(verdicts[i], key)) for i in idx],
                                              [float(getattr(ref_verdicts[i], key)) for i in idx])) for key in DIFF_KEYS}
            changed = int(sum(verdicts[i].inequality != ref_verdicts[i].inequality
                              or verdicts[i].relaxed != ref_verdicts[i].relaxed for i in idx))
            table[cell] = TripleCell(len(idx), rates=rates([verdicts[i].to_dict() for i in idx]), **diffs,
                                     examples_changed=changed)
        out[mode] = table
    return out


# -- end to end -------------------------------------------------------------------------------------

def _evaluated(records: Sequence[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r["mode"], r["id"]): r for r in records if r.get("status") == "evaluated"}


def end_to_end_parity(ref_records: Sequence[dict[str, Any]],
                      records: Sequence[dict[str, Any]]) -> dict[str, dict[str, TripleCell]]:
    """Per mode x (reference label, overall): engine - reference over the examples both runs evaluated (same
    examples and seeds: a paired difference), with the number evaluated by one run only."""
    a_all, b_all = _evaluated(records), _evaluated(ref_records)
    out: dict[str, dict[str, TripleCell]] = {}
    for mode in sorted({m for m, _ in a_all} | {m for m, _ in b_all}):
        both = [k for k in b_all if k[0] == mode and k in a_all]
        cells: dict[str, list[tuple[str, str]]] = {"overall": both}
        for k in both:
            cells.setdefault(b_all[k]["yhat"], []).append(k)
        table = {}
        for cell in CELLS:
            keys = cells.get(cell)
            if not keys:
                continue
            diffs = {k: Diff.of(paired_diff([float(a_all[x]["verdict"][k]) for x in keys],
                                            [float(b_all[x]["verdict"][k]) for x in keys])) for k in DIFF_KEYS}
            table[cell] = TripleCell(
                len(keys), only_reference=sum(1 for k in b_all if k[0] == mode and k not in a_all
                                              and (cell == "overall" or b_all[k]["yhat"] == cell)),
                only_engine=sum(1 for k in a_all if k[0] == mode and k not in b_all
                                and (cell == "overall" or a_all[k]["yhat"] == cell)), **diffs)
        out[mode] = table
    return out


def sampled_identity(ref_records: Sequence[dict[str, Any]], records: Sequence[dict[str, Any]]) -> SampledIdentity:
    """Share of examples generated by both runs whose kept candidates are identical (same seed:
    identical logits must give identical samples)."""
    ref = {(r["mode"], r["id"]): r.get("candidates") for r in ref_records if "candidates" in r}
    both = [(ref[(r["mode"], r["id"])], r["candidates"]) for r in records
            if "candidates" in r and (r["mode"], r["id"]) in ref]
    if not both:
        return SampledIdentity()
    return SampledIdentity(len(both), 100.0 * sum(a == b for a, b in both) / len(both))


def token_agreement(ref: Sequence[Sequence[int]], seqs: Sequence[Sequence[int]]) -> TokenAgreement:
    """Greedy decoding of the same prompts: % of positions with equal tokens (over the longer of the
    two sequences, so a length difference counts as disagreement) and % of identical sequences."""
    if len(ref) != len(seqs):
        raise ValueError("token agreement needs one sequence per prompt on both sides")
    if not ref:
        return TokenAgreement()
    equal = total = same = 0
    for a, b in zip(ref, seqs):
        L = max(len(a), len(b))
        equal += sum(1 for x, y in zip(a, b) if x == y)
        total += L
        same += list(a) == list(b)
    return TokenAgreement(len(ref), total, 100.0 * equal / total if total else 100.0, 100.0 * same / len(ref))


# -- verdicts and the pass / fail rule ---------------------------------------------------------------

def out_of_tolerance(entry: Diff | None, tolerance: float) -> bool:
    """The spec's rule for *different*: |difference| larger than the tolerance and its 95 % CI excludes zero."""
    if entry is None or entry.diff is None or entry.ci is None:
        return False
    lo, hi = entry.ci
    return abs(entry.diff) > tolerance and (lo > 0 or hi < 0)


def add_verdicts(parity: Parity, tolerance: float) -> VerdictCounts:
    """Give every difference of a parity block its equivalence verdict (in place); returns the counts, with
    ``too_small``: the cells on fewer examples than any equivalence within the tolerance needs, and
    ``different_confirmed``: the *different* cells that stay different with the engine's cells judged together
    (:func:`confirmed_differences`; each such cell gets a ``familywise`` entry)."""
    counts = VerdictCounts()
    for _, e in parity.cells():
        if e.verdict is None:
            v = equivalence(e.entry(), tolerance)
            e.verdict, e.n_needed, e.too_small = v["verdict"], v["n_needed"], v["too_small"]
        setattr(counts, e.verdict, getattr(counts, e.verdict) + 1)  # type: ignore[arg-type]
        counts.too_small += bool(e.too_small)
    counts.different_confirmed = len(confirmed_differences(parity, tolerance, record=True))
    parity.verdicts = counts
    return counts


def confirmed_differences(parity: Parity, tolerance: float = 0.0, record: bool = False) -> list[str]:
    """The places of the *different* cells of one engine's parity block that stay different when all its ``m``
    judged cells are taken together (Bonferroni: the cell's interval at 1 - 0.05 / m still excludes 0;
    :func:`breaknli_fast.stats.familywise_different`). The per-cell verdicts are the spec's (95 % each); this is
    what an engine-level "shown to differ" rests on, since among dozens of cells one is likely "different" at
    95 % by chance. ``record``: write each different cell's ``familywise`` entry into it."""
    judged = [(w, e) for w, e in parity.cells() if e.ci is not None]
    out = []
    for where, e in judged:
        if e.verdict != "different":
            continue
        fw = familywise_different(e.entry(), tolerance, len(judged))
        if record:
            e.familywise = fw
        if fw["confirmed"]:
            out.append(where)
    return out


def check(parity: Parity, tolerance: float, min_agreement: float, require_equivalence: bool = False) -> list[str]:
    """Failures (one line each) of one engine's parity block: a *different* cell, a label agreement below the
    minimum, and with ``require_equivalence`` an *inconclusive* cell too."""
    fails: list[str] = []
    whole = (parity.classifier or {}).get("all")
    agr = whole.label_agreement_pct if whole is not None else None
    if agr is None and parity.headline is not None:
        agr = parity.headline.records.label_agreement_pct
    if agr is not None and agr < min_agreement:
        fails.append(f"classifier label agreement {agr:.2f} % < {min_agreement:.2f} %")
    for where, e in parity.cells():
        if e.ci is None and not require_equivalence:
            continue
        v = e.verdict or equivalence(e.entry(), tolerance)["verdict"]
        if e.ci is not None:
            lo, hi = e.ci
            where = f"{where} {e.diff:+.2f} pp [{lo:+.2f}, {hi:+.2f}] (n={e.n})"
        if v == "different":
            fails.append(f"{where}: different (tolerance {tolerance:.2f} pp)")
        elif v == "inconclusive" and require_equivalence:
            need = e.n_needed
            small = " (too few examples to show it at all)" if e.too_small else ""
            fails.append(f"{where}: not shown equivalent within {tolerance:.2f} pp{small}"
                         + (f"; about {need} examples would decide" if need else ""))
    return fails
