#!/usr/bin/env bash
# `ferry demo` end to end on the tiny models: a service, writer and reader
# processes, several (train, infer) layout pairs (fused QKV/gate_up, tp
# changes, pp, ep, trainer dp replicas, transposed and flat buffers), both
# modes, the shm, ucx and file transports, staged readers; every element
# verified. Then
# `ferry bench sync` (smoke), `ferry meta`, and refusals of bad input.
set -u
ferry=$1
golden="$(dirname "$0")/../golden"
source "$(dirname "$0")/expect.sh"
ok="every reader verified every version bit-exactly"
moe="--model $golden/tiny-moe.json --train tp=2,ep=2,pp=2"
expect 0 "$ok" -- demo $moe --infer tp=2,ep=2,replicas=2,transpose=*w2* --steps 3
expect 0 "$ok" -- demo $moe --infer tp=1,replicas=2 --steps 3 --mode async --slots 3
expect 0 "$ok" -- demo $moe --infer tp=2,ep=2 --steps 3 --transport ucx --staged
expect 0 "$ok" -- demo --model $golden/tiny-qwen3.json --train tp=2,pp=2,dp=2,vocab_multiple=4 \
    --infer tp=4,dp=2,vocab_multiple=8 --steps 3 --mode async --transport ucx
expect 0 "$ok" -- demo --model $golden/tiny-qwen3.json --train tp=2,pp=2,buffers=flat --infer tp=1,replicas=3 --steps 2 --staged
expect 0 "$ok" -- demo --model $golden/tiny-mla.json --train tp=2,ep=2,experts=grouped_t,buffers=flat \
    --infer tp=2,ep=1,replicas=2 --steps 3
# sparse deltas in sync mode, forced on one host: strided (transposed) destinations, ucx, staged readers (no deltas)
expect 0 "reader updates applied sparse deltas" -- demo $moe --infer tp=2,ep=2,replicas=2,transpose=*w2* --steps 3 --deltas always
expect 0 "reader updates applied sparse deltas" -- demo --model $golden/tiny-qwen3.json --train tp=2,pp=2,buffers=flat \
    --infer tp=1,replicas=2 --steps 3 --deltas always --transport ucx
expect 0 "$ok" -- demo $moe --infer tp=2,ep=2 --steps 3 --deltas always --staged
expect 2 "--deltas \"sometimes\": not a choice; want auto, always or off" -- demo --deltas sometimes
# fp8 engines from bf16 trainers: the writers quantize each 128 x 128 block, the engines check every fp8 byte
# and scale against their own quantization of the reference; deltas of fp8 bytes, async, ucx
fp8="--model $golden/tiny-mla-fp8.json --train tp=2 --quant auto"
expect 0 "reader updates applied sparse deltas" -- demo $fp8 --infer tp=2,ep=2 --steps 3 --deltas always
expect 0 "$ok" -- demo $fp8 --infer tp=1,replicas=2 --steps 3 --mode async --transport ucx
expect 2 "which cuts 128 x 128 blocks" -- demo --model $golden/tiny-mla-fp8.json --train tp=4 --infer tp=2,ep=2 --quant auto
expect 2 "declares no fp8 tensors" -- demo --quant auto --steps 1
expect 2 "the file channel has none" -- demo $fp8 --infer tp=2 --transport file
# the file channel: trainer ranks publish snapshots and deltas into directories, engine ranks follow them
# no pack areas: strided sources read run by run, over shm and ucx, deltas included
expect 0 "$ok" -- demo --model $golden/tiny-mla.json --train tp=2,ep=2,experts=grouped_t,buffers=flat \
    --infer tp=2,ep=1,replicas=2 --steps 3 --pack-limit 1
expect 0 "$ok" -- demo --model $golden/tiny-mla.json --train tp=2,ep=2,experts=grouped_t,buffers=flat \
    --infer tp=2,ep=1,replicas=2 --steps 3 --pack-limit 1 --transport ucx --deltas always
expect 2 "the file channel has none" -- demo --transport file --pack-limit 1M
expect 2 "--pack-limit \"lots\"" -- demo --pack-limit lots
expect 0 "$ok" -- demo $moe --infer tp=2,ep=2,replicas=2 --steps 4 --transport file
expect 0 "$ok" -- demo --model $golden/tiny-qwen3.json --train tp=2,pp=2 --infer tp=1,replicas=2 --steps 3 --transport file
expect 0 "verification off" -- demo $moe --infer tp=2 --steps 2 --no-verify
expect 0 "tcp broadcast" -- bench sync $moe --infer tp=2,ep=2,replicas=2 --steps 3
expect 2 "--mode \"eventual\": not a choice; want sync or async" -- demo --mode eventual
expect 2 "--transport \"carrier-pigeon\": not a choice; want shm, ucx or file" -- demo --transport carrier-pigeon
expect 2 "--steps \"0\": out of range; want an integer from 1 to 100000" -- demo --steps 0
expect 2 "unknown option" -- demo --frobnicate
expect 2 "trainer layout" -- demo --model $golden/tiny-qwen3.json --train tp=3 --steps 1
expect 2 "usage: ferry meta" -- meta
expect 1 "cannot connect" -- meta --status --meta 127.0.0.1:1
# a standalone service answers --status
"$ferry" meta --listen 127.0.0.1:0 >/tmp/ferry-meta-$$.out 2>&1 &
svc=$!
for _ in $(seq 50); do grep -q listening /tmp/ferry-meta-$$.out && break; sleep 0.1; done
addr=$(sed -n 's/.*listening on \([^ ]*\).*/\1/p' /tmp/ferry-meta-$$.out)
expect 0 '"members"' -- meta --status --meta "$addr"
kill -TERM $svc
wait $svc
rc=$?
if [ $rc -ne 0 ]; then echo "FAIL: ferry meta --listen exited $rc on SIGTERM"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
rm -f /tmp/ferry-meta-$$.out
expect_done
