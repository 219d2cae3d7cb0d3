"""``breaknli-fast bench``: speed of engines / precisions and their parity with torch:fp32, for any probe.

Library entry points: :func:`run_bench` (-> :class:`BenchResult`, with ``to_json`` / ``to_markdown`` /
``save``), :class:`BenchConfig` (the probe, its config object, the engines), :func:`parse_engines` (``--engines``
into :class:`BenchEngine` entries, each holding the study's :class:`~breaknli_fast.study.loading.EngineConfig`);
the Typer command is :func:`breaknli_fast.bench.command.bench`.
"""

from importlib import import_module
from typing import Any

# the entry points load on first use: the bench's submodules (its result types, read by the suite and the CLI's
# errors) must not pull torch and the engines in with them
_WHERE = {"BenchError": "result", "BenchResult": "result", "BenchConfig": "runner", "run_bench": "runner",
          "BenchEngine": "specs", "BenchSpecError": "specs", "parse_engines": "specs"}

__all__ = ["BenchConfig", "BenchEngine", "BenchError", "BenchResult", "BenchSpecError", "parse_engines", "run_bench"]


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(import_module(f"breaknli_fast.bench.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'breaknli_fast.bench' has no attribute {name!r}")
