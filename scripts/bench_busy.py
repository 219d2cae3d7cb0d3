#!/usr/bin/env python
"""How long the default ``breaknli-fast run`` takes on a busy machine.

A script, not a bench option: it times separate `breaknli-fast run` processes started side by side.

For each engine (``--engines``, ``ENGINE[:PRECISION]``), the default run (shipped mini models,
embedded sample, ``--limit`` examples) is timed as a subprocess into a fresh ``--out``:

* **alone**: one process;
* **contended**: two identical processes started at the same moment, each into its own ``--out``.

The package sets ``OMP_WAIT_POLICY=PASSIVE`` unless the user set it (breaknli_fast/__init__.py), so
the engines run under that default here (the variable is removed from their environment); with
``--active`` (on by default) the torch engine is timed once more with ``OMP_WAIT_POLICY=ACTIVE`` in
the environment, which shows what torch's OpenMP threads do without that default.

Recorded per process: wall seconds (start to exit, model loading included), the loop's seconds
(``throughput.wall_seconds`` of its report.json), peak RSS and CPU seconds (the kernel's rusage),
the exit code; per contended process, whether its report.json metrics (and funnel) are identical to
those of the run alone. A warm-up run per engine (4 examples, not timed) fills the export cache
first, so that no timed process exports.

    python scripts/bench_busy.py --engines torch,ort --limit 1000 --result benchmarks/results/busy.json

Arguments after ``--`` go to every ``breaknli-fast run``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from provenance import Recorder, load_average, run_timed, script_command, tail

WARMUP_LIMIT = 4


def parse_engines(text: str) -> list[tuple[str, str | None]]:
    out = []
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        engine, _, precision = item.partition(":")
        if engine not in ("torch", "ort", "tensorrt", "auto"):
            raise SystemExit(f"unknown engine {engine!r} in --engines (torch, ort, tensorrt, auto)")
        out.append((engine, precision or None))
    if not out:
        raise SystemExit("--engines names no engine")
    return out


def variants(engines: list[tuple[str, str | None]], active: bool) -> list[dict[str, Any]]:
    vs = []
    for engine, precision in engines:
        label = engine + (f":{precision}" if precision else "")
        vs.append({"label": label, "engine": engine, "precision": precision, "env": {}})
        if engine == "torch" and active:
            vs.append({"label": f"{label} OMP_WAIT_POLICY=ACTIVE", "engine": engine, "precision": precision,
                       "env": {"OMP_WAIT_POLICY": "ACTIVE"}})
    return vs


def run_args(v: dict[str, Any], limit: int, extra: list[str]) -> list[str]:
    args = ["run", "--limit", str(limit), "--engine", v["engine"]]
    if v["precision"]:
        args += ["--precision", v["precision"]]
    return args + list(extra)


def environment(v: dict[str, Any]) -> dict[str, str]:
    env = {k: x for k, x in os.environ.items() if k != "OMP_WAIT_POLICY"}
    return {**env, "HF_HUB_OFFLINE": "1", **v["env"]}


def effective_wait_policy(v: dict[str, Any]) -> str | None:
    """OMP_WAIT_POLICY as a breaknli-fast process started with this variant's environment sees it."""
    code = "import os, breaknli_fast; print(os.environ.get('OMP_WAIT_POLICY', ''))"
    proc = subprocess.run([sys.executable, "-c", code], env=environment(v), capture_output=True, text=True)
    return proc.stdout.strip() or None if proc.returncode == 0 else None


def report_of(out: Path) -> dict[str, Any] | None:
    try:
        return json.loads((out / "report.json").read_text())
    except (OSError, json.JSONDecodeError):
        return None


def start_processes(v: dict[str, Any], limit: int, extra: list[str], outs: list[Path], timeout: float | None) -> list[dict]:
    """len(outs) identical runs, started together (a barrier), each into its own fresh folder."""
    for out in outs:
        if out.exists():
            shutil.rmtree(out)
        out.parent.mkdir(parents=True, exist_ok=True)
    barrier = threading.Barrier(len(outs))
    results: list[dict[str, Any]] = [{} for _ in outs]

    def one(i: int, out: Path) -> None:
        cmd = [sys.executable, "-m", "breaknli_fast.cli", *run_args(v, limit, extra), "--out", str(out)]
        results[i] = run_timed(cmd, env=environment(v), log=out.with_name(out.name + ".log"), timeout=timeout,
                               start=barrier)

    threads = [threading.Thread(target=one, args=(i, out)) for i, out in enumerate(outs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for res, out in zip(results, outs):
        rep = report_of(out) if res["returncode"] == 0 else None
        res["loop_seconds"] = rep["throughput"]["wall_seconds"] if rep else None
        res["examples"] = rep["throughput"]["examples"] if rep else None
        res["_report"] = rep
        if res["returncode"] != 0:
            why = "timed out" if res["timed_out"] else f"exit code {res['returncode']}"
            res["error"] = f"{why}: {tail(out.with_name(out.name + '.log'), 300)}"
            print(f"  {v['label']} -> {out.name}: {res['error']}", file=sys.stderr)
    return results


def same_results(a: dict[str, Any] | None, b: dict[str, Any] | None) -> bool | None:
    if a is None or b is None:
        return None
    return a.get("metrics") == b.get("metrics") and a.get("funnel") == b.get("funnel")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--engines", default="torch,ort", help="ENGINE[:PRECISION], comma-separated")
    ap.add_argument("--limit", type=int, default=1000, help="examples of the embedded sample (breaknli-fast run's default)")
    ap.add_argument("--active", action=argparse.BooleanOptionalAction, default=True,
                    help="also time torch with OMP_WAIT_POLICY=ACTIVE")
    ap.add_argument("--timeout", type=float, default=3600.0, help="seconds after which a process is stopped (recorded)")
    ap.add_argument("--work", type=Path, default=None, help="folder of the run directories (default: a temporary folder)")
    ap.add_argument("--result", type=Path, default=None, help="write a result file (with provenance) here")
    ap.add_argument("extra", nargs="*", help="further arguments of breaknli-fast run (after --)")
    args = ap.parse_args(argv)
    vs = variants(parse_engines(args.engines), args.active)
    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-busy-")
        work = Path(tmp.name)
    else:
        work = args.work
    rec = Recorder("busy", script_command("bench_busy.py", argv))

    def folder(v: dict[str, Any], name: str) -> Path:
        slug = v["label"].replace(":", "-").replace("=", "-").replace(" ", "-")
        return work / slug / name

    done_warm = set()
    for v in vs:  # fills the export cache: no timed process exports, and no two export at once
        key = (v["engine"], v["precision"])
        if key in done_warm:
            continue
        done_warm.add(key)
        print(f"warm-up {v['label']}", file=sys.stderr, flush=True)
        res = start_processes(v, WARMUP_LIMIT, args.extra, [folder(v, "warmup")], args.timeout)[0]
        if res["returncode"] != 0:
            raise SystemExit(f"the warm-up run of {v['label']} failed: {res.get('error')}")

    rows = []
    for v in vs:
        row: dict[str, Any] = {"label": v["label"], "engine": v["engine"], "precision": v["precision"],
                               "env": v["env"], "omp_wait_policy_in_process": effective_wait_policy(v),
                               "command": " ".join([f"{k}={x}" for k, x in v["env"].items()]
                                                   + [shlex.join(["breaknli-fast", *run_args(v, args.limit, args.extra),
                                                                  "--out", "DIR"])])}
        for scenario, names in (("alone", ["alone"]), ("contended", ["contended-a", "contended-b"])):
            print(f"{v['label']}: {scenario}", file=sys.stderr, flush=True)
            load = load_average()
            procs = start_processes(v, args.limit, args.extra, [folder(v, n) for n in names], args.timeout)
            row[scenario] = {"load_average_before": load, "processes": procs}
        quiet = row["alone"]["processes"][0]
        for p in row["contended"]["processes"]:
            p["same_metrics_as_alone"] = same_results(p["_report"], quiet["_report"])
        for scenario in ("alone", "contended"):
            for p in row[scenario]["processes"]:
                del p["_report"]
        ok = [p for p in row["contended"]["processes"] if p["returncode"] == 0]
        if quiet["returncode"] == 0 and len(ok) == 2:
            row["slowdown_wall"] = round(max(p["wall_seconds"] for p in ok) / quiet["wall_seconds"], 2)
            row["slowdown_loop"] = round(max(p["loop_seconds"] for p in ok) / quiet["loop_seconds"], 2)
        else:
            row["slowdown_wall"] = row["slowdown_loop"] = None
        rows.append(row)
        c = row["contended"]["processes"]
        print(f"{v['label']}: alone {quiet['wall_seconds']:.1f} s (loop {quiet['loop_seconds']}); contended "
              + ", ".join(f"{p['wall_seconds']:.1f} s (loop {p['loop_seconds']})" for p in c), file=sys.stderr, flush=True)

    payload = {"limit": args.limit, "extra_args": args.extra, "timeout_s": args.timeout, "warmup_limit": WARMUP_LIMIT,
               "variants": rows}
    print(json.dumps([{k: r[k] for k in ("label", "slowdown_wall", "slowdown_loop")} for r in rows], indent=1))
    if args.result:
        rec.save(args.result, payload)
    if tmp is not None:
        tmp.cleanup()
    return 0 if all(p["returncode"] == 0 for r in rows for s in ("alone", "contended") for p in r[s]["processes"]) else 1


if __name__ == "__main__":
    sys.exit(main())
