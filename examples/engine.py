"""An engine loop that receives weights from examples/trainer.py in place.

    python examples/engine.py --job demo --meta 127.0.0.1:7471 --steps 5

The engine's own model parameters are ferry's destination: every update
lands in their storage (no copy, same data_ptr), verified against the
trainer's checksums; the engine then runs with the new weights. --device
cuda (or cuda:N) holds the model on a GPU: updates land in its GPU memory.
"""
import argparse
import hashlib

import torch
import transformers

import ferry

TINY = dict(vocab_size=1000, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, head_dim=16, tie_word_embeddings=False)


def digest(model):
    h = hashlib.sha256()
    for name, p in sorted(model.named_parameters()):
        h.update(name.encode())
        h.update(p.detach().cpu().view(-1).view(torch.uint8).numpy().tobytes())
    return h.hexdigest()[:16]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--job", default="example")
    ap.add_argument("--meta", default="127.0.0.1:7471", help="the trainer's service (host:port)")
    ap.add_argument("--steps", type=int, default=5, help="stop after this version")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world", type=int, default=1, help="engine ranks")
    ap.add_argument("--config", help="a config.json directory/path (default: a tiny Qwen3)")
    ap.add_argument("--device", default="cpu", help="where the model runs: cpu, cuda or cuda:N")
    a = ap.parse_args()

    cfg = transformers.AutoConfig.from_pretrained(a.config) if a.config else transformers.Qwen3Config(**TINY)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16).to(a.device).eval()
    spec = ferry.Model.from_config(cfg, dtype="BF16")
    with ferry.Reader(spec, job=a.job, rank=a.rank, world=a.world, meta=a.meta, timeout=60, device=a.device) as reader:
        reader.register(model, ferry.Layout.hf(spec), 0)
        reader.commit()
        prompt = torch.arange(8).unsqueeze(0).to(a.device)
        while reader.version < a.steps:
            info = reader.update("next", timeout=120)  # the next version, waiting for it
            with torch.no_grad():
                token = model(input_ids=prompt).logits[0, -1].argmax().item()
            print(f"version {info.version}: digest {digest(model)} next token {token} "
                  f"({info.bytes} bytes in {info.seconds * 1e3:.1f} ms, {info.delta_pairs} as deltas)", flush=True)


if __name__ == "__main__":
    main()
