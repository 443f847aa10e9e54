#!/usr/bin/env bash
# Bad input to the CLI: exit status 2 and a message that names the problem.
set -u
ferry=$1
source "$(dirname "$0")/expect.sh"
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
out=$(FERRY_LOG=loud "$ferry" info 2>&1); rc=$?
if [ $rc -eq 2 ] && grep -qF "FERRY_LOG=loud" <<<"$out"; then pass=$((pass + 1)); else echo "FAIL: FERRY_LOG=loud -> $rc $out"; fail=$((fail + 1)); fi
expect 0 "<- model.layers.0.self_attn.k_proj.weight [0:128, 0:1024]  at byte 524288" -- layout --model qwen3-0.6b --side train --parallel tp=2 --rank 0
expect_done
