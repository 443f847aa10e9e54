#!/usr/bin/env bash
# Gathers into gpu-bundle/ what a GPU host without a package registry needs
# to build and test ferry, for scripts/gpu-test.sh to unpack there (dpkg -x
# and unzip, no root needed):
#   - Debian 12 packages: headers and libraries of xxhash, jansson, UCX,
#     protobuf-c and dlpack, and protoc-c; ucx-utils (Debian's ucx_perftest,
#     the host-memory baseline of that UCX);
#   - PyPI's libucx-cu13 wheel (UCX 1.22 with CUDA), which the GPU build
#     links instead of Debian's UCX (no CUDA) (scripts/ucx-cuda.sh).
# Run it on a Debian 12 x86_64 machine with network; gpu-bundle/ is
# git-ignored and travels with the working tree (the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libxxhash-dev libxxhash0 libjansson-dev libjansson4 libucx-dev libucx0 libnuma1 librdmacm1 libibverbs1
          libprotobuf-c-dev libprotobuf-c1 protobuf-c-compiler libprotoc32 libprotobuf32 libdlpack-dev ucx-utils)
if [ -x .venv/bin/python ]; then py=.venv/bin/python; else py=python3; fi
rm -rf gpu-bundle
mkdir -p gpu-bundle
# apt's sandbox user cannot write here: download as the caller
(cd gpu-bundle && apt-get -o APT::Sandbox::User=root download "${packages[@]}")
"$py" -m pip download -q --no-deps --only-binary=:all: --dest gpu-bundle "libucx-cu13==1.22.*"
echo "gpu-bundle: $(find gpu-bundle -name '*.deb' | wc -l) Debian packages and $(find gpu-bundle -name '*.whl' | wc -l) wheel," \
     "$(du -sh gpu-bundle | cut -f1)"
