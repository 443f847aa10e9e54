"""ferry.adapters.verl against verl's real CheckpointEngine API (verl 0.9.1
here), without Ray: an actor process and a rollout process, each with the
engine verl builds from its config (CheckpointEngineConfig with
custom_backend_module="ferry.adapters.verl", CheckpointEngineRegistry.new),
driven as verl's CheckpointEngineManager drives them on every update:
prepare on both, build_topology, init_process_group, send_weights (the
actor's (name, tensor) generator of a transformers model) concurrently
with receive_weights, finalize. Several global steps; after each, the
tensors the rollout received equal the actor's bit for bit.

Skipped where verl is not importable (the project's .venv):
scripts/adapter-test.sh runs it in a venv with verl.
"""
import asyncio
import multiprocessing as mp

import pytest
from children import end_children, recv_reply

pytest.importorskip("verl", reason="verl is not importable here (scripts/adapter-test.sh makes a venv with verl)")
pytest.importorskip("verl.checkpoint_engine.base",
                    reason="verl.checkpoint_engine does not import (verl 0.9.1 needs uvicorn and fastapi besides)")

import torch  # noqa: E402
import transformers  # noqa: E402

CONFIG = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)
STEPS = (3, 4, 7)


def _engine(kwargs, is_master):
    from verl.checkpoint_engine.base import CheckpointEngineRegistry
    from verl.utils.import_utils import import_external_libs
    from verl.workers.config import CheckpointEngineConfig

    cfg = CheckpointEngineConfig(backend="ferry", custom_backend_module="ferry.adapters.verl",
                                 engine_kwargs={"ferry": kwargs})
    import_external_libs(cfg.custom_backend_module)  # what verl does on every worker
    extra = {"is_master": True} if is_master else {}  # the actor's rank 0, as engine_workers.py makes it
    return CheckpointEngineRegistry.new(cfg.backend, bucket_size=cfg.update_weights_bucket_megabytes << 20,
                                        **extra, **cfg.engine_kwargs[cfg.backend])


def _model(step):
    """The actor's model at a global step (every weight changes)."""
    torch.manual_seed(step)
    return transformers.AutoModelForCausalLM.from_config(transformers.Qwen3Config(**CONFIG)).to(torch.bfloat16)


def _worker(conn, kwargs, is_master):
    """One verl worker: runs the engine calls the coordinator sends."""
    try:
        eng = _engine(kwargs, is_master)
        while True:
            cmd, arg = conn.recv()
            if cmd == "prepare":
                conn.send(eng.prepare())
            elif cmd == "init":
                eng.init_process_group(**arg)
                conn.send(None)
            elif cmd == "send":
                m = _model(arg)
                # what an FSDP actor's get_per_tensor_param yields: a generator
                asyncio.run(eng.send_weights(((n, p.data) for n, p in m.named_parameters()), global_steps=arg))
                conn.send(eng.last_info.readers_acked)
            elif cmd == "receive":
                async def pull():
                    return {n: t.clone() async for n, t in eng.receive_weights(global_steps=arg)}
                got = asyncio.run(pull())
                conn.send((eng.version, repr(eng.last_info), got))
            elif cmd == "finalize":
                eng.finalize()
                conn.send(None)
            elif cmd == "close":
                eng.close()
                conn.send(None)
                return
    except BaseException as e:
        conn.send(("error", repr(e)))
        raise


def _call(conn, cmd, arg=None, timeout=120):
    conn.send((cmd, arg))
    return recv_reply(conn, cmd, timeout)


def test_actor_and_rollout_processes_over_several_steps(tmp_path, job):
    cfg_path = tmp_path / "model"
    transformers.Qwen3Config(**CONFIG).save_pretrained(cfg_path)
    kwargs = {"model": str(cfg_path), "dtype": "BF16", "job": job, "timeout": 120}
    ctx = mp.get_context("spawn")
    conns, procs = [], []
    for is_master in (True, False):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_worker, args=(child, kwargs, is_master), daemon=True)
        p.start()
        conns.append(parent)
        procs.append(p)
    actor, rollout = conns
    from ferry.adapters.verl import FerryCheckpointEngine

    try:
        for n, step in enumerate(STEPS, 1):
            # what CheckpointEngineManager.update_weights does, every time
            metadata = [_call(actor, "prepare"), _call(rollout, "prepare")]
            a_kw, r_kw = FerryCheckpointEngine.build_topology(1, 1, metadata)
            _call(actor, "init", {k: v[0] for k, v in a_kw.items()})
            _call(rollout, "init", {k: v[0] for k, v in r_kw.items()})
            actor.send(("send", step))
            rollout.send(("receive", step))
            for c in conns:
                assert c.poll(120), "send/receive did not finish"
            acked = actor.recv()
            version, info, got = rollout.recv()
            assert acked == 1, acked
            assert version == n, info
            want = dict(_model(step).named_parameters())
            assert sorted(got) == sorted(want)
            for name, t in want.items():
                assert got[name].dtype == t.dtype and torch.equal(got[name], t.data), name
            _call(actor, "finalize")
            _call(rollout, "finalize")
        for c in conns:
            _call(c, "close")
    finally:
        ok = end_children(procs)
    assert ok


def test_topology_and_refusals():
    from verl.checkpoint_engine.base import CheckpointEngineRegistry

    import ferry.adapters.verl as fverl

    assert CheckpointEngineRegistry.get("ferry") is fverl.FerryCheckpointEngine
    a, r = fverl.FerryCheckpointEngine.build_topology(3, 2, [{"ferry_meta": "h:1"}, {}, {}, {}, {}])
    assert a == {"rank": [0, -1, -1], "world": [1, 1, 1], "meta": ["h:1"] * 3}
    assert r == {"rank": [0, 1], "world": [2, 2], "meta": ["h:1"] * 2}
    with pytest.raises(ValueError, match="gave no service address"):
        fverl.FerryCheckpointEngine.build_topology(1, 1, [{}, {}])
    with pytest.raises(ValueError, match="either model"):
        fverl.FerryCheckpointEngine(bucket_size=1)
    # a non-sending actor rank drains the generator (its gathers are collective)
    eng = fverl.FerryCheckpointEngine(bucket_size=1, tensors=[["a", "F32", [2]]])
    eng.init_process_group(rank=-1, world=1, meta="h:1")
    drained = []
    asyncio.run(eng.send_weights((drained.append(i) or (str(i), torch.zeros(2)) for i in range(3))))
    assert drained == [0, 1, 2]
