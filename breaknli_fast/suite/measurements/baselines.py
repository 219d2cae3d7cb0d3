"""What a user would otherwise run, against breaknli-fast's engines, on the same inputs (kind ``baselines``).

Two jobs of the BreakNLI loop, in one process on identical inputs: classify (the (p, h) pairs of the first
``limit`` examples) and generate (K sampled candidates for each of the first ``gen_prompts`` generation prompts,
half per mode: the bench's generate-stage workload). Contenders: the transformers pipeline
(``pipeline("text-classification")`` / ``pipeline("text2text-generation")``, torch fp32) and optimum's ORTModel
(fp32, CPU provider), both peers of :mod:`breaknli_fast.suite.peers`, beside the registry's engines
(``engines``). Every contender is loaded first; then each job is timed in rounds over all contenders (``warmup``
unmeasured runs, then at least ``min_iterations`` and ``min_seconds``), the median and the best iteration
reported. Generated tokens are counted alike for all (the generator's tokenizer on the decoded texts, without
special tokens). Loading and ONNX export are not timed.
"""

from __future__ import annotations

import gc
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from breaknli_fast.bench.types import OMIT
from breaknli_fast.errors import first_line
from breaknli_fast.limits import MAX_BATCH_PAIRS, MAX_MIN_ITERATIONS, MAX_MIN_SECONDS, MAX_NEW_TOKENS, MAX_WARMUP
from breaknli_fast.probes.breaknli.loop import MAX_K
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import PROJECT, f, of_kind, table
from breaknli_fast.suite.result import ResultFile

PIPELINE = "transformers pipeline (torch fp32)"
OPTIMUM = "optimum ORTModel (fp32)"


@dataclass
class BaselinesConfig:
    classifier: str = option("mini-nli", help="the classifier (a name or a folder)")
    generator: str = option("mini-t5", help="the generator (a name or a folder)")
    dataset: str = option("sample", help="the dataset")
    limit: int = option(64, min=1, help="examples whose (p, h) pairs are classified")
    gen_prompts: int = option(8, min=1, help="generation prompts")
    k: int = option(20, min=1, max=MAX_K, help="candidates per prompt")
    max_new_tokens: int = option(40, min=1, max=MAX_NEW_TOKENS, help="new tokens per candidate, at most")
    top_p: float = option(0.95, min=0.0, max=1.0, help="sampling's top-p")
    top_k: int = option(50, min=0, help="sampling's top-k")
    batch_size: int = option(32, min=1, max=MAX_BATCH_PAIRS, help="batch size of the pipeline / ORTModel baselines")
    engines: str = option("torch:fp32,ort:fp32,ort:int8",
                          help="breaknli-fast engines (ENGINE:PRECISION[:key=value...], as bench --engines)")
    no_baselines: bool = option(False, help="only the breaknli-fast engines")
    warmup: int = option(1, min=0, max=MAX_WARMUP, help="unmeasured runs")
    min_iterations: int = option(5, min=1, max=MAX_MIN_ITERATIONS, help="measured runs, at least")
    min_seconds: float = option(1.0, min=0.0, max=MAX_MIN_SECONDS, help="measured seconds, at least")
    seed: int = option(0, help="the seed")
    threads: Optional[int] = option(None, min=1, help="torch threads (and intra-op threads of the other engines)")


@dataclass
class BaselineRow:
    contender: str | None = None
    job: str | None = None
    load_s: float | None = None
    rss_after_load_mib: float | None = None
    peak_rss_load_mib: float | None = None
    iterations: int | None = None
    warmup: int | None = None
    total_s: float | None = None
    median_s: float | None = None
    mean_s: float | None = None
    min_s: float | None = None
    std_s: float | None = None
    items: int | None = None
    iteration_latency: dict[str, Any] | None = None
    pairs_per_s: float | None = field(default=None, metadata=OMIT)
    pairs_per_s_best: float | None = field(default=None, metadata=OMIT)
    new_tokens_first_iteration: int | None = field(default=None, metadata=OMIT)
    tokens_per_s: float | None = field(default=None, metadata=OMIT)
    tokens_per_s_best: float | None = field(default=None, metadata=OMIT)
    sequences_per_s: float | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BaselineSkip:
    contender: str | None = None
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class BaselinesPayload:
    args: dict[str, Any] | None = None
    models: dict[str, Any] | None = None
    models_changed_during_run: list[str] | None = None
    load_average_end: list[float] | None = None
    workload: dict[str, Any] | None = None
    peak_rss_all_contenders_mib: float | None = None
    results: list[BaselineRow] | None = None
    skipped: list[BaselineSkip] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Baselines(Measurement):
    name = "baselines"
    summary = "the transformers pipeline and optimum against breaknli-fast's engines on the same inputs"
    kind = "baselines"
    config_class = BaselinesConfig
    payload_class = BaselinesPayload
    legacy_scripts = ("bench_baselines.py",)

    def requirements(self, config: BaselinesConfig) -> tuple[list[str], list[str]]:
        required, optional = super().requirements(config)
        return required, optional + ([] if config.no_baselines else ["optimum"])

    def run(self, config: BaselinesConfig, recorder: Any) -> BaselinesPayload:
        import dataclasses

        import torch
        from transformers import AutoTokenizer

        from breaknli_fast.bench.measure import PeakMemory, Task, latency_stats, repeat_interleaved
        from breaknli_fast.bench.specs import parse_engine
        from breaknli_fast.bench.stages import workload_prompts
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines import registry
        from breaknli_fast.engines.base import Decoding
        from breaknli_fast.engines.model_info import model_fingerprint, resolve_model
        from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
        from breaknli_fast.suite.peers import load_peer_classifier, load_peer_generator

        if config.threads:
            torch.set_num_threads(config.threads)
        data = load_examples(config.dataset, limit=config.limit)
        pairs = [(ex.premise, ex.hypothesis) for ex in data.examples]
        dec = Decoding(top_p=config.top_p, top_k=config.top_k, max_new_tokens=config.max_new_tokens)
        loop = BreakNLIConfig(k=config.k, u=1, s=1, decoding=dec, seed=config.seed)  # K and the prompts matter here
        items = workload_prompts(data.examples, loop, config.gen_prompts)
        prompts, seeds = [x["prompt"] for x in items], [x["seed"] for x in items]
        clf_path, gen_path = resolve_model(config.classifier), resolve_model(config.generator)
        fingerprints = {m: model_fingerprint(m) for m in (config.classifier, config.generator)}
        gen_tok = AutoTokenizer.from_pretrained(gen_path)

        def n_tokens(texts: list[str]) -> int:
            return sum(len(x) for x in gen_tok(texts, add_special_tokens=False)["input_ids"]) if texts else 0

        contenders: list[dict[str, Any]] = []
        skipped: list[BaselineSkip] = []

        def add(name: str, load: Callable[[], tuple[Any, Any]]) -> None:
            mem = PeakMemory().start()
            t0 = time.perf_counter()
            try:
                clf, gen = load()
            except Exception as e:  # noqa: BLE001 - a contender that cannot load is reported, the others still run
                print(f"{name}: skipped: {first_line(e)}", file=sys.stderr)
                skipped.append(BaselineSkip(contender=name, reason=first_line(e)))
                return
            m = mem.read()

            def classify(c: Any = clf) -> Any:
                c.clear_cache()
                return c.classify(pairs)

            contenders.append({"name": name, "classify": classify,
                               "generate": lambda g=gen: [t for cs in g.generate(prompts, config.k, dec, seeds)
                                                          for t in cs],
                               "load_s": time.perf_counter() - t0, "rss_after_load_mib": m["rss_now_mib"],
                               "peak_rss_load_mib": m["peak_rss_mib"]})
            print(f"loaded {name} ({time.perf_counter() - t0:.1f} s)", flush=True)

        if not config.no_baselines:
            for name, peer in ((PIPELINE, "transformers-pipeline"), (OPTIMUM, "optimum")):
                add(name, lambda p=peer: (load_peer_classifier(p, clf_path, config.batch_size),
                                          load_peer_generator(p, gen_path, config.batch_size, config.seed)))
        for text in [x for x in config.engines.split(",") if x.strip()]:
            spec = parse_engine(text)
            opts = dict(spec.config.extra)
            if config.threads and spec.engine != "torch":
                opts.setdefault("threads", config.threads)
            add(f"{PROJECT}{spec.label}", lambda s=spec, o=opts: (
                registry.load_classifier(s.engine, s.classifier or config.classifier, precision=s.precision, **o),
                registry.load_generator(s.engine, s.generator or config.generator, precision=s.precision, **o)))

        results: list[BaselineRow] = []
        shared = PeakMemory().start()
        for job in ("classify", "generate"):
            tasks = [Task(c[job]) for c in contenders]
            repeat_interleaved(tasks, warmup=config.warmup, min_iterations=config.min_iterations,
                               min_seconds=config.min_seconds)
            for c, t in zip(contenders, tasks):
                if t.error is not None:
                    skipped.append(BaselineSkip(contender=c["name"], reason=f"{job} failed: {first_line(t.error)}"))
                    continue
                s = t.rep.summary()
                row = BaselineRow(contender=c["name"], job=job, load_s=c["load_s"],
                                  rss_after_load_mib=c["rss_after_load_mib"], peak_rss_load_mib=c["peak_rss_load_mib"],
                                  **s, items=len(pairs) if job == "classify" else len(prompts),
                                  iteration_latency=latency_stats(t.rep.seconds))
                if job == "classify":
                    row.pairs_per_s, row.pairs_per_s_best = len(pairs) / s["median_s"], len(pairs) / s["min_s"]
                else:
                    n = n_tokens(t.rep.result)
                    row = dataclasses.replace(row, new_tokens_first_iteration=n, tokens_per_s=n / s["median_s"],
                                              tokens_per_s_best=n / s["min_s"],
                                              sequences_per_s=len(prompts) * config.k / s["median_s"])
                results.append(row)
        run_mem = shared.read()
        contenders.clear()
        gc.collect()
        changed = [m for m, fp in fingerprints.items() if model_fingerprint(m) != fp]
        if changed:
            print(f"WARNING: model files changed while it ran ({', '.join(changed)}): the figures are not comparable",
                  file=sys.stderr)
        return BaselinesPayload(
            args={k: str(v) for k, v in dataclasses.asdict(config).items()}, models=fingerprints,
            models_changed_during_run=changed, load_average_end=list(os.getloadavg()),
            workload={"pairs": len(pairs), "prompts": len(prompts), "k": config.k,
                      "max_new_tokens": config.max_new_tokens},
            peak_rss_all_contenders_mib=run_mem["peak_rss_mib"], results=results, skipped=skipped)


def baselines(doc: ResultFile) -> str:
    p: BaselinesPayload = doc.payload
    res = p.results or []
    ref = {r.job: r for r in res if str(r.contender if r.contender is not None else "").startswith(
        "transformers pipeline")}
    rows = []
    for r in res:
        thr = f"{f(r.pairs_per_s, '.1f')} pairs/s" if r.job == "classify" else f"{f(r.tokens_per_s, '.1f')} tokens/s"
        b = ref.get(r.job)
        rel = f"{b.median_s / r.median_s:.2f}× / {b.min_s / r.min_s:.2f}×" if b else "–"
        rows.append([r.contender, r.job, r.iterations, f(r.median_s, ".3f"), f(r.min_s, ".3f"), thr, rel])
    for s in p.skipped or []:
        rows.append([s.contender, f"skipped: {s.reason}", "", "", "", "", ""])
    w = p.workload or {}
    out = [f"Workload: {w.get('pairs')} (p, h) pairs; {w.get('prompts')} prompts × K={w.get('k')} sampled candidates, "
           f"max_new_tokens {w.get('max_new_tokens')}. Every contender is loaded first, then each job is timed in "
           "rounds over all contenders; median and best iteration. The transformers pipeline samples all prompts in one "
           "batch under one global seed; breaknli-fast samples each prompt under its own seed.", "",
           table(["contender", "job", "iterations", "median s", "best s", "throughput (median)",
                  "vs transformers pipeline (median / best)"], rows)]
    if p.models_changed_during_run:
        out.insert(0, f"**Model files changed while the script ran ({', '.join(p.models_changed_during_run)}): "
                      "the figures are not comparable.**\n")
    return "\n".join(out)


def baselines_memory(doc: ResultFile) -> str:
    p: BaselinesPayload = doc.payload
    seen, rows = set(), []
    for r in p.results or []:
        if r.contender in seen:
            continue
        seen.add(r.contender)
        rows.append([r.contender, f(r.load_s, ".1f"), f(r.peak_rss_load_mib, ".0f"), f(r.rss_after_load_mib, ".0f")])
    return "\n".join(["The contenders of section 5 are loaded one after another into one process, so each RSS "
                      "includes the contenders loaded before it; peak RSS of the process while timing them all: "
                      f"{f(p.peak_rss_all_contenders_mib, '.0f')} MiB.", "",
                      table(["contender", "load s", "peak RSS while loading MiB", "RSS after loading MiB"], rows)])


Baselines.sections = (
    Section("3/baselines", "What a user would otherwise run", "the baseline comparison", of_kind("baselines"), 40,
            render=baselines_memory),
    Section("5/baselines", "Classification and generation", "the baseline comparison", of_kind("baselines"), 10,
            render=baselines),
)
