#!/usr/bin/env bash
# Planner benchmark: global plan time (median of REPEAT builds), local plan
# time and peak memory (median and max over LOCALS destination and LOCALS
# source ranks), and source load balance, for the bundled large models.
# Figures are ratios against the layout's own lower bound or absolute times
# against the issue's goals (local < 50 ms and < 64 MiB, global < 10 s,
# max/mean source bytes <= 1.05 where the replica structure allows it).
#
#   bench/plan.sh [BUILD_DIR]      (default: build; builds it Release if missing)
set -euo pipefail
cd "$(dirname "$0")/.."
build=${1:-build}
REPEAT=${REPEAT:-5}
LOCALS=${LOCALS:-16}
if [ ! -x "$build/ferry" ]; then
    cmake -S . -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
    cmake --build "$build" -j"$(nproc)" --target ferry >/dev/null
fi

# model | trainer | engine
cases=(
  "kimi-k2|tp=8,pp=16,ep=64,dp=8,pp_first=3,pp_last=2|tp=16,ep=16,replicas=8"
  "kimi-k2|tp=8,pp=4,ep=64,dp=8,pp_first=16,pp_last=15|tp=16,ep=16,replicas=8"
  "deepseek-v3|tp=8,pp=16,ep=64,dp=8,pp_first=3,pp_last=2|tp=16,ep=16,replicas=8"
  "deepseek-v3|tp=8,pp=8,ep=32,dp=4,pp_first=7,pp_last=6|tp=8,ep=8,replicas=4"
  "qwen3-30b-a3b|tp=4,pp=2,ep=8,dp=2|tp=4,ep=4,replicas=8"
  "qwen3-8b|tp=8,dp=4|tp=2,replicas=16"
  "qwen3-8b|tp=2,pp=2,dp=4|tp=8,replicas=4"
  "qwen3-8b|tp=2,dp=8|tp=4,replicas=3"
)
[ -n "${EXTRA:-}" ] && cases+=("$EXTRA")

echo "ferry plan benchmark, $(date -u +%Y-%m-%d), $(nproc) cores, REPEAT=$REPEAT LOCALS=$LOCALS"
printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' model trainer engine "global plan (peak)" \
    "local plan, median / max" "local peak, dst / src" "local / piece copy" "src max/mean" \
    "src max/lower bound"
printf '|---|---|---|---|---|---|---|---|---|\n'
for c in "${cases[@]}"; do
    IFS='|' read -r model train infer <<<"$c"
    out=$("$build/ferry" plan --model "$model" --train "$train" --infer "$infer" \
        --repeat "$REPEAT" --locals "$LOCALS")
    grep -q '^verified   every byte' <<<"$out" || { echo "$out"; echo "verification failed" >&2; exit 1; }
    grep -q 'digests agree' <<<"$out" || { echo "$out"; echo "local digests differ" >&2; exit 1; }
    global=$(sed -n 's/^plan       global in \([0-9.]*\) s.*peak \([^;]*\);.*/\1 s (\2)/p' <<<"$out")
    locals=$(sed -n 's/^local *\([0-9]*\) destination ranks: median \([0-9.]*\) ms, max \([0-9.]*\) ms, peak \([^;]*\); \([0-9]*\) source ranks: median \([0-9.]*\) ms, max \([0-9.]*\) ms, peak \([^;]*\);.*/dst \2 \/ \3 ms, src \6 \/ \7 ms|\4 \/ \8/p' <<<"$out")
    floor=$(sed -n 's/^floor .*costs \([0-9.]*\) such copies/\1/p' <<<"$out")
    balance=$(sed -n 's/^sources .*max\/mean \([0-9.]*\), max\/lower bound \([0-9.]*\)/\1|\2/p' <<<"$out")
    IFS='|' read -r ltime lpeak <<<"$locals"
    IFS='|' read -r mean lb <<<"$balance"
    printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s |\n' "$model" "$train" "$infer" "$global" \
        "$ltime" "$lpeak" "$floor" "$mean" "$lb"
done
