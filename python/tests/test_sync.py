"""Writers and readers in one process (threads): registration, name maps,
in-place updates, and the refusals that protect the caller's tensors."""
import array
import threading

import numpy as np
import pytest
import torch

import ferry

TINY = {"model_type": "qwen3", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1000, "intermediate_size": 96,
        "tie_word_embeddings": False, "torch_dtype": "bfloat16"}
TINY_MOE = dict(TINY, model_type="qwen3_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32,
                decoder_sparse_step=1, mlp_only_layers=[])

_DT = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32, "F8_E4M3": torch.float8_e4m3fn}


def zeros_for(layout, rank):
    """Contiguous tensors in the storage shape of every buffer of a rank."""
    return {b.name: torch.zeros(b.shape, dtype=_DT[b.dtype]) for b in layout.buffers(rank)}


def hf_zeros(model):
    """Tensors shaped as the checkpoint (Layout.hf buffers are flat bytes to ferry)."""
    return {t.name: torch.zeros(t.shape, dtype=_DT[t.dtype]) for t in model.tensors}


def randomize(tensors, seed):
    g = torch.Generator().manual_seed(seed)
    for t in tensors.values():
        t.copy_(torch.randn(t.shape, generator=g).to(t.dtype))


class Job:
    """W writers and R readers of one job in this process; publish/update
    run in threads (publish waits for the readers' acknowledgements)."""

    def __init__(self, model, name, nw, nr, wargs=None, rargs=None):
        wargs = dict(timeout=20, **(wargs or {}))
        rargs = dict(timeout=20, **(rargs or {}))
        self.writers = [ferry.Writer(model, job=name, rank=0, world=nw, meta="127.0.0.1:0", **wargs)]
        meta = self.writers[0].service_address
        self.writers += [ferry.Writer(model, job=name, rank=i, world=nw, meta=meta, **wargs) for i in range(1, nw)]
        self.readers = [ferry.Reader(model, job=name, rank=i, world=nr, meta=meta, **rargs) for i in range(nr)]

    def commit(self):
        for m in self.writers + self.readers:
            m.commit()

    def step(self, version):
        out, errors = {}, []

        def run(key, fn):
            try:
                out[key] = fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(("r", i), lambda r=r: r.update(version, timeout=20)))
                   for i, r in enumerate(self.readers)]
        threads += [threading.Thread(target=run, args=(("w", i), lambda w=w: w.publish(version)))
                    for i, w in enumerate(self.writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return [out[("w", i)] for i in range(len(self.writers))], [out[("r", i)] for i in range(len(self.readers))]

    def close(self):
        for m in self.readers + self.writers[::-1]:
            m.close()


def test_megatron_tp2_to_hf_and_vllm_in_place():
    """Two trainer ranks (Megatron names, fused linear_qkv/linear_fc1) to an
    HF reader and a vLLM tp=1 reader: the fused engine tensors equal the
    concatenation of the HF ones, updated in place version after version."""
    m = ferry.Model.from_config(TINY)
    train = ferry.Layout.train(m, "tp=2")
    shards = [zeros_for(train, r) for r in range(2)]
    hf, vl = ferry.Layout.hf(m), ferry.Layout.infer(m, "tp=1")
    hf_t, vl_t = hf_zeros(m), zeros_for(vl, 0)
    ptrs = [t.data_ptr() for t in list(hf_t.values()) + list(vl_t.values())]
    job = Job(m, "megatron-hf-vllm", 2, 2, wargs={"deltas": "always", "delta_chain": 3},
              rargs={"deltas": "always", "delta_chain": 3})
    for r in range(2):
        job.writers[r].register(shards[r], train, r)
    job.readers[0].register(hf_t, hf, 0)
    job.readers[1].register(vl_t, vl, 0)
    job.commit()
    for v in (1, 2, 3):
        for r in range(2):
            randomize(shards[r], 10 * v + r) if v == 1 else [t.add_(1) for t in shards[r].values()]
        winfo, rinfo = job.step(v)
        assert [i.version for i in rinfo] == [v, v] and all(i.readers_acked == 2 for i in winfo)
        assert all(i.device_bytes == 0 for i in winfo + rinfo)  # host members hold no GPU memory
        if v > 1:
            assert all(i.delta_pairs > 0 and i.delta_steps == 1 for i in rinfo), "one version behind: one step"
        else:
            assert all(i.delta_pairs == 0 and i.delta_steps == 0 for i in rinfo)
        for layer in range(2):
            p = f"model.layers.{layer}."
            qkv = torch.cat([hf_t[p + f"self_attn.{x}_proj.weight"] for x in "qkv"])
            assert torch.equal(vl_t[p + "self_attn.qkv_proj.weight"], qkv)
            gu = torch.cat([hf_t[p + "mlp.gate_proj.weight"], hf_t[p + "mlp.up_proj.weight"]])
            assert torch.equal(vl_t[p + "mlp.gate_up_proj.weight"], gu)
            # Megatron: column-parallel rows split over tp, row-parallel columns
            fc2 = torch.cat([shards[r][f"decoder.layers.{layer}.mlp.linear_fc2.weight"] for r in range(2)], dim=1)
            assert torch.equal(hf_t[p + "mlp.down_proj.weight"], fc2)
        emb = torch.cat([shards[r]["embedding.word_embeddings.weight"] for r in range(2)])[:1000]
        assert torch.equal(hf_t["model.embed_tokens.weight"], emb)
        assert torch.equal(vl_t["model.embed_tokens.weight"][:1000], emb)
    assert [t.data_ptr() for t in list(hf_t.values()) + list(vl_t.values())] == ptrs  # in place
    job.close()


def test_delta_chain_is_checked():
    """delta_chain= takes 1 to 64 steps, on writers and readers alike."""
    m = ferry.Model.from_config(TINY)
    for bad in (0, 65):
        with pytest.raises(ferry.InvalidArgumentError, match=rf"writer: delta_chain {bad} \(1..64 steps\)"):
            ferry.Writer(m, job="chain-bad", rank=0, world=1, meta="127.0.0.1:0", delta_chain=bad)
        with pytest.raises(ferry.InvalidArgumentError, match=rf"reader: delta_chain {bad} \(1..64 steps\)"):
            ferry.Reader(m, job="chain-bad", rank=0, world=1, meta="127.0.0.1:1", delta_chain=bad)


def test_pack_limit_strided_sources_read_run_by_run():
    """A trainer tp=1 -> engine tp=2: the row-parallel halves are strided in
    the trainer's tensors; with no room to pack them (pack_limit=1) readers
    read them run by run, in place, every version exact."""
    m = ferry.Model.from_config(TINY)
    train, eng = ferry.Layout.train(m, "tp=1"), ferry.Layout.infer(m, "tp=2")
    assert ferry.Plan(train, eng, pack_limit=1).stats["gather_ops"] > 0
    src = zeros_for(train, 0)
    dst = [zeros_for(eng, r) for r in range(2)]
    job = Job(m, "pack-limit", 1, 2, wargs={"pack_limit": 1}, rargs={"pack_limit": 1})
    job.writers[0].register(src, train, 0)
    for r in range(2):
        job.readers[r].register(dst[r], eng, r)
    job.commit()
    for v in (1, 2):
        randomize(src, v)
        job.step(v)
        for layer in range(2):
            down = src[f"decoder.layers.{layer}.mlp.linear_fc2.weight"]
            o = src[f"decoder.layers.{layer}.self_attention.linear_proj.weight"]
            for r in range(2):
                p = f"model.layers.{layer}."
                assert torch.equal(dst[r][p + "mlp.down_proj.weight"], down.chunk(2, dim=1)[r])
                assert torch.equal(dst[r][p + "self_attn.o_proj.weight"], o.chunk(2, dim=1)[r])
    job.close()
    # members must agree on the limit: the plans differ, and the service says so
    job = Job(m, "pack-limit-mismatch", 1, 1, wargs={"pack_limit": 1, "mode": "async"})
    job.writers[0].register(zeros_for(train, 0), train, 0)
    job.readers[0].register(zeros_for(ferry.Layout.infer(m, "tp=1"), 0), ferry.Layout.infer(m, "tp=1"), 0)
    job.commit()
    job.writers[0].publish(1)
    with pytest.raises(ferry.MismatchError, match="pack_limit"):
        job.readers[0].update(1, timeout=10)
    job.close()


def test_megatron_pipeline_local_layer_numbers():
    """pp=2: every stage's module numbers its layers from 0; register maps
    them to the global layers the layout gives the stage."""
    m = ferry.Model.from_config(dict(TINY, num_hidden_layers=4))
    train = ferry.Layout.train(m, "pp=2")
    stages = []
    for r in range(2):
        named = {}
        for name, t in zeros_for(train, r).items():
            parts = name.split(".")
            if name.startswith("decoder.layers."):
                parts[2] = str(int(parts[2]) - 2 * r)  # local numbering
            named["module." + ".".join(parts)] = t  # as DDP wraps it
        stages.append(named)
    hf = ferry.Layout.hf(m)
    hf_t = hf_zeros(m)
    job = Job(m, "megatron-pp", 2, 1)
    for r in range(2):
        job.writers[r].register(stages[r], train, r)
        randomize(stages[r], r)
    job.readers[0].register(hf_t, hf, 0)
    job.commit()
    job.step(1)
    assert torch.equal(hf_t["model.layers.3.post_attention_layernorm.weight"],
                       stages[1]["module.decoder.layers.1.mlp.linear_fc1.layer_norm_weight"])
    assert torch.equal(hf_t["model.layers.1.post_attention_layernorm.weight"],
                       stages[0]["module.decoder.layers.1.mlp.linear_fc1.layer_norm_weight"])
    job.close()


def test_megatron_experts_one_parameter_each():
    """TE grouped experts are one parameter per local expert (weight0..);
    the layout's [E_local, ...] buffer is split across them."""
    m = ferry.Model.from_config(TINY_MOE)
    train = ferry.Layout.train(m, "dp=2,ep=2")
    shards, grouped = [], []
    for r in range(2):
        named = {}
        for name, t in zeros_for(train, r).items():
            if ".mlp.experts.linear_fc" in name:
                for e in range(t.shape[0]):
                    named[f"{name}{e}"] = torch.zeros(t.shape[1:], dtype=t.dtype)
            else:
                named[name] = t
        randomize(named, 100 + r)
        shards.append(named)
    hf = ferry.Layout.hf(m)
    hf_t = hf_zeros(m)
    job = Job(m, "megatron-experts", 2, 1)
    for r in range(2):
        job.writers[r].register(shards[r], train, r)
    job.readers[0].register(hf_t, hf, 0)
    job.commit()
    job.step(1)
    inter = 32
    for r in range(2):
        for e in range(2):  # 4 experts over ep=2
            fc1 = shards[r][f"decoder.layers.1.mlp.experts.linear_fc1.weight{e}"]
            g = 2 * r + e
            assert torch.equal(hf_t[f"model.layers.1.mlp.experts.{g}.gate_proj.weight"], fc1[:inter])
            assert torch.equal(hf_t[f"model.layers.1.mlp.experts.{g}.up_proj.weight"], fc1[inter:])
    # a missing expert is named
    del shards[0]["decoder.layers.0.mlp.experts.linear_fc2.weight1"]
    w = ferry.Writer(m, job="experts-missing", rank=0, world=2, meta="127.0.0.1:0")
    with pytest.raises(ferry.NotFoundError, match=r"linear_fc2.weight' holds 2 experts"):
        w.register(shards[0], train, 0)
    shards[0]["decoder.layers.0.mlp.experts.linear_fc2.weight1"] = torch.zeros(64, 32, dtype=torch.float16)
    with pytest.raises(ferry.MismatchError, match=r"linear_fc2.weight\[1\]' is torch.float16, the buffer BF16"):
        w.register(shards[0], train, 0)  # checked before anything is registered
    w.close()
    job.close()


def test_register_names_what_does_not_fit():
    m = ferry.Model.from_config(TINY)
    hf = ferry.Layout.hf(m)
    t = hf_zeros(m)
    w = ferry.Writer(m, job="misfit", rank=0, world=1, meta="127.0.0.1:0")
    with pytest.raises(ferry.NotFoundError, match="parameter 'extra.bias'"):
        w.register(dict(t, **{"extra.bias": torch.zeros(3)}), hf, 0)
    w.register(dict(t, **{"extra.bias": torch.zeros(3)}), hf, 0, ignore=["extra.*"])
    w.close()
    w = ferry.Writer(m, job="misfit2", rank=0, world=1, meta="127.0.0.1:0")
    t2 = dict(t)
    del t2["model.norm.weight"]
    with pytest.raises(ferry.NotFoundError, match="buffer 'model.norm.weight' of rank 0"):
        w.register(t2, hf, 0)
    t2["model.norm.weight"] = torch.zeros(65, dtype=torch.bfloat16)
    with pytest.raises(ferry.MismatchError, match="model.norm.weight"):
        w.register(t2, hf, 0)
    w.close()


def test_storage_swapped_after_registration_is_refused():
    m = ferry.Model.from_config(TINY)
    hf = ferry.Layout.hf(m)
    t = hf_zeros(m)
    params = {k: torch.nn.Parameter(v) for k, v in t.items()}
    job = Job(m, "swapped", 1, 1)
    job.writers[0].register(params, hf, 0)
    job.readers[0].register(hf_zeros(m), hf, 0)
    job.commit()
    job.step(1)
    params["model.norm.weight"].data = torch.ones(64, dtype=torch.bfloat16)
    with pytest.raises(ferry.MismatchError, match="'model.norm.weight': its tensor's storage moved"):
        job.writers[0].publish(2)
    job.close()


def test_second_thread_gets_busy_not_a_race():
    m = ferry.Model.custom("toy")
    m.add_tensor("w", "F32", (16,))
    lay = ferry.Layout.hf(m)
    job = Job(m, "busy", 1, 1)
    src, dst = torch.arange(16, dtype=torch.float32), torch.zeros(16)
    job.writers[0].add_layout(lay, 0, [src])
    job.readers[0].add_layout(lay, 0, [dst])
    job.commit()
    w = job.writers[0]
    done = {}
    th = threading.Thread(target=lambda: done.setdefault("info", w.publish(1)))
    th.start()  # waits for the reader's acknowledgement
    import time
    deadline = time.monotonic() + 10
    busy = None
    while busy is None and time.monotonic() < deadline:
        try:
            w.publish(2)
        except ferry.BusyError as e:
            busy = e
        except ferry.Error:
            time.sleep(0.01)  # the first publish has not started yet: publish(2) failed otherwise
    assert busy is not None and "another thread" in str(busy)
    job.readers[0].update(1, timeout=20)
    th.join()
    assert done["info"].version == 1 and torch.equal(src, dst)
    job.close()


def test_ferry_allocated_buffers_numpy_and_buffer_protocol():
    m = ferry.Model.custom("toy")
    m.add_tensor("a", "F32", (32,))
    m.add_tensor("b", "F16", (8,))
    lay = ferry.Layout.hf(m)
    job = Job(m, "hostbuf", 1, 2)
    hb = job.writers[0].add_layout(lay, 0, [None, None])
    assert all(isinstance(h, ferry.HostBuffer) and len(h) for h in hb)
    a = torch.frombuffer(hb[0], dtype=torch.float32)
    b = np.frombuffer(hb[1], dtype=np.float16)
    a.copy_(torch.arange(32))
    b[:] = np.arange(8, dtype=np.float16) / 4
    out_np = [np.zeros(32, dtype=np.float32), np.zeros(8, dtype=np.float16)]
    job.readers[0].add_layout(lay, 0, out_np)  # numpy through DLPack
    raw = [bytearray(128), bytearray(16)]
    job.readers[1].add_layout(lay, 0, [memoryview(raw[0]).cast("f"), memoryview(raw[1]).cast("H")])  # raw 16-bit storage for F16
    job.commit()
    job.step(1)
    assert np.array_equal(out_np[0], np.arange(32, dtype=np.float32))
    assert np.array_equal(out_np[1], np.arange(8, dtype=np.float16) / 4)
    assert array.array("f", bytes(raw[0])).tolist() == list(range(32))
    job.close()
    assert job.writers[0].closed
    a += 1  # the memory outlives close() while tensors use it (ASan would see a use after free)
    assert float(a.sum()) == sum(range(1, 33)) and b[1] == 0.25
    del a, b, hb


def test_strided_views_and_fp8():
    """A transposed view registered with its own strides, and fp8 held as
    torch float8 on one side and as uint8 storage on the other."""
    m = ferry.Model.custom("toy")
    m.add_tensor("w", "BF16", (16, 8))
    m.add_tensor("q", "F8_E4M3", (64,))
    job = Job(m, "strided-fp8", 1, 1)
    base = torch.randn(8, 16).bfloat16()  # w is stored transposed: w = base.t()
    q = (torch.randn(64) * 4).to(torch.float8_e4m3fn)
    w = job.writers[0]
    bw = w.add_buffer("w_t", base.t())
    w.add_piece("w", (0, 0), (16, 8), bw, 0, (1, 16))
    bq = w.add_buffer("q", q)
    w.add_piece("q", (0,), (64,), bq, 0, (1,))
    out_w, out_q = torch.zeros(16, 8, dtype=torch.bfloat16), torch.zeros(64, dtype=torch.uint8)
    r = job.readers[0]
    r.add_piece("w", (0, 0), (16, 8), r.add_buffer("w", out_w), 0, (8, 1))
    r.add_piece("q", (0,), (64,), r.add_buffer("q", out_q, dtype="F8_E4M3"), 0, (1,))
    job.commit()
    job.step(1)
    assert torch.equal(out_w, base.t())
    assert torch.equal(out_q, q.view(torch.uint8))
    job.close()


def test_adopt_moves_parameters_into_shared_memory_once():
    """adopt=True: values copied into ferry memory, parameters pointed at it;
    optimizer steps after that land there and readers see them."""
    m = ferry.Model.from_config(TINY_MOE)
    train = ferry.Layout.train(m, "dp=2,ep=2")
    hf = ferry.Layout.hf(m)
    shards = []
    for r in range(2):
        named = {}
        for name, t in zeros_for(train, r).items():
            if ".mlp.experts.linear_fc" in name:  # the split path too
                for e in range(t.shape[0]):
                    named[f"{name}{e}"] = torch.zeros(t.shape[1:], dtype=t.dtype)
            else:
                named[name] = t
        randomize(named, 7)  # data-parallel replicas hold the same values
        shards.append({k: torch.nn.Parameter(v) for k, v in named.items()})
    before = {k: (p.data_ptr(), p.detach().clone()) for k, p in shards[0].items()}
    job = Job(m, "adopt", 2, 1)
    for r in range(2):
        job.writers[r].register(shards[r], train, r, adopt=True)
    for k, p in shards[0].items():
        assert p.data_ptr() != before[k][0] and torch.equal(p.detach(), before[k][1])
    hf_t = hf_zeros(m)
    job.readers[0].register(hf_t, hf, 0)
    job.commit()
    opt = torch.optim.SGD([p for s in shards for p in s.values()], lr=0.5)
    for v in (1, 2):
        for p in (p for s in shards for p in s.values()):
            p.grad = torch.ones_like(p)
        opt.step()  # in place, into ferry's memory
        job.step(v)
        assert torch.equal(hf_t["model.norm.weight"], shards[1]["decoder.final_layernorm.weight"].detach())
        fc1 = shards[0]["decoder.layers.0.mlp.experts.linear_fc1.weight1"].detach()
        assert torch.equal(hf_t["model.layers.0.mlp.experts.1.up_proj.weight"], fc1[32:])
    job.close()
    opt.step()  # adopted parameters stay valid past close()
    del shards, opt, fc1, p


def test_async_publish_snapshots_and_returns():
    """mode='async': publish copies into a staging slot and returns at once;
    a reader later gets exactly what was published, whatever the trainer
    did to its tensors since."""
    m = ferry.Model.from_config(TINY)
    hf = ferry.Layout.hf(m)
    src, dst = hf_zeros(m), hf_zeros(m)
    randomize(src, 3)
    job = Job(m, "async", 1, 1, wargs={"mode": "async", "slots": 2})
    job.writers[0].register(src, hf, 0)
    job.readers[0].register(dst, hf, 0)
    job.commit()
    published = {}
    for v in (1, 2):
        info = job.writers[0].publish(v)  # no reader is updating: returns anyway
        assert info.version == v and info.snapshot_seconds > 0
        published[v] = {k: t.clone() for k, t in src.items()}
        for t in src.values():
            t.add_(1)  # the next training step, before any reader read
    got = job.readers[0].update(1, timeout=20)
    assert got.version == 1 and all(torch.equal(dst[k], published[1][k]) for k in dst)
    job.readers[0].update("latest", timeout=20)
    assert job.readers[0].version == 2 and all(torch.equal(dst[k], published[2][k]) for k in dst)
    job.close()
