"""LoadGen's results as LoadGen wrote them: ``mlperf_log_detail.txt`` (one ``:::MLLOG {json}`` line per key) and
``mlperf_log_summary.txt`` (its "MLPerf Results Summary"). Nothing here computes a statistic: percentiles,
throughputs, early-stopping estimates, VALID / INVALID and the reasons are LoadGen's, converted to milliseconds."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping, Union

from breaknli_fast.bench.loadgen.types import RunResult
from breaknli_fast.bench.types import JSON

DETAIL, SUMMARY, ACCURACY, TRACE = ("mlperf_log_detail.txt", "mlperf_log_summary.txt", "mlperf_log_accuracy.json",
                                    "mlperf_log_trace.json")
PREFIX = ":::MLLOG"
_ESTIMATE = re.compile(r"([\d.]+)th percentile estimate: (\d+)")
_NEED = re.compile(r"at least (\d+) queries")
AccuracyEntry = Mapping[str, Union[int, str]]  # one entry of mlperf_log_accuracy.json: seq_id, qsl_idx, data (hex)


def read_detail(path: str | Path) -> dict[str, JSON]:
    """Every key of a detail log (the last value of a key that appears twice), with ``_errors`` and
    ``_warnings``: the messages LoadGen flagged as such."""
    errors: list[str] = []
    warnings: list[str] = []
    out: dict[str, JSON] = {"_errors": errors, "_warnings": warnings}
    for line in Path(path).read_text(errors="replace").splitlines():
        if not line.startswith(PREFIX):
            continue
        try:
            entry = json.loads(line[len(PREFIX):])
        except json.JSONDecodeError:
            continue
        key, value, meta = entry.get("key"), entry.get("value"), entry.get("metadata") or {}
        out[key] = value
        if meta.get("is_error"):
            errors.append(f"{key}: {value}")
        elif meta.get("is_warning"):
            warnings.append(f"{key}: {value}")
    return out


def _ms(ns: Any) -> float | None:
    return float(ns) / 1e6 if isinstance(ns, (int, float)) and not isinstance(ns, bool) else None


def _clean(text: Any) -> str:
    return " ".join(str(text or "").replace("*", " ").split())


def estimate_ms(text: Any, percentile: float | None) -> float | None:
    """The early-stopping estimate LoadGen printed for ``percentile`` (its first one when none matches)."""
    found = [(float(p), int(v)) for p, v in _ESTIMATE.findall(str(text or ""))]
    if not found:
        return None
    exact = [v for p, v in found if percentile is not None and abs(p - percentile) < 1e-6]
    return (exact or [found[0][1]])[0] / 1e6


def needed_queries(text: Any) -> int | None:
    """The queries LoadGen's early stopping says it needs ("Need to process at least 64 queries"), None where it
    printed an estimate or said nothing of the kind."""
    m = _NEED.search(str(text or ""))
    return int(m.group(1)) if m and not _ESTIMATE.search(str(text or "")) else None


def recommendations(summary: str) -> list[str]:
    """The lines under "Recommendations:" of a summary."""
    out, inside = [], False
    for line in summary.splitlines():
        if line.strip().startswith("Recommendations:"):
            inside = True
            continue
        if inside:
            if line.startswith(" * "):
                out.append(line[3:].strip())
            elif out or not line.strip() or line.startswith("="):
                break
    return out


def reasons(d: Mapping[str, JSON], summary: str = "") -> list[str]:
    """Why LoadGen judged a run INVALID, in its own words (empty for a VALID run)."""
    if d.get("result_validity") != "INVALID":
        return []
    out = []
    if d.get("result_min_duration_met") is False:
        out.append(f"min duration not met ({_num(d.get('effective_min_duration_ms'), 1e-3)} s required)")
    if d.get("result_min_queries_met") is False:
        out.append(f"min query count not met ({d.get('result_query_count')} of "
                   f"{d.get('effective_min_query_count')} queries)")
    if d.get("result_perf_constraints_met") is False:
        out.append(f"latency bound not met ({d.get('result_overlatency_query_count')} queries over "
                   f"{_num(d.get('effective_target_latency_ns'), 1e-6)} ms)")
    if d.get("early_stopping_met") is False:
        for key, what in (("early_stopping_result", "early stopping"), ("early_stopping_ttft_result", "TTFT early stopping"),
                          ("early_stopping_tpot_result", "TPOT early stopping")):
            text = _clean(d.get(key))
            if text and "percentile estimate" not in text:  # the one(s) that failed: no estimate
                out.append(f"{what}: {text}")
    if d.get("result_invalid_reason"):
        out.append(_clean(d["result_invalid_reason"]))
    said = " ".join(out)
    out += [f"recommendation: {r}" for r in recommendations(summary) if r not in said]
    out += [f"LoadGen error: {e}" for e in d.get("_errors") or []]
    return out or ["INVALID (LoadGen gave no reason)"]


def _num(x: Any, scale: float) -> str:
    return f"{float(x) * scale:g}" if isinstance(x, (int, float)) else "?"


def read_run(folder: str | Path, percentile: float | None) -> RunResult:
    """One run's results from its log folder: validity and reasons, latency percentiles (per query in
    MultiStream), the early-stopping estimates, throughput, TTFT / TPOT, and the settings and seeds LoadGen used."""
    folder = Path(folder)
    d = read_detail(folder / DETAIL)
    summary = (folder / SUMMARY).read_text(errors="replace") if (folder / SUMMARY).exists() else ""
    per = "per_query_" if d.get("effective_scenario") == "MultiStream" else ""

    def pct(p: str, kind: str = "") -> float | None:
        if kind == "tpot":
            return _ms(d.get(f"result_time_per_output_token_{p}_percentile_ns"))
        return _ms(d.get(f"result_{kind}{p}_percentile_{per if not kind else ''}latency_ns"))

    multi = d.get("effective_scenario") == "MultiStream"  # LoadGen reports MultiStream by its query latency only
    return RunResult(
        validity=d.get("result_validity") if summary or d.get("result_validity") else None,
        reasons=reasons(d, summary),
        queries=d.get("result_query_count"),
        p50_ms=pct("50.00"), p90_ms=pct("90.00"), p99_ms=pct("99.00"),
        mean_ms=_ms(d.get(f"result_mean_{per}latency_ns") if per else d.get("result_mean_latency_ns")),
        early_stop_ms=estimate_ms(d.get("early_stopping_result"), percentile),
        early_stop_needed=needed_queries(d.get("early_stopping_result")),
        samples_per_s=None if multi else (d.get("result_samples_per_second")
                                          or d.get("result_completed_samples_per_sec")
                                          or d.get("result_qps_without_loadgen_overhead")),
        ttft_p50_ms=pct("50.00", "first_token_"), ttft_p90_ms=pct("90.00", "first_token_"),
        ttft_p99_ms=pct("99.00", "first_token_"),
        ttft_early_stop_ms=estimate_ms(d.get("early_stopping_ttft_result"), percentile),
        tpot_p50_ms=pct("50.00", "tpot"), tpot_p90_ms=pct("90.00", "tpot"), tpot_p99_ms=pct("99.00", "tpot"),
        tpot_early_stop_ms=estimate_ms(d.get("early_stopping_tpot_result"), percentile),
        tokens_per_s=(d.get("result_completed_tokens_per_second")
                      or d.get("result_tokens_per_second")),
        settings={k[len("effective_"):]: v for k, v in d.items() if k.startswith("effective_")},
        loadgen_version=d.get("loadgen_version"),
        errors=list(d["_errors"]), warnings=list(d["_warnings"]),
    )


def accuracy_entries(folder: str | Path) -> list[AccuracyEntry]:
    """The entries of ``mlperf_log_accuracy.json`` (``qsl_idx``, ``data`` in hex)."""
    p = Path(folder) / ACCURACY
    try:
        return list(json.loads(p.read_text()) or [])
    except (OSError, json.JSONDecodeError):
        return []


def tidy(folder: str | Path) -> None:
    """Drop the empty trace file LoadGen leaves when tracing is off."""
    p = Path(folder) / TRACE
    if p.exists() and p.stat().st_size == 0:
        p.unlink()
