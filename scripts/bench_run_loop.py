"""Time the full loop as a user runs it: ``breaknli-fast run`` once per engine, in rounds.

A script, not a bench option: it times whole `breaknli-fast run` processes as a user starts them.

Each run is a fresh process writing a fresh run directory (exports are cached beforehand by a
warm-up run per engine, not timed). Reported per engine: the loop's wall time from the run's
``report.json`` (model loading excluded) and the process wall time (included), median over the
rounds, with the per-stage seconds of the median run, and the speed-up over the first engine.

    python scripts/bench_run_loop.py --engines torch:fp32,ort:fp32,ort:int8 --limit 200 --rounds 3 \\
        --out runs/bench-loop

An engine may carry options of ``breaknli-fast run`` for itself only, as ``key=value`` after the
precision: ``torch:fp32:workers=2`` runs ``--engine torch --precision fp32 --workers 2``.

Writes ``loop.json`` and ``loop.md`` in ``--out`` (the run directories too, each with its log), and with
``--result FILE`` a result file with provenance (scripts/provenance.py). Each run's peak RSS and CPU
seconds come from the kernel's rusage of the process.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
from datetime import datetime, timezone
from pathlib import Path

from provenance import Recorder, run_timed, script_command, tail


def run_args(spec: str) -> list[str]:
    """``ENGINE:PRECISION[:key=value...]`` -> arguments of ``breaknli-fast run``; checked as ``breaknli-fast
    bench --engines`` checks its entries (``label=`` names nothing for ``run`` and is left out)."""
    from breaknli_fast.bench.specs import BenchSpecError, parse_engine

    try:
        parsed = parse_engine(spec)
    except BenchSpecError as e:
        raise SystemExit(str(e)) from None
    args = ["--engine", parsed.engine, "--precision", parsed.precision]
    for kv in spec.split(":")[2:]:  # the values as written, for the command line
        key, val = (x.strip() for x in kv.split("=", 1))
        if key != "label":
            args += [f"--{key.replace('_', '-')}", val]
    return args


def one_run(spec: str, limit: int, out: Path, extra: list[str]) -> dict:
    if out.exists():
        shutil.rmtree(out)
    cmd = [sys.executable, "-m", "breaknli_fast.cli", "run", "--limit", str(limit), *run_args(spec), "--out", str(out),
           *extra]
    log = out.with_name(out.name + ".log")
    proc = run_timed(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"}, log=log)
    if proc["returncode"] != 0:
        raise SystemExit(f"{spec} failed ({proc['returncode']}): {tail(log, 500)}")
    rep = json.loads((out / "report.json").read_text())
    t = rep["throughput"]
    return {"process_seconds": round(proc["wall_seconds"], 2), "loop_seconds": t["wall_seconds"], "stages": t["stage_seconds"],
            "peak_rss_mib": proc["peak_rss_mib"], "cpu_seconds": proc["cpu_seconds"],
            "examples": t["examples_this_invocation"], "classifier_pairs": t["classifier_pairs"],
            "generated_tokens": t["generated_tokens"],
            "overall_inequality": {mode: m["overall"].get("inequality") for mode, m in rep["metrics"].items()}}


def load_avg() -> float:
    try:
        return os.getloadavg()[0]
    except OSError:
        return float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default="torch:fp32,ort:fp32,ort:int8")
    ap.add_argument("--limit", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", type=Path, default=Path("runs/bench-loop"))
    ap.add_argument("--result", type=Path, default=None, help="also write a result file (with provenance) here")
    ap.add_argument("extra", nargs="*", help="further arguments for breaknli-fast run (after --)")
    args = ap.parse_args(argv)
    rec = Recorder("run_loop", script_command("bench_run_loop.py", argv))
    specs = [s.strip() for s in args.engines.split(",") if s.strip()]
    for spec in specs:
        run_args(spec)  # malformed specs stop here, before any run
    args.out.mkdir(parents=True, exist_ok=True)

    def folder(spec: str, tag: str) -> Path:
        return args.out / f"{spec.replace(':', '-').replace('=', '')}-{tag}"

    for spec in specs:  # warm-up: exports, caches
        one_run(spec, 4, folder(spec, "warm"), args.extra)
    runs: dict[str, list[dict]] = {spec: [] for spec in specs}
    loads = []
    for r in range(args.rounds):
        for spec in specs:
            loads.append(load_avg())
            res = one_run(spec, args.limit, folder(spec, f"r{r}"), args.extra)
            runs[spec].append(res)
            print(f"round {r + 1}/{args.rounds} {spec}: loop {res['loop_seconds']:.2f} s, "
                  f"process {res['process_seconds']:.2f} s", flush=True)
    summary = {}
    for name, rs in runs.items():
        med = sorted(rs, key=lambda x: x["loop_seconds"])[len(rs) // 2]
        summary[name] = {"loop_seconds_median": med["loop_seconds"],
                         "loop_seconds_all": [x["loop_seconds"] for x in rs],
                         "process_seconds_median": statistics.median(x["process_seconds"] for x in rs),
                         "peak_rss_mib_max": max(x["peak_rss_mib"] for x in rs),
                         "overall_inequality_identical": all(x["overall_inequality"] == rs[0]["overall_inequality"] for x in rs),
                         "stages_of_median_run": med["stages"], "examples": med["examples"],
                         "classifier_pairs": med["classifier_pairs"], "generated_tokens": med["generated_tokens"]}
    ref = summary[next(iter(summary))]["loop_seconds_median"]
    for s in summary.values():
        s["speedup_loop"] = round(ref / s["loop_seconds_median"], 2)
    result = {"command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
              "started": datetime.now(timezone.utc).isoformat(timespec="seconds"), "limit": args.limit,
              "rounds": args.rounds, "load_avg_1min": {"min": min(loads), "max": max(loads)},
              "cpu_count": os.cpu_count(), "engines": summary, "runs": runs}
    (args.out / "loop.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.result:
        rec.save(args.result, {k: v for k, v in result.items() if k not in ("command", "started", "cpu_count")})
    lines = ["| engine | loop s (median) | speed-up | process s | classify (p,h) s | generate s | relation s | evaluate s |",
             "|---|---|---|---|---|---|---|---|"]
    for name, s in summary.items():
        st = s["stages_of_median_run"]
        lines.append(f"| {name} | {s['loop_seconds_median']:.2f} | {s['speedup_loop']:.2f}× | "
                     f"{s['process_seconds_median']:.1f} | {st.get('classify_ph', 0):.2f} | {st.get('generate', 0):.2f} | "
                     f"{st.get('relation', 0):.2f} | {st.get('evaluate', 0):.2f} |")
    md = "\n".join(lines) + f"\n\n{args.limit} examples, {args.rounds} rounds, load {min(loads):.1f}–{max(loads):.1f}.\n"
    (args.out / "loop.md").write_text(md)
    print(md)


if __name__ == "__main__":
    main()
