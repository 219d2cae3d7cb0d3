"""How many of a study's pairs the classifier cuts: the input-length check every study makes (in this process or,
with ``--ray``, in an actor that holds the classifier)."""

from __future__ import annotations

from typing import Any, Sequence


def input_truncation(classifier: Any, examples: Sequence[Any]) -> dict[str, Any] | None:
    """How many of the data's (premise, hypothesis) pairs (a text-to-text classifier: their prompts) are longer
    than the classifier's input length, which cuts them: ``{"max_length", "pairs", "truncated"}``; None for an
    engine that does not expose its tokenizer and length. Texts far beyond the length are clipped first
    (:func:`~breaknli_fast.engines.batching.clip_text`), so this costs one tokenizer pass over the data."""
    from breaknli_fast.engines.batching import clip_text

    tok, length = getattr(classifier, "tokenizer", None), getattr(classifier, "max_length", None)
    if tok is None or not isinstance(length, int) or not examples:
        return None
    pairs = [(clip_text(tok, ex.premise, length), clip_text(tok, ex.hypothesis, length)) for ex in examples]
    prompts = getattr(classifier, "prompts", None)
    enc = (tok(prompts(pairs), verbose=False) if callable(prompts)
           else tok([p for p, _ in pairs], [h for _, h in pairs], verbose=False))
    return {"max_length": length, "pairs": len(pairs),
            "truncated": sum(len(ids) > length for ids in enc["input_ids"])}


def truncation_text(cut: dict[str, Any]) -> str:
    return (f"{cut['truncated']} of the {cut['pairs']} (premise, hypothesis) pairs are longer than the classifier's "
            f"input length of {cut['max_length']} tokens")
