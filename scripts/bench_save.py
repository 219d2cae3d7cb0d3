#!/usr/bin/env python
"""Run ``breaknli-fast bench`` and save its ``bench.json`` as a result file (with provenance; kind ``bench``, or
``loadgen`` for ``bench --scenario``).

A script, not a bench option: it records provenance around a bench process (commit, machine, load average before and
after).

The bench runs as a subprocess, exactly as a user runs it, into ``--work`` (default: a temporary
folder); its ``bench.json`` becomes the result file's payload, and the command, date, commit,
machine and the load average before and after the bench are recorded around it.

    python scripts/bench_save.py --result benchmarks/results/bench-mini.json -- \\
        --engines torch:fp32,ort:fp32,ort:int8 --limit 200

Everything after ``--`` is passed to ``breaknli-fast bench`` (``--out`` is set by this script).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

from provenance import Recorder, env_settings, script_command


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--result", type=Path, required=True, help="the result file to write")
    ap.add_argument("--work", type=Path, default=None, help="the bench's --out folder (default: a temporary folder)")
    ap.add_argument("bench_args", nargs=argparse.REMAINDER, help="arguments of breaknli-fast bench, after --")
    args = ap.parse_args(argv)
    bench_args = args.bench_args[1:] if args.bench_args[:1] == ["--"] else args.bench_args
    if any(a == "--out" or a.startswith("--out=") or a == "-o" for a in bench_args):
        raise SystemExit("--out is set by bench_save.py (see --work)")
    tmp = None
    if args.work is None:
        tmp = tempfile.TemporaryDirectory(prefix="bench-save-")
        work = Path(tmp.name)
    else:
        work = args.work
    out = work / "bench"
    cmd = [sys.executable, "-m", "breaknli_fast.cli", "bench", *bench_args, "--out", str(out), "--no-plot"]
    rec = Recorder("bench", script_command("bench_save.py", argv))
    proc = subprocess.run(cmd, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    if not (out / "bench.json").exists():  # --strict exits 1 with a saved bench: that one is kept
        raise SystemExit(f"breaknli-fast bench failed ({proc.returncode}): {shlex.join(cmd)}")
    data = json.loads((out / "bench.json").read_text())
    if data.get("kind") == "scenarios":  # bench --scenario: LoadGen's scenarios, a kind of its own
        rec.kind = "loadgen"
    data["command"] = " ".join([f"{k}={v}" for k, v in env_settings().items()] + [shlex.join(["breaknli-fast", "bench", *bench_args])])
    rec.save(args.result, data)
    if tmp is not None:
        tmp.cleanup()
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main())
