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
    .venv/bin/pip install -q -r python/requirements-dev.txt
    cp python/requirements-dev.txt "$stamp"
fi
