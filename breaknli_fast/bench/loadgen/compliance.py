"""MLPerf's compliance tests (``bench --scenario ... --compliance``) as the rules of :data:`RULES` assign them to each
role, run through LoadGen's ``audit.config``: after an engine's performance and accuracy runs of a scenario, each
test is one more performance run whose LoadGen settings an ``audit.config`` in its own log folder overrides
(LoadGen reads it and logs that it did), judged as the compliance suite's verification scripts judge it, adapted
where a sample is one prompt answered with K candidates (docs/latency.md says how each differs):

* **TEST01** (classifier, study unit; accuracy in performance mode): LoadGen logs a random subset of the performance
  run's responses (``accuracy_log_sampling_target``, the suite's ``accuracy_log_rng_seed``). PASS when every logged
  response is byte for byte the accuracy run's response for the same sample and the run's performance is within
  ±10 % of the performance run's.
* **TEST04** (classifier, study unit; no caching): one sample issued again and again (``performance_issue_same``;
  the library's longest input, where the suite takes index 3: a shorter one repeated runs faster with no cache at
  all). PASS when that run is not more than 10 % faster than the performance run over distinct samples.
* **TEST06** (generator; output consistency): every response logged with its first-token response and token count.
  PASS when the K first tokens reported to LoadGen are the K candidates' first tokens (as a multiset: an engine may
  order its candidates once decoded; not checked in Offline, where LoadGen logs no first-token response), each
  candidate's first token is the accuracy run's, each candidate holds at most one end-of-sequence token (at its
  end), and the token count LoadGen received is the output's length (all K candidates' ids).
* **TEST07** (generator; accuracy in performance mode over the whole data set): every response logged, every sample
  of the library issued (``sample_concatenate_permutation``, at least one query per sample). PASS when every sample
  was answered and the answers' score reaches the required tier (``--accuracy-tier``) of the reference's
  AccuracyOnly score, as the accuracy pass does (scored with the others, :func:`judge_accuracy`).
* **TEST09** (generator; output length): as TEST07's logging. PASS when the mean output length (tokens per
  candidate, per sample, averaged over the samples) is within ±10 % of the reference's on its AccuracyOnly run.
* **TEST05** (other seeds): retired from the rules on 2024-11-15; run only when named, labelled retired. LoadGen's
  ``test05`` switch replaces the official seeds of sample order and schedule (set in the TestSettings, where LoadGen
  takes them from). PASS when LoadGen logged the switch and performance is within ±10 % of the performance run's.

Every test also needs LoadGen's VALID. "Performance" is each scenario's headline figure: the latency LoadGen's
early stopping estimates for SingleStream / MultiStream (its percentile where it printed none), samples/s for Offline
and Server; "faster" compares them the right way round. A FAIL says what failed: ``outputs``, ``speed`` or
``LoadGen`` (INVALID, or the audit.config not read). Logs: ``<scenario>/compliance/TEST0x/``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.bench.loadgen import logs
from breaknli_fast.bench.loadgen.types import (ComplianceCheck, ComplianceResult, OutputsMatch, RunResult,
                                              ScenarioRound)
from breaknli_fast.errors import UserError

RULES = "MLPerf Inference v6.0"  # the rules the tests and their assignment to roles follow
BAND = 0.10  # the compliance suite's performance band (TEST01, TEST04), and TEST09's length band
TEST01_SEED = 720381539243781796  # the suite's accuracy_log_rng_seed
TEST01_TARGET = 64  # responses LoadGen aims to log (the suite's per-benchmark value for small outputs)
LOG_ALL = 1_000_000_000  # an accuracy_log_sampling_target above any run's samples: LoadGen logs every response
TEST04_INDEX = 3  # the suite's performance_issue_same_index
TEST05_SEEDS = {"test05_qsl_rng_seed": 195, "test05_sample_index_rng_seed": 235, "test05_schedule_rng_seed": 634}
SPEED_TESTS = ("TEST01", "TEST04", "TEST05")  # the tests judged on speed too (the others log every response)


@dataclass(frozen=True)
class ComplianceTest:
    name: str
    roles: tuple[str, ...]  # the roles it applies to under RULES
    what: str  # what it checks, one line (bench.md)
    retired: str | None = None  # when the rules dropped it
    default: bool = True  # run by --compliance without --compliance-tests


TESTS: dict[str, ComplianceTest] = {t.name: t for t in (
    ComplianceTest("TEST01", ("classifier", "study"), "responses logged in performance mode equal the accuracy "
                   "run's; performance within ±10 %"),
    ComplianceTest("TEST04", ("classifier", "study"), "the library's longest input repeated is not more than 10 % "
                   "faster (no caching)"),
    ComplianceTest("TEST06", ("generator",), "first token as reported and as in the accuracy run, at most one EOS "
                   "per candidate, token count = output length"),
    ComplianceTest("TEST07", ("generator",), "accuracy in performance mode over the whole library reaches the "
                   "tier"),
    ComplianceTest("TEST09", ("generator",), "mean output length within ±10 % of the reference's"),
    ComplianceTest("TEST05", ("classifier", "generator", "study"), "other seeds of sample order and schedule; "
                   "performance within ±10 %", retired="2024-11", default=False),
)}
ORDER = tuple(TESTS)


def label(test: str) -> str:
    """A test's name as every rendering shows it: ``TEST05 (retired 2024-11)`` for a retired one."""
    t = TESTS.get(test)
    return f"{test} (retired {t.retired})" if t is not None and t.retired else test


def parse_compliance(text: str | None, roles: Sequence[str] = ("classifier",)) -> tuple[str, ...]:
    """``--compliance-tests``: ``all`` (every test the rules assign to ``roles``; not the retired TEST05) or
    comma-separated names. An unknown name, or one that applies to none of ``roles``, is one line."""
    if text is None or text.strip().lower() in ("", "all"):
        return tuple(t.name for t in TESTS.values() if t.default and set(t.roles) & set(roles))
    names = tuple(dict.fromkeys(t.strip().upper() for t in text.split(",") if t.strip()))
    for n in names:
        if n not in TESTS:
            raise UserError(f"--compliance-tests {n}: unknown test; use {', '.join(ORDER)} (comma-separated) or all")
        if not set(TESTS[n].roles) & set(roles):
            raise UserError(f"--compliance-tests {n} applies to the {' / '.join(TESTS[n].roles)} role under {RULES}, "
                            f"not to --roles {','.join(roles)}")
    return tuple(sorted(names, key=ORDER.index))


def tests_for(role: str, scenario: str, requested: Sequence[str], tokens: bool) -> tuple[list[str], list[str]]:
    """(the tests a row runs, why the others requested for its role do not run): TEST06 reads LoadGen's first-token
    log, which a run without token latencies (Server here) does not write."""
    run, skipped = [], []
    for t in requested:
        if role not in TESTS[t].roles:
            continue
        if t == "TEST06" and not tokens and scenario == "server":
            skipped.append(f"{t} not run in server: its token latencies are off (the latency bound judges the whole "
                           "sample)")
            continue
        run.append(t)
    return run, skipped


def audit_config(test: str, size: int = TEST04_INDEX + 1, min_queries: int | None = None,
                 lengths: Sequence[int] | None = None) -> str:
    """The ``audit.config`` of one test (LoadGen's format: ``model.scenario.key = value``) for a library of ``size``
    samples; ``min_queries``: the run's own minimum query count (TEST07 / TEST09 raise it to the library's size);
    ``lengths``: each sample's input length (TEST04 repeats the longest)."""
    lines = ["# written by breaknli-fast bench --compliance", "*.*.mode = 2"]
    if test == "TEST01":
        lines += [f"*.*.accuracy_log_rng_seed = {TEST01_SEED}", f"*.*.accuracy_log_sampling_target = {TEST01_TARGET}"]
    elif test == "TEST04":
        lines += ["*.*.performance_issue_unique = 0", "*.*.performance_issue_same = 1",
                  f"*.*.performance_issue_same_index = {same_index(size, lengths)}"]
    elif test == "TEST05":
        lines += ["# test05 and its seeds are set in the TestSettings: " + ", ".join(f"{k} {v}" for k, v in
                                                                              TEST05_SEEDS.items())]
    elif test in ("TEST06", "TEST07", "TEST09"):
        lines += [f"*.*.accuracy_log_rng_seed = {TEST01_SEED}", f"*.*.accuracy_log_sampling_target = {LOG_ALL}"]
        if test != "TEST06":  # the whole library: every sample as often as the others, at least once
            lines += ["*.*.sample_concatenate_permutation = 1",
                      f"*.*.min_query_count = {max(int(size), int(min_queries or 0))}"]
    else:
        raise ValueError(test)
    return "\n".join(lines) + "\n"


def same_index(size: int, lengths: Sequence[int] | None = None) -> int:
    """TEST04's repeated sample, inside the library: its longest input (the first of them) where the lengths are
    known -- a shorter sample repeated runs faster without any cache (fewer tokens, no padding in a batch), the longest
    only where answers are reused --, else the suite's index 3 (the library's last sample where it is smaller)."""
    if lengths is not None and len(lengths) == int(size) and size:
        return max(range(int(size)), key=lambda i: (lengths[i], -i))
    return min(TEST04_INDEX, max(0, int(size) - 1))


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
    es = result.early_stop_ms if isinstance(result.early_stop_ms, (int, float)) else None
    return es or (result.p90_ms if scenario == "single-stream" else result.p99_ms), False


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


# -- the generator's responses as LoadGen logged them ------------------------------------------------------------

def _body(entry: logs.AccuracyEntry) -> dict[str, Any] | None:
    """A generator response's payload (``{"texts", "ids"}`` or ``{"texts", "tokens"}``), None if not one."""
    try:
        body = json.loads(bytes.fromhex(str(entry.get("data", ""))).decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return body if isinstance(body, dict) and isinstance(body.get("texts"), list) else None


def _first_reported(entry: logs.AccuracyEntry) -> list[int] | None:
    """The first-token response LoadGen logged for a response (``token_data``), None where it logged none."""
    if "token_data" not in entry:
        return None
    try:
        got = json.loads(bytes.fromhex(str(entry["token_data"])).decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return [int(t) for t in got] if isinstance(got, list) else None


def _check(name: str, bad: list[int], compared: int, **kw: Any) -> ComplianceCheck:
    return ComplianceCheck(check=name, compared=compared, failing=len(bad),
                           first_failing_sample=bad[0] if bad else None, passed=compared > 0 and not bad, **kw)


def token_checks(entries: Sequence[logs.AccuracyEntry], accuracy_entries: Sequence[logs.AccuracyEntry],
                 eos_id: int | None, scenario: str = "single-stream") -> list[ComplianceCheck]:
    """TEST06 on every logged response. LoadGen logs the first-token response (``token_data``) in every scenario but
    Offline, where time to first token is no figure: there that check is not applicable and says so."""
    acc_first = {}
    for e in accuracy_entries:
        b = _body(e)
        if b is not None and isinstance(b.get("ids"), list):
            acc_first[int(e["qsl_idx"])] = [r[0] if r else -1 for r in b["ids"]]
    bodies = [(int(e["qsl_idx"]), e, _body(e)) for e in entries]
    with_ids = [(i, e, b) for i, e, b in bodies if b is not None and isinstance(b.get("ids"), list)]
    if len(with_ids) < len(bodies) or not bodies:
        missing = [i for i, _, b in bodies if b is None or not isinstance(b.get("ids"), list)]
        why = ("the engine returns texts without token ids: its first token, end-of-sequence tokens and token count "
               "cannot be checked" if bodies else "no response logged")
        return [_check("token ids in every response", missing, len(bodies), note=why)]
    reported, as_accuracy, eos, count = [], [], [], []
    n_rep = n_acc = 0
    for i, e, b in with_ids:
        ids = b["ids"]
        first = [r[0] if r else -1 for r in ids]
        got = _first_reported(e)
        n_rep += 1
        if got is None or sorted(got) != sorted(first):  # as a multiset: an engine may order its K candidates
            reported.append(i)                           # once decoded (CTranslate2 sorts them by score)
        if i in acc_first:
            n_acc += 1
            if acc_first[i] != first:
                as_accuracy.append(i)
        if eos_id is None or any(r.count(eos_id) > 1 or (eos_id in r and r[-1] != eos_id) for r in ids):
            eos.append(i)
        if e.get("token_count") is None or int(e["token_count"]) != sum(len(r) for r in ids):
            count.append(i)
    logged_first = any(_first_reported(e) is not None for _, e, _ in with_ids)
    if scenario == "offline" and not logged_first:
        first = ComplianceCheck(check="first token as reported to LoadGen", compared=0, failing=0, passed=True,
                                note="not applicable: LoadGen logs no first-token response in Offline")
    else:
        first = _check("first token as reported to LoadGen", reported, n_rep,
                       note=None if logged_first else "LoadGen logged no first-token response (no token latencies: "
                                                      "the engine reports no first token)")
    return [
        first,
        _check("first token as in the accuracy run", as_accuracy, n_acc),
        _check("at most one end-of-sequence token per candidate, at its end", eos, len(with_ids),
               note=None if eos_id is not None else "the engine names no end-of-sequence token"),
        _check("token count = output length", count, len(with_ids)),
    ]


def output_length(body: dict[str, Any]) -> float | None:
    """Tokens per candidate of one response: its ids (end-of-sequence tokens included), else the engine's count."""
    n = len(body.get("texts") or []) or len(body.get("ids") or [])
    if not n:
        return None
    if isinstance(body.get("ids"), list):
        return sum(len(r) for r in body["ids"]) / n
    return float(body.get("tokens") or 0) / n


def mean_output_length(entries: Sequence[logs.AccuracyEntry]) -> tuple[float | None, int]:
    """(the mean over samples of each sample's mean tokens per candidate, the samples): a sample logged more often
    counts once."""
    per: dict[int, list[float]] = {}
    for e in entries:
        b = _body(e)
        length = output_length(b) if b is not None else None
        if length is not None:
            per.setdefault(int(e["qsl_idx"]), []).append(length)
    if not per:
        return None, 0
    return sum(sum(v) / len(v) for v in per.values()) / len(per), len(per)


def performance_answers(entries: Sequence[logs.AccuracyEntry]) -> dict[int, list[str]]:
    """Each sample's first answer logged in performance mode (the lowest ``seq_id``): its candidates' texts."""
    out: dict[int, tuple[int, list[str]]] = {}
    for e in entries:
        b = _body(e)
        if b is None:
            continue
        i, seq = int(e["qsl_idx"]), int(e.get("seq_id", 0))
        if i not in out or seq < out[i][0]:
            out[i] = (seq, [str(t) for t in b["texts"]])
    return {i: texts for i, (_, texts) in out.items()}


# -- the verdict ----------------------------------------------------------------------------------------------------

@dataclass
class Judged:
    """What a test is judged on besides its own run: the performance run, the log folders, the library."""

    reference: RunResult  # the row's performance run
    scenario: str
    folder: str | Path  # the test's log folder
    accuracy_folder: str | Path  # the row's AccuracyOnly log folder
    size: int = 0  # samples in the library
    eos_id: int | None = None  # the generator's end-of-sequence token
    reference_accuracy_folder: str | Path | None = None  # the torch fp32 reference row's AccuracyOnly logs (TEST09)


def judge(test: str, result: RunResult, reference: RunResult, scenario: str, folder: str | Path,
          accuracy_folder: str | Path, log: str | None = None, **more: Any) -> ComplianceResult:
    """PASS / FAIL of one test from its LoadGen result, the performance run's and the logs; ``log``: its log folder
    as the row names it; ``more``: :class:`Judged`'s other fields. TEST07's accuracy is added by
    :func:`judge_accuracy` once the scores are known."""
    j = Judged(reference, scenario, folder, accuracy_folder, **more)
    ratio = speed_ratio(result, reference, scenario)
    spec = TESTS.get(test)
    out = ComplianceResult(test=test, validity=result.validity, speed_ratio=ratio,
                           audit_config_read=audit_read(folder), log=log,
                           retired=spec.retired if spec is not None else None)
    why, failed = out.why, []
    if result.validity != "VALID":
        why.append(f"LoadGen: {result.validity or 'no result'}")
        failed.append("LoadGen")
    if not out.audit_config_read:
        why.append("LoadGen did not read the audit.config")
        failed.append("LoadGen")
    if test == "TEST05":
        out.seeds = dict(TEST05_SEEDS)
        if not _logged(folder, "test05 flag detected"):
            why.append("LoadGen did not switch to the test05 seeds")
            failed.append("LoadGen")
    if test == "TEST04":
        if not (ratio is not None and ratio <= 1 + BAND):
            why.append("speed: the same sample repeated ran " + (f"{(ratio - 1) * 100:.1f} % faster" if ratio else
                                                                 "without a figure") + f" (at most {BAND:.0%})")
            failed.append("speed")
    elif test in ("TEST01", "TEST05"):
        if not (ratio is not None and 1 - BAND <= ratio <= 1 + BAND):
            why.append("speed: performance " + (f"{(ratio - 1) * 100:+.1f} %" if ratio else "without a figure")
                       + f" against the performance run (within ±{BAND:.0%})")
            failed.append("speed")
    if test == "TEST01":
        o = out.outputs = outputs_match(logs.accuracy_entries(folder), logs.accuracy_entries(accuracy_folder))
        if not o.passed:
            why.append(f"outputs: {o.compared - o.equal} of {o.compared} responses logged in performance mode differ "
                       f"from the accuracy run's (first: sample {o.first_different_sample})" if o.compared
                       else "outputs: no response logged in performance mode to compare")
            failed.append("outputs")
    elif test in ("TEST06", "TEST07", "TEST09"):
        out.checks = _generator_checks(test, j)
        for c in out.checks:
            if not c.passed:
                why.append(check_why(c))
                failed.append("outputs")
    return _verdict(out, failed)


def check_why(c: ComplianceCheck) -> str:
    """A failed check in one line: ``outputs: <check>: 3 of 24 fail (first: sample 5); <note>``."""
    parts = []
    if c.first_failing_sample is not None:
        parts.append(f"{c.failing} of {c.compared} fail (first: sample {c.first_failing_sample})")
    if c.note:
        parts.append(c.note)
    return f"outputs: {c.check}: " + ("; ".join(parts) or "nothing to check")


def _verdict(out: ComplianceResult, failed: list[str]) -> ComplianceResult:
    out.failed = list(dict.fromkeys(failed)) or None
    out.passed = not out.why
    out.result = "PASS" if out.passed else "FAIL"
    return out


def _generator_checks(test: str, j: Judged) -> list[ComplianceCheck]:
    entries = logs.accuracy_entries(j.folder)
    if test == "TEST06":
        return token_checks(entries, logs.accuracy_entries(j.accuracy_folder), j.eos_id, j.scenario)
    covered = {int(e["qsl_idx"]) for e in entries}
    missing = [i for i in range(j.size) if i not in covered]
    checks = [_check("every sample of the library answered", missing, j.size)]
    if test == "TEST09":
        mine, n = mean_output_length(entries)
        ref, _ = mean_output_length(logs.accuracy_entries(j.reference_accuracy_folder or j.accuracy_folder))
        ratio = mine / ref if mine is not None and ref else None
        ok = ratio is not None and 1 - BAND <= ratio <= 1 + BAND
        checks.append(ComplianceCheck(
            check=f"mean output length within ±{BAND:.0%} of the reference's", compared=n, failing=0 if ok else 1,
            value=mine, reference=ref, passed=ok,
            note=(f"{mine:.2f} tokens per candidate against {ref:.2f} ({(ratio - 1) * 100:+.1f} %)"
                  if ratio is not None else "no output length to compare")))
    return checks


def judge_accuracy(c: ComplianceResult, of_reference_pct: float | None, tier: float, samples: int) -> None:
    """TEST07's accuracy: the performance-mode answers' score as a percentage of the reference's AccuracyOnly score,
    against the required tier (``samples``: the samples scored)."""
    ok = of_reference_pct is not None and of_reference_pct >= tier - 1e-9
    check = ComplianceCheck(check=f"accuracy in performance mode reaches the {tier:g} % tier", compared=samples,
                            failing=0 if ok else 1, value=of_reference_pct, reference=tier, passed=ok,
                            note=(f"{of_reference_pct:.2f} % of the reference" if of_reference_pct is not None
                                  else "no score"))
    c.checks = (c.checks or []) + [check]
    if not ok:
        c.why.append(check_why(check))
    _verdict(c, list(c.failed or []) + ([] if ok else ["outputs"]))


def _logged(folder: str | Path, words: str) -> bool:
    try:
        return words in (Path(folder) / logs.DETAIL).read_text(errors="replace").lower()
    except OSError:
        return False


def audit_read(folder: str | Path) -> bool:
    """Whether LoadGen logged that it found and applied the audit.config of this run."""
    return _logged(folder, "found audit config")
