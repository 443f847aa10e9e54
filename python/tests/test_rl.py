"""The RL loop end to end, in separate processes, through ferry.

Two trainer ranks hold a tiny Qwen3 in a Megatron layout (tp=2, fused
linear_qkv grouped per KV head, fused linear_fc1, padded vocab), wrapped as
DDP wraps it, and take real AdamW steps (fp32 masters, as Megatron's
mixed-precision optimizer). Three engine ranks read every version in place:
one holds a Hugging Face transformers Qwen3ForCausalLM (the real model
class), two hold a vLLM-style tp=2 engine (fused qkv_proj and gate_up_proj).
Each version is checked against the trainers' model gathered to one rank:
the HF engine's forward pass gives bit-identical logits, the vLLM ranks'
weights, unfused, are bit-identical and give those logits too; readers one
version behind receive deltas; the engines' tensors never move.
"""
import os

import torch
import torch.distributed as dist

import rl_models as rl
from ports import free_port

VERSIONS = 3
JOB = "rl-e2e"
TRAINERS, ENGINE_TP = 2, 2


def _ids(cfg):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, cfg.vocab_size, (2, 12), generator=g)


def _spec(cfg):
    import ferry
    return ferry.Model.from_config(rl.config_dict(cfg))


def _trainer(rank, cfg, meta):
    import ferry
    group = dist.new_group(list(range(TRAINERS)))
    inner = rl.MegatronShard(rl.random_hf_state(cfg, seed=0), cfg, TRAINERS, rank)
    module = rl.DDPWrapped(inner)  # module.decoder.layers...: the name map strips it
    spec = _spec(cfg)
    w = ferry.Writer(spec, job=JOB, rank=rank, world=TRAINERS, meta=meta, deltas="always", timeout=120)
    w.register(module, ferry.Layout.train(spec, f"tp={TRAINERS}"), rank)
    w.commit()
    out = []
    for v in range(1, VERSIONS + 1):
        step = rl.train_step(inner, v, group, lr=1e-5, fp32_master=True)
        full = rl.gather_hf(inner, group)  # the reference: the trainers' model on one rank
        info = w.publish(v)
        out.append(dict(changed=step["changed"], acked=info.readers_acked, delta_bytes=info.delta_bytes,
                        full=full if rank == 0 else None,
                        logits=rl.hf_logits(full, cfg, _ids(cfg)) if rank == 0 else None))
    w.close()
    return out


def _hf_engine(cfg, meta):
    import ferry
    model = rl.hf_model(cfg)  # its own random init: nothing in common with the trainer's
    ptrs = [p.data_ptr() for p in model.parameters()]
    spec = _spec(cfg)
    r = ferry.Reader(spec, job=JOB, rank=0, world=1 + ENGINE_TP, meta=meta, deltas="always", timeout=120)
    r.register(model, ferry.Layout.hf(spec), 0)
    r.commit()
    out = []
    for v in range(1, VERSIONS + 1):
        info = r.update(v, timeout=120)
        with torch.no_grad():
            logits = model(input_ids=_ids(cfg)).logits
        out.append(dict(version=info.version, delta_pairs=info.delta_pairs, delta_bytes=info.delta_bytes,
                        bytes=info.bytes, logits=logits))
    assert [p.data_ptr() for p in model.parameters()] == ptrs, "the engine's parameters moved"
    r.close()
    return out


def _vllm_engine(tp_rank, cfg, meta):
    import ferry
    shard = rl.VllmShard(rl.init_hf_state(cfg, seed=1), cfg, ENGINE_TP, tp_rank)
    ptrs = [p.data_ptr() for p in shard.parameters()]
    spec = _spec(cfg)
    r = ferry.Reader(spec, job=JOB, rank=1 + tp_rank, world=1 + ENGINE_TP, meta=meta, deltas="always",
                     timeout=120)
    r.register(shard, ferry.Layout.infer(spec, f"tp={ENGINE_TP}"), tp_rank)
    r.commit()
    out = []
    for v in range(1, VERSIONS + 1):
        info = r.update(v, timeout=120)
        out.append(dict(version=info.version, delta_pairs=info.delta_pairs,
                        tensors={n: t.clone() for n, t in shard.tensors().items()}))
    assert [p.data_ptr() for p in shard.parameters()] == ptrs, "the engine's parameters moved"
    r.close()
    return out


def _rank(rank, world, meta):
    cfg = rl.tiny_config()
    dist.new_group(list(range(TRAINERS)))  # every rank takes part in creating a group
    if rank < TRAINERS:
        return _trainer(rank, cfg, meta)
    if rank == TRAINERS:
        return _hf_engine(cfg, meta)
    return _vllm_engine(rank - TRAINERS - 1, cfg, meta)


def test_megatron_trainers_to_hf_and_vllm_engines(tmp_path):
    os.environ.setdefault("FERRY_TOKEN_DIR", str(tmp_path))
    meta = f"127.0.0.1:{free_port()}"
    res = rl.spawn_ranks(_rank, TRAINERS + 1 + ENGINE_TP, tmp_path, meta, timeout=600)
    trainer, hf, vllm = res[0], res[TRAINERS], res[TRAINERS + 1:]
    cfg = rl.tiny_config()
    for v in range(VERSIONS):
        t = trainer[v]
        assert 0 < t["changed"] < 1 and t["acked"] == 1 + ENGINE_TP
        assert hf[v]["version"] == v + 1
        assert torch.equal(hf[v]["logits"], t["logits"]), f"version {v + 1}: HF engine logits differ"
        unfused = rl.vllm_to_hf([vllm[r][v]["tensors"] for r in range(ENGINE_TP)], cfg, ENGINE_TP)
        assert unfused.keys() == t["full"].keys()
        for name, ref in t["full"].items():
            assert torch.equal(unfused[name], ref), f"version {v + 1}: vLLM engine's {name} differs"
        assert torch.equal(rl.hf_logits(unfused, cfg, _ids(cfg)), t["logits"])
        if v > 0:  # one version behind: deltas, smaller than the bytes they stand for
            assert hf[v]["delta_pairs"] > 0 and all(vllm[r][v]["delta_pairs"] > 0 for r in range(ENGINE_TP))
            model_bytes = sum(t.numel() * t.element_size() for t in t["full"].values())
            assert 0 < hf[v]["delta_bytes"] == hf[v]["bytes"] < model_bytes / 10
            assert t["delta_bytes"] > 0
    assert not torch.equal(trainer[0]["logits"], trainer[-1]["logits"])  # training moved the model
