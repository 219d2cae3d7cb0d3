"""BreakNLI as a probe of the study runner (docs/methodology.md).

Units: one group per mode (contradictive, then entailed), each the examples whose gold label the mode selects.
Before the chunks, M(p, h) of every selected example (cached in the run directory); per chunk, the loop's
steps (:func:`breaknli_fast.probes.breaknli.loop.process_chunk`): generate K, deduplicate to U, the relation
filter to S, evaluate (p, h') and the triangle verdict. Summary: the funnel and the breakage rates with
95 % CIs per mode x label and Overall (:mod:`breaknli_fast.probes.breaknli.metrics`).
"""

from __future__ import annotations

from typing import Any, Sequence

from rich.table import Table

from breaknli_fast.data.labels import LABELS, SHORT
from breaknli_fast.data.loaders import Example, LoadedData
from breaknli_fast.data.normalize import normalize_text
from breaknli_fast.probes.breaknli.loop import (BreakNLIConfig, classify_premise_hypothesis, funnel, new_times,
                                             process_chunk)
from breaknli_fast.probes.breaknli.metrics import mode_label_rates
from breaknli_fast.stats import rate_cell
from breaknli_fast.probes.breaknli.report import CONTRADICTIVE_C_NOTE, fmt_rate, to_markdown
from breaknli_fast.probes.breaknli.verdicts import RULES, SELECTED, TARGET
from breaknli_fast.stats import wilson_ci
from breaknli_fast.probes.base import Metric, Probe, StageTimes, StudyContext


class BreakNLIProbe(Probe):
    name = "breaknli"
    summary = "generate, filter, evaluate: the logical-triangle test"
    config_class = BreakNLIConfig
    roles = ("classifier", "generator")
    group_key = "mode"
    record_fields = ("id", "premise", "hypothesis", "gold", "yhat", "status")

    def __init__(self, config: BreakNLIConfig | None = None):
        self.cfg = self.config_of(config)  # None, a BreakNLIConfig or a dict of its fields
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
                             ctx.times, shared=ctx.shared)

    shared_role = "generator"

    def shared_identity(self) -> dict[str, Any]:
        """The generate step does not depend on M: its candidates are fixed by the generator, the prompts, K, the
        decoding settings and the seed (one per mode and example), so a study over several classifiers generates
        them once per dataset."""
        return {"k": self.cfg.k, "prompts": dict(self.cfg.prompts), "decoding": self.cfg.decoding.to_dict(),
                "seed": self.cfg.seed}

    comparison_measures = ("inequality", "relaxed")
    comparison_header = ("generation", "ŷ = M(p, h)")
    comparison_note = (
        "Inequality: at least one of the S evaluated candidates h' gets a label that contradicts the triangle's "
        "expected M(p, h'); relaxed inequality: at least one gets any label other than the expected one. Rates are "
        "per evaluated example, over the examples whose M(p, h) is the row's label (Overall: every evaluated example "
        "of the mode, pooled); intervals: Wilson 95 %. " + CONTRADICTIVE_C_NOTE)

    @classmethod
    def comparison(cls, report: dict[str, Any]) -> dict[str, Any]:
        """The publication's table cells: per mode, per ŷ label the mode selects (E, N, C order) and Overall,
        inequality % and relaxed % of the evaluated examples with their 95 % CIs; accuracy of M on (p, h)."""
        f = report.get("funnel", {})
        acc = None
        if f.get("accuracy_ph") is not None and f.get("accuracy_ph_n"):
            n = int(f["accuracy_ph_n"])
            acc = {"n": n, "rate": f["accuracy_ph"], "ci": wilson_ci(round(f["accuracy_ph"] * n / 100), n)}
        blocks = []
        for mode in report.get("loop", {}).get("modes", []):
            table = report.get("metrics", {}).get(mode, {})
            rows = []
            for key in [lab for lab in LABELS if lab in SELECTED[mode]] + ["overall"]:
                cell = table.get(key) or {}
                rows.append((ROW_NAMES[key], [_cell(cell, "inequality"), _cell(cell, "relaxed")]))
            blocks.append((MODE_NAMES.get(mode, mode), rows))
        return {"accuracy": acc, "blocks": blocks}

    @classmethod
    def example_view(cls, record: dict[str, Any], report: dict[str, Any]) -> dict[str, Any]:
        """p, h and M(p, h); the K raw candidates; the kept ones with M's relation labels, M(p, h') and its
        probabilities, and the verdict of each; why the example broke, held or was dropped."""
        return example_view(record, report.get("loop") or {})

    def summarise(self, records: Sequence[dict[str, Any]], data: LoadedData) -> dict[str, Any]:
        return {"funnel": funnel(records, data, self.cfg.modes), "metrics": mode_label_rates(records),
                "loop": self.cfg.to_dict()}

    def markdown(self, report: dict[str, Any]) -> str:
        return to_markdown(report)

    def headline_metrics(self) -> list[Metric]:
        """Accuracy on (p, h); per mode the breakage per example (over evaluated examples) and per candidate
        (non-compliant / evaluated candidates, pooled over examples)."""
        out = [Metric("accuracy (p, h)", "share", "M(p, h) = gold")]
        for mode in self.cfg.modes:
            out += [Metric(f"{mode} inequality", "share", "an evaluated example is broken (strict)"),
                    Metric(f"{mode} relaxed", "share", "an evaluated example is broken (relaxed)"),
                    Metric(f"{mode} per-candidate inequality", "ratio", "non-compliant / evaluated candidates"),
                    Metric(f"{mode} per-candidate relaxed", "ratio", "relaxed non-compliant / evaluated candidates")]
        return out

    def per_example(self, records: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {m.name: {} for m in self.headline_metrics()}
        for r in records:
            out["accuracy (p, h)"].setdefault(r["id"], float(r["yhat"] == r["gold"]))
            if r.get("status") == "evaluated":
                v, mode = r["verdict"], r["mode"]
                for k in ("inequality", "relaxed"):
                    out.setdefault(f"{mode} {k}", {})[r["id"]] = float(v[k])
                    out.setdefault(f"{mode} per-candidate {k}", {})[r["id"]] = (float(v[f"n_{k}"]),
                                                                               float(v["n_candidates"]))
        return out

    def predictions(self, record: dict[str, Any]) -> dict[str, str]:
        """M(p, h), the relations of (h, h') and (h', h) that were classified, and M(p, h') of each evaluated h'."""
        out = {"(p, h)": record["yhat"]}
        for c, rel in zip(record.get("candidates") or [], record.get("relations") or []):
            for key, lab in ((f"(h, {c})", rel[0]), (f"({c}, h)", rel[1] if len(rel) > 1 else None)):
                if lab is not None:
                    out[key] = lab
        for raw, rel in zip(record.get("top_up_generated") or [], record.get("top_up_relations") or []):
            c = normalize_text(raw)
            for key, lab in ((f"(h, {c})", rel[0] if rel else None), (f"({c}, h)", rel[1] if len(rel) > 1 else None)):
                if lab is not None:
                    out[key] = lab
        for c, lab in zip(record.get("evaluated") or [], record.get("predictions") or []):
            out[f"(p, {c})"] = lab
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
TOP_UP_ROWS = (("examples", "< S on target: topped up"), ("draws", "  top-up draws"),
               ("evaluated", "  reached S: evaluated"))  # --top-up: before the drop at < S


def funnel_table(report: dict[str, Any]) -> Table:
    """The funnel, one row per stage and one column per mode (fits 80 columns)."""
    f = report["funnel"]
    modes = [m for m in report["loop"]["modes"] if m in f]
    t = Table(title="Funnel", title_justify="left")
    t.add_column("stage", no_wrap=True)
    for m in modes:
        t.add_column(m, justify="right", no_wrap=True)
    for key, label in FUNNEL_ROWS:
        if key == "too_few_on_target" and any("top_up" in f[m] for m in modes):
            for sub, sub_label in TOP_UP_ROWS:
                t.add_row(sub_label, *(str((f[m].get("top_up") or {}).get(sub, 0)) for m in modes))
        t.add_row(label, *(str(f[m][key]) for m in modes))
    return t


MODE_NAMES = {"contradictive": "Contradictive generation", "entailed": "Entailed generation"}
ROW_NAMES = {"entailment": "Entailment", "neutral": "Neutral", "contradiction": "Contradiction", "overall": "Overall"}
VERDICTS = {"inequality": "broken: inequality", "relaxed": "broken: relaxed inequality only", "holds": "holds",
            "incorrect": "not tested: M(p, h) wrong", "too_few_unique": "dropped: fewer than U distinct",
            "too_few_on_target": "dropped: fewer than S on target"}


def _cell(cell: dict[str, Any], key: str) -> dict[str, Any]:
    """One measure of a metrics cell as a rate cell (None rate when no example was evaluated)."""
    if not cell.get("n") or cell.get(key) is None:
        return {"n": int(cell.get("n") or 0), "rate": None, "ci": None}
    return {"n": int(cell["n"]), "rate": float(cell[key]), "ci": list(cell.get(key + "_ci") or [])}


def _probs(p: dict[str, Any] | None) -> list[Any]:
    return [None if p is None or p.get(lab) is None else round(float(p[lab]), 4) for lab in LABELS]


def verdict_code(record: dict[str, Any]) -> str:
    """The example browser's verdict of a record (the keys of :data:`VERDICTS`)."""
    status = record.get("status")
    if status != "evaluated":
        return str(status)
    v = record.get("verdict") or {}
    return "inequality" if v.get("inequality") else "relaxed" if v.get("relaxed") else "holds"


def top_up_section(r: dict[str, Any], target: str | None) -> dict[str, Any]:
    """The example browser's table of an example's top-up draws: each draw, its relations, whether it passed and
    what M(p, h') said of it when it was evaluated."""
    evaluated = dict(zip(r.get("evaluated") or [], r.get("predictions") or []))
    rows, marks = [], []
    for raw, rel in zip(r.get("top_up_generated") or [], r.get("top_up_relations") or []):
        c = normalize_text(raw)
        if not rel:
            rows.append([raw, "–", "–", "not classified (empty, h, or a candidate it had)"])
            marks.append("muted")
            continue
        on = all(x == target for x in rel)
        what = (f"on target; M(p, h') = {evaluated[c]}" if c in evaluated else "on target") if on else "off target"
        rows.append([c, rel[0] or "–", (rel[1] if len(rel) > 1 else None) or "–", what])
        marks.append(None if on else "muted")
    return {"title": f"the {len(rows)} top-up draws (one sampled candidate each, after the kept ones)", "kind": "table",
            "columns": ["draw", "M(h, h')", "M(h', h)", "result"], "rows": rows, "marks": marks}


def example_view(r: dict[str, Any], loop: dict[str, Any]) -> dict[str, Any]:
    mode, yhat, gold = r.get("mode"), r.get("yhat"), r.get("gold")
    code = verdict_code(r)
    k, u, s = loop.get("k", "K"), loop.get("u", "U"), loop.get("s", "S")
    target = TARGET.get(mode)
    sections: list[dict[str, Any]] = [
        {"title": "M(p, h)", "kind": "table", "columns": ["pair", "M", "P(E)", "P(N)", "P(C)", "gold"],
         "rows": [["(p, h)", yhat, *_probs(r.get("ph_probs")), gold]], "marks": ["ok" if yhat == gold else "bad"]}]
    if r.get("generated"):
        sections.append({"title": f"the K = {len(r['generated'])} raw candidates, in generation order",
                         "kind": "list", "items": list(r["generated"])})
    kept = r.get("candidates") or []
    if kept:
        rels = r.get("relations") or [[] for _ in kept]
        evaluated = {c: i for i, c in enumerate(r.get("evaluated") or [])}
        preds, probs = r.get("predictions") or [], r.get("eval_probs") or []
        rule = RULES.get((mode, yhat))
        rows, marks = [], []
        for c, rel in zip(kept, rels):
            fw = rel[0] if len(rel) > 0 else None
            bw = rel[1] if len(rel) > 1 else None
            on = all(x == target for x in rel) if rel and None not in rel else None
            i = evaluated.get(c)
            if i is not None and i < len(preds):
                pred = preds[i]
                if rule is not None and pred in rule.inequality:
                    mark, what = "bad", "inequality"
                elif rule is not None and pred in rule.relaxed:
                    mark, what = "warn", "relaxed inequality"
                else:
                    mark, what = "ok", "as expected"
                rows.append([c, fw or "–", bw or "–", "yes", pred, *_probs(probs[i] if i < len(probs) else None), what])
            else:
                mark = "muted"
                rows.append([c, fw or "–", bw or "–", "–" if on is None else ("yes" if on else "no"), "–", None, None,
                             None, "not evaluated" + (" (S reached)" if on else "")])
            marks.append(mark)
        title = (f"the {len(kept)} distinct candidates (fewer than U = {u})" if r.get("status") == "too_few_unique"
                 else f"the U = {len(kept)} kept candidates (first distinct, generation order): the relation filter "
                      f"asks M(h, h') = M(h', h) = {target}; the first S that pass are evaluated on (p, h')")
        sections.append({"title": title, "kind": "table",
                         "columns": ["h'", "M(h, h')", "M(h', h)", "on target", "M(p, h')", "P(E)", "P(N)", "P(C)",
                                     "verdict"], "rows": rows, "marks": marks})
    if r.get("top_up_generated"):
        sections.append(top_up_section(r, target))
    if code == "incorrect":
        why = f"M(p, h) = {yhat}, gold {gold}: only correctly classified examples are tested."
    elif code == "too_few_unique":
        why = (f"{r.get('n_distinct', len(kept))} distinct candidates among the K = {k} (U = {u} needed after "
               f"normalisation and removing copies of h): dropped.")
    elif code == "too_few_on_target":
        passing = sum(1 for rel in (r.get("relations") or []) if rel and all(x == target for x in rel))
        why = (f"{passing} of the {len(kept)} kept candidates have M(h, h') = {target}"
               + (" both ways" if loop.get("bidirectional", True) else "") + f" (S = {s} needed)"
               + (f"; {r['top_up_draws']} top-up draws did not make up the rest" if r.get("top_up_draws") else "")
               + ": dropped.")
    elif code in ("inequality", "relaxed", "holds"):
        rule = RULES.get((mode, yhat))
        v = r.get("verdict") or {}
        expected = rule.expected if rule else "?"
        rel_word = "contradicts" if mode == "contradictive" else "is entailed by"
        head = f"M(p, h) = {yhat} and h' {rel_word} h, so M(p, h') should be {expected}"
        if code == "holds":
            why = f"{head}: all {v.get('n_candidates', '?')} evaluated candidates got {expected}; the triangle holds."
        elif code == "inequality":
            why = (f"{head}; {v.get('n_inequality')} of {v.get('n_candidates')} got "
                   f"{' or '.join(sorted(rule.inequality)) if rule else '?'} (inequality: the triangle breaks).")
        else:
            why = (f"{head}; none got {' or '.join(sorted(rule.inequality)) if rule else '?'}, but "
                   f"{v.get('n_relaxed')} of {v.get('n_candidates')} got another label than {expected} "
                   f"(relaxed inequality only).")
    else:
        why = ""
    return {"group": mode, "yhat": yhat, "gold": gold, "verdict": code, "verdict_label": VERDICTS.get(code, code),
            "premise": r.get("premise", ""), "hypothesis": r.get("hypothesis", ""), "why": why,
            "sections": sections}
