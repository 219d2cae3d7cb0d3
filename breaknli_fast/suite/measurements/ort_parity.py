"""Parity of the ``ort`` engine with the torch fp32 reference on real pairs (kind ``ort_parity``), on raw tensors
below the probes' labels.

Classifier: label agreement % and max |Δ logit| of ORT fp32 / int8 (and fp16 with ``fp16``) against torch fp32 on
the first ``n`` pairs of a dataset (default: the embedded SNLI sample). Generator: greedy and seeded sampling
(``Decoding()`` defaults, ``k`` candidates) token identity at fp32, greedy token agreement at int8, on generator
prompts built from the hypotheses.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Optional

from breaknli_fast.errors import UserError
from breaknli_fast.probes.breaknli.loop import MAX_K
from breaknli_fast.suite.base import Measurement, Section, option
from breaknli_fast.suite.format import blank, f, of_kind, table
from breaknli_fast.suite.result import ResultFile


@dataclass
class OrtParityConfig:
    classifier: Optional[str] = option(None, help="the classifier compared (none: the classifier is not)")
    generator: Optional[str] = option(None, help="the generator compared (none: the generator is not)")
    data: str = option("sample", help="the dataset of the pairs")
    n: int = option(500, min=1, help="pairs")
    prompts: int = option(10, min=1, help="hypotheses whose prompts are generated for (both modes)")
    k: int = option(20, min=1, max=MAX_K, help="sampled candidates per prompt")
    seed: int = option(13, help="the seed of the prompts' seeds")
    fp16: bool = option(False, help="also the fp16 classifier")
    max_length: int = option(256, min=8, max=4096, why="a pair's tokens", help="maximum tokens of a pair (classifiers)")


@dataclass
class OrtClassifierRow:
    engine: str | None = None
    precision: str | None = None
    label_agreement_pct: float | None = None
    max_abs_logit_diff: float | None = None
    accuracy_pct: float | None = None
    seconds_with_load: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OrtClassifier:
    model: str | None = None
    max_length: int | None = None
    torch_fp32_accuracy_pct: float | None = None
    rows: list[OrtClassifierRow] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OrtGeneratorRow:
    engine: str | None = None
    precision: str | None = None
    decoding: str | None = None
    candidates: int | None = None
    seeded: bool | None = None
    identical: int | None = None
    sequences: int | None = None
    token_agreement_pct: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OrtGenerator:
    model: str | None = None
    prompts: int | None = None
    k: int | None = None
    rows: list[OrtGeneratorRow] | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass
class OrtParityPayload:
    data: str | None = None
    seed: int | None = None
    classifier: OrtClassifier | None = None
    generator: OrtGenerator | None = None
    pairs: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class OrtParity(Measurement):
    name = "ort-parity"
    summary = "ONNX Runtime fp32 / int8 / fp16 against torch fp32 on real pairs (logits, tokens)"
    kind = "ort_parity"
    config_class = OrtParityConfig
    payload_class = OrtParityPayload
    requires = ("ort",)
    legacy_scripts = ("ort_parity.py",)

    def run(self, config: OrtParityConfig, recorder: Any) -> OrtParityPayload:
        import numpy as np

        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines import registry
        from breaknli_fast.engines.base import Decoding, derive_seed
        from breaknli_fast.prompts import CONTRADICT_PROMPT, ENTAIL_PROMPT

        if not config.classifier and not config.generator:
            raise UserError("ort-parity: name a classifier or a generator (or both)")
        payload = OrtParityPayload(data=config.data, seed=config.seed)
        data = load_examples(config.data, limit=config.n)
        pairs = [(e.premise, e.hypothesis) for e in data.examples]
        gold = [e.label for e in data.examples]
        payload.pairs = len(pairs)
        if config.classifier:
            ref = registry.load_classifier("torch", config.classifier, max_length=config.max_length).classify(pairs)
            ref_acc = float(np.mean([a == b for a, b in zip(ref.labels, gold)]) * 100)
            payload.classifier = OrtClassifier(model=config.classifier, max_length=config.max_length,
                                               torch_fp32_accuracy_pct=ref_acc, rows=[])
            for precision in ("fp32", "int8") + (("fp16",) if config.fp16 else ()):
                t0 = time.perf_counter()
                clf = registry.load_classifier("ort", config.classifier, precision=precision,
                                               max_length=config.max_length,
                                               tolerances={"min_agreement": 0.0, "max_abs_logit": None})
                out = clf.classify(pairs)
                payload.classifier.rows.append(OrtClassifierRow(
                    engine="ort", precision=precision,
                    label_agreement_pct=float((out.label_ids == ref.label_ids).mean() * 100),
                    max_abs_logit_diff=float(np.abs(out.logits - ref.logits).max()),
                    accuracy_pct=float(np.mean([a == b for a, b in zip(out.labels, gold)]) * 100),
                    seconds_with_load=round(time.perf_counter() - t0, 2)))
        if config.generator:
            hyps = [h for _, h in pairs[: config.prompts]]
            prompts = [CONTRADICT_PROMPT.format(h=h) for h in hyps] + [ENTAIL_PROMPT.format(h=h) for h in hyps]
            seeds = [derive_seed(config.seed, "parity", i) for i in range(len(prompts))]
            tg = registry.load_generator("torch", config.generator)
            payload.generator = OrtGenerator(model=config.generator, prompts=len(prompts), k=config.k, rows=[])
            for precision in ("fp32", "int8"):
                og = registry.load_generator("ort", config.generator, precision=precision,
                                             tolerances={"min_agreement": 0.0, "min_token_agreement": 0.0})
                for dec, n in ((Decoding(strategy="greedy"), 1), (Decoding(), config.k)):
                    if precision != "fp32" and dec.strategy != "greedy":
                        continue
                    a = tg.generate_ids(prompts, n, dec, seeds)
                    b = og.generate_ids(prompts, n, dec, seeds)
                    rows = [(x, y) for ra, rb in zip(a, b) for x, y in zip(ra, rb)]
                    same = sum(p == q for x, y in rows for p, q in zip(x, y))
                    total = sum(max(len(x), len(y)) for x, y in rows)
                    payload.generator.rows.append(OrtGeneratorRow(
                        engine="ort", precision=precision, decoding=dec.strategy, candidates=n,
                        seeded=dec.strategy == "sampling", identical=sum(x == y for x, y in rows),
                        sequences=len(rows), token_agreement_pct=100.0 * same / max(1, total)))
        return payload


def ort_parity(doc: ResultFile) -> str:
    p: OrtParityPayload = doc.payload
    out = [f"{p.pairs} pairs of `{p.data}`."]
    c = p.classifier
    if not blank(c):
        out += ["", f"Classifier `{c.model}` (torch fp32 accuracy on these pairs: "
                    f"{f(c.torch_fp32_accuracy_pct, '.1f')} %):", "",
                table(["engine", "precision", "label agreement vs torch fp32", "max abs Δ logit", "accuracy"],
                      [[r.engine, r.precision, f(r.label_agreement_pct, ".2f", " %"),
                        f(r.max_abs_logit_diff, ".3g"), f(r.accuracy_pct, ".1f", " %")]
                       for r in c.rows or []])]
    g = p.generator
    if not blank(g):
        out += ["", f"Generator `{g.model}`: {g.prompts} prompts, greedy and seeded sampling (K={g.k}):", "",
                table(["engine", "precision", "decoding", "identical outputs", "token agreement"],
                      [[r.engine, r.precision,
                        r.decoding + (f" K={r.candidates}, seeded" if r.seeded else ""),
                        f"{r.identical}/{r.sequences}", f(r.token_agreement_pct, ".2f", " %")]
                       for r in g.rows or []])]
    return "\n".join(out)


OrtParity.sections = (
    Section("2/ort-parity", "ONNX Runtime against torch fp32 on real pairs", "the ORT parity check",
            of_kind("ort_parity"), 10, render=ort_parity),
)
