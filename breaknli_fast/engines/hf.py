"""Torch-side helpers shared by the backends that run Hugging Face model objects: the torch engine's models,
optimum's ONNX Runtime models of the ort engine, and the generator both engines share
(:class:`~breaknli_fast.engines.generation.HFGenerator`). The torch-free helpers (names, configs, tokenizers,
label order, input limits) are in :mod:`breaknli_fast.engines.models`."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import torch

from breaknli_fast.data.labels import LABELS
from breaknli_fast.engines.base import Pair
from breaknli_fast.engines.models import parse_nli_answer


def use_torch_threads(n: int) -> None:
    """Set torch's process-wide intra-op threads to ``n`` (each torch engine calls it before its work, so
    engines with different splits can live in one process, as in an interleaved bench)."""
    if torch.get_num_threads() != n:
        torch.set_num_threads(n)


def seq2seq_nli_logits(model: Any, tokenizer: Any, enc: dict[str, Any], method: str, start_id: int,
                       answer_ids: list[int], device: Any) -> np.ndarray:
    """(n, 3) scores of a text-to-text NLI model (any model with HF forward / generate, torch or ORT):
    ``score`` = first decoder step's logits of the answer tokens; ``generate`` = one-hot of the
    greedy answer parsed by :func:`~breaknli_fast.engines.models.parse_nli_answer`."""
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


class Seq2SeqNLIMixin:
    """Prompting, token lengths and scoring of a text-to-text NLI classifier, shared by the torch and
    ORT engines; a subclass sets ``tokenizer``, ``model``, ``template``, ``method``, ``max_length``
    (the prompt's token cap, from :func:`~breaknli_fast.engines.models.effective_max_length`),
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
        enc = self.tokenizer(self.prompts(pairs), padding=True, truncation=True, max_length=self.max_length,
                             return_tensors="pt")
        enc = {k: v.to(self.input_device) for k, v in enc.items()}
        return seq2seq_nli_logits(self.model, self.tokenizer, enc, self.method, self.start_id, self.answer_ids,
                                  self.input_device)
