#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test in three builds:
#   asan     Debug, -Werror, AddressSanitizer + UBSan: every test (unit,
#            property, golden, fuzz-corpus replay, CLI integration, layering)
#   tsan     Debug, -Werror, ThreadSanitizer: the unit tests (where the
#            threads are: service, heartbeats, transports, sync)
#   release  Release (-O2), -Werror: every test, on the code users run
# `scripts/test.sh asan tsan` runs some of them; no argument runs all three.
# ctest reports a test that exits 77 as skipped, never as passed; the
# summary at the end lists the skipped ones.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh

jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(asan tsan release)
ncpu=$(nproc)
summary=()

run_job() {
    local name=$1 dir=build-ci
    local -a cfg ctest_args=(--output-on-failure -j"$ncpu")
    local -a env_run=()
    case "$name" in
    asan)
        cfg=(-DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_SANITIZE=ON)
        env_run=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1)
        ;;
    tsan)
        dir=build-ci-tsan
        cfg=(-DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_TSAN=ON)
        # UCX (not built with TSan): its races suppressed by tests/tsan-ucx.supp,
        # its memory hooks off (they crash at thread exit under TSan)
        env_run=("TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan-ucx.supp"
                 UCX_MEM_MMAP_HOOK_MODE=none)
        ctest_args+=(-R '^unit/')
        ;;
    release)
        dir=build-ci-release
        cfg=(-DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON)
        ;;
    *)
        echo "scripts/test.sh: unknown build \"$name\" (asan, tsan or release)" >&2
        exit 2
        ;;
    esac
    echo "== $name: building in $dir"
    # (set -e does not reach into a function called from ||: every step checks)
    local blog
    blog=$(mktemp)
    if ! { cmake -S . -B "$dir" "${cfg[@]}" && cmake --build "$dir" -j"$ncpu"; } >"$blog" 2>&1; then
        grep -E "error|Error|warning" "$blog" | head -40 || tail -40 "$blog"
        rm -f "$blog"
        summary+=("$name: the build failed")
        return 1
    fi
    rm -f "$blog"
    echo "== $name: testing"
    local log
    log=$(mktemp)
    local rc=0
    (cd "$dir" && env "${env_run[@]}" ctest "${ctest_args[@]}") 2>&1 | tee "$log" || rc=$?
    summary+=("$name: $(grep -E 'tests passed|tests failed' "$log" | tail -1)")
    local skipped
    skipped=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" | sed -E 's/.*#[0-9]+: ([^ ]+) .*/\1/' |
        tr '\n' ' ' || true)
    [ -z "$skipped" ] || summary+=("$name: skipped: $skipped")
    rm -f "$log"
    return $rc
}

status=0
for j in "${jobs[@]}"; do
    run_job "$j" || status=1
done
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
