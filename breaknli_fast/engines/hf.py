"""Torch-side helpers shared by the backends: Flan-T5 as an NLI model (on a transformers model object or on a
backend's stepper), the masked-LM head on the mask positions, torch's threads, and the generator the engines share
(:class:`~breaknli_fast.engines.generation.HFGenerator`). The torch-free helpers (names, configs, tokenizers,
label order, input limits) are in :mod:`breaknli_fast.engines.model_info`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from breaknli_fast.data.labels import LABELS
from breaknli_fast.engines.base import Pair
from breaknli_fast.engines.decoding import greedy_search
from breaknli_fast.engines.model_info import parse_nli_answer


def use_torch_threads(n: int) -> None:
    """Set torch's process-wide intra-op threads to ``n`` (each torch engine calls it before its work, so
    engines with different splits can live in one process, as in an interleaved bench)."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def seq2seq_nli_logits(model: Any, tokenizer: Any, enc: dict[str, Any], method: str, start_id: int,
                       answer_ids: list[int], device: Any) -> np.ndarray:
    """(n, 3) scores of a text-to-text NLI model: ``score`` = first decoder step's logits of the answer tokens;
    ``generate`` = one-hot of the greedy answer (10 new tokens) parsed by
    :func:`~breaknli_fast.engines.model_info.parse_nli_answer`. ``model``: a transformers model object (its forward
    and ``generate``), or a backend's stepper (:class:`~breaknli_fast.engines.sampling.Stepper`: the same first
    step, and :func:`~breaknli_fast.engines.decoding.greedy_search`)."""
    n = int(enc["input_ids"].shape[0])
    stepper = hasattr(model, "step") and hasattr(model, "start")
    with torch.inference_mode():
        if method == "score":
            if stepper:
                model.start(enc["input_ids"], enc["attention_mask"], 1)
                logits = model.step(torch.full((n,), start_id, dtype=torch.long))
            else:
                dec = torch.full((n, 1), start_id, dtype=torch.long, device=device)
                logits = model(**enc, decoder_input_ids=dec).logits[:, 0, :]
            return logits[:, answer_ids].float().cpu().numpy()
        if stepper:
            rows = greedy_search(model, enc["input_ids"], enc["attention_mask"], 10, start_id,
                                 int(tokenizer.eos_token_id))
        else:
            rows = model.generate(**enc, max_new_tokens=10, do_sample=False, num_beams=1)
    texts = tokenizer.batch_decode(rows, skip_special_tokens=True)
    out = np.zeros((n, len(LABELS)), dtype=np.float32)
    for i, t in enumerate(texts):
        out[i, LABELS.index(parse_nli_answer(t))] = 1.0
    return out


class Seq2SeqNLIMixin:
    """Prompting, token lengths and scoring of a text-to-text NLI classifier, shared by the torch and
    ORT engines; a subclass sets ``tokenizer``, ``model``, ``template``, ``method``, ``max_length``
    (the prompt's token cap, from :func:`~breaknli_fast.engines.model_info.effective_max_length`),
    ``start_id``, ``answer_ids`` and ``input_device`` (where the model's inputs go)."""

    tokenizer: Any
    model: Any
    template: str
    method: str
    max_length: int
    start_id: int
    answer_ids: list[int]
    input_device: Any

    def prompts(self, pairs: Sequence[Pair]) -> list[str]:
        return [self.template.format(premise=p, hypothesis=h) for p, h in pairs]

    def _token_lengths(self, pairs: Sequence[Pair]) -> list[int]:
        enc = self.tokenizer(self.prompts(pairs), truncation=True, max_length=self.max_length)
        return [len(x) for x in enc["input_ids"]]

    def _logits(self, pairs: Sequence[Pair]) -> np.ndarray:
        enc = self.tokenizer(self.prompts(pairs), truncation=True, max_length=self.max_length)
        longest = max(len(x) for x in enc["input_ids"])  # padded to the width its own length decides (batching)
        enc = self.tokenizer.pad(enc, padding="max_length", max_length=self._width(longest), return_tensors="pt")
        enc = {k: v.to(self.input_device) for k, v in enc.items()}
        return seq2seq_nli_logits(self.model, self.tokenizer, enc, self.method, self.start_id, self.answer_ids,
                                  self.input_device)


class MaskedLogProbs(torch.nn.Module):
    """A masked LM that returns log-probabilities at the mask positions only: ``forward(input_ids,
    attention_mask[, token_type_ids], mask_index)`` -> (len(mask_index), vocabulary), where ``mask_index`` holds
    flat positions (row * width + column) into the batch. Where the model has a separate prediction head
    (``lm_head``: RoBERTa-style; ``cls``: BERT-style) the head runs on the masked positions alone, which saves
    most of its cost on large vocabularies; other families compute the full logits and gather. The torch
    engine runs it, and the ONNX exporter traces it (one graph, input ``mask_index``, output ``log_probs``)."""

    def __init__(self, model: Any, input_names: Sequence[str]):
        super().__init__()
        self.model = model
        self.input_names = list(input_names)
        head = next((h for h in (getattr(model, "lm_head", None), getattr(model, "cls", None))
                     if isinstance(h, torch.nn.Module)), None)
        self.head = head
        self.split = self.head is not None and getattr(model, "base_model", None) is not None

    def forward(self, *args: Any) -> Any:
        *inputs, mask_index = args
        kw = dict(zip(self.input_names, inputs))
        if self.split:
            hidden = self.model.base_model(**kw)[0]
            picked = hidden.reshape(-1, hidden.shape[-1]).index_select(0, mask_index)
            logits = self.head(picked)
        else:
            logits = self.model(**kw).logits
            logits = logits.reshape(-1, logits.shape[-1]).index_select(0, mask_index)
        return torch.log_softmax(logits.float(), dim=-1)


def masked_lm_inputs(model: Any, tokenizer: Any) -> list[str]:
    """The model inputs a masked LM's tokenizer produces, in the order :class:`MaskedLogProbs` takes them."""
    import inspect

    params = inspect.signature(model.forward).parameters
    produced = set(tokenizer("a", "b").keys())
    return [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in params and n in produced]
