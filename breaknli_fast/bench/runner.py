"""``run_bench``: a probe on every engine, on identical inputs, in one process (engines -> probe -> report).

Per engine, in order (the torch:fp32 reference first):

1. **load** the models the probe needs the study's way (:func:`breaknli_fast.study.loading.load_models` with the
   engine's :class:`~breaknli_fast.study.loading.EngineConfig`); an engine that cannot load is *skipped* with
   its one-line reason (a ``--strict`` bench then fails); the reference must load;
2. **end to end**: the probe through the study runner (:func:`breaknli_fast.study.run_study`, in memory) on the
   whole dataset, after a warm-up on its first examples, ``repeats`` times: speed, and the records every parity
   figure is computed from;
3. BreakNLI only: **stages on a fixed workload** and fixed-input parity (:mod:`breaknli_fast.bench.stages`);
4. **batch invariance**: the labels of the data's (p, h) pairs (and BreakNLI's workload pairs) in the engine's
   batches against one pair at a time;
5. **parity** with the reference (:mod:`breaknli_fast.bench.agreement`): per-record prediction agreement, each
   headline metric per engine and its paired difference with interval and verdict.
"""

from __future__ import annotations

import gc
import json
import os
import re
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Callable

import numpy as np

import breaknli_fast.bench.parity as par
import breaknli_fast.bench.agreement as agreement
import breaknli_fast.bench.roofline as roofline
import breaknli_fast.bench.stages as stages
from breaknli_fast.bench.measure import PeakMemory, latency_stats, synchronize
from breaknli_fast.bench.recommend import recommendation
from breaknli_fast.bench.result import BenchError, BenchResult
from breaknli_fast.bench.specs import ROLE_FIELD, BenchEngine, parse_engines, with_reference
from breaknli_fast.bench.state import Context, EngineRun, Reference, Workload, fail
from breaknli_fast.bench.types import (BenchReport, Checks, DataSummary, EndToEnd, EngineResult, Funnel, Memory,
                                      ModelsSummary, Parity, RandomModel, RunFigures, Seeds, Speed, SpeedSummary,
                                      Speedup, WorkloadSummary, from_json)
from breaknli_fast.data.loaders import SAMPLE_NAME, LoadedData
from breaknli_fast.data.slicing import describe as describe_slice, load_slice, show_counts
from breaknli_fast.study.loading import EngineConfig, load_models
from breaknli_fast.engines.generation import default_gen_batch
from breaknli_fast.envinfo import NOT_VERIFIED
from breaknli_fast.engines.model_info import model_fingerprint
from breaknli_fast.errors import first_line
from breaknli_fast.probes import get_probe, probe_class
from breaknli_fast.probes.base import Probe
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, funnel
from breaknli_fast.probes.breaknli.metrics import mode_label_rates
from breaknli_fast.progress import ProgressHook
from breaknli_fast.prompts import NLI_PROMPTS
from breaknli_fast.study import run_study
from breaknli_fast.study.breakdown import column_groups, default_columns, parse_by

WARMUP_EXAMPLES = 4  # examples of the end-to-end warm-up run
DEFAULT_MLM = "mini-mlm"


@dataclass
class BenchConfig:
    engines: list[BenchEngine] | str = "torch:fp32"
    probe: str | Probe = "breaknli"  # a registered probe's name, or a probe instance
    probe_config: Any = None  # the probe's own config object (BreakNLIConfig, PermutationConfig, ...); None: defaults
    generator: str = "mini-t5"
    classifier: str = "mini-nli"
    mlm: str | None = None  # masked LMs of a probe that needs them ("a,b"); default mini-mlm
    dataset: str = SAMPLE_NAME
    by: str | list[str] | None = None  # columns to break the paired differences down by (default: the dataset's own)
    split: str | None = None
    limit: int | None = None
    sample: int | None = None  # N examples drawn by gold label instead of the first N (data.slicing)
    sample_seed: int | None = None  # the draw's seed (default: the probe's)
    engine: EngineConfig = field(default_factory=EngineConfig)  # bench-wide settings each --engines entry starts from
    component_split: bool = True  # quantised engines also with one role at a time at the reduced precision
    warmup: int = 1
    min_iterations: int = 3
    min_seconds: float = 1.0
    repeats: int = 1  # end-to-end repeats
    # prompts of the generate-stage workload (BreakNLI); None: the generator's default prompts per batch on the
    # bench's device (default_gen_batch: 8 on the CPU, 64 on CUDA), so a GPU's stage runs the loop's GPU batches
    gen_prompts: int | None = None
    greedy_prompts: int = 16  # prompts of the greedy token-agreement check (BreakNLI)
    invariance_pairs: int = 1000  # pairs of the batch-invariance check
    tolerance: float = 1.0  # percentage points
    min_agreement: float = 98.0  # percent
    require_equivalence: bool = False  # fail on inconclusive cells too, not only on different ones
    random_weights: dict[str, str] = field(default_factory=dict)  # role -> built-in shape
    fixed_length: bool = False  # min_new_tokens = max_new_tokens (forced on with random weights)
    cache_dir: str | None = None
    interleave: bool = False  # load every engine, then time them in rounds (A B A B ...)
    # each stage against the machine's ceilings (bench.roofline): cached, fresh, quick or off
    ceilings: str = field(default_factory=lambda: roofline.default_ceilings_mode())
    command: str | None = None

    @property
    def loop(self) -> BreakNLIConfig:
        """BreakNLI's config (its defaults when the probe is another one or none was given)."""
        return self.probe_config if isinstance(self.probe_config, BreakNLIConfig) else BreakNLIConfig()

    def make_probe(self) -> Probe:
        return self.probe if isinstance(self.probe, Probe) else get_probe(self.probe, self.probe_config)

    def specs(self) -> list[BenchEngine]:
        roles = self.probe.roles if isinstance(self.probe, Probe) else probe_class(self.probe).roles
        if isinstance(self.engines, str):
            return parse_engines(self.engines, self.engine, split=self.component_split, roles=roles)
        return with_reference(list(self.engines), self.engine)

    def to_dict(self) -> dict[str, Any]:
        pc = self.probe_config
        fields = {k: getattr(self, k) for k in self.__dataclass_fields__ if k not in ("engines", "probe", "probe_config")}
        return {k: asdict(v) if hasattr(v, "__dataclass_fields__") else v for k, v in fields.items()} | {
            "probe": self.probe.name if isinstance(self.probe, Probe) else self.probe,
            "engines": [s.to_dict() for s in self.specs()],
            "probe_config": pc.to_dict() if hasattr(pc, "to_dict") else (asdict(pc) if pc is not None else None)}


class PrefixHook(ProgressHook):
    """Forward the study's progress to another hook, with the engine's label before each stage name."""

    def __init__(self, inner: ProgressHook, prefix: str):
        self.inner, self.prefix = inner, prefix

    def start(self, stage: str, total: int, completed: int = 0) -> None:
        self.inner.start(f"{self.prefix} {stage}", total, completed)

    def advance(self, stage: str, n: int = 1) -> None:
        self.inner.advance(f"{self.prefix} {stage}", n)

    def finish(self, stage: str) -> None:
        self.inner.finish(f"{self.prefix} {stage}")


def _loadavg() -> list[float] | None:
    """1, 5 and 15 minute load averages: other work on a shared machine skews timings."""
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except (AttributeError, OSError):
        return None


def _fingerprint(model: str) -> dict[str, Any] | None:
    try:
        return model_fingerprint(model)
    except Exception as e:  # noqa: BLE001 - a fingerprint is informative only
        return {"id": model, "error": first_line(e)}


# -- end to end ---------------------------------------------------------------------------------------------

def _e2e_warmup(eng: EngineRun, ctx: Context) -> int:
    data = ctx.data
    warm = LoadedData(data.examples[: min(len(data.examples), WARMUP_EXAMPLES)], data.skips, data.source)
    for _ in range(max(0, ctx.cfg.warmup)):
        eng.clear_caches()
        run_study(ctx.probe, data=warm, models=eng.models)
    return len(warm.examples)


def _e2e_once(eng: EngineRun, ctx: Context) -> None:
    clf, gen = eng.clf, eng.gen
    eng.clear_caches()
    clf.reset_stats()
    if gen is not None:
        gen.reset_stats()
    hook = PrefixHook(ctx.hook, eng.label) if ctx.hook is not None and eng.first is None else None
    res = run_study(ctx.probe, data=ctx.data, dataset=ctx.cfg.dataset, models=eng.models, hook=hook)
    records, times = res.records, res.times
    synchronize(ctx.cfg.engine.device)
    eng.walls.append(times.wall)
    cls_s = sum(times.seconds.get(k, 0.0) for k in times.pairs)
    pairs = sum(times.pairs.values())
    cst, gst = clf.stats, gen.stats if gen is not None else None
    gen_s = times.seconds.get("generate")
    eng.runs.append(RunFigures(
        examples=times.examples, stage_seconds=dict(times.seconds), stage_pairs=dict(times.pairs),
        classifier_pairs=pairs, classifier_pairs_computed=cst.pairs_computed if cst is not None else None,
        classifier_pairs_per_s=pairs / cls_s if cls_s > 0 else None,
        generated_sequences=times.sequences, generated_tokens=times.new_tokens,
        generated_tokens_per_s=times.new_tokens / gen_s if gen_s else None,
        classifier_batch_latency=latency_stats(cst.batch_seconds if cst is not None else []),
        generator_call_latency=latency_stats(gst.call_seconds if gst is not None else [])))
    if eng.first is not None:
        same = [json.dumps(x, sort_keys=True) for x in records] == [json.dumps(x, sort_keys=True) for x in eng.records]
        eng.identical = eng.identical and same
        return
    eng.records = records
    eng.first = eng.runs[-1]


def _e2e_summary(eng: EngineRun, ctx: Context, warm_n: int) -> EndToEnd:
    assert eng.first is not None
    med = float(np.median(eng.walls))
    # the stage figures of the run whose wall is the median (the lower middle of an even count): with repeats, a
    # one-time cost of the first run (a CUDA graph captured for a new shape) is not charged to the stages
    mid = sorted(range(len(eng.walls)), key=lambda i: (eng.walls[i], i))[(len(eng.walls) - 1) // 2]
    out = EndToEnd(repeats=len(eng.walls), warmup_runs=max(0, ctx.cfg.warmup), warmup_examples=warm_n,
                   wall_s=eng.walls, median_wall_s=med, examples_per_s=eng.first.examples / med if med > 0 else None,
                   run=eng.runs[mid], stage_figures_of_run=mid + 1,
                   repeats_identical=eng.identical if len(eng.walls) > 1 else None,
                   headline=agreement.headline_values(ctx.probe, eng.records))
    if ctx.probe.name == "breaknli":
        loop = ctx.probe.cfg
        f = funnel(eng.records, ctx.data, loop.modes)
        out.accuracy_ph, out.funnel = f.get("accuracy_ph"), {m: from_json(Funnel, f[m]) for m in loop.modes if m in f}
        out.metrics = mode_label_rates(eng.records)
    return out


def _run_phases(engs: list[EngineRun], ctx: Context) -> None:
    """End to end, then (BreakNLI) each stage of the fixed workload, then batch invariance and parity, for the
    given engines (all of them in rounds when several are given)."""
    alive: list[EngineRun] = []
    warm_n = 0
    for eng in engs:
        try:
            warm_n = _e2e_warmup(eng, ctx)
            alive.append(eng)
        except Exception as e:  # noqa: BLE001
            fail(eng, ctx, "end-to-end warm-up", e)
    for r in range(max(1, ctx.cfg.repeats)):
        still = []
        for eng in alive:
            ctx.log(f"[{eng.label}] end to end" + (f" (run {r + 1} of {ctx.cfg.repeats})" if ctx.cfg.repeats > 1 else ""))
            try:
                _e2e_once(eng, ctx)
                still.append(eng)
            except Exception as e:  # noqa: BLE001
                fail(eng, ctx, "end to end", e)
        alive = still
    for eng in alive:
        eng.result.speed = Speed(end_to_end=_e2e_summary(eng, ctx, warm_n))
        if eng.is_ref:
            ctx.ref.records = eng.records
    breaknli = ctx.probe.name == "breaknli"
    if breaknli:
        alive = stages.run_stages(alive, ctx, ctx.probe.cfg)
    pairs = agreement.invariance_pairs(ctx.workload.classify_ph, ctx.workload.relation + ctx.workload.evaluate,
                                       ctx.cfg.invariance_pairs)
    for eng in alive:
        ctx.log(f"[{eng.label}] batch invariance and parity")
        try:
            eng.result.batch_invariance = agreement.batch_invariance(eng.clf, pairs)
            p = stages.fixed_parity(eng, ctx, ctx.probe.cfg) if breaknli else Parity(meaningful=ctx.meaningful)
            p.headline = agreement.probe_parity(ctx.probe, ctx.ref.records, eng.records, ctx.cfg.tolerance)
            if ctx.by and not eng.is_ref:
                p.headline.by = agreement.parity_by(ctx.probe, ctx.ref.records, eng.records, ctx.data, ctx.by,
                                                    ctx.cfg.tolerance)
            par.add_verdicts(p, ctx.cfg.tolerance)
            eng.result.parity = p
        except Exception as e:  # noqa: BLE001
            fail(eng, ctx, "parity", e)
            continue
        sp = eng.result.speed
        assert sp is not None
        sp.stages = eng.stages
        # the fixed workload's batches (BreakNLI), else the end-to-end run's
        sp.classifier_batch_latency = (latency_stats(eng.batch_all) if eng.batch_all
                                       else sp.end_to_end.run.classifier_batch_latency)


def _engine_info(models: Any) -> dict[str, Any]:
    """What each loaded engine reports about itself (``EngineInfo``), by role."""
    return {"classifier": models.classifier.info.to_dict(),
            **({"generator": models.generator.info.to_dict()} if models.generator is not None else {}),
            **({"mlm": {k: m.info.to_dict() for k, m in models.mlm.items()}} if models.mlm else {})}


def _finish_engine(eng: EngineRun, run_mem: Memory) -> None:
    if not eng.result.ran:
        return
    # the engines' details as they stand after the runs (counters kept while running: the cudagraph engine's graphs)
    eng.result.info = _engine_info(eng.models)
    lm = eng.load_mem
    eng.result.memory = replace(run_mem, rss_before_load_mib=lm.get("rss_before_load_mib"),
                                rss_after_load_mib=lm.get("rss_now_mib"), peak_rss_load_mib=lm.get("peak_rss_mib"),
                                gpu_peak_allocated_load_mib=lm.get("gpu_peak_allocated_mib"))
    eng.result.load_average_end = _loadavg()


def _unload(engs: list[EngineRun], device: str) -> None:
    for eng in engs:
        eng.models = None  # type: ignore[assignment]
    gc.collect()
    if device.startswith("cuda"):
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:  # pragma: no cover
            pass


def _load(i: int, spec: BenchEngine, cfg: BenchConfig, models: dict[str, Any], roles: tuple[str, ...],
          engines: list[EngineResult], log: Callable[[str], None]) -> EngineRun | None:
    is_ref = i == 0
    clf_name, gen_name = spec.classifier or models["classifier"], spec.generator or models["generator"]
    res = EngineResult(label=spec.label, engine=spec.engine, precision=spec.precision,
                       **{f"{r}_precision": spec.role_precision(r) for r in roles if r != "mlm" or models["mlm"]},
                       component_of=spec.component_of, device=spec.config.device, reference=is_ref,
                       spec=spec.to_dict(),
                       models={"classifier": clf_name, "generator": gen_name if "generator" in roles else None,
                               **({"mlm": models["mlm"]} if models["mlm"] else {})})
    engines.append(res)
    log(f"[{spec.label}] loading")
    res.load_average_start = _loadavg()
    mem = PeakMemory(spec.config.device).start()
    t0 = time.perf_counter()
    try:
        loaded = load_models(spec.config, {"classifier": clf_name, "generator": gen_name if "generator" in roles else None,
                                           "mlm": models["mlm"] or None})
    except Exception as e:  # noqa: BLE001 - any engine may fail to load; report and go on
        gc.collect()
        if is_ref:
            raise BenchError(f"the reference {spec.label} cannot load: {first_line(e)}") from None
        res.status, res.reason = "skipped", first_line(e)
        log(f"[{spec.label}] skipped: {res.reason}")
        return None
    res.load_s = time.perf_counter() - t0
    res.info = _engine_info(loaded)
    eng = EngineRun(res, spec, loaded, is_ref)
    eng.load_mem = mem.read()
    return eng


def random_weight_models(cfg: BenchConfig, data: LoadedData, loop: BreakNLIConfig, models: dict[str, Any],
                         log: Callable[[str], None]) -> dict[str, RandomModel]:
    from breaknli_fast.bench.shapes import build_random_model

    texts = [t for ex in data.examples for t in (ex.premise, ex.hypothesis)]
    texts += [p.format(h=ex.hypothesis) for ex in data.examples[:64] for p in loop.prompts.values()]
    texts += [p.format(premise=ex.premise, hypothesis=ex.hypothesis) for ex in data.examples[:16] for p in NLI_PROMPTS.values()]
    info = {}
    for role, shape in sorted(cfg.random_weights.items()):
        path = build_random_model(shape, cfg.cache_dir, texts, log=log)
        meta = json.loads((path / "random_weights.json").read_text())
        info[role] = RandomModel(shape, str(path), meta["parameters"], meta["tokenizer_size"])
        models[role] = str(path)
    return info


def prepare_models(cfg: BenchConfig, probe: Probe, data: LoadedData, models: dict[str, Any], notes: list[str],
                   log: Callable[[str], None]) -> dict[str, RandomModel]:
    """BreakNLI at a fixed generation length (with ``fixed_length`` or random weights), and the random-weight
    models of ``cfg.random_weights`` built into ``models``; what was done goes to ``notes``. Returns the random
    models' description (empty without)."""
    if probe.name == "breaknli" and (cfg.random_weights or cfg.fixed_length):
        loop = probe.cfg
        probe.cfg = replace(loop, decoding=replace(loop.decoding, min_new_tokens=loop.decoding.max_new_tokens))
        notes.append(f"fixed generation length: min_new_tokens = max_new_tokens = {loop.decoding.max_new_tokens}, "
                     "so every engine generates the same number of tokens")
    if not cfg.random_weights:
        return {}
    info = random_weight_models(cfg, data, cfg.loop, models, log)
    notes.append("random weights (" + ", ".join(f"{r}: {s}" for r, s in sorted(cfg.random_weights.items()))
                 + "): speed and memory of the real architecture sizes only; parity figures are NOT meaningful "
                   "(random logits lie close together, so any numeric change flips labels), and --strict ignores them")
    return info


def _checks(e: EngineResult, cfg: BenchConfig, meaningful: bool) -> Checks:
    if e.ran:
        fails = par.check(e.parity or Parity(), cfg.tolerance, cfg.min_agreement, cfg.require_equivalence) if meaningful else []
        return Checks(applied=meaningful, failures=fails, passed=not fails)
    # an engine that did not run has not been shown to match: a strict bench fails
    return Checks(applied=True, failures=[f"engine {e.status}: {e.reason}"], passed=False)


def _unverified(engine: str, device_kind: str, precision: str | None = None, role: str | None = None) -> bool:
    """Whether ``engine``'s declaration says it is not verified on ``device_kind`` (all of it, at ``precision``, or
    for ``role`` at it)."""
    from breaknli_fast.engines import registry

    try:
        decl = registry.backend(engine)
    except registry.EngineUnavailable:
        return False
    return decl is not None and decl.is_unverified(device_kind, precision, role)


@dataclass
class BenchPlan:
    """What a bench runs, settled before any engine loads: the probe, the engines, the data, the models, the fixed
    workload, the notes so far."""

    probe: Probe
    specs: list[BenchEngine]
    environment: dict[str, Any]
    data: LoadedData
    data_slice: dict[str, Any]
    by: list[str]
    roles: tuple[str, ...]
    models: dict[str, Any]  # role -> model name (mlm: a list)
    notes: list[str]
    random_info: dict[str, RandomModel]
    used: list[str]  # every model any engine loads
    fingerprints: dict[str, Any]
    workload: Workload
    changed: list[str] = field(default_factory=list)  # models whose files changed while the bench ran

    @property
    def meaningful(self) -> bool:
        return not self.random_info


def plan_bench(cfg: BenchConfig, log: Callable[[str], None]) -> BenchPlan:
    """The bench's plan: a bad probe setting, a missing column or dataset fails here, before any model loads."""
    from breaknli_fast.engines import registry
    from breaknli_fast.envinfo import environment

    probe = cfg.make_probe()  # a bad probe setting or a missing optional dependency fails before any model loads
    specs = cfg.specs()
    if cfg.engine.threads:
        import torch

        torch.set_num_threads(int(cfg.engine.threads))
    env = environment(registry.declared_packages())
    data = load_slice(cfg.dataset, split=cfg.split, limit=cfg.limit, seed=probe.seed, sample=cfg.sample,
                      sample_seed=cfg.sample_seed)
    if not data.examples:
        raise BenchError(f"no valid example in {cfg.dataset!r}")
    data_slice = describe_slice(data.slice, data.examples)
    log(f"data slice: {data_slice['words']}, gold labels {show_counts(data_slice['labels'])}")
    by = parse_by(cfg.by) or default_columns(data)
    for column in by:
        column_groups(data, column)  # a missing column is a one-line error before any model loads
    roles = tuple(probe.roles)
    models: dict[str, Any] = {"classifier": cfg.classifier, "generator": cfg.generator,
                              "mlm": ([m.strip() for m in (cfg.mlm or DEFAULT_MLM).split(",") if m.strip()]
                                      if "mlm" in roles else [])}
    notes: list[str] = [f"data slice: {w}" for w in data_slice["warnings"]]
    named: dict[str, list[str]] = {}
    for sp in specs:  # an entry given twice is measured twice (run-to-run spread), and said so
        named.setdefault(re.sub(r"#\d+$", "", sp.label), []).append(sp.label)
    for base, labels in named.items():
        if len(labels) > 1:
            notes.append(f"{base} is named {len(labels)} times in --engines: each is measured, as "
                         f"{', '.join(labels)} (their difference is the run-to-run spread)")
            log(notes[-1])
    if cfg.engine.device.startswith("cuda"):
        unverified = sorted({sp.label for sp in specs if _unverified(sp.engine, "cuda")})
        if unverified:
            notes.append(f"{', '.join(unverified)} on {cfg.engine.device}: {NOT_VERIFIED} by this project (ONNX "
                         "Runtime's CUDA / TensorRT providers and TensorRT cannot be installed on its GPU machines); "
                         "each session records the providers it ran on")
        precise = sorted({sp.label for sp in specs if sp.label not in unverified
                          and any(_unverified(sp.engine, "cuda", sp.role_precision(r), r) for r in ROLE_FIELD
                                  if r in roles)})
        if precise:
            notes.append(f"{', '.join(precise)} on {cfg.engine.device}: {NOT_VERIFIED} by this project at that "
                         "precision in that role (its kernels have not run there on a lent GPU yet)")
    random_info = prepare_models(cfg, probe, data, models, notes, log)
    used = sorted({models["classifier"], *([models["generator"]] if "generator" in roles else []), *models["mlm"]}
                  | {m for sp in specs for m in (sp.classifier, sp.generator) if m})
    workload = Workload(classify_ph=[(ex.premise, ex.hypothesis) for ex in data.examples])
    if probe.name == "breaknli":
        n_gen = cfg.gen_prompts if cfg.gen_prompts is not None else default_gen_batch(cfg.engine.device)
        if cfg.gen_prompts is None and cfg.engine.device != "cpu":
            notes.append(f"the generate stage's workload: {n_gen} prompts, the generator's default prompts per batch "
                         f"on {cfg.engine.device} (--gen-batch; --gen-prompts sets another)")
        workload.generate = stages.workload_prompts(data.examples, probe.cfg, n_gen)
    return BenchPlan(probe, specs, env, data, data_slice, by, roles, models, notes, random_info, used,
                     {m: _fingerprint(m) for m in used}, workload)


def measure_engines(plan: BenchPlan, cfg: BenchConfig, ctx: Context) -> list[EngineResult]:
    """Load and measure every engine, one after another (or all loaded, in rounds, with ``interleave``)."""
    engines: list[EngineResult] = []
    if cfg.interleave:
        loaded = [e for e in (_load(i, sp, cfg, plan.models, plan.roles, engines, ctx.log)
                              for i, sp in enumerate(plan.specs)) if e is not None]
        shared = PeakMemory(cfg.engine.device).start()
        _run_phases(loaded, ctx)
        run_mem = replace(from_json(Memory, shared.read()), shared=True,
                          note="engines ran interleaved: the run's peak RSS is that of all loaded engines together")
        for eng in loaded:
            _finish_engine(eng, run_mem)
        _unload(loaded, cfg.engine.device)
        return engines
    for i, spec in enumerate(plan.specs):
        eng = _load(i, spec, cfg, plan.models, plan.roles, engines, ctx.log)
        if eng is None:
            continue
        mem = PeakMemory(cfg.engine.device).start()  # the run's own peak, without export / loading transients
        _run_phases([eng], ctx)
        _finish_engine(eng, from_json(Memory, mem.read()))
        _unload([eng], cfg.engine.device)
    plan.notes.append("engines ran one after another (use --interleave on a busy machine: load drifts then hit all "
                      "engines alike)")
    return engines


def run_bench(cfg: BenchConfig, hook: ProgressHook | None = None, log: Callable[[str], None] | None = None) -> BenchResult:
    """Measure every engine of ``cfg`` on identical inputs; see the module docstring. The steps: :func:`plan_bench`,
    :func:`measure_engines`, the speed-ups and checks (:func:`judge`), :func:`bench_report`."""
    log = log or (lambda msg: None)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    plan = plan_bench(cfg, log)
    ctx = Context(cfg, plan.probe, plan.data, plan.workload, Reference(), hook, log, plan.meaningful, by=plan.by)
    engines = measure_engines(plan, cfg, ctx)
    ceilings = stage_rooflines(cfg, engines, log)
    failures = judge(plan, cfg, engines)
    report = bench_report(plan, cfg, ctx, engines, failures, started)
    report.ceilings = ceilings
    report.recommendation = recommendation(report)
    return BenchResult(report)


def stage_rooflines(cfg: BenchConfig, engines: list[EngineResult], log: Callable[[str], None]) -> Any:
    """Each timed stage against the machine's ceilings (:func:`breaknli_fast.bench.roofline.add_rooflines`), after
    every engine has run: the ceilings' micro-benchmarks time nothing of the engines'."""
    from breaknli_fast.engines.cpu_features import physical_cores

    threads = int(cfg.engine.threads) if cfg.engine.threads else physical_cores()
    return roofline.add_rooflines(engines, cfg.engine.device, threads, cfg.ceilings, log)


def judge(plan: BenchPlan, cfg: BenchConfig, engines: list[EngineResult]) -> list[str]:
    """Speed-ups over the reference and every engine's checks; the bench's own failures (model files that changed
    while it ran)."""
    _speedups(engines)
    for e in engines:
        e.checks = _checks(e, cfg, plan.meaningful)
    failures: list[str] = []
    changed = [m for m in plan.used if _fingerprint(m) != plan.fingerprints[m]]
    plan.changed = changed
    if changed:
        failures.append("model files changed while the bench ran (" + ", ".join(changed) + "): the engines did not all "
                        "measure the same model; run the bench again once the files stay put")
        plan.notes.append(failures[-1])
    return failures


def bench_report(plan: BenchPlan, cfg: BenchConfig, ctx: Context, engines: list[EngineResult], failures: list[str],
                 started: str) -> BenchReport:
    probe, data, models, workload = plan.probe, plan.data, plan.models, plan.workload
    triples = ctx.ref.triples
    everything = set(workload.classify_ph) | set(workload.relation) | set(workload.evaluate)
    return BenchReport(
        command=cfg.command, started=started, finished=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        environment=plan.environment, probe=probe.name, probe_identity=probe.identity(),
        headline_metrics=[asdict(m) for m in probe.headline_metrics()],
        config={**cfg.to_dict(), "probe_config": probe.cfg.to_dict() if hasattr(probe, "cfg") else None},
        seeds=Seeds(probe.seed, 0 if cfg.random_weights else None, "sha256(seed, group, example id)"),
        data=DataSummary(cfg.dataset, cfg.split, cfg.limit, data.source, plan.data_slice, len(data.examples),
                         data.skips.to_dict(), plan.by),
        models=ModelsSummary(models["generator"] if "generator" in plan.roles else None, models["classifier"],
                             models["mlm"] or None, plan.random_info or None, plan.fingerprints, plan.changed),
        workload=WorkloadSummary(
            len(workload.classify_ph), len(workload.generate), len(workload.relation), len(workload.evaluate),
            {m: sum(t.mode == m for t in triples) for m in probe.cfg.modes} if probe.name == "breaknli" else {},
            len(ctx.ref.greedy), min(cfg.invariance_pairs, len(everything)),
            "identical inputs for every engine: the probe on the same data and seed; for BreakNLI also (p, h) of every "
            "example, K candidates for the first gen_prompts selected examples (half per mode), and the (h, h') / "
            "(h', h) and (p, h') pairs the loop would classify for the reference's candidates if every filter passed"),
        reference=engines[0].label, parity_meaningful=plan.meaningful, tolerance_pp=cfg.tolerance,
        min_agreement_pct=cfg.min_agreement, notes=plan.notes, engines=engines, failures=failures,
        passed=not failures and all(e.passed_checks for e in engines))


def _speedups(engines: list[EngineResult]) -> None:
    ref = engines[0]
    if not ref.ran or ref.speed is None:
        return
    for e in engines:
        if not e.ran or e.speed is None:
            continue
        e2e_ref, e2e = ref.speed.end_to_end, e.speed.end_to_end
        sp = stages.speedups(ref, e) if ref.speed.stages else Speedup()
        sp.end_to_end = e2e_ref.median_wall_s / e2e.median_wall_s if e2e.median_wall_s > 0 else None
        e.speed.speedup = sp
        # the fixed workload's figures where its stages ran (BreakNLI), else the end-to-end run's
        summary = stages.stage_summary(e) if e.speed.stages else SpeedSummary(
            classifier_pairs_per_s=e2e.run.classifier_pairs_per_s, generated_tokens_per_s=e2e.run.generated_tokens_per_s,
            classifier_batch_p95_ms=(e2e.run.classifier_batch_latency or {}).get("p95_ms"),
            generator_call_p95_ms=(e2e.run.generator_call_latency or {}).get("p95_ms"))
        summary.examples_per_s = e2e.examples_per_s
        e.speed.summary = summary
