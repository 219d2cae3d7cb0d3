"""The scenarios, the roles and LoadGen's test settings of ``bench --scenario``.

Every run starts from LoadGen's own official settings (``mlperf.conf``, built into LoadGen: minimum duration
600 s, MultiStream 662 queries of 8 samples, the official seeds of sample order and schedule); without
``--mlperf-rules`` only the minimum duration is shortened (10 s by default), so a laptop run takes seconds and
LoadGen still judges it by its own rules: a run too short for its minimum query count or for the early-stopping
estimate is INVALID, with LoadGen's reasons.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from breaknli_fast.errors import UserError
# queries LoadGen prepares for the minimum duration, at most (it doubles them); the arrival rate and the duration
from breaknli_fast.limits import MAX_MIN_DURATION_S, MAX_PREPARED, MAX_TARGET_QPS


@dataclass(frozen=True)
class Scenario:
    name: str  # the command line's spelling
    loadgen: str  # LoadGen's TestScenario name
    percentile: float | None  # the latency percentile LoadGen reports as the result (None: throughput)
    what: str


SCENARIOS: dict[str, Scenario] = {s.name: s for s in (
    Scenario("single-stream", "SingleStream", 90.0, "one sample at a time, the next issued when the last completes; "
                                                    "result: 90th-percentile latency"),
    Scenario("multi-stream", "MultiStream", 99.0, "queries of 8 samples, the next issued when the last completes; "
                                                  "result: 99th-percentile query latency"),
    Scenario("offline", "Offline", None, "every sample in one query, batched as the engine likes; result: samples/s"),
    Scenario("server", "Server", 99.0, "single samples arriving at random (Poisson) at --target-qps; VALID only when "
                                       "the 99th-percentile latency stays within --target-latency-ms"),
)}
ROLES = ("classifier", "generator", "study")
ROLE_TITLES = {"classifier": "classifier", "generator": "generator", "study": "study unit"}
MODEL_NAME = "breaknli"  # the model name given to LoadGen's configuration (none of mlperf.conf's own: its defaults)
DEFAULT_MIN_DURATION_S = 10.0
LATENCY_MARGIN = 0.2  # expected latency = calibrated latency x this (SingleStream, MultiStream)
OFFLINE_MARGIN = 1.15  # expected Offline rate = calibrated rate x this


def _names(text: str, known: dict[str, Any] | tuple[str, ...], what: str, flag: str) -> tuple[str, ...]:
    aliases = {k.replace("-", ""): k for k in known}
    aliases.update({s.loadgen.lower(): s.name for s in SCENARIOS.values()} if what == "scenario" else {})
    aliases.update({"unit": "study", "study-unit": "study", "clf": "classifier", "gen": "generator"}
                   if what == "role" else {})
    out: list[str] = []
    for part in (p.strip().lower() for p in text.split(",")):
        if not part:
            continue
        name = part if part in known else aliases.get(part.replace("-", "").replace("_", ""))
        if name is None:
            raise UserError(f"{flag}: unknown {what} {part!r}; use {', '.join(known)}")
        if name not in out:
            out.append(name)
    if not out:
        raise UserError(f"{flag}: name at least one {what} ({', '.join(known)})")
    return tuple(out)


def parse_scenarios(text: str) -> tuple[str, ...]:
    """``single-stream,offline`` (LoadGen's own names work too: ``SingleStream``)."""
    return _names(text, SCENARIOS, "scenario", "--scenario")


def parse_roles(text: str) -> tuple[str, ...]:
    return _names(text, ROLES, "role", "--roles")


@dataclass
class ScenarioSettings:
    """What ``bench --scenario`` runs and under which rules."""

    scenarios: tuple[str, ...] = ("single-stream", "offline")
    roles: tuple[str, ...] = ("classifier",)
    min_duration_s: float = DEFAULT_MIN_DURATION_S  # ignored with mlperf_rules (LoadGen's 600 s)
    min_queries: int | None = None  # None: LoadGen's official minimum of each scenario
    target_qps: float | None = None  # Server
    target_latency_ms: float | None = None  # Server
    mlperf_rules: bool = False
    accuracy_tier: float = 99.0  # the tier --strict requires (99 or 99.9)
    cv_threshold_pct: float = 1.0  # warn above this coefficient of variation of the service times (trtexec: 1 %)
    samples: int | None = None  # samples of the classifier's library (None: the data's examples)
    # MLPerf's compliance tests to run after each row (compliance.parse_compliance); each role runs those the rules
    # assign to it
    compliance: tuple[str, ...] = ()

    def check(self) -> None:
        """One line for what cannot run, before any model loads. Every number finite: ``inf`` / ``nan`` would make
        LoadGen prepare queries without end (``--target-qps inf``) or switch a check off (``nan`` compares false)."""
        for flag, v in (("--target-qps", self.target_qps), ("--target-latency-ms", self.target_latency_ms),
                        ("--min-duration", self.min_duration_s), ("--accuracy-tier", self.accuracy_tier),
                        ("--cv-threshold", self.cv_threshold_pct)):
            if v is not None and not math.isfinite(float(v)):
                raise UserError(f"{flag} must be a finite number, not {v}")
        if self.target_qps is not None and "server" not in self.scenarios:
            raise UserError("--target-qps and --target-latency-ms set the Server scenario's load: add server to "
                            "--scenario or leave them out")
        if self.target_latency_ms is not None and "server" not in self.scenarios:
            raise UserError("--target-latency-ms is the Server scenario's latency bound: add server to --scenario or "
                            "leave it out")
        if "server" in self.scenarios and (self.target_qps is None or self.target_latency_ms is None):
            raise UserError("--scenario server needs --target-qps and --target-latency-ms (the arrival rate and the "
                            "latency bound LoadGen judges the run by)")
        if self.target_qps is not None and self.target_qps <= 0:
            raise UserError(f"--target-qps must be above 0, not {self.target_qps:g}")
        if self.target_latency_ms is not None and self.target_latency_ms <= 0:
            raise UserError(f"--target-latency-ms must be above 0, not {self.target_latency_ms:g}")
        if self.min_duration_s < 0:
            raise UserError(f"--min-duration must be at least 0, not {self.min_duration_s:g}")
        if self.min_queries is not None and self.min_queries < 1:
            raise UserError(f"--min-queries must be at least 1, not {self.min_queries}")
        self.check_limits()
        if self.accuracy_tier not in (99.0, 99.9):
            raise UserError(f"--accuracy-tier {self.accuracy_tier:g}: use 99 or 99.9")
        if self.cv_threshold_pct <= 0:
            raise UserError(f"--cv-threshold must be above 0, not {self.cv_threshold_pct:g}")
        from breaknli_fast.bench.loadgen.compliance import TESTS

        bad = [t for t in self.compliance if t not in TESTS]
        if bad:
            raise UserError(f"--compliance-tests {bad[0]}: unknown test; use {', '.join(TESTS)}")

    def check_limits(self) -> None:
        """The bounds of docs/limits.md: LoadGen prepares every query of a run before it starts and holds them in
        memory (a Server run: the arrival rate x the minimum duration), and a run lasts its minimum duration."""
        if self.min_duration_s > MAX_MIN_DURATION_S:
            raise UserError(f"--min-duration {self.min_duration_s:g}: at most {MAX_MIN_DURATION_S:g} s (6x MLPerf's "
                            "official 600 s)")
        if self.target_qps is not None and self.target_qps > MAX_TARGET_QPS:
            raise UserError(f"--target-qps {self.target_qps:g}: at most {MAX_TARGET_QPS:g} (LoadGen schedules every "
                            "arrival in advance)")
        if self.min_queries is not None and self.min_queries > MAX_PREPARED:
            raise UserError(f"--min-queries {self.min_queries}: at most {MAX_PREPARED:,} (LoadGen prepares that many "
                            "queries and holds them in memory)")
        duration = 600.0 if self.mlperf_rules else self.min_duration_s
        if self.target_qps is not None and "server" in self.scenarios and self.target_qps * duration > MAX_PREPARED:
            raise UserError(f"--target-qps {self.target_qps:g} for {duration:g} s: LoadGen would prepare "
                            f"{self.target_qps * duration:,.0f} queries and hold them in memory; at most "
                            f"{MAX_PREPARED:,} (--target-qps at most {MAX_PREPARED / max(duration, 1e-9):,.0f} at this "
                            "--min-duration)")

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["scenarios"], d["roles"], d["compliance"] = list(self.scenarios), list(self.roles), list(self.compliance)
        return d


@dataclass
class Hints:
    """What the calibration measured, for LoadGen's expected latency and throughput: they size the queries LoadGen
    prepares (an Offline query holds expected samples/s x the minimum duration)."""

    latency_s: float  # one sample, warm
    batch_qps: float  # samples per second in the engine's own batches
    warmup_samples: int = 0  # the warm-up before them: samples run one at a time
    warmup_s: float = 0.0  # ... and its seconds


def loadgen_settings(lg: Any, scenario: str, mode: str, s: ScenarioSettings, hints: Hints, tokens: bool,
                  offline_qps: float | None = None) -> Any:
    """LoadGen's TestSettings: the official configuration (``mlperf.conf``), then the laptop minimum duration
    (unless ``mlperf_rules``), the calibration's hints and the Server targets. ``mode``: ``performance`` or
    ``accuracy``."""
    sc = SCENARIOS[scenario]
    ts = lg.TestSettings()
    ts.FromConfig("", MODEL_NAME, sc.loadgen, 0)  # 0: LoadGen's built-in mlperf.conf only
    ts.scenario = getattr(lg.TestScenario, sc.loadgen)
    ts.mode = lg.TestMode.PerformanceOnly if mode == "performance" else lg.TestMode.AccuracyOnly
    if not s.mlperf_rules:
        ts.min_duration_ms = int(round(s.min_duration_s * 1000))
        if s.min_queries is not None:
            ts.min_query_count = int(s.min_queries)
    # expected latencies well below the calibration's: LoadGen prepares that many more queries than the minimum
    # duration needs (a run ends as soon as its minimums are met; one that runs out is INVALID); the Offline rate
    # a little above it, since the one Offline query holds expected rate x minimum duration samples
    # (at most about MAX_PREPARED queries: LoadGen holds them all in memory)
    floor_ns = ts.min_duration_ms * 1e6 / MAX_PREPARED
    ts.single_stream_expected_latency_ns = max(1, int(max(hints.latency_s * LATENCY_MARGIN * 1e9, floor_ns)))
    ts.multi_stream_expected_latency_ns = max(1, int(max(hints.latency_s * ts.multi_stream_samples_per_query
                                                         * LATENCY_MARGIN * 1e9, floor_ns)))
    ts.offline_expected_qps = float(offline_qps or hints.batch_qps * OFFLINE_MARGIN)
    if scenario == "server":
        ts.server_target_qps = float(s.target_qps or 1.0)
        ts.server_target_latency_ns = int((s.target_latency_ms or 100.0) * 1e6)
    ts.use_token_latencies = bool(tokens)
    return ts


def seeds_of(ts: Any) -> dict[str, int]:
    """The seeds of sample order and schedule LoadGen runs with."""
    return {"qsl_rng_seed": int(ts.qsl_rng_seed), "sample_index_rng_seed": int(ts.sample_index_rng_seed),
            "schedule_rng_seed": int(ts.schedule_rng_seed)}
