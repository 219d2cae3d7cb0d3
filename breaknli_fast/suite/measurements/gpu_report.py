"""The GPU check's section of BENCHMARKS.md (6) and the body of its summary.md, from its typed payload
(:class:`~breaknli_fast.suite.measurements.gpu_check.GpuCheckPayload`): the benches on the GPU, the bounds, the
issue's targets from the check's own figures, the runs and their parity, the CUDA-marked tests.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from breaknli_fast.suite.base import Results, Section
from breaknli_fast.suite.format import blank, dig, f, model_label, table, yes_no
from breaknli_fast.suite.measurements.bench import (confirmed, engine_name, notes_text, random_shapes,
                                                    shown_to_match, workload_text)
from breaknli_fast.suite.result import ResultFile


def gpu_files(results: Results) -> list[ResultFile]:
    """GPU checks that ran on a CUDA GPU (a --device cpu dry run is no GPU measurement)."""
    return [r for r in results if r.kind == "gpu_check" and str(dig(r, "payload", "device")).startswith("cuda")
            and dig(r, "payload", "gpu")]


def gpu_title(doc: ResultFile) -> str:
    p = doc.payload
    return (f"{dig(p, 'gpu')} (`{dig(p, 'device')}`), torch {dig(p, 'torch')} "
            f"(CUDA {dig(p, 'torch_cuda_build')})")


def _bench_details(p: Any, key: str) -> list[Any]:
    """``details[key]`` of every engine role in a GPU check's benches (None where a role did not record it)."""
    return [dig(e, "info", role, "details", key) for bench in (dig(p, "benches") or {}).values()
            for e in dig(bench, "bench", "engines") or [] for role in ("classifier", "generator")]


def _tf32_text(p: Any) -> str:
    tf = dig(p, "tf32") or {}
    states = [s for run in (tf.get("runs") or {}).values() for s in run.values()]
    states += [sd for sd in _bench_details(p, "tf32") if sd]
    if not states:
        return "TF32: no torch engine recorded its switches"
    on = sorted({f"matmul {s.get('matmul_allow_tf32')}, cuDNN {s.get('cudnn_allow_tf32')}" for s in states})
    asked = "asked for (BREAKNLI_FAST_TF32)" if tf.get("asked") else "not asked for"
    return f"TF32 {asked}; the torch engines ran with allow_tf32: {'; '.join(on)}"


def _sdpa_text(p: Any) -> str:
    """Whether the torch engines' attention could use cuDNN (engines/cuda.py), from the benches' engine details."""
    states = {"on" if sd and sd.get("cudnn_enabled") is True else "off" if sd else None
              for sd in _bench_details(p, "sdpa")}
    if not states:
        return "cuDNN attention: no bench ran"
    if states == {None}:
        return ("cuDNN attention: not recorded, so torch's default (on: the engines set it before "
                "`BREAKNLI_FAST_CUDNN_SDPA` existed)")
    return "cuDNN attention " + " / ".join(sorted(str(x) for x in states)) + " in the torch engines (BREAKNLI_FAST_CUDNN_SDPA)"


def _not_measured(name: str, step: Any) -> str:
    detail = dig(step, "detail")
    return (f"Not measured: step `{name}` {dig(step, 'status', default='did not run')}"
            + (f" ({detail})" if detail else "") + ".")


def _gpu_bench(name: str, entry: Any, steps: dict[str, Any], dev: str) -> str:
    data = dig(entry, "bench")
    if blank(data):
        return _not_measured(f"bench-{name}", steps.get(f"bench-{name}"))
    rows = []
    for e in dig(data, "engines", default=[]):
        if e.status != "ok":
            rows.append([e.label] + ["–"] * 6 + [f"did not run ({e.status}: {e.reason})"])
            continue
        sp, sm = dig(e, "speed", "speedup"), dig(e, "speed", "summary")
        v = dig(e, "parity", "verdicts")
        if e.reference:
            verdicts = ["reference", "reference"]
        elif dig(data, "parity_meaningful") is False:
            verdicts = ["not meaningful (random weights)"] * 2
        else:
            verdicts = [f"{dig(v, 'equivalent', default=0)} / {dig(v, 'different', default=0)} ({confirmed(e)}) / "
                        f"{dig(v, 'inconclusive', default=0)} ({dig(v, 'too_small', default=0)})", shown_to_match(e)]
        rec = dig(e, "parity", "headline", "records")
        same = "reference" if e.reference else f(dig(rec, "identical_pct"), ".1f", " %")
        rows.append([engine_name(e), f(dig(sp, "end_to_end"), ".2f", "×"), f(dig(sm, "classifier_pairs_per_s"), ".1f"),
                     f(dig(sm, "generated_tokens_per_s"), ".1f"), f(dig(sm, "examples_per_s"), ".2f"), same,
                     *verdicts])
    head = workload_text(data)
    if dig(data, "models", "random_weights"):
        head = f"Random weights: {random_shapes(data)}. " + head
    why = dig(entry, "limit", "why")
    if why:
        head += f" Its --limit: {why}."
    reps = {dig(e, "speed", "end_to_end", "repeats") for e in dig(data, "engines", default=[]) if e.status == "ok"}
    if reps - {None, 1}:
        head += (f" End to end: the median of {', '.join(map(str, sorted(r for r in reps if r)))} runs per engine "
                 "(its stage figures from the median run).")
    out = [head, "", table(["engine", f"loop speed-up vs torch:fp32 eager on {dev} (end to end)", "classifier pairs/s",
                            "generator tokens/s", "examples/s (e2e)", "records identical to torch:fp32",
                            "cells equivalent / different (still different judged together) / inconclusive (too few "
                            "to judge)", f"shown to match torch:fp32 on {dev}?"], rows)]
    if dig(data, "notes"):
        out += ["", notes_text(data)]
    return "\n".join(out)


def _gpu_runs(p: Any, dev: str) -> str:
    from breaknli_fast.suite.measurements.compare_runs import summary_line

    rows = []
    for name, r in (dig(p, "runs") or {}).items():
        t = r.get("throughput") or {}
        prec = r.get("precision") if r.get("classifier_precision") in (None, r.get("precision")) else \
            f"classifier {r.get('classifier_precision')}, generator {r.get('generator_precision')}"
        rows.append([name, r.get("device"), prec, r.get("examples"), yes_no(r.get("finished")),
                     f(t.get("examples_per_s"), ".2f"), f(t.get("classifier_pairs_per_s"), ".1f"),
                     f(t.get("generated_tokens_per_s"), ".1f")])
    out = [table(["run", "device", "precision", "examples", "finished", "records/s", "classifier pairs/s",
                  "generated tokens/s"], rows) if rows else "No run directory."]
    for key, what in (("kernels", f"torch fp32 on {dev} against torch fp32 on the CPU (labels outside near ties, "
                                  "probabilities within 1e-3, breakage cells)"),
                      ("precisions", f"bf16 and the fp16 classifier against torch fp32 on {dev} (the breakage "
                                     "cells' verdicts)")):
        doc = dig(p, "parity", key)
        out += ["", f"{what}:", ""]
        if not doc:
            out.append("- not compared (step `parity` did not compare these runs)")
            continue
        out += [f"- {summary_line(Path(run).name, res)}" for run, res in (doc.get("runs") or {}).items()]
    return "\n".join(out)


def gpu_check_body(p: Any) -> str:
    """A GPU check's figures: the benches on the GPU (loop speed-up over torch fp32, pairs/s, tokens/s, verdicts),
    the runs and their parity, the CUDA-marked tests (gpu-check.json's payload; summary.md shows the same)."""
    steps = {s.step: s for s in dig(p, "steps") or []}
    dev = "the GPU" if str(dig(p, "device")).startswith("cuda") else f"`{dig(p, 'device')}`"
    t = dig(p, "cuda_tests") or {}
    tests = (f"{t.get('tests', 0) - t.get('failures', 0) - t.get('errors', 0) - t.get('skipped', 0)} passed, "
             f"{t.get('failures', 0)} failed, {t.get('errors', 0)} errors, {t.get('skipped', 0)} skipped"
             if t else "not run")
    bad = [c["name"] for c in t.get("cases", []) if c.get("outcome") in ("failure", "error")] if t else []
    not_ok = [f"{s.step} {s.status} ({dig(s, 'detail')})" for s in dig(p, "steps") or [] if s.status != "ok"]
    out = [f"{_tf32_text(p)}. {_sdpa_text(p)}. CUDA-marked tests (tests/test_cuda.py): {tests}"
           + (f" (failed: {', '.join(bad)})" if bad else "") + ". Examples per run: "
           + (str(dig(p, "limit")) if dig(p, "limit") else "all") + f"; the check took {f(dig(p, 'took_s'), '.0f')} s "
           f"of its {dig(p, 'budget_s')} s."]
    if not_ok:
        out += ["", "Steps that did not finish: " + "; ".join(not_ok) + "."]
    out += ["", f"**The loop on the mini models** (`bench --device {dig(p, 'device')}`):", "",
            _gpu_bench("mini", dig(p, "benches", "mini"), steps, dev),
            "", "**Real shapes with random weights** (speed only):", "",
            _gpu_bench("real", dig(p, "benches", "real"), steps, dev)]
    if dig(p, "benches", "large", "bench") or "bench-large" in steps:
        out += ["", "**Large shapes with random weights** (speed only):", "",
                _gpu_bench("large", dig(p, "benches", "large"), steps, dev)]
    if dig(p, "bounds") or "bounds" in steps:
        out += ["", "**Against the GPU's bounds** (the gpu-bounds measurement: the cudagraph engine's hot paths, one "
                "graph replay each, CUDA events):", "", gpu_bounds_text(dig(p, "bounds"), steps.get("bounds"))]
    targets = gpu_targets(p)
    if targets:
        out += ["", f"**Issue 53's targets on {dev}** (every ratio from this one check):", "", targets]
    own = cudagraph_checks_text(p, steps, dev)
    if own:
        out += ["", own]
    targets = cudagraph_targets(p)
    if targets:
        out += ["", f"**Issues 65 and 66's targets on {dev}** (every figure from this one check; a target whose "
                "figure the check did not measure is not listed):", "", targets]
    out += ["", "**The runs** (`breaknli-fast run`, same examples and seeds) and their parity:", "", _gpu_runs(p, dev)]
    return "\n".join(out)


def gpu_bounds_text(b: Any, step: Any) -> str:
    """The bounds step's table: per shape, the classifier's largest bucket (TFLOP/s, % of the datasheet's dense
    peak) and the decoder step (ms, bandwidth floor, times the floor), the eager torch engine beside them."""
    if not b:
        return _not_measured("bounds", step)
    ds, mp = b.get("datasheet") or {}, b.get("measured_peaks") or {}
    head = (f"{b.get('gpu')}: datasheet {f(ds.get('bf16_tflops'), '.0f')} TFLOP/s bf16 dense, "
            f"{f(ds.get('fp32_tflops'), '.0f')} TFLOP/s fp32, {f(ds.get('hbm_tb_s'), '.2f')} TB/s ({ds.get('source')}); "
            f"measured here: a bf16 product of 8192³ at {f(mp.get('bf16_mm_8192_tflops'), '.0f')} TFLOP/s, a 2 GiB "
            f"device copy at {f(mp.get('copy_2gib_tb_s'), '.2f')} TB/s. Median of {b.get('reps')} timed replays after "
            "3 warm-up ones.") if ds else f"Device `{b.get('device')}` (no datasheet peaks: a dry run)."
    rows = []

    def kernels(m: dict[str, Any]) -> str:
        k = m.get("kernels") or {}
        if not k.get("top"):
            return k.get("error") or "–"
        top = k["top"][0]
        return (f"{f(k.get('kernels_per_call'), '.0f')} kernels, {f(k.get('kernel_us_per_call', 0) / 1000, '.3f')} ms in "
                f"them; most: {top['name'][:40]} ({f(top.get('calls'), '.0f')}×, {f(top['us_per_call'] / 1000, '.3f')} ms)")

    for shape, part in (b.get("shapes") or {}).items():
        for key, label in (("classifier_bf16", "cudagraph bf16"), ("classifier_fp32", "cudagraph fp32"),
                           ("classifier_torch_fp32", "torch fp32 eager")):
            m = part.get(key) or {}
            what = f"classifier {part.get('classifier')}, {'×'.join(map(str, m.get('bucket') or []))} pairs × tokens"
            rows.append([shape, what, label, m.get("error") or f(m.get("median_ms"), ".2f", " ms"),
                         f(m.get("tflops"), ".1f", " TFLOP/s"), f(m.get("pct_of_peak"), ".0f", " % of peak"),
                         kernels(m)])
        for key, label in (("decoder_bf16", "cudagraph bf16"), ("decoder_fp32", "cudagraph fp32"),
                           ("decoder_torch_fp32", "torch fp32 eager")):
            m = part.get(key) or {}
            what = f"decoder step {part.get('generator')}, {m.get('rows', '–')} rows"
            total = dig(m, "bytes", "total")
            floor = (f"floor {f(m.get('floor_ms'), '.3f')} ms ({f(total and total / 1e6, '.0f')} MB)"
                     if m.get("floor_ms") is not None else "–")
            rows.append([shape, what, label, m.get("error") or f(m.get("median_ms"), ".3f", " ms"), floor,
                         f(m.get("times_floor"), ".1f", "× the floor"), kernels(m)])
    return "\n".join([head + " Kernels: torch's profiler on the same step launched one kernel at a time (a replay runs "
                      "the same kernels).", "",
                      table(["shapes", "what", "engine", "time", "rate / bound", "% of bound", "kernels"], rows)])


def _engine_row(bench: Any, label: str) -> Any:
    return next((e for e in dig(bench, "bench", "engines") or [] if e.label == label and e.status == "ok"), None)


def gpu_targets(p: Any) -> str:
    """Issue 53's done-when, each from this check's own figures: the loop speed-ups of the cudagraph engine over
    torch fp32 eager (base and large shapes), its fp32 records against eager fp32's, the classifier's largest bucket
    against the bf16 peak, the decoder step against its bandwidth floor, the mini models' engines against torch."""
    benches, rows = dig(p, "benches") or {}, []

    def speed(key: str, label: str) -> float | None:
        return dig(_engine_row(benches.get(key), label), "speed", "speedup", "end_to_end")

    def line(what: str, value: Any, ok: bool | None) -> None:
        rows.append([what, value, "–" if ok is None else ("met" if ok else "**not met**")])

    for key in ("real", "large"):
        if not dig(benches, key, "bench"):
            continue
        rw = dig(benches, key, "bench", "config", "random_weights") or {}
        shapes = " + ".join(str(v) for v in (rw.get("generator"), rw.get("classifier")) if v) or key
        bf = speed(key, "cudagraph:bf16")
        line(f"{shapes}: cudagraph bf16 loop ≥ 5× torch fp32 eager", f(bf, ".2f", "×"), None if bf is None else bf >= 5)
        fp = speed(key, "cudagraph:fp32")
        if fp is not None or key == "real":
            same = dig(_engine_row(benches.get(key), "cudagraph:fp32"), "parity", "headline", "records", "identical_pct")
            line(f"{shapes}: cudagraph fp32 loop ≥ 2×, records equal to eager fp32's",
                 f"{f(fp, '.2f', '×')}, {f(same, '.1f', ' %')} of records identical",
                 None if fp is None else fp >= 2)
    large = dig(p, "bounds", "shapes", "large") or {}
    if large:
        pct = dig(large, "classifier_bf16", "pct_of_peak")
        line(f"{large.get('classifier')}: the classifier's largest bucket ≥ 30 % of bf16 peak", f(pct, ".0f", " %"),
             None if pct is None else pct >= 30)
        x = dig(large, "decoder_bf16", "times_floor")
        line(f"{large.get('generator')}: the bf16 decoder step within 3× its bandwidth floor", f(x, ".1f", "×"),
             None if x is None else x <= 3)
    mini = [e for e in dig(benches, "mini", "bench", "engines") or [] if e.status == "ok" and not e.reference]
    if mini:
        slow = [e.label for e in mini if (dig(e, "speed", "speedup", "end_to_end") or 0) < 1]
        line("mini models: no engine slower than torch fp32 eager end to end",
             ", ".join(f"{e.label} {f(dig(e, 'speed', 'speedup', 'end_to_end'), '.2f', '×')}" for e in mini),
             not slow)
    return table(["target", "measured", ""], rows) if rows else ""


def _asked(steps: dict[str, Any], name: str) -> bool:
    """Whether ``--steps`` named the step (a step not asked for is left out of the section, not 'not measured')."""
    return name in steps and dig(steps[name], "detail") != "not in --steps"


def _failed(first: list[Any], m: dict[str, Any], width: int) -> list[Any]:
    """A table row of a measurement that raised: its name cells, dashes, and the error's first 120 characters."""
    return first + ["–"] * (width - len(first) - 1) + [f"failed: {m['error'][:120]}"]


def _kernels_per_call(m: Any) -> Any:
    k = dig(m, "kernels")
    return dig(k, "kernels_per_call") if isinstance(k, dict) and "error" not in k else None


def cudagraph_checks_text(p: Any, steps: dict[str, Any], dev: str) -> str:
    """The cudagraph engine's own steps (backends/cudagraph/check.py): the decoder step plain and compiled, natural
    end of sequence at real shapes, the fp8 / int8 classifier against bf16, the accuracy bench at scale."""
    cg, out = dig(p, "cudagraph") or {}, []
    fused = dig(cg, "fused-step", "shapes") or {}
    if fused or _asked(steps, "fused-step"):
        rows = []
        for shape, part in fused.items():
            for name, m in part.items():
                if not isinstance(m, dict):
                    continue
                if "error" in m:
                    rows.append(_failed([shape, name], m, 7))
                    continue
                rows.append([shape, f"{m.get('precision')}, fused={m.get('fused')}", f(m.get("median_ms"), ".3f", " ms"),
                             f(m.get("times_floor_at_copy_bandwidth"), ".1f", "×"), f(_kernels_per_call(m), ".0f"),
                             f(m.get("rows_identical_to_off_pct"), ".1f", " %"), f(m.get("capture_s"), ".1f", " s")])
        bw = dig(cg, "fused-step", "copy_bytes_per_s")
        out += [f"**The decoder step, plain and compiled** (`fused-step`: {dig(cg, 'fused-step', 'rows', 0)} prompts × "
                f"K = {dig(cg, 'fused-step', 'rows', 1)}, {dig(cg, 'fused-step', 'rows', 2)} encoder tokens, at the "
                f"middle of a {dig(cg, 'fused-step', 'rows', 3)}-position cache; the floor is the bytes the step must "
                f"read at the device copy's {f(bw and bw / 1e12, '.2f', ' TB/s')}):", ""]
        out.append(table(["shape", "step", "time (median)", "× the floor", "kernels", "candidates identical to "
                          "fused=off", "capture (compile included)"], rows) if rows
                   else _not_measured("fused-step", steps.get("fused-step")))
    eos = dig(cg, "natural-eos") or {}
    if eos or _asked(steps, "natural-eos"):
        rows = []
        for label, m in (eos.get("engines") or {}).items():
            if "error" in m:
                rows.append(_failed([label], m, 7))
                continue
            secs = m.get("seconds") or []
            rows.append([label, f(m.get("median_s"), ".3f", " s") + (f" ({min(secs):.3f}-{max(secs):.3f})" if secs else ""),
                         f(m.get("speedup_vs_first"), ".2f", "×") if "speedup_vs_first" in m else "reference",
                         f(m.get("mean_length"), ".1f"), f(m.get("ended_by_eos_pct"), ".1f", " %"),
                         f(m.get("identical_to_first_pct"), ".1f", " %"), f(m.get("tokens_per_s"), ".0f")])
        bias = eos.get("eos_bias")
        head = (f"**Generation ended by the end-of-sequence token** (`natural-eos`: {eos.get('prompts')} prompts × "
                f"K = {eos.get('k')}, at most {eos.get('max_new_tokens')} new tokens, {eos.get('rounds')} rounds "
                "interleaved" + (f"; the random-weight T5's end-of-sequence row scaled by {bias.get('factor'):.2f} so "
                                 f"that greedy candidates average {bias.get('mean_greedy_length')} tokens"
                                 if isinstance(bias, dict) and bias.get("factor") else "") + "):")
        out += ["", head, "", table(["engine", "median (min-max)", f"speed-up vs {eos.get('reference')}",
                                     "mean length", "ended by EOS", f"candidates identical to {eos.get('reference')}",
                                     "tokens/s"], rows) if rows else _not_measured("natural-eos", steps.get("natural-eos"))]
    q = dig(cg, "quantised") or {}
    if q or _asked(steps, "quantised"):
        rows = []
        for prec, m in (q.get("precisions") or {}).items():
            if "error" in m:
                rows.append(_failed([prec], m, 7))
                continue
            kern = dig(m, "compute", "product_kernels")
            rows.append([prec, f(dig(m, "speed", "pairs_per_s"), ".0f"),
                         f((q.get("speedup_vs_bf16") or {}).get(prec, 1.0 if prec == "bf16" else None), ".2f", "×"),
                         f(m.get("labels_agree_pct"), ".1f", " %"), f(m.get("max_abs_logit_diff_vs_torch_fp32"), ".3g"),
                         f(m.get("alone_vs_call_max_abs_diff"), ".3g"),
                         ", ".join(f"{k} {v}" for k, v in kern.items()) if isinstance(kern, dict) else "–"])
        bucket = q.get("bucket") or []
        out += ["", f"**The quantised classifier** (`quantised`: {model_label(q.get('model'))}, "
                    f"{q.get('pairs')} pairs against torch fp32 on {dev}; speed at the bucket of "
                    + " × ".join(str(b) for b in bucket) + " pairs × tokens, one graph replay):", "",
                table(["precision", "pairs/s", "vs bf16", "labels as torch fp32", "largest |logit difference|",
                       "alone vs in one call (largest difference)", "product kernels"], rows)
                if rows else _not_measured("quantised", steps.get("quantised"))]
    bench = dig(p, "parity_scale")
    if bench is not None or _asked(steps, "parity-scale"):
        what = (f" ({dig(bench, 'models', 'classifier')}), {dig(bench, 'data', 'examples')} pairs of "
                f"`{dig(bench, 'data', 'name')}`" if bench is not None else "")
        out += ["", f"**Parity at scale** (`parity-scale`: `bench --probe accuracy` on the trained mini models{what}, "
                    f"against torch fp32 on {dev}):", "", _parity_scale(bench, steps, dev)]
    return "\n".join(out)


def _parity_scale(bench: Any, steps: dict[str, Any], dev: str) -> str:
    if bench is None:
        return _not_measured("parity-scale", steps.get("parity-scale"))
    rows = []
    for e in dig(bench, "engines", default=[]):
        if e.status != "ok":
            rows.append([e.label] + ["–"] * 5 + [f"did not run ({e.status}: {e.reason})"])
            continue
        rec, v = dig(e, "parity", "headline", "records"), parity_cells(e)
        ref = bool(e.reference)
        rows.append([engine_name(e), f(dig(e, "speed", "summary", "classifier_pairs_per_s"), ".0f"),
                     f(dig(e, "speed", "speedup", "end_to_end"), ".2f", "×"),
                     "reference" if ref else f(dig(rec, "identical_pct"), ".2f", " %"),
                     "reference" if ref else f(dig(rec, "label_agreement_pct"), ".2f", " %"),
                     "reference" if ref else f"{v['equivalent']} / {v['different']} / {v['inconclusive']} "
                                             f"({v['too_small']})",
                     "reference" if ref else shown_to_match(e)])
    out = [table(["engine", "pairs/s", "vs torch fp32", "records identical", "labels as torch fp32",
                  "cells equivalent / different / inconclusive (too few), overall and per group",
                  f"shown to match torch fp32 on {dev}?"],
                 rows)]
    if dig(bench, "notes"):
        out += ["", notes_text(bench)]
    return "\n".join(out)


def parity_cells(e: Any) -> dict[str, int]:
    """An engine's parity cells by verdict: its headline cells (the bench's verdicts) and, per ``--by`` column, each
    group's metrics -- of a category column only the group where it holds (its complement is nearly the whole set
    again) -- as ``{"equivalent": n, "different": n, "inconclusive": n, "too_small": n}``."""
    cells = {k: int(dig(e, "parity", "verdicts", k, default=0) or 0)
             for k in ("equivalent", "different", "inconclusive", "too_small")}
    for spec in (dig(e, "parity", "headline", "by") or {}).values():
        for g in dig(spec, "groups", default=[]) or []:
            if dig(spec, "kind") == "category" and str(dig(g, "value")) != "1":
                continue
            for m in (dig(g, "metrics") or {}).values():
                v = dig(m, "verdict")
                key = "too_small" if dig(m, "too_small") else v if v in cells else None
                if key == "too_small":
                    cells["inconclusive"] += 1
                if key is not None:
                    cells[key] += 1
    return cells


def cudagraph_targets(p: Any) -> str:
    """Issues 65 and 66's done-when, each from this check's own figures (a figure the check lacks: no row)."""
    rows: list[list[Any]] = []
    cg, benches = dig(p, "cudagraph") or {}, dig(p, "benches") or {}

    def line(what: str, value: Any, ok: bool | None) -> None:
        rows.append([what, value, "–" if ok is None else ("met" if ok else "**not met**")])

    for shape in ("base", "large"):
        bound = dig(p, "bounds", "shapes", shape, "decoder_bf16", "times_floor")
        fused = dig(cg, "fused-step", "shapes", shape) or {}
        best = min((m["times_floor_at_copy_bandwidth"] for m in fused.values()
                    if isinstance(m, dict) and m.get("precision") == "bf16" and m.get("times_floor_at_copy_bandwidth")),
                   default=None)
        x = bound if bound is not None else best
        if x is not None:
            src = "bounds step" if bound is not None else "fused-step, the faster mode"
            line(f"{shape} shapes: the bf16 decoder step (160 rows) ≤ 3× its bandwidth floor", f"{x:.1f}× ({src})",
                 x <= 3)
    for key, bar in (("real", 400.0), ("large", 140.0)):
        bf = _engine_row(benches.get(key), "cudagraph:bf16")
        ref = next((e for e in dig(benches, key, "bench", "engines") or [] if e.reference and e.status == "ok"), None)
        rate = dig(bf, "speed", "end_to_end", "examples_per_s")
        if rate is None:
            continue
        walls = dig(ref, "speed", "end_to_end", "wall_s") or []
        spread = (f"; torch fp32 eager's runs {min(walls):.2f}-{max(walls):.2f} s (median "
                  f"{statistics.median(walls):.2f})" if walls else "")
        inter = "interleaved" if dig(benches, key, "bench", "config", "interleave") else "one engine after another"
        line(f"{'base' if key == 'real' else 'large'} shapes: the bf16 loop ≥ {bar:.0f} examples/s",
             f"{rate:.0f} examples/s ({inter}{spread})", rate >= bar)
    for shape in ("base", "large"):
        fp, eager = (dig(p, "bounds", "shapes", shape, k, "median_ms") for k in ("classifier_fp32", "classifier_torch_fp32"))
        if fp and eager:
            line(f"{shape} shapes: the fp32 classifier ≥ 1.0× eager at every bucket",
                 f"{eager / fp:.2f}× at the largest bucket (the other buckets not timed apart)", None)
    mini = _engine_row({"bench": dig(p, "parity_scale")}, "cudagraph:fp32")
    x = dig(mini, "speed", "speedup", "end_to_end")
    if x is not None:
        line("mini models: the fp32 classifier ≥ 1.0× eager at every bucket",
             f"{x:.2f}× over the parity-scale bench's whole call (every bucket together)",
             False if x < 1 else None)  # slower as a whole: slower at some bucket; faster: not each bucket known
    q = dig(cg, "quantised") or {}
    for prec, x in (q.get("speedup_vs_bf16") or {}).items():
        m = dig(q, "precisions", prec) or {}
        diff = m.get("alone_vs_call_max_abs_diff")
        line(f"the {prec} classifier ≥ 1.6× cudagraph bf16 at the largest bucket, batch-invariant to the bit",
             f"{x:.2f}×; alone vs in one call {f(diff, '.3g')}", x >= 1.6 and diff == 0)
    bench = dig(p, "parity_scale")
    if bench is not None:
        n = dig(bench, "data", "examples")
        for label in ("cudagraph:bf16", "cudagraph:fp8", "cudagraph:int8"):
            row = _engine_row({"bench": bench}, label)
            if dig(row, "parity", "verdicts") is None:
                continue
            cells = parity_cells(row)
            eq, diff = cells["equivalent"], cells["different"]
            agree = dig(row, "parity", "headline", "records", "label_agreement_pct")
            text = (f"{eq} equivalent, {diff} different of {eq + diff + cells['inconclusive']} cells (overall and per "
                    f"group); labels {f(agree, '.2f', ' %')} as torch fp32")
            if label == "cudagraph:bf16":
                line(f"{label} against torch fp32 on the trained mini models, ≥ 1,000 pairs ({n}): ≥ 10 cells "
                     "equivalent, none different", text, (n or 0) >= 1000 and eq >= 10 and diff == 0)
            else:
                line(f"{label} beside it (shown, no bar)", text, None)
    return table(["target", "measured", ""], rows) if rows else ""


def gpu_check(doc: ResultFile) -> str:
    return gpu_check_body(doc.payload)


NO_GPU = ("Not measured: no GPU has been lent to this project yet (no `gpu_check` result file of a CUDA device in "
          "`{label}`). docs/stack.md, \"GPU\", gives the one command that measures it on a lent GPU.")

SECTIONS = (
    Section("6/gpu", "`scripts/gpu_check.sh`", "a GPU check", gpu_files, 10, render=gpu_check, file_title=gpu_title,
            not_measured=lambda label: NO_GPU.format(label=label)),
)
