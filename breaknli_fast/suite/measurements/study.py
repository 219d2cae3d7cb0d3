"""What a study measures about the models (kind ``study``): one probe on one engine through the study entry point,
its headline rates and its breakdown by dataset columns (95 % CIs).

``by`` defaults to the dataset's own breakdown (aenli: phenomenon, kinship: k, TaxiNLI: its categories). The
figures describe the shipped mini models on that data (torch fp32 by default, the reference), not an engine's
speed: the bench measurement compares engines.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from typing import Any, Optional

from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import dig, f, model_label, of_kind, table
from breaknli_fast.suite.result import ResultFile

PROBES = ("breaknli", "accuracy")


@dataclass
class StudyConfig:
    probe: str = option("breaknli", help="breaknli or accuracy")
    dataset: str = option("sample", help="the dataset (NAME[:N] for a synthetic corpus)")
    limit: int = option(0, min=0, help="examples (0: every one)")
    by: Optional[str] = option(None, help="comma-separated columns (default: the dataset's own breakdown)")
    engine: str = option("torch:fp32", help="ENGINE:PRECISION (default the torch fp32 reference)")
    classifier: str = option("mini-nli", help="the classifier")
    generator: str = option("mini-t5", help="the generator")
    seed: int = option(0, help="the probe's seed")
    threads: Optional[int] = option(None, min=1, help="CPU threads")


@dataclass
class StudyPayload:
    probe: str | None = None
    dataset: str | None = None
    examples: int | None = None
    skips: dict[str, Any] | None = None
    seed: int | None = None
    models: dict[str, Any] | None = None
    engine: Any = None
    notes: list[str] | None = None
    headline: dict[str, Any] | None = None  # rates: metric -> {n, rate, ci}; counts
    breakdown: dict[str, Any] | None = None  # column -> {kind, groups: [{group, value, examples, small, rates}]}
    loop_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Study(Measurement):
    name = "study"
    summary = "what a study measures: a probe on one engine, headline rates and the dataset's breakdown"
    kind = "study"
    config_class = StudyConfig
    payload_class = StudyPayload
    legacy_scripts = ("bench_study.py",)

    def engines(self, config: StudyConfig) -> list[str]:
        return [config.engine.split(":")[0]]

    def run(self, config: StudyConfig, recorder: Any) -> StudyPayload:
        from breaknli_fast.probes.accuracy import AccuracyConfig
        from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
        from breaknli_fast.study import run_study
        from breaknli_fast.study.loading import EngineConfig

        if config.probe not in PROBES:
            raise UserError(f"probe {config.probe!r}: one of {', '.join(PROBES)}")
        engine, precision = (config.engine.split(":") + ["fp32"])[:2]
        probe_config = (BreakNLIConfig(seed=config.seed) if config.probe == "breaknli"
                        else AccuracyConfig(seed=config.seed))
        res = run_study(config.probe, probe_config, dataset=config.dataset, limit=config.limit or None,
                        classifier=config.classifier, generator=config.generator,
                        engine=EngineConfig(engine=engine, precision=precision, threads=config.threads), by=config.by)
        headline = res.probe.headline(res.records, res.data.examples)
        for name, r in headline["rates"].items():
            print(f"{name:>28}: {r['rate'] if r['rate'] is None else round(r['rate'], 1)} (n={r['n']})",
                  file=sys.stderr)
        return StudyPayload(probe=config.probe, dataset=config.dataset, examples=len(res.data.examples),
                            skips=res.data.skips.to_dict(), seed=config.seed,
                            models={"classifier": config.classifier,
                                    "generator": config.generator if config.probe == "breaknli" else None},
                            engine=res.report.get("engine"), notes=res.notes, headline=headline,
                            breakdown=res.report.get("breakdown") or {},
                            loop_s=res.report["throughput"]["wall_seconds"])


def rate_ci(r: Any) -> str:
    if not r or r.get("rate") is None:
        return "–"
    ci = r.get("ci") or [None, None]
    return f"{r['rate']:.1f} [{f(ci[0], '.1f')}, {f(ci[1], '.1f')}]"


def study_title(doc: ResultFile) -> str:
    p: StudyPayload = doc.payload
    return (f"{p.probe} on {p.dataset} ({p.examples} examples), classifier "
            f"{model_label(dig(p, 'models', 'classifier'))}")


def study(doc: ResultFile) -> str:
    """The headline rates, then one table per breakdown column: each group's examples and rates with CIs."""
    p: StudyPayload = doc.payload
    rates = dig(p, "headline", "rates") or {}
    out = [f"Engine `{p.engine}`, seed {p.seed}, generator {dig(p, 'models', 'generator') or '–'}; "
           f"loop {f(p.loop_s, '.0f')} s. Rates in %, 95 % CI in brackets, n = examples the rate is over.", "",
           table(["metric", "rate % [95 % CI]", "n"], [[m, rate_ci(r), r.get("n")] for m, r in rates.items()])]
    for column, b in (p.breakdown or {}).items():
        groups = b.get("groups") or []
        metrics = list(dict.fromkeys(m for g in groups for m in (g.get("rates") or {})))
        rows = [[g.get("value"), str(g.get("examples")) + (" (few)" if metrics and metrics[0] in (g.get("small") or [])
                                                          else "")]
                + [rate_ci((g.get("rates") or {}).get(m)) + f" n={dig(g, 'rates', m, 'n')}" for m in metrics]
                for g in sorted(groups, key=lambda g: -(dig(g, "rates", metrics[0], "rate") or -1) if metrics else 0)]
        out += ["", f"By `{column}` (groups sorted by {metrics[0] if metrics else 'value'}; \"few\": too few examples "
                "for a narrow CI):", "", table([column, "examples"] + metrics, rows)]
    return "\n".join(out)


Study.sections = (
    Section("2d/studies", "Synthetic corpora with computed labels (aenli, kinship)", "a study of a synthetic corpus",
            of_kind("study"), 10, render=study, file_title=study_title),
)
