#!/usr/bin/env bash
# The GPU check in one command, for a machine with a CUDA GPU and no network (docs/stack.md, "GPU").
#
#   scripts/gpu_check.sh --wheels DIR [--out DIR] [--limit N] [--device cuda|cpu] [--budget S] [-- RUN_ARGS...]
#
# 1. install: with --wheels, a virtual environment in OUT/venv that sees the machine's own packages
#    (--system-site-packages: the torch and transformers that are there) gets this checkout and what it lacks
#    from the wheelhouse, offline (pip --no-index --find-links DIR; the folder comes from scripts/make_wheelhouse.sh);
#    onnxruntime-gpu too when its wheel is in the folder. Without --wheels the current Python runs as it is.
# 2. the environment: breaknli-fast env, pip list, nvidia-smi (OUT/env.*).
# 3. the CUDA-marked tests (pytest -m cuda tests/test_cuda.py; on a machine without a GPU they skip, saying why).
# 4. the loop on the same examples and seeds: a CPU torch fp32 reference computed on the spot, then torch fp32
#    and bf16 on --device, and ort fp32 on --device where ONNX Runtime has the CUDA provider and optimum is
#    installed (Flan-T5's export); each run's directory under OUT/runs.
# 5. parity of every device run with the reference (scripts/compare_runs.py: labels, samples, breakage cells
#    with the bench's verdicts) and one result file with provenance, OUT/gpu-check.json (scripts/provenance.py),
#    plus OUT/summary.md: what ran, what was skipped and why.
#
# --device cpu runs every step on the CPU (a dry run: the test-suite runs it with a small --limit). --budget
# (seconds, default 540) bounds the whole check: a step that would start after it is skipped and said so, and each
# command gets only the time that is left. Arguments after -- go to every `breaknli-fast run` (e.g. --k 8).
set -uo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
WHEELS=""
OUT=""
LIMIT=200
DEVICE=cuda
BUDGET=540
PY="${PYTHON:-python3}"
RUN_ARGS=()
ARGS="$*"
while [ $# -gt 0 ]; do
  case "$1" in
    --wheels) WHEELS="$2"; shift 2 ;;
    --out) OUT="$2"; shift 2 ;;
    --limit) LIMIT="$2"; shift 2 ;;
    --device) DEVICE="$2"; shift 2 ;;
    --budget) BUDGET="$2"; shift 2 ;;
    --python) PY="$2"; shift 2 ;;
    -h|--help) sed -n '2,24p' "$0"; exit 0 ;;
    --) shift; RUN_ARGS=("$@"); break ;;
    *) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
case "$DEVICE" in cpu|cuda|cuda:*) ;; *) echo "error: --device must be cpu or cuda[:N], not $DEVICE" >&2; exit 2 ;; esac
OUT="${OUT:-$ROOT/runs/gpu-check-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT/runs" || { echo "error: cannot create $OUT" >&2; exit 2; }
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/gpu_check.log"
SUMMARY="$OUT/summary.md"
STEPS="$OUT/steps.tsv"
: > "$LOG"
: > "$STEPS"
T0=$(date +%s)
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export BREAKNLI_FAST_CACHE="$OUT/cache"   # exports of this check stay in its folder

say() { echo "[gpu_check $(( $(date +%s) - T0 ))s] $*" | tee -a "$LOG"; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
# record STEP STATUS DETAIL: one line of steps.tsv (status: ok, failed, skipped)
record() { printf '%s\t%s\t%s\n' "$1" "$2" "$3" >> "$STEPS"; say "$1: $2${3:+ ($3)}"; }
# step NAME MIN_SECONDS CMD...: run CMD with the time that is left, or skip it when less than MIN_SECONDS are left
step() {
  local name="$1" need="$2"; shift 2
  local rest; rest=$(left)
  if [ "$rest" -lt "$need" ]; then record "$name" skipped "budget: ${rest}s left of ${BUDGET}s, needs about ${need}s"; return 3; fi
  say "$name: $*"
  timeout --kill-after=10 "$rest" "$@" >> "$LOG" 2>&1
  local rc=$?
  if [ $rc -eq 0 ]; then record "$name" ok ""; elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" failed "stopped at the budget (${BUDGET}s)"; else record "$name" failed "exit $rc, see gpu_check.log"; fi
  return $rc
}

cd "$ROOT"
say "checkout $ROOT, output $OUT, device $DEVICE, limit $LIMIT, budget ${BUDGET}s"

# 1. install
if [ -n "$WHEELS" ]; then
  if [ ! -d "$WHEELS" ]; then echo "error: --wheels $WHEELS is not a folder" >&2; exit 2; fi
  WHEELS="$(cd "$WHEELS" && pwd)"
  if step install-venv 5 "$PY" -m venv --system-site-packages "$OUT/venv"; then
    PY="$OUT/venv/bin/python"
    step install-package 30 "$PY" -m pip install --no-index --find-links "$WHEELS" -e "$ROOT[onnx,test]"
    if ls "$WHEELS"/onnxruntime_gpu-*.whl > /dev/null 2>&1; then
      step install-onnxruntime-gpu 20 "$PY" -m pip install --no-index --find-links "$WHEELS" onnxruntime-gpu
    else
      record install-onnxruntime-gpu skipped "no onnxruntime_gpu wheel in $WHEELS"
    fi
  else  # no venv module (python3-venv): this checkout on the path, with the packages the machine has
    export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
    record install-package skipped "no virtual environment could be made with $PY: the machine's packages as they are"
  fi
else
  record install skipped "no --wheels: the packages of $PY as they are"
  export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"
fi

# 2. the environment
if "$PY" -m breaknli_fast.cli env --json > "$OUT/env.json" 2>> "$LOG"; then record env ok "env.json"; else record env failed "breaknli-fast env, see gpu_check.log"; fi
"$PY" -m pip list > "$OUT/pip-list.txt" 2>> "$LOG" || true
if command -v nvidia-smi > /dev/null 2>&1; then nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1 || true; else echo "nvidia-smi not found" > "$OUT/nvidia-smi.txt"; fi
PROBE='import importlib.util as u
def has(m):
    try:
        return u.find_spec(m) is not None
    except (ImportError, ValueError):
        return False
import torch
ort = 0
if has("onnxruntime"):
    import onnxruntime
    ort = int("CUDAExecutionProvider" in onnxruntime.get_available_providers())
print(int(torch.cuda.is_available()), ort, int(has("optimum") and has("optimum.onnxruntime")))'
read -r HAS_CUDA ORT_CUDA OPTIMUM <<< "$("$PY" -c "$PROBE" 2>> "$LOG" || echo "0 0 0")"
say "torch sees a CUDA GPU: $HAS_CUDA; ONNX Runtime CUDA provider: $ORT_CUDA; optimum: $OPTIMUM"
if [ "$DEVICE" != cpu ] && [ "$HAS_CUDA" != 1 ]; then
  record device failed "--device $DEVICE but torch sees no CUDA GPU (see env.json)"
fi

# 3. the CUDA-marked tests
step cuda-tests 30 "$PY" -m pytest -q -p no:cacheprovider -m cuda -rs tests/test_cuda.py --junitxml "$OUT/pytest-cuda.xml"

# 4. the loop: the CPU reference, then the device runs
COMMON=(run --limit "$LIMIT" --seed 0 --overwrite "${RUN_ARGS[@]}")
RUNS=()
REF="$OUT/runs/reference-cpu-torch-fp32"
step reference-cpu-torch-fp32 30 "$PY" -m breaknli_fast.cli "${COMMON[@]}" --engine torch --precision fp32 --device cpu --out "$REF"
for prec in fp32 bf16; do
  name="device-${DEVICE%%:*}-torch-$prec"
  if step "$name" 20 "$PY" -m breaknli_fast.cli "${COMMON[@]}" --engine torch --precision "$prec" --device "$DEVICE" --out "$OUT/runs/$name"; then RUNS+=("$OUT/runs/$name"); fi
done
if [ "$DEVICE" = cpu ]; then
  record "device-ort-fp32" skipped "--device cpu: the ort engine on the CPU is checked by the test-suite"
elif [ "$ORT_CUDA" != 1 ]; then
  record "device-ort-fp32" skipped "ONNX Runtime has no CUDA provider here (onnxruntime-gpu not installed: put its wheel in --wheels)"
elif [ "$OPTIMUM" != 1 ]; then
  record "device-ort-fp32" skipped "optimum-onnx is not installed (it needs transformers < 4.58): mini-t5 cannot be exported; ort CUDA is checked on mini-nli by tests/test_cuda.py"
else
  name="device-${DEVICE%%:*}-ort-fp32"
  if step "$name" 40 "$PY" -m breaknli_fast.cli "${COMMON[@]}" --engine ort --precision fp32 --device "$DEVICE" --out "$OUT/runs/$name"; then RUNS+=("$OUT/runs/$name"); fi
fi

# 5. parity with the reference, and the result file
if [ -f "$REF/samples.jsonl" ] && [ ${#RUNS[@]} -gt 0 ]; then
  step parity 5 "$PY" scripts/compare_runs.py "$REF" "${RUNS[@]}" --json "$OUT/parity.json"
else
  record parity skipped "no reference or no device run finished"
fi
"$PY" - "$OUT" "$DEVICE" "$LIMIT" "$BUDGET" "$(( $(date +%s) - T0 ))" "$ARGS" <<'EOF' >> "$LOG" 2>&1 || say "writing gpu-check.json failed (see gpu_check.log)"
import json, sys, time
from datetime import datetime, timedelta, timezone
from pathlib import Path
sys.path.insert(0, "scripts")
from provenance import Recorder

out, device, limit, budget, took = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
steps = [dict(zip(("step", "status", "detail"), line.split("\t", 2))) for line in (out / "steps.tsv").read_text().splitlines()]
def load(name):
    try:
        return json.loads((out / name).read_text())
    except (OSError, json.JSONDecodeError):
        return None
runs = {}
for d in sorted((out / "runs").iterdir()):
    rep, cfg = load(f"runs/{d.name}/report.json"), load(f"runs/{d.name}/config.json")
    if rep and cfg:
        runs[d.name] = {"engine": cfg["engine"], "throughput": rep.get("throughput"), "funnel": rep.get("funnel"),
                        "metrics": rep.get("metrics")}
tests = None
try:
    import xml.etree.ElementTree as ET
    s = ET.parse(out / "pytest-cuda.xml").getroot()
    s = s if s.tag == "testsuite" else s.find("testsuite")
    tests = {k: int(s.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
except Exception:
    pass
rec = Recorder("gpu_check", ("scripts/gpu_check.sh " + sys.argv[6]).strip())
# the check started before this script: its date and duration are the whole check's
rec.date = (datetime.now(timezone.utc) - timedelta(seconds=took)).isoformat(timespec="seconds")
rec._t0 = time.perf_counter() - took
rec.save(out / "gpu-check.json", {"device": device, "limit": limit, "budget_s": budget, "steps": steps,
                                   "environment": load("env.json"), "cuda_tests": tests, "runs": runs,
                                   "parity": load("parity.json")})
EOF

{
  echo "# GPU check"
  echo
  echo "- checkout: \`$ROOT\`; device: \`$DEVICE\`; examples: $LIMIT; budget: ${BUDGET}s; took $(( $(date +%s) - T0 ))s"
  echo "- files: gpu-check.json (result file with provenance), parity.json, env.json, pip-list.txt, nvidia-smi.txt, runs/, gpu_check.log"
  echo
  echo "| step | status | detail |"
  echo "|---|---|---|"
  while IFS=$'\t' read -r s st d; do echo "| $s | $st | $d |"; done < "$STEPS"
  if [ -f "$OUT/parity.json" ]; then
    echo
    echo "## Parity with the CPU reference"
    echo
    "$PY" -c "
import json, sys
sys.path.insert(0, 'scripts')
from compare_runs import summary_line
d = json.load(open('$OUT/parity.json'))
for run, res in d['runs'].items():
    print('- ' + summary_line(run.rsplit('/', 1)[-1], res))
" 2>> "$LOG"
  fi
} > "$SUMMARY"
cat "$SUMMARY"
if grep -q $'\tfailed\t' "$STEPS"; then exit 1; fi
exit 0
