"""What a bench keeps while it runs: one loaded engine and what has been measured of it, and the run's context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from breaknli_fast.bench.measure import PeakMemory
from breaknli_fast.bench.result import BenchError
from breaknli_fast.bench.specs import BenchEngine
from breaknli_fast.bench.parity import FixedTriple
from breaknli_fast.bench.types import EngineResult, RunFigures, StageTiming
from breaknli_fast.data.loaders import LoadedData
from breaknli_fast.engines.roles import Models
from breaknli_fast.errors import first_line
from breaknli_fast.probes.base import Probe
from breaknli_fast.probes.breaknli.verdicts import Verdict
from breaknli_fast.progress import ProgressHook


class EngineRun:
    """One loaded engine and what has been measured of it so far."""

    def __init__(self, result: EngineResult, entry: BenchEngine, models: Models, is_ref: bool):
        self.result, self.entry, self.models, self.is_ref = result, entry, models, is_ref
        self.label: str = result.label
        self.walls: list[float] = []
        self.first: RunFigures | None = None  # the first measured run's stage figures
        self.runs: list[RunFigures] = []  # every measured run's stage figures, in the order of ``walls``
        self.records: list[dict[str, Any]] = []
        self.identical = True
        self.stages: dict[str, StageTiming] = {}
        self.logits: dict[str, np.ndarray] = {}
        self.batch_all: list[float] = []
        self.cands: list[list[str]] = []
        self.mem: PeakMemory | None = None
        self.load_mem: dict[str, float | None] = {}

    @property
    def clf(self) -> Any:
        return self.models.classifier

    @property
    def gen(self) -> Any:
        return self.models.generator

    def clear_caches(self) -> None:
        """Forget computed pairs and fills: a second run on the same engines would otherwise reuse them."""
        self.clf.clear_cache()
        for m in (self.models.mlm or {}).values():
            m.clear_cache()


@dataclass
class Workload:
    """The fixed inputs every engine gets: the data's (p, h) pairs; BreakNLI's generate prompts (each a dict of
    ``prompt``, ``seed``, ``mode``, ...) and the (h, h') / (p, h') pairs built from the reference's candidates."""

    classify_ph: list[tuple[str, str]]
    generate: list[dict[str, Any]] = field(default_factory=list)
    relation: list[tuple[str, str]] = field(default_factory=list)
    evaluate: list[tuple[str, str]] = field(default_factory=list)

    def pairs(self, stage: str) -> list[tuple[str, str]]:
        return getattr(self, stage)


@dataclass
class Reference:
    """What the reference engine leaves for the others to be compared with."""

    records: list[dict[str, Any]] = field(default_factory=list)
    triples: list[FixedTriple] = field(default_factory=list)  # its fixed (p, h, h') triples
    greedy: list[dict[str, Any]] = field(default_factory=list)  # the greedy check's prompts
    logits: dict[str, np.ndarray] = field(default_factory=dict)
    verdicts: list[Verdict] = field(default_factory=list)
    greedy_ids: list[list[int]] = field(default_factory=list)


@dataclass
class Context:
    cfg: Any  # BenchConfig
    probe: Probe
    data: LoadedData
    workload: Workload
    ref: Reference
    hook: ProgressHook | None
    log: Callable[[str], None]
    meaningful: bool
    by: list[str] = field(default_factory=list)  # columns the headline parity is also broken down by


def fail(eng: EngineRun, ctx: Context, what: str, e: BaseException) -> None:
    """An engine that fails is reported and dropped; the reference failing stops the bench."""
    if eng.is_ref:
        raise BenchError(f"the reference {eng.label} failed during {what}: {first_line(e)}") from e
    eng.result.status, eng.result.reason = "failed", f"{type(e).__name__} during {what}: {first_line(e)}"
    ctx.log(f"[{eng.label}] failed: {eng.result.reason}")
