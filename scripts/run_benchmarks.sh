#!/usr/bin/env bash
# Every measurement behind BENCHMARKS.md: the entries of benchmarks/suite.toml in order, each writing its result
# file(s) into benchmarks/results; then scripts/make_benchmarks.py writes BENCHMARKS.md (and the README's parity
# table) from those files. A script, not a bench option: it runs many processes in sequence (the suite's entries,
# then the renderer), each a separate measurement with its own provenance.
#
#   scripts/run_benchmarks.sh            # sized for a few hours on 2 quiet cores (each entry's minutes: --list)
#   scripts/run_benchmarks.sh --smoke    # tiny sizes, to check the pipeline (figures meaningless; written to $WORK)
#   scripts/run_benchmarks.sh --list     # the entries, their minutes, requirements and result files
#
# Run it on a quiet machine: every result file records the load average before and after.
# Environment: RESULTS (result folder, default benchmarks/results; with --smoke $WORK/results), WORK (scratch: run
# directories, graphs; default a temporary folder), OUT_MD (default BENCHMARKS.md; with --smoke $WORK/BENCHMARKS.md),
# README (whose parity table is rewritten; default README.md; with --smoke a copy in $WORK), PYTHON (default .venv/bin/python), PYTHON_TF5 (the transformers 5 venv's interpreter,
# default .venv-compat/bin/python), ONLY / SKIP (space-separated entry names: run only these / all but these;
# make-benchmarks always runs), SUITE (the suite file, default benchmarks/suite.toml), and any size variable of the suite by its upper-case name (e.g.
# LG_LOOP_SCENARIOS=single-stream,multi-stream,offline, LG_GEN_QUERIES=256).
# An entry whose requirements are missing (an extra, CUDA, the transformers 5 venv) is skipped, saying why. An
# entry that fails is reported and the others still run (the exit code is then 1); a result file it would have
# replaced stays, with its own date and commit.

set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1

SMOKE=()
case "${1:-}" in
    --smoke) SMOKE=(--smoke) ;;
    --list) exec "${PYTHON:-.venv/bin/python}" scripts/suite.py --list ;;
    "") ;;
    *) echo "usage: $0 [--smoke | --list]" >&2; exit 2 ;;
esac
PY=${PYTHON:-.venv/bin/python}
W=${WORK:-$(mktemp -d -t breaknli-bench-XXXXXX)}
if [ ${#SMOKE[@]} -gt 0 ]; then
    # smoke figures mean nothing: into the scratch folder, never over the committed results, BENCHMARKS.md or README
    R=${RESULTS:-$W/results}
    OUT_MD=${OUT_MD:-$W/BENCHMARKS.md}
    if [ -z "${README:-}" ]; then README=$W/README.md; cp README.md "$README"; fi
    MB_SMOKE=(--smoke)
else
    R=${RESULTS:-benchmarks/results}
    OUT_MD=${OUT_MD:-BENCHMARKS.md}
    MB_SMOKE=()
fi
mkdir -p "$R" "$W"

STATUS=0
# the suite's entries (ONLY / SKIP read from the environment); the runner reports each and goes on after a failure
"$PY" scripts/suite.py ${SMOKE[@]+"${SMOKE[@]}"} --python "$PY" --results "$R" --work "$W" || STATUS=1

echo "== make-benchmarks: $PY scripts/make_benchmarks.py --results $R --out $OUT_MD --readme ${README:-README.md}" >&2
if "$PY" scripts/make_benchmarks.py ${MB_SMOKE[@]+"${MB_SMOKE[@]}"} --results "$R" --out "$OUT_MD" --readme "${README:-README.md}"; then
    echo "== make-benchmarks: PASS" >&2
else
    echo "== make-benchmarks: FAIL" >&2
    STATUS=1
fi
exit $STATUS
