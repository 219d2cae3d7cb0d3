#!/usr/bin/env bash
# Every measurement behind BENCHMARKS.md, then the document: `breaknli-fast suite run` over the entries of
# benchmarks/suite.toml, then `breaknli-fast suite render` (BENCHMARKS.md and the README's parity table).
# A script, not a bench option: a wrapper of those two commands that reads its settings from the environment.
#
#   scripts/run_benchmarks.sh            # sized for a few hours on 2 quiet cores (each entry's minutes: --list)
#   scripts/run_benchmarks.sh --smoke    # tiny sizes, to check the pipeline (figures meaningless; written to $WORK)
#   scripts/run_benchmarks.sh --list     # the entries, their measurements, minutes, requirements and result files
#
# Run it on a quiet machine: every result file records the load average before and after.
# Environment: RESULTS (result folder, default benchmarks/results; with --smoke $WORK/results), WORK (scratch;
# default a temporary folder), OUT_MD (default BENCHMARKS.md; with --smoke $WORK/BENCHMARKS.md), README (whose parity
# table is rewritten; default README.md; with --smoke a copy in $WORK), PYTHON (default .venv/bin/python), PYTHON_TF5
# (the transformers 5 venv's interpreter, default .venv-compat/bin/python), ONLY / SKIP (entry names: run only these
# / all but these; the document is always rendered), SUITE (the suite file, default benchmarks/suite.toml), and any
# size variable of the suite by its upper-case name (e.g. LG_GEN_QUERIES=256).
# An entry whose requirements are missing is skipped, saying why; an entry that fails is reported and the others
# still run (the exit code is then 1); a result file it would have replaced stays, with its own date and commit.

set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1
PY=${PYTHON:-.venv/bin/python}
SUITE_ARGS=()
if [ -n "${SUITE:-}" ]; then SUITE_ARGS=(--suite-file "$SUITE"); fi

SMOKE=()
case "${1:-}" in
    --smoke) SMOKE=(--smoke) ;;
    --list) exec "$PY" -m breaknli_fast.suite list ${SUITE_ARGS[@]+"${SUITE_ARGS[@]}"} ;;
    "") ;;
    *) echo "usage: $0 [--smoke | --list]" >&2; exit 2 ;;
esac
W=${WORK:-$(mktemp -d -t breaknli-bench-XXXXXX)}
if [ ${#SMOKE[@]} -gt 0 ]; then
    # smoke figures mean nothing: into the scratch folder, never over the committed results, BENCHMARKS.md or README
    R=${RESULTS:-$W/results}
    OUT_MD=${OUT_MD:-$W/BENCHMARKS.md}
    if [ -z "${README:-}" ]; then README=$W/README.md; cp README.md "$README"; fi
else
    R=${RESULTS:-benchmarks/results}
    OUT_MD=${OUT_MD:-BENCHMARKS.md}
fi

STATUS=0
# shellcheck disable=SC2086 - ONLY is a list of entry names
"$PY" -m breaknli_fast.suite run ${ONLY:-} --skip "${SKIP:-}" ${SMOKE[@]+"${SMOKE[@]}"} --python "$PY" --results "$R" \
    --work "$W" ${SUITE_ARGS[@]+"${SUITE_ARGS[@]}"} || STATUS=1

echo "== render: $PY -m breaknli_fast.suite render --results $R --out $OUT_MD --readme ${README:-README.md}" >&2
if "$PY" -m breaknli_fast.suite render ${SMOKE[@]+"${SMOKE[@]}"} --results "$R" --out "$OUT_MD" \
        --readme "${README:-README.md}" ${SUITE_ARGS[@]+"${SUITE_ARGS[@]}"}; then
    echo "== render: PASS" >&2
else
    echo "== render: FAIL" >&2
    STATUS=1
fi
exit $STATUS
