#!/usr/bin/env bash
# `ferry demo` and `ferry bench sync` when a process misbehaves: a worker
# stopped with SIGSTOP ends the run soon after the sync timeout, named as the
# cause; workers hold none of the parent's pipes; the summary agrees with the
# rows (and says n/a for what did not finish); a files baseline that fails
# ends instead of waiting forever on its engine processes.
set -u
ferry=$1
here=$(dirname "$0")
golden="$here/../golden"
source "$here/expect.sh"
tmp=$(mktemp -d)
stopped_pids=()
cleanup() {
    for p in "${stopped_pids[@]}"; do kill -CONT "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT
ok() { pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
now_ms() { echo $(($(date +%s%N) / 1000000)); }

# The pipe inodes process $1 holds, except on the fds listed after it.
pipes_of() {
    local pid=$1 fd n t
    shift
    for fd in /proc/"$pid"/fd/*; do
        n=${fd##*/}
        [[ " $* " == *" $n "* ]] && continue
        t=$(readlink "$fd" 2>/dev/null) || continue
        [[ $t == pipe:* ]] && echo "$t"
    done | sort -u
}

# Starts a long demo (--steps 100000, a 2 s sync timeout, --verbose) and waits
# until `$1` shows on its stderr; sets demo (its pid) and log (the stem of
# its output files).
to_ms=2000
start_demo() {
    log=$tmp/demo$RANDOM
    "$ferry" demo --model "$golden/tiny-qwen3.json" --train tp=2,pp=2 --infer tp=1,replicas=2 --steps 100000 \
        --timeout-ms $to_ms --verbose >"$log.out" 2>"$log.err" &
    demo=$!
    for _ in $(seq 600); do
        grep -q -- "$1" "$log.err" && return 0
        kill -0 $demo 2>/dev/null || break
        sleep 0.1
    done
    bad "the demo never printed \"$1\"; its stderr:"
    tail -5 "$log.err"
    kill -KILL $demo 2>/dev/null
    return 1
}
pid_of() { sed -n "s/^  $1 is pid \\([0-9]*\\)\$/\\1/p" "$log.err"; }

# Stops the worker $1 ("reader 1"), then waits for the demo: it must fail
# within its timeout (for the stop to count), the 3 s grace before SIGKILL
# and slack for a loaded host, naming that worker and saying it was stopped.
stop_and_wait() {
    local who=$1 pid t0 rc elapsed
    pid=$(pid_of "$who")
    [ -n "$pid" ] || { bad "no pid for $who"; return; }
    stopped_pids+=("$pid")
    local bound=$((3 * to_ms + 3000 + 10000))
    t0=$(now_ms)
    kill -STOP "$pid"
    while kill -0 $demo 2>/dev/null && [ $(($(now_ms) - t0)) -lt $bound ]; do sleep 0.1; done
    elapsed=$(($(now_ms) - t0))
    if kill -0 $demo 2>/dev/null; then
        bad "demo still running ${elapsed} ms after $who was stopped (bound ${bound} ms)"
        kill -KILL $demo
    fi
    wait $demo
    rc=$?
    [ $rc -ne 0 ] && ok || bad "the demo exited 0 with $who stopped"
    if grep -qF "$who (pid $pid) stopped responding: state T (stopped)" "$log.out"; then ok; else
        bad "the error does not name $who (pid $pid) as stopped:"
        grep "^summary" "$log.out"
        tail -3 "$log.err"
    fi
    kill -0 "$pid" 2>/dev/null && bad "$who (pid $pid) outlived the demo" || ok
    echo "  $who stopped: the demo ended after ${elapsed} ms (bound ${bound} ms)"
}

# 1. a reader stopped mid-run; first, no worker holds a pipe of the parent's
#    besides its own stdin (fd 0) and report pipe (fd 3)
if start_demo "^  reader 1 holds 2 after"; then
    parent=$(pipes_of $demo)
    for w in "writer 0" "writer 1" "writer 2" "writer 3" "reader 0" "reader 1"; do
        wp=$(pid_of "$w")
        leaked=$(comm -12 <(echo "$parent") <(pipes_of "$wp" 0 3))
        [ -z "$leaked" ] && ok || bad "$w (pid $wp) holds the parent's pipes: $leaked"
    done
    stop_and_wait "reader 1"
    python3 "$here/check_summary.py" "$log.out" 100000 && ok || bad "summary (reader 1 stopped mid-run)"
fi

# 2. a writer stopped mid-run
if start_demo "^  reader 0 holds 3 after"; then
    stop_and_wait "writer 2"
fi

# 3. a reader stopped as soon as it starts: usually nothing finishes, and the
#    summary must say n/a rather than 0.00 s (whatever finished, it must agree)
if start_demo "^  reader 1 is pid"; then
    stop_and_wait "reader 1"
    python3 "$here/check_summary.py" "$log.out" 100000 && ok || bad "summary (reader 1 stopped at its start)"
fi

# 4. a healthy run: every median in the summary is the median of its column
#    over the rows of versions 2..4 (a model large enough for nonzero GB/s)
cat >"$tmp/mid.json" <<'EOF'
{"model_type":"qwen3","hidden_size":256,"num_hidden_layers":4,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":64,"vocab_size":4096,"intermediate_size":768,"tie_word_embeddings":true}
EOF
"$ferry" demo --model "$tmp/mid.json" --train tp=2,pp=2 --infer tp=2,replicas=2 --steps 4 >"$tmp/mid.out" 2>&1
rc=$?
[ $rc -eq 0 ] && ok || { bad "demo on mid.json exited $rc"; tail -5 "$tmp/mid.out"; }
python3 "$here/check_summary.py" "$tmp/mid.out" 4 && ok || bad "summary of a healthy run"
grep -q "^columns: version; changed = " "$tmp/mid.out" && ok || bad "no legend of the columns"
"$ferry" demo --help | grep -q "GB/s = bytes moved / seconds" && ok || bad "no legend in demo --help"

# 5. bench sync: the files baseline fails in every round (its file's name is
#    taken by a directory; as pid 1 of a new pid namespace the name is known)
#    and the run ends, reporting why: its engine processes see their stdin
#    close although other engine processes live
if unshare --pid --fork --mount-proc true 2>/dev/null; then
    mkdir -p "$tmp/bench/ferry-bench-1.safetensors"
    out=$(timeout -k 5 120 unshare --pid --fork --mount-proc "$ferry" bench sync --model "$golden/tiny-moe.json" \
        --train tp=2,ep=2,pp=2 --infer tp=2,ep=2,replicas=2 --steps 2 --transports shm --dir "$tmp/bench" 2>&1)
    rc=$?
    if [ $rc -eq 1 ] && grep -qF "files (safetensors)    failed in 1 of 1 rounds: cannot create $tmp/bench/ferry-bench-1.safetensors: Is a directory" <<<"$out" &&
        grep -q "tcp broadcast  " <<<"$out"; then ok; else
        bad "bench sync with a failing files baseline: exit $rc"
        echo "$out" | tail -12
    fi
else
    echo "note: no pid namespace here (unshare --pid); the failing files baseline is not run"
fi
expect_done
