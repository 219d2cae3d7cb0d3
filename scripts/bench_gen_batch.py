"""The generator's batching against the sampler it replaced: tokens/s of the generate stage, before and after.

A script, not a bench option: it times the sampler of an earlier commit (read from git) against today's, which no
engine runs.

"before" is the sampler and torch stepper of commit ``--before`` (default b9c61c0, the last one before
--gen-batch: one copy of the encoder output per sample, the fast sampler's per-row Python bookkeeping), read from
git and run over the same engine objects; "after" is this checkout's generator at ``--gen-batch`` sizes. Same
prompts (the contradiction prompt on the first ``--prompts`` sample hypotheses), K samples each, one seed per
prompt; one warm-up call each, then ``--repeats`` rounds that time every variant in turn (interleaved: a busy
machine slows all of them alike), median reported. Every variant's tokens are checked against "before" at the
same batch.

    python scripts/bench_gen_batch.py --engines torch:fp32,ort:fp32 --gen-batch 8,16,32 \\
        --result benchmarks/results/generation-batch.json
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from provenance import Recorder, script_command

ROOT = Path(__file__).resolve().parent.parent


def legacy_sampling(commit: str):
    """The ``breaknli_fast.engines.sampling`` module of ``commit`` (imported under another name)."""
    src = subprocess.run(["git", "-C", str(ROOT), "show", f"{commit}:breaknli_fast/engines/sampling.py"],
                         capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / "legacy_sampling.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("legacy_sampling", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> None:
    from breaknli_fast.bench.specs import parse_engine
    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines.base import Decoding
    from breaknli_fast.engines.registry import load_generator
    from breaknli_fast.prompts import CONTRADICT_PROMPT

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default="torch:fp32,ort:fp32")
    ap.add_argument("--generator", default="mini-t5")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--gen-batch", default="8,16,32", help="prompts per batch of the 'after' variants")
    ap.add_argument("--before", default="b9c61c0", help="commit whose sampler is 'before' (8 prompts per batch)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("generation_batch", script_command("bench_gen_batch.py", argv))
    old = legacy_sampling(args.before)
    exs = load_examples("sample", limit=args.prompts).examples
    prompts = [CONTRADICT_PROMPT.format(h=e.hypothesis) for e in exs]
    seeds = list(range(len(prompts)))
    dec = Decoding()
    batches = [int(x) for x in args.gen_batch.split(",")]

    def before_ids(gen) -> list:
        """The former sampler over the engine's own stepper (the ort engine's; for torch the former stepper),
        8 prompts per batch as its generator did."""
        cfg, tok = gen.config, gen.tokenizer
        start, eos, pad = int(cfg.decoder_start_token_id or 0), int(cfg.eos_token_id), int(tok.pad_token_id)
        stepper = gen.stepper if gen.stepper is not None else old.TorchStepper(gen.model)
        out = []
        for i, j in gen._batches(len(prompts), 8):
            enc = tok(prompts[i:j], return_tensors="pt", padding=True, truncation=True, max_length=gen.max_input_length)
            out += old.sample(stepper, enc["input_ids"], enc["attention_mask"], args.k, dec, seeds[i:j], start, eos, pad)
        return out

    engines = {}
    for text in args.engines.split(","):
        spec = parse_engine(text)
        kw = {"threads": args.threads} if args.threads else {}
        engines[text] = load_generator(spec.engine, spec.generator or args.generator, spec.precision, "cpu",
                                       workers=1, **kw, **spec.opts)
    variants = [(e, "before", 8) for e in engines] + [(e, "after", b) for e in engines for b in batches]

    def run(engine: str, kind: str, batch: int) -> list:
        g = engines[engine]
        if kind == "before":
            return before_ids(g)
        g.prompt_batch = batch
        return g.generate_ids(prompts, args.k, dec, seeds)

    for v in variants:  # warm-up
        run(*v)
    times: dict[tuple, list[float]] = {}
    outputs: dict[tuple, list] = {}
    for _ in range(args.repeats):
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
        rows.append({"engine": engine, "variant": kind, "gen_batch": batch, "median_s": round(med, 3),
                     "seconds": [round(t, 3) for t in times[v]], "tokens": tokens,
                     "tokens_per_s": round(tokens / med, 1), "speedup_vs_before": round(base / med, 2),
                     "same_tokens_as_before": outputs[v] == outputs[(engine, "before", 8)]})
    print("| engine | sampler | prompts per batch | median s | tokens | tokens/s | speed-up vs before | same tokens |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['engine']} | {r['variant']} | {r['gen_batch']} | {r['median_s']:.3f} | {r['tokens']} | "
              f"{r['tokens_per_s']:.0f} | {r['speedup_vs_before']:.2f}x | {'yes' if r['same_tokens_as_before'] else 'no'} |")
    print(f"\n{len(prompts)} prompts x K={args.k}, {args.repeats} rounds, threads {args.threads or 'default'}",
          file=sys.stderr)
    if args.result:
        rec.save(args.result, {"generator": args.generator, "prompts": len(prompts), "k": args.k,
                               "repeats": args.repeats, "threads": args.threads, "before_commit": args.before,
                               "engines": list(engines), "gen_batches": batches, "rows": rows})


if __name__ == "__main__":
    main()
