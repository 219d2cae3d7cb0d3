"""The declared benchmark suite (benchmarks/suite.toml, breaknli_fast/bench/suite.py): every result file is named
by exactly one entry, whose command runs a script that exists with options that exist, for the full and the smoke
sizes; the subsections an entry says it feeds are those that read its files; ONLY / SKIP select entries; a
malformed suite is a one-line error; the runner reports a failing entry and goes on. No model is loaded."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from breaknli_fast.bench import suite as S
from breaknli_fast.errors import UserError

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
sys.path.insert(0, str(ROOT / "scripts"))

import make_benchmarks  # noqa: E402
import provenance  # noqa: E402


@pytest.fixture(scope="module")
def suite() -> S.Suite:
    return S.load_suite(S.DEFAULT_SUITE)


def argv_of(entry: S.SuiteEntry, smoke: bool, bf16: bool) -> list[str]:
    return entry.argv(python="python", results="benchmarks/results", work="/tmp/w", smoke=smoke,
                      condition_values={"native-bf16": bf16}, env={})


def test_every_result_file_is_named_by_exactly_one_entry(suite: S.Suite) -> None:
    files = sorted(p.name for p in RESULTS.glob("*.json"))
    assert files, "no result files"
    unnamed = [f for f in files if suite.entry_for_result(f) is None]
    assert not unnamed, f"result files no suite entry names: {unnamed}"
    owners: dict[str, list[str]] = {}
    for e in suite.entries:
        for r in e.results:
            owners.setdefault(r, []).append(e.name)
    assert all(len(v) == 1 for v in owners.values())


def test_each_entry_writes_its_results_into_the_results_folder(suite: S.Suite) -> None:
    for e in suite.entries:
        words = argv_of(e, smoke=False, bf16=True)
        for r in e.results:
            if e.copy:
                assert e.copy.endswith("/gpu-check.json") and "--out" in words, e.name
            else:
                assert f"benchmarks/results/{r}" in words, (e.name, r)


def test_the_full_sizes_reproduce_each_files_recorded_command(suite: S.Suite) -> None:
    """The argv of an entry at full sizes is the command its result file recorded (paths of one machine aside;
    the CPU that measured the files computes bf16)."""
    for e in suite.entries:
        for r in e.results:
            path = RESULTS / r
            if not path.exists():
                continue
            recorded = shlex.split(json.loads(path.read_text())["command"])
            # paths of the checkout that ran it (this one, or another clone) relative, scratch folders $WORK/<name>
            recorded = [provenance.portable(w).replace("../benchmarks", "benchmarks")
                        .replace("$OUT", f"/tmp/w/{e.name}").replace("$WORK", "/tmp/w") for w in recorded]
            got = argv_of(e, smoke=False, bf16=True)
            if got[0] == "bash":
                got = got[1:]
            else:
                got[0] = "python"  # {python} or {python_tf5}
            if e.name == "probe-accuracy-cudagraph":  # --limit 2724 then, 0 (all 2,724 pairs) now
                recorded[recorded.index("2724")] = "0"
            assert sorted(got) == sorted(recorded), e.name


@pytest.mark.parametrize("smoke", [False, True])
@pytest.mark.parametrize("bf16", [False, True])
def test_placeholders_resolve_for_full_and_smoke_sizes(suite: S.Suite, smoke: bool, bf16: bool) -> None:
    for e in suite.entries:
        words = argv_of(e, smoke, bf16)
        assert not any("{" in w or "}" in w for w in words), (e.name, words)
        assert "" not in words, e.name
    mini = argv_of(suite.entry("bench-mini"), smoke, bf16)
    assert mini[mini.index("--limit") + 1] == ("10" if smoke else "200")
    lg = argv_of(suite.entry("loadgen-mini"), smoke, bf16)
    engines = lg[lg.index("--engines") + 1]
    assert engines.endswith(",openvino:fp32,openvino:bf16,openvino:int8" if bf16 else ",openvino:fp32,openvino:int8")


def test_a_size_is_overridden_by_its_upper_case_environment_variable(suite: S.Suite) -> None:
    e = suite.entry("loadgen-flan-t5-small")
    words = e.argv(python="python", results="r", work="w", condition_values={"native-bf16": False},
                   env={"LG_LOOP_SCENARIOS": "single-stream,multi-stream,offline", "LG_GEN_QUERIES": "256"})
    assert words[words.index("--scenario") + 1] == "single-stream,multi-stream,offline"
    assert words[words.index("--min-queries") + 1] == "256"


def _bench_options() -> set[str]:
    import typer.main

    from breaknli_fast.cli import app

    bench = typer.main.get_command(app).commands["bench"]  # type: ignore[attr-defined]
    return {o for p in bench.params for o in [*p.opts, *getattr(p, "secondary_opts", [])]}


def test_every_command_runs_a_script_that_exists_with_options_it_has(suite: S.Suite) -> None:
    bench_options = _bench_options()
    for e in suite.entries:
        script = e.script()
        assert script is not None, f"{e.name}: no scripts/... in its command"
        if e.at_commit:  # the script as it was at that commit
            assert (ROOT / ".git").exists() is False or subprocess.run(
                ["git", "-C", str(ROOT), "cat-file", "-e", f"{e.at_commit}:{script}"]).returncode == 0, e.name
            continue
        assert (ROOT / script).is_file(), f"{e.name}: {script} does not exist"
        for smoke in (False, True):
            words = argv_of(e, smoke, True)
            own, bench = (words[:words.index("--")], words[words.index("--") + 1:]) if "--" in words else (words, [])
            text = (ROOT / script).read_text()
            if script.endswith(".sh"):
                text += (ROOT / "scripts" / "gpu_check.py").read_text()
            for w in own:
                if w.startswith("--"):
                    flag = w.replace("--no-", "--", 1) if f'"{w}"' not in text else w  # argparse's --X / --no-X
                    assert f'"{flag}"' in text, f"{e.name}: {script} has no option {w}"
            for w in bench:
                if w.startswith("--"):
                    assert w.split("=")[0] in bench_options, f"{e.name}: breaknli-fast bench has no option {w}"


def test_the_subsections_an_entry_feeds_are_those_that_read_its_files(suite: S.Suite) -> None:
    """An entry's ``feeds`` names every subsection of BENCHMARKS.md that reads its files, and no other (the
    renderer selects some subsections by it), and README/parity where the README's table does."""
    keys = {sub[0] for _, _, subs in make_benchmarks.SECTIONS for sub in subs} | {"README/parity"}
    for e in suite.entries:
        assert e.feeds and set(e.feeds) <= keys, (e.name, set(e.feeds) - keys)
    results, problems = make_benchmarks.load_results(RESULTS)
    assert not problems
    read: dict[str, set[str]] = {Path(r["file"]).name: set() for r in results}
    for _, _, subs in make_benchmarks.SECTIONS:
        for sub in subs:
            for r in sub[4](results):
                read[Path(r["file"]).name].add(sub[0])
    for r in make_benchmarks.parity_files(results):
        read[Path(r["file"]).name].add("README/parity")
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
results = ["a.json"]
command = "{python} -c pass {n}"
"""


@pytest.mark.parametrize("text, message", [
    ("[sizes.full\n", "not valid TOML"),
    (VALID + '[[entry]]\nname = "a"\nwhat = "again"\nresults = ["b.json"]\ncommand = "x"\n', "duplicate entry name 'a'"),
    (VALID + '[[entry]]\nname = "b"\nwhat = "b"\nresults = ["a.json"]\ncommand = "x"\n', "a.json is written by both a and b"),
    (VALID.replace("{n}", "{m}"), "unknown placeholder {m}"),
    (VALID.replace('results = ["a.json"]', 'results = ["sub/a.json"]'), "must be a .json file name"),
    (VALID.replace('what = "an entry"', 'what = "x"\nrequires = ["gpu"]'), "unknown requirement 'gpu'"),
    (VALID.replace('what = "an entry"', 'what = "x"\ncolour = "red"'), "unknown key(s) colour"),
    (VALID.replace("[sizes.smoke]\nn = 2", "[sizes.smoke]\nm = 2"), "name different variables"),
    (VALID.replace('command = "{python} -c pass {n}"', ""), "needs a non-empty string command"),
    (VALID + "[conditions.quantum]\nwhat = 'x'\ntrue = {}\nfalse = {}\n", "unknown condition"),
    ("[sizes.full]\n", "no [[entry]]"),
])
def test_a_malformed_suite_is_a_one_line_error(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(text)
    with pytest.raises(UserError) as err:
        S.load_suite(path)
    assert message in str(err.value) and "\n" not in str(err.value)
    S.load_suite(_write(tmp_path, VALID))  # the valid one loads


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "ok.toml"
    path.write_text(text)
    return path


FAKE = """
[sizes.full]
n = 100
[sizes.smoke]
n = 2
[[entry]]
name = "fails"
what = "exits 3"
results = ["fails.json"]
command = "{python} -c 'import sys; sys.exit(3)'"
[[entry]]
name = "writes"
what = "writes its result, sized"
results = ["writes.json"]
command = '''{python} -c "import json, os, sys; open(sys.argv[1], 'w').write(json.dumps({'n': sys.argv[2], 'omp': os.environ.get('OMP_WAIT_POLICY')}))" {results}/writes.json {n}'''
[[entry]]
name = "needs-cuda-venv"
what = "skipped without the transformers 5 venv"
results = ["skipped.json"]
command = "{python_tf5} -c pass"
requires = ["transformers5-venv"]
"""


def test_run_entries_reports_a_failing_entry_and_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(FAKE)
    suite = S.load_suite(path)
    monkeypatch.setenv("PYTHON_TF5", str(tmp_path / "no-such-venv" / "python"))
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # as importing breaknli_fast sets it: not passed on
    lines: list[str] = []
    rc = S.run_entries(suite, None, python=sys.executable, results=tmp_path / "r", work=tmp_path / "w", smoke=True,
                       log=lines.append)
    assert rc == 1
    text = "\n".join(lines)
    assert "== fails: FAIL (exit 3) after" in text
    assert "== writes: PASS in" in text
    assert "== needs-cuda-venv: SKIP: needs transformers5-venv" in text
    assert lines[-1] == "failed: fails"
    assert json.loads((tmp_path / "r" / "writes.json").read_text()) == {"n": "2", "omp": None, "smoke": True}
    lines.clear()
    assert S.run_entries(suite, ["writes"], python=sys.executable, results=tmp_path / "r", work=tmp_path / "w",
                         log=lines.append) == 0
    assert json.loads((tmp_path / "r" / "writes.json").read_text())["n"] == "100"


def test_run_benchmarks_sh_runs_the_selected_entries_then_make_benchmarks(tmp_path: Path) -> None:
    path = tmp_path / "suite.toml"
    path.write_text(FAKE)
    readme = tmp_path / "README.md"
    readme.write_text(f"{make_benchmarks.README_START}\n{make_benchmarks.README_END}\n")
    env = {"PATH": "/usr/bin:/bin", "SUITE": str(path), "ONLY": "fails writes", "SKIP": "fails",
           "RESULTS": str(tmp_path / "r"), "WORK": str(tmp_path / "w"), "PYTHON": sys.executable,
           "OUT_MD": str(tmp_path / "BENCHMARKS.md"), "README": str(readme)}
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "run_benchmarks.sh"), "--smoke"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert "== writes: PASS" in proc.stderr and "fails" not in proc.stderr and "== make-benchmarks: PASS" in proc.stderr
    assert (tmp_path / "BENCHMARKS.md").read_text().startswith("# Benchmarks")
    env["SKIP"] = ""
    proc = subprocess.run(["bash", str(ROOT / "scripts" / "run_benchmarks.sh")], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 1 and "failed: fails" in proc.stderr and "== make-benchmarks: PASS" in proc.stderr


def test_every_script_that_stays_a_script_says_why() -> None:
    for path in sorted((ROOT / "scripts").iterdir()):
        if path.suffix in (".py", ".sh"):
            assert "A script, not a bench option" in path.read_text()[:3000], \
                f"{path.name}: its docstring does not say why it is a script"


def test_bench_suite_runs_named_entries_into_out_and_lists_them(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """``breaknli-fast bench --suite NAMES``: the same runner as the script, from the command line."""
    from typer.testing import CliRunner

    from breaknli_fast.cli import app

    path = tmp_path / "suite.toml"
    path.write_text(FAKE)
    monkeypatch.setenv("PYTHON_TF5", str(tmp_path / "no-such-venv" / "python"))
    runner = CliRunner()
    r = runner.invoke(app, ["bench", "--suite", "writes", "--suite-file", str(path), "--smoke", "--out",
                            str(tmp_path / "r")])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "r" / "writes.json").read_text())["n"] == "2"
    r = runner.invoke(app, ["bench", "--suite", "fails,writes", "--suite-file", str(path), "--out", str(tmp_path / "r")])
    assert r.exit_code == 1
    assert json.loads((tmp_path / "r" / "writes.json").read_text())["n"] == "100"
    r = runner.invoke(app, ["bench", "--suite", "list", "--suite-file", str(path)])
    assert r.exit_code == 0 and "writes: writes its result, sized" in r.output and "needs transformers5-venv" in r.output
    r = runner.invoke(app, ["bench", "--suite", "nope", "--suite-file", str(path)])
    assert r.exit_code != 0 and "no suite entry 'nope'" in r.output and "Traceback" not in r.output
    r = runner.invoke(app, ["bench", "--smoke"])
    assert r.exit_code != 0 and "--smoke goes with --suite NAMES" in r.output


def test_bench_suite_writes_a_scratch_folder_unless_asked_and_smoke_files_say_so(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """``bench --suite NAME --smoke`` leaves the committed results untouched: its files go to a new scratch folder
    (runs/suite-<time>) and say they hold smoke figures; the committed folder is written with --update-results
    only, and never with --smoke."""
    from typer.testing import CliRunner

    from breaknli_fast.cli import app

    path = tmp_path / "suite.toml"
    path.write_text(FAKE)
    committed = tmp_path / "results"  # the fake suite's own results folder, as benchmarks/results is the checkout's
    committed.mkdir()
    (committed / "writes.json").write_text('{"n": "measured"}')
    monkeypatch.chdir(tmp_path)
    runner = CliRunner()
    r = runner.invoke(app, ["bench", "--suite", "writes", "--suite-file", str(path), "--smoke"])
    assert r.exit_code == 0, r.output
    assert (committed / "writes.json").read_text() == '{"n": "measured"}'
    written = list((tmp_path / "runs").glob("suite-*/writes.json"))
    assert len(written) == 1 and json.loads(written[0].read_text()) == {"n": "2", "omp": None, "smoke": True}
    assert "suite results in" in r.output and "smoke sizes" in r.output
    for args in (["--smoke", "--update-results"], ["--update-results", "--out", str(tmp_path / "x")]):
        r = runner.invoke(app, ["bench", "--suite", "writes", "--suite-file", str(path), *args])
        assert r.exit_code == 2 and "--update-results writes the committed results" in r.output, r.output
    r = runner.invoke(app, ["bench", "--suite", "writes", "--suite-file", str(path), "--update-results"])
    assert r.exit_code == 0 and json.loads((committed / "writes.json").read_text())["n"] == "100"
    # the checkout's own committed folder refuses smoke figures whichever way it is named
    with pytest.raises(UserError, match="--smoke writes figures that mean nothing"):
        S.run_entries(S.load_suite(path), ["writes"], python=sys.executable, results=S.COMMITTED_RESULTS,
                      work=tmp_path / "w", smoke=True)


def test_make_benchmarks_skips_smoke_files_unless_told(tmp_path: Path) -> None:
    from provenance import load_results

    doc = {"schema": "breaknli-fast-result/1", "kind": "bench", "payload": {}}
    (tmp_path / "a.json").write_text(json.dumps(doc))
    (tmp_path / "b.json").write_text(json.dumps({**doc, "smoke": True}))
    results, problems = load_results(tmp_path)
    assert [Path(d["file"]).name for d in results] == ["a.json"] and "smoke figures" in problems[0]
    assert len(load_results(tmp_path, smoke=True)[0]) == 2
