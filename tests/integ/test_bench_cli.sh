#!/usr/bin/env bash
# ferry bench xport runs end to end between two processes, ferry bench
# delta round-trips its deltas, ferry bench fp8-delta checks the fp8 deltas it sizes,
# ferry bench sync --deltas always takes them
# (smoke tests: the figures are for docs/benchmarks.md, not asserted here);
# they refuse bad input.
set -u
ferry=$1
source "$(dirname "$0")/expect.sh"
expect 0 "get/memcpy" -- bench xport --size 4M --repeat 2
expect 0 "runs/s" -- bench xport --size 4M --repeat 2 --threads 2
expect 0 "user-registered" -- bench xport --size 4M --repeat 2 --memory user
expect 0 "get/TCP" -- bench xport --backend ucx --tls tcp --size 4M --repeat 2
expect 0 "get/memcpy" -- bench xport --backend ucx --tls sm,self --size 4M --repeat 2
expect 2 "--backend \"rdma\": not a choice; want shm or ucx" -- bench xport --backend rdma
expect 2 "--tls applies to --backend ucx" -- bench xport --tls tcp
expect 2 "--size \"lots\": item \"lots\": not a number" -- bench xport --size lots
expect 2 "--memory \"gpu\": not a choice; want alloc or user" -- bench xport --memory gpu
expect 2 "--device: \"gpu\" is none of cpu, cuda, cuda:N" -- bench xport --device gpu
expect 0 "get/memcpy" -- bench xport --device cpu --size 4M --repeat 1
# GPU memory: read and checked where there is a GPU; elsewhere refused at
# once, naming the device (a build without CUDA: "needs a ferry built with
# CUDA"; with CUDA: "no usable GPU"), from both processes, neither waiting
if nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
    expect 0 "get/copy" -- bench xport --device cuda --size 4M --repeat 2
    expect 0 "get/copy" -- bench xport --device cuda:0 --size 4M --repeat 2 --memory user
else
    expect 2 "--device cuda" -- bench xport --device cuda --size 4M --repeat 1
    expect 2 "--device cuda:1" -- bench xport --backend ucx --device cuda:1 --size 4M --repeat 1
fi
expect 0 "every applied delta matched" -- bench delta --elems 3M --repeat 1 --steps 2 --lr 1e-6,1e-5
expect 0 "TRL" -- bench delta --elems 100K --repeat 1 --steps 1 --threads 1
expect 0 "every applied delta matched" -- bench delta --elems 1M --repeat 1 --steps 2 --lr 1e-5 --format 2
expect 2 "--format \"3\": out of range; want an integer from 1 to 2" -- bench delta --format 3
expect 2 "--elems \"0\": out of range; want from 1 to 4294967296" -- bench delta --elems 0
expect 2 "--lr \"fast\": item \"fast\": not a decimal number" -- bench delta --lr fast
expect 2 "--threads \"99\": out of range; want an integer from 1 to 64" -- bench delta --threads 99
expect 2 "unknown option --size" -- bench delta --size 4M
# fp8-delta: an FP8 engine's change per step, its deltas applied and checked
expect 0 "deltas applied and checked equal" -- bench fp8-delta --rows 300 --cols 257 --steps 2 --lr 1e-5
expect 0 "fp8 from the fp32 masters" -- bench fp8-delta --rows 200 --cols 130 --steps 1 --lr 1e-6 --source f32
expect 2 "--source \"f16\": not a choice; want bf16 or f32" -- bench fp8-delta --source f16
expect 2 "--rows \"0\": out of range" -- bench fp8-delta --rows 0
# bench sync with deltas: engines one version behind apply them, and it says what they moved
golden=$(dirname "$0")/../golden
expect 0 "reader updates applied them" -- bench sync --model "$golden/tiny-qwen3.json" --train tp=2 --infer tp=1 \
    --steps 3 --transports shm --no-baselines --deltas always
expect 2 "unknown benchmark" -- bench disk
expect_done
