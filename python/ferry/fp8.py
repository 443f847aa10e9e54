"""ferry.fp8: block-scaled FP8, as FP8 engines (DeepSeek-V3, Kimi-K2,
vLLM's fp8 with weight_block_size [128, 128]) hold weights.

block_quantize turns a bf16 or fp32 weight of rows x cols into
float8_e4m3fn values and an fp32 weight_scale_inv of ceil(rows / 128) x
ceil(cols / 128), bit for bit as DeepGEMM's per_block_cast_to_fp8 (the
reference, in torch, is tests/golden/fp8/make_golden.py; docs/fp8.md).
Host memory; releases the GIL.
"""
from ferry import _ferry

#: Rows and columns of a scale block.
BLOCK = _ferry.FP8_BLOCK

__all__ = ["BLOCK", "block_quantize", "scale_shape"]


def scale_shape(rows, cols):
    """scale_shape(rows, cols) -> (ceil(rows / 128), ceil(cols / 128))"""
    return (-(-rows // BLOCK), -(-cols // BLOCK))


def block_quantize(weight, ue8m0=False, *, out=None):
    """block_quantize(weight, ue8m0=False, *, out=None) -> (q, scale_inv)

    weight: a 2-D C-contiguous bf16 or float32 tensor in host memory (torch
    or numpy float32). q: float8_e4m3fn of the same shape (torch; numpy:
    uint8 holding its bits); scale_inv: float32 of scale_shape(rows, cols).
    ue8m0: scales rounded up to powers of two. out=(q, scale_inv) writes
    into tensors the caller made (uint8 storage is fine for q).

    Raises InvalidArgumentError (not 2-D, not contiguous, another dtype, out
    of the wrong size), UnsupportedError (GPU memory).
    """
    rows, cols = weight.shape
    is_torch = type(weight).__module__.startswith("torch")
    if out is None:
        if is_torch:
            import torch
            out = (torch.empty((rows, cols), dtype=torch.float8_e4m3fn),
                   torch.empty(scale_shape(rows, cols), dtype=torch.float32))
        else:
            import numpy
            out = (numpy.empty((rows, cols), dtype=numpy.uint8),
                   numpy.empty(scale_shape(rows, cols), dtype=numpy.float32))
    q, s = out
    q_bits = q
    if type(q).__module__.startswith("torch"):
        import torch
        if q.dtype == torch.float8_e4m3fn:
            q_bits = q.view(torch.uint8)  # (DLPack has no float8 here: its bits as uint8)
    _ferry.fp8_block_quantize(weight, q_bits, s, ue8m0)
    return q, s
