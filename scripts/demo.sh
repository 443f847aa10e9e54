#!/usr/bin/env bash
# The main job: install what is missing, build, and show how ferry lays out a
# model on a trainer and on an inference engine, each checked element by element.
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
