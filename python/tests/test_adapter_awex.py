"""ferry.adapters.awex against the real awex package (awex 0.9.0 here), on
the CPU: a trainer process and an inference process, each running awex's
own classes through awex's own entry points, with comm_backend="ferry"
and awex's meta server (started here with awex's start_meta_server).

Trainer: a real Megatron-core GPTModel (megatron-core 0.16.1, Qwen3
shape: GQA, qk-norm, SwiGLU; local layer spec, CPU initialization, gloo
process group) in awex's MegatronEngine; ``engine.initialize()`` makes the
writer through get_weights_exchange_writer (patched by install()), and
each ``engine.write_weights()`` runs awex's WeightsExchangeShardingWriter:
its _initialize (McoreParamMetaResolver, the meta exchange), its
Megatron->HF converter and the write_tensors/finish_step hooks.

Inference: awex's WeightsReader (get_weights_exchange_reader) over an
InferenceEngine whose one model worker holds SGLang's parameter layout of
Qwen3 (fused qkv_proj and gate_up_proj), named and shaped as SGLang's
Qwen3ForCausalLM names them (SGLang itself cannot be installed next to
awex's torch: the model here is a plain module with those parameters). Its
execute_task_in_model_worker cloudpickles each task as SGLang's awex
engine does; awex's WeightsReader runs its InferParamMetaResolver, its
SGLang->HF converter (views into the fused parameters), _init_in_tp_worker
(patched) and the worker reader's read_tensors/finish_step.

After each of several steps (every weight changes) every engine parameter
equals the trainer's, fused as SGLang fuses them, bit for bit, and has
not moved (ferry wrote the engine's own memory).

Two shims, in the trainer process only, both for running without a GPU:
awex's get_mcore_rank_info takes ``rank % device_count()``, and
device_count() is 0 without one (ZeroDivisionError): the test makes it 1.
awex's Megatron converter knows the Transformer Engine layer spec's
parameter names, where each layer's input norm is
``self_attention.linear_qkv.layer_norm_weight``; Transformer Engine needs
CUDA, so the model uses Megatron's local spec, whose input norm is
``input_layernorm.weight`` (awex raises NotImplementedError on it): awex
is given a module holding the same Parameter objects under the TE names.

Skipped where awex is not importable (the project's .venv):
scripts/adapter-test.sh runs it in a venv with awex and its undeclared
dependencies (torch, transformers, requests, aiohttp, psutil,
megatron-core).
"""
import multiprocessing as mp
import os
import pickle
import socket

import pytest
from children import close_children, end_children, recv_reply

pytest.importorskip("awex", reason="awex is not importable here (scripts/adapter-test.sh makes a venv with awex)")
pytest.importorskip("megatron.core", reason="megatron-core is not importable (awex imports it; it does not declare it)")

import torch  # noqa: E402

HIDDEN, HEADS, KV_HEADS, HEAD_DIM, FFN, LAYERS, VOCAB = 64, 4, 2, 16, 128, 2, 128
STEPS = (0, 1, 5)


def _hf_config():
    import transformers

    return transformers.Qwen3Config(vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
                                    num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                                    num_key_value_heads=KV_HEADS, head_dim=HEAD_DIM, tie_word_embeddings=False,
                                    architectures=["Qwen3ForCausalLM"], torch_dtype="bfloat16")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# ---- trainer process ----------------------------------------------------

def _megatron_model():
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_layer_local_spec
    from megatron.core.transformer.transformer_config import TransformerConfig

    cfg = TransformerConfig(num_layers=LAYERS, hidden_size=HIDDEN, num_attention_heads=HEADS,
                            num_query_groups=KV_HEADS, kv_channels=HEAD_DIM, ffn_hidden_size=FFN,
                            use_cpu_initialization=True, normalization="RMSNorm", gated_linear_unit=True,
                            activation_func=torch.nn.functional.silu, add_bias_linear=False, qk_layernorm=True,
                            params_dtype=torch.bfloat16, bf16=True)
    spec = get_gpt_layer_local_spec(qk_layernorm=True, normalization="RMSNorm")
    model = GPTModel(config=cfg, transformer_layer_spec=spec, vocab_size=VOCAB, max_sequence_length=64,
                     share_embeddings_and_output_weights=False, position_embedding_type="rope")
    return model.to(torch.bfloat16)


def _with_te_names(model):
    """A module holding model's own Parameters, the input norms named as
    the Transformer Engine spec names them (the second shim)."""
    out = torch.nn.Module()
    out.config = model.config  # awex reads the TransformerConfig from here
    for name, p in model.named_parameters():
        name = name.replace(".input_layernorm.weight", ".self_attention.linear_qkv.layer_norm_weight")
        mod, parts = out, name.split(".")
        for part in parts[:-1]:
            if not hasattr(mod, part):
                mod.add_module(part, torch.nn.Module())
            mod = getattr(mod, part)
        mod.register_parameter(parts[-1], p)
    return out


def _train_step(model, step):
    """Every weight changes, deterministically per step."""
    g = torch.Generator().manual_seed(1000 + step)
    with torch.no_grad():
        for _, p in sorted(model.named_parameters()):
            p.copy_(torch.randn(p.shape, generator=g).to(p.dtype))


def _sglang_layout(model):
    """The trainer's weights as SGLang's Qwen3 holds them: Megatron's
    linear_qkv is [q heads of group, k, v] per KV group; SGLang's qkv_proj
    is [all q; all k; all v]; both gate_up/linear_fc1 are [gate; up]."""
    p = {n: t.detach().clone() for n, t in model.named_parameters()}
    out = {"model.embed_tokens.weight": p["embedding.word_embeddings.weight"],
           "model.norm.weight": p["decoder.final_layernorm.weight"], "lm_head.weight": p["output_layer.weight"]}
    qpg = HEADS // KV_HEADS
    for i in range(LAYERS):
        m, s = f"decoder.layers.{i}.", f"model.layers.{i}."
        qkv = p[m + "self_attention.linear_qkv.weight"].view(KV_HEADS, qpg + 2, HEAD_DIM, HIDDEN)
        out[s + "self_attn.qkv_proj.weight"] = torch.cat([qkv[:, :qpg].reshape(-1, HIDDEN),
                                                          qkv[:, qpg].reshape(-1, HIDDEN),
                                                          qkv[:, qpg + 1].reshape(-1, HIDDEN)])
        out[s + "self_attn.o_proj.weight"] = p[m + "self_attention.linear_proj.weight"]
        out[s + "self_attn.q_norm.weight"] = p[m + "self_attention.q_layernorm.weight"]
        out[s + "self_attn.k_norm.weight"] = p[m + "self_attention.k_layernorm.weight"]
        out[s + "input_layernorm.weight"] = p[m + "input_layernorm.weight"]
        out[s + "post_attention_layernorm.weight"] = p[m + "pre_mlp_layernorm.weight"]
        out[s + "mlp.gate_up_proj.weight"] = p[m + "mlp.linear_fc1.weight"]
        out[s + "mlp.down_proj.weight"] = p[m + "mlp.linear_fc2.weight"]
    return out


def _trainer(conn, meta_addr, job, port):
    try:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), GLOO_SOCKET_IFNAME="lo")
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=0, world_size=1)
        from megatron.core import parallel_state as mpu

        mpu.initialize_model_parallel(1, 1)
        from awex.util import device as device_util

        device_util.device_count = lambda: 1  # the shim (module docstring): rank % 0 on a machine without GPUs
        import ferry.adapters.awex as fawex

        fawex.install()
        from awex.engine.mcore import MegatronEngine

        model = _megatron_model()
        engine = MegatronEngine({"meta_server_addr": meta_addr, "comm_backend": "ferry",
                                 "ferry": {"job": job, "timeout": 120}}, _hf_config(), [_with_te_names(model)])
        engine.initialize()
        conn.send(type(engine.weights_exchange_writer).__name__)
        while True:
            cmd, step = conn.recv()
            if cmd == "close":
                engine.weights_exchange_writer.close()
                conn.send(None)
                return
            _train_step(model, step)
            engine.set_global_step(step)
            engine.write_weights()
            w = engine.weights_exchange_writer
            conn.send((w.version, w.last_publish.readers_acked, _sglang_layout(model)))
    except BaseException as e:
        conn.send(("error", repr(e)))
        raise


# ---- inference process --------------------------------------------------

def _engine_model(hf_config):
    """SGLang's Qwen3ForCausalLM parameters (names, fused shapes, dtype),
    zeros: what the weights exchange must fill."""
    q, kv = HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM
    shapes = {"model.embed_tokens.weight": (VOCAB, HIDDEN), "model.norm.weight": (HIDDEN,),
              "lm_head.weight": (VOCAB, HIDDEN)}
    for i in range(LAYERS):
        s = f"model.layers.{i}."
        shapes.update({s + "self_attn.qkv_proj.weight": (q + 2 * kv, HIDDEN),
                       s + "self_attn.o_proj.weight": (HIDDEN, q),
                       s + "self_attn.q_norm.weight": (HEAD_DIM,), s + "self_attn.k_norm.weight": (HEAD_DIM,),
                       s + "input_layernorm.weight": (HIDDEN,), s + "post_attention_layernorm.weight": (HIDDEN,),
                       s + "mlp.gate_up_proj.weight": (2 * FFN, HIDDEN), s + "mlp.down_proj.weight": (HIDDEN, FFN)})

    class Qwen3ForCausalLM(torch.nn.Module):  # awex keys its converter on the class name
        def __init__(self):
            super().__init__()
            self.config = hf_config
            for name, shape in shapes.items():
                mod = self
                parts = name.split(".")
                for part in parts[:-1]:
                    if not hasattr(mod, part):
                        mod.add_module(part, torch.nn.Module())
                    mod = getattr(mod, part)
                mod.register_parameter(parts[-1], torch.nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16),
                                                                     requires_grad=False))

    return Qwen3ForCausalLM()


def _inference(conn, meta_addr):
    try:
        import types

        import cloudpickle
        from awex.config import InferenceConfig
        from awex.engine.core import InferenceEngine
        from awex.reader.weights_reader import get_weights_exchange_reader

        import ferry.adapters.awex as fawex

        fawex.install()
        hf_config = _hf_config()
        model = _engine_model(hf_config)
        config = InferenceConfig(meta_server_addr=meta_addr, comm_backend="ferry", tp_size=1, pp_size=1, dp_size=1,
                                 ep_size=1, num_engines=1, engine_rank=0, node_rank=0, nnodes=1,
                                 weights_exchange_ipc_backend="cpu").validated()
        flushes = []
        server_args = types.SimpleNamespace(dp_size=1, enable_dp_attention=False, ep_size=1, nnodes=1)
        scheduler = types.SimpleNamespace(server_args=server_args, flush_cache=lambda: flushes.append(1) or True)
        context = dict(tp_rank=0, tp_size=1, pp_rank=0, pp_size=1, dp_rank=0, dp_size=1, moe_ep_rank=0,
                       moe_ep_size=1, attn_tp_rank=0, attn_tp_size=1, attn_dp_rank=0, world_size=1, global_rank=0,
                       local_rank=0, nnodes=1, server_args=server_args, scheduler=scheduler,
                       infer_engine_config=config)

        class OneWorkerSGLangEngine(InferenceEngine):
            """awex's InferenceEngine with one SGLang model worker in this
            process; tasks travel by cloudpickle as awex.engine.sglang's do."""

            def __init__(self):
                super().__init__(hf_config)
                self.weights_exchange_reader = None

            engine_name = "sglang"
            config = property(lambda self: config)
            num_engines = property(lambda self: 1)
            engine_rank = property(lambda self: 0)

            def initialize(self):
                self.weights_exchange_reader = get_weights_exchange_reader(self)
                self.weights_exchange_reader.initialize()

            def execute_task_in_model_worker(self, fn, **kwargs):
                fn, kwargs = cloudpickle.loads(cloudpickle.dumps((fn, kwargs)))
                return [fn(**kwargs, model=model, model_runner=None, model_context=context)]

            def update_weights(self, **kwargs):
                self.weights_exchange_reader.update_weights(step_id=self.global_step, **kwargs)

            def update_weights_from_disk(self, model_path, load_format=None):
                raise NotImplementedError

            def release_memory_occupation(self, tags=None):
                pass

            def resume_memory_occupation(self, tags=None):
                pass

        engine = OneWorkerSGLangEngine()
        engine.initialize()
        ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}
        conn.send(type(engine.weights_exchange_reader).__name__)
        while True:
            cmd, step = conn.recv()
            if cmd == "close":
                scheduler.awes_weights_reader.close()
                conn.send(None)
                return
            engine.set_global_step(step)
            engine.update_weights()
            worker = scheduler.awes_weights_reader
            moved = [n for n, p in model.named_parameters() if p.data_ptr() != ptrs[n]]
            conn.send((type(worker).__name__, worker.last_update.version, len(flushes), moved,
                       {n: p.detach().clone() for n, p in model.named_parameters()}))
    except BaseException as e:
        conn.send(("error", repr(e)))
        raise




def test_megatron_trainer_to_sglang_layout_engine_over_several_steps(job):
    from awex.meta.meta_server import start_meta_server

    ip, port = start_meta_server("127.0.0.1", 0)
    meta_addr = f"{ip}:{port}"
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for target, args in ((_trainer, (meta_addr, job, _free_port())), (_inference, (meta_addr,))):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=target, args=(child, *args), daemon=True)
        p.start()
        conns.append(parent)
        procs.append(p)
    trainer, infer = conns
    try:
        assert recv_reply(trainer, "trainer init") == "FerryWeightsWriter"
        assert recv_reply(infer, "engine init") == "WeightsReader"
        for n, step in enumerate(STEPS, 1):
            trainer.send(("step", step))
            infer.send(("step", step))
            version, acked, want = recv_reply(trainer, f"write_weights step {step}")
            worker, got_version, flushes, moved, got = recv_reply(infer, f"update_weights step {step}")
            assert worker == "FerryWorkerWeightsReader"
            assert version == got_version == step + 1 and acked == 1
            assert flushes == n  # awex flushed the engine's cache after each update
            assert moved == []
            assert sorted(got) == sorted(want)
            for name, t in want.items():
                assert got[name].dtype == t.dtype and torch.equal(got[name], t), (step, name)
        close_children(conns)
    finally:
        ok = end_children(procs)
    assert ok


def test_install_patches_and_refusals():
    import awex.config
    import awex.engine.mcore
    import awex.reader.weights_reader as wr
    import awex.writer.weights_writer as ww

    import ferry.adapters.awex as fawex

    fawex.install()
    fawex.install()  # idempotent
    assert fawex.installed()
    assert "ferry" in awex.config._VALID_COMM_BACKENDS
    assert ww.get_weights_exchange_writer is fawex.get_weights_exchange_writer
    assert awex.engine.mcore.get_weights_exchange_writer is fawex.get_weights_exchange_writer
    assert wr.WeightsReader._init_in_tp_worker is fawex._init_in_tp_worker
    awex.config.InferenceConfig(comm_backend="ferry").validate()
    # other backends still reach awex's own code
    file_engine = type("E", (), {"comm_backend": "file", "enable_debug_mode": False, "enable_colocate_mode": False})()
    assert type(ww.get_weights_exchange_writer(file_engine)).__name__ == "FileWeightExchangeWriter"
    with pytest.raises(ValueError, match="Unsupported weights exchange comm backend"):
        ww.get_weights_exchange_writer(type("E", (), {"comm_backend": "nope", "enable_debug_mode": False,
                                                      "enable_colocate_mode": False})())
    with pytest.raises(ValueError, match="Unsupported weights exchange backend"):
        fawex._init_in_tp_worker(pickle.dumps({}), pickle.dumps([]), pickle.dumps([]), 0, 1, "h:1", "nope", {},
                                 False, False, "cpu", model=None, model_context={"scheduler": None})
    with pytest.raises(ValueError, match="steps must be >= 0"):
        fawex._version(-1)
    assert fawex._version(0) == 1
