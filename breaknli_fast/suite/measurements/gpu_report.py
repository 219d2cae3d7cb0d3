"""The GPU check's section of BENCHMARKS.md (6) and the body of its summary.md, from its typed payload
(:class:`~breaknli_fast.suite.measurements.gpu_check.GpuCheckPayload`): the benches on the GPU, the bounds, the
issue's targets from the check's own figures, the runs and their parity, the CUDA-marked tests.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from breaknli_fast.suite.base import Results, Section
from breaknli_fast.suite.format import blank, dig, f, table, yes_no
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


def gpu_check(doc: ResultFile) -> str:
    return gpu_check_body(doc.payload)


NO_GPU = ("Not measured: no GPU has been lent to this project yet (no `gpu_check` result file of a CUDA device in "
          "`{label}`). docs/stack.md, \"GPU\", gives the one command that measures it on a lent GPU.")

SECTIONS = (
    Section("6/gpu", "`scripts/gpu_check.sh`", "a GPU check", gpu_files, 10, render=gpu_check, file_title=gpu_title,
            not_measured=lambda label: NO_GPU.format(label=label)),
)
