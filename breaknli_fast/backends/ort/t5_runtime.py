"""The ort engine's T5 runtime: :class:`OrtSeq2SeqStepper`, the shared step-graph stepper
(:class:`~breaknli_fast.engines.stepgraph.StepGraphStepper`) over ONNX Runtime sessions of the project's two T5 graphs
(:mod:`.t5`), on any provider.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from breaknli_fast.backends.ort.runtime import STEP_FILES, make_session
from breaknli_fast.engines.stepgraph import CACHE_CHUNK, FLOOR, StepGraphStepper  # noqa: F401  (re-exported)


class OrtSeq2SeqStepper(StepGraphStepper):
    """The stepper of the ort engine's T5 generator: the exported graphs on ONNX Runtime sessions (idle intra-op
    threads do not spin: a step is a short run with Python work between runs)."""

    def __init__(self, folder: Any, device: str = "cpu", provider: str | None = None, threads: int | None = None):
        def open_session(path: Path) -> tuple[Any, dict[str, Any]]:
            return make_session(path, device, provider, threads, spin=False)

        super().__init__(folder, open_session, STEP_FILES, what="ort T5")
