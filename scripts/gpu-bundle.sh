#!/usr/bin/env bash
# Gathers into gpu-bundle/ the Debian 12 packages a GPU host without a
# package registry needs to build and test ferry (headers and libraries of
# xxhash, jansson, UCX, protobuf-c and dlpack, and protoc-c), for
# scripts/gpu-test.sh to unpack there (dpkg -x, no root needed). Run it on a
# Debian 12 machine with network; gpu-bundle/ is git-ignored and travels
# with the working tree (the device tool's `carry`).
set -euo pipefail
cd "$(dirname "$0")/.."
packages=(libxxhash-dev libxxhash0 libjansson-dev libjansson4 libucx-dev libucx0 libnuma1 librdmacm1 libibverbs1
          libprotobuf-c-dev libprotobuf-c1 protobuf-c-compiler libprotoc32 libprotobuf32 libdlpack-dev)
rm -rf gpu-bundle
mkdir -p gpu-bundle
# apt's sandbox user cannot write here: download as the caller
(cd gpu-bundle && apt-get -o APT::Sandbox::User=root download "${packages[@]}")
echo "gpu-bundle: $(ls gpu-bundle | wc -l) packages, $(du -sh gpu-bundle | cut -f1)"
