"""The scenario bench's typed results (``bench/loadgen/types.py``): a saved ``bench --scenario`` result of the
previous schema (``breaknli-fast-bench/2``, the suite's files as they were, kept in tests/data/loadgen/) reads into a
:class:`ScenarioReport`, renders the Markdown, the terminal table and ``--compare`` exactly as the dict-based code
did (tests/data/loadgen/: those renderings, made by the code before the types), and ``to_json(from_json(...))``
gives the file back. No LoadGen needed."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from breaknli_fast.bench.compare import compare, compare_markdown
from breaknli_fast.bench.loadgen.compliance import judge, outputs_match
from breaknli_fast.bench.loadgen.report import compare_rows, scenario_markdown
from breaknli_fast.bench.loadgen.types import (AccuracyGate, ComplianceResult, OutputsMatch, PairedDiff, RunResult,
                                              ScenarioEngine, ScenarioReport, ScenarioRound, ScenarioRow)
from breaknli_fast.bench.result import BenchResult
from breaknli_fast.bench.types import from_json, to_json

RENDERED = Path(__file__).parent / "data" / "loadgen"
FILES = ("loadgen-mini", "loadgen-flan-t5-small", "loadgen-flan-t5-small-latency", "loadgen-roberta-base",
         "loadgen-roberta-base-latency")


def payload(name: str) -> dict:
    """A schema-2 scenario bench as the suite's result file held it (tests/data/loadgen/NAME.payload.json, frozen:
    the live file in benchmarks/results is re-measured by newer code)."""
    return json.loads((RENDERED / f"{name}.payload.json").read_text())


def test_a_schema_2_scenario_bench_reads_into_typed_objects():
    data = payload("loadgen-mini")
    assert data["schema"] == "breaknli-fast-bench/2" and data["kind"] == "scenarios"
    rep = from_json(ScenarioReport, data)
    assert isinstance(rep, ScenarioReport) and rep.schema == "breaknli-fast-bench/2"
    assert len(rep.scenarios) == len(data["scenarios"]) and len(rep.engines) == len(data["engines"])
    row = rep.row("torch:fp32", "classifier", "single-stream")
    assert isinstance(row, ScenarioRow) and row.reference and row.metric("result") == "VALID"
    assert row.metrics == data["scenarios"][0]["metrics"]
    assert isinstance(row.accuracy, AccuracyGate) and isinstance(row.accuracy.paired, PairedDiff)
    assert row.accuracy.tier("99") is True and row.accuracy.paired.verdict == "equivalent"
    assert row.rounds and all(isinstance(r, ScenarioRound) for r in row.rounds)
    assert row.logs is not None and row.logs.performance.endswith("single-stream/performance")
    assert row.early_stopping is not None and row.early_stopping.latency_ms == row.metric("early_stop_ms")
    retried = [r for r in rep.scenarios if r.retry is not None]
    assert retried and retried[0].retry.expected_qps and retried[0].retry.first_reasons
    e = rep.engine("torch:fp32")
    assert isinstance(e, ScenarioEngine) and e.ran and e.cold_start["classifier"].load_s is not None
    assert [m.key for m in rep.metric_definitions()] == [d["key"] for d in data["scenario_metrics"]]
    result = BenchResult(data)
    assert result.is_scenarios and result.report is None and result.scenarios == rep
    assert result.engine("torch:fp32") == e and result.passed is data["passed"]


@pytest.mark.parametrize("name", FILES)
def test_a_schema_2_scenario_bench_round_trips(name):
    """Every key and value back, in the same order, and no key added: files written before the compliance tests
    keep their rows without ``compliance`` (read as None)."""
    data = payload(name)
    rep = from_json(ScenarioReport, data)
    back = to_json(rep)
    assert json.dumps(back) == json.dumps(data)
    assert BenchResult(data).data == back
    if not all("compliance" in r for r in data["scenarios"]):
        assert all(r.compliance is None for r in rep.scenarios)


@pytest.mark.parametrize("name", FILES)
def test_a_schema_2_scenario_bench_renders_as_before(name):
    result = BenchResult(payload(name))
    assert result.to_markdown() == (RENDERED / f"{name}.md").read_text()
    assert scenario_markdown(result.scenarios) == scenario_markdown(payload(name))  # typed or its JSON, alike
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(result.table())
    assert console.export_text() == (RENDERED / f"{name}.terminal.txt").read_text()


def test_compare_of_two_schema_2_scenario_benches_renders_as_before():
    """(The expected comparison lists the metrics in this version's order: the early-stopping estimate, the
    scenarios' reported latency, before the raw percentiles.)"""
    a, b = BenchResult(payload("loadgen-roberta-base")), BenchResult(payload("loadgen-roberta-base-latency"))
    cmp = compare(a, b)
    assert cmp.kind == "scenarios" and cmp.rows == compare_rows(a.scenarios, b.scenarios)
    assert compare_markdown(cmp, "A", "B") == (RENDERED / "compare-roberta-base.md").read_text()
    row = cmp.rows[0]
    assert row.in_a and row.metrics["result"].a is not None
    assert json.loads(json.dumps(to_json(cmp)))["rows"][0]["engine"] == row.engine


def test_a_saved_bench_writes_back_the_same_json(tmp_path):
    data = payload("loadgen-mini")
    paths = BenchResult(data).save(tmp_path)
    again = BenchResult.load(paths["json"])
    assert again.data == data and again.to_markdown() == (RENDERED / "loadgen-mini.md").read_text()


def test_compliance_results_are_typed_and_serialise_as_before(tmp_path):
    entries = [{"qsl_idx": 1, "data": "0a"}, {"qsl_idx": 2, "data": "0B"}]
    o = outputs_match(entries, [{"qsl_idx": 1, "data": "0A"}, {"qsl_idx": 2, "data": "0c"}])
    assert o == OutputsMatch(logged=2, compared=2, equal=1, first_different_sample=2, passed=False)
    run = RunResult(validity="VALID", samples_per_s=100.0)
    c = judge("TEST04", run, RunResult(validity="VALID", samples_per_s=100.0), "offline", tmp_path, tmp_path,
              log="x/TEST04")
    assert isinstance(c, ComplianceResult) and c.why == ["LoadGen did not read the audit.config"] and not c.passed
    assert list(to_json(c)) == ["test", "validity", "speed_ratio", "audit_config_read", "passed", "result", "why",
                                "failed", "log"]
    assert c.failed == ["LoadGen"]
    c1 = judge("TEST01", run, run, "offline", tmp_path, tmp_path)
    assert c1.outputs == OutputsMatch() and "no response logged" in " ".join(c1.why)
    assert list(to_json(c1))[4] == "outputs"
    assert from_json(ComplianceResult, to_json(c1)) == c1
