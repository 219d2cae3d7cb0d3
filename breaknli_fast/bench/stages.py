"""BreakNLI's stages on a fixed workload, and its fixed-input parity (``bench --probe breaknli``).

Identical inputs for every engine, independent of the engine's own predictions: classify (p, h) of every example;
generate K candidates for the first ``gen_prompts`` selected examples; the relation filter's (h, h') / (h', h) pairs
and the evaluation's (p, h') pairs built from the *reference's* candidates as if every filter passed. Each stage runs
``warmup`` times unmeasured, then at least ``min_iterations`` times and at least ``min_seconds``; the classifier's
pair cache is cleared before every iteration. Parity (untimed): logits of the workload pairs, the reference's
evaluated (p, h, h') triples re-classified, greedy decoding of the same prompts.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable

import numpy as np

import breaknli_fast.bench.parity as par
from breaknli_fast.bench.measure import Task, latency_stats, repeat_interleaved
from breaknli_fast.bench.types import EngineResult, GeneratorParity, Parity, SpeedSummary, Speedup, StageTiming
from breaknli_fast.bench.state import Context, EngineRun, fail
from breaknli_fast.data.labels import LABELS
from breaknli_fast.data.loaders import Example
from breaknli_fast.engines.base import Decoding, GeneratorBase, derive_seed
from breaknli_fast.probes.breaknli.loop import BreakNLIConfig, dedup_candidates
from breaknli_fast.probes.breaknli.verdicts import SELECTED

STAGES = ("classify_ph", "generate", "relation", "evaluate")
CLASSIFY_STAGES = ("classify_ph", "relation", "evaluate")


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


def pairs_from_candidates(items: list[dict[str, Any]], cands: list[list[str]], loop: BreakNLIConfig):
    rel, ev = [], []
    for it, cs in zip(items, cands):
        kept, _ = dedup_candidates(it["hypothesis"], cs, loop.u)
        for c in kept:
            rel.append((it["hypothesis"], c))
            if loop.bidirectional:
                rel.append((c, it["hypothesis"]))
        ev.extend((it["premise"], c) for c in kept[: loop.s])
    return rel, ev


def greedy_ids(gen: GeneratorBase, prompts: list[str], seeds: list[int],
               decoding: Decoding) -> tuple[list[list[int]], str]:
    dec = Decoding(strategy="greedy", max_new_tokens=decoding.max_new_tokens, min_new_tokens=decoding.min_new_tokens)
    ids = gen.generate_ids(prompts, 1, dec, seeds)
    if ids is not None:
        return [rows[0] for rows in ids], "token ids"
    texts = gen.generate(prompts, 1, dec, seeds)
    vocab: dict[str, int] = {}
    return [[vocab.setdefault(w, len(vocab)) for w in t[0].split()] for t in texts], "whitespace words (engine has no generate_ids)"


def median_work(works: list[Any]) -> Any:
    """The token work of the measured iterations of a classify stage: the last one's counts (every iteration
    computes the same batches), each width's seconds the median over the iterations."""
    works = [w for w in works if w is not None]
    if not works:
        return None
    out = works[-1]
    for width, b in out.by_width.items():
        b[2] = float(np.median([w.by_width[width][2] for w in works if width in w.by_width]))
    return out


def classify_task(eng: EngineRun, stage: str, pairs: list[tuple[str, str]]) -> tuple[Task, Callable[[], StageTiming]]:
    clf = eng.clf
    batch_s: list[float] = []
    work: list[Any] = []  # the token work of each measured iteration (every iteration computes the same batches)

    def before() -> None:
        clf.clear_cache()
        clf.reset_stats()

    def after() -> None:
        if clf.stats is not None:
            batch_s.extend(clf.stats.batch_seconds)
            work.append(copy.deepcopy(getattr(clf.stats, "work", None)))

    task = Task(lambda: clf.classify(pairs), before, after)

    def finish() -> StageTiming:
        rep = task.rep
        s = rep.summary()
        eng.batch_all.extend(batch_s)
        eng.logits[stage] = np.asarray(rep.result.logits, dtype=np.float32)
        return StageTiming(len(pairs), "pairs", **s, classifier_work=median_work(work), extra={
            "pairs_per_s": len(pairs) / s["median_s"],
            "batches_per_iteration": (len(batch_s) // s["iterations"]) if batch_s else None,
            "batch_latency": latency_stats(batch_s if batch_s else rep.seconds),
            "latency_unit": "batch" if batch_s else "iteration"})

    return task, finish


def generate_task(eng: EngineRun, items: list[dict[str, Any]], loop: BreakNLIConfig) -> tuple[Task, Callable[[], StageTiming]]:
    gen = eng.gen
    prompts = [it["prompt"] for it in items]
    seeds = [it["seed"] for it in items]
    calls: list[float] = []
    tokens: list[int] = []
    texts: list[list[list[str]]] = []
    work: list[Any] = []  # the token work of the last measured iteration (seeded: every iteration computes the same)

    def before() -> None:
        gen.reset_stats()

    def after() -> None:
        if gen.stats is not None:
            tokens.append(int(gen.stats.new_tokens))
            calls.extend(gen.stats.call_seconds)
            work[:] = [copy.deepcopy(getattr(gen.stats, "work", None))]

    def fn() -> list[list[str]]:
        out = gen.generate(prompts, loop.k, loop.decoding, seeds)
        texts.append(out)
        return out

    task = Task(fn, before, after)

    def finish() -> StageTiming:
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
        return StageTiming(len(prompts), "prompts", **s, generator_work=work[0] if work else None, extra={
            "k": loop.k, "sequences_per_iteration": seqs, "new_tokens_per_iteration": tok_per_iter,
            "tokens_counted_by": how, "tokens_per_s": tok_per_iter / s["median_s"],
            "sequences_per_s": seqs / s["median_s"], "prompts_per_s": len(prompts) / s["median_s"],
            "calls_per_iteration": calls_per_iter,
            "prompts_per_call": (len(prompts) / calls_per_iter) if calls_per_iter else None,
            "call_latency": latency_stats(calls if calls else rep.seconds),
            "latency_unit": "generator call (a batch of prompts, K sequences each)" if calls else "iteration"})

    return task, finish


def timed_phase(engs: list[EngineRun], ctx: Context, what: str,
                make: Callable[[EngineRun], tuple[Task, Callable[[], StageTiming]]]) -> list[EngineRun]:
    """Time one stage for every engine (in rounds when several); returns the engines still alive."""
    ctx.log(("[" + ", ".join(e.label for e in engs) + "] " if len(engs) > 1 else f"[{engs[0].label}] ") + f"stage: {what}")
    made = [(eng, *make(eng)) for eng in engs]
    cfg = ctx.cfg
    repeat_interleaved([t for _, t, _ in made], warmup=cfg.warmup, min_iterations=cfg.min_iterations,
                       min_seconds=cfg.min_seconds, device=cfg.engine.device)
    alive = []
    for eng, task, finish in made:
        if task.error is not None:
            fail(eng, ctx, f"stage {what}", task.error)
            continue
        eng.stages[what] = finish()
        alive.append(eng)
    return alive


def run_stages(alive: list[EngineRun], ctx: Context, loop: BreakNLIConfig) -> list[EngineRun]:
    """The fixed workload's stages for the engines that ran end to end; returns those still alive."""
    workload = ctx.workload
    for eng in alive:
        if eng.is_ref:
            ctx.ref.triples = par.fixed_triples(eng.records)
            ctx.ref.greedy = workload.generate[: ctx.cfg.greedy_prompts]
    if workload.generate and alive:
        alive = timed_phase(alive, ctx, "generate", lambda eng: generate_task(eng, workload.generate, loop))
    else:
        for eng in alive:
            eng.stages["generate"] = StageTiming(0)
    for eng in alive:
        if eng.is_ref:
            workload.relation, workload.evaluate = pairs_from_candidates(workload.generate, eng.cands, loop)
    for stage in CLASSIFY_STAGES:
        pairs = workload.pairs(stage)
        if pairs and alive:
            alive = timed_phase(alive, ctx, stage, lambda eng: classify_task(eng, stage, pairs))
        else:
            for eng in alive:
                eng.stages[stage] = StageTiming(0)
                eng.logits[stage] = np.zeros((0, len(LABELS)), dtype=np.float32)
    return alive


def fixed_parity(eng: EngineRun, ctx: Context, loop: BreakNLIConfig) -> Parity:
    """Untimed: re-classify the fixed triples, greedy-decode the check prompts, compare with the reference."""
    clf, gen, ref = eng.clf, eng.gen, ctx.ref
    clf.clear_cache()
    tp = par.triple_pairs(ref.triples)
    tri = clf.classify(tp) if tp else None
    eng.logits["fixed_triples"] = np.asarray(tri.logits, dtype=np.float32) if tri is not None else np.zeros((0, 3), np.float32)
    verdicts = par.triple_verdicts(ref.triples, tri.labels if tri is not None else [])
    g = ref.greedy
    greedy, unit = greedy_ids(gen, [x["prompt"] for x in g], [x["seed"] for x in g], loop.decoding) if g else ([], "token ids")
    if eng.is_ref:
        ref.logits, ref.verdicts, ref.greedy_ids = eng.logits, verdicts, greedy
    keys = list(eng.logits)
    cls = {k: par.classifier_parity(ref.logits[k], eng.logits[k]) for k in keys}
    cls["all"] = par.classifier_parity(np.concatenate([ref.logits[k] for k in keys]),
                                       np.concatenate([eng.logits[k] for k in keys]))
    agreement = par.token_agreement(ref.greedy_ids, greedy)
    agreement.unit, agreement.max_new_tokens = unit, loop.decoding.max_new_tokens
    out = Parity(meaningful=ctx.meaningful, classifier=cls,
                 fixed_triples=par.fixed_triple_parity(ref.triples, ref.verdicts, verdicts),
                 end_to_end=par.end_to_end_parity(ref.records, eng.records),
                 generator=GeneratorParity(agreement, par.sampled_identity(ref.records, eng.records)))
    par.add_verdicts(out, ctx.cfg.tolerance)
    return out


def speedups(ref: EngineResult, e: EngineResult) -> Speedup:
    """Speed-ups of the fixed workload (reference time / engine time), per stage and in all; sets the engine's
    ``workload_s``."""
    assert ref.speed is not None and e.speed is not None
    rs, st = ref.speed.stages or {}, e.speed.stages or {}
    per: dict[str, float | None] = {}
    per_best: dict[str, float | None] = {}
    ref_total = eng_total = ref_best = eng_best = 0.0
    for k in STAGES:
        a, b = rs.get(k), st.get(k)
        if a is not None and b is not None and a.ran and b.ran:
            per[k] = a.median_s / b.median_s  # type: ignore[operator]
            per_best[k] = a.min_s / b.min_s  # type: ignore[operator]
            ref_total += a.median_s  # type: ignore[operator]
            eng_total += b.median_s  # type: ignore[operator]
            ref_best += a.min_s  # type: ignore[operator]
            eng_best += b.min_s  # type: ignore[operator]
        else:
            per[k] = per_best[k] = None
    e.speed.workload_s = eng_total
    return Speedup(workload=ref_total / eng_total if eng_total > 0 else None,
                   # best (minimum) iteration times: the least disturbed estimate on a busy machine
                   workload_best=ref_best / eng_best if eng_best > 0 else None, stages=per, stages_best=per_best)


def stage_summary(e: EngineResult) -> SpeedSummary:
    assert e.speed is not None
    st = e.speed.stages or {}
    cls = [st[k] for k in CLASSIFY_STAGES if k in st and st[k].ran]
    gen = st.get("generate") or StageTiming(0)
    return SpeedSummary(
        classifier_pairs_per_s=(sum(x.items for x in cls) / sum(x.median_s or 0.0 for x in cls)) if cls else None,
        generated_tokens_per_s=gen.get("tokens_per_s"),
        classifier_batch_p95_ms=(e.speed.classifier_batch_latency or {}).get("p95_ms"),
        generator_call_p95_ms=(gen.get("call_latency") or {}).get("p95_ms"))
