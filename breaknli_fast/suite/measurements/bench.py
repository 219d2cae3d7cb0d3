"""``breaknli-fast bench`` as a measurement of the suite (kind ``bench``; payload
:class:`~breaknli_fast.bench.types.BenchReport`): the bench runs as a user runs it, a process of its own, into the
measurement's scratch folder, and its ``bench.json`` becomes the payload. Its arguments are bench's own options and
the options of the probe it runs (``probe``), as on the command line (``--max-new-tokens`` is ``max_new_tokens``).

Its sections of BENCHMARKS.md: the mini models' speed per stage and parity (1, 2), the random-weight shapes (1),
batch invariance per engine (2), the probes on the engines with the parity table per probe x engine (2b; the
README's parity table too) and the memory of each engine (3).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from typing import Any, Mapping

from breaknli_fast.bench.options import BenchOptions
from breaknli_fast.bench.types import BenchReport, EngineResult, Parity
from breaknli_fast.errors import UserError
from breaknli_fast.suite.args import Arg, argv_of, arguments, build_config
from breaknli_fast.suite.base import Measurement, Results, Section
from breaknli_fast.suite.format import (MODE_SHORT, STAGES, blank, dig, f, feeds, model_label, of_kind, table)
from breaknli_fast.suite.result import ResultFile

# bench's options that are no argument of the measurement: where its files go, and its other modes
NOT_ARGUMENTS = ("out", "no_plot", "compare", "suite", "update_results", "suite_file", "smoke", "probe_config")


@dataclass
class BenchCall:
    """A bench as a measurement runs it: bench's options, the probe's config, and the arguments as given (what the
    bench's command line and the result file record)."""

    options: BenchOptions
    probe: Any = None
    given: dict[str, Any] = field(default_factory=dict)

    @property
    def engines(self) -> str:
        return self.options.engines


def bench_arguments(values: Mapping[str, Any] | None = None) -> list[Arg]:
    """bench's options, then those of the probe ``values`` names (default breaknli)."""
    from breaknli_fast.probes import probe_class

    probe = str((values or {}).get("probe") or "breaknli")
    own = arguments(BenchOptions, exclude=NOT_ARGUMENTS)
    return own + arguments(probe_class(probe).config_class)


def run_bench(m: Measurement, config: BenchCall, recorder: Any) -> Any:
    """Run ``breaknli-fast bench`` with ``config``'s arguments into ``recorder.work`` and read its bench.json as
    ``m``'s payload (a bench that exits 1 under --strict with its bench.json written is kept, and the exit code
    recorded)."""
    from breaknli_fast.bench.types import from_json
    from breaknli_fast.suite.provenance import env_settings

    words = argv_of(m.arguments(config.given), config.given)
    out = recorder.work / "bench"
    cmd = [sys.executable, "-m", "breaknli_fast.cli", "bench", *words, "--out", str(out), "--no-plot"]
    proc = subprocess.run(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if not (out / "bench.json").exists():
        raise UserError(f"breaknli-fast bench failed (exit {proc.returncode}): {shlex.join(cmd)}")
    data = json.loads((out / "bench.json").read_text())
    data["command"] = " ".join([f"{k}={v}" for k, v in env_settings().items()]
                               + [shlex.join(["breaknli-fast", "bench", *words])])
    recorder.exit_code = proc.returncode
    return from_json(m.payload_class, data)


class Bench(Measurement):
    name = "bench"
    summary = "breaknli-fast bench: every engine's speed and parity with torch:fp32 on one probe"
    kind = "bench"
    config_class = BenchOptions
    payload_class = BenchReport
    legacy_scripts = ("bench_save.py",)

    def arguments(self, values: Mapping[str, Any] | None = None) -> list[Arg]:
        return bench_arguments(values)

    def config(self, values: Mapping[str, Any]) -> BenchCall:
        from breaknli_fast.probes import probe_class

        if values.get("scenario") is not None and self.kind == "bench":
            raise UserError("scenario: LoadGen's scenarios are the loadgen measurement's")
        own = arguments(BenchOptions, exclude=NOT_ARGUMENTS)
        names = {a.name for a in own}
        options = build_config(BenchOptions, own, {k: v for k, v in values.items() if k in names})
        cls = probe_class(options.probe).config_class
        probe_args = arguments(cls)
        probe = build_config(cls, probe_args, {k: v for k, v in values.items() if k not in names}) if cls else None
        return BenchCall(options, probe, dict(values))

    def run(self, config: BenchCall, recorder: Any) -> BenchReport:
        return run_bench(self, config, recorder)

    def legacy_argv(self, values: Mapping[str, Any], result: str) -> list[str]:
        return ["scripts/bench_save.py", "--result", result, "--", *argv_of(self.arguments(values), values)]


# -- selections -------------------------------------------------------------------------------------------------

def is_random(r: ResultFile) -> bool:
    return bool(dig(r, "payload", "models", "random_weights"))


def probe_of(r: ResultFile) -> str:
    return dig(r, "payload", "probe") or "breaknli"


bench_mini = of_kind("bench", lambda r: not is_random(r) and probe_of(r) == "breaknli" and feeds("1/bench-mini")(r))
bench_random = of_kind("bench", lambda r: is_random(r) and feeds("1/random-weights")(r))


def probe_bench(key: str, name: str, pred: Any = None) -> Any:
    """bench result files of one probe whose suite entry feeds the probe subsection ``key``."""
    return of_kind("bench", lambda r: feeds(key)(r) and probe_of(r) == name and (pred is None or pred(r)))


# the bench schemas whose parity statistics the table shows: not the first one's percentile bootstraps (OLD_BENCH_SCHEMA)
PARITY_SCHEMAS = ("breaknli-fast-bench/2", "breaknli-fast-bench/3")


def on_evaluation_slice(r: ResultFile) -> bool:
    """A parity measurement of the mini models on the evaluation slice (``sample``: all of it, or its first pairs)."""
    return (dig(r, "payload", "schema") in PARITY_SCHEMAS and not is_random(r)
            and dig(r, "payload", "data", "name") == "sample")


PROBE_ORDER = ("breaknli", "accuracy", "permutation", "merge")


def parity_files(results: Results) -> list[ResultFile]:
    """The files of the parity table per probe x engine, measured on the evaluation slice: those whose suite entry
    feeds it (2b/parity: a probe's file, one engine's own file such as the cudagraph engine's, and BreakNLI on all
    2,724 pairs); per probe the file of the most examples first."""
    chosen = [r for r in results if r.kind == "bench" and on_evaluation_slice(r) and feeds("2b/parity")(r)]
    return sorted(chosen, key=lambda r: (PROBE_ORDER.index(probe_of(r)) if probe_of(r) in PROBE_ORDER else 99,
                                         -(dig(r, "payload", "data", "examples") or 0), r.stem))


# -- one engine -------------------------------------------------------------------------------------------------

def engine_name(e: EngineResult) -> str:
    """An engine's label with each role another engine ran said (``ct2:int8 (classifier on ort)``), as the bench
    shows it."""
    return e.shown_label


def shown_to_match(e: EngineResult) -> str:
    """Whether the engine of a saved bench was shown to match its reference: the bench's own sentence."""
    from breaknli_fast.bench.recommend import shown_to_match as shown

    return shown(e)


def confirmed_cells(e: EngineResult) -> list[str]:
    """bench.parity.confirmed_differences of a saved engine (any bench schema)."""
    from breaknli_fast.bench.parity import confirmed_differences

    return confirmed_differences(e.parity if e.parity is not None else Parity())


def confirmed(e: EngineResult) -> int:
    """The different cells that stay different with all the engine's cells judged together."""
    return len(confirmed_cells(e))


def shown(e: EngineResult) -> str:
    """yes / no / not shown, as bench.md's "shown to match" says (short): "no" only where a cell stays different
    with all the engine's cells judged together (bench.parity.confirmed_differences)."""
    v = dig(e, "parity", "verdicts")
    if v is not None and v.different:
        return "no" if confirmed_cells(e) else "not shown"
    return "not shown" if blank(v) or v.inconclusive else "yes"


def _status(e: EngineResult) -> str:
    return f"{e.status}: {e.reason}"


def stage_speedup(ref: EngineResult | None, e: EngineResult, k: str) -> str:
    a, b = dig(ref, "speed", "stages", k), dig(e, "speed", "stages", k)
    if a is None or b is None or not a.items or not b.items:
        return "–"
    return f"{a.median_s / b.median_s:.2f}× / {a.min_s / b.min_s:.2f}×"


def fmt_diff(cell: Any) -> str:
    if cell is None or cell.diff is None:
        return "–"
    ci = cell.ci or [None, None]
    return f"{cell.diff:+.2f} [{f(ci[0], '+.2f')}, {f(ci[1], '+.2f')}]"


def overall_diffs(e: EngineResult, block: str) -> str:
    parts = []
    for mode, tbl in (dig(e, "parity", block) or {}).items():
        if isinstance(tbl, dict) and tbl.get("overall") is not None:
            parts.append(f"{MODE_SHORT.get(mode, mode)} {fmt_diff(tbl['overall'].inequality)}")
    return "; ".join(parts) or "–"


def check_text(e: EngineResult) -> str:
    if e.status != "ok":
        return _status(e)
    if e.reference:
        return "reference"
    c = e.checks
    if c is None or not c.applied:
        return "n/a"
    return "pass" if c.passed else "FAIL: " + "; ".join(c.failures or [])


def _verdict_counts(e: EngineResult) -> str:
    v = dig(e, "parity", "verdicts")
    return "–" if blank(v) else (f"{dig(v, 'equivalent', default=0)} / {dig(v, 'different', default=0)} / "
                                 f"{dig(v, 'inconclusive', default=0)}")


def _load(e: EngineResult) -> Any:
    return dig(e, "load_average_start", 0)


# -- the files --------------------------------------------------------------------------------------------------

def workload_text(p: BenchReport) -> str:
    wl = dig(p, "workload")
    loop = dig(p, "config", "loop") or dig(p, "config", "probe_config") or {}  # schema /1: loop
    dec = loop.get("decoding") or {}
    return (f"Dataset `{dig(p, 'data', 'name')}` ({dig(p, 'data', 'examples')} examples); generator "
            f"`{model_label(dig(p, 'models', 'generator'))}`, classifier `{model_label(dig(p, 'models', 'classifier'))}`; "
            "fixed workload "
            f"{dig(wl, 'classify_ph_pairs')} (p, h) pairs, {dig(wl, 'generate_prompts')} prompts × K={loop.get('k')} "
            f"(max_new_tokens {dec.get('max_new_tokens')}, min_new_tokens {dec.get('min_new_tokens')}), "
            f"{dig(wl, 'relation_pairs')} relation pairs, {dig(wl, 'evaluate_pairs')} (p, h') pairs. "
            f"Reference `{dig(p, 'reference')}`.")


def notes_text(p: BenchReport) -> str:
    return "\n".join(f"> Note (from the bench): {n}" for n in dig(p, "notes", default=[]))


def random_title(doc: ResultFile) -> str:
    return random_shapes(doc.payload)


def random_shapes(p: BenchReport) -> str:
    rw = dig(p, "models", "random_weights") or {}
    parts = [f"{dig(v, 'shape')} {role} ({f((dig(v, 'parameters') or 0) / 1e6, '.1f')} M parameters)"
             for role, v in sorted(rw.items())]
    return " + ".join(parts)


def bench_speed(doc: ResultFile) -> str:
    p: BenchReport = doc.payload
    engines = dig(p, "engines", default=[])
    ref = engines[0] if engines else None
    rows = []
    for e in engines:
        if e.status != "ok":
            rows.append([e.label] + ["–"] * 9 + [_status(e)])
            continue
        sp, sm = dig(e, "speed", "speedup"), dig(e, "speed", "summary")
        rows.append([engine_name(e), f"{f(dig(sp, 'workload'), '.2f', '×')} / {f(dig(sp, 'workload_best'), '.2f', '×')}",
                     f(dig(sp, "end_to_end"), ".2f", "×")]
                    + [stage_speedup(ref, e, k) for k in STAGES]
                    + [f(dig(sm, "classifier_pairs_per_s"), ".1f"), f(dig(sm, "generated_tokens_per_s"), ".1f"),
                       f(dig(sm, "examples_per_s"), ".2f"), f(_load(e), ".2f")])
    header = ["engine", "speed-up, workload (median / best)", "speed-up, end to end"] + \
             [f"{k} (median / best)" for k in STAGES] + ["clf pairs/s", "gen tokens/s", "examples/s (e2e)",
                                                        "load avg at start"]
    out = [workload_text(p), "", table(header, rows)]
    peaks = bench_rooflines(p)
    if peaks:
        out += ["", peaks]
    if dig(p, "notes"):
        out += ["", notes_text(p)]
    return "\n".join(out)


def _giga(x: Any, spec: str = ".1f") -> str:
    return f(x / 1e9 if isinstance(x, (int, float)) else None, spec)


def bench_rooflines(p: BenchReport) -> str:
    """Each stage's share of the machine's ceilings (bench files that hold them; an earlier file renders nothing
    here): operations per iteration, padding, attained rate, what binds, the ceiling and the share of it."""
    rows = []
    for e in dig(p, "engines", default=[]):
        for k in STAGES:
            r = dig(e, "speed", "stages", k, "roofline")
            if blank(r):
                continue
            if not dig(r, "parts"):
                rows.append([e.label, k, dig(r, "precision")] + ["–"] * 5 + [dig(r, "note") or "–"])
                continue
            rows.append([e.label, k, dig(r, "precision"), _giga(dig(r, "flops"), ".2f"),
                         f(dig(r, "padding_pct"), ".1f"), _giga(dig(r, "attained_ops_per_s")),
                         dig(r, "binding") or "–", _giga(dig(r, "ceiling_ops_per_s")),
                         f(dig(r, "pct_of_ceiling"), ".0f", " %") if dig(r, "pct_of_ceiling") is not None
                         else (dig(r, "note") or "–")])
            b = dig(r, "largest_bucket")
            if not blank(b):
                rows.append(["", f"↳ largest bucket ({dig(b, 'width')} tokens x {f(dig(b, 'rows'), '.1f')} rows)", "",
                             _giga(dig(b, "flops"), ".2f"), "–", _giga(dig(b, "attained_ops_per_s")),
                             dig(b, "binding") or "–", _giga(dig(b, "compute_ops_per_s")),
                             f(dig(b, "pct_of_ceiling"), ".0f", " %") if dig(b, "pct_of_ceiling") is not None
                             else "no ceiling"])
    if not rows:
        return ""
    c = dig(p, "ceilings")
    bw = dig(c, "bandwidth")
    if dig(c, "source") == "datasheet":
        how = "the GPU's datasheet peaks"
    else:
        won = sorted({dig(g, "kernel") for g in dig(c, "gemm") or [] if dig(g, "kernel")})
        how = (f"measured on this CPU at {dig(c, 'threads')} threads ({dig(c, 'mode')} mode): memory "
               f"{_giga(dig(bw, 'bytes_per_s'))} GB/s, products by " + (", ".join(won) or "–"))
    return "\n".join([f"Each stage against the machine's ceilings ({how}; G op: 10⁹ operations per iteration, "
                      "docs/benchmarks.md):", "",
                      table(["engine", "stage", "precision", "G op", "padding %", "G op/s", "binds", "ceiling G op/s",
                             "% of ceiling"], rows)])


def bench_parity(doc: ResultFile) -> str:
    p: BenchReport = doc.payload
    rows = []
    for e in dig(p, "engines", default=[]):
        rows.append([e.label,
                     f(dig(e, "parity", "classifier", "all", "label_agreement_pct"), ".2f"),
                     f(dig(e, "parity", "classifier", "all", "max_abs_logit_diff"), ".2e"),
                     f(dig(e, "parity", "generator", "greedy", "token_agreement_pct"), ".1f"),
                     overall_diffs(e, "fixed_triples"), overall_diffs(e, "end_to_end"), _verdict_counts(e),
                     "reference" if e.reference else (shown_to_match(e) if e.status == "ok" else e.status),
                     check_text(e)])
    header = ["engine", "label agreement %", "max abs Δ logit", "greedy token agreement %",
              "Δ Overall inequality pp, fixed triples [95 % CI]", "Δ Overall inequality pp, end to end (paired) [95 % CI]",
              "cells equivalent / different / inconclusive", "shown to match the reference?", "check"]
    trip = ", ".join(f"{m} {n}" for m, n in (dig(p, "workload", "fixed_triples") or {}).items())
    return "\n".join([workload_text(p) + f" Fixed triples: {trip or '–'}; greedy check on "
                      f"{dig(p, 'workload', 'greedy_prompts')} "
                      f"prompts. Every cell (mode × label × inequality / relaxed, fixed triples and end to end) gets a "
                      f"verdict against δ = {dig(p, 'tolerance_pp')} pp: equivalent when its 95 % CI lies inside ±δ, "
                      "different when |Δ| > δ and the CI excludes 0, inconclusive otherwise. An engine \"generator only\" "
                      "or \"classifier only\" runs just that model at the reduced precision (the other at fp32).",
                      "", table(header, rows)])


def batch_invariance(doc: ResultFile) -> str:
    """Per engine: a pair's logits alone, in the reversed call and in calls of 7 pairs against one call."""
    p: BenchReport = doc.payload
    rows = []

    def cell(x: Any) -> str:
        return "0" if x == 0 else f(x, ".2e")

    for e in dig(p, "engines", default=[]):
        inv = e.batch_invariance
        if e.status != "ok" or blank(inv) or not dig(inv, "pairs"):
            rows.append([e.label, "–", "–", "–", "–", "–", f"{e.status}: {e.reason or 'not measured'}"])
            continue
        diffs = (dig(inv, "max_abs_logit_diff"), dig(inv, "reversed_max_abs_logit_diff"),
                 dig(inv, "chunked_max_abs_logit_diff"))
        equal = all(d == 0 for d in diffs) if all(d is not None for d in diffs) else None
        blas = dig(e, "info", "classifier", "details", "blas") or {}
        note = f"MKL {blas.get('cbwr')}" if blas.get("blas") == "mkl" else ""
        rows.append([e.label, inv.pairs, f"{dig(inv, 'labels_changed')}", *[cell(d) for d in diffs],
                     ("**yes**" if equal else "no") + (f" ({note})" if note else "") if equal is not None else "–"])
    m = doc.machine
    flags = next((", ".join(fl) for e in dig(p, "engines", default=[])
                  if (fl := dig(e, "info", "classifier", "details", "cpu", "flags"))), "–")
    return "\n".join([
        f"{dig(p, 'data', 'examples')} held-out pairs of `{dig(p, 'data', 'name')}` on "
        f"`{dig(p, 'models', 'classifier')}`, "
        f"classified in one call (the engine's own batches), each alone, in the reversed call and in calls of 7 pairs; "
        f"max |Δ logit| of each arrangement against the one call (0: equal to the bit). Machine: {dig(m, 'cpu')}, "
        f"{dig(m, 'cores')} cores; CPU flags: {flags}.", "",
        table(["engine", "pairs", "labels changed alone", "max |Δ| alone", "max |Δ| reversed", "max |Δ| in 7s",
               "bit-equal"], rows)])


def bench_memory(doc: ResultFile) -> str:
    p: BenchReport = doc.payload
    rows = []
    for e in dig(p, "engines", default=[]):
        m = e.memory
        if e.status != "ok":
            rows.append([e.label, "–", "–", "–", "–", _status(e)])
            continue
        rows.append([engine_name(e), f(dig(m, "rss_before_load_mib"), ".0f"), f(dig(m, "peak_rss_load_mib"), ".0f"),
                     f(dig(m, "rss_after_load_mib"), ".0f"), f(dig(m, "peak_rss_mib"), ".0f"),
                     "all engines loaded together" if dig(m, "shared") else ""])
    title = random_title(doc) if is_random(doc) else \
        f"{model_label(dig(p, 'models', 'generator'))} + {model_label(dig(p, 'models', 'classifier'))}"
    return "\n".join([f"Models: {title}; {dig(p, 'data', 'examples')} examples.", "",
                      table(["engine", "RSS before load MiB", "peak while loading MiB", "RSS after load MiB",
                             "peak while running MiB", "note"], rows)])


def bench_title(doc: ResultFile) -> str:
    p: BenchReport = doc.payload
    return f"{dig(p, 'data', 'examples')} examples of `{dig(p, 'data', 'name')}`"


def probe_title(doc: ResultFile) -> str:
    p: BenchReport = doc.payload
    pc = dig(p, "config", "probe_config") or {}
    settings = ", ".join(f"{k} {v}" for k, v in pc.items() if k in ("q", "scheme", "seeds", "per_pos", "relation_filter", "k"))
    return (f"{probe_of(doc)} on {dig(p, 'data', 'examples')} examples of `{dig(p, 'data', 'name')}`"
            + (f" ({settings})" if settings else "") + (f", classifier {random_title(doc)}" if is_random(doc) else ""))


def verdict_cell(d: Any) -> str:
    if blank(d) or d.diff is None:
        return "–"
    lo, hi = d.ci
    extra = " (too few examples to judge)" if d.too_small and d.verdict != "different" else (
        f", ~{d.n_needed} needed" if d.n_needed else "")
    return f"{d.diff:+.2f} [{lo:+.2f}, {hi:+.2f}] n={dig(d, 'n')}: {d.verdict}{extra}"


def batching(e: EngineResult) -> str:
    inv = e.batch_invariance
    return f"{dig(inv, 'labels_changed')} of {inv.pairs}" if dig(inv, "pairs") else "–"


def probe_speed(doc: ResultFile) -> str:
    p: BenchReport = doc.payload
    rows = []
    for e in dig(p, "engines", default=[]):
        if e.status != "ok":
            rows.append([e.label, "–", "–", "–", "–", "–", "–", _status(e)])
            continue
        x = dig(e, "speed", "end_to_end")
        rows.append([engine_name(e), f(dig(x, "median_wall_s"), ".1f"),
                     f(dig(e, "speed", "speedup", "end_to_end"), ".2f", "×"),
                     dig(x, "run", "classifier_pairs"), f(dig(x, "run", "classifier_pairs_per_s"), ".0f"),
                     dig(x, "run", "stage_pairs", "relation") if probe_of(doc) == "breaknli" else "–",
                     f(_load(e), ".2f"), ""])
    header = ["engine", "loop s (median)", "speed-up vs torch:fp32", "classifier pairs", "pairs/s", "relation pairs",
              "load avg at start", "note"]
    note = " Random weights: speed only, parity not meaningful." if is_random(doc) else ""
    return "\n".join([f"The same probe, data and seed on each engine, in one process (`breaknli-fast bench --probe "
                      f"{probe_of(doc)}`).{note}", "", table(header, rows)])


def probe_parity(doc: ResultFile) -> str:
    """Each headline metric per engine, its paired difference with the reference, record agreement, batching."""
    p: BenchReport = doc.payload
    metrics = [m["name"] for m in dig(p, "headline_metrics") or []]
    ok = [e for e in dig(p, "engines", default=[]) if e.status == "ok"]
    rows = []
    for e in ok:
        vals = dig(e, "speed", "end_to_end", "headline") or {}
        rows.append([engine_name(e)] + [f"{f(dig(vals, m, 'rate'))} n={dig(vals, m, 'n')}" for m in metrics]
                    + [f(dig(e, "parity", "headline", "records", "identical_pct"), ".2f"), batching(e)])
    out = [f"Each metric over each engine's own examples (%); records identical: per-record prediction agreement "
           f"with `{dig(p, 'reference')}`; batching: labels that change between batch size 1 and the engine's batches.",
           "", table(["engine"] + metrics + ["records identical %", "labels changed by batching"], rows), "",
           f"Paired differences (pp) against `{dig(p, 'reference')}` over the examples both runs scored, with 95 % "
           f"intervals (Tango's score interval for a yes/no per example, a floored Student-t interval for fractions and "
           f"pooled ratios), verdict against δ = {dig(p, 'tolerance_pp')} pp:", ""]
    drows = [[engine_name(e)] + [verdict_cell(dig(e, "parity", "headline", "metrics", m)) for m in metrics]
             + [shown_to_match(e)] for e in ok[1:]]
    out.append(table(["engine"] + metrics + ["shown to match?"], drows))
    for e in ok[1:]:
        by = dig(e, "parity", "headline", "by") or {}
        crow = [[g.group, g.examples] + [verdict_cell(g.metrics.get(m)) for m in metrics]
                for spec in by.values() for g in dig(spec, "groups", default=[])
                if g.value == "1" or spec.kind != "category"]  # a category: the examples where it is 1
        if crow:
            out += ["", f"`{e.label}` per group of `{'`, `'.join(by)}` (informative, not part of the checks):", "",
                    table(["group", "examples"] + metrics, crow)]
    return "\n".join(out)


def relation_filter(doc: ResultFile) -> str | None:
    return dig(doc, "payload", "config", "probe_config", "relation_filter")


def relation_filter_lead(results: Results, label: str) -> str:
    """The lazy and the full relation filter side by side, per engine, from a pair of BreakNLI benches of the same
    data and examples (one file each): the relation pairs each classified, the loop time each took (two runs, with
    their load), and whether every headline figure is the same (the lazy filter's verdicts must be the full one's)."""
    files = probe_bench("2b/relation-filter", "breaknli")(results)
    key = lambda d: (dig(d, "payload", "data", "name"), dig(d, "payload", "data", "examples"))  # noqa: E731
    lazy = {key(d): d for d in files if relation_filter(d) == "lazy"}
    pairs = [(lazy[key(d)], d) for d in files if relation_filter(d) == "full" and key(d) in lazy]
    if not pairs:
        return ("Not measured: no pair of BreakNLI benches in `" + label + "` runs the same examples with "
                "`--relation-filter lazy` and `full` (`breaknli-fast suite run probe-breaknli-lazy "
                "probe-breaknli-full` measures it).")
    out = []
    for lz, fl in pairs:
        by = {e.label: e for e in dig(fl, "payload", "engines", default=[]) if e.status == "ok"}
        rows = []
        for e in dig(lz, "payload", "engines", default=[]):
            g = by.get(e.label)
            if e.status != "ok" or g is None:
                continue
            rl = dig(e, "speed", "end_to_end", "run", "stage_pairs", "relation")
            rf = dig(g, "speed", "end_to_end", "run", "stage_pairs", "relation")
            hl = dig(e, "speed", "end_to_end", "headline") or {}
            hf = dig(g, "speed", "end_to_end", "headline") or {}
            same = {m: (dig(hl, m, "rate"), dig(hl, m, "n")) == (dig(hf, m, "rate"), dig(hf, m, "n"))
                    for m in sorted(set(hl) | set(hf))}
            rows.append([engine_name(e), rl, rf, f(rl / rf if rl and rf else None, ".2f"),
                         f(dig(e, "speed", "end_to_end", "median_wall_s"), ".1f"),
                         f(dig(g, "speed", "end_to_end", "median_wall_s"), ".1f"),
                         f"{_load(e):.2f} / {_load(g):.2f}" if _load(e) is not None and _load(g) is not None else "–",
                         ("yes" if all(same.values()) else "no: " + ", ".join(m for m, ok in same.items() if not ok))
                         if same else "–"])
        out += [f"`{lz.stem}.json` (lazy) and `{fl.stem}.json` (full), {key(lz)[1]} examples of `{key(lz)[0]}`; "
                "the two files are two runs, so their loop times compare across runs (load average at each "
                "engine's start beside them); the relation pairs are a count of work and do not vary:", "",
                table(["engine", "relation pairs, lazy", "relation pairs, full", "lazy / full", "loop s, lazy",
                       "loop s, full", "load avg at start, lazy / full", "every headline figure the same"], rows)]
    return "\n".join(out)


def parity_table(results: Results, label: str = "benchmarks/results") -> str:
    """The parity of every probe x engine on the evaluation slice, one row each (README and BENCHMARKS.md)."""
    from breaknli_fast.suite.format import not_measured

    files = parity_files(results)
    if not files:
        return not_measured("a parity measurement of a probe on the evaluation slice", "bench", label)
    rows = []
    for doc in files:
        p: BenchReport = doc.payload
        n = dig(p, "data", "examples")
        for e in dig(p, "engines", default=[]):
            if e.reference:
                continue
            if e.status != "ok":
                rows.append([probe_of(doc), e.label, n, "–", "–", "–", f"did not run ({e.status})",
                             "–", "–", f"{label}/{doc.stem}.json"])
                continue
            ms = dig(e, "parity", "headline", "metrics") or {}
            worst_name = max((k for k, m in ms.items() if m.diff is not None), key=lambda k: abs(ms[k].diff),
                             default=None)
            v = dig(e, "parity", "verdicts")
            counts = (f"{dig(v, 'equivalent', default=0)} / {dig(v, 'different', default=0)} ({confirmed(e)}) / "
                      f"{dig(v, 'inconclusive', default=0)} ({dig(v, 'too_small', default=0)})")
            rows.append([probe_of(doc), engine_name(e), n, f(dig(e, "speed", "speedup", "end_to_end"), ".2f", "×"),
                         f(dig(e, "parity", "headline", "records", "identical_pct"), ".2f"), batching(e), shown(e),
                         counts, f"{worst_name}: {verdict_cell(ms[worst_name])}" if worst_name else "–",
                         f"{label}/{doc.stem}.json"])
    return table(["probe", "engine", "examples", "speed-up (e2e)", "records identical %", "labels changed by batching",
                  "shown to match torch:fp32?",
                  "cells equivalent / different (still different judged together) / inconclusive (too few to judge)",
                  "largest headline Δ pp [95 % CI]", "result file"], rows)


def parity_lead(results: Results, label: str) -> str:
    return "\n".join(["The verdicts of every engine, one row each (details per file below).", "",
                      parity_table(results, label)])


def trained_engine(results: Results, probe: str, labels: list[str]) -> EngineResult | None:
    """The first engine of ``labels`` (in that order) that a trained-model file of ``probe`` measured (its file of
    the most examples first: :func:`parity_files`)."""
    for lab in labels:
        for doc in parity_files(results):
            if probe_of(doc) != probe:
                continue
            e = next((e for e in dig(doc, "payload", "engines") or [] if e.label == lab and e.status == "ok"), None)
            if e is not None:
                return e
    return None


Bench.sections = (
    Section("1/bench-mini", "`breaknli-fast bench` on the mini models: speed-ups per stage", "a bench of the mini models",
            bench_mini, 40, render=bench_speed, file_title=bench_title),
    Section("1/random-weights", "Real shapes with random weights", "a bench with --random-weights", bench_random, 50,
            render=bench_speed, file_title=random_title),
    Section("2/bench-mini", "`breaknli-fast bench` on the mini models: labels, logits, breakage",
            "a bench of the mini models", bench_mini, 20, render=bench_parity, file_title=bench_title),
    Section("2/batch-invariance", "A pair's answer and its batch, every engine and precision on the CPU",
            "a batch-invariance bench", of_kind("bench", feeds("2/batch-invariance")), 40, render=batch_invariance),
    Section("2b/parity", "Parity per probe × engine on the evaluation slice",
            "a parity measurement of a probe on the evaluation slice", parity_files, 10, render=probe_parity,
            file_title=probe_title, before_files=parity_lead),
    Section("2b/permutation", "Word-order permutation acceptance (UNLI): speed", "a permutation-probe bench",
            probe_bench("2b/permutation", "permutation"), 20, render=probe_speed, file_title=probe_title),
    Section("2b/relation-filter", "BreakNLI: speed per engine, and the lazy relation filter against the full one",
            "a BreakNLI bench", probe_bench("2b/relation-filter", "breaknli"), 30,
            render=probe_speed, file_title=probe_title, before_files=relation_filter_lead),
    Section("2b/taxinli", "Accuracy per TaxiNLI category", "an accuracy-probe bench on TaxiNLI",
            probe_bench("2b/taxinli", "accuracy", lambda r: dig(r, "payload", "data", "name") == "taxinli"), 40,
            render=probe_parity, file_title=probe_title),
    Section("3/bench", "Per engine in `breaknli-fast bench`", "a bench", of_kind("bench"), 30, render=bench_memory,
            file_title=lambda r: random_title(r) if is_random(r) else "mini models"),
)
