"""``breaknli-fast bench``: speed and parity of engines / precisions, for any registered probe, in one command.

Registered by the CLI as ``ProbeOptions(OptionsCommand(bench, BenchOptions))``: its options are the fields of
:class:`~breaknli_fast.bench.options.BenchOptions` and every registered probe's options, as ``run``'s
(:mod:`breaknli_fast.cli_options`); the library logic is :func:`breaknli_fast.bench.options.bench_with_options`.
"""

from __future__ import annotations

from typing import Any

import typer

from breaknli_fast import cli_options as opts
from breaknli_fast.bench.options import BenchOptions
from breaknli_fast.errors import UserError


def bench(o: BenchOptions) -> None:
    """Speed and parity of engines / precisions against torch:fp32 on identical inputs, in one process."""
    from breaknli_fast.bench.options import bench_with_options
    from breaknli_fast.console import RichHook, make_progress, user_errors
    from breaknli_fast.errors import check_writable_dir
    from rich.markup import escape

    with user_errors(extra=(OSError,)):  # an output folder that cannot be written: one line too
        if o.compare and all(o.compare):
            return compare_command(o)
        if o.suite is not None:
            return suite_command(o)
        if o.smoke or o.suite_file is not None or o.update_results:
            flag = "--smoke" if o.smoke else "--suite-file" if o.suite_file is not None else "--update-results"
            raise UserError(f"{flag} goes with --suite NAMES")
        o.check()
        o.probe_config = opts.probe_config(o.probe)  # another probe's options: one line
        o.out = o.out_dir()
        check_writable_dir(o.out, "the bench folder")  # before the bench runs, not once it is done
        with make_progress() as progress:
            def log(msg: str) -> None:
                progress.console.print(f"[dim]{escape(msg)}[/]", highlight=False)

            result = bench_with_options(o, hook=RichHook(progress), log=log)
        paths = result.save(o.out, plot=not o.no_plot)
    print_bench(result)
    from breaknli_fast.console import console

    console.print(f"bench written to [bold]{escape(str(o.out))}[/] (" + ", ".join(p.name for p in paths.values()) + ")")
    if o.strict and not result.passed:
        raise typer.Exit(1)


def suite_command(o: BenchOptions) -> None:
    """``bench --suite NAMES``: an alias of ``breaknli-fast suite run NAMES`` (``list``: the entries, their minutes,
    requirements and files; ``all``: every entry), with ``--out`` for its ``--results``."""
    import sys
    import tempfile

    from rich.markup import escape

    from breaknli_fast.console import console
    from breaknli_fast.suite.runner import default_results, run_entries
    from breaknli_fast.suite.spec import DEFAULT_SUITE, load_suite

    suite = load_suite(o.suite_file or DEFAULT_SUITE)
    if o.suite.strip() == "list":
        for e in suite.entries:
            about = ([f"~{e.minutes:g} min"] if e.minutes is not None else []) + (
                [f"needs {', '.join(e.requires)}"] if e.requires else [])
            console.print(f"{e.name}: {e.what}" + (f" ({'; '.join(about)})" if about else "") + " -> " + e.result,
                          markup=False, highlight=False, soft_wrap=True)
        return
    names = None if o.suite.strip() == "all" else suite.select(o.suite, None)
    results = default_results(o.update_results, o.smoke, o.out, suite, flag="--out")
    rc = run_entries(suite, names, python=sys.executable, results=results, smoke=o.smoke,
                     work=tempfile.mkdtemp(prefix="breaknli-suite-"))
    console.print(f"suite results in [bold]{escape(str(results))}[/]" + (" (smoke sizes: each file says so)"
                                                                          if o.smoke else ""))
    if rc:
        raise typer.Exit(rc)


def compare_command(o: BenchOptions) -> None:
    """``bench --compare A B``: the differences between two saved benches, on the terminal (and in ``--out``)."""
    import json

    from breaknli_fast.bench.compare import compare as compare_results
    from breaknli_fast.bench.compare import compare_markdown, compare_table
    from breaknli_fast.bench.result import BenchResult
    from breaknli_fast.bench.types import to_json
    from breaknli_fast.console import console
    from rich.markup import escape

    a, b = (BenchResult.load(p) for p in o.compare)
    cmp = compare_results(a, b)
    console.print(compare_table(cmp, str(o.compare[0]), str(o.compare[1])))
    if o.out is not None:
        o.out.mkdir(parents=True, exist_ok=True)
        (o.out / "compare.json").write_text(json.dumps(to_json(cmp), indent=2) + "\n")
        (o.out / "compare.md").write_text(compare_markdown(cmp, str(o.compare[0]), str(o.compare[1])))
        console.print(f"comparison written to [bold]{escape(str(o.out))}[/] (compare.json, compare.md)")


def print_bench(result: Any) -> None:
    """A bench on the terminal: its table, the recommendation, then every invalid run, warning, note and failure."""
    from breaknli_fast.bench.recommend import recommendation_lines
    from breaknli_fast.console import console, err_console
    from rich.markup import escape

    console.print(result.table())
    for line in recommendation_lines(result.report) if result.report is not None else []:
        console.print(line.replace("`", ""), markup=False, highlight=False)
    for r in result.scenarios.scenarios if result.scenarios is not None else []:
        where = f"{escape(r.engine)} {r.role} {r.scenario}"
        for why in r.reasons:
            err_console.print(f"[bold red]INVALID[/] {where}: {escape(why)}", highlight=False)
        for w in r.warnings:
            err_console.print(f"[yellow]warning[/] {where}: {escape(w)}", highlight=False)
    if result.scenarios is not None:
        from breaknli_fast.bench.loadgen.report import energy_line

        line = energy_line(result.scenarios)
        if line:
            console.print(escape(line), highlight=False)
    for n in result.typed.notes:
        console.print(f"[yellow]note:[/] {escape(n)}")
    for f in result.typed.failures if result.scenarios is None else []:
        err_console.print(f"[bold red]FAIL[/] {escape(f)}", highlight=False)
    for e in result.engines:  # EngineResult (a probe bench) or ScenarioEngine (a LoadGen bench)
        if e.status != "ok":
            err_console.print(f"[yellow]{e.status}[/] {escape(e.label)}: {escape(str(e.reason))}", highlight=False)
        checks = getattr(e, "checks", None)  # a LoadGen bench judges its rows, not its engines
        for f in checks.failures if checks is not None else []:
            err_console.print(f"[bold red]FAIL[/] {escape(e.label)}: {escape(f)}", highlight=False)
