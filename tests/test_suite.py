"""The declared benchmark suite (benchmarks/suite.toml, breaknli_fast/suite): every result file is named by exactly
one entry; every entry names a registered measurement and arguments of its config (full and smoke sizes, checked when
the file loads); each committed file's recorded call is its entry's at full sizes; the subsections an entry feeds
are those that read its file; ONLY / SKIP select entries; a malformed suite is a one-line error; the runner reports a
failing entry and goes on; a measurement of another package joins by entry point; scripts/ holds shims only."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from breaknli_fast.errors import UserError
from breaknli_fast.suite import document as D
from breaknli_fast.suite import registry
from breaknli_fast.suite import spec as S
from breaknli_fast.suite.main import main as suite_main
from breaknli_fast.suite.runner import recorded_args, run_entries

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TESTS = ROOT / "tests"


@pytest.fixture(scope="module")
def suite() -> S.Suite:
    return S.load_suite(S.DEFAULT_SUITE)


@pytest.fixture()
def plugins(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The test measurements of tests/plugins as another package declares them: an entry point each, found in this
    process and in the processes the runner starts (PYTHONPATH), no line of the package changed."""
    dist = tmp_path / "site" / "breaknli_fast_toys-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: breaknli-fast-toys\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[breaknli_fast.measurements]\n"
                                           "echo = plugins.echo_measurement:Echo\n"
                                           "tokens = plugins.tokens_measurement:Tokens\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.syspath_prepend(str(TESTS))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path / "site"), str(TESTS),
                                                      os.environ.get("PYTHONPATH", "")]))
    registry.rescan()
    yield
    for name in ("echo", "tokens"):
        registry._MEASUREMENTS.pop(name, None)


def values_of(entry: S.SuiteEntry, smoke: bool = False, bf16: bool = True) -> dict:
    return entry.checked(smoke=smoke, condition_values={"native-bf16": bf16}, env={})[1]


def test_every_result_file_is_named_by_exactly_one_entry(suite: S.Suite) -> None:
    files = sorted(p.name for p in RESULTS.glob("*.json"))
    assert files, "no result files"
    unnamed = [f for f in files if suite.entry_for_result(f) is None]
    assert not unnamed, f"result files no suite entry names: {unnamed}"
    results = [e.result for e in suite.entries]
    assert len(results) == len(set(results))


def test_every_entry_names_a_measurement_and_arguments_of_its_config(suite: S.Suite) -> None:
    """Checked when the file loads: each entry's measurement is registered and every argument is one of its
    config's options, of its type and in its bounds, at the full and the smoke sizes, bf16 or not."""
    for e in suite.entries:
        m = e.measure()
        names = {a.name for a in m.arguments(values_of(e))}
        for smoke in (False, True):
            for bf16 in (False, True):
                values = values_of(e, smoke, bf16)
                assert set(values) <= names, (e.name, set(values) - names)
                assert not any("{" in str(v) for v in values.values()), (e.name, values)
                e.config(smoke=smoke, condition_values={"native-bf16": bf16}, env={})
    mini = suite.entry("bench-mini")
    assert values_of(mini)["limit"] == 200 and values_of(mini, smoke=True)["limit"] == 10
    lg = values_of(suite.entry("loadgen-mini"))["engines"]
    assert lg.endswith(",openvino:fp32,openvino:bf16,openvino:int8")
    assert values_of(suite.entry("loadgen-mini"), bf16=False)["engines"].endswith(",openvino:fp32,openvino:int8")
    assert values_of(suite.entry("study-aenli"))["dataset"] == "aenli:3000"  # a placeholder inside a string


def test_the_full_sizes_are_each_files_recorded_call(suite: S.Suite) -> None:
    """Each committed file's measurement and arguments (as recorded; a file of the scripts before: its command read
    as the measurement's arguments) are its entry's at the full sizes (the CPU that measured the files computes
    bf16)."""
    stale = []
    for e in suite.entries:
        path = RESULTS / e.result
        if not path.exists():
            continue
        from breaknli_fast.suite.result import read_result

        name, recorded = recorded_args(read_result(path))
        got = values_of(e)
        if e.name == "probe-accuracy-cudagraph" and recorded.get("limit") == 2724:  # 2724 then, 0 (all 2,724) now
            recorded["limit"] = 0
        assert name == e.measurement, e.name
        if recorded != got:
            stale.append(f"{e.name}: recorded {sorted(set(recorded.items()) ^ set(got.items()))}")
    assert not stale, "\n".join(stale)


def test_a_file_of_the_scripts_reads_as_its_measurement_s_arguments() -> None:
    from breaknli_fast.suite.result import ResultFile

    old = ResultFile(kind="real_shapes", command="OMP_NUM_THREADS=2 python scripts/bench_real_shapes.py --job classify "
                                                  "--pairs 16 --result /tmp/x.json")
    assert recorded_args(old) == ("real-shapes", {"job": "classify", "pairs": 16})
    bench = ResultFile(kind="loadgen", command="python scripts/bench_save.py --result r.json -- --scenario offline "
                                               "--limit 8 --no-component-split")
    assert recorded_args(bench) == ("loadgen", {"scenario": "offline", "limit": 8, "component_split": False})
    gpu = ResultFile(kind="gpu_check", command="scripts/gpu_check.sh --out /root/out --limit 150 --budget 410")
    assert recorded_args(gpu) == ("gpu-check", {"limit": 150, "budget": 410})


def test_a_size_is_overridden_by_its_upper_case_environment_variable(suite: S.Suite) -> None:
    values = suite.entry("loadgen-flan-t5-small").values(
        condition_values={"native-bf16": False}, env={"LG_LOOP_SCENARIOS": "single-stream,multi-stream,offline",
                                                      "LG_GEN_QUERIES": "256"})
    assert values["scenario"] == "single-stream,multi-stream,offline" and values["min_queries"] == 256


def test_the_subsections_an_entry_feeds_are_those_that_read_its_files(suite: S.Suite) -> None:
    """An entry's ``feeds`` names every subsection of BENCHMARKS.md that reads its file, and no other (the renderer
    selects some subsections by it), and README/parity where the README's table does."""
    from breaknli_fast.suite.measurements.bench import parity_files

    keys = {s.key for s in D.sections()} | {"README/parity"}
    for e in suite.entries:
        assert e.feeds and set(e.feeds) <= keys, (e.name, set(e.feeds) - keys)
    results, problems = D.load(RESULTS)
    assert not problems
    read: dict[str, set[str]] = {r.name: set() for r in results}
    for s in D.sections():
        for r in s.select(results):
            read[r.name].add(s.key)
    for r in parity_files(results):
        read[r.name].add("README/parity")
    for name, got in read.items():
        assert got == set(suite.entry_for_result(name).feeds), name


def test_only_and_skip_select_entries(suite: S.Suite) -> None:
    assert suite.select() == suite.names()
    assert suite.select("bench-mini ray") == ["bench-mini", "ray"]  # in the suite's order
    assert suite.select(["ray,bench-mini"]) == ["bench-mini", "ray"]
    assert suite.select(None, "bench-mini") == suite.names()[1:]
    assert suite.select("bench-mini ray", "ray") == ["bench-mini"]
    with pytest.raises(UserError, match=r"no suite entry 'bench-mni'.*close: bench-mini"):
        suite.select("bench-mni")
    assert suite.entry_for_result("bench-real-loop-small.json").name == "real-loop-small"
    assert suite.entry_for_result("nothing.json") is None


VALID = """
[sizes.full]
n = 100
[sizes.smoke]
n = 2
[[entry]]
name = "a"
what = "an entry"
result = "a.json"
measurement = "generation"
args = { prompts = "{n}", k = 4 }
"""


@pytest.mark.parametrize("text, message", [
    ("[sizes.full\n", "not valid TOML"),
    (VALID + '[[entry]]\nname = "a"\nwhat = "again"\nresult = "b.json"\nmeasurement = "generation"\n',
     "duplicate entry name 'a'"),
    (VALID + '[[entry]]\nname = "b"\nwhat = "b"\nresult = "a.json"\nmeasurement = "generation"\n',
     "a.json is written by both a and b"),
    (VALID.replace("{n}", "{m}"), "suite entry a: unknown placeholder {m}"),
    (VALID.replace('result = "a.json"', 'result = "sub/a.json"'), "must be a .json file name"),
    (VALID.replace('what = "an entry"', 'what = "x"\nrequires = ["gpu"]'), "unknown requirement 'gpu'"),
    (VALID.replace('what = "an entry"', 'what = "x"\ncolour = "red"'), "unknown key(s) colour"),
    (VALID.replace('what = "an entry"', 'what = "x"\ncommand = "python x.py"'), "names a measurement and its args"),
    (VALID.replace("[sizes.smoke]\nn = 2", "[sizes.smoke]\nm = 2"), "name different variables"),
    (VALID.replace('measurement = "generation"', ""), "needs a non-empty string measurement"),
    (VALID.replace('measurement = "generation"', 'measurement = "nope"'), "unknown measurement 'nope'"),
    (VALID.replace("k = 4", "kk = 4"), "suite entry a: unknown argument 'kk'; close: k"),
    (VALID.replace("k = 4", 'k = "four"'), "suite entry a: argument k must be a whole number"),
    (VALID.replace("k = 4", "k = 0"), "suite entry a: argument k = 0: at least 1"),
    (VALID + "[conditions.quantum]\nwhat = 'x'\ntrue = {}\nfalse = {}\n", "unknown condition"),
    ("[sizes.full]\n", "no [[entry]]"),
])
def test_a_malformed_suite_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        S.load_suite(path)
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)
    (tmp_path / "ok.toml").write_text(VALID)
    S.load_suite(tmp_path / "ok.toml")  # the valid one loads


FAKE = """
[sizes.full]
n = 100
[sizes.smoke]
n = 2
[[entry]]
name = "fails"
what = "refuses to measure"
result = "fails.json"
measurement = "echo"
args = { fail = true }
[[entry]]
name = "writes"
what = "writes its argument, sized"
result = "writes.json"
measurement = "echo"
args = { n = "{n}" }
[[entry]]
name = "needs-venv"
what = "skipped without the transformers 5 venv"
result = "skipped.json"
measurement = "echo"
interpreter = "transformers5-venv"
"""


def _fake(tmp_path: Path) -> Path:
    path = tmp_path / "suite.toml"
    path.write_text(FAKE)
    return path


def test_run_entries_reports_a_failing_entry_and_goes_on(plugins, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    suite = S.load_suite(_fake(tmp_path))
    monkeypatch.setenv("PYTHON_TF5", str(tmp_path / "no-such-venv" / "python"))
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # as importing breaknli_fast sets it: not passed on
    lines: list[str] = []
    rc = run_entries(suite, None, python=sys.executable, results=tmp_path / "r", work=tmp_path / "w", smoke=True,
                     log=lines.append)
    assert rc == 1
    text = "\n".join(lines)
    assert "== fails: FAIL (exit 2) after" in text
    assert "== writes: PASS in" in text
    assert "== needs-venv: SKIP: needs transformers5-venv" in text
    assert lines[-1] == "failed: fails"
    doc = json.loads((tmp_path / "r" / "writes.json").read_text())
    assert doc["payload"] == {"n": 2, "omp_from_environment": False} and doc["smoke"] is True
    assert doc["measurement"] == {"name": "echo", "args": {"n": 2}, "entry": "writes"}
    assert doc["command"].startswith("breaknli-fast suite measure echo --n 2 --result ")
    assert "OMP_WAIT_POLICY" not in doc["machine"]["env"]
    lines.clear()
    assert run_entries(suite, ["writes"], python=sys.executable, results=tmp_path / "r", work=tmp_path / "w",
                       log=lines.append) == 0
    assert json.loads((tmp_path / "r" / "writes.json").read_text())["payload"]["n"] == 100


def test_a_measurement_of_another_package_joins_by_entry_point(plugins, tmp_path: Path, capsys) -> None:
    """tests/plugins/tokens_measurement.py (the one docs/benchmarks.md writes from scratch) is one module and one
    suite entry: found by its entry point, checked when the suite loads, measured, and its section rendered."""
    assert "tokens" in registry.names() and "bench" in registry.names()  # the built-in ones stay
    path = tmp_path / "suite.toml"
    path.write_text('[[entry]]\nname = "tokens-mini"\nwhat = "the mini classifier\'s tokenizer"\n'
                    'result = "tokens-mini.json"\nmeasurement = "tokens"\nargs = { pairs = 64, repeats = 1 }\n'
                    'feeds = ["7/tokens"]\n')
    with pytest.raises(UserError, match="tokens-mini: unknown argument 'pair'"):
        bad = tmp_path / "bad.toml"
        bad.write_text(path.read_text().replace("pairs = 64", "pair = 64"))
        S.load_suite(bad)
    results = tmp_path / "results"
    assert suite_main(["run", "--suite-file", str(path), "--results", str(results), "--work", str(tmp_path / "w")]) == 0
    out = tmp_path / "B.md"
    assert suite_main(["render", "--results", str(results), "--out", str(out), "--suite-file", str(path)]) == 0
    md = out.read_text()
    part = md.split("## 7. Tokenizers")[1]
    assert "### A classifier's tokenizer" in part and "`mini-nli`'s tokenizer on 64 pairs, median of 1 calls." in part
    assert "- command: `breaknli-fast suite measure tokens --pairs 64 --repeats 1 --result " in part
    from breaknli_fast.bench.types import to_json
    from breaknli_fast.suite.result import read_result

    doc = read_result(results / "tokens-mini.json")
    assert type(doc.payload).__name__ == "TokensPayload" and doc.payload.pairs_per_s > 0
    assert to_json(doc) == json.loads((results / "tokens-mini.json").read_text())
    capsys.readouterr()
    assert suite_main(["measure", "tokens", "--pairs", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --pairs 0: at least 1") and len(err.strip().splitlines()) == 1


def test_the_docs_write_the_test_measurement_from_scratch() -> None:
    """docs/benchmarks.md shows tests/plugins/tokens_measurement.py whole: the example is the module the test
    above registers and runs."""
    docs = (ROOT / "docs" / "benchmarks.md").read_text()
    module = (TESTS / "plugins" / "tokens_measurement.py").read_text()
    assert f"```python\n{module}```" in docs


def test_measure_refuses_what_its_config_does_not_declare_in_one_line(capsys) -> None:
    for args, message in ((["measure", "generation", "--prompt", "4"], "unrecognized arguments: --prompt 4"),
                          (["measure", "generation", "--k", "x"], "argument --k: invalid int value: 'x'"),
                          (["measure", "nope"], "unknown measurement 'nope'"),
                          (["measure", "generation", "--k", "4"], "--result FILE names the result file to write")):
        assert suite_main(args) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: ") and message in err and len(err.strip().splitlines()) == 1, err
    assert suite_main(["measure"]) == 0
    assert "gpu-check" in capsys.readouterr().out


def test_run_benchmarks_sh_runs_the_selected_entries_then_renders(plugins, tmp_path: Path) -> None:
    readme = tmp_path / "README.md"
    readme.write_text(f"{D.README_START}\n{D.README_END}\n")
    env = {**os.environ, "SUITE": str(_fake(tmp_path)), "ONLY": "fails writes", "SKIP": "fails",
           "RESULTS": str(tmp_path / "r"), "WORK": str(tmp_path / "w"), "PYTHON": sys.executable,
           "OUT_MD": str(tmp_path / "BENCHMARKS.md"), "README": str(readme)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "run_benchmarks.sh"), "--smoke"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "== writes: PASS" in proc.stderr and "fails" not in proc.stderr and "== render: PASS" in proc.stderr
    md = (tmp_path / "BENCHMARKS.md").read_text()
    assert md.startswith("# Benchmarks") and "**Smoke sizes**" in md and "n = 2" in md
    env["SKIP"] = ""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "run_benchmarks.sh")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "failed: fails" in proc.stderr and "== render: PASS" in proc.stderr


def test_scripts_hold_shims_only() -> None:
    """scripts/ keeps the GPU image's launcher and the run-everything wrapper: no Python of its own (at most 400
    lines in all), no make_benchmarks.py; each says why it is a script."""
    files = sorted(p for p in (ROOT / "scripts").iterdir() if p.is_file())
    assert sum(len(p.read_text().splitlines()) for p in files if p.suffix == ".py") <= 400
    assert not (ROOT / "scripts" / "make_benchmarks.py").exists()
    for path in files:
        assert "A script, not a bench option" in path.read_text()[:3000], \
            f"{path.name}: its header does not say why it is a script"


def test_bench_suite_is_an_alias_of_suite_run(plugins, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``breaknli-fast bench --suite NAMES``: the same runner as ``suite run``, from the bench's command line."""
    from typer.testing import CliRunner

    from breaknli_fast.cli import app

    path = _fake(tmp_path)
    monkeypatch.setenv("PYTHON_TF5", str(tmp_path / "no-such-venv" / "python"))
    runner = CliRunner()
    r = runner.invoke(app, ["bench", "--suite", "writes", "--suite-file", str(path), "--smoke", "--out",
                            str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r" / "writes.json").read_text())["payload"]["n"] == 2
    r = runner.invoke(app, ["bench", "--suite", "list", "--suite-file", str(path)])
    assert r.exit_code == 0 and "writes: writes its argument, sized" in r.output and "-> writes.json" in r.output
    r = runner.invoke(app, ["bench", "--suite", "nope", "--suite-file", str(path)])
    assert r.exit_code != 0 and "no suite entry 'nope'" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["bench", "--smoke"])
    assert r.exit_code != 0 and "--smoke goes with --suite NAMES" in r.output


def test_a_suite_run_writes_a_scratch_folder_unless_asked_and_smoke_files_say_so(plugins, tmp_path: Path,
                                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """``suite run NAME --smoke`` leaves the committed results untouched: its files go to a new scratch folder
    (runs/suite-<time>) and say they hold smoke figures; the committed folder is written with --update-results
    only, and never with --smoke."""
    path = _fake(tmp_path)
    committed = tmp_path / "results"  # the fake suite's own results folder, as benchmarks/results is the checkout's
    committed.mkdir()
    (committed / "writes.json").write_text('{"n": "measured"}')
    monkeypatch.chdir(tmp_path)
    assert suite_main(["run", "writes", "--suite-file", str(path), "--smoke"]) == 0
    assert (committed / "writes.json").read_text() == '{"n": "measured"}'
    written = list((tmp_path / "runs").glob("suite-*/writes.json"))
    assert len(written) == 1 and json.loads(written[0].read_text())["smoke"] is True
    for args in (["--smoke", "--update-results"], ["--update-results", "--results", str(tmp_path / "x")]):
        assert suite_main(["run", "writes", "--suite-file", str(path), *args]) == 2
    assert suite_main(["run", "writes", "--suite-file", str(path), "--update-results"]) == 0
    assert json.loads((committed / "writes.json").read_text())["payload"]["n"] == 100
    with pytest.raises(UserError, match="--smoke writes figures that mean nothing"):
        run_entries(S.load_suite(path), ["writes"], python=sys.executable, results=S.COMMITTED_RESULTS,
                    work=tmp_path / "w", smoke=True)


def test_render_leaves_smoke_files_out_unless_told(plugins, tmp_path: Path) -> None:
    from breaknli_fast.suite.result import load_results

    doc = {"schema": "breaknli-fast-result/1", "kind": "echo", "command": "x", "payload": {"n": 1}}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text(json.dumps({**doc, "smoke": True}))
    results, problems = load_results(tmp_path)
    assert [d.name for d in results] == ["a.json"] and "smoke figures" in problems[0]
    assert len(load_results(tmp_path, smoke=True)[0]) == 2
