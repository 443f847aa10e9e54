"""ferry.adapters.sglang against the real sglang package (0.5.23 here), on
the CPU, as far as SGLang runs without a GPU: SGLang's engine cannot start
on this machine (its CPU kernels, sgl-kernel's CPU build, are not on
PyPI; the CUDA build needs libcuda), so no sglang.Engine runs here.

What does run is SGLang's own code from the model down: the engine
process publishes SGLang's runtime config (runtime_context.publish of a
ServerArgs, as a scheduler does), initializes SGLang's distributed state
with gloo (init_distributed_environment, initialize_model_parallel),
builds SGLang's Qwen3ForCausalLM (sglang.srt.models.qwen3: fused
qkv_proj and gate_up_proj, SGLang's parallel linear layers and weight
loaders) and updates it through SGLang's WeightUpdater (the model runner's
component behind Engine.update_weights_from_tensor) with
``custom_weight_loaders=["ferry.adapters.sglang.load"]`` and that
load_format: SGLang's dynamic_import resolves the loader. A trainer
process publishes a transformers Qwen3 through a ferry.Writer. After each
of several versions, every SGLang parameter equals the trainer's weights
as SGLang lays them out ([q; k; v], [gate; up]), bit for bit.

One stub, in the engine process only: SGLang's RotaryEmbedding
constructor imports ``vllm._custom_ops.rotary_embedding`` on a device
that is neither CUDA nor its CPU engine (which needs the missing CPU
sgl-kernel); vllm is not installed, so the test puts a ``vllm._custom_ops``
module whose rotary_embedding raises if called. It is a forward-pass
kernel: nothing here runs a forward.

Skipped where sglang is not importable (the project's .venv):
scripts/adapter-test.sh runs it in a venv with sglang.
"""
import multiprocessing as mp
import socket

import pytest
from children import close_children, end_children, recv_reply

pytest.importorskip("sglang", reason="sglang is not importable here (scripts/adapter-test.sh makes a venv with sglang)")

import torch  # noqa: E402

CONFIG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, tie_word_embeddings=False, torch_dtype="bfloat16",
              architectures=["Qwen3ForCausalLM"])
VERSIONS = (1, 2, 5)
LOADER = "ferry.adapters.sglang.load"


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _trainer_model(version):
    import transformers

    torch.manual_seed(version)
    m = transformers.AutoModelForCausalLM.from_config(transformers.Qwen3Config(**CONFIG)).to(torch.bfloat16)
    with torch.no_grad():
        for p in m.parameters():  # norms start at 1: make every weight change
            p.copy_(torch.randn_like(p))
    return m


def _sglang_layout(m):
    """The trainer's weights as SGLang's Qwen3 holds them (tp=1)."""
    p = {n: t.detach().clone() for n, t in m.named_parameters()}
    out = {}
    for n, t in p.items():
        if ".self_attn.k_proj." in n or ".self_attn.v_proj." in n or ".mlp.up_proj." in n:
            continue
        if ".self_attn.q_proj." in n:
            pre = n.replace("q_proj.weight", "")
            out[pre + "qkv_proj.weight"] = torch.cat([t, p[pre + "k_proj.weight"], p[pre + "v_proj.weight"]])
        elif ".mlp.gate_proj." in n:
            pre = n.replace("gate_proj.weight", "")
            out[pre + "gate_up_proj.weight"] = torch.cat([t, p[pre + "up_proj.weight"]])
        else:
            out[n] = t
    return out


def _trainer(conn, job):
    try:
        import transformers

        import ferry

        spec = ferry.Model.from_config(transformers.Qwen3Config(**CONFIG), dtype="BF16")
        model = _trainer_model(0)
        w = ferry.Writer(spec, job=job, rank=0, world=1, meta="127.0.0.1:0", serve=True, timeout=120)
        w.register(model, ferry.Layout.hf(spec), 0)
        w.commit()
        conn.send(w.service_address)
        while True:
            cmd, version = conn.recv()
            if cmd == "close":
                w.close()
                conn.send(None)
                return
            with torch.no_grad():
                src = dict(_trainer_model(version).named_parameters())
                for n, p in model.named_parameters():
                    p.copy_(src[n])  # in place: the registered memory
            info = w.publish(version)
            conn.send((info.readers_acked, _sglang_layout(model)))
    except BaseException as e:
        conn.send(("error", repr(e)))
        raise


def _stub_vllm_rotary():
    """The one stub (module docstring): a forward-only kernel import."""
    import sys
    import types

    def rotary_embedding(*args, **kwargs):
        raise RuntimeError("vllm._custom_ops.rotary_embedding is a test stub: no forward pass runs here")

    vllm, ops = types.ModuleType("vllm"), types.ModuleType("vllm._custom_ops")
    ops.rotary_embedding = rotary_embedding
    vllm._custom_ops = ops
    sys.modules.setdefault("vllm", vllm)
    sys.modules.setdefault("vllm._custom_ops", ops)


def _engine(conn, model_dir, port):
    try:
        _stub_vllm_rotary()
        import transformers
        from sglang.srt.distributed import parallel_state as ps
        from sglang.srt.model_executor.model_runner_components.weight_updater import WeightUpdater
        from sglang.srt.runtime_context import SpawnRanks, publish
        from sglang.srt.server_args import ServerArgs

        server_args = ServerArgs(model_path=model_dir, device="cpu", skip_tokenizer_init=True, dtype="bfloat16",
                                 custom_weight_loader=[LOADER])
        publish(server_args, role="scheduler", ranks=SpawnRanks(world_rank=0))
        ps.init_distributed_environment(world_size=1, rank=0, local_rank=0, backend="gloo",
                                        distributed_init_method=f"tcp://127.0.0.1:{port}")
        ps.initialize_model_parallel()
        from sglang.srt.models.qwen3 import Qwen3ForCausalLM

        hf_config = transformers.AutoConfig.from_pretrained(model_dir)
        torch.set_default_dtype(torch.bfloat16)  # as SGLang's model loader does for dtype=bfloat16
        model = Qwen3ForCausalLM(hf_config)
        torch.set_default_dtype(torch.float32)
        with torch.no_grad():
            for p in model.parameters():
                p.zero_()
        ptrs = {n: p.data_ptr() for n, p in model.named_parameters()}

        def no(*args, **kwargs):
            raise AssertionError("not on the update_weights_from_tensor path")

        updater = WeightUpdater(tp_rank=0, device="cpu", gpu_id=0, model_config=None,
                                custom_weight_loaders=list(server_args.custom_weight_loader),
                                get_model=lambda: model, update_model_fields=no, recapture_cuda_graph=no,
                                get_model_runner=no)
        import ferry.adapters.sglang as fsgl

        conn.send(type(model).__module__)
        while True:
            cmd, arg = conn.recv()
            if cmd == "close":
                fsgl.close(model)
                conn.send(None)
                return
            version, job, meta = arg
            ok, msg = updater.update_weights_from_tensor(fsgl.request(version, job=job, meta=meta, timeout=120),
                                                         load_format=LOADER)
            moved = [n for n, p in model.named_parameters() if p.data_ptr() != ptrs[n]]
            # as numpy: SGLang's update path patched torch's tensor pickling for its IPC
            conn.send((ok, msg, fsgl.last_update(model).version, moved,
                       {n: (str(p.dtype), p.detach().view(torch.int16).numpy().copy())
                        for n, p in model.named_parameters()}))
    except BaseException as e:
        conn.send(("error", repr(e)))
        raise




def test_sglang_qwen3_updated_through_the_custom_loader(tmp_path, job):
    import transformers

    transformers.Qwen3Config(**CONFIG).save_pretrained(tmp_path)
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for target, args in ((_trainer, (job,)), (_engine, (str(tmp_path), _free_port()))):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=target, args=(child, *args), daemon=True)
        p.start()
        conns.append(parent)
        procs.append(p)
    trainer, engine = conns
    try:
        meta = recv_reply(trainer, "trainer start")
        assert recv_reply(engine, "engine start") == "sglang.srt.models.qwen3"
        for version in VERSIONS:
            trainer.send(("publish", version))
            engine.send(("update", (version, job, meta)))
            acked, want = recv_reply(trainer, f"publish {version}")
            ok, msg, got_version, moved, got = recv_reply(engine, f"update {version}")
            got = {n: (dt, torch.from_numpy(a).view(torch.bfloat16)) for n, (dt, a) in got.items()}
            assert ok, msg
            assert acked == 1 and got_version == version
            assert moved == []  # SGLang's loaders copy into its own parameters
            assert sorted(got) == sorted(want)
            for name, t in want.items():
                assert got[name][0] == str(t.dtype) and torch.equal(got[name][1], t), (version, name)
        close_children(conns)
    finally:
        ok = end_children(procs)
    assert ok


def test_request_and_refusals():
    import ferry.adapters.sglang as fsgl

    (name, t), = fsgl.request(7, job="j", meta="h:1")
    assert name == fsgl.REQUEST and t.dtype == torch.uint8
    body = fsgl._parse([(name, t)])
    assert body["version"] == 7 and body["job"] == "j" and body["meta"] == "h:1"
    with pytest.raises(ValueError, match="expects exactly the one entry"):
        fsgl._parse([("model.embed_tokens.weight", torch.zeros(2))])
    with pytest.raises(ValueError, match="expects exactly the one entry"):
        fsgl._parse(fsgl.request(1) + fsgl.request(2))
    from sglang.srt.utils import dynamic_import

    assert dynamic_import(LOADER) is fsgl.load
