"""Command line: ``breaknli-fast run | report | export | bench | suite | env | generate | mini train | mini check`` (thin;
calls the library). Help and usage errors of every command: :mod:`breaknli_fast.cli_help`; the options each probe
declares: :mod:`breaknli_fast.cli_options`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Optional

import typer
from rich.table import Table

from breaknli_fast import cli_options as opts
from breaknli_fast.cli_help import install as install_help
from breaknli_fast.console import RichHook, console, fail, literal, make_progress, out_path, user_errors
from breaknli_fast.data.slicing import show_counts
from breaknli_fast.engines import registry
from breaknli_fast.errors import install_hint
from breaknli_fast.probes import probe_class
from breaknli_fast.probes.breaknli.loop import parse_modes
from breaknli_fast.study.options import RunOptions

app = typer.Typer(name="breaknli-fast", add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  help="BreakNLI logical-triangle robustness test for NLI models, on fast engines.")

def breakdown_tables(bd: dict[str, Any], width: int) -> list[Table]:
    """The breakdown's accuracy and inequality rates, one row per group (report.md has every rate with its CI,
    and the complements of 0/1 columns), in as many tables as ``width`` needs for no cell to be cropped."""
    from breaknli_fast.console import tables_that_fit

    keys = list(dict.fromkeys(k for spec in bd.values() for g in spec["groups"] for k in g["rates"]
                              if not k.endswith("relaxed")))
    short = {k: k.replace("contradictive inequality", "contr. ineq.").replace("entailed inequality", "ent. ineq.")
             .replace("accuracy (p, h)", "acc. (p, h)").replace("omega_", "Ω_") for k in keys}
    # with several 0/1 columns, their complements ("not X") are in report.md only
    groups = [g for spec in bd.values() for g in spec["groups"]
              if not (spec["kind"] == "category" and g["value"] == "0" and len(bd) > 1)]
    group_min = min(24, max((len(g["group"]) for g in groups), default=5))

    def make(cols: Any) -> Table:
        part = "" if len(cols) == len(keys) else f"; {', '.join(short[k] for k in cols)}"
        t = Table(title=f"Breakdown, % (* fewer than 30 examples; all rates with CIs in report.md){part}",
                  title_justify="left")
        t.add_column("group", min_width=group_min, overflow="fold")
        t.add_column("n", justify="right", no_wrap=True)
        for k in cols:
            t.add_column(short[k], justify="right", no_wrap=True)
        for g in groups:
            cells = []
            for k in cols:
                c = g["rates"].get(k)
                cells.append("–" if not c or c["rate"] is None else f"{c['rate']:.1f}" + ("*" if c["n"] < 30 else ""))
            t.add_row(literal(g["group"]), str(g["examples"]), *cells)
        return t

    return tables_that_fit(make, keys, width)


def print_slice(info: dict[str, Any] | None) -> None:
    """The data slice on the terminal: how it was taken, its gold-label counts, and any warning about them."""
    if info:
        console.print(f"data slice: {literal(info['words'])}, gold labels {show_counts(info['labels'])}")
        for w in info.get("warnings") or []:
            console.print(f"[bold yellow]warning:[/] {literal(w)}")


def print_summary(result: Any) -> None:
    """The result of a study on the terminal: rows read, the probe's own tables, the breakdown, throughput."""
    report, run_dir = result.report, result.run_dir
    sk = report.get("skips") or report.get("funnel", {}).get("skips") or {}
    if sk:
        skips = ", ".join(f"{k} {v}" for k, v in sk["counts"].items() if v) or "none"
        valid = (report.get("slice") or {}).get("of", len(result.data.examples))  # a drawn slice: drawn from these
        renamed = f"; {sk['renamed_ids']} repeated ids renamed" if sk.get("renamed_ids") else ""
        console.print(f"rows read {sk['read']}, skipped {sk['skipped']} ({skips}); valid {valid}" + renamed)
    print_slice(report.get("slice"))
    for item in result.probe.console(report):
        console.print(item)
    if report.get("breakdown"):
        for table in breakdown_tables(report["breakdown"], console.width):
            console.print(table)
    t = report["throughput"]
    n_inv = t.get("invocations", 1)
    parts = [f"{t.get('examples', t['examples_this_invocation'])} examples in {t['wall_seconds']:.1f} s"]
    if t["examples_per_s"]:
        parts.append(f"{t['examples_per_s']:.2f} examples/s")
    if t["classifier_pairs_per_s"]:
        parts.append(f"{t['classifier_pairs_per_s']:.0f} classifier pairs/s")
    if t["generated_tokens_per_s"]:
        parts.append(f"{t['generated_tokens_per_s']:.0f} generated tokens/s")
    scope = "" if n_inv == 1 else f" (summed over the {n_inv} invocations that computed the records)"
    console.print(f"throughput{scope}: " + ", ".join(parts))
    for w in t.get("workers") or []:  # a study sharded over Ray actors
        rate = f"{w['examples_per_s']:.2f} examples/s" if w.get("examples_per_s") else "no chunk"
        console.print(f"  worker {w['worker']} on {literal(w.get('node'))}: {w['chunks']} chunks, {w['examples']} examples, "
                      f"{rate}" + (f", restarted {w['restarts']}×" if w.get("restarts") else ""))
    if run_dir is not None:
        files = ["config.json", "samples.jsonl", "report.json", "report.md", "report.html"]
        files += sorted(p.name for p in run_dir.glob("*.png"))
        console.print(f"run directory: [bold]{literal(run_dir)}[/] ({', '.join(files)})")


def run(o: RunOptions) -> None:
    """Run a study (BreakNLI by default) and write a run directory. Re-running the same command resumes."""
    from breaknli_fast.study.options import run_with_options

    with user_errors(resumable=True):
        probe_class(o.probe)  # an unknown --probe is a one-line error (before the probe's options are read)
        o.probe_config = opts.probe_config(o.probe)
        opts.warn_threads(o.threads)
        o.check()  # bounds (docs/limits.md), engines, precisions: one line before anything loads
        if o.is_grid:  # a study over classifiers x datasets (breaknli_fast.study.grid)
            from breaknli_fast.cli_report import run_grid_command

            return run_grid_command(o.probe, o.config(), o.classifier, o.dataset, **o.grid_kwargs())
        with make_progress() as progress:
            result = run_with_options(o, hook=RichHook(progress))
    print_summary(result)


app.command("run")(opts.ProbeOptions(opts.OptionsCommand(run, RunOptions)))


@app.command()
def env(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Print versions, hardware and CUDA / TensorRT availability (paste it into bug reports)."""
    from breaknli_fast.envinfo import NOT_VERIFIED, environment

    info = environment(registry.declared_packages())
    info["backends"] = {name: {"module": registry.module_of(name), "formats": list(decl.formats) if decl else []}
                        for name, decl in registry.usable_backends()}
    from breaknli_fast.probes import broken_probes

    # one line each; every other command skips them
    info["broken_plugins"] = {**{f"backend {n}": why for n, why in registry.broken_backends().items()},
                              **{f"probe {n}": why for n, why in broken_probes().items()}}
    if as_json:
        console.print_json(json.dumps(info, default=str))
        return
    t = Table(title="breaknli-fast environment", show_header=False)
    t.add_column("key", style="bold")
    t.add_column("value")
    for key in ("breaknli_fast", "git", "python", "platform", "cpu", "cpu_count", "torch_threads", "memory_gib"):
        t.add_row(key, literal(info[key]))
    for name, ver in info["packages"].items():
        t.add_row(name, literal(ver) if ver else "[dim]not installed[/]")
    acc = info["accelerators"]
    t.add_row("CUDA", literal(", ".join(acc.get("gpus", []))) if acc["cuda_available"] else "[dim]no CUDA GPU visible[/]")
    gpu_eps = {"CUDAExecutionProvider", "TensorrtExecutionProvider"} & set(acc["onnxruntime_providers"] or [])
    t.add_row("ORT providers", (literal(", ".join(acc["onnxruntime_providers"] or []))
                                + (f" [dim]({', '.join(sorted(gpu_eps))}: {NOT_VERIFIED})[/]" if gpu_eps else ""))
              or "[dim]onnxruntime not installed[/]")
    t.add_row("backends", literal(", ".join(n + (f" (export: {', '.join(b['formats'])})" if b["formats"] else "")
                                            for n, b in info["backends"].items())))
    for p in info["plugins"]:
        t.add_row(f"{p['kind']} {literal(p['name'])}", literal(f"{p['module']} (package {p['package']} "
                                                                f"{p['version']})"))
    for name, why in info["broken_plugins"].items():
        t.add_row(literal(name), f"[bold red]broken:[/] {literal(why)} (the other commands skip it)")
    hint = literal(install_hint("tensorrt"))
    t.add_row("TensorRT", (literal(acc["tensorrt"]) + f" [dim]({NOT_VERIFIED})[/]") if acc["tensorrt"]
              else f"[dim]not installed ({hint}, needs a CUDA GPU; {NOT_VERIFIED})[/]")
    console.print(t)


from breaknli_fast.bench.command import bench  # noqa: E402
from breaknli_fast.bench.options import BenchOptions  # noqa: E402
from breaknli_fast.cli_report import report  # noqa: E402
from breaknli_fast.export.command import export  # noqa: E402
from breaknli_fast.mini.command import EPILOG as MINI_TRAIN_EPILOG  # noqa: E402
from breaknli_fast.mini.command import train as mini_train  # noqa: E402
from breaknli_fast.suite.command import SETTINGS as SUITE_SETTINGS  # noqa: E402
from breaknli_fast.suite.command import suite  # noqa: E402

app.command("export")(export)
app.command("bench")(opts.ProbeOptions(opts.OptionsCommand(bench, BenchOptions)))
app.command("report")(report)
app.command("suite", context_settings=SUITE_SETTINGS, add_help_option=False)(suite)

mini_app = typer.Typer(help="The shipped mini models (train them again from SNLI).", add_completion=False)
app.add_typer(mini_app, name="mini")


mini_app.command("train", epilog=MINI_TRAIN_EPILOG)(mini_train)


@mini_app.command("check")
def mini_check(
    generator: str = typer.Option("mini-t5", "--generator", "-g",
                                  help="the mini-t5 to check: a shipped mini model or a local folder"),
    judge: str = typer.Option("mini-nli", "--judge", help="the classifier that judges: a shipped mini model or a folder"),
    n: int = typer.Option(200, "--n", min=0, help="correctly classified sample examples per mode (0: all of them)"),
    mode: str = opts.MODE,
    seed: int = typer.Option(0, "--seed", help="Seed of the K samples (one seed per prompt is derived from it, as in run)."),
    out: Optional[Path] = typer.Option(None, "--out", parser=out_path, metavar="FILE",
                                       help="Also write the results to this JSON file."),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="Show progress bars."),
) -> None:
    """The generator check of the model cards: K=20 samples per hypothesis of the embedded sample, the share on
    target (judged by the classifier) and the share of examples that survive U=10 and S=5 (the loop's defaults)."""
    from breaknli_fast.data.loaders import sample_path
    from breaknli_fast.mini.evaluate import check_generator

    with user_errors():
        res = check_generator(generator, judge, sample_path(), n=n, modes=parse_modes(mode), seed=seed, progress=progress)
    t = Table(title="generator check (K=20, U=10, S=5)",
              caption="checked: first correctly classified examples (of all correct); <U: fewer than U distinct "
                      "candidates; <S: fewer than S of the first U on target both ways")
    t.add_column("mode", no_wrap=True)
    for col in ("checked", "on target", "distinct", "<U", "<S", "survive"):
        t.add_column(col, justify="right", no_wrap=True)
    for m, r in res.items():
        t.add_row(m, f"{r['checked']} ({r['correct']})", f"{r['share_target_all_outputs']:.1%}",
                  f"{r['mean_distinct_candidates']:.2f}", str(r["too_few_unique"]), str(r["too_few_on_target"]),
                  f"{r['survivors']} = {r['survival_rate']:.1%}")
    console.print(t)
    if out:
        try:
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(res, indent=1, sort_keys=True) + "\n")
        except OSError as e:
            fail(f"cannot write {out}: {e.strerror or e}")
        console.print(f"written to {literal(out)}")


from breaknli_fast.data.synthetic.command import generate_app  # noqa: E402
app.add_typer(generate_app, name="generate")
install_help(app)  # every command: help in panels, -h, usage errors on one line


def main() -> None:  # pragma: no cover
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
