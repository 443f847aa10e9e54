#!/usr/bin/env bash
# Installs the Debian packages ferry needs to build and test, if missing.
# Idempotent: does nothing (and needs no network) when all are present.
set -euo pipefail
packages=(build-essential cmake pkg-config libxxhash-dev libzstd-dev libjansson-dev libucx-dev libprotobuf-c-dev protobuf-c-compiler iproute2 python3-dev python3-venv libdlpack-dev)
missing=()
for p in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
echo "ferry: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
