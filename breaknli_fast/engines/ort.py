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

import copy
import json
import threading
from typing import Any, Mapping, Sequence

import numpy as np

from breaknli_fast.engines.base import BatchedClassifier, EngineInfo, Pair, pad_tokens, pad_values
from breaknli_fast.engines.generation import HFGenerator
from breaknli_fast.engines.models import ModelLoadError, effective_max_length, load_config, model_kind
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


def cpu_workers(device: str, threads: int | None, workers: int | str | None) -> tuple[int, int | None]:
    """(workers, intra-op threads per session) for the ``threads`` CPU threads the user gave (default:
    physical cores), split as :func:`~breaknli_fast.engines.base.split_threads` does; on CUDA one
    worker and the threads unchanged."""
    from breaknli_fast.engines.base import split_threads
    from breaknli_fast.export.runtime import physical_cores

    if device != "cpu":
        return 1, threads
    return split_threads(int(threads) if threads else physical_cores(), workers, error=ModelLoadError)


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
        "validation": {k: v.get(k) for k in ("n", "max_abs_logit", "agreement", "generation", "step_graphs", "passed")
                       if k in v},
        **session,
    }


class OrtClassifier(BatchedClassifier):
    """A sequence classifier graph (``model.onnx``, output ``logits``) on ONNX Runtime."""

    # Smaller batches were faster on the CPU: the full loop on the mini models (BENCHMARKS.md, fifth session)
    # took 4.46 s at 64 pairs, 4.20 s at 32, 3.96 s at 16, 3.92 s at 8 (ort:int8, 2 workers); 16 keeps the
    # number of calls moderate. Other providers keep DEFAULT_MAX_BATCH.
    cpu_max_batch = 16

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", label_map: Mapping[str, str] | None = None,
                 max_length: int = 256, token_budget: int = 8192, max_batch: int | None = None,
                 provider: str | None = None, threads: int | None = None, workers: int | str | None = None,
                 **export_opts: Any):
        from transformers import AutoConfig, AutoTokenizer

        from breaknli_fast.engines.torch_ref import label_permutation
        from breaknli_fast.export.runtime import make_session

        _check(precision, device)
        n_workers, threads = cpu_workers(device, threads, workers)
        super().__init__(token_budget=token_budget, max_batch=max_batch, workers=n_workers, device=device)
        self.exported = _export(model, precision, device, {**export_opts, "max_length": max_length})
        folder = self.exported.path
        config = AutoConfig.from_pretrained(str(folder))
        self.perm = label_permutation(config, label_map)
        self.tokenizer = AutoTokenizer.from_pretrained(str(folder))
        # the graph indexes the model's position table: never feed it longer sequences than that holds
        self.max_length, limits = effective_max_length(max_length, config, self.tokenizer)
        self._pad_values = pad_values(self.tokenizer)
        self.session, sess_details = make_session(folder / "model.onnx", device=device, provider=provider, threads=threads,
                                                  fp16=precision == "fp16")
        self.inputs = self.session.get_inputs()
        self.device = device
        self.use_io_binding = device != "cpu"
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**_details(self.exported, sess_details), "io_binding": self.use_io_binding,
                                "workers": self.workers.n, "max_batch": self.max_batch, **limits})

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.tokenizer([p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, np.ndarray]:
        from breaknli_fast.export.runtime import graph_feeds

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

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", prompt: str = DEFAULT_NLI_PROMPT,
                 method: str = "score", max_length: int = 256, token_budget: int = 8192, max_batch: int | None = None,
                 provider: str | None = None, threads: int | None = None, workers: int | str | None = None,
                 **export_opts: Any):
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
        self.max_length, limits = effective_max_length(max_length, self.model.config, self.tokenizer)
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(self.model.config.decoder_start_token_id or 0)
        self.input_device = self.model.device
        self.info = EngineInfo("ort", "classifier", model, precision, device,
                               {**_details(self.exported, sess_details), "prompt": prompt, "method": method,
                                "workers": 1, **limits})  # optimum's model object runs one batch at a time



def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    from breaknli_fast.engines.torch_ref import dispatch_classifier

    return dispatch_classifier(model, precision, device, opts, OrtClassifier, OrtSeq2SeqClassifier)


# the step graphs serve batches of up to this many prompts (see OrtSeq2SeqStepper.supports_topk)
STEP_MAX_PROMPTS = 16


class OrtSeq2SeqStepper:
    """The sampling stepper of the ort engine on the CPU: exported graphs called directly (numpy in,
    numpy out), the KV cache kept as the arrays ONNX Runtime returns.

    Two ways to step, chosen by the first call after :meth:`start`:

    * :meth:`step_topk` (the ``fast`` sampler with top-k, when the export has the step graphs of
      :mod:`breaknli_fast.export.t5_step`): cross-attention keys / values once per prompt, and
      only the top ``k`` logits per row leave the session;
    * :meth:`step`: optimum's encoder / decoder / decoder-with-past graphs, full-vocabulary
      logits (the ``transformers`` sampler, top-k 0, exports without the step graphs)."""

    def __init__(self, folder: Any, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                 step_graphs: bool = True):
        from pathlib import Path

        from breaknli_fast.export.t5_step import STEP_FILES

        self.folder = Path(folder)
        self._session_args = (device, provider, threads)
        self._lock = threading.Lock()  # sessions open lazily; forks share them
        self._sessions: dict[str, Any] = {}
        self._outputs: dict[str, list[str]] = {}
        self._session_details: dict[str, Any] = {}  # session options and providers (the same for every graph)
        have = all((self.folder / f).is_file() for f in STEP_FILES)
        self.has_step_graphs = step_graphs and have
        self._ids: np.ndarray | None = None
        self.vocab_size = int(json.loads((self.folder / "config.json").read_text())["vocab_size"])
        self._mode: str | None = None
        # open the sessions of the default path now (a broken graph fails at load, not mid-run); the others
        # open on first use
        for name in (STEP_FILES if self.has_step_graphs else ("encoder_model.onnx", "decoder_model.onnx",
                                                            "decoder_with_past_model.onnx")):
            self._session(name)
        self.details = {**self._session_details,
                        "decoder": ("step graphs (per-prompt cross-attention, top-k in the graph) for fast "
                                    "top-k sampling; optimum's decoder graphs otherwise" if self.has_step_graphs else
                                    "optimum's decoder graphs (step graphs switched off)" if have else
                                    "lean loop over encoder / decoder / decoder_with_past sessions")}

    @property
    def supports_topk(self) -> bool:
        """Whether :meth:`step_topk` serves the current batch: the export has the step graphs (and they are
        not switched off) and the batch has at most :data:`STEP_MAX_PROMPTS` prompts -- every row's
        cross-attention scores the keys of all prompts of the batch, which outgrows the per-row copies of
        optimum's graphs beyond that (mini-t5, int8, one thread, 64 prompts x 20: 0.81 / 1.04 / 1.49 /
        2.99 s at 8 / 16 / 32 / 64 prompts per batch against 0.95 / 1.05 / 1.03 / 1.40 s; BENCHMARKS.md)."""
        return self.has_step_graphs and (self._ids is None or self._ids.shape[0] <= STEP_MAX_PROMPTS)

    def _session(self, name: str) -> Any:
        with self._lock:
            if name not in self._sessions:
                from breaknli_fast.export.runtime import make_session

                device, provider, threads = self._session_args
                sess, details = make_session(self.folder / name, device, provider, threads, spin=False)
                self._session_details.update(details)
                self._outputs[name] = [o.name for o in sess.get_outputs()]
                self._sessions[name] = sess
            return self._sessions[name]

    def fork(self) -> "OrtSeq2SeqStepper":
        """Another stepper over the same sessions (ONNX Runtime runs a session from several threads) with
        its own batch state, for a worker thread."""
        other = copy.copy(self)  # shares the session, output-name and detail dicts and the lock
        other._ids, other._mode, other.past = None, None, None
        return other

    def start(self, input_ids: Any, attention_mask: Any, n: int) -> None:
        self._ids = input_ids.numpy().astype(np.int64)
        self._mask = attention_mask.numpy().astype(np.int64)
        self._n = n
        self._mode = None
        self.past: dict[str, np.ndarray] | None = None

    # -- full logits over optimum's graphs
    def step(self, tokens: Any) -> Any:
        import torch

        if self._mode is None:
            self._mode = "logits"
            enc = self._session("encoder_model.onnx")
            dec = self._session("decoder_model.onnx")
            hidden_dtype = next((np.float16 if i.type == "tensor(float16)" else np.float32)
                                for i in dec.get_inputs() if i.name == "encoder_hidden_states")
            hidden = enc.run(None, {"input_ids": self._ids, "attention_mask": self._mask})[0]
            self.hidden = np.repeat(hidden.astype(hidden_dtype, copy=False), self._n, axis=0)
            self.mask = np.repeat(self._mask, self._n, axis=0)
        elif self._mode != "logits":
            raise RuntimeError("step() after step_topk() on the same batch")
        ids = tokens.numpy().astype(np.int64)[:, None]
        if self.past is None:
            outs = self._session("decoder_model.onnx").run(None, {"input_ids": ids, "encoder_hidden_states": self.hidden,
                                                                  "encoder_attention_mask": self.mask})
            names = self._outputs["decoder_model.onnx"]
            self.past = {}
            self.hidden = None  # the cross-attention keys/values replace it from here on
        else:
            outs = self._session("decoder_with_past_model.onnx").run(
                None, {"input_ids": ids, "encoder_attention_mask": self.mask, **self.past})
            names = self._outputs["decoder_with_past_model.onnx"]
        for name, value in zip(names[1:], outs[1:]):
            self.past[name.replace("present.", "past_key_values.", 1)] = value
        return torch.from_numpy(np.ascontiguousarray(outs[0][:, -1, :], dtype=np.float32))

    # -- top-k over the step graphs
    def step_topk(self, tokens: Any, k: int) -> tuple[Any, Any]:
        """Feed one token per live row; the ``k`` largest logits per row (descending) and their token ids."""
        import torch

        from breaknli_fast.export.t5_step import STEP_DECODER, STEP_ENCODER

        dec = self._session(STEP_DECODER)
        if self._mode is None:
            self._mode = "topk"
            enc = self._session(STEP_ENCODER)
            self.cross = dict(zip(self._outputs[STEP_ENCODER],
                                  enc.run(None, {"input_ids": self._ids, "attention_mask": self._mask})))
            b, length = self._ids.shape
            n = self._n
            # row r of prompt e sees only prompt e's real tokens; float32 min as transformers masks
            floor = np.finfo(np.float32).min
            self.bias = np.full((b * n, b * length), floor, dtype=np.float32)
            for e in range(b):
                self.bias[e * n:(e + 1) * n, e * length:(e + 1) * length] = np.where(self._mask[e] == 1, 0.0, floor)
            self._past_names = [i.name for i in dec.get_inputs() if i.name.startswith("past_")]
            heads, d_kv = (int(x) for x in self.cross[next(iter(self.cross))].shape[::2])
            self.past = {p: np.zeros((b * n, heads, 0, d_kv), dtype=np.float32) for p in self._past_names}
        elif self._mode != "topk":
            raise RuntimeError("step_topk() after step() on the same batch")
        outs = dec.run(None, {"input_ids": tokens.numpy().astype(np.int64)[:, None], "cross_bias": self.bias,
                              **self.cross, **self.past, "top_k": np.array([k], dtype=np.int64)})
        self.past = dict(zip(self._past_names, outs[2:]))
        return torch.from_numpy(outs[0]), torch.from_numpy(outs[1])

    def keep(self, positions: Any) -> None:
        import torch

        def rows(a: np.ndarray) -> np.ndarray:  # torch's index_select copies rows faster than numpy indexing
            return torch.from_numpy(a).index_select(0, positions).numpy()

        if self._mode == "topk":
            self.bias = rows(self.bias)  # the per-prompt cross keys / values stay as they are
        else:
            self.mask = rows(self.mask)
            if self.hidden is not None:
                self.hidden = rows(self.hidden)
        if self.past:
            self.past = {k: rows(v) for k, v in self.past.items()}


def _flag(v: Any) -> bool:
    """A boolean option that may come from the command line as text (``step_graphs=false``)."""
    if isinstance(v, str):
        if v.lower() not in ("1", "0", "true", "false", "yes", "no"):
            raise ModelLoadError(f"expected true or false, not {v!r}")
        return v.lower() in ("1", "true", "yes")
    return bool(v)


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    """Flan-T5 exported to ONNX behind the shared :class:`HFGenerator` (same seeding and the same
    sampling code, so fp32 sampling gives the same tokens as the torch engine).

    On the CPU, sampling runs :class:`OrtSeq2SeqStepper` (the sessions called directly; the export's
    step graphs for the fast sampler unless ``step_graphs=False``); on CUDA, optimum's
    ``ORTModelForSeq2SeqLM`` with IO binding. Beam and greedy decoding use optimum's
    model (loaded on first use)."""
    from transformers import AutoTokenizer, GenerationConfig

    from breaknli_fast.export.runtime import load_ort_seq2seq

    _check(precision, device)
    config = load_config(model)
    if model_kind(config) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    provider = opts.pop("provider", None)
    n_workers, threads = cpu_workers(device, opts.pop("threads", None), opts.pop("workers", None))
    step_graphs = _flag(opts.pop("step_graphs", True))
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
        stepper = OrtSeq2SeqStepper(folder, device, provider, threads, step_graphs=step_graphs)
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
