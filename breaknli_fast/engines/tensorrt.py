"""The native TensorRT engine (classifiers only; TensorRT 10 Python runtime).

UNTESTED HERE: no TensorRT and no GPU on the development machines (see
``breaknli_fast/export/tensorrt.py``). Without TensorRT or a CUDA GPU, both loaders raise
:class:`EngineUnavailable` with one line saying what to install. Generators are not supported
yet (an autoregressive decoder with a KV cache needs its own engine pair and a decoding loop);
use ``--engine ort --device cuda`` for Flan-T5, optionally with ``provider="tensorrt"`` (ONNX
Runtime's TensorRT execution provider).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from breaknli_fast.engines.base import BatchedClassifier, EngineInfo, Pair
from breaknli_fast.engines.models import ModelLoadError, effective_max_length, load_config, model_kind
from breaknli_fast.engines.registry import EngineUnavailable

PRECISIONS = ("fp32", "fp16", "int8")
EXPORT_OPTS = ("cache_dir", "force", "calibration_pairs", "calibration_size", "validation_size", "tolerances", "validate",
               "progress", "out_dir")
GENERATOR_UNSUPPORTED = (
    "the tensorrt engine does not support generators yet: use --engine ort --device cuda for Flan-T5 "
    "(ONNX Runtime, optionally with its TensorRT execution provider)"
)


class TrtClassifier(BatchedClassifier):
    """A sequence classifier as a serialized TensorRT engine (built and validated by ``export_model``)."""

    def __init__(self, model: str, precision: str = "fp32", device: str = "cuda", label_map: Mapping[str, str] | None = None,
                 max_length: int = 256, token_budget: int = 8192, max_batch: int | None = None, **export_opts: Any):
        from transformers import AutoConfig, AutoTokenizer

        from breaknli_fast.engines.torch_ref import label_permutation
        from breaknli_fast.export import export_model
        from breaknli_fast.export.tensorrt import PLAN_FILE, TrtRunner, require_tensorrt

        if precision not in PRECISIONS:
            raise ModelLoadError(f"the tensorrt engine runs fp32, fp16 or int8, not {precision!r}")
        if not device.startswith("cuda"):
            raise ModelLoadError("the tensorrt engine runs on --device cuda only")
        require_tensorrt()
        max_batch = self.resolve_max_batch(max_batch, device)  # needed by the engine build, before __init__
        kw = {k: export_opts.pop(k) for k in list(export_opts) if k in EXPORT_OPTS}
        kw.setdefault("progress", False)
        self.exported = export_model(model, format="tensorrt", precision=precision, device=device,
                                     max_length=max_length, max_batch=max_batch, **kw)
        folder = self.exported.path
        self.runner = TrtRunner(folder / PLAN_FILE, device)
        super().__init__(token_budget=token_budget, max_batch=min(max_batch, self.runner.max_batch))
        config = AutoConfig.from_pretrained(str(folder))
        self.perm = label_permutation(config, label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        # the model's own limit (export_model built the profile within it) and the engine's profile
        self.max_length, limits = effective_max_length(min(max_length, self.runner.max_length or max_length), config,
                                                       self.tokenizer)
        limits["max_length_requested"] = max_length
        import onnx

        graph = next(iter(sorted(folder.glob("*.onnx"))))
        self.inputs = list(onnx.load(str(graph), load_external_data=False).graph.input)
        m = self.exported.manifest
        self.info = EngineInfo("tensorrt", "classifier", model, precision, device, {
            "kind": "seq-cls", "family": m.get("family"), "export_dir": str(folder), "export_reused": self.exported.reused,
            "variant": m.get("variant"), "tensorrt": m.get("tensorrt"),
            "validation": {k: (m.get("validation") or {}).get(k) for k in ("n", "max_abs_logit", "agreement", "passed")},
            "profile_max_length": self.runner.max_length, **limits,
        })

    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        enc = self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)
        return [len(x) for x in enc["input_ids"]]

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        from breaknli_fast.export.runtime import classifier_feeds

        feeds = classifier_feeds(self.tokenizer, pairs, self.inputs, self.max_length)
        return self.runner.run(feeds)["logits"][:, self.perm]


def load_classifier(model: str, precision: str = "fp32", device: str = "cuda", **opts: Any) -> BatchedClassifier:
    from breaknli_fast.export.tensorrt import require_tensorrt

    require_tensorrt()
    if device == "cpu":
        raise ModelLoadError("the tensorrt engine runs on --device cuda only")
    config = load_config(model)
    if model_kind(config) != "seq-cls":
        raise EngineUnavailable(
            "the tensorrt engine runs sequence classifiers only; for Flan-T5 as the NLI model use --engine ort --device cuda"
        )
    opts = {k: v for k, v in opts.items() if k not in ("prompt", "method")}
    return TrtClassifier(model, precision, device, **opts)


def load_generator(model: str, precision: str = "fp32", device: str = "cuda", **opts: Any) -> Any:
    raise EngineUnavailable(GENERATOR_UNSUPPORTED)
