#!/usr/bin/env bash
# ferry demo on GPUs (label gpu, scripts/gpu-test.sh): trainers compute every
# version in their GPU buffers (tools/demo_gpu_weights.cu), engines pull it
# into theirs and check every element against the host's reference, so this
# also checks those kernels bit for bit. Megatron tp=2,pp=2 (fused, strided
# pieces) -> vLLM tp=2,replicas=2 with deltas between GPUs; then colocated
# on GPU 0, whole pulls; fp8 engines fed by the GPU writers' quantization,
# sync and async with deltas. Exit 77 without a GPU.
set -uo pipefail
ferry=$1
n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "${n:-0}" = 0 ]; then
    echo "skipped: no GPU (nvidia-smi -L lists none)"
    exit 77
fi
run() {
    echo "== ferry demo $*"
    out=$("$ferry" demo "$@" 2>&1)
    rc=$?
    printf '%s\n' "$out" | tail -4
    [ $rc = 0 ] || { echo "FAILED: ferry demo $* (exit $rc)"; exit 1; }
    printf '%s\n' "$out" | grep -q "every reader verified every version bit-exactly" ||
        { echo "FAILED: ferry demo $*: not every version verified"; exit 1; }
}
run --device cuda --deltas always --steps 4
run --device cuda:0 --train tp=1 --infer tp=1 --deltas off --steps 2
# fp8 engines: the trainers quantize on their GPUs; async slots (the previous slot is the delta base)
fp8=(--model "$(dirname "$0")/../golden/tiny-mla-fp8.json" --train tp=2 --quant auto --device cuda)
run "${fp8[@]}" --infer tp=2,ep=2 --deltas always --steps 3
run "${fp8[@]}" --infer tp=1,replicas=2 --mode async --deltas always --steps 3
echo "demo_cuda: every version verified"
