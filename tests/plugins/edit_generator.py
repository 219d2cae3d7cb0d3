"""A test generator that edits what the torch engine generates, registered from the tests with
``registry.register("edit", "tests.plugins.edit_generator")``: the torch generator of the same model (its sampler,
its first-token callback, its ids), whose rows are cut to ``keep_tokens`` ids (a truncating engine: shorter outputs,
no end-of-sequence token) and, with ``first=swap``, whose every row's first id is replaced after the first token was
reported (an engine whose first token changes between what it tells LoadGen and what it returns)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.plugins.word_engine import load_classifier  # noqa: F401  (the classifier role: the word engine's)


def load_generator(model: str, precision: str = "fp32", device: str = "cpu", keep_tokens: Any = None,
                   first: str = "keep", **opts: Any) -> Any:
    from breaknli_fast.engines import registry

    gen = registry.load_generator("torch", model, precision, device)
    inner = gen.generate_ids
    keep = int(keep_tokens) if keep_tokens is not None else None

    def generate_ids(prompts, n, decoding, seeds):
        ids = inner(prompts, n, decoding, seeds)
        if keep is not None:
            ids = [[r[:keep] for r in rows] for rows in ids]
        if first == "swap":
            ids = [[[3 if r[0] != 3 else 4] + r[1:] if r else r for r in rows] for rows in ids]
        return ids

    gen.generate_ids = generate_ids
    gen.info = replace(gen.info, engine="edit")
    return gen
