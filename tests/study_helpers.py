"""Test helpers that drive the study runner directly (not part of the package)."""

from __future__ import annotations

from typing import Any

from breaknli_fast.data.loaders import LoadedData
from breaknli_fast.engines.base import Classifier, Generator
from breaknli_fast.engines.roles import Models
from breaknli_fast.probes.base import StageTimes
from breaknli_fast.probes.breaknli import BreakNLIConfig, BreakNLIProbe
from breaknli_fast.progress import ProgressHook
from breaknli_fast.study.rundir import RunDir
from breaknli_fast.study.runner import execute


def run_loop(data: LoadedData, classifier: Classifier, generator: Generator, cfg: BreakNLIConfig,
             run_dir: RunDir | None = None, hook: ProgressHook | None = None,
             stop_after: int | None = None) -> tuple[list[dict[str, Any]], StageTimes]:
    """The BreakNLI probe's chunk loop on loaded engines (no report files): every record of the run (earlier
    ones included) and this invocation's timings."""
    return execute(BreakNLIProbe(cfg), Models.of(classifier, generator), data, run_dir, hook, stop_after=stop_after)
