"""MLPerf's compliance tests (``bench --scenario ... --compliance``), run through LoadGen's ``audit.config``: after an
engine's performance and accuracy runs of a scenario, each test is one more performance run whose LoadGen settings
an ``audit.config`` in its own log folder overrides (LoadGen reads it and logs that it did), judged here as the
compliance suite's verification scripts judge it:

* **TEST01** (accuracy in performance mode): LoadGen writes a random subset of the performance run's responses to
  ``mlperf_log_accuracy.json`` (``accuracy_log_sampling_target``, the suite's ``accuracy_log_rng_seed``). PASS when
  every logged response is byte for byte the accuracy run's response for the same sample (the payload is the
  logits, or the generated ids), and the run's performance is within 10 % of the performance run's. An engine whose
  answer depends on the samples batched with it fails the first check (MultiStream and Offline batch the samples of a
  query; SingleStream's queries hold one sample).
* **TEST04** (no caching): the same sample issued again and again (``performance_issue_same``, index 3). PASS when
  that run is not more than 10 % faster than the performance run over distinct samples.
* **TEST05** (other seeds): LoadGen's ``test05`` switch, which replaces the official seeds of sample order and
  schedule by the ``test05_*`` seeds of the test's settings (LoadGen takes those from the settings it is given, not
  from an audit.config, so they are set there; the audit.config still sets the mode). PASS when the run is VALID,
  LoadGen logged the switch, and its performance is within 10 % of the performance run's (the suite's band of TEST01,
  applied here; a system tuned to the official seeds falls outside it).

Every test also needs LoadGen's VALID. "Performance" is each scenario's headline figure: the latency LoadGen's
early stopping estimates for SingleStream / MultiStream (its percentile where it printed none), samples/s for Offline
and Server; "faster" compares them the right way round. Logs: ``<scenario>/compliance/TEST0x/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.bench.loadgen import logs
from breaknli_fast.bench.loadgen.types import ComplianceResult, OutputsMatch, RunResult, ScenarioRound
from breaknli_fast.errors import UserError

TESTS = ("TEST01", "TEST04", "TEST05")
BAND = 0.10  # the compliance suite's performance band
TEST01_SEED = 720381539243781796  # the suite's accuracy_log_rng_seed
TEST01_TARGET = 64  # responses LoadGen aims to log (the suite's per-benchmark value for small outputs)
TEST05_SEEDS = {"test05_qsl_rng_seed": 195, "test05_sample_index_rng_seed": 235, "test05_schedule_rng_seed": 634}


def parse_compliance(text: str | None) -> tuple[str, ...]:
    """``--compliance`` (all three) or a comma-separated list of TEST01 / TEST04 / TEST05."""
    if text is None:
        return ()
    if text.strip().lower() in ("", "all"):
        return TESTS
    names = tuple(dict.fromkeys(t.strip().upper() for t in text.split(",") if t.strip()))
    bad = [t for t in names if t not in TESTS]
    if bad:
        raise UserError(f"--compliance {bad[0]}: use {', '.join(TESTS)} (comma-separated) or all")
    return names


def audit_config(test: str) -> str:
    """The ``audit.config`` of one test (LoadGen's format: ``model.scenario.key = value``)."""
    lines = ["# written by breaknli-fast bench --compliance", "*.*.mode = 2"]
    if test == "TEST01":
        lines += [f"*.*.accuracy_log_rng_seed = {TEST01_SEED}", f"*.*.accuracy_log_sampling_target = {TEST01_TARGET}"]
    elif test == "TEST04":
        lines += ["*.*.performance_issue_unique = 0", "*.*.performance_issue_same = 1",
                  "*.*.performance_issue_same_index = 3"]
    elif test == "TEST05":
        lines += ["# test05 and its seeds are set in the TestSettings: " + ", ".join(f"{k} {v}" for k, v in
                                                                              TEST05_SEEDS.items())]
    else:
        raise ValueError(test)
    return "\n".join(lines) + "\n"


def apply(test: str, ts: Any) -> Any:
    """What a test sets in LoadGen's TestSettings itself (TEST05's switch and seeds); returns ``ts``."""
    if test == "TEST05":
        ts.test05 = True
        for k, v in TEST05_SEEDS.items():
            setattr(ts, k, int(v))
    return ts


def headline(result: RunResult | ScenarioRound, scenario: str) -> tuple[float | None, bool]:
    """(the scenario's headline figure of a run or a row's round, whether higher is faster)."""
    if scenario in ("offline", "server"):
        return result.samples_per_s, True
    return result.early_stop_ms or (result.p90_ms if scenario == "single-stream" else result.p99_ms), False


def speed_ratio(test: RunResult, reference: RunResult, scenario: str) -> float | None:
    """How much faster the test run was than the performance run (1.0: as fast; 1.2: 20 % faster)."""
    t, higher = headline(test, scenario)
    r, _ = headline(reference, scenario)
    if not t or not r:
        return None
    return float(t) / float(r) if higher else float(r) / float(t)


def outputs_match(test_entries: Sequence[logs.AccuracyEntry],
                  accuracy_entries: Sequence[logs.AccuracyEntry]) -> OutputsMatch:
    """TEST01's first check: each logged performance-mode response against the accuracy run's for its sample."""
    ref = {int(e["qsl_idx"]): str(e.get("data", "")).upper() for e in accuracy_entries}
    compared = equal = 0
    first_bad = None
    for e in test_entries:
        idx = int(e["qsl_idx"])
        if idx not in ref:
            continue
        compared += 1
        if str(e.get("data", "")).upper() == ref[idx]:
            equal += 1
        elif first_bad is None:
            first_bad = idx
    return OutputsMatch(logged=len(test_entries), compared=compared, equal=equal, first_different_sample=first_bad,
                        passed=compared > 0 and equal == compared)


def judge(test: str, result: RunResult, reference: RunResult, scenario: str, folder: str | Path,
          accuracy_folder: str | Path, log: str | None = None) -> ComplianceResult:
    """PASS / FAIL of one test from its LoadGen result, the performance run's and (TEST01) the logs; ``log``: its
    log folder as the row names it."""
    ratio = speed_ratio(result, reference, scenario)
    out = ComplianceResult(test=test, validity=result.validity, speed_ratio=ratio,
                           audit_config_read=audit_read(folder), log=log)
    why = out.why
    if result.validity != "VALID":
        why.append(f"LoadGen: {result.validity or 'no result'}")
    if not out.audit_config_read:
        why.append("LoadGen did not read the audit.config")
    if test == "TEST05":
        out.seeds = dict(TEST05_SEEDS)
        if not _logged(folder, "test05 flag detected"):
            why.append("LoadGen did not switch to the test05 seeds")
    if test == "TEST04":
        perf_ok = ratio is not None and ratio <= 1 + BAND
        if not perf_ok:
            why.append("the same sample repeated ran " + (f"{(ratio - 1) * 100:.1f} % faster" if ratio else
                                                          "without a figure") + f" (at most {BAND:.0%})")
    else:
        perf_ok = ratio is not None and 1 - BAND <= ratio <= 1 + BAND
        if not perf_ok:
            why.append("performance " + (f"{(ratio - 1) * 100:+.1f} %" if ratio else "without a figure")
                       + f" against the performance run (within ±{BAND:.0%})")
    if test == "TEST01":
        o = out.outputs = outputs_match(logs.accuracy_entries(folder), logs.accuracy_entries(accuracy_folder))
        if not o.passed:
            why.append(f"{o.compared - o.equal} of {o.compared} responses logged in performance mode differ from the "
                       f"accuracy run's (first: sample {o.first_different_sample})" if o.compared
                       else "no response logged in performance mode to compare")
    out.passed = not why
    out.result = "PASS" if not why else "FAIL"
    return out


def _logged(folder: str | Path, words: str) -> bool:
    try:
        return words in (Path(folder) / logs.DETAIL).read_text(errors="replace").lower()
    except OSError:
        return False


def audit_read(folder: str | Path) -> bool:
    """Whether LoadGen logged that it found and applied the audit.config of this run."""
    return _logged(folder, "found audit config")
