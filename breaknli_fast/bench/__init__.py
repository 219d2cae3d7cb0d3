"""``breaknli-fast bench``: speed of engines / precisions and their parity with torch:fp32, for any probe.

Library entry points: :func:`run_bench` (-> :class:`BenchResult`, with ``to_json`` / ``to_markdown`` /
``save``), :class:`BenchConfig` (the probe, its config object, the engines), :func:`parse_engines` (``--engines``
into :class:`BenchEngine` entries, each holding the study's :class:`~breaknli_fast.study.loading.EngineConfig`);
the Typer command is :func:`breaknli_fast.bench.command.bench`.
"""

from breaknli_fast.bench.result import BenchError, BenchResult
from breaknli_fast.bench.runner import BenchConfig, run_bench
from breaknli_fast.bench.specs import BenchEngine, BenchSpecError, parse_engines

__all__ = ["BenchConfig", "BenchEngine", "BenchError", "BenchResult", "BenchSpecError", "parse_engines", "run_bench"]
