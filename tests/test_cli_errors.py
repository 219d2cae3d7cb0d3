"""What a new user hits: every bad input is one ``error:`` line with exit code 2 and no traceback, user text is
printed literally (never as rich markup), and the run directory is safe against a second run, an early
failure, Ctrl-C and a rerun of a finished run."""

import gzip
import json
import os
import tempfile
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from breaknli_fast.cli import app
from breaknli_fast.probes.breaknli.probe import funnel_table, results_table
from breaknli_fast.probes.breaknli.report import CONTRADICTIVE_C_NOTE, to_markdown
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


def _closed_port() -> int:
    """A local TCP port where nothing listens (bound, then released)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _truncated_model(tmp: Path) -> Path:
    import shutil

    from breaknli_fast.engines.model_info import assets_models_dir

    folder = tmp / "cut-model"
    if not folder.exists():
        shutil.copytree(assets_models_dir() / "mini-nli", folder)
        with open(folder / "model.safetensors", "r+b") as fh:
            fh.truncate(100_000)  # a download cut short
    return folder


def _partial_model(tmp: Path, keep: tuple[str, ...]) -> Path:
    """mini-nli's config.json with only the files named in ``keep`` beside it (a copy left half-done)."""
    import shutil

    from breaknli_fast.engines.model_info import assets_models_dir

    folder = tmp / f"part-{'-'.join(keep)}"
    folder.mkdir(exist_ok=True)
    for name in ("config.json", *keep):
        shutil.copy(assets_models_dir() / "mini-nli" / name, folder / name)
    return folder


def _two_label_model(tmp: Path) -> Path:
    """mini-nli's files with a 2-way config (entailment / not_entailment), as RTE-style classifiers have."""
    folder = _partial_model(tmp, ("model.safetensors", "tokenizer.json", "vocab.json", "merges.txt"))
    two = tmp / "two-label"
    if not two.exists():
        folder.rename(two)
        cfg = json.loads((two / "config.json").read_text())
        cfg.update(id2label={"0": "entailment", "1": "not_entailment"}, label2id={"entailment": 0, "not_entailment": 1})
        (two / "config.json").write_text(json.dumps(cfg))
    return two


# (name, issue item, extra args of `run`, expected message, environment, needs a model loaded)
Case = tuple[str, str, list[str], str, dict, bool]


def _cases(tmp: Path) -> list[Case]:
    """Built per test so that paths live in tmp. Every row but those marked is refused before any model loads."""
    afile = _write(tmp / "afile.txt", b"x")
    no_hub = {"HF_HUB_OFFLINE": None, "TRANSFORMERS_OFFLINE": None, "HF_ENDPOINT": f"http://127.0.0.1:{_closed_port()}",
              **{k: None for k in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy")}}
    return [
        ("out under /proc", "15", ["--out", "/proc/breaknli-x"], "cannot create the run directory /proc/breaknli-x", {}, False),
        ("out below a file", "15", ["--out", str(afile / "sub")], f"cannot create the run directory {afile / 'sub'}: Not a directory", {}, False),
        ("empty out", "45", ["--out", ""], "Invalid value for '--out' / '-o': an empty path", {}, False),
        ("out is a file", "15", ["--out", str(afile)], f"cannot use {afile} as the run directory", {}, False),
        ("markup in a missing path", "-", ["-d", str(tmp / "no[/]such[bold].jsonl")], "no[/]such[bold].jsonl does not exist", {}, False),
        ("empty file", "-", ["-d", str(_write(tmp / "empty[gold].tsv", b""))], "empty[gold].tsv has no data rows", {}, False),
        ("header-only file", "-", ["-d", str(_write(tmp / "head.tsv", b"premise\thypothesis\tlabel\n"))], "has no data rows", {}, False),
        ("misspelled shipped model", "-", ["-c", "mini-nil"], "did you mean mini-nli?", {}, False),
        ("missing model folder", "-", ["-g", str(tmp / "nope")], "does not exist", {}, False),
        ("no GPU", "15", ["--device", "cuda"], "no CUDA GPU is visible", {}, False),
        ("read-only export cache", "1", ["--engine", "ort", "-c", "mini-nli"], "cannot write the export cache",
         {"BREAKNLI_FAST_CACHE": str(afile / "cache")}, True),
        ("truncated safetensors", "2", ["-c", str(_truncated_model(tmp))], "model.safetensors is truncated or corrupt", {}, False),
        ("config without weights", "45", ["-c", str(_partial_model(tmp, ("tokenizer.json", "vocab.json", "merges.txt")))],
         "has a config.json but no weights (model.safetensors or pytorch_model.bin)", {}, False),
        ("config without tokenizer", "45", ["-c", str(_partial_model(tmp, ("model.safetensors",)))],
         "has no tokenizer files", {}, False),
        ("2-label classifier", "45", ["-c", str(_two_label_model(tmp))],
         "the model has 2 outputs (entailment, not_entailment): only 3-way NLI classifiers are supported", {}, False),
        ("masked LM as classifier", "45", ["-c", "mini-mlm"], "unsupported model type 'roberta'", {}, False),
        ("negative beams", "45", ["--num-beams", "-2"], "num_beams (--num-beams) must be at least 1, not -2", {}, False),
        ("fewer beams than K", "45", ["--decoding", "beam", "--num-beams", "1"],
         "num_beams (--num-beams) 1 is fewer than the 2 candidates asked for (K, --k)", {}, False),
        ("beams with sampling", "45", ["--num-beams", "4"], "apply to beam and diverse-beam decoding, not to sampling",
         {}, False),
        ("unknown prompt field", "3", ["--contradict-prompt", "Contradict {h} {x}"], "has an unknown field {x}", {}, False),
        ("positional prompt field", "3", ["--contradict-prompt", "Contradict {0}"], "has a positional field {0}", {}, False),
        ("unbalanced prompt brace", "3", ["--entail-prompt", "Say {h"], "the entailed generation prompt (--entail-prompt): expected '}'", {}, False),
        ("stray closing brace", "3", ["--contradict-prompt", "Contradict {h} }"], "Single '}'", {}, False),
        ("nothing at the Ray address", "7", ["--ray-address", f"127.0.0.1:{_closed_port()}"], "Ray", {}, False),
        ("K too large", "8", ["--k", "100000"], "--k", {}, False),
        ("q too large", "8", ["--probe", "permutation", "--q", "100000000"], "--q", {}, False),
        ("negative max batch", "9", ["--max-batch", "-4"], "--max-batch", {}, False),
        ("zero token budget", "9", ["--token-budget", "0"], "--token-budget", {}, False),
        ("split of a file", "9", ["--split", "bogus"], "--split bogus: only the hub datasets", {}, False),
        ("split of the sample", "9", ["-d", "sample", "--split", "bogus"], "only the hub datasets", {}, False),
        ("by a column without values", "10",
         ["-d", str(_write(tmp / "subj.tsv", GOOD_TSV.replace(b"label\n", b"label\tsubject\n").replace(b"ment\n", b"ment\t\n").replace(b"tion\n", b"tion\t-\n"))),
          "--by", "subject"], "--by subject: the column has no value", {}, False),
        ("hub unreachable (model)", "13", ["-c", "someone/some-nli-model"], "does not answer", no_hub, False),
        ("hub unreachable (dataset)", "13", ["-d", "mnli"], "does not answer", no_hub, False),
        ("negative limit", "15", ["--limit", "-1"], "--limit", {}, False),
        ("zero K", "15", ["--k", "0"], "--k", {}, False),
        ("bad workers", "15", ["--workers", "many"], "workers (--workers) must be a number or 'auto'", {}, False),
        ("unknown precision", "16", ["--precision", "fp4"], "--precision 'fp4': use fp32, fp16, bf16, int8, fp8", {}, False),
        ("misnamed premise column", "16", ["--premise-col", "nope"], "--premise-col nope: there is no such column (its columns: premise, hypothesis, label)", {}, False),
        ("misnamed id column", "45", ["--id-col", "nope"],
         "the id column nope (--id-col): there is no such column (its columns: premise, hypothesis, label)", {}, False),
        ("ragged CSV", "16", ["-d", str(_write(tmp / "ragged.csv", b"premise,hypothesis,label\nA,B,neutral,extra\nC,D,neutral,x\n"))],
         "its rows have 4 fields where its header has 3", {}, False),
        ("a .txt with spaces", "16", ["-d", str(_write(tmp / "pairs.txt", b"premise hypothesis label\nA B neutral\n"))],
         "its header is one column", {}, False),
        ("a JSON array", "16", ["-d", str(_write(tmp / "pairs.json", b'[{"premise": "A", "hypothesis": "B", "label": "neutral"}]\n'))],
         "it holds a JSON array of objects; write each object on a line of its own", {}, False),
        ("a pretty-printed JSON array", "16", ["-d", str(_write(tmp / "pretty.json", b'[\n  {"premise": "A"}\n]\n'))],
         "it holds a JSON array;", {}, False),
    ]


with tempfile.TemporaryDirectory(prefix="breaknli-case-names-") as _folder:  # the names only: removed at once
    CASE_NAMES = [c[0] for c in _cases(Path(_folder))]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_run_bad_input_is_one_line(tmp_path, name, monkeypatch):
    """Each row: one `error:` line, exit code 2, no traceback; rows that need no model are refused before any
    model loads (loading one fails the test)."""
    import breaknli_fast.study.runner as runner_module

    if name == "no GPU":
        import torch

        if torch.cuda.is_available():
            pytest.skip("a CUDA GPU is visible: --device cuda is valid here")
    if name == "nothing at the Ray address":
        pytest.importorskip("ray", reason="Ray is not installed (the `ray` extra)")
    if name == "read-only export cache":
        pytest.importorskip("onnxruntime", reason="ONNX Runtime is not installed (the `onnx` extra)")
    _, _, args, match, env, needs_model = next(c for c in _cases(tmp_path) if c[0] == name)
    if not needs_model:
        def no_models(*a, **k):
            raise AssertionError("a model was loaded before the bad input was refused")

        monkeypatch.setattr(runner_module, "load_models", no_models)
    base = ["run", "-d", str(_write(tmp_path / "good.tsv", GOOD_TSV)), "--out", str(tmp_path / "run"), "--engine", "torch",
            "--k", "2", "--u", "1", "--s", "1", "--max-new-tokens", "4"]
    r = runner.invoke(app, base + args, env=env)  # without a model where it needs none: load_models refuses
    _one_error_line(r, match)
    assert not (tmp_path / "run").exists()  # refused before anything was written: no directory, no .lock left


def test_the_error_table_covers_the_issue(tmp_path):
    """Items 1-3, 7-10, 13, 15 and 16 of the new-user review each have a row (4-6 are bench's; 11, 12 are the
    README, 14 the help tests in test_cli_probes.py, 17 the run-directory test below)."""
    items = {c[1] for c in _cases(tmp_path)}
    assert {"1", "2", "3", "7", "8", "9", "10", "13", "15", "16", "45"} <= items


def test_threads_beyond_the_cores_warn(tmp_path, monkeypatch):
    from breaknli_fast import limits

    monkeypatch.setattr(limits, "usable_cores", lambda: 2)
    r = runner.invoke(app, ["run", "--threads", "6", "--precision", "fp4", "--out", str(tmp_path / "x")])
    assert "warning: --threads 6 is more than the 2 CPU cores" in " ".join(r.output.split())
    _one_error_line(r, "--precision 'fp4'")
    r = runner.invoke(app, ["run", "--threads", "512", "--out", str(tmp_path / "x")])  # beyond 4 per core: refused
    assert "warning" not in r.output
    _one_error_line(r, "--threads 512: at most 8 (4 per CPU core")


def test_usage_errors_are_one_line_not_a_panel(tmp_path):
    for args in (["run", "--limit", "-1"], ["run", "--k", "0"], ["run", "--no-such-option"], ["nope"],
                 ["bench", "--k", "0"], ["mini", "train", "--seed", "x"], ["run", "--probe", "toy-none"]):
        r = runner.invoke(app, args)
        errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
        assert r.exit_code == 2 and len(errors) == 1, (args, r.output)
        assert "╭" not in r.output and "Traceback" not in r.output, args


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
    assert "loop.seed 0 vs 3" in " ".join(r.output.split()) and "--name" not in r.output  # the field, both values


def test_finished_records_without_config_are_never_replaced(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, monkeypatch):
    """A directory holding samples.jsonl but no config.json (settings unknown) is refused like one holding another
    run's settings, before any model loads; --overwrite replaces it."""
    import breaknli_fast.study.runner as runner_module

    out = tmp_path / "run"
    out.mkdir()
    held = '{"mode": "entailed", "id": "x", "status": "evaluated"}\n'
    (out / "samples.jsonl").write_text(held)
    real = runner_module.load_models

    def no_models(*a, **k):
        raise AssertionError("a model was loaded before the directory was refused")

    monkeypatch.setattr(runner_module, "load_models", no_models)
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out, "--seed", "3")
    _one_error_line(r, f"{out} holds samples.jsonl but no config.json, so its settings are unknown; use another --out")
    assert (out / "samples.jsonl").read_text() == held and not (out / "config.json").exists()
    monkeypatch.setattr(runner_module, "load_models", real)
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out, "--overwrite")
    assert r.exit_code == 0, r.output
    assert '"id": "x"' not in (out / "samples.jsonl").read_text()


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


def test_a_stop_between_a_chunks_write_and_its_count_keeps_the_count(tmp_path, tiny_t5, tiny_roberta, tiny_tsv,
                                                                      monkeypatch):
    """Ctrl-C or SIGTERM during a chunk's fsync: its records are in samples.jsonl, and the invocation's timings
    count them (they are counted from the file, not from the loop's counter, which had not moved yet)."""
    append = RunDir.append_samples
    calls = []

    def append_then_stop(self, records):
        append(self, records)
        calls.append(len(records))
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(RunDir, "append_samples", append_then_stop)
    out = tmp_path / "run"
    r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out, "--chunk-size", "2")
    assert r.exit_code == 130, r.output
    written = len((out / "samples.jsonl").read_text().splitlines())
    assert written == sum(calls) and len(calls) == 2
    assert json.loads((out / "invocations.jsonl").read_text())["examples"] == written


SLOW_CHUNKS = """
import sys, time
from breaknli_fast.probes.breaknli.probe import BreakNLIProbe

process = BreakNLIProbe.process


def slowly(self, *args, **kwargs):  # half a second more per chunk: the test's SIGTERM lands mid-run
    time.sleep(0.5)
    return process(self, *args, **kwargs)


BreakNLIProbe.process = slowly
from breaknli_fast.cli import app

sys.argv = ["breaknli-fast", *sys.argv[1:]]
app()
"""


def test_sigterm_ends_a_run_as_ctrl_c_does_and_the_resume_is_exact(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    """SIGTERM (timeout, Slurm, docker stop) mid-run: one line saying how to resume, exit 143 (128 + SIGTERM, what
    a scheduler expects of a job it stopped), no .lock left, the invocation's timings written; the resumed run
    holds the records of an uninterrupted one, and its throughput counts every example."""
    import signal
    import subprocess
    import sys
    import time

    args = ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--engine", "torch", "--k", "6", "--u", "2",
            "--s", "1", "--top-p", "1.0", "--top-k", "0", "--max-new-tokens", "8", "--limit", "12", "--chunk-size", "2"]
    out = tmp_path / "killed"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                                        os.environ.get("PYTHONPATH", "")]),
           "COLUMNS": "200"}
    env.pop("BREAKNLI_FAST_DEBUG", None)
    proc = subprocess.Popen([sys.executable, "-c", SLOW_CHUNKS, *args, "--out", str(out)], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while not ((out / "samples.jsonl").exists() and (out / "samples.jsonl").stat().st_size):
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "no chunk was written within 3 minutes"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143, (stdout, stderr)
    assert "Traceback" not in stderr, stderr
    assert "terminated (SIGTERM): re-run the same command to resume" in " ".join(stderr.split())
    assert not (out / ".lock").exists()
    killed = [json.loads(x) for x in (out / "invocations.jsonl").read_text().splitlines()]
    done = len((out / "samples.jsonl").read_text().splitlines())
    assert len(killed) == 1 and killed[0]["examples"] == done  # that invocation's timings are kept
    assert runner.invoke(app, [*args, "--out", str(out)]).exit_code == 0  # the resume
    assert runner.invoke(app, [*args, "--out", str(tmp_path / "whole")]).exit_code == 0  # uninterrupted

    def records(run: Path) -> list:
        recs = [json.loads(x) for x in (run / "samples.jsonl").read_text().splitlines()]
        return sorted(recs, key=lambda r: (r["mode"], r["id"]))

    assert done < len(records(out)) and records(out) == records(tmp_path / "whole")
    thr = json.loads((out / "report.json").read_text())["throughput"]
    assert thr["invocations"] == 2 and thr["examples"] == len(records(out))


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
    # report.md explains the contradictive ŷ=C cell wherever the contradictive mode has figures (whether the tiny
    # run evaluates a contradictive example depends on the random classifier, which differs between transformers
    # 4.57 and 5.x)
    md = (out / "report.md").read_text()
    assert ("legit inequality" in md) == ("contradictive" in rep["metrics"])
    assert CONTRADICTIVE_C_NOTE in to_markdown({**rep, "metrics": {"contradictive": {}}})
    rep["metrics"] = rep["metrics"] or {"entailed": {"overall": {"n": 3, "inequality": 33.33, "relaxed": 66.67}}}
    for table, headers in ((results_table(rep), ("mode", "inequality %", "relaxed %")),
                           (funnel_table(rep), ("stage", "contradictive", "entailed"))):
        con = Console(width=80, record=True)
        con.print(table)
        text = con.export_text()
        assert max(len(ln) for ln in text.splitlines()) <= 80
        for h in headers:
            assert h in text, (h, text)


def test_run_files_share_the_umask_permissions_and_the_lock_goes(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    """Every file of a finished run gets 0666 less the umask (report files were owner-only while samples.jsonl
    was world-readable), and .lock is gone once the run is over."""
    old = os.umask(0o027)
    try:
        r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, tmp_path / "run")
    finally:
        os.umask(old)
    assert r.exit_code == 0, r.output
    files = {p.name: p.stat().st_mode & 0o777 for p in (tmp_path / "run").iterdir() if p.is_file()}
    assert {"config.json", "samples.jsonl", "report.json", "report.md", "stage_premise_hypothesis.json"} <= set(files)
    assert set(files.values()) == {0o640}, files
    assert ".lock" not in files


def test_the_run_directory_lock_is_removed_and_taken_again(tmp_path):
    first = RunDir(tmp_path / "run")
    first.lock()
    with pytest.raises(Exception, match="is in use by another run"):
        RunDir(tmp_path / "run").lock()
    first.unlock()
    assert not (tmp_path / "run").exists()  # the lock made it and nothing was written: removed with the lock
    again = RunDir(tmp_path / "run")
    again.lock()
    (tmp_path / "run" / "samples.jsonl").write_text("")
    again.unlock()
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["samples.jsonl"]


def test_run_then_run_with_limit_0_are_two_run_directories(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, monkeypatch):
    """The README's `run` then `run --limit 0`: the default directory names the limit, so the second is a run of
    its own rather than one refused for holding "different settings (limit)"."""
    monkeypatch.chdir(tmp_path)
    common = ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--engine", "torch", "--k", "4", "--u", "2",
              "--s", "1", "--max-new-tokens", "6"]
    assert runner.invoke(app, [*common, "--limit", "4"]).exit_code == 0
    r = runner.invoke(app, [*common, "--limit", "0"])
    assert r.exit_code == 0, r.output
    names = sorted(p.name for p in (tmp_path / "runs").iterdir())
    # --k 4 is not the default: the directories carry the tag of the loop's settings, the same for both
    assert [n.rsplit("-p", 1)[0] for n in names] == ["tiny.tsv-all-roberta-torch-fp32-s0",
                                                     "tiny.tsv-n4-roberta-torch-fp32-s0"]
    assert len({n.rsplit("-p", 1)[1] for n in names}) == 1
    # another loop setting (--top-up), the same command otherwise: a directory of its own, not a refusal
    r = runner.invoke(app, [*common, "--limit", "4", "--top-up", "3"])
    assert r.exit_code == 0, r.output
    assert len(list((tmp_path / "runs").iterdir())) == 3


def test_an_address_where_nothing_listens_fails_at_once(monkeypatch):
    """A TCP connection answers what Ray's own retries take minutes to give up on (no Ray needed): one attempt
    per address, with a timeout of seconds."""
    import socket

    from breaknli_fast.study.distributed import RayUnavailable, probe_address

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # released below: nothing listens there
    tried = []
    real = socket.create_connection

    def connect(where, timeout=None, **kw):  # one attempt each, with a timeout of seconds (no retries)
        tried.append((where, timeout))
        return real(where, timeout=timeout, **kw)

    monkeypatch.setattr(socket, "create_connection", connect)
    for address in (f"127.0.0.1:{port}", f"ray://127.0.0.1:{port}", f"[::1]:{port}"):
        with pytest.raises(RayUnavailable, match="nothing answers on"):
            probe_address(address)
    assert [w for w, _ in tried] == [("127.0.0.1", port), ("127.0.0.1", port), ("::1", port)]
    assert all(t is not None and t <= 5 for _, t in tried)
    with pytest.raises(RayUnavailable, match="is not a number"):
        probe_address("127.0.0.1:port")
    with socket.socket() as server:  # something listening: no error
        server.bind(("127.0.0.1", 0))
        server.listen(1)
        probe_address(f"127.0.0.1:{server.getsockname()[1]}")
    probe_address("auto")  # left to Ray


def test_auto_falling_back_to_torch_writes_the_torch_directory_only(tmp_path, tiny_t5, tiny_roberta, tiny_tsv,
                                                                    monkeypatch):
    """--engine auto with an export cache that cannot be written runs on torch (a note says why); the run directory
    locked before loading (named for ort) is given up for the torch one, and nothing is left of it."""
    pytest.importorskip("onnxruntime", reason="ONNX Runtime is not installed (the `onnx` extra)")
    from breaknli_fast.engines import registry

    if registry.resolve_engine("auto") != "ort":
        pytest.skip("auto does not pick ort here")
    monkeypatch.chdir(tmp_path)
    afile = _write(tmp_path / "afile", b"x")
    r = runner.invoke(app, ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--limit", "3", "--k", "4",
                            "--u", "2", "--s", "1", "--max-new-tokens", "6"], env={"BREAKNLI_FAST_CACHE": str(afile / "c")})
    assert r.exit_code == 0, r.output
    assert "running on torch" in " ".join(r.output.split()) and "cannot write the export cache" in " ".join(r.output.split())
    assert [p.name.rsplit("-p", 1)[0] for p in (tmp_path / "runs").iterdir()] == ["tiny.tsv-n3-roberta-torch-fp32-s0"]


def _read_only_dirs(tmp: Path) -> list[Path]:
    """Output folders that cannot be written: under /proc, below a file, and (not as root, who writes anyway) a
    folder without write permission."""
    afile = _write(tmp / "afile", b"x")
    dirs = [Path("/proc/breaknli-out"), afile / "sub"]
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        ro = tmp / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        dirs.append(ro / "out")
    return dirs


def test_outputs_that_cannot_be_written_are_refused_before_the_work(tmp_path, monkeypatch):
    """bench --out and export --out name the folder that cannot be written, before the bench runs or the export
    starts (the bench failed with a raw Errno 30 after running in full; export blamed the cache); bad option values
    of both are one line."""
    import breaknli_fast.bench.runner as bench_runner
    import breaknli_fast.export as export_pkg

    def never(*a, **k):
        raise AssertionError("the work started before the output folder was checked")

    monkeypatch.setattr(bench_runner, "run_bench", never)
    monkeypatch.setattr(export_pkg, "export_model", never)
    for d in _read_only_dirs(tmp_path):
        _one_error_line(runner.invoke(app, ["bench", "--engines", "torch:fp32", "--limit", "2", "--out", str(d)]),
                        "the bench folder")
        _one_error_line(runner.invoke(app, ["export", "--model", "mini-nli", "--out", str(d)]), "the export folder")
        assert not d.exists()
    _one_error_line(runner.invoke(app, ["bench", "--threads", "-1"]), "--threads")
    for size in ("0", "-1"):
        _one_error_line(runner.invoke(app, ["export", "--model", "mini-nli", "--validation-size", size]),
                        "--validation-size")
    from breaknli_fast.export.api import export_model  # (the package name is patched above)
    from breaknli_fast.export.options import ExportError, ExportOptions

    with pytest.raises(ExportError, match=r"validation_size must be a whole number of pairs, at least 1 \(got 0\)"):
        ExportOptions(validation_size=0)  # what `ort:fp32:validation_size=0` builds
    with pytest.raises(ExportError, match=r"validation_size must be a whole number of pairs, at least 1 \(got 0\)"):
        export_model("mini-nli", validation_size=0, progress=False)  # from Python: refused before any work


def test_a_record_without_its_fields_is_one_line_before_any_model_loads(tmp_path, tiny_t5, tiny_roberta, tiny_tsv,
                                                                        monkeypatch):
    """A resumed run whose samples.jsonl holds a hand-edited record (no "status") or a line that is not an object
    is refused naming the record (it was KeyError: 'status' once the report was computed)."""
    import breaknli_fast.study.runner as runner_module

    out = tmp_path / "run"
    assert _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out).exit_code == 0
    lines = (out / "samples.jsonl").read_text().splitlines()
    rec = json.loads(lines[1])
    del rec["status"]

    def no_models(*a, **k):
        raise AssertionError("a model was loaded before the records were checked")

    monkeypatch.setattr(runner_module, "load_models", no_models)
    for bad, why in ((json.dumps(rec), "it lacks the field 'status'"), ("[1, 2]", "it is not a JSON object but list")):
        (out / "samples.jsonl").write_text("\n".join([lines[0], bad, *lines[2:]]) + "\n")
        r = _tiny_run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, out)
        _one_error_line(r, f"samples.jsonl: record 2 is not a breaknli record ({why}); remove its line")


def test_a_study_checks_every_classifier_before_its_first_cell(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, monkeypatch):
    """A study whose third classifier cannot run (2 labels) stops before any cell runs (it failed after two cells)."""
    import breaknli_fast.study.runner as runner_module

    def no_models(*a, **k):
        raise AssertionError("a cell ran before every classifier was checked")

    monkeypatch.setattr(runner_module, "load_models", no_models)
    r = runner.invoke(app, ["run", "-g", tiny_t5, "-c", f"{tiny_roberta},mini-nli,{_two_label_model(tmp_path)}",
                            "-d", str(tiny_tsv), "--out", str(tmp_path / "study"), "--engine", "torch", "--limit", "4"])
    _one_error_line(r, "the model has 2 outputs (entailment, not_entailment)")
    assert not (tmp_path / "study").exists()


def test_generate_never_overwrites_a_file_without_force(tmp_path):
    out = _write(tmp_path / "mine.jsonl", b'{"premise": "kept", "hypothesis": "kept", "label": "neutral"}\n')
    before = out.read_bytes()
    for corpus in ("aenli", "kinship"):
        r = runner.invoke(app, ["generate", corpus, "-n", "30", "-o", str(out), "--no-progress"])
        _one_error_line(r, f"{out} exists; use --force to replace it, or another --out")
        assert out.read_bytes() == before
    r = runner.invoke(app, ["generate", "aenli", "-n", "30", "-o", str(out), "--no-progress", "--force"])
    assert r.exit_code == 0, r.output
    assert len(out.read_text().splitlines()) == 30


def test_renamed_ids_and_truncated_pairs_are_counted_and_reported(tmp_path, tiny_t5, tiny_roberta):
    """Rows that repeat an id are renamed <id>#1, ... and counted (config.json, report.json, the console); pairs
    longer than the classifier's input length (--max-length) are counted, warned about and noted in report.md."""
    rows = b"".join(b"A man number %d sleeps in a big red chair.\tA man rests.\tentailment\tsame\n" % i for i in range(4))
    data = _write(tmp_path / "dup.tsv", b"premise\thypothesis\tlabel\tid\n" + rows)
    common = ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(data), "--engine", "torch", "--k", "2", "--u", "1",
              "--s", "1", "--max-new-tokens", "4"]
    r = runner.invoke(app, [*common, "--out", str(tmp_path / "cut"), "--max-length", "5"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "warning: 3 rows repeat an earlier row's id and are renamed <id>#1, <id>#2, ... (lines 3, 4, 5)" in text
    assert "3 repeated ids renamed" in text
    assert "warning: 4 of the 4 (premise, hypothesis) pairs are longer than the classifier's input length of 5" in text
    rep = json.loads((tmp_path / "cut" / "report.json").read_text())
    assert rep["truncation"] == {"max_length": 5, "pairs": 4, "truncated": 4}
    assert rep["funnel"]["skips"]["renamed_ids"] == 3
    assert json.loads((tmp_path / "cut" / "config.json").read_text())["dataset"]["skips"]["renamed_ids"] == 3
    assert "4 of the 4 (premise, hypothesis) pairs are longer" in (tmp_path / "cut" / "report.md").read_text()
    assert {json.loads(x)["id"] for x in (tmp_path / "cut" / "samples.jsonl").read_text().splitlines()} == \
        {"same", "same#1", "same#2", "same#3"}
    r = runner.invoke(app, [*common, "--out", str(tmp_path / "whole")])
    assert r.exit_code == 0 and "longer than the classifier's input length" not in r.output
    assert json.loads((tmp_path / "whole" / "report.json").read_text())["truncation"]["truncated"] == 0


@pytest.mark.parametrize("args, said", [
    (["bench", "--scenario", "server", "--target-qps", "inf", "--target-latency-ms", "5"],
     "Invalid value for '--target-qps': must be a finite number, not inf"),
    (["bench", "--scenario", "server", "--target-qps", "nan", "--target-latency-ms", "5"],
     "Invalid value for '--target-qps': must be a finite number, not nan"),
    (["bench", "--scenario", "offline", "--min-duration", "nan"], "'--min-duration': must be a finite number"),
    (["bench", "--scenario", "offline", "--cv-threshold", "nan"], "'--cv-threshold': must be a finite number"),
    (["bench", "--tolerance", "nan"], "'--tolerance'"),
    (["run", "--top-p", "nan"], "'--top-p': must be a finite number, not nan"),
    (["export", "-m", "mini-nli", "--max-abs-logit", "nan"], "'--max-abs-logit': must be a finite number"),
    (["export", "-m", "mini-nli", "--min-agreement", "150"], "min_agreement is a percentage: between 0 and 100"),
    (["export", "-m", "mini-nli", "--max-length", "0"], "max_length must be a whole number of tokens, at least 1"),
    (["bench", "-e", ""], "--engines is empty"),
    (["bench", "--scenario", "offline", "--probe", "accuracy"], "--probe accuracy with --scenario"),
    (["bench", "--scenario", "offline", "--target-qps", "5"], "add server to --scenario"),
    (["bench", "--scenario", "server", "--target-qps", "0", "--target-latency-ms", "5"], "must be above 0, not 0"),
    (["bench", "--gen-prompts", "0"], "--gen-prompts 0: the generate stage needs at least one prompt"),
    (["bench", "--ceilings", "always"], "--ceilings always: use cached, fresh, quick, off"),
    (["bench", "--compliance"], "--compliance runs with --scenario"),
    (["bench", "--scenario", "offline", "--compliance", "--compliance-tests", "TEST02"], "--compliance-tests TEST02"),
])
def test_new_user_mistakes_get_one_line_before_any_model_loads(args, said, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = runner.invoke(app, args)
    text = " ".join(r.output.split())
    assert r.exit_code != 0 and said in text, text
    assert "Traceback" not in r.output and not (tmp_path / "runs").exists()


def test_a_bad_ceilings_mode_in_the_environment_is_one_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BREAKNLI_FAST_CEILINGS", "sometimes")
    r = runner.invoke(app, ["bench"])
    assert r.exit_code == 2 and "--ceilings sometimes (from $BREAKNLI_FAST_CEILINGS): use cached, fresh" in r.output
    assert "Traceback" not in r.output and not (tmp_path / "runs").exists()


def test_bench_on_a_device_this_machine_lacks_stops_before_loading(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA GPU")
    monkeypatch.chdir(tmp_path)
    for extra in ([], ["--scenario", "offline"]):
        r = runner.invoke(app, ["bench", "--device", "cuda", *extra])
        assert r.exit_code != 0 and "no CUDA GPU is visible" in " ".join(r.output.split())
