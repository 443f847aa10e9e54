"""ferry.rl_loop (python -m ferry.rl_loop, ferry demo --rl) on the CPU with the tiny Qwen3, run as a user runs it
(one command, its own trainer and engine processes): its table and exit code
say that the logits were bit-identical at every version the engine landed,
that sync readers one version behind got deltas, that an async engine took
the newest version within its lag, and that an engine killed inside an
update came back and caught up. A flipped bit must fail the run."""
import os
import re
import subprocess
import sys

import pytest

LOOP = [sys.executable, "-m", "ferry.rl_loop"]
ROW = re.compile(r"^ +(\d+) +([0-9.]+%) +(\S+(?: \S+)?) +(\S+) +(\S+) +(\S+) +(\S+) +(yes|NO|-) +(.*)$")


def _run(*args, rc=0):
    p = subprocess.run([*LOOP, "--timeout", "120", *args], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=200)
    assert p.returncode == rc, p.stdout
    rows = {}
    for line in p.stdout.splitlines():
        m = ROW.match(line)
        if m:
            v, changed, nbytes, secs, enc, eng, bcast, equal, note = m.groups()
            rows[int(v)] = dict(changed=float(changed[:-1]), bytes=nbytes, seconds=secs, encode=enc, engine=eng,
                                bcast=bcast, equal=equal, note=note)
    return p.stdout, rows


def _bytes(text):
    n, unit = text.split()
    return float(n) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit]


def _landed(rows):
    return {v: r for v, r in rows.items() if r["equal"] != "-"}


def test_sync_deltas_and_equal_logits():
    out, rows = _run("--steps", "4")
    assert sorted(rows) == [1, 2, 3, 4], out
    for v, r in rows.items():
        assert r["equal"] == "yes", out
        assert 0 < r["changed"] < 100 and float(r["seconds"]) > 0 and float(r["bcast"]) > 0, out
        assert float(r["encode"]) > 0 and float(r["engine"]) > 0, out  # the trainer's checksums, the engine's pull
    assert rows[1]["note"] == "whole", out
    whole = _bytes(rows[1]["bytes"])
    for v in (2, 3, 4):  # one version behind: a delta of the few elements the step changed
        assert rows[v]["note"] == "delta (1 step)", out
        assert 0 < _bytes(rows[v]["bytes"]) < whole / 10, out
    assert "the engine's parameters after it are the bytes ferry landed" in out
    assert out.rstrip().endswith("its parameters never moved"), out


def test_async_newest_within_lag():
    out, rows = _run("--mode", "async", "--max-lag", "1", "--steps", "6")
    landed = _landed(rows)
    assert 6 in landed and all(r["equal"] == "yes" for r in landed.values()), out
    for v, r in landed.items():  # update('next') took the newest published when it asked
        m = re.match(r"(?:whole|delta \(\d+ steps?\)), from (\d+) \(newest was (\d+)\)", r["note"])
        assert m and int(m.group(1)) < v and int(m.group(2)) <= v, out
    for v, r in rows.items():
        assert v in landed or r["note"] == "not landed: a newer one was taken", out
    # the engine holds what it landed last: every later version arrives as deltas (a chain when it skipped)
    assert all(r["note"].startswith("delta") for v, r in landed.items() if v > min(landed)), out
    m = re.search(r"async: \d+ rollouts ran on weights 0 to (\d+) versions behind", out)
    assert m and int(m.group(1)) <= 1, out
    assert "OK: logits bit-identical" in out


def test_deltas_off_pulls_whole():
    out, rows = _run("--steps", "3", "--deltas", "off")
    assert "every version whole (--deltas off)" in out.splitlines()[0], out
    assert sorted(rows) == [1, 2, 3] and all(r["equal"] == "yes" and r["note"] == "whole" for r in rows.values()), out
    assert len({r["bytes"] for r in rows.values()}) == 1, out  # the whole model each time
    assert "as deltas" not in out and "OK: logits bit-identical" in out


def test_engine_killed_inside_update_rejoins():
    out, rows = _run("--steps", "5", "--kill-engine-at", "3")
    assert re.search(r"killed the engine \(pid \d+, status -9\) with SIGKILL inside its update for version 3", out)
    assert re.search(r"restarted the engine \(pid \d+\)", out), out
    assert [v for v in rows if rows[v]["equal"] == "yes"] == [1, 2, 5], out
    assert rows[2]["note"] == "delta (1 step)", out
    assert rows[3]["note"] == rows[4]["note"] == "not landed: engine killed, restarting", out
    # the new process holds nothing: the newest version arrives whole
    assert rows[5]["note"] == "whole, the restarted engine's first", out
    assert "the restarted engine joined late and caught up to version 5 (the newest), logits equal" in out
    assert "OK: logits bit-identical" in out


def test_flipped_bit_fails_and_says_where():
    out, rows = _run("--steps", "3", "--corrupt-engine-at", "2", "--bcast-rounds", "0", rc=1)
    assert rows[2]["equal"] == "NO" and rows[1]["equal"] == rows[3]["equal"] == "yes", out
    assert re.search(r"FAILED: version 2: the engine's logits differ from the trainer's: \d+ of \d+ elements, "
                     r"max \|diff\| [0-9.e-]+", out), out
    assert rows[3]["note"] == "whole", out  # ferry would not apply a delta to the changed weights
    assert "OK:" not in out


@pytest.mark.parametrize("args, says", [
    (["--steps", "0"], "--steps must be at least 1"),
    (["--kill-engine-at", "9"], "--kill-engine-at must be a version from 1 to --steps 5"),
    (["--max-lag", "2"], "--max-lag applies to --mode async only"),
    (["--mode", "async", "--max-lag", "-1"], "--max-lag must be 0 or more"),
    (["--lr", "0"], "--lr must be positive"),
    (["--deltas", "some"], "argument --deltas: invalid choice: 'some'"),
    (["--shape", "7b"], "invalid choice: '7b'"),
])
def test_bad_arguments(args, says):
    p = subprocess.run([*LOOP, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=60)
    assert p.returncode == 2 and says in p.stderr, p.stderr


@pytest.mark.parametrize("shape", ["tiny", "0.6b"])
def test_engine_module_is_ferry_infer_layout(shape):
    """The example's engine holds exactly the buffers of ferry's tp=1 engine
    layout, and its unfused views are the model's tensors: also for
    Qwen3-0.6B, the shape GPU runs use (built on the meta device here)."""
    import ferry
    import ferry.rl_loop as ex
    cfg = ex.qwen3_config(shape)
    spec = ferry.Model.from_config(cfg, dtype="BF16")
    engine = ex.FusedQwen3(cfg, "meta")
    bufs = ferry.Layout.infer(spec, "tp=1").buffers(0)
    assert [(n, tuple(p.shape)) for n, p in engine.params.items()] == [(b.name, tuple(b.shape)) for b in bufs]
    views = engine.hf_views()
    assert {n: tuple(t.shape) for n, t in views.items()} == {t.name: tuple(t.shape) for t in spec.tensors}
    if shape == "0.6b":
        assert spec.param_count == 596049920  # Qwen3-0.6B's, tied embeddings counted once


def test_ferry_demo_rl(ferry_cli):
    """`ferry demo --rl` runs the same loop (Python from $FERRY_PYTHON, the
    package of the CLI's build first), its options passed through."""
    env = dict(os.environ, FERRY_PYTHON=sys.executable)
    p = subprocess.run([ferry_cli, "demo", "--rl", "--steps", "2", "--bcast-rounds", "0", "--timeout", "120"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=200, env=env)
    assert p.returncode == 0, p.stdout
    assert "OK: logits bit-identical at every version the engine landed" in p.stdout, p.stdout
    p = subprocess.run([ferry_cli, "demo", "--rl", "--steps", "0"], capture_output=True, text=True, timeout=60,
                       env=env)
    assert p.returncode == 2 and "usage: ferry demo --rl" in p.stderr and "--steps must be at least 1" in p.stderr
    p = subprocess.run([ferry_cli, "demo", "--steps", "2", "--rl"], capture_output=True, text=True, timeout=60)
    assert p.returncode == 2 and "--rl comes first" in p.stderr, p.stderr
    p = subprocess.run([ferry_cli, "demo", "--rl"], capture_output=True, text=True, timeout=60,
                       env=dict(env, FERRY_PYTHON="/nonexistent/python3"))
    assert p.returncode != 0 and "cannot run /nonexistent/python3" in p.stderr, p.stderr
