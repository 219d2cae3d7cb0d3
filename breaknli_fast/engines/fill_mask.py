"""Hugging Face tokenizer side of the mask-filler role, shared by its backends (torch, ort) and the exporter's
validation: which vocabulary tokens are whole words, and masked texts -> token ids. Nothing here imports torch.

**The multi-token rule.** A masked word is one mask token, whatever the number of tokens the word has under
the model's tokenizer; a suggestion is one vocabulary token that starts a word (byte-level BPE: a ``Ġ``
prefix; SentencePiece: ``▁``; WordPiece: no ``##``) and is not a special token. The probability of the
original word is defined only when it is such a token too (:meth:`WordVocab.word_id`); a word that the
tokenizer splits has no score (``None``), and the probe counts it. A mask at the very start of a segment is
scored with the word-initial form of each token as well, so one token id stands for one word at every
position of a text.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from breaknli_fast.engines.base import MASK, MaskedItem
from breaknli_fast.engines.batching import pad_values
from breaknli_fast.engines.model_info import ModelLoadError

SCHEMES = ("byte-bpe", "sentencepiece", "wordpiece")


class WordVocab:
    """The whole-word tokens of a tokenizer: ``candidate_ids`` (int64, ascending), each one's word, and the id
    of a word (the lowest id when several tokens read as the same word)."""

    def __init__(self, ids: Sequence[int], words: Sequence[str], scheme: str):
        self.candidate_ids = np.asarray(ids, dtype=np.int64)
        self._words = {int(i): w for i, w in zip(ids, words)}
        self._ids: dict[str, int] = {}
        for i, w in zip(ids, words):
            self._ids.setdefault(w, int(i))
        self.scheme = scheme

    def __len__(self) -> int:
        return int(self.candidate_ids.size)

    def word(self, token_id: int) -> str:
        return self._words[int(token_id)]

    def word_id(self, word: str | None) -> int | None:
        return None if word is None else self._ids.get(word)

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, model_vocab_size: int | None = None) -> "WordVocab":
        vocab: Mapping[str, int] = tokenizer.get_vocab()
        special = set(int(i) for i in tokenizer.all_special_ids)
        tokens = list(vocab)
        n = max(len(tokens), 1)
        if sum(t.startswith("Ġ") for t in tokens) > 0.1 * n:
            scheme = "byte-bpe"
        elif sum(t.startswith("▁") for t in tokens) > 0.1 * n:
            scheme = "sentencepiece"
        elif any(t.startswith("##") for t in tokens):
            scheme = "wordpiece"
        else:
            raise ModelLoadError("cannot tell which tokens start a word under this tokenizer (no Ġ, ▁ or ## pieces)")
        ids, words = [], []
        for tok, i in sorted(vocab.items(), key=lambda kv: kv[1]):
            if i in special or (model_vocab_size is not None and i >= model_vocab_size):
                continue
            if scheme == "byte-bpe":
                if not tok.startswith("Ġ") or len(tok) < 2:
                    continue
                word = tokenizer.convert_tokens_to_string([tok]).strip()
            elif scheme == "sentencepiece":
                if not tok.startswith("▁") or len(tok) < 2:
                    continue
                word = tok[1:]
            else:
                if tok.startswith("##") or (tok.startswith("[") and tok.endswith("]")):
                    continue
                word = tok
            if not word or any(c.isspace() for c in word) or "\ufffd" in word:
                continue
            ids.append(int(i))
            words.append(word)
        return cls(ids, words, scheme)


def masked_texts(tokenizer: Any, items: Sequence[MaskedItem]) -> list[tuple[str, ...]]:
    """The items with the tokenizer's mask token at every :data:`~breaknli_fast.engines.base.MASK`."""
    mask = tokenizer.mask_token
    if mask is None:
        raise ModelLoadError("the tokenizer has no mask token: not a masked language model")
    return [tuple(seg.replace(MASK, mask) for seg in it) for it in items]


def tokenize_masked(tokenizer: Any, items: Sequence[MaskedItem], max_length: int) -> dict[str, list[list[int]]]:
    """One unpadded tokenizer pass over masked items (one text, or a pair encoded as the tokenizer encodes
    sentence pairs), truncated to ``max_length`` tokens; items of both arities may be mixed."""
    texts = masked_texts(tokenizer, items)
    out: dict[str, list[list[int]]] = {}
    for arity in sorted({len(t) for t in texts}):
        if arity not in (1, 2):
            raise ValueError(f"a masked item is one text or a pair of texts, not {arity}")
        rows = [i for i, t in enumerate(texts) if len(t) == arity]
        first = [texts[i][0] for i in rows]
        enc = (tokenizer(first, truncation=True, max_length=max_length) if arity == 1 else
               tokenizer(first, [texts[i][1] for i in rows], truncation=True, max_length=max_length))
        for key in enc.keys():
            col = out.setdefault(key, [[] for _ in texts])
            for r, seq in zip(rows, enc[key]):
                col[r] = list(seq)
    return out


class HFMaskFillerMixin:
    """``_tokenize`` and ``_pad`` of :class:`~breaknli_fast.engines.base.BatchedMaskFiller` over a Hugging Face
    tokenizer; :meth:`_setup_tokenizer` sets ``tokenizer``, ``max_length``, ``vocab`` and ``mask_token_id``."""

    tokenizer: Any
    max_length: int
    vocab: WordVocab
    mask_token_id: int

    def _setup_tokenizer(self, tokenizer: Any, max_length: int, model_vocab_size: int | None) -> None:
        if tokenizer.mask_token_id is None:
            raise ModelLoadError("the tokenizer has no mask token: not a masked language model")
        self.tokenizer = tokenizer
        self.max_length = int(max_length)
        self.mask_token_id = int(tokenizer.mask_token_id)
        self._pad_values = pad_values(tokenizer)
        self.vocab = WordVocab.from_tokenizer(tokenizer, model_vocab_size)

    def _tokenize(self, items: Sequence[MaskedItem]) -> dict[str, list[list[int]]]:
        return tokenize_masked(self.tokenizer, items, self.max_length)

    def _pad(self, tokens: Mapping[str, Sequence[Sequence[int]]], rows: Sequence[int]) -> dict[str, np.ndarray]:
        return self._padded(tokens, rows, self._pad_values, self.tokenizer.padding_side)
