"""What a bench keeps while it runs: one loaded engine and what has been measured of it, and the run's context."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from breaknli_fast.bench.measure import PeakMemory
from breaknli_fast.bench.result import BenchError
from breaknli_fast.bench.specs import BenchEngine
from breaknli_fast.data.loaders import LoadedData
from breaknli_fast.engines.roles import Models
from breaknli_fast.errors import first_line
from breaknli_fast.probes.base import Probe
from breaknli_fast.progress import ProgressHook


class EngineRun:
    """One loaded engine and what has been measured of it so far."""

    def __init__(self, res: dict[str, Any], entry: BenchEngine, models: Models, is_ref: bool):
        self.res, self.entry, self.models, self.is_ref = res, entry, models, is_ref
        self.label: str = res["label"]
        self.walls: list[float] = []
        self.first: dict[str, Any] | None = None  # the first measured run's stage figures
        self.runs: list[dict[str, Any]] = []  # every measured run's stage figures, in the order of ``walls``
        self.records: list[dict[str, Any]] = []
        self.identical = True
        self.stages: dict[str, Any] = {}
        self.logits: dict[str, np.ndarray] = {}
        self.batch_all: list[float] = []
        self.cands: list[list[str]] = []
        self.mem: PeakMemory | None = None
        self.load_mem: dict[str, Any] = {}

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
class Context:
    cfg: Any  # BenchConfig
    probe: Probe
    data: LoadedData
    workload: dict[str, Any]
    ref: dict[str, Any]  # what the reference left for the others: records, triples, logits, greedy ids
    hook: ProgressHook | None
    log: Callable[[str], None]
    meaningful: bool
    extra: dict[str, Any] = field(default_factory=dict)


def fail(eng: EngineRun, ctx: Context, what: str, e: BaseException) -> None:
    """An engine that fails is reported and dropped; the reference failing stops the bench."""
    if eng.is_ref:
        raise BenchError(f"the reference {eng.label} failed during {what}: {first_line(e)}") from e
    eng.res.update(status="failed", reason=f"{type(e).__name__} during {what}: {first_line(e)}")
    ctx.log(f"[{eng.label}] failed: {eng.res['reason']}")
