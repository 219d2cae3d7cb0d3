"""Renderings of a bench result: bench.md, the rich table on stdout and the speed-up / difference plot
(``--compare``'s side-by-side table is :mod:`breaknli_fast.bench.compare`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from breaknli_fast.bench.recommend import recommendation_lines, shown_to_match  # noqa: F401 (shown_to_match: re-exported)
from breaknli_fast.bench.types import (BatchInvariance, BenchReport, ClassifierParity, Diff, EngineResult,
                                      MachineCeilings, Memory, RecordAgreement, SpeedSummary, Speedup, StageTiming,
                                      TokenAgreement, TripleCell)
from breaknli_fast.data.slicing import show_counts
from breaknli_fast.plotting import pyplot

MODE_SHORT = {"contradictive": "contr.", "entailed": "ent."}
INTERVALS = ("Intervals are 95 % and **paired** (engine and reference on the same examples): Tango's score interval "
             "for a yes/no per example (a break, a correct label), a Student-t interval of the per-example differences "
             "for fractions and pooled ratios; neither is narrower than ±z²/(n + z²), what n examples that all agree "
             "can show (0 differing of 15: ±20.4 pp; of 1,000: ±0.38 pp).")


def _f(x: Any, fmt: str = ".2f", suffix: str = "") -> str:
    if x is None:
        return "–"
    try:
        return f"{x:{fmt}}{suffix}"
    except (TypeError, ValueError):
        return str(x)


def fmt_diff(entry: Diff | None) -> str:
    if entry is None or entry.diff is None or entry.ci is None:
        return "–"
    lo, hi = entry.ci
    return f"{entry.diff:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def fmt_verdict(entry: Diff | None) -> str:
    """``-0.50 [-3.10, +2.00] n=120: inconclusive (too few examples)``."""
    if entry is None or entry.diff is None:
        return "– (no example scored by both)"
    v = entry.verdict or ""
    if entry.too_small and v != "different":
        v += " (too few examples to judge)"
    elif v == "inconclusive" and entry.n_needed:
        v += f" (~{entry.n_needed} examples would decide)"
    return f"{fmt_diff(entry)} n={entry.n}: {v}"


def _or_dash(x: Any) -> Any:
    return "–" if x is None else x


def _get(d: Any, *keys: Any) -> Any:
    """``d[k1][k2]...``, None where a level is missing (an int key indexes a list)."""
    for k in keys:
        if isinstance(d, dict):
            d = d.get(k)
        elif isinstance(d, (list, tuple)) and isinstance(k, int) and -len(d) <= k < len(d):
            d = d[k]
        else:
            return None
    return d


def _block(e: EngineResult, block: str) -> dict[str, dict[str, TripleCell]]:
    """BreakNLI's breakage cells of ``block`` (fixed_triples or end_to_end) by mode."""
    return (getattr(e.parity, block) if e.parity is not None else None) or {}


def overall_diffs(e: EngineResult, block: str, key: str = "inequality") -> str:
    parts = []
    for mode, table in _block(e, block).items():
        cell = table.get("overall")
        if cell:
            parts.append(f"{MODE_SHORT.get(mode, mode)} {fmt_diff(getattr(cell, key))}")
    return "; ".join(parts) or "–"


def _overall_diffs(e: EngineResult, block: str = "fixed_triples") -> list[Diff]:
    """BreakNLI's Overall cells of ``block``, or the probe's headline metrics, with a difference."""
    diffs = [getattr(cell, k) for table in _block(e, block).values() for name, cell in table.items()
             if name == "overall" for k in ("inequality", "relaxed")]
    diffs = [d for d in diffs if d is not None and d.diff is not None]
    if not diffs and e.parity is not None and e.parity.headline is not None:
        diffs = [m for m in e.parity.headline.metrics.values() if m.diff is not None]
    return diffs


def max_abs_breakage_diff(e: EngineResult, block: str = "fixed_triples") -> float | None:
    """The largest |Δ| of BreakNLI's Overall cells of ``block``, or of the probe's headline metrics."""
    vals = [abs(d.diff) for d in _overall_diffs(e, block) if d.diff is not None]
    return max(vals) if vals else None


def max_abs_interval_reach(e: EngineResult, block: str = "fixed_triples") -> float | None:
    """How far from 0 the 95 % intervals of those cells reach, at most: the largest |Δ| the data do not rule out
    (an inconclusive ±32 pp cell reaches 32 however small its point difference)."""
    vals = [max(abs(d.ci[0]), abs(d.ci[1])) for d in _overall_diffs(e, block) if d.ci]
    return max(vals) if vals else None


def _records(e: EngineResult) -> RecordAgreement:
    return e.parity.headline.records if e.parity is not None and e.parity.headline is not None else RecordAgreement()


def _classifier(e: EngineResult) -> ClassifierParity:
    return (e.parity.classifier or {}).get("all") or ClassifierParity() if e.parity is not None else ClassifierParity()


def _greedy(e: EngineResult) -> TokenAgreement:
    return e.parity.generator.greedy if e.parity is not None and e.parity.generator else TokenAgreement()


def _batching(inv: BatchInvariance | None, sep: str = "of") -> str:
    return f"{inv.labels_changed} {sep} {inv.pairs}" if inv is not None and inv.pairs else "–"


def batching_diff(inv: BatchInvariance) -> str:
    """The largest |Δ logit| of a pair alone against one call (and, where measured, of the reversed call and calls of
    7 pairs: "0, bit-equal" when all are 0)."""
    if inv.bit_equal is None:
        return _f(inv.max_abs_logit_diff, ".2e")
    if inv.bit_equal:
        return "0 (bit-equal alone, reversed, in 7s)"
    worst = max(inv.max_abs_logit_diff or 0.0, inv.reversed_max_abs_logit_diff or 0.0,
                inv.chunked_max_abs_logit_diff or 0.0)
    return (f"{worst:.2e} (alone {_f(inv.max_abs_logit_diff, '.1e')}, reversed "
            f"{_f(inv.reversed_max_abs_logit_diff, '.1e')}, in 7s {_f(inv.chunked_max_abs_logit_diff, '.1e')})")


def status_text(e: EngineResult) -> str:
    if not e.ran:
        return f"{e.status}: {e.reason}"
    if e.reference:
        return "reference"
    if e.checks is None or not e.checks.applied:
        return "n/a (random weights)"
    return "pass" if e.checks.passed else "FAIL"


def _breaknli(data: BenchReport) -> bool:
    return data.probe == "breaknli"


def summary_rows(data: BenchReport) -> tuple[list[str], list[list[str]]]:
    gpu = any(e.memory is not None and e.memory.gpu_peak_allocated_mib is not None for e in data.engines)
    bn = _breaknli(data)
    header = ["engine", "precision"] + (["speed-up (workload)", "speed-up (workload, best)"] if bn else [])
    header += ["speed-up (e2e)", "clf pairs/s"] + (["gen tokens/s"] if bn else [])
    header += ["examples/s", "clf batch p95 ms"] + (["gen call p95 ms"] if bn else []) + ["peak RSS (run) MiB"]
    if gpu:
        header.append("GPU peak MiB")
    header += ["records identical %", "labels changed by batching"]
    if bn:
        header += ["label agreement % (workload)", "max |Δ logit|", "Δ Overall ineq. pp, fixed triples [95% CI]",
                   "Δ Overall ineq. pp, end to end [95% CI]", "greedy token agreement %"]
    header.append("pass/fail")
    rows = []
    for e in data.engines:
        if not e.ran or e.speed is None:
            rows.append([e.label, e.precision] + ["–"] * (len(header) - 3) + [status_text(e)])
            continue
        sp, sm = e.speed.speedup or Speedup(), e.speed.summary or SpeedSummary()
        mem = e.memory or Memory()
        row = [e.shown_label, e.precision]
        if bn:
            row += [_f(sp.workload, ".2f", "×"), _f(sp.workload_best, ".2f", "×")]
        row += [_f(sp.end_to_end, ".2f", "×"), _f(sm.classifier_pairs_per_s, ".1f")]
        row += [_f(sm.generated_tokens_per_s, ".1f")] if bn else []
        row += [_f(sm.examples_per_s, ".3f"), _f(sm.classifier_batch_p95_ms, ".1f")]
        row += [_f(sm.generator_call_p95_ms, ".1f")] if bn else []
        row.append(_f(mem.peak_rss_mib, ".0f"))
        if gpu:
            row.append(_f(mem.gpu_peak_allocated_mib, ".0f"))
        row += [_f(_records(e).identical_pct, ".2f"), _batching(e.batch_invariance)]
        if bn:
            row += [_f(_classifier(e).label_agreement_pct, ".2f"), _f(_classifier(e).max_abs_logit_diff, ".2e"),
                    overall_diffs(e, "fixed_triples"), overall_diffs(e, "end_to_end"),
                    _f(_greedy(e).token_agreement_pct, ".1f")]
        rows.append(row + [status_text(e)])
    return header, rows


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(h.replace("|", "\\|") for h in header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
    return out


def _header(data: BenchReport) -> list[str]:
    env, cfg, wl = data.environment, data.config, data.workload
    acc, pk = env.get("accelerators", {}), env.get("packages", {})
    pc = cfg.get("probe_config") or {}
    models = data.models
    lines = [
        f"- machine: {env.get('cpu')} ({env.get('cpu_count')} logical CPUs, torch threads {env.get('torch_threads')}, "
        f"{env.get('memory_gib')} GiB); GPU: {', '.join(acc.get('gpus', [])) if acc.get('cuda_available') else 'none visible'}",
        f"- versions: breaknli-fast {env.get('breaknli_fast')} ({env.get('git')}), torch {pk.get('torch')}, transformers "
        f"{pk.get('transformers')}, onnxruntime {pk.get('onnxruntime')}, tensorrt {pk.get('tensorrt')}",
        f"- probe `{data.probe}`; models: " + ", ".join(
            f"{role} `{name}`" for role, name in (("classifier", models.classifier), ("generator", models.generator),
                                                  ("masked LM", ", ".join(models.mlm or []) or None)) if name)
        + f"; dataset `{data.data.name}` ({data.data.examples} examples"
          + (f": {sl['words']}, gold labels {show_counts(sl['labels'])}" if (sl := data.data.slice) else "")
          + f"); device {_get(cfg, 'engine', 'device') or cfg.get('device')}",
    ]
    if _breaknli(data):
        dec = pc.get("decoding", {})
        lines.append(f"- loop: modes {', '.join(pc.get('modes', []))}, K={pc.get('k')}, U={pc.get('u')}, S={pc.get('s')}, "
                     + (f"top-up {pc['top_up']}, " if pc.get("top_up") else "")
                     + f"relation filter {'both directions' if pc.get('bidirectional', True) else 'one direction'}, "
                     f"decoding {dec.get('strategy')} (top_p {dec.get('top_p')}, top_k {dec.get('top_k')}, T "
                     f"{dec.get('temperature')}, max_new_tokens {dec.get('max_new_tokens')}, min_new_tokens "
                     f"{dec.get('min_new_tokens')}), seed {pc.get('seed')}")
        lines.append(f"- fixed workload (identical for every engine): {wl.classify_ph_pairs} (p, h) pairs, "
                     f"{wl.generate_prompts} prompts × K, {wl.relation_pairs} relation pairs, "
                     f"{wl.evaluate_pairs} (p, h') pairs; fixed triples from the reference run: "
                     + ", ".join(f"{m} {n}" for m, n in wl.fixed_triples.items())
                     + f"; greedy check on {wl.greedy_prompts} prompts")
    else:
        lines.append("- probe settings: " + ", ".join(f"{k} {v}" for k, v in pc.items()))
    lines += [
        f"- measurement: warm-up {cfg.get('warmup')} (excluded), "
        + (f"stages ≥ {cfg.get('min_iterations')} iterations and ≥ {cfg.get('min_seconds')} s each (median reported), "
           if _breaknli(data) else "")
        + f"end to end × {cfg.get('repeats')} (median wall); batch invariance on {wl.invariance_pairs} pairs",
        f"- parity verdicts (δ = {data.tolerance_pp} pp): equivalent when the 95 % interval of the difference "
        f"lies inside ±δ, different when |Δ| > δ and the interval excludes 0, inconclusive otherwise; `--strict` fails "
        f"on different, on an engine that did not run (and label agreement < {data.min_agreement_pct} %), "
        f"`--require-equivalence` on inconclusive too; reference `{data.reference}`",
        "",
    ]
    return lines


def _headline_sections(data: BenchReport, ok: list[EngineResult]) -> list[str]:
    metrics = [m["name"] for m in data.headline_metrics]
    if not metrics:
        return []
    lines = ["## Headline metrics per engine (each over its own examples)", ""]
    rows = []
    for e in ok:
        vals = e.speed.end_to_end.headline if e.speed is not None else {}
        cells = []
        for m in metrics:
            v = vals.get(m)
            cells.append(f"{_f(v.rate)} [{_f(_get(v.ci, 0))}, {_f(_get(v.ci, 1))}] n={v.n}"
                         if v is not None and v.rate is not None else "–")
        rows.append([e.label] + cells)
    lines += _md_table(["engine"] + [f"{m} % [95 % CI]" for m in metrics], rows) + [""]
    lines += ["## Paired differences from the reference (engine − reference, examples both scored)", "", INTERVALS, ""]
    rows = []
    for e in ok[1:]:
        for m in metrics:
            d = e.parity.headline.metrics.get(m) if e.parity is not None and e.parity.headline else None
            rows.append([e.label, m, (d.kind if d else None) or "", fmt_verdict(d),
                         f"{(d.only_reference if d else None) or 0} / {(d.only_engine if d else None) or 0}"])
    lines += _md_table(["engine", "metric", "kind", "Δ pp [95 % CI] n: verdict", "scored by the reference / engine only"],
                       rows) + [""]
    lines += ["## Per-record prediction agreement and batch invariance", "",
              "A record agrees when the classifier gave the same label to every input it holds (e.g. (p, h), each "
              "candidate); labels are also compared input by input where both records hold the input. Batch "
              "invariance: labels of the same pairs classified one at a time against the engine's own batches (and the "
              "logits of each pair alone, in the reversed call and in calls of 7 pairs against the one call).", ""]
    rows = []
    for e in ok:
        r = _records(e)
        inv = e.batch_invariance or BatchInvariance()
        ident = (f"{r.identical} of {r.records} ({_f(r.identical_pct)} % "
                 f"[{_f(_get(r.identical_ci, 0))}, {_f(_get(r.identical_ci, 1))}])") if r.available else "–"
        rows.append([e.label, ident, _f(r.label_agreement_pct), _or_dash(r.labels_compared),
                     _or_dash(r.inputs_in_one_run_only), _batching(inv), batching_diff(inv),
                     _or_dash(inv.max_batch)])
    lines += _md_table(["engine", "records identical", "label agreement %", "labels compared",
                        "inputs in one run only", "labels changed by batching", "max |Δ logit| by batching",
                        "max batch"], rows) + [""]
    return lines + _by_sections(ok)


def _by_sections(ok: list[EngineResult]) -> list[str]:
    """The paired differences per group of each ``--by`` column (informative: not part of the checks)."""
    lines: list[str] = []
    for e in ok[1:]:
        by = (e.parity.headline.by if e.parity is not None and e.parity.headline else None) or {}
        for column, spec in by.items():
            rows = [[g.group, g.examples, m, fmt_verdict(d)] for g in spec.groups for m, d in g.metrics.items()]
            lines += [f"### `{e.label}` by `{column}` ({spec.kind}; not part of the checks)", ""]
            lines += _md_table(["group", "examples", "metric", "Δ pp [95 % CI] n: verdict"], rows) + [""]
    return (["## Paired differences per group (--by)", ""] + lines) if lines else []


def _breaknli_sections(data: BenchReport, ok: list[EngineResult]) -> list[str]:
    lines = ["## Stages (fixed workload): throughput, speed-up, latency", "",
             "| engine | stage | items | iterations | median s | min s | throughput (median) | speed-up median / best | latency median / p90 / p95 / p99 ms (unit) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in ok:
        speed = e.speed
        assert speed is not None
        for stage, st in (speed.stages or {}).items():
            if not st.items:
                lines.append(f"| {e.label} | {stage} | 0 | – | – | – | – | – | – |")
                continue
            if stage == "generate":
                thr = f"{st.get('tokens_per_s'):.1f} tokens/s, {st.get('sequences_per_s'):.1f} seq/s"
                lat = st.get("call_latency")
            else:
                thr = f"{st.get('pairs_per_s'):.1f} pairs/s"
                lat = st.get("batch_latency")
            sp = _get(speed.speedup.stages if speed.speedup else None, stage)
            spb = _get(speed.speedup.stages_best if speed.speedup else None, stage)
            lines.append(f"| {e.label} | {stage} | {st.items} | {st.iterations} | {st.median_s:.3f} | "
                         f"{st.min_s:.3f} | {thr} | {_f(sp, '.2f', '×')} / {_f(spb, '.2f', '×')} | "
                         f"{_f(lat['median_ms'], '.1f')} / {_f(lat['p90_ms'], '.1f')} / "
                         f"{_f(lat['p95_ms'], '.1f')} / {_f(lat['p99_ms'], '.1f')} ({st.get('latency_unit')}) |")
    lines += ["", "## End to end (each engine's own loop)", "",
              "| engine | examples | median wall s | examples/s | pairs/s | tokens/s | classify (p,h) s | generate s | relation s | evaluate s | accuracy (p,h) % | evaluated (per mode) |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for e in ok:
        assert e.speed is not None
        x = e.speed.end_to_end
        s = x.run.stage_seconds
        ev = ", ".join(f"{m} {f.evaluated}" for m, f in (x.funnel or {}).items())
        lines.append(f"| {e.label} | {x.run.examples} | {x.median_wall_s:.2f} | {_f(x.examples_per_s, '.3f')} | "
                     f"{_f(x.run.classifier_pairs_per_s, '.1f')} | {_f(x.run.generated_tokens_per_s, '.1f')} | "
                     f"{s.get('classify_ph', 0):.2f} | {s.get('generate', 0):.2f} | {s.get('relation', 0):.2f} | "
                     f"{s.get('evaluate', 0):.2f} | {_f(x.accuracy_ph, '.2f')} | {ev} |")
    return lines


def _giga(x: float | None, fmt: str = ".1f") -> str:
    return _f(x / 1e9 if x is not None else None, fmt)


def _tokens(st: StageTiming) -> str:
    """The tokens one iteration ran, real / computed (padding included): a classify stage's pair tokens; the
    generate stage's prompt tokens and decoder rows (one per generated token)."""
    c, g = st.classifier_work, st.generator_work
    if c is not None:
        return f"{c.tokens:,} / {c.padded_tokens:,}"
    if g is not None:
        return (f"prompts {g.prompt_tokens:,} / {g.encoder_padded:,}; generated {g.tokens:,} / "
                + (f"{g.row_steps:,}" if g.computed else "?"))
    return "–"


def roofline_rows(data: BenchReport, parts: bool = True) -> list[list[str]]:
    """Each stage's share of the ceilings: engine, stage, precision (and the ceiling held to), operations per
    iteration (G), padding %, attained G op/s (computed, useful), op/byte, what binds, the ceiling's G op/s, % of
    it; with ``parts``, a row per part of a stage of several (the generator's encoder and decoder steps)."""
    rows = []
    for e in data.engines:
        if not e.ran or e.speed is None:
            continue
        for stage, st in (e.speed.stages or {}).items():
            r = st.roofline
            if r is None:
                continue
            prec = r.precision + (f" (held to {r.ceiling})" if r.ceiling and r.ceiling != r.precision else "")
            if not r.parts:
                rows.append([e.label, stage, prec] + ["–"] * 7 + [r.note or "–"])
                continue
            pct = _f(r.pct_of_ceiling, ".0f", " %") if r.pct_of_ceiling is not None else (r.note or "no ceiling")
            rows.append([e.label, stage, prec, _tokens(st), _giga(r.flops, ".2f"), _f(r.padding_pct, ".1f"),
                         f"{_giga(r.attained_ops_per_s)} ({_giga(r.useful_ops_per_s)})",
                         _f(r.flops / r.bytes if r.bytes else None, ".0f"), r.binding or "–",
                         _giga(r.ceiling_ops_per_s), pct])
            if parts and len(r.parts) > 1:
                for part in r.parts:
                    share = (f"{100.0 * part.floor_s / r.floor_s:.0f} % of the floor"
                             if part.floor_s is not None and r.floor_s else "–")
                    rows.append(["", f"↳ {part.name}", f"{part.rows} rows" if part.rows else "", "",
                                 _giga(part.flops, ".2f"),
                                 _f(100.0 * (1 - part.useful_flops / part.flops) if part.flops else None, ".1f"),
                                 "", _f(part.intensity, ".0f"), part.binding or "–",
                                 _giga(part.compute_ops_per_s), share])
            b = r.largest_bucket
            if b is not None:
                rows.append(["", "↳ largest bucket", f"{b.width} tokens x {b.rows:.1f} rows",
                             f"{b.batches} batch{'es' if b.batches != 1 else ''}", _giga(b.flops, ".2f"), "–",
                             _giga(b.attained_ops_per_s), "", b.binding or "–", _giga(b.compute_ops_per_s),
                             _f(b.pct_of_ceiling, ".0f", " %") if b.pct_of_ceiling is not None else "no ceiling"])
    return rows


def ceilings_text(c: MachineCeilings | None) -> list[str]:
    """How the ceilings were measured: bandwidth, products per precision (the kernels that gave the peaks), the
    cache, the load while measuring."""
    if c is None:
        return []
    bw = c.bandwidth
    if c.source == "datasheet":
        head = f"Ceilings: the GPU's datasheet ({'; '.join(c.notes) or c.key.get('gpu')})."
        return [head, ""]
    loads = [g.load_average[0] for g in c.gemm if g.load_average] + (
        [bw.load_average[0]] if bw is not None and bw.load_average else [])
    out = [f"Ceilings of this CPU ({c.key.get('cpu')}, {c.threads} threads, mode {c.mode}), measured by "
           "micro-benchmarks at the stages' product shapes (docs/benchmarks.md): "
           + (f"memory bandwidth {_giga(bw.bytes_per_s)} GB/s (copy {_giga(bw.copy_bytes_per_s)}, triad "
              f"{_giga(bw.triad_bytes_per_s)}; {bw.array_bytes / 2**20:.0f} MiB arrays, {bw.kernel})"
              if bw is not None and bw.bytes_per_s else "memory bandwidth not measured") + "; "
           + "; ".join(_precision_text(c, p) for p in c.precisions) + "."]
    out.append(f"{c.measured_now} products measured by this bench in {c.seconds:.1f} s, "
               f"{sum(g.reused for g in c.gemm)} read from the cache `{c.file}`"
               + (f"; load average (1 min) while measuring {min(loads):.2f}-{max(loads):.2f}" if loads else "")
               + " (figures measured on a busy machine are low: `--ceilings fresh` measures them again).")
    out += [f"{n}" for n in c.notes]
    return out + [""]


def _precision_text(c: MachineCeilings, precision: str) -> str:
    status = c.precisions.get(precision, "")
    gs = [g for g in c.gemm if g.precision == precision and g.ops_per_s]
    if not gs:
        return f"{precision}: {status or 'not measured'}"
    won: dict[str, int] = {}
    for g in gs:
        won[g.kernel or "?"] = won.get(g.kernel or "?", 0) + 1
    lo, hi = min(g.ops_per_s or 0 for g in gs), max(g.ops_per_s or 0 for g in gs)
    return (f"{precision} products: {len(gs)} shapes at {_giga(lo, '.0f')}-{_giga(hi, '.0f')} G op/s, fastest "
            + ", ".join(f"{k} ({n})" for k, n in sorted(won.items(), key=lambda kv: -kv[1])))


ROOFLINE_HEADER = ["engine", "stage", "precision", "tokens real / computed", "G op / iteration", "padding %", "G op/s (useful)", "op/byte",
                   "binds", "ceiling G op/s", "% of ceiling"]


def roofline_section(data: BenchReport, ok: list[EngineResult]) -> list[str]:
    rows = roofline_rows(data)
    if not rows:
        return []
    return (["", "## Stages against this machine's ceilings", "",
             "Operations counted from each model's sizes and the tokens the engine ran (G op: 10⁹ multiplies or adds; "
             "padding %: the share spent on padded tokens and finished rows), over the stage's median iteration; the "
             "ceiling is the rate the binding limits allow each part: the compute peak of the engine's precision at "
             "the part's product shapes, or the memory bandwidth times its operations per byte (a roofline); "
             "% of ceiling: the time the stage would take at the ceilings over its median time. A classify stage's largest "
             "bucket (the width whose batches hold the most tokens) is held to the ceilings alone, timed by its "
             "batches' own seconds over the workers that ran them side by side.", ""]
            + ceilings_text(data.ceilings) + _md_table(ROOFLINE_HEADER, rows))


def _parity_sections(data: BenchReport, ok: list[EngineResult]) -> list[str]:
    lines = ["", "## BreakNLI parity with the reference, per cell", ""]
    if not data.parity_meaningful:
        lines += ["**Random weights: the parity figures below are not meaningful and are not checked.**", ""]
    lines += ["Fixed triples: the reference's evaluated (p, h, h') re-classified by each engine (generation excluded); "
              "end to end: each engine's own loop, on the examples both runs evaluated (the others counted). Both are "
              "paired. " + INTERVALS, "",
              "| engine | block | mode | cell | n | Δ inequality pp [95% CI]: verdict | Δ relaxed pp [95% CI]: verdict |",
              "|---|---|---|---|---|---|---|"]
    for e in ok[1:] if len(ok) > 1 else ok:
        for block in ("fixed_triples", "end_to_end"):
            for mode, table in _block(e, block).items():
                for cell, entry in table.items():
                    lines.append(f"| {e.label} | {block.replace('_', ' ')} | {mode} | {cell} | {entry.n} | "
                                 f"{fmt_verdict(entry.inequality)} | {fmt_verdict(entry.relaxed)} |")
    lines += ["", "| engine | classifier agreement % (ph / relation / evaluate / triples) | max abs Δ logit | "
              "greedy tokens equal % | greedy sequences identical % | sampled candidates identical % |",
              "|---|---|---|---|---|---|"]
    for e in ok:
        c = (e.parity.classifier if e.parity is not None else None) or {}
        agr = " / ".join(_f(c[k].label_agreement_pct if k in c else None, ".2f")
                         for k in ("classify_ph", "relation", "evaluate", "fixed_triples"))
        g = e.parity.generator if e.parity is not None else None
        greedy, sampled = (g.greedy, g.sampled_candidates.identical_pct) if g is not None else (TokenAgreement(), None)
        lines.append(f"| {e.label} | {agr} | {_f(_classifier(e).max_abs_logit_diff, '.2e')} | "
                     f"{_f(greedy.token_agreement_pct, '.2f')} | {_f(greedy.identical_sequences_pct, '.2f')} | "
                     f"{_f(sampled, '.2f')} |")
    return lines


def _memory_section(ok: list[EngineResult]) -> list[str]:
    lines = ["", "## Memory and machine load", "",
             "| engine | load s (incl. export) | RSS before load MiB | peak RSS while loading MiB | RSS after load MiB | "
             "peak RSS while running MiB | GPU peak MiB | load average (1 min) start → end |",
             "|---|---|---|---|---|---|---|---|"]
    for e in ok:
        m = e.memory or Memory()
        la, lb = e.load_average_start, e.load_average_end
        lines.append(f"| {e.label} | {_f(e.load_s, '.1f')} | {_f(m.rss_before_load_mib, '.0f')} | "
                     f"{_f(m.peak_rss_load_mib, '.0f')} | {_f(m.rss_after_load_mib, '.0f')} | "
                     f"{_f(m.peak_rss_mib, '.0f')} | {_f(m.gpu_peak_allocated_mib, '.0f')} | "
                     f"{_f(la[0] if la else None)} → {_f(lb[0] if lb else None)} |")
    if ok:
        m = ok[0].memory or Memory()
        lines += ["", f"Peak RSS: {m.rss_method}; \"while loading\" covers loading and any export, \"while running\" "
                  "the measurements (end to end, stages, parity). RSS is process-wide: memory an earlier engine left "
                  "behind shows in \"RSS before load\"."]
        if m.shared:
            lines += ["Engines ran interleaved (--interleave): \"peak RSS while running\" is the peak of all engines "
                      "loaded together, the same figure for each."]
        if m.gpu_note:
            lines += [f"GPU memory: {m.gpu_note}."]
    return lines


def bench_markdown(data: BenchReport) -> str:
    lines = ["# breaknli-fast bench", ""]
    if data.command:
        lines += ["```", data.command, "```", ""]
    lines += _header(data)
    for n in data.notes:
        lines += [f"> **Note:** {n}", ""]
    header, rows = summary_rows(data)
    lines += ["## Summary", ""] + _md_table(header, rows) + [""]
    lines += ["Speed-up (e2e) = ratio of the median end-to-end wall times (reference / engine)"
              + ("; speed-up (workload) = reference time / engine time for the fixed workload (sum of the four stages' "
                 "median iteration times); (workload, best) = the same with each stage's fastest iteration, the least "
                 "disturbed estimate on a busy machine" if _breaknli(data) else "")
              + ". Records identical: per-record prediction agreement with the reference. Δ = engine − reference in "
                "percentage points, paired on the same examples.", ""]
    ok = [e for e in data.engines if e.ran]
    if not data.parity_meaningful:
        lines += ["**Random weights: the parity figures below are not meaningful and are not checked.**", ""]
    lines += _headline_sections(data, ok)
    if _breaknli(data):
        lines += _breaknli_sections(data, ok) + roofline_section(data, ok) + _parity_sections(data, ok)
    lines += _memory_section(ok)
    bad = [e for e in data.engines if not e.ran]
    if bad:
        lines += ["", "## Skipped or failed engines", ""]
        lines += [f"- `{e.label}`: {e.status}: {e.reason}" for e in bad]
    fails = [("bench", f) for f in data.failures]
    fails += [(e.label, f) for e in data.engines for f in (e.checks.failures if e.checks else [])]
    if not data.parity_meaningful:
        verdict = "NOT CHECKED: random weights, parity is not meaningful" + ("" if data.passed else "; FAIL:")
    else:
        verdict = "PASS: every engine ran and none differs beyond the tolerance" if data.passed else "FAIL:"
    lines += ["", "## Verdict", "", verdict]
    lines += [f"- `{lab}`: {f}" for lab, f in fails]
    pick = recommendation_lines(data)
    if pick:
        lines += ["", "## Which engine to pick", ""] + pick
    if data.parity_meaningful:
        lines += ["", "## Has each engine been shown to match the reference?", ""]
        lines += [f"- `{e.label}`: {shown_to_match(e)}" for e in data.engines if e.label != data.reference]
        lines += _inconclusive_lines(data)
    return "\n".join(lines) + "\n"


def _inconclusive_lines(data: BenchReport) -> list[str]:
    out = []
    for e in data.engines:
        if e.reference:
            continue
        for where, x in e.cells():
            if x.verdict == "inconclusive" and x.n_needed:
                out.append(f"  - `{e.label}` {where}: {fmt_diff(x)} pp on {x.n} examples; about "
                           f"{x.n_needed} would decide" + (" (too few to judge now)" if x.too_small else ""))
    return (["", "Inconclusive cells and the examples a decision would need (at the observed discordance):", ""]
            + out) if out else []


def short_status(e: EngineResult) -> str:
    t = status_text(e)
    return e.status if not e.ran else t.split(" ")[0]


def _verdict_counts(e: EngineResult) -> str:
    v = e.verdicts
    if v is None:
        return "–"
    return (f"{v.equivalent} eq / {v.different} diff / {v.inconclusive} inc"
            + (f" ({v.too_small} too small)" if v.too_small else ""))


NARROW = 110  # below this many columns the terminal table keeps its headline columns (bench.md has every one)


def rich_table(data: BenchReport, width: int | None = None) -> Any:
    """A compact summary for the terminal (bench.md has every column); on a console narrower than :data:`NARROW`
    (``width``, default the console's) the memory and batching columns go and the headers are one word each, so
    that at 80 columns no engine name or header is cut mid-word."""
    from rich.table import Table

    from breaknli_fast.console import console, name_cell, name_width

    narrow = (width if width is not None else console.width) < NARROW
    title = f"breaknli-fast bench --probe {data.probe} vs " + str(data.reference)
    if not data.parity_meaningful:
        title += " (random weights: parity not meaningful)"
    t = Table(title=title)
    cols = [("engine", "left"), ("speed-up e2e", "right"), ("pairs/s", "right"), ("RSS MiB", "right"),
            ("records identical %", "right"), ("batching changes", "right"), ("verdicts", "left"), ("result", "left")]
    if narrow:
        cols = [("engine", "left"), ("speed", "right"), ("pairs/s", "right"), ("same %", "right"),
                ("verdicts", "left"), ("result", "left")]
    widths = {"engine": name_width(e.shown_label for e in data.engines), "result": len("skipped"), "speed": 6,
              "pairs/s": 7, "same %": 6}
    for name, just in cols:
        t.add_column(name, justify=just, overflow="fold", min_width=widths.get(name))
    keep = [c for c, _ in cols]
    for e in data.engines:
        st = short_status(e)
        st = {"FAIL": "[bold red]FAIL[/]", "pass": "[green]pass[/]", "skipped": "[yellow]skipped[/]",
              "failed": "[bold red]failed[/]"}.get(st, st)
        if not e.ran or e.speed is None:
            t.add_row(name_cell(e.label), *["–"] * (len(cols) - 2), st)
            continue
        sp, sm = e.speed.speedup or Speedup(), e.speed.summary or SpeedSummary()
        same = _f(_records(e).identical_pct, ".2f")
        cells = {"engine": name_cell(e.shown_label), "speed-up e2e": _f(sp.end_to_end, ".2f", "×"),
                 "speed": _f(sp.end_to_end, ".2f", "×"), "pairs/s": _f(sm.classifier_pairs_per_s, ".0f"),
                 "RSS MiB": _f((e.memory or Memory()).peak_rss_mib, ".0f"),
                 "records identical %": same, "same %": same,
                 "batching changes": _batching(e.batch_invariance, "/"),
                 "verdicts": "reference" if e.reference else _verdict_counts(e), "result": st}
        t.add_row(*[cells[c] for c in keep])
    return t


def roofline_rich_table(data: BenchReport) -> Any:
    """Each stage's share of the machine's ceilings, for the terminal (None where no stage has one)."""
    from rich.table import Table

    from breaknli_fast.console import name_cell, name_width

    rows = [r for r in roofline_rows(data, parts=False)]
    if not rows:
        return None
    c = data.ceilings
    t = Table(title="each stage: % of this " + ("GPU's datasheet peak" if c is not None and c.source == "datasheet"
                                                else "CPU's measured ceiling") + " (bench.md: how)")
    widths = {"engine": name_width(e.label for e in data.engines), "%": 4}
    for name, just in (("engine", "left"), ("stage", "left"), ("G op/s", "right"), ("pad %", "right"),
                       ("binds", "left"), ("%", "right")):
        t.add_column(name, justify=just, overflow="fold", min_width=widths.get(name))
    last = None
    for r in rows:
        label = r[0] if r[0] != last else ""
        last = r[0]
        t.add_row(name_cell(label) if label else "", r[1], r[6].split(" ")[0], r[5], r[8], r[10])
    return t


def plot_speed_vs_breakage(data: BenchReport, path: str | Path) -> Path | None:
    """Speed-up against the largest |Δ| of each engine (BreakNLI: Overall inequality / relaxed on the fixed
    triples, workload speed-up; another probe: its headline metrics, end-to-end speed-up). Returns None when
    matplotlib is not installed."""
    plt = pyplot()
    if plt is None:
        return None
    bn = _breaknli(data)
    key = "workload" if bn else "end_to_end"
    pts = [(e.shown_label, max_abs_breakage_diff(e), getattr(e.speed.speedup, key) if e.speed and e.speed.speedup
            else None, e.checks.passed if e.checks else None, max_abs_interval_reach(e)) for e in data.engines if e.ran]
    fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=120)
    for label, x, y, ok, reach in pts:
        if y is None:
            continue
        x = x or 0.0
        color = "tab:red" if ok is False else "tab:blue"
        if reach is not None and reach > x:  # the 95 % interval's reach: a point near 0 may not be a match
            ax.errorbar([x], [y], xerr=[[0.0], [reach - x]], fmt="none", ecolor=color, elinewidth=1, capsize=3,
                        alpha=0.6, zorder=2)
        ax.scatter([x], [y], s=50, color=color, zorder=3)
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(6, 4), fontsize=8)
    tol = data.tolerance_pp
    if tol is not None:
        ax.axvline(tol, color="grey", ls="--", lw=1, label=f"tolerance {tol} pp")
    ax.axhline(1.0, color="grey", ls=":", lw=1)
    ax.set_xlabel(("max |Δ Overall breakage| vs torch:fp32 (pp, fixed triples)" if bn
                   else "max |Δ headline metric| vs torch:fp32 (pp, paired)")
                  + "; bar: to the farthest end of its 95 % interval", fontsize=8)
    ax.set_ylabel("speed-up over torch:fp32 (" + ("fixed workload)" if bn else "end to end)"))
    title = f"breaknli-fast bench --probe {data.probe}"
    if not data.parity_meaningful:
        title += " (random weights: x axis not meaningful)"
    ax.set_title(title, fontsize=10)
    xmax = max([tol or 1.0] + [max(p[1] or 0.0, p[4] or 0.0) for p in pts])
    ymax = max([1.0] + [p[2] for p in pts if p[2] is not None])
    ax.set_xlim(-0.05 * xmax, 1.15 * xmax)
    ax.set_ylim(0, 1.15 * ymax)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    fig.tight_layout()
    out = Path(path)
    fig.savefig(out)
    plt.close(fig)
    return out
