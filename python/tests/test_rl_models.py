"""Tests of the RL fixtures themselves (rl_models.py): exact round trips, agreement with
ferry's layouts (through the ferry CLI when built), a 2-process training step."""
import json
import subprocess

import pytest
import torch

import rl_models as rm

def layout_json(cli, config, side, tp, rank, extra=""):
    out = subprocess.run([cli, "layout", "--model", str(config), "--side", side, "--parallel",
                          f"tp={tp}{extra}", "--rank", str(rank), "--json"],
                         check=True, capture_output=True, text=True, timeout=60)
    return json.loads(out.stdout)


def assert_same(a, b):
    assert list(a) == list(b)
    for n in a:
        assert a[n].dtype == b[n].dtype and torch.equal(a[n], b[n]), n


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("tp", [1, 2])
def test_round_trips_exact(tied, tp):
    cfg = rm.tiny_config(tied=tied)
    hf = rm.random_hf_state(cfg, seed=tp)
    assert ("lm_head.weight" in hf) != tied
    meg = [rm.hf_to_megatron(hf, cfg, tp, r) for r in range(tp)]
    vll = [rm.hf_to_vllm(hf, cfg, tp, r) for r in range(tp)]
    assert_same(rm.megatron_to_hf(meg, cfg, tp), hf)
    assert_same(rm.vllm_to_hf(vll, cfg, tp), hf)
    # vocab: 1000 rows padded to 1024 (multiple of 128*tp resp. 64), zeros
    emb = torch.cat([m["embedding.word_embeddings.weight"] for m in meg])
    assert emb.shape[0] == 1024 and not emb[1000:].any()
    assert torch.cat([v["model.embed_tokens.weight"] for v in vll]).shape[0] == 1024


def test_megatron_qkv_groups():
    """linear_qkv rows per KV group [q heads of g; k_g; v_g] (q: 2 heads of 16 rows)."""
    cfg = rm.tiny_config()
    hf = rm.random_hf_state(cfg)
    q, k, v = (hf[f"model.layers.0.self_attn.{x}_proj.weight"] for x in "qkv")
    full = rm.hf_to_megatron(hf, cfg, 1, 0)["decoder.layers.0.self_attention.linear_qkv.weight"]
    assert torch.equal(full, torch.cat([q[:32], k[:16], v[:16], q[32:], k[16:], v[16:]]))
    r1 = rm.hf_to_megatron(hf, cfg, 2, 1)["decoder.layers.0.self_attention.linear_qkv.weight"]
    assert torch.equal(r1, full[64:])


def test_shard_modules_names():
    cfg = rm.tiny_config()
    hf = rm.random_hf_state(cfg)
    shard = rm.MegatronShard(hf, cfg, 2, 1)
    want = rm.hf_to_megatron(hf, cfg, 2, 1)
    assert_same(shard.tensors(), want)
    assert all(p.requires_grad for p in shard.parameters())
    assert [n for n, _ in rm.DDPWrapped(shard).named_parameters()] == ["module." + n for n in want]
    assert_same(rm.VllmShard(hf, cfg, 2, 0).tensors(), rm.hf_to_vllm(hf, cfg, 2, 0))
    assert [n for n, _ in rm.hf_model(cfg).named_parameters()] == list(hf)


@pytest.mark.parametrize("tied", [False, True])
@pytest.mark.parametrize("side,tp", [("train", 1), ("train", 2), ("infer", 1), ("infer", 2)])
def test_matches_ferry_layout(ferry_cli, tmp_path, tied, side, tp):
    """Buffer names, order, dtypes and shapes equal ferry's layout, and every piece ferry
    places in a buffer holds, at its byte offset and strides, the HF tensor's box."""
    cli = ferry_cli
    cfg = rm.tiny_config(tied=tied)
    config = rm.write_config(cfg, tmp_path / "config.json")
    hf = rm.random_hf_state(cfg)
    for rank in range(tp):
        mine = (rm.hf_to_megatron if side == "train" else rm.hf_to_vllm)(hf, cfg, tp, rank)
        bufs = layout_json(cli, config, side, tp, rank)["rank_detail"]["buffers"]
        assert [b["name"] for b in bufs] == list(mine)
        for b in bufs:
            t = mine[b["name"]]
            assert b["dtype"] == "BF16" and t.dtype == torch.bfloat16
            assert tuple(int(x) for x in b["shape"].split(",")) == tuple(t.shape), b["name"]
            assert b["bytes"] == t.numel() * 2
            for p in b["pieces"]:
                box = [slice(lo, hi) for lo, hi in p["box"]]
                want = hf[p["tensor"]][tuple(box)]
                got = t.reshape(-1).as_strided(want.shape, p["strides"], p["byte_offset"] // 2)
                assert torch.equal(got, want), (b["name"], p)


def test_config_dtype_keys(ferry_cli, tmp_path):
    """transformers 5 writes "dtype"; the "torch_dtype" variant gives ferry the same model."""
    cfg = rm.tiny_config()
    new, old = rm.config_dict(cfg), rm.config_dict(cfg, torch_dtype=True)
    assert new["dtype"] == "bfloat16" and "torch_dtype" not in new
    assert old["torch_dtype"] == "bfloat16" and "dtype" not in old
    cli = ferry_cli
    digests = {layout_json(cli, rm.write_config(cfg, tmp_path / f"{k}.json", k), "train", 2, 0)["digest"]
               for k in (False, True)}
    assert len(digests) == 1


def test_logits_bit_identical():
    cfg = rm.tiny_config()
    hf = rm.init_hf_state(cfg, seed=3)
    ids = rm.batch(cfg, 0)
    a = rm.hf_logits(hf, cfg, ids)
    b = rm.hf_logits(rm.vllm_to_hf([rm.hf_to_vllm(hf, cfg, 2, r) for r in range(2)], cfg, 2), cfg, ids)
    assert a.dtype == torch.bfloat16 and a.shape == (4, 16, 1000)
    assert torch.equal(a, b)
    assert not torch.equal(a, rm.hf_logits(rm.init_hf_state(cfg, seed=4), cfg, ids))


STEPS = 3


def _train_rank(rank, world, tied, lr, fp32_master):
    """A trainer rank: STEPS training steps; the gathered model after each."""
    cfg = rm.tiny_config(tied=tied)
    shard = rm.MegatronShard(rm.init_hf_state(cfg, seed=0), cfg, world, rank)
    out = []
    for step in range(STEPS):
        info = rm.train_step(shard, step, lr=lr, fp32_master=fp32_master)
        out.append(dict(info, hf=rm.gather_hf(shard)))
    return out


@pytest.mark.parametrize("tied,lr,fp32_master,lo,hi", [
    (False, 1e-3, False, 0.3, 0.95),   # bf16 AdamW: all but untouched embedding rows, norms
    (True, 1e-3, False, 0.5, 1.0),     # tied: the lm_head gradient reaches every row
    (False, 1e-5, True, 0.01, 0.5),    # fp32 master: sparse bf16 changes per step
])
def test_train_step_two_ranks(tmp_path, tied, lr, fp32_master, lo, hi):
    """tp=2 ranks in 2 spawned processes: the weights change every step, both ranks see
    the same loss and gather the same model, and that model equals a tp=1 run's bit for
    bit (AdamW is elementwise, each rank applies it to its shard of the full gradient)."""
    ranks = rm.spawn_ranks(_train_rank, 2, tmp_path, tied, lr, fp32_master)
    ref = _train_rank(0, 1, tied, lr, fp32_master)
    prev = rm.init_hf_state(rm.tiny_config(tied=tied), seed=0)
    numel = sum(t.numel() for t in prev.values())
    for step in range(STEPS):
        r0, r1, one = ranks[0][step], ranks[1][step], ref[step]
        assert r0["loss"] == r1["loss"] == one["loss"]
        assert_same(r0["hf"], r1["hf"])
        assert_same(r0["hf"], one["hf"])
        changed = sum(int((r0["hf"][n] != prev[n]).sum()) for n in prev) / numel
        print(f"tied={tied} lr={lr} fp32_master={fp32_master} step {step}: loss {r0['loss']:.4f}, "
              f"changed: rank 0 {r0['changed']:.3f}, rank 1 {r1['changed']:.3f}, model {changed:.3f}")
        assert lo < r0["changed"] < hi and lo < r1["changed"] < hi and lo < changed < hi
        prev = r0["hf"]
