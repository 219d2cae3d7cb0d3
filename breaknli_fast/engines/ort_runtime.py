"""The runtime of the ort engine: ONNX Runtime sessions (providers per device, session options, and the
one-line errors when the libraries or the hardware are missing), optimum's model over an export folder, the
numpy feeds of a graph, and :class:`OrtSeq2SeqStepper`, which samples over exported T5 graphs. The ort engine
(:mod:`breaknli_fast.engines.ort`) runs on it, and the exporters validate their graphs with it; it imports
nothing from the exporters.

onnxruntime and optimum are optional and imported on use (one-line :class:`EngineUnavailable` without them);
torch is imported on use too, as the command line imports this module (through the exporters) at start-up.
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from breaknli_fast.engines import cpu_features
from breaknli_fast.engines.base import MASK_FILLER, EngineInfo
from breaknli_fast.engines.batching import BatchedMaskFiller
from breaknli_fast.engines.fill_mask import HFMaskFillerMixin
from breaknli_fast.engines.registry import EngineUnavailable

# the sampling step graphs that the exporters write beside optimum's graphs (breaknli_fast.export.t5_step)
STEP_ENCODER = "step_encoder_model.onnx"
STEP_DECODER = "step_decoder_model.onnx"
STEP_FILES = (STEP_ENCODER, STEP_DECODER)
# the step decoder's self-attention cache grows by this many positions at a time (its empty slots are masked)
CACHE_CHUNK = 8
FLOOR = float(np.finfo(np.float32).min)  # transformers' mask value

INSTALL_ONNX = "pip install 'breaknli-fast[onnx]'"
INSTALL_GPU = "pip install 'breaknli-fast[gpu]' (onnxruntime-gpu) on a machine with a CUDA GPU"

def optimum_missing() -> str:
    """What to install for optimum's ONNX Runtime models and exporters (Flan-T5 on the ort engine), and why it may
    not be installable here: optimum-onnx's releases (0.1.0 the latest) need transformers < 4.58."""
    try:
        import transformers

        have = f"this environment has transformers {transformers.__version__}"
    except ImportError:  # pragma: no cover
        have = "transformers is missing"
    return (f"optimum-onnx: pip install 'breaknli-fast[optimum]' (its releases need transformers < 4.58; {have}; "
            "with transformers 5 run text-to-text models on --engine torch)")


PROVIDER_NAMES = {
    "cpu": "CPUExecutionProvider",
    "cuda": "CUDAExecutionProvider",
    "tensorrt": "TensorrtExecutionProvider",
}


def import_ort() -> Any:
    try:
        import onnxruntime as ort
    except ImportError:
        raise EngineUnavailable(f"the ort engine needs onnxruntime: {INSTALL_ONNX}") from None
    ort.set_default_logger_severity(3)  # errors only: the CPU provider warns about every unfused fp16 node
    return ort


def physical_cores() -> int:
    """Physical cores available to this process (hyper-threads share execution units, and ORT's
    intra-op pool scales worse past them)."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = list(range(os.cpu_count() or 1))
    cores = set()
    for cpu in allowed:
        base = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            pkg = (base / "physical_package_id").read_text().strip()
            core = (base / "core_id").read_text().strip()
            cores.add((pkg, core))
        except OSError:
            cores.add(("?", str(cpu)))
    return max(1, len(cores))


def session_options(threads: int | None = None, optimization: str = "all", spin: bool = True,
                    x64quantprecision: bool | None = None) -> tuple[Any, dict[str, Any]]:
    """Session options and a record of the choices (for ``EngineInfo.details``). ``spin=False`` stops
    idle intra-op threads from spinning (for the per-token runs of generation). ``x64quantprecision``: the
    int8 kernel choice (``None``: per CPU, :func:`~breaknli_fast.engines.cpu_features.int8_kernel`)."""
    ort = import_ort()
    so = ort.SessionOptions()
    levels = {
        "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
        "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
        "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
        "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    }
    so.graph_optimization_level = levels[optimization]
    n = int(threads) if threads else physical_cores()
    so.intra_op_num_threads = n
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.log_severity_level = 3
    if not spin:
        # idle intra-op threads otherwise spin after each run() and take the CPU from the Python work
        # between runs: generation (a short run per token, sampling in Python in between) slows down with
        # spinning threads; classifiers (long runs back to back) gain from spinning
        so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    # int8 on x86-64 CPUs without VNNI (AVX2, AVX-512 without VNNI): ONNX Runtime's default u8 x s8 kernels add
    # pairs of products in saturating 16-bit integers, so an int8 model gives other numbers there than on a VNNI
    # CPU (and labels near a tie flip). The entry switches to u8 x u8 kernels, which do not saturate, but on a
    # VNNI CPU it also replaces the exact and much faster u8 x s8 VNNI kernel: set only where the CPU lacks VNNI
    # (cpu_features.int8_kernel); fp32 / fp16 graphs are not affected.
    kernel = cpu_features.int8_kernel()
    if x64quantprecision is not None:
        kernel = {"x64quantprecision": bool(x64quantprecision), "int8_kernel": "as requested"}
    if kernel["x64quantprecision"]:
        so.add_session_config_entry("session.x64quantprecision", "1")
    return so, {"graph_optimization": optimization, "intra_op_threads": n, "inter_op_threads": 1,
                "execution_mode": "sequential", "intra_op_spinning": spin, **kernel, "cpu": cpu_features.summary()}


def providers_for(device: str, provider: str | None = None, trt_cache_dir: str | Path | None = None,
                  fp16: bool = False) -> list[Any]:
    """Execution providers for a device (``cpu``, ``cuda[:N]``), optionally the TensorRT EP
    (``provider="tensorrt"``) in front of CUDA. Raises :class:`EngineUnavailable` with one line
    when the provider is missing from this onnxruntime build."""
    ort = import_ort()
    available = ort.get_available_providers()
    dev = device.split(":")[0]
    index = int(device.split(":")[1]) if ":" in device else 0
    if dev not in ("cpu", "cuda"):
        raise EngineUnavailable(f"unknown device {device!r}; use cpu or cuda[:N]")
    provider = (provider or dev).lower()
    if provider not in PROVIDER_NAMES:
        raise EngineUnavailable(f"unknown ONNX Runtime provider {provider!r}; use cpu, cuda or tensorrt")
    if dev == "cpu":
        if provider != "cpu":
            raise EngineUnavailable(f"the {provider} provider needs --device cuda")
        return ["CPUExecutionProvider"]
    if "CUDAExecutionProvider" not in available:
        raise EngineUnavailable(
            f"--device cuda needs onnxruntime-gpu (this onnxruntime has only {', '.join(available)}): {INSTALL_GPU}"
        )
    # TF32 (on by default in the CUDA provider) rounds the inputs of fp32 matrix products to 10-bit mantissas: fp32
    # graphs would miss the fp32 validation tolerances against torch, which runs true fp32 matmuls by default; off
    # for every graph (fp16 graphs' products are fp16 anyway)
    cuda = ("CUDAExecutionProvider", {"device_id": index, "use_tf32": 0})
    if provider == "tensorrt":
        if "TensorrtExecutionProvider" not in available:
            raise EngineUnavailable(
                "the TensorRT execution provider is missing from this onnxruntime-gpu build: install TensorRT 10 "
                "libraries (pip install 'breaknli-fast[tensorrt]') on a machine with a CUDA GPU"
            )
        opts: dict[str, Any] = {"device_id": index, "trt_fp16_enable": bool(fp16), "trt_int8_enable": False}
        if trt_cache_dir:
            opts.update(trt_engine_cache_enable=True, trt_engine_cache_path=str(trt_cache_dir),
                        trt_timing_cache_enable=True, trt_timing_cache_path=str(trt_cache_dir))
        return [("TensorrtExecutionProvider", opts), cuda, "CPUExecutionProvider"]
    return [cuda, "CPUExecutionProvider"]


def make_session(path: str | Path, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                 optimization: str = "all", fp16: bool = False, trt_cache_dir: str | Path | None = None,
                 spin: bool = True, x64quantprecision: bool | None = None) -> tuple[Any, dict[str, Any]]:
    """An ``InferenceSession`` on the device; checks that the requested provider really loaded
    (onnxruntime-gpu silently falls back to the CPU when no GPU is visible). ``x64quantprecision``: as
    :func:`session_options`."""
    ort = import_ort()
    providers = providers_for(device, provider, trt_cache_dir=trt_cache_dir, fp16=fp16)
    so, details = session_options(threads, optimization, spin=spin, x64quantprecision=x64quantprecision)
    names = [p[0] if isinstance(p, tuple) else p for p in providers]
    opts = [p[1] if isinstance(p, tuple) else {} for p in providers]
    sess = ort.InferenceSession(str(path), sess_options=so, providers=names, provider_options=opts)
    active = sess.get_providers()
    if names[0] != "CPUExecutionProvider" and names[0] not in active:
        raise EngineUnavailable(
            f"onnxruntime could not start {names[0]} (no usable CUDA GPU or CUDA/cuDNN libraries?); active: {', '.join(active)}"
        )
    details["providers"] = active
    return sess, details


def load_ort_seq2seq(folder: str | Path, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                     optimization: str = "all") -> tuple[Any, dict[str, Any]]:
    """optimum's ``ORTModelForSeq2SeqLM`` over an export folder (unmerged decoders, KV cache).

    On CUDA it binds inputs and outputs on the GPU (IO binding) when torch can see the GPU too;
    with a CPU build of torch, tensors go through host memory instead (optimum would otherwise try
    to move its outputs to a CUDA device that torch does not have)."""
    import torch

    import_ort()
    try:
        from optimum.onnxruntime import ORTModelForSeq2SeqLM
    except ImportError:
        raise EngineUnavailable(f"the ort engine runs text-to-text models through {optimum_missing()}") from None
    providers = providers_for(device, provider)
    so, details = session_options(threads, optimization, spin=False)
    names = [p[0] if isinstance(p, tuple) else p for p in providers]
    opts = [p[1] if isinstance(p, tuple) else {} for p in providers]
    on_gpu = names[0] != "CPUExecutionProvider"
    io_binding = bool(on_gpu and torch.cuda.is_available())
    with _quiet_logs():
        model = ORTModelForSeq2SeqLM.from_pretrained(
            str(folder), use_merged=False, use_cache=True, providers=names, provider_options=opts,
            session_options=so, use_io_binding=io_binding,
        )
    active = model.encoder.session.get_providers()
    if on_gpu and names[0] not in active:
        raise EngineUnavailable(
            f"onnxruntime could not start {names[0]} (no usable CUDA GPU or CUDA/cuDNN libraries?); active: {', '.join(active)}"
        )
    if on_gpu and not io_binding:
        for part in model.parts:
            part._device = torch.device("cpu")
    details.update(providers=active, io_binding=io_binding, decoders="unmerged (decoder + decoder_with_past)")
    return model, details


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    lg = logging.getLogger("optimum")
    old = lg.level
    lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        lg.setLevel(old)


def classifier_feeds(tokenizer: Any, pairs: Any, inputs: Any, max_length: int) -> dict[str, Any]:
    """Numpy feeds for a classifier graph: the tokenizer's encoding of the pairs (padded to the
    longest), restricted to the graph's inputs; a ``token_type_ids`` input the tokenizer does not
    produce is fed zeros."""
    enc = tokenizer([p for p, _ in pairs], [h for _, h in pairs], padding=True, truncation=True,
                    max_length=max_length, return_tensors="np")
    return graph_feeds(enc, inputs)


def graph_feeds(enc: Any, inputs: Any) -> dict[str, Any]:
    """A padded encoding (arrays) restricted to a graph's inputs, as int64; a ``token_type_ids`` input
    the tokenizer does not produce is fed zeros."""
    feeds = {}
    for meta in inputs:
        name = meta.name
        if name in enc:
            feeds[name] = np.asarray(enc[name]).astype(np.int64, copy=False)
        elif name == "token_type_ids":
            feeds[name] = np.zeros_like(enc["input_ids"], dtype=np.int64)
        else:
            raise EngineUnavailable(f"the graph needs an input {name!r} that the tokenizer does not produce")
    return feeds


class OrtSeq2SeqStepper:
    """The sampling stepper of the ort engine on the CPU: exported graphs called directly (numpy in,
    numpy out).

    Two ways to step, chosen by the first call after :meth:`start`:

    * :meth:`step_topk` (the ``fast`` sampler with top-k, when the export has the step graphs of
      :mod:`breaknli_fast.export.t5_step`): cross-attention keys / values once per prompt, each row
      attending to its own prompt's only; the self-attention cache kept in buffers that grow by
      :data:`CACHE_CHUNK` positions (the graph returns each step's new keys / values, written in place);
      only the top ``k`` logits per row leave the session;
    * :meth:`step`: optimum's encoder / decoder / decoder-with-past graphs, full-vocabulary
      logits (the ``transformers`` sampler, top-k 0, exports without the step graphs)."""

    def __init__(self, folder: Any, device: str = "cpu", provider: str | None = None, threads: int | None = None,
                 step_graphs: bool = True):
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
        """Whether :meth:`step_topk` serves the batch: the export has the step graphs and they are not switched
        off."""
        return self.has_step_graphs

    def _session(self, name: str) -> Any:
        with self._lock:
            if name not in self._sessions:
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

        dec = self._session(STEP_DECODER)
        if self._mode is None:
            self._mode = "topk"
            enc = self._session(STEP_ENCODER)
            self.cross = dict(zip(self._outputs[STEP_ENCODER],
                                  enc.run(None, {"input_ids": self._ids, "attention_mask": self._mask})))
            b, length = self._ids.shape
            # prompt e's rows see only its real tokens; float32 min as transformers masks
            self.cross_bias = np.where(self._mask == 1, 0.0, FLOOR).astype(np.float32).reshape(b, 1, 1, length)
            self.row_prompt = np.repeat(np.arange(b), self._n)
            self._grid()
            self._cache_names = [i.name for i in dec.get_inputs() if i.name.startswith("cache_")]
            _, heads, _, d_kv = self.cross[next(iter(self.cross))].shape
            self.past = {c: np.zeros((b * self._n, heads, CACHE_CHUNK, d_kv), dtype=np.float32)
                         for c in self._cache_names}
            self.t = 0
        elif self._mode != "topk":
            raise RuntimeError("step_topk() after step() on the same batch")
        capacity = next(iter(self.past.values())).shape[2]
        if self.t == capacity:  # the buffers grow by CACHE_CHUNK positions, not by one every step
            self.past = {c: np.concatenate([v, np.zeros(v.shape[:2] + (CACHE_CHUNK,) + v.shape[3:], v.dtype)], axis=2)
                         for c, v in self.past.items()}
            capacity += CACHE_CHUNK
        rel = np.arange(capacity + 1, dtype=np.int64) - self.t
        rel[-1] = 0  # the new token itself
        mask = np.zeros(capacity + 1, dtype=np.float32)
        mask[self.t:capacity] = FLOOR  # empty slots
        outs = dec.run(None, {"input_ids": tokens.numpy().astype(np.int64)[:, None], "self_rel": rel,
                              "self_mask": mask, "cross_bias": self.cross_bias, "slot_rows": self.slot_rows,
                              "row_slots": self.row_slots, **self.cross, **self.past,
                              "top_k": np.array([k], dtype=np.int64)})
        for name, new in zip(self._outputs[STEP_DECODER][2:], outs[2:]):  # new_{k,v}_i -> cache_{k,v}_i
            self.past["cache_" + name[len("new_"):]][:, :, self.t, :] = new
        self.t += 1
        return torch.from_numpy(outs[0]), torch.from_numpy(outs[1])

    def _grid(self) -> None:
        """The (prompts, slots) grid of the step decoder's cross-attention: rows are grouped by prompt in
        ascending order (the sampler drops rows but never reorders them), ``slots`` = the most live rows of
        one prompt; a prompt's spare slots repeat its first row (their results are not read back)."""
        counts = np.bincount(self.row_prompt, minlength=self.cross_bias.shape[0])
        slots = int(counts.max()) if len(counts) else 0
        first = np.concatenate([[0], np.cumsum(counts)[:-1]])
        within = np.arange(len(self.row_prompt)) - first[self.row_prompt]
        self.row_slots = (self.row_prompt * slots + within).astype(np.int64)
        j = np.arange(slots)[None, :]
        grid = first[:, None] + np.where(j < counts[:, None], j, 0)
        self.slot_rows = grid.reshape(-1).astype(np.int64)

    def keep(self, positions: Any) -> None:
        import torch

        def rows(a: np.ndarray) -> np.ndarray:  # torch's index_select copies rows faster than numpy indexing
            return torch.from_numpy(a).index_select(0, positions).numpy()

        if self._mode == "topk":
            self.row_prompt = self.row_prompt[positions.numpy()]
            live = np.unique(self.row_prompt)
            if len(live) < self.cross_bias.shape[0]:  # prompts without live rows leave the cross-attention
                self.cross = {c: np.ascontiguousarray(v[live]) for c, v in self.cross.items()}
                self.cross_bias = np.ascontiguousarray(self.cross_bias[live])
                self.row_prompt = np.searchsorted(live, self.row_prompt)
            self._grid()
        else:
            self.mask = rows(self.mask)
            if self.hidden is not None:
                self.hidden = rows(self.hidden)
        if self.past:
            self.past = {k: rows(v) for k, v in self.past.items()}


class SessionMaskFiller(HFMaskFillerMixin, BatchedMaskFiller):
    """A masked-LM graph (inputs as the tokenizer produces them and ``mask_index``; output ``log_probs``, as the
    exporters write it) on an ONNX Runtime session, behind the mask-filler contract. The ort engine's mask filler
    is one (after its export); the exporters validate with one."""

    cpu_max_batch = 16

    def __init__(self, graph: str | Path, tokenizer: Any, model_vocab_size: int, max_length: int, device: str = "cpu",
                 provider: str | None = None, threads: int | None = None, workers: int = 1, token_budget: int = 8192,
                 max_batch: int | None = None, info: EngineInfo | None = None, fp16: bool = False):
        super().__init__(token_budget=token_budget, max_batch=max_batch, workers=workers, device=device)
        self._setup_tokenizer(tokenizer, max_length, model_vocab_size)
        self.session, details = make_session(graph, device=device, provider=provider, threads=threads, fp16=fp16)
        self.inputs = [i for i in self.session.get_inputs() if i.name != "mask_index"]
        self.device = device
        self.info = info or EngineInfo("ort", MASK_FILLER, str(graph), "fp32", device, {})
        self.info.details.update(details)

    def _run(self, arrays: dict[str, np.ndarray], mask_index: np.ndarray) -> np.ndarray:
        feeds = graph_feeds(arrays, self.inputs)
        feeds["mask_index"] = mask_index.astype(np.int64, copy=False)
        return np.asarray(self.session.run(["log_probs"], feeds)[0], dtype=np.float32)
