#!/usr/bin/env bash
# Every GPU test and GPU benchmark, on a GPU host (CI has no GPU). Builds
# ferry there in Release with the Python package, using the Debian packages
# scripts/gpu-bundle.sh gathered into gpu-bundle/ (unpacked into
# .gpu-root/, nothing installed system-wide) and, where the bundle has it,
# the libucx-cu13 wheel's UCX (CUDA support) instead of Debian's
# (FERRY_UCX_PREFIX=DIR picks another UCX; the summary says which one the
# build loads), and runs:
#   - the C test suite (ctest), as a check of the host's build;
#   - the Python package's pytest suite against the host's torch;
#   - the RL loop on two GPUs (ferry demo --rl --device cuda: sync, async,
#     an engine killed and restarted, whole pulls), every version's logits compared;
#   - the GPU tests (ctest -L gpu: tests/gpu/, test_sync --gpu), where a skip
#     is a failure;
#   - the GPU benchmarks (scripts/gpu-bench.sh): kernels beside copies,
#     ferry bench sync --device cuda beside peer and same-GPU copies, and
#     the UCX transport beside ucx_perftest.
# --quick: only the GPU tests (while iterating; GPU_TESTS=regex picks some,
# GPU_BUILD_TARGETS="target ..." builds only those);
# --bench: only the benchmarks (BENCH_ONLY=kernels|sync|ucx: one part of them,
# scripts/gpu-bench.sh); --tests: everything but the benchmarks (GPU_RL=0:
# without the RL loop, which takes a few minutes: a device call is limited
# to 10; GPU_PYTEST=0: without pytest, about 6 minutes on the 2-GPU host,
# which --pytest then runs alone); --rl: only the RL loop.
# Prints a summary at the end. Exit status: 0 when everything passed.
set -uo pipefail
quick=0 bench_only=0 no_bench=0 rl_only=0
[ "${1:-}" = "--rl" ] && rl_only=1
[ "${1:-}" = "--quick" ] && quick=1
[ "${1:-}" = "--bench" ] && bench_only=1
[ "${1:-}" = "--tests" ] && no_bench=1
pytest_only=0
[ "${1:-}" = "--pytest" ] && pytest_only=1
cd "$(dirname "$0")/.." || exit 1
root=$PWD/.gpu-root
build="build-gpu"
py=${FERRY_PYTHON:-$(command -v python3)}
summary=()

ucx_prefix=${FERRY_UCX_PREFIX:-} # the UCX the build links; empty: Debian's (the bundle's or the host's)
if [ -d gpu-bundle ]; then
    rm -rf "$root" && mkdir -p "$root"
    wheel=$(find gpu-bundle -maxdepth 1 -name 'libucx_cu13-*.whl' | head -1)
    if [ -z "$ucx_prefix" ] && [ -n "$wheel" ]; then
        scripts/ucx-cuda.sh --from "$wheel" "$root/ucx-cuda" >/dev/null || { echo "build: FAILED (unpacking $wheel)"; exit 1; }
        ucx_prefix=$root/ucx-cuda/libucx
    fi
    # Which UCX runs. A build with FERRY_UCX_PREFIX has that UCX's lib folder
    # first in each binary's DT_RUNPATH, the Python extension's included
    # (cmake/ucx.cmake); the loader searches LD_LIBRARY_PATH before
    # DT_RUNPATH, so Debian's libucp must not be on LD_LIBRARY_PATH: its
    # packages (and ucx-utils) are unpacked into a root of their own,
    # ucx-plain/, on no search path, while the other libraries' folder is on
    # LD_LIBRARY_PATH as before. The wheel's libucp finds libuct, libucs and
    # libucm beside itself (its DT_RPATH is $ORIGIN, which LD_LIBRARY_PATH
    # does not override), and UCX loads its modules from UCX_MODULE_DIR: the
    # wheel's lib/ucx (below), never another version's. A test that wants a
    # UCX without CUDA re-runs itself with LD_LIBRARY_PATH and UCX_MODULE_DIR
    # from FERRY_TEST_UCX_PLAIN_LIB: LD_LIBRARY_PATH then wins over the
    # RUNPATH. Without another UCX, Debian's is unpacked with the rest.
    plain=$root
    [ -z "$ucx_prefix" ] || plain=$root/ucx-plain
    for f in gpu-bundle/*.deb; do
        case ${f##*/} in
        libucx*|ucx-utils_*) dpkg -x "$f" "$plain" ;;
        *) dpkg -x "$f" "$root" ;;
        esac
    done
    lib=$root/usr/lib/x86_64-linux-gnu
    export FERRY_TEST_UCX_PLAIN_LIB=$plain/usr/lib/x86_64-linux-gnu # Debian's UCX 1.13: no CUDA
    export PKG_CONFIG_SYSROOT_DIR=$root
    export PKG_CONFIG_PATH=$lib/pkgconfig:$root/usr/share/pkgconfig
    export PATH=$root/usr/bin:$PATH
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export UCX_MODULE_DIR=$lib/ucx  # the bundle's UCX, not the host's
    export CPATH=$root/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
    export CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
fi
if [ -n "$ucx_prefix" ]; then
    ucx_prefix=$(cd "$ucx_prefix" && pwd) || { echo "build: FAILED (FERRY_UCX_PREFIX=$ucx_prefix: no such folder)"; exit 1; }
    export UCX_MODULE_DIR=$ucx_prefix/lib/ucx
    # gpu_test_xport_ucx must then run natively, not call it skipped
    [ -e "$ucx_prefix/lib/ucx/libuct_cuda.so" ] && export FERRY_TEST_REQUIRE_UCX_CUDA=1
fi

echo "== host: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -2 | tr '\n' ';')" \
     "python $("$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1)"
echo "== building in $build"
log=$(mktemp)
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON -DFERRY_PYTHON=ON "-DPython3_EXECUTABLE=$py" \
        "-DFERRY_UCX_PREFIX=$ucx_prefix" >"$log" 2>&1 &&
        cmake --build "$build" -j"$(nproc)" ${GPU_BUILD_TARGETS:+--target $GPU_BUILD_TARGETS} >>"$log" 2>&1; then
    summary+=("build: ok")
else
    grep -E "error|Error|warning" "$log" | head -40 || tail -40 "$log"
    echo "== summary"
    echo "build: FAILED"
    exit 1
fi
status=0
# The UCX the build found, and the libucp that ferry and the Python package load here.
ucx_found=$(sed -n 's/^-- ferry: //p' "$log" | grep '^UCX' | head -1)
rm -f "$log"
echo "== $ucx_found"
if [ -n "${GPU_BUILD_TARGETS:-}" ]; then # no ferry binary or Python package to ask
    summary+=("$ucx_found; built only: $GPU_BUILD_TARGETS")
else
    ucp_ferry=$(ldd "$build/ferry" | awk '$1 ~ /^libucp[.]so/ {print $3}')
    ucp_py=$(cd "$build/python" && "$py" -c 'import ferry._ferry
print(next((l.split()[-1] for l in open("/proc/self/maps") if "/libucp.so" in l), "none"))' 2>&1 | tail -1)
    echo "== libucp loaded by ferry: $ucp_ferry; by python: $ucp_py"
    ucp_want=${ucx_prefix:+$ucx_prefix/lib/}
    if [ -n "$ucp_want" ] && { [ "${ucp_ferry#"$ucp_want"}" = "$ucp_ferry" ] || [ "${ucp_py#"$ucp_want"}" = "$ucp_py" ]; }; then
        summary+=("UCX: WRONG: the build's UCX is in $ucp_want, but ferry loads $ucp_ferry, python $ucp_py")
        status=1
    else
        summary+=("$ucx_found; ferry and python load $ucp_ferry")
    fi
fi
if [ $bench_only = 1 ]; then
    scripts/gpu-bench.sh "$build" || status=1
    exit $status
fi
# The RL loop on the GPUs (ferry demo --rl: a transformers Qwen3-0.6B trained
# on GPU 0, the engine on GPU 1, logits compared every version): sync with
# deltas, async within a lag, an engine killed inside an update, and every
# version whole (ferry's dense path beside the same broadcast).
run_rl() {
    echo "== RL loop (ferry demo --rl --device cuda)"
    local n=0 args why
    for args in "--steps 10" "--mode async --max-lag 2 --steps 12" "--kill-engine-at 3 --steps 6" \
        "--deltas off --steps 6"; do
        n=$((n + 1))
        # shellcheck disable=SC2086 # the options are words
        if FERRY_PYTHON=$py "$build/ferry" demo --rl --device cuda --timeout 240 $args >"$build/rl-loop-$n.log" 2>&1; then
            summary+=("RL loop ($args): $(grep -E '^OK:' "$build/rl-loop-$n.log" | tail -1)")
        else
            status=1
            why=$(grep -E '^FAILED:' "$build/rl-loop-$n.log" | head -1)
            summary+=("RL loop ($args): ${why:-FAILED: $(tail -1 "$build/rl-loop-$n.log")} ($build/rl-loop-$n.log)")
        fi
        cat "$build/rl-loop-$n.log"
    done
}
# The Python package's tests against the host's torch (CUDA tensors among them).
run_pytest() {
    echo "== pytest"
    if PYTHONPATH=$PWD/$build/python FERRY_CLI=$PWD/$build/ferry "$py" -m pytest -q -rs -p no:cacheprovider python/tests \
            >"$build/pytest.log" 2>&1; then :; else status=1; fi
    tail -15 "$build/pytest.log"
    summary+=("pytest: $(grep -E '^=+ .*(passed|failed|error).* =+$|^[0-9]+ (passed|failed)' "$build/pytest.log" | tail -1 | tr -d '=')")
}
if [ $pytest_only = 1 ]; then
    run_pytest
    echo "== summary"
    printf '%s\n' "${summary[@]}"
    exit $status
fi
if [ $rl_only = 1 ]; then
    run_rl
    echo "== summary"
    printf '%s\n' "${summary[@]}"
    exit $status
fi
echo "== GPU tests"
if (cd "$build" && ctest --output-on-failure -L gpu ${GPU_TESTS:+-R "$GPU_TESTS"} >"$PWD/ctest-gpu.log" 2>&1); then :; else status=1; fi
grep -E "^ *[0-9]+/[0-9]+ Test" "$build/ctest-gpu.log"
gpu_skipped=$(grep -c '\*\*\*Skipped' "$build/ctest-gpu.log" || true)
[ "$gpu_skipped" = 0 ] || { status=1; grep -A3 -i "skipped:" "$build/ctest-gpu.log" | head -20; }
summary+=("GPU tests: $(grep -E 'tests passed|tests failed' "$build/ctest-gpu.log" | tail -1)${gpu_skipped:+ (skipped: $gpu_skipped)}")
if [ $status -ne 0 ]; then
    grep -B2 -A30 -E "Failed|\*\*\*" "$build/ctest-gpu.log" | head -120
fi
if [ $quick = 1 ]; then
    echo "== summary"
    printf '%s\n' "${summary[@]}"
    exit $status
fi
echo "== C tests"
if (cd "$build" && ctest --output-on-failure -j"$(nproc)" -LE gpu >"$PWD/ctest.log" 2>&1); then :; else status=1; fi
tail -3 "$build/ctest.log"
summary+=("ctest: $(grep -E 'tests passed|tests failed' "$build/ctest.log" | tail -1)")
skipped=$(grep -E '^ *[0-9]+/[0-9]+ Test +#[0-9]+: .*\*\*\*Skipped' "$build/ctest.log" |
    sed -E 's/.*#[0-9]+: ([^ ]+) .*/\1/' | tr '\n' ' ' || true)
[ -z "$skipped" ] || summary+=("ctest: skipped: $skipped")
if [ "${GPU_PYTEST:-1}" != 0 ]; then run_pytest; else summary+=("pytest: not run (GPU_PYTEST=0; scripts/gpu-test.sh --pytest runs it)"); fi
if [ "${GPU_RL:-1}" != 0 ]; then run_rl; else summary+=("RL loop: not run (GPU_RL=0; scripts/gpu-test.sh --rl runs it)"); fi
if [ $no_bench = 1 ]; then
    echo "== summary"
    printf '%s\n' "${summary[@]}" "GPU benchmarks: not run (--tests)"
    exit $status
fi
echo "== GPU benchmarks"
if scripts/gpu-bench.sh "$build" >"$build/gpu-bench.log" 2>&1; then summary+=("GPU benchmarks: ok ($build/gpu-bench.log)")
else status=1; summary+=("GPU benchmarks: FAILED ($build/gpu-bench.log)"); fi
grep -E "^(==|  ferry|  GPU|GPU memory|  same|  ucx_perftest|[a-z0-9 ]+:| +[0-9.]+ [KMG]iB )" "$build/gpu-bench.log" | head -80
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
