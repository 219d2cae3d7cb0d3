"""``breaknli-fast bench``: speed and parity of engines / precisions, for any registered probe, in one command.

Registered by the CLI as ``ProbeOptions(bench)``, so it takes every registered probe's options as ``run`` does
(:mod:`breaknli_fast.cli_options`); the library logic is :func:`breaknli_fast.bench.runner.run_bench`, which takes
the probe's own config object.
"""

from __future__ import annotations

import shlex
import sys
from datetime import datetime
from pathlib import Path
from typing import Any, Optional, Tuple

import typer

from breaknli_fast import cli_options as opts
from breaknli_fast.console import out_path

from breaknli_fast.errors import UserError

DEFAULT_ENGINES = "torch:fp32,ort:fp32,ort:int8"
DEFAULT_SAMPLE_LIMIT = 32  # examples of the embedded sample when --limit is not given (several engines run)
SCENARIO_SAMPLE_LIMIT = 256  # --scenario: the classifier's sample library (its accuracy pass covers each once)
# bench's own options that shape the BreakNLI workload only: refused with another --probe, where they would change
# nothing (the probes' own options are refused by cli_options.probe_config the same way)
BREAKNLI_ONLY = ("generator", "fixed_length", "gen_prompts", "greedy_prompts")


def _command_line(ctx: typer.Context | None = None) -> str:
    """The command as typed when run from a shell (``breaknli-fast bench ...``); otherwise (library
    or test runner) an equivalent command rebuilt from the parsed options that differ from their defaults."""
    argv = list(sys.argv)
    if len(argv) > 1 and argv[1] == "bench" and Path(argv[0]).name in ("breaknli-fast", "cli.py", "__main__.py"):
        return shlex.join(["breaknli-fast"] + argv[1:])
    parts = ["breaknli-fast", "bench"]
    if ctx is None:
        return shlex.join(parts)
    for p in ctx.command.params:
        if getattr(p, "param_type_name", "") != "option" or p.name not in ctx.params:
            continue
        v = ctx.params[p.name]
        if v is None or v == p.default:
            continue
        opt = max(p.opts, key=len)
        if p.is_flag:
            if v:
                parts.append(opt)
            elif p.secondary_opts:
                parts.append(p.secondary_opts[0])
        elif isinstance(v, (tuple, list)):
            parts += [opt, *map(str, v)]
        else:
            parts += [opt, str(v)]
    return shlex.join(parts)


def _scenario_settings(ctx: typer.Context, scenario: str, roles: str, min_duration: float, min_queries: int | None,
                       target_qps: float | None, target_latency_ms: float | None, mlperf_rules: bool,
                       accuracy_tier: float, cv_threshold: float, compliance: bool = False,
                       compliance_tests: str = "all") -> Any:
    """``--scenario``'s settings, checked (and LoadGen found) before any model loads."""
    from breaknli_fast.bench.loadgen import import_loadgen
    from breaknli_fast.bench.loadgen.compliance import parse_compliance
    from breaknli_fast.bench.loadgen.settings import ScenarioSettings, parse_roles, parse_scenarios

    import_loadgen()
    if mlperf_rules:
        given = [n for n in ("min_duration", "min_queries")
                 if getattr(ctx.get_parameter_source(n), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")]
        if given:
            raise UserError(f"--{given[0].replace('_', '-')} and --mlperf-rules: the official rules set it")
    s = ScenarioSettings(parse_scenarios(scenario), parse_roles(roles), min_duration, min_queries, target_qps,
                         target_latency_ms, mlperf_rules, accuracy_tier, cv_threshold,
                         compliance=parse_compliance(compliance_tests) if compliance else ())
    s.check()
    return s


def bench(
    ctx: typer.Context,
    probe: str = typer.Option("breaknli", "--probe", help="The probe every engine runs: breaknli, permutation, merge, "
                                                         "accuracy (or another registered one), with its defaults."),
    engines: str = typer.Option(DEFAULT_ENGINES, "--engines", "-e",
                                help="Comma-separated ENGINE:PRECISION[:key=value...] (torch:fp32 is the reference, always "
                                     "measured first). Keys: label=NAME, classifier=PATH, generator=PATH, "
                                     "clf.precision= / gen.precision= / mlm.precision=; others go to the engine's loaders "
                                     "(clf.KEY / gen.KEY / mlm.KEY for one role), e.g. ort:int8:quantization=static."),
    component_split: bool = typer.Option(True, "--component-split/--no-component-split",
                                         help="After each engine at int8 / fp16 / bf16, also measure it with only one of the "
                                              "probe's models at that precision (the others at fp32), one model at a time: "
                                              "where a difference from the reference comes from."),
    generator: str = opts.GENERATOR,
    classifier: str = opts.CLASSIFIER,
    mlm: Optional[str] = typer.Option(None, "--mlm", help="Masked LMs of a probe that needs them (merge): names or "
                                                         "folders, comma-separated (default mini-mlm)."),
    dataset: str = opts.DATASET,
    split: Optional[str] = opts.SPLIT,
    by: Optional[str] = typer.Option(None, "--by", help="Also pair the headline metrics per group of these dataset "
                                     "columns (0/1 columns: where it is 1 and the rest; others: per value). Default: "
                                     "TaxiNLI's categories on taxinli."),
    limit: Optional[int] = typer.Option(None, "--limit", "-n", min=0,
                                        help=f"First N valid examples (0 = all). Default: all; {DEFAULT_SAMPLE_LIMIT} for the embedded sample "
                                             f"({SCENARIO_SAMPLE_LIMIT} with --scenario)."),
    sample: Optional[int] = opts.SAMPLE,
    sample_seed: Optional[int] = opts.SAMPLE_SEED,
    repeats: int = typer.Option(1, "--repeats", min=1, help="End-to-end loop runs per engine (median wall reported); "
                                "with --scenario: rounds of LoadGen performance runs, the engines in turn (A B C A B "
                                "C), the median round's figures with the spread across rounds."),
    warmup: int = typer.Option(1, "--warmup", min=0, help="Unmeasured warm-up iterations of every stage (and end-to-end runs on 4 examples)."),
    min_iterations: int = typer.Option(3, "--min-iterations", min=1, help="Measured iterations of each stage, at least."),
    min_seconds: float = typer.Option(1.0, "--min-seconds", min=0.0, help="Measured seconds of each stage, at least."),
    gen_prompts: Optional[int] = typer.Option(None, "--gen-prompts", min=0, help="Prompts of the generate-stage "
                                              "workload (half per mode; default: the generator's prompts per batch "
                                              "on the device, 8 on the CPU, 64 on CUDA)."),
    greedy_prompts: int = typer.Option(16, "--greedy-prompts", min=0, help="Prompts of the greedy token-agreement check."),
    invariance_pairs: int = typer.Option(1000, "--invariance-pairs", min=0, help="Pairs classified one at a time and in "
                                         "the engine's batches: how many labels depend on batch neighbours."),
    seed: int = typer.Option(0, "--seed", help="The probe's seed (generation, permutations, draws)."),
    gen_batch: Optional[int] = opts.GEN_BATCH,
    fixed_length: bool = typer.Option(False, "--fixed-length", help="Generate exactly --max-new-tokens tokens (same work for every engine; on with --random-weights)."),
    random_weights: Optional[str] = typer.Option(None, "--random-weights",
                                                 help="Real architectures with random weights, e.g. flan-t5-base,roberta-large "
                                                      "(T5 shapes = generator, others = classifier; classifier=flan-t5-large for a seq2seq NLI model). "
                                                      "Speed only: parity is not meaningful."),
    cache_dir: Optional[Path] = typer.Option(None, "--cache-dir", help="Folder of the random-weight models (default ~/.cache/breaknli_fast/random-weights)."),
    device: str = opts.DEVICE,
    threads: Optional[int] = typer.Option(None, "--threads", min=1, help="CPU threads in all, passed to every engine (which splits them into workers: ort:int8:workers=1 sets an engine's workers)."),
    interleave: bool = typer.Option(False, "--interleave", help="Load every engine first, then time them in rounds (A B A B ...): fairer on a busy machine; needs the memory of all engines at once."),
    nli_prompt: str = opts.NLI_PROMPT,
    nli_method: str = opts.NLI_METHOD,
    label_map: Optional[str] = opts.LABEL_MAP,
    max_length: int = opts.MAX_LENGTH,
    token_budget: int = opts.TOKEN_BUDGET,
    max_batch: Optional[int] = opts.MAX_BATCH,
    strict: bool = typer.Option(False, "--strict", help="Exit 1 when a parity cell is *different* (|Δ| > --tolerance and the 95 % CI excludes 0), an engine is below --min-agreement, or did not run (skipped or failed); with --scenario, when a run is INVALID, an engine is below --accuracy-tier or did not run."),
    require_equivalence: bool = typer.Option(False, "--require-equivalence", help="With --strict: also exit 1 when a cell is *inconclusive* (its CI is not inside ±tolerance): the engine must be shown to match."),
    tolerance: float = typer.Option(1.0, "--tolerance", min=0.0, help="Equivalence margin δ in percentage points: equivalent when the 95 % CI lies inside ±δ, different when |Δ| > δ and the CI excludes 0."),
    min_agreement: float = typer.Option(98.0, "--min-agreement", min=0.0, max=100.0, help="Minimum classifier label agreement with torch:fp32, percent."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", parser=out_path, metavar="DIR", help="Output folder (bench.json, bench.md, bench.png). Default: runs/bench-<time>."),
    no_plot: bool = typer.Option(False, "--no-plot", help="Do not draw bench.png."),
    compare: Optional[Tuple[Path, Path]] = typer.Option(None, "--compare", help="Compare two saved benches (bench.json files or folders) instead of running one."),
    scenario: Optional[str] = typer.Option(None, "--scenario", help="Instead of the probe's speed and parity: MLPerf "
                                           "LoadGen's scenarios for every engine and --roles: single-stream, "
                                           "multi-stream, offline, server (comma-separated), each with an accuracy "
                                           "pass against torch:fp32 (docs/latency.md; the loadgen extra)."),
    roles: str = typer.Option("classifier", "--roles", help="With --scenario: classifier (one (p, h) pair a sample), "
                              "generator (one prompt -> K candidates), study (one example through the whole loop)."),
    min_duration: float = typer.Option(10.0, "--min-duration", help="With --scenario: LoadGen's minimum duration of "
                                       "each run, seconds (shorter than LoadGen's official 600 s; too short for its "
                                       "minimum query count or early stopping: INVALID)."),
    min_queries: Optional[int] = typer.Option(None, "--min-queries", help="With --scenario: LoadGen's minimum query "
                                              "count (default: its official one per scenario)."),
    target_qps: Optional[float] = typer.Option(None, "--target-qps", help="With --scenario server: arrival rate, samples/s."),
    target_latency_ms: Optional[float] = typer.Option(None, "--target-latency-ms", help="With --scenario server: "
                                                      "the 99th-percentile latency bound, ms."),
    mlperf_rules: bool = typer.Option(False, "--mlperf-rules", help="With --scenario: LoadGen's official settings "
                                      "(600 s minimum, MultiStream 662 queries, the whole sample library)."),
    accuracy_tier: float = typer.Option(99.0, "--accuracy-tier", help="With --scenario --strict: the tier required, "
                                        "99 or 99.9 (% of the torch fp32 reference's score)."),
    cv_threshold: float = typer.Option(1.0, "--cv-threshold", help="With --scenario: warn when the service time's "
                                       "coefficient of variation exceeds this, percent (trtexec warns at 1 %)."),
    compliance: bool = typer.Option(False, "--compliance", help="With --scenario: MLPerf's compliance tests "
                                    "through LoadGen's audit.config, PASS / FAIL per row (docs/latency.md)."),
    compliance_tests: str = typer.Option("all", "--compliance-tests", help="TEST01,TEST04,TEST05 or all."),
) -> None:
    """Speed and parity of engines / precisions against torch:fp32 on identical inputs, in one process."""
    from breaknli_fast.bench.compare import compare as compare_results
    from breaknli_fast.bench.compare import compare_markdown, compare_table
    from breaknli_fast.bench.result import BenchResult
    from breaknli_fast.bench.runner import BenchConfig, run_bench
    from breaknli_fast.bench.shapes import parse_random_weights
    from breaknli_fast.bench.specs import BenchSpecError, parse_engines
    from breaknli_fast.console import RichHook, console, err_console, make_progress, user_errors
    from breaknli_fast.bench.recommend import recommendation_lines
    from breaknli_fast.data.labels import parse_label_map
    from breaknli_fast.errors import check_writable_dir
    from breaknli_fast.study.loading import EngineConfig
    from breaknli_fast.probes import probe_class
    from rich.markup import escape

    with user_errors(extra=(OSError,)):  # an output folder that cannot be written: one line too
        if compare and all(compare):
            a, b = (BenchResult.load(p) for p in compare)
            cmp = compare_results(a.data, b.data)
            console.print(compare_table(cmp, str(compare[0]), str(compare[1])))
            if out is not None:
                import json

                out.mkdir(parents=True, exist_ok=True)
                (out / "compare.json").write_text(json.dumps(cmp, indent=2) + "\n")
                (out / "compare.md").write_text(compare_markdown(cmp, str(compare[0]), str(compare[1])))
                console.print(f"comparison written to [bold]{escape(str(out))}[/] (compare.json, compare.md)")
            return
        settings = None
        if scenario is not None:
            settings = _scenario_settings(ctx, scenario, roles, min_duration, min_queries, target_qps,
                                          target_latency_ms, mlperf_rules, accuracy_tier, cv_threshold,
                                          compliance, compliance_tests)
        elif compliance:
            raise UserError("--compliance runs with --scenario (LoadGen's audit tests)")
        probe_cls = probe_class(probe)  # an unknown --probe is a one-line error
        if not [x for x in engines.split(",") if x.strip()]:
            raise BenchSpecError("--engines is empty: name the engines to measure against torch:fp32, e.g. "
                                 "-e torch:fp32,ort:int8")
        if settings is not None and probe != "breaknli":
            raise BenchSpecError(f"--probe {probe} with --scenario: LoadGen's scenarios measure the engines' roles "
                                 "(--roles) on the data's pairs, not a probe; leave --probe out")
        if gen_prompts == 0:
            raise BenchSpecError("--gen-prompts 0: the generate stage needs at least one prompt (leave it out for the "
                                 "default)")
        if probe != "breaknli":
            # compared by name: typer may hand back its own copy of click's enum
            given = [name for name in BREAKNLI_ONLY
                     if getattr(ctx.get_parameter_source(name), "name", "DEFAULT") not in ("DEFAULT", "DEFAULT_MAP")]
            if given:
                raise BenchSpecError(f"--{given[0].replace('_', '-')} shapes the BreakNLI loop only, not --probe {probe}")
        # the probe's config from its own options, as run builds it (another probe's options are refused)
        probe_config = opts.probe_config(probe, seed=seed)
        sample_limit = DEFAULT_SAMPLE_LIMIT if settings is None else SCENARIO_SAMPLE_LIMIT
        eff_limit = opts.effective_limit(dataset, limit, sample, sample_limit)
        base = EngineConfig(device=device, threads=threads, label_map=parse_label_map(label_map), max_length=max_length,
                            token_budget=token_budget, max_batch=max_batch, nli_prompt=nli_prompt, nli_method=nli_method,
                            gen_batch=gen_batch)
        base.check()  # an unknown precision, a device this machine lacks: one line before any model loads
        cfg = BenchConfig(
            engines=parse_engines(engines, base, split=component_split and settings is None, roles=probe_cls.roles),
            probe=probe, component_split=component_split and settings is None,
            probe_config=probe_config, generator=generator, classifier=classifier, mlm=mlm, dataset=dataset, split=split, by=by,
            limit=eff_limit, sample=sample, sample_seed=sample_seed, engine=base, warmup=warmup, min_iterations=min_iterations,
            min_seconds=min_seconds, repeats=repeats, gen_prompts=gen_prompts, greedy_prompts=greedy_prompts,
            invariance_pairs=invariance_pairs, tolerance=tolerance, min_agreement=min_agreement,
            require_equivalence=require_equivalence, random_weights=parse_random_weights(random_weights),
            fixed_length=fixed_length, cache_dir=str(cache_dir) if cache_dir else None,
            interleave=interleave, command=_command_line(ctx))
        out_dir = out or Path("runs") / f"bench-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        check_writable_dir(out_dir, "the bench folder")  # before the bench runs, not once it is done
        with make_progress() as progress:
            def log(msg: str) -> None:
                progress.console.print(f"[dim]{escape(msg)}[/]", highlight=False)

            if settings is not None:
                from breaknli_fast.bench.loadgen.runner import run_scenarios

                result = run_scenarios(cfg, settings, out_dir, log=log)
            else:
                result = run_bench(cfg, hook=RichHook(progress), log=log)
        paths = result.save(out_dir, plot=not no_plot)
    console.print(result.table())
    for line in recommendation_lines(result.data):
        console.print(line.replace("`", ""), markup=False, highlight=False)
    for r in result.data.get("scenarios") or []:
        for why in r.get("reasons") or []:
            err_console.print(f"[bold red]INVALID[/] {escape(r['engine'])} {r['role']} {r['scenario']}: {escape(why)}",
                              highlight=False)
        for w in r.get("warnings") or []:
            err_console.print(f"[yellow]warning[/] {escape(r['engine'])} {r['role']} {r['scenario']}: {escape(w)}",
                              highlight=False)
    for n in result.data.get("notes", []):
        console.print(f"[yellow]note:[/] {escape(n)}")
    for f in result.data.get("failures", []) if settings is None else []:
        err_console.print(f"[bold red]FAIL[/] {escape(f)}", highlight=False)
    for e in result.engines:
        if e["status"] != "ok":
            err_console.print(f"[yellow]{e['status']}[/] {escape(e['label'])}: {escape(str(e['reason']))}", highlight=False)
        for f in (e.get("checks") or {}).get("failures", []):
            err_console.print(f"[bold red]FAIL[/] {escape(e['label'])}: {escape(f)}", highlight=False)
    console.print(f"bench written to [bold]{escape(str(out_dir))}[/] (" + ", ".join(p.name for p in paths.values()) + ")")
    if strict and not result.passed:
        raise typer.Exit(1)


# bench -h: its own options by group (the shared ones, --dataset, --generator, ..., have their panels already)
opts.set_help_panels(bench, {
    opts.STUDY: ("probe", "seed"),
    opts.DATA: ("by", "limit"),
    opts.ENGINES: ("engines", "component_split", "random_weights", "cache_dir"),
    opts.MODELS: ("mlm",),
    opts.TIMING: ("repeats", "warmup", "min_iterations", "min_seconds", "interleave", "gen_prompts", "fixed_length"),
    opts.PARITY: ("tolerance", "min_agreement", "strict", "require_equivalence", "greedy_prompts", "invariance_pairs"),
    opts.SPEED: ("threads",),
    opts.OUTPUT: ("out", "no_plot", "compare"),
    "MLPerf LoadGen scenarios (--scenario)": ("scenario", "roles", "min_duration", "min_queries", "target_qps",
                                              "target_latency_ms", "mlperf_rules", "accuracy_tier", "cv_threshold",
                                              "compliance", "compliance_tests"),
})
