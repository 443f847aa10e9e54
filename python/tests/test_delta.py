"""ferry.delta: bf16 round trips with a few % of elements changed, exact to
the bit (NaN payloads, -0); damaged deltas are refused and leave the region
as it was; inspect counts what really changed."""
import numpy as np
import pytest
import torch

import ferry
from ferry import delta

N = 1 << 18


def step(base, frac, seed):
    """base with about frac of its elements moved by one ulp (as int16 bits),
    plus a few special values; returns (next, true changed count)."""
    g = torch.Generator().manual_seed(seed)
    nxt = base.clone()
    bits = nxt.view(torch.int16)
    idx = torch.randint(0, N, (int(N * frac),), generator=g)
    bits[idx] += 1
    bits[5] = 0x7FC1  # a NaN with a payload
    bits[6] = -0x8000  # -0.0
    changed = int((bits != base.view(torch.int16)).sum())
    return nxt, changed


@pytest.fixture
def pair():
    base = torch.randn(N, generator=torch.Generator().manual_seed(9)).to(torch.bfloat16)
    nxt, changed = step(base, 0.03, 1)
    return base, nxt, changed


def bits(t):
    return t.view(torch.int16)


def test_round_trip_and_inspect(pair):
    base, nxt, changed = pair
    d = delta.encode(base, nxt, base_version=4, next_version=5, chunk_elems=1 << 16)
    assert isinstance(d, bytes)
    assert len(d) < N * 2 // 4  # a small fraction of the raw bytes
    info = delta.inspect(d)
    assert info.dtype == "BF16" and info.elems == N
    assert info.chunk_elems == 1 << 16 and info.chunks == 4
    assert (info.base_version, info.next_version) == (4, 5)
    assert info.changed == changed
    assert info.bytes_total == len(d)
    assert info.bytes_positions > 0 and info.bytes_values > 0
    assert info.base_sum == delta.region_sum(base, 1 << 16)
    assert info.next_sum == delta.region_sum(nxt, 1 << 16)
    peeked = delta.peek(d)
    assert peeked.changed == changed and peeked.bytes_positions == 0

    region = base.clone()
    applied = delta.apply(d, region, base_version=4)
    assert applied.changed == changed and applied.next_version == 5
    assert torch.equal(bits(region), bits(nxt))
    # any bytes-like delta; integer storage of bf16 bits as the region
    region = base.clone().view(torch.int16)
    delta.apply(memoryview(d), region)
    assert torch.equal(region, bits(nxt))
    region = base.clone()
    delta.apply(bytearray(d), region)
    assert torch.equal(bits(region), bits(nxt))
    # numpy, 2-d: the region is flat elements in order
    npbase = base.view(torch.int16).numpy().reshape(512, 512).copy()
    delta.apply(np.frombuffer(d, dtype=np.uint8), npbase)
    assert np.array_equal(npbase.reshape(-1), bits(nxt).numpy())


def test_damage_is_refused_and_changes_nothing(pair):
    base, nxt, _ = pair
    d = delta.encode(base, nxt, 1, 2)
    for at in (len(d) // 2, len(d) - 3, 40):
        bad = bytearray(d)
        bad[at] ^= 0x40
        region = base.clone()
        with pytest.raises(ferry.CorruptError) as e:
            delta.apply(bad, region)
        assert e.value.detail and e.value.status_name == "FERRY_ERR_CORRUPT"
        assert torch.equal(bits(region), bits(base))
    region = base.clone()
    with pytest.raises(ferry.MismatchError):
        delta.apply(d, region, base_version=7)  # for another base version
    assert torch.equal(bits(region), bits(base))
    other = nxt.clone()  # not the base: the chunk checksums tell
    with pytest.raises(ferry.MismatchError):
        delta.apply(d, other)
    assert torch.equal(bits(other), bits(nxt))
    with pytest.raises(ferry.MismatchError):
        delta.apply(d, torch.zeros(N, dtype=torch.float32))  # another dtype
    with pytest.raises(ferry.MismatchError):
        delta.apply(d, torch.zeros(N // 2, dtype=torch.bfloat16))  # another size
    with pytest.raises(ferry.CorruptError):
        delta.inspect(d[: len(d) // 2])
    with pytest.raises(ferry.InvalidArgumentError, match="contiguous"):
        delta.apply(d, torch.zeros(2 * N, dtype=torch.bfloat16)[::2])
    with pytest.raises(ferry.InvalidArgumentError):
        delta.apply("not bytes", base.clone())


def test_encode_arguments(pair):
    base, nxt, _ = pair
    with pytest.raises(ferry.MismatchError):
        delta.encode(base, nxt[:100])
    with pytest.raises(ferry.InvalidArgumentError, match="BF16"):
        delta.encode(base.view(torch.int16), nxt.view(torch.int16))
    # int16 storage taken as bf16 when told
    d = delta.encode(base.view(torch.int16), nxt.view(torch.int16), dtype="BF16")
    assert delta.encode(base.view(torch.int16), nxt.view(torch.int16), dtype="bf16") == d  # any case
    with pytest.raises(ferry.InvalidArgumentError, match="'bf17' is not one ferry knows"):
        delta.encode(base.view(torch.int16), nxt.view(torch.int16), dtype="bf17")
    region = base.clone()
    delta.apply(d, region)
    assert torch.equal(bits(region), bits(nxt))
    with pytest.raises(ferry.InvalidArgumentError):
        delta.encode(base, nxt, chunk_elems=1000)  # not a power of two
    assert delta.bound("BF16", N) >= len(delta.encode(base, nxt, max_classes=1))


def test_files(pair):
    base, nxt, _ = pair
    b = {"w": base.reshape(512, 512), "step": torch.tensor([1, 2], dtype=torch.int64)}
    n = {"w": nxt.reshape(512, 512), "step": torch.tensor([3, 4], dtype=torch.int64)}
    data = delta.encode_file(b, n, 10, 11, metadata={"format": "pt", "note": "x"})
    held = {k: v.clone() for k, v in b.items()}
    delta.apply_file(data, held, base_version=10)
    assert torch.equal(bits(held["w"]), bits(n["w"])) and torch.equal(held["step"], n["step"])
    held = {k: v.clone() for k, v in b.items()}
    with pytest.raises(ferry.MismatchError):
        delta.apply_file(data, held, base_version=9)
    bad = bytearray(data)
    bad[len(bad) // 2] ^= 1
    with pytest.raises((ferry.CorruptError, ferry.MismatchError)):
        delta.apply_file(bad, held)
    assert torch.equal(bits(held["w"]), bits(b["w"])) and torch.equal(held["step"], b["step"])
    with pytest.raises(ferry.MismatchError, match="step"):
        delta.apply_file(data, {"w": held["w"]})  # step missing
    with pytest.raises(ferry.MismatchError):
        delta.encode_file(b, {"w": n["w"]}, 1, 2)


def test_format_2(pair):
    """format=2 writes class streams cut at sub-blocks: a little larger,
    the same result, said by peek; other formats are refused."""
    base, nxt, changed = pair
    d1 = delta.encode(base, nxt, 1, 2)
    d2 = delta.encode(base, nxt, 1, 2, format=2)
    assert delta.peek(d1).format == 1 and delta.peek(d2).format == 2
    assert delta.encode(base, nxt, 1, 2, format=1) == d1
    assert len(d1) < len(d2) < 1.1 * len(d1)
    info = delta.inspect(d2)
    assert info.changed == changed and info.format == 2
    region = base.clone()
    delta.apply(d2, region, base_version=1)
    assert torch.equal(bits(region), bits(nxt))
    with pytest.raises(ferry.InvalidArgumentError, match="format 3"):
        delta.encode(base, nxt, format=3)
