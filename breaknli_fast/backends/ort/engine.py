"""The ONNX Runtime engine: the same contract as the torch reference (:mod:`breaknli_fast.backends.pytorch`), on
the project's own exported graphs.

``load_classifier`` / ``load_generator`` / ``load_mask_filler`` export the model on first use
(:func:`breaknli_fast.export.api.export_model`, format ``onnx``: built by :mod:`.exporter`, validated against the
torch engine at fp32, cached), then open the export on the runtime (:mod:`.runtime`, :mod:`.t5_runtime`). The
classes here also open an export folder directly (``from_folder``), which is how the exporter validates an export
through the engine contract.

* device ``cpu``: the CPU provider; ``int8`` is dynamic quantization with each row's own activation scale, so a
  sample's answer does not depend on its batch (``quantization=static`` for a sequence classifier: scales fixed at
  export; ``quantization=dynamic-batch``: ONNX Runtime's per-tensor scales, batch-dependent, for comparison);
* device ``cuda[:N]``: the CUDA provider (onnxruntime-gpu); ``int8`` is a static symmetric QDQ graph;
  ``provider="tensorrt"`` puts the TensorRT execution provider in front.

Flan-T5 (generator, or NLI model) runs on the project's two T5 graphs (:mod:`.t5`): sampling, greedy, beam and
diverse beam search through :class:`~.t5_runtime.OrtSeq2SeqStepper`, with the same code as the torch engine
(:mod:`breaknli_fast.engines.sampling`, :mod:`breaknli_fast.engines.decoding`). On CUDA the stepper's state goes
through host memory at every step (numpy feeds): correct, not fast; the torch engine is the fast path on a GPU.

Session options: graph optimisation ALL, intra-op threads = physical cores (override with ``threads``),
sequential execution; all recorded in ``info.details``. The loaders' options are :class:`OrtOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
from transformers import AutoConfig, AutoTokenizer

from breaknli_fast.backends.ort.runtime import SessionMaskFiller, graph_feeds, make_session, physical_cores
from breaknli_fast.backends.ort.t5_runtime import OrtSeq2SeqStepper
from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER, EngineInfo, Pair
from breaknli_fast.engines.batching import BatchedClassifier, check_length_step, pad_values, split_threads
from breaknli_fast.engines.generation import GenerationOptions, HFGenerator, generation_config_for
from breaknli_fast.engines.hf import Seq2SeqNLIMixin
from breaknli_fast.engines.model_info import (ModelLoadError, answer_token_ids, effective_max_length, label_permutation,
                                              load_config, model_kind, require_masked_lm)
from breaknli_fast.engines.options import nested_options, option, parse_flag
from breaknli_fast.export.api import export_model
from breaknli_fast.export.options import ExportOptions, ExportResult
from breaknli_fast.prompts import NLI_PROMPTS


@dataclass
class OrtOptions(GenerationOptions):
    """The options of the ort engine's loaders: the common ones, the generator's, and these."""

    engine = "ort"

    provider: str | None = option()  # cpu, cuda or tensorrt (ONNX Runtime's TensorRT execution provider)
    # the fast sampler takes its top k from the decoder graph's TopK (False: the full logits, then torch.topk)
    graph_topk: bool = option(True, roles=(GENERATOR,))
    # sampling cuts a call of several prompts into at least this many batches (None: CPU_MIN_BATCHES on the CPU, 1
    # elsewhere), so that a call smaller than --gen-batch still gives each core a batch
    min_batches: int | None = option(None, roles=(GENERATOR,))
    # a sequence classifier's padded widths: multiples of this (None: 1 on the CPU, each pair's own length; 8 on other
    # providers, where every new shape costs more); a pair's width stays a function of its own length
    length_step: int | None = option(None, roles=(CLASSIFIER,))
    export: ExportOptions = nested_options(ExportOptions)  # passed through to export_model

    def __post_init__(self) -> None:
        self.graph_topk = parse_flag(self.graph_topk, ModelLoadError)
        if self.min_batches is not None and (not str(self.min_batches).isdigit() or int(self.min_batches) < 1):
            raise ModelLoadError(f"min_batches must be a whole number, at least 1 (got {self.min_batches!r})")
        if self.length_step is not None:
            self.length_step = check_length_step(self.length_step, ModelLoadError)


# On the CPU the generator's batches run side by side, one per worker and core (2 x 1 threads on 2 cores: one
# batch per core beats one batch on both, BENCHMARKS.md); a call with fewer prompts than --gen-batch (the BreakNLI
# loop's calls: the correct examples of one chunk) is still cut in two batches of near-equal rows, so that both
# cores work until the end. A constant, not the worker count: the batches, hence int8's candidates, do not depend
# on --workers (fp32's never do).
CPU_MIN_BATCHES = 2


def _export(model: str, precision: str, device: str, max_length: int, export: ExportOptions,
            task: str | None = None, label_map: Mapping[str, str] | None = None) -> ExportResult:
    return export_model(model, format="onnx", precision=precision, device="cpu" if device == "cpu" else "cuda",
                        max_length=int(max_length), task=task, label_map=label_map, **export.kwargs())


def cpu_workers(device: str, threads: int | None, workers: int | str | None) -> tuple[int, int | None]:
    """(workers, intra-op threads per session) for the ``threads`` CPU threads the user gave (default:
    physical cores), split as :func:`~breaknli_fast.engines.batching.split_threads` does; on CUDA one
    worker and the threads unchanged."""
    if device != "cpu":
        return 1, threads
    return split_threads(int(threads) if threads else physical_cores(), workers, error=ModelLoadError)


def details(exported: ExportResult | None, session: dict[str, Any]) -> dict[str, Any]:
    """What config.json records of an engine over an export (the export's identity and validation, the session)."""
    if exported is None:
        return dict(session)
    m = exported.manifest
    v = m.get("validation") or {}
    return {
        "kind": m.get("kind"),
        "family": m.get("family"),
        "export_dir": str(exported.path),
        "export_reused": exported.reused,
        "variant": m.get("variant"),
        **({"fusion": m["fusion"]} if m.get("fusion") else {}),
        "opset": m.get("opset"),
        "validation": {k: v.get(k) for k in ("n", "max_abs_logit", "agreement", "topk_agreement", "generation",
                                             "step_graphs", "passed") if k in v},
        **session,
    }


class OrtClassifier(BatchedClassifier):
    """A sequence classifier graph (``model.onnx``, output ``logits``) on ONNX Runtime."""

    # On the CPU, smaller batches of the small models run faster with two workers side by side, and 16 keeps the
    # number of calls moderate (BENCHMARKS.md, batch sizes). Other providers keep DEFAULT_MAX_BATCH.
    cpu_max_batch = 16
    # and a call's batches come in pairs of near-equal size there, so that the two workers finish together (a call of
    # 50 pairs: 13 + 13 + 13 + 11, not 16 + 16 + 16 + 2; docs/export.md)
    cpu_batch_multiple = 2
    # On the CPU a pair is padded to its own length, not the next multiple of 8: at the roberta-base shape the padding
    # of multiples of 8 was 12 % of the tokens of the SNLI sample's pairs, and exact widths ran the int8 classifier
    # 9-17 % faster, at roberta-large's 10 % (docs/export.md); MLAS has no cost per new shape
    cpu_length_step = 1

    def __init__(self, folder: str | Path, model: str, precision: str = "fp32", device: str = "cpu",
                 opts: OrtOptions | None = None, exported: ExportResult | None = None):
        o = opts or OrtOptions()
        n_workers, threads = cpu_workers(device, o.threads, o.workers)
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=n_workers, device=device,
                         length_step=o.length_step)
        folder = Path(folder)
        self.exported = exported
        config = AutoConfig.from_pretrained(str(folder))
        self.perm = label_permutation(config, o.label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        # the graph indexes the model's position table: never feed it longer sequences than that holds
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self._pad_values = pad_values(self.tokenizer)
        self.session, sess_details = make_session(folder / "model.onnx", device=device, provider=o.provider,
                                                  threads=threads, fp16=precision == "fp16")
        self.inputs = self.session.get_inputs()
        self.device = device
        self.use_io_binding = device != "cpu"
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**details(exported, sess_details), "io_binding": self.use_io_binding,
                                "workers": self.workers.n, "max_batch": self.max_batch, "length_step": self.length_step,
                                "batch_multiple": self.batch_multiple, **limits})

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, np.ndarray]:
        return graph_feeds(self._padded(tokens, rows, self._pad_values, self.tokenizer.padding_side), self.inputs)

    def raw_logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Logits in the model's own output order."""
        return self._raw_run(self._encode(pairs))

    def _raw_run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        if not self.use_io_binding:
            return np.asarray(self.session.run(["logits"], feeds)[0], dtype=np.float32)
        binding = self.session.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        dev_id = int(self.device.split(":")[1]) if ":" in self.device else 0
        binding.bind_output("logits", "cuda", dev_id)
        self.session.run_with_iobinding(binding)
        return np.asarray(binding.copy_outputs_to_cpu()[0], dtype=np.float32)

    def _run(self, feeds: dict[str, np.ndarray]) -> np.ndarray:
        return self._raw_run(feeds)[:, self.perm]


class OrtSeq2SeqClassifier(Seq2SeqNLIMixin, BatchedClassifier):
    """Flan-T5 as the NLI model on ONNX Runtime: first-step logits over the answer words (``score``) or greedy
    generation parsed to a label (``generate``), as the torch engine's ``TorchSeq2SeqClassifier``, on the T5
    stepper."""

    def __init__(self, folder: str | Path, model: str, precision: str = "fp32", device: str = "cpu",
                 opts: OrtOptions | None = None, exported: ExportResult | None = None):
        o = opts or OrtOptions()
        prompt, method = o.prompt, o.method
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, length_step=o.length_step)
        if prompt not in NLI_PROMPTS:
            raise ModelLoadError(f"unknown NLI prompt {prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if method not in ("score", "generate"):
            raise ModelLoadError(f"unknown seq2seq classification method {method!r}; use score or generate")
        folder = Path(folder)
        self.exported = exported
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        config = AutoConfig.from_pretrained(str(folder))
        self.model = OrtSeq2SeqStepper(folder, device, o.provider, o.threads)  # the mixin runs it as its "model"
        self.template = NLI_PROMPTS[prompt]
        self.method = method
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(config.decoder_start_token_id or 0)
        self.eos_id = int(config.eos_token_id)
        self.input_device = "cpu"
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**details(exported, self.model.details), "prompt": prompt, "method": method,
                                "workers": 1, **limits})


def open_generator(folder: str | Path, model: str, precision: str = "fp32", device: str = "cpu",
                   opts: OrtOptions | None = None, exported: ExportResult | None = None) -> HFGenerator:
    """The ort generator over an export folder (the project's T5 graphs)."""
    o = opts or OrtOptions()
    folder = Path(folder)
    n_workers, threads = cpu_workers(device, o.threads, o.workers)
    gen_config = generation_config_for(folder, model, "ort", "--engine torch")
    tok = AutoTokenizer.from_pretrained(str(folder))
    config = AutoConfig.from_pretrained(str(folder))
    stepper = OrtSeq2SeqStepper(folder, device, o.provider, threads)
    stepper.supports_topk = o.graph_topk
    min_batches = int(o.min_batches) if o.min_batches is not None else (CPU_MIN_BATCHES if device == "cpu" else 1)
    info = EngineInfo("ort", "generator", model, precision, device,
                      {**details(exported, stepper.details), "workers": n_workers, "graph_topk": o.graph_topk,
                       "min_batches": min_batches})
    return HFGenerator(None, tok, info, device="cpu", stepper=stepper, config=config, generation_config=gen_config,
                       workers=n_workers, max_input_length=o.max_input_length, prompt_batch=o.prompt_batch,
                       min_batches=min_batches)


def open_classifier(folder: str | Path, model: str, precision: str = "fp32", device: str = "cpu",
                    opts: OrtOptions | None = None, exported: ExportResult | None = None) -> BatchedClassifier:
    kind = model_kind(AutoConfig.from_pretrained(str(folder)))
    cls = OrtClassifier if kind == "seq-cls" else OrtSeq2SeqClassifier
    return cls(folder, model, precision, device, opts, exported)


def open_mask_filler(folder: str | Path, model: str, precision: str = "fp32", device: str = "cpu",
                     opts: OrtOptions | None = None, exported: ExportResult | None = None) -> SessionMaskFiller:
    o = opts or OrtOptions()
    folder = Path(folder)
    config = AutoConfig.from_pretrained(str(folder))
    n_workers, threads = cpu_workers(device, o.threads, o.workers)
    tok = AutoTokenizer.from_pretrained(str(folder))
    max_length, limits = effective_max_length(o.max_length, config, tok)
    info = EngineInfo("ort", MASK_FILLER, model, precision, device, {"workers": n_workers, **limits})
    filler = SessionMaskFiller(folder / "model.onnx", tok, int(config.vocab_size), max_length, device=device,
                               provider=o.provider, threads=threads, workers=n_workers, token_budget=o.token_budget,
                               max_batch=o.max_batch, info=info, fp16=precision == "fp16")
    info.details.update({**details(exported, {}), "max_batch": filler.max_batch,
                         "whole_word_tokens": len(filler.vocab), "tokens": filler.vocab.scheme})
    return filler


def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    """A sequence classifier or a text-to-text NLI model (Flan-T5), as the model's config says; ``opts``:
    :class:`OrtOptions` of the classifier role."""
    o = OrtOptions.build(CLASSIFIER, opts)
    exported = _export(model, precision, device, o.max_length, o.export, label_map=o.label_map)
    return open_classifier(exported.path, model, precision, device, o, exported)


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    """Flan-T5 exported to the project's T5 graphs behind the shared :class:`HFGenerator` (the same seeding and
    sampling code as the torch engine, so fp32 sampling gives the torch engine's tokens); ``opts``:
    :class:`OrtOptions` of the generator role."""
    o = OrtOptions.build(GENERATOR, opts)
    if model_kind(load_config(model)) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    # In the generator role, the export is judged on what generation uses: greedy token agreement and
    # non-finite outputs. The NLI-scoring label agreement is reported but does not gate here (a model
    # that is weak as a classifier has near-tied answer scores that int8 flips); the classifier role
    # judges the same cached export with the default tolerances.
    export = replace(o.export, tolerances={"min_agreement": None, **(o.export.tolerances or {})})
    exported = _export(model, precision, device, o.max_input_length, export)
    return open_generator(exported.path, model, precision, device, o, exported)


def load_mask_filler(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> SessionMaskFiller:
    """A masked language model exported to ONNX (``export_model(task="mlm")``: fp32, fp16, or int8 dynamic
    quantisation on the CPU; validated against torch fp32 by top-k suggestion agreement and cached) behind the
    mask-filler contract; ``opts``: :class:`OrtOptions` of the mlm role."""
    o = OrtOptions.build(MASK_FILLER, opts)
    require_masked_lm(model)
    exported = _export(model, precision, device, o.max_length, o.export, task="mlm")
    return open_mask_filler(exported.path, model, precision, device, o, exported)
