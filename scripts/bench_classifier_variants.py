"""Graph variants of one exported classifier on the CPU provider: speed and agreement with fp32.

A script, not a bench option: it builds and times graph variants of one ONNX export that are no engine spec of
bench.

Takes the fp32 ONNX export of a classifier (exported through the cache if needed) and builds, in a
scratch folder, the variants a user might try for CPU speed:

* ``int8-dynamic``: what ``breaknli-fast export --precision int8`` ships (dynamic quantization);
* ``int8-static-qdq``: the static symmetric QDQ graph of the CUDA / TensorRT path, calibrated on
  256 other sample pairs;
* ``fused-fp32`` / ``fused-int8``: ONNX Runtime's transformer optimizer (BERT fusions: Attention,
  SkipLayerNorm, BiasGelu), then dynamic int8 with ``QAttention``;
* ``fused-noattn-int8``: the optimizer without the attention fusion, then dynamic int8;
* ``fastgelu-int8``: the optimizer with the tanh GELU approximation (no attention fusion), then
  dynamic int8.

Pairs: (hypothesis, another example's hypothesis) and (premise, hypothesis) of the embedded sample,
batches of 64, padded to the batch's longest. Every variant is timed ``--repeats`` times in rounds;
median seconds, speed-up over fp32 and argmax agreement with fp32 are printed as a markdown table,
then (``--profile``) the share of kernel time per operator type of one variant.

    python scripts/bench_classifier_variants.py --model mini-nli --threads 1 --out runs/clf-variants \\
        --result benchmarks/results/classifier-variants.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from provenance import Recorder, script_command


def main(argv: list[str] | None = None) -> None:
    import numpy as np
    import onnxruntime as ort
    from onnxruntime.quantization import QuantType, quantize_dynamic
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_model
    from transformers import AutoConfig, AutoTokenizer

    from breaknli_fast.data.loaders import load_examples
    from breaknli_fast.export import export_model
    from breaknli_fast.backends.ort.quantize import int8_static_qdq

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="mini-nli")
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("runs/clf-variants"))
    ap.add_argument("--profile", default="int8-dynamic",
                    help="also print where this variant's time goes, per operator type (ONNX Runtime's profiler; '' = no)")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    args = ap.parse_args(argv)
    rec = Recorder("classifier_variants", script_command("bench_classifier_variants.py", argv))
    args.out.mkdir(parents=True, exist_ok=True)

    fp32 = export_model(args.model, precision="fp32", progress=False)
    int8 = export_model(args.model, precision="int8", progress=False)
    cfg = AutoConfig.from_pretrained(str(fp32.path))
    tok = AutoTokenizer.from_pretrained(str(fp32.path))
    exs = load_examples("sample", limit=2000).examples
    pairs = [(e.hypothesis, exs[(i + 7) % len(exs)].hypothesis) for i, e in enumerate(exs)]
    pairs += [(e.premise, e.hypothesis) for e in exs]
    calib_pairs, pairs = pairs[-256:], pairs[: args.pairs]

    def feeds(ps: list[tuple[str, str]]) -> dict:
        enc = tok([p for p, _ in ps], [h for _, h in ps], padding=True, return_tensors="np")
        return {"input_ids": enc["input_ids"].astype(np.int64), "attention_mask": enc["attention_mask"].astype(np.int64)}

    src = fp32.path / "model.onnx"
    graphs = {"fp32": src, "int8-dynamic": int8.path / "model.onnx"}
    int8_static_qdq(src, args.out / "int8-static-qdq.onnx", [feeds(calib_pairs[i:i + 16]) for i in range(0, 256, 16)])
    graphs["int8-static-qdq"] = args.out / "int8-static-qdq.onnx"
    opt_kw = dict(model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size, opt_level=1)
    for name, attention, approx in (("fused", True, False), ("fused-noattn", False, False), ("fastgelu", False, True)):
        fo = FusionOptions("bert")
        fo.enable_attention = attention
        fo.enable_gelu_approximation = approx
        fused = args.out / f"{name}-fp32.onnx"
        optimize_model(str(src), optimization_options=fo, **opt_kw).save_model_to_file(str(fused))
        if name == "fused":
            graphs["fused-fp32"] = fused
        quantize_dynamic(str(fused), str(args.out / f"{name}-int8.onnx"), weight_type=QuantType.QInt8,
                         op_types_to_quantize=["MatMul", "Gemm", "Attention"] if attention else ["MatMul", "Gemm"],
                         extra_options={"DefaultTensorType": 1})
        graphs[f"{name}-int8"] = args.out / f"{name}-int8.onnx"

    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    sessions = {n: ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]) for n, p in graphs.items()}
    batches = [feeds(pairs[i:i + 64]) for i in range(0, len(pairs), 64)]
    ref = None
    times: dict[str, list[float]] = {n: [] for n in sessions}
    agree: dict[str, float] = {}
    for _ in range(args.repeats):
        for name, sess in sessions.items():
            t0 = time.perf_counter()
            logits = np.concatenate([sess.run(None, b)[0] for b in batches])
            times[name].append(time.perf_counter() - t0)
            if ref is None:
                ref = logits
            agree.setdefault(name, float((logits.argmax(1) == ref.argmax(1)).mean() * 100))
    base = statistics.median(times["fp32"])
    rows = [{"variant": n, "median_s": round(statistics.median(t), 3), "speedup_vs_fp32": round(base / statistics.median(t), 2),
             "label_agreement_vs_fp32_pct": round(agree[n], 2)} for n, t in times.items()]
    lines = ["| variant | median s | vs fp32 | label agreement with fp32 |", "|---|---|---|---|"]
    lines += [f"| {r['variant']} | {r['median_s']:.3f} | {r['speedup_vs_fp32']:.2f}× | {r['label_agreement_vs_fp32_pct']:.2f} % |"
              for r in rows]
    md = "\n".join(lines) + f"\n\n{args.model}: {len(pairs)} pairs in batches of 64, {args.threads} thread(s), {args.repeats} repeats.\n"
    profile = None
    if args.profile:
        profile = op_shares(graphs[args.profile], batches, args.threads)
        md += "\n" + profile_table(profile, args.profile) + "\n"
    (args.out / "variants.json").write_text(json.dumps({"args": {k: str(v) for k, v in vars(args).items()}, "rows": rows},
                                                       indent=2) + "\n")
    (args.out / "variants.md").write_text(md)
    print(md)
    if args.result:
        rec.save(args.result, {"model": args.model, "pairs": len(pairs), "batch": 64, "threads": args.threads,
                               "repeats": args.repeats, "rows": rows,
                               "profile": {"variant": args.profile, "rows": profile} if profile is not None else None})


def profile_table(shares: list[dict], name: str) -> str:
    lines = [f"| {name}: operator type | share of kernel time |", "|---|---|"]
    lines += [f"| {r['op']} | {r['share_pct']:.1f} % |" for r in shares]
    return "\n".join(lines)


def op_shares(graph: Path, batches: list, threads: int) -> list[dict]:
    """Share of kernel time per operator type over one pass of ``batches`` (ONNX Runtime's profiler),
    the ten largest."""
    import collections
    import os

    import onnxruntime as ort

    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.enable_profiling = True
    sess = ort.InferenceSession(str(graph), so, providers=["CPUExecutionProvider"])
    for b in batches:
        sess.run(None, b)
    trace = sess.end_profiling()
    per_op: collections.Counter = collections.Counter()
    for ev in json.loads(Path(trace).read_text()):
        if ev.get("cat") == "Node" and ev.get("name", "").endswith("_kernel_time"):
            per_op[ev["args"]["op_name"]] += ev["dur"]
    os.remove(trace)
    total = sum(per_op.values()) or 1
    return [{"op": op, "share_pct": round(100 * us / total, 2)} for op, us in per_op.most_common(10)]


if __name__ == "__main__":
    main()
