"""A real RL weight-sync loop: a trainer process trains a Qwen3 with AdamW
(bf16 weights, fp32 masters) and ferry moves every version into an engine
process that holds the model in vLLM's fused layout; the engine's logits on
a fixed prompt must be bit-identical to the trainer's at every version it
lands. One command starts everything (`ferry demo --rl OPTIONS` runs the
same, with the ferry Python package of the CLI's build):

    python -m ferry.rl_loop                                      # CPU, tiny Qwen3
    python -m ferry.rl_loop --device cuda --shape 0.6b           # 2 GPUs, Qwen3-0.6B
    python -m ferry.rl_loop --mode async --max-lag 2 --steps 12
    python -m ferry.rl_loop --kill-engine-at 3

It needs torch and transformers besides ferry. It is the launcher: it runs
itself again as the trainer (which runs
ferry's metadata service) and as the engine, separate processes, and prints
one table row per version: the share of bf16 elements the step changed, the
bytes ferry moved (deltas for an engine one version behind), ferry's seconds
for the update (and the trainer's checksums and encode, the engine's pull
and apply), the seconds of a torch.distributed broadcast of the whole
model as verl and slime refit engines (NCCL on GPUs, gloo on CPU; measured
after the loop, between the same two processes, one round per row), and
whether the logits were equal. It exits 1 and says which version differed,
and by how much, if any check fails. docs/python.md ("The RL loop example")
explains the options and the output.
"""
import argparse
import faulthandler
import json
import os
import queue
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# --- the model -----------------------------------------------------------------------

SHAPES = {
    # a few MB: vocab 1000 is not a multiple of 64, so the engine's padded
    # embedding rows are real; tied embeddings as Qwen3-0.6B's
    "tiny": dict(vocab_size=1000, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    "0.6b": dict(vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28,
                 num_attention_heads=16, num_key_value_heads=8, head_dim=128),
}
BATCH = {"tiny": (4, 32), "0.6b": (4, 256)}  # training tokens per step (rows, length)
PROMPT_LEN = 16
EVENT = "@@ "  # children's machine-readable stdout lines


def qwen3_config(shape):
    import transformers
    return transformers.Qwen3Config(**SHAPES[shape], tie_word_embeddings=True, rms_norm_eps=1e-6, rope_theta=1e6,
                                    max_position_embeddings=4096, attention_dropout=0.0,
                                    attn_implementation="sdpa")


def token_batch(cfg, shape, step):
    """Step `step`'s training tokens: a fixed generator, no dataset."""
    import torch
    g = torch.Generator().manual_seed(1000 + step)
    return torch.randint(0, cfg.vocab_size, BATCH[shape], generator=g)


def prompt_ids(cfg):
    import torch
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, cfg.vocab_size, (1, PROMPT_LEN), generator=g)


class FusedQwen3:
    """The engine's model as vLLM holds it (tp=1): qkv_proj = [q; k; v] and
    gate_up_proj = [gate; up] fused, the vocabulary padded to a multiple of
    64, a tied lm_head not stored apart. `module` names its parameters as
    ferry's `Layout.infer(spec, "tp=1")` does. `hf_views()` gives each
    Hugging Face tensor as a view into these parameters, which is how the
    engine runs the HF forward pass on exactly the bytes ferry landed, and
    where the broadcast baseline copies its buckets (vLLM's weight loader
    copies q, k, v into the fused parameter the same way)."""

    def __init__(self, cfg, device):
        import torch
        from torch import nn
        self.cfg = cfg
        d, hd = cfg.hidden_size, cfg.head_dim
        self.q, self.kv, self.ffn = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd, cfg.intermediate_size
        self.vocab, self.padded = cfg.vocab_size, -(-cfg.vocab_size // 64) * 64
        shapes = {"model.embed_tokens.weight": (self.padded, d)}
        for l in range(cfg.num_hidden_layers):
            p = f"model.layers.{l}."
            shapes.update({p + "input_layernorm.weight": (d,),
                           p + "self_attn.qkv_proj.weight": (self.q + 2 * self.kv, d),
                           p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,),
                           p + "self_attn.o_proj.weight": (d, self.q),
                           p + "post_attention_layernorm.weight": (d,),
                           p + "mlp.gate_up_proj.weight": (2 * self.ffn, d),
                           p + "mlp.down_proj.weight": (d, self.ffn)})
        shapes["model.norm.weight"] = (d,)
        if not cfg.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.padded, d)
        self.module = nn.Module()
        for name, shape in shapes.items():  # zeros: nothing in common with the trainer's weights
            *path, leaf = name.split(".")
            mod = self.module
            for part in path:
                if part not in mod._modules:
                    mod.add_module(part, nn.Module())
                mod = mod._modules[part]
            mod.register_parameter(leaf, nn.Parameter(torch.zeros(shape, dtype=torch.bfloat16, device=device),
                                                      requires_grad=False))
        self.params = dict(self.module.named_parameters())

    def data_ptrs(self):
        return {n: p.data_ptr() for n, p in self.params.items()}

    def hf_views(self):
        """HF name -> view of the fused parameters (the checkpoint's tensors,
        a tied lm_head not listed)."""
        P, out = self.params, {"model.embed_tokens.weight": self.params["model.embed_tokens.weight"][:self.vocab]}
        for l in range(self.cfg.num_hidden_layers):
            p = f"model.layers.{l}."
            qkv, gu = P[p + "self_attn.qkv_proj.weight"], P[p + "mlp.gate_up_proj.weight"]
            out[p + "self_attn.q_proj.weight"] = qkv[:self.q]
            out[p + "self_attn.k_proj.weight"] = qkv[self.q:self.q + self.kv]
            out[p + "self_attn.v_proj.weight"] = qkv[self.q + self.kv:]
            out[p + "mlp.gate_proj.weight"] = gu[:self.ffn]
            out[p + "mlp.up_proj.weight"] = gu[self.ffn:]
            for x in ("input_layernorm", "post_attention_layernorm", "self_attn.q_norm", "self_attn.k_norm",
                      "self_attn.o_proj", "mlp.down_proj"):
                out[p + x + ".weight"] = P[p + x + ".weight"]
        out["model.norm.weight"] = P["model.norm.weight"]
        if not self.cfg.tie_word_embeddings:
            out["lm_head.weight"] = P["lm_head.weight"][:self.vocab]
        return out

    def unfused_hf(self, device):
        """A transformers Qwen3ForCausalLM whose parameters are views of this
        model's (no copy: every forward pass reads the landed bytes)."""
        import torch
        import transformers
        from torch import nn
        with torch.device(device):
            hf = transformers.Qwen3ForCausalLM(self.cfg)
        hf = hf.to(torch.bfloat16).eval()
        views = self.hf_views()
        if set(views) != {n for n, _ in hf.named_parameters()}:
            raise RuntimeError("the engine's unfused names differ from Qwen3ForCausalLM's")
        for name, view in views.items():
            *path, leaf = name.split(".")
            setattr(hf.get_submodule(".".join(path)), leaf, nn.Parameter(view, requires_grad=False))
        if self.cfg.tie_word_embeddings:
            hf.lm_head.weight = hf.model.embed_tokens.weight
        return hf


# --- children: events and files ------------------------------------------------------

def emit(kind, **fields):
    print(EVENT + json.dumps(dict(ev=kind, **fields)), flush=True)


def write_json(path, obj):
    with open(path + ".tmp", "w") as f:
        json.dump(obj, f)
    os.replace(path + ".tmp", path)  # readers see all of it or nothing


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


def wait_for(path, timeout, what):
    """Polls for a file another process writes; raises after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"no {what} after {timeout:.0f} s ({path})")
        time.sleep(0.01)


def newest_published(run_dir):
    vs = [int(n[4:-5]) for n in os.listdir(run_dir) if n.startswith("pub.") and n.endswith(".json")]
    return max(vs, default=0)


def setup_device(name):
    import torch
    device = torch.device(name)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    else:  # the two processes share the cores: oversubscribed intra-op threads spin and crawl
        torch.set_num_threads(max(1, (os.cpu_count() or 2) // 2))
    return device


def sync_device(device):
    import torch
    if device.type == "cuda":
        torch.cuda.synchronize(device)


# --- the broadcast baseline ----------------------------------------------------------

def buckets(names, sizes, limit):
    """Groups names (in order) into buckets of at most `limit` bytes (one larger
    tensor makes a bucket of its own), as bench/nccl_bcast.py does."""
    out, cur, size = [], [], 0
    for n in names:
        if cur and size + sizes[n] > limit:
            out.append(cur)
            cur, size = [], 0
        cur.append(n)
        size += sizes[n]
    if cur:
        out.append(cur)
    return out


def broadcast_baseline(rank, tensors, names, device, a):
    """`rounds` + 1 broadcasts (the first untimed) of `tensors` (HF name ->
    tensor: the trainer's parameters on rank 0, views into the engine's fused
    parameters on rank 1): each bucket packed on the trainer, broadcast, and
    copied slice by slice into the engine's parameters. Returns (backend,
    seconds per timed round as rank 1 saw it)."""
    import datetime
    import torch
    import torch.distributed as dist
    backend = "nccl" if a.trainer_device != a.engine_device and device.type == "cuda" else "gloo"
    dist.init_process_group(backend, init_method=f"file://{a.run_dir}/pg", rank=rank, world_size=2,
                            timeout=datetime.timedelta(seconds=a.wait_timeout),
                            **(dict(device_id=device) if backend == "nccl" else {}))
    sizes = {n: tensors[n].numel() * tensors[n].element_size() for n in names}
    groups = buckets(names, sizes, a.bucket_mib << 20)
    flat = torch.empty(max(sum(tensors[n].numel() for n in b) for b in groups), dtype=torch.bfloat16,
                       device=device)
    times = []
    for it in range(a.bcast_rounds + 1):
        sync_device(device)
        dist.barrier()
        t0 = time.perf_counter()
        for b in groups:
            buf = flat[:sum(tensors[n].numel() for n in b)]
            if rank == 0:
                torch.cat([tensors[n].reshape(-1) for n in b], out=buf)
            dist.broadcast(buf, src=0)
            if rank == 1:
                at = 0
                for n in b:
                    t = tensors[n]
                    t.copy_(buf[at:at + t.numel()].view(t.shape))
                    at += t.numel()
        sync_device(device)
        if it:
            times.append(time.perf_counter() - t0)
    dist.barrier()
    dist.destroy_process_group()
    return backend, times


# --- the trainer -----------------------------------------------------------------------

def trainer_main(a):
    import torch
    import transformers

    import ferry
    device = setup_device(a.trainer_device)
    cfg = qwen3_config(a.shape)
    torch.manual_seed(0)
    with torch.device(device):
        model = transformers.Qwen3ForCausalLM(cfg)
    model = model.to(torch.bfloat16).train()
    spec = ferry.Model.from_config(cfg, dtype="BF16")
    writer = ferry.Writer(spec, job=a.job, rank=0, world=1, meta="127.0.0.1:0", mode=a.mode,
                          deltas=a.deltas, timeout=a.wait_timeout, device=a.trainer_device)
    # adopt: the bf16 parameters move into memory ferry allocated (shared
    # memory on the CPU, GPU memory on a GPU); the optimizer never sees them
    writer.register(model, ferry.Layout.hf(spec), 0, adopt=True)
    writer.commit()
    write_json(os.path.join(a.run_dir, "meta.json"), dict(meta=writer.service_address))
    emit("serving", meta=writer.service_address, pid=os.getpid())

    # Megatron's mixed precision: AdamW on fp32 masters, rounded into the bf16
    # parameters after each step (only elements crossing a bf16 rounding
    # boundary change, as in real RL steps)
    params = list(model.parameters())  # a tied lm_head is the embedding's parameter: listed once
    masters = [p.detach().float().clone() for p in params]
    opt = torch.optim.AdamW(masters, lr=a.lr)
    prompt = prompt_ids(cfg).to(device)
    elems = sum(p.numel() for p in params)
    for v in range(1, a.steps + 1):
        ids = token_batch(cfg, a.shape, v).to(device)
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        for p, m in zip(params, masters):
            m.grad = p.grad.float()
            p.grad = None
        opt.step()
        opt.zero_grad(set_to_none=True)
        changed = 0
        with torch.no_grad():
            for p, m in zip(params, masters):
                new = m.to(torch.bfloat16)
                changed += int((new != p).sum())
                p.copy_(new)
            model.eval()
            logits = model(input_ids=prompt).logits
            model.train()
        # the reference exists before the version does: an engine landing v finds it
        torch.save(logits.cpu(), os.path.join(a.run_dir, f"logits.{v}.pt"))
        if v == a.kill_engine_at:  # held until the launcher killed the engine inside its update for v
            wait_for(os.path.join(a.run_dir, "killed"), a.wait_timeout, "kill from the launcher")
        if v == a.steps and a.kill_engine_at and a.mode == "sync":
            # a sync version is offered only while its publish waits for readers:
            # the last one waits for the restarted engine to be there
            wait_for(os.path.join(a.run_dir, "joined.2"), a.wait_timeout, "the restarted engine")
        info = writer.publish(v)
        ev = dict(version=v, loss=loss.item(), changed=changed / elems, seconds=info.seconds,
                  encode_seconds=info.hash_seconds + info.delta_seconds, delta_bytes=info.delta_bytes,
                  acked=info.readers_acked, missing=info.readers_missing)
        write_json(os.path.join(a.run_dir, f"pub.{v}.json"), ev)
        emit("published", **ev)
    write_json(os.path.join(a.run_dir, "done.json"), dict(last=a.steps))  # async engines: catch up now
    # async versions live in the writer's slots: it stays until the engine has the last
    wait_for(os.path.join(a.run_dir, "engine_done"), a.wait_timeout, "engine landing the last version")
    writer.close()
    if a.bcast_rounds:
        names = [t.name for t in spec.tensors]
        tensors = {n: p.detach() for n, p in model.named_parameters()}
        broadcast_baseline(0, tensors, names, device, a)
    emit("trainer_done")


# --- the engine ------------------------------------------------------------------------

IN_UPDATE = False


def _inside_update(signum, frame):
    """SIGUSR1 from the launcher before it kills this engine: ferry runs
    Python's signal handlers on the thread blocked in Reader.update, so this
    answer proves the engine is inside the update."""
    emit("inside_update", inside=IN_UPDATE)


def engine_main(a):
    global IN_UPDATE
    import torch

    import ferry
    device = setup_device(a.engine_device)
    cfg = qwen3_config(a.shape)
    spec = ferry.Model.from_config(cfg, dtype="BF16")
    engine = FusedQwen3(cfg, device)
    ptrs = engine.data_ptrs()
    hf = engine.unfused_hf(device)
    prompt = prompt_ids(cfg).to(device)
    signal.signal(signal.SIGUSR1, _inside_update)
    # started beside the trainer: its service's address once it serves
    wait_for(os.path.join(a.run_dir, "meta.json"), a.wait_timeout, "address of the trainer's service")
    meta = read_json(os.path.join(a.run_dir, "meta.json"))["meta"]
    reader = ferry.Reader(spec, job=a.job, rank=0, world=1, meta=meta, deltas=a.deltas,
                          timeout=a.wait_timeout, device=a.engine_device)
    reader.register(engine.module, ferry.Layout.infer(spec, "tp=1"), 0)
    reader.commit()
    write_json(os.path.join(a.run_dir, f"joined.{a.incarnation}"), dict(pid=os.getpid()))
    emit("joined", incarnation=a.incarnation, pid=os.getpid())
    doomed = a.kill_engine_at and a.incarnation == 1
    held = 0
    while held < a.steps:
        finished = os.path.exists(os.path.join(a.run_dir, "done.json"))  # the trainer published its last
        newest = newest_published(a.run_dir)
        if a.mode == "sync" or held == 0 or newest - held > a.max_lag or finished or \
                (doomed and newest >= a.kill_engine_at - 1):
            # sync: every version; async: the newest, once more than max_lag behind
            # (the engine to be killed heads for version V: the trainer holds it)
            emit("update_start", held=held, newest=newest)
            IN_UPDATE = True
            info = reader.update("next", timeout=a.wait_timeout)
            IN_UPDATE = False
            v = info.version
            moved = [n for n, p in engine.data_ptrs().items() if p != ptrs[n]]
            if v == a.corrupt_engine_at:  # the check's own check: one bit of one weight flipped
                engine.params["model.norm.weight"].view(torch.int16)[0] ^= 1
            with torch.no_grad():
                logits = hf(input_ids=prompt).logits
            wait_for(os.path.join(a.run_dir, f"logits.{v}.pt"), a.wait_timeout, f"trainer logits of version {v}")
            ref = torch.load(os.path.join(a.run_dir, f"logits.{v}.pt"))
            mine = logits.cpu()
            equal = torch.equal(mine, ref)
            diff = (mine.float() - ref.float()).abs()
            # seconds: the update's own, not its wait for the trainer to publish
            emit("landed", version=v, held=held, newest=newest, bytes=info.bytes,
                 seconds=info.seconds - info.wait_seconds, reader_seconds=info.pull_seconds + info.verify_seconds,
                 delta_steps=info.delta_steps, delta_pairs=info.delta_pairs, equal=equal,
                 max_diff=diff.max().item(), n_diff=int((mine != ref).sum()), n=mine.numel(), moved=moved)
            held = v
        elif a.gen_tokens:
            # a rollout: greedy decoding with the weights held (no KV cache: a toy)
            ids = prompt
            with torch.no_grad():
                for _ in range(a.gen_tokens):
                    nxt = hf(input_ids=ids).logits[:, -1].argmax(-1, keepdim=True)
                    ids = torch.cat([ids, nxt], 1)
            emit("rollout", held=held, newest=newest, tokens=a.gen_tokens)
        else:
            time.sleep(0.01)
    reader.close()
    write_json(os.path.join(a.run_dir, "engine_done"), dict(held=held))
    if a.bcast_rounds:
        names = [t.name for t in spec.tensors]
        before = {n: p.detach().clone() for n, p in engine.params.items()}
        views = engine.hf_views()
        for t in views.values():  # what the broadcast fills must come from the broadcast
            t.zero_()
        backend, times = broadcast_baseline(1, views, names, device, a)
        same = all(torch.equal(before[n], p) for n, p in engine.params.items())
        emit("baseline", backend=backend, times=times, same=same,
             bytes=sum(t.numel() * t.element_size() for t in views.values()))
    emit("engine_done", held=held)


# --- the launcher ----------------------------------------------------------------------

def parse_args(argv=None, prog=None):
    ap = argparse.ArgumentParser(prog=prog or "python -m ferry.rl_loop", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="cpu: both processes on the CPU; cuda: trainer on cuda:0, engine on cuda:1 "
                         "(cuda:0 too with one GPU)")
    ap.add_argument("--shape", choices=sorted(SHAPES), default=None,
                    help="model size (default: tiny on cpu, 0.6b on cuda)")
    ap.add_argument("--mode", choices=("sync", "async"), default="sync",
                    help="sync: publish waits for the engine, which takes every version (deltas after the "
                         "first); async: the trainer never waits, the engine takes the newest")
    ap.add_argument("--steps", type=int, default=5, help="optimizer steps = versions (default 5)")
    ap.add_argument("--deltas", choices=("always", "off"), default="always",
                    help="always (default): the engine applies the versions' sparse deltas when it holds one "
                         "they start from; off: it pulls every version whole (ferry's dense path, to compare "
                         "with the broadcast)")
    ap.add_argument("--lr", type=float, default=1e-6, help="AdamW learning rate (default 1e-6, as RL)")
    ap.add_argument("--max-lag", type=int, default=None,
                    help="async: the engine runs rollouts on weights at most K versions behind the newest "
                         "published, and updates to the newest once further behind (default 1)")
    ap.add_argument("--gen-tokens", type=int, default=8, help="tokens per engine rollout (default 8)")
    ap.add_argument("--kill-engine-at", type=int, default=0, metavar="V",
                    help="SIGKILL the engine inside its update for version V, restart it and let it catch up")
    ap.add_argument("--bucket-mib", type=int, default=1024, help="broadcast baseline bucket size (default 1024)")
    ap.add_argument("--bcast-rounds", type=int, default=None,
                    help="timed broadcast rounds (default: one per version the engine landed, at least 3; "
                         "0: no baseline)")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds the whole run may take, and the most any wait may (default 600)")
    ap.add_argument("--verbose", action="store_true", help="show the processes' own output")
    # the children's
    ap.add_argument("--role", choices=("launcher", "trainer", "engine"), default="launcher", help=argparse.SUPPRESS)
    for hidden in ("--run-dir", "--job", "--trainer-device", "--engine-device"):
        ap.add_argument(hidden, help=argparse.SUPPRESS)
    ap.add_argument("--incarnation", type=int, default=1, help=argparse.SUPPRESS)
    # flips a bit of the engine's weights after it lands version V: the logits check must fail there
    ap.add_argument("--corrupt-engine-at", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--wait-timeout", type=float, default=120.0, help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.role != "launcher":
        return a
    if a.steps < 1:
        ap.error(f"--steps must be at least 1 (got {a.steps})")
    if not a.lr > 0:
        ap.error(f"--lr must be positive (got {a.lr})")
    if a.max_lag is not None and a.mode != "async":
        ap.error("--max-lag applies to --mode async only (sync mode lands every version)")
    a.max_lag = 1 if a.max_lag is None else a.max_lag
    if a.max_lag < 0:
        ap.error(f"--max-lag must be 0 or more (got {a.max_lag})")
    if a.kill_engine_at and not 1 <= a.kill_engine_at <= a.steps:
        ap.error(f"--kill-engine-at must be a version from 1 to --steps {a.steps} (got {a.kill_engine_at})")
    if a.gen_tokens < 0 or a.bucket_mib < 1 or (a.bcast_rounds is not None and a.bcast_rounds < 0):
        ap.error("--gen-tokens and --bcast-rounds must be 0 or more, --bucket-mib at least 1")
    if not a.timeout > 0:
        ap.error(f"--timeout must be positive (got {a.timeout})")
    a.shape = a.shape or ("tiny" if a.device == "cpu" else "0.6b")
    if a.device == "cuda":  # the one place that decides where the processes run on GPUs
        import torch
        if not torch.cuda.is_available():
            ap.error("--device cuda: torch sees no CUDA device (torch.cuda.is_available() is False)")
        a.trainer_device, a.engine_device = "cuda:0", ("cuda:1" if torch.cuda.device_count() >= 2 else "cuda:0")
    else:
        a.trainer_device = a.engine_device = "cpu"
    return a


class Child:
    """A trainer or engine process; its stdout lines go to the launcher's queue."""

    def __init__(self, name, a, q, extra):
        args = [sys.executable, "-m", "ferry.rl_loop", "--role", name, "--run-dir", a.run_dir, "--job", a.job,
                "--mode", a.mode, "--shape", a.shape, "--steps", str(a.steps), "--lr", repr(a.lr),
                "--deltas", a.deltas,
                "--max-lag", str(a.max_lag), "--gen-tokens", str(a.gen_tokens),
                "--kill-engine-at", str(a.kill_engine_at), "--corrupt-engine-at", str(a.corrupt_engine_at),
                "--bucket-mib", str(a.bucket_mib),
                "--bcast-rounds", str(a.bcast_rounds), "--trainer-device", a.trainer_device,
                "--engine-device", a.engine_device, "--wait-timeout", str(a.wait_timeout), *extra]
        self.name = name
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, text=True, env=a.env)
        a.children.append(self)
        threading.Thread(target=self._read, args=(q,), daemon=True).start()

    def _read(self, q):
        for line in self.proc.stdout:
            q.put((self, line.rstrip("\n")))
        q.put((self, None))


def fmt_bytes(n):
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024


def launch(a):
    """Runs the trainer and the engine, kills and restarts the engine where
    asked, collects their events; returns the report's lines and failures."""
    if a.bcast_rounds is None:
        a.bcast_rounds = max(3, a.steps)
    q = queue.Queue()
    deadline = time.monotonic() + a.timeout
    trainer = Child("trainer", a, q, [])
    engines, live = [], {trainer}
    published, landed, rollouts, notes, failures = {}, {}, [], [], []
    baseline, kill = None, dict(state="armed" if a.kill_engine_at else "off")

    def start_engine(incarnation):
        e = Child("engine", a, q, ["--incarnation", str(incarnation)])
        e.incarnation = incarnation
        engines.append(e)
        live.add(e)
        return e

    start_engine(1)  # beside the trainer: it waits for the service's address

    while live:
        if kill["state"] == "asked" and time.monotonic() > kill["by"]:
            failures.append(f"the engine did not confirm within 60 s that it was inside its update for version "
                            f"{a.kill_engine_at}")
            break
        left = min(deadline, kill.get("by", deadline)) - time.monotonic()
        try:
            child, line = q.get(timeout=max(0.01, left))
        except queue.Empty:
            if time.monotonic() < deadline:
                continue
            failures.append(f"timed out after {a.timeout:.0f} s (--timeout); still running: "
                            + ", ".join(c.name for c in live) + " (their stacks: on stderr)")
            for c in live:
                os.kill(c.proc.pid, signal.SIGUSR2)
            time.sleep(1.0)
            break
        if line is None:  # the child closed its stdout: it ended
            try:
                rc = child.proc.wait(timeout=max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                failures.append(f"the {child.name} closed its output but did not exit")
                break
            live.discard(child)
            if rc != 0 and not (child.name == "engine" and kill.get("pid") == child.proc.pid):
                failures.append(f"the {child.name} (pid {child.proc.pid}) exited with status {rc}")
                break
            continue
        if not line.startswith(EVENT):
            if a.verbose:
                print(f"[{child.name}] {line}", flush=True)
            continue
        ev = json.loads(line[len(EVENT):])
        kind = ev.pop("ev")
        if a.verbose:
            print(f"[{child.name}] {kind} {ev}", flush=True)
        if kind == "published":
            published[ev["version"]] = ev
        elif kind == "landed":
            ev["incarnation"] = child.incarnation
            landed[ev["version"]] = ev
            if not ev["equal"]:
                failures.append(f"version {ev['version']}: the engine's logits differ from the trainer's: "
                                f"{ev['n_diff']} of {ev['n']} elements, max |diff| {ev['max_diff']:.6g}")
            if ev["moved"]:
                failures.append(f"version {ev['version']}: engine parameters moved: {', '.join(ev['moved'][:3])}")
            if ev["version"] < ev["newest"] or ev["version"] <= ev["held"]:
                failures.append(f"version {ev['version']}: update('next') from {ev['held']} landed an older "
                                f"version than the newest published ({ev['newest']})")
        elif kind == "rollout":
            rollouts.append(ev)
            if ev["newest"] - ev["held"] > a.max_lag:
                failures.append(f"a rollout ran on version {ev['held']} with {ev['newest']} published "
                                f"(more than --max-lag {a.max_lag} behind)")
        elif kind == "update_start" and kill["state"] == "armed" and child.incarnation == 1 \
                and ev["held"] == a.kill_engine_at - 1:
            # the trainer holds version V until the kill, so the engine now
            # waits inside update('next') for it; it confirms, then dies
            time.sleep(0.2)
            kill.update(state="asked", pid=child.proc.pid, by=time.monotonic() + 60)
            os.kill(child.proc.pid, signal.SIGUSR1)
        elif kind == "inside_update" and kill["state"] == "asked":
            if not ev["inside"]:
                failures.append("the engine to be killed was not inside its update")
                break
            os.kill(child.proc.pid, signal.SIGKILL)
            rc = child.proc.wait(timeout=30)
            kill.update(state="done", by=deadline)
            notes.append(f"killed the engine (pid {child.proc.pid}, status {rc}) with SIGKILL inside its "
                         f"update for version {a.kill_engine_at}")
            write_json(os.path.join(a.run_dir, "killed"), {})
            e = start_engine(2)
            notes.append(f"restarted the engine (pid {e.proc.pid})")
        elif kind == "baseline":
            baseline = ev
    return published, landed, rollouts, notes, failures, baseline


def report(a, published, landed, rollouts, notes, failures, baseline):
    lines = [f"ferry RL loop: Qwen3 {a.shape} ({a.trainer_device} -> {a.engine_device}), {a.mode} mode, "
             f"{a.steps} steps, lr {a.lr:g}" + (f", max lag {a.max_lag}" if a.mode == "async" else "")
             + (", every version whole (--deltas off)" if a.deltas == "off" else "")]
    times = baseline["times"] if baseline else []
    lines.append(f"{'version':>7}  {'changed':>8}  {'ferry bytes':>11}  {'ferry s':>8}  {'encode s':>8}  "
                 f"{'engine s':>8}  {'bcast s':>8}  {'logits equal':<12}  note")
    rows = 0
    for v in range(1, a.steps + 1):
        p, l = published.get(v), landed.get(v)
        changed = f"{100 * p['changed']:.3f}%" if p else "-"
        if l is None:
            back = min((x["version"] for x in landed.values() if x["incarnation"] > 1), default=a.steps + 1)
            why = "engine killed, restarting" if a.kill_engine_at and a.kill_engine_at <= v < back \
                else "a newer one was taken"
            enc = f"{p['encode_seconds']:.4f}" if p else "-"
            lines.append(f"{v:>7}  {changed:>8}  {'-':>11}  {'-':>8}  {enc:>8}  {'-':>8}  {'-':>8}  {'-':<12}  "
                         f"not landed: {why}")
            continue
        bc = f"{times[rows]:.4f}" if rows < len(times) else "-"
        rows += 1
        how = f"delta ({l['delta_steps']} step{'s' if l['delta_steps'] > 1 else ''})" if l["delta_pairs"] \
            else "whole"
        if l["incarnation"] > 1 and not any(x["incarnation"] > 1 and x["version"] < v for x in landed.values()):
            how += ", the restarted engine's first"
        elif a.mode == "async":
            how += f", from {l['held']} (newest was {l['newest']})"
        enc = f"{p['encode_seconds']:.4f}" if p else "-"
        lines.append(f"{v:>7}  {changed:>8}  {fmt_bytes(l['bytes']):>11}  {l['seconds']:8.4f}  {enc:>8}  "
                     f"{l['reader_seconds']:8.4f}  {bc:>8}  {'yes' if l['equal'] else 'NO':<12}  {how}")
    lines += notes
    if landed:
        later = [l["seconds"] for v, l in landed.items() if l["delta_pairs"]]
        lines.append(f"ferry: {len(landed)} of {a.steps} versions landed; median update "
                     f"{statistics.median(l['seconds'] for l in landed.values()):.4f} s"
                     + (f", {statistics.median(later):.4f} s as deltas" if later else ""))
    if baseline:
        lines.append(f"broadcast baseline ({baseline['backend']}, {fmt_bytes(baseline['bytes'])} a round, buckets "
                     f"of {a.bucket_mib} MiB, after the loop): median {statistics.median(times):.4f} s of "
                     f"{len(times)} rounds; the engine's parameters after it "
                     f"{'are the bytes ferry landed' if baseline['same'] else 'DIFFER from what ferry landed'}")
        if not baseline["same"]:
            failures.append("the broadcast baseline changed the engine's parameters: ferry's last version "
                            "was not the trainer's weights")
    elif a.bcast_rounds:
        failures.append("no broadcast baseline result")
    if a.mode == "async" and rollouts:
        lags = [r["newest"] - r["held"] for r in rollouts]
        lines.append(f"async: {len(rollouts)} rollouts ran on weights 0 to {max(lags)} versions behind the "
                     f"newest (at most --max-lag {a.max_lag})")
    rejoined = sorted(v for v, l in landed.items() if l["incarnation"] > 1)
    if rejoined:
        lines.append(f"the restarted engine joined late and caught up to version {rejoined[0]} (the newest), "
                     f"logits {'equal' if landed[rejoined[0]]['equal'] else 'DIFFERENT'}"
                     + (f"; then {len(rejoined) - 1} more" if len(rejoined) > 1 else ""))
    if a.steps not in landed and not failures:
        failures.append(f"the engine did not land the last version ({a.steps})")
    if a.kill_engine_at and not any(l["incarnation"] == 2 for l in landed.values()) and not failures:
        failures.append("the restarted engine landed nothing")
    if a.kill_engine_at and not any("killed the engine" in n for n in notes) and not failures:
        failures.append(f"the engine was not killed at version {a.kill_engine_at}")
    if not failures:
        lines.append(f"OK: logits bit-identical at every version the engine landed; its parameters never moved")
    return lines


def main(argv=None, prog=None):
    a = parse_args(argv, prog)
    if a.role != "launcher":  # on a timeout the launcher asks for every thread's stack
        faulthandler.register(signal.SIGUSR2, all_threads=True)
    if a.role == "trainer":
        return trainer_main(a)
    if a.role == "engine":
        return engine_main(a)
    a.run_dir = tempfile.mkdtemp(prefix="ferry-rl-loop-")
    a.job = f"rl-loop-{os.getpid()}"
    a.wait_timeout = a.timeout
    a.env = dict(os.environ)
    # the children import this very package, wherever it came from
    import ferry
    home = os.path.dirname(os.path.dirname(os.path.abspath(ferry.__file__)))
    a.env["PYTHONPATH"] = os.pathsep.join(p for p in (home, a.env.get("PYTHONPATH")) if p)
    if not any(k in a.env for k in ("FERRY_TOKEN", "FERRY_TOKEN_FILE", "FERRY_TOKEN_DIR")):
        a.env["FERRY_TOKEN_DIR"] = os.path.join(a.run_dir, "tokens")  # this run's service token, removed with it
    a.children = []
    try:
        published, landed, rollouts, notes, failures, baseline = launch(a)
        lines = report(a, published, landed, rollouts, notes, failures, baseline)
    finally:
        for c in a.children:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
        shutil.rmtree(a.run_dir, ignore_errors=True)
    print("\n".join(lines), flush=True)
    for f in failures:
        print(f"FAILED: {f}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
