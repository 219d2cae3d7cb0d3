"""A probe of the tests only: proves that a probe is one module and one registry line, its options (two here)
declared in its config and built into ``run --help`` and ``run --probe toy`` by the command line."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any, Sequence

from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.probes.base import Probe, StudyContext, option


@dataclass
class ToyConfig:
    repeat: int = option(1, help="Times each (p, h) pair is classified (toy).", flag="--toy-repeat", min=1, max=5)
    swap: bool = option(False, help="Classify (h, p) instead of (p, h) (toy).", flag="--toy-swap/--no-toy-swap")
    seed: int = 0
    chunk_size: int = 8

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ToyProbe(Probe):
    name = "toy"
    summary = "a probe of the tests"
    config_class = ToyConfig
    roles = ("classifier",)

    def __init__(self, config: ToyConfig | None = None):
        self.cfg = config or ToyConfig()
        self.chunk_size, self.seed = self.cfg.chunk_size, self.cfg.seed

    def identity(self) -> dict[str, Any]:
        return {"toy": self.cfg.to_dict()}

    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        return [("toy", list(data.examples))]

    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        pairs = [(ex.hypothesis, ex.premise) if self.cfg.swap else (ex.premise, ex.hypothesis) for ex in chunk]
        labels = [ctx.models.classifier.classify(pairs).labels for _ in range(self.cfg.repeat)]
        return [{"group": group, "id": ex.id, "labels": [run[i] for run in labels]} for i, ex in enumerate(chunk)]

    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        return {"examples": len(records), "calls_per_example": self.cfg.repeat, "swapped": self.cfg.swap}

    def markdown(self, report: dict[str, Any]) -> str:
        return f"# Toy\n\n{report['examples']} examples\n"
