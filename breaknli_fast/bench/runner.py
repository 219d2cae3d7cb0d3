"""``run_bench``: every engine on identical inputs, in one process (backend -> scenario -> report).

Per engine, in order (the torch:fp32 reference first):

1. **load** the classifier and generator through the engine registry (an engine that cannot load
   is *skipped* with its one-line reason; the reference must load);
2. **end to end**: the real loop (:func:`~breaknli_fast.probes.breaknli.loop.run_loop`) on the whole
   dataset, after a warm-up on its first examples, ``repeats`` times; its records give the
   end-to-end breakage and, for the reference, the fixed (p, h, h') triples;
3. **stages on a fixed workload** (identical inputs for every engine, independent of the engine's
   own predictions): classify (p, h) of every example; generate K candidates for the first
   ``gen_prompts`` selected examples; the relation filter's (h, h') / (h', h) pairs and the
   evaluation's (p, h') pairs built from the *reference's* candidates as if every filter passed.
   Each stage runs ``warmup`` times unmeasured, then at least ``min_iterations`` times and at least
   ``min_seconds``; the classifier's pair cache is cleared before every iteration;
4. **parity** with the reference: logits of the workload pairs, the fixed triples re-classified,
   greedy decoding of the same prompts.
"""

from __future__ import annotations

import gc
import json
import math
import os
import time
from dataclasses import asdict, dataclass, field, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

import breaknli_fast.bench.parity as par
from breaknli_fast.bench.measure import PeakMemory, Task, latency_stats, repeat_interleaved, synchronize
from breaknli_fast.bench.specs import EngineSpec, parse_engines, with_reference
from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.loaders import SAMPLE_NAME, Example, LoadedData, load_examples
from breaknli_fast.engines import registry
from breaknli_fast.engines.base import ClassifierBase, Decoding, GeneratorBase, derive_seed
from breaknli_fast.engines.roles import Models
from breaknli_fast.engines.model_info import model_fingerprint
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, dedup_candidates, funnel
from breaknli_fast.probes.breaknli.metrics import mode_label_rates
from breaknli_fast.stats import BOOT_SEED, N_BOOT
from breaknli_fast.probes.breaknli.verdicts import SELECTED
from breaknli_fast.probes.breaknli import BreakNLIProbe
from breaknli_fast.prompts import NLI_PROMPTS
from breaknli_fast.study import run_study
from breaknli_fast.progress import ProgressHook
from breaknli_fast.errors import UserError, first_line

SCHEMA = "breaknli-fast-bench/1"
STAGES = ("classify_ph", "generate", "relation", "evaluate")
CLASSIFY_STAGES = ("classify_ph", "relation", "evaluate")
WARMUP_EXAMPLES = 4  # examples of the end-to-end warm-up run


class BenchError(UserError):
    """A bench that cannot run (the reference does not load, no data, ...): one line for the CLI."""



@dataclass
class BenchConfig:
    engines: list[EngineSpec] | str = "torch:fp32"
    generator: str = "mini-t5"
    classifier: str = "mini-nli"
    dataset: str = SAMPLE_NAME
    split: str | None = None
    limit: int | None = None
    loop: BreakNLIConfig = field(default_factory=BreakNLIConfig)
    device: str = "cpu"
    warmup: int = 1
    min_iterations: int = 3
    min_seconds: float = 1.0
    repeats: int = 1  # end-to-end loop repeats
    gen_prompts: int = 8  # prompts of the generate-stage workload
    greedy_prompts: int = 16  # prompts of the greedy token-agreement check
    tolerance: float = 1.0  # percentage points
    min_agreement: float = 98.0  # percent
    require_equivalence: bool = False  # fail on inconclusive cells too, not only on different ones
    random_weights: dict[str, str] = field(default_factory=dict)  # role -> built-in shape
    fixed_length: bool = False  # min_new_tokens = max_new_tokens (forced on with random weights)
    cache_dir: str | None = None
    classifier_opts: dict[str, Any] = field(default_factory=dict)
    generator_opts: dict[str, Any] = field(default_factory=dict)
    n_boot: int = N_BOOT
    threads: int | None = None
    interleave: bool = False  # load every engine, then time them in rounds (A B A B ...)
    command: str | None = None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["engines"] = [s.to_dict() for s in self.specs()]
        d["loop"] = self.loop.to_dict()
        return d

    def specs(self) -> list[EngineSpec]:
        return parse_engines(self.engines) if isinstance(self.engines, str) else with_reference(list(self.engines))


class PrefixHook(ProgressHook):
    """Forward the loop's progress to another hook, with the engine's label before each stage name."""

    def __init__(self, inner: ProgressHook, prefix: str):
        self.inner, self.prefix = inner, prefix

    def start(self, stage: str, total: int, completed: int = 0) -> None:
        self.inner.start(f"{self.prefix} {stage}", total, completed)

    def advance(self, stage: str, n: int = 1) -> None:
        self.inner.advance(f"{self.prefix} {stage}", n)

    def finish(self, stage: str) -> None:
        self.inner.finish(f"{self.prefix} {stage}")


# -- the result -----------------------------------------------------------------------------------------

class BenchResult:
    """Everything a bench measured (``bench.json``), with its renderings."""

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def engines(self) -> list[dict[str, Any]]:
        return self.data["engines"]

    @property
    def passed(self) -> bool:
        return bool(self.data["passed"])

    def engine(self, label: str) -> dict[str, Any]:
        for e in self.engines:
            if e["label"] == label:
                return e
        raise KeyError(label)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent, default=_json_default)

    def to_markdown(self) -> str:
        from breaknli_fast.bench.report import bench_markdown

        return bench_markdown(self.data)

    def save(self, out_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
        paths["json"].write_text(self.to_json() + "\n")
        paths["markdown"].write_text(self.to_markdown())
        if plot:
            from breaknli_fast.bench.report import plot_speed_vs_breakage

            png = plot_speed_vs_breakage(self.data, out / "bench.png")
            if png is not None:
                paths["plot"] = png
        return paths

    @classmethod
    def load(cls, path: str | Path) -> "BenchResult":
        p = Path(path)
        if p.is_dir():
            p = p / "bench.json"
        if not p.exists():
            raise BenchError(f"no bench result at {path} (expected bench.json or a folder holding it)")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise BenchError(f"{p} is not valid JSON: {e}") from None
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise BenchError(f"{p} is not a breaknli-fast bench result (schema {SCHEMA})")
        return cls(data)


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(type(o).__name__)


# -- helpers --------------------------------------------------------------------------------------------

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


def workload_prompts(examples: list[Example], loop: BreakNLIConfig, n: int) -> list[dict[str, Any]]:
    """The first examples selected by each mode (half of ``n`` per mode), independent of any classifier."""
    per_mode = max(1, math.ceil(n / max(1, len(loop.modes))))
    out = []
    for mode in loop.modes:
        sel = [ex for ex in examples if ex.label in SELECTED[mode]][:per_mode]
        for ex in sel:
            out.append({"mode": mode, "id": ex.id, "premise": ex.premise, "hypothesis": ex.hypothesis,
                        "prompt": loop.prompts[mode].format(h=ex.hypothesis), "seed": derive_seed(loop.seed, mode, ex.id)})
    return out[: max(n, 0)]


def _pairs_from_candidates(items: list[dict[str, Any]], cands: list[list[str]], loop: BreakNLIConfig):
    rel, ev = [], []
    for it, cs in zip(items, cands):
        kept, _ = dedup_candidates(it["hypothesis"], cs, loop.u)
        for c in kept:
            rel.append((it["hypothesis"], c))
            if loop.bidirectional:
                rel.append((c, it["hypothesis"]))
        ev.extend((it["premise"], c) for c in kept[: loop.s])
    return rel, ev


def _greedy_ids(gen: GeneratorBase, prompts: list[str], seeds: list[int],
                decoding: Decoding) -> tuple[list[list[int]], str]:
    dec = Decoding(strategy="greedy", max_new_tokens=decoding.max_new_tokens, min_new_tokens=decoding.min_new_tokens)
    ids = gen.generate_ids(prompts, 1, dec, seeds)
    if ids is not None:
        return [rows[0] for rows in ids], "token ids"
    texts = gen.generate(prompts, 1, dec, seeds)
    vocab: dict[str, int] = {}
    return [[vocab.setdefault(w, len(vocab)) for w in t[0].split()] for t in texts], "whitespace words (engine has no generate_ids)"


# -- measurement ------------------------------------------------------------------------------------

class _Engine:
    """One loaded engine and what has been measured of it so far."""

    def __init__(self, res: dict[str, Any], clf: ClassifierBase, gen: GeneratorBase, is_ref: bool):
        self.res, self.clf, self.gen, self.is_ref = res, clf, gen, is_ref
        self.label: str = res["label"]
        self.walls: list[float] = []
        self.first: dict[str, Any] | None = None
        self.records: list[dict[str, Any]] = []
        self.identical = True
        self.stages: dict[str, Any] = {}
        self.logits: dict[str, np.ndarray] = {}
        self.batch_all: list[float] = []
        self.cands: list[list[str]] = []
        self.mem: PeakMemory | None = None
        self.load_mem: dict[str, Any] = {}


def _e2e_warmup(eng: _Engine, data: LoadedData, loop: BreakNLIConfig, cfg: BenchConfig) -> int:
    warm = LoadedData(data.examples[: min(len(data.examples), WARMUP_EXAMPLES)], data.skips, data.source)
    for _ in range(max(0, cfg.warmup)):
        eng.clf.clear_cache()
        run_study(BreakNLIProbe(loop), data=warm, models=Models.of(eng.clf, eng.gen))
    return len(warm.examples)


def _e2e_once(eng: _Engine, data: LoadedData, loop: BreakNLIConfig, cfg: BenchConfig, hook: ProgressHook | None) -> None:
    clf, gen = eng.clf, eng.gen
    clf.clear_cache()
    clf.reset_stats()
    gen.reset_stats()
    # the study entry point in memory (no run directory), on the engines loaded once for every stage
    res = run_study(BreakNLIProbe(loop), data=data, models=Models.of(clf, gen), hook=hook if eng.first is None else None)
    records, times = res.records, res.times
    synchronize(cfg.device)
    eng.walls.append(times.wall)
    if eng.first is not None:
        same = [json.dumps(x, sort_keys=True) for x in records] == [json.dumps(x, sort_keys=True) for x in eng.records]
        eng.identical = eng.identical and same
        return
    eng.records = records
    cls_s = sum(times.seconds.get(k, 0.0) for k in CLASSIFY_STAGES)
    pairs = sum(times.pairs.values())
    cst, gst = clf.stats, gen.stats
    eng.first = {
        "examples": times.examples,
        "stage_seconds": dict(times.seconds),
        "stage_pairs": dict(times.pairs),
        "classifier_pairs": pairs,
        "classifier_pairs_computed": cst.pairs_computed if cst is not None else None,
        "classifier_pairs_per_s": pairs / cls_s if cls_s > 0 else None,
        "generated_sequences": times.sequences,
        "generated_tokens": times.new_tokens,
        "generated_tokens_per_s": times.new_tokens / times.seconds["generate"] if times.seconds.get("generate") else None,
        "classifier_batch_latency": latency_stats(cst.batch_seconds if cst is not None else []),
        "generator_call_latency": latency_stats(gst.call_seconds if gst is not None else []),
    }


def _e2e_summary(eng: _Engine, data: LoadedData, loop: BreakNLIConfig, cfg: BenchConfig, warm_n: int) -> dict[str, Any]:
    assert eng.first is not None
    med = float(np.median(eng.walls))
    f = funnel(eng.records, data, loop.modes)
    return {"repeats": len(eng.walls), "warmup_runs": max(0, cfg.warmup), "warmup_examples": warm_n,
            "wall_s": eng.walls, "median_wall_s": med,
            "examples_per_s": eng.first["examples"] / med if med > 0 else None,
            **eng.first, "repeats_identical": eng.identical if len(eng.walls) > 1 else None,
            "accuracy_ph": f.get("accuracy_ph"),
            "funnel": {m: f[m] for m in loop.modes if m in f},
            "metrics": mode_label_rates(eng.records, cfg.n_boot, BOOT_SEED)}


def _classify_task(eng: _Engine, stage: str, pairs: list[tuple[str, str]]) -> tuple[Task, Callable[[], dict[str, Any]]]:
    clf = eng.clf
    batch_s: list[float] = []

    def before() -> None:
        clf.clear_cache()
        clf.reset_stats()

    def after() -> None:
        if clf.stats is not None:
            batch_s.extend(clf.stats.batch_seconds)

    task = Task(lambda: clf.classify(pairs), before, after)

    def finish() -> dict[str, Any]:
        rep = task.rep
        s = rep.summary()
        eng.batch_all.extend(batch_s)
        eng.logits[stage] = np.asarray(rep.result.logits, dtype=np.float32)
        return {"items": len(pairs), "unit": "pairs", **s, "pairs_per_s": len(pairs) / s["median_s"],
                "batches_per_iteration": (len(batch_s) // s["iterations"]) if batch_s else None,
                "batch_latency": latency_stats(batch_s if batch_s else rep.seconds),
                "latency_unit": "batch" if batch_s else "iteration"}

    return task, finish


def _generate_task(eng: _Engine, items: list[dict[str, Any]], loop: BreakNLIConfig, cfg: BenchConfig) -> tuple[Task, Callable[[], dict[str, Any]]]:
    gen = eng.gen
    prompts = [it["prompt"] for it in items]
    seeds = [it["seed"] for it in items]
    calls: list[float] = []
    tokens: list[int] = []
    texts: list[list[list[str]]] = []

    def before() -> None:
        gen.reset_stats()

    def after() -> None:
        if gen.stats is not None:
            tokens.append(int(gen.stats.new_tokens))
            calls.extend(gen.stats.call_seconds)

    def fn() -> list[list[str]]:
        out = gen.generate(prompts, loop.k, loop.decoding, seeds)
        texts.append(out)
        return out

    task = Task(fn, before, after)

    def finish() -> dict[str, Any]:
        rep = task.rep
        s = rep.summary()
        if tokens:
            tok_per_iter = float(np.mean(tokens))
            how = "generator stats: generated ids per sequence, padding excluded"
        else:
            measured = texts[rep.warmup:] or texts
            tok_per_iter = float(np.mean([gen.count_tokens(x for c in t for x in c) for t in measured]))
            how = "count_tokens of the decoded texts"
        eng.cands = rep.result
        seqs = len(prompts) * loop.k
        calls_per_iter = (len(calls) / s["iterations"]) if calls else None
        return {"items": len(prompts), "unit": "prompts", **s, "k": loop.k, "sequences_per_iteration": seqs,
                "new_tokens_per_iteration": tok_per_iter, "tokens_counted_by": how,
                "tokens_per_s": tok_per_iter / s["median_s"], "sequences_per_s": seqs / s["median_s"],
                "prompts_per_s": len(prompts) / s["median_s"],
                "calls_per_iteration": calls_per_iter,
                "prompts_per_call": (len(prompts) / calls_per_iter) if calls_per_iter else None,
                "call_latency": latency_stats(calls if calls else rep.seconds),
                "latency_unit": "generator call (a batch of prompts, K sequences each)" if calls else "iteration"}

    return task, finish


def _parity(eng: _Engine, loop: BreakNLIConfig, cfg: BenchConfig, ref: dict[str, Any], meaningful: bool) -> dict[str, Any]:
    """Untimed: re-classify the fixed triples, greedy-decode the check prompts, compare with the reference."""
    clf, gen = eng.clf, eng.gen
    clf.clear_cache()
    tp = par.triple_pairs(ref["triples"])
    tri = clf.classify(tp) if tp else None
    eng.logits["fixed_triples"] = np.asarray(tri.logits, dtype=np.float32) if tri is not None else np.zeros((0, 3), np.float32)
    verdicts = par.triple_verdicts(ref["triples"], tri.labels if tri is not None else [])
    g = ref["greedy"]
    greedy, unit = _greedy_ids(gen, [x["prompt"] for x in g], [x["seed"] for x in g], loop.decoding) if g else ([], "token ids")
    if eng.is_ref:
        ref["logits"], ref["verdicts"], ref["greedy_ids"] = eng.logits, verdicts, greedy
    keys = list(eng.logits)
    cls = {k: par.classifier_parity(ref["logits"][k], eng.logits[k]) for k in keys}
    cls["all"] = par.classifier_parity(np.concatenate([ref["logits"][k] for k in keys]),
                                       np.concatenate([eng.logits[k] for k in keys]))
    out = {
        "meaningful": meaningful,
        "classifier": cls,
        "fixed_triples": par.fixed_triple_parity(ref["triples"], ref["verdicts"], verdicts, cfg.n_boot, BOOT_SEED),
        "end_to_end": par.end_to_end_parity(ref["records"], eng.records, cfg.n_boot, BOOT_SEED),
        "generator": {"greedy": {**par.token_agreement(ref["greedy_ids"], greedy), "unit": unit,
                                 "max_new_tokens": loop.decoding.max_new_tokens},
                      "sampled_candidates": par.sampled_identity(ref["records"], eng.records)},
    }
    par.add_verdicts(out, cfg.tolerance)
    return out


@dataclass
class _Context:
    cfg: BenchConfig
    data: LoadedData
    loop: BreakNLIConfig
    workload: dict[str, Any]
    ref: dict[str, Any]
    hook: ProgressHook | None
    log: Callable[[str], None]
    meaningful: bool


def _fail(eng: _Engine, ctx: _Context, what: str, e: BaseException) -> None:
    if eng.is_ref:
        raise BenchError(f"the reference {eng.label} failed during {what}: {first_line(e)}") from e
    eng.res.update(status="failed", reason=f"{type(e).__name__} during {what}: {first_line(e)}")
    ctx.log(f"[{eng.label}] failed: {eng.res['reason']}")


def _timed_phase(engs: list[_Engine], ctx: _Context, what: str, make: Callable[[_Engine], tuple[Task, Callable[[], dict[str, Any]]]]) -> list[_Engine]:
    """Time one stage for every engine (in rounds when several); returns the engines still alive."""
    ctx.log(("[" + ", ".join(e.label for e in engs) + "] " if len(engs) > 1 else f"[{engs[0].label}] ") + f"stage: {what}")
    made = [(eng, *make(eng)) for eng in engs]
    cfg = ctx.cfg
    repeat_interleaved([t for _, t, _ in made], warmup=cfg.warmup, min_iterations=cfg.min_iterations,
                       min_seconds=cfg.min_seconds, device=cfg.device)
    alive = []
    for eng, task, finish in made:
        if task.error is not None:
            _fail(eng, ctx, f"stage {what}", task.error)
            continue
        eng.stages[what] = finish()
        alive.append(eng)
    return alive


def _run_phases(engs: list[_Engine], ctx: _Context) -> None:
    """End to end, then each stage of the fixed workload, then parity, for the given engines (all of them
    in rounds when several are given)."""
    cfg, data, loop, workload, ref = ctx.cfg, ctx.data, ctx.loop, ctx.workload, ctx.ref
    alive: list[_Engine] = []
    warm_n = 0
    for eng in engs:
        try:
            warm_n = _e2e_warmup(eng, data, loop, cfg)
            alive.append(eng)
        except Exception as e:  # noqa: BLE001
            _fail(eng, ctx, "end-to-end warm-up", e)
    for r in range(max(1, cfg.repeats)):
        still = []
        for eng in alive:
            ctx.log(f"[{eng.label}] end to end" + (f" (run {r + 1} of {cfg.repeats})" if cfg.repeats > 1 else ""))
            try:
                _e2e_once(eng, data, loop, cfg, PrefixHook(ctx.hook, eng.label) if ctx.hook else None)
                still.append(eng)
            except Exception as e:  # noqa: BLE001
                _fail(eng, ctx, "end to end", e)
        alive = still
    for eng in alive:
        eng.res["speed"] = {"end_to_end": _e2e_summary(eng, data, loop, cfg, warm_n)}
        if eng.is_ref:
            ref["triples"] = par.fixed_triples(eng.records)
            ref["records"] = eng.records
            ref["greedy"] = workload["generate"][: cfg.greedy_prompts]

    if workload["generate"] and alive:
        alive = _timed_phase(alive, ctx, "generate", lambda eng: _generate_task(eng, workload["generate"], loop, cfg))
    else:
        for eng in alive:
            eng.stages["generate"] = {"items": 0}
    for eng in alive:
        if eng.is_ref:
            workload["relation"], workload["evaluate"] = _pairs_from_candidates(workload["generate"], eng.cands, loop)

    for stage in CLASSIFY_STAGES:
        pairs = workload.get(stage) or []
        if pairs and alive:
            alive = _timed_phase(alive, ctx, stage, lambda eng: _classify_task(eng, stage, pairs))
        else:
            for eng in alive:
                eng.stages[stage] = {"items": 0}
                eng.logits[stage] = np.zeros((0, len(LABELS)), dtype=np.float32)

    for eng in alive:
        ctx.log(f"[{eng.label}] parity")
        try:
            eng.res["parity"] = _parity(eng, loop, cfg, ref, ctx.meaningful)
        except Exception as e:  # noqa: BLE001
            _fail(eng, ctx, "parity", e)
            continue
        eng.res["speed"].update(stages=eng.stages, classifier_batch_latency=latency_stats(eng.batch_all))


def _finish_engine(eng: _Engine, run_mem: dict[str, Any]) -> None:
    if eng.res["status"] != "ok":
        return
    lm = eng.load_mem
    eng.res["memory"] = {**run_mem, "rss_before_load_mib": lm.get("rss_before_load_mib"),
                         "rss_after_load_mib": lm.get("rss_now_mib"), "peak_rss_load_mib": lm.get("peak_rss_mib"),
                         "gpu_peak_allocated_load_mib": lm.get("gpu_peak_allocated_mib")}
    eng.res["load_average_end"] = _loadavg()


def _unload(engs: list[_Engine], device: str) -> None:
    for eng in engs:
        eng.clf = eng.gen = None
    gc.collect()
    if device.startswith("cuda"):
        try:
            import torch

            torch.cuda.empty_cache()
        except Exception:  # pragma: no cover
            pass


# -- the bench ------------------------------------------------------------------------------------------

def run_bench(cfg: BenchConfig, hook: ProgressHook | None = None, log: Callable[[str], None] | None = None) -> BenchResult:
    """Measure every engine of ``cfg`` on identical inputs; see the module docstring."""
    log = log or (lambda msg: None)
    started = datetime.now(timezone.utc).isoformat(timespec="seconds")
    specs = cfg.specs()
    if cfg.threads:
        import torch

        torch.set_num_threads(int(cfg.threads))
    from breaknli_fast.envinfo import environment

    env = environment()
    data = load_examples(cfg.dataset, split=cfg.split, limit=cfg.limit)
    if not data.examples:
        raise BenchError(f"no valid example in {cfg.dataset!r}")

    generator, classifier = cfg.generator, cfg.classifier
    loop = cfg.loop
    random_info: dict[str, Any] = {}
    notes: list[str] = []
    if cfg.random_weights:
        from breaknli_fast.bench.shapes import build_random_model

        texts = [t for ex in data.examples for t in (ex.premise, ex.hypothesis)]
        texts += [p.format(h=ex.hypothesis) for ex in data.examples[:64] for p in loop.prompts.values()]
        texts += [p.format(premise=ex.premise, hypothesis=ex.hypothesis) for ex in data.examples[:16] for p in NLI_PROMPTS.values()]
        for role, shape in sorted(cfg.random_weights.items()):
            path = build_random_model(shape, cfg.cache_dir, texts, log=log)
            meta = json.loads((path / "random_weights.json").read_text())
            random_info[role] = {"shape": shape, "path": str(path), "parameters": meta["parameters"],
                                 "tokenizer_size": meta["tokenizer_size"]}
            if role == "generator":
                generator = str(path)
            else:
                classifier = str(path)
        notes.append("random weights (" + ", ".join(f"{r}: {s}" for r, s in sorted(cfg.random_weights.items()))
                     + "): speed and memory of the real architecture sizes only; parity figures are NOT meaningful "
                       "(random logits lie close together, so any numeric change flips labels), and --strict ignores them")
    if cfg.random_weights or cfg.fixed_length:
        loop = replace(loop, decoding=replace(loop.decoding, min_new_tokens=loop.decoding.max_new_tokens))
        notes.append(f"fixed generation length: min_new_tokens = max_new_tokens = {loop.decoding.max_new_tokens}, "
                     "so every engine generates the same number of tokens")
    meaningful = not cfg.random_weights

    used_models = sorted({generator, classifier} | {m for sp in specs for m in (sp.classifier, sp.generator) if m})
    fingerprints = {m: _fingerprint(m) for m in used_models}
    clf_opts, gen_opts = dict(cfg.classifier_opts), dict(cfg.generator_opts)
    items = workload_prompts(data.examples, loop, cfg.gen_prompts)
    workload: dict[str, Any] = {"classify_ph": [(ex.premise, ex.hypothesis) for ex in data.examples], "generate": items}
    ref: dict[str, Any] = {}
    engines: list[dict[str, Any]] = []
    ctx = _Context(cfg, data, loop, workload, ref, hook, log, meaningful)

    def load(i: int, spec: EngineSpec) -> _Engine | None:
        is_ref = i == 0
        res: dict[str, Any] = {"label": spec.label, "engine": spec.engine, "precision": spec.precision,
                               "classifier_precision": spec.clf_precision, "generator_precision": spec.gen_precision,
                               "component_of": spec.component_of,
                               "device": cfg.device, "reference": is_ref, "spec": spec.to_dict(),
                               "models": {"classifier": spec.classifier or classifier, "generator": spec.generator or generator},
                               "status": "ok", "reason": None}
        engines.append(res)
        log(f"[{spec.label}] loading")
        res["load_average_start"] = _loadavg()
        mem = PeakMemory(cfg.device).start()
        t0 = time.perf_counter()
        try:
            c_extra, g_extra = spec.role_options()
            if cfg.threads:  # torch's threads are process-wide: its loaders set them again (split by workers)
                c_extra.setdefault("threads", cfg.threads)
                g_extra.setdefault("threads", cfg.threads)
            clf = registry.load_classifier(spec.engine, res["models"]["classifier"], precision=spec.clf_precision,
                                           device=cfg.device, **{**clf_opts, **c_extra})
            gen = registry.load_generator(spec.engine, res["models"]["generator"], precision=spec.gen_precision,
                                          device=cfg.device, **{**gen_opts, **g_extra})
        except Exception as e:  # noqa: BLE001 - any engine may fail to load; report and go on
            gc.collect()
            if is_ref:
                raise BenchError(f"the reference {spec.label} cannot load: {first_line(e)}") from None
            res.update(status="skipped", reason=first_line(e))
            log(f"[{spec.label}] skipped: {res['reason']}")
            return None
        res["load_s"] = time.perf_counter() - t0
        res["info"] = {"classifier": clf.info.to_dict(), "generator": gen.info.to_dict()}
        eng = _Engine(res, clf, gen, is_ref)
        eng.load_mem = mem.read()
        return eng

    if cfg.interleave:
        loaded = [e for e in (load(i, sp) for i, sp in enumerate(specs)) if e is not None]
        shared = PeakMemory(cfg.device).start()
        _run_phases(loaded, ctx)
        run_mem = shared.read()
        run_mem["shared"] = True
        run_mem["note"] = "engines ran interleaved: the run's peak RSS is that of all loaded engines together"
        for eng in loaded:
            _finish_engine(eng, run_mem)
        _unload(loaded, cfg.device)
    else:
        for i, spec in enumerate(specs):
            eng = load(i, spec)
            if eng is None:
                continue
            mem = PeakMemory(cfg.device).start()  # the run's own peak, without export / loading transients
            _run_phases([eng], ctx)
            _finish_engine(eng, mem.read())
            _unload([eng], cfg.device)
        notes.append("engines ran one after another (use --interleave on a busy machine: load drifts then hit all engines alike)")

    _speedups(engines)
    for e in engines:
        if e["status"] == "ok":
            fails = (par.check(e["parity"], cfg.tolerance, cfg.min_agreement, cfg.require_equivalence)
                     if meaningful else [])
            e["checks"] = {"applied": meaningful, "failures": fails, "passed": not fails}
        elif e["status"] == "failed":
            e["checks"] = {"applied": True, "failures": [f"engine failed: {e['reason']}"], "passed": False}
        else:
            e["checks"] = {"applied": False, "failures": [], "passed": None}
    failures: list[str] = []
    changed = [m for m in used_models if _fingerprint(m) != fingerprints[m]]
    if changed:
        failures.append("model files changed while the bench ran (" + ", ".join(changed) + "): the engines did not all "
                        "measure the same model; run the bench again once the files stay put")
        notes.append(failures[-1])
    passed = not failures and all(e["checks"]["passed"] is not False for e in engines)

    data_out = {
        "schema": SCHEMA,
        "command": cfg.command,
        "started": started,
        "finished": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "environment": env,
        "config": {**cfg.to_dict(), "loop": loop.to_dict()},
        "seeds": {"loop": loop.seed, "bootstrap": BOOT_SEED, "n_boot": cfg.n_boot,
                  "random_weights": 0 if cfg.random_weights else None,
                  "per_example": "sha256(loop seed, mode, example id)"},
        "data": {"name": cfg.dataset, "split": cfg.split, "limit": cfg.limit, "source": data.source,
                 "examples": len(data.examples), "skips": data.skips.to_dict()},
        "models": {"generator": generator, "classifier": classifier, "random_weights": random_info or None,
                   "fingerprints": fingerprints, "changed_during_bench": changed},
        "workload": {
            "classify_ph_pairs": len(workload["classify_ph"]),
            "generate_prompts": len(items),
            "relation_pairs": len(workload.get("relation", [])),
            "evaluate_pairs": len(workload.get("evaluate", [])),
            "fixed_triples": {m: sum(t["mode"] == m for t in ref.get("triples", [])) for m in loop.modes},
            "greedy_prompts": len(ref.get("greedy", [])),
            "description": "identical inputs for every engine: (p, h) of every example; K candidates for the first "
                           "gen_prompts selected examples (half per mode); the (h, h') / (h', h) and (p, h') pairs the loop "
                           "would classify for the reference's candidates if every filter passed",
        },
        "reference": engines[0]["label"],
        "parity_meaningful": meaningful,
        "tolerance_pp": cfg.tolerance,
        "min_agreement_pct": cfg.min_agreement,
        "notes": notes,
        "engines": engines,
        "failures": failures,
        "passed": passed,
    }
    return BenchResult(data_out)


def _speedups(engines: list[dict[str, Any]]) -> None:
    ref = engines[0]
    if ref.get("status") != "ok":
        return
    rs = ref["speed"]["stages"]
    for e in engines:
        if e.get("status") != "ok":
            continue
        st = e["speed"]["stages"]
        per: dict[str, float | None] = {}
        per_best: dict[str, float | None] = {}
        ref_total = eng_total = ref_best = eng_best = 0.0
        for k in STAGES:
            a, b = rs.get(k, {}), st.get(k, {})
            if a.get("items") and b.get("items"):
                per[k] = a["median_s"] / b["median_s"]
                per_best[k] = a["min_s"] / b["min_s"]
                ref_total += a["median_s"]
                eng_total += b["median_s"]
                ref_best += a["min_s"]
                eng_best += b["min_s"]
            else:
                per[k] = per_best[k] = None
        e2e_ref, e2e = ref["speed"]["end_to_end"], e["speed"]["end_to_end"]
        e["speed"]["workload_s"] = eng_total
        e["speed"]["speedup"] = {
            "workload": ref_total / eng_total if eng_total > 0 else None,
            # best (minimum) iteration times: the least disturbed estimate on a busy machine
            "workload_best": ref_best / eng_best if eng_best > 0 else None,
            "end_to_end": e2e_ref["median_wall_s"] / e2e["median_wall_s"] if e2e["median_wall_s"] > 0 else None,
            "stages": per,
            "stages_best": per_best,
        }
        cls = [st[k] for k in CLASSIFY_STAGES if st.get(k, {}).get("items")]
        e["speed"]["summary"] = {
            "classifier_pairs_per_s": (sum(x["items"] for x in cls) / sum(x["median_s"] for x in cls)) if cls else None,
            "generated_tokens_per_s": st.get("generate", {}).get("tokens_per_s"),
            "examples_per_s": e2e.get("examples_per_s"),
            "classifier_batch_p95_ms": e["speed"]["classifier_batch_latency"]["p95_ms"],
            "generator_call_p95_ms": (st.get("generate", {}).get("call_latency") or {}).get("p95_ms"),
        }

