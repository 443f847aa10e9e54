#!/usr/bin/env bash
# The GPU benchmarks, on a GPU host, from a build made by scripts/gpu-test.sh
# (argument: its build directory, default build-gpu). Each prints its
# figures beside a limit measured in the same run:
#   - the box-copy kernels beside cudaMemcpyAsync (gpu_test_boxes --bench);
#   - the checksum kernel beside a same-GPU copy (gpu_test_sum --bench);
#   - the delta apply and encode on the GPU beside a same-GPU copy of the
#     same regions (gpu_test_delta_cuda --bench, gpu_test_delta_cuda_enc
#     --bench);
#   - ferry bench sync --device cuda on Qwen3-8B: GPU 0 -> GPU 1 with the same
#     layout (tp=1 -> tp=1), resharded (Megatron tp=2 -> vLLM tp=1 and tp=2),
#     beside a GPU 0 -> GPU 1 peer copy; and colocated on GPU 0 beside a
#     same-GPU copy; a column split (tp=1 -> tp=2) with the writer's pack
#     area unbounded and bounded by --pack-limit, with the GPU memory ferry
#     held. Configurations needing two GPUs are skipped (said so)
#     on a one-GPU host;
#   - the NCCL baseline (bench/nccl_bcast.py): a bucketed broadcast of the
#     same model GPU 0 -> GPU 1 with copies into parameters, as verl does;
#   - the UCX transport: raw UCX first (ucx_perftest of the UCX the build
#     uses, two processes on this host, 1 GiB messages: ucp_get GPU 0 -> GPU 1
#     and ucp_put_bw GPU 1 -> GPU 0 with UCX's default transports and with
#     UCX_TLS=tcp,cuda_copy (UCX staging through host memory), and host
#     memory over tcp; Debian's ucx_perftest too where scripts/gpu-test.sh
#     unpacked it), then ferry bench xport --backend ucx --device cuda
#     (GPU 0 -> GPU 1) with FERRY_UCX_CUDA=native and =staged, and over tcp
#     with host memory. GPU rows need two GPUs and a UCX with CUDA support
#     (skipped, said so, otherwise).
#   - deltas between GPUs: ferry bench sync --deltas always (the demo's
#     RL-like Adam steps) GPU 0 -> GPU 1, same layout and resharded, beside
#     the peer copy; and over UCX with only TCP between the processes (host
#     staging: a slow link), whole pulls against deltas, also with that
#     link held to 10 Gbit/s (FERRY_UCX_STAGE_RATE=1.25G);
# BENCH_MODEL and BENCH_STEPS override the model (qwen3-8b) and steps (6);
# BENCH_ONLY=kernels|sync|deltas|ucx runs one part (sync: with the NCCL
# baseline).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
build=${1:-build-gpu}
model=${BENCH_MODEL:-qwen3-8b}
steps=${BENCH_STEPS:-6}
status=0
only=${BENCH_ONLY:-}
case $only in
""|kernels|sync|deltas|ucx) ;;
*) echo "scripts/gpu-bench.sh: BENCH_ONLY=$only: want kernels, sync, deltas or ucx" >&2; exit 2 ;;
esac
part() { [ -z "$only" ] || [ "$only" = "$1" ]; }
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
echo "== $(date -u +%F) on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) x$ngpu"
for b in gpu_test_boxes gpu_test_sum gpu_test_delta_cuda gpu_test_delta_cuda_enc; do
    if part kernels && [ -x "$build/tests/$b" ]; then
        echo "== $b --bench"
        "$build/tests/$b" --bench || status=1
    fi
done
run() { # title, then ferry bench sync arguments
    local title=$1
    shift
    echo "== $title: ferry bench sync $*"
    "$build/ferry" bench sync --model "$model" --steps "$steps" "$@" 2>&1 | grep -v '^ *$' || status=1
}
if ! part sync; then :
elif [ "$ngpu" -ge 2 ]; then
    run "same layout, GPU 0 -> GPU 1" --device cuda --train tp=1 --infer tp=1
    run "resharded tp=2 -> tp=1 (writers on GPUs 0, 1; the reader on GPU 1)" --device cuda --train tp=2 --infer tp=1
    run "resharded tp=2 -> tp=2 (writers on GPUs 0, 1; readers on GPUs 1, 0)" --device cuda --train tp=2 --infer tp=2
    # a column split: the writer packs every strided half (its pack area on
    # GPU 0), unless --pack-limit bounds it and readers read them run by run
    run "column split tp=1 -> tp=2 (the writer on GPU 0; readers on GPUs 1, 0)" --device cuda --train tp=1 --infer tp=2
    run "column split tp=1 -> tp=2, --pack-limit 64M" --device cuda --train tp=1 --infer tp=2 --pack-limit 64M
else
    echo "== skipped: GPU 0 -> GPU 1 and resharded runs need two GPUs (this host has $ngpu)"
fi
part sync && run "colocated on GPU 0 (separate processes)" --device cuda:0 --train tp=1 --infer tp=1
if part sync && [ "$ngpu" -ge 2 ]; then
    echo "== NCCL broadcast baseline: python bench/nccl_bcast.py --model $model"
    PYTHONPATH=$PWD/$build/python${PYTHONPATH:+:$PYTHONPATH} "${PYTHON:-python3}" bench/nccl_bcast.py --model "$model" || status=1
fi

if part deltas; then
    # Qwen3-8B GPU 0 -> GPU 1: deltas (encoded and applied on the GPUs)
    # beside the peer copy (the NCCL broadcast is the sync part's); then a
    # slow link: UCX with TCP only between the processes (ferry's host
    # staging), whole pulls against deltas
    if [ "$ngpu" -ge 2 ]; then
        run "deltas, same layout, GPU 0 -> GPU 1" --device cuda --train tp=1 --infer tp=1 --deltas always
        run "deltas, resharded tp=2 -> tp=1" --device cuda --train tp=2 --infer tp=1 --deltas always
        # then the same staged path held to 10 Gbit/s (FERRY_UCX_STAGE_RATE,
        # docs/transport.md): issue 19's slow link, where deltas must win 20x
        for rate in "" 1.25G; do
            steps=4
            [ -z "$rate" ] || steps=3 # a whole pull takes 13 s at that rate
            for d in off always; do
                echo "== UCX over TCP only (UCX_TLS=tcp, FERRY_UCX_CUDA=staged${rate:+, FERRY_UCX_STAGE_RATE=$rate}), --deltas $d"
                FERRY_UCX_STAGE_RATE=$rate UCX_TLS=tcp FERRY_UCX_CUDA=staged "$build/ferry" bench sync --model "$model" \
                    --steps "$steps" --device cuda --train tp=1 --infer tp=1 --transports ucx \
                    --deltas "$d" 2>&1 | grep -v '^ *$' || status=1
            done
        done
    else
        echo "== skipped: GPU 0 -> GPU 1 deltas need two GPUs (this host has $ngpu)"
    fi
fi

part ucx || exit $status

# The UCX transport beside raw UCX. The build's UCX: FERRY_UCX_PREFIX's, or
# the one ferry loads (Debian's). ucx_perftest's client (group index 1)
# takes GPU 1 and its server GPU 0 (index % GPUs: src/tools/perf/cuda/
# cuda_alloc.c); with ucp_get the client reads the server's memory (GPU 0 ->
# GPU 1, as ferry's reader on GPU 1 reads its owner's on GPU 0), with
# ucp_put_bw it writes into it (GPU 1 -> GPU 0). Its "MB/s" are MiB/s.
ucx_prefix=$(sed -n 's/^FERRY_UCX_PREFIX:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null)
if [ -n "$ucx_prefix" ]; then ucx_lib=$ucx_prefix/lib
else ucx_lib=$(dirname "$(ldd "$build/ferry" | awk '$1 ~ /^libucp[.]so/ {print $3}')"); fi
ucx_cuda=no
[ -e "$ucx_lib/ucx/libuct_cuda.so" ] && ucx_cuda=yes
perftest_of() { # a UCX lib folder: its ucx_perftest (<prefix>/bin, or Debian's <root>/usr/bin)
    local pt
    for pt in "$1/../bin/ucx_perftest" "$1/../../bin/ucx_perftest"; do
        [ -x "$pt" ] && { echo "$pt"; return 0; }
    done
    return 1
}
listening() { # port: whether a socket listens on it
    awk -v p="$(printf ':%04X' "$1")" '$2 ~ p"$" && $4 == "0A" {f = 1} END {exit !f}' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}
perftest() { # label, UCX lib folder, UCX_TLS ("": UCX's default), ucx_perftest arguments
    local label=$1 lib=$2 tls=$3 pt port srv out rc=1 bw
    shift 3
    pt=$(perftest_of "$lib") || { echo "  ucx_perftest $label: no ucx_perftest beside $lib"; return; }
    local -a envs=(LD_LIBRARY_PATH="$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" UCX_MODULE_DIR="$lib/ucx")
    [ -z "$tls" ] || envs+=(UCX_TLS="$tls")
    for _ in 1 2 3; do # a port another process holds: the server exits, try another
        port=$((20000 + RANDOM % 20000))
        listening "$port" && continue
        env -u UCX_TLS "${envs[@]}" timeout 150 "$pt" -p "$port" >/dev/null 2>&1 &
        srv=$!
        for _ in $(seq 300); do
            listening "$port" && break
            kill -0 "$srv" 2>/dev/null || break
            sleep 0.1
        done
        listening "$port" || { kill "$srv" 2>/dev/null; wait "$srv" 2>/dev/null; continue; }
        out=$(env -u UCX_TLS "${envs[@]}" timeout 120 "$pt" 127.0.0.1 -p "$port" -f "$@" 2>&1)
        rc=$?
        for _ in $(seq 100); do kill -0 "$srv" 2>/dev/null || break; sleep 0.1; done
        kill "$srv" 2>/dev/null
        wait "$srv" 2>/dev/null
        break
    done
    bw=$(awk '$1 ~ /^[0-9]+$/ && NF >= 8 {bw = $6} END {if (bw != "") printf "%.2f", bw * 1048576 / 1e9}' <<<"$out")
    if [ "$rc" -eq 0 ] && [ -n "$bw" ]; then
        echo "  ucx_perftest $label: $bw GB/s"
    else # UCX's own limits are reported, not ferry's failures
        echo "  ucx_perftest $label: failed (exit $rc): $(grep -iE 'error|fail' <<<"$out" | tail -1)"
    fi
}
xport() { # FERRY_UCX_CUDA ("": unset), then ferry bench xport arguments
    local mode=$1
    shift
    local -a envs=()
    [ -z "$mode" ] || envs=(FERRY_UCX_CUDA="$mode")
    echo "== ferry bench xport $*${mode:+ (FERRY_UCX_CUDA=$mode)}"
    env "${envs[@]}" "$build/ferry" bench xport "$@" 2>&1 | grep -v '^ *$'
    local rc=${PIPESTATUS[0]}
    [ "$rc" -eq 0 ] || { echo "  ferry bench xport FAILED (exit $rc)"; status=1; }
}
gib=$((1 << 30))
echo "== raw UCX: ucx_perftest of UCX $(sed -n 's/^Version: *//p' "$ucx_lib/pkgconfig/ucx.pc" 2>/dev/null) in $ucx_lib" \
     "(CUDA support: $ucx_cuda), two processes on this host, 1 GiB messages"
if [ "$ngpu" -ge 2 ] && [ $ucx_cuda = yes ]; then
    for tls in "" tcp,cuda_copy; do
        perftest "ucp_get    GPU 0 -> GPU 1, UCX_TLS=${tls:-(default)}" "$ucx_lib" "$tls" -t ucp_get -m cuda -s $gib -n 10 -w 2
        perftest "ucp_put_bw GPU 1 -> GPU 0, UCX_TLS=${tls:-(default)}" "$ucx_lib" "$tls" -t ucp_put_bw -m cuda -s $gib -n 10 -w 2
    done
else
    echo "== skipped: GPU memory rows need two GPUs (this host has $ngpu) and a UCX with CUDA support (this one: $ucx_cuda)"
fi
perftest "ucp_get    host -> host, UCX_TLS=tcp" "$ucx_lib" tcp -t ucp_get -m host -s $gib -n 6 -w 1
perftest "ucp_put_bw host -> host, UCX_TLS=tcp" "$ucx_lib" tcp -t ucp_put_bw -m host -s $gib -n 6 -w 1
plain=${FERRY_TEST_UCX_PLAIN_LIB:-}
if [ -n "$plain" ] && [ "$plain" != "$ucx_lib" ] && perftest_of "$plain" >/dev/null; then
    perftest "ucp_get    host -> host, UCX_TLS=tcp, Debian's UCX" "$plain" tcp -t ucp_get -m host -s $gib -n 6 -w 1
fi
if [ "$ngpu" -ge 2 ]; then
    modes=(staged)
    [ $ucx_cuda = yes ] && modes=(native staged)
    for mode in "${modes[@]}"; do xport "$mode" --backend ucx --device cuda --size 1G; done
else
    echo "== skipped: ferry bench xport --device cuda GPU 0 -> GPU 1 needs two GPUs (this host has $ngpu)"
fi
xport "" --backend ucx --tls tcp --size 1G
exit $status
