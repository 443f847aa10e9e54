"""ferry: move model weights from RL trainers to inference engines.

The C library's objects, named as Python users expect (docs/python.md):
Model, Layout, Writer, Reader, TensorTable, Channel, delta, fp8, Plan, and
register() for a module's own parameters. Tensors go in through DLPack or
the buffer protocol (torch, numpy) and are never copied on the way in:
a Reader writes into the caller's tensors' own storage.
"""
import enum as _enum
import json as _json
import os as _os
import sys as _sys

from ferry import _ferry
from ferry._ferry import (  # noqa: F401
    BufferInfo, DeviceBuffer, Error, HostBuffer, Piece, PublishInfo, TensorInfo, UpdateInfo, __version__,
    dtype_size,
    BusyError, ConfigError, CorruptError, CoverageError, InternalError, InterruptedError,
    InvalidArgumentError,
    IOFailure, LimitError, MismatchError, NoMemoryError, NotFoundError, PeerLostError, StaleError, TimeoutError,
    UnsupportedError,
)
from ferry._ferry import (  # noqa: F401
    Channel, ChannelUpdateInfo, CopyOp, DeltaInfo, Plan, PlanBucket, PlanPair,
)

Status = _enum.IntEnum("Status", {k[len("FERRY_ERR_"):]: v for k, v in vars(_ferry).items()
                                   if k.startswith("FERRY_ERR_")} | {"OK": 0}, module=__name__)
Status.__doc__ = "The C library's status codes (ferry.Error.status compares equal to them)."

_MODELS_DIRS = (
    _os.path.join(_os.path.dirname(__file__), "models"),  # installed, or a build tree
    _os.path.join(_os.path.dirname(__file__), "..", "..", "models"),  # the source tree
)


def bundled_models():
    """Names of the model configs shipped with ferry ("qwen3-0.6b", ...)."""
    for d in _MODELS_DIRS:
        if _os.path.isdir(d):
            return sorted(f[:-5] for f in _os.listdir(d) if f.endswith(".json"))
    return []


class Model(_ferry.Model):
    __doc__ = _ferry.Model.__doc__

    @classmethod
    def from_config(cls, source, *, name=None, dtype=None, mtp=False, quant=None):
        """Model.from_config(source, *, name=None, dtype=None, mtp=False, quant=None) -> Model

        source: a config.json path, a bundled name (see bundled_models()), a
        dict as config.json holds it, or an object with to_dict() (a
        transformers PretrainedConfig). dtype overrides the config's
        torch_dtype/dtype; mtp includes multi-token-prediction layers. quant:
        None or 'none' (every tensor as torch_dtype says: a trainer's spec),
        'auto' (as the config's quantization_config says: an FP8 engine's
        linears float8_e4m3fn with weight_scale_inv tensors, docs/fp8.md)
        or 'fp8' (so whatever the config says); see tensor_quant().
        Raises ConfigError naming a missing or malformed field, NotFoundError
        for a name that is neither a file nor bundled.
        """
        if hasattr(source, "to_dict") and not isinstance(source, dict):
            source = source.to_dict()
        if isinstance(source, dict):
            text = _json.dumps(source, default=str)
            return cls.from_json(text, name or source.get("_name_or_path") or source.get("model_type", "model"),
                                 dtype=dtype, mtp=mtp, quant=quant)
        path = _os.fspath(source)
        if not _os.path.exists(path):
            for d in _MODELS_DIRS:
                cand = _os.path.join(d, path + ".json")
                if _os.path.exists(cand):
                    path = cand
                    break
            else:
                raise _ferry.error(Status.NOT_FOUND,
                                   f"model {path!r}: no such file, and not a bundled name ({', '.join(bundled_models())})")
        return cls.from_file(path, dtype=dtype, mtp=mtp, quant=quant)


class Layout(_ferry.Layout):
    __doc__ = _ferry.Layout.__doc__

    @classmethod
    def train(cls, model, spec="", rank=None):
        """Layout.train(model, spec='', rank=None): a Megatron-core trainer layout ('tp=2,pp=2,ep=4,...')."""
        return cls.build(model, "train", spec, rank)

    @classmethod
    def infer(cls, model, spec="", rank=None):
        """Layout.infer(model, spec='', rank=None): a vLLM/SGLang engine layout ('tp=4,replicas=2,...')."""
        return cls.build(model, "infer", spec, rank)

    @classmethod
    def hf(cls, model, world_size=1):
        """Layout.hf(model, world_size=1): every rank holds every tensor whole, one buffer each, named as
        the checkpoint (a transformers model's own parameters)."""
        lay = cls.custom(model, world_size)
        lay._shapes = {}  # the C layout keeps a custom buffer's size only
        for rank in range(world_size):
            for t in model.tensors:
                esize = dtype_size(t.dtype)
                n = 1
                for d in t.shape:
                    n *= d
                b = lay.add_buffer(rank, t.name, t.dtype, n * esize)
                lay._shapes[b] = tuple(t.shape)
                strides, s = [], 1
                for d in reversed(t.shape):
                    strides.append(s)
                    s *= d
                lay.add_piece(t.name, [0] * len(t.shape), t.shape, rank, b, 0, strides[::-1])
        return lay

    def buffers(self, rank=None):
        """buffers(rank=None) -> list of BufferInfo

        The buffers of one rank (or all), in index order; Layout.hf's carry
        their tensor's shape."""
        out = super().buffers(rank)
        shapes = getattr(self, "_shapes", None)
        if shapes:
            out = [BufferInfo((b.index, b.name, b.rank, b.size, b.dtype, shapes.get(b.index, b.shape))) for b in out]
        return out


def _wait_device(member):
    """A CUDA member's GPU work runs on a stream of ferry's own, which is not
    ordered after torch's: kernels still writing (an optimizer step) or
    reading (a forward pass, a CUDA graph) the registered tensors finish
    before ferry reads or writes them."""
    if member.device == "cpu":
        return
    torch = _sys.modules.get("torch")
    if torch is not None and torch.cuda.is_initialized():
        torch.cuda.synchronize(member.device)


class Writer(_ferry.Writer):
    __doc__ = _ferry.Writer.__doc__

    def register(self, params, layout, rank, naming=None, ignore=(), adopt=False):
        """register(params, layout, rank, naming=None, ignore=(), adopt=False): see ferry.register."""
        return register(self, params, layout, rank, naming=naming, ignore=ignore, adopt=adopt)

    def publish(self, version):
        """publish(version) -> PublishInfo

        Publishes version (greater than every one before). Sync mode: readers
        read the live tensors while this waits for their acknowledgements (up
        to the timeout); async: snapshots and returns. A CUDA writer first
        waits for torch's work on its device (torch.cuda.synchronize). Releases
        the GIL; Ctrl-C interrupts its waits."""
        _wait_device(self)
        return super().publish(version)


class Reader(_ferry.Reader):
    __doc__ = _ferry.Reader.__doc__

    def register(self, params, layout, rank, naming=None, ignore=(), adopt=False):
        """register(params, layout, rank, naming=None, ignore=(), adopt=False): see ferry.register."""
        return register(self, params, layout, rank, naming=naming, ignore=ignore, adopt=adopt)

    def update(self, version="latest", timeout=30.0):
        """update(version='latest', timeout=30.0) -> UpdateInfo

        Brings the registered tensors to version (a number, 'latest' or
        'next'), in place and verified, waiting up to timeout seconds for it.
        A CUDA reader first waits for torch's work on its device
        (torch.cuda.synchronize), and returns once its GPU writes are done.
        Raises TimeoutError, StaleError (gone), CorruptError (checksums kept
        failing), PeerLostError. Releases the GIL; Ctrl-C interrupts its waits
        (the tensors may then be torn: see .torn; the next update repairs
        them)."""
        _wait_device(self)
        return super().update(version, timeout)


def _after_device_work(name):
    """TensorTable.<name>, after torch's work on the caller's CUDA tensors
    (a CUDA table copies them on a stream of ferry's own)."""
    base = getattr(_ferry.TensorTable, name)

    def call(self, *args, **kw):
        _wait_device(self)
        return base(self, *args, **kw)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = base.__doc__
    return call


class TensorTable(_ferry.TensorTable):
    __doc__ = _ferry.TensorTable.__doc__
    put = _after_device_work("put")
    multi_put = _after_device_work("multi_put")
    get = _after_device_work("get")
    multi_get = _after_device_work("multi_get")


from ferry.params import NAMINGS, register  # noqa: E402,F401
from ferry import delta  # noqa: E402,F401
from ferry import fp8  # noqa: E402,F401

__all__ = [
    "__version__", "bundled_models", "dtype_size", "register", "NAMINGS", "Status",
    "Model", "Layout", "Writer", "Reader", "HostBuffer", "DeviceBuffer", "TensorTable", "Channel", "Plan", "delta", "fp8",
    "TensorInfo", "BufferInfo", "Piece", "PublishInfo", "UpdateInfo", "ChannelUpdateInfo", "DeltaInfo",
    "CopyOp", "PlanBucket", "PlanPair",
    "Error", "InvalidArgumentError", "ConfigError", "UnsupportedError", "NotFoundError", "CoverageError",
    "MismatchError", "CorruptError", "NoMemoryError", "IOFailure", "LimitError", "TimeoutError", "PeerLostError",
    "InterruptedError", "BusyError", "StaleError", "InternalError",
]
