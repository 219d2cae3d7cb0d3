"""The native TensorRT engine (classifiers only; TensorRT 10 Python runtime).

Not yet run on a GPU: the test-suite checks only the clean refusal (see
:mod:`breaknli_fast.backends.tensorrt.runtime`). Without TensorRT or a CUDA GPU, both loaders raise
:class:`EngineUnavailable` with one line saying what to install. Generators are not supported
yet (an autoregressive decoder with a KV cache needs its own engine pair and a decoding loop);
use ``--engine ort --device cuda`` for Flan-T5, optionally with ``provider="tensorrt"`` (ONNX
Runtime's TensorRT execution provider).

The classifier loader builds the plan on first use (:func:`breaknli_fast.export.api.export_model`, format
``tensorrt``, built by :mod:`.exporter`) and runs it on :class:`~breaknli_fast.backends.tensorrt.runtime.TrtRunner`.
Its options are :class:`TensorRTOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from transformers import AutoConfig, AutoTokenizer

from breaknli_fast.backends.ort.runtime import classifier_feeds
from breaknli_fast.backends.tensorrt.runtime import PLAN_FILE, TrtRunner, require_tensorrt
from breaknli_fast.engines.base import CLASSIFIER, EngineInfo, Pair
from breaknli_fast.engines.batching import BatchedClassifier
from breaknli_fast.engines.model_info import effective_max_length, label_permutation, load_config, model_kind
from breaknli_fast.engines.options import EngineOptions, nested_options
from breaknli_fast.engines.registry import EngineUnavailable
from breaknli_fast.export.api import export_model
from breaknli_fast.export.options import ExportOptions, ExportResult


@dataclass
class TensorRTOptions(EngineOptions):
    """The options of the tensorrt engine's classifier loader: the common ones (``threads`` and ``workers``
    are taken, as the study passes them to every engine, and unused: batches run on the GPU one after another)
    and the export options."""

    engine = "tensorrt"

    export: ExportOptions = nested_options(ExportOptions, roles=(CLASSIFIER,))  # passed through to export_model


class TrtClassifier(BatchedClassifier):
    """A sequence classifier as a serialized TensorRT engine (a folder built and validated by ``export_model``)."""

    def __init__(self, folder: str | Path, model: str, precision: str = "fp32", device: str = "cuda",
                 opts: TensorRTOptions | None = None, exported: ExportResult | None = None,
                 max_batch: int | None = None):
        o = opts or TensorRTOptions()
        folder = Path(folder)
        self.exported = exported
        self.runner = TrtRunner(folder / PLAN_FILE, device)
        max_batch = max_batch or self.runner.max_batch
        super().__init__(token_budget=o.token_budget, max_batch=min(max_batch, self.runner.max_batch))
        config = AutoConfig.from_pretrained(str(folder))
        self.perm = label_permutation(config, o.label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        # the model's own limit (export_model built the profile within it) and the engine's profile
        self.max_length, limits = effective_max_length(min(o.max_length, self.runner.max_length or o.max_length),
                                                       config, self.tokenizer)
        limits["max_length_requested"] = o.max_length
        import onnx  # optional (the onnx extra): installed where export_model just ran

        graph = next(iter(sorted(folder.glob("*.onnx"))))
        self.inputs = list(onnx.load(str(graph), load_external_data=False).graph.input)
        m = exported.manifest if exported is not None else {}
        self.info = EngineInfo("tensorrt", "classifier", model, precision, device, {
            "kind": "seq-cls", "family": m.get("family"), "export_dir": str(folder),
            "export_reused": exported.reused if exported is not None else None,
            "variant": m.get("variant"), "tensorrt": m.get("tensorrt"),
            "validation": {k: (m.get("validation") or {}).get(k) for k in ("n", "max_abs_logit", "agreement", "passed")},
            "profile_max_length": self.runner.max_length, **limits,
        })

    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        enc = self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)
        return [len(x) for x in enc["input_ids"]]

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        width = self._width(max(self._token_lengths(pairs)))  # the width the pairs' own lengths decide (batching)
        feeds = classifier_feeds(self.tokenizer, pairs, self.inputs, width, padding="max_length")
        return self.runner.run(feeds)["logits"][:, self.perm]


def load_classifier(model: str, precision: str = "fp32", device: str = "cuda", **opts: Any) -> BatchedClassifier:
    """A sequence classifier on TensorRT; ``opts``: :class:`TensorRTOptions` of the classifier role (``prompt``
    and ``method`` are taken and unused: text-to-text models do not run here)."""
    o = TensorRTOptions.build(CLASSIFIER, opts)
    require_tensorrt()
    config = load_config(model)
    if model_kind(config) != "seq-cls":
        raise EngineUnavailable(
            "the tensorrt engine runs sequence classifiers only; for Flan-T5 as the NLI model use --engine ort --device cuda"
        )
    max_batch = BatchedClassifier.resolve_max_batch(o.max_batch, device)  # needed by the engine build
    exported = export_model(model, format="tensorrt", precision=precision, device=device, max_length=o.max_length,
                            max_batch=max_batch, label_map=o.label_map, **o.export.kwargs())
    return TrtClassifier(exported.path, model, precision, device, o, exported, max_batch=max_batch)
