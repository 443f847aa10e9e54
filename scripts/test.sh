#!/usr/bin/env bash
# Installs what is missing, builds with -Werror and AddressSanitizer+UBSan,
# and runs every test (unit, fuzz corpus replay, integration) under ctest.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
cmake -S . -B build-ci -DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_SANITIZE=ON >/dev/null
cmake --build build-ci -j"$(nproc)"
cd build-ci
ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --output-on-failure -j"$(nproc)"
