"""The generate step of the BreakNLI loop: candidates for a chunk's hypotheses, one seed per (run seed, mode,
example[, draw]), so that an example's candidates depend neither on its batch nor on the chunking, and with a
study's shared cache of candidates (a study over several classifiers generates them once per dataset)."""

from __future__ import annotations

import time
from typing import Any, Sequence

from breaknli_fast.data.loaders import Example
from breaknli_fast.engines.base import Generator, derive_seed, generate_counted
from breaknli_fast.probes.base import SharedCache, StageTimes


def shared_key(mode: str, example_id: str, *draw: Any) -> str:
    """The key of an example's candidates in a study's shared cache (``draw``: a top-up draw's tag and index)."""
    return "\t".join((mode, example_id, *map(str, draw)))


def generate_texts(mode: str, examples: Sequence[Example], generator: Generator | None, cfg: Any, n: int,
                   times: StageTimes, shared: SharedCache | None = None, draw: tuple[Any, ...] = ()) -> list[list[str]]:
    """``n`` raw texts per example from the mode's prompt, in one generator call: example i under the seed
    ``derive_seed(run seed, mode, example id, *draw)``. With ``shared``, texts another run of the study generated
    for the same prompt and key are reused and only the others generated (and added to it)."""
    prompts = [cfg.prompts[mode].format(h=ex.hypothesis) for ex in examples]
    keys = [shared_key(mode, ex.id, *draw) for ex in examples]
    out: list[list[str] | None] = [None] * len(examples)
    if shared is not None:
        for i, (key, prompt) in enumerate(zip(keys, prompts)):
            hit = shared.get(key)
            if hit is not None and hit.get("prompt") == prompt:  # K, decoding and seed are in the cache's key
                out[i] = list(hit["generated"])
    todo = [i for i, c in enumerate(out) if c is None]
    if todo:
        if generator is None:
            raise ValueError("the BreakNLI probe needs a generator")
        seeds = [derive_seed(cfg.seed, mode, examples[i].id, *draw) for i in todo]
        t0 = time.perf_counter()
        # the tokens are the ids the engine generated (end-of-sequence tokens included) where it has them
        texts, counts, _ = generate_counted(generator, [prompts[i] for i in todo], n, cfg.decoding, seeds)
        times.add("generate", time.perf_counter() - t0)
        times.sequences += sum(len(c) for c in texts)
        times.new_tokens += sum(counts)
        for i, cs in zip(todo, texts):
            out[i] = list(cs)
        if shared is not None:
            shared.put({keys[i]: {"prompt": prompts[i], "generated": list(cs)} for i, cs in zip(todo, texts)})
    return [c if c is not None else [] for c in out]


def generate_candidates(mode: str, examples: Sequence[Example], generator: Generator | None, cfg: Any,
                        times: StageTimes, shared: SharedCache | None = None) -> list[list[str]]:
    """The K raw candidates of each example, one seed per (run seed, mode, example)."""
    return generate_texts(mode, examples, generator, cfg, cfg.k, times, shared)
