"""A probe's options come from its config: the command line builds them for every registered probe, each probe
in a help panel of its own, and hands the chosen probe its config object. A toy probe registered by the test
(one module, one registry line) shows and runs like the shipped ones."""

import json
import re

import pytest
from typer.testing import CliRunner

from breaknli_fast import probes
from breaknli_fast.cli import app

runner = CliRunner()


def _flat(text: str) -> str:
    return " ".join(re.sub("[│╭╮╰╯─]", " ", text).split())


@pytest.fixture
def toy():
    probes.register("toy", "tests.plugins.toy_probe:ToyProbe")  # the one registry line of a new probe
    yield "toy"
    probes._PROBES.pop("toy", None)  # the registry has no removal: a test cleans up after itself


def test_toy_probe_options_are_in_run_help(toy):
    r = runner.invoke(app, ["run", "--help"], env={"COLUMNS": "80"})
    assert r.exit_code == 0, r.output
    flat = _flat(r.output)
    assert "--probe toy" in flat and "--toy-repeat" in flat and "--toy-swap / --no-toy-swap" in flat
    assert "Times each (p, h) pair is classified (toy)." in flat
    assert "toy (a probe of the tests)" in flat  # --probe lists every registered probe
    # each probe's options in its own panel, the toy's after its title
    assert r.output.index("─ --probe toy") < r.output.index("--toy-repeat")
    for name in ("breaknli", "permutation", "merge"):
        assert f"─ --probe {name}" in r.output


def test_toy_probe_runs_with_its_options(toy, tmp_path, tiny_roberta, tiny_tsv):
    out = tmp_path / "run"
    r = runner.invoke(app, ["run", "--probe", "toy", "--toy-repeat", "3", "--toy-swap", "-c", tiny_roberta,
                            "-d", str(tiny_tsv), "--limit", "6", "--engine", "torch", "--out", str(out)])
    assert r.exit_code == 0, r.output
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["toy"] == {"repeat": 3, "swap": True, "seed": 0, "chunk_size": 8}
    recs = [json.loads(x) for x in (out / "samples.jsonl").read_text().splitlines()]
    assert len(recs) == 6 and all(len(rec["labels"]) == 3 for rec in recs)
    # bounds declared in the config are checked as the command line is read: one line, before any model loads
    r = runner.invoke(app, ["run", "--probe", "toy", "--toy-repeat", "9", "--out", str(tmp_path / "x")])
    errors = [ln for ln in r.output.splitlines() if ln.startswith("error:")]
    assert r.exit_code == 2 and len(errors) == 1 and "--toy-repeat" in errors[0], r.output


def test_toy_probe_runs_through_bench_with_its_options(toy, tmp_path, tiny_roberta, tiny_tsv):
    r = runner.invoke(app, ["bench", "-h"], env={"COLUMNS": "80"})
    assert "--toy-repeat" in r.output and "─ --probe toy" in r.output
    out = tmp_path / "bench"
    r = runner.invoke(app, ["bench", "--probe", "toy", "--toy-repeat", "2", "-c", tiny_roberta, "-d", str(tiny_tsv),
                            "--limit", "6", "-e", "torch:fp32,torch:fp32:label=same", "--warmup", "0",
                            "--min-iterations", "1", "--min-seconds", "0", "--invariance-pairs", "4", "--no-plot",
                            "--out", str(out)])
    assert r.exit_code == 0, r.output
    d = json.loads((out / "bench.json").read_text())
    assert d["probe"] == "toy" and d["config"]["probe_config"]["repeat"] == 2
    assert d["probe_identity"]["toy"] == {"repeat": 2, "swap": False, "seed": 0, "chunk_size": 8}


def test_an_option_of_another_probe_is_refused(toy, tmp_path):
    r = runner.invoke(app, ["run", "--probe", "toy", "--q", "50", "--out", str(tmp_path / "x")])
    assert r.exit_code == 2 and "error: --q is an option of --probe permutation, not of --probe toy" in r.output


def test_shipped_probes_get_their_config_from_the_command_line(monkeypatch, tmp_path):
    """`run --probe permutation --q 50` reaches the probe as PermutationConfig(q=50); BreakNLI's nested options
    (decoding, prompts) reach BreakNLIConfig; seed and chunk size are shared options."""
    import breaknli_fast.study as study

    seen = {}

    def fake_run_study(probe, cfg, **kw):
        seen[probe] = cfg
        raise KeyboardInterrupt  # stop before any model loads

    monkeypatch.setattr(study, "run_study", fake_run_study)
    runner.invoke(app, ["run", "--probe", "permutation", "--q", "50", "--scheme", "hyp", "--seed", "7"])
    cfg = seen["permutation"]
    assert (type(cfg).__name__, cfg.q, cfg.scheme, cfg.seed, cfg.chunk_size) == ("PermutationConfig", 50, "hyp", 7, 16)
    runner.invoke(app, ["run", "--mode", "entailed", "--k", "7", "--u", "3", "--s", "2", "--decoding", "greedy",
                        "--entail-prompt", "Say {h} again", "--one-direction", "--chunk-size", "4"])
    cfg = seen["breaknli"]
    assert (cfg.modes, cfg.k, cfg.u, cfg.s, cfg.bidirectional, cfg.chunk_size) == (("entailed",), 7, 3, 2, False, 4)
    assert cfg.decoding.strategy == "greedy" and cfg.decoding.top_p == 0.95
    assert cfg.prompts["entailed"] == "Say {h} again" and "{h}" in cfg.prompts["contradictive"]
    runner.invoke(app, ["run", "--probe", "accuracy"])
    assert seen["accuracy"].chunk_size == 256


def test_every_command_takes_dash_h_and_fits_80_columns():
    """Help at 80 columns: every option's names whole, no line wider, `-h` everywhere, `[ray]` printed."""
    import typer

    root = typer.main.get_command(app)
    for cmd in (["run"], ["bench"], ["export"], ["env"], ["generate", "aenli"], ["mini", "train"], ["mini", "check"],
                ["mini"], ["generate"], []):
        r = runner.invoke(app, [*cmd, "-h"], env={"COLUMNS": "80"})
        assert r.exit_code == 0 and "Usage:" in r.output, (cmd, r.output)
        assert max(len(line) for line in r.output.splitlines()) <= 80, cmd
        command = root
        for name in cmd:
            command = command.commands[name]
        lines = r.output.splitlines()
        for param in command.params:
            for opt in (*param.opts, *param.secondary_opts):
                if opt.startswith("-"):  # whole, as a word of some line
                    assert any(re.search(rf"(^|[\s,/]){re.escape(opt)}([\s,/]|$)", ln) for ln in lines), (cmd, opt)
    r = runner.invoke(app, ["run", "-h"], env={"COLUMNS": "80"})
    assert "[ray]'" in r.output and len(r.output.splitlines()) < 260
