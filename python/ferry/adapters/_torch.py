"""What the adapters share: torch dtypes as ferry names them, specs from
(name, dtype, shape) lists, and a member's ferry-allocated host buffers as
named torch tensors. Imports torch (every adapter's framework does)."""
import torch

import ferry

_NAMES = {
    torch.bool: "BOOL", torch.uint8: "U8", torch.int8: "I8", torch.int16: "I16", torch.int32: "I32",
    torch.int64: "I64", torch.float16: "F16", torch.bfloat16: "BF16", torch.float32: "F32",
    torch.float64: "F64", torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}
_TORCH = {v: k for k, v in _NAMES.items()}


def dtype_name(dtype):
    """ferry's name of a torch dtype ("BF16"), or the name itself if given a str."""
    if isinstance(dtype, str):
        name = dtype.upper()
        if name not in _TORCH:
            raise ValueError(f"dtype {dtype!r}: not one ferry moves ({', '.join(sorted(_TORCH))})")
        return name
    try:
        return _NAMES[dtype]
    except KeyError:
        raise ValueError(f"dtype {dtype}: not one ferry moves ({', '.join(sorted(_TORCH))})") from None


def torch_dtype(name):
    """The torch dtype of a ferry dtype name."""
    return _TORCH[dtype_name(name)]


def spec_from_tensors(name, tensors):
    """A ferry.Model of [(name, dtype, shape), ...] (dtype: torch or ferry's name)."""
    spec = ferry.Model.custom(name)
    seen = set()
    for tname, dtype, shape in tensors:
        if tname in seen:
            raise ValueError(f"tensor {tname!r} listed twice")
        seen.add(tname)
        spec.add_tensor(tname, dtype_name(dtype), tuple(int(s) for s in shape))
    return spec


def host_tensors(member, layout, rank):
    """Adds the rank's buffers of layout to member as ferry-allocated host
    memory and returns {buffer name: torch tensor over it} (typed and shaped
    as the buffer; for Layout.hf the buffer names are the tensor names).
    The tensors keep the memory alive."""
    infos = layout.buffers(rank)
    bufs = member.add_layout(layout, rank, [None] * len(infos))
    out = {}
    for info, buf in zip(infos, bufs):
        t = torch.from_dlpack(buf)  # uint8 over ferry's memory, no copy
        out[info.name] = t.view(torch_dtype(info.dtype)).view(info.shape)
    return out
