"""The ONNX Runtime engine: the same contract as ``engines.torch_ref``, on exported graphs.

``load_classifier`` / ``load_generator`` export the model on first use (through the cache of
``breaknli_fast.export``, validated against PyTorch fp32), then run it:

* device ``cpu``: the CPU provider; ``int8`` is dynamic quantization (the only int8 the CPU
  provider runs fast);
* device ``cuda[:N]``: the CUDA provider with IO binding (onnxruntime-gpu); ``int8`` is a static
  symmetric QDQ graph; ``provider="tensorrt"`` puts the TensorRT execution provider in front.

Session options: graph optimisation ALL, intra-op threads = physical cores (override with
``threads``), sequential execution; all recorded in ``info.details``.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from breaknli_fast.engines.base import BatchedClassifier, EngineInfo, Pair
from breaknli_fast.engines.generation import HFGenerator
from breaknli_fast.engines.models import ModelLoadError, load_config, model_kind
from breaknli_fast.engines.torch_ref import Seq2SeqNLIMixin
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_PROMPTS

PRECISIONS = ("fp32", "fp16", "int8")
# options of load_classifier / load_generator that configure the export (not the engine)
EXPORT_OPTS = ("cache_dir", "force", "calibration_pairs", "calibration_size", "validation_size", "tolerances", "validate",
               "progress", "out_dir")


def _check(precision: str, device: str) -> None:
    from breaknli_fast.export.runtime import import_ort

    import_ort()
    if precision not in PRECISIONS:
        raise ModelLoadError(f"the ort engine runs fp32, fp16 or int8, not {precision!r}")
    if device != "cpu" and not device.startswith("cuda"):
        raise ModelLoadError(f"unknown device {device!r}; use cpu or cuda[:N]")
    if device.startswith("cuda"):
        from breaknli_fast.export.runtime import providers_for

        providers_for(device)  # one-line EngineUnavailable without onnxruntime-gpu


def _export(model: str, precision: str, device: str, opts: dict[str, Any]) -> Any:
    from breaknli_fast.export import export_model

    kw = {k: opts.pop(k) for k in list(opts) if k in EXPORT_OPTS}
    kw.setdefault("progress", False)
    return export_model(model, format="onnx", precision=precision, device="cpu" if device == "cpu" else "cuda",
                        max_length=int(opts.get("max_length", 256)), **kw)


def _details(exported: Any, session: dict[str, Any]) -> dict[str, Any]:
    m = exported.manifest
    v = m.get("validation") or {}
    return {
        "kind": m.get("kind"),
        "family": m.get("family"),
        "export_dir": str(exported.path),
        "export_reused": exported.reused,
        "variant": m.get("variant"),
        "opset": m.get("opset"),
        "validation": {k: v.get(k) for k in ("n", "max_abs_logit", "agreement", "generation", "passed") if k in v},
        **session,
    }


class OrtClassifier(BatchedClassifier):
    """A sequence classifier graph (``model.onnx``, output ``logits``) on ONNX Runtime."""

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", label_map: Mapping[str, str] | None = None,
                 max_length: int = 256, token_budget: int = 8192, max_batch: int = 64, provider: str | None = None,
                 threads: int | None = None, **export_opts: Any):
        from transformers import AutoConfig, AutoTokenizer

        from breaknli_fast.engines.torch_ref import label_permutation
        from breaknli_fast.export.runtime import make_session

        super().__init__(token_budget=token_budget, max_batch=max_batch)
        _check(precision, device)
        self.max_length = max_length
        self.exported = _export(model, precision, device, {**export_opts, "max_length": max_length})
        folder = self.exported.path
        self.perm = label_permutation(AutoConfig.from_pretrained(str(folder)), label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.session, sess_details = make_session(folder / "model.onnx", device=device, provider=provider, threads=threads,
                                                  fp16=precision == "fp16")
        self.inputs = self.session.get_inputs()
        self.device = device
        self.use_io_binding = device != "cpu"
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**_details(self.exported, sess_details), "io_binding": self.use_io_binding})

    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        enc = self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)
        return [len(x) for x in enc["input_ids"]]

    def raw_logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Logits in the model's own output order."""
        from breaknli_fast.export.runtime import classifier_feeds

        feeds = classifier_feeds(self.tokenizer, pairs, self.inputs, self.max_length)
        if not self.use_io_binding:
            return np.asarray(self.session.run(["logits"], feeds)[0], dtype=np.float32)
        binding = self.session.io_binding()
        for name, arr in feeds.items():
            binding.bind_cpu_input(name, arr)
        dev_id = int(self.device.split(":")[1]) if ":" in self.device else 0
        binding.bind_output("logits", "cuda", dev_id)
        self.session.run_with_iobinding(binding)
        return np.asarray(binding.copy_outputs_to_cpu()[0], dtype=np.float32)

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        return self.raw_logits(pairs)[:, self.perm]


class OrtSeq2SeqClassifier(Seq2SeqNLIMixin, BatchedClassifier):
    """Flan-T5 as the NLI model on ONNX Runtime: first-step logits over the answer words
    (``score``) or greedy generation parsed to a label (``generate``), as ``TorchSeq2SeqClassifier``."""

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", prompt: str = DEFAULT_NLI_PROMPT,
                 method: str = "score", max_length: int = 256, token_budget: int = 8192, max_batch: int = 64,
                 provider: str | None = None, threads: int | None = None, **export_opts: Any):
        from transformers import AutoTokenizer

        from breaknli_fast.engines.torch_ref import answer_token_ids
        from breaknli_fast.export.runtime import load_ort_seq2seq

        super().__init__(token_budget=token_budget, max_batch=max_batch)
        if prompt not in NLI_PROMPTS:
            raise ModelLoadError(f"unknown NLI prompt {prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if method not in ("score", "generate"):
            raise ModelLoadError(f"unknown seq2seq classification method {method!r}; use score or generate")
        _check(precision, device)
        self.exported = _export(model, precision, device, {**export_opts, "max_length": max_length})
        folder = self.exported.path
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        self.model, sess_details = load_ort_seq2seq(folder, device=device, provider=provider, threads=threads)
        self.template = NLI_PROMPTS[prompt]
        self.method = method
        self.max_length = max_length
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(self.model.config.decoder_start_token_id or 0)
        self.input_device = self.model.device
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**_details(self.exported, sess_details), "prompt": prompt, "method": method})



def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    from breaknli_fast.engines.torch_ref import dispatch_classifier

    return dispatch_classifier(model, precision, device, opts, OrtClassifier, OrtSeq2SeqClassifier)


class OrtSeq2SeqStepper:
    """The sampling stepper of the ort engine on the CPU: the exported encoder, decoder and
    decoder-with-past graphs called directly (numpy in, numpy out), with the KV cache kept as the
    arrays ONNX Runtime returns -- no torch model wrapper, no per-step conversions beyond the
    logits of the last position."""

    def __init__(self, folder: Any, device: str = "cpu", provider: str | None = None, threads: int | None = None):
        from pathlib import Path

        from breaknli_fast.export.runtime import make_session

        folder = Path(folder)
        self.encoder, details = make_session(folder / "encoder_model.onnx", device, provider, threads, spin=False)
        self.decoder, _ = make_session(folder / "decoder_model.onnx", device, provider, threads, spin=False)
        self.decoder_past, _ = make_session(folder / "decoder_with_past_model.onnx", device, provider, threads, spin=False)
        self.details = {**details, "decoder": "lean loop over encoder / decoder / decoder_with_past sessions"}
        # dtype the decoder expects for the encoder output (fp16 graphs may take fp16)
        self._hidden_dtype = next((np.float16 if i.type == "tensor(float16)" else np.float32)
                                  for i in self.decoder.get_inputs() if i.name == "encoder_hidden_states")
        self._dec_out = [o.name for o in self.decoder.get_outputs()]
        self._past_out = [o.name for o in self.decoder_past.get_outputs()]

    def start(self, input_ids: Any, attention_mask: Any, n: int) -> None:
        ids = input_ids.numpy().astype(np.int64)
        mask = attention_mask.numpy().astype(np.int64)
        hidden = self.encoder.run(None, {"input_ids": ids, "attention_mask": mask})[0]
        self.hidden = np.repeat(hidden.astype(self._hidden_dtype, copy=False), n, axis=0)
        self.mask = np.repeat(mask, n, axis=0)
        self.past: dict[str, np.ndarray] | None = None

    def step(self, tokens: Any) -> Any:
        import torch

        ids = tokens.numpy().astype(np.int64)[:, None]
        if self.past is None:
            outs = self.decoder.run(None, {"input_ids": ids, "encoder_hidden_states": self.hidden,
                                           "encoder_attention_mask": self.mask})
            names = self._dec_out
            self.past = {}
            self.hidden = None  # the cross-attention keys/values replace it from here on
        else:
            outs = self.decoder_past.run(None, {"input_ids": ids, "encoder_attention_mask": self.mask, **self.past})
            names = self._past_out
        for name, value in zip(names[1:], outs[1:]):
            self.past[name.replace("present.", "past_key_values.", 1)] = value
        return torch.from_numpy(np.ascontiguousarray(outs[0][:, -1, :], dtype=np.float32))

    def keep(self, positions: Any) -> None:
        import torch

        def rows(a: np.ndarray) -> np.ndarray:  # torch's index_select copies rows faster than numpy indexing
            return torch.from_numpy(a).index_select(0, positions).numpy()

        self.mask = rows(self.mask)
        if self.hidden is not None:
            self.hidden = rows(self.hidden)
        if self.past:
            self.past = {k: rows(v) for k, v in self.past.items()}


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    """Flan-T5 exported to ONNX behind the shared :class:`HFGenerator` (same seeding and the same
    sampling code, so fp32 sampling gives the same tokens as the torch engine).

    On the CPU, sampling runs :class:`OrtSeq2SeqStepper` (the sessions called directly); on CUDA,
    optimum's ``ORTModelForSeq2SeqLM`` with IO binding. Beam and greedy decoding use optimum's
    model (loaded on first use)."""
    from transformers import AutoTokenizer, GenerationConfig

    from breaknli_fast.export.runtime import load_ort_seq2seq

    _check(precision, device)
    config = load_config(model)
    if model_kind(config) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    provider = opts.pop("provider", None)
    threads = opts.pop("threads", None)
    # In the generator role, the export is judged on what generation uses: greedy token agreement and
    # non-finite outputs. The NLI-scoring label agreement is reported but does not gate here (a model
    # that is weak as a classifier has near-tied answer scores that int8 flips); the classifier role
    # judges the same cached export with the default tolerances.
    opts["tolerances"] = {"min_agreement": None, **(opts.get("tolerances") or {})}
    exported = _export(model, precision, device, opts)
    folder = exported.path
    tok = AutoTokenizer.from_pretrained(str(folder))
    gen_opts = {k: v for k, v in opts.items() if k in ("max_input_length", "prompt_batch")}
    if "max_length" in opts and "max_input_length" not in gen_opts:
        gen_opts["max_input_length"] = int(opts["max_length"])
    try:
        gen_config = GenerationConfig.from_pretrained(str(folder))
    except (OSError, ValueError):
        gen_config = None
    if device == "cpu":
        stepper = OrtSeq2SeqStepper(folder, device, provider, threads)
        info = EngineInfo("ort", "generator", model, precision, device, _details(exported, stepper.details))

        def loader() -> Any:
            return load_ort_seq2seq(folder, device=device, provider=provider, threads=threads)[0]

        return HFGenerator(None, tok, info, device="cpu", stepper=stepper, model_loader=loader, config=config,
                           generation_config=gen_config, **gen_opts)
    m, sess_details = load_ort_seq2seq(folder, device=device, provider=provider, threads=threads)
    info = EngineInfo("ort", "generator", model, precision, device, _details(exported, sess_details))
    hf_device = "cuda" if sess_details.get("io_binding") else "cpu"
    return HFGenerator(m, tok, info, device=hf_device, **gen_opts)
