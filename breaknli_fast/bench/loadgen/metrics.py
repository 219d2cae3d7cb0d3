"""Every figure of a scenario row, defined once: its key in bench.json, its titles in the Markdown and the terminal
table, its format, and which way is better (``--compare``'s B / A ratio). The JSON rows are built through
:func:`values`, the renderers and ``--compare`` read :data:`METRICS`, and bench.json carries the definitions
(``scenario_metrics``) so that a reader of the file alone (the suite's renderers, breaknli_fast.suite) renders them alike."""

from __future__ import annotations

import typing
from dataclasses import asdict, dataclass, replace

Scalar = typing.Union[str, int, float, bool, None]  # a metric's value (what Metric.text formats), a LoadGen setting


@dataclass(frozen=True)
class Metric:
    key: str
    title: str  # the Markdown table and --compare
    short: str  # the terminal table
    fmt: str = ".2f"  # a format spec; "s": text; "tier": PASS / FAIL
    better: str | None = None  # "lower" or "higher": --compare gives B / A; None: no ratio
    terminal: bool = False  # a column of the terminal table
    doc: str = ""
    group: str = "latency"  # the Markdown table it is a column of: latency, accuracy or edge

    def text(self, value: Scalar) -> str:
        if value is None:
            return "–"
        if self.fmt == "tier":
            return "PASS" if value else "FAIL"
        if self.fmt == "s":
            return str(value)
        try:
            return format(value, self.fmt)
        except (TypeError, ValueError):
            return str(value)

    def to_dict(self) -> dict[str, Scalar]:
        return asdict(self)


LAT = "LoadGen's percentile of the latency from issue to completion: per sample (SingleStream, Server), per query " \
      "of 8 samples (MultiStream), of the one query holding every sample (Offline)"
TTFT = "LoadGen's time to first token (generator): from issue until every candidate has its first token"
TPOT = ("LoadGen's time per output token: (latency - TTFT) / (tokens - 1), tokens = all K candidates' tokens "
        "(decoded together, so it is not the gap between two tokens of one candidate)")
_DEFINED: tuple[Metric, ...] = (
    Metric("result", "result", "result", "s", terminal=True, doc="LoadGen's VALID / INVALID (reasons below the table)"),
    Metric("early_stop_ms", "early-stopping estimate ms", "ES ms", ".2f", "lower", terminal=True,
           doc="the scenario's reported latency: LoadGen's early-stopping estimate of its percentile (SingleStream "
               "p90, MultiStream and Server p99), the bound it guarantees from this many queries; \"too few "
               "queries\" below the count it needs (64 for p90, 662 for p99). The raw percentiles stand beside it"),
    Metric("p50_ms", "p50 ms", "p50", ".2f", "lower", doc=LAT),
    Metric("p90_ms", "p90 ms", "p90 ms", ".2f", "lower", terminal=True, doc=LAT),
    Metric("p99_ms", "p99 ms", "p99", ".2f", "lower", doc=LAT),
    Metric("samples_per_s", "samples/s", "samples/s", ".1f", "higher", terminal=True,
           doc="LoadGen's throughput: QPS (SingleStream), samples/s (Offline), completed samples/s (Server); none for "
               "MultiStream, which LoadGen reports by latency"),
    Metric("ttft_p50_ms", "TTFT p50 ms", "TTFT p50", ".2f", "lower", doc=TTFT),
    Metric("ttft_p90_ms", "TTFT p90 ms", "TTFT p90", ".2f", "lower", terminal=True, doc=TTFT),
    Metric("tpot_p50_ms", "TPOT p50 ms", "TPOT p50", ".3f", "lower", doc=TPOT),
    Metric("tpot_p90_ms", "TPOT p90 ms", "TPOT p90", ".3f", "lower", terminal=True, doc=TPOT),
    Metric("tokens_per_s", "tokens/s", "tokens/s", ".0f", "higher", doc="LoadGen's completed tokens per second"),
    Metric("queries", "queries", "queries", "d", doc="queries LoadGen counted in the result"),
    Metric("rounds", "rounds", "rounds", "d", doc="performance runs of the row (--repeats; engines in turn, A B C A B "
                                                   "C): the latency figures are the median round's"),
    Metric("spread_pct", "spread across rounds %", "spread %", ".1f", "lower",
           doc="(largest - smallest) / median of the scenario's headline figure across the rounds (SingleStream / "
               "MultiStream: the early-stopping estimate, else the percentile; Offline / Server: samples/s)"),
    Metric("cv_pct", "service-time CV %", "CV %", ".1f", "lower",
           doc="coefficient of variation of the engine's time per query (LoadGen has no dispersion figure); "
               "a warning above --cv-threshold (trtexec warns at 1 %)"),
    Metric("score_pct", "accuracy score %", "score %", ".2f", "higher",
           doc="the role's score on the AccuracyOnly pass (docs/latency.md)"),
    Metric("of_reference_pct", "accuracy, % of fp32", "% fp32", ".2f", "higher", terminal=True,
           doc="the score as a percentage of the torch fp32 reference's on the same samples"),
    Metric("tier_99", "99 % tier", "99%", "tier", doc="at least 99 % of the reference (MLPerf's tier)"),
    Metric("tier_999", "99.9 % tier", "99.9%", "tier", doc="at least 99.9 % of the reference (MLPerf's high tier)"),
    Metric("tier", "tier reached", "tier", "s", terminal=True, doc="the highest tier passed: 99.9 %, 99 % or none"),
    Metric("label_agreement_pct", "label agreement %", "agree %", ".2f", "higher",
           doc="classifier: samples with the reference's label"),
    Metric("verdict", "paired verdict", "verdict", "s",
           doc="the score's paired difference from the reference: equivalent / different / inconclusive"),
    Metric("export_s", "export s", "export s", ".2f", "lower",
           doc="cold start: building the engine's model (export, conversion) or checking its cached copy"),
    Metric("load_s", "load + session s", "load s", ".2f", "lower", doc="cold start: loading and session creation"),
    Metric("first_inference_s", "first inference s", "first s", ".3f", "lower", doc="cold start: the first sample"),
    Metric("size_mib", "size on disk MiB", "MiB", ".1f", "lower", doc="the files the engine runs"),
    Metric("peak_rss_mib", "peak RSS MiB", "RSS", ".0f", "lower", doc="the process's peak resident memory in the run"),
    Metric("load_avg", "load average", "load", ".2f", doc="the machine's 1-minute load average at the end of the run"),
    Metric("energy_mj_per_query", "energy mJ / query", "mJ/q", ".1f", "lower",
           doc="energy of the performance run per LoadGen query (MLPerf Power's SingleStream / MultiStream figure; "
               "an Offline query holds every sample), from the hardware's own counters: RAPL package and dram zones, "
               "NVML's total-energy counter on an NVIDIA GPU; \"not measured\" with the reason where none is "
               "readable, never an estimate. The idle power stands above the table"),
    Metric("avg_power_w", "average power W", "W", ".1f", "lower",
           doc="the counters' energy over the performance run's duration (MLPerf Power's Offline / Server figure)"),
)
ACCURACY = ("score_pct", "of_reference_pct", "tier_99", "tier_999", "tier", "label_agreement_pct", "verdict")
EDGE = ("export_s", "load_s", "first_inference_s", "size_mib", "peak_rss_mib", "load_avg")
ENERGY = ("energy_mj_per_query", "avg_power_w")
METRICS: tuple[Metric, ...] = tuple(
    replace(m, group="accuracy" if m.key in ACCURACY else "edge" if m.key in EDGE else "energy" if m.key in ENERGY
            else "latency") for m in _DEFINED)
BY_KEY = {m.key: m for m in METRICS}


def values(**given: Scalar) -> dict[str, Scalar]:
    """A row's metrics: every defined key (None where not given); an undefined key is a programming error."""
    unknown = sorted(set(given) - set(BY_KEY))
    if unknown:
        raise KeyError(f"undefined scenario metrics: {', '.join(unknown)}")
    return {m.key: given.get(m.key) for m in METRICS}


ES_QUERIES = {90.0: 64, 99.0: 662}  # the fewest queries from which LoadGen's early stopping bounds the percentile


def too_few_queries(queries: int | None, needed: int | None) -> str:
    """The early-stopping cell of a run too short for the estimate."""
    return f"too few queries ({queries if queries is not None else '?'} of {needed or '?'})"


def tier_reached(tier_99: bool | None, tier_999: bool | None) -> str | None:
    if tier_99 is None:
        return None
    return "99.9 %" if tier_999 else "99 %" if tier_99 else "none"


def definitions() -> list[dict[str, Scalar]]:
    """The definitions as bench.json carries them (``scenario_metrics``)."""
    return [m.to_dict() for m in METRICS]
