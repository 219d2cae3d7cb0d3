"""Options declared once on a dataclass: ``run`` and ``bench`` read RunOptions / BenchOptions, and a Python user
building the same class gets the same one-line refusals, before any model loads."""

from __future__ import annotations

import dataclasses

import pytest
from typer.testing import CliRunner

from breaknli_fast.bench.options import BenchOptions, bench_with_options
from breaknli_fast.cli import app
from breaknli_fast.errors import UserError
from breaknli_fast.options import option_fields
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
from breaknli_fast.study.options import RunOptions, run_with_options


@pytest.mark.parametrize("cls", [RunOptions, BenchOptions])
def test_every_option_has_a_help_panel_and_help(cls):
    for f, spec in option_fields(cls):
        assert spec.panel, f.name
        assert spec.help.strip(), f.name


@pytest.mark.parametrize("options, message", [
    (BenchOptions(limit=-1), "--limit -1: at least 0"),
    (BenchOptions(min_agreement=101.0), "--min-agreement 101.0: at most 100"),
    (BenchOptions(compliance=True), "--compliance runs with --scenario"),
    (BenchOptions(engines=" , "), "--engines is empty"),
    (BenchOptions(probe="accuracy", gen_prompts=4), "--gen-prompts shapes the BreakNLI loop only, not --probe accuracy"),
    (BenchOptions(probe="nope"), "nope"),
    (BenchOptions(device="cuda:7"), "cuda"),
    (RunOptions(threads=0), "--threads 0: at least 1"),
    (RunOptions(probe="nope"), "nope"),
    (RunOptions(precision="fp4"), "fp4"),
])
def test_the_python_api_refuses_what_the_command_line_refuses(options, message):
    with pytest.raises(UserError, match=message.replace("(", r"\(").replace(")", r"\)").replace(".", r"\.")):
        options.check()
    run = bench_with_options if isinstance(options, BenchOptions) else run_with_options
    with pytest.raises(UserError):  # the runner checks before it loads anything
        run(options)


def test_the_command_line_gives_the_same_one_line_error():
    r = CliRunner().invoke(app, ["bench", "--probe", "accuracy", "--gen-prompts", "4"])
    assert r.exit_code != 0
    assert "--gen-prompts shapes the BreakNLI loop only, not --probe accuracy" in r.output
    assert "Traceback" not in r.output


def test_an_option_typed_at_its_default_counts_as_given_on_the_command_line_only():
    """--generator typed with another probe is refused even at its default value; in Python an option counts as
    given when it differs from its default (nothing else tells them apart)."""
    r = CliRunner().invoke(app, ["bench", "--probe", "accuracy", "--generator", "mini-t5"])
    assert r.exit_code != 0 and "--generator shapes the BreakNLI loop only" in r.output
    BenchOptions(probe="accuracy", generator="mini-t5", engines="torch:fp32").check()  # no error
    with pytest.raises(UserError, match="--generator shapes"):
        BenchOptions(probe="accuracy", generator="other", engines="torch:fp32").check()


def test_the_seed_goes_into_the_probe_config_unless_a_python_config_sets_its_own():
    assert RunOptions(seed=7).config().seed == 7
    assert RunOptions(probe_config=BreakNLIConfig(seed=3)).config().seed == 3
    assert RunOptions(seed=7, probe_config=BreakNLIConfig(seed=3)).config().seed == 7
    assert RunOptions(chunk_size=5, probe_config={"u": 8}).config().chunk_size == 5
    assert RunOptions(probe="accuracy", chunk_size=64).config().chunk_size == 64


def test_bench_options_make_the_bench_config_and_its_command():
    o = BenchOptions(engines="torch:fp32,ort:int8", limit=12, seed=4, component_split=False, tolerance=0.5)
    cfg = o.bench_config()
    assert [e.label for e in cfg.engines] == ["torch:fp32", "ort:int8"]
    assert (cfg.limit, cfg.loop.seed, cfg.tolerance, cfg.component_split) == (12, 4, 0.5, False)
    assert cfg.command.split()[:2] == ["breaknli-fast", "bench"]
    assert "--no-component-split" in cfg.command and "--limit 12" in cfg.command and "--seed 4" in cfg.command
    assert BenchOptions().bench_config().limit == 32  # the embedded sample's default for bench
    assert dataclasses.replace(o, limit=0).bench_config().limit is None  # 0: all


def test_run_options_take_grid_settings_and_refuse_a_grid_in_run_with_options():
    o = RunOptions(classifier="a,b", dataset="sample,taxinli", limit=5)
    assert o.is_grid and o.grid_kwargs()["limit"] == {"sample": 5, "taxinli": 5}
    with pytest.raises(UserError, match="run_grid"):
        run_with_options(o)
