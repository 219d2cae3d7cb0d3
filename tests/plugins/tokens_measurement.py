"""A measurement written from scratch (docs/benchmarks.md shows this module): how fast a classifier's tokenizer
turns the sample's (premise, hypothesis) pairs into ids. It joins the suite by an entry point of its package
(``[breaknli_fast.measurements] tokens = "plugins.tokens_measurement:Tokens"``); a suite entry then names it."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Chapter, Measurement, Section, option
from breaknli_fast.suite.format import f, of_kind, table
from breaknli_fast.suite.result import ResultFile


@dataclass
class TokensConfig:  # its options: a suite entry's args, `suite measure tokens --pairs 100`, their checks
    model: str = option("mini-nli", help="the classifier whose tokenizer is timed")
    pairs: int = option(1000, min=1, max=2724, why="the embedded sample's pairs", help="pairs tokenized per call")
    repeats: int = option(3, min=1, max=100, why="the median needs no more", help="timed calls (median)")


@dataclass
class TokensPayload:  # what it measures, written by the one typed serialiser (kind "tokens")
    model: str | None = None
    pairs: int | None = None
    repeats: int | None = None
    median_s: float | None = None
    pairs_per_s: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class Tokens(Measurement):
    name = "tokens"
    summary = "a classifier's tokenizer alone: pairs/s on the embedded sample"
    kind = "tokens"
    config_class = TokensConfig
    payload_class = TokensPayload

    def run(self, config: TokensConfig, recorder: Any) -> TokensPayload:
        from transformers import AutoTokenizer

        from breaknli_fast.data.loaders import load_examples
        from breaknli_fast.engines.model_info import resolve_model

        try:
            tok = AutoTokenizer.from_pretrained(resolve_model(config.model))
        except Exception as e:  # noqa: BLE001 - a model that is not there: one line
            raise UserError(f"tokens: no tokenizer for {config.model!r}") from e
        pairs = [(x.premise, x.hypothesis) for x in load_examples("sample", limit=config.pairs).examples]
        times = []
        for _ in range(config.repeats):
            t0 = time.perf_counter()
            tok([p for p, _ in pairs], [h for _, h in pairs], truncation=True)
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        return TokensPayload(model=config.model, pairs=len(pairs), repeats=config.repeats, median_s=med,
                             pairs_per_s=len(pairs) / med)


def tokens_table(doc: ResultFile) -> str:  # a section of BENCHMARKS.md: one file's table
    p: TokensPayload = doc.payload
    return "\n".join([f"`{p.model}`'s tokenizer on {p.pairs} pairs, median of {p.repeats} calls.", "",
                      table(["model", "median s", "pairs/s"], [[p.model, f(p.median_s, ".4f"),
                                                                f(p.pairs_per_s, ".0f")]])])


Tokens.chapters = (Chapter("7", "7. Tokenizers", "The tokenizers alone, before any model runs.", order=110),)
Tokens.sections = (Section("7/tokens", "A classifier's tokenizer", "a tokenizer timing", of_kind("tokens"), 10,
                           render=tokens_table),)
