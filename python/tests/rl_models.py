"""Pure-PyTorch RL fixtures for ferry's Python tests: a tiny Qwen3, its weights as a
Megatron-core trainer holds them and as a vLLM engine holds them, a real training step
for tensor-parallel trainer ranks, and HF reference logits.

Nothing here imports ferry: the mappings follow docs/layouts.md ("Trainer layouts",
"Engine layouts") on their own, so a test comparing them with ferry's layouts checks
ferry against an independent construction.

State dicts in HF names hold the checkpoint's tensors: with tied embeddings there is no
`lm_head.weight` (as in ferry's model spec and in `named_parameters()`).
"""
import json
import math
import multiprocessing as mp
import multiprocessing.connection
import os
import time
import traceback
from collections import OrderedDict

import torch
import torch.distributed as dist
import transformers
from torch import nn

DTYPE = torch.bfloat16


# --- the tiny model -------------------------------------------------------------------

def tiny_config(tied=False, layers=2):
    """A tiny Qwen3: vocab 1000 (not a multiple of 64 or 128: vocabulary padding is
    real), GQA with 4 heads over 2 KV heads, q_norm/k_norm, bf16."""
    return transformers.Qwen3Config(
        vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        max_position_embeddings=128, tie_word_embeddings=tied, dtype="bfloat16")


def config_dict(cfg, torch_dtype=False):
    """config.json as a checkpoint carries it. transformers 5 writes "dtype"; older
    releases (and most published checkpoints) write "torch_dtype": torch_dtype=True
    gives that variant."""
    d = json.loads(cfg.to_json_string())
    if torch_dtype:
        d["torch_dtype"] = d.pop("dtype")
    return d


def write_config(cfg, path, torch_dtype=False):
    with open(path, "w") as f:
        json.dump(config_dict(cfg, torch_dtype), f, indent=2)
    return path


def hf_model(cfg):
    """A fresh Qwen3ForCausalLM in bf16, eval mode: its named_parameters() are what an
    engine registers under HF names (a tied lm_head is not listed)."""
    return transformers.Qwen3ForCausalLM(cfg).to(DTYPE).eval()


def hf_state(model):
    """The checkpoint tensors of a model (named_parameters, detached, shared storage)."""
    return OrderedDict((n, p.detach()) for n, p in model.named_parameters())


def init_hf_state(cfg, seed=0):
    """HF's own initialisation under a fixed seed (norms are all ones)."""
    torch.manual_seed(seed)
    return OrderedDict((n, t.clone()) for n, t in hf_state(hf_model(cfg)).items())


def random_hf_state(cfg, seed=0):
    """Distinct random values in every tensor, norms included: a mapping that swaps or
    shifts anything shows up in a bit-exact comparison."""
    g = torch.Generator().manual_seed(seed)
    return OrderedDict((n, torch.randn(t.shape, generator=g).to(DTYPE))
                       for n, t in hf_state(hf_model(cfg)).items())


def load_hf(model, state):
    """Copy `state` (HF names, exactly the model's parameters) into `model`."""
    params = dict(model.named_parameters())
    if set(params) != set(state):
        raise KeyError(f"state names differ from the model's: missing "
                       f"{sorted(set(params) - set(state))}, extra {sorted(set(state) - set(params))}")
    with torch.no_grad():
        for n, p in params.items():
            p.copy_(state[n])
    return model


def hf_logits(state, cfg, input_ids):
    """Logits of a bf16 Qwen3ForCausalLM holding exactly `state`."""
    model = load_hf(hf_model(cfg), state)
    with torch.no_grad():
        return model(input_ids=input_ids).logits


# --- sharding helpers -----------------------------------------------------------------

def _dims(cfg):
    return dict(L=cfg.num_hidden_layers, nh=cfg.num_attention_heads,
                nkv=cfg.num_key_value_heads, hd=cfg.head_dim, ffn=cfg.intermediate_size,
                vocab=cfg.vocab_size, tied=cfg.tie_word_embeddings)


def _padded_vocab(vocab, multiple):
    return -(-vocab // multiple) * multiple


def _vocab_shard(t, padded, tp, rank):
    """Rows [rank*padded/tp, ...) of `t` padded with zero rows to `padded` rows."""
    full = torch.zeros((padded,) + tuple(t.shape[1:]), dtype=t.dtype)
    full[:t.shape[0]] = t
    return full.chunk(tp, 0)[rank].clone()


def _rows(t, tp, rank):
    return t.chunk(tp, 0)[rank]


def _cols(t, tp, rank):
    return t.chunk(tp, 1)[rank].contiguous()


def _check_tp(d, tp):
    if tp < 1 or d["nkv"] % tp or d["ffn"] % tp:
        raise ValueError(f"tp={tp} must divide num_key_value_heads={d['nkv']} "
                         f"and intermediate_size={d['ffn']}")


# --- Megatron-core (TE spec) trainer ranks --------------------------------------------

def hf_to_megatron(state, cfg, tp, tp_rank, vocab_multiple=128):
    """One tensor-parallel rank's Megatron-core parameters (buffer names of ferry's
    train layout, in its order), from HF tensors. Copies; padding rows are zero."""
    d = _dims(cfg)
    _check_tp(d, tp)
    padded = _padded_vocab(d["vocab"], vocab_multiple * tp)
    g_local, q_per_g, hd = d["nkv"] // tp, d["nh"] // d["nkv"], d["hd"]
    out = OrderedDict()
    out["embedding.word_embeddings.weight"] = _vocab_shard(
        state["model.embed_tokens.weight"], padded, tp, tp_rank)
    for l in range(d["L"]):
        h, m = f"model.layers.{l}.", f"decoder.layers.{l}."
        q, k, v = (state[h + f"self_attn.{x}_proj.weight"] for x in "qkv")
        qkv = []
        for g in range(tp_rank * g_local, (tp_rank + 1) * g_local):
            qkv += [q[g * q_per_g * hd:(g + 1) * q_per_g * hd],
                    k[g * hd:(g + 1) * hd], v[g * hd:(g + 1) * hd]]
        out[m + "self_attention.linear_qkv.layer_norm_weight"] = state[h + "input_layernorm.weight"].clone()
        out[m + "self_attention.linear_qkv.weight"] = torch.cat(qkv)
        out[m + "self_attention.q_layernorm.weight"] = state[h + "self_attn.q_norm.weight"].clone()
        out[m + "self_attention.k_layernorm.weight"] = state[h + "self_attn.k_norm.weight"].clone()
        out[m + "self_attention.linear_proj.weight"] = _cols(state[h + "self_attn.o_proj.weight"], tp, tp_rank)
        out[m + "mlp.linear_fc1.layer_norm_weight"] = state[h + "post_attention_layernorm.weight"].clone()
        out[m + "mlp.linear_fc1.weight"] = torch.cat(
            [_rows(state[h + "mlp.gate_proj.weight"], tp, tp_rank),
             _rows(state[h + "mlp.up_proj.weight"], tp, tp_rank)])
        out[m + "mlp.linear_fc2.weight"] = _cols(state[h + "mlp.down_proj.weight"], tp, tp_rank)
    out["decoder.final_layernorm.weight"] = state["model.norm.weight"].clone()
    if not d["tied"]:
        out["output_layer.weight"] = _vocab_shard(state["lm_head.weight"], padded, tp, tp_rank)
    return out


def megatron_to_hf(ranks, cfg, tp):
    """HF tensors from the `tp` ranks' Megatron dicts (rank order); strips padding.
    Replicated norms are taken from rank 0."""
    d = _dims(cfg)
    _check_tp(d, tp)
    if len(ranks) != tp:
        raise ValueError(f"{len(ranks)} rank dicts for tp={tp}")
    g_local, q_per_g, hd = d["nkv"] // tp, d["nh"] // d["nkv"], d["hd"]
    r0 = ranks[0]
    out = OrderedDict()
    out["model.embed_tokens.weight"] = torch.cat(
        [r["embedding.word_embeddings.weight"] for r in ranks])[:d["vocab"]].clone()
    for l in range(d["L"]):
        h, m = f"model.layers.{l}.", f"decoder.layers.{l}."
        q, k, v = [], [], []
        for r in ranks:
            groups = r[m + "self_attention.linear_qkv.weight"].split((q_per_g + 2) * hd)
            assert len(groups) == g_local
            for grp in groups:
                gq, gk, gv = grp.split([q_per_g * hd, hd, hd])
                q.append(gq), k.append(gk), v.append(gv)
        fc1 = [r[m + "mlp.linear_fc1.weight"].chunk(2) for r in ranks]
        out[h + "self_attn.q_proj.weight"] = torch.cat(q)
        out[h + "self_attn.k_proj.weight"] = torch.cat(k)
        out[h + "self_attn.v_proj.weight"] = torch.cat(v)
        out[h + "self_attn.o_proj.weight"] = torch.cat(
            [r[m + "self_attention.linear_proj.weight"] for r in ranks], 1)
        out[h + "self_attn.q_norm.weight"] = r0[m + "self_attention.q_layernorm.weight"].clone()
        out[h + "self_attn.k_norm.weight"] = r0[m + "self_attention.k_layernorm.weight"].clone()
        out[h + "mlp.gate_proj.weight"] = torch.cat([f[0] for f in fc1])
        out[h + "mlp.up_proj.weight"] = torch.cat([f[1] for f in fc1])
        out[h + "mlp.down_proj.weight"] = torch.cat([r[m + "mlp.linear_fc2.weight"] for r in ranks], 1)
        out[h + "input_layernorm.weight"] = r0[m + "self_attention.linear_qkv.layer_norm_weight"].clone()
        out[h + "post_attention_layernorm.weight"] = r0[m + "mlp.linear_fc1.layer_norm_weight"].clone()
    out["model.norm.weight"] = r0["decoder.final_layernorm.weight"].clone()
    if not d["tied"]:
        out["lm_head.weight"] = torch.cat([r["output_layer.weight"] for r in ranks])[:d["vocab"]].clone()
    return out


# --- vLLM engine ranks ----------------------------------------------------------------

def hf_to_vllm(state, cfg, tp, rank, vocab_multiple=64):
    """One engine rank's vLLM parameters (buffer names of ferry's infer layout, in its
    order), from HF tensors. Copies; padding rows are zero. A tied lm_head is the
    embedding's parameter in vLLM, so it is not listed."""
    d = _dims(cfg)
    _check_tp(d, tp)
    padded = _padded_vocab(d["vocab"], math.lcm(vocab_multiple, tp))
    out = OrderedDict()
    out["model.embed_tokens.weight"] = _vocab_shard(state["model.embed_tokens.weight"], padded, tp, rank)
    for l in range(d["L"]):
        h = f"model.layers.{l}."
        out[h + "input_layernorm.weight"] = state[h + "input_layernorm.weight"].clone()
        out[h + "self_attn.qkv_proj.weight"] = torch.cat(
            [_rows(state[h + f"self_attn.{x}_proj.weight"], tp, rank) for x in "qkv"])
        out[h + "self_attn.q_norm.weight"] = state[h + "self_attn.q_norm.weight"].clone()
        out[h + "self_attn.k_norm.weight"] = state[h + "self_attn.k_norm.weight"].clone()
        out[h + "self_attn.o_proj.weight"] = _cols(state[h + "self_attn.o_proj.weight"], tp, rank)
        out[h + "post_attention_layernorm.weight"] = state[h + "post_attention_layernorm.weight"].clone()
        out[h + "mlp.gate_up_proj.weight"] = torch.cat(
            [_rows(state[h + f"mlp.{x}_proj.weight"], tp, rank) for x in ("gate", "up")])
        out[h + "mlp.down_proj.weight"] = _cols(state[h + "mlp.down_proj.weight"], tp, rank)
    out["model.norm.weight"] = state["model.norm.weight"].clone()
    if not d["tied"]:
        out["lm_head.weight"] = _vocab_shard(state["lm_head.weight"], padded, tp, rank)
    return out


def vllm_to_hf(ranks, cfg, tp):
    """HF tensors from the `tp` engine ranks' vLLM dicts (rank order); strips padding."""
    d = _dims(cfg)
    _check_tp(d, tp)
    if len(ranks) != tp:
        raise ValueError(f"{len(ranks)} rank dicts for tp={tp}")
    qs, kvs = d["nh"] * d["hd"] // tp, d["nkv"] * d["hd"] // tp
    out = OrderedDict()
    out["model.embed_tokens.weight"] = torch.cat(
        [r["model.embed_tokens.weight"] for r in ranks])[:d["vocab"]].clone()
    for l in range(d["L"]):
        h = f"model.layers.{l}."
        qkv = [r[h + "self_attn.qkv_proj.weight"].split([qs, kvs, kvs]) for r in ranks]
        gu = [r[h + "mlp.gate_up_proj.weight"].chunk(2) for r in ranks]
        for i, x in enumerate("qkv"):
            out[h + f"self_attn.{x}_proj.weight"] = torch.cat([s[i] for s in qkv])
        out[h + "self_attn.o_proj.weight"] = torch.cat([r[h + "self_attn.o_proj.weight"] for r in ranks], 1)
        for x in ("q_norm", "k_norm"):
            out[h + f"self_attn.{x}.weight"] = ranks[0][h + f"self_attn.{x}.weight"].clone()
        out[h + "mlp.gate_proj.weight"] = torch.cat([s[0] for s in gu])
        out[h + "mlp.up_proj.weight"] = torch.cat([s[1] for s in gu])
        out[h + "mlp.down_proj.weight"] = torch.cat([r[h + "mlp.down_proj.weight"] for r in ranks], 1)
        for x in ("input_layernorm", "post_attention_layernorm"):
            out[h + f"{x}.weight"] = ranks[0][h + f"{x}.weight"].clone()
    out["model.norm.weight"] = ranks[0]["model.norm.weight"].clone()
    if not d["tied"]:
        out["lm_head.weight"] = torch.cat([r["lm_head.weight"] for r in ranks])[:d["vocab"]].clone()
    return out


# --- modules holding one rank's parameters under the framework's names ------------------

class NamedParams(nn.Module):
    """nn.Parameters registered under dotted names through nested submodules, so that
    named_parameters() yields exactly the given names in the given order (when the names
    come grouped by prefix, as both frameworks' are)."""

    def __init__(self, tensors):
        super().__init__()
        for name, t in tensors.items():
            *path, leaf = name.split(".")
            mod = self
            for part in path:
                if part not in mod._modules:
                    mod.add_module(part, nn.Module())
                mod = mod._modules[part]
            mod.register_parameter(leaf, nn.Parameter(t, requires_grad=t.is_floating_point()))

    def tensors(self):
        return OrderedDict((n, p.detach()) for n, p in self.named_parameters())


class MegatronShard(NamedParams):
    """One Megatron-core tensor-parallel rank (names as ferry's train layout)."""

    def __init__(self, state, cfg, tp, tp_rank, vocab_multiple=128):
        super().__init__(hf_to_megatron(state, cfg, tp, tp_rank, vocab_multiple))
        self.cfg, self.tp, self.tp_rank, self.vocab_multiple = cfg, tp, tp_rank, vocab_multiple
        self._train = {}  # optimizer and HF model of train_step: not submodules


class VllmShard(NamedParams):
    """One vLLM engine rank (names as ferry's infer layout)."""

    def __init__(self, state, cfg, tp, rank, vocab_multiple=64):
        super().__init__(hf_to_vllm(state, cfg, tp, rank, vocab_multiple))
        self.cfg, self.tp, self.rank = cfg, tp, rank


class DDPWrapped(nn.Module):
    """The `module.` name prefix that DistributedDataParallel puts on its module."""

    def __init__(self, module):
        super().__init__()
        self.module = module


# --- a training step on tensor-parallel ranks -----------------------------------------

def batch(cfg, step, size=(4, 16)):
    """The fixed random token batch of `step` (the same on every rank)."""
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, cfg.vocab_size, size, generator=g)


def gather_hf(shard, group=None):
    """All ranks' Megatron tensors gathered (gloo, as raw bytes: bit-exact) into HF ones."""
    if shard.tp == 1:
        return megatron_to_hf([shard.tensors()], shard.cfg, 1)
    ranks = [OrderedDict() for _ in range(shard.tp)]
    for name, t in shard.tensors().items():
        parts = [torch.empty_like(t).view(torch.uint8) for _ in range(shard.tp)]
        dist.all_gather(parts, t.contiguous().view(torch.uint8), group=group)
        for r, p in zip(ranks, parts):
            r[name] = p.view(t.dtype)
    return megatron_to_hf(ranks, shard.cfg, shard.tp)


def train_step(shard, step, group=None, lr=1e-3, fp32_master=False):
    """One causal-LM step of AdamW on this rank's MegatronShard.

    Every rank gathers the full weights, runs the whole model on batch(step) and takes
    its shard of each gradient (same mapping as the weights), so all ranks compute the
    same loss and their updated shards form one consistent model. AdamW updates the
    bf16 parameters themselves, or with `fp32_master` (Megatron's mixed-precision
    optimizer) fp32 copies that are rounded into them: small steps then accumulate, and
    each step changes only the elements that cross a bf16 rounding boundary. lr and
    fp32_master are taken at the first step. Returns dict(loss, changed): changed = the
    fraction of this rank's elements (padding rows included) whose bf16 value changed."""
    st = shard._train
    params = list(shard.parameters())
    if "opt" not in st:
        st["master"] = [p.detach().float().requires_grad_() for p in params] if fp32_master else params
        st["opt"] = torch.optim.AdamW(st["master"], lr=lr)
        st["model"] = hf_model(shard.cfg).train()
    model = load_hf(st["model"], gather_hf(shard, group))
    model.zero_grad(set_to_none=True)
    ids = batch(shard.cfg, step)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    grads = OrderedDict((n, p.grad) for n, p in model.named_parameters())
    mgrads = hf_to_megatron(grads, shard.cfg, shard.tp, shard.tp_rank, shard.vocab_multiple)
    before = [p.detach().clone() for p in params]
    for (n, _), m in zip(shard.named_parameters(), st["master"]):
        m.grad = mgrads[n].to(m.dtype)
    st["opt"].step()
    st["opt"].zero_grad(set_to_none=True)
    with torch.no_grad():
        for p, m in zip(params, st["master"]):
            if m is not p:
                p.copy_(m)
    changed = sum(int((b != p.detach()).sum()) for b, p in zip(before, params))
    return dict(loss=loss.item(), changed=changed / sum(p.numel() for p in params))


# --- processes ------------------------------------------------------------------------

def _rank_main(fn, rank, world, tmpdir, gloo, args):
    torch.set_num_threads(1)  # the ranks share the machine's cores
    try:
        if gloo:
            dist.init_process_group("gloo", init_method=f"file://{tmpdir}/pg", rank=rank,
                                    world_size=world)
        result = fn(rank, world, *args)
        if gloo:
            # every rank past its last collective before any tears down: a rank
            # closing its connections while another still finishes one makes
            # gloo abort that one (std::terminate, seen under load)
            dist.barrier()
            dist.destroy_process_group()
        torch.save(result, f"{tmpdir}/result.{rank}.pt")
    except BaseException:
        with open(f"{tmpdir}/error.{rank}.txt", "w") as f:
            f.write(traceback.format_exc())
        raise SystemExit(1)


def spawn_ranks(fn, world, tmpdir, *args, gloo=True, timeout=300.0):
    """Run fn(rank, world, *args) in `world` processes started with 'spawn' (fn must be
    importable: a module-level function), each in a gloo group when `gloo`; return
    their results in rank order. A failure raises with the rank's traceback; ranks still
    running `timeout` seconds after the start (a hang guard) or after another rank
    failed are killed."""
    tmpdir = str(tmpdir)
    os.makedirs(tmpdir, exist_ok=True)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_rank_main, args=(fn, r, world, tmpdir, gloo, args))
             for r in range(world)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + timeout
    pending = {p.sentinel: p for p in procs}
    while pending and time.monotonic() < deadline:
        for s in mp.connection.wait(list(pending), max(0.0, deadline - time.monotonic())):
            p = pending.pop(s)
            p.join()
            if p.exitcode != 0:  # the others may wait for it in a collective forever
                deadline = 0.0
    killed = [procs.index(p) for p in pending.values()]
    for p in pending.values():
        p.kill()
        p.join()
    errors = []
    for r, p in enumerate(procs):
        path = f"{tmpdir}/error.{r}.txt"
        if os.path.exists(path):
            errors.append(f"rank {r}:\n" + open(path).read())
        elif p.exitcode != 0:
            errors.append(f"rank {r}: exit code {p.exitcode}" + (" (killed)" if r in killed else ""))
    if errors:
        raise RuntimeError("\n".join(errors))
    return [torch.load(f"{tmpdir}/result.{r}.pt", weights_only=False) for r in range(world)]
