#!/usr/bin/env bash
# Creates .venv (the Python environment of the package's build and tests) and
# installs python/requirements-dev.txt into it, if missing or changed.
# Idempotent: does nothing (and needs no network) when all is in place.
# FERRY_PYTHON picks the interpreter (default: Debian's /usr/bin/python3).
set -euo pipefail
cd "$(dirname "$0")/.."
py=${FERRY_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
if [ ! -x .venv/bin/python ]; then
    echo "ferry: creating .venv with $py"
    "$py" -m venv .venv
fi
stamp=.venv/ferry-requirements.txt
if ! cmp -s python/requirements-dev.txt "$stamp"; then
    echo "ferry: installing python/requirements-dev.txt into .venv"
    # torch's wheels come to ~4 GB unpacked; a cached copy of them would double
    # the disk this needs (CI machines can be short of disk), so no cache
    need_kb=$((7 * 1024 * 1024))
    free_kb=$(df -Pk .venv | awk 'NR == 2 { print $4 }')
    if [ "${free_kb:-0}" -lt "$need_kb" ]; then
        echo "ferry: warning: $((free_kb / 1024)) MiB free where .venv is; torch and its CUDA wheels need about 7 GiB" >&2
    fi
    .venv/bin/pip install -q --no-cache-dir -r python/requirements-dev.txt
    cp python/requirements-dev.txt "$stamp"
fi
