#!/usr/bin/env bash
# The GPU check in one call, for a lent machine with a CUDA GPU and no network (docs/stack.md, "GPU"):
# A script, not a bench option: it runs many steps in one time budget on a lent machine (scripts/gpu_check.py).
#
#   BREAKNLI_FAST_COMMIT=<sha> timeout 540 bash scripts/gpu_check.sh --out "$OUT"
#
# Nothing is installed: the machine's own Python ($PYTHON, else python3) runs this checkout from PYTHONPATH.
# Every step has a hard time cap inside --budget (default 480 s); at most 8 files land in --out (default $OUT
# when set). scripts/gpu_check.py does the work; `bash scripts/gpu_check.sh --help` lists the steps and options.
# --device cpu is the dry run that tests/test_gpu_check.py runs.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" "$ROOT/scripts/gpu_check.py" "$@"
