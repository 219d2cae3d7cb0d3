"""The study contracts: a backend added with one module and one registry entry runs the BreakNLI loop, and a
probe written in the tests runs through the entry point with resume."""

from __future__ import annotations

import json
from typing import Any, Sequence

import pytest

from breaknli_fast import probes
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.engines import registry
from breaknli_fast.errors import UserError
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
from breaknli_fast.stats import rate_ci
from breaknli_fast.study import Probe, StudyContext, run_study
from breaknli_fast.progress import ProgressHook


@pytest.fixture()
def words_engine():
    registry.register("words", "tests.plugins.word_engine")
    yield "words"
    registry._ENGINES.pop("words", None)


def test_an_engine_registered_from_the_tests_runs_the_breaknli_loop(words_engine, tiny_tsv, tmp_path):
    # models are resolved by the backend: the word engine takes any name
    res = run_study("breaknli", BreakNLIConfig(k=6, u=2, s=1), dataset=str(tiny_tsv), engine=words_engine,
                    classifier="bag-of-words", generator="word-dropper", out=tmp_path / "run")
    assert res.models.engine == "words"
    f = res.report["funnel"]
    assert f["valid"] == 60 and sum(f[m]["evaluated"] for m in ("contradictive", "entailed")) > 0
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert cfg["engine"]["name"] == "words" and cfg["engine"]["classifier_details"]["engine"] == "words"


class AccuracyProbe(Probe):
    """Accuracy of M on (p, h), one group per gold label: the smallest probe there is."""

    name = "toy-accuracy"
    chunk_size = 4

    def __init__(self, config: Any = None):
        self.labels = tuple(config or ("entailment", "neutral", "contradiction"))

    def identity(self) -> dict[str, Any]:
        return {"toy": {"labels": list(self.labels)}}

    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        return [(lab, [ex for ex in data.examples if ex.label == lab]) for lab in self.labels]

    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        pred = ctx.models.classifier.classify([(ex.premise, ex.hypothesis) for ex in chunk]).labels
        ctx.times.add("classify", 0.0, len(chunk))
        return [{"group": group, "id": ex.id, "gold": ex.label, "pred": p, "correct": p == ex.label}
                for ex, p in zip(chunk, pred)]

    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        hits = [bool(r["correct"]) for r in records]
        point, lo, hi = rate_ci(hits)
        return {"accuracy": {"n": len(hits), "rate": point, "ci": [lo, hi]}}

    def markdown(self, report: dict[str, Any]) -> str:
        a = report["accuracy"]
        return f"# accuracy\n\n{a['rate']:.2f} % of {a['n']}\n"


class StopAfter(ProgressHook):
    """Interrupts the study after ``n`` chunks, as Ctrl-C would."""

    def __init__(self, n: int):
        self.n = n

    def advance(self, stage: str, n: int = 1) -> None:
        self.n -= 1
        if self.n <= 0:
            raise KeyboardInterrupt


def test_a_probe_from_the_tests_runs_through_the_entry_point_with_resume(tiny_roberta, tiny_tsv, tmp_path):
    probes.register("toy-accuracy", "tests.test_study:AccuracyProbe")
    try:
        common = dict(dataset=str(tiny_tsv), classifier=tiny_roberta, engine="torch")
        full = run_study("toy-accuracy", **common, out=tmp_path / "full")
        with pytest.raises(KeyboardInterrupt):
            run_study("toy-accuracy", **common, out=tmp_path / "cut", hook=StopAfter(5))
        assert len((tmp_path / "cut" / "samples.jsonl").read_text().splitlines()) == 5 * AccuracyProbe.chunk_size
        resumed = run_study("toy-accuracy", **common, out=tmp_path / "cut")
    finally:
        probes._PROBES.pop("toy-accuracy", None)  # the registry has no removal: a test cleans up after itself
    assert [json.loads(x) for x in (tmp_path / "cut" / "samples.jsonl").read_text().splitlines()] == full.records
    assert resumed.report["accuracy"] == full.report["accuracy"] and full.report["accuracy"]["n"] == 60
    assert (tmp_path / "full" / "report.md").read_text().startswith("# accuracy")
    assert json.loads((tmp_path / "full" / "config.json").read_text())["probe"] == "toy-accuracy"
    assert resumed.report["throughput"]["invocations"] == 2  # both invocations computed records


def test_unknown_probe_is_a_user_error():
    with pytest.raises(UserError, match="unknown probe 'nope'"):
        run_study("nope")


def test_resuming_records_of_other_code_warns_and_config_lists_every_writer(tiny_roberta, tiny_tsv, tmp_path):
    """A run directory resumed by another version or commit: a warning, and config.json's written_by keeps which
    code wrote the earlier records (config.json itself is rewritten by each invocation)."""
    probes.register("toy-accuracy", "tests.test_study:AccuracyProbe")
    msgs: list[str] = []

    class Hook(StopAfter):
        def message(self, text: str) -> None:
            msgs.append(text)

    try:
        common = dict(dataset=str(tiny_tsv), classifier=tiny_roberta, engine="torch")
        with pytest.raises(KeyboardInterrupt):
            run_study("toy-accuracy", **common, out=tmp_path / "cut", hook=StopAfter(2))
        cfg_path = tmp_path / "cut" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        assert [w["git"] for w in cfg["written_by"]] == [cfg["environment"]["git"]]
        cfg["written_by"] = [{"breaknli_fast": "0.0.9", "git": "0123abc", "started": cfg["started"]}]
        cfg_path.write_text(json.dumps(cfg))
        run_study("toy-accuracy", **common, out=tmp_path / "cut", hook=Hook(10**6))
    finally:
        probes._PROBES.pop("toy-accuracy", None)
    warned = [m for m in msgs if m.startswith("warning:") and "0.0.9 (0123abc)" in m]
    assert len(warned) == 1 and "records of both are in one run" in warned[0]
    after = json.loads(cfg_path.read_text())["written_by"]
    assert [w["breaknli_fast"] for w in after][0] == "0.0.9" and len(after) == 2


def test_resuming_records_of_other_sources_at_the_same_commit_warns(tiny_roberta, tiny_tsv, tmp_path):
    """The same version and commit with other sources (a changed checkout, a copy installed elsewhere): the digest
    of the sources tells them apart; the warning says so and written_by keeps both."""
    probes.register("toy-accuracy", "tests.test_study:AccuracyProbe")
    msgs: list[str] = []

    class Hook(StopAfter):
        def message(self, text: str) -> None:
            msgs.append(text)

    try:
        common = dict(dataset=str(tiny_tsv), classifier=tiny_roberta, engine="torch")
        with pytest.raises(KeyboardInterrupt):
            run_study("toy-accuracy", **common, out=tmp_path / "cut", hook=StopAfter(2))
        cfg_path = tmp_path / "cut" / "config.json"
        cfg = json.loads(cfg_path.read_text())
        assert cfg["written_by"][0]["code"] == cfg["environment"]["code"] and len(cfg["environment"]["code"]) == 12
        cfg["written_by"][0]["code"] = "0123456789ab"  # same version and commit, other sources
        cfg_path.write_text(json.dumps(cfg))
        run_study("toy-accuracy", **common, out=tmp_path / "cut", hook=Hook(10**6))
    finally:
        probes._PROBES.pop("toy-accuracy", None)
    warned = [m for m in msgs if m.startswith("warning:") and "written by other code" in m]
    assert len(warned) == 1 and "sources 0123456789ab" in warned[0], msgs
    after = json.loads(cfg_path.read_text())["written_by"]
    assert [w["code"] for w in after] == ["0123456789ab", cfg["environment"]["code"]]


def test_each_role_on_its_own_engine_is_checked_before_loading_and_recorded(tiny_t5, tiny_roberta, tiny_tsv,
                                                                           tmp_path, monkeypatch):
    """--generator-engine / --classifier-engine: the generator on ort, the classifier on torch, in one run; each
    role checked against its engine's declaration before anything loads; config.json names each role's engine
    and its runtime's version; the records are the all-torch run's (ort fp32 gives torch's candidates)."""
    pytest.importorskip("onnxruntime")
    from typer.testing import CliRunner

    from breaknli_fast.cli import app

    monkeypatch.setenv("BREAKNLI_FAST_CACHE", str(tmp_path / "cache"))
    common = ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--limit", "4", "--k", "4", "--u", "2",
              "--s", "1", "--max-new-tokens", "6"]
    runner = CliRunner()
    # a role its engine does not run: one line before any model loads or exports
    r = runner.invoke(app, [*common, "--engine", "torch", "--generator-engine", "tensorrt", "--out", str(tmp_path / "bad")])
    said = " ".join(r.output.split())
    assert r.exit_code != 0 and "tensorrt engine does not support generators" in said and "--generator-engine" in said
    # a precision its engine does not run: the precisions it runs, in one line
    r = runner.invoke(app, [*common, "--engine", "torch", "--generator-engine", "cudagraph", "--generator-precision",
                            "fp16", "--out", str(tmp_path / "bad")])
    said = " ".join(r.output.split())
    assert r.exit_code != 0 and "generator runs fp32, bf16, fp8 or int8 on cpu, not 'fp16'" in said
    assert not (tmp_path / "cache").exists() and not (tmp_path / "bad" / "config.json").exists()
    mixed = runner.invoke(app, [*common, "--engine", "torch", "--generator-engine", "ort", "--out", str(tmp_path / "m")])
    assert mixed.exit_code == 0, mixed.output
    ref = runner.invoke(app, [*common, "--engine", "torch", "--out", str(tmp_path / "t")])
    assert ref.exit_code == 0, ref.output
    cfg = json.loads((tmp_path / "m" / "config.json").read_text())
    assert cfg["engine"]["name"] == "clf-torch+gen-ort"
    assert cfg["roles"]["generator"]["engine"] == "ort" and cfg["roles"]["classifier"]["engine"] == "torch"
    assert cfg["engine"]["generator_engine"] == "ort" and cfg["engine"]["classifier_engine"] == "torch"
    assert cfg["roles"]["generator"]["runtime"]["onnxruntime"] and cfg["roles"]["classifier"]["runtime"]["torch"]
    same = [json.loads(x) for x in (tmp_path / "m" / "samples.jsonl").read_text().splitlines()]
    torch_only = [json.loads(x) for x in (tmp_path / "t" / "samples.jsonl").read_text().splitlines()]
    assert [s.get("candidates") for s in same] == [s.get("candidates") for s in torch_only]
    assert any(s.get("candidates") for s in same)
