"""What a new user hits: every bad input is one ``error:`` line with exit code 2 and no traceback, user text is
printed literally (never as rich markup), and the run directory is safe against a second run, an early
failure, Ctrl-C and a rerun of a finished run."""

import gzip
import json
import os
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.probes.breaknli.probe import funnel_table, results_table
from breaknli_fast.study.rundir import RunDir

runner = CliRunner()


def _one_error_line(r, match: str, code: int = 2) -> None:
    assert r.exit_code == code, r.output
    assert "Traceback" not in r.output
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, r.output
    assert match in " ".join(r.output.split()), r.output  # rich may wrap a long line: compare unwrapped


def _write(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


GOOD_TSV = b"premise\thypothesis\tlabel\nA man sleeps.\tA man rests.\tentailment\nA dog runs.\tA cat runs.\tcontradiction\n"


def _cases(tmp: Path) -> list[tuple[str, list[str], str]]:
    """(name, extra args of `run`, expected message) — built per test so paths live in tmp."""
    afile = _write(tmp / "afile.txt", b"x")
    return [
        ("out under /proc", ["--out", "/proc/breaknli-x"], "cannot create the run directory /proc/breaknli-x"),
        ("out below a file", ["--out", str(afile / "sub")], f"cannot create the run directory {afile / 'sub'}: Not a directory"),
        ("out is a file", ["--out", str(afile)], f"cannot use {afile} as the run directory"),
        ("markup in a missing path", ["-d", str(tmp / "no[/]such[bold].jsonl")], "no[/]such[bold].jsonl does not exist"),
        ("empty file", ["-d", str(_write(tmp / "empty[gold].tsv", b""))], "empty[gold].tsv has no data rows"),
        ("header-only file", ["-d", str(_write(tmp / "head.tsv", b"premise\thypothesis\tlabel\n"))], "has no data rows"),
        ("misspelled shipped model", ["-c", "mini-nil"], "did you mean mini-nli?"),
        ("missing model folder", ["-g", str(tmp / "nope")], "does not exist"),
        ("no GPU", ["--device", "cuda"], "cuda"),
    ]


CASE_NAMES = [c[0] for c in _cases(Path("/tmp/breaknli-case-names"))]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_run_bad_input_is_one_line(tmp_path, name):
    if name == "no GPU":
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is visible: --device cuda is valid here")
    args, match = next((a, m) for n, a, m in _cases(tmp_path) if n == name)
    base = ["run", "-d", str(_write(tmp_path / "good.tsv", GOOD_TSV)), "--out", str(tmp_path / "run"), "--engine", "torch",
            "--k", "2", "--u", "1", "--s", "1", "--max-new-tokens", "4"]
    r = runner.invoke(app, base + args)
    _one_error_line(r, match)
    if name == "no GPU":  # failed before the first example: nothing written, the directory is re-usable
        assert not (tmp_path / "run" / "config.json").exists()


def test_other_commands_report_user_errors_the_same_way(tmp_path):
    _one_error_line(runner.invoke(app, ["export", "--model", str(tmp_path / "none")]), "does not exist")
    _one_error_line(runner.invoke(app, ["export", "--model", "mini-nli", "--format", "onnx", "--precision", "int4"]), "int4")
    _one_error_line(runner.invoke(app, ["bench", "--engines", "torch:fp99", "--out", str(tmp_path / "b")]), "fp99")
    _one_error_line(runner.invoke(app, ["mini", "check", "--generator", str(tmp_path / "none")]), "does not exist")
    _one_error_line(runner.invoke(app, ["mini", "train", "--data", str(tmp_path / "snli[1].jsonl")]),
                    f"training data {tmp_path / 'snli[1].jsonl'} does not exist")


def test_mini_train_never_writes_into_the_package_by_default(tmp_path):
    import inspect

    from breaknli_fast.mini import MODELS_DIR
    from breaknli_fast.mini.command import train
    from breaknli_fast.mini.recipe import DEFAULT_OUT

    defaults = {name: p.default.default for name, p in inspect.signature(train).parameters.items()}
    assert defaults["out"] == DEFAULT_OUT and Path(DEFAULT_OUT).resolve() != MODELS_DIR.resolve()
    assert defaults["into_package"] is False
    data = _write(tmp_path / "train.jsonl", b'{"premise": "a", "hypothesis": "b", "label": "neutral"}\n')
    _one_error_line(runner.invoke(app, ["mini", "train", "--data", str(data), "--out", str(MODELS_DIR)]), "--into-package")


def test_invalid_utf8_jsonl_is_a_counted_skip(tmp_path):
    good = b'{"premise": "A man sleeps.", "hypothesis": "A man rests.", "label": "entailment"}\n'
    bad = b'{"premise": "A caf\xe9 opens.", "hypothesis": "A shop opens.", "label": "entailment"}\n'
    src = _write(tmp_path / "mixed.jsonl.gz", gzip.compress(good + bad + good))
    r = runner.invoke(app, ["run", "-d", str(src), "--out", str(tmp_path / "run"), "--engine", "torch", "--k", "2",
                            "--u", "1", "--s", "1", "--max-new-tokens", "4"])
    assert r.exit_code == 0, r.output
    rep = json.loads((tmp_path / "run" / "report.json").read_text())
    assert rep["funnel"]["skips"]["counts"]["invalid_utf8"] == 1 and rep["funnel"]["valid"] == 2
    assert "invalid_utf8 1" in r.output


def _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out, *extra):
    return runner.invoke(app, ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--out", str(out),
                               "--engine", "torch", "--k", "6", "--u", "2", "--s", "1", "--top-p", "1.0", "--top-k", "0",
                               "--max-new-tokens", "8", "--limit", "12", *extra])


def test_second_run_into_a_locked_directory_stops(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    holder = RunDir(tmp_path / "run")
    holder.lock()  # another process would hold it the same way (flock is per open file, so this conflicts too)
    try:
        r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, tmp_path / "run")
        _one_error_line(r, f"is in use by another run (PID {os.getpid()})")
        assert not (tmp_path / "run" / "samples.jsonl").exists()
    finally:
        holder.unlock()
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, tmp_path / "run")
    assert r.exit_code == 0, r.output


def test_rerun_keeps_the_throughput_of_the_runs_that_did_the_work(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    out = tmp_path / "run"
    assert _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out).exit_code == 0
    first = json.loads((out / "report.json").read_text())["throughput"]
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out)
    assert r.exit_code == 0 and "resuming" in r.output
    again = json.loads((out / "report.json").read_text())["throughput"]
    assert again["examples_this_invocation"] == 0 and first["examples"] > 0
    assert {k: again[k] for k in ("examples", "wall_seconds", "classifier_pairs", "invocations")} == \
        {k: first[k] for k in ("examples", "wall_seconds", "classifier_pairs", "invocations")}
    # other settings into the same directory: refused, naming only options that exist
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out, "--seed", "3")
    _one_error_line(r, "use another --out, or --overwrite to replace it")
    assert "--name" not in r.output


def test_a_directory_without_finished_examples_is_reused(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.json").write_text(json.dumps({"identity": {"seed": 99}}))  # a run that died before its first chunk
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out)
    assert r.exit_code == 0, r.output
    assert json.loads((out / "config.json").read_text())["seed"] == 0


def test_ctrl_c_says_how_to_resume(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, monkeypatch):
    import breaknli_fast.study.runner as runner_module

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(runner_module, "execute", interrupted)
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, tmp_path / "run")
    assert r.exit_code == 130 and "Traceback" not in r.output
    assert "interrupted: re-run the same command to resume" in " ".join(r.output.split())


def test_user_text_and_install_hints_print_literally(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    r = runner.invoke(app, ["env"])
    assert r.exit_code == 0
    import importlib.util

    if importlib.util.find_spec("tensorrt") is None:
        assert "[tensorrt]'" in r.output  # the extra's brackets are printed, not read as markup
    out = tmp_path / "out[v2]"
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out)
    assert r.exit_code == 0, r.output
    assert "out[v2]" in r.output.replace("\n", "")


def test_result_tables_fit_80_columns(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    out = tmp_path / "run"
    assert _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out, "--limit", "30").exit_code == 0
    rep = json.loads((out / "report.json").read_text())
    rep["metrics"] = rep["metrics"] or {"entailed": {"overall": {"n": 3, "inequality": 33.33, "relaxed": 66.67}}}
    for table, headers in ((results_table(rep), ("mode", "inequality %", "relaxed %")),
                           (funnel_table(rep), ("stage", "contradictive", "entailed"))):
        con = Console(width=80, record=True)
        con.print(table)
        text = con.export_text()
        assert max(len(ln) for ln in text.splitlines()) <= 80
        for h in headers:
            assert h in text, (h, text)
    assert "legit inequality" in (out / "report.md").read_text()
