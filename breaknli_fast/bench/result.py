"""What a bench returns and saves: :class:`BenchResult` (``bench.json``, ``bench.md``, ``bench.png``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from breaknli_fast.errors import UserError

SCHEMA = "breaknli-fast-bench/2"
READABLE = ("breaknli-fast-bench/1", SCHEMA)  # --compare reads the speed and memory fields both share


class BenchError(UserError):
    """A bench that cannot run (the reference does not load, no data, ...): one line for the CLI."""


def _json_default(o: Any) -> Any:
    if isinstance(o, (np.integer,)):
        return int(o)
    if isinstance(o, (np.floating,)):
        return float(o)
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, (Path, tuple)):
        return str(o) if isinstance(o, Path) else list(o)
    raise TypeError(type(o).__name__)


class BenchResult:
    """Everything a bench measured (``bench.json``), with its renderings."""

    def __init__(self, data: dict[str, Any]):
        self.data = data

    @property
    def engines(self) -> list[dict[str, Any]]:
        return self.data["engines"]

    @property
    def passed(self) -> bool:
        return bool(self.data["passed"])

    def engine(self, label: str) -> dict[str, Any]:
        for e in self.engines:
            if e["label"] == label:
                return e
        raise KeyError(label)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent, default=_json_default)

    @property
    def is_scenarios(self) -> bool:
        """A ``bench --scenario`` result (LoadGen's scenarios) rather than a probe's speed and parity."""
        return self.data.get("kind") == "scenarios"

    def to_markdown(self) -> str:
        if self.is_scenarios:
            from breaknli_fast.bench.loadgen.report import scenario_markdown

            return scenario_markdown(self.data)
        from breaknli_fast.bench.report import bench_markdown

        return bench_markdown(self.data)

    def table(self) -> Any:
        """The terminal table (rich)."""
        if self.is_scenarios:
            from rich.console import Group

            from breaknli_fast.bench.loadgen.report import compliance_rich_table, scenario_rich_table

            audits = compliance_rich_table(self.data)
            return scenario_rich_table(self.data) if audits is None else Group(scenario_rich_table(self.data), audits)
        from breaknli_fast.bench.report import rich_table

        return rich_table(self.data)

    def save(self, out_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
        paths["json"].write_text(self.to_json() + "\n")
        paths["markdown"].write_text(self.to_markdown())
        if plot and not self.is_scenarios:
            from breaknli_fast.bench.report import plot_speed_vs_breakage

            png = plot_speed_vs_breakage(self.data, out / "bench.png")
            if png is not None:
                paths["plot"] = png
        return paths

    @classmethod
    def load(cls, path: str | Path) -> "BenchResult":
        p = Path(path)
        if p.is_dir():
            p = p / "bench.json"
        if not p.exists():
            raise BenchError(f"no bench result at {path} (expected bench.json or a folder holding it)")
        try:
            data = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise BenchError(f"{p} is not valid JSON: {e}") from None
        if not isinstance(data, dict) or data.get("schema") not in READABLE:
            raise BenchError(f"{p} is not a breaknli-fast bench result (schema {SCHEMA})")
        return cls(data)
