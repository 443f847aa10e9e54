"""Real RL-step deltas: how many bf16 weights change per optimizer step, and
what ferry's delta format costs per changed element.

Trains a Qwen3 model (the Qwen3-0.6B shape by default, randomly initialized;
transformers' Qwen3ForCausalLM) with fp32 master weights and torch's AdamW on
random token batches, as an RL trainer updates a policy, and after each step
casts the masters to bf16 (the weights an engine serves). Each step's bf16
weights are compared with the previous step's: the share of elements that
changed, the share of those that moved by one ulp, and the bytes of
ferry.delta.encode per changed element in format 1 and in format 2 (class
streams cut at sub-blocks, for GPUs), every delta applied back and checked
bit for bit. One table row per (learning rate, step); the first step after a
fresh optimizer is reported apart (Adam's first update moves every weight by
about lr, unlike the steady state).

    python bench/real_deltas.py [--lrs 1e-6,3e-6,1e-5] [--steps 4] [--device cuda]
        [--layers N] [--batch B] [--seq T] [--json out.json]

--layers cuts the model to N decoder layers (the same shapes per layer), for
small machines; --shape tiny is a toy Qwen3 (vocab 1000, hidden 64) for the
test suite. Prints a markdown table; --json also writes
every figure.
"""
import argparse
import json
import math
import platform
import sys
import time

import torch
import transformers

import ferry
from ferry import delta

QWEN3_0_6B = dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                  num_attention_heads=16, num_key_value_heads=8, head_dim=128, max_position_embeddings=40960,
                  rms_norm_eps=1e-6, rope_theta=1000000.0, tie_word_embeddings=True)
TINY = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, max_position_embeddings=256, tie_word_embeddings=False)
SHAPES = {"qwen3-0.6b": QWEN3_0_6B, "tiny": TINY}


def ordered(t):
    """bf16 bit patterns as order-preserving integers (docs/delta-format.md: ord)."""
    b = t.view(torch.int16).to(torch.int32)
    return torch.where(b >= 0, b, -(b & 0x7FFF) - 1)


def compare(prev, cur):
    """(elements, changed, changed by one ulp, delta bytes in format 1, in
    format 2) over every tensor; both deltas applied back."""
    elems = changed = unit = nbytes = nbytes2 = 0
    for name, p in prev.items():
        c = cur[name]
        elems += p.numel()
        diff = ordered(p) - ordered(c)
        nz = diff != 0
        changed += int(nz.sum())
        unit += int((diff.abs() == 1).sum())
        pc, cc = p.contiguous().cpu(), c.contiguous().cpu()
        for fmt in (1, 2):
            d = delta.encode(pc, cc, dtype="BF16", format=fmt)
            if fmt == 1:
                nbytes += len(d)
            else:
                nbytes2 += len(d)
            region = pc.clone()
            delta.apply(d, region, dtype="BF16")
            if not torch.equal(region.view(torch.int16), cc.view(torch.int16)):
                raise SystemExit(f"real_deltas: the format {fmt} delta of {name} did not reproduce the next weights")
    return elems, changed, unit, nbytes, nbytes2


def bf16_weights(model):
    return {n: p.detach().to(torch.bfloat16) for n, p in model.named_parameters()}


def run_lr(lr, args, device):
    torch.manual_seed(args.seed)
    shape = SHAPES[args.shape]
    cfg = transformers.Qwen3Config(**dict(shape, num_hidden_layers=args.layers or shape["num_hidden_layers"]))
    model = transformers.Qwen3ForCausalLM(cfg).to(device=device, dtype=torch.float32)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    gen = torch.Generator(device="cpu").manual_seed(args.seed + 1)
    prev = bf16_weights(model)
    rows = []
    for step in range(1, args.steps + 1):
        tokens = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), generator=gen).to(device)
        t0 = time.perf_counter()
        loss = model(input_ids=tokens, labels=tokens).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if device.type == "cuda":
            torch.cuda.synchronize()
        step_s = time.perf_counter() - t0
        cur = bf16_weights(model)
        t1 = time.perf_counter()
        elems, changed, unit, nbytes, nbytes2 = compare(prev, cur)
        rows.append(dict(lr=lr, step=step, loss=float(loss.detach()), elements=elems, changed=changed,
                         density=changed / elems, unit_share=unit / changed if changed else 0.0,
                         delta_bytes=nbytes, bytes_per_changed=nbytes / changed if changed else math.nan,
                         delta_bytes_format2=nbytes2,
                         bytes_per_changed_format2=nbytes2 / changed if changed else math.nan,
                         step_seconds=step_s, codec_seconds=time.perf_counter() - t1))
        prev = cur
        print(f"lr {lr:g} step {step}: {changed / elems:.4%} changed, {rows[-1]['bytes_per_changed']:.3f} B per "
              f"changed element ({step_s:.1f} s step)", file=sys.stderr)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lrs", default="1e-6,3e-6,1e-5")
    ap.add_argument("--steps", type=int, default=4, help="optimizer steps per learning rate (>= 2)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--layers", type=int, default=0, help="decoder layers (default: the shape's)")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--json", help="also write every figure here")
    args = ap.parse_args(argv)
    if args.steps < 2 or args.layers < 0 or args.batch < 1 or args.seq < 2:
        ap.error("--steps >= 2, --layers >= 1, --batch >= 1, --seq >= 2")
    lrs = [float(x) for x in args.lrs.split(",")]
    device = torch.device(args.device)
    rows = [r for lr in lrs for r in run_lr(lr, args, device)]
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    layers = args.layers or SHAPES[args.shape]["num_hidden_layers"]
    print(f"Qwen3 shape {args.shape}, {layers} layers, {rows[0]['elements']} bf16 weights; AdamW (fp32 masters), "
          f"batch {args.batch} x {args.seq} random tokens, seed {args.seed}; {where}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}, ferry {ferry.__version__}")
    print("| lr | step | changed | of them 1 ulp | delta bytes per changed element | format 2 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['lr']:g} | {r['step']}{' (first)' if r['step'] == 1 else ''} | {r['density']:.3%} | "
              f"{r['unit_share']:.1%} | {r['bytes_per_changed']:.3f} | {r['bytes_per_changed_format2']:.3f} |")
    for lr in lrs:
        later = [r for r in rows if r["lr"] == lr and r["step"] > 1]
        ch = sum(r["changed"] for r in later)
        print(f"lr {lr:g}, steps 2..{args.steps}: {ch / sum(r['elements'] for r in later):.3%} changed, "
              f"{sum(r['delta_bytes'] for r in later) / ch:.3f} B per changed element "
              f"(format 2: {sum(r['delta_bytes_format2'] for r in later) / ch:.3f})")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(args=vars(args), device=where, rows=rows), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
