"""``breaknli-fast bench``: speed of engines / precisions and their parity with torch:fp32.

Library entry points: :func:`run_bench` (-> :class:`BenchResult`, with ``to_json`` / ``to_markdown`` /
``save``), :class:`BenchConfig`, :func:`parse_engines`; the Typer command is
:func:`breaknli_fast.bench.command.bench`.
"""

from breaknli_fast.bench.runner import BenchConfig, BenchError, BenchResult, run_bench
from breaknli_fast.bench.specs import BenchSpecError, EngineSpec, parse_engines

__all__ = ["BenchConfig", "BenchError", "BenchResult", "BenchSpecError", "EngineSpec", "parse_engines", "run_bench"]
