"""MLPerf LoadGen's scenarios (``breaknli-fast bench --scenario``) as a measurement (kind ``loadgen``; payload
:class:`~breaknli_fast.bench.loadgen.types.ScenarioReport`): the bench runs in a process of its own, as the bench
measurement runs it, with ``scenario`` required; its arguments are bench's options.

Its sections of BENCHMARKS.md (1b): the targets, each within one file, and the scenarios per engine, role and
scenario.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from breaknli_fast.bench.loadgen.types import ScenarioReport
from breaknli_fast.errors import UserError
from breaknli_fast.suite.base import Results, Section
from breaknli_fast.suite.format import (DEFAULT_INT8, base_label, dig, entry_name, f, not_measured, of_kind, table)
from breaknli_fast.suite.measurements.bench import Bench, BenchCall
from breaknli_fast.suite.result import ResultFile


class LoadGen(Bench):
    name = "loadgen"
    summary = "MLPerf LoadGen's scenarios per engine and role (bench --scenario), each run VALID or INVALID"
    kind = "loadgen"
    payload_class = ScenarioReport
    requires = ("loadgen",)
    legacy_scripts = ()  # its old files were written by scripts/bench_save.py, as the bench's were

    def config(self, values: Mapping[str, Any]) -> BenchCall:
        if not values.get("scenario"):
            raise UserError("scenario: the LoadGen scenarios to run (single-stream, multi-stream, offline, server)")
        return super().config(values)


# -- BENCHMARKS.md ----------------------------------------------------------------------------------------------

# the early-stopping estimate first: SingleStream / MultiStream's reported latency, the raw percentiles beside it
LOADGEN_COLUMNS = ("result", "early_stop_ms", "p50_ms", "p90_ms", "p99_ms", "samples_per_s", "ttft_p90_ms",
                   "tpot_p90_ms", "tokens_per_s", "of_reference_pct", "tier", "verdict", "export_s", "load_s",
                   "first_inference_s", "size_mib", "peak_rss_mib", "load_avg", "energy_mj_per_query", "avg_power_w")
MEASURED_ONLY = ("energy_mj_per_query", "avg_power_w")  # columns shown where a row has a figure, not only a reason


def loadgen_files(results: Results) -> list[ResultFile]:
    return sorted(of_kind("loadgen")(results), key=lambda r: r.stem)


def metric_text(d: Any, value: Any) -> str:
    """A figure as the metric definition saved in the file formats it (breaknli_fast.bench.loadgen.metrics)."""
    if value is None:
        return "–"
    fmt = dig(d, "fmt")
    if fmt == "tier":
        return "PASS" if value else "FAIL"
    return str(value) if fmt == "s" else f(value, fmt or ".2f")


def loadgen_title(doc: ResultFile) -> str:
    p: ScenarioReport = doc.payload
    rw = dig(p, "models", "random_weights") or {}
    roles = ", ".join(dig(p, "config", "scenarios", "roles") or [])
    what = (", ".join(f"{dig(v, 'shape')} {k}" for k, v in rw.items()) + " (random weights: speed only)") if rw \
        else "the mini models"
    return f"{what}; roles: {roles}"


def _rules_text(p: ScenarioReport) -> str:
    """The rules a scenario bench ran under, with a minimum query count other than LoadGen's where one was given
    (files written before the runner said so themselves)."""
    rules = str(dig(p, "loadgen", "rules") or "")
    q = dig(p, "config", "scenarios", "min_queries")
    if q and "quer" not in rules:
        rules += f" and a minimum of {q} queries per run (not LoadGen's official count)"
    return rules


def loadgen_table(doc: ResultFile) -> str:
    p: ScenarioReport = doc.payload
    defs = {dig(d, "key"): d for d in dig(p, "scenario_metrics") or []}
    rows = dig(p, "scenarios") or []
    keys = [k for k in LOADGEN_COLUMNS if k in defs and any(
        isinstance(dig(r, "metrics", k), (int, float)) if k in MEASURED_ONLY else dig(r, "metrics", k) is not None
        for r in rows)]
    body = [[dig(r, "engine"), dig(r, "role"), dig(r, "scenario")]
            + [metric_text(defs[k], dig(r, "metrics", k)) for k in keys] for r in rows]
    body += [[e.label, f"{e.status}: {e.reason}", ""] + [""] * len(keys)
             for e in dig(p, "engines") or [] if e.status != "ok"]
    wl = dig(p, "workload")
    library = "; ".join(x for x in (
        f"{dig(wl, 'classifier_samples')} classifier samples" if dig(wl, "classifier_samples") else "",
        f"{dig(wl, 'generator_samples')} generator / study-unit samples, K = {dig(wl, 'k')}"
        if dig(wl, "generator_samples") else "") if x)
    out = [f"{_rules_text(p)} (mlcommons-loadgen {dig(p, 'loadgen', 'version')}); {library}; "
           f"accuracy: % of `{dig(p, 'reference')}`'s score on the same samples.", "",
           table(["engine", "role", "scenario"] + [dig(defs[k], "title") for k in keys], body)]
    invalid = [r for r in rows if dig(r, "reasons")]
    if invalid:
        out += ["", "INVALID, in LoadGen's words:", ""]
        out += [f"- {r.engine} {r.role} {r.scenario}: " + "; ".join(r.reasons) for r in invalid]
    return "\n".join(out)


def _lg_row(doc: ResultFile | None, engine: str, role: str, scenario: str) -> Any:
    for r in dig(doc, "payload", "scenarios") or []:
        if base_label(dig(r, "engine")) == engine and dig(r, "role") == role and dig(r, "scenario") == scenario:
            return r
    return None


def shown_to_match_mini(results: Results) -> dict[str, bool]:
    """Engines whose classifier reached the 99 % tier in every scenario of the mini models' file (suite entry
    loadgen-mini)."""
    mini = next((r for r in loadgen_files(results) if entry_name(r) == "loadgen-mini"), None)
    out: dict[str, bool] = {}
    for r in dig(mini, "payload", "scenarios") or []:
        if dig(r, "role") == "classifier":
            lab = base_label(dig(r, "engine"))
            out[lab] = out.get(lab, True) and dig(r, "metrics", "tier_99") is True
    return out


def _numerics_label(label: Any) -> str:
    """An engine's label without the options that change neither its graph nor its numbers (``validate=``, and
    ``workers=``: how many batches run side by side, each on its share of the threads), so that a configuration
    finds its engine's accuracy tier on the mini models."""
    return ":".join(x for x in base_label(label).split(":") if not x.startswith("workers="))


def _runs_of(files: dict[str, ResultFile], name: str) -> list[ResultFile]:
    """The files of one measurement and its variants (suite entries ``name`` and ``name-<variant>``, e.g.
    ``-latency``)."""
    return [files[n] for n in sorted(files) if n == name or n.startswith(name + "-")]


def _rounds_note(*rows: Any) -> str:
    """``; median of 3 rounds, spread 4.1 % / 7.9 %`` for rows measured in rounds (``bench --repeats``), else
    empty: a figure from one run says so by saying nothing."""
    n = dig(rows[0], "metrics", "rounds")
    if not n or n < 2:
        return ""
    spreads = " / ".join(f"{dig(r, 'metrics', 'spread_pct'):.1f} %" for r in rows
                         if dig(r, "metrics", "spread_pct") is not None)
    return f"; median of {n} rounds, engines in turn, spread {spreads}"


def mini_int8_row(rows: list[list[Any]], doc: ResultFile | None, es: Callable[[Any], float | None],
                  p90: Callable[[Any], float | None]) -> None:
    """SingleStream on the mini classifier: the default batch-invariant int8 against ort fp32, in one file."""
    what = ("SingleStream p90 (LoadGen's early-stopping estimate), mini-nli: the default batch-invariant int8 ≤ 0.4× "
            "ort fp32")
    ref = _lg_row(doc, "ort:fp32", "classifier", "single-stream")
    mine = next((r for e in DEFAULT_INT8 if (r := _lg_row(doc, e, "classifier", "single-stream")) is not None
                 and es(r) is not None), None)
    if doc is None or mine is None or es(ref) is None:
        rows.append([what, "–", "not measured", "–", "–"])
        return
    r = es(mine) / es(ref)
    rows.append([what, base_label(dig(mine, "engine")),
                 f"{es(mine):.2f} ms vs ort:fp32 {es(ref):.2f} ms (raw p90 {p90(mine):.2f} vs {p90(ref):.2f} ms; "
                 f"`{doc.stem}`; tier {dig(mine, 'metrics', 'tier') or '–'}{_rounds_note(mine, ref)})", f"{r:.2f}×",
                 "met" if r <= 0.4 else "**not met**"])


def loadgen_targets(results: Results, label: str) -> str:
    files = {entry_name(r): r for r in loadgen_files(results)}
    rows: list[list[Any]] = []
    # the roberta-base SingleStream runs: the default engines, and the latency configuration (workers=1: all
    # threads on the one query); each ratio within its own file, against that file's torch fp32, of SingleStream's
    # reported figure: LoadGen's early-stopping estimate of the p90 (a row too short for it does not count)
    bases = _runs_of(files, "loadgen-roberta-base")

    def es(r: Any) -> float | None:
        v = dig(r, "metrics", "early_stop_ms")
        return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None

    def p90(r: Any) -> float | None:
        return dig(r, "metrics", "p90_ms")

    def ss_rows(engines: Callable[[str], bool]) -> list[tuple[float, Any, Any, ResultFile]]:
        out = []
        for doc in bases:
            ref = _lg_row(doc, "torch:fp32", "classifier", "single-stream")
            for r in dig(doc, "payload", "scenarios") or []:
                if (dig(r, "role") == "classifier" and dig(r, "scenario") == "single-stream" and es(r) is not None
                        and es(ref) and base_label(dig(r, "engine")) != "torch:fp32"
                        and engines(_numerics_label(dig(r, "engine")))):
                    out.append((es(r) / es(ref), r, ref, doc))
        return out

    def ratio_row(what: str, engines: Callable[[str], bool], bar: float, name: str = "–") -> None:
        cands = ss_rows(engines)
        if not cands:
            rows.append([what, name, "not measured", "–", "–"])
            return
        r, mine, ref, doc = min(cands, key=lambda t: t[0])
        engine = base_label(dig(mine, "engine"))
        tier = dig(_lg_row(files.get("loadgen-mini"), _numerics_label(engine), "classifier", "single-stream"),
                   "metrics", "tier") or "–"
        rows.append([what, engine, f"{es(mine):.2f} ms vs torch:fp32 {es(ref):.2f} ms (raw p90 {p90(mine):.2f} vs "
                     f"{p90(ref):.2f} ms; `{doc.stem}`; tier on the mini models: {tier})", f"{r:.2f}×",
                     "met" if r <= bar else "**not met**"])

    ratio_row("SingleStream p90 (LoadGen's early-stopping estimate), roberta-base classifier: ort int8 ≤ 0.33× torch "
              "fp32", lambda e: e == "ort:int8", 0.33, "ort:int8")
    matched = {e for e, ok in shown_to_match_mini(results).items() if ok and e != "torch:fp32"}
    ratio_row("SingleStream p90 (LoadGen's early-stopping estimate), roberta-base classifier: an engine shown to "
              "match (99 % tier on the mini models) ≤ 0.6× torch fp32", lambda e: e in matched, 0.6)
    # the flan-t5-small runs (the default engines, and the latency configuration): in each file, our best TPOT
    # against that file's CTranslate2 int8 (a latency target compares within one run: CTranslate2's own figure
    # varies between runs); the target is met where it holds in every file, and each file's ratio is shown
    what = "generator TPOT p90 at one prompt (SingleStream, flan-t5-small, K = 20) ≤ CTranslate2 int8's, in each run"
    per_file = []
    for doc in _runs_of(files, "loadgen-flan-t5-small"):
        ours, bar, bar_row = [], None, None
        for r in dig(doc, "payload", "scenarios") or []:
            t = dig(r, "metrics", "tpot_p90_ms")
            if dig(r, "role") != "generator" or dig(r, "scenario") != "single-stream" or t is None:
                continue
            if base_label(dig(r, "engine")) == "ct2:int8":
                if bar is None or t < bar:
                    bar, bar_row = t, r
            elif not str(dig(r, "engine")).startswith("ct2"):
                ours.append((t, r))
        if ours and bar is not None:
            x, b = min(ours, key=lambda t: t[0])
            per_file.append((x / bar, x, bar, base_label(dig(b, "engine")), doc.stem, _rounds_note(b, bar_row)))
    if not per_file:
        rows.append([what, "–", "not measured", "–", "–"])
    else:
        rows.append([what, ", ".join(sorted({e for _, _, _, e, _, _ in per_file})),
                     "; ".join(f"{x:.3f} ms vs ct2:int8 {y:.3f} ms (`{n}`{note})" for _, x, y, _, n, note in per_file),
                     " / ".join(f"{r:.2f}×" for r, *_ in per_file),
                     "met" if all(r <= 1 for r, *_ in per_file) else "**not met**"])
    mini_int8_row(rows, files.get("loadgen-mini"), es, p90)
    for name, doc in sorted(files.items()):
        rs = dig(doc, "payload", "scenarios") or []
        valid = sum(dig(r, "metrics", "result") == "VALID" for r in rs)
        rows.append([f"every result VALID: `{name}`", "all", f"{valid} of {len(rs)} VALID", "–",
                     "met" if rs and valid == len(rs) else "**not met**"])
    if not files:
        rows.append(["every result VALID", "all", "not measured", "–", "–"])
        lead = not_measured("a LoadGen scenario bench", "loadgen", label) + " The targets:"
    else:
        lead = ("Each target within one bench (ratios within the same file; a bench run in rounds says so beside "
                "its figures); files: "
                + "; ".join(f"`{d.name}` {d.date} at `{d.commit}`" for _, d in sorted(files.items())) + ".")
    return "\n".join([lead, "", table(["target", "engine", "measured", "ratio", ""], rows)])


LoadGen.sections = (
    Section("1b/targets", "The targets", "a LoadGen scenario bench", loadgen_files, 10, summary=loadgen_targets),
    Section("1b/scenarios", "Scenarios per engine, role and scenario", "a LoadGen scenario bench", loadgen_files, 20,
            render=loadgen_table, file_title=loadgen_title),
)
