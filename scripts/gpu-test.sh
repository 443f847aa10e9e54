#!/usr/bin/env bash
# Every GPU test and GPU benchmark, on a GPU host (CI has no GPU). Builds
# ferry there in Release with the Python package, using the Debian packages
# scripts/gpu-bundle.sh gathered into gpu-bundle/ (unpacked into
# .gpu-root/, nothing installed system-wide), and runs:
#   - the C test suite (ctest), as a check of the host's build;
#   - the Python package's pytest suite against the host's torch;
#   - the GPU tests (ctest -L gpu: tests/gpu/, test_sync --gpu), where a skip
#     is a failure;
#   - the GPU benchmarks (scripts/gpu-bench.sh): kernels beside copies, and
#     ferry bench sync --device cuda beside peer and same-GPU copies.
# --quick: only the GPU tests (while iterating; GPU_TESTS=regex picks some);
# --bench: only the benchmarks; --tests: everything but the benchmarks.
# Prints a summary at the end. Exit status: 0 when everything passed.
set -uo pipefail
quick=0 bench_only=0 no_bench=0
[ "${1:-}" = "--quick" ] && quick=1
[ "${1:-}" = "--bench" ] && bench_only=1
[ "${1:-}" = "--tests" ] && no_bench=1
cd "$(dirname "$0")/.."
root=$PWD/.gpu-root
build=build-gpu
py=${FERRY_PYTHON:-$(command -v python3)}
summary=()

if [ -d gpu-bundle ]; then
    rm -rf "$root" && mkdir -p "$root"
    for f in gpu-bundle/*.deb; do dpkg -x "$f" "$root"; done
    lib=$root/usr/lib/x86_64-linux-gnu
    export PKG_CONFIG_SYSROOT_DIR=$root
    export PKG_CONFIG_PATH=$lib/pkgconfig:$root/usr/share/pkgconfig
    export PATH=$root/usr/bin:$PATH
    export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    export UCX_MODULE_DIR=$lib/ucx  # the bundle's UCX, not the host's
    export CPATH=$root/usr/include${CPATH:+:$CPATH}
    export LIBRARY_PATH=$lib${LIBRARY_PATH:+:$LIBRARY_PATH}
    export CMAKE_PREFIX_PATH=$root/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
fi

echo "== host: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -2 | tr '\n' ';')" \
     "python $("$py" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.cuda.is_available())' 2>&1)"
echo "== building in $build"
log=$(mktemp)
if cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release -DFERRY_WERROR=ON -DFERRY_PYTHON=ON "-DPython3_EXECUTABLE=$py" \
        >"$log" 2>&1 && cmake --build "$build" -j"$(nproc)" >>"$log" 2>&1; then
    summary+=("build: ok")
else
    grep -E "error|Error|warning" "$log" | head -40 || tail -40 "$log"
    echo "== summary"
    echo "build: FAILED"
    exit 1
fi
rm -f "$log"
status=0
if [ $bench_only = 1 ]; then
    scripts/gpu-bench.sh "$build" || status=1
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
echo "== pytest"
if PYTHONPATH=$PWD/$build/python FERRY_CLI=$PWD/$build/ferry "$py" -m pytest -q -rs -p no:cacheprovider python/tests \
        >"$build/pytest.log" 2>&1; then :; else status=1; fi
tail -15 "$build/pytest.log"
summary+=("pytest: $(grep -E '^=+ .*(passed|failed|error).* =+$|^[0-9]+ (passed|failed)' "$build/pytest.log" | tail -1 | tr -d '=')")
if [ $no_bench = 1 ]; then
    echo "== summary"
    printf '%s\n' "${summary[@]}" "GPU benchmarks: not run (--tests)"
    exit $status
fi
echo "== GPU benchmarks"
if scripts/gpu-bench.sh "$build" >"$build/gpu-bench.log" 2>&1; then summary+=("GPU benchmarks: ok ($build/gpu-bench.log)")
else status=1; summary+=("GPU benchmarks: FAILED ($build/gpu-bench.log)"); fi
grep -E "^(==|  ferry|  GPU|  same|[a-z0-9 ]+:)" "$build/gpu-bench.log" | head -60
echo "== summary"
printf '%s\n' "${summary[@]}"
exit $status
