# Sourced by the CLI tests: `expect STATUS NEEDLE -- ARGS...` runs `$ferry
# ARGS...` and counts a pass when it exits with STATUS and prints NEEDLE;
# `expect_done` prints the tally and fails if anything failed. A command
# still running after $EXPECT_GUARD seconds (default 600) is killed and
# fails with exit 124: a hang guard, far above what any case needs.
fail=0
pass=0
expect() {
    local want=$1 needle=$2
    shift 3
    local out rc
    out=$(timeout -k 5 "${EXPECT_GUARD:-600}" "$ferry" "$@" 2>&1)
    rc=$?
    [ $rc -eq 124 ] && out="$out
(still running after ${EXPECT_GUARD:-600} s: killed)"
    if [ $rc -ne "$want" ] || ! grep -qF -- "$needle" <<<"$out"; then
        echo "FAIL: ferry $* -> exit $rc, output:"
        echo "$out" | tail -8
        echo "  (expected exit $want and \"$needle\")"
        fail=$((fail + 1))
    else
        pass=$((pass + 1))
    fi
}
expect_done() {
    echo "$pass passed, $fail failed"
    [ $fail -eq 0 ]
}
