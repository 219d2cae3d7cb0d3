"""Parity of BreakNLI run directories with a reference run on the same examples and seeds (kind ``compare_runs``;
the GPU check's step ``parity``: torch fp32 on the GPU against torch fp32 on the CPU, and the GPU's bf16 / fp16
runs against torch fp32 on the GPU). It compares run directories already written; it measures no speed.

Per run, against the ``reference``, over the (mode, example) records both hold:

* the classifier on (p, h): label agreement, and max |Δ probability| (``ph_probs``); labels are also compared
  leaving out near ties (the reference's two largest probabilities closer than ``tie``), where rounding of another
  device may legitimately flip them;
* the generator: the share of examples whose K raw samples (``generated``) are identical;
* end to end: the breakage rates (inequality, relaxed) per mode and reference label over the examples both runs
  evaluated, paired, with the bench's 95 % interval and equivalence verdict within ``tolerance`` points.

A run stopped while it wrote (a GPU check step that reached its time cap) is compared on the records it finished: a
torn last line of samples.jsonl is left out (``torn_last_line``). A run passes at fp32 when every label outside
near ties agrees, max |Δ probability| <= ``fp32_prob_tol`` and no end-to-end cell is *different*; at any other
precision when no cell is *different* (what ``bench --strict`` requires).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Measurement, option

FP32_PROB_TOL = 1e-3
TIE = 1e-3


@dataclass
class CompareRunsConfig:
    reference: str = option("", help="the reference run directory")
    run: tuple[str, ...] = option((), help="a run directory compared with the reference (repeatable)")
    tolerance: float = option(1.0, min=0.0, help="equivalence margin, percentage points")
    tie: float = option(TIE, min=0.0, help="labels whose top-two probabilities are closer are near ties")
    fp32_prob_tol: float = option(FP32_PROB_TOL, min=0.0, help="the largest |Δ probability| at fp32")


@dataclass
class CompareRunsPayload:
    reference: str | None = None
    runs: dict[str, dict[str, Any]] | None = None  # run directory -> compare()'s figures, failures and verdict
    extra: dict[str, Any] = field(default_factory=dict)


def read_records(run: Path) -> tuple[list[dict[str, Any]], bool]:
    """The records of a run directory's samples.jsonl, and whether its last line was torn (a run stopped while it
    wrote: that line is left out; a bad line anywhere else is an error)."""
    lines = [ln for ln in (Path(run) / "samples.jsonl").read_text().splitlines() if ln.strip()]
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                return out, True
            raise ValueError(f"{run}/samples.jsonl: line {i + 1} is not JSON") from None
    return out, False


def run_precision(run: Path) -> str:
    try:
        cfg = json.loads((Path(run) / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return "?"
    eng = cfg.get("engine") or {}
    gen, clf = eng.get("generator_precision"), eng.get("classifier_precision")
    return gen if gen == clf else f"{clf}/{gen}"


def compare(ref: list[dict[str, Any]], run: list[dict[str, Any]], tolerance: float = 1.0, tie: float = TIE,
            prob_tol: float = FP32_PROB_TOL, precision: str = "fp32") -> dict[str, Any]:
    from breaknli_fast.bench import parity as par
    from breaknli_fast.bench.types import Parity, to_json

    a = {(r["mode"], r["id"]): r for r in ref}
    b = {(r["mode"], r["id"]): r for r in run}
    both = [k for k in a if k in b]
    labels = [a[k].get("yhat") == b[k].get("yhat") for k in both]
    clear = []
    diffs = []
    for k in both:
        pa, pb = a[k].get("ph_probs") or {}, b[k].get("ph_probs") or {}
        top = sorted(pa.values(), reverse=True)
        if len(top) < 2 or top[0] - top[1] > tie:
            clear.append(a[k].get("yhat") == b[k].get("yhat"))
        diffs += [abs(float(pa[x]) - float(pb[x])) for x in pa if x in pb]
    gen = [(a[k]["generated"], b[k]["generated"]) for k in both if "generated" in a[k] and "generated" in b[k]]
    e2e = Parity(end_to_end=par.end_to_end_parity(ref, run))
    verdicts = to_json(par.add_verdicts(e2e, tolerance))
    out = {
        "examples_both": len(both), "only_reference": len(a) - len(both), "only_run": len(b) - len(both),
        "precision": precision,
        "classifier": {"label_agreement_pct": 100.0 * sum(labels) / len(labels) if labels else None,
                       "label_agreement_outside_near_ties_pct": 100.0 * sum(clear) / len(clear) if clear else None,
                       "near_ties": len(both) - len(clear), "tie_gap": tie,
                       "max_abs_prob_diff": max(diffs) if diffs else None},
        "generator": {"examples": len(gen),
                      "identical_samples_pct": 100.0 * sum(x == y for x, y in gen) / len(gen) if gen else None},
        "end_to_end": to_json(e2e.end_to_end), "verdicts": verdicts, "tolerance_pp": tolerance,
    }
    fails = []
    if verdicts["different"]:
        fails.append(f"{verdicts['different']} end-to-end cell(s) different (tolerance {tolerance} pp)")
    if precision == "fp32":
        c = out["classifier"]
        if c["label_agreement_outside_near_ties_pct"] not in (None, 100.0):
            fails.append(f"labels outside near ties agree on {c['label_agreement_outside_near_ties_pct']:.2f} %")
        if c["max_abs_prob_diff"] is not None and c["max_abs_prob_diff"] > prob_tol:
            fails.append(f"max |Δ probability| {c['max_abs_prob_diff']:.2e} > {prob_tol:.0e}")
    if not both:
        fails.append("no example in common with the reference")
    out["failures"] = fails
    out["passed"] = not fails
    return out


def summary_line(name: str, res: dict[str, Any]) -> str:
    c, g, v = res["classifier"], res["generator"], res["verdicts"]

    def pct(x: Any) -> str:
        return "–" if x is None else f"{x:.2f} %"

    return (f"{name} ({res['precision']}): {'PASS' if res['passed'] else 'FAIL'}; {res['examples_both']} examples; "
            f"labels {pct(c['label_agreement_pct'])} ({c['near_ties']} near ties), max |Δp| "
            f"{'–' if c['max_abs_prob_diff'] is None else format(c['max_abs_prob_diff'], '.2e')}; identical samples "
            f"{pct(g['identical_samples_pct'])}; cells {v['equivalent']} equivalent / {v['inconclusive']} inconclusive "
            f"/ {v['different']} different" + (f" -- {'; '.join(res['failures'])}" if res["failures"] else ""))


class CompareRuns(Measurement):
    name = "compare-runs"
    summary = "parity of run directories with a reference run on the same examples and seeds"
    kind = "compare_runs"
    config_class = CompareRunsConfig
    payload_class = CompareRunsPayload
    legacy_scripts = ("compare_runs.py",)

    def run(self, config: CompareRunsConfig, recorder: Any) -> CompareRunsPayload:
        """Every run against the reference (one line each on the terminal); a run that does not pass is a verdict
        in the payload, not a failure of the measurement."""
        if not config.reference or not config.run:
            raise UserError("compare-runs: name the reference (--reference DIR) and at least one --run DIR")
        try:
            ref, torn = read_records(Path(config.reference))
            loaded = {run: read_records(Path(run)) for run in config.run}
        except (OSError, ValueError) as e:
            raise UserError(str(e)) from None
        results = {}
        for run, (records, run_torn) in loaded.items():
            res = compare(ref, records, config.tolerance, config.tie, config.fp32_prob_tol, run_precision(Path(run)))
            res["torn_last_line"] = {"reference": torn, "run": run_torn}
            results[str(run)] = res
            print(summary_line(Path(run).name, res))
        return CompareRunsPayload(reference=str(config.reference), runs=results)
