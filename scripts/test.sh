#!/usr/bin/env bash
# Installs what is missing, then builds and runs every test in three builds:
#   asan     Debug, -Werror, AddressSanitizer + UBSan: every test (unit,
#            property, golden, fuzz-corpus replay, CLI integration, layering)
#   tsan     Debug, -Werror, ThreadSanitizer: the unit tests (where the
#            threads are: service, heartbeats, transports, sync), less
#            those labelled nothreads (the pure codec's: tests/CMakeLists.txt)
#   release  Release (-O2), -Werror: every test, on the code users run
# The asan and release builds also build the Python package and run its
# pytest suite (python/tests): asan against the build tree (with the ASan
# runtime preloaded into .venv's python), release against the package as
# `pip install .` installs it.
# `scripts/test.sh asan tsan` runs some of them; no argument runs all three.
# ctest reports a test that exits 77 as skipped, never as passed; the
# summary at the end lists the skipped ones.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
scripts/pydeps.sh
py=$PWD/.venv/bin/python

jobs=("$@")
[ ${#jobs[@]} -gt 0 ] || jobs=(asan tsan release)
ncpu=$(nproc)
summary=()

run_job() {
    local name=$1 dir=build-ci
    local -a cfg ctest_args=(--output-on-failure -j"$ncpu")
    local -a env_run=() py_env=()
    local skip_labels=gpu # one -LE regex (two would both have to match)
    local py_from=build
    case "$name" in
    asan)
        cfg=(-DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_SANITIZE=ON)
        env_run=(ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1)
        cfg+=(-DFERRY_PYTHON=ON "-DPython3_EXECUTABLE=$py")
        # python itself is not instrumented: the runtime must load first;
        # CPython and torch keep memory to the end, so no leak check there
        py_env=("LD_PRELOAD=$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libubsan.so)"
                ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1)
        ;;
    tsan)
        dir=build-ci-tsan
        cfg=(-DCMAKE_BUILD_TYPE=Debug -DFERRY_WERROR=ON -DFERRY_TSAN=ON)
        # UCX (not built with TSan): its races suppressed by tests/tsan-ucx.supp,
        # its memory hooks off (they crash at thread exit under TSan)
        env_run=("TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:suppressions=$PWD/tests/tsan-ucx.supp"
                 UCX_MEM_MMAP_HOOK_MODE=none)
        ctest_args+=(-R '^unit/')
        skip_labels='gpu|nothreads'
        ;;
    release)
        dir=build-ci-release
        cfg=(-DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON)
        py_from=pip
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
    (cd "$dir" && env "${env_run[@]}" ctest "${ctest_args[@]}" -LE "$skip_labels") 2>&1 | tee "$log" || rc=$?
    summary+=("$name: $(grep -E 'tests passed|tests failed' "$log" | tail -1)")
    if [ "$name" != tsan ]; then
        run_pytest "$name" "$dir" "$py_from" "${py_env[@]}" || rc=1
    fi
    local skipped
    skipped=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$log" | sed -E 's/.*#[0-9]+: ([^ ]+) .*/\1/' |
        tr '\n' ' ' || true)
    [ -z "$skipped" ] || summary+=("$name: skipped: $skipped")
    rm -f "$log"
    return $rc
}

# pytest over the Python package: from the build tree, or installed by pip
# (a source install, as a user does it) into <dir>/pip-target.
run_pytest() {
    local name=$1 dir=$2 from=$3
    shift 3
    local pypath=$PWD/$dir/python
    if [ "$from" = pip ]; then
        echo "== $name: pip install . (into $dir/pip-target)"
        rm -rf "$dir/pip-target"
        local plog
        plog=$(mktemp)
        if ! "$py" -m pip install -q --no-build-isolation --no-deps --target "$dir/pip-target" . >"$plog" 2>&1; then
            tail -30 "$plog"
            rm -f "$plog"
            summary+=("$name: pip install . failed")
            return 1
        fi
        rm -f "$plog"
        pypath=$PWD/$dir/pip-target
    fi
    echo "== $name: pytest ($from)"
    local log rc=0
    log=$(mktemp)
    env "$@" PYTHONPATH="$pypath" FERRY_CLI="$PWD/$dir/ferry" "$py" -m pytest -q -rs -p no:cacheprovider python/tests 2>&1 |
        tee "$log" || rc=$?
    summary+=("$name: pytest ($from): $(grep -E '^=+ .*(passed|failed|error|skipped).* =+$|^[0-9]+ (passed|failed)' "$log" | tail -1 | tr -d '=')")
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
