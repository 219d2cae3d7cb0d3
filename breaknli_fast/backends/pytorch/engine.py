"""The PyTorch reference engine (fp32 by default): the yardstick every fast engine is checked against.
The loaders' options are :class:`TorchOptions`."""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

from breaknli_fast.engines.base import CLASSIFIER, GENERATOR, MASK_FILLER, EngineInfo, Pair
from breaknli_fast.engines.blas import check_reproducible_blas
from breaknli_fast.engines.batching import BatchedClassifier, BatchedMaskFiller, pad_values, split_threads
from breaknli_fast.engines.compat import load_seq2seq
from breaknli_fast.engines.cuda import prepare as prepare_cuda
from breaknli_fast.engines.fill_mask import HFMaskFillerMixin
from breaknli_fast.engines.generation import GenerationOptions, HFGenerator
from breaknli_fast.engines.hf import MaskedLogProbs, Seq2SeqNLIMixin, masked_lm_inputs, use_torch_threads
from breaknli_fast.engines.model_info import (ModelLoadError, answer_token_ids, effective_max_length, label_permutation,
                                          load_config, load_tokenizer, model_kind, require_masked_lm, resolve_model)
from breaknli_fast.prompts import NLI_PROMPTS

_DEFAULT_THREADS = torch.get_num_threads()  # before anything here changes it


@dataclass
class TorchOptions(GenerationOptions):
    """The options of the torch engine's loaders: the common ones and the generator's. ``workers``: 1 unless
    asked (the reference runs its batches one after another on all the threads); see :func:`torch_workers`."""

    engine = "torch"


OPTIONS = TorchOptions  # the registry reads a backend's options class here

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _blas(device: str) -> dict[str, Any]:
    """The CPU BLAS's reproducibility mode for the engine's record (on a GPU: not used)."""
    return {"blas": check_reproducible_blas()} if device == "cpu" else {}


def _check_device(device: str) -> str:
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was requested but no CUDA GPU is visible to torch")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise ModelLoadError(f"unknown device {device!r}; use cpu or cuda[:N]")
    prepare_cuda(device)  # TF32 off on CUDA unless BREAKNLI_FAST_TF32=1 (engines/cuda.py; EngineInfo records it)
    return device


def _dtype(precision: str) -> torch.dtype:
    if precision not in DTYPES:
        raise ModelLoadError(f"the torch engine runs fp32, fp16 or bf16, not {precision!r}")
    return DTYPES[precision]


class TorchThreadsMixin:
    """Sets torch's process-wide threads to this engine's ``torch_threads`` before each classify call
    (:func:`use_torch_threads`)."""

    torch_threads: int

    def classify(self, pairs: Sequence[Pair]) -> Any:
        use_torch_threads(self.torch_threads)
        return super().classify(pairs)  # type: ignore[misc]


class TorchClassifier(TorchThreadsMixin, BatchedClassifier):
    """Any ``AutoModelForSequenceClassification``; labels mapped through ``id2label``."""

    # 32 pairs per batch run the small models' loop faster on the CPU than 64 or 16 (BENCHMARKS.md, batch sizes)
    cpu_max_batch = 32

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", opts: TorchOptions | None = None):
        o = opts or TorchOptions()
        n_workers, self.torch_threads = torch_workers(device, o.threads, o.workers)
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=n_workers, device=device)
        self.device = _check_device(device)
        path = resolve_model(model)
        config = load_config(model)
        if model_kind(config) != "seq-cls":
            raise ModelLoadError(f"{model!r} is not a sequence classifier")
        self.perm = label_permutation(config, o.label_map)
        self.tokenizer = load_tokenizer(path)
        self._pad_values = pad_values(self.tokenizer)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=_dtype(precision))
        self.model.to(self.device).eval()
        pad_linear_rows(self.model)
        # never more tokens than the model's position table holds (longer inputs crash or index out of range)
        self.max_length, limits = effective_max_length(o.max_length, config, self.tokenizer)
        self.info = EngineInfo("torch", "classifier", model, precision, device,
                               {"kind": "seq-cls", "family": config.model_type, "workers": self.workers.n,
                                "torch_threads": self.torch_threads, "max_batch": self.max_batch, **limits,
                                **_blas(device)})

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def encode(self, pairs: Sequence[Pair], **kw: Any) -> Any:
        return self.tokenizer(
            [p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length, **kw
        )

    def raw_logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Logits in the model's own output order, the pairs as one batch."""
        return self._raw_run(self._encode(pairs))

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.encode(pairs)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        padded = self._padded(tokens, rows, self._pad_values, self.tokenizer.padding_side)
        return {k: torch.from_numpy(v).to(self.device) for k, v in padded.items()}

    def _raw_run(self, enc: dict[str, torch.Tensor]) -> np.ndarray:
        with torch.inference_mode():
            logits = self.model(**enc).logits
        return logits.float().cpu().numpy()

    def _run(self, enc: dict[str, torch.Tensor]) -> np.ndarray:
        return self._raw_run(enc)[:, self.perm]


class TorchSeq2SeqClassifier(TorchThreadsMixin, Seq2SeqNLIMixin, BatchedClassifier):
    """Flan-T5 as the NLI model: a prompt, then the first decoder step's logits over the answer
    words' first tokens (``score``, default), or free greedy generation parsed to a label (``generate``)."""

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", opts: TorchOptions | None = None):
        o = opts or TorchOptions()
        prompt, method = o.prompt, o.method
        # batches run one at a time here (``workers`` is accepted and ignored), on all the threads
        self.torch_threads = torch_workers(device, o.threads, None)[1]
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch)
        if prompt not in NLI_PROMPTS:
            raise ModelLoadError(f"unknown NLI prompt {prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if method not in ("score", "generate"):
            raise ModelLoadError(f"unknown seq2seq classification method {method!r}; use score or generate")
        self.device = _check_device(device)
        path = resolve_model(model)
        self.tokenizer = load_tokenizer(path)
        self.model = load_seq2seq(path, _dtype(precision))
        self.model.to(self.device).eval()
        pad_linear_rows(self.model)
        self.template = NLI_PROMPTS[prompt]
        self.method = method
        self.max_length, limits = effective_max_length(o.max_length, self.model.config, self.tokenizer)
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(self.model.config.decoder_start_token_id or 0)
        self.input_device = self.device
        self.info = EngineInfo(
            "torch", "classifier", model, precision, device,
            {"kind": "seq2seq", "prompt": prompt, "method": method, "workers": 1, "torch_threads": self.torch_threads,
             **limits, **_blas(device)},
        )

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()



def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    """A sequence classifier or a text-to-text NLI model (Flan-T5), as the model's config says; ``opts``:
    :class:`TorchOptions` of the classifier role."""
    o = TorchOptions.build(CLASSIFIER, opts)
    if model_kind(load_config(model)) == "seq-cls":
        return TorchClassifier(model, precision, device, o)
    return TorchSeq2SeqClassifier(model, precision, device, o)


LINEAR_ROWS = 8


def _row_padded_linear(self: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
    rows = x.numel() // max(1, x.shape[-1])
    extra = -rows % LINEAR_ROWS
    if extra == 0 or rows == 0:
        return F.linear(x, self.weight, self.bias)
    flat = x.reshape(rows, x.shape[-1])
    flat = torch.cat([flat, flat.new_zeros(extra, flat.shape[1])])
    return F.linear(flat, self.weight, self.bias)[:rows].reshape(*x.shape[:-1], -1)


def pad_linear_rows(model: torch.nn.Module) -> int:
    """Every ``nn.Linear`` of ``model`` multiplies a number of rows that is a multiple of :data:`LINEAR_ROWS`
    (zero rows added and dropped). The CPU's BLAS takes other code paths for a few rows (MKL here: 1-3, 5-7, 9-11
    rows give other fp32 sums than the same rows among more), so a classifier head, whose rows are the batch's
    pairs, gave a pair alone other logits (by ~1e-6) than in a batch; the encoder's products have batch x width
    rows, a multiple of the padded width's step (8). Returns how many layers it changed."""
    n = 0
    for mod in model.modules():
        if type(mod) is torch.nn.Linear:
            mod.forward = types.MethodType(_row_padded_linear, mod)
            n += 1
    return n


def torch_workers(device: str, threads: int | None, workers: int | str | None) -> tuple[int, int]:
    """(worker threads, torch intra-op threads) of the torch engine; the threads are set now and again
    before every call (:func:`use_torch_threads`).

    ``threads``: CPU threads in all (default: torch's own count when this module was imported).
    ``workers``: 1 unless asked (``None``): the reference runs its batches one after another on all
    the threads; a number or ``auto`` splits the threads as
    :func:`~breaknli_fast.engines.batching.split_threads` does. On CUDA: one worker."""
    total = int(threads) if threads else _DEFAULT_THREADS
    w, intra = 1, total
    if device == "cpu" and workers is not None:
        w, intra = split_threads(total, workers, error=ModelLoadError)
    use_torch_threads(intra)
    return w, intra


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    """A text-to-text model (Flan-T5) behind the shared :class:`HFGenerator`; ``opts``: :class:`TorchOptions` of
    the generator role."""
    o = TorchOptions.build(GENERATOR, opts)
    _check_device(device)
    workers, intra = torch_workers(device, o.threads, o.workers)
    config = load_config(model)
    if model_kind(config) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    path = resolve_model(model)
    tok = load_tokenizer(path)
    m = load_seq2seq(path, _dtype(precision), config).to(device).eval()
    info = EngineInfo("torch", "generator", model, precision, device, {"workers": workers, "torch_threads": intra,
                                                                          **_blas(device)})
    return HFGenerator(m, tok, info, device=device, torch_threads=intra, workers=workers,
                       max_input_length=o.max_input_length, prompt_batch=o.prompt_batch)


class TorchMaskFiller(HFMaskFillerMixin, BatchedMaskFiller):
    """Any ``AutoModelForMaskedLM`` (:class:`~breaknli_fast.engines.hf.MaskedLogProbs`: log-probabilities at the
    mask positions only)."""

    cpu_max_batch = 32

    def __init__(self, model: str, precision: str = "fp32", device: str = "cpu", opts: TorchOptions | None = None):
        o = opts or TorchOptions()
        n_workers, self.torch_threads = torch_workers(device, o.threads, o.workers)
        super().__init__(token_budget=o.token_budget, max_batch=o.max_batch, workers=n_workers, device=device)
        self.device = _check_device(device)
        config = require_masked_lm(model)
        path = resolve_model(model)
        tok = load_tokenizer(path)
        m = AutoModelForMaskedLM.from_pretrained(path, dtype=_dtype(precision)).to(self.device).eval()
        pad_linear_rows(m)
        self.input_names = masked_lm_inputs(m, tok)
        self.net = MaskedLogProbs(m, self.input_names).eval()
        max_length, limits = effective_max_length(o.max_length, config, tok)
        self._setup_tokenizer(tok, max_length, int(config.vocab_size))
        self.info = EngineInfo("torch", MASK_FILLER, model, precision, device,
                               {"kind": "mlm", "family": config.model_type, "workers": self.workers.n,
                                "torch_threads": self.torch_threads, "max_batch": self.max_batch,
                                "whole_word_tokens": len(self.vocab), "tokens": self.vocab.scheme,
                                "head_on_masks_only": self.net.split, **limits, **_blas(device)})

    def fill_mask(self, items: Any, top_k: int, score: Any = None) -> Any:
        use_torch_threads(self.torch_threads)
        return super().fill_mask(items, top_k, score)

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def _run(self, arrays: dict[str, np.ndarray], mask_index: np.ndarray) -> np.ndarray:
        args = [torch.from_numpy(arrays[n]).to(self.device) for n in self.input_names]
        with torch.inference_mode():
            out = self.net(*args, torch.from_numpy(mask_index).to(self.device))
        return out.float().cpu().numpy()


def load_mask_filler(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> TorchMaskFiller:
    """A masked language model (``…ForMaskedLM``) as a mask filler; ``opts``: :class:`TorchOptions` of the mlm
    role."""
    return TorchMaskFiller(model, precision, device, TorchOptions.build(MASK_FILLER, opts))
