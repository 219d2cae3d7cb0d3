"""The OpenVINO engine: a sequence classifier on OpenVINO's CPU runtime, the same contract as the torch reference.

``load_classifier`` exports on first use (:func:`breaknli_fast.export.api.export_model`, format ``openvino``: the
project's ONNX export converted to IR, cached, judged against torch fp32 at the requested precision), then compiles
the IR for the CPU with the inference-precision hint of the precision (``f32``: every operation in fp32; ``bf16``:
OpenVINO's bf16 kernels, on CPUs with AVX-512 BF16 or AMX only) and the number of threads. Batches are padded to the
width their pairs' own lengths decide (``BatchedClassifier``) and run one at a time on all the threads
(``PERFORMANCE_HINT`` LATENCY, one stream); every setting is recorded in ``info.details``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines.base import CLASSIFIER, EngineInfo, Pair
from breaknli_fast.engines.batching import BatchedClassifier, pad_values
from breaknli_fast.engines.cpu_features import summary as cpu_summary
from breaknli_fast.engines.model_info import ModelLoadError, effective_max_length, label_permutation
from breaknli_fast.engines.options import EngineOptions, nested_options
from breaknli_fast.export.options import ExportOptions, ExportResult

HINTS = {"fp32": "f32", "bf16": "bf16"}


@dataclass
class OvOptions(EngineOptions):
    """The options of the openvino engine's loader: the common ones and the export's."""

    engine = "openvino"

    export: ExportOptions = nested_options(ExportOptions, roles=(CLASSIFIER,))


def _threads(threads: int | None) -> int:
    import os

    return int(threads) if threads else len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1


class OvClassifier(BatchedClassifier):
    """A classifier IR (``model.xml``) compiled for OpenVINO's CPU plugin."""

    cpu_max_batch = 16

    def __init__(self, folder: str | Path, model: str, precision: str = "fp32", opts: OvOptions | None = None,
                 exported: ExportResult | None = None):
        import openvino as ov
        from transformers import AutoConfig, AutoTokenizer

        o = opts or OvOptions()
        if precision not in HINTS:
            raise ModelLoadError(f"the openvino engine runs fp32 or bf16, not {precision!r}")
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=1, device="cpu")
        folder = Path(folder)
        config = AutoConfig.from_pretrained(str(folder))
        self.perm = label_permutation(config, o.label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self._pad_values = pad_values(self.tokenizer)
        core = ov.Core()
        props = {"INFERENCE_PRECISION_HINT": HINTS[precision], "INFERENCE_NUM_THREADS": _threads(o.threads),
                 "PERFORMANCE_HINT": "LATENCY", "NUM_STREAMS": 1}
        self.compiled = core.compile_model(str(folder / "model.xml"), "CPU", props)
        self.request = self.compiled.create_infer_request()
        self.inputs = [p.get_any_name() for p in self.compiled.inputs]
        got = {k: str(self.compiled.get_property(k)) for k in ("INFERENCE_PRECISION_HINT", "INFERENCE_NUM_THREADS")}
        m = exported.manifest if exported is not None else {}
        v = m.get("validation") or {}
        self.info = EngineInfo("openvino", CLASSIFIER, model, precision, "cpu", {
            "kind": "seq-cls", "openvino": ov.__version__, "export_dir": str(folder),
            "export_reused": exported.reused if exported is not None else None, "variant": m.get("variant"),
            "validation": {k: v.get(k) for k in ("n", "max_abs_logit", "agreement", "passed") if k in v},
            "compiled": got, "cpu": cpu_summary(), "max_batch": self.max_batch, **limits})

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, np.ndarray]:
        padded = self._padded(tokens, rows, self._pad_values, self.tokenizer.padding_side)
        rows_n = len(list(rows))
        return {name: padded.get(name, np.zeros((rows_n, padded["input_ids"].shape[1]), dtype=np.int64))
                for name in self.inputs}

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        out = self.request.infer(feeds)
        return np.asarray(next(iter(out.values())), dtype=np.float32)[:, self.perm]


def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> OvClassifier:
    """A sequence classifier on OpenVINO; ``opts``: :class:`OvOptions` of the classifier role."""
    from breaknli_fast.export.api import export_model

    o = OvOptions.build(CLASSIFIER, opts)
    exported = export_model(model, format="openvino", precision=precision, device=device, max_length=o.max_length,
                            label_map=o.label_map, **o.export.kwargs())
    return OvClassifier(exported.path, model, precision, o, exported)
