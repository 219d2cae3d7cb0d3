"""The OpenVINO engine: the three roles on OpenVINO's CPU runtime, the same contract as the torch reference.

The loaders export on first use (:func:`breaknli_fast.export.api.export_model`, format ``openvino``: the project's
ONNX graphs converted to IR, int8 weights for ``int8``, cached, judged against torch fp32 at the requested precision,
batch invariance included), then compile the IR for the CPU with the precision's properties
(:func:`.runtime.compile_properties`):

* classifier: a sequence classifier (``model.xml``), or Flan-T5 as an NLI model on the step graphs;
* generator: Flan-T5 on the project's two T5 step graphs (``step_encoder_model.xml``, ``step_decoder_model.xml``),
  stepped by the shared :class:`~breaknli_fast.engines.stepgraph.StepGraphStepper`, so sampling, greedy and beam
  search run the same code as the torch and ort engines;
* mask filler: a masked LM's graph (``model.xml``, output ``log_probs`` at the mask positions).

Batches are padded to the width their own inputs decide (``BatchedClassifier``); every setting is recorded in
``info.details``. The loaders' options are :class:`OvOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER, EngineInfo, Pair
from breaknli_fast.engines.batching import (LENGTH_STEP, BatchedClassifier, check_length_step, pad_values,
                                            split_threads)
from breaknli_fast.engines.cpu_features import summary as cpu_summary
from breaknli_fast.engines.generation import GenerationOptions, HFGenerator, generation_config_for
from breaknli_fast.engines.hf import Seq2SeqNLIMixin
from breaknli_fast.engines.model_info import (ModelLoadError, answer_token_ids, effective_max_length, label_permutation,
                                              load_config, model_kind, require_masked_lm)
from breaknli_fast.engines.options import nested_options, option
from breaknli_fast.engines.stepgraph import GraphMaskFiller, StepGraphStepper, graph_feeds
from breaknli_fast.export.options import ExportOptions, ExportResult
from breaknli_fast.prompts import NLI_PROMPTS

from breaknli_fast.backends.openvino.ir import read_settings
from breaknli_fast.backends.openvino.runtime import OvSession, compile_properties, total_threads

CLASSIFIER_GRAPH = "model.xml"
MLM_GRAPH = "model.xml"
STEP_GRAPHS = ("step_encoder_model.xml", "step_decoder_model.xml")


@dataclass
class OvOptions(GenerationOptions):
    """The options of the openvino engine's loaders: the common ones, the generator's and the export's."""

    engine = "openvino"

    # a classifier's padded widths: multiples of this (None: OvClassifier.default_step, by the model's size)
    length_step: int | None = option(None, roles=(CLASSIFIER,))
    export: ExportOptions = nested_options(ExportOptions)

    def __post_init__(self) -> None:
        if self.length_step is not None:
            self.length_step = check_length_step(self.length_step, ModelLoadError)


def _group(folder: Path) -> int | None:
    """int8's activation group, as the export wrote it beside the IR."""
    return read_settings(folder).get("group_size")


def _manifest(folder: Path) -> dict[str, Any]:
    import json

    p = Path(folder) / "manifest.json"
    return json.loads(p.read_text()) if p.is_file() else {}


def _details(exported: ExportResult | None, folder: Path, session: dict[str, Any]) -> dict[str, Any]:
    m = exported.manifest if exported is not None else _manifest(folder)
    v = m.get("validation") or {}
    return {"kind": m.get("kind"), "export_dir": str(folder),
            "export_reused": exported.reused if exported is not None else None, "variant": m.get("variant"),
            **({"int8": read_settings(folder)} if read_settings(folder) else {}),
            "validation": {k: v.get(k) for k in ("n", "max_abs_logit", "agreement", "topk_agreement", "generation",
                                                 "batch_invariance", "passed") if k in v},
            **session, "cpu": cpu_summary()}


def _session(folder: Path, graph: str, precision: str, threads: int, streams: int) -> OvSession:
    return OvSession(folder / graph, compile_properties(precision, threads, streams, _group(folder)))


def _workers(o: OvOptions) -> tuple[int, int]:
    """(workers, threads in all): one worker on one stream of all the threads, whatever ``workers`` asks
    (:mod:`.runtime`: one inference at a time in the process); a bad ``workers`` is refused as elsewhere."""
    total = total_threads(o.threads)
    split_threads(total, o.workers, error=ModelLoadError)
    return 1, total


class OvClassifier(BatchedClassifier):
    """A sequence-classifier IR (``model.xml``) compiled for OpenVINO's CPU plugin."""

    # 32 pairs a batch: at real shapes (1,000 SNLI pairs, 2-core AMD EPYC, int8, one interleaved run each) 32 ran
    # roberta-base at 285 pairs/s against 274 for 16 and 264 for 8, roberta-large at 79.2 against 77.7; on mini-nli
    # (2,724 pairs, 4 rounds) 2,893-3,564 pairs/s against 2,570-3,575 for 16, within the spread (docs/export.md)
    cpu_max_batch = 32
    # Padded widths without length_step: each pair's own length (1) for models of at least this hidden size, else
    # multiples of 8. The CPU plugin pays for every change of input shape between two calls (0.16 ms on the mini
    # classifier, hidden size 256), so exact widths ran the mini loop's classifier stages slower, while at the
    # roberta-base shape (768) they ran 4-11 % faster and at roberta-large's 9 % (docs/export.md); no size in between
    # was measured
    exact_width_hidden_size = 768

    @classmethod
    def default_step(cls, config: Any) -> int:
        """The padded widths' step for a model of this config when ``length_step`` is not given."""
        hidden = getattr(config, "hidden_size", None) or getattr(config, "d_model", None) or 0
        return 1 if int(hidden) >= cls.exact_width_hidden_size else LENGTH_STEP

    def __init__(self, folder: str | Path, model: str, precision: str = "fp32", opts: OvOptions | None = None,
                 exported: ExportResult | None = None):
        from transformers import AutoConfig, AutoTokenizer

        o = opts or OvOptions()
        n_workers, threads = _workers(o)
        folder = Path(folder)
        config = AutoConfig.from_pretrained(str(folder))
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=n_workers, device="cpu",
                         length_step=o.length_step if o.length_step is not None else self.default_step(config))
        self.perm = label_permutation(config, o.label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self._pad_values = pad_values(self.tokenizer)
        self.session = _session(folder, CLASSIFIER_GRAPH, precision, threads, n_workers)
        self.inputs = self.session.get_inputs()
        self.info = EngineInfo("openvino", CLASSIFIER, model, precision, "cpu", {
            **_details(exported, folder, self.session.details), "workers": self.workers.n,
            "max_batch": self.max_batch, "batch_multiple": self.batch_multiple, "length_step": self.length_step,
            **limits})

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, np.ndarray]:
        return graph_feeds(self._padded(tokens, rows, self._pad_values, self.tokenizer.padding_side), self.inputs)

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return np.asarray(self.session.run(None, feeds)[0], dtype=np.float32)[:, self.perm]


def _stepper(folder: Path, precision: str, threads: int, streams: int) -> StepGraphStepper:
    def open_session(path: Path) -> tuple[OvSession, dict[str, Any]]:
        s = _session(path.parent, path.name, precision, threads, streams)
        return s, s.details

    return StepGraphStepper(folder, open_session, STEP_GRAPHS, what="openvino T5")


class OvSeq2SeqClassifier(Seq2SeqNLIMixin, BatchedClassifier):
    """Flan-T5 as the NLI model on OpenVINO: first-step logits over the answer words (``score``) or greedy
    generation parsed to a label (``generate``), on the T5 stepper."""

    def __init__(self, folder: str | Path, model: str, precision: str = "fp32", opts: OvOptions | None = None,
                 exported: ExportResult | None = None):
        from transformers import AutoConfig, AutoTokenizer

        o = opts or OvOptions()
        prompt, method = o.prompt, o.method
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, length_step=o.length_step)
        if prompt not in NLI_PROMPTS:
            raise ModelLoadError(f"unknown NLI prompt {prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if method not in ("score", "generate"):
            raise ModelLoadError(f"unknown seq2seq classification method {method!r}; use score or generate")
        folder = Path(folder)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        config = AutoConfig.from_pretrained(str(folder))
        self.model = _stepper(folder, precision, total_threads(o.threads), 1)
        self.template = NLI_PROMPTS[prompt]
        self.method = method
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(config.decoder_start_token_id or 0)
        self.eos_id = int(config.eos_token_id)
        self.input_device = "cpu"
        self.info = EngineInfo("openvino", CLASSIFIER, model, precision, "cpu",
                               {**_details(exported, folder, self.model.details), "prompt": prompt, "method": method,
                                "workers": 1, **limits})


def open_classifier(folder: str | Path, model: str, precision: str = "fp32", opts: OvOptions | None = None,
                    exported: ExportResult | None = None) -> BatchedClassifier:
    from transformers import AutoConfig

    cls = OvClassifier if model_kind(AutoConfig.from_pretrained(str(folder))) == "seq-cls" else OvSeq2SeqClassifier
    return cls(folder, model, precision, opts, exported)


def open_generator(folder: str | Path, model: str, precision: str = "fp32", opts: OvOptions | None = None,
                   exported: ExportResult | None = None) -> HFGenerator:
    """The openvino generator over an export folder (the T5 step graphs as IR)."""
    from transformers import AutoConfig, AutoTokenizer

    o = opts or OvOptions()
    folder = Path(folder)
    n_workers, total = _workers(o)
    gen_config = generation_config_for(folder, model, "openvino", "--engine torch")
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = AutoConfig.from_pretrained(str(folder))
    stepper = _stepper(folder, precision, total, n_workers)
    info = EngineInfo("openvino", GENERATOR, model, precision, "cpu",
                      {**_details(exported, folder, stepper.details), "workers": n_workers})
    return HFGenerator(None, tok, info, device="cpu", stepper=stepper, config=config, generation_config=gen_config,
                       workers=n_workers, max_input_length=o.max_input_length, prompt_batch=o.prompt_batch)


def open_mask_filler(folder: str | Path, model: str, precision: str = "fp32", opts: OvOptions | None = None,
                     exported: ExportResult | None = None) -> GraphMaskFiller:
    from transformers import AutoConfig, AutoTokenizer

    o = opts or OvOptions()
    folder = Path(folder)
    config = AutoConfig.from_pretrained(str(folder))
    tok = AutoTokenizer.from_pretrained(str(folder))
    max_length, limits = effective_max_length(o.max_length, config, tok)
    n_workers, threads = _workers(o)
    session = _session(folder, MLM_GRAPH, precision, threads, n_workers)
    info = EngineInfo("openvino", MASK_FILLER, model, precision, "cpu", {"workers": n_workers, **limits})
    filler = GraphMaskFiller(session, _details(exported, folder, session.details), tok, int(config.vocab_size),
                             max_length, workers=n_workers, token_budget=o.token_budget, max_batch=o.max_batch,
                             info=info)
    info.details.update({"max_batch": filler.max_batch, "whole_word_tokens": len(filler.vocab),
                         "tokens": filler.vocab.scheme})
    return filler


def _export(model: str, precision: str, max_length: int, export: ExportOptions, task: str | None = None,
            label_map: Any = None) -> ExportResult:
    from breaknli_fast.export.api import export_model

    return export_model(model, format="openvino", precision=precision, device="cpu", max_length=int(max_length),
                        task=task, label_map=label_map, **export.kwargs())


def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    """A sequence classifier or a text-to-text NLI model (Flan-T5) on OpenVINO; ``opts``: :class:`OvOptions` of the
    classifier role."""
    o = OvOptions.build(CLASSIFIER, opts)
    exported = _export(model, precision, o.max_length, o.export, label_map=o.label_map)
    return open_classifier(exported.path, model, precision, o, exported)


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    """Flan-T5 on OpenVINO (the project's T5 step graphs as IR) behind the shared :class:`HFGenerator`; ``opts``:
    :class:`OvOptions` of the generator role. As the ort generator's, the export is judged on what generation uses
    (greedy tokens, non-finite outputs), not on NLI-scoring label agreement."""
    o = OvOptions.build(GENERATOR, opts)
    if model_kind(load_config(model)) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    export = replace(o.export, tolerances={"min_agreement": None, **(o.export.tolerances or {})})
    exported = _export(model, precision, o.max_input_length, export)
    return open_generator(exported.path, model, precision, o, exported)


def load_mask_filler(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> GraphMaskFiller:
    """A masked language model on OpenVINO behind the mask-filler contract; ``opts``: :class:`OvOptions` of the mlm
    role."""
    o = OvOptions.build(MASK_FILLER, opts)
    require_masked_lm(model)
    exported = _export(model, precision, o.max_length, o.export, task="mlm")
    return open_mask_filler(exported.path, model, precision, o, exported)
