"""CUDA tensors through the Python package: members with device=.

The GPU tests (marked `needs_gpu`, skipped where torch.cuda.is_available()
is False) run the RL loop of test_rl.py with every tensor in GPU memory
(trainers on cuda:0, engines on cuda:1 when there are two GPUs, else all on
cuda:0): bit-identical weights and logits, tensors that never move, and a
CUDA graph captured on the engine's parameters before the first update that
replays the new weights after it; mixed jobs (host and GPU members), async
mode, adopt=True into GPU memory, and the refusals.

The rest runs anywhere: parsing device=, the error a build or machine
without CUDA gives, and the refusals of tensors on another device, checked
with DLPack producers (ctypes) that say they are on a GPU.
"""
import ctypes
import gc
import os
import time

import numpy as np
import pytest
import torch
import torch.distributed as dist

import ferry
import rl_models as rl
from ports import free_port

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
TRAIN_DEV = "cuda:0"
ENGINE_DEV = "cuda:1" if GPUS >= 2 else "cuda:0"
needs_gpu = pytest.mark.skipif(GPUS == 0, reason="no CUDA device (torch.cuda.is_available() is False)")

VERSIONS = 3
TRAINERS, ENGINE_TP = 2, 2


def _meta():
    return f"127.0.0.1:{free_port()}"


def _spec(cfg):
    return ferry.Model.from_config(rl.config_dict(cfg))


def _ids(cfg):
    g = torch.Generator().manual_seed(7)
    return torch.randint(0, cfg.vocab_size, (2, 12), generator=g)


def _cpu_state(module):
    return {n: p.detach().cpu().clone() for n, p in module.named_parameters()}


def _same_state(got, want, what):
    assert got.keys() == want.keys(), what
    for n, t in want.items():
        assert got[n].dtype == t.dtype and torch.equal(got[n], t), f"{what}: {n} differs"


def _tiny_spec():
    m = ferry.Model.custom("tiny")
    m.add_tensor("a", "BF16", [4, 8])
    m.add_tensor("b", "F32", [16])
    return m


# --- DLPack producers that say they are elsewhere (no GPU needed) ---------------------

class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


class _DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", _DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_DLTENSOR = b"dltensor"  # the capsule keeps this pointer: module lifetime


class FakeDL:
    """A 1-D uint8 tensor of n bytes of host memory that its DLPack
    descriptor places on device (type, id): 2 CUDA, 3 pinned host, 10 ROCm,
    13 CUDA managed. The memory is never touched as a GPU's (ferry refuses
    the tensor first)."""

    def __init__(self, device_type, device_id=0, n=64):
        self.device_type, self.device_id = device_type, device_id
        self.backing = (ctypes.c_uint8 * n)()
        self.shape = (ctypes.c_int64 * 1)(n)
        self.mt = _DLManagedTensor()
        self.mt.dl_tensor = _DLTensor(ctypes.addressof(self.backing), _DLDevice(device_type, device_id), 1,
                                      _DLDataType(1, 8, 1), self.shape, None, 0)
        self.streams = []

    def __dlpack_device__(self):
        return (self.device_type, self.device_id)

    def __dlpack__(self, *, stream=None, **kw):
        self.streams.append(stream)
        return _capsule_new(ctypes.addressof(self.mt), _DLTENSOR, None)  # no deleter: we own the memory


def _writer(job, **kw):
    return ferry.Writer(_tiny_spec(), job=job, rank=0, world=1, meta="127.0.0.1:0", timeout=10, **kw)


# --- device= and the refusals, anywhere ----------------------------------------------

def test_device_keyword_host_spellings(job):
    for dev in (None, "cpu", torch.device("cpu")):
        with _writer(job, device=dev) as w:
            assert w.device == "cpu"
        r_w = _writer(job)
        r = ferry.Reader(_tiny_spec(), job=job, rank=0, world=1, meta=r_w.service_address, device=dev)
        assert r.device == "cpu"
        r.close()
        r_w.close()


def test_device_keyword_refuses_what_is_no_device(job):
    class Dev:  # a torch.device-like object of another type
        type, index = "mps", None

    for dev in ("tpu", "cuda:x", "cuda:", "cuda:-1", -1, True, 1.0, torch.device("meta"), Dev(), [0]):
        with pytest.raises(ValueError) as e:
            _writer(job, device=dev)
        assert isinstance(e.value, ferry.InvalidArgumentError)
        assert "device=" in str(e.value) and "'cuda:N'" in str(e.value), str(e.value)


@pytest.mark.skipif(GPUS > 0, reason="CUDA is usable here: a CUDA member is made, not refused")
def test_cuda_member_without_cuda_is_refused(job):
    class Dev:  # torch.device("cuda") as ferry reads it: .type and .index
        type, index = "cuda", None

    for dev, n in (("cuda", 0), ("cuda:2", 2), (1, 1), (torch.device("cuda", 1), 1), (Dev(), 0)):
        with pytest.raises(ferry.UnsupportedError) as e:
            _writer(job, device=dev)
        assert f"CUDA device {n}" in str(e.value), str(e.value)
    with pytest.raises(ferry.UnsupportedError, match="CUDA device 0"):
        ferry.Reader(_tiny_spec(), job=job, rank=0, world=1, meta="127.0.0.1:1", device="cuda:0")


def test_tensor_on_a_gpu_refused_by_a_host_member(job):
    w = _writer(job)
    cuda = FakeDL(2, 1, n=64)
    with pytest.raises(ferry.MismatchError) as e:
        w.add_buffer("a", cuda)
    msg = str(e.value)
    assert "buffer 'a'" in msg and "cuda:1" in msg and "Writer's buffers are on cpu" in msg, msg
    assert cuda.streams == [-1]  # exported without a stream handshake
    # add_layout checks every tensor before it registers any
    lay = ferry.Layout.hf(w.model)
    host = [torch.zeros(4, 8, dtype=torch.bfloat16), torch.zeros(16)]
    with pytest.raises(ferry.MismatchError, match=r"buffer 'b' \(rank 0\).*cuda:0"):
        w.add_layout(lay, 0, [host[0], FakeDL(2, 0)])
    assert all(a is b for a, b in zip(w.add_layout(lay, 0, host), host))
    w.close()


def test_register_names_the_parameter_on_another_device(job):
    w = _writer(job)
    lay = ferry.Layout.hf(w.model)
    params = {"a": torch.zeros(4, 8, dtype=torch.bfloat16), "b": FakeDL(2, 0)}
    with pytest.raises(ferry.MismatchError) as e:
        w.register(params, lay, 0)
    assert "parameter 'b'" in str(e.value) and "cuda:0" in str(e.value) and "cpu" in str(e.value), str(e.value)
    w.register({"a": params["a"], "b": torch.zeros(16)}, lay, 0)  # nothing was registered before
    w.close()


def test_pinned_host_memory_is_host_memory(job):
    w = _writer(job)
    assert w.add_buffer("b", FakeDL(3, 0, n=64), dtype="U8") == 0
    w.close()


def test_managed_and_other_devices_are_refused(job):
    w = _writer(job)
    with pytest.raises(ferry.UnsupportedError, match="managed"):
        w.add_buffer("b", FakeDL(13, 0))
    with pytest.raises(ferry.UnsupportedError, match="ROCm"):
        w.add_buffer("b", FakeDL(10, 0))
    w.close()


def test_host_only_calls_refuse_gpu_tensors(tmp_path):
    with pytest.raises(ferry.UnsupportedError, match="cuda:0.*host memory only"):
        ferry.delta.encode(FakeDL(2, 0), FakeDL(2, 0))
    host = torch.zeros(32, dtype=torch.bfloat16)
    with pytest.raises(ferry.UnsupportedError, match="cuda:0.*host memory only"):
        ferry.delta.apply(ferry.delta.encode(host, host), FakeDL(2, 0))
    with ferry.Channel(str(tmp_path), "w") as ch:
        with pytest.raises(ferry.UnsupportedError, match=r"\['x'\].*cuda:0.*host memory only"):
            ch.publish(1, {"x": FakeDL(2, 0)})


def test_host_buffer_through_dlpack(job):
    w = _writer(job)
    _, hb = w.alloc_buffer("a", "BF16", 64)
    assert type(hb) is ferry.HostBuffer and hb.device == "cpu" and hb.__dlpack_device__() == (1, 0)
    t = torch.from_dlpack(hb)
    assert t.dtype == torch.uint8 and t.shape == (64,) and t.device.type == "cpu"
    t.view(torch.bfloat16).fill_(1.5)
    assert np.frombuffer(hb, dtype=np.uint8).ctypes.data == t.data_ptr()  # one memory
    assert bytes(memoryview(hb)[:2]) == torch.tensor([1.5], dtype=torch.bfloat16).view(torch.uint8).numpy().tobytes()
    with pytest.raises(BufferError):
        hb.__dlpack__(copy=True)
    with pytest.raises(BufferError):
        hb.__dlpack__(dl_device=(2, 0))
    del hb
    w.close()  # the tensor holds the memory past close()
    assert float(t.view(torch.bfloat16)[31]) == 1.5
    del t
    gc.collect()


# --- GPU: one process -----------------------------------------------------------------

@needs_gpu
def test_device_buffer(job):
    w = _writer(job, device=TRAIN_DEV)
    assert w.device == TRAIN_DEV
    _, buf = w.alloc_buffer("a", "BF16", 64)
    assert type(buf) is ferry.DeviceBuffer and buf.device == TRAIN_DEV and len(buf) == 64
    assert buf.__dlpack_device__() == (2, 0)
    t = torch.from_dlpack(buf)
    assert t.device == torch.device(TRAIN_DEV) and t.dtype == torch.uint8 and t.shape == (64,)
    assert int(t.sum()) == 0  # zeroed
    torch.from_dlpack(buf).view(torch.bfloat16).fill_(2.0)  # another view of the same memory
    assert torch.equal(t.view(torch.bfloat16).cpu(), torch.full((32,), 2.0, dtype=torch.bfloat16))
    with pytest.raises(TypeError):
        memoryview(buf)  # GPU memory has no buffer protocol
    del buf
    w.close()
    assert float(t.view(torch.bfloat16)[31]) == 2.0  # still valid past close()
    del t
    gc.collect()


@needs_gpu
def test_device_mismatch_errors(job):
    w = _writer(job, device=TRAIN_DEV)
    with pytest.raises(ferry.MismatchError) as e:
        w.add_buffer("b", torch.zeros(16))
    assert "buffer 'b'" in str(e.value) and "cpu" in str(e.value) and TRAIN_DEV in str(e.value)
    with pytest.raises(ferry.MismatchError, match="is on cpu"):
        w.add_buffer("b", torch.zeros(16).pin_memory())  # pinned: host memory
    lay = ferry.Layout.hf(w.model)
    host = torch.nn.ParameterDict({"a": torch.zeros(4, 8, dtype=torch.bfloat16), "b": torch.zeros(16)})
    with pytest.raises(ferry.MismatchError, match=f"parameter 'a'.*is on cpu.*{TRAIN_DEV}"):
        w.register(host, lay, 0)
    w.register(host.to(TRAIN_DEV), lay, 0)  # nothing was registered by the refused call
    if GPUS >= 2:
        w1 = ferry.Writer(_tiny_spec(), job=job + "-1", rank=0, world=1, meta="127.0.0.1:0", device="cuda:1")
        with pytest.raises(ferry.MismatchError) as e:
            w1.add_buffer("b", torch.zeros(16, device="cuda:0"))
        assert "cuda:0" in str(e.value) and "cuda:1" in str(e.value), str(e.value)
        w1.close()
    r = ferry.Reader(_tiny_spec(), job=job, rank=0, world=1, meta=w.service_address, device="cpu")
    with pytest.raises(ferry.MismatchError, match=f"is on {TRAIN_DEV}.*Reader's buffers are on cpu"):
        r.add_buffer("b", torch.zeros(16, device=TRAIN_DEV))
    r.close()
    with pytest.raises(ferry.UnsupportedError, match="host memory only"):
        ferry.delta.encode(torch.zeros(16, device=TRAIN_DEV), torch.zeros(16, device=TRAIN_DEV))
    w.close()


@needs_gpu
def test_moved_cuda_storage_is_refused(job):
    w = _writer(job, device=TRAIN_DEV)
    params = {"a": torch.nn.Parameter(torch.zeros(4, 8, dtype=torch.bfloat16, device=TRAIN_DEV)),
              "b": torch.nn.Parameter(torch.zeros(16, device=TRAIN_DEV))}
    w.register(params, ferry.Layout.hf(w.model), 0)
    params["b"].data = torch.ones(16, device=TRAIN_DEV)  # storage swapped, not updated in place
    with pytest.raises(ferry.MismatchError, match="buffer 'b': its tensor's storage moved"):
        w.publish(1)
    w.close()


# --- GPU: the RL loop across processes -------------------------------------------------

RL_JOB = "rl-cuda"


def _graph_weights(model):
    return {"lm_head.weight": model.lm_head.weight,
            "model.layers.1.self_attn.q_proj.weight": model.model.layers[1].self_attn.q_proj.weight}


def _capture(weights, dev):
    """A CUDA graph of x @ W.T and W.float() for each weight: it reads the
    weights' memory at replay, wherever their values came from."""
    hidden = next(iter(weights.values())).shape[1]
    x = torch.randn(8, hidden, generator=torch.Generator().manual_seed(3)).to(torch.bfloat16).to(dev)

    def run():
        return {n: (x @ w.t(), w.float()) for n, w in weights.items()}

    with torch.no_grad():
        side = torch.cuda.Stream(dev)
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            run()  # warm-up (cuBLAS handles, workspaces) off the capture
        torch.cuda.current_stream(dev).wait_stream(side)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # ferry's threads may call CUDA
            outs = run()
    return graph, x, outs


def _gpu_trainer(rank, cfg, meta, dev):
    torch.cuda.set_device(dev)
    group = dist.new_group(list(range(TRAINERS)))
    # AdamW steps on a CPU copy (gloo gathers), landing in place in the GPU
    # parameters ferry registered, as a GPU optimizer's step would
    inner = rl.MegatronShard(rl.random_hf_state(cfg, seed=0), cfg, TRAINERS, rank)
    gpu = rl.NamedParams({n: t.to(dev) for n, t in inner.tensors().items()})
    module = rl.DDPWrapped(gpu)
    spec = _spec(cfg)
    w = ferry.Writer(spec, job=RL_JOB, rank=rank, world=TRAINERS, meta=meta, timeout=120, device=dev)
    assert w.device == dev
    w.register(module, ferry.Layout.train(spec, f"tp={TRAINERS}"), rank)
    w.commit()
    ptrs = [p.data_ptr() for p in gpu.parameters()]
    out = []
    for v in range(1, VERSIONS + 1):
        step = rl.train_step(inner, v, group, lr=1e-5, fp32_master=True)
        src = dict(inner.named_parameters())
        with torch.no_grad():
            for n, p in gpu.named_parameters():
                p.copy_(src[n])
        full = rl.gather_hf(inner, group)  # the reference: the trainers' model on one rank
        info = w.publish(v)
        out.append(dict(changed=step["changed"], acked=info.readers_acked, device_bytes=info.device_bytes,
                        full=full if rank == 0 else None))
    assert [p.data_ptr() for p in gpu.parameters()] == ptrs, "the trainer's parameters moved"
    w.close()
    return out


def _gpu_hf_engine(cfg, meta, dev):
    torch.cuda.set_device(dev)
    model = rl.hf_model(cfg).to(dev)  # its own random init
    ptrs = [p.data_ptr() for p in model.parameters()]
    spec = _spec(cfg)
    r = ferry.Reader(spec, job=RL_JOB, rank=0, world=1 + ENGINE_TP, meta=meta, timeout=120, device=dev)
    r.register(model, ferry.Layout.hf(spec), 0)
    r.commit()
    weights = _graph_weights(model)
    graph, x, outs = _capture(weights, dev)  # before any update
    graph.replay()
    torch.cuda.synchronize(dev)
    before = {n: mm.cpu().clone() for n, (mm, _) in outs.items()}
    res = []
    for v in range(1, VERSIONS + 1):
        info = r.update(v, timeout=120)
        graph.replay()  # captured on the old values: reads the same memory, now the new ones
        torch.cuda.synchronize(dev)
        with torch.no_grad():
            eager = {n: (x @ w.t()).cpu() for n, w in weights.items()}
            logits = model(input_ids=_ids(cfg).to(dev)).logits.cpu()
        res.append(dict(version=info.version, device_bytes=info.device_bytes, state=_cpu_state(model),
                        logits=logits, eager=eager,
                        graph={n: (mm.cpu().clone(), wf.cpu().clone()) for n, (mm, wf) in outs.items()}))
    assert [p.data_ptr() for p in model.parameters()] == ptrs, "the engine's parameters moved"
    r.close()
    return dict(before=before, x=x.cpu(), versions=res)


def _gpu_vllm_engine(tp_rank, cfg, meta, dev):
    torch.cuda.set_device(dev)
    shard = rl.VllmShard(rl.init_hf_state(cfg, seed=1), cfg, ENGINE_TP, tp_rank).to(dev)
    ptrs = [p.data_ptr() for p in shard.parameters()]
    spec = _spec(cfg)
    r = ferry.Reader(spec, job=RL_JOB, rank=1 + tp_rank, world=1 + ENGINE_TP, meta=meta, timeout=120, device=dev)
    r.register(shard, ferry.Layout.infer(spec, f"tp={ENGINE_TP}"), tp_rank)
    r.commit()
    out = []
    for v in range(1, VERSIONS + 1):
        info = r.update(v, timeout=120)
        out.append(dict(version=info.version, tensors={n: t.cpu().clone() for n, t in shard.tensors().items()}))
    assert [p.data_ptr() for p in shard.parameters()] == ptrs, "the engine's parameters moved"
    r.close()
    return out


def _gpu_rank(rank, world, meta, train_dev, engine_dev):
    cfg = rl.tiny_config()
    dist.new_group(list(range(TRAINERS)))  # every rank takes part in creating a group
    if rank < TRAINERS:
        return _gpu_trainer(rank, cfg, meta, train_dev)
    if rank == TRAINERS:
        return _gpu_hf_engine(cfg, meta, engine_dev)
    return _gpu_vllm_engine(rank - TRAINERS - 1, cfg, meta, engine_dev)


@needs_gpu
def test_megatron_trainers_to_hf_and_vllm_engines_on_gpus(tmp_path):
    res = rl.spawn_ranks(_gpu_rank, TRAINERS + 1 + ENGINE_TP, tmp_path, _meta(), TRAIN_DEV, ENGINE_DEV,
                         timeout=600)
    trainer, hf, vllm = res[0], res[TRAINERS], res[TRAINERS + 1:]
    cfg = rl.tiny_config()
    ids = _ids(cfg)
    for v in range(VERSIONS):
        t, e = trainer[v], hf["versions"][v]
        assert 0 < t["changed"] < 1 and t["acked"] == 1 + ENGINE_TP
        assert e["version"] == v + 1
        _same_state(e["state"], t["full"], f"version {v + 1}: HF engine")
        # the engine's forward on its GPU gives what the trainers' weights give there
        with torch.no_grad():
            ref = rl.load_hf(rl.hf_model(cfg), t["full"]).to(ENGINE_DEV)
            ref_logits = ref(input_ids=ids.to(ENGINE_DEV)).logits.cpu()
        assert torch.equal(e["logits"], ref_logits), f"version {v + 1}: HF engine logits differ"
        # the graph captured before the first update computes with the new weights
        for n, (mm, wf) in e["graph"].items():
            assert torch.equal(wf, t["full"][n].float()), f"version {v + 1}: the CUDA graph read stale {n}"
            torch.testing.assert_close(mm, e["eager"][n])
            assert (mm.float() - hf["before"][n].float()).abs().max() > 0.1, "the graph's result did not change"
        unfused = rl.vllm_to_hf([vllm[r][v]["tensors"] for r in range(ENGINE_TP)], cfg, ENGINE_TP)
        _same_state(unfused, t["full"], f"version {v + 1}: vLLM engines")
        assert all(vllm[r][v]["version"] == v + 1 for r in range(ENGINE_TP))
    assert not torch.equal(trainer[0]["full"]["lm_head.weight"], trainer[-1]["full"]["lm_head.weight"])


# --- GPU: mixed jobs, async, adopt ----------------------------------------------------

def _wait_file(path, timeout=300.0):
    """Waits for another rank to create path (a hang guard, not a pace)."""
    end = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > end:
            raise TimeoutError(f"{path} did not appear within {timeout} s")
        time.sleep(0.01)


def _pair_rank(rank, world, meta, tmp, case):
    """Rank 0 a trainer with an HF model on case['wdev'], rank 1 an engine
    on case['rdev']; case['kind']: 'sync' (two versions), 'refused' (the
    reader's first update fails), 'async' (publish snapshots; the trainer
    overwrites its tensors at once), 'adopt' (adopt=True, AdamW steps)."""
    cfg = rl.tiny_config()
    spec = _spec(cfg)
    kind, job = case["kind"], case["job"]
    dev = case["wdev"] if rank == 0 else case["rdev"]
    if dev != "cpu":
        torch.cuda.set_device(dev)
    if rank == 0:
        model = rl.load_hf(rl.hf_model(cfg), rl.random_hf_state(cfg, seed=5)).to(dev)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3) if kind == "adopt" else None
        first = {n: p.data_ptr() for n, p in model.named_parameters()}
        before = _cpu_state(model)
        args = dict(mode="async", slots=2) if kind == "async" else {}
        w = ferry.Writer(spec, job=job, rank=0, world=1, meta=meta, timeout=30 if kind == "refused" else 120,
                         device=dev, **args)
        w.register(model, ferry.Layout.hf(spec), 0, adopt=case.get("adopt", False))
        w.commit()
        after = _cpu_state(model)
        out = dict(adopted=all(first[n] != p.data_ptr() for n, p in model.named_parameters()),
                   kept=all(torch.equal(after[n], before[n]) for n in before),
                   devices={str(p.device) for p in model.parameters()}, versions=[])
        if kind == "refused":  # the reader fails and leaves: acknowledged by none, or the epoch lost it
            try:
                out["outcome"] = ("published", w.publish(1).readers_acked)
            except ferry.Error as e:
                out["outcome"] = (type(e).__name__, str(e))
            w.close()
            return out
        ptrs = [p.data_ptr() for p in model.parameters()]
        for v in range(1, 4):
            if kind == "adopt":
                ids = rl.batch(cfg, v).to(dev)
                model(input_ids=ids, labels=ids).loss.backward()
                opt.step()
                opt.zero_grad(set_to_none=True)
            elif kind == "async":
                rl.load_hf(model, rl.random_hf_state(cfg, seed=10 + v))
            else:
                with torch.no_grad():
                    for p in model.parameters():
                        p.add_(0.25 * v)
            state = _cpu_state(model)
            info = w.publish(v)
            if kind == "async":  # the snapshot is taken: the tensors are free again
                with torch.no_grad():
                    for p in model.parameters():
                        p.fill_(-7.0)
                _wait_file(f"{tmp}/read.{v}")
            out["versions"].append(dict(state=state, acked=info.readers_acked, device_bytes=info.device_bytes))
        out["moved"] = [p.data_ptr() for p in model.parameters()] != ptrs
        w.close()
        return out
    model = rl.hf_model(cfg).to(dev)
    ptrs = [p.data_ptr() for p in model.parameters()]
    r = ferry.Reader(spec, job=job, rank=0, world=1, meta=meta, timeout=120, device=dev)
    r.register(model, ferry.Layout.hf(spec), 0)
    r.commit()
    out = dict(versions=[])
    if kind == "refused":
        try:
            r.update(1, timeout=120)
            out["error"] = None
        except ferry.Error as e:
            out["error"] = (type(e).__name__, str(e))
        r.close()
        return out
    for v in range(1, 4):
        info = r.update(v, timeout=120)
        out["versions"].append(dict(version=info.version, state=_cpu_state(model), device_bytes=info.device_bytes))
        open(f"{tmp}/read.{v}", "w").close()
    out["moved"] = [p.data_ptr() for p in model.parameters()] != ptrs
    r.close()
    return out


def _pair(tmp_path, **case):
    case["job"] = f"pair-{case['kind']}-{case['wdev']}-{case['rdev']}".replace(":", "")
    return rl.spawn_ranks(_pair_rank, 2, tmp_path, _meta(), str(tmp_path), case, gloo=False, timeout=600)


def _check_pair(w, r, expect=None):
    assert not w["moved"] and not r["moved"]
    for v in range(3):
        assert r["versions"][v]["version"] == v + 1 and w["versions"][v]["acked"] in (0, 1)
        want = expect(v + 1) if expect else w["versions"][v]["state"]
        _same_state(r["versions"][v]["state"], want, f"version {v + 1}")


@needs_gpu
@pytest.mark.parametrize("wdev,rdev", [("cpu", ENGINE_DEV), (TRAIN_DEV, "cpu")], ids=["cpu-to-gpu", "gpu-to-cpu"])
def test_mixed_host_and_gpu_members(tmp_path, wdev, rdev):
    """A CPU trainer to a GPU engine (the trainer's memory ferry's: adopt=True;
    the engine copies it in with the GPU's copy engines), and a GPU trainer
    (torch's own memory) to a CPU engine."""
    w, r = _pair(tmp_path, kind="sync", wdev=wdev, rdev=rdev, adopt=wdev == "cpu")
    _check_pair(w, r)
    assert all(v["acked"] == 1 for v in w["versions"])
    assert all(v["device_bytes"] == 0 for v in (w if wdev == "cpu" else r)["versions"])  # the host member's


@needs_gpu
def test_gpu_reader_of_a_host_writers_own_memory_is_refused(tmp_path):
    """Memory a host writer registered as its own (torch's, not adopted) is
    read with process_vm_readv, which cannot land in GPU memory: the GPU
    reader's update says so (the writer must adopt, or allocate)."""
    w, r = _pair(tmp_path, kind="refused", wdev="cpu", rdev=ENGINE_DEV)
    assert r["error"] is not None, "the update should have been refused"
    name, detail = r["error"]
    assert name == "UnsupportedError" and "process_vm" in detail, detail
    assert w["outcome"] != ("published", 1), w["outcome"]


@needs_gpu
def test_async_writer_on_gpu(tmp_path):
    """publish snapshots the GPU tensors into a slot and returns: the trainer
    overwrites them at once, and the reader still gets every version."""
    w, r = _pair(tmp_path, kind="async", wdev=TRAIN_DEV, rdev=ENGINE_DEV)
    cfg = rl.tiny_config()
    _check_pair(w, r, expect=lambda v: rl.random_hf_state(cfg, seed=10 + v))
    assert all(v["device_bytes"] > 0 for v in w["versions"])  # the slots are GPU memory


@needs_gpu
def test_adopt_into_gpu_memory(tmp_path):
    """adopt=True on a CUDA writer: the parameters move into GPU memory ferry
    allocated (same values, same device); AdamW steps land there in place."""
    w, r = _pair(tmp_path, kind="adopt", wdev=TRAIN_DEV, rdev=ENGINE_DEV, adopt=True)
    assert w["adopted"] and w["kept"] and w["devices"] == {TRAIN_DEV}
    _check_pair(w, r)
    assert all(v["acked"] == 1 for v in w["versions"])
    assert not torch.equal(w["versions"][0]["state"]["lm_head.weight"], w["versions"][2]["state"]["lm_head.weight"])


def _tables(tmp_path, monkeypatch, dev0, dev1):
    """Two members of one table (rank 0 serves), on the given devices."""
    tokdir = tmp_path / "tokens"
    tokdir.mkdir(mode=0o700)
    monkeypatch.setenv("FERRY_TOKEN_DIR", str(tokdir))
    monkeypatch.delenv("FERRY_TOKEN", raising=False)
    monkeypatch.delenv("FERRY_TOKEN_FILE", raising=False)
    meta = _meta()
    t0 = ferry.TensorTable(job="gputable", rank=0, world=2, meta=meta, serve=True, timeout=120.0, device=dev0)
    t1 = ferry.TensorTable(job="gputable", rank=1, world=2, meta=meta, timeout=120.0, device=dev1)
    return t0, t1


def test_host_table_refuses_gpu_tensors(tmp_path, monkeypatch):
    t0, t1 = _tables(tmp_path, monkeypatch, None, "cpu")
    assert t0.device == "cpu" and t1.device == "cpu"
    with pytest.raises(ferry.MismatchError) as e:
        t0.put(1, "w", FakeDL(2, 0, n=64))
    msg = str(e.value)
    assert "put 'w'" in msg and "cuda:0" in msg and "TensorTable's tensors are on cpu" in msg, msg
    with pytest.raises(ferry.MismatchError, match="get 'w': out.*cuda:1"):
        t1.get(1, "w", FakeDL(2, 1, n=64))
    t1.close()
    t0.close()


@pytest.mark.skipif(GPUS > 0, reason="CUDA is usable here: a CUDA table is made, not refused")
def test_cuda_table_without_cuda_is_refused(tmp_path, monkeypatch):
    with pytest.raises(ferry.UnsupportedError, match="CUDA device 0"):
        _tables(tmp_path, monkeypatch, "cuda:0", "cuda:0")


@needs_gpu
def test_cuda_table_puts_and_gets_across_gpus(tmp_path, monkeypatch):
    t0, t1 = _tables(tmp_path, monkeypatch, TRAIN_DEV, ENGINE_DEV)
    assert t0.device == TRAIN_DEV and t1.device == ENGINE_DEV
    torch.manual_seed(3)
    w = torch.randn(300, 1100, device=TRAIN_DEV).to(torch.bfloat16)
    v = torch.randn(10000, device=ENGINE_DEV)
    t0.put(1, "w", w[:170], global_shape=w.shape)
    t1.put(1, "w", w[170:].to(ENGINE_DEV), global_shape=w.shape, global_offset=(170, 0))
    t1.multi_put(1, [("v", v[:6000], (10000,)), {"name": "v", "tensor": v[6000:], "global_shape": (10000,),
                                                  "global_offset": (6000,)}])
    with pytest.raises(ferry.InvalidArgumentError, match="C-contiguous"):
        t0.put(1, "wt", w.t())
    with pytest.raises(ferry.MismatchError, match=f"put 'x'.*cpu.*{TRAIN_DEV}"):
        t0.put(1, "x", torch.zeros(4))
    t0.complete(1)
    t1.complete(1)
    for t, dev in ((t0, TRAIN_DEV), (t1, ENGINE_DEV)):
        whole = torch.zeros(300, 1100, dtype=torch.bfloat16, device=dev)
        t.get(1, "w", whole)
        assert torch.equal(whole.view(torch.int16).cpu(), w.view(torch.int16).cpu())
        box = torch.zeros(100, 333, dtype=torch.bfloat16, device=dev)
        t.get(1, "w", box, global_offset=(120, 500))
        assert torch.equal(box.view(torch.int16).cpu(), w[120:220, 500:833].view(torch.int16).cpu())
        vv = torch.zeros(5000, device=dev)
        t.multi_get(1, [("v", vv, (3000,))])
        assert torch.equal(vv.cpu(), v[3000:8000].cpu())
    with pytest.raises(ferry.MismatchError, match="get 'w': out"):
        t1.get(1, "w", torch.zeros(300, 1100, dtype=torch.bfloat16))
    t1.close()
    t0.close()
