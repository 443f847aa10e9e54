"""ferry.fp8.block_quantize against the torch reference
(tests/golden/fp8/make_golden.py: DeepGEMM's per_block_cast_to_fp8), bit
for bit, on shapes and values the golden files do not hold; and its
refusals."""
import importlib.util
import os

import numpy as np
import pytest

import ferry

torch = pytest.importorskip("torch")

_spec = importlib.util.spec_from_file_location(
    "fp8_reference", os.path.join(os.path.dirname(__file__), "..", "..", "tests", "golden", "fp8", "make_golden.py"))
ref = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ref)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("ue8m0", [False, True])
@pytest.mark.parametrize("shape", [(128, 128), (257, 129), (5, 1000), (640, 384)])
def test_block_quantize_matches_reference(dtype, ue8m0, shape):
    g = torch.Generator().manual_seed(sum(shape) + int(ue8m0))
    x = (torch.randn(shape, generator=g) * torch.pow(2.0, torch.randint(-12, 4, shape, generator=g).float())).to(dtype)
    x[0, :3] = 0  # signed zeros and a block corner
    x[0, 1] = -0.0
    q, s = ferry.fp8.block_quantize(x, ue8m0)
    rq, rs = ref.per_block_cast_to_fp8(x, ue8m0)
    assert q.dtype == torch.float8_e4m3fn and q.shape == x.shape and s.shape == ferry.fp8.scale_shape(*shape)
    assert torch.equal(s.view(torch.int32), rs.contiguous().view(torch.int32))
    assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8))


def test_numpy_and_out():
    x = (np.random.default_rng(3).standard_normal((130, 260)) * 0.02).astype(np.float32)
    q, s = ferry.fp8.block_quantize(x)
    assert q.dtype == np.uint8 and s.shape == (2, 3)
    rq, rs = ref.per_block_cast_to_fp8(torch.from_numpy(x), False)
    assert np.array_equal(q, rq.view(torch.uint8).numpy()) and np.array_equal(s, rs.numpy())
    q2 = torch.empty((130, 260), dtype=torch.uint8)
    s2 = torch.empty((2, 3), dtype=torch.float32)
    ferry.fp8.block_quantize(torch.from_numpy(x), out=(q2, s2))
    assert np.array_equal(q2.numpy(), q) and np.array_equal(s2.numpy(), s)


def test_refusals():
    x = torch.zeros((4, 4), dtype=torch.float16)
    with pytest.raises(ferry.InvalidArgumentError, match="F16"):
        ferry.fp8.block_quantize(x)
    with pytest.raises(ferry.InvalidArgumentError, match="C-contiguous"):
        ferry.fp8.block_quantize(torch.zeros((4, 8), dtype=torch.bfloat16)[:, ::2])
    with pytest.raises(ferry.InvalidArgumentError, match="scale_inv 1"):
        ferry.fp8.block_quantize(torch.zeros((4, 4), dtype=torch.bfloat16),
                                 out=(torch.empty((4, 4), dtype=torch.uint8), torch.empty((2,), dtype=torch.float32)))


def test_fp8_engine_specs():
    """quant='auto' reads a DeepSeek-V3 config's quantization_config: its
    linears float8_e4m3fn, each with a weight_scale_inv of ceil(rows/128) x
    ceil(cols/128); the router, norms and embeddings stay bf16; a trainer's
    spec (quant None) has none of it."""
    eng = ferry.Model.from_config("deepseek-v3", quant="auto")
    w = "model.layers.3.mlp.experts.0.gate_proj.weight"
    q = eng.tensor_quant(w)
    assert q == {"kind": "fp8", "scale": w + "_scale_inv", "block": (128, 128), "ue8m0": False}
    assert eng.tensor(w).dtype == "F8_E4M3" and eng.tensor(w).shape == (2048, 7168)
    s = eng.tensor(w + "_scale_inv")
    assert s.dtype == "F32" and s.shape == (16, 56)
    assert eng.tensor_quant(w + "_scale_inv")["weight"] == w
    for plain in ("model.layers.3.mlp.gate.weight", "model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"):
        assert eng.tensor_quant(plain) is None and eng.tensor(plain).dtype != "F8_E4M3"
    trainer = ferry.Model.from_config("deepseek-v3")
    assert trainer.tensor_quant(w) is None and trainer.tensor(w).dtype == "BF16"
    assert w + "_scale_inv" not in trainer and len(eng) > len(trainer)
    with pytest.raises(ValueError, match="quant='int4'"):
        ferry.Model.from_config("deepseek-v3", quant="int4")
    with pytest.raises(ferry.NotFoundError):
        eng.tensor_quant("no.such.tensor")
