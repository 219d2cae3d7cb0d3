#!/usr/bin/env bash
# Every measurement behind BENCHMARKS.md, in sequence, each writing one result file into
# benchmarks/results; then scripts/make_benchmarks.py writes BENCHMARKS.md from those files.
#
#   scripts/run_benchmarks.sh            # sized for about an hour on 2 quiet cores
#   scripts/run_benchmarks.sh --smoke    # tiny sizes, to check the pipeline (figures meaningless)
#
# Run it on a quiet machine: every result file records the load average before and after.
# Environment: RESULTS (result folder, default benchmarks/results), WORK (scratch: run directories,
# graphs; default a temporary folder), OUT_MD (default BENCHMARKS.md), README (whose parity table is rewritten;
# default README.md), PYTHON (default .venv/bin/python),
# ONLY / SKIP (space-separated step names: run only these / all but these; make-benchmarks always runs),
# LG_LOOP_SCENARIOS (the LoadGen scenarios of the generator role; see below).
# A step that fails is reported and the others still run (the exit code is then 1); a result file
# it would have replaced stays, with its own date and commit.

set -u
cd "$(dirname "$0")/.."
export HF_HUB_OFFLINE=1

SMOKE=0
[ "${1:-}" = "--smoke" ] && SMOKE=1
PY=${PYTHON:-.venv/bin/python}
R=${RESULTS:-benchmarks/results}
W=${WORK:-$(mktemp -d -t breaknli-bench-XXXXXX)}
OUT_MD=${OUT_MD:-BENCHMARKS.md}
mkdir -p "$R" "$W"

if [ "$SMOKE" = 1 ]; then
    BENCH_LIMIT=10; LOOP_LIMIT=10; LOOP_ROUNDS=1; BUSY_LIMIT=10; RW_LIMIT=4
    SHAPES_ARGS="--layers 2 --repeats 2 --warmup 1"; GEN_ARGS="--prompts 4 --k 4 --repeats 1"
    VARIANT_PAIRS=128; VARIANT_REPEATS=1; PARITY_ARGS="--n 50 --prompts 2 --k 4"; BASELINE_LIMIT=8
    BASELINE_ARGS="--gen-prompts 2 --k 4 --min-iterations 1 --min-seconds 0"
    REAL_GEN_ARGS="--prompts 2 --k 2 --max-new-tokens 4 --warmup 0 --min-iterations 1"; REAL_CLF_ARGS="--pairs 16 --warmup 0 --min-iterations 1"
    REAL_LOOP_ARGS="--limit 4 --k 4 --u 2 --s 1 --max-new-tokens 8 --gen-prompts 2 --greedy-prompts 2 --min-iterations 1 --min-seconds 0 --warmup 0"
    RAY_LIMIT=10; MERGE_LIMIT=20; MERGE_PARITY_LIMIT=20; STUDY_LIMIT=60; DEFAULT_LIMIT=10; PARITY_LIMIT=20; PARITY_SHORT_LIMIT=10; PERM_LIMIT=10; PERM_RW_LIMIT=4; FILTER_LIMIT=20; TAXI_LIMIT=100
    LG_ARGS="--min-duration 0 --min-queries 2"; LG_LIMIT=16; LG_RW_LIMIT=8; LG_PROMPTS=2; LG_ROUNDS=1
    LG_LOOP_ARGS="--k 4 --u 2 --s 1 --max-new-tokens 8"; LG_GEN_ARGS="--k 2 --u 2 --s 1 --max-new-tokens 4"
    LG_GEN_SHAPE="--k 2 --u 2 --s 1 --max-new-tokens 4"; LG_GEN_LATENCY_QUERIES=2
else
    BENCH_LIMIT=200; LOOP_LIMIT=200; LOOP_ROUNDS=3; BUSY_LIMIT=300; RW_LIMIT=8
    SHAPES_ARGS="--repeats 3 --warmup 1"; GEN_ARGS="--prompts 16 --k 20 --repeats 3"
    VARIANT_PAIRS=1000; VARIANT_REPEATS=3; PARITY_ARGS="--n 2000 --prompts 10 --k 20"; BASELINE_LIMIT=64
    BASELINE_ARGS=""
    REAL_GEN_ARGS="--prompts 32 --k 20 --max-new-tokens 40"; REAL_CLF_ARGS="--pairs 1000"
    REAL_LOOP_ARGS="--limit 50 --k 20 --min-iterations 2 --min-seconds 0"
    RAY_LIMIT=200; MERGE_LIMIT=100; MERGE_PARITY_LIMIT=300; STUDY_LIMIT=3000; DEFAULT_LIMIT=1000; PARITY_LIMIT=0; PARITY_SHORT_LIMIT=400; PERM_LIMIT=300; PERM_RW_LIMIT=6; FILTER_LIMIT=500; TAXI_LIMIT=0
    LG_ARGS=""; LG_LIMIT=1000; LG_RW_LIMIT=256; LG_PROMPTS=16; LG_LOOP_ARGS=""; LG_ROUNDS=3
    # flan-t5-small at K = 20: about 4.5 s a SingleStream query (one prompt, 20 x 40 tokens) for torch fp32 on 2
    # cores, so LoadGen's official 1,024 queries would take 77 min for that engine alone; 128 (recorded in the
    # file's settings: enough for LoadGen's 90th-percentile early-stopping estimate, not its 99th)
    LG_GEN_ARGS="--min-queries ${LG_GEN_QUERIES:-128}"; LG_GEN_SHAPE=""
    LG_GEN_LATENCY_QUERIES=${LG_GEN_LATENCY_QUERIES:-64}
fi
# LoadGen's scenarios of the loop's roles and of roberta-large: MultiStream needs 662 queries of 8 samples for a VALID
# result (about 15 min per engine for the study unit, 30 for flan-t5-small at K = 20 on 2 cores), so by default these
# run SingleStream and Offline; LG_LOOP_SCENARIOS=single-stream,multi-stream,offline adds it
LG_LOOP_SCENARIOS=${LG_LOOP_SCENARIOS:-single-stream,offline}
PARITY_ENGINES=torch:fp32,ort:fp32,ort:int8
# OpenVINO's classifier (the openvino extra): fp32, and bf16 where the CPU computes it (AVX-512 BF16 or AMX)
if $PY -c "import sys; from breaknli_fast.engines.cpu_features import has_native_bf16; sys.exit(0 if has_native_bf16() else 1)" 2>/dev/null; then
    OV_PRECISIONS="fp32 bf16"
else
    OV_PRECISIONS="fp32"
fi
OV_ENGINES=$(for p in $OV_PRECISIONS; do printf ',openvino:%s' "$p"; done)
OV_RW_ENGINES=$(for p in $OV_PRECISIONS; do printf ',openvino:%s:validate=false' "$p"; done)
OV_BEST="${OV_PRECISIONS##* }"  # bf16 where the CPU has it, else fp32
RW_ARGS="--engines torch:fp32,ort:fp32:validate=false,ort:int8:validate=false --limit $RW_LIMIT --k 4 --u 2 --s 1 \
--max-new-tokens 16 --gen-prompts 4 --greedy-prompts 4 --min-iterations 5 --min-seconds 0"

FAILED=()
step() {  # step NAME COMMAND...
    local name=$1; shift
    if [ "$name" != make-benchmarks ]; then
        if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $name "* ]]; then return 0; fi
        if [[ " ${SKIP:-} " == *" $name "* ]]; then return 0; fi
    fi
    echo "== $name: $*" >&2
    local t0=$SECONDS
    if "$@"; then
        echo "== $name: done in $((SECONDS - t0)) s" >&2
    else
        echo "== $name: FAILED after $((SECONDS - t0)) s" >&2
        FAILED+=("$name")
    fi
}

step bench-mini $PY scripts/bench_save.py --result "$R/bench-mini.json" -- \
    --engines torch:fp32,ort:fp32,ort:int8 --limit "$BENCH_LIMIT"
step run-loop $PY scripts/bench_run_loop.py --engines torch:fp32,ort:fp32,ort:int8 --limit "$LOOP_LIMIT" \
    --rounds "$LOOP_ROUNDS" --out "$W/run-loop" --result "$R/run-loop.json"
step busy $PY scripts/bench_busy.py --engines torch,ort --limit "$BUSY_LIMIT" --timeout 900 --work "$W/busy" \
    --result "$R/busy.json"
# the default command as a user runs it (1,000 sample examples), alone and beside a second one
step busy-default $PY scripts/bench_busy.py --engines ort,torch --limit "$DEFAULT_LIMIT" --no-active --timeout 1800 \
    --work "$W/busy-default" --result "$R/busy-default.json"
step bench-random-small $PY scripts/bench_save.py --result "$R/bench-random-small.json" -- $RW_ARGS \
    --random-weights flan-t5-small,roberta-base
step bench-random-base $PY scripts/bench_save.py --result "$R/bench-random-base.json" -- $RW_ARGS \
    --random-weights flan-t5-base,roberta-base
# the real sizes at the loop's defaults against CTranslate2 / transformers / optimum (scripts/bench_real_shapes.py;
# the CTranslate2 contenders need the ct2 extra and are reported as skipped without it). Step-specific timing
# options come first, so that --smoke's sizes override them.
step real-generate-small $PY scripts/bench_real_shapes.py --job generate --generator flan-t5-small $REAL_GEN_ARGS \
    --contenders torch:fp32,ort:fp32,ort:int8:validate=false,ct2:int8,peer:transformers,peer:ct2-int8,peer:ct2-int8-intra \
    --result "$R/real-generate-flan-t5-small.json"
# the ort generator on each transformers stack (the compat venv, transformers 5.x, where it exists), 8 and 32 prompts,
# CTranslate2 fp32 and int8 in the same run
PY_TF5=${PYTHON_TF5:-.venv-compat/bin/python}
STACK_ARGS="--job generate --generator flan-t5-small --k 20 --max-new-tokens 40 \
--contenders torch:fp32,ort:fp32,ort:int8:validate=false,peer:ct2-fp32,peer:ct2-int8"
[ "$SMOKE" = 1 ] && STACK_ARGS="$STACK_ARGS --k 2 --max-new-tokens 4 --warmup 0 --min-iterations 1"
for P in 8 32; do
    step gen-stacks-tf4-p$P $PY scripts/bench_real_shapes.py $STACK_ARGS --prompts $P \
        --result "$R/gen-stacks-tf4-p$P.json"
    if [ -x "$PY_TF5" ]; then
        step gen-stacks-tf5-p$P $PY_TF5 scripts/bench_real_shapes.py $STACK_ARGS --prompts $P \
            --result "$R/gen-stacks-tf5-p$P.json"
    fi
done
step real-generate-base $PY scripts/bench_real_shapes.py --job generate --generator flan-t5-base --min-iterations 2 \
    $REAL_GEN_ARGS --contenders torch:fp32,ort:int8:validate=false,peer:ct2-int8,peer:ct2-int8-intra \
    --result "$R/real-generate-flan-t5-base.json"
step real-classify-base $PY scripts/bench_real_shapes.py --job classify --classifier roberta-base --min-iterations 2 \
    $REAL_CLF_ARGS \
    --contenders torch:fp32,torch:bf16,ort:fp32,ort:int8:validate=false,ort:int8:validate=false:quantization=dynamic-batch:label=ort-int8-batch,ort:int8:validate=false:quantization=static:label=ort-int8-static,ort:int8:validate=false:fuse=true:label=ort-int8-fused$OV_RW_ENGINES,peer:transformers,peer:optimum \
    --result "$R/real-classify-roberta-base.json"
step real-classify-large $PY scripts/bench_real_shapes.py --job classify --classifier roberta-large --warmup 0 \
    --min-iterations 2 $REAL_CLF_ARGS --contenders torch:fp32,ort:fp32,ort:int8:validate=false,peer:optimum \
    --result "$R/real-classify-roberta-large.json"
# the loop end to end at real shapes, K = 20: torch fp32, ort int8 (step graphs + int8 classifier), ct2:int8 (CTranslate2
# generator + ort int8 classifier)
step real-loop-small $PY scripts/bench_save.py --result "$R/bench-real-loop-small.json" -- \
    --random-weights flan-t5-small,roberta-base \
    --engines "torch:fp32,ort:fp32:validate=false,ort:fp32:clf.precision=int8:validate=false,ort:int8:validate=false,ct2:int8,gen=ort:fp32:validate=false/clf=openvino:$OV_BEST:validate=false" \
    --no-component-split --interleave $REAL_LOOP_ARGS
# MLPerf LoadGen's scenarios (bench --scenario; the loadgen extra), each run VALID or INVALID by LoadGen's rules
# (10 s minimum duration, its official query counts), beside the accuracy pass against torch fp32; BENCHMARKS.md
# section 1b reads these files and marks the targets met / not met
step loadgen-mini $PY scripts/bench_save.py --result "$R/loadgen-mini.json" -- --scenario single-stream,multi-stream,offline \
    --roles classifier --engines "torch:fp32,ort:fp32,ort:int8$OV_ENGINES" --limit "$LG_LIMIT" $LG_ARGS
step loadgen-roberta-base $PY scripts/bench_save.py --result "$R/loadgen-roberta-base.json" -- --random-weights roberta-base \
    --scenario single-stream,multi-stream,offline --roles classifier --limit "$LG_RW_LIMIT" \
    --engines torch:fp32,ort:fp32:validate=false,ort:int8:validate=false $LG_ARGS
# the latency configuration: workers=1 puts all threads on the one query LoadGen's SingleStream issues (the
# default runs two batches side by side, one thread each, and leaves a core idle on a single query)
step loadgen-roberta-base-latency $PY scripts/bench_save.py --result "$R/loadgen-roberta-base-latency.json" -- \
    --random-weights roberta-base --scenario single-stream --roles classifier --limit "$LG_RW_LIMIT" \
    --engines "torch:fp32,ort:fp32:validate=false:workers=1,ort:int8:validate=false:workers=1$OV_RW_ENGINES" $LG_ARGS
step loadgen-flan-t5-small $PY scripts/bench_save.py --result "$R/loadgen-flan-t5-small.json" -- --random-weights flan-t5-small \
    --scenario "$LG_LOOP_SCENARIOS" --roles generator --gen-prompts "$LG_PROMPTS" \
    --engines torch:fp32,ort:fp32:validate=false,ort:int8:validate=false,ct2:int8 $LG_GEN_ARGS $LG_ARGS
# the generator's latency configuration: one prompt is one batch, so workers=1 gives it both threads (SingleStream
# only, LG_GEN_LATENCY_QUERIES queries: 64 is the fewest with LoadGen's 90th-percentile early-stopping estimate),
# in LG_ROUNDS rounds with the engines in turn: section 1b's TPOT target compares engines within this one bench
step loadgen-flan-t5-small-latency $PY scripts/bench_save.py --result "$R/loadgen-flan-t5-small-latency.json" -- \
    --random-weights flan-t5-small --scenario single-stream --roles generator --gen-prompts "$LG_PROMPTS" \
    --engines torch:fp32,ort:fp32:validate=false:workers=1,ort:int8:validate=false:workers=1,ct2:int8 \
    $LG_GEN_SHAPE --min-queries "$LG_GEN_LATENCY_QUERIES" --repeats "$LG_ROUNDS" $LG_ARGS
step classifier-shapes $PY scripts/bench_classifier_shapes.py $SHAPES_ARGS --result "$R/classifier-shapes.json"
step generation $PY scripts/bench_generation.py --engines torch:fp32,ort:fp32,ort:int8 $GEN_ARGS \
    --result "$R/generation.json"
step classifier-variants $PY scripts/bench_classifier_variants.py --model mini-nli --pairs "$VARIANT_PAIRS" --threads 1 \
    --repeats "$VARIANT_REPEATS" --out "$W/classifier-variants" --result "$R/classifier-variants.json"
step ort-parity $PY scripts/ort_parity.py --classifier mini-nli --generator mini-t5 $PARITY_ARGS --fp16 \
    --result "$R/ort-parity.json"
step baselines $PY scripts/bench_baselines.py --engines torch:fp32,ort:fp32,ort:int8 --limit "$BASELINE_LIMIT" \
    $BASELINE_ARGS --result "$R/baselines.json"
# parity per probe x engine on the evaluation slice (`breaknli-fast bench --probe P`, saved with provenance):
# BreakNLI on all 2,724 pairs with the per-component split of int8; accuracy on all of them; permutation and MERGE
# on their first pairs (q = 100 permutations, and MERGE's draws, multiply the pairs); each with static int8
# beside dynamic int8 (per row; accuracy and BreakNLI also per batch tensor, whose labels depend on the batch). BENCHMARKS.md section 2b and the README's
# parity table (make-benchmarks --readme) are read from these files.
step bench-parity-all $PY scripts/bench_save.py --result "$R/bench-parity-all.json" -- --probe breaknli \
    --engines "$PARITY_ENGINES,ort:int8:clf.quantization=static" --limit "$PARITY_LIMIT" --warmup 0 \
    --min-iterations 1 --min-seconds 0
# the same on the first 400 pairs (a few minutes): the file docs/stack.md and the README's parity table cite
step probe-breaknli $PY scripts/bench_save.py --result "$R/probe-breaknli.json" -- --probe breaknli \
    --engines "$PARITY_ENGINES,ort:int8:quantization=dynamic-batch,ort:int8:clf.quantization=static" \
    --limit "$PARITY_SHORT_LIMIT" --warmup 0 \
    --min-iterations 1 --min-seconds 0
# the faithful configuration of a CPU with bf16: the generator on ort fp32 (the reference's candidates), the classifier
# on OpenVINO bf16 (fp32 where the CPU has no bf16), beside ort int8, BreakNLI on the first 400 pairs
step probe-breaknli-openvino $PY scripts/bench_save.py --result "$R/probe-breaknli-openvino.json" -- --probe breaknli \
    --engines "torch:fp32,gen=ort:fp32/clf=openvino:$OV_BEST,ort:int8" --limit "$PARITY_SHORT_LIMIT" --warmup 0 \
    --min-iterations 1 --min-seconds 0
step probe-accuracy $PY scripts/bench_save.py --result "$R/probe-accuracy.json" -- --probe accuracy \
    --engines "$PARITY_ENGINES,ort:int8:quantization=dynamic-batch,ort:int8:quantization=static$OV_ENGINES" \
    --limit "$PARITY_LIMIT" --warmup 0
# the cudagraph engine's classifier on the CPU (the same steps its CUDA graphs run): fp32 against the reference and
# bf16 by the 99.9 % accuracy tier (on a GPU: scripts/gpu_check.sh)
step probe-accuracy-cudagraph $PY scripts/bench_save.py --result "$R/probe-accuracy-cudagraph.json" -- --probe accuracy \
    --engines torch:fp32,cudagraph:fp32,cudagraph:bf16 --limit "$PARITY_LIMIT" --warmup 0
step probe-permutation $PY scripts/bench_save.py --result "$R/probe-permutation.json" -- --probe permutation \
    --engines "$PARITY_ENGINES,ort:int8:quantization=static" --limit "$PERM_LIMIT" --warmup 0
# MERGE needs spaCy and its pipeline (the merge extra: pip install -e ".[merge]")
step probe-merge $PY scripts/bench_save.py --result "$R/probe-merge.json" -- --probe merge \
    --engines "$PARITY_ENGINES,ort:int8:clf.quantization=static" --limit "$MERGE_PARITY_LIMIT" --warmup 0
step probe-taxinli-accuracy $PY scripts/bench_save.py --result "$R/probe-taxinli-accuracy.json" -- --probe accuracy \
    --dataset taxinli --engines torch:fp32,ort:int8 --limit "$TAXI_LIMIT" --warmup 0
step probe-permutation-roberta-large $PY scripts/bench_save.py --result "$R/probe-permutation-roberta-large.json" -- \
    --probe permutation --random-weights roberta-large --engines torch:fp32,ort:fp32:validate=false,ort:int8:validate=false \
    --limit "$PERM_RW_LIMIT" --warmup 0
# the lazy relation filter against the full one: the same engines and examples with each filter
for rf in lazy full; do
    step "probe-breaknli-$rf" $PY scripts/bench_save.py --result "$R/probe-breaknli-$rf.json" -- --probe breaknli \
        --relation-filter "$rf" --limit "$FILTER_LIMIT" --no-component-split --warmup 0 --min-iterations 1 --min-seconds 0
done
step merge $PY scripts/bench_merge.py --limit "$MERGE_LIMIT" --out "$R/merge.json"
step ray $PY scripts/bench_ray.py --limit "$RAY_LIMIT" --out "$R/ray.json"
# what the studies measure: the mini models (torch fp32) on the generated corpora, by their own breakdown
step study-aenli $PY scripts/bench_study.py --probe breaknli --dataset "aenli:$STUDY_LIMIT" --out "$R/study-aenli.json"
step study-kinship $PY scripts/bench_study.py --probe breaknli --dataset "kinship:$STUDY_LIMIT" --out "$R/study-kinship.json"
step make-benchmarks $PY scripts/make_benchmarks.py --results "$R" --out "$OUT_MD" --readme "${README:-README.md}"

if [ ${#FAILED[@]} -gt 0 ]; then
    echo "failed: ${FAILED[*]}" >&2
    exit 1
fi
