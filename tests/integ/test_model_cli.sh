#!/usr/bin/env bash
# ferry model: the bundled specs' figures, and --quant: an fp8 engine's spec
# of DeepSeek-V3 / Kimi-K2 (fp8 weights' bytes, weight_scale_inv count and
# bytes, the same in --json), the trainer's spec unchanged, refusals.
set -u
ferry=$1
source "$(dirname "$0")/expect.sh"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the trainer's spec (none is the default): docs/layouts.md's counts, no fp8 lines
expect 0 "parameters   671.03 B (671026419200) in 45395 tensors" -- model --model deepseek-v3
expect 0 "parameters   671.03 B (671026419200) in 45395 tensors" -- model --model deepseek-v3 --quant none
out=$("$ferry" model --model deepseek-v3 --quant none)
if grep -q "fp8\|scales" <<<"$out"; then echo "FAIL: --quant none printed fp8 lines"; fail=$((fail + 1)); else pass=$((pass + 1)); fi
# the engine's: 45032 fp8 weights (1 byte each), 45032 scale tensors of 40,838,232 floats
expect 0 "fp8          45032 tensors, 669.07 B elements: 623.12 GiB as float8_e4m3fn, 128x128 blocks" -- model --model deepseek-v3 --quant auto
expect 0 "scales       45032 weight_scale_inv tensors, 40.8 M floats (40838232): 155.79 MiB" -- model --model deepseek-v3 --quant auto
expect 0 "parameters   671.07 B (671067257432) in 90427 tensors" -- model --model deepseek-v3 --quant auto
expect 0 "scales       69608 weight_scale_inv tensors, 62.5 M floats (62495192)" -- model --model kimi-k2 --quant auto
# MTP: layer 61's linears too (eh_proj stays bf16)
expect 0 "scales       45808 weight_scale_inv tensors" -- model --model deepseek-v3 --quant auto --mtp
expect 0 '"scales": 40838232' -- model --model deepseek-v3 --quant auto --json
# 671,026,419,200 less embed and lm_head (2 x 129280 x 7168), 58 routers (256 x 7168),
# norms (61 x 16384 + 7168) and 58 e_score_correction_bias (256): 1 byte each
expect 0 '"fp8_bytes": 669065609216' -- model --model deepseek-v3 --quant auto --json
expect 0 '"fp8_tensors": 0' -- model --model deepseek-v3 --json
# --tensors names each pair
"$ferry" model --model deepseek-v3 --quant auto --mtp --tensors >"$tmp/t.txt"
for line in 'model\.layers\.61\.self_attn\.kv_a_proj_with_mqa\.weight +F8_E4M3 \[576, 7168\]' \
            'model\.layers\.61\.self_attn\.kv_a_proj_with_mqa\.weight_scale_inv +F32 +\[5, 56\]' \
            'model\.layers\.61\.eh_proj\.weight +BF16 +\[7168, 14336\]' \
            'model\.layers\.3\.mlp\.gate\.weight +BF16 +\[256, 7168\]'; do
    if grep -qE -- "^$line\$" "$tmp/t.txt"; then pass=$((pass + 1)); else echo "FAIL: --tensors lacks: $line"; fail=$((fail + 1)); fi
done
if grep -q "eh_proj.weight_scale_inv\|mlp.gate.weight_scale_inv\|norm.weight_scale_inv\|embed_tokens.weight_scale_inv\|lm_head.weight_scale_inv" "$tmp/t.txt"; then
    echo "FAIL: --tensors has a scale of a tensor that stays bf16"; fail=$((fail + 1))
else
    pass=$((pass + 1))
fi
# a config whose quantization_config ferry cannot honour: auto refuses naming the field, none reads past it
python3 - "$(dirname "$0")/../../models/deepseek-v3.json" "$tmp/ds64.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["quantization_config"]["weight_block_size"] = [64, 64]
json.dump(c, open(sys.argv[2], "w"))
PY
expect 2 'quantization_config.weight_block_size = [64,64] is not supported ([128, 128] only)' -- model --model "$tmp/ds64.json" --quant auto
expect 0 "671026419200" -- model --model "$tmp/ds64.json"
expect 2 "fp8 engine specs are generated for deepseek_v3 and kimi_k2 only" -- model --model qwen3-8b --quant fp8
expect 0 "parameters   8.19 B (8190735360)" -- model --model qwen3-8b --quant auto
expect 2 "--quant must be none, auto or fp8, not \"int4\"" -- model --model deepseek-v3 --quant int4
expect_done
