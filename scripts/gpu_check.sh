#!/usr/bin/env bash
# The GPU check in one call, for a lent machine with a CUDA GPU and no network (docs/stack.md, "GPU"):
# A script, not a bench option: the GPU image's launcher, which runs this checkout from PYTHONPATH with the machine's
# own Python ($PYTHON, else python3), nothing installed; the check itself is the package's gpu-check measurement.
#
#   BREAKNLI_FAST_COMMIT=<sha> timeout 540 bash scripts/gpu_check.sh --out "$OUT"
#
# Every step has a hard time cap inside --budget (default 480 s); at most 8 files land in --out (default $OUT when
# set). `bash scripts/gpu_check.sh --help` lists the options; the steps are in
# breaknli_fast/suite/measurements/gpu_steps.py. --device cpu is the dry run that tests/test_gpu_check.py runs.
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
exec "${PYTHON:-python3}" -m breaknli_fast.suite measure gpu-check "$@"
