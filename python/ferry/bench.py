"""Benchmarks of the Python package (docs/benchmarks.md).

    python -m ferry.bench sync [--model M] [--train SPEC] [--infer SPEC]
                               [--steps N] [--rounds R] [--cli PATH]

sync: the README's demo topology (default qwen3-0.6b, trainer tp=2,pp=2 ->
engine tp=2,replicas=2, sync mode over shm) with every member a Python
process holding torch tensors registered by ferry.register (Megatron names
with stage-local layer numbers on the trainer side, vLLM names on the
engine side). An update is timed from the first writer's publish to the
last reader holding the version verified, as `ferry bench sync` times the C
path; the first update (connect and plan) is not counted. Each round runs
the Python job and then the C bench (`ferry bench sync --no-baselines`) on
the same machine, so the overhead of the Python path is a ratio of medians
measured side by side. Also reported: the time ferry.register takes for a
whole model's named parameters (Layout.hf, one rank).
"""
import argparse
import multiprocessing as mp
import os
import re
import shutil
import socket
import statistics
import subprocess
import sys
import time

_LAYER = re.compile(r"^decoder\.layers\.(\d+)\.")


def _free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _tensors(layout, rank, torch, local_layers):
    """Contiguous tensors for a rank's buffers, named as the framework
    would: Megatron stages number their layers from 0."""
    dt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    out = {}
    layers = sorted({int(m.group(1)) for b in layout.buffers(rank) if (m := _LAYER.match(b.name))})
    for b in layout.buffers(rank):
        name = b.name
        m = _LAYER.match(name)
        if local_layers and m:
            name = f"decoder.layers.{layers.index(int(m.group(1)))}." + name[m.end():]
        out[name] = torch.empty(b.shape, dtype=dt[b.dtype]).normal_()
    return out


def _member(side, rank, world, a, meta, barrier, results):
    import torch

    import ferry
    torch.manual_seed(rank)
    model = ferry.Model.from_config(a.model)
    spec = a.train if side == "train" else a.infer
    layout = ferry.Layout.build(model, side, spec, rank)
    tensors = _tensors(layout, rank, torch, side == "train")
    cls = ferry.Writer if side == "train" else ferry.Reader
    extra = {"serve": rank == 0} if side == "train" else {}
    m = cls(model, job="py-bench", rank=rank, world=world, meta=meta, timeout=120, **extra)
    m.register(tensors, layout, rank, adopt=side == "train" and a.memory == "ferry")
    m.commit()
    times = []
    first = next(iter(tensors.values())).view(-1)
    for v in range(1, a.steps + 1):
        if side == "train":
            first[: 1 << 16].add_(1)  # a new version, computed before the clock starts
        barrier.wait()
        t0 = time.monotonic()
        if side == "train":
            m.publish(v)
        else:
            m.update(v, timeout=120)
        times.append((t0, time.monotonic()))
    barrier.wait()
    del tensors  # adopted tensors are views of the writer's memory
    m.close()
    results.put((side, rank, times))


def _python_round(a, ctx):
    import ferry
    model = ferry.Model.from_config(a.model)
    nw = ferry.Layout.train(model, a.train).world_size
    nr = ferry.Layout.infer(model, a.infer).world_size
    meta = f"127.0.0.1:{_free_port()}"
    barrier = ctx.Barrier(nw + nr)
    results = ctx.Queue()
    procs = [ctx.Process(target=_member, args=("train", r, nw, a, meta, barrier, results)) for r in range(nw)]
    procs[0].start()
    time.sleep(0.5)  # rank 0 serves the job: the others connect to it
    for p in procs[1:]:
        p.start()
    readers = [ctx.Process(target=_member, args=("infer", r, nr, a, meta, barrier, results)) for r in range(nr)]
    for p in readers:
        p.start()
    got = [results.get(timeout=600) for _ in range(nw + nr)]
    for p in procs + readers:
        p.join(timeout=60)
        if p.exitcode != 0:
            raise RuntimeError(f"a bench process exited with {p.exitcode}")
    per_update = []
    for v in range(1, a.steps):  # the first update connects and plans
        start = min(t[v][0] for side, _, t in got if side == "train")
        end = max(t[v][1] for side, _, t in got if side == "infer")
        per_update.append(end - start)
    return statistics.median(per_update), per_update


def _c_round(a, cli):
    cmd = [cli, "bench", "sync", "--model", a.model, "--train", a.train, "--infer", a.infer, "--steps",
           str(a.steps), "--transports", "shm", "--no-baselines"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{out.stdout}\n{out.stderr}")
    m = re.search(r"^\s*ferry \(shm\)\s+([0-9.]+)", out.stdout, re.M)
    landing = re.search(r"([0-9.]+) GiB landing in engine buffers", out.stdout)
    if not m:
        raise RuntimeError(f"unexpected output of {' '.join(cmd)}:\n{out.stdout}")
    return float(m.group(1)), float(landing.group(1)) if landing else None


def _register_time(a, adopt, reps=5):
    """ferry.register of a whole model's parameters (HF names, one rank),
    Layout.hf included, as an engine registering its module would; with
    adopt, the parameters are also copied into ferry's shared memory."""
    import torch

    import ferry
    model = ferry.Model.from_config(a.model)
    dt = {"BF16": torch.bfloat16, "F16": torch.float16, "F32": torch.float32}
    out = []
    for i in range(reps):
        params = {t.name: torch.zeros(t.shape, dtype=dt[t.dtype]) for t in model.tensors}
        w = ferry.Writer(model, job=f"py-bench-reg-{os.getpid()}-{i}", rank=0, world=1, meta="127.0.0.1:0")
        t0 = time.perf_counter()
        layout = ferry.Layout.hf(model)
        w.register(params, layout, 0, adopt=adopt)
        out.append(time.perf_counter() - t0)
        del params
        w.close()
    return out


def _find_cli(given):
    for c in (given, os.environ.get("FERRY_CLI"), shutil.which("ferry"),
              os.path.join(os.path.dirname(__file__), "..", "..", "build", "ferry")):
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    return None


def sync(argv):
    p = argparse.ArgumentParser(prog="python -m ferry.bench sync", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="qwen3-0.6b")
    p.add_argument("--train", default="tp=2,pp=2")
    p.add_argument("--infer", default="tp=2,replicas=2")
    p.add_argument("--steps", type=int, default=6, help="updates per round, the first not counted (>= 2)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--memory", choices=("ferry", "torch"), default="ferry",
                   help="trainer tensors adopted into ferry's shared memory (as the C demo's buffers) or left "
                        "where torch put them (readers then copy through process_vm_readv)")
    p.add_argument("--cli", help="the ferry CLI for the C path (default: $FERRY_CLI, PATH, build/ferry)")
    a = p.parse_args(argv)
    if a.steps < 2 or a.rounds < 1:
        p.error("--steps >= 2 and --rounds >= 1")
    cli = _find_cli(a.cli)
    ctx = mp.get_context("spawn")
    print(f"ferry {__import__('ferry').__version__} python sync bench: {a.model}, train {a.train} -> infer "
          f"{a.infer}, shm, trainer memory: {a.memory}, {a.steps - 1} timed updates x {a.rounds} rounds; C path: "
          f"{cli or 'not found (skipped)'}")
    py, c = [], []
    gib = None
    for r in range(a.rounds):
        med, all_ = _python_round(a, ctx)
        py.append(med)
        line = f"round {r + 1}: python {med:.4f} s/update (min {min(all_):.4f}, max {max(all_):.4f})"
        if cli:
            cm, gib = _c_round(a, cli)
            c.append(cm)
            line += f"; C {cm:.4f} s/update; python/C {med / cm:.3f}"
        print(line, flush=True)
    print(f"python: median {statistics.median(py):.4f} s (range {min(py):.4f}-{max(py):.4f}) per update")
    if c:
        ratios = [x / y for x, y in zip(py, c)]
        gb = f", {gib:.2f} GiB landing per update" if gib else ""
        print(f"C:      median {statistics.median(c):.4f} s (range {min(c):.4f}-{max(c):.4f}) per update{gb}")
        print(f"python / C per round: median {statistics.median(ratios):.3f} (range {min(ratios):.3f}-"
              f"{max(ratios):.3f}); goal <= 1.05")
    for adopt in (False, True):
        regs = _register_time(a, adopt)
        what = "+ adopt (copy into shared memory)" if adopt else "in place"
        print(f"register {a.model} named parameters (Layout.hf + register, 1 rank, {what}): median "
              f"{statistics.median(regs) * 1e3:.1f} ms (range {min(regs) * 1e3:.1f}-{max(regs) * 1e3:.1f})"
              f"{'; goal < 50 ms' if not adopt else ''}")
    return 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    if argv[0] == "sync":
        return sync(argv[1:])
    print(f"ferry.bench: unknown benchmark {argv[0]!r} (sync)", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
