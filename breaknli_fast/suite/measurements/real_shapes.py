"""The real model sizes at the loop's defaults (kind ``real_shapes``): breaknli-fast's engines against the runtimes a
user would otherwise run (the peers, :mod:`breaknli_fast.suite.peers`), loaded in one process and timed in rounds,
every figure a ratio within the run.

Random-weight models of the real architectures (:mod:`breaknli_fast.bench.shapes`: flan-t5-small / -base as the
generator, roberta-base / -large as the classifier; no download), at the BreakNLI loop's defaults:

* ``job = "generate"``: ``prompts`` generator prompts (half contradictive, half entailed, from the embedded SNLI
  sample) x K = 20 samples, top-k 50 / top-p 0.95, exactly ``max_new_tokens`` (40) new tokens each (the same work
  for every contender). Contenders: the project's engines (``torch:fp32``, ``ort:int8``, ``ct2:int8``, ...) and
  the peers ``peer:transformers``, ``peer:ct2-int8`` / ``peer:ct2-fp32`` (and ``-intra``). Figure: new tokens / s
  (median iteration), each contender's ratio to ``generate_reference`` (default ``peer:ct2-int8``) and to
  ``torch:fp32``.
* ``job = "classify"``: the first ``pairs`` (1,000) premise / hypothesis pairs of the embedded SNLI sample.
  Contenders: the project's engines and the peers ``peer:transformers`` and ``peer:optimum``. Figure: pairs / s
  and the ratio to ``torch:fp32``, with each contender's label agreement and max |Δ logit| against torch fp32 on
  the same pairs (random weights: near-tied logits, so label agreement says little; max |Δ logit| tells a correct
  fp32 path from a broken one).

Every contender is loaded first (exports and conversions cached, not timed), then the job is timed in rounds over
all contenders: ``warmup`` unmeasured iterations, then at least ``min_iterations`` and ``min_seconds``.

Its sections: the targets at the sizes users run (with the loop end to end at real shapes, bench files; rendered by
:mod:`.real_targets`), the generator on each transformers stack, and the real shapes' tables.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from breaknli_fast.bench.types import OMIT
from breaknli_fast.errors import UserError, first_line
from breaknli_fast.limits import MAX_MIN_ITERATIONS, MAX_MIN_SECONDS, MAX_NEW_TOKENS, MAX_WARMUP
from breaknli_fast.probes.breaknli.loop import MAX_K
from breaknli_fast.suite.base import Measurement, Results, Section, option
from breaknli_fast.suite.format import PROJECT, dig, f, feeds, not_measured, of_kind, table
from breaknli_fast.suite.measurements.real_targets import real_loop_files, real_shape_files, real_targets
from breaknli_fast.suite.result import ResultFile

GEN_CONTENDERS = ("torch:fp32,ort:fp32,ort:int8,ct2:int8,peer:transformers,peer:ct2-fp32,peer:ct2-int8,"
                  "peer:ct2-int8-intra")
CLF_CONTENDERS = "torch:fp32,torch:bf16,ort:fp32,ort:int8:validate=false,peer:transformers,peer:optimum"


@dataclass
class RealShapesConfig:
    job: str = option("generate", help="generate or classify")
    generator: str = option("flan-t5-small", help="a T5 shape of breaknli_fast.bench.shapes")
    classifier: str = option("roberta-base", help="a classifier shape of breaknli_fast.bench.shapes")
    contenders: Optional[str] = option(None, help=f"comma-separated; default for generate: {GEN_CONTENDERS}; for "
                                                  f"classify: {CLF_CONTENDERS}")
    generate_reference: str = option("peer:ct2-int8",
                                     help="the contender every generator figure is divided by (besides torch:fp32)")
    prompts: int = option(32, min=1, max=1362, why="half the embedded sample's examples", help="generator prompts")
    k: int = option(20, min=1, max=MAX_K, help="candidates per prompt")
    max_new_tokens: int = option(40, min=1, max=MAX_NEW_TOKENS, help="new tokens of every candidate (exactly)")
    top_k: int = option(50, min=0, help="sampling's top-k")
    top_p: float = option(0.95, min=0.0, max=1.0, help="sampling's top-p")
    pairs: int = option(1000, min=1, max=2724, why="the embedded sample's pairs", help="classifier pairs")
    peer_batch: Optional[int] = option(None, min=1, max=4096,
                                       help="prompts (generate, default 8) or pairs (classify, default 32) per call of "
                                            "the peers")
    threads: Optional[int] = option(None, min=1, help="CPU threads of every contender (default: physical cores)")
    warmup: int = option(1, min=0, max=MAX_WARMUP, help="unmeasured iterations")
    min_iterations: int = option(3, min=1, max=MAX_MIN_ITERATIONS, help="measured iterations, at least")
    min_seconds: float = option(0.0, min=0.0, max=MAX_MIN_SECONDS, help="measured seconds, at least")
    seed: int = option(0, help="the seed")
    cache_dir: Optional[str] = option(None, help="random-weight models (default: the bench's cache)")
    model: Optional[str] = option(None, help="a local model folder instead of the random-weight shape (a tiny model)")


@dataclass
class RealRow:
    """One contender's timing (and, classify, its logits against torch fp32's)."""

    contender: str | None = None
    load_s: float | None = None
    rss_after_load_mib: float | None = None
    iterations: int | None = None
    warmup: int | None = None
    total_s: float | None = None
    median_s: float | None = None
    mean_s: float | None = None
    min_s: float | None = None
    std_s: float | None = None
    details: dict[str, Any] | None = None
    pairs: int | None = field(default=None, metadata=OMIT)
    pairs_per_s: float | None = field(default=None, metadata=OMIT)
    pairs_per_s_best: float | None = field(default=None, metadata=OMIT)
    sequences: int | None = field(default=None, metadata=OMIT)
    new_tokens: int | None = field(default=None, metadata=OMIT)
    tokens_per_s: float | None = field(default=None, metadata=OMIT)
    tokens_per_s_best: float | None = field(default=None, metadata=OMIT)
    vs_reference: float | None = field(default=None, metadata=OMIT)
    vs_torch_fp32: float | None = None
    max_abs_logit_vs_torch_fp32: float | None = field(default=None, metadata=OMIT)
    label_agreement_vs_torch_fp32_pct: float | None = field(default=None, metadata=OMIT)
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class Skipped:
    contender: str | None = None
    reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class RealShapesPayload:
    job: str | None = None
    shape: str | None = None
    parameters: int | None = None
    model_dir: str | None = None
    random_weights: bool | None = None
    threads: int | None = None
    cpu_features: dict[str, Any] | None = None
    workload: dict[str, Any] | None = None
    reference: str | None = None
    timing: dict[str, Any] | None = None
    peak_rss_all_contenders_mib: float | None = None
    rows: list[RealRow] | None = None
    skipped: list[Skipped] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def _parameters(config: Any, seq2seq: bool) -> int:
    """Parameters of a model, counted on an empty (meta-device) copy built from its config."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    with torch.device("meta"):
        m = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForSequenceClassification).from_config(config)
    return sum(p.numel() for p in m.parameters())


class RealShapes(Measurement):
    name = "real-shapes"
    summary = "real model sizes at the loop's defaults: the engines against CTranslate2, transformers, optimum"
    kind = "real_shapes"
    config_class = RealShapesConfig
    payload_class = RealShapesPayload
    legacy_scripts = ("bench_real_shapes.py",)

    def engines(self, config: RealShapesConfig) -> list[str]:
        text = config.contenders or (GEN_CONTENDERS if config.job == "generate" else CLF_CONTENDERS)
        out = [x.split(":")[0] for x in text.split(",") if x.strip() and not x.startswith("peer:")]
        peers = {"optimum": "optimum", "ct2": "ct2"}
        out += [peers[k] for x in text.split(",") if x.startswith("peer:") for k in peers if x[5:].startswith(k)]
        return list(dict.fromkeys(out))

    def run(self, config: RealShapesConfig, recorder: Any) -> RealShapesPayload:
        import numpy as np
        import torch

        from breaknli_fast.bench.measure import PeakMemory, Task, repeat_interleaved
        from breaknli_fast.bench.shapes import build_random_model, shape_name
        from breaknli_fast.bench.specs import BenchSpecError, parse_engine
        from breaknli_fast.bench.stages import workload_prompts
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines import cpu_features, registry
        from breaknli_fast.engines.base import Decoding
        from breaknli_fast.engines.cpu_features import physical_cores
        from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
        from breaknli_fast.prompts import GEN_PROMPTS
        from breaknli_fast.suite.peers import load_peer_classifier, load_peer_generator

        if config.job not in ("generate", "classify"):
            raise UserError(f"job {config.job!r}: generate or classify")
        generate = config.job == "generate"
        threads = config.threads or physical_cores()
        torch.set_num_threads(threads)
        peer_batch = config.peer_batch or (8 if generate else 32)
        wanted = [x.strip() for x in (config.contenders or (GEN_CONTENDERS if generate else CLF_CONTENDERS)).split(",")
                  if x.strip()]
        for text in [x for x in wanted if not x.startswith("peer:")]:
            try:  # a bad engine or option: one line, before any model is built
                parse_engine(text)
            except BenchSpecError as e:
                raise UserError(str(e)) from None
        data = load_examples("sample", limit=max(config.pairs, 4 * config.prompts))
        texts = [t for ex in data.examples for t in (ex.premise, ex.hypothesis)]
        if config.model is not None:
            from transformers import AutoConfig

            model = Path(config.model)
            shape = model.name
            meta = {"parameters": _parameters(AutoConfig.from_pretrained(model), generate)}
        else:
            shape = shape_name(config.generator if generate else config.classifier)
            model = build_random_model(shape, config.cache_dir, texts,
                                       log=lambda m: print(m, file=sys.stderr, flush=True))
            meta = json.loads((model / "random_weights.json").read_text())
        dec = Decoding(top_k=config.top_k, top_p=config.top_p, max_new_tokens=config.max_new_tokens,
                       min_new_tokens=config.max_new_tokens)
        loop = BreakNLIConfig(k=config.k, u=1, s=1, decoding=dec, seed=config.seed, prompts=dict(GEN_PROMPTS))
        items = workload_prompts(data.examples, loop, config.prompts)
        prompts, seeds = [x["prompt"] for x in items], [x["seed"] for x in items]
        pairs = [(ex.premise, ex.hypothesis) for ex in data.examples[: config.pairs]]

        contenders: list[dict[str, Any]] = []
        skipped: list[Skipped] = []

        def add(name: str, load: Callable[[], Any]) -> None:
            mem = PeakMemory().start()
            t0 = time.perf_counter()
            try:
                engine = load()
            except Exception as e:  # noqa: BLE001 - a contender that cannot load is reported, the others still run
                print(f"{name}: skipped: {first_line(e)}", file=sys.stderr, flush=True)
                skipped.append(Skipped(contender=name, reason=first_line(e)))
                gc.collect()
                return
            m = mem.read()
            if hasattr(engine, "prepare"):  # a peer's own preparation of the inputs (its tokens), not timed
                engine.prepare(prompts)
            if generate:
                fn = lambda g=engine: [r for rows in g.generate_ids(prompts, config.k, dec, seeds) for r in rows]  # noqa: E731
            else:
                def fn(c: Any = engine) -> Any:
                    c.clear_cache()
                    return np.asarray(c.classify(pairs).logits)
            contenders.append({"name": name, "fn": fn, "load_s": time.perf_counter() - t0,
                               "details": engine.info.to_dict(), "rss_after_load_mib": m["rss_now_mib"]})
            print(f"loaded {name} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)

        for text in wanted:
            if text.startswith("peer:"):
                peer = text[5:]
                known = (("transformers", "ct2-int8", "ct2-fp32", "ct2-int8-intra", "ct2-fp32-intra") if generate
                         else ("transformers", "optimum"))
                if peer not in known:
                    skipped.append(Skipped(contender=text, reason=f"unknown peer {peer!r} for --job {config.job}"))
                    continue
                add(text, (lambda p=peer: load_peer_generator(p, model, peer_batch, config.seed, threads)) if generate
                    else (lambda p=peer: load_peer_classifier(p, model, peer_batch)))
                continue
            spec = parse_engine(text)
            c_opts, g_opts = registry.split_options(spec.engine, spec.config.extra)
            if generate:
                add(f"{PROJECT}{spec.label}", lambda s=spec, o=g_opts: registry.load_generator(
                    s.engine, str(model), precision=s.precision, **{"threads": threads, **o}))
            else:
                add(f"{PROJECT}{spec.label}", lambda s=spec, o=c_opts: registry.load_classifier(
                    s.engine, str(model), precision=s.precision, **{"threads": threads, **o}))

        tasks = [Task(c["fn"]) for c in contenders]
        shared = PeakMemory().start()
        repeat_interleaved(tasks, warmup=config.warmup, min_iterations=config.min_iterations,
                           min_seconds=config.min_seconds)
        run_mem = shared.read()
        eos = pad = None
        if generate:
            from transformers import AutoTokenizer

            tok = AutoTokenizer.from_pretrained(model)
            eos, pad = int(tok.eos_token_id), int(tok.pad_token_id)

        def n_new(rows: list[list[int]]) -> int:
            """New tokens of generated rows: ids up to the first end token, padding and end token excluded."""
            n = 0
            for r in rows:
                for t in r:
                    if t == eos:
                        break
                    n += t != pad
            return n

        rows: list[RealRow] = []
        logits_of: dict[str, Any] = {}
        ref_name = f"{PROJECT}torch:fp32"
        for c, t in zip(contenders, tasks):
            if t.error is not None:
                skipped.append(Skipped(contender=c["name"], reason=f"failed: {first_line(t.error)}"))
                continue
            s = t.rep.summary()
            row = RealRow(contender=c["name"], load_s=c["load_s"], rss_after_load_mib=c["rss_after_load_mib"],
                          details=c["details"], **s)
            if generate:
                n = n_new(t.rep.result)
                row.sequences, row.new_tokens = len(t.rep.result), n
                row.tokens_per_s, row.tokens_per_s_best = n / s["median_s"], n / s["min_s"]
            else:
                row.pairs, row.pairs_per_s, row.pairs_per_s_best = (len(pairs), len(pairs) / s["median_s"],
                                                                    len(pairs) / s["min_s"])
                logits_of[c["name"]] = t.rep.result
            rows.append(row)
        by_name = {r.contender: r for r in rows}
        ref_logits = logits_of.get(ref_name)
        for r in rows:
            if generate:
                for key, name in (("vs_reference", config.generate_reference), ("vs_torch_fp32", ref_name)):
                    b = by_name.get(name) or by_name.get(f"{PROJECT}{name}")
                    setattr(r, key, r.tokens_per_s / b.tokens_per_s if b else None)
            else:
                b = by_name.get(ref_name)
                r.vs_torch_fp32 = r.pairs_per_s / b.pairs_per_s if b else None
                if ref_logits is not None:
                    logits = logits_of[r.contender]
                    r.max_abs_logit_vs_torch_fp32 = float(np.abs(logits - ref_logits).max())
                    r.label_agreement_vs_torch_fp32_pct = float((logits.argmax(1) == ref_logits.argmax(1)).mean()
                                                                * 100)
            print(f"{r.contender:<44} median {r.median_s:.3f} s  "
                  + (f"{r.tokens_per_s:.0f} tokens/s" if generate else f"{r.pairs_per_s:.1f} pairs/s"), flush=True)
        return RealShapesPayload(
            job=config.job, shape=shape, parameters=meta["parameters"], model_dir=str(model),
            random_weights=config.model is None, threads=threads, cpu_features=cpu_features.summary(),
            workload=({"prompts": len(prompts), "k": config.k, "max_new_tokens": config.max_new_tokens,
                       "fixed_length": True, "top_k": config.top_k, "top_p": config.top_p,
                       "peer_batch_prompts": peer_batch}
                      if generate else {"pairs": len(pairs), "peer_batch_pairs": peer_batch}),
            reference=config.generate_reference if generate else ref_name,
            timing={"warmup": config.warmup, "min_iterations": config.min_iterations,
                    "min_seconds": config.min_seconds, "interleaved": True},
            peak_rss_all_contenders_mib=run_mem["peak_rss_mib"], rows=rows, skipped=skipped)


# -- BENCHMARKS.md: the real shapes ----------------------------------------------------------------------------

def real_shapes_title(doc: ResultFile) -> str:
    p: RealShapesPayload = doc.payload
    kind = ", random weights" if dig(p, "random_weights", default=True) else ""
    return f"{p.job}: {p.shape} ({f((p.parameters or 0) / 1e6, '.1f')} M parameters{kind})"


def real_shapes(doc: ResultFile) -> str:
    p: RealShapesPayload = doc.payload
    w = p.workload or {}
    gen = p.job == "generate"
    cpu = p.cpu_features or {}
    rows = []
    for r in p.rows or []:
        d = r.details or {}
        dd = d.get("details") or {}
        prec = d.get("precision")
        kernel = ((dd.get("int8_kernel") if prec == "int8" else None) or dd.get("compute_type")
                  or d.get("compute_type") or d.get("runtime") or (prec or ""))
        if gen:
            rows.append([r.contender, r.iterations, f(r.median_s, ".2f"), r.new_tokens,
                         f(r.tokens_per_s, ".0f"), f(r.vs_reference, ".2f", "×"),
                         f(r.vs_torch_fp32, ".2f", "×"), kernel])
        else:
            rows.append([r.contender, r.iterations, f(r.median_s, ".2f"),
                         f(r.pairs_per_s, ".1f"), f(r.vs_torch_fp32, ".2f", "×"),
                         f(r.label_agreement_vs_torch_fp32_pct, ".1f", " %"),
                         f(r.max_abs_logit_vs_torch_fp32, ".2g"), kernel])
    for sk in p.skipped or []:
        rows.append([sk.contender, f"skipped: {sk.reason}"] + [""] * 6)
    if gen:
        lead = (f"{w.get('prompts')} prompts × K = {w.get('k')}, exactly {w.get('max_new_tokens')} new tokens each "
                f"(top-k {w.get('top_k')}, top-p {w.get('top_p')}); peers {w.get('peer_batch_prompts')} prompts a call")
        header = ["contender", "iterations", "median s", "new tokens", "tokens/s",
                  f"vs {p.reference}", "vs torch:fp32", "kernel / runtime"]
    else:
        lead = (f"{w.get('pairs')} premise / hypothesis pairs of the embedded SNLI sample; peers "
                f"{w.get('peer_batch_pairs')} pairs a call")
        header = ["contender", "iterations", "median s", "pairs/s", "vs torch:fp32", "label agreement with torch fp32",
                  "max abs Δ logit", "kernel / runtime"]
    flags = ", ".join(cpu.get("flags") or []) or "none read"
    caveat = ("" if not dig(p, "random_weights", default=True) else
              " Random weights: speed only" + ("." if gen else "; the label agreement of near-tied random logits says "
                                               "little (max |Δ logit| does tell a correct fp32 path)."))
    return "\n".join([f"{lead}; {p.threads} threads; all contenders loaded first, then timed in rounds "
                      f"(median). CPU flags: {flags}.{caveat}", "", table(header, rows)])


# -- BENCHMARKS.md: the generator per transformers stack ------------------------------------------------------

def stack_files(results: Results) -> list[ResultFile]:
    """Generator measurements on each transformers stack (``gen-stacks-*``: one file per stack, prompt count, and
    for the comparison with an earlier commit, per commit)."""
    return sorted([r for r in of_kind("real_shapes")(results) if feeds("1/gen-stacks")(r)],
                  key=lambda r: (str(dig(r, "machine", "packages", "transformers")),
                                 dig(r, "payload", "workload", "prompts") or 0, str(r.date)))


STACK_CONTENDERS = (("torch fp32", PROJECT + "torch:fp32"), ("ort fp32", PROJECT + "ort:fp32"),
                    ("ort int8", PROJECT + "ort:int8:validate=false"), ("CTranslate2 fp32", "peer:ct2-fp32"),
                    ("CTranslate2 int8", "peer:ct2-int8"))


def gen_stacks(results: Results, label: str) -> str:
    """The ort generator on transformers 4.57 and 5.x (and the commit before the project's own T5 export, where
    measured): tokens/s per contender, CTranslate2 in the same run, the ratios to it."""
    files = stack_files(results)
    if not files:
        return not_measured("a generator measurement per transformers stack", "real-shapes", label)
    rows = []
    for doc in files:
        by = {r.contender: r for r in dig(doc, "payload", "rows") or []}
        tps = {name: dig(by.get(key), "tokens_per_s") for name, key in STACK_CONTENDERS}

        def ratio(a: str, b: str) -> str:
            return f(tps[a] / tps[b], ".2f", "×") if tps.get(a) and tps.get(b) else "–"

        wl = dig(doc, "payload", "workload") or {}
        rows.append([dig(doc, "machine", "packages", "transformers"), f"`{str(doc.commit)[:12]}`",
                     f"{wl.get('prompts')} × {wl.get('k')}"] + [f(tps[n], ",.0f") for n, _ in STACK_CONTENDERS]
                    + [ratio("ort fp32", "CTranslate2 fp32"), ratio("ort int8", "CTranslate2 int8"), f"`{doc.name}`"])
    m = files[0].machine
    head = ["transformers", "commit", "prompts × K"] + [f"{n} tokens/s" for n, _ in STACK_CONTENDERS] + [
        "ort fp32 / CT2 fp32", "ort int8 / CT2 int8", "file"]
    return "\n".join([
        "flan-t5-small shape (random weights), K = 20, exactly 40 new tokens, top-k 50 / top-p 0.95; each row one run "
        "of `breaknli-fast suite measure real-shapes` with every contender timed in rounds (median), so the ratios to "
        "CTranslate2 compare within a run. The commit column tells the project's own T5 export (this code) from an "
        f"earlier one where a row of it was measured. Machine of the first file: {dig(m, 'cpu')}, {dig(m, 'cores')} "
        "cores.", "", table(head, rows)])


RealShapes.sections = (
    Section("1/targets", "The targets at the sizes users run", "a real-shape measurement",
            lambda rs: real_shape_files(rs) + real_loop_files(rs), 10, summary=real_targets, summary_always=False),
    Section("1/gen-stacks", "The ort generator on both transformers stacks, against CTranslate2",
            "a generator measurement per stack", stack_files, 30, summary=gen_stacks),
    Section("1/real-shapes", "Real shapes at the loop's defaults against CTranslate2, transformers and optimum",
            "a real-shape measurement", real_shape_files, 60, render=real_shapes, file_title=real_shapes_title),
)
