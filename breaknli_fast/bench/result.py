"""What a bench returns and saves: :class:`BenchResult` (``bench.json``, ``bench.md``, ``bench.png``)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from breaknli_fast.errors import UserError

from breaknli_fast.bench.loadgen.types import ScenarioEngine, ScenarioReport
from breaknli_fast.bench.types import (JSON, READABLE, SCHEMA, BenchReport, EngineResult, from_json,  # noqa: F401
                                       to_json)


class BenchError(UserError):
    """A bench that cannot run (the reference does not load, no data, ...): one line for the CLI."""


class BenchResult:
    """Everything a bench measured, with its renderings: a probe bench's typed :class:`BenchReport` (``report``), or
    a LoadGen bench's typed :class:`~breaknli_fast.bench.loadgen.types.ScenarioReport` (``scenarios``); ``data`` is
    the JSON of ``bench.json`` either way. A dict is read by its ``kind`` (this schema or an earlier one)."""

    def __init__(self, result: BenchReport | ScenarioReport | dict[str, JSON]):
        self.report: BenchReport | None = None
        self.scenarios: ScenarioReport | None = None
        if isinstance(result, BenchReport):
            self.report = result
        elif isinstance(result, ScenarioReport):
            self.scenarios = result
        elif result.get("kind") == "scenarios":
            self.scenarios = from_json(ScenarioReport, result)
        else:  # bench.json of a probe bench, this schema or an earlier one
            self.report = from_json(BenchReport, result)

    @property
    def typed(self) -> BenchReport | ScenarioReport:
        """The report, of either kind."""
        return self.report if self.report is not None else self.scenarios  # type: ignore[return-value]

    @property
    def data(self) -> dict[str, JSON]:
        return to_json(self.typed)  # type: ignore[return-value]

    @property
    def engines(self) -> list[EngineResult] | list[ScenarioEngine]:
        """The engines: :class:`EngineResult` objects of a probe bench, :class:`ScenarioEngine` objects of a LoadGen
        bench."""
        return self.typed.engines

    @property
    def passed(self) -> bool:
        return bool(self.typed.passed)

    def engine(self, label: str) -> EngineResult | ScenarioEngine:
        for e in self.engines:
            if e.label == label:
                return e
        raise KeyError(label)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.data, indent=indent)

    @property
    def is_scenarios(self) -> bool:
        """A ``bench --scenario`` result (LoadGen's scenarios) rather than a probe's speed and parity."""
        return self.scenarios is not None

    def to_markdown(self) -> str:
        if self.scenarios is not None:
            from breaknli_fast.bench.loadgen.report import scenario_markdown

            return scenario_markdown(self.scenarios)
        from breaknli_fast.bench.report import bench_markdown

        return bench_markdown(self.report)

    def table(self) -> Any:
        """The terminal table (rich)."""
        if self.scenarios is not None:
            from rich.console import Group

            from breaknli_fast.bench.loadgen.report import compliance_rich_table, scenario_rich_table

            audits = compliance_rich_table(self.scenarios)
            table = scenario_rich_table(self.scenarios)
            return table if audits is None else Group(table, audits)
        from rich.console import Group

        from breaknli_fast.bench.report import rich_table, roofline_rich_table

        peaks = roofline_rich_table(self.report)
        return rich_table(self.report) if peaks is None else Group(rich_table(self.report), peaks)

    def save(self, out_dir: str | Path, plot: bool = True) -> dict[str, Path]:
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        paths = {"json": out / "bench.json", "markdown": out / "bench.md"}
        paths["json"].write_text(self.to_json() + "\n")
        paths["markdown"].write_text(self.to_markdown())
        if self.scenarios is not None:  # the trade-off picture (where accuracy was scored) and the HTML report
            from breaknli_fast.bench.loadgen.plot import draw, scenario_html

            png = draw(self.scenarios, out / "bench.png") if plot else None
            if png is not None:
                paths["plot"] = out / "bench.png"
            paths["html"] = out / "bench.html"
            paths["html"].write_text(scenario_html(self.scenarios, png))
        elif plot:
            from breaknli_fast.bench.report import plot_speed_vs_breakage

            png = plot_speed_vs_breakage(self.report, out / "bench.png")
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
