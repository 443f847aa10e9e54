"""examples/trainer.py and examples/engine.py, run as a user would: the
engine ends every version with the trainer's exact weights (on the CPU, and
with --device on GPUs where there are any)."""
import os
import re
import subprocess
import sys

import pytest
import torch
from ports import free_port

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")


def _run(trainer_device, engine_device):
    meta = f"127.0.0.1:{free_port()}"
    args = ["--job", f"examples-{os.getpid()}-{engine_device.replace(':', '')}", "--meta", meta, "--steps", "3"]
    trainer = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "trainer.py"), *args,
                                "--device", trainer_device],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    engine = subprocess.Popen([sys.executable, os.path.join(ROOT, "examples", "engine.py"), *args,
                               "--device", engine_device],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    eout, _ = engine.communicate(timeout=300)
    tout, _ = trainer.communicate(timeout=300)
    assert engine.returncode == 0, eout
    assert trainer.returncode == 0, tout
    digests = re.compile(r"^version (\d+): .*digest ([0-9a-f]{16})", re.M)
    t, e = dict(digests.findall(tout)), dict(digests.findall(eout))
    assert sorted(t) == ["1", "2", "3"], tout
    assert t == e, f"trainer:\n{tout}\nengine:\n{eout}"
    assert len(set(t.values())) == 3  # every step changed the weights


def test_trainer_and_engine_examples():
    _run("cpu", "cpu")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (torch.cuda.is_available() is False)")
def test_trainer_and_engine_examples_on_gpus():
    """The trainer on cuda:0 (its adopted parameters in GPU memory ferry
    allocated), the engine on cuda:1 where there are two GPUs, else cuda:0."""
    _run("cuda", "cuda:1" if torch.cuda.device_count() >= 2 else "cuda:0")
