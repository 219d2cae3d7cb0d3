"""The generator's batching against the sampler it replaced (kind ``generation_batch``): tokens/s of the generate
stage, before and after.

"before" is the sampler and torch stepper of commit ``before`` (default b9c61c0, the last one before --gen-batch:
one copy of the encoder output per sample, the fast sampler's per-row Python bookkeeping), read from git and run
over the same engine objects; "after" is this checkout's generator at the ``gen_batch`` sizes. The same prompts
(the contradiction prompt on the first ``prompts`` sample hypotheses), K samples each, one seed per prompt; one
warm-up call each, then ``repeats`` rounds that time every variant in turn, the median reported. Every variant's
tokens are checked against "before" at the same batch.
"""

from __future__ import annotations

import importlib.util
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from breaknli_fast.errors import UserError
from breaknli_fast.limits import MAX_GEN_BATCH, MAX_REPEATS
from breaknli_fast.probes.breaknli.loop import MAX_K
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import f, of_kind, table, yes_no
from breaknli_fast.suite.result import ResultFile


@dataclass
class GenerationBatchConfig:
    engines: str = option("torch:fp32,ort:fp32", help="generator engines, ENGINE:PRECISION[:key=value...]")
    generator: str = option("mini-t5", help="the generator (a name or a folder)")
    prompts: int = option(64, min=1, max=2724, why="the embedded sample's hypotheses", help="prompts")
    k: int = option(20, min=1, max=MAX_K, help="candidates per prompt")
    gen_batch: str = option("8,16,32", help="prompts per batch of the 'after' variants, comma-separated")
    before: str = option("b9c61c0", help="the commit whose sampler is 'before' (8 prompts per batch)")
    repeats: int = option(3, min=1, max=MAX_REPEATS, help="timed rounds (median)")
    threads: Optional[int] = option(None, min=1, help="torch threads and ORT intra-op threads")


@dataclass
class GenerationBatchRow:
    engine: str | None = None
    variant: str | None = None
    gen_batch: int | None = None
    median_s: float | None = None
    seconds: list[float] | None = None
    tokens: int | None = None
    tokens_per_s: float | None = None
    speedup_vs_before: float | None = None
    same_tokens_as_before: bool | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class GenerationBatchPayload:
    generator: str | None = None
    prompts: int | None = None
    k: int | None = None
    repeats: int | None = None
    threads: int | None = None
    before_commit: str | None = None
    engines: list[str] | None = None
    gen_batches: list[int] | None = None
    rows: list[GenerationBatchRow] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def legacy_sampling(commit: str) -> Any:
    """The ``breaknli_fast.engines.sampling`` module of ``commit`` (imported under another name)."""
    from breaknli_fast.suite.provenance import ROOT

    proc = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:breaknli_fast/engines/sampling.py"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise UserError(f"before: no sampler at commit {commit} in this checkout's history "
                        f"({proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else 'git failed'})")
    path = Path(tempfile.mkdtemp()) / "legacy_sampling.py"
    path.write_text(proc.stdout)
    spec = importlib.util.spec_from_file_location("legacy_sampling", path)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod


class GenerationBatch(Measurement):
    name = "generation-batch"
    summary = "the generator's batches (--gen-batch) against the sampler of an earlier commit"
    kind = "generation_batch"
    config_class = GenerationBatchConfig
    payload_class = GenerationBatchPayload
    requires = ("git",)
    legacy_scripts = ("bench_gen_batch.py",)

    def run(self, config: GenerationBatchConfig, recorder: Any) -> GenerationBatchPayload:
        from breaknli_fast.bench.specs import parse_engine
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines.base import Decoding
        from breaknli_fast.engines.registry import load_generator
        from breaknli_fast.prompts import CONTRADICT_PROMPT

        try:
            batches = [int(x) for x in config.gen_batch.split(",") if x.strip()]
        except ValueError:
            raise UserError(f"gen_batch {config.gen_batch!r}: comma-separated whole numbers") from None
        if not batches or any(not 1 <= b <= MAX_GEN_BATCH for b in batches):
            raise UserError(f"gen_batch {config.gen_batch!r}: each between 1 and {MAX_GEN_BATCH}")
        old = legacy_sampling(config.before)
        exs = load_examples("sample", limit=config.prompts).examples
        prompts = [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in exs]
        seeds = list(range(len(prompts)))
        dec = Decoding()

        def before_ids(gen: Any) -> list:
            """The former sampler over the engine's own stepper (the ort engine's; for torch the former stepper),
            8 prompts per batch as its generator did."""
            cfg, tok = gen.config, gen.tokenizer
            start, eos, pad = int(cfg.decoder_start_token_id or 0), int(cfg.eos_token_id), int(tok.pad_token_id)
            stepper = gen.stepper if gen.stepper is not None else old.TorchStepper(gen.model)
            out = []
            for i, j in gen._batches(len(prompts), 8):
                enc = tok(prompts[i:j], return_tensors="pt", padding=True, truncation=True,
                          max_length=gen.max_input_length)
                out += old.sample(stepper, enc["input_ids"], enc["attention_mask"], config.k, dec, seeds[i:j], start,
                                  eos, pad)
            return out

        engines = {}
        for text in config.engines.split(","):
            spec = parse_engine(text)
            kw = {"threads": config.threads} if config.threads else {}
            engines[text] = load_generator(spec.engine, spec.generator or config.generator, spec.precision, "cpu",
                                           workers=1, **kw, **spec.config.extra)
        variants = [(e, "before", 8) for e in engines] + [(e, "after", b) for e in engines for b in batches]

        def run(engine: str, kind: str, batch: int) -> list:
            g = engines[engine]
            if kind == "before":
                return before_ids(g)
            g.prompt_batch = batch
            return g.generate_ids(prompts, config.k, dec, seeds)

        for v in variants:  # warm-up
            run(*v)
        times: dict[tuple, list[float]] = {}
        outputs: dict[tuple, list] = {}
        for _ in range(config.repeats):
            for v in variants:
                t0 = time.perf_counter()
                outputs[v] = run(*v)
                times.setdefault(v, []).append(time.perf_counter() - t0)
        rows = []
        for v in variants:
            engine, kind, batch = v
            tokens = sum(len(r) for rows_ in outputs[v] for r in rows_)
            med = statistics.median(times[v])
            base = statistics.median(times[(engine, "before", 8)])
            rows.append(GenerationBatchRow(engine=engine, variant=kind, gen_batch=batch, median_s=round(med, 3),
                                           seconds=[round(t, 3) for t in times[v]], tokens=tokens,
                                           tokens_per_s=round(tokens / med, 1), speedup_vs_before=round(base / med, 2),
                                           same_tokens_as_before=outputs[v] == outputs[(engine, "before", 8)]))
        return GenerationBatchPayload(generator=config.generator, prompts=len(prompts), k=config.k,
                                      repeats=config.repeats, threads=config.threads, before_commit=config.before,
                                      engines=list(engines), gen_batches=batches, rows=rows)


def generation_batch(doc: ResultFile) -> str:
    p: GenerationBatchPayload = doc.payload
    rows = [[r.engine, r.variant, r.gen_batch, f(r.median_s, ".3f"), r.tokens, f(r.tokens_per_s, ".0f"),
             f(r.speedup_vs_before, ".2f", "×"), yes_no(r.same_tokens_as_before)] for r in p.rows or []]
    return "\n".join([f"Generator `{p.generator}`: {p.prompts} prompts × K={p.k}, one seed per prompt; "
                      f"before: the sampler of commit `{p.before_commit}` (8 prompts per batch); after: this "
                      f"commit's at each --gen-batch; {p.repeats} interleaved rounds (median); threads: "
                      f"{p.threads or 'default'}; one worker.", "",
                      table(["engine", "sampler", "prompts per batch", "median s", "tokens", "tokens/s",
                             "speed-up vs before", "same tokens as before"], rows)])


GenerationBatch.sections = (
    Section("1/gen-batch", "The generator's batches (--gen-batch) against the former sampler",
            "the generator-batch timing", of_kind("generation_batch"), 90, render=generation_batch),
)
