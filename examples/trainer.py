"""A trainer loop that publishes its weights with ferry after every step.

    python examples/trainer.py --job demo --meta 127.0.0.1:7471 --steps 5

Any PyTorch model works the same way; this one is a Hugging Face Qwen3 of a
tiny size (--config takes a config.json path or a bundled ferry name for a
real one). Run examples/engine.py with the same --job and --meta to receive
the weights. The trainer runs the metadata service (rank 0 does by default).
--device cuda (or cuda:N) trains on a GPU: ferry then moves the weights
from GPU memory (CUDA IPC on one host) into the engine's, GPU or host.
"""
import argparse
import hashlib

import torch
import transformers

import ferry

TINY = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)


def hf_config(path):
    if path:
        return transformers.AutoConfig.from_pretrained(path)
    return transformers.Qwen3Config(**TINY)


def digest(model):
    """What the engine prints too: equal digests, bit-identical weights."""
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", default="example")
    ap.add_argument("--meta", default="127.0.0.1:7471", help="where this trainer serves the job (host:port)")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--readers", type=int, default=1, help="engine ranks that will read")
    ap.add_argument("--config", help="a config.json directory/path (default: a tiny Qwen3)")
    ap.add_argument("--device", default="cpu", help="where the model trains: cpu, cuda or cuda:N")
    a = ap.parse_args()

    torch.manual_seed(0)
    cfg = hf_config(a.config)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    # What ferry needs to know: the tensors (from the config) and where this
    # process holds them (one rank, one buffer per parameter, HF names, on
    # --device).
    spec = ferry.Model.from_config(cfg, dtype="BF16")
    layout = ferry.Layout.hf(spec)
    with ferry.Writer(spec, job=a.job, rank=0, world=1, meta=a.meta, timeout=60, device=a.device) as writer:
        # adopt: the parameters move into memory ferry allocated (shared
        # memory on the CPU, shm's fast path; GPU memory on a GPU)
        writer.register(model, layout, 0, adopt=True)
        writer.commit()
        for step in range(1, a.steps + 1):
            batch = torch.randint(0, cfg.vocab_size, (4, 32)).to(a.device)
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            opt.step()  # in place: the registered memory holds the new weights
            opt.zero_grad()
            info = writer.publish(step)  # sync mode: returns once every reader has it
            print(f"version {step}: loss {loss.item():.4f} digest {digest(model)} "
                  f"({info.readers_acked} readers, {info.seconds * 1e3:.1f} ms)", flush=True)


if __name__ == "__main__":
    main()
