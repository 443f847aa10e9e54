"""ferry.Channel: a writer publishes versions into a directory; readers
from nothing and from an older version end bit-exact, the latter by
applying deltas."""
import pytest
import torch

import ferry


def versions(n, seed=3):
    """n versions of a small model: bf16 weights where a few % of the
    elements move by one ulp per version, and a step counter (int64, which
    the codec does not take: it travels whole)."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(256, 256, generator=g).to(torch.bfloat16)
    norm = torch.randn(4096, generator=g).to(torch.bfloat16)
    out = []
    for ver in range(1, n + 1):
        for t in (w, norm):
            bits = t.view(torch.int16).view(-1)
            idx = torch.randint(0, bits.numel(), (bits.numel() // 30,), generator=g)
            bits[idx] += 1
        out.append({"layers.0.weight": w.clone(), "norm.weight": norm.clone(),
                    "step": torch.arange(4, dtype=torch.int64) + 10 * ver})
    return out


def empty_like(ts):
    return {k: torch.zeros_like(v) for k, v in ts.items()}


def same(a, b):
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if x.dtype == torch.bfloat16:
            x, y = x.view(torch.int16), y.view(torch.int16)
        assert torch.equal(x, y), k


def test_publish_and_follow(tmp_path):
    d = tmp_path / "ch"
    vs = versions(3)
    w = ferry.Channel(d, "w", snapshot_every=10, keep=4)
    assert w.mode == "w" and w.version is None
    w.publish(1, vs[0])
    assert w.version == 1

    early = ferry.Channel(d)  # follows from version 1
    early_t = empty_like(vs[0])
    assert early.version is None
    info = early.update(early_t)
    assert (info.from_version, info.to_version, info.snapshots, info.deltas) == (None, 1, 1, 0)
    assert info.bytes_read > 0
    assert early.version == 1
    same(early_t, vs[0])

    w.publish(2, vs[1])
    w.publish(3, vs[2])

    # from version 1: the two deltas, no snapshot
    info = early.update(early_t)
    assert info.from_version == 1 and info.to_version == 3
    assert info.snapshots == 0 and info.deltas == 2
    same(early_t, vs[2])

    # from nothing: the snapshot of version 1 and the deltas after it
    with ferry.Channel(str(d), mode="r") as late:
        late_t = empty_like(vs[0])
        info = late.update(late_t)
        assert info.from_version is None and info.to_version == 3
        assert info.snapshots == 1 and info.deltas > 0
        same(late_t, vs[2])
        # up to date: nothing to read
        info = late.update(late_t)
        assert (info.from_version, info.to_version, info.deltas, info.snapshots) == (3, 3, 0, 0)
    assert late.closed

    # a reader told what its tensors hold (version 1) applies only deltas
    told = ferry.Channel(d)
    told_t = {k: v.clone() for k, v in vs[0].items()}
    told.version = 1
    info = told.update(told_t)
    assert info.from_version == 1 and info.deltas == 2 and info.snapshots == 0
    same(told_t, vs[2])
    w.close()


def test_errors(tmp_path):
    d = tmp_path / "ch"
    w = ferry.Channel(d, "w")
    r = ferry.Channel(d, "r")
    t = {"x": torch.zeros(1024, dtype=torch.bfloat16)}
    with pytest.raises(ferry.NotFoundError):
        r.update(t)  # nothing published yet
    assert r.version is None
    w.publish(1, {"x": torch.ones(1024, dtype=torch.bfloat16)})
    with pytest.raises(ferry.InvalidArgumentError):
        w.publish(1, {"x": torch.ones(1024, dtype=torch.bfloat16)})  # not increasing
    with pytest.raises(ferry.InvalidArgumentError, match="contiguous"):
        w.publish(2, {"x": torch.ones(2048, dtype=torch.bfloat16)[::2]})
    with pytest.raises(ferry.InvalidArgumentError, match="publish"):
        r.publish(2, t)
    with pytest.raises(ferry.InvalidArgumentError, match="update"):
        w.update(t)
    with pytest.raises(ferry.InvalidArgumentError, match="dict"):
        r.update([torch.zeros(3)])
    with pytest.raises(ferry.InvalidArgumentError, match="mode"):
        ferry.Channel(d, "x")
    with pytest.raises(ferry.InvalidArgumentError, match="writer"):
        ferry.Channel(d, "r", keep=3)
    info = r.update(t)
    assert info.to_version == 1 and torch.equal(t["x"], torch.ones(1024, dtype=torch.bfloat16))
    fresh = ferry.Channel(d)
    with pytest.raises(ferry.MismatchError):
        fresh.update({"x": torch.zeros(512, dtype=torch.bfloat16)})  # not the published shape
    assert fresh.version is None
    w.close()
    r.close()
    with pytest.raises(ferry.StaleError):
        r.update(t)
