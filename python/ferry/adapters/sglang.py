"""SGLang custom weight loader over ferry (SGLang's ``custom_weight_loader``
hook; run against sglang 0.5.23, model construction and the weight
updater only: no SGLang engine runs on the CPU-only test machine).

Engine side::

    engine = sglang.Engine(model_path=..., custom_weight_loader=["ferry.adapters.sglang.load"])
    # each step, once the trainer published version v:
    engine.update_weights_from_tensor(
        ferry.adapters.sglang.request(v, job="rl", meta="10.0.0.1:7471"),
        load_format="ferry.adapters.sglang.load")

(``--custom-weight-loader ferry.adapters.sglang.load`` and the HTTP route
``/update_weights_from_tensor`` take the same.) SGLang hands the named
tensors of the call to ``load(model, named_tensors)`` in every tensor
parallel worker. Here they carry no weights, only the request: one entry
``("ferry.request", uint8 tensor of JSON)`` made by ``request()``. The
weights come through ferry:

- the first call (and any call naming another job, address, rank or
  world) makes a ferry.Reader for the worker: spec from the model's
  Hugging Face config (``model.config``; ``dtype`` in the request
  overrides its dtype), rank and world by default the worker's tensor
  parallel rank and size, every tensor whole in host buffers ferry
  allocates (Layout.hf), and commits it;
- each call pulls the requested version into those buffers (verified
  against the trainer's checksums) and hands them to
  ``model.load_weights``, which is what SGLang's own
  ``update_weights_from_tensor`` does with tensors sent inline
  (``load_format=None``): SGLang's weight loaders fuse ``qkv_proj`` and
  ``gate_up_proj``, shard for tensor parallelism and pad the vocabulary.

The trainer is any ferry writer job whose spec is the model's
(``ferry.Model.from_config(hf_config)`` with Layout.hf, or a Megatron
layout), publishing in sync mode.

Cost: one host copy of the weights per worker (ferry's buffers) and
SGLang's load_weights per update, as with SGLang's inline path, but the
bytes do not pass through the HTTP server, the tokenizer manager or the
scheduler's sockets.
"""
import json

import torch

import ferry
from ferry.adapters._torch import host_tensors

REQUEST = "ferry.request"
_KEYS = ("version", "job", "meta", "token", "transport", "timeout", "rank", "world", "dtype")
_STATE = {}  # id(model) -> {"reader", "tensors", "key", "last"}


def request(version="latest", *, job="sglang", meta=None, token=None, transport=None, timeout=60.0, rank=None,
            world=None, dtype=None):
    """The named_tensors of one update_weights_from_tensor call: pull
    ``version`` (a number, "latest" or "next", waiting up to ``timeout``
    seconds) of ferry job ``job`` from the service at ``meta``
    (``host:port``; None: FERRY_META). token, transport: as ferry.Reader's.
    rank/world: the worker's reader rank and the readers' number (default:
    its tensor parallel rank and size; give them when several engines read
    one job: rank = engine * tp_size + tp_rank). dtype: overrides the
    config's dtype in the spec."""
    body = {"version": version, "job": job, "meta": meta, "token": token, "transport": transport,
            "timeout": float(timeout), "rank": rank, "world": world, "dtype": dtype}
    data = json.dumps(body).encode()
    return [(REQUEST, torch.frombuffer(bytearray(data), dtype=torch.uint8))]


def _parse(named_tensors):
    reqs = [t for n, t in named_tensors if n == REQUEST]
    if len(reqs) != 1 or len(named_tensors) != 1:
        names = [n for n, _ in named_tensors][:3]
        raise ValueError(f"ferry sglang loader: expects exactly the one entry ferry.adapters.sglang.request() "
                         f"makes, got {len(named_tensors)} named tensors {names}")
    body = json.loads(bytes(reqs[0].cpu().to(torch.uint8).numpy().tobytes()).decode())
    unknown = set(body) - set(_KEYS)
    if unknown:
        raise ValueError(f"ferry sglang loader: unknown request keys {sorted(unknown)}")
    return body


def _tp():
    from sglang.srt.runtime_context import get_parallel  # what SGLang's WeightUpdater reads

    par = get_parallel()
    return int(par.tp_rank), int(par.tp_size)


def _reader(model, body):
    tp_rank, tp_size = _tp()
    rank = tp_rank if body.get("rank") is None else int(body["rank"])
    world = tp_size if body.get("world") is None else int(body["world"])
    key = (body["job"], body.get("meta"), rank, world, body.get("dtype"), body.get("transport"))
    st = _STATE.get(id(model))
    if st is not None and st["key"] == key:
        return st
    close(model)
    config = getattr(model, "config", None)
    if config is None:
        raise ValueError(f"ferry sglang loader: {type(model).__name__} has no .config (its Hugging Face config)")
    spec = ferry.Model.from_config(config, dtype=body.get("dtype"))
    reader = ferry.Reader(spec, job=body["job"], rank=rank, world=world, meta=body.get("meta"),
                          token=body.get("token"), transport=body.get("transport"), timeout=body["timeout"])
    try:
        tensors = host_tensors(reader, ferry.Layout.hf(spec, world), rank)
        reader.commit()
    except BaseException:
        reader.close()
        raise
    st = {"reader": reader, "tensors": tensors, "key": key, "last": None}
    _STATE[id(model)] = st
    return st


@torch.no_grad()
def load(model, named_tensors):
    """SGLang's custom weight loader (``load_format="ferry.adapters.sglang.load"``):
    pulls the version ``named_tensors`` (from request()) asks for and loads
    it with ``model.load_weights``. Raises ferry's errors (TimeoutError,
    StaleError, CorruptError, PeerLostError) and ValueError for a bad
    request; SGLang reports them to the caller."""
    body = _parse(named_tensors)
    st = _reader(model, body)
    st["last"] = st["reader"].update(body["version"], body["timeout"])
    model.load_weights(list(st["tensors"].items()))


def last_update(model):
    """The ferry.UpdateInfo of the model's latest load, or None."""
    st = _STATE.get(id(model))
    return None if st is None else st["last"]


def close(model):
    """Closes the model's ferry Reader (leaves the job), if it has one."""
    st = _STATE.pop(id(model), None)
    if st is not None:
        st["reader"].close()
