#!/usr/bin/env python
"""The real model sizes at the loop's defaults: breaknli-fast's engines against the runtimes a user would otherwise
run, interleaved in one process, every figure a ratio within the run.

A script, not a bench option: it interleaves the engines with other runtimes (CTranslate2, transformers, optimum) in
one process.

Random-weight models of the real architectures (``breaknli_fast.bench.shapes``: flan-t5-small / -base as the
generator, roberta-base / -large as the classifier; no download), at the BreakNLI loop's defaults:

* ``--job generate``: ``--prompts`` generator prompts (default 32, half contradictive, half entailed, from the
  embedded SNLI sample) × K = 20 samples, top-k 50 / top-p 0.95, exactly ``--max-new-tokens`` (40) new tokens
  each (``min_new_tokens = max_new_tokens``: the same work for every contender). Contenders: the project's
  engines (``torch:fp32``, ``ort:int8``, ``ct2:int8``, ...), and ``peer:transformers`` (plain
  ``model.generate`` with ``num_return_sequences = K``, ``--peer-batch`` prompts a call), ``peer:ct2-int8`` /
  ``peer:ct2-fp32`` (plain CTranslate2 ``translate_batch`` over the converted model, ``--peer-batch`` prompts a
  batch, batches side by side on one thread each: ``inter_threads`` = the threads, CTranslate2's throughput
  setting; ``peer:ct2-int8-intra`` / ``-fp32-intra``: one batch at a time on all the threads; needs the ``ct2``
  extra). Figure: new tokens / s (median iteration), and each contender's ratio to
  ``--generate-reference`` (default ``peer:ct2-int8``) and to ``torch:fp32``.
* ``--job classify``: the first ``--pairs`` (default 1,000) premise / hypothesis pairs of the embedded SNLI
  sample. Contenders: the project's engines (``torch:fp32``, ``torch:bf16``, ``ort:fp32``, ``ort:int8``, ...),
  ``peer:transformers`` (``AutoModelForSequenceClassification``, ``--peer-batch`` pairs a call in the given
  order) and ``peer:optimum`` (optimum's ``ORTModelForSequenceClassification`` exported from the same folder,
  fp32, the same batches). Figure: pairs / s and the ratio to ``torch:fp32``; beside it each contender's label
  agreement and max |Δ logit| against torch fp32 on the same pairs (random weights: near-tied logits, so label
  agreement below 100 % says little; max |Δ logit| still tells a correct fp32 path from a broken one).

Every contender is loaded first (exports and conversions are cached and not timed), then the job is timed in
rounds over all contenders (A B C A B C ...): ``--warmup`` unmeasured iterations, then at least
``--min-iterations`` and ``--min-seconds``. The loop end to end at real shapes is ``breaknli-fast bench
--random-weights ... --interleave`` (``scripts/bench_save.py``); see BENCHMARKS.md.

    python scripts/bench_real_shapes.py --job generate --generator flan-t5-small \\
        --contenders torch:fp32,ort:int8,ct2:int8,peer:transformers,peer:ct2-int8 \\
        --result benchmarks/results/real-generate-flan-t5-small.json
    python scripts/bench_real_shapes.py --job classify --classifier roberta-base \\
        --contenders torch:fp32,torch:bf16,ort:fp32,ort:int8:validate=false,peer:transformers,peer:optimum \\
        --result benchmarks/results/real-classify-roberta-base.json
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable

from provenance import Recorder, script_command

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
warnings.filterwarnings("ignore")

GEN_CONTENDERS = ("torch:fp32,ort:fp32,ort:int8,ct2:int8,peer:transformers,peer:ct2-fp32,peer:ct2-int8,"
                  "peer:ct2-int8-intra")
CLF_CONTENDERS = ("torch:fp32,torch:bf16,ort:fp32,ort:int8:validate=false,peer:transformers,peer:optimum")


def _first_line(e: BaseException) -> str:
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _parameters(config: Any, seq2seq: bool) -> int:
    """Parameters of a model, counted on an empty (meta-device) copy built from its config."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

    with torch.device("meta"):
        m = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForSequenceClassification).from_config(config)
    return sum(p.numel() for p in m.parameters())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--job", choices=("generate", "classify"), required=True)
    ap.add_argument("--generator", default="flan-t5-small", help="a T5 shape of breaknli_fast.bench.shapes")
    ap.add_argument("--classifier", default="roberta-base", help="a classifier shape of breaknli_fast.bench.shapes")
    ap.add_argument("--contenders", default=None, help=f"comma-separated; default for generate: {GEN_CONTENDERS}; "
                                                       f"for classify: {CLF_CONTENDERS}")
    ap.add_argument("--generate-reference", default="peer:ct2-int8",
                    help="the contender every generator figure is divided by (besides torch:fp32)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--k", type=int, default=20)
    ap.add_argument("--max-new-tokens", type=int, default=40)
    ap.add_argument("--top-k", type=int, default=50)
    ap.add_argument("--top-p", type=float, default=0.95)
    ap.add_argument("--pairs", type=int, default=1000)
    ap.add_argument("--peer-batch", type=int, default=None,
                    help="prompts (generate, default 8) or pairs (classify, default 32) per call of the peers")
    ap.add_argument("--threads", type=int, default=None, help="CPU threads of every contender (default: physical cores)")
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--min-iterations", type=int, default=3)
    ap.add_argument("--min-seconds", type=float, default=0.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--cache-dir", type=Path, default=None, help="random-weight models (default: the bench's cache)")
    ap.add_argument("--model", type=Path, default=None,
                    help="a local model folder instead of the random-weight shape (a smoke test on a tiny model)")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("real_shapes", script_command("bench_real_shapes.py", argv))

    import numpy as np
    import torch

    from breaknli_fast.bench.measure import PeakMemory, Task, repeat_interleaved
    from breaknli_fast.bench.stages import workload_prompts
    from breaknli_fast.bench.shapes import build_random_model, shape_name
    from breaknli_fast.bench.specs import parse_engine
    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.engines import cpu_features, registry
    from breaknli_fast.engines.base import Decoding
    from breaknli_fast.engines.cpu_features import physical_cores
    from breaknli_fast.probes.breaknli.loop import BreakNLIConfig
    from breaknli_fast.prompts import GEN_PROMPTS

    threads = args.threads or physical_cores()
    torch.set_num_threads(threads)
    generate = args.job == "generate"
    peer_batch = args.peer_batch or (8 if generate else 32)
    contenders_text = args.contenders or (GEN_CONTENDERS if generate else CLF_CONTENDERS)
    from breaknli_fast.bench.specs import BenchSpecError

    wanted = [x.strip() for x in contenders_text.split(",") if x.strip()]
    for text in [x for x in wanted if not x.startswith("peer:")]:
        try:  # a bad engine or option: one line, before any model is built
            parse_engine(text)
        except BenchSpecError as e:
            raise SystemExit(f"error: {e}") from None
    data = load_examples("sample", limit=max(args.pairs, 4 * args.prompts))
    texts = [t for ex in data.examples for t in (ex.premise, ex.hypothesis)]
    import json

    if args.model is not None:
        from transformers import AutoConfig

        model = args.model
        shape = model.name
        meta = {"parameters": _parameters(AutoConfig.from_pretrained(model), generate)}
    else:
        shape = shape_name(args.generator if generate else args.classifier)
        model = build_random_model(shape, args.cache_dir, texts, log=lambda m: print(m, file=sys.stderr, flush=True))
        meta = json.loads((model / "random_weights.json").read_text())
    print(f"{shape}: {meta['parameters'] / 1e6:.1f} M parameters, {model}", file=sys.stderr, flush=True)

    dec = Decoding(top_k=args.top_k, top_p=args.top_p, max_new_tokens=args.max_new_tokens,
                   min_new_tokens=args.max_new_tokens)
    loop = BreakNLIConfig(k=args.k, u=1, s=1, decoding=dec, seed=args.seed, prompts=dict(GEN_PROMPTS))  # K and prompts matter here
    items = workload_prompts(data.examples, loop, args.prompts)
    prompts, seeds = [x["prompt"] for x in items], [x["seed"] for x in items]
    pairs = [(ex.premise, ex.hypothesis) for ex in data.examples[: args.pairs]]

    contenders: list[dict[str, Any]] = []
    skipped: list[dict[str, Any]] = []

    def add(name: str, build: Callable[[], Callable[[], Any]], info: dict[str, Any] | None = None) -> None:
        mem = PeakMemory().start()
        t0 = time.perf_counter()
        try:
            fn, details = build()
        except Exception as e:  # noqa: BLE001 - a contender that cannot load is reported, the others still run
            print(f"{name}: skipped: {_first_line(e)}", file=sys.stderr, flush=True)
            skipped.append({"contender": name, "reason": _first_line(e)})
            gc.collect()
            return
        m = mem.read()
        contenders.append({"name": name, "fn": fn, "load_s": time.perf_counter() - t0, "details": details,
                           "rss_after_load_mib": m["rss_now_mib"]})
        print(f"loaded {name} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr, flush=True)

    eos = pad = None
    if not generate:
        from breaknli_fast.engines.model_info import label_permutation, load_config

        perm = label_permutation(load_config(str(model)))
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

    for text in wanted:
        if text.startswith("peer:"):
            peer = text[5:]
            if generate and peer == "transformers":
                def build(peer=peer):
                    from transformers import AutoModelForSeq2SeqLM

                    m = AutoModelForSeq2SeqLM.from_pretrained(model).eval()
                    kw = dict(do_sample=True, num_beams=1, top_k=args.top_k, top_p=args.top_p,
                              max_new_tokens=args.max_new_tokens, min_new_tokens=args.max_new_tokens,
                              num_return_sequences=args.k)

                    def run() -> list[list[int]]:
                        torch.manual_seed(args.seed)
                        out: list[list[int]] = []
                        with torch.inference_mode():
                            for i in range(0, len(prompts), peer_batch):
                                enc = tok(prompts[i:i + peer_batch], return_tensors="pt", padding=True)
                                out += [row[1:] for row in m.generate(**enc, **kw).tolist()]
                        return out

                    return run, {"runtime": "transformers generate (torch fp32)", "batch_prompts": peer_batch}
            elif generate and peer in ("ct2-int8", "ct2-fp32", "ct2-int8-intra", "ct2-fp32-intra"):
                def build(peer=peer):
                    import ctranslate2

                    from breaknli_fast.backends.ct2.engine import vocabulary
                    from breaknli_fast.export import export_model

                    folder = export_model(str(model), format="ct2", progress=False).path
                    compute = "int8" if "int8" in peer else "float32"
                    # CTranslate2's two ways to use the cores: batches side by side, one thread each (its
                    # throughput setting, the default peer), or one batch at a time on all of them (-intra)
                    inter, intra = (1, threads) if peer.endswith("-intra") else (threads, 1)
                    tr = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute, inter_threads=inter,
                                                intra_threads=intra)
                    vocab = vocabulary(folder)
                    sources = [tok.convert_ids_to_tokens(ids) for ids in tok(prompts)["input_ids"]]
                    ctranslate2.set_random_seed(args.seed + 1)

                    def run() -> list[list[int]]:
                        res = tr.translate_batch(sources, max_batch_size=peer_batch, beam_size=1,
                                                 num_hypotheses=args.k, sampling_topk=args.top_k,
                                                 sampling_topp=args.top_p, max_decoding_length=args.max_new_tokens,
                                                 min_decoding_length=args.max_new_tokens)
                        return [[vocab[t] for t in h] for r in res for h in r.hypotheses]

                    return run, {"runtime": f"ctranslate2 {ctranslate2.__version__} translate_batch",
                                 "compute_type": compute, "batch_prompts": peer_batch, "inter_threads": inter,
                                 "intra_threads": intra}
            elif not generate and peer == "transformers":
                def build(peer=peer):
                    from transformers import AutoModelForSequenceClassification, AutoTokenizer

                    ctok = AutoTokenizer.from_pretrained(model)
                    m = AutoModelForSequenceClassification.from_pretrained(model).eval()

                    def run() -> np.ndarray:
                        outs = []
                        with torch.inference_mode():
                            for i in range(0, len(pairs), peer_batch):
                                b = pairs[i:i + peer_batch]
                                enc = ctok([p for p, _ in b], [h for _, h in b], padding=True, truncation=True,
                                           max_length=256, return_tensors="pt")
                                outs.append(m(**enc).logits.float().numpy())
                        return np.concatenate(outs)[:, perm]  # canonical label order, as the engines give

                    return run, {"runtime": "transformers AutoModelForSequenceClassification (torch fp32)",
                                 "batch_pairs": peer_batch}
            elif not generate and peer == "optimum":
                def build(peer=peer):
                    from optimum.onnxruntime import ORTModelForSequenceClassification
                    from transformers import AutoTokenizer

                    ctok = AutoTokenizer.from_pretrained(model)
                    m = ORTModelForSequenceClassification.from_pretrained(model, export=True)

                    def run() -> np.ndarray:
                        outs = []
                        for i in range(0, len(pairs), peer_batch):
                            b = pairs[i:i + peer_batch]
                            enc = ctok([p for p, _ in b], [h for _, h in b], padding=True, truncation=True,
                                       max_length=256, return_tensors="pt")
                            outs.append(np.asarray(m(**enc).logits, dtype=np.float32))
                        return np.concatenate(outs)[:, perm]

                    return run, {"runtime": "optimum ORTModelForSequenceClassification (fp32, export=True)",
                                 "batch_pairs": peer_batch}
            else:
                skipped.append({"contender": text, "reason": f"unknown peer {peer!r} for --job {args.job}"})
                continue
            add(text, build)
            continue
        spec = parse_engine(text)
        c_opts, g_opts = registry.split_options(spec.engine, spec.config.extra)

        def build(spec=spec, c_opts=c_opts, g_opts=g_opts):
            if generate:
                gen = registry.load_generator(spec.engine, str(model), precision=spec.precision,
                                              **{"threads": threads, **g_opts})

                def run() -> list[list[int]]:
                    return [r for rows in gen.generate_ids(prompts, args.k, dec, seeds) for r in rows]

                return run, gen.info.to_dict()
            clf = registry.load_classifier(spec.engine, str(model), precision=spec.precision,
                                           **{"threads": threads, **c_opts})

            def run() -> np.ndarray:
                clf.clear_cache()
                return np.asarray(clf.classify(pairs).logits)

            return run, clf.info.to_dict()

        add(f"breaknli-fast {spec.label}", build)

    tasks = [Task(c["fn"]) for c in contenders]
    shared = PeakMemory().start()
    repeat_interleaved(tasks, warmup=args.warmup, min_iterations=args.min_iterations, min_seconds=args.min_seconds)
    run_mem = shared.read()
    rows: list[dict[str, Any]] = []
    ref_logits = None
    for c, t in zip(contenders, tasks):
        if t.error is not None:
            skipped.append({"contender": c["name"], "reason": f"failed: {_first_line(t.error)}"})
            continue
        s = t.rep.summary()
        row = {"contender": c["name"], "load_s": c["load_s"], "rss_after_load_mib": c["rss_after_load_mib"], **s,
               "details": c["details"]}
        if generate:
            n = n_new(t.rep.result)
            row.update(sequences=len(t.rep.result), new_tokens=n, tokens_per_s=n / s["median_s"],
                       tokens_per_s_best=n / s["min_s"])
        else:
            logits = t.rep.result
            row.update(pairs=len(pairs), pairs_per_s=len(pairs) / s["median_s"],
                       pairs_per_s_best=len(pairs) / s["min_s"])
            if c["name"] == "breaknli-fast torch:fp32":
                ref_logits = logits
            row["_logits"] = logits
        rows.append(row)
    ref_name = "breaknli-fast torch:fp32"
    by_name = {r["contender"]: r for r in rows}
    for r in rows:
        if generate:
            for key, name in (("vs_reference", args.generate_reference), ("vs_torch_fp32", ref_name)):
                b = by_name.get(name) or by_name.get(f"breaknli-fast {name}")
                r[key] = r["tokens_per_s"] / b["tokens_per_s"] if b else None
        else:
            b = by_name.get(ref_name)
            r["vs_torch_fp32"] = r["pairs_per_s"] / b["pairs_per_s"] if b else None
            logits = r.pop("_logits")
            if ref_logits is not None:
                r["max_abs_logit_vs_torch_fp32"] = float(np.abs(logits - ref_logits).max())
                r["label_agreement_vs_torch_fp32_pct"] = float((logits.argmax(1) == ref_logits.argmax(1)).mean() * 100)
        print(f"{r['contender']:<44} median {r['median_s']:.3f} s  "
              + (f"{r['tokens_per_s']:.0f} tokens/s" if generate else f"{r['pairs_per_s']:.1f} pairs/s"), flush=True)
    payload = {
        "job": args.job, "shape": shape, "parameters": meta["parameters"], "model_dir": str(model),
        "random_weights": args.model is None,
        "threads": threads, "cpu_features": cpu_features.summary(),
        "workload": ({"prompts": len(prompts), "k": args.k, "max_new_tokens": args.max_new_tokens,
                      "fixed_length": True, "top_k": args.top_k, "top_p": args.top_p, "peer_batch_prompts": peer_batch}
                     if generate else {"pairs": len(pairs), "peer_batch_pairs": peer_batch}),
        "reference": args.generate_reference if generate else ref_name,
        "timing": {"warmup": args.warmup, "min_iterations": args.min_iterations, "min_seconds": args.min_seconds,
                   "interleaved": True},
        "peak_rss_all_contenders_mib": run_mem["peak_rss_mib"], "rows": rows, "skipped": skipped,
    }
    for s in skipped:
        print(f"skipped {s['contender']}: {s['reason']}", file=sys.stderr)
    if args.result:
        rec.save(args.result, payload)
    return 0


if __name__ == "__main__":
    sys.exit(main())
