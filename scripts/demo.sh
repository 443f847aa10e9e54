#!/usr/bin/env bash
# The main job: install what is missing, build, and run `ferry demo` — a real
# multi-process sync on this machine: trainer processes publish RL-like
# updates of Qwen3-0.6B, engine processes pull them in place through ferry and
# check every element against an independent reference. Extra arguments go to
# `ferry demo` (e.g. --mode async, --transport ucx, --staged, --steps 10).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j"$(nproc)" --target ferry >/dev/null
exec build/ferry demo "$@"
