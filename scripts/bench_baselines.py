#!/usr/bin/env python
"""What a user would otherwise run, against breaknli-fast's engines, on the same inputs.

A script, not a bench option: it times other runtimes (the transformers pipeline, optimum's ORTModel) that are no
engines of bench, on the same inputs.

Two jobs of the BreakNLI loop, measured in one process on identical inputs:

* classify: the (p, h) pairs of the first ``--limit`` examples of the dataset;
* generate: K sampled candidates for each of the first ``--gen-prompts`` generation prompts
  (half contradictive, half entailed; the bench's generate-stage workload), same decoding.

Contenders:

* ``transformers pipeline``: ``pipeline("text-classification")`` and
  ``pipeline("text2text-generation")`` with ``batch_size`` (torch fp32), as a user would write them
  (``num_beams=1`` is passed: the text2text pipeline otherwise defaults to 4 beams);
* ``optimum ORTModel``: ``ORTModelForSequenceClassification`` / ``ORTModelForSeq2SeqLM``
  (``export=True`` from the local folder, fp32, CPU provider), tokenizer + batched calls / ``generate``;
* ``breaknli-fast <engine>:<precision>``: the registry's engines (``--engines``), i.e. token-budget
  batching for the classifier and one ``generate`` call per prompt (own seed) for the generator.

Every contender is loaded first; then each job is timed in rounds over all contenders (A B C A B C
...), so drifts of a shared machine's load hit them alike: ``--warmup`` unmeasured runs, then at
least ``--min-iterations`` and ``--min-seconds``; the median and the best iteration are reported.
Generated tokens are counted the same way for all (the generator tokenizer on the decoded texts,
without special tokens). Loading and ONNX export are not timed.

    python scripts/bench_baselines.py --classifier mini-nli --generator mini-t5 --limit 64 --out runs/baselines \\
        --result benchmarks/results/baselines.json
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from provenance import Recorder, script_command

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--classifier", default="mini-nli")
    ap.add_argument("--generator", default="mini-t5")
    ap.add_argument("--dataset", default="sample")
    ap.add_argument("--limit", type=int, default=64, help="examples whose (p, h) pairs are classified")
    ap.add_argument("--gen-prompts", type=int, default=8)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--batch-size", type=int, default=32, help="batch size of the pipeline / ORTModel baselines")
    ap.add_argument("--engines", default="torch:fp32,ort:fp32,ort:int8",
                    help="breaknli-fast engines (ENGINE:PRECISION[:key=value...], as bench --engines)")
    ap.add_argument("--no-baselines", action="store_true", help="only the breaknli-fast engines")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--min-iterations", type=int, default=5)
    ap.add_argument("--min-seconds", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (and intra-op threads of breaknli-fast's other engines)")
    ap.add_argument("--out", type=Path, default=None, help="folder for baselines.json and baselines.md")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("baselines", script_command("bench_baselines.py", argv))

    import torch
    from transformers import AutoTokenizer

    from breaknli_fast.bench.measure import PeakMemory, Task, latency_stats, repeat_interleaved
    from breaknli_fast.bench.stages import workload_prompts
    from breaknli_fast.bench.specs import parse_engine
    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines import registry
    from breaknli_fast.engines.base import Decoding
    from breaknli_fast.engines.model_info import model_fingerprint, resolve_model
    from breaknli_fast.envinfo import environment
    from breaknli_fast.probes.breaknli.loop import BreakNLIConfig

    if args.threads:
        torch.set_num_threads(args.threads)
    data = load_examples(args.dataset, limit=args.limit)
    pairs = [(ex.premise, ex.hypothesis) for ex in data.examples]
    dec = Decoding(top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens)
    loop = BreakNLIConfig(k=args.k, u=1, s=1, decoding=dec, seed=args.seed)  # only K and the prompts matter here
    items = workload_prompts(data.examples, loop, args.gen_prompts)
    prompts, seeds = [x["prompt"] for x in items], [x["seed"] for x in items]
    clf_path, gen_path = resolve_model(args.classifier), resolve_model(args.generator)
    fingerprints = {m: model_fingerprint(m) for m in (args.classifier, args.generator)}
    gen_tok = AutoTokenizer.from_pretrained(gen_path)
    # num_beams=1: the text2text pipeline otherwise defaults to 4 beams (transformers 4.5x)
    gen_kw = dict(do_sample=True, num_beams=1, top_p=args.top_p, top_k=args.top_k, max_new_tokens=args.max_new_tokens,
                  num_return_sequences=args.k)

    def n_tokens(texts: list[str]) -> int:
        return sum(len(x) for x in gen_tok(texts, add_special_tokens=False)["input_ids"]) if texts else 0

    # -- contenders: name -> {"classify": fn, "generate": fn (-> list of texts)} -------------------------
    contenders: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []

    def add(name: str, build: Callable[[], tuple[Callable[[], Any], Callable[[], list[str]]]]) -> None:
        mem = PeakMemory().start()
        t0 = time.perf_counter()
        try:
            clf_fn, gen_fn = build()
        except Exception as e:  # noqa: BLE001
            print(f"{name}: skipped: {_first_line(e)}", file=sys.stderr)
            skipped.append({"contender": name, "reason": _first_line(e)})
            return
        m = mem.read()
        contenders.append({"name": name, "classify": clf_fn, "generate": gen_fn, "load_s": time.perf_counter() - t0,
                           "rss_after_load_mib": m["rss_now_mib"], "peak_rss_load_mib": m["peak_rss_mib"]})
        print(f"loaded {name} ({time.perf_counter() - t0:.1f} s)", flush=True)

    if not args.no_baselines:
        from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, pipeline

        def build_pipeline():
            pipe = pipeline("text-classification", model=AutoModelForSequenceClassification.from_pretrained(clf_path),
                            tokenizer=AutoTokenizer.from_pretrained(clf_path), device=-1)
            gpipe = pipeline("text2text-generation", model=AutoModelForSeq2SeqLM.from_pretrained(gen_path), tokenizer=gen_tok,
                             device=-1)
            inputs = [{"text": p, "text_pair": h} for p, h in pairs]

            def gen() -> list[str]:
                torch.manual_seed(args.seed)
                out = gpipe(prompts, batch_size=min(args.batch_size, len(prompts)), **gen_kw)
                return [d["generated_text"] for group in out for d in (group if isinstance(group, list) else [group])]

            return (lambda: pipe(inputs, batch_size=args.batch_size, truncation=True)), gen

        def build_optimum():
            from optimum.onnxruntime import ORTModelForSeq2SeqLM, ORTModelForSequenceClassification

            ctok = AutoTokenizer.from_pretrained(clf_path)
            om = ORTModelForSequenceClassification.from_pretrained(clf_path, export=True)
            og = ORTModelForSeq2SeqLM.from_pretrained(gen_path, export=True)

            def clf() -> list[Any]:
                outs = []
                for i in range(0, len(pairs), args.batch_size):
                    b = pairs[i : i + args.batch_size]
                    enc = ctok([p for p, _ in b], [h for _, h in b], padding=True, truncation=True, max_length=256,
                               return_tensors="pt")
                    outs.append(om(**enc).logits)
                return outs

            def gen() -> list[str]:
                torch.manual_seed(args.seed)
                texts: list[str] = []
                for i in range(0, len(prompts), args.batch_size):
                    enc = gen_tok(prompts[i : i + args.batch_size], padding=True, truncation=True, max_length=256,
                                  return_tensors="pt")
                    texts += gen_tok.batch_decode(og.generate(**enc, **gen_kw), skip_special_tokens=True)
                return texts

            return clf, gen

        add("transformers pipeline (torch fp32)", build_pipeline)
        add("optimum ORTModel (fp32)", build_optimum)

    for text in [x for x in args.engines.split(",") if x.strip()]:
        spec = parse_engine(text)
        opts = dict(spec.config.extra)
        if args.threads and spec.engine != "torch":
            opts.setdefault("threads", args.threads)

        def build_engine(spec=spec, opts=opts):
            clf = registry.load_classifier(spec.engine, spec.classifier or args.classifier, precision=spec.precision, **opts)
            gen = registry.load_generator(spec.engine, spec.generator or args.generator, precision=spec.precision, **opts)

            def c() -> Any:
                clf.clear_cache()
                return clf.classify(pairs)

            return c, (lambda: [t for cs in gen.generate(prompts, args.k, dec, seeds) for t in cs])

        add(f"breaknli-fast {spec.label}", build_engine)

    # -- timing, in rounds over all contenders -----------------------------------------------------------
    results: list[dict[str, Any]] = []
    shared = PeakMemory().start()
    for job in ("classify", "generate"):
        tasks = [Task(c[job]) for c in contenders]
        repeat_interleaved(tasks, warmup=args.warmup, min_iterations=args.min_iterations, min_seconds=args.min_seconds)
        for c, t in zip(contenders, tasks):
            if t.error is not None:
                skipped.append({"contender": c["name"], "reason": f"{job} failed: {_first_line(t.error)}"})
                continue
            s = t.rep.summary()
            row = {"contender": c["name"], "job": job, "load_s": c["load_s"], "rss_after_load_mib": c["rss_after_load_mib"],
                   "peak_rss_load_mib": c["peak_rss_load_mib"], **s,
                   "items": len(pairs) if job == "classify" else len(prompts), "iteration_latency": latency_stats(t.rep.seconds)}
            if job == "classify":
                row["pairs_per_s"] = len(pairs) / s["median_s"]
                row["pairs_per_s_best"] = len(pairs) / s["min_s"]
            else:
                n = n_tokens(t.rep.result)
                row.update(new_tokens_first_iteration=n, tokens_per_s=n / s["median_s"], tokens_per_s_best=n / s["min_s"],
                           sequences_per_s=len(prompts) * args.k / s["median_s"])
            results.append(row)
            thr = f"{row['pairs_per_s']:.1f} pairs/s" if job == "classify" else f"{row['tokens_per_s']:.1f} tokens/s"
            print(f"{c['name']:<36} {job:<9} median {s['median_s']:.3f} s  {thr}", flush=True)
    run_mem = shared.read()
    contenders.clear()
    gc.collect()

    changed = [m for m, fp in fingerprints.items() if model_fingerprint(m) != fp]
    if changed:
        print(f"WARNING: model files changed while the script ran ({', '.join(changed)}): the figures are not comparable",
              file=sys.stderr)
    report = {"command": " ".join(["python", "scripts/bench_baselines.py"] + (argv if argv is not None else sys.argv[1:])),
              "environment": environment(), "args": {k: str(v) for k, v in vars(args).items()},
              "models": fingerprints, "models_changed_during_run": changed,
              "load_average_end": list(os.getloadavg()),
              "workload": {"pairs": len(pairs), "prompts": len(prompts), "k": args.k, "max_new_tokens": args.max_new_tokens},
              "peak_rss_all_contenders_mib": run_mem["peak_rss_mib"], "results": results, "skipped": skipped}
    md = to_markdown(report)
    if changed:
        md = f"**Model files changed while the script ran ({', '.join(changed)}): figures not comparable.**\n\n" + md
    print(md)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "baselines.json").write_text(json.dumps(report, indent=2, default=str) + "\n")
        (args.out / "baselines.md").write_text(md)
    if args.result:
        rec.save(args.result, {k: v for k, v in report.items() if k not in ("command", "environment")})
    return 0


def to_markdown(report: dict[str, Any]) -> str:
    rows = report["results"]
    ref = {r["job"]: r for r in rows if r["contender"].startswith("transformers pipeline")}
    lines = ["| contender | job | iterations | median s | best s | throughput (median) | vs transformers pipeline (median / best) |",
             "|---|---|---|---|---|---|---|"]
    for r in rows:
        thr = f"{r['pairs_per_s']:.1f} pairs/s" if r["job"] == "classify" else f"{r['tokens_per_s']:.1f} tokens/s"
        base = ref.get(r["job"])
        rel = f"{base['median_s'] / r['median_s']:.2f}× / {base['min_s'] / r['min_s']:.2f}×" if base else "–"
        lines.append(f"| {r['contender']} | {r['job']} | {r['iterations']} | {r['median_s']:.3f} | {r['min_s']:.3f} | {thr} | {rel} |")
    for r in report["skipped"]:
        lines.append(f"| {r['contender']} | skipped: {r['reason']} | | | | | |")
    w = report["workload"]
    lines.append(f"\nWorkload: {w['pairs']} (p, h) pairs; {w['prompts']} prompts × K={w['k']} sampled candidates, "
                 f"max_new_tokens {w['max_new_tokens']}. All contenders loaded together (peak RSS "
                 f"{report['peak_rss_all_contenders_mib']:.0f} MiB), timed in rounds.")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
