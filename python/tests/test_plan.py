"""ferry.Plan: the resharding plan of a bundled model from a tp=2 trainer to
a tp=1 engine moves every byte of the model once; plans are deterministic
and verify; bad layouts are refused naming the tensor."""
import pytest

import ferry


@pytest.fixture(scope="module")
def model():
    return ferry.Model.from_config("qwen3-0.6b")


def test_tp2_train_to_tp1_infer(model):
    src = ferry.Layout.train(model, "tp=2")
    dst = ferry.Layout.infer(model, "tp=1")
    plan = ferry.Plan(src, dst)
    s = plan.stats
    assert s["bytes"] == model.byte_size
    assert s["op_bytes"] == model.byte_size
    assert s["ops"] == plan.op_count and s["buckets"] == plan.bucket_count and s["pairs"] == plan.pair_count
    assert s["src_serving"] == 2
    assert s["src_lower_bound"] <= s["src_max"] <= model.byte_size
    assert plan.dst_bytes(0) == model.byte_size
    assert plan.src_bytes(0) + plan.src_bytes(1) == model.byte_size
    assert sum(plan.pack_bytes(r) for r in range(2)) == s["pack_bytes"]
    ops = plan.ops()
    assert len(ops) == plan.op_count
    assert sum(op.bytes for op in ops) == model.byte_size
    names = {t.name for t in model.tensors}
    assert {op.tensor for op in ops} <= names
    pairs = plan.pairs()
    assert {(p.src_rank, p.dst_rank) for p in pairs} == {(0, 0), (1, 0)}
    assert sum(p.bytes for p in pairs) == model.byte_size
    assert sum(p.op_count for p in pairs) == plan.op_count
    buckets = plan.buckets()
    assert sum(b.op_count for b in buckets) == plan.op_count
    assert plan.ops(start=plan.op_count - 1) == ops[-1:]
    plan.verify()
    with pytest.raises(ferry.NotFoundError):
        plan.src_bytes(2)
    # deterministic: another build of the same inputs has the same digest
    again = ferry.Plan(ferry.Layout.train(model, "tp=2"), ferry.Layout.infer(model, "tp=1"))
    assert again.digest == plan.digest and len(plan.digest) == 16
    # other parameters, another plan; hosts are one label per rank
    small = ferry.Plan(src, dst, bucket_bytes=1 << 16, pack_below=0, src_hosts=[0, 0], dst_hosts=[0])
    assert small.stats["bytes"] == model.byte_size and small.digest != plan.digest
    with pytest.raises(ferry.InvalidArgumentError, match="src_hosts"):
        ferry.Plan(src, dst, src_hosts=[0])


def test_plan_keeps_layouts_alive(model):
    plan = ferry.Plan(ferry.Layout.train(model, "tp=2"), ferry.Layout.infer(model, "tp=2"))
    plan.verify()  # the layouts exist only through the plan
    assert plan.src_layout.world_size == 2 and plan.dst_layout.world_size == 2
    assert plan.dst_bytes(0) + plan.dst_bytes(1) == plan.stats["bytes"]


def test_local_plans_agree_with_the_global_one(model):
    src, dst = ferry.Layout.train(model, "tp=2"), ferry.Layout.infer(model, "tp=2")
    whole = ferry.Plan(src, dst)
    ops = 0
    for r in range(2):
        mine = ferry.Plan(src, dst, dst_rank=r)
        assert mine.digest == whole.digest
        assert mine.stats["bytes"] == whole.stats["bytes"]
        assert mine.stats["op_bytes"] == whole.dst_bytes(r)
        assert {op.dst_rank for op in mine.ops()} == {r}
        mine.verify()
        ops += mine.op_count
    assert ops == whole.op_count
    served = ferry.Plan(src, dst, src_rank=1)
    assert {op.src_rank for op in served.ops()} == {1}
    assert served.stats["op_bytes"] == whole.src_bytes(1)
    with pytest.raises(ferry.NotFoundError):
        ferry.Plan(src, dst, dst_rank=2)
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.Plan(src, dst, src_rank=0, dst_rank=0)


def test_refused_layouts():
    m = ferry.Model.custom("tiny")
    m.add_tensor("w", "BF16", (4, 8))
    full = ferry.Layout.hf(m)
    half = ferry.Layout.custom(m, 1)
    b = half.add_buffer(0, "w", "BF16", 2 * 8 * 2)
    half.add_piece("w", (0, 0), (2, 8), 0, b, 0, (8, 1))  # rows 2..3 held by nobody
    with pytest.raises(ferry.CoverageError, match="w"):
        ferry.Plan(half, full)
    other = ferry.Model.custom("tiny32")
    other.add_tensor("w", "F32", (4, 8))
    with pytest.raises(ferry.MismatchError, match="w"):
        ferry.Plan(ferry.Layout.hf(other), full)
    plan = ferry.Plan(full, half)  # a destination may hold part of a tensor
    assert plan.stats["bytes"] == 2 * 8 * 2
    plan.verify()
    with pytest.raises(TypeError):
        ferry.Plan(full, "not a layout")


def test_pack_limit_bounds_the_pack_area(model):
    """tp=1 -> tp=2 splits row-parallel weights by column: every half is
    strided in the trainer's tensor and packed, unless pack_limit stops it;
    past the limit the halves are read run by run (gather ops)."""
    src, dst = ferry.Layout.train(model, "tp=1"), ferry.Layout.infer(model, "tp=2")
    free = ferry.Plan(src, dst)
    assert free.stats["gather_ops"] == 0 and free.pack_bytes(0) > 100 << 20
    assert not any(op.gather for op in free.ops())
    limited = ferry.Plan(src, dst, pack_limit=1 << 20)
    s = limited.stats
    assert limited.pack_bytes(0) <= 1 << 20 and s["gather_ops"] > 0
    gathered = [op for op in limited.ops() if op.gather]
    assert len(gathered) == s["gather_ops"] and not any(op.pack for op in gathered)
    assert sum(b.gather for b in limited.buckets()) == s["gather_ops"]  # one bucket each
    assert s["bytes"] == free.stats["bytes"] and s["op_bytes"] == free.stats["op_bytes"]
    assert limited.digest != free.digest and ferry.Plan(src, dst, pack_limit=0).digest == free.digest
    limited.verify()
