"""The ONNX Runtime engine: the same contract as ``engines.torch_ref``, on exported graphs.

``load_classifier`` / ``load_generator`` export the model on first use (through the cache of
:func:`breaknli_fast.export.api.export_model`, reached through :mod:`breaknli_fast.engines.artifacts`,
validated against the torch engine at fp32), then run it on
the engine's runtime (:mod:`breaknli_fast.engines.ort_runtime`):

* device ``cpu``: the CPU provider; ``int8`` is dynamic quantization (the only int8 the CPU
  provider runs fast);
* device ``cuda[:N]``: the CUDA provider with IO binding (onnxruntime-gpu); ``int8`` is a static
  symmetric QDQ graph; ``provider="tensorrt"`` puts the TensorRT execution provider in front.

Session options: graph optimisation ALL, intra-op threads = physical cores (override with
``threads``), sequential execution; all recorded in ``info.details``. The loaders' options are
:class:`OrtOptions`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Sequence

import numpy as np
from transformers import AutoConfig, AutoTokenizer, GenerationConfig

from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER, EngineInfo, Pair
from breaknli_fast.engines.options import nested_options, option, parse_flag
from breaknli_fast.engines.batching import BatchedClassifier, pad_tokens, pad_values, split_threads
from breaknli_fast.engines.generation import GenerationOptions, HFGenerator
from breaknli_fast.engines.hf import Seq2SeqNLIMixin
from breaknli_fast.engines.model_info import (ModelLoadError, answer_token_ids, effective_max_length, label_permutation,
                                          load_config, model_kind, require_masked_lm)
from breaknli_fast.engines.ort_runtime import (OrtSeq2SeqStepper, SessionMaskFiller, graph_feeds, import_ort,
                                               load_ort_seq2seq, make_session, physical_cores, providers_for)
from breaknli_fast.engines.artifacts import ExportOptions, ExportResult, build
from breaknli_fast.prompts import NLI_PROMPTS

PRECISIONS = ("fp32", "fp16", "int8")

@dataclass
class OrtOptions(GenerationOptions):
    """The options of the ort engine's loaders: the common ones, the generator's, and these."""

    engine = "ort"

    provider: str | None = option()  # cpu, cuda or tensorrt (ONNX Runtime's TensorRT execution provider)
    step_graphs: bool = option(True, roles=(GENERATOR,))  # the export's top-k step graphs for fast sampling
    export: ExportOptions = nested_options(ExportOptions)  # passed through to export_model

    def __post_init__(self) -> None:
        self.step_graphs = parse_flag(self.step_graphs, ModelLoadError)


OPTIONS = OrtOptions  # the registry reads a backend's options class here


def _check(precision: str, device: str) -> None:
    import_ort()
    if precision not in PRECISIONS:
        raise ModelLoadError(f"the ort engine runs fp32, fp16 or int8, not {precision!r}")
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelLoadError(f"unknown device {device!r}; use cpu or cuda[:N]")
    if device.startswith("cuda"):
        providers_for(device)  # one-line EngineUnavailable without onnxruntime-gpu


def _export(model: str, precision: str, device: str, max_length: int, export: ExportOptions) -> ExportResult:
    return build(model, format="onnx", precision=precision, device="cpu" if device == "cpu" else "cuda",
                        max_length=int(max_length), **export.kwargs())


def cpu_workers(device: str, threads: int | None, workers: int | str | None) -> tuple[int, int | None]:
    """(workers, intra-op threads per session) for the ``threads`` CPU threads the user gave (default:
    physical cores), split as :func:`~breaknli_fast.engines.batching.split_threads` does; on CUDA one
    worker and the threads unchanged."""
    if device != "cpu":
        return 1, threads
    return split_threads(int(threads) if threads else physical_cores(), workers, error=ModelLoadError)


def _details(exported: ExportResult, session: dict[str, Any]) -> dict[str, Any]:
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
                                             "step_graphs", "passed")
                       if k in v},
        **session,
    }


class OrtClassifier(BatchedClassifier):
    """A sequence classifier graph (``model.onnx``, output ``logits``) on ONNX Runtime."""

    # On the CPU, smaller batches of the small models run faster with two workers side by side, and 16 keeps the
    # number of calls moderate (BENCHMARKS.md, batch sizes). Other providers keep DEFAULT_MAX_BATCH.
    cpu_max_batch = 16

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", opts: OrtOptions | None = None):
        o = opts or OrtOptions()
        _check(precision, device)
        n_workers, threads = cpu_workers(device, o.threads, o.workers)
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=n_workers, device=device)
        self.exported = _export(model, precision, device, o.max_length, o.export)
        folder = self.exported.path
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
                               {**_details(self.exported, sess_details), "io_binding": self.use_io_binding,
                                "workers": self.workers.n, "max_batch": self.max_batch, **limits})

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, np.ndarray]:
        return graph_feeds(pad_tokens(tokens, rows, self._pad_values, self.tokenizer.padding_side), self.inputs)

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
    """Flan-T5 as the NLI model on ONNX Runtime: first-step logits over the answer words
    (``score``) or greedy generation parsed to a label (``generate``), as ``TorchSeq2SeqClassifier``."""

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", opts: OrtOptions | None = None):
        o = opts or OrtOptions()
        prompt, method = o.prompt, o.method
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch)
        if prompt not in NLI_PROMPTS:
            raise ModelLoadError(f"unknown NLI prompt {prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if method not in ("score", "generate"):
            raise ModelLoadError(f"unknown seq2seq classification method {method!r}; use score or generate")
        _check(precision, device)
        self.exported = _export(model, precision, device, o.max_length, o.export)
        folder = self.exported.path
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model, sess_details = load_ort_seq2seq(folder, device=device, provider=o.provider, threads=o.threads)
        self.template = NLI_PROMPTS[prompt]
        self.method = method
        self.max_length, limits = effective_max_length(o.max_length, self.model.config, self.tokenizer)
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(self.model.config.decoder_start_token_id or 0)
        self.input_device = self.model.device
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**_details(self.exported, sess_details), "prompt": prompt, "method": method,
                                "workers": 1, **limits})  # optimum's model object runs one batch at a time



def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    """A sequence classifier or a text-to-text NLI model (Flan-T5), as the model's config says; ``opts``:
    :class:`OrtOptions` of the classifier role."""
    o = OrtOptions.build(CLASSIFIER, opts)
    if model_kind(load_config(model)) == "seq-cls":
        return OrtClassifier(model, precision, device, o)
    return OrtSeq2SeqClassifier(model, precision, device, o)


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    """Flan-T5 exported to ONNX behind the shared :class:`HFGenerator` (same seeding and the same
    sampling code, so fp32 sampling gives the same tokens as the torch engine); ``opts``: :class:`OrtOptions`
    of the generator role.

    On the CPU, sampling runs :class:`~breaknli_fast.engines.ort_runtime.OrtSeq2SeqStepper` (the sessions
    called directly; the export's step graphs for the fast sampler unless ``step_graphs=False``); on CUDA,
    optimum's ``ORTModelForSeq2SeqLM`` with IO binding. Beam and greedy decoding use optimum's
    model (loaded on first use)."""
    o = OrtOptions.build(GENERATOR, opts)
    _check(precision, device)
    config = load_config(model)
    if model_kind(config) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    provider = o.provider
    n_workers, threads = cpu_workers(device, o.threads, o.workers)
    # In the generator role, the export is judged on what generation uses: greedy token agreement and
    # non-finite outputs. The NLI-scoring label agreement is reported but does not gate here (a model
    # that is weak as a classifier has near-tied answer scores that int8 flips); the classifier role
    # judges the same cached export with the default tolerances.
    export = replace(o.export, tolerances={"min_agreement": None, **(o.export.tolerances or {})})
    exported = _export(model, precision, device, o.max_input_length, export)
    folder = exported.path
    tok = AutoTokenizer.from_pretrained(str(folder))
    gen_opts = {"max_input_length": o.max_input_length, "prompt_batch": o.prompt_batch}
    try:
        gen_config = GenerationConfig.from_pretrained(str(folder))
    except (OSError, ValueError):
        gen_config = None
    if device == "cpu":
        stepper = OrtSeq2SeqStepper(folder, device, provider, threads, step_graphs=o.step_graphs)
        info = EngineInfo("ort", "generator", model, precision, device,
                          {**_details(exported, stepper.details), "workers": n_workers})

        def loader() -> Any:
            return load_ort_seq2seq(folder, device=device, provider=provider, threads=threads)[0]

        return HFGenerator(None, tok, info, device="cpu", stepper=stepper, model_loader=loader, config=config,
                           generation_config=gen_config, workers=n_workers, **gen_opts)
    m, sess_details = load_ort_seq2seq(folder, device=device, provider=provider, threads=threads)
    info = EngineInfo("ort", "generator", model, precision, device, _details(exported, sess_details))
    hf_device = "cuda" if sess_details.get("io_binding") else "cpu"
    return HFGenerator(m, tok, info, device=hf_device, **gen_opts)



def load_mask_filler(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> SessionMaskFiller:
    """A masked language model exported to ONNX (``export_model(task="mlm")``, through ``engines.artifacts.build``: fp32, fp16, or int8 dynamic
    quantisation on the CPU; validated against torch fp32 by top-k suggestion agreement and cached) behind the
    mask-filler contract; ``opts``: :class:`OrtOptions` of the mlm role."""
    o = OrtOptions.build(MASK_FILLER, opts)
    _check(precision, device)
    config = require_masked_lm(model)
    n_workers, threads = cpu_workers(device, o.threads, o.workers)
    exported = build(model, format="onnx", precision=precision, device="cpu" if device == "cpu" else "cuda",
                            max_length=int(o.max_length), task="mlm", **o.export.kwargs())
    folder = exported.path
    tok = AutoTokenizer.from_pretrained(str(folder))
    max_length, limits = effective_max_length(o.max_length, config, tok)
    info = EngineInfo("ort", MASK_FILLER, model, precision, device, {"workers": n_workers, **limits})
    filler = SessionMaskFiller(folder / "model.onnx", tok, int(config.vocab_size), max_length, device=device,
                               provider=o.provider, threads=threads, workers=n_workers, token_budget=o.token_budget,
                               max_batch=o.max_batch, info=info, fp16=precision == "fp16")
    info.details.update({**_details(exported, {}), "max_batch": filler.max_batch,
                         "whole_word_tokens": len(filler.vocab), "tokens": filler.vocab.scheme})
    return filler
