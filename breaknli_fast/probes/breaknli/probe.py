"""BreakNLI as a probe of the study runner (docs/methodology.md).

Units: one group per mode (contradictive, then entailed), each the examples whose gold label the mode selects.
Before the chunks, M(p, h) of every selected example (cached in the run directory); per chunk, the loop's
steps (:func:`breaknli_fast.probes.breaknli.loop.process_chunk`): generate K, deduplicate to U, the relation
filter to S, evaluate (p, h') and the triangle verdict. Summary: the funnel and the breakage rates with
bootstrap CIs per mode x label and Overall.
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table

from breaknli_fast.data.labels import LABELS, SHORT
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.probes.breaknli.loop import (BreakNLIConfig, classify_premise_hypothesis, funnel, new_times,
                                             process_chunk)
from breaknli_fast.probes.breaknli.metrics import mode_label_rates
from breaknli_fast.stats import rate_cell
from breaknli_fast.probes.breaknli.report import fmt_rate, to_markdown
from breaknli_fast.probes.breaknli.verdicts import SELECTED
from breaknli_fast.probes.base import Probe, StageTimes, StudyContext


class BreakNLIProbe(Probe):
    name = "breaknli"
    summary = "generate, filter, evaluate: the logical-triangle test"
    config_class = BreakNLIConfig
    roles = ("classifier", "generator")
    group_key = "mode"

    def __init__(self, config: BreakNLIConfig | None = None):
        self.cfg = config or BreakNLIConfig()
        self.chunk_size = self.cfg.chunk_size
        self.seed = self.cfg.seed

    def identity(self) -> dict[str, Any]:
        return {"loop": self.cfg.to_dict()}

    def new_times(self) -> StageTimes:
        return new_times()

    def _pool(self, data: LoadedData) -> list[Example]:
        wanted = set().union(*(SELECTED[m] for m in self.cfg.modes))
        return [ex for ex in data.examples if ex.label in wanted]

    def groups(self, data: LoadedData) -> list[tuple[str, list[Example]]]:
        pool = self._pool(data)
        return [(mode, [ex for ex in pool if ex.label in SELECTED[mode]]) for mode in self.cfg.modes]

    def prepare(self, ctx: StudyContext, data: LoadedData, todo: bool) -> None:
        ctx.state["yhat"] = (classify_premise_hypothesis(self._pool(data), ctx.models.classifier, ctx.stages,
                                                         ctx.times, ctx.hook) if todo else {})

    def process(self, ctx: StudyContext, group: str, chunk: Sequence[Example]) -> list[dict[str, Any]]:
        return process_chunk(group, chunk, ctx.state["yhat"], ctx.models.classifier, ctx.models.generator, self.cfg,
                             ctx.times)

    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        return {"funnel": funnel(records, data, self.cfg.modes), "metrics": mode_label_rates(records),
                "loop": self.cfg.to_dict()}

    def markdown(self, report: dict[str, Any]) -> str:
        return to_markdown(report)

    def per_example(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, float]]:
        out: dict[str, dict[str, float]] = {"accuracy (p, h)": {}}
        for r in records:
            out["accuracy (p, h)"].setdefault(r["id"], float(r["yhat"] == r["gold"]))
            if r.get("status") == "evaluated":
                for k in ("inequality", "relaxed"):
                    out.setdefault(f"{r['mode']} {k}", {})[r["id"]] = float(r["verdict"][k])
        return out

    def console(self, report: dict[str, Any]) -> list[Any]:
        f = report["funnel"]
        out: list[Any] = []
        if f.get("accuracy_ph") is not None:
            out.append(f"classifier accuracy on (p, h): [bold]{f['accuracy_ph']:.2f} %[/] (n={f['accuracy_ph_n']})")
        out.append(funnel_table(report))
        if report["metrics"]:
            out.append(results_table(report))
            if report["metrics"].get("contradictive", {}).get("contradiction", {}).get("n"):
                out.append("[dim]note: contradictive ŷ=C also counts a candidate that rightly contradicts p as a break "
                           "(\"legit inequality\"); report.md explains it.[/]")
        else:
            out.append("[yellow]no example survived the filters: no breakage rate to report[/]")
        return out

    def headline(self, records: Sequence[dict[str, Any]], examples: Sequence[Example]) -> dict[str, Any]:
        """Accuracy on (p, h), then per mode the inequality / relaxed rates; counts: the funnel per mode."""
        rates: dict[str, Any] = {}
        seen: dict[str, bool] = {}
        for r in records:
            seen.setdefault(r["id"], r["yhat"] == r["gold"])
        rates["accuracy (p, h)"] = rate_cell(list(seen.values()))
        counts: dict[str, int] = {}
        for mode in self.cfg.modes:
            rs = [r for r in records if r["mode"] == mode]
            ev = [r["verdict"] for r in rs if r.get("status") == "evaluated"]
            rates[f"{mode} inequality"] = rate_cell([v["inequality"] for v in ev])
            rates[f"{mode} relaxed"] = rate_cell([v["relaxed"] for v in ev])
            counts[f"{mode} selected"] = sum(ex.label in SELECTED[mode] for ex in examples)
            counts[f"{mode} correct"] = sum(r["status"] != "incorrect" for r in rs)
            counts[f"{mode} evaluated"] = len(ev)
        return {"rates": rates, "counts": counts}


def results_table(report: dict[str, Any]) -> Table:
    """The study's breakage table, one row per (mode, ŷ) so that it fits an 80-column terminal."""
    t = Table(title="BreakNLI breakage per example", title_justify="left")
    for col, just in (("mode", "left"), ("ŷ", "left"), ("n", "right"), ("inequality %", "right"), ("relaxed %", "right")):
        t.add_column(col, justify=just, no_wrap=True)
    for mode, table in report["metrics"].items():
        first = True
        for key in list(LABELS) + ["overall"]:
            cell = table.get(key)
            if not cell or not cell.get("n"):
                continue
            rate = fmt_rate(cell)
            ineq, rel = rate.split(" / ") if " / " in rate else ("–", "–")
            t.add_row(mode if first else "", "Overall" if key == "overall" else SHORT[key], str(cell["n"]), ineq, rel,
                      style="bold" if key == "overall" else None, end_section=key == "overall")
            first = False
    return t


FUNNEL_ROWS = (("selected", "selected by gold label"), ("correct", "M(p, h) correct"),
               ("too_few_unique", "dropped: < U distinct"), ("too_few_on_target", "dropped: < S on target"),
               ("evaluated", "evaluated"))


def funnel_table(report: dict[str, Any]) -> Table:
    """The funnel, one row per stage and one column per mode (fits 80 columns)."""
    f = report["funnel"]
    modes = [m for m in report["loop"]["modes"] if m in f]
    t = Table(title="Funnel", title_justify="left")
    t.add_column("stage", no_wrap=True)
    for m in modes:
        t.add_column(m, justify="right", no_wrap=True)
    for key, label in FUNNEL_ROWS:
        t.add_row(label, *(str(f[m][key]) for m in modes))
    return t
