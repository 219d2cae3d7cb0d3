"""``bench``'s options as one dataclass (:class:`BenchOptions`) that the command line fills and the Python API
takes, with the checks both get, and :func:`bench_with_options`, which checks and runs the bench.

    from breaknli_fast.bench.options import BenchOptions, bench_with_options
    result = bench_with_options(BenchOptions(engines="torch:fp32,ort:int8", limit=50))
    result.save("runs/my-bench")

:meth:`BenchOptions.check` refuses, with the command line's one-line messages and before any model loads, what
cannot run: an unknown probe, empty or unknown engines, options of one mode used with another, LoadGen's settings
that contradict each other.
"""

from __future__ import annotations

import shlex
import sys
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional, Tuple

from breaknli_fast.console import out_path
from breaknli_fast.errors import UserError
from breaknli_fast.limits import (MAX_MIN_DURATION_S, MAX_MIN_ITERATIONS, MAX_MIN_SECONDS, MAX_PREPARED, MAX_REPEATS,
                                  MAX_TARGET_QPS, MAX_WARMUP)
from breaknli_fast.options import CliOption, Options, option, option_fields
from breaknli_fast.progress import ProgressHook
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT
from breaknli_fast.study.options import (CLASSIFIER, DATA, DATASET, DEVICE, ENGINES, GEN_BATCH, GENERATOR, LABEL_MAP,
                                         MAX_BATCH, MAX_LENGTH, MODELS, NLI_METHOD, NLI_PROMPT, OUTPUT, PARITY,
                                         SAMPLE, SAMPLE_SEED, SPEED, SPLIT, STUDY, TIMING, TOKEN_BUDGET,
                                         effective_limit, engine_settings, probe_config_with, shared)

DEFAULT_ENGINES = "torch:fp32,ort:fp32,ort:int8"
DEFAULT_SAMPLE_LIMIT = 32  # examples of the embedded sample when --limit is not given (several engines run)
SCENARIO_SAMPLE_LIMIT = 256  # --scenario: the classifier's sample library (its accuracy pass covers each once)
# bench's own options that shape the BreakNLI workload only: refused with another --probe, where they would change
# nothing (the probes' own options are refused by cli_options.probe_config the same way)
BREAKNLI_ONLY = ("generator", "fixed_length", "gen_prompts", "greedy_prompts")
LOADGEN = "MLPerf LoadGen scenarios (--scenario)"
SUITE = "The benchmark suite (--suite)"
REPEAT_WHY = "docs/limits.md: more only lengthens the bench"
PREPARED_WHY = "LoadGen prepares that many queries and holds them in memory"


@dataclass
class BenchOptions(Options):
    """Everything ``breaknli-fast bench`` takes; ``probe_config`` is the probe's own config object (the command
    line builds it from the probe's options; None: the probe's defaults)."""

    probe: str = option("breaknli", flag="--probe", panel=STUDY,
                        help="The probe every engine runs: breaknli, permutation, merge, accuracy (or another "
                             "registered one), with its defaults.")
    engines: str = option(DEFAULT_ENGINES, short="-e", panel=ENGINES,
                          help="Comma-separated ENGINE:PRECISION[:key=value...] (torch:fp32 is the reference, always "
                               "measured first). Keys: label=NAME, classifier=PATH, generator=PATH, clf.precision= / "
                               "gen.precision= / mlm.precision=; others go to the engine's loaders (clf.KEY / gen.KEY / "
                               "mlm.KEY for one role), e.g. ort:int8:quantization=static. One engine per role: "
                               "gen=ort:fp32/clf=openvino:bf16.")
    component_split: bool = option(True, flag="--component-split/--no-component-split", panel=ENGINES,
                                   help="After each engine at int8 / fp16 / bf16, also measure it with only one of the "
                                        "probe's models at that precision (the others at fp32), one model at a time: "
                                        "where a difference from the reference comes from.")
    generator: str = shared("mini-t5", GENERATOR)
    classifier: str = shared("mini-nli", CLASSIFIER)
    mlm: Optional[str] = option(None, panel=MODELS, help="Masked LMs of a probe that needs them (merge): names or "
                                                         "folders, comma-separated (default mini-mlm).")
    dataset: str = shared("sample", DATASET)
    split: Optional[str] = shared(None, SPLIT)
    by: Optional[str] = option(None, panel=DATA,
                               help="Also pair the headline metrics per group of these dataset columns (0/1 columns: "
                                    "where it is 1 and the rest; others: per value). Default: TaxiNLI's categories on "
                                    "taxinli.")
    limit: Optional[int] = option(None, short="-n", min=0, panel=DATA,
                                  help=f"First N valid examples (0 = all). Default: all; {DEFAULT_SAMPLE_LIMIT} for the "
                                       f"embedded sample ({SCENARIO_SAMPLE_LIMIT} with --scenario).")
    sample: Optional[int] = shared(None, SAMPLE)
    sample_seed: Optional[int] = shared(None, SAMPLE_SEED)
    repeats: int = option(1, min=1, max=MAX_REPEATS, why=REPEAT_WHY, panel=TIMING,
                          help="End-to-end loop runs per engine (median wall reported); with --scenario: rounds of "
                               "LoadGen performance runs, the engines in turn (A B C A B C), the median round's "
                               "figures with the spread across rounds.")
    warmup: int = option(1, min=0, max=MAX_WARMUP, why=REPEAT_WHY, panel=TIMING,
                         help="Unmeasured warm-up iterations of every stage (and end-to-end runs on 4 examples).")
    min_iterations: int = option(3, min=1, max=MAX_MIN_ITERATIONS, why=REPEAT_WHY, panel=TIMING,
                                 help="Measured iterations of each stage, at least.")
    min_seconds: float = option(1.0, min=0.0, max=MAX_MIN_SECONDS, why="an hour per stage", panel=TIMING,
                                help="Measured seconds of each stage, at least.")
    gen_prompts: Optional[int] = option(None, min=0, panel=TIMING,
                                        help="Prompts of the generate-stage workload (half per mode; default: the "
                                             "generator's prompts per batch on the device, 8 on the CPU, 64 on CUDA).")
    greedy_prompts: int = option(16, min=0, panel=PARITY, help="Prompts of the greedy token-agreement check.")
    invariance_pairs: int = option(1000, min=0, panel=PARITY,
                                   help="Pairs classified one at a time and in the engine's batches: how many labels "
                                        "depend on batch neighbours.")
    seed: int = option(0, panel=STUDY, help="The probe's seed (generation, permutations, draws).")
    gen_batch: Optional[int] = shared(None, GEN_BATCH)
    fixed_length: bool = option(False, panel=TIMING, help="Generate exactly --max-new-tokens tokens (same work for "
                                                          "every engine; on with --random-weights).")
    random_weights: Optional[str] = option(
        None, panel=ENGINES, help="Real architectures with random weights, e.g. flan-t5-base,roberta-large (T5 shapes "
                                  "= generator, others = classifier; classifier=flan-t5-large for a seq2seq NLI model). "
                                  "Speed only: parity is not meaningful.")
    cache_dir: Optional[Path] = option(None, panel=ENGINES, help="Folder of the random-weight models (default "
                                                                 "~/.cache/breaknli_fast/random-weights).")
    device: str = shared("cpu", DEVICE)
    threads: Optional[int] = option(None, min=1, panel=SPEED,
                                    help="CPU threads in all, passed to every engine (which splits them into workers: "
                                         "ort:int8:workers=1 sets an engine's workers).")
    ceilings: Optional[str] = option(
        None, panel=TIMING, metavar="MODE",
        help="Each stage's share of this machine's ceilings (BreakNLI's stages): cached (the measured peaks cached for "
             "this CPU, measuring the product shapes they lack; a few seconds), fresh (measure them again: on a quiet "
             "machine), quick (the smoke form), off. Default: cached, or $BREAKNLI_FAST_CEILINGS.")
    interleave: bool = option(False, panel=TIMING,
                              help="Load every engine first, then time them in rounds (A B A B ...): fairer on a busy "
                                   "machine; needs the memory of all engines at once.")
    nli_prompt: str = shared(DEFAULT_NLI_PROMPT, NLI_PROMPT)
    nli_method: str = shared("score", NLI_METHOD)
    label_map: Optional[str] = shared(None, LABEL_MAP)
    max_length: int = shared(256, MAX_LENGTH)
    token_budget: int = shared(8192, TOKEN_BUDGET)
    max_batch: Optional[int] = shared(None, MAX_BATCH)
    strict: bool = option(False, panel=PARITY,
                          help="Exit 1 when a parity cell is *different* (|Δ| > --tolerance and the 95 % CI excludes "
                               "0), an engine is below --min-agreement, or did not run (skipped or failed); with "
                               "--scenario, when a run is INVALID, an engine is below --accuracy-tier or did not run.")
    require_equivalence: bool = option(False, panel=PARITY,
                                       help="With --strict: also exit 1 when a cell is *inconclusive* (its CI is not "
                                            "inside ±tolerance): the engine must be shown to match.")
    tolerance: float = option(1.0, min=0.0, panel=PARITY,
                              help="Equivalence margin δ in percentage points: equivalent when the 95 % CI lies inside "
                                   "±δ, different when |Δ| > δ and the CI excludes 0.")
    min_agreement: float = option(98.0, min=0.0, max=100.0, panel=PARITY,
                                  help="Minimum classifier label agreement with torch:fp32, percent.")
    out: Optional[Path] = option(None, short="-o", parser=out_path, metavar="DIR", panel=OUTPUT,
                                 help="Output folder (bench.json, bench.md, bench.png). Default: runs/bench-<time>.")
    no_plot: bool = option(False, panel=OUTPUT, help="Do not draw bench.png.")
    compare: Optional[Tuple[Path, Path]] = option(None, type=Tuple[Path, Path], panel=OUTPUT,
                                                  help="Compare two saved benches (bench.json files or folders) "
                                                       "instead of running one.")
    scenario: Optional[str] = option(None, panel=LOADGEN,
                                     help="Instead of the probe's speed and parity: MLPerf LoadGen's scenarios for "
                                          "every engine and --roles: single-stream, multi-stream, offline, server "
                                          "(comma-separated), each with an accuracy pass against torch:fp32 "
                                          "(docs/latency.md; the loadgen extra).")
    roles: str = option("classifier", panel=LOADGEN,
                        help="With --scenario: classifier (one (p, h) pair a sample), generator (one prompt -> K "
                             "candidates), study (one example through the whole loop).")
    min_duration: float = option(10.0, max=MAX_MIN_DURATION_S, why="6x MLPerf's official 600 s", panel=LOADGEN,
                                 help="With --scenario: LoadGen's minimum duration of each run, seconds (shorter than "
                                      "LoadGen's official 600 s; too short for its minimum query count or early "
                                      "stopping: INVALID).")
    min_queries: Optional[int] = option(None, max=MAX_PREPARED, why=PREPARED_WHY, panel=LOADGEN,
                                        help="With --scenario: LoadGen's minimum query count (default: its official "
                                             "one per scenario).")
    target_qps: Optional[float] = option(None, max=MAX_TARGET_QPS, why="LoadGen schedules every arrival in advance",
                                         panel=LOADGEN, help="With --scenario server: arrival rate, samples/s.")
    target_latency_ms: Optional[float] = option(None, panel=LOADGEN, help="With --scenario server: the "
                                                                          "99th-percentile latency bound, ms.")
    mlperf_rules: bool = option(False, panel=LOADGEN, help="With --scenario: LoadGen's official settings (600 s "
                                                           "minimum, MultiStream 662 queries, the whole sample library).")
    accuracy_tier: float = option(99.0, panel=LOADGEN, help="With --scenario --strict: the tier required, 99 or 99.9 "
                                                            "(% of the torch fp32 reference's score).")
    cv_threshold: float = option(1.0, panel=LOADGEN, help="With --scenario: warn when the service time's coefficient "
                                                          "of variation exceeds this, percent (trtexec warns at 1 %).")
    compliance: bool = option(False, panel=LOADGEN,
                              help="With --scenario: compliance tests per role (MLPerf Inference v6.0).")
    compliance_tests: Optional[str] = option(None, panel=LOADGEN,
                                             help="Which (implies --compliance): TEST01,TEST04,TEST06,TEST07,TEST09, "
                                                  "TEST05 (retired), or all (each role's).")
    suite: Optional[str] = option(None, metavar="NAMES", panel=SUITE,
                                  help="Instead of one bench: entries of the declared benchmark suite "
                                       "(benchmarks/suite.toml of a checkout), comma-separated, 'all', or 'list' to "
                                       "list them; each writes its result file into --out (default: a new "
                                       "runs/suite-<time>; --update-results: the checkout's benchmarks/results). An "
                                       "alias of `breaknli-fast suite run` (docs/benchmarks.md).")
    update_results: bool = option(False, panel=SUITE,
                                  help="With --suite: write into the checkout's committed benchmarks/results "
                                       "(BENCHMARKS.md is rendered from them; not with --smoke).")
    suite_file: Optional[Path] = option(None, metavar="FILE", panel=SUITE,
                                        help="The suite file (default: benchmarks/suite.toml of the checkout).")
    smoke: bool = option(False, panel=SUITE, help="With --suite: the smoke sizes (checks the pipeline in minutes; "
                                                  "the figures mean nothing).")
    probe_config: Any = None  # the probe's config object (not an option: the probe's options build it)

    # -- checks, before any model loads ---------------------------------------------------------------------

    def check(self) -> Any:
        """Every one-line refusal of the command line: bounds, LoadGen's settings (and LoadGen itself), an unknown
        probe, empty engines, options of one mode with another, the engines' settings. Returns the checked
        :meth:`scenario_settings` (None without ``--scenario``)."""
        from breaknli_fast.bench.specs import BenchSpecError
        from breaknli_fast.probes import probe_class

        self.check_bounds()
        if self.scenario is None and (self.compliance or self.compliance_tests is not None):
            raise UserError(f"{'--compliance' if self.compliance else '--compliance-tests'} runs with --scenario "
                            "(LoadGen's audit tests)")
        settings = self.scenario_settings()
        probe_class(self.probe)  # an unknown --probe is a one-line error
        if not [x for x in self.engines.split(",") if x.strip()]:
            raise BenchSpecError("--engines is empty: name the engines to measure against torch:fp32, e.g. "
                                 "-e torch:fp32,ort:int8")
        if self.scenario is not None and self.probe != "breaknli":
            raise BenchSpecError(f"--probe {self.probe} with --scenario: LoadGen's scenarios measure the engines' "
                                 "roles (--roles) on the data's pairs, not a probe; leave --probe out")
        from breaknli_fast.bench.roofline import CEILING_MODES, CEILINGS_ENV, default_ceilings_mode

        mode = self.ceilings if self.ceilings is not None else default_ceilings_mode()
        if mode not in CEILING_MODES:
            given = "" if self.ceilings is not None else f" (from ${CEILINGS_ENV})"
            raise BenchSpecError(f"--ceilings {mode}{given}: use {', '.join(CEILING_MODES)}")
        if self.gen_prompts == 0:
            raise BenchSpecError("--gen-prompts 0: the generate stage needs at least one prompt (leave it out for the "
                                 "default)")
        given = [name for name in BREAKNLI_ONLY if self.probe != "breaknli" and self.is_given(name)]
        if given:
            raise BenchSpecError(f"{self.flag(given[0])} shapes the BreakNLI loop only, not --probe {self.probe}")
        self.engine_config().check()  # an unknown precision, a device this machine lacks
        self.check_engines(settings)
        return settings

    def needed_roles(self, settings: Any = None) -> tuple[str, ...]:
        """The model roles the bench runs: LoadGen's ``--roles`` (the study unit: both models), else the probe's."""
        from breaknli_fast.probes import probe_class

        if settings is not None:
            return tuple(r for r in ("classifier", "generator")
                         if any(x in (r, "study") for x in settings.roles))
        return tuple(probe_class(self.probe).roles)

    def check_engines(self, settings: Any = None) -> None:
        """What ``run`` refuses, refused for every ``--engines`` entry before the reference runs: its settings
        (threads, workers, precisions), a role or precision its engine's declaration excludes, and an engine or
        precision for a role the bench does not run."""
        from breaknli_fast.bench.specs import BenchSpecError, parse_engines
        from breaknli_fast.errors import first_line

        roles = self.needed_roles(settings)
        what = "LoadGen's --roles" if settings is not None else f"the {self.probe} probe"
        short = {"classifier": "clf", "generator": "gen", "mlm": "mlm"}
        for spec in parse_engines(self.engines, self.engine_config(), roles=roles)[1:]:
            c = spec.config

            def hint(role: str) -> str:  # the bench's way to give a role another engine: a per-role entry
                parts = [f"{short[role]}=torch:fp32"] + [f"{short[r]}={c.engine_of(r)}:{c.precision_of(r)}"
                                                          for r in roles if r != role]
                return f"in --engines, {'/'.join(parts)} runs the {role} on another engine"

            try:
                c.check()
                c.check_used(roles, what, flags=lambda r, kind: f"{short[r]}=" if kind == "engine"
                             else f"{short[r]}.precision=")
                c.check_roles(roles, hint)
            except UserError as e:
                raise BenchSpecError(f"engine {spec.label!r}: {first_line(e)}") from None

    def scenario_settings(self) -> Any:
        """``--scenario``'s :class:`~breaknli_fast.bench.loadgen.settings.ScenarioSettings`, checked (and LoadGen
        found), or None without ``--scenario``."""
        if self.scenario is None:
            return None
        from breaknli_fast.bench.loadgen import import_loadgen
        from breaknli_fast.bench.loadgen.compliance import parse_compliance
        from breaknli_fast.bench.loadgen.settings import ScenarioSettings, parse_roles, parse_scenarios

        scenarios, roles = parse_scenarios(self.scenario), parse_roles(self.roles)
        tests = (parse_compliance(self.compliance_tests, roles)
                 if self.compliance or self.compliance_tests is not None else ())
        if self.random_weights and self.compliance_tests is not None and "TEST07" in tests:
            raise UserError("--compliance-tests TEST07 judges accuracy, which --random-weights models do not have: "
                            "leave TEST07 out")
        import_loadgen()
        given = [n for n in ("min_duration", "min_queries") if self.mlperf_rules and self.is_given(n)]
        if given:
            raise UserError(f"{self.flag(given[0])} and --mlperf-rules: the official rules set it")
        s = ScenarioSettings(scenarios, roles, self.min_duration, self.min_queries, self.target_qps,
                             self.target_latency_ms, self.mlperf_rules, self.accuracy_tier, self.cv_threshold,
                             compliance=tests)
        s.check()
        return s

    # -- what the bench runs ------------------------------------------------------------------------------------

    def engine_config(self) -> Any:
        """The bench-wide :class:`~breaknli_fast.study.loading.EngineConfig` each ``--engines`` entry starts from."""
        from breaknli_fast.study.loading import EngineConfig

        return EngineConfig(threads=self.threads, **engine_settings(self))

    def bench_config(self) -> Any:
        """The :class:`~breaknli_fast.bench.runner.BenchConfig` these options describe."""
        from breaknli_fast.bench.runner import BenchConfig
        from breaknli_fast.bench.shapes import parse_random_weights
        from breaknli_fast.bench.specs import parse_engines
        from breaknli_fast.probes import probe_class

        split = self.component_split and self.scenario is None
        limit = effective_limit(self.dataset, self.limit, self.sample,
                                DEFAULT_SAMPLE_LIMIT if self.scenario is None else SCENARIO_SAMPLE_LIMIT)
        base = self.engine_config()
        return BenchConfig(
            engines=parse_engines(self.engines, base, split=split, roles=probe_class(self.probe).roles),
            probe=self.probe, component_split=split,
            probe_config=probe_config_with(self, self.probe, self.probe_config, ("seed",)),
            generator=self.generator, classifier=self.classifier, mlm=self.mlm, dataset=self.dataset,
            split=self.split, by=self.by, limit=limit, sample=self.sample, sample_seed=self.sample_seed, engine=base,
            warmup=self.warmup, min_iterations=self.min_iterations, min_seconds=self.min_seconds,
            repeats=self.repeats, gen_prompts=self.gen_prompts, greedy_prompts=self.greedy_prompts,
            invariance_pairs=self.invariance_pairs, tolerance=self.tolerance, min_agreement=self.min_agreement,
            require_equivalence=self.require_equivalence, random_weights=parse_random_weights(self.random_weights),
            fixed_length=self.fixed_length, cache_dir=str(self.cache_dir) if self.cache_dir else None,
            interleave=self.interleave, command=self.command_line(),
            **({"ceilings": self.ceilings} if self.ceilings is not None else {}))

    def out_dir(self) -> Path:
        return self.out or Path("runs") / f"bench-{datetime.now().strftime('%Y%m%d-%H%M%S')}"

    def command_line(self) -> str:
        """The command as typed when run from a shell (``breaknli-fast bench ...``); otherwise (the Python API, a
        test runner) an equivalent command rebuilt from the options that were given."""
        argv = list(sys.argv)
        if len(argv) > 1 and argv[1] == "bench" and Path(argv[0]).name in ("breaknli-fast", "cli.py", "__main__.py"):
            return shlex.join(["breaknli-fast"] + argv[1:])
        parts = ["breaknli-fast", "bench"]
        for f, spec in option_fields(type(self)):
            value = getattr(self, f.name)
            if value is None or not self.is_given(f.name) or value == f.default:
                continue
            parts += _flag_words(spec, f.name, value)
        return shlex.join(parts)


def _flag_words(spec: CliOption, name: str, value: Any) -> list[str]:
    """The words that set option ``name`` to ``value`` on the command line."""
    flag = spec.flag_of(name)
    if isinstance(value, bool):
        if value:
            return [flag]
        pair = (spec.flag or "").split("/")
        return [pair[1]] if len(pair) > 1 else []
    if isinstance(value, (tuple, list)):
        return [flag, *map(str, value)]
    return [flag, str(value)]


def bench_with_options(o: BenchOptions, *, hook: ProgressHook | None = None,
                       log: Callable[[str], None] | None = None) -> Any:
    """Check ``o`` and run its bench -- the probe's speed and parity, or LoadGen's scenarios with ``scenario``
    (written to :meth:`BenchOptions.out_dir` as it runs): the :class:`~breaknli_fast.bench.result.BenchResult`,
    not yet saved (:meth:`~breaknli_fast.bench.result.BenchResult.save`)."""
    settings = o.check()
    cfg = o.bench_config()
    if settings is not None:
        from breaknli_fast.bench.loadgen.runner import run_scenarios

        return run_scenarios(cfg, settings, o.out_dir(), log=log)
    from breaknli_fast.bench.runner import run_bench

    return run_bench(cfg, hook=hook, log=log)
