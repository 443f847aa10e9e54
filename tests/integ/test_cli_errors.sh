#!/usr/bin/env bash
# Bad input to the CLI: exit status 2 (usage or input; 1 where an input file
# is unreadable) and a message that names the option or path, the bad value
# and what is allowed. Every case must end at once: a 20 s guard turns a
# hang (a FIFO opened for reading, a child holding a pipe) into a failure.
set -u
ferry=$1
here=$(dirname "$0")
golden="$here/../golden"
source "$here/expect.sh"
EXPECT_GUARD=20
tmp=$(mktemp -d)
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT
tiny="--model $golden/tiny-qwen3.json"

expect 2 "unknown command" -- bogus
expect 2 "usage: ferry COMMAND" --
expect 0 "ferry 0." -- --version
expect 0 "FERRY_LOG" -- info --config
expect 2 "is neither a file" -- layout --model no-such-model --side train --parallel tp=1
expect 2 "--side must be train or infer" -- layout --model qwen3-0.6b --side both --parallel tp=1
expect 2 "unknown key \"xp\"" -- layout --model qwen3-0.6b --side train --parallel xp=2
expect 2 "does not apply to the infer side" -- layout --model qwen3-0.6b --side infer --parallel pp=2
expect 2 "num_attention_heads = 16 is not divisible by tp = 3" -- layout --model qwen3-0.6b --side train --parallel tp=3
expect 2 "num_hidden_layers = 61 is not divisible by pp*vpp = 16" -- layout --model kimi-k2 --side train --parallel tp=8,pp=16,ep=64,dp=8
expect 2 "pp_layers adds up to 27 layers" -- layout --model qwen3-0.6b --side train --parallel pp=3,pp_layers=9+9+9
expect 2 "has no experts; ep and etp must be 1" -- layout --model qwen3-8b --side train --parallel ep=2,dp=2
expect 2 "tp*cp*dp = 4 is not divisible by ep*etp = 8" -- layout --model qwen3-30b-a3b --side train --parallel tp=4,ep=8
expect 2 "--rank 99 is not a rank" -- layout --model qwen3-0.6b --side train --parallel tp=2 --rank 99
# fp8 engines: the shards vLLM refuses, refused in its words; a trainer never holds fp8
expect 2 "fp8 parameter model.layers.0.mlp.gate_up_proj.weight: Weight output_partition_size = 576 is not divisible by weight quantization block_n = 128" -- layout --model deepseek-v3 --side infer --parallel tp=32,dp=32,ep=32 --quant auto
expect 2 "fp8 parameter model.layers.0.self_attn.q_b_proj.weight: Weight output_partition_size = 192 is not divisible" -- layout --model kimi-k2 --side infer --parallel tp=128,dp=2 --quant auto
expect 2 "transpose=*o_proj* matches fp8 parameter model.layers.0.self_attn.o_proj.weight;" -- layout --model deepseek-v3 --side infer --parallel tp=8,transpose=*o_proj* --quant auto
expect 2 "trainer layouts hold the unquantized weights" -- layout --model deepseek-v3 --side train --parallel tp=8 --quant auto
expect 2 "--quant must be none, auto or fp8, not \"int4\"" -- layout --model deepseek-v3 --side infer --parallel tp=8 --quant int4
out=$(FERRY_LOG=loud "$ferry" info 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -qF "FERRY_LOG=loud" <<<"$out"; then pass=$((pass + 1)); else echo "FAIL: FERRY_LOG=loud -> $rc $out"; fail=$((fail + 1)); fi
expect 0 "<- model.layers.0.self_attn.k_proj.weight [0:128, 0:1024]  at byte 524288" -- layout --model qwen3-0.6b --side train --parallel tp=2 --rank 0

# ---- numbers: one strict parser; the message names the option, the value and the range ----
u32="want an integer from 1 to 100000"
expect 2 "--steps \"4294967297\": out of range; $u32" -- demo --steps 4294967297
expect 2 "--steps \"-1\": negative; $u32" -- demo --steps -1
expect 2 "--steps \"abc\": not a number; $u32" -- demo --steps abc
expect 2 "--steps \"5x\": trailing characters" -- demo --steps 5x
expect 2 "--steps \" 5\": a sign or blank" -- demo --steps " 5"
expect 2 "--steps \"+5\": a sign or blank" -- demo --steps +5
expect 2 "--steps \"\": empty value" -- demo --steps=
expect 2 "--steps \"4K\": a size suffix, which this option does not take" -- demo --steps 4K
expect 2 "--steps \"0\": out of range" -- demo --steps 0
expect 2 "--steps needs a value" -- demo --steps
expect 2 "--lr \"abc\": not a decimal number; want a decimal number in [0, 1]" -- demo --lr abc
expect 2 "--lr \"1e-6x\": not a decimal number" -- demo --lr 1e-6x
expect 2 "--lr \"nan\": not a decimal number" -- demo --lr nan
expect 2 "--lr \"2\": out of range" -- demo --lr 2
expect 2 "--lr \"-0.1\": out of range" -- demo --lr -0.1
expect 2 "--seed \"18446744073709551616\": out of range; want an integer from 0 to 18446744073709551615" -- demo --seed 18446744073709551616
expect 2 "--timeout-ms \"0\": out of range; want an integer from 1 to 86400000" -- demo --timeout-ms 0
expect 2 "--slots \"17\": out of range; want an integer from 1 to 16" -- demo --slots 17
expect 2 "--mode \"eventual\": not a choice; want sync or async" -- demo --mode eventual
expect 2 "--transport \"carrier-pigeon\": not a choice; want shm, ucx or file" -- demo --transport carrier-pigeon
expect 2 "--deltas \"sometimes\": not a choice; want auto, always or off" -- demo --deltas sometimes
expect 2 "--steps \"1\": out of range; want an integer from 2 to 1000" -- bench sync --steps 1
expect 2 "--steps \"1001\": out of range" -- bench sync --steps 1001
expect 2 "--transports \"shm,shm\": \"shm\" given twice" -- bench sync --transports shm,shm
expect 2 "--transports \"shm,\": an empty item" -- bench sync --transports shm,
expect 2 "--transports \"tcp\": \"tcp\" is not a choice" -- bench sync --transports tcp
expect 2 "unknown option \"--repeat\"" -- bench sync --repeat 3
expect 2 "--deltas \"sometimes\": not a choice; want auto, always or off" -- bench sync --deltas sometimes
expect 2 "--threads \"65\": out of range; want an integer from 1 to 64" -- bench xport --threads 65
expect 2 "--threads \"2K\": a size suffix" -- bench xport --threads 2K
expect 2 "--repeat \"0\": out of range; want an integer from 1 to 1000" -- bench xport --repeat 0
expect 2 "--size \"64M,,1G\": an empty item" -- bench xport --size 64M,,1G
expect 2 "--size \"4Q\": item \"4Q\": not a size" -- bench xport --size 4Q
expect 2 "--size \"16777216T\": item \"16777216T\": out of range" -- bench xport --size 16777216T
expect 2 "--size \"1.5G\": item \"1.5G\": not an integer" -- bench xport --size 1.5G
expect 2 "--backend \"rdma\": not a choice; want shm or ucx" -- bench xport --backend rdma
expect 2 "--elems \"99999999999G\": out of range" -- bench delta --elems 99999999999G
expect 2 "--lr \"abc\": item \"abc\": not a decimal number" -- bench delta --lr abc
expect 2 "--lr \"1e-6,,2e-6\": an empty item" -- bench delta --lr 1e-6,,2e-6
expect 2 "--repeat \"65\": out of range; want an integer from 1 to 64" -- bench delta --repeat 65
expect 2 "--steps \"4294967297\": out of range; want an integer from 1 to 1000" -- bench delta --steps 4294967297
expect 2 "--memory \"gpu\": not a choice; want alloc or user" -- bench xport --memory gpu
plan="plan $tiny --train tp=2 --infer tp=1"
expect 0 "verified   every byte" -- $plan --bucket 4K --pack-below 1k
expect 2 "--bucket \"4Q\": not a size" -- $plan --bucket 4Q
expect 2 "--bucket \"0\": out of range; want from 1 to" -- $plan --bucket 0
expect 2 "--pack-below \"1.5K\": not an integer" -- $plan --pack-below 1.5K
expect 2 "--repeat \"4K\": a size suffix" -- $plan --repeat 4K
expect 2 "--repeat \"1001\": out of range; want an integer from 1 to 1000" -- $plan --repeat 1001
expect 2 "--rank \"-1\": negative" -- $plan --rank -1
expect 2 "--ranks-per-host \"0\": out of range" -- $plan --ranks-per-host 0
expect 2 "--locals \"99999999999999999999\": out of range" -- $plan --locals 99999999999999999999
expect 2 "--rank \"4294967297\": out of range; want an integer from 0 to 16777215" -- layout $tiny --side train --rank 4294967297
expect 2 "--rank \"abc\": not a number" -- layout $tiny --side train --rank abc
expect 2 "--lease-ms \"0\": out of range; want an integer from 1 to 86400000" -- meta --listen 127.0.0.1:0 --lease-ms 0
expect 2 "--lease-ms \"10x\": trailing characters" -- meta --listen 127.0.0.1:0 --lease-ms 10x
syn="delta synth $tmp/a.st $tmp/b.st"
expect 0 "Adam steps 1 and 2" -- $syn --elems 4K --tensors 2 --steps 2
expect 2 "--elems \"1023\": out of range; want from 1024 (1K) to 4294967296 (4G)" -- $syn --elems 1023
expect 2 "--elems \"4Q\": not a size" -- $syn --elems 4Q
expect 2 "--tensors \"0\": out of range" -- $syn --tensors 0
expect 2 "--steps \"1001\": out of range" -- $syn --steps 1001
expect 2 "--lr \"1\": out of range; want a decimal number in (0, 1)" -- $syn --lr 1
expect 2 "--lr \"0\": out of range" -- $syn --lr 0
expect 2 "--base-version \"-1\": negative" -- delta encode $tmp/a.st $tmp/b.st -o $tmp/d --base-version -1
expect 2 "--next-version \"18446744073709551615\": out of range; want an integer from 0 to 18446744073709551614" -- delta encode $tmp/a.st $tmp/b.st -o $tmp/d --next-version 18446744073709551615
expect 2 "--base-version \"1.5\": not an integer" -- delta apply $tmp/a.st $tmp/b.st -o $tmp/d --base-version 1.5
# key=value lists: a key given twice is refused by the library's parser, before any process starts
expect 2 "parallel spec \"tp=2,tp=4\": key \"tp\" is given twice" -- layout $tiny --side train --parallel tp=2,tp=4
expect 2 "parallel spec \"tp=2,,pp=2\": an empty entry" -- layout $tiny --side train --parallel tp=2,,pp=2
expect 2 "key \"replicas\" is given twice" -- plan $tiny --train tp=2 --infer replicas=2,replicas=2
expect 2 "key \"pp\" is given twice" -- demo $tiny --train pp=2,pp=2 --steps 1
expect 2 "key \"tp\" is given twice" -- bench sync $tiny --infer tp=1,tp=1 --no-baselines

# ---- paths: missing, unreadable, not a regular file, unwritable; refused at once, named ----
mkfifo "$tmp/fifo"
mkdir "$tmp/dir" "$tmp/ro"
: >"$tmp/plain"
chmod 500 "$tmp/ro"
unwritable=
for d in "$tmp/ro" /sys /proc/self; do # root writes into a mode-500 directory; /sys refuses it too
    if ! (: >"$d/.ferry-probe") 2>/dev/null; then unwritable=$d; break; fi
    rm -f "$d/.ferry-probe"
done
for cmd in "model" "layout --side train" "plan --train tp=1 --infer tp=1" "demo --steps 1" "bench sync --no-baselines"; do
    expect 2 "$tmp/fifo is a FIFO, not a regular config.json file" -- $cmd --model "$tmp/fifo"
    expect 2 "$tmp/dir is a directory, not a regular config.json file" -- $cmd --model "$tmp/dir"
    expect 2 "/dev/zero is a character device, not a regular config.json file" -- $cmd --model /dev/zero
done
expect 2 "$tmp/missing.json: No such file or directory" -- model --model "$tmp/missing.json"
expect 2 "model \"missing-name\" is neither a file" -- model --model missing-name
expect 0 "" -- delta synth "$tmp/base.st" "$tmp/next.st" --elems 4K --tensors 1
expect 0 "" -- delta encode "$tmp/base.st" "$tmp/next.st" -o "$tmp/d.ferry"
for f in fifo dir; do
    kind=$([ $f = fifo ] && echo "a FIFO" || echo "a directory")
    expect 1 "$tmp/$f is $kind, not a regular file" -- delta inspect "$tmp/$f"
    expect 1 "$tmp/$f is $kind, not a regular file" -- delta encode "$tmp/$f" "$tmp/next.st" -o "$tmp/out.st"
    expect 1 "$tmp/$f is $kind, not a regular file" -- delta encode "$tmp/base.st" "$tmp/$f" -o "$tmp/out.st"
    expect 1 "$tmp/$f is $kind, not a regular file" -- delta apply "$tmp/$f" "$tmp/d.ferry" -o "$tmp/out.st"
    expect 1 "$tmp/$f is $kind, not a regular file" -- delta apply "$tmp/base.st" "$tmp/$f" -o "$tmp/out.st"
    expect 2 "-o $tmp/$f: is $kind; outputs are regular files" -- delta encode "$tmp/base.st" "$tmp/next.st" -o "$tmp/$f"
    expect 2 "-o $tmp/$f: is $kind; outputs are regular files" -- delta apply "$tmp/base.st" "$tmp/d.ferry" -o "$tmp/$f"
    expect 2 "BASE $tmp/$f: is $kind; outputs are regular files" -- delta synth "$tmp/$f" "$tmp/x.st"
    expect 2 "NEXT $tmp/$f: is $kind; outputs are regular files" -- delta synth "$tmp/x.st" "$tmp/$f"
done
expect 1 "/dev/zero is a character device, not a regular file" -- delta inspect /dev/zero
expect 1 "/dev/zero is a character device, not a regular file" -- delta apply /dev/zero "$tmp/d.ferry" -o "$tmp/out.st"
expect 1 "cannot open $tmp/missing.st: No such file" -- delta inspect "$tmp/missing.st"
expect 2 "-o /dev/null: is a character device" -- delta apply "$tmp/base.st" "$tmp/d.ferry" -o /dev/null
if [ -c /dev/null ]; then pass=$((pass + 1)); else echo "FAIL: /dev/null is no longer a character device"; fail=$((fail + 1)); fi
expect 2 "-o $tmp/nodir/out.st: directory $tmp/nodir: No such file or directory" -- delta encode "$tmp/base.st" "$tmp/next.st" -o "$tmp/nodir/out.st"
expect 2 "-o $tmp/plain/out.st: directory $tmp/plain: is a regular file, not a directory" -- delta encode "$tmp/base.st" "$tmp/next.st" -o "$tmp/plain/out.st"
expect 2 "NEXT $tmp/nodir/n.st: directory $tmp/nodir" -- delta synth "$tmp/x.st" "$tmp/nodir/n.st"
expect 2 "--dir $tmp/nodir: No such file or directory" -- bench sync $tiny --dir "$tmp/nodir"
expect 2 "--dir $tmp/plain: is a regular file, not a directory" -- bench sync $tiny --dir "$tmp/plain"
expect 2 "--dir $tmp/fifo: is a FIFO, not a directory" -- bench sync $tiny --dir "$tmp/fifo"
if [ -n "$unwritable" ]; then
    expect 2 "--dir $unwritable: cannot create files there" -- bench sync $tiny --dir "$unwritable"
    expect 2 "-o $unwritable/out.st: directory $unwritable: cannot create files there" -- delta encode "$tmp/base.st" "$tmp/next.st" -o "$unwritable/out.st"
    expect 2 "BASE $unwritable/b.st: directory $unwritable: cannot create files there" -- delta synth "$unwritable/b.st" "$tmp/x.st"
else
    echo "note: no unwritable directory found here; those cases are not run"
fi
TMPDIR="$tmp/nodir" expect 2 "--transport file: cannot create $tmp/nodir/ferry-demo-" -- demo $tiny --train tp=2 --infer tp=1 --steps 1 --transport file
for f in x.st out.st; do
    if [ -e "$tmp/$f" ]; then echo "FAIL: a refused command wrote $tmp/$f"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
done
expect_done
