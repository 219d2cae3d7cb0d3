#!/usr/bin/env python
"""Speed of a roberta-base-shaped classifier (random weights) on torch fp32, ORT fp32 and ORT int8.

A script, not a bench option: it times a bare classifier graph over a sweep of shapes, with no probe or loop around
it.

The shapes of a real MNLI checkpoint (hidden 768, 12 layers, 12 heads, FFN 3072, vocab 50265)
without its weights (the hub is not reachable here). The ORT graphs are made by ``export_model``
(so they are validated against torch first), then each engine runs the same batch
(``--batch`` x ``--length`` tokens, random ids, full attention mask) ``--repeats`` times after
``--warmup`` runs; the engines take turns (round-robin) so that they see the same machine load,
and the median is reported as a markdown table, with the load average (other processes on the
machine slow all engines, ORT's spinning thread pool more than torch's).

    python scripts/bench_classifier_shapes.py                 # 32 x 128, 5 repeats
    python scripts/bench_classifier_shapes.py --layers 2      # a quick smoke run
    python scripts/bench_classifier_shapes.py --result benchmarks/results/classifier-shapes.json
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from provenance import Recorder, script_command


def build(folder: Path, layers: int, hidden: int, heads: int, ffn: int, vocab: int) -> Path:
    import torch
    from transformers import AutoModelForSequenceClassification, RobertaConfig

    from breaknli_fast.engines.random_weights import ID2LABEL, train_bpe_tokenizer

    tok = train_bpe_tokenizer(folder)
    cfg = RobertaConfig(vocab_size=vocab, hidden_size=hidden, num_hidden_layers=layers, num_attention_heads=heads,
                        intermediate_size=ffn, max_position_embeddings=514, type_vocab_size=1, num_labels=3,
                        id2label=ID2LABEL, label2id={v: k for k, v in ID2LABEL.items()}, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg.architectures = ["RobertaForSequenceClassification"]
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(cfg).save_pretrained(folder, safe_serialization=True)
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--length", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--ffn", type=int, default=3072)
    ap.add_argument("--vocab", type=int, default=50265)
    ap.add_argument("--threads", type=int, default=None, help="intra-op threads (default: physical cores)")
    ap.add_argument("--work-dir", type=Path, default=None, help="keep the model and exports here")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("classifier_shapes", script_command("bench_classifier_shapes.py", argv))

    import numpy as np
    import onnxruntime
    import torch
    from transformers import AutoModelForSequenceClassification

    from breaknli_fast.envinfo import cpu_model
    from breaknli_fast.export import export_model
    from breaknli_fast.backends.ort.runtime import make_session
    from breaknli_fast.engines.cpu_features import physical_cores

    threads = args.threads or physical_cores()
    torch.set_num_threads(threads)
    tmp = tempfile.TemporaryDirectory(prefix="bench-shapes-")
    work = args.work_dir or Path(tmp.name)
    src = build(work / "model", args.layers, args.hidden, args.heads, args.ffn, args.vocab)
    n_params = sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(src).parameters())
    print(f"model: roberta-shaped, {args.layers} layers, hidden {args.hidden}, {n_params / 1e6:.1f} M parameters",
          file=sys.stderr)

    rng = np.random.default_rng(0)
    ids = rng.integers(4, 600, size=(args.batch, args.length), dtype=np.int64)
    ids[:, 0], ids[:, -1] = 0, 2  # <s> ... </s>
    mask = np.ones_like(ids)

    model = AutoModelForSequenceClassification.from_pretrained(src).eval()
    t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)

    def run_torch():
        with torch.inference_mode():
            return model(input_ids=t_ids, attention_mask=t_mask).logits.numpy()

    engines = [("torch fp32", run_torch, "-")]
    for precision in ("fp32", "int8"):
        t0 = time.perf_counter()
        res = export_model(str(src), precision=precision, cache_dir=work / "exports", validation_size=16,
                           tolerances={"min_agreement": 0.0} if precision == "int8" else None, progress=False)
        build_s = time.perf_counter() - t0
        sess, details = make_session(res.path / "model.onnx", threads=threads)
        feeds = {"input_ids": ids, "attention_mask": mask}
        feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
        engines.append((f"ORT {precision}" + (" (dynamic)" if precision == "int8" else ""),
                        (lambda s=sess, f=feeds: s.run(["logits"], f)[0]), f"{build_s:.1f}"))
    outs = {}
    for name, fn, _ in engines:
        for _ in range(args.warmup):
            outs[name] = fn()
    times: dict[str, list[float]] = {name: [] for name, _, _ in engines}
    for _ in range(args.repeats):
        for name, fn, _ in engines:
            t0 = time.perf_counter()
            outs[name] = fn()
            times[name].append(time.perf_counter() - t0)
    ref = outs["torch fp32"]
    t_torch = statistics.median(times["torch fp32"])
    rows = [(name, statistics.median(times[name]), outs[name], b) for name, _, b in engines]
    load = os.getloadavg()[0]
    print(f"\nbatch {args.batch} x {args.length} tokens, {args.repeats} repeats (median, {args.warmup} warm-up runs excluded), "
          f"{threads} threads, {cpu_model()}, load average {load:.1f}, torch {torch.__version__}, "
          f"onnxruntime {onnxruntime.__version__}\n")
    print("| engine | ms / batch | pairs / s | speed-up vs torch | max abs Δ logit vs torch | argmax agreement | export + validation s |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    table = []
    for name, t, out, build_s in rows:
        d = float(np.abs(np.asarray(out) - ref).max())
        agree = float((np.asarray(out).argmax(1) == ref.argmax(1)).mean() * 100)
        print(f"| {name} | {t * 1000:.0f} | {args.batch / t:.1f} | {t_torch / t:.2f}x | {d:.2g} | {agree:.0f} % | {build_s} |")
        table.append({"engine": name, "median_s": round(t, 5), "all_s": [round(x, 5) for x in times[name]],
                      "pairs_per_s": round(args.batch / t, 2), "speedup_vs_torch": round(t_torch / t, 3),
                      "max_abs_logit_diff_vs_torch": d, "argmax_agreement_pct": agree,
                      "export_validation_s": None if build_s == "-" else float(build_s)})
    if args.result:
        rec.save(args.result, {"model": {"family": "roberta", "layers": args.layers, "hidden": args.hidden, "heads": args.heads,
                                         "ffn": args.ffn, "vocab": args.vocab, "parameters": n_params,
                                         "weights": "random"},
                               "batch": args.batch, "length": args.length, "repeats": args.repeats, "warmup": args.warmup,
                               "threads": threads, "load_average_at_end": load, "rows": table})
    tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
