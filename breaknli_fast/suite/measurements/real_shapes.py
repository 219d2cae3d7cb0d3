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

Its sections: the targets at the sizes users run (with the loop end to end at real shapes, bench files), the
generator on each transformers stack, and the real shapes' tables.
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
from breaknli_fast.suite.format import (DEFAULT_INT8, PER_TENSOR, PROJECT, blank, dig, f, feeds, not_measured,
                                        of_kind, table)
from breaknli_fast.suite.measurements.bench import (is_random, parity_files, probe_of, random_title, shown,
                                                    trained_engine)
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


# -- BENCHMARKS.md: the targets --------------------------------------------------------------------------------

# the targets at the sizes users run: (job, what is required, the bar)
REAL_TARGETS = (
    ("generate", "generator tokens/s ≥ 1.2× CTranslate2 int8 (its faster thread setting), K = 20", 1.2),
    ("classify", "classifier pairs/s ≥ 3× torch fp32, ≥ 1,000 pairs", 3.0),
    ("loop", "the loop end to end ≥ 3× torch fp32, K = 20", 3.0),
    ("classify-invariant", "the default batch-invariant int8 classifier ≥ 3× torch fp32 and ≥ 1.0× ONNX Runtime's "
     "per-tensor int8 (batch-dependent) in the same run, ≥ 512 pairs", 3.0),
    ("loop-faithful", "the faithful loop end to end ≥ 2.5× torch fp32, K = 20 (generator token-identical to torch's, "
     "classifier fp32 or at the 99.9 % tier and not shown to differ)", 2.5),
    ("bucket", "the default batch-invariant int8 classifier's largest bucket ≥ 50 % of the int8 ceiling "
     "(in the loop, K = 20)", 0.5),
)
TIER = 99.9  # % of the reference's accuracy a lower-precision classifier keeps to count as faithful


def spec_parts(label: str) -> dict[str, str]:
    """engine, precision and role precisions of an engine label (``ort:fp32:clf.precision=int8``; options that do
    not change the arithmetic, ``validate=`` / ``label=``, dropped)."""
    bare = str(label).replace(PROJECT, "")
    if "/" in bare and bare.startswith(("gen=", "clf=")):  # an engine per role: base is the label, cleaned per role
        return {"engine": bare, "precision": "", "clf": "", "gen": "",
                "base": "/".join(spec_parts(x)["base"] for x in bare.split("/"))}
    parts = [x for x in bare.split(":") if x and not x.startswith(("validate=", "label="))]
    out = {"engine": parts[0] if parts else "", "precision": parts[1] if len(parts) > 1 else "fp32",
           "base": ":".join(parts)}
    opts = dict(x.split("=", 1) for x in parts[2:] if "=" in x)
    out["clf"] = opts.get("clf.precision", out["precision"])
    out["gen"] = opts.get("gen.precision", out["precision"])
    return out


def classifier_labels(sp: dict[str, str]) -> list[str]:
    """Labels under which the trained-model files may hold the same classifier with a generator at fp32: the label
    itself, and the component-split run of the engine at the classifier's precision (``ort:int8 classifier
    only``: that classifier beside the fp32 generator)."""
    return [sp["base"], f"{sp['engine']}:{sp['clf']} classifier only"]


def batch_dependent(results: Results, sp: dict[str, str]) -> str | None:
    """Why the engine's classifier answers depend on the other pairs of its call, or None: measured in the
    batch-invariance file (a pair alone / batched / reversed / chunks of 7 not bit-equal), else known from its
    options (ONNX Runtime's per-tensor dynamic int8)."""
    base = f"{sp['engine']}:{sp['clf']}"
    opts = [x for x in sp["base"].split(":")[2:] if not x.startswith(("clf.precision=", "gen.precision="))]
    name = ":".join([base, *opts])
    for doc in (r for r in results if r.kind == "bench" and feeds("2/batch-invariance")(r)):
        for e in dig(doc, "payload", "engines") or []:
            if getattr(e, "label", None) == name and getattr(e, "batch_invariance", None) is not None:
                b = e.batch_invariance
                diffs = [b.max_abs_logit_diff, b.reversed_max_abs_logit_diff, b.chunked_max_abs_logit_diff]
                if b.labels_changed or any(d for d in diffs if d):
                    return (f"its answers depend on the batch ({b.labels_changed} of {b.pairs} labels change, "
                            f"`{doc.name}`)")
                return None
    if "quantization=dynamic-batch" in opts:
        return "its answers depend on the batch (per-tensor dynamic int8)"
    return None


def contender_spec(doc: ResultFile, contender: str) -> str:
    """A real-shape row's engine spec: its label (``label=NAME`` of the recorded contenders) resolved to the spec
    it names, so that the label does not hide its precision and options."""
    name = contender.replace(PROJECT, "")
    for item in str(dig(doc, "measurement", "args", "contenders") or "").split(","):
        if f"label={name}" in item.split(":"):
            return PROJECT + item
    return contender


def mixed_faithful(results: Results, label: str, role: str | None = None) -> tuple[bool, str] | None:
    """:func:`faithful` of an engine per role (``gen=ort:fp32/clf=openvino:int8``): each role's engine judged alone,
    the BreakNLI file searched under the whole label too; None for a plain label."""
    bare = str(label).replace(PROJECT, "")
    if "/" not in bare or not bare.startswith(("gen=", "clf=")):
        return None
    parts = dict(x.split("=", 1) for x in bare.split("/") if "=" in x)
    why = []
    for r in ("generator", "classifier"):
        spec = parts.get({"generator": "gen", "classifier": "clf"}[r])
        if spec is None or role not in (None, r):
            continue
        ok, because = faithful(results, spec, r, also=[bare] if r == "classifier" else None)
        if not ok:
            return False, because
        why.append(because)
    return True, "; ".join(why)


def faithful(results: Results, label: str, role: str | None = None,
             also: list[str] | None = None) -> tuple[bool, str]:
    """Whether an engine keeps the reference's answer (the issue's "faithful"), and why: its generator is the
    torch, ort or openvino engine at fp32 (token-identical to torch's: tests and the trained-model BreakNLI file); its
    classifier is fp32, or reaches the :data:`TIER` % of torch fp32's accuracy on all 2,724 evaluation pairs
    (probe-accuracy) and is not shown to differ on BreakNLI with all its cells judged together (the trained-model
    BreakNLI file), the same engine label measured there (or, for the classifier, beside an fp32 generator:
    ``gen=ort:fp32/clf=...``; ``also``: more labels to look for); an engine whose answers depend on the batch is not
    (:func:`batch_dependent`). ``role``: judge one role only; an engine per role is judged per role."""
    mixed = mixed_faithful(results, label, role)
    if mixed is not None:
        return mixed
    sp = spec_parts(label)
    why = []
    if role in (None, "generator"):
        if sp["engine"] not in ("torch", "ort", "openvino") or sp["gen"] != "fp32":
            return False, f"generator {sp['engine']} {sp['gen']} (not token-identical)"
        why.append("generator fp32 (token-identical)")
    if role in (None, "classifier"):
        dependent = batch_dependent(results, sp)
        if dependent:
            return False, f"classifier {sp['clf']}: {dependent}"
        if sp["clf"] == "fp32":
            why.append("classifier fp32")
        else:
            acc = trained_engine(results, "accuracy", [sp["base"], f"{sp['engine']}:{sp['clf']}"])
            m = next(iter((dig(acc, "parity", "headline", "metrics") or {}).values()), None) if acc else None
            if blank(m) or not dig(m, "b"):
                return False, f"classifier {sp['clf']}: no trained-model accuracy file for `{sp['base']}`"
            tier = 100.0 * m.a / m.b
            if tier < TIER:
                return False, f"classifier {sp['clf']}: {tier:.2f} % of fp32's accuracy (< {TIER} %)"
            alone = f"{sp['engine']}:{sp['clf']} classifier only"
            labels = ([alone, sp["base"]] if role == "classifier" else classifier_labels(sp) if sp["gen"] == "fp32"
                      else [sp["base"]])
            if role == "classifier":
                labels += [*(also or []), *(f"gen={g}:fp32/clf={sp['base']}" for g in ("torch", "ort", "openvino"))]
            brk = trained_engine(results, "breaknli", labels)
            if brk is None:
                return False, f"classifier {sp['clf']}: {tier:.2f} % of fp32's accuracy; BreakNLI not measured"
            if shown(brk) == "no":
                return False, f"classifier {sp['clf']}: {tier:.2f} % of fp32's accuracy; BreakNLI shown to differ"
            why.append(f"classifier {sp['clf']} at {tier:.2f} % of fp32's accuracy, BreakNLI {shown(brk)} to match "
                       "(not shown to differ)")
    return True, "; ".join(why)


def real_loop_files(results: Results) -> list[ResultFile]:
    """``bench`` files of the loop at real shapes (``bench-real-loop-*``, random weights)."""
    return [r for r in results if r.kind == "bench" and is_random(r) and feeds("1/targets")(r)]


def real_shape_files(results: Results) -> list[ResultFile]:
    """The real-shape measurements of the targets (the per-stack generator runs have a section of their own)."""
    return [r for r in of_kind("real_shapes")(results) if not feeds("1/gen-stacks")(r)]


def _contender(r: RealRow) -> str:
    return str(r.contender if r.contender is not None else "")


def invariant_row(rows: list[dict[str, Any]], doc: ResultFile, ours: list[RealRow], bar: RealRow, key: str,
                  faithful_best: tuple[str, float | None, str]) -> None:
    """The default batch-invariant int8 classifier of a real-shape file against torch fp32 and, in the same run,
    ONNX Runtime's per-tensor int8 (met when both bars hold); beside it the file's best faithful classifier, as
    the classify row's."""
    by = {spec_parts(_contender(r).replace(PROJECT, ""))["base"]: r for r in ours}
    by.update({str(dig(r, "label")): r for r in ours if dig(r, "label")})
    mine = next((by[e] for e in DEFAULT_INT8 if e in by), None)
    tensor = next((by[e] for e in PER_TENSOR if e in by), None)
    if mine is None or (dig(doc, "payload", "workload", "pairs") or 0) < 512:
        return
    vs_tensor = getattr(mine, key) / getattr(tensor, key) if tensor else None
    ratio = getattr(mine, key) / getattr(bar, key)
    name = _contender(mine)[len(PROJECT):]
    rows.append({"job": "classify-invariant", "shape": dig(doc, "payload", "shape"), "best": name,
                 "figure": f"{getattr(mine, key):,.0f} pairs/s vs torch:fp32 {getattr(bar, key):,.0f}; "
                           + (f"{vs_tensor:.2f}× the per-tensor int8 ({getattr(tensor, key):,.0f})" if tensor
                              else "per-tensor int8 not in this run"),
                 "ratio": ratio, "met": ratio >= 3.0 and vs_tensor is not None and vs_tensor >= 1.0,
                 "doc": doc, "faithful": faithful_best})


def real_target_rows(results: Results) -> list[dict[str, Any]]:
    """One row per real-shape file: the job, the shape, the best breaknli-fast engine, its figure against the
    target's yardstick, and the file's provenance; beside it the best *faithful* engine (:func:`faithful`) and
    its ratio."""
    rows: list[dict[str, Any]] = []

    def best_faithful(cands: list[Any], name: Callable[[Any], str], ratio: Callable[[Any], float],
                      role: str | None) -> tuple[str, float | None, str]:
        ok = [(c, faithful(results, name(c), role)) for c in cands]
        ok = [(c, why) for c, (yes, why) in ok if yes]
        if not ok:
            return "none", None, ""
        c, why = max(ok, key=lambda t: ratio(t[0]))
        return spec_parts(name(c))["base"], ratio(c), why

    for doc in real_shape_files(results):
        p: RealShapesPayload = doc.payload
        gen = p.job == "generate"
        key = "tokens_per_s" if gen else "pairs_per_s"
        contenders = [r for r in p.rows or [] if getattr(r, key)]
        ours = [r for r in contenders if _contender(r).startswith(PROJECT)]
        if gen:
            bars = [r for r in contenders if _contender(r).startswith("peer:ct2-int8")]
        else:
            bars = [r for r in contenders if r.contender == PROJECT + "torch:fp32"]
            ours = [r for r in ours if r is not bars[0]] if bars else ours
        if not ours or not bars:
            continue
        best, bar = max(ours, key=lambda r: getattr(r, key)), max(bars, key=lambda r: getattr(r, key))
        unit = "tokens/s" if gen else "pairs/s"
        fb = best_faithful(ours, lambda r: contender_spec(doc, _contender(r)), lambda r: getattr(r, key) / getattr(bar, key),
                           "generator" if gen else "classifier")
        rows.append({"job": p.job, "shape": p.shape, "best": _contender(best)[len(PROJECT):],
                     "figure": f"{getattr(best, key):,.0f} {unit} vs {_contender(bar).replace(PROJECT, '')} "
                               f"{getattr(bar, key):,.0f}",
                     "ratio": getattr(best, key) / getattr(bar, key), "doc": doc, "faithful": fb})
        if not gen:
            invariant_row(rows, doc, ours, bar, key, fb)
    for doc in real_loop_files(results):
        engines = [e for e in dig(doc, "payload", "engines") or [] if e.status == "ok"]
        speed = lambda e: dig(e, "speed", "speedup", "end_to_end")  # noqa: E731
        others = [e for e in engines[1:] if speed(e) is not None and not e.component_of]
        if not others:
            continue
        best = max(others, key=speed)
        fb = best_faithful(others, lambda e: e.label, speed, None)
        rows.append({"job": "loop", "shape": random_title(doc), "best": best.label,
                     "figure": f"end to end vs {engines[0].label}", "doc": doc, "ratio": speed(best), "faithful": fb})
        if fb[1] is not None:
            rows.append({"job": "loop-faithful", "shape": random_title(doc), "best": fb[0],
                         "figure": f"end to end vs {engines[0].label} ({fb[2]})", "doc": doc,
                         "ratio": fb[1], "faithful": fb})
        bucket_row(rows, doc, engines)
    return rows


def _classifier_spec(label: str) -> str:
    """The classifier's engine:precision of a bench label (``gen=ort:fp32/clf=openvino:int8`` -> openvino:int8;
    ``ort:fp32:clf.precision=int8`` -> ort:int8)."""
    bare = str(label).replace(PROJECT, "")
    if "/" in bare and bare.startswith(("gen=", "clf=")):
        parts = dict(x.split("=", 1) for x in bare.split("/") if "=" in x)
        bare = parts.get("clf", "")
    sp = spec_parts(bare)
    return f"{sp['engine']}:{sp['clf']}"


def bucket_row(rows: list[dict[str, Any]], doc: ResultFile, engines: list[Any]) -> None:
    """The largest bucket of the default batch-invariant int8 classifier (:data:`DEFAULT_INT8`, named in the
    label) against the int8 ceiling: per engine, the bucket with the most tokens per batch over its classify stages;
    the best engine's."""
    found = []
    for e in engines:
        if _classifier_spec(e.label) not in DEFAULT_INT8:
            continue
        buckets = [(k, b) for k, st in (dig(e, "speed", "stages") or {}).items()
                   if (b := dig(st, "roofline", "largest_bucket")) is not None and not blank(b)
                   and dig(st, "roofline", "ceiling") == "int8" and dig(b, "pct_of_ceiling") is not None]
        if buckets:
            stage, b = max(buckets, key=lambda t: (dig(t[1], "width") * dig(t[1], "rows"), dig(t[1], "width")))
            found.append((e, stage, b))
    if not found:
        return
    e, stage, b = max(found, key=lambda t: dig(t[2], "pct_of_ceiling"))
    pct = float(dig(b, "pct_of_ceiling"))
    rows.append({"job": "bucket", "shape": random_title(doc), "best": str(e.label).replace(PROJECT, ""),
                 "figure": (f"{stage}'s {dig(b, 'width')} tokens x {dig(b, 'rows'):.1f} rows: "
                            f"{dig(b, 'attained_ops_per_s') / 1e9:,.0f} of {dig(b, 'compute_ops_per_s') / 1e9:,.0f} "
                            f"G op/s"), "ratio": pct / 100.0, "ratio_text": f"{pct:.1f} %", "doc": doc})


def trained_parity(results: Results, engine: str) -> str:
    """Whether ``engine`` (its options for random weights dropped) was shown to match the torch fp32 reference on
    the trained models, per probe of the parity table (section 2b): yes / no / not shown."""
    base = ":".join(x for x in engine.split(":") if not x.startswith("validate="))
    cells = []
    for probe in dict.fromkeys(probe_of(doc) for doc in parity_files(results)):
        e = trained_engine(results, probe, [base])  # the probe's file of the most examples that measured it
        if e is not None:
            cells.append(f"{probe}: {shown(e)}")
    return "; ".join(cells) or "not measured"


def real_targets(results: Results, label: str) -> str:
    """The issue-style summary: each target, the best engine's measured ratio per shape, met or not, and whether
    that engine was shown to match the reference on the trained models."""
    rows = real_target_rows(results)
    if not rows:
        return not_measured("a real-shape measurement", "real-shapes", label)
    out = []
    for job, what, bar in REAL_TARGETS:
        mine = [r for r in rows if r["job"] == job]
        if not mine:
            out.append([what, "–", "not measured", "–", "–", "–", "–", "–", "–"])
        for r in mine:
            d = r["doc"]
            fname, fratio, _ = r.get("faithful") or ("none", None, "")
            out.append([what, r["shape"], f"{r['best']}: {r['figure']}", r.get("ratio_text") or f(r["ratio"], ".2f", "×"),
                        "met" if r.get("met", r["ratio"] >= bar) else "**not met**",
                        f"{fname}: {f(fratio, '.2f', '×')}" if fratio is not None else "none measured",
                        trained_parity(results, r["best"]),
                        f"{dig(d, 'machine', 'cpu')}, {dig(d, 'machine', 'cores')} cores",
                        f"`{d.name}`, {d.date}, `{d.commit}`"])
    return "\n".join([
        "The best breaknli-fast engine per target and shape, from the files below (random weights of the real "
        "architectures: speed only). Beside it, whether the same engine was shown to match the torch fp32 "
        "reference on the trained mini models, per probe (section 2b: yes = every cell equivalent, no = a cell "
        "stays different with all the engine's cells judged together, not shown = neither). The faithful column "
        f"ranks only the engines that keep the reference's answer: a generator at fp32 on torch or ort (its candidates "
        f"are torch's token for token) and a classifier at fp32, or one that keeps ≥ {TIER} % of torch fp32's "
        "accuracy on all 2,724 evaluation pairs and is not shown to differ on BreakNLI with all its cells judged "
        "together (the trained-model files of section 2b, same engine label). Each row is one file, measured on "
        "the machine it names: a ratio compares engines within that file's run, never across machines.", "",
        table(["target", "shape", "best engine: figure", "ratio", "", "faithful: best engine that keeps the answer",
               "best engine shown to match on trained models", "machine", "file, date, commit"], out)])


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
