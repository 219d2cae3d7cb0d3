"""Graph variants of one exported classifier on ONNX Runtime's CPU provider (kind ``classifier_variants``): speed
and agreement with fp32.

From the fp32 ONNX export of a classifier (through the cache), in the scratch folder, the variants a user might try
for CPU speed: ``int8-dynamic`` (what ``breaknli-fast export --precision int8`` ships), ``int8-static-qdq`` (the
static symmetric QDQ graph of the CUDA / TensorRT path, calibrated on 256 other sample pairs), ``fused-fp32`` /
``fused-int8`` (ONNX Runtime's transformer optimizer, then dynamic int8 with ``QAttention``),
``fused-noattn-int8`` (without the attention fusion) and ``fastgelu-int8`` (the tanh GELU approximation). Pairs:
(hypothesis, another example's hypothesis) and (premise, hypothesis) of the embedded sample, batches of 64; every
variant timed ``repeats`` times in rounds; with ``profile``, the share of kernel time per operator type of one
variant.
"""

from __future__ import annotations

import json
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from breaknli_fast.limits import MAX_REPEATS
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import blank, f, of_kind, table
from breaknli_fast.suite.result import ResultFile

BATCH = 64


@dataclass
class ClassifierVariantsConfig:
    model: str = option("mini-nli", help="the classifier (a name or a folder)")
    pairs: int = option(2000, min=1, max=4000, why="the embedded sample's pairs, twice", help="pairs classified")
    threads: int = option(1, min=1, help="ONNX Runtime's intra-op threads")
    repeats: int = option(3, min=1, max=MAX_REPEATS, help="timed rounds (median)")
    profile: str = option("int8-dynamic", help="the variant whose time per operator type is reported ('' = none)")


@dataclass
class VariantRow:
    variant: str | None = None
    median_s: float | None = None
    speedup_vs_fp32: float | None = None
    label_agreement_vs_fp32_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OpShare:
    op: str | None = None
    share_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class VariantProfile:
    variant: str | None = None
    rows: list[OpShare] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClassifierVariantsPayload:
    model: str | None = None
    pairs: int | None = None
    batch: int | None = None
    threads: int | None = None
    repeats: int | None = None
    rows: list[VariantRow] | None = None
    profile: VariantProfile | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def op_shares(graph: Path, batches: list, threads: int) -> list[OpShare]:
    """Share of kernel time per operator type over one pass of ``batches`` (ONNX Runtime's profiler), the ten
    largest."""
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
    return [OpShare(op=op, share_pct=round(100 * us / total, 2)) for op, us in per_op.most_common(10)]


class ClassifierVariants(Measurement):
    name = "classifier-variants"
    summary = "graph variants of one classifier on ONNX Runtime's CPU provider: speed and agreement with fp32"
    kind = "classifier_variants"
    config_class = ClassifierVariantsConfig
    payload_class = ClassifierVariantsPayload
    requires = ("ort",)
    legacy_scripts = ("bench_classifier_variants.py",)

    def run(self, config: ClassifierVariantsConfig, recorder: Any) -> ClassifierVariantsPayload:
        import numpy as np
        import onnxruntime as ort
        from onnxruntime.quantization import QuantType, quantize_dynamic
        from onnxruntime.transformers.fusion_options import FusionOptions
        from onnxruntime.transformers.optimizer import optimize_model
        from transformers import AutoConfig, AutoTokenizer

        from breaknli_fast.backends.ort.quantize import int8_static_qdq
        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.export import export_model

        out = recorder.work
        fp32 = export_model(config.model, precision="fp32", progress=False)
        int8 = export_model(config.model, precision="int8", progress=False)
        cfg = AutoConfig.from_pretrained(str(fp32.path))
        tok = AutoTokenizer.from_pretrained(str(fp32.path))
        exs = load_examples("sample", limit=2000).examples
        pairs = [(e.hypothesis, exs[(i + 7) % len(exs)].hypothesis) for i, e in enumerate(exs)]
        pairs += [(e.premise, e.hypothesis) for e in exs]
        calib_pairs, pairs = pairs[-256:], pairs[: config.pairs]

        def feeds(ps: list[tuple[str, str]]) -> dict:
            enc = tok([p for p, _ in ps], [h for _, h in ps], padding=True, return_tensors="np")
            return {"input_ids": enc["input_ids"].astype(np.int64),
                    "attention_mask": enc["attention_mask"].astype(np.int64)}

        src = fp32.path / "model.onnx"
        graphs = {"fp32": src, "int8-dynamic": int8.path / "model.onnx"}
        int8_static_qdq(src, out / "int8-static-qdq.onnx", [feeds(calib_pairs[i:i + 16]) for i in range(0, 256, 16)])
        graphs["int8-static-qdq"] = out / "int8-static-qdq.onnx"
        opt_kw = dict(model_type="bert", num_heads=cfg.num_attention_heads, hidden_size=cfg.hidden_size, opt_level=1)
        for name, attention, approx in (("fused", True, False), ("fused-noattn", False, False),
                                        ("fastgelu", False, True)):
            fo = FusionOptions("bert")
            fo.enable_attention = attention
            fo.enable_gelu_approximation = approx
            fused = out / f"{name}-fp32.onnx"
            optimize_model(str(src), optimization_options=fo, **opt_kw).save_model_to_file(str(fused))
            if name == "fused":
                graphs["fused-fp32"] = fused
            quantize_dynamic(str(fused), str(out / f"{name}-int8.onnx"), weight_type=QuantType.QInt8,
                             op_types_to_quantize=["MatMul", "Gemm", "Attention"] if attention else ["MatMul", "Gemm"],
                             extra_options={"DefaultTensorType": 1})
            graphs[f"{name}-int8"] = out / f"{name}-int8.onnx"
        if config.profile and config.profile not in graphs:
            from breaknli_fast.errors import UserError

            raise UserError(f"profile {config.profile!r}: not a variant ({', '.join(graphs)})")
        so = ort.SessionOptions()
        so.intra_op_num_threads = config.threads
        sessions = {n: ort.InferenceSession(str(p), so, providers=["CPUExecutionProvider"]) for n, p in graphs.items()}
        batches = [feeds(pairs[i:i + BATCH]) for i in range(0, len(pairs), BATCH)]
        ref = None
        times: dict[str, list[float]] = {n: [] for n in sessions}
        agree: dict[str, float] = {}
        for _ in range(config.repeats):
            for name, sess in sessions.items():
                t0 = time.perf_counter()
                logits = np.concatenate([sess.run(None, b)[0] for b in batches])
                times[name].append(time.perf_counter() - t0)
                if ref is None:
                    ref = logits
                agree.setdefault(name, float((logits.argmax(1) == ref.argmax(1)).mean() * 100))
        base = statistics.median(times["fp32"])
        rows = [VariantRow(variant=n, median_s=round(statistics.median(t), 3),
                           speedup_vs_fp32=round(base / statistics.median(t), 2),
                           label_agreement_vs_fp32_pct=round(agree[n], 2)) for n, t in times.items()]
        profile = (VariantProfile(variant=config.profile, rows=op_shares(graphs[config.profile], batches,
                                                                          config.threads))
                   if config.profile else None)
        return ClassifierVariantsPayload(model=config.model, pairs=len(pairs), batch=BATCH, threads=config.threads,
                                         repeats=config.repeats, rows=rows, profile=profile)


def classifier_variants(doc: ResultFile) -> str:
    p: ClassifierVariantsPayload = doc.payload
    rows = [[r.variant, f(r.median_s, ".3f"), f(r.speedup_vs_fp32, ".2f", "×"),
             f(r.label_agreement_vs_fp32_pct, ".2f", " %")] for r in p.rows or []]
    out = [f"`{p.model}`: {p.pairs} pairs in batches of {p.batch}; threads: {p.threads}; "
           f"repeats: {p.repeats} in rounds (median).", "",
           table(["variant", "median s", "vs fp32", "label agreement with fp32"], rows)]
    prof = p.profile
    if not blank(prof) and prof.rows:
        out += ["", table([f"{prof.variant}: operator type", "share of kernel time"],
                          [[r.op, f(r.share_pct, ".1f", " %")] for r in prof.rows])]
    return "\n".join(out)


ClassifierVariants.sections = (
    Section("1/classifier-variants", "Classifier graph variants on the CPU provider", "the classifier-variant timing",
            of_kind("classifier_variants"), 100, render=classifier_variants),
)
