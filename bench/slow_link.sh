#!/usr/bin/env bash
# Deltas against whole pulls over a slow link: `ferry demo` (trainer and
# engine processes, UCX over TCP only) inside a network namespace whose
# loopback is held to RATE by a token bucket (tc tbf), once with --deltas
# off and once with --deltas always, the same model, steps and seed.
# Prints each run's summary and the ratio of the median seconds per version
# (versions 2..N, which a delta can serve). Needs root and iproute2 (tc,
# ip netns); exits 77 without them.
#
#   bench/slow_link.sh [BUILD_DIR] [RATE] [STEPS] [extra ferry demo args...]
#   (defaults: build, 1gbit, 4; RATE as tc writes it: 100mbit, 1gbit, 10gbit)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
rate=${2:-1gbit}
steps=${3:-4}
shift $(($# < 3 ? $# : 3))
if [ ! -x "$build/ferry" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build" -j"$(nproc)" --target ferry >/dev/null
fi
ns=ferry-slow-$$
if [ "$(id -u)" != 0 ] || ! command -v tc >/dev/null || ! ip netns add "$ns" 2>/dev/null; then
    echo "bench/slow_link.sh: skipped (needs root, ip netns and tc)"
    exit 77
fi
trap 'ip netns del "$ns" 2>/dev/null || true' EXIT
ip netns exec "$ns" ip link set lo up
# burst: a few MTUs' worth at 1 Gbit/s (larger bursts let short transfers run at memory speed)
ip netns exec "$ns" tc qdisc add dev lo root tbf rate "$rate" burst 256kb latency 100ms
echo "== $(date -u +%F) $(nproc) cores; loopback held to $rate ($(ip netns exec "$ns" tc qdisc show dev lo | head -1))"
median() { # the summary line's median seconds
    sed -n 's/.*median seconds \([0-9.]*\).*/\1/p'
}
declare -A secs
for mode in off always; do
    echo "== ferry demo --transport ucx --deltas $mode --steps $steps $* (UCX_TLS=tcp,self)"
    out=$(ip netns exec "$ns" env UCX_TLS=tcp,self "$build/ferry" demo --transport ucx --deltas "$mode" \
        --steps "$steps" "$@" 2>&1) || { echo "$out" | tail -20; exit 1; }
    echo "$out" | grep -E '^ +[0-9]+ |^summary'
    secs[$mode]=$(echo "$out" | grep '^summary' | median)
done
awk -v d="${secs[off]}" -v s="${secs[always]}" -v r="$rate" 'BEGIN {
    if (d == "" || s == "" || s == 0) { print "no medians to compare"; exit 1 }
    printf "at %s: whole pulls %.3f s per version, deltas %.3f s: deltas %.1fx faster\n", r, d, s, d / s }'
