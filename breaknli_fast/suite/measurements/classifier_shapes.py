"""A roberta-shaped classifier alone, random weights, on torch fp32, ORT fp32 and ORT int8 (kind
``classifier_shapes``): a bare classifier graph, no probe or loop around it.

The shapes of a real MNLI checkpoint (hidden 768, 12 layers, 12 heads, FFN 3072, vocab 50265) without its weights.
The ORT graphs are made by ``export_model`` (validated against torch first); each engine runs the same batch
(``batch`` x ``length`` tokens, random ids, full attention mask) ``repeats`` times after ``warmup`` runs, the engines
in turn, the median reported.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from breaknli_fast.limits import MAX_BATCH_PAIRS, MAX_REPEATS, MAX_WARMUP
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import f, of_kind, table
from breaknli_fast.suite.result import ResultFile


@dataclass
class ClassifierShapesConfig:
    batch: int = option(32, min=1, max=MAX_BATCH_PAIRS, help="pairs per batch")
    length: int = option(128, min=4, max=512, why="roberta's positions", help="tokens per pair")
    repeats: int = option(5, min=1, max=MAX_REPEATS, help="timed runs per engine (median)")
    warmup: int = option(2, min=0, max=MAX_WARMUP, help="untimed runs first")
    layers: int = option(12, min=1, max=48, why="roberta-large has 24", help="layers")
    hidden: int = option(768, min=8, max=4096, why="roberta-large's is 1024", help="hidden size")
    heads: int = option(12, min=1, max=64, help="attention heads")
    ffn: int = option(3072, min=8, max=16384, help="feed-forward size")
    vocab: int = option(50265, min=700, max=250000, help="vocabulary size")
    threads: Optional[int] = option(None, min=1, help="intra-op threads (default: physical cores)")


@dataclass
class ShapeModel:
    family: str | None = None
    layers: int | None = None
    hidden: int | None = None
    heads: int | None = None
    ffn: int | None = None
    vocab: int | None = None
    parameters: int | None = None
    weights: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ShapeRow:
    engine: str | None = None
    median_s: float | None = None
    all_s: list[float] | None = None
    pairs_per_s: float | None = None
    speedup_vs_torch: float | None = None
    max_abs_logit_diff_vs_torch: float | None = None
    argmax_agreement_pct: float | None = None
    export_validation_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class ClassifierShapesPayload:
    model: ShapeModel | None = None
    batch: int | None = None
    length: int | None = None
    repeats: int | None = None
    warmup: int | None = None
    threads: int | None = None
    load_average_at_end: float | None = None
    rows: list[ShapeRow] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def build(folder: Path, c: ClassifierShapesConfig) -> Path:
    import torch
    from transformers import AutoModelForSequenceClassification, RobertaConfig

    from breaknli_fast.engines.random_weights import ID2LABEL, train_bpe_tokenizer

    tok = train_bpe_tokenizer(folder)
    cfg = RobertaConfig(vocab_size=c.vocab, hidden_size=c.hidden, num_hidden_layers=c.layers,
                        num_attention_heads=c.heads, intermediate_size=c.ffn, max_position_embeddings=514,
                        type_vocab_size=1, num_labels=3, id2label=ID2LABEL,
                        label2id={v: k for k, v in ID2LABEL.items()}, pad_token_id=tok.pad_token_id,
                        bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    cfg.architectures = ["RobertaForSequenceClassification"]
    torch.manual_seed(0)
    AutoModelForSequenceClassification.from_config(cfg).save_pretrained(folder, safe_serialization=True)
    return folder


class ClassifierShapes(Measurement):
    name = "classifier-shapes"
    summary = "a roberta-shaped classifier alone (random weights) on torch fp32, ORT fp32 and ORT int8"
    kind = "classifier_shapes"
    config_class = ClassifierShapesConfig
    payload_class = ClassifierShapesPayload
    requires = ("ort",)
    legacy_scripts = ("bench_classifier_shapes.py",)

    def run(self, config: ClassifierShapesConfig, recorder: Any) -> ClassifierShapesPayload:
        import numpy as np
        import torch
        from transformers import AutoModelForSequenceClassification

        from breaknli_fast.backends.ort.runtime import make_session
        from breaknli_fast.engines.cpu_features import physical_cores
        from breaknli_fast.errors import UserError
        from breaknli_fast.export import export_model

        if config.hidden % config.heads:
            raise UserError(f"hidden {config.hidden} is not a multiple of heads {config.heads}")
        threads = config.threads or physical_cores()
        torch.set_num_threads(threads)
        work = recorder.work
        src = build(work / "model", config)
        n_params = sum(p.numel() for p in AutoModelForSequenceClassification.from_pretrained(src).parameters())
        rng = np.random.default_rng(0)
        ids = rng.integers(4, 600, size=(config.batch, config.length), dtype=np.int64)
        ids[:, 0], ids[:, -1] = 0, 2  # <s> ... </s>
        mask = np.ones_like(ids)
        model = AutoModelForSequenceClassification.from_pretrained(src).eval()
        t_ids, t_mask = torch.from_numpy(ids), torch.from_numpy(mask)

        def run_torch() -> Any:
            with torch.inference_mode():
                return model(input_ids=t_ids, attention_mask=t_mask).logits.numpy()

        engines: list[tuple[str, Any, float | None]] = [("torch fp32", run_torch, None)]
        for precision in ("fp32", "int8"):
            t0 = time.perf_counter()
            res = export_model(str(src), precision=precision, cache_dir=work / "exports", validation_size=16,
                               tolerances={"min_agreement": 0.0} if precision == "int8" else None, progress=False)
            build_s = time.perf_counter() - t0
            sess, _ = make_session(res.path / "model.onnx", threads=threads)
            feeds = {"input_ids": ids, "attention_mask": mask}
            feeds = {i.name: feeds[i.name] for i in sess.get_inputs()}
            engines.append((f"ORT {precision}" + (" (dynamic)" if precision == "int8" else ""),
                            (lambda s=sess, fd=feeds: s.run(["logits"], fd)[0]), round(build_s, 1)))
        outs = {}
        for name, fn, _ in engines:
            for _ in range(config.warmup):
                outs[name] = fn()
        times: dict[str, list[float]] = {name: [] for name, _, _ in engines}
        for _ in range(config.repeats):
            for name, fn, _ in engines:
                t0 = time.perf_counter()
                outs[name] = fn()
                times[name].append(time.perf_counter() - t0)
        ref = outs["torch fp32"]
        t_torch = statistics.median(times["torch fp32"])
        rows = []
        for name, _, build_s in engines:
            t, out = statistics.median(times[name]), np.asarray(outs[name])
            rows.append(ShapeRow(engine=name, median_s=round(t, 5), all_s=[round(x, 5) for x in times[name]],
                                 pairs_per_s=round(config.batch / t, 2), speedup_vs_torch=round(t_torch / t, 3),
                                 max_abs_logit_diff_vs_torch=float(np.abs(out - ref).max()),
                                 argmax_agreement_pct=float((out.argmax(1) == ref.argmax(1)).mean() * 100),
                                 export_validation_s=build_s))
        return ClassifierShapesPayload(
            model=ShapeModel(family="roberta", layers=config.layers, hidden=config.hidden, heads=config.heads,
                             ffn=config.ffn, vocab=config.vocab, parameters=n_params, weights="random"),
            batch=config.batch, length=config.length, repeats=config.repeats, warmup=config.warmup, threads=threads,
            load_average_at_end=os.getloadavg()[0], rows=rows)


def classifier_shapes(doc: ResultFile) -> str:
    p: ClassifierShapesPayload = doc.payload
    m = p.model or ShapeModel()
    rows = [[r.engine, f((r.median_s or 0) * 1000, ".0f"), f(r.pairs_per_s, ".1f"),
             f(r.speedup_vs_torch, ".2f", "×"), f(r.max_abs_logit_diff_vs_torch, ".2g"),
             f(r.argmax_agreement_pct, ".0f", " %"), f(r.export_validation_s, ".0f")]
            for r in p.rows or []]
    return "\n".join([f"{m.family}-shaped classifier, random weights: {m.layers} layers, hidden {m.hidden}, "
                      f"{f((m.parameters or 0) / 1e6, '.1f')} M parameters; batch {p.batch} × {p.length} "
                      f"tokens (random ids); repeats: {p.repeats} in rounds (median) after warm-up runs: {p.warmup}; "
                      f"threads: {p.threads}.", "",
                      table(["engine", "ms / batch", "pairs / s", "speed-up vs torch", "max abs Δ logit vs torch",
                             "argmax agreement", "export + validation s"], rows)])


ClassifierShapes.sections = (
    Section("1/classifier-shapes", "A roberta-shaped classifier alone (random weights)", "the classifier-shape timing",
            of_kind("classifier_shapes"), 70, render=classifier_shapes),
)
