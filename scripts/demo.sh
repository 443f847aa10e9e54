#!/usr/bin/env bash
# The main job: install what is missing, build, and show how ferry lays out a
# model on a trainer and on an inference engine, each checked element by element,
# plans the transfer between them, and moves bytes between two processes.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target ferry >/dev/null
echo "== ferry model: Qwen3-30B-A3B from its config.json"
build/ferry model --model models/qwen3-30b-a3b.json
echo
echo "== trainer side: Megatron tp=4, pp=2, ep=8, dp=2"
build/ferry layout --model models/qwen3-30b-a3b.json --side train --parallel tp=4,pp=2,ep=8,dp=2
echo
echo "== engine side: vLLM tp=4 with expert parallelism, 2 replicas"
build/ferry layout --model models/qwen3-30b-a3b.json --side infer --parallel tp=4,ep=4,replicas=2
echo
echo "== plan: trainer -> engine, every engine byte written once, balanced over trainer replicas"
build/ferry plan --model models/qwen3-30b-a3b.json --train tp=4,pp=2,ep=8,dp=2 \
    --infer tp=4,ep=4,replicas=2 --locals 4
echo
echo "== the local plan of engine rank 5: its sources in reading order"
build/ferry plan --model models/qwen3-30b-a3b.json --train tp=4,pp=2,ep=8,dp=2 \
    --infer tp=4,ep=4,replicas=2 --rank 5 | sed -n '/^destination rank/,$p'
echo
echo "== transport: one-sided reads of another process's memory, against memcpy in the same run"
build/ferry bench xport --size 64M,256M --repeat 3
