"""Generation shared by every engine whose model offers Hugging Face's ``generate``
(torch models, optimum's ORT seq2seq models): one seed per prompt, so candidates do not
depend on batching, and a resumed or re-run example gets exactly the same candidates."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Sequence

import torch

from breaknli_fast.engines.base import Decoding, EngineInfo

DIVERSE_BEAM_UNAVAILABLE = (
    "diverse-beam decoding is not available: transformers 4.57 moved group beam search to a hub "
    "repository (transformers-community/group-beam-search) that this tool does not download at run time; "
    "use --decoding sampling or beam"
)


@dataclass
class GeneratorStats:
    prompts: int = 0
    sequences: int = 0
    new_tokens: int = 0
    seconds: float = 0.0
    call_seconds: list[float] = field(default_factory=list)

    def reset(self) -> None:
        self.prompts = self.sequences = self.new_tokens = 0
        self.seconds = 0.0
        self.call_seconds = []


class HFGenerator:
    """A :class:`~breaknli_fast.engines.base.Generator` over any model with HF ``generate``."""

    def __init__(self, model: Any, tokenizer: Any, info: EngineInfo, device: str = "cpu", max_input_length: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.info = info
        self.device = device
        self.max_input_length = max_input_length
        self.stats = GeneratorStats()

    def _synchronize(self) -> None:
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()

    def generate_ids(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[list[int]]]:
        """Generated token ids (without the decoder start token and padding), ``n`` per prompt."""
        if len(seeds) != len(prompts):
            raise ValueError("one seed per prompt is required")
        if decoding.strategy == "diverse-beam":
            raise ValueError(DIVERSE_BEAM_UNAVAILABLE)
        kw = decoding.hf_kwargs(n)
        pad = self.tokenizer.pad_token_id
        out: list[list[list[int]]] = []
        for prompt, seed in zip(prompts, seeds):
            enc = self.tokenizer([prompt], return_tensors="pt", truncation=True, max_length=self.max_input_length)
            enc = {k: v.to(self.device) for k, v in enc.items()}
            t0 = time.perf_counter()
            torch.manual_seed(int(seed))
            with torch.inference_mode():
                seqs = self.model.generate(**enc, **kw)
            self._synchronize()
            dt = time.perf_counter() - t0
            rows = [[int(t) for t in row[1:] if int(t) != pad] for row in seqs.detach().cpu()]
            self.stats.new_tokens += sum(len(r) for r in rows)
            self.stats.prompts += 1
            self.stats.sequences += len(rows)
            self.stats.seconds += dt
            self.stats.call_seconds.append(dt)
            out.append(rows)
        return out

    def generate(self, prompts: Sequence[str], n: int, decoding: Decoding, seeds: Sequence[int]) -> list[list[str]]:
        ids = self.generate_ids(prompts, n, decoding, seeds)
        return [[t.strip() for t in self.tokenizer.batch_decode(rows, skip_special_tokens=True)] for rows in ids]

    def count_tokens(self, texts: Iterable[str]) -> int:
        return sum(len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=False)["input_ids"])
