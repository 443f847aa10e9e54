#!/usr/bin/env bash
# Every bundled model under several trainer and engine layouts (one per line
# of layout_matrix.txt) must build, cover every element, and keep buffer bytes
# disjoint; --json and --rank must agree with the plain output.
set -u
ferry=$1
dir=$2
fail=0
count=0
while read -r model side spec; do
    case "$model" in ''|'#'*) continue ;; esac
    count=$((count + 1))
    out=$("$ferry" layout --model "$model" --side "$side" --parallel "$spec" 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q '^coverage   ok' <<<"$out"; then
        echo "FAIL: $model $side $spec (exit $rc)"
        echo "$out" | tail -5
        fail=$((fail + 1))
        continue
    fi
    digest=$(sed -n 's/^digest *//p' <<<"$out")
    json=$("$ferry" layout --model "$model" --side "$side" --parallel "$spec" --json --rank 0)
    if ! grep -q '"ok": true' <<<"$json" || ! grep -q "\"digest\": \"$digest\"" <<<"$json" ||
        ! grep -q '"rank_detail"' <<<"$json"; then
        echo "FAIL: $model $side $spec: --json disagrees with the plain output"
        fail=$((fail + 1))
    fi
done <"$dir/layout_matrix.txt"
echo "$((count - fail)) passed, $fail failed"
[ $count -ge 30 ] || { echo "expected at least 30 layouts, ran $count"; exit 1; }
[ $fail -eq 0 ]
