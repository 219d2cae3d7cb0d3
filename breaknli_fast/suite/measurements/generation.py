"""Generation alone (kind ``generation``): tokens/s of each generator engine under the sampling variants.

The same prompts (the contradiction prompt on the first ``prompts`` sample hypotheses), K candidates each, one seed
per prompt; every variant is timed ``repeats`` times after one warm-up call, in rounds (all variants, then all
again), the median reported. Variants: the ``fast`` and ``transformers`` samplers, and compaction (dropping
finished rows) on / off. Also whether each engine's candidates equal those of the first engine under the same
variant. Engines are written as for ``breaknli-fast bench`` (``ENGINE:PRECISION[:key=value...]``), e.g.
``ort:int8:graph_topk=false`` samples on the decoder graph's full logits instead of its own top-k.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from breaknli_fast.errors import UserError
from breaknli_fast.limits import MAX_GEN_BATCH, MAX_REPEATS
from breaknli_fast.probes.breaknli.loop import MAX_K
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import f, of_kind, table, yes_no
from breaknli_fast.suite.result import ResultFile

VARIANTS = {  # name: (sampler, compact_share)
    "fast": ("fast", 0.25),
    "fast-no-compaction": ("fast", None),
    "transformers": ("transformers", 0.25),
    "transformers-no-compaction": ("transformers", None),
}


@dataclass
class GenerationConfig:
    engines: str = option("torch:fp32,ort:fp32,ort:int8", help="generator engines, ENGINE:PRECISION[:key=value...]")
    generator: str = option("mini-t5", help="the generator (a name or a folder)")
    prompts: int = option(32, min=1, max=2724, why="the embedded sample's hypotheses", help="prompts")
    k: int = option(20, min=1, max=MAX_K, help="candidates per prompt")
    repeats: int = option(3, min=1, max=MAX_REPEATS, help="timed rounds (median)")
    threads: Optional[int] = option(None, min=1, help="torch threads and ORT intra-op threads")
    variants: str = option(",".join(VARIANTS), help=f"sampling variants, comma-separated ({', '.join(VARIANTS)})")
    prompt_batch: Optional[int] = option(None, min=1, max=MAX_GEN_BATCH,
                                         help="prompts per generator batch (default: the engine's, 8)")


@dataclass
class GenerationRow:
    engine: str | None = None
    variant: str | None = None
    median_s: float | None = None
    tokens: int | None = None
    tokens_per_s: float | None = None
    speedup_vs_first_fast: float | None = None
    same_candidates_as_first_engine: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationPayload:
    generator: str | None = None
    prompts: int | None = None
    k: int | None = None
    repeats: int | None = None
    threads: int | None = None
    prompt_batch: int | None = None
    engines: list[str] | None = None
    variants: list[str] | None = None
    rows: list[GenerationRow] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Generation(Measurement):
    name = "generation"
    summary = "generation alone: tokens/s of each generator engine under the sampling variants"
    kind = "generation"
    config_class = GenerationConfig
    payload_class = GenerationPayload
    legacy_scripts = ("bench_generation.py",)

    def run(self, config: GenerationConfig, recorder: Any) -> GenerationPayload:
        from breaknli_fast.bench.specs import parse_engine
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines.base import Decoding
        from breaknli_fast.engines.registry import load_generator
        from breaknli_fast.prompts import CONTRADICT_PROMPT

        variants = [v.strip() for v in config.variants.split(",") if v.strip()]
        bad = [v for v in variants if v not in VARIANTS]
        if bad or not variants:
            raise UserError(f"variants: unknown {', '.join(bad) or '(none given)'} (known: {', '.join(VARIANTS)})")
        if config.threads:
            import torch

            torch.set_num_threads(config.threads)
        exs = load_examples("sample", limit=config.prompts).examples
        prompts = [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in exs]
        seeds = list(range(len(prompts)))
        engines = {}
        for text in config.engines.split(","):
            spec = parse_engine(text)  # the bench's own ENGINE:PRECISION[:key=value...] syntax
            kw = {"threads": config.threads} if config.threads else {}  # every engine's loader takes them
            engines[text] = load_generator(spec.engine, spec.generator or config.generator, spec.precision, "cpu",
                                           **kw, **spec.config.extra)
            if config.prompt_batch:
                engines[text].prompt_batch = config.prompt_batch
        times: dict[tuple[str, str], list[float]] = {}
        tokens: dict[tuple[str, str], int] = {}
        outputs: dict[tuple[str, str], list] = {}
        for g in engines.values():  # warm-up
            g.generate_ids(prompts[:4], config.k, Decoding(max_new_tokens=8), seeds[:4])
        for _ in range(config.repeats):
            for v in variants:
                sampler, share = VARIANTS[v]
                dec = Decoding(sampler=sampler)
                for spec, g in engines.items():
                    g.compact_share = share
                    t0 = time.perf_counter()
                    ids = g.generate_ids(prompts, config.k, dec, seeds)
                    times.setdefault((spec, v), []).append(time.perf_counter() - t0)
                    tokens[(spec, v)] = sum(len(r) for rows in ids for r in rows)
                    outputs[(spec, v)] = ids
        first = next(iter(engines))
        base = statistics.median(times[(first, variants[0])])
        rows = []
        for v in variants:
            for spec in engines:
                med = statistics.median(times[(spec, v)])
                rows.append(GenerationRow(engine=spec, variant=v, median_s=round(med, 3), tokens=tokens[(spec, v)],
                                          tokens_per_s=round(tokens[(spec, v)] / med, 1),
                                          speedup_vs_first_fast=round(base / med, 2),
                                          same_candidates_as_first_engine=outputs[(spec, v)] == outputs[(first, v)]))
        return GenerationPayload(generator=config.generator, prompts=len(prompts), k=config.k,
                                 repeats=config.repeats, threads=config.threads, prompt_batch=config.prompt_batch,
                                 engines=list(engines), variants=variants, rows=rows)


def generation(doc: ResultFile) -> str:
    p: GenerationPayload = doc.payload
    rows = [[r.engine, r.variant, f(r.median_s, ".3f"), r.tokens, f(r.tokens_per_s, ".0f"),
             f(r.speedup_vs_first_fast, ".2f", "×"), yes_no(r.same_candidates_as_first_engine)]
            for r in p.rows or []]
    return "\n".join([f"Generator `{p.generator}`: {p.prompts} prompts × K={p.k}, one seed per prompt, "
                      f"repeats: {p.repeats} in rounds (median); threads: {p.threads or 'default'}; prompt batch: "
                      f"{p.prompt_batch or 'default'}.", "",
                      table(["engine", "sampling", "median s", "tokens", "tokens/s", "speed-up vs first engine, first variant",
                             "same candidates as first engine"], rows)])


Generation.sections = (
    Section("1/generation", "Generation alone: samplers, compaction, engines", "the generation timing",
            of_kind("generation"), 80, render=generation),
)
