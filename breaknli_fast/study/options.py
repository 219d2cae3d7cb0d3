"""``run``'s options as one dataclass (:class:`RunOptions`) that the command line fills and the Python API takes,
and the option declarations ``run`` and ``bench`` share (one definition each, so the two commands cannot drift
apart).

    from breaknli_fast.study.options import RunOptions, run_with_options
    result = run_with_options(RunOptions(dataset="sample", limit=50, engine="ort", precision="int8"))

:meth:`RunOptions.check` refuses what the command line refuses, with the same one-line messages, before any
model loads; :func:`run_with_options` checks and runs the study.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Optional

from breaknli_fast.console import out_path
from breaknli_fast.data.labels import parse_label_map
from breaknli_fast.data.loaders import SAMPLE_NAME, Columns
from breaknli_fast.engines import registry
from breaknli_fast.errors import install_hint
from breaknli_fast.limits import MAX_BATCH_PAIRS, MAX_GEN_BATCH, MAX_TOKEN_BUDGET, THREADS_PER_CORE
from breaknli_fast.options import CLI, CliOption, Options, option
from breaknli_fast.progress import ProgressHook
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS
from breaknli_fast.study.loading import EngineConfig

# the help panels of run and bench
STUDY, DATA, MODELS, RAY, SPEED, OUTPUT = "Study", "Data", "Models and engines", "Ray", "Speed and memory", "Output"
ENGINES, TIMING, PARITY = "Engines compared", "Timing", "Parity checks"  # bench's own panels
ROLE_ENGINES = "Engines per role"
BATCH_WHY = "128x the CPU default; larger batches only hold more activations at once"
THREADS_HELP = f"at most {THREADS_PER_CORE} per CPU core"

RUN_SAMPLE_LIMIT = 1000  # examples of the embedded sample ``run`` uses when ``limit`` is not given


def shared(default: Any, spec: CliOption) -> Any:
    """A field declared by one of the shared options below."""
    return field(default=default, metadata={CLI: spec})


GENERATOR = CliOption("Generator: hub id, local folder, or a shipped mini model.", flag="--generator", short="-g",
                      panel=MODELS)
CLASSIFIER = CliOption("NLI model: sequence classifier or Flan-T5-style seq2seq.", flag="--classifier", short="-c",
                       panel=MODELS)
DATASET = CliOption(
    "'sample' (embedded SNLI evaluation slice: 2,724 held-out pairs no mini model was trained or tuned on), "
    "'sample-tuning' (the 2,002 held-out pairs mini-nli was tuned on), 'taxinli' (embedded TaxiNLI, 10,071 MNLI "
    "pairs with 15 reasoning categories), aenli[:N] / kinship[:N] (generated from --seed, labels computed by logic), "
    "mnli[:mismatched], snli[:test], anli[:r1|r2|r3], or a .jsonl/.csv/.tsv file (its other columns work with --by).",
    flag="--dataset", short="-d", panel=DATA)
SPLIT = CliOption("Split of a hub dataset (mnli, snli, anli), e.g. mismatched, test, r2.", flag="--split", panel=DATA)
DEVICE = CliOption("cpu or cuda[:N].", flag="--device", panel=MODELS)
NLI_PROMPT = CliOption(f"Seq2seq classifier prompt: {', '.join(NLI_PROMPTS)}.", flag="--nli-prompt", panel=MODELS)
NLI_METHOD = CliOption("Seq2seq classifier: score (first-step logits) or generate.", flag="--nli-method", panel=MODELS)
LABEL_MAP = CliOption("Model label names to canonical, e.g. LABEL_0=contradiction,LABEL_1=neutral,LABEL_2=entailment.",
                      flag="--label-map", panel=MODELS)
MAX_LENGTH = CliOption("Truncate classifier inputs to this many tokens, or to the model's own limit when lower (its "
                       "position table; recorded in config.json).", flag="--max-length", min=1, panel=SPEED)
TOKEN_BUDGET = CliOption("Classifier batch bound: batch size x longest sequence.", flag="--token-budget", min=1,
                         max=MAX_TOKEN_BUDGET, why=BATCH_WHY, panel=SPEED)
GEN_BATCH = CliOption("Prompts per generator batch, each with its K samples (default: 8 on the CPU, 64 on CUDA); "
                      "sampling cuts a call into batches of equal rows, so a prompt's samples may span two. The "
                      "candidates do not depend on it.", flag="--gen-batch", min=1, max=MAX_GEN_BATCH, why=BATCH_WHY,
                      panel=SPEED, show_default=False)
MAX_BATCH = CliOption("Classifier batch bound: pairs per batch (default: the engine's: on the CPU 16 for ort, 32 for "
                      "torch sequence classifiers; else 64).", flag="--max-batch", min=1, max=MAX_BATCH_PAIRS,
                      why=BATCH_WHY, panel=SPEED, show_default=False)
SAMPLE = CliOption("Draw N examples stratified by gold label (each label its share of the dataset, a seeded shuffle "
                   "within it) instead of the first N (--limit). Reported with its label counts.", flag="--sample",
                   min=1, panel=DATA, show_default=False)
SAMPLE_SEED = CliOption("Seed of the --sample draw (default: --seed), to vary one and keep the other.",
                        flag="--sample-seed", panel=DATA, show_default=False)


def effective_limit(dataset: str, limit: int | None, sample: int | None, sample_default: int) -> int | None:
    """The ``--limit`` a command runs with: none with ``--sample`` (both given: load_slice's one-line error),
    ``sample_default`` for the embedded sample when it is not given, none for 0."""
    if sample is not None:
        return limit
    if limit is None:
        return sample_default if dataset == SAMPLE_NAME else None
    return limit or None


def engine_settings(o: Any) -> dict[str, Any]:
    """The engine options ``run`` and ``bench`` share (``device``, ``nli_prompt``, ..., ``gen_batch``) as
    :class:`EngineConfig`'s keyword arguments."""
    return dict(device=o.device, label_map=parse_label_map(o.label_map), max_length=o.max_length,
                token_budget=o.token_budget, max_batch=o.max_batch, nli_prompt=o.nli_prompt, nli_method=o.nli_method,
                gen_batch=o.gen_batch)


@dataclass
class RunOptions(Options):
    """Everything ``breaknli-fast run`` takes; ``probe_config`` is the probe's own config object (the command line
    builds it from the probe's options; None: the probe's defaults)."""

    probe: str = option("breaknli", flag="--probe", panel=STUDY, help="The study (the registered probes are listed here).")
    seed: int = option(0, panel=STUDY, help="One seed for the whole run (generation, permutations, generated data).")
    chunk_size: Optional[int] = option(None, min=1, panel=STUDY,
                                       help="Examples per resumable chunk (default: the probe's: 16; accuracy 256).")
    dataset: str = shared(SAMPLE_NAME, DATASET)
    split: Optional[str] = shared(None, SPLIT)
    limit: Optional[int] = option(None, short="-n", min=0, panel=DATA,
                                  help=f"Use the first N valid examples (0 = all). Default: all; {RUN_SAMPLE_LIMIT} for "
                                       "the embedded sample.")
    sample: Optional[int] = shared(None, SAMPLE)
    sample_seed: Optional[int] = shared(None, SAMPLE_SEED)
    premise_col: Optional[str] = option(None, panel=DATA, help="Column of the premise in a dataset file (default: "
                                                                 "premise, then sentence1).")
    hypothesis_col: Optional[str] = option(None, panel=DATA, help="Column of the hypothesis (default: hypothesis, "
                                                                    "then sentence2).")
    label_col: Optional[str] = option(None, panel=DATA, help="Column of the gold label (default: label, then gold_label).")
    id_col: Optional[str] = option(None, panel=DATA, help="Column of a unique example id (default: id, pairID, uid or "
                                                            "idx; else the line number).")
    by: Optional[str] = option(None, panel=DATA,
                               help="Break the headline metrics down by dataset columns, e.g. genre or "
                                    "negation_logic,quantifier_logic (0/1 columns: the examples where it is 1 and the "
                                    "rest; others: per value). Default: TaxiNLI's categories on taxinli.")
    generator: str = shared("mini-t5", GENERATOR)
    classifier: str = shared("mini-nli", CLASSIFIER)
    mlm: Optional[str] = option(None, panel=MODELS,
                                help="merge: the masked LMs that suggest replacements, comma-separated (mini-mlm, a "
                                     "folder or a hub id such as bert-base-cased). Default: mini-mlm.")
    engine: str = option("auto", short="-e", panel=MODELS,
                         help="auto or a registered engine (" + ", ".join(registry.names()) + "; a backend package "
                              "joins by entry point). auto: ort on the CPU at fp32/int8 when ONNX Runtime is installed "
                              "(exactly torch's fp32 results, faster), else torch. ort on --device cuda and tensorrt: "
                              "not verified on a GPU.")
    precision: str = option("fp32", short="-p", panel=MODELS, help="fp32, fp16, bf16 (torch, cudagraph) or int8 "
                                                                    "(ort/tensorrt).")
    classifier_precision: Optional[str] = option(
        None, panel=MODELS, help="The classifier at another precision than --precision (e.g. --precision fp32 "
                                 "--classifier-precision int8: the fp32 generator's candidates, a faster classifier).")
    generator_precision: Optional[str] = option(None, panel=MODELS,
                                                help="The generator at another precision than --precision.")
    mlm_precision: Optional[str] = option(None, panel=MODELS,
                                          help="merge: the masked LMs at another precision than --precision.")
    classifier_engine: Optional[str] = option(
        None, panel=ROLE_ENGINES, help="The classifier on another engine than --engine (e.g. --engine ort "
                                       "--classifier-engine torch); each role is checked against its engine's "
                                       "declaration before anything loads.")
    generator_engine: Optional[str] = option(None, panel=ROLE_ENGINES,
                                             help="The generator on another engine than --engine.")
    mlm_engine: Optional[str] = option(None, panel=ROLE_ENGINES, help="merge: the masked LMs on another engine than "
                                                                       "--engine.")
    device: str = shared("cpu", DEVICE)
    nli_prompt: str = shared(DEFAULT_NLI_PROMPT, NLI_PROMPT)
    nli_method: str = shared("score", NLI_METHOD)
    label_map: Optional[str] = shared(None, LABEL_MAP)
    threads: Optional[int] = option(None, min=1, panel=SPEED,
                                    help=f"CPU threads in all (default: torch's choice; ort: physical cores; "
                                         f"{THREADS_HELP}).")
    workers: Optional[str] = option(None, panel=SPEED,
                                    help="CPU batches run side by side, each on threads/workers threads: a number or "
                                         "'auto' (2 when there are 2+ threads). Default: auto for ort, 1 for torch. "
                                         "ort's results do not change with it; torch's logits may move at the 1e-6 "
                                         "level.")
    max_length: int = shared(256, MAX_LENGTH)
    token_budget: int = shared(8192, TOKEN_BUDGET)
    max_batch: Optional[int] = shared(None, MAX_BATCH)
    gen_batch: Optional[int] = shared(None, GEN_BATCH)
    ray: bool = option(False, panel=RAY, help=f"Shard the study over Ray actors ({install_hint('ray')}): a local "
                                              "instance, or the cluster of --ray-address. Same records as one process.")
    ray_address: Optional[str] = option(None, metavar="ADDRESS", panel=RAY,
                                        help="Join this Ray cluster (implies --ray), e.g. 10.0.0.5:6379 or auto.")
    ray_workers: Optional[int] = option(None, min=1, panel=RAY,
                                        help="Ray actors (default: one per GPU, else one per --ray-threads CPUs; "
                                             "at most as many as the cluster's CPUs / GPUs hold).")
    ray_gpus_per_worker: float = option(0.0, min=0.0, panel=RAY, help="GPUs per Ray actor (1 on GPU clusters).")
    ray_threads: int = option(1, min=1, panel=RAY,
                              help="CPU threads per Ray actor (the actors' threads in all: at most the cluster's "
                                   "CPUs).")
    out: Optional[Path] = option(None, short="-o", parser=out_path, metavar="DIR", panel=OUTPUT,
                                 help="Run directory. Default: runs/<dataset>-n<limit>-<classifier>-<engine>-<precision>-"
                                      "s<seed>[-p<hash of the probe's settings where they are not its defaults>] (the "
                                      "probe's name first, other than breaknli's).")
    overwrite: bool = option(False, panel=OUTPUT, help="Replace a run directory that holds different settings.")
    probe_config: Any = None  # the probe's config object (not an option: the probe's options build it)
    runs_root: Path = Path("runs")  # where the default run directory goes

    def check(self) -> None:
        """What the command line refuses, as one-line errors, before any model loads: bounds, an unknown probe,
        an engine or precision a role cannot take."""
        from breaknli_fast.probes import probe_class

        self.check_bounds()
        cls = probe_class(self.probe)  # an unknown probe: one line
        ecfg = self.engine_config()
        ecfg.check()
        ecfg.check_used(cls.roles, f"the {self.probe} probe")  # --mlm-engine on BreakNLI would change nothing

    def engine_config(self) -> EngineConfig:
        return EngineConfig(engine=self.engine, precision=self.precision, threads=self.threads, workers=self.workers,
                            classifier_precision=self.classifier_precision,
                            generator_precision=self.generator_precision, mlm_precision=self.mlm_precision,
                            classifier_engine=self.classifier_engine, generator_engine=self.generator_engine,
                            mlm_engine=self.mlm_engine, **engine_settings(self))

    def ray_config(self) -> Any:
        """Ray's settings where the study is sharded (``ray`` or ``ray_address``), else None."""
        from breaknli_fast.study.distributed import RayConfig

        if not (self.ray or self.ray_address):
            return None
        return RayConfig(address=self.ray_address, workers=self.ray_workers, gpus_per_worker=self.ray_gpus_per_worker,
                         threads_per_worker=self.ray_threads)

    def columns(self) -> Columns:
        return Columns(self.premise_col, self.hypothesis_col, self.label_col, self.id_col)

    def limit_for(self, dataset: str) -> int | None:
        return effective_limit(dataset, self.limit, self.sample, RUN_SAMPLE_LIMIT)

    @property
    def is_grid(self) -> bool:
        """Several classifiers or datasets: a study over their grid (:mod:`breaknli_fast.study.grid`)."""
        return "," in self.classifier or "," in self.dataset

    def config(self) -> Any:
        """The probe's config: ``probe_config``, with ``seed`` and ``chunk_size`` set where the config has them."""
        return probe_config_with(self, self.probe, self.probe_config, ("seed", "chunk_size"))

    def grid_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of :func:`breaknli_fast.study.grid.run_grid` (beside probe, config, models, data)."""
        return dict(split=self.split, generator=self.generator, columns=self.columns(), engine=self.engine_config(),
                    out=self.out, overwrite=self.overwrite, by=self.by, mlm=self.mlm, sample=self.sample,
                    sample_seed=self.sample_seed, ray=self.ray_config(),
                    limit={d.strip(): self.limit_for(d.strip()) for d in self.dataset.split(",")})


def probe_config_with(o: Options, probe: str, config: Any, names: tuple[str, ...]) -> Any:
    """The config of ``probe`` from ``config`` (None, an instance or a dict) with the options ``names`` of ``o``
    (the run's seed, its chunk size) set where the config has those fields -- unless a config given in Python sets
    its own and the option was left at its default."""
    from breaknli_fast.probes import probe_class
    from breaknli_fast.probes.base import make_config

    cls = probe_class(probe).config_class
    if cls is None:
        return None
    cfg = make_config(cls, config, f"the {probe} probe's config")
    has = set(getattr(cls, "__dataclass_fields__", {}))
    common = {k: getattr(o, k) for k in names
              if getattr(o, k) is not None and k in has and (config is None or o.is_given(k))}
    return replace(cfg, **common) if common else cfg


def run_with_options(o: RunOptions, hook: ProgressHook | None = None) -> Any:
    """Check ``o`` and run its study (one classifier on one dataset): the
    :class:`~breaknli_fast.study.runner.StudyResult`. Several classifiers or datasets: see
    :func:`breaknli_fast.study.grid.run_grid` with :meth:`RunOptions.grid_kwargs`."""
    from breaknli_fast.errors import UserError
    from breaknli_fast.study import run_study  # the package's name: what a test or a wrapper replaces

    o.check()
    if o.is_grid:
        raise UserError("several classifiers or datasets: run_grid(probe, config, classifiers=..., datasets=..., "
                        "**options.grid_kwargs()) runs their grid")
    return run_study(o.probe, o.config(), dataset=o.dataset, split=o.split, limit=o.limit_for(o.dataset),
                     sample=o.sample, sample_seed=o.sample_seed, columns=o.columns(), generator=o.generator,
                     classifier=o.classifier, engine=o.engine_config(), out=o.out, runs_root=o.runs_root,
                     overwrite=o.overwrite, hook=hook, by=o.by, ray=o.ray_config(), mlm=o.mlm)
