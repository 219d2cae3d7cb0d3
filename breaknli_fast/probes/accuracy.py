"""Plain accuracy of the classifier on (p, h): the baseline every other probe is read against, and with
``--by`` (automatic on TaxiNLI) the per-category accuracy of the reasoning-category studies.

Units: one group per gold label. Per example: M(p, h), its probabilities by label name, correct or not.
Summary: accuracy overall and per gold label with Wilson 95 % CIs, and the confusion matrix.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Sequence

from breaknli_fast.data.labels import LABELS, SHORT
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.stats import rate_cell
from breaknli_fast.probes.base import Metric, Probe, StageTimes, StudyContext


@dataclass
class AccuracyConfig:
    seed: int = 0  # no randomness; kept so that run directories are named like every probe's
    chunk_size: int = 256

    def __post_init__(self) -> None:
        if self.chunk_size < 1:
            raise ValueError("--chunk-size must be at least 1")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class AccuracyProbe(Probe):
    name = "accuracy"
    record_fields = ("id", "premise", "hypothesis", "gold", "yhat", "correct")
    summary = "M on (p, h), with --by per category"
    config_class = AccuracyConfig
    roles = ("classifier",)

    def __init__(self, config: AccuracyConfig | None = None):
        self.cfg = self.config_of(config)  # None, a AccuracyConfig or a dict of its fields
        self.chunk_size = self.cfg.chunk_size
        self.seed = self.cfg.seed

    def identity(self) -> dict[str, Any]:
        return {"accuracy": self.cfg.to_dict()}

    def new_times(self) -> StageTimes:
        return StageTimes(seconds={"classify": 0.0}, pairs={"classify": 0})

    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        return [(lab, [ex for ex in data.examples if ex.label == lab]) for lab in LABELS]

    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        t0 = time.perf_counter()
        pred = ctx.models.classifier.classify([(ex.premise, ex.hypothesis) for ex in chunk])
        ctx.times.add("classify", time.perf_counter() - t0, len(chunk))
        probs = pred.probs
        return [{"group": group, "id": ex.id, "line": ex.line, "premise": ex.premise, "hypothesis": ex.hypothesis,
                 "gold": ex.label, "yhat": lab, "correct": lab == ex.label,
                 "probs": {name: round(float(probs[i, j]), 6) for j, name in enumerate(LABELS)}}
                for i, (ex, lab) in enumerate(zip(chunk, pred.labels))]

    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        confusion = {g: {p: sum(1 for r in records if r["gold"] == g and r["yhat"] == p) for p in LABELS}
                     for g in LABELS}
        return {"accuracy": rate_cell([r["correct"] for r in records]),
                "per_label": {lab: rate_cell([r["correct"] for r in records if r["gold"] == lab]) for lab in LABELS},
                "confusion": confusion, "skips": data.skips.to_dict()}

    def headline(self, records: Sequence[dict[str, Any]], examples: Sequence[Example]) -> dict[str, Any]:
        return {"rates": {"accuracy (p, h)": rate_cell([r["correct"] for r in records])},
                "counts": {"examples": len(records)}}

    def headline_metrics(self) -> list[Metric]:
        return [Metric("accuracy (p, h)", "share", "M(p, h) = gold")]

    def per_example(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        return {"accuracy (p, h)": {r["id"]: float(r["correct"]) for r in records}}

    def predictions(self, record: dict[str, Any]) -> dict[str, str]:
        return {"(p, h)": record["yhat"]}

    def markdown(self, report: dict[str, Any]) -> str:
        a = report["accuracy"]
        lines = ["# Accuracy on (p, h)", "",
                 f"- classifier: `{report['models']['classifier']}`, engine `{report['engine']}`, dataset "
                 f"`{report['dataset']}`", "",
                 "| gold | n | accuracy % [95 % CI] |", "|---|---|---|"]
        for lab, c in [*report["per_label"].items(), ("all", a)]:
            if c["n"]:
                lines.append(f"| {lab} | {c['n']} | {c['rate']:.2f} [{c['ci'][0]:.2f}, {c['ci'][1]:.2f}] |")
        lines += ["", "Confusion (rows: gold, columns: predicted):", "",
                  "| gold \\ predicted | " + " | ".join(SHORT[p] for p in LABELS) + " |", "|---|---|---|---|"]
        for g, row in report["confusion"].items():
            lines.append(f"| {SHORT[g]} | " + " | ".join(str(row[p]) for p in LABELS) + " |")
        lines.append("")
        return "\n".join(lines)

    def console(self, report: dict[str, Any]) -> list[Any]:
        a = report["accuracy"]
        if not a["n"]:
            return ["no example classified"]
        per = ", ".join(f"{SHORT[lab]} {c['rate']:.1f} %" for lab, c in report["per_label"].items() if c["n"])
        return [f"accuracy on (p, h): [bold]{a['rate']:.2f} %[/] [{a['ci'][0]:.2f}, {a['ci'][1]:.2f}] "
                f"(n={a['n']}; {per})"]

    @classmethod
    def comparison(cls, report: dict[str, Any]) -> dict[str, Any]:
        rows = cls.metric_rows(report.get("per_label", {}), {lab: f"gold {lab}" for lab in LABELS})
        rows += cls.metric_rows(report, {"accuracy": "all"})
        return {"accuracy": report.get("accuracy"), "blocks": [("Accuracy on (p, h)", rows)]}

    @classmethod
    def example_view(cls, record: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
        probs = record.get("probs") or {}
        ok = bool(record.get("correct"))
        return {"group": record.get("group"), "yhat": record.get("yhat"), "gold": record.get("gold"),
                "verdict": "correct" if ok else "wrong", "verdict_label": "correct" if ok else "wrong",
                "premise": record.get("premise", ""), "hypothesis": record.get("hypothesis", ""),
                "why": f"M(p, h) = {record.get('yhat')}, gold {record.get('gold')}.",
                "sections": [{"title": "M(p, h)", "kind": "table", "columns": ["pair", "M", "P(E)", "P(N)", "P(C)", "gold"],
                              "rows": [["(p, h)", record.get("yhat"), *[probs.get(lab) for lab in LABELS],
                                        record.get("gold")]], "marks": ["ok" if ok else "bad"]}]}
