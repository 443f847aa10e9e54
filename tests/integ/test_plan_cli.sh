#!/usr/bin/env bash
# ferry plan on every bundled model: each plan verified (every destination byte
# written exactly once) and local plans agreeing with the global one; bad input
# exits 2 with a message naming the problem.
set -u
ferry=$1
source "$(dirname "$0")/expect.sh"
ok="is written exactly once"
agree="digests agree with the global plan"
expect 0 "$agree" -- plan --model qwen3-0.6b --train tp=2,dp=2 --infer tp=4,replicas=2 --locals 3
expect 0 "$agree" -- plan --model qwen3-0.6b --train tp=2,pp=2,vpp=2,dp=2,buffers=flat --infer tp=1,replicas=3 --locals 4
expect 0 "$agree" -- plan --model qwen3-8b --train tp=8,dp=4 --infer tp=2,replicas=16,transpose=*down_proj* --locals 4
expect 0 "$agree" -- plan --model qwen3-8b --train tp=2,pp=2,cp=2,dp=2 --infer tp=8,dp=2,replicas=2 --locals 4
expect 0 "$agree" -- plan --model qwen3-30b-a3b --train tp=4,pp=2,ep=8,dp=2 --infer tp=4,ep=4,replicas=8 --locals 2
expect 0 "$agree" -- plan --model qwen3-30b-a3b --train tp=2,ep=4,etp=2,dp=4,experts=grouped_t --infer tp=8,replicas=2 --locals 2
expect 0 "$agree" -- plan --model deepseek-v3 --train tp=8,pp=8,ep=32,dp=4,pp_first=7,pp_last=6 --infer tp=8,ep=8,replicas=4 --locals 2
expect 0 "$ok" -- plan --model kimi-k2 --train tp=8,pp=4,ep=64,dp=8,pp_first=16,pp_last=15 --infer tp=16,ep=16,replicas=8
expect 0 "$ok" -- plan --model deepseek-v3 --mtp --train tp=4,pp=4,ep=16,dp=4,pp_first=16,pp_last=15 --infer tp=8,ep=8,replicas=2
# a column split with a bounded pack area: the rest is read run by run, local plans agree
expect 0 "strided ops read run by run" -- plan --model qwen3-8b --train tp=1 --infer tp=2 --pack-limit 64M --locals 2
# the local plan of one reader and one writer
expect 0 "its sources in reading order" -- plan --model qwen3-8b --train tp=8,dp=4 --infer tp=2,replicas=16 --rank 5
expect 0 "pack area" -- plan --model qwen3-8b --train tp=2,dp=2 --infer tp=8,replicas=2 --writer 1
# JSON carries the same figures
expect 0 "\"verified\": true" -- plan --model qwen3-0.6b --train tp=2 --infer tp=2 --json
# bad input
expect 2 "usage: ferry plan" -- plan --model qwen3-0.6b --train tp=2
expect 2 "unknown option --bogus" -- plan --bogus
expect 2 "--rank must be below 4" -- plan --model qwen3-0.6b --train tp=2 --infer tp=4 --rank 4
expect 2 "give --rank or --writer, not both" -- plan --model qwen3-0.6b --train tp=2 --infer tp=4 --rank 0 --writer 0
expect 2 "--bucket \"lots\": not a number" -- plan --model qwen3-0.6b --train tp=2 --infer tp=4 --bucket lots
expect 2 "--ranks-per-host \"0\": out of range; want an integer from 1 to 16777216" -- plan --model qwen3-0.6b --train tp=2 --infer tp=4 --ranks-per-host 0
expect 2 "--bucket \"0\": out of range; want from 1 to" -- plan --model qwen3-0.6b --train tp=2 --infer tp=4 --bucket 0
expect 2 "unknown key \"xp\"" -- plan --model qwen3-0.6b --train xp=2 --infer tp=4
expect 2 "num_attention_heads = 16 is not divisible by attention tp (tp/dp) = 3" -- plan --model qwen3-0.6b --train tp=2 --infer tp=3
# a bf16 trainer into an fp8 engine: the writers' quant ops, and the plan verifies
expect 0 "quant ops write" -- plan --model "$(dirname "$0")/../golden/tiny-mla-fp8.json" --train tp=2 --infer tp=2,ep=2 --quant auto
expect 0 "every byte of the" -- plan --model "$(dirname "$0")/../golden/tiny-mla-fp8.json" --train tp=2 --infer tp=2,ep=2 --quant auto
# a trainer split that cuts 128-blocks of an fp8 engine's weight: refused, naming it
expect 1 "cuts 128 x 128 blocks" -- plan --model "$(dirname "$0")/../golden/tiny-mla-fp8.json" --train tp=4 --infer tp=2,ep=2 --quant auto
expect_done
