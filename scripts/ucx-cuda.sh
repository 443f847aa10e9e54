#!/usr/bin/env bash
# A UCX with CUDA support for ferry's build, where the system's has none
# (Debian's 1.13): PyPI's libucx-cu13 wheel (UCX 1.22, with the cuda
# (cuda_copy, cuda_ipc) and cma modules; no InfiniBand module), downloaded
# with pip (.venv's if there is one) and unpacked into DIR (default
# .ucx-cuda/); nothing is installed. Prints, alone on stdout, the cmake
# argument that builds ferry against it:
#   cmake -S . -B build "$(scripts/ucx-cuda.sh)"
# The wheel's libucx/ needs its sibling libucx_cu13.libs/ (its CUDA
# runtime), so DIR keeps the whole wheel.
# Usage: scripts/ucx-cuda.sh [DIR]
#        scripts/ucx-cuda.sh --from WHEEL [DIR]   (unpacks a wheel file instead)
set -euo pipefail
wheel=
if [ "${1:-}" = "--from" ]; then
    [ $# -ge 2 ] || { echo "scripts/ucx-cuda.sh: --from needs a wheel file" >&2; exit 2; }
    [ -f "$2" ] || { echo "scripts/ucx-cuda.sh: --from $2: no such file" >&2; exit 2; }
    wheel=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
    shift 2
fi
[ $# -le 1 ] || { echo "usage: scripts/ucx-cuda.sh [--from WHEEL] [DIR]" >&2; exit 2; }
if [ $# -eq 1 ]; then
    mkdir -p "$1"
    dir=$(cd "$1" && pwd)
fi
cd "$(dirname "$0")/.."
if [ $# -eq 0 ]; then
    mkdir -p .ucx-cuda
    dir=$PWD/.ucx-cuda
fi
if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ -z "$wheel" ]; then
    echo "ucx-cuda: pip download libucx-cu13==1.22.*" >&2
    "$py" -m pip download -q --no-deps --only-binary=:all: --dest "$tmp" "libucx-cu13==1.22.*" >&2
    wheel=$(ls "$tmp"/libucx_cu13-*.whl)
fi
# Only what the wheel holds is replaced (DIR may hold other things).
rm -rf "$dir/libucx" "$dir/libucx_cu13.libs" "$dir"/libucx_cu13-*.dist-info
"$py" -m zipfile -e "$wheel" "$dir"
chmod +x "$dir"/libucx/bin/* # zip entries lose their modes
for f in lib/pkgconfig/ucx.pc lib/libucp.so lib/ucx/libuct_cuda.so; do
    [ -e "$dir/libucx/$f" ] || { echo "scripts/ucx-cuda.sh: $(basename "$wheel") has no libucx/$f" >&2; exit 1; }
done
echo "ucx-cuda: UCX $(sed -n 's/^Version: *//p' "$dir/libucx/lib/pkgconfig/ucx.pc") in $dir/libucx" >&2
echo "-DFERRY_UCX_PREFIX=$dir/libucx"
