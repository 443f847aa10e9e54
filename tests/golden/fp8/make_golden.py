"""The reference for ferry's FP8 block quantization (include/ferry/fp8.h):
DeepSeek-V3's / DeepGEMM's per_block_cast_to_fp8, written in torch, and the
golden files tests/unit/test_fp8.c checks ferry against byte for byte.

    .venv/bin/python tests/golden/fp8/make_golden.py   (rewrites the files here)

Each case NAME: NAME.in (the input, row-major, little-endian), NAME.fp8
(float8_e4m3fn bytes, rows x cols) and NAME.scale (float32
weight_scale_inv, ceil(rows/128) x ceil(cols/128)); cases.txt lists
NAME dtype rows cols ue8m0. cvt.in / cvt.fp8: float32 values and torch's
float8_e4m3fn conversion of each (every rounding edge)."""
import os

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BLOCK = 128


def ceil_to_ue8m0(x):
    return torch.pow(2.0, torch.ceil(torch.log2(x.abs())))


def per_block_cast_to_fp8(x, use_ue8m0):
    m, n = x.shape
    pm, pn = -(-m // BLOCK) * BLOCK, -(-n // BLOCK) * BLOCK
    x_padded = torch.zeros((pm, pn), dtype=x.dtype)
    x_padded[:m, :n] = x
    x_view = x_padded.view(-1, BLOCK, pn // BLOCK, BLOCK)
    x_amax = x_view.abs().float().amax(dim=(1, 3), keepdim=True).clamp(1e-4)
    sf = x_amax / 448.0
    sf = ceil_to_ue8m0(sf) if use_ue8m0 else sf
    x_scaled = (x_view * (1.0 / sf)).to(torch.float8_e4m3fn)
    return x_scaled.view_as(x_padded)[:m, :n].contiguous(), sf.view(x_view.size(0), x_view.size(2))


def weights(rows, cols, dtype, seed):
    """Weight-like values over many binades, some blocks all zero or tiny."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, cols, generator=g) * 0.02
    x *= torch.pow(2.0, torch.randint(-6, 7, (rows, cols), generator=g).float() / 2)
    if rows > BLOCK and cols > BLOCK:
        x[:BLOCK, :BLOCK] = 0                            # an all-zero block: the 1e-4 floor
        x[BLOCK:2 * BLOCK, :BLOCK] *= 1e-6               # a tiny block: the floor too
        x[:BLOCK, BLOCK:2 * BLOCK] *= 3e4                # large values
    return x.to(dtype)


def edges():
    """Blocks (one row each) whose amax / 448 is on a power of two or 1 to
    50 float32 ulps above one: where a float32 log2's ceiling and the exact
    one can disagree, and ferry must follow the reference."""
    nb = 200
    x = torch.full((1, BLOCK * nb), 1e-6, dtype=torch.float32)
    for b in range(nb):
        k, j = -20 + (b % 4), b // 4
        x[0, b * BLOCK] = torch.tensor(448.0 * 2.0 ** k * (1 + j * 2.0 ** -23), dtype=torch.float32)
    return x


def main():
    cases = [
        ("bf16_256x384", torch.bfloat16, 256, 384, False, 1),
        ("bf16_256x384_ue8m0", torch.bfloat16, 256, 384, True, 1),
        ("bf16_200x130", torch.bfloat16, 200, 130, False, 2),       # partial blocks on both sides
        ("bf16_300x257_ue8m0", torch.bfloat16, 300, 257, True, 3),
        ("f32_256x256", torch.float32, 256, 256, False, 4),
        ("f32_129x500_ue8m0", torch.float32, 129, 500, True, 5),
        ("bf16_1x7", torch.bfloat16, 1, 7, False, 6),
    ]
    lines = []
    for name, dtype, rows, cols, ue8m0, seed in cases + [("f32_ue8m0_edges", torch.float32, 1, 128 * 200, True, 0)]:
        x = edges() if seed == 0 else weights(rows, cols, dtype, seed)
        q, s = per_block_cast_to_fp8(x, ue8m0)
        raw = x.view(torch.int16) if dtype == torch.bfloat16 else x.view(torch.int32)
        with open(os.path.join(HERE, name + ".in"), "wb") as f:
            f.write(raw.numpy().tobytes())
        with open(os.path.join(HERE, name + ".fp8"), "wb") as f:
            f.write(q.view(torch.uint8).numpy().tobytes())
        with open(os.path.join(HERE, name + ".scale"), "wb") as f:
            f.write(s.contiguous().numpy().tobytes())
        lines.append("%s %s %d %d %d" % (name, "bf16" if dtype == torch.bfloat16 else "f32", rows, cols, int(ue8m0)))
    with open(os.path.join(HERE, "cases.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # the conversion alone: every fp8 value, the midpoints between neighbours
    # and a float32 ulp either side of them, out of range, inf, nan, signed
    vals = []
    fp8 = torch.arange(256, dtype=torch.int32).to(torch.uint8).view(torch.float8_e4m3fn).float()
    fin = sorted({v for v in fp8.tolist() if v == v and v >= 0})
    for a, b in zip(fin, fin[1:]):
        mid = (a + b) / 2
        vals += [a, mid, b]
    t = torch.tensor(vals, dtype=torch.float32)
    up = torch.nextafter(t, torch.tensor(float("inf")))
    down = torch.nextafter(t, torch.tensor(-float("inf")))
    extra = torch.tensor([448.0, 464.0, 480.0, 1e30, float("inf"), float("nan"), 2.0 ** -10, 2.0 ** -12, 1e-30, 0.0])
    g = torch.Generator().manual_seed(9)
    rnd = (torch.rand(20000, generator=g) * 2 - 1) * torch.pow(2.0, torch.randint(-14, 10, (20000,), generator=g).float())
    t = torch.cat([t, up, down, extra, rnd])
    t = torch.cat([t, -t])
    with open(os.path.join(HERE, "cvt.in"), "wb") as f:
        f.write(t.view(torch.int32).numpy().tobytes())
    with open(os.path.join(HERE, "cvt.fp8"), "wb") as f:
        f.write(t.to(torch.float8_e4m3fn).view(torch.uint8).numpy().tobytes())
    print("torch %s: %d cases, %d conversions" % (torch.__version__, len(cases), t.numel()))


if __name__ == "__main__":
    main()
