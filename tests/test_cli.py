import json

import pytest
from typer.testing import CliRunner

from breaknli_fast.cli import app

runner = CliRunner()


def test_help_lists_commands():
    r = runner.invoke(app, ["--help"])
    assert r.exit_code == 0
    for cmd in ("run", "env"):
        assert cmd in r.output
    r = runner.invoke(app, ["run", "--help"])
    assert r.exit_code == 0 and "--generator" in r.output and "--limit" in r.output and "--sampler" in r.output
    for cmd in ("export", "bench"):
        r = runner.invoke(app, [cmd, "--help"])
        assert r.exit_code == 0 and "--help" in r.output


def test_mini_train_help_names_the_command():
    r = runner.invoke(app, ["mini", "train", "-h"])
    assert r.exit_code == 0 and "Usage: breaknli-fast mini train" in r.output and "--t5-rules-rich" in r.output


def test_env_json():
    r = runner.invoke(app, ["env", "--json"])
    assert r.exit_code == 0
    info = json.loads(r.output)
    assert info["packages"]["torch"].startswith("2.13") and "cuda_available" in info["accelerators"]
    r = runner.invoke(app, ["env"])
    assert r.exit_code == 0 and "TensorRT" in r.output


def _run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, *extra):
    return runner.invoke(app, ["run", "-g", tiny_t5, "-c", tiny_roberta, "-d", str(tiny_tsv), "--out", str(tmp_path / "run"), "--engine", "torch",
                               "--k", "12", "--u", "4", "--s", "2", "--top-p", "1.0", "--top-k", "0",
                               "--max-new-tokens", "12", "--limit", "30", *extra])


def test_tiny_run_writes_the_whole_run_directory(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    r = _run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv)
    assert r.exit_code == 0, r.output
    d = tmp_path / "run"
    for name in ("config.json", "samples.jsonl", "report.json", "report.md"):
        assert (d / name).exists(), name
    cfg = json.loads((d / "config.json").read_text())
    assert cfg["seed"] == 0 and cfg["loop"]["k"] == 12 and cfg["environment"]["packages"]["transformers"]
    assert cfg["models"]["classifier"]["files_sha256"]["model.safetensors"]
    rep = json.loads((d / "report.json").read_text())
    assert rep["funnel"]["valid"] == 30
    assert "Funnel" in r.output and "throughput" in r.output
    assert "inequality % / relaxed %" in (d / "report.md").read_text()
    # same command again: nothing left to do, same report
    r2 = _run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv)
    assert r2.exit_code == 0 and "resuming" in r2.output
    assert json.loads((d / "report.json").read_text())["metrics"] == rep["metrics"]
    # different settings in the same directory: refused with one line
    r3 = _run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, "--seed", "9")
    assert r3.exit_code == 2 and "different settings" in r3.output and "Traceback" not in r3.output


@pytest.mark.parametrize("args,match", [
    (["-d", "/nonexistent/file.jsonl"], "does not exist"),
    (["-c", "/nonexistent/model"], "does not exist"),
    (["--mode", "sideways"], "unknown mode"),
    (["--decoding", "nucleus"], "unknown decoding strategy"),
    (["--k", "3", "--u", "5"], "K >= U >= S"),
    (["--label-map", "LABEL_0=maybe"], "--label-map"),
    (["--temperature", "0"], "temperature (--temperature) must be > 0"),
    (["--top-p", "1.5"], "top_p (--top-p) must be in (0, 1]"),
    (["--sampler", "gumbel"], "unknown sampler"),
    (["--max-new-tokens", "0"], "max_new_tokens"),
])
def test_bad_input_is_one_line_error(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, args, match):
    base = {"-g": tiny_t5, "-c": tiny_roberta, "-d": str(tiny_tsv)}
    for i in range(0, len(args), 2):
        base[args[i]] = args[i + 1]
    flat = [x for kv in base.items() for x in kv]
    r = runner.invoke(app, ["run", *flat, "--out", str(tmp_path / "x"), "--limit", "5", "--engine", "torch"])
    assert r.exit_code == 2, r.output
    assert match in r.output and "Traceback" not in r.output
    assert len([ln for ln in r.output.strip().splitlines() if ln.startswith("error")]) == 1


def test_generator_must_be_seq2seq(tmp_path, tiny_roberta, tiny_tsv):
    r = runner.invoke(app, ["run", "-g", tiny_roberta, "-c", tiny_roberta, "-d", str(tiny_tsv), "--out", str(tmp_path / "y"),
                            "--engine", "torch"])
    assert r.exit_code == 2 and "cannot generate" in r.output


def test_flan_t5_style_classifier_runs(tmp_path, tiny_t5, tiny_tsv):
    r = runner.invoke(app, ["run", "-g", tiny_t5, "-c", tiny_t5, "-d", str(tiny_tsv), "--out", str(tmp_path / "t5c"), "--engine", "torch",
                            "--limit", "9", "--nli-prompt", "conclude", "--k", "6", "--u", "2", "--s", "1",
                            "--top-p", "1.0", "--top-k", "0", "--max-new-tokens", "8"])
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "t5c" / "config.json").read_text())
    details = cfg["engine"]["classifier_details"]["details"]
    assert {k: details[k] for k in ("kind", "prompt", "method", "workers")} == {"kind": "seq2seq", "prompt": "conclude", "method": "score", "workers": 1}
    assert cfg["engine"]["max_batch"] == 64  # no --max-batch: the seq2seq classifier's default, recorded


def test_one_role_at_another_precision(tmp_path, tiny_t5, tiny_roberta, tiny_tsv):
    r = _run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, "--classifier-precision", "bf16", "--limit", "6")
    assert r.exit_code == 0, r.output
    cfg = json.loads((tmp_path / "run" / "config.json").read_text())
    assert (cfg["engine"]["classifier_precision"], cfg["engine"]["generator_precision"]) == ("bf16", "fp32")
    assert cfg["engine"]["classifier_details"]["precision"] == "bf16"
    assert cfg["engine"]["generator_details"]["precision"] == "fp32"
    assert cfg["identity"]["classifier_precision"] == "bf16"
    r = _run(tmp_path, tiny_t5, tiny_roberta, tiny_tsv, "--generator-precision", "int4", "--out", str(tmp_path / "x"))
    assert r.exit_code == 2 and "--generator-precision 'int4'" in r.output
