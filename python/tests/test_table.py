"""ferry.TensorTable: two members put halves of tensors under a sequence id
and complete it; gets of boxes spanning both puts come back resharded and
exact; errors name what is wrong."""
import socket
import threading
import time

import pytest
import torch

import ferry

# Only a guard against a hang: a correct run never waits this long.
HANG_GUARD = 120.0


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def tables(tmp_path, monkeypatch):
    """Two members of one table: rank 0 serves the metadata service (its
    token goes into a private FERRY_TOKEN_DIR, where rank 1 finds it)."""
    tokdir = tmp_path / "tokens"
    tokdir.mkdir(mode=0o700)
    monkeypatch.setenv("FERRY_TOKEN_DIR", str(tokdir))
    monkeypatch.delenv("FERRY_TOKEN", raising=False)
    monkeypatch.delenv("FERRY_TOKEN_FILE", raising=False)
    meta = f"127.0.0.1:{free_port()}"
    t0 = ferry.TensorTable(job="pytable", rank=0, world=2, meta=meta, serve=True, timeout=HANG_GUARD)
    t1 = ferry.TensorTable(job="pytable", rank=1, world=2, meta=meta, timeout=HANG_GUARD)
    yield t0, t1
    t1.close()
    t0.close()


def bits(t):
    return t.view(torch.int16) if t.dtype == torch.bfloat16 else t


def test_reshard_across_members(tables):
    t0, t1 = tables
    torch.manual_seed(1)
    w = torch.randn(300, 1100).to(torch.bfloat16)
    v = torch.randn(10000)
    step = torch.tensor(7, dtype=torch.int64)  # 0-d
    # w by rows over the two members; v by halves, rank 1's half given
    # strided (a transposed view of a copy), which put gathers itself
    t0.put(1, "w", w[:170], global_shape=w.shape)
    t1.put(1, "w", w[170:], global_shape=w.shape, global_offset=(170, 0))
    t0.put(1, "v", v[:6000], (10000,))
    strided = v[6000:].reshape(40, 100).t().contiguous().t()  # same values, column-major storage
    assert not strided.is_contiguous()
    t1.multi_put(1, [{"name": "v2d", "tensor": strided, "global_shape": (40, 100)}, ("step", step)])
    t0.complete(1)
    t1.complete(1)

    whole = torch.zeros_like(w)
    t1.get(1, "w", whole)
    assert torch.equal(bits(whole), bits(w))
    # a box straddling both puts, read by either member
    box = torch.zeros(100, 333, dtype=torch.bfloat16)
    t0.get(1, "w", box, global_offset=(120, 500))
    assert torch.equal(bits(box), bits(w[120:220, 500:833]))
    # several boxes in one plan; the strided put came back row-major
    vhead = torch.zeros(5000)
    v2d = torch.zeros(40, 100)
    s = torch.zeros((), dtype=torch.int64)
    t0.multi_get(1, [("v", vhead, (1000,)), {"name": "v2d", "out": v2d}, ("step", s)])
    assert torch.equal(vhead, v[1000:6000])
    assert torch.equal(v2d, v[6000:].reshape(40, 100))
    assert s.item() == 7


def test_gets_wait_for_every_member(tables):
    t0, t1 = tables
    x = torch.arange(64, dtype=torch.float32)
    t0.put(5, "x", x[:32], (64,))
    t0.complete(5)
    out = torch.zeros(64)
    # rank 1 has not completed 5: a get waits for it, up to its timeout
    with pytest.raises(ferry.TimeoutError):
        t0.get(5, "x", out, timeout=0.3)
    got = {}

    def reader():
        try:
            t0.get(5, "x", out)
            got["ok"] = True
        except Exception as e:  # reported below
            got["err"] = e

    th = threading.Thread(target=reader)
    th.start()
    t1.put(5, "x", x[32:], (64,), (32,))
    t1.complete(5)
    th.join(HANG_GUARD)
    assert got == {"ok": True}
    assert torch.equal(out, x)


def test_one_thread_at_a_time(tables):
    """A second thread calling into a table that is inside a call gets
    BusyError, not a data race; the first call is unaffected."""
    t0, t1 = tables
    x = torch.arange(8, dtype=torch.float32)
    t0.put(9, "x", x)
    t0.complete(9)
    out = torch.zeros(8)
    done = {}

    def waiter():  # waits inside get (rank 1 has not completed 9); retries while the probes hold the table
        while True:
            try:
                done["r"] = t0.get(9, "x", out)
                return
            except ferry.BusyError:
                time.sleep(0.001)

    th = threading.Thread(target=waiter)
    th.start()
    probe = torch.zeros(8)
    busy = False
    for _ in range(10000):  # until the thread is inside its get (a hang guard, not a timing)
        time.sleep(0.001)
        try:
            t0.get(9, "x", probe, timeout=0.01)
        except ferry.BusyError:
            busy = True
            break
        except ferry.TimeoutError:
            continue
    assert busy
    with pytest.raises(ferry.BusyError):
        t0.close()
    t1.complete(9)
    th.join(HANG_GUARD)
    assert "r" in done and torch.equal(out, x)


def test_errors_name_what_is_wrong(tables):
    t0, t1 = tables
    w = torch.arange(40, dtype=torch.float32).reshape(4, 10)
    t0.put(2, "w", w[:2], (4, 10))  # rows 2..3 put by nobody
    with pytest.raises(ferry.InvalidArgumentError, match="outside"):
        t0.put(2, "w", w, (3, 10))
    with pytest.raises(ferry.InvalidArgumentError, match="dimensions"):
        t0.put(2, "w", w, (40,))
    with pytest.raises(ferry.MismatchError):
        t0.put(2, "w", w[2:].to(torch.float64), (4, 10), (2, 0))
    t0.complete(2)
    t1.complete(2)
    with pytest.raises(ferry.InvalidArgumentError):
        t0.complete(2)  # twice
    out = torch.zeros(4, 10)
    with pytest.raises(ferry.CoverageError, match="w"):
        t1.get(2, "w", out)
    with pytest.raises(ferry.NotFoundError, match="nope"):
        t1.get(2, "nope", out)
    with pytest.raises(ferry.MismatchError):
        t1.get(2, "w", torch.zeros(2, 10, dtype=torch.int32))
    with pytest.raises(ferry.InvalidArgumentError, match="contiguous"):
        t1.get(2, "w", torch.zeros(10, 2).t())
    part = torch.zeros(2, 10)
    t1.get(2, "w", part)  # the covered rows are fine
    assert torch.equal(part, w[:2])
    with pytest.raises(ferry.InvalidArgumentError, match="seq_id"):
        t0.put(-1, "w", w)


def test_drop_and_close(tables):
    t0, t1 = tables
    x = torch.ones(16)
    t0.put(3, "x", x)
    t0.complete(3)
    t1.complete(3)
    out = torch.zeros(16)
    t1.get(3, "x", out)
    assert torch.equal(out, x)
    t0.drop(3)
    # rank 0 no longer offers seq 3: a get waits for it to complete again
    with pytest.raises(ferry.Error):
        t1.get(3, "x", out, timeout=0.3)
    t1.close()
    assert t1.closed
    with pytest.raises(ferry.StaleError):
        t1.put(4, "x", x)
    t1.close()  # idempotent


def test_context_manager_and_required_args(tmp_path, monkeypatch):
    tokdir = tmp_path / "tokens"
    tokdir.mkdir(mode=0o700)
    monkeypatch.setenv("FERRY_TOKEN_DIR", str(tokdir))
    with pytest.raises(ferry.InvalidArgumentError, match="job"):
        ferry.TensorTable(rank=0, world=1)
    with pytest.raises(ferry.InvalidArgumentError):
        ferry.TensorTable(job="j", rank=2, world=2, meta=f"127.0.0.1:{free_port()}", serve=True)
    with ferry.TensorTable(job="solo", rank=0, world=1, meta=f"127.0.0.1:{free_port()}", serve=True) as t:
        x = torch.arange(10, dtype=torch.int32)
        t.put(1, "x", x)
        t.complete(1)
        y = torch.zeros(10, dtype=torch.int32)
        t.get(1, "x", y, timeout=HANG_GUARD)
        assert torch.equal(x, y)
    assert t.closed
