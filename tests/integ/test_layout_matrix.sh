#!/usr/bin/env bash
# Every bundled model under several trainer and engine layouts (one per line
# of layout_matrix.txt, options after the spec passed on, e.g. --quant auto
# for an fp8 engine) must build, cover every element (fp8 scales mirroring
# their weights), and keep buffer bytes disjoint; --json and --rank must
# agree with the plain output.
# Usage: test_layout_matrix.sh FERRY DIR [MATRIX_FILE MIN_LINES]
set -u
ferry=$1
dir=$2
matrix=${3:-layout_matrix.txt}
min=${4:-30}
fail=0
count=0
while read -r model side spec opts; do
    case "$model" in ''|'#'*) continue ;; esac
    count=$((count + 1))
    # shellcheck disable=SC2086 # opts: zero or more options
    out=$("$ferry" layout --model "$model" --side "$side" --parallel "$spec" $opts 2>&1)
    rc=$?
    if [ $rc -ne 0 ] || ! grep -q '^coverage   ok' <<<"$out"; then
        echo "FAIL: $model $side $spec $opts (exit $rc)"
        echo "$out" | tail -5
        fail=$((fail + 1))
        continue
    fi
    digest=$(sed -n 's/^digest *//p' <<<"$out")
    # shellcheck disable=SC2086
    json=$("$ferry" layout --model "$model" --side "$side" --parallel "$spec" $opts --json --rank 0)
    if ! grep -q '"ok": true' <<<"$json" || ! grep -q "\"digest\": \"$digest\"" <<<"$json" ||
        ! grep -q '"rank_detail"' <<<"$json"; then
        echo "FAIL: $model $side $spec $opts: --json disagrees with the plain output"
        fail=$((fail + 1))
    fi
done <"$dir/$matrix"
echo "$((count - fail)) passed, $fail failed"
[ "$count" -ge "$min" ] || { echo "expected at least $min layouts in $matrix, ran $count"; exit 1; }
[ $fail -eq 0 ]
