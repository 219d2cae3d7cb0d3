"""The peers: what a user would otherwise run, as loaders-only engines of the engine contract
(:class:`~breaknli_fast.engines.base.ClassifierBase` / :class:`~breaknli_fast.engines.base.GeneratorBase`), so
that the measurements time them exactly as they time the project's engines (``classify(pairs)``,
``generate(prompts, n, decoding, seeds)`` / ``generate_ids``).

They are no backend: nothing exports for them, ``--engine`` never names them, and they are measured only. Each is
the library called as its documentation shows:

- classifiers: ``transformers`` (``AutoModelForSequenceClassification``, ``batch`` pairs a call in the given order),
  ``optimum`` (``ORTModelForSequenceClassification`` exported from the same folder, fp32, the same batches),
  ``transformers-pipeline`` (``pipeline("text-classification")``, every label's score);
- generators: ``transformers`` (``model.generate`` with ``num_return_sequences = n``, ``batch`` prompts a call,
  one global seed), ``transformers-pipeline`` (``pipeline("text2text-generation")``), ``optimum``
  (``ORTModelForSeq2SeqLM``), ``ct2-int8`` / ``ct2-fp32`` (CTranslate2's ``translate_batch`` over the converted
  model: batches side by side on one thread each, its throughput setting; ``-intra``: one batch at a time on all
  the threads).

Their ``info.to_dict()`` says which runtime ran and how (the kernel / runtime column of BENCHMARKS.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from breaknli_fast.engines.base import ClassifierBase, Decoding, GeneratorBase, Predictions
from breaknli_fast.errors import UserError

CLASSIFIERS = ("transformers", "optimum", "transformers-pipeline")
GENERATORS = ("transformers", "transformers-pipeline", "optimum", "ct2-int8", "ct2-fp32", "ct2-int8-intra",
              "ct2-fp32-intra")


@dataclass
class PeerInfo:
    """What a peer says about itself: the runtime and its settings."""

    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.details)


def _label_order(model: Any) -> Any:
    """The permutation from a checkpoint's label ids to the canonical order the engines give."""
    from breaknli_fast.engines.model_info import label_permutation, load_config

    return label_permutation(load_config(str(model)))


class _HFClassifier(ClassifierBase):
    """transformers' or optimum's sequence classifier, ``batch`` pairs a call in the given order."""

    def __init__(self, model: str | Path, batch: int, optimum: bool = False):
        import numpy as np
        from transformers import AutoTokenizer

        self.np, self.batch, self.optimum = np, batch, optimum
        self.tok = AutoTokenizer.from_pretrained(model)
        self.perm = _label_order(model)
        if optimum:
            from optimum.onnxruntime import ORTModelForSequenceClassification

            self.model = ORTModelForSequenceClassification.from_pretrained(model, export=True)
            self.info = PeerInfo({"runtime": "optimum ORTModelForSequenceClassification (fp32, export=True)",
                                  "batch_pairs": batch})
        else:
            from transformers import AutoModelForSequenceClassification

            self.model = AutoModelForSequenceClassification.from_pretrained(model).eval()
            self.info = PeerInfo({"runtime": "transformers AutoModelForSequenceClassification (torch fp32)",
                                  "batch_pairs": batch})

    def classify(self, pairs: Sequence[tuple[str, str]]) -> Predictions:
        import torch

        outs = []
        with torch.inference_mode():
            for i in range(0, len(pairs), self.batch):
                b = pairs[i:i + self.batch]
                enc = self.tok([p for p, _ in b], [h for _, h in b], padding=True, truncation=True, max_length=256,
                               return_tensors="pt")
                logits = self.model(**enc).logits
                outs.append(self.np.asarray(logits if self.optimum else logits.float().numpy(), dtype=self.np.float32))
        return Predictions(self.np.concatenate(outs)[:, self.perm])  # canonical label order, as the engines give


class _PipelineClassifier(ClassifierBase):
    """``pipeline("text-classification")`` as a user writes it (torch fp32), every label's score."""

    def __init__(self, model: str | Path, batch: int):
        import numpy as np
        from transformers import AutoModelForSequenceClassification, AutoTokenizer, pipeline

        from breaknli_fast.engines.base import LABELS

        self.np, self.batch, self.labels = np, batch, LABELS
        m = AutoModelForSequenceClassification.from_pretrained(model)
        self.pipe = pipeline("text-classification", model=m, tokenizer=AutoTokenizer.from_pretrained(model), device=-1)
        self.names = {i: str(n).lower() for i, n in m.config.id2label.items()}
        self.info = PeerInfo({"runtime": "transformers pipeline text-classification (torch fp32)",
                              "batch_pairs": batch})

    def classify(self, pairs: Sequence[tuple[str, str]]) -> Predictions:
        out = self.pipe([{"text": p, "text_pair": h} for p, h in pairs], batch_size=self.batch, truncation=True,
                        top_k=None)
        logits = self.np.full((len(pairs), len(self.labels)), -self.np.inf, dtype=self.np.float32)
        for i, scores in enumerate(out):
            for s in scores:
                name = str(s["label"]).lower()
                if name in self.labels:
                    logits[i, self.labels.index(name)] = self.np.log(max(float(s["score"]), 1e-30))
        return Predictions(logits)


class _HFGenerator(GeneratorBase):
    """transformers' ``generate`` (or its text2text pipeline, or optimum's ORTModelForSeq2SeqLM), ``batch``
    prompts a call, ``n`` sequences per prompt, one global seed per call."""

    def __init__(self, model: str | Path, batch: int, seed: int, kind: str):
        from transformers import AutoTokenizer

        self.batch, self.seed, self.kind = batch, seed, kind
        self.tok = AutoTokenizer.from_pretrained(model)
        if kind == "optimum":
            from optimum.onnxruntime import ORTModelForSeq2SeqLM

            self.model = ORTModelForSeq2SeqLM.from_pretrained(model, export=True)
            runtime = "optimum ORTModelForSeq2SeqLM (fp32, export=True)"
        else:
            from transformers import AutoModelForSeq2SeqLM

            self.model = AutoModelForSeq2SeqLM.from_pretrained(model).eval()
            runtime = "transformers generate (torch fp32)"
            if kind == "transformers-pipeline":
                from transformers import pipeline

                self.pipe = pipeline("text2text-generation", model=self.model, tokenizer=self.tok, device=-1)
                runtime = "transformers pipeline text2text-generation (torch fp32)"
        self.info = PeerInfo({"runtime": runtime, "batch_prompts": batch})

    def _kwargs(self, n: int, d: Decoding) -> dict[str, Any]:
        # num_beams=1: the text2text pipeline otherwise defaults to 4 beams (transformers 4.5x)
        kw = dict(do_sample=True, num_beams=1, top_k=d.top_k, top_p=d.top_p, max_new_tokens=d.max_new_tokens,
                  num_return_sequences=n)
        if d.min_new_tokens:
            kw["min_new_tokens"] = d.min_new_tokens
        return kw

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                     seeds: Sequence[int]) -> list[list[list[int]]]:
        import torch

        torch.manual_seed(self.seed)
        rows: list[list[int]] = []
        with torch.inference_mode():
            for i in range(0, len(prompts), self.batch):
                enc = self.tok(list(prompts[i:i + self.batch]), return_tensors="pt", padding=True, truncation=True,
                               max_length=256)
                rows += [row[1:] for row in self.model.generate(**enc, **self._kwargs(n, decoding)).tolist()]
        return [rows[j:j + n] for j in range(0, len(rows), n)]

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        import torch

        if self.kind == "transformers-pipeline":
            torch.manual_seed(self.seed)
            out = self.pipe(list(prompts), batch_size=min(self.batch, len(prompts)), **self._kwargs(n, decoding))
            return [[d["generated_text"] for d in (group if isinstance(group, list) else [group])] for group in out]
        return [self.tok.batch_decode(rows, skip_special_tokens=True)
                for rows in self.generate_ids(prompts, n, decoding, seeds)]

    def count_tokens(self, texts: Any) -> int:
        texts = list(texts)
        return sum(len(x) for x in self.tok(texts, add_special_tokens=False)["input_ids"]) if texts else 0


class _Ct2Generator(GeneratorBase):
    """CTranslate2's ``translate_batch`` over the model converted by the project's ct2 export, ``batch`` prompts a
    batch; ``intra``: one batch at a time on all ``threads`` (else batches side by side, one thread each)."""

    def __init__(self, model: str | Path, batch: int, seed: int, threads: int, compute: str, intra: bool):
        import ctranslate2
        from transformers import AutoTokenizer

        from breaknli_fast.export import export_model

        folder = export_model(str(model), format="ct2", progress=False).path
        inter, intra_threads = (1, threads) if intra else (threads, 1)
        self.tr = ctranslate2.Translator(str(folder), device="cpu", compute_type=compute, inter_threads=inter,
                                         intra_threads=intra_threads)
        self.vocab = _ct2_vocabulary(Path(folder))
        self.tok, self.batch = AutoTokenizer.from_pretrained(model), batch
        self._sources: dict[tuple[str, ...], list[list[str]]] = {}
        ctranslate2.set_random_seed(seed + 1)
        self.info = PeerInfo({"runtime": f"ctranslate2 {ctranslate2.__version__} translate_batch",
                              "compute_type": compute, "batch_prompts": batch, "inter_threads": inter,
                              "intra_threads": intra_threads})

    def prepare(self, prompts: Sequence[str]) -> None:
        """The prompts' tokens, once, before the timing: CTranslate2's own work is what is timed."""
        key = tuple(prompts)
        if key not in self._sources:
            self._sources = {key: [self.tok.convert_ids_to_tokens(ids) for ids in self.tok(list(prompts))["input_ids"]]}

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding,
                     seeds: Sequence[int]) -> list[list[list[int]]]:
        self.prepare(prompts)
        res = self.tr.translate_batch(self._sources[tuple(prompts)], max_batch_size=self.batch, beam_size=1,
                                      num_hypotheses=n,
                                      sampling_topk=decoding.top_k, sampling_topp=decoding.top_p,
                                      max_decoding_length=decoding.max_new_tokens,
                                      min_decoding_length=decoding.min_new_tokens or 0)
        return [[[self.vocab[t] for t in h] for h in r.hypotheses] for r in res]


def _ct2_vocabulary(folder: Path) -> dict[str, int]:
    """CTranslate2's target vocabulary of a converted model (token -> id)."""
    for name in ("shared_vocabulary.json", "target_vocabulary.json"):
        p = folder / name
        if p.is_file():
            return {t: i for i, t in enumerate(json.loads(p.read_text()))}
    raise UserError(f"{folder}: no CTranslate2 vocabulary file")


def load_peer_classifier(name: str, model: str | Path, batch: int) -> ClassifierBase:
    """The classifier peer ``name`` (:data:`CLASSIFIERS`) of ``model``."""
    if name in ("transformers", "optimum"):
        return _HFClassifier(model, batch, optimum=name == "optimum")
    if name == "transformers-pipeline":
        return _PipelineClassifier(model, batch)
    raise UserError(f"unknown classifier peer {name!r} (known: {', '.join(CLASSIFIERS)})")


def load_peer_generator(name: str, model: str | Path, batch: int, seed: int = 0, threads: int = 1) -> GeneratorBase:
    """The generator peer ``name`` (:data:`GENERATORS`) of ``model``."""
    if name in ("transformers", "transformers-pipeline", "optimum"):
        return _HFGenerator(model, batch, seed, name)
    if name.startswith("ct2-") and name in GENERATORS:
        return _Ct2Generator(model, batch, seed, threads, "int8" if "int8" in name else "float32",
                             name.endswith("-intra"))
    raise UserError(f"unknown generator peer {name!r} (known: {', '.join(GENERATORS)})")
