"""MLPerf's compliance tests as the rules of MLPerf Inference v6.0 assign them to each role
(breaknli_fast/bench/loadgen/compliance.py), judged from LoadGen's logs as written here by hand (no LoadGen needed):
the classifier runs TEST01 and TEST04, the generator TEST06, TEST07 and TEST09, TEST05 only when named and labelled
retired wherever it is shown; TEST04's repeated sample lies inside any library; TEST06 and TEST09 catch what they
are for; an unknown test is one line before anything loads."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from breaknli_fast.bench.compare import compare, compare_markdown
from breaknli_fast.bench.loadgen import compliance
from breaknli_fast.bench.loadgen.metrics import definitions, values
from breaknli_fast.bench.loadgen.roles import generator_payload
from breaknli_fast.bench.loadgen.types import ComplianceResult, RunResult
from breaknli_fast.bench.result import BenchResult
from breaknli_fast.cli import app
from breaknli_fast.errors import UserError

EOS = 1


def test_each_role_runs_the_tests_the_rules_give_it_and_the_retired_one_only_when_named():
    assert compliance.RULES == "MLPerf Inference v6.0"
    assert compliance.parse_compliance("all", ("classifier",)) == ("TEST01", "TEST04")
    assert compliance.parse_compliance(None, ("generator",)) == ("TEST06", "TEST07", "TEST09")
    assert compliance.parse_compliance("all", ("classifier", "generator", "study")) == (
        "TEST01", "TEST04", "TEST06", "TEST07", "TEST09")
    assert compliance.parse_compliance("test05,TEST01, test01", ("classifier",)) == ("TEST01", "TEST05")
    assert compliance.tests_for("generator", "offline", ("TEST01", "TEST06", "TEST09"), True) == (["TEST06", "TEST09"], [])
    run, skipped = compliance.tests_for("generator", "server", ("TEST06", "TEST09"), False)
    assert run == ["TEST09"] and "TEST06 not run in server" in skipped[0]
    with pytest.raises(UserError, match=r"--compliance-tests TEST99: unknown test; use TEST01, TEST04, TEST06"):
        compliance.parse_compliance("TEST01,TEST99")
    with pytest.raises(UserError, match="TEST04 applies to the classifier / study role under MLPerf Inference v6.0"):
        compliance.parse_compliance("TEST04", ("generator",))
    assert compliance.label("TEST05") == "TEST05 (retired 2024-11)" and compliance.label("TEST01") == "TEST01"


def test_an_unknown_test_is_refused_in_one_line_before_anything_loads(tmp_path):
    for args, said in ((["--compliance-tests", "TEST99"], "error: --compliance-tests TEST99: unknown test"),
                       (["--roles", "generator", "--compliance-tests", "TEST01"],
                        "error: --compliance-tests TEST01 applies to the classifier / study role"),
                       (["--random-weights", "flan-t5-small", "--roles", "generator", "--compliance-tests", "TEST07"],
                        "error: --compliance-tests TEST07 judges accuracy")):
        res = CliRunner().invoke(app, ["bench", "--scenario", "offline", *args, "--out", str(tmp_path / "b")])
        assert res.exit_code == 2, res.output
        lines = res.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith(said), res.output
        assert not (tmp_path / "b").exists()
    res = CliRunner().invoke(app, ["bench", "--compliance-tests", "TEST01", "--out", str(tmp_path / "b")])
    assert res.exit_code == 2 and "runs with --scenario" in res.output


@pytest.mark.parametrize("size, index", [(1, 0), (2, 1), (3, 2), (4, 3), (256, 3)])
def test_test04_repeats_a_sample_inside_the_library(size, index):
    text = compliance.audit_config("TEST04", size)
    assert f"*.*.performance_issue_same_index = {index}\n" in text and "*.*.performance_issue_same = 1" in text


def test_test04_repeats_the_longest_input_where_the_lengths_are_known():
    """A short sample repeated runs faster with no cache at all (fewer tokens, no padding in a batch): the longest
    one is slower than the mix unless answers are reused."""
    assert compliance.same_index(5, [10, 40, 7, 40, 3]) == 1
    assert "performance_issue_same_index = 0" in compliance.audit_config("TEST04", 2, None, [9, 4])
    assert compliance.same_index(5, [1, 2]) == 3  # lengths of another library: the suite's index


def test_test07_and_test09_issue_the_whole_library_and_log_every_response():
    text = compliance.audit_config("TEST07", 300, 100)
    assert "*.*.sample_concatenate_permutation = 1" in text and "*.*.min_query_count = 300" in text
    assert f"*.*.accuracy_log_sampling_target = {compliance.LOG_ALL}" in text
    assert "*.*.min_query_count = 662" in compliance.audit_config("TEST09", 4, 662)  # never below the run's own
    assert "min_query_count" not in compliance.audit_config("TEST06", 4, 662)


# -- the generator's responses as LoadGen logs them --------------------------------------------------------------

def _entry(idx: int, ids: list[list[int]], seq: int = 0, first: list[int] | None = None, count: int | None = None,
           texts: list[str] | None = None) -> dict:
    texts = texts or [" ".join(map(str, r)) for r in ids]
    e = {"seq_id": seq, "qsl_idx": idx, "data": generator_payload(texts, ids, 0).hex().upper(),
         "token_count": sum(len(r) for r in ids) if count is None else count}
    e["token_data"] = json.dumps([r[0] for r in ids] if first is None else first).encode().hex().upper()
    return e


ROWS = {0: [[5, 6, EOS], [7, EOS]], 1: [[9, 9, 9, EOS], [5, EOS]]}


def _checks(entries, accuracy=None, scenario="single-stream"):
    accuracy = accuracy if accuracy is not None else [_entry(i, r) for i, r in ROWS.items()]
    return {c.check: c for c in compliance.token_checks(entries, accuracy, EOS, scenario)}


def test_test06_passes_consistent_outputs_and_names_each_inconsistency():
    ok = _checks([_entry(i, r, seq=i) for i, r in ROWS.items()])
    assert all(c.passed and c.compared == 2 for c in ok.values()), ok
    # candidates reordered once decoded (CTranslate2 sorts them by score): the same first tokens
    assert _checks([_entry(0, ROWS[0], first=[7, 5])])["first token as reported to LoadGen"].passed
    # the first token told to LoadGen is not the output's
    bad = _checks([_entry(0, ROWS[0]), _entry(1, ROWS[1], first=[3, 5])])["first token as reported to LoadGen"]
    assert not bad.passed and (bad.failing, bad.first_failing_sample) == (1, 1)
    # the first token differs from the accuracy run's
    moved = _checks([_entry(0, [[4, 6, EOS], [7, EOS]])])["first token as in the accuracy run"]
    assert not moved.passed and moved.first_failing_sample == 0
    # two end-of-sequence tokens in a candidate, or one before its end
    for rows in ([[5, EOS, EOS], [7, EOS]], [[5, EOS, 6], [7, EOS]]):
        eos = _checks([_entry(0, rows)])["at most one end-of-sequence token per candidate, at its end"]
        assert not eos.passed
    # the token count LoadGen received is not the output's length
    count = _checks([_entry(0, ROWS[0], count=4)])["token count = output length"]
    assert not count.passed and count.failing == 1
    # Offline: LoadGen logs no first-token response; that check says it does not apply
    off = [{k: v for k, v in _entry(i, r).items() if k != "token_data"} for i, r in ROWS.items()]
    c = _checks(off, scenario="offline")["first token as reported to LoadGen"]
    assert c.passed and c.compared == 0 and "not applicable" in c.note
    assert not _checks(off)["first token as reported to LoadGen"].passed  # elsewhere its absence fails
    # an engine with texts only: nothing can be checked, and the test says so
    texts = {"seq_id": 0, "qsl_idx": 0, "data": generator_payload(["a b"], None, 2).hex(), "token_count": 2}
    (only,) = compliance.token_checks([texts], [], None)
    assert not only.passed and "texts without token ids" in only.note


def _logs(folder: Path, entries: list[dict], audit: bool = True) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "mlperf_log_accuracy.json").write_text(json.dumps(entries))
    (folder / "mlperf_log_detail.txt").write_text("Found Audit Config file (audit.config).\n" if audit else "")
    return folder


def test_test09_fails_a_truncating_generator_on_its_outputs_and_test07_needs_the_whole_library(tmp_path):
    ref = _logs(tmp_path / "ref", [_entry(i, [[5, 6, 7, 8, EOS]] * 2) for i in range(3)])  # 5 tokens a candidate
    run = RunResult(validity="VALID", samples_per_s=10.0)
    full = _logs(tmp_path / "full", [_entry(i, [[5, 6, 7, 8, EOS]] * 2, seq=i) for i in range(3)])
    c = compliance.judge("TEST09", run, run, "offline", full, ref, size=3, reference_accuracy_folder=ref)
    assert c.passed and c.result == "PASS" and c.checks[1].value == pytest.approx(5.0)
    cut = _logs(tmp_path / "cut", [_entry(i, [[5, 6]] * 2, seq=i) for i in range(3)])  # cut to 2 tokens
    c = compliance.judge("TEST09", run, run, "offline", cut, cut, size=3, reference_accuracy_folder=ref)
    assert c.result == "FAIL" and c.failed == ["outputs"]
    assert any("mean output length" in w and "2.00 tokens per candidate against 5.00 (-60.0 %)" in w for w in c.why)
    # padding is caught alike: 10 % longer is the bar
    pad = _logs(tmp_path / "pad", [_entry(i, [[5, 6, 7, 8, 9, EOS]] * 2, seq=i) for i in range(3)])
    assert not compliance.judge("TEST09", run, run, "offline", pad, pad, size=3, reference_accuracy_folder=ref).passed
    # TEST07: a sample of the library that was never answered in performance mode
    part = _logs(tmp_path / "part", [_entry(i, [[5, EOS]], seq=i) for i in range(2)])
    c = compliance.judge("TEST07", run, run, "offline", part, part, size=3)
    assert not c.passed and c.checks[0].first_failing_sample == 2
    c = compliance.judge("TEST07", run, run, "offline", full, full, size=3)
    assert c.passed  # so far: the accuracy is judged once the scores are known
    compliance.judge_accuracy(c, 98.0, 99.0, 3)
    assert c.result == "FAIL" and c.failed == ["outputs"] and "98.00 % of the reference" in c.why[-1]
    assert compliance.performance_answers(json.loads((full / "mlperf_log_accuracy.json").read_text()))[2] == \
        ["5 6 7 8 1", "5 6 7 8 1"]


def test_a_failing_test_says_whether_outputs_or_speed_failed(tmp_path):
    acc = _logs(tmp_path / "acc", [{"qsl_idx": 0, "data": "0A"}, {"qsl_idx": 1, "data": "0B"}])
    same = _logs(tmp_path / "same", [{"qsl_idx": 0, "data": "0a"}])
    other = _logs(tmp_path / "other", [{"qsl_idx": 1, "data": "0C"}])
    perf = RunResult(validity="VALID", samples_per_s=100.0)
    assert compliance.judge("TEST01", RunResult(validity="VALID", samples_per_s=105.0), perf, "offline", same,
                            acc).passed
    slow = compliance.judge("TEST01", RunResult(validity="VALID", samples_per_s=80.0), perf, "offline", same, acc)
    assert slow.failed == ["speed"] and slow.why[0].startswith("speed: performance -20.0 %")
    wrong = compliance.judge("TEST01", perf, perf, "offline", other, acc)
    assert wrong.failed == ["outputs"] and wrong.why[0].startswith("outputs: 1 of 1 responses")
    cached = compliance.judge("TEST04", RunResult(validity="VALID", samples_per_s=150.0), perf, "offline", same, acc)
    assert cached.failed == ["speed"]
    invalid = compliance.judge("TEST04", RunResult(validity="INVALID", samples_per_s=100.0), perf, "offline", same,
                               acc)
    assert invalid.failed == ["LoadGen"]


def _report_with(tests: dict[str, ComplianceResult]) -> dict:
    row = {"engine": "ort:int8", "role": "classifier", "scenario": "offline", "reasons": [], "warnings": [],
           "metrics": values(result="VALID", samples_per_s=100.0),
           "compliance": {t: json.loads(json.dumps(_to_json(c))) for t, c in tests.items()}}
    return {"schema": "breaknli-fast-bench/3", "kind": "scenarios", "reference": "torch:fp32",
            "loadgen": {"version": "6.0.17", "rules": "x", "compliance_rules": compliance.RULES},
            "scenario_metrics": definitions(), "scenarios": [row], "engines": [], "passed": True, "failures": []}


def _to_json(c):
    from breaknli_fast.bench.types import to_json

    return to_json(c)


def test_test05_is_labelled_retired_in_every_rendering(tmp_path):
    acc = _logs(tmp_path / "acc", [{"qsl_idx": 0, "data": "0A"}])
    t5 = _logs(tmp_path / "t5", [])
    (t5 / "mlperf_log_detail.txt").write_text("Found Audit Config file\ntest05 flag detected\n")
    run = RunResult(validity="VALID", samples_per_s=100.0)
    c5 = compliance.judge("TEST05", run, run, "offline", t5, acc)
    c1 = compliance.judge("TEST01", run, run, "offline", _logs(tmp_path / "t1", [{"qsl_idx": 0, "data": "0a"}]), acc)
    assert c5.passed and c5.retired == "2024-11" and c1.retired is None
    data = _report_with({"TEST01": c1, "TEST05": c5})
    assert data["scenarios"][0]["compliance"]["TEST05"]["retired"] == "2024-11"  # JSON
    result = BenchResult(data)
    md = result.to_markdown()
    assert "| engine | role | scenario | TEST01 | TEST05 (retired 2024-11) |" in md  # Markdown
    assert "As MLPerf Inference v6.0 assigns them to each role" in md
    console = Console(width=200, record=True, file=io.StringIO())
    console.print(result.table())
    assert "TEST05 (retired 2024-11)" in console.export_text()  # terminal
    cm = compare_markdown(compare(result, BenchResult(_report_with({"TEST01": c1}))), "A", "B")
    assert "|  | compliance TEST05 (retired 2024-11) | PASS (+0.0 %) | – |  |" in cm  # compare
    from breaknli_fast.bench.loadgen.plot import scenario_html

    assert "TEST05 (retired 2024-11)" in scenario_html(result.scenarios)  # the HTML report


# the figures of the runs in order: the test, and after a failure on speed alone a performance run and the test again
@pytest.mark.parametrize("speeds, result, runs", [((80.0, 90.0, 88.0), "PASS", 3), ((80.0, 100.0, 85.0), "FAIL", 3),
                                                   ((101.0,), "PASS", 1), ((70.0,), "FAIL", 1)])
def test_a_test_failed_on_speed_alone_runs_once_more_and_keeps_both_figures(tmp_path, monkeypatch, speeds, result,
                                                                           runs):
    """A compliance run 20 % slower than the performance run, outputs equal: a performance run made for it and the
    test once more, judged against that performance run (its cell names the first run's speed); a second failure
    stands; a failure on the outputs (the last case: the logged response differs) is not run again."""
    from types import SimpleNamespace

    from breaknli_fast.bench.loadgen import runner as lr

    base = tmp_path / "row"
    _logs(base / "accuracy", [{"qsl_idx": 0, "data": "0A"}])
    answer = "0B" if speeds == (70.0,) else "0A"
    calls: list[Path] = []

    def fake_perf(ctx, runner, scenario, hints, tokens, folder, device, test=None, offline_qps=None):
        assert (test is None) == (folder.name == "performance")
        _logs(folder, [{"qsl_idx": 0, "data": answer}])
        calls.append(folder)
        return SimpleNamespace(run=SimpleNamespace(result=RunResult(validity="VALID",
                                                                    samples_per_s=speeds[len(calls) - 1])),
                               retry=None)

    monkeypatch.setattr(lr, "_perf", fake_perf)
    ctx = SimpleNamespace(settings=SimpleNamespace(compliance=("TEST01",)), notes=[], out=tmp_path,
                          ref=SimpleNamespace(label="torch:fp32"), log=lambda *_: None)
    perf = SimpleNamespace(run=SimpleNamespace(result=RunResult(validity="VALID", samples_per_s=100.0)), retry=None)
    c = lr._compliance(ctx, SimpleNamespace(size=4), "classifier", "offline", None, False, base, perf, "cpu")["TEST01"]
    assert len(calls) == runs and c.result == result
    assert [str(p.relative_to(base)) for p in calls] == ["compliance/TEST01", "compliance/TEST01-rerun/performance",
                                                         "compliance/TEST01-rerun"][:runs]
    from breaknli_fast.bench.loadgen.report import compliance_cell

    if runs == 3:
        assert c.first_speed_ratio == pytest.approx(0.8) and c.first_log == "row/compliance/TEST01"
        assert c.speed_ratio == pytest.approx(speeds[2] / speeds[1])  # against the performance run made for it
        assert c.rerun_performance == {"log": "row/compliance/TEST01-rerun/performance", "validity": "VALID",
                                       "samples_per_s": speeds[1]}
        assert compliance_cell(c).startswith(f"{result}") and "on a re-run after -20.0 %" in compliance_cell(c)
        assert "against a performance run made for it" in compliance_cell(c)
    else:
        assert c.first_speed_ratio is None and "re-run" not in compliance_cell(c)
    if speeds == (70.0,):
        assert c.failed == ["speed", "outputs"]
