#!/usr/bin/env bash
# The GPU benchmarks, on a GPU host, from a build made by scripts/gpu-test.sh
# (argument: its build directory, default build-gpu). Each prints its
# figures beside a limit measured in the same run:
#   - the box-copy kernels beside cudaMemcpyAsync (gpu_test_boxes --bench);
#   - the checksum kernel beside a same-GPU copy (gpu_test_sum --bench);
#   - ferry bench sync --device cuda on Qwen3-8B: GPU 0 -> GPU 1 with the same
#     layout (tp=1 -> tp=1), resharded (Megatron tp=2 -> vLLM tp=1 and tp=2),
#     beside a GPU 0 -> GPU 1 peer copy; and colocated on GPU 0 beside a
#     same-GPU copy. Configurations needing two GPUs are skipped (said so)
#     on a one-GPU host;
#   - the NCCL baseline (bench/nccl_bcast.py): a bucketed broadcast of the
#     same model GPU 0 -> GPU 1 with copies into parameters, as verl does.
# BENCH_MODEL and BENCH_STEPS override the model (qwen3-8b) and steps (6).
set -uo pipefail
cd "$(dirname "$0")/.."
build=${1:-build-gpu}
model=${BENCH_MODEL:-qwen3-8b}
steps=${BENCH_STEPS:-6}
status=0
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "== $(date -u +%F) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$ngpu"
for b in gpu_test_boxes gpu_test_sum; do
    if [ -x "$build/tests/$b" ]; then
        echo "== $b --bench"
        "$build/tests/$b" --bench || status=1
    fi
done
run() { # title, then ferry bench sync arguments
    local title=$1
    shift
    echo "== $title: ferry bench sync $*"
    "$build/ferry" bench sync --model "$model" --steps "$steps" "$@" 2>&1 | grep -v '^ *$' || status=1
}
if [ "$ngpu" -ge 2 ]; then
    run "same layout, GPU 0 -> GPU 1" --device cuda --train tp=1 --infer tp=1
    run "resharded tp=2 -> tp=1 (writers on GPUs 0, 1; the reader on GPU 1)" --device cuda --train tp=2 --infer tp=1
    run "resharded tp=2 -> tp=2 (writers on GPUs 0, 1; readers on GPUs 1, 0)" --device cuda --train tp=2 --infer tp=2
else
    echo "== skipped: GPU 0 -> GPU 1 and resharded runs need two GPUs (this host has $ngpu)"
fi
run "colocated on GPU 0 (separate processes)" --device cuda:0 --train tp=1 --infer tp=1
if [ "$ngpu" -ge 2 ]; then
    echo "== NCCL broadcast baseline: python bench/nccl_bcast.py --model $model"
    PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH} "${PYTHON:-python3}" bench/nccl_bcast.py --model "$model" || status=1
fi
exit $status
