"""Command line: ``breaknli-fast run | report | export | bench | env | generate | mini train | mini check`` (thin;
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
from breaknli_fast.data.labels import parse_label_map
from breaknli_fast.data.loaders import Columns
from breaknli_fast.data.slicing import show_counts
from breaknli_fast.engines import registry
from breaknli_fast.errors import install_hint
from breaknli_fast.probes import probe_class
from breaknli_fast.probes.breaknli.loop import parse_modes
from breaknli_fast.study.loading import EngineConfig

app = typer.Typer(name="breaknli-fast", add_completion=False, no_args_is_help=False, pretty_exceptions_enable=False,
                  help="BreakNLI logical-triangle robustness test for NLI models, on fast engines.")

DEFAULT_SAMPLE_LIMIT = 1000  # examples of the embedded sample used when --limit is not given


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


ROLE_ENGINES = "Engines per role"


def run(
    probe: str = typer.Option("breaknli", "--probe", rich_help_panel=opts.STUDY,
                              help="The study (the registered probes are listed here)."),
    seed: int = typer.Option(0, "--seed", rich_help_panel=opts.STUDY,
                             help="One seed for the whole run (generation, permutations, generated data)."),
    chunk_size: Optional[int] = typer.Option(None, "--chunk-size", min=1, rich_help_panel=opts.STUDY,
                                             help="Examples per resumable chunk (default: the probe's: 16; accuracy 256)."),
    dataset: str = opts.DATASET,
    split: Optional[str] = opts.SPLIT,
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0, rich_help_panel=opts.DATA,
                                        help=f"Use the first N valid examples (0 = all). Default: all; {DEFAULT_SAMPLE_LIMIT} for the embedded sample."),
    sample: Optional[int] = opts.SAMPLE,
    sample_seed: Optional[int] = opts.SAMPLE_SEED,
    premise_col: Optional[str] = opts.PREMISE_COL,
    hypothesis_col: Optional[str] = opts.HYPOTHESIS_COL,
    label_col: Optional[str] = opts.LABEL_COL,
    id_col: Optional[str] = opts.ID_COL,
    by: Optional[str] = opts.BY,
    generator: str = opts.GENERATOR,
    classifier: str = opts.CLASSIFIER,
    mlm: Optional[str] = typer.Option(None, "--mlm", rich_help_panel=opts.MODELS,
                                      help="merge: the masked LMs that suggest replacements, comma-separated (mini-mlm, a "
                                           "folder or a hub id such as bert-base-cased). Default: mini-mlm."),
    engine: str = typer.Option("auto", "--engine", "-e", rich_help_panel=opts.MODELS,
                               help="auto or a registered engine (" + ", ".join(registry.names()) + "; a backend "
                                    "package joins by entry point). auto: ort on the CPU at fp32/int8 when ONNX Runtime "
                                    "is installed (exactly torch's fp32 results, faster), else torch. ort on --device "
                                    "cuda and tensorrt: not verified on a GPU."),
    precision: str = typer.Option("fp32", "--precision", "-p", rich_help_panel=opts.MODELS,
                                  help="fp32, fp16, bf16 (torch, cudagraph) or int8 (ort/tensorrt)."),
    classifier_precision: Optional[str] = typer.Option(
        None, "--classifier-precision", rich_help_panel=opts.MODELS,
        help="The classifier at another precision than --precision (e.g. --precision fp32 --classifier-precision int8: "
             "the fp32 generator's candidates, a faster classifier)."),
    generator_precision: Optional[str] = typer.Option(None, "--generator-precision", rich_help_panel=opts.MODELS,
                                                      help="The generator at another precision than --precision."),
    mlm_precision: Optional[str] = typer.Option(None, "--mlm-precision", rich_help_panel=opts.MODELS,
                                                help="merge: the masked LMs at another precision than --precision."),
    classifier_engine: Optional[str] = typer.Option(
        None, "--classifier-engine", rich_help_panel=ROLE_ENGINES,
        help="The classifier on another engine than --engine (e.g. --engine ort --classifier-engine torch); each "
             "role is checked against its engine's declaration before anything loads."),
    generator_engine: Optional[str] = typer.Option(None, "--generator-engine", rich_help_panel=ROLE_ENGINES,
                                                   help="The generator on another engine than --engine."),
    mlm_engine: Optional[str] = typer.Option(None, "--mlm-engine", rich_help_panel=ROLE_ENGINES,
                                             help="merge: the masked LMs on another engine than --engine."),
    device: str = opts.DEVICE,
    nli_prompt: str = opts.NLI_PROMPT,
    nli_method: str = opts.NLI_METHOD,
    label_map: Optional[str] = opts.LABEL_MAP,
    threads: Optional[int] = typer.Option(None, "--threads", min=1, rich_help_panel=opts.SPEED,
                                          help="CPU threads in all (default: torch's choice; ort: physical cores)."),
    workers: Optional[str] = typer.Option(None, "--workers", rich_help_panel=opts.SPEED,
                                          help="CPU batches run side by side, each on threads/workers threads: a number or "
                                               "'auto' (2 when there are 2+ threads). Default: auto for ort, 1 for torch. "
                                               "ort's results do not change with it; torch's logits may move at the 1e-6 level."),
    max_length: int = opts.MAX_LENGTH,
    token_budget: int = opts.TOKEN_BUDGET,
    max_batch: Optional[int] = opts.MAX_BATCH,
    gen_batch: Optional[int] = opts.GEN_BATCH,
    ray: bool = typer.Option(False, "--ray", rich_help_panel=opts.RAY,
                             help=f"Shard the study over Ray actors ({install_hint('ray')}): a local instance, or the "
                                  "cluster of --ray-address. Same records as one process."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", metavar="ADDRESS", rich_help_panel=opts.RAY,
                                              help="Join this Ray cluster (implies --ray), e.g. 10.0.0.5:6379 or auto."),
    ray_workers: Optional[int] = typer.Option(None, "--ray-workers", min=1, rich_help_panel=opts.RAY,
                                              help="Ray actors (default: one per GPU, else one per --ray-threads CPUs)."),
    ray_gpus_per_worker: float = typer.Option(0.0, "--ray-gpus-per-worker", min=0.0, rich_help_panel=opts.RAY,
                                              help="GPUs per Ray actor (1 on GPU clusters)."),
    ray_threads: int = typer.Option(1, "--ray-threads", min=1, rich_help_panel=opts.RAY, help="CPU threads per Ray actor."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=out_path, metavar="DIR",
                                       rich_help_panel=opts.OUTPUT, help="Run directory. Default: runs/<dataset>-n<limit>-<classifier>-<engine>-"
                                            "<precision>-s<seed>[-p<hash of the probe's settings where they are not its defaults>] (the probe's "
                                            "name first, other than breaknli's)."),
    overwrite: bool = typer.Option(False, "--overwrite", rich_help_panel=opts.OUTPUT,
                                   help="Replace a run directory that holds different settings."),
) -> None:
    """Run a study (BreakNLI by default) and write a run directory. Re-running the same command resumes."""
    from breaknli_fast.study import run_study
    from breaknli_fast.study.distributed import RayConfig

    with user_errors(resumable=True):
        probe_class(probe)  # an unknown --probe is a one-line error
        cfg = opts.probe_config(probe, seed=seed, chunk_size=chunk_size)
        opts.warn_threads(threads)
        ecfg = EngineConfig(engine=engine, precision=precision, device=device, threads=threads, workers=workers,
                            gen_batch=gen_batch,
                            classifier_precision=classifier_precision, generator_precision=generator_precision,
                            mlm_precision=mlm_precision, classifier_engine=classifier_engine,
                            generator_engine=generator_engine, mlm_engine=mlm_engine,
                            label_map=parse_label_map(label_map), max_length=max_length,
                            token_budget=token_budget, max_batch=max_batch, nli_prompt=nli_prompt, nli_method=nli_method)
        eff_limit = opts.effective_limit(dataset, limit, sample, DEFAULT_SAMPLE_LIMIT)
        if "," in classifier or "," in dataset:  # a study over classifiers x datasets (breaknli_fast.study.grid)
            from breaknli_fast.cli_report import run_grid_command

            limits = {d.strip(): opts.effective_limit(d.strip(), limit, sample, DEFAULT_SAMPLE_LIMIT)
                      for d in dataset.split(",")}
            return run_grid_command(probe, cfg, classifier, dataset, limits, split=split, generator=generator,
                                    columns=Columns(premise_col, hypothesis_col, label_col, id_col), engine=ecfg,
                                    out=out, overwrite=overwrite, by=by, mlm=mlm, sample=sample,
                                    sample_seed=sample_seed,
                                    ray=RayConfig(address=ray_address, workers=ray_workers,
                                                  gpus_per_worker=ray_gpus_per_worker, threads_per_worker=ray_threads)
                                    if ray or ray_address else None)
        with make_progress() as progress:
            result = run_study(probe, cfg, dataset=dataset, split=split, limit=eff_limit, sample=sample,
                               sample_seed=sample_seed,
                               columns=Columns(premise_col, hypothesis_col, label_col, id_col),
                               generator=generator, classifier=classifier, engine=ecfg, out=out,
                               runs_root=Path("runs"), overwrite=overwrite, hook=RichHook(progress), by=by,
                               ray=RayConfig(address=ray_address, workers=ray_workers,
                                             gpus_per_worker=ray_gpus_per_worker, threads_per_worker=ray_threads)
                               if ray or ray_address else None, mlm=mlm)
    print_summary(result)


app.command("run")(opts.ProbeOptions(run))


@app.command()
def env(as_json: bool = typer.Option(False, "--json", help="Print JSON instead of a table.")) -> None:
    """Print versions, hardware and CUDA / TensorRT availability (paste it into bug reports)."""
    from breaknli_fast.envinfo import NOT_VERIFIED, environment

    info = environment(registry.declared_packages())
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
    hint = literal(install_hint("tensorrt"))
    t.add_row("TensorRT", (literal(acc["tensorrt"]) + f" [dim]({NOT_VERIFIED})[/]") if acc["tensorrt"]
              else f"[dim]not installed ({hint}, needs a CUDA GPU; {NOT_VERIFIED})[/]")
    console.print(t)


from breaknli_fast.bench.command import bench  # noqa: E402
from breaknli_fast.cli_report import report  # noqa: E402
from breaknli_fast.export.command import export  # noqa: E402
from breaknli_fast.mini.command import EPILOG as MINI_TRAIN_EPILOG  # noqa: E402
from breaknli_fast.mini.command import train as mini_train  # noqa: E402

app.command("export")(export)
app.command("bench")(opts.ProbeOptions(bench))
app.command("report")(report)

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
