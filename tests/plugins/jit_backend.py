"""A whole backend in one module: a TorchScript classifier that exports on first use.

Everything a backend is, here in one place: its declaration (``BACKEND``, read by the registry), its loader
(``load_classifier``: export through :func:`breaknli_fast.export.api.export_model`, then open the folder), its
runtime (:class:`JitClassifier`: ``torch.jit.load`` of the traced model), and its exporter (format
``torchscript``: :class:`JitExporter`, a subclass of :class:`breaknli_fast.export.exporter.Exporter` that overrides
``variant`` / ``require`` / ``write_files`` / ``compare``, the last through the engine contract with
:func:`breaknli_fast.export.validate.classifier_figures`). Registered from the
tests with one line, ``registry.register("jit", "plugins.jit_backend")``: the proof that a new backend (OpenVINO,
say) is one folder and one registry line, with the cache, the lock, the manifest and the judging against the torch
reference coming from ``breaknli_fast.export``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines.backend import Backend
from breaknli_fast.engines.base import CLASSIFIER, EngineInfo, Pair
from breaknli_fast.engines.batching import BatchedClassifier, pad_tokens, pad_values
from breaknli_fast.engines.model_info import effective_max_length, label_permutation
from breaknli_fast.engines.options import EngineOptions, nested_options
from breaknli_fast.export.api import export_model
from breaknli_fast.export.errors import UnsupportedModelError
from breaknli_fast.export.exporter import ExportPlan, Exporter
from breaknli_fast.export.options import ExportOptions, ExportResult
from breaknli_fast.export.validate import classifier_figures

BACKEND = Backend(
    name="jit",
    loaders=__name__,
    options=f"{__name__}:JitOptions",
    precisions={CLASSIFIER: {"cpu": ("fp32",)}},
    requires=("torch",),
    install="pip install torch",
    exporter=f"{__name__}:JitExporter",
    formats=("torchscript",),
)
GRAPH = "model.pt"
INPUTS = ("input_ids", "attention_mask")


@dataclass
class JitOptions(EngineOptions):
    engine = "jit"

    export: ExportOptions = nested_options(ExportOptions, roles=(CLASSIFIER,))


# -- the runtime ------------------------------------------------------------------------------------------------

class JitClassifier(BatchedClassifier):
    def __init__(self, folder: str | Path, model: str, opts: JitOptions, exported: ExportResult | None = None):
        import torch
        from transformers import AutoConfig, AutoTokenizer

        super().__init__(token_budget=opts.token_budget, max_batch=opts.max_batch)
        folder = Path(folder)
        config = AutoConfig.from_pretrained(str(folder))
        self.perm = label_permutation(config, opts.label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.max_length, limits = effective_max_length(opts.max_length, config, self.tokenizer)
        self._pad_values = pad_values(self.tokenizer)
        self.net = torch.jit.load(str(folder / GRAPH))
        self.info = EngineInfo("jit", CLASSIFIER, model, "fp32", "cpu",
                               {"export_dir": str(folder), "export_reused": exported.reused if exported else None,
                                **limits})

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> Any:
        padded = pad_tokens(tokens, rows, self._pad_values, self.tokenizer.padding_side)
        return [padded[n] for n in INPUTS]

    def _run(self, feeds: Any) -> np.ndarray:
        import torch

        with torch.inference_mode():
            out = self.net(*(torch.from_numpy(np.asarray(f, dtype=np.int64)) for f in feeds))
        return out.float().numpy()[:, self.perm]


# -- the loader -------------------------------------------------------------------------------------------------

def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> JitClassifier:
    o = JitOptions.build(CLASSIFIER, opts)
    exported = export_model(model, format="torchscript", precision=precision, max_length=o.max_length,
                            label_map=o.label_map, **o.export.kwargs())
    return JitClassifier(exported.path, model, o, exported)


# -- the exporter (format "torchscript") ------------------------------------------------------------------------

class JitExporter(Exporter):
    FORMAT = "torchscript"
    PRECISIONS = ("fp32",)
    LIBRARIES = ("torch", "transformers")  # their versions join the cache key (Exporter.key_parts)

    def variant(self, kind: str, precision: str, device: str, fuse: bool = False,
                quantization: str | None = None) -> str:
        if kind != "seq-cls":
            raise UnsupportedModelError(f"the jit backend exports sequence classifiers, not {kind} models")
        return precision

    def require(self, kind: str) -> None:
        BACKEND.require()

    def write_files(self, plan: ExportPlan, stage: Path) -> dict[str, Any]:
        import torch
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(plan.src)
        model = AutoModelForSequenceClassification.from_pretrained(plan.src, dtype=torch.float32).eval()
        model.config.return_dict = False
        two = plan.val_pairs[:2]
        enc = tok([p for p, _ in two], [h for _, h in two], padding=True, return_tensors="pt")

        class Logits(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = model

            def forward(self, ids: Any, mask: Any) -> Any:
                return self.m(input_ids=ids, attention_mask=mask)[0]

        with torch.inference_mode(False), torch.no_grad():
            traced = torch.jit.trace(Logits().eval(), (enc["input_ids"], enc["attention_mask"]), check_trace=False)
        traced.save(str(stage / GRAPH))
        tok.save_pretrained(stage)
        model.config.save_pretrained(stage)
        return {"family": model.config.model_type, "exporter": "torch.jit.trace"}

    def compare(self, plan: ExportPlan, folder: Path) -> dict[str, Any]:
        clf = JitClassifier(folder, plan.src, JitOptions(max_length=plan.max_length, label_map=plan.label_map))
        return classifier_figures(clf, plan.src, plan.val_pairs, plan.max_length, plan.label_map)
