"""What a scenario bench (``bench --scenario``) measures, as types: built once by :mod:`.runner`, serialised by
:func:`breaknli_fast.bench.types.to_json`, read back by :func:`breaknli_fast.bench.types.from_json` (which reads the
earlier schema's files too), and rendered -- Markdown, the terminal, ``--compare`` -- from the same objects
(:mod:`.report`).

The layout of a scenario ``bench.json`` is these classes' fields, in order (``kind: "scenarios"``, schema
``breaknli-fast-bench/3``, the layout ``breaknli-fast-bench/2`` had); a field marked ``OMIT`` is left out while it
is None, and the keys a class does not declare are kept in its ``extra``, so a file read and written again keeps
every key.

- :class:`ScenarioReport`: the whole bench (environment, rules, data, models, workload, metric definitions, rows,
  engines, failures);
- :class:`ScenarioEngine`: one ``--engines`` entry as it ran, with its :class:`ColdStart` per role;
- :class:`ScenarioRow`: one engine x role x scenario: the metric registry's values (:mod:`.metrics`), LoadGen's
  reasons and warnings, :class:`EarlyStopping`, :class:`Retry`, :class:`RowLogs`, :class:`Calibration`, its
  :class:`ScenarioRound` list, the accuracy tier (:class:`AccuracyGate` with its :class:`PairedDiff`), its
  compliance tests (:class:`ComplianceResult`, TEST01's :class:`OutputsMatch`, the generator tests'
  :class:`ComplianceCheck`) and its :class:`RowEnergy`; the bench's :class:`EnergyInfo`;
- :class:`RunResult`: one LoadGen run as its logs say (:func:`.logs.read_run`), from which the rows are built;
- :class:`MetricCell`: one metric of a row in two benches (``--compare``'s rows, :func:`.report.compare_rows`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from breaknli_fast.bench.loadgen.metrics import METRICS, Metric, Scalar
from breaknli_fast.bench.types import JSON, OMIT, SCHEMA, HeadlineParity, from_json

__all__ = ["Scalar"]  # with every class below


# -- one LoadGen run, as its logs say ---------------------------------------------------------------------------

@dataclass
class RunResult:
    """One LoadGen run from its log folder (:func:`.logs.read_run`): LoadGen's validity and reasons, percentiles in
    milliseconds (per query in MultiStream), early-stopping estimates, throughput, TTFT / TPOT, the effective
    settings (``effective_`` left out) and LoadGen's errors and warnings."""

    validity: str | None = None
    reasons: list[str] = field(default_factory=list)
    queries: int | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    mean_ms: float | None = None
    early_stop_ms: float | None = None
    early_stop_needed: int | None = None  # the queries LoadGen said its estimate needs, where it printed none
    samples_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    ttft_p99_ms: float | None = None
    ttft_early_stop_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tpot_p99_ms: float | None = None
    tpot_early_stop_ms: float | None = None
    tokens_per_s: float | None = None
    settings: dict[str, Scalar] = field(default_factory=dict)
    loadgen_version: str | None = None
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


# -- a row's parts ----------------------------------------------------------------------------------------------

@dataclass
class ScenarioRound:
    """One performance run of a row (``--repeats``: one per round; the row's latency figures are the median
    round's)."""

    result: str | None = None
    p50_ms: float | None = None
    p90_ms: float | None = None
    p99_ms: float | None = None
    early_stop_ms: float | None = None
    samples_per_s: float | None = None
    ttft_p50_ms: float | None = None
    ttft_p90_ms: float | None = None
    tpot_p50_ms: float | None = None
    tpot_p90_ms: float | None = None
    tokens_per_s: float | None = None
    queries: int | None = None
    cv_pct: float | None = None
    energy_mj_per_query: float | None = field(default=None, metadata=OMIT)
    avg_power_w: float | None = field(default=None, metadata=OMIT)
    reasons: list[str] = field(default_factory=list)
    log: str | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class EarlyStopping:
    """LoadGen's early-stopping estimates of the row's percentile: latency, TTFT, TPOT (ms)."""

    latency_ms: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class Retry:
    """The second performance run LoadGen advised: why the first fell short, and the expected rate or latency the
    second ran with."""

    first_reasons: list[str] = field(default_factory=list)
    expected_qps: float | None = field(default=None, metadata=OMIT)
    expected_latency_ms: float | None = field(default=None, metadata=OMIT)
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class RowLogs:
    """The row's LoadGen log folders, relative to the bench folder."""

    performance: str = ""
    accuracy: str = ""
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class Calibration:
    """What the calibration measured: one sample's latency, the engine's own batch rate; and the untimed warm-up
    before it (library samples run one at a time, and its seconds)."""

    latency_ms: float | None = None
    batch_samples_per_s: float | None = None
    warmup_samples: int | None = None
    warmup_s: float | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class PairedDiff:
    """The paired difference (engine - reference, percentage points) of the per-sample scores, its 95 % interval
    and equivalence verdict (:func:`breaknli_fast.stats.paired_diff`, :func:`breaknli_fast.stats.equivalence`)."""

    n: int = 0
    a: float | None = field(default=None, metadata=OMIT)
    b: float | None = field(default=None, metadata=OMIT)
    diff: float | None = None
    method: str | None = None
    up: int | None = field(default=None, metadata=OMIT)
    down: int | None = field(default=None, metadata=OMIT)
    sd: float | None = field(default=None, metadata=OMIT)
    ci: list[float] | None = None
    verdict: str | None = None
    n_needed: int | None = None
    too_small: bool | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class AccuracyGate:
    """The accuracy tier of a row (:func:`.accuracy.gate`): its score on the AccuracyOnly pass, the reference's,
    the percentage of the reference, MLPerf's tiers (``"99"``, ``"99.9"``), the paired verdict; the generator's and
    the study unit's breakage rates against the reference's (:func:`.accuracy.records_parity`)."""

    score_pct: float | None = None
    reference_pct: float | None = None
    of_reference_pct: float | None = None
    n: int = 0
    tiers: dict[str, bool | None] = field(default_factory=dict)
    paired: PairedDiff | None = None
    breakage: HeadlineParity | None = field(default=None, metadata=OMIT)  # agreement.probe_parity
    extra: dict[str, JSON] = field(default_factory=dict)

    def tier(self, name: str) -> bool | None:
        return self.tiers.get(name)


@dataclass
class OutputsMatch:
    """TEST01's first check: the responses LoadGen logged in performance mode against the accuracy run's."""

    logged: int = 0
    compared: int = 0
    equal: int = 0
    first_different_sample: int | None = None
    passed: bool = False
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ComplianceCheck:
    """One check of a generator's compliance test (TEST06, TEST07, TEST09): what it checks, on how many responses or
    samples, how many fail (the first failing sample), the figure and its bar where it has one."""

    check: str = ""
    compared: int | None = None
    failing: int | None = None
    first_failing_sample: int | None = field(default=None, metadata=OMIT)
    value: float | None = field(default=None, metadata=OMIT)
    reference: float | None = field(default=None, metadata=OMIT)
    note: str | None = field(default=None, metadata=OMIT)
    passed: bool = False
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ComplianceResult:
    """One MLPerf compliance test of a row (:func:`.compliance.judge`): PASS / FAIL, what failed (``outputs``,
    ``speed``, ``LoadGen``) and why; ``retired``: when the rules dropped the test (TEST05)."""

    test: str = ""
    validity: str | None = None
    speed_ratio: float | None = None
    audit_config_read: bool = False
    seeds: dict[str, int] | None = field(default=None, metadata=OMIT)  # TEST05
    outputs: OutputsMatch | None = field(default=None, metadata=OMIT)  # TEST01
    checks: list[ComplianceCheck] | None = field(default=None, metadata=OMIT)  # TEST06, TEST07, TEST09
    passed: bool = False
    result: str = ""
    why: list[str] = field(default_factory=list)
    failed: list[str] | None = field(default=None, metadata=OMIT)  # outputs, speed, LoadGen
    retired: str | None = field(default=None, metadata=OMIT)
    retry: Retry | None = field(default=None, metadata=OMIT)  # the second run LoadGen advised
    # a test failed on speed alone runs once more (its outputs passed), after a performance run made for it: the first
    # run's speed against the row's performance run, its log folder, and the performance run the second run was judged
    # against (its log folder, validity and headline figure); the figures above are the second run's
    first_speed_ratio: float | None = field(default=None, metadata=OMIT)
    first_log: str | None = field(default=None, metadata=OMIT)
    rerun_performance: dict[str, JSON] | None = field(default=None, metadata=OMIT)
    log: str | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class RowEnergy:
    """What the energy counters measured over a row's performance run (:mod:`breaknli_fast.bench.energy`; the first
    round's with ``--repeats``, whose rounds keep their own figures): joules in all and per counter, over the run's
    seconds, with its queries and samples."""

    joules: float | None = None
    seconds: float | None = None
    queries: int | None = None
    samples: int | None = None
    per_counter: dict[str, float] = field(default_factory=dict)
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ScenarioRow:
    """One engine x role x scenario of a scenario bench."""

    engine: str = ""
    role: str = ""
    scenario: str = ""
    reference: bool = False
    metrics: dict[str, Scalar] = field(default_factory=dict)  # metrics.values(): every defined key
    reasons: list[str] = field(default_factory=list)  # why LoadGen judged it INVALID
    warnings: list[str] = field(default_factory=list)
    early_stopping: EarlyStopping | None = None
    token_latencies: str | None = None  # how the engine tells its first token (None: no TTFT / TPOT)
    retry: Retry | None = None
    settings: dict[str, Scalar] | None = None  # LoadGen's effective settings of the performance run
    seeds: dict[str, int] | None = None
    accuracy_samples: int | None = None
    logs: RowLogs | None = None
    calibration: Calibration | None = None
    compliance: dict[str, ComplianceResult] | None = None
    rounds: list[ScenarioRound] | None = field(default=None, metadata=OMIT)
    median_round: int | None = field(default=None, metadata=OMIT)  # 1-based, with several rounds
    accuracy: AccuracyGate | None = field(default=None, metadata=OMIT)  # the accuracy tier (not where not scored)
    energy: RowEnergy | None = field(default=None, metadata=OMIT)  # where a counter was readable
    extra: dict[str, JSON] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.engine, self.role, self.scenario)

    @property
    def where(self) -> str:
        return f"{self.engine} {self.role} {self.scenario}"

    def metric(self, key: str) -> Scalar:
        return self.metrics.get(key)


@dataclass
class MetricCell:
    """One metric of a row in two benches (``--compare``): A, B, and B / A where the metric has a direction."""

    a: Scalar = None
    b: Scalar = None
    ratio_b_over_a: float | None = None


# -- engines, the whole bench -----------------------------------------------------------------------------------

@dataclass
class ColdStart:
    """A role's cold start: building or checking the export, loading and session creation (s); its files (MiB)."""

    export_s: float | None = None
    load_s: float | None = None
    size_mib: float | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ScenarioEngine:
    """One ``--engines`` entry of a scenario bench, as it ran (``status`` ok, skipped or failed)."""

    label: str = ""
    engine: str = ""
    precision: str = ""
    reference: bool = False
    spec: dict[str, JSON] = field(default_factory=dict)  # the --engines entry (BenchEngine.to_dict)
    status: str = "ok"
    reason: str | None = None
    load_average_start: float | None = None
    cold_start: dict[str, ColdStart] = field(default_factory=dict)  # role -> its cold start
    info: dict[str, dict[str, JSON]] = field(default_factory=dict)  # role -> what the loaded engine says
    load_average_end: float | None = None
    extra: dict[str, JSON] = field(default_factory=dict)

    @property
    def ran(self) -> bool:
        return self.status == "ok"


@dataclass
class LoadGenInfo:
    version: str | None = None
    mlperf_rules: bool | None = None
    rules: str | None = None
    compliance_rules: str | None = field(default=None, metadata=OMIT)  # the rules the compliance tests follow
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class EnergyInfo:
    """How energy was measured in a scenario bench, or why not: the counters (``source``), the idle power measured
    before the engines ran, and each reason a counter is missing (``why_not``: the whole reason where nothing was
    readable)."""

    measured: bool = False
    source: str | None = None
    why_not: str | None = None
    idle_w: float | None = None
    idle_s: float | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ScenarioSeeds:
    loadgen: dict[str, int] | None = None  # LoadGen's seeds of sample order and schedule
    probe: int | None = None
    per_sample: str | None = None
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class DataInfo:
    name: str | None = None
    split: str | None = None
    limit: int | None = None
    source: str | None = None
    examples: int | None = None
    skips: dict[str, JSON] | None = None  # data.loaders' Skips.to_dict
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ModelsInfo:
    classifier: str | None = None
    generator: str | None = None
    random_weights: dict[str, JSON] | None = None  # role -> the random-weights model made for it
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class WorkloadInfo:
    classifier_samples: int | None = None
    generator_samples: int | None = None
    k: int | None = None
    decoding: dict[str, JSON] | None = None  # the loop's Decoding.to_dict
    extra: dict[str, JSON] = field(default_factory=dict)


@dataclass
class ScenarioReport:
    """A whole scenario bench (``bench.json`` of ``bench --scenario``)."""

    schema: str = SCHEMA
    kind: str = "scenarios"
    command: str | None = None
    started: str | None = None
    finished: str | None = None
    environment: dict[str, JSON] = field(default_factory=dict)  # envinfo.environment
    probe: str = "breaknli"
    config: dict[str, JSON] = field(default_factory=dict)  # BenchConfig.to_dict, with the scenario settings
    loadgen: LoadGenInfo = field(default_factory=LoadGenInfo)
    seeds: ScenarioSeeds = field(default_factory=ScenarioSeeds)
    data: DataInfo = field(default_factory=DataInfo)
    models: ModelsInfo = field(default_factory=ModelsInfo)
    workload: WorkloadInfo = field(default_factory=WorkloadInfo)
    reference: str | None = None
    parity_meaningful: bool = True
    tolerance_pp: float | None = None
    accuracy_tier: float = 99.0
    cv_threshold_pct: float | None = None
    scenario_metrics: list[Metric] = field(default_factory=list)  # the definitions the rows were saved with
    energy: EnergyInfo | None = field(default=None, metadata=OMIT)
    scenarios: list[ScenarioRow] = field(default_factory=list)
    engines: list[ScenarioEngine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    passed: bool = False
    extra: dict[str, JSON] = field(default_factory=dict)

    def metric_definitions(self) -> tuple[Metric, ...]:
        """The metric definitions the bench was saved with (this version's where it carries none)."""
        return tuple(self.scenario_metrics) or METRICS

    def engine(self, label: str) -> ScenarioEngine:
        for e in self.engines:
            if e.label == label:
                return e
        raise KeyError(label)

    def row(self, engine: str, role: str, scenario: str) -> ScenarioRow:
        for r in self.scenarios:
            if r.key == (engine, role, scenario):
                return r
        raise KeyError((engine, role, scenario))


def read_report(data: ScenarioReport | Mapping[str, JSON]) -> ScenarioReport:
    """A scenario bench: the object itself, or read from its JSON (this schema or the earlier one)."""
    return data if isinstance(data, ScenarioReport) else from_json(ScenarioReport, dict(data))
