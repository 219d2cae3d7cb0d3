"""The PyTorch reference engine (fp32 by default): the yardstick every fast engine is checked against."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from breaknli_fast.data.labels import LABELS, map_id2label
from breaknli_fast.engines.base import BatchedClassifier, EngineInfo, Pair, pad_tokens, pad_values
from breaknli_fast.engines.generation import HFGenerator
from breaknli_fast.engines.models import ModelLoadError, effective_max_length, load_config, model_kind, resolve_model
from breaknli_fast.prompts import DEFAULT_NLI_PROMPT, NLI_ANSWERS, NLI_PROMPTS

_DEFAULT_THREADS = torch.get_num_threads()  # before anything here changes it

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def _check_device(device: str) -> str:
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ModelLoadError("--device cuda was requested but no CUDA GPU is visible to torch")
    if device not in ("cpu",) and not device.startswith("cuda"):
        raise ModelLoadError(f"unknown device {device!r}; use cpu or cuda[:N]")
    return device


def _dtype(precision: str) -> torch.dtype:
    if precision not in DTYPES:
        raise ModelLoadError(f"the torch engine runs fp32, fp16 or bf16, not {precision!r}")
    return DTYPES[precision]


def load_tokenizer(path: str) -> Any:
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(path)
    except (OSError, ValueError) as e:
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ModelLoadError(f"cannot load the tokenizer of {path!r}: {first}") from None


def label_permutation(config: Any, label_map: Mapping[str, str] | None = None) -> list[int]:
    """Model output index for each canonical label column (LABELS order), via ``id2label``."""
    model_labels = map_id2label(config.id2label, label_map)
    return [model_labels.index(lab) for lab in LABELS]


def answer_token_ids(tokenizer: Any) -> list[int]:
    """First token id of each answer word, in LABELS order (entailment=yes, neutral=it..., contradiction=no)."""
    ids = []
    for lab in LABELS:
        toks = tokenizer(NLI_ANSWERS[lab], add_special_tokens=False)["input_ids"]
        # skip a bare word-boundary piece ("▁") that some SentencePiece models emit first
        toks = [t for t in toks if tokenizer.decode([t]).strip()]
        if not toks:
            raise ModelLoadError(f"the tokenizer gives no token for the answer {NLI_ANSWERS[lab]!r}")
        ids.append(int(toks[0]))
    if len(set(ids)) != 3:
        raise ModelLoadError("the answer words yes / it / no share a first token under this tokenizer")
    return ids


def parse_nli_answer(text: str) -> str:
    """Flan-T5 answer text to a label: yes -> entailment, no -> contradiction, anything else -> neutral."""
    t = text.strip().lower()
    if t.startswith("yes"):
        return "entailment"
    if t.startswith("no") and (len(t) == 2 or not t[2].isalpha()):
        return "contradiction"
    return "neutral"


def seq2seq_nli_logits(model: Any, tokenizer: Any, enc: dict[str, Any], method: str, start_id: int,
                       answer_ids: list[int], device: Any) -> np.ndarray:
    """(n, 3) scores of a text-to-text NLI model (any model with HF forward / generate, torch or ORT):
    ``score`` = first decoder step's logits of the answer tokens; ``generate`` = one-hot of the
    greedy answer parsed by :func:`parse_nli_answer`."""
    n = int(enc["input_ids"].shape[0])
    with torch.inference_mode():
        if method == "score":
            dec = torch.full((n, 1), start_id, dtype=torch.long, device=device)
            logits = model(**enc, decoder_input_ids=dec).logits[:, 0, :]
            return logits[:, answer_ids].float().cpu().numpy()
        seqs = model.generate(**enc, max_new_tokens=10, do_sample=False, num_beams=1)
    texts = tokenizer.batch_decode(seqs, skip_special_tokens=True)
    out = np.zeros((n, len(LABELS)), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i, LABELS.index(parse_nli_answer(t))] = 1.0
    return out


def dispatch_classifier(model: str, precision: str, device: str, opts: dict[str, Any], seq_cls: Any, seq2seq: Any) -> Any:
    """Build the engine's sequence-classifier or seq2seq-classifier class for ``model``, passing each
    only the options it takes (``label_map`` / ``prompt`` + ``method``)."""
    kind = model_kind(load_config(model))
    if kind == "seq-cls":
        return seq_cls(model, precision, device, **{k: v for k, v in opts.items() if k not in ("prompt", "method")})
    return seq2seq(model, precision, device, **{k: v for k, v in opts.items() if k != "label_map"})


class Seq2SeqNLIMixin:
    """Prompting, token lengths and scoring of a text-to-text NLI classifier, shared by the torch and
    ORT engines; a subclass sets ``tokenizer``, ``model``, ``template``, ``method``, ``max_length``
    (the prompt's token cap, from :func:`~breaknli_fast.engines.models.effective_max_length`),
    ``start_id``, ``answer_ids`` and ``input_device`` (where the model's inputs go)."""

    def prompts(self, pairs: Sequence[Pair]) -> list[str]:
        return [self.template.format(premise=p, hypothesis=h) for p, h in pairs]

    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        enc = self.tokenizer(self.prompts(pairs), truncation=True, max_length=self.max_length)
        return [len(x) for x in enc["input_ids"]]

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        enc = self.tokenizer(self.prompts(pairs), padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        enc = {k: v.to(self.input_device) for k, v in enc.items()}
        return seq2seq_nli_logits(self.model, self.tokenizer, enc, self.method, self.start_id, self.answer_ids,
                                  self.input_device)


class TorchThreadsMixin:
    """Sets torch's process-wide threads to this engine's ``torch_threads`` before each classify call
    (:func:`use_torch_threads`)."""

    torch_threads: int

    def classify(self, pairs: Sequence[Pair]) -> Any:
        use_torch_threads(self.torch_threads)
        return super().classify(pairs)  # type: ignore[misc]


class TorchClassifier(TorchThreadsMixin, BatchedClassifier):
    """Any ``AutoModelForSequenceClassification``; labels mapped through ``id2label``."""

    # 32 pairs ran the mini-model loop about 6 % faster on the CPU than 64 in two measurements
    # (BENCHMARKS.md, fifth session: 10.27 / 10.86 s and 10.08 / 10.66 s; 16: 10.59 s)
    cpu_max_batch = 32

    def __init__(
        self,
        model: str,
        precision: str = "fp32",
        device: str = "cpu",
        label_map: Mapping[str, str] | None = None,
        max_length: int = 256,
        token_budget: int = 8192,
        max_batch: int | None = None,
        threads: int | None = None,
        workers: int | str | None = None,
    ):
        from transformers import AutoModelForSequenceClassification

        n_workers, self.torch_threads = torch_workers(device, threads, workers)
        super().__init__(token_budget=token_budget, max_batch=max_batch, workers=n_workers, device=device)
        self.device = _check_device(device)
        path = resolve_model(model)
        config = load_config(model)
        if model_kind(config) != "seq-cls":
            raise ModelLoadError(f"{model!r} is not a sequence classifier")
        self.perm = label_permutation(config, label_map)
        self.tokenizer = load_tokenizer(path)
        self._pad_values = pad_values(self.tokenizer)
        self.model = AutoModelForSequenceClassification.from_pretrained(path, dtype=_dtype(precision))
        self.model.to(self.device).eval()
        # never more tokens than the model's position table holds (longer inputs crash or index out of range)
        self.max_length, limits = effective_max_length(max_length, config, self.tokenizer)
        self.info = EngineInfo("torch", "classifier", model, precision, device,
                               {"kind": "seq-cls", "family": config.model_type, "workers": self.workers.n,
                                "torch_threads": self.torch_threads, "max_batch": self.max_batch, **limits})

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def encode(self, pairs: Sequence[Pair], **kw: Any) -> Any:
        return self.tokenizer(
            [p for p, _ in pairs], [h for _, h in pairs], truncation=True, max_length=self.max_length, **kw
        )

    def raw_logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        """Logits in the model's own output order (for export validation)."""
        return self._raw_run(self._encode(pairs))

    def _tokenize(self, pairs: Sequence[Pair]) -> Any:
        return self.encode(pairs)

    def _feeds(self, tokens: Any, rows: Sequence[int]) -> dict[str, torch.Tensor]:
        padded = pad_tokens(tokens, rows, self._pad_values, self.tokenizer.padding_side)
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

    def __init__(
        self,
        model: str,
        precision: str = "fp32",
        device: str = "cpu",
        prompt: str = DEFAULT_NLI_PROMPT,
        method: str = "score",
        max_length: int = 256,
        token_budget: int = 8192,
        max_batch: int | None = None,
        threads: int | None = None,
        workers: int | str | None = None,
    ):
        from transformers import AutoModelForSeq2SeqLM

        # batches run one at a time here (``workers`` is accepted and ignored), on all the threads
        self.torch_threads = torch_workers(device, threads, None)[1]
        super().__init__(token_budget=token_budget, max_batch=max_batch)
        if prompt not in NLI_PROMPTS:
            raise ModelLoadError(f"unknown NLI prompt {prompt!r}; choose one of {', '.join(NLI_PROMPTS)}")
        if method not in ("score", "generate"):
            raise ModelLoadError(f"unknown seq2seq classification method {method!r}; use score or generate")
        self.device = _check_device(device)
        path = resolve_model(model)
        self.tokenizer = load_tokenizer(path)
        self.model = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=_dtype(precision))
        self.model.to(self.device).eval()
        self.template = NLI_PROMPTS[prompt]
        self.method = method
        self.max_length, limits = effective_max_length(max_length, self.model.config, self.tokenizer)
        self.answer_ids = answer_token_ids(self.tokenizer)
        self.start_id = int(self.model.config.decoder_start_token_id or 0)
        self.input_device = self.device
        self.info = EngineInfo(
            "torch", "classifier", model, precision, device,
            {"kind": "seq2seq", "prompt": prompt, "method": method, "workers": 1, "torch_threads": self.torch_threads,
             **limits},
        )

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()



def load_classifier(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> BatchedClassifier:
    return dispatch_classifier(model, precision, device, opts, TorchClassifier, TorchSeq2SeqClassifier)


def use_torch_threads(n: int) -> None:
    """Set torch's process-wide intra-op threads to ``n`` (each torch engine calls it before its work, so
    engines with different splits can live in one process, as in an interleaved bench)."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def torch_workers(device: str, threads: int | None, workers: int | str | None) -> tuple[int, int]:
    """(worker threads, torch intra-op threads) of the torch engine; the threads are set now and again
    before every call (:func:`use_torch_threads`).

    ``threads``: CPU threads in all (default: torch's own count when this module was imported).
    ``workers``: 1 unless asked (``None``): the reference runs its batches one after another on all
    the threads; a number or ``auto`` splits the threads as
    :func:`~breaknli_fast.engines.base.split_threads` does. On CUDA: one worker."""
    from breaknli_fast.engines.base import split_threads

    total = int(threads) if threads else _DEFAULT_THREADS
    w, intra = 1, total
    if device == "cpu" and workers is not None:
        w, intra = split_threads(total, workers, error=ModelLoadError)
    use_torch_threads(intra)
    return w, intra


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", **opts: Any) -> HFGenerator:
    from transformers import AutoModelForSeq2SeqLM

    _check_device(device)
    opts["workers"], intra = torch_workers(device, opts.pop("threads", None), opts.pop("workers", None))
    config = load_config(model)
    if model_kind(config) != "seq2seq":
        raise ModelLoadError(f"{model!r} cannot generate: the generator must be a text-to-text model such as Flan-T5")
    path = resolve_model(model)
    tok = load_tokenizer(path)
    m = AutoModelForSeq2SeqLM.from_pretrained(path, dtype=_dtype(precision)).to(device).eval()
    info = EngineInfo("torch", "generator", model, precision, device, {"workers": opts["workers"], "torch_threads": intra})
    return HFGenerator(m, tok, info, device=device, torch_threads=intra, **opts)
