#!/usr/bin/env bash
# A wheelhouse for scripts/gpu_check.sh on a machine without network (docs/stack.md, "GPU"): run it where PyPI is
# reachable, copy the folder to the GPU machine, then `scripts/gpu_check.sh --wheels DIR` there.
#
#   scripts/make_wheelhouse.sh DIR [--python 3.12] [--platform manylinux_2_28_x86_64] [--ort-gpu VERSION]
#                                  [--skip NAME,NAME...] [--max-mib N]
#
# It downloads, as binary wheels for the target Python and platform, everything this package and its onnx and
# test extras need except torch and its CUDA libraries (the GPU machine's own torch is used: gpu_check.sh installs
# onto it), plus setuptools and wheel (to install this checkout offline). --ort-gpu VERSION adds
# onnxruntime-gpu (about 256 MB for 1.31: too large where the folder must travel in under 64 MiB). --skip drops
# distributions the target already has (for example transformers,tokenizers,huggingface-hub,numpy) to keep the
# folder small: pip on the target then uses its own copies. Prints the folder's size; --max-mib fails when it is
# larger.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
DIR=""
PYVER=3.12
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64)
ORT_GPU=""
SKIP=""
MAX_MIB=""
PIP="${PIP:-python3 -m pip}"
while [ $# -gt 0 ]; do
  case "$1" in
    --python) PYVER="$2"; shift 2 ;;
    --platform) PLATFORMS=("$2"); shift 2 ;;
    --ort-gpu) ORT_GPU="$2"; shift 2 ;;
    --skip) SKIP="$2"; shift 2 ;;
    --max-mib) MAX_MIB="$2"; shift 2 ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
    -*) echo "error: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) DIR="$1"; shift ;;
  esac
done
[ -n "$DIR" ] || { echo "error: give the wheelhouse folder (see --help)" >&2; exit 2; }
mkdir -p "$DIR"
ABI="cp${PYVER/./}"

# the requirements of the package and its onnx + test extras, without torch (read from pyproject.toml)
REQS="$DIR/requirements.txt"
python3 - "$ROOT/pyproject.toml" > "$REQS" <<'EOF'
import re, sys
try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib
p = tomllib.load(open(sys.argv[1], "rb"))["project"]
reqs = list(p["dependencies"]) + p["optional-dependencies"]["onnx"] + p["optional-dependencies"]["test"]
for r in reqs:
    if re.match(r"^torch\b", r):
        continue  # the target's own torch
    print(r)
print("setuptools>=68")
print("wheel")
EOF
[ -n "$ORT_GPU" ] && echo "onnxruntime-gpu==$ORT_GPU" >> "$REQS"
echo "requirements ($REQS):"; sed 's/^/  /' "$REQS"

PLAT_ARGS=()
for p in "${PLATFORMS[@]}"; do PLAT_ARGS+=(--platform "$p"); done
# binary wheels only, for the target interpreter; the resolver's closure never includes torch (nothing here
# depends on it but the package itself, whose requirement the target's torch satisfies)
$PIP download --only-binary=:all: --python-version "$PYVER" --implementation cp --abi "$ABI" --abi abi3 --abi none \
  "${PLAT_ARGS[@]}" --platform any -r "$REQS" -d "$DIR"

if [ -n "$SKIP" ]; then
  IFS=',' read -ra NAMES <<< "$SKIP"
  for n in "${NAMES[@]}"; do
    norm=$(echo "$n" | tr '[:upper:]-' '[:lower:]_')
    for f in "$DIR"/*.whl; do
      base=$(basename "$f" | cut -d- -f1 | tr '[:upper:]-' '[:lower:]_')
      if [ "$base" = "$norm" ]; then echo "skip $(basename "$f")"; rm -f "$f"; fi
    done
  done
fi
for f in "$DIR"/torch-*.whl "$DIR"/nvidia_*.whl "$DIR"/triton-*.whl; do
  [ -e "$f" ] && { echo "drop $(basename "$f") (the target's own torch stack is used)"; rm -f "$f"; }
done

MIB=$(( ($(du -sk "$DIR" | cut -f1) + 1023) / 1024 ))
echo "wheelhouse $DIR: $(ls "$DIR"/*.whl | wc -l) wheels, ${MIB} MiB"
if [ -n "$MAX_MIB" ] && [ "$MIB" -gt "$MAX_MIB" ]; then
  echo "error: ${MIB} MiB is more than --max-mib $MAX_MIB (largest wheels below; drop what the target has with --skip)" >&2
  ls -S "$DIR"/*.whl | head -8 | xargs -n1 du -h >&2
  exit 1
fi
