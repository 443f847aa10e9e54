"""The NCCL baseline of `scripts/gpu-bench.sh`: a trainer process on GPU 0
broadcasts a model's bf16 weights to an engine process on GPU 1 the way
verl and slime refit engines with NCCL: parameters packed into buckets on
the trainer, each bucket broadcast, and the engine copying each bucket's
slices into its own parameters. Beside it, in the same run, a peer copy of
the same bytes (GPU 0 -> GPU 1, one tensor). Prints median (min - max)
seconds of 5 timed rounds after 2 warm-ups, and GB/s (model bytes / s).

    python bench/nccl_bcast.py [--model qwen3-8b] [--bucket-mib 1024]

The model's tensor shapes come from ferry's model specs (PYTHONPATH must
reach the ferry package, as gpu-test.sh sets it)."""
import argparse
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def shapes(model):
    import ferry
    return [(t.name, tuple(t.shape)) for t in ferry.Model.from_config(model).tensors]


def buckets(params, limit):
    """Groups params (in order) into buckets of at most `limit` bytes (one
    larger param makes a bucket of its own)."""
    out, cur, size = [], [], 0
    for p in params:
        n = p.numel() * p.element_size()
        if cur and size + n > limit:
            out.append(cur)
            cur, size = [], 0
        cur.append(p)
        size += n
    if cur:
        out.append(cur)
    return out


def worker(rank, args, port, q):
    torch.cuda.set_device(rank)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("nccl", rank=rank, world_size=2, device_id=torch.device("cuda", rank))
    g = torch.Generator(device="cuda").manual_seed(1)
    params = [torch.empty(s, dtype=torch.bfloat16, device="cuda") for _, s in shapes(args.model)]
    if rank == 0:
        for p in params:
            p.uniform_(-1, 1, generator=g)
    total = sum(p.numel() * p.element_size() for p in params)
    groups = buckets(params, args.bucket_mib << 20)
    biggest = max(sum(p.numel() for p in b) for b in groups)
    flat = torch.empty(biggest, dtype=torch.bfloat16, device="cuda")
    times = []
    for it in range(7):
        torch.cuda.synchronize()
        dist.barrier()
        t0 = time.perf_counter()
        for b in groups:
            n = sum(p.numel() for p in b)
            buf = flat[:n]
            if rank == 0:
                torch.cat([p.reshape(-1) for p in b], out=buf)
            dist.broadcast(buf, src=0)
            if rank == 1:
                at = 0
                for p in b:
                    p.view(-1).copy_(buf[at:at + p.numel()])
                    at += p.numel()
        torch.cuda.synchronize()
        dist.barrier()
        if it >= 2:
            times.append(time.perf_counter() - t0)
    if rank == 1:
        q.put((total, times))
    dist.destroy_process_group()


def peer_copy(total):
    src = torch.empty(total // 2, dtype=torch.bfloat16, device="cuda:0")
    dst = torch.empty_like(src, device="cuda:1")
    times = []
    for it in range(7):
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        t0 = time.perf_counter()
        dst.copy_(src, non_blocking=True)
        torch.cuda.synchronize(1)
        torch.cuda.synchronize(0)
        if it >= 2:
            times.append(time.perf_counter() - t0)
    return times


def line(what, total, times):
    med = statistics.median(times)
    print(f"  {what:<38} {med:9.4f} s ({min(times):.4f} - {max(times):.4f}) {total / med / 1e9:8.1f} GB/s")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--bucket-mib", type=int, default=1024)
    args = ap.parse_args()
    if torch.cuda.device_count() < 2:
        print("nccl_bcast: skipped: needs two GPUs")
        return 0
    q = mp.get_context("spawn").SimpleQueue()
    port = 29500 + os.getpid() % 1000
    mp.spawn(worker, args=(args, port, q), nprocs=2, join=True)
    total, times = q.get()
    print(f"nccl_bcast: {args.model}, {total / 2**30:.2f} GiB bf16, buckets of {args.bucket_mib} MiB, "
          f"GPU 0 -> GPU 1, median (min - max) of {len(times)} rounds")
    line("NCCL broadcast + copies into params", total, times)
    line("peer copy of the same bytes", total, peer_copy(total))
    return 0


if __name__ == "__main__":
    sys.exit(main())
