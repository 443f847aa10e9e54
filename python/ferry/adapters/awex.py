"""Awex weight exchange over ferry: ``comm_backend="ferry"`` (run against
awex 0.9.0).

Awex has no backend registry: it picks its transport by if/elif on the
``comm_backend`` string in three places. ``install()`` (idempotent) makes
"ferry" resolve to this module's classes by patching exactly these, and
nothing else:

- ``awex.config._VALID_COMM_BACKENDS``: a frozenset that
  ``InferenceConfig.validate()`` checks; replaced by one with "ferry" added.
- ``awex.writer.weights_writer.get_weights_exchange_writer`` and the name
  ``awex.engine.mcore`` imported from it: wrapped; ``comm_backend ==
  "ferry"`` gives a ``FerryWeightsWriter``, anything else goes to awex's
  own function.
- ``awex.reader.weights_reader.WeightsReader._init_in_tp_worker`` (the
  function awex runs in every inference worker to make its worker reader):
  replaced by ``_init_in_tp_worker`` here, which makes a
  ``FerryWorkerWeightsReader`` for "ferry" (repeating what awex's own does
  for its backends: unpickle the metas, set the engine config's
  comm_backend, construct, initialize, keep it as
  ``scheduler.awes_weights_reader``) and calls awex's original otherwise.

Call ``install()`` in the trainer processes and in the inference engine's
driver process before awex makes its writer or reader. The worker
function reaches SGLang's scheduler processes by cloudpickle, by
reference to this module, so they need ferry installed, not install().
vLLM's awex plugin looks ``WeightsReader._init_in_tp_worker`` up inside
its worker processes: there install() must run in the workers too.

How awex's calls map onto ferry. One ferry sync job per awex setup; the
spec is awex's inference parameter metas (Hugging Face names, the
engine's dtypes, global shapes), which both sides hold after awex's own
initialization. Each training rank is writer ``rank_info.global_rank``
of ``training_world_size``; each inference worker is reader
``transfer_rank`` of ``infer_world_size`` (awex's numbering). Training
rank 0 runs ferry's metadata service and puts ``{"job", "meta",
"transport"}`` on awex's meta server under ``"ferry_job"``, where the
other ranks and the readers find it.

- ``FerryWeightsWriter`` (a ``WeightsExchangeShardingWriter``):
  ``_initialize`` runs awex's (metas, converter) and then makes the ferry
  Writer with one ferry-allocated host buffer per local shard of a
  parameter the engines hold, placed at the shard's ``global_offset``.
  ``write_tensors(step_id, tensor_pairs)`` copies each converted tensor
  into its buffer (shape checked, dtype converted to the engine's);
  ``finish_step(step_id)`` checks every buffer was written, publishes
  ferry version ``step_id + 1`` (ferry versions start at 1; awex steps at
  0) and waits until every reader verified it; it raises if one did not.
- ``FerryWorkerWeightsReader`` (a ``WorkerWeightsReader``):
  ``initialize`` runs awex's (the converter's Hugging Face views of the
  engine's parameters, e.g. ``q_proj`` rows of SGLang's fused
  ``qkv_proj``) and registers those views themselves with a ferry Reader:
  ferry writes the engine's own parameter memory, no copy, no load step.
  ``read_tensors(step_id, tensor_pairs)`` pulls version ``step_id + 1``
  in place, verified against the writers' checksums; it raises if the
  engine has moved its parameters since (``enable_colocate_mode``, which
  frees and reallocates them, is refused for that reason).

Settings: the training engine's config dict (awex's ``config``) may hold
``ferry: {job, meta, advertise, token, transport, timeout, threads}``:
``meta`` is where rank 0 serves (``host:port``, default 127.0.0.1 and a
free port; set it to an address engines reach), ``advertise`` the address
readers dial when ``meta`` binds a wildcard, ``timeout`` seconds (default
300). Readers take the job, address and transport from the meta server;
the token from FERRY_TOKEN / FERRY_TOKEN_FILE (never put on the meta
server).
"""
import torch
import awex.config as _awex_config
import awex.reader.weights_reader as _awex_reader
import awex.writer.weights_writer as _awex_writer
from awex.reader.weights_reader import WorkerWeightsReader
from awex.writer.weights_writer import WeightsExchangeShardingWriter

import ferry
from ferry.adapters._torch import dtype_name, spec_from_tensors, torch_dtype

BACKEND = "ferry"
META_KEY = "ferry_job"  # awex meta server key: the ferry job's address

_ORIG = {}


def _spec(job, params_meta):
    """The job's spec from awex ParameterMetas (sorted by name: both sides
    get the same one whatever order their lists are in)."""
    return spec_from_tensors(job, sorted((p.name, p.dtype, p.global_shape) for p in params_meta))


def _offset(shard):
    off = tuple(int(o) for o in shard.global_offset)
    if not off:
        return (0,) * len(shard.shape)  # awex leaves it empty for an unsharded parameter
    if len(off) != len(shard.shape):
        raise ValueError(f"ferry awex: shard of {shard.name!r} has offset {off} for shape {tuple(shard.shape)}")
    return off


def _strides(shape):
    out, s = [], 1
    for d in reversed(shape):
        out.append(s)
        s *= int(d)
    return tuple(out[::-1])


def _version(step_id):
    if int(step_id) < 0:
        raise ValueError(f"ferry awex: step_id {step_id}: steps must be >= 0 (set_global_step before exchanging "
                         f"weights); ferry version = step_id + 1")
    return int(step_id) + 1


class FerryWeightsWriter(WeightsExchangeShardingWriter):
    """Training side of comm_backend="ferry" (see the module docstring).
    ``version`` is the last ferry version published, ``last_publish`` its
    ferry.PublishInfo."""

    def __init__(self, train_engine):
        super().__init__(train_engine)
        if self.enable_colocate_mode:
            raise ValueError("ferry awex: enable_colocate_mode is not supported (it frees and reallocates weights)")
        self.ferry_conf = dict(self.config.get("ferry") or {})
        self.ferry_writer = None
        self.ferry_buffers = {}
        self._written = set()
        self.version = 0
        self.last_publish = None

    def _initialize(self):
        super()._initialize()
        self._ferry_setup()

    def _ferry_setup(self):
        """Makes this rank's ferry Writer over one buffer per local shard
        (needs awex's infer_params_meta, current_worker_parameters_meta,
        rank_info and meta_server_client, which _initialize sets)."""
        conf = self.ferry_conf
        rank, world = self.rank_info.global_rank, self.training_world_size
        timeout = float(conf.get("timeout", 300.0))
        if rank == 0:
            job, meta, transport = conf.get("job", "awex"), conf.get("meta", "127.0.0.1:0"), conf.get("transport")
        else:
            info = self.meta_server_client.get_object(META_KEY, timeout=self.timeout)
            job, meta, transport = info["job"], info["meta"], info.get("transport")
        infer_meta = {p.name: p for p in self.infer_params_meta}
        spec = _spec(job, self.infer_params_meta)
        writer = ferry.Writer(spec, job=job, rank=rank, world=world, meta=meta, serve=(rank == 0),
                              token=conf.get("token"), transport=transport, timeout=timeout,
                              **({"threads": conf["threads"]} if "threads" in conf else {}))
        try:
            bufs = {}
            for p in self.current_worker_parameters_meta:
                if p.name not in infer_meta or not p.shards:
                    continue  # a training-only parameter, or none of it on this rank
                shard = p.shards[0]
                dt = torch_dtype(dtype_name(infer_meta[p.name].dtype))
                shape = tuple(int(d) for d in shard.shape)
                nbytes = int(shard.numel) * dt.itemsize
                index, buf = writer.alloc_buffer(p.name, dtype_name(dt), nbytes)
                writer.add_piece(p.name, _offset(shard), shape, index, 0, _strides(shape))
                bufs[p.name] = torch.from_dlpack(buf).view(dt).view(shape)
            writer.commit()
        except BaseException:
            writer.close()
            raise
        self.ferry_writer, self.ferry_buffers = writer, bufs
        self.ferry_timeout = timeout
        if rank == 0:
            self.meta_server_client.put_object(
                META_KEY, {"job": job, "meta": conf.get("advertise") or writer.service_address, "transport": transport,
                           "timeout": timeout})

    @torch.no_grad()
    def write_tensors(self, step_id, tensor_pairs, **kwargs):
        for name, tensor, shard, _meta in tensor_pairs:
            dst = self.ferry_buffers.get(name)
            if dst is None:
                continue  # not a parameter the engines hold
            if tuple(tensor.shape) != tuple(dst.shape):
                raise ValueError(f"ferry awex: {name!r} is {tuple(tensor.shape)}, its shard meta says "
                                 f"{tuple(dst.shape)}")
            dst.copy_(tensor.detach())
            self._written.add(name)

    def finish_step(self, step_id):
        version = _version(step_id)
        missing = set(self.ferry_buffers) - self._written
        self._written = set()
        if missing:
            raise ValueError(f"ferry awex: step {step_id}: {len(missing)} local shards were not written, e.g. "
                             f"{sorted(missing)[:3]}")
        info = self.ferry_writer.publish(version)  # sync: returns once every reader verified it
        self.version, self.last_publish = version, info
        if info.readers_missing:
            raise RuntimeError(f"ferry awex: version {version} (step {step_id}): {info.readers_missing} readers did "
                               f"not acknowledge ({info.readers_acked} did)")

    def close(self):
        """Leaves the ferry job (closes the Writer)."""
        if self.ferry_writer is not None:
            self.ferry_writer.close()
            self.ferry_writer = None
            self.ferry_buffers = {}


class FerryWorkerWeightsReader(WorkerWeightsReader):
    """Inference-worker side of comm_backend="ferry" (see the module
    docstring). ``last_update`` is the ferry.UpdateInfo of the latest
    read."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.enable_colocate_mode:
            raise ValueError("ferry awex: enable_colocate_mode is not supported (it frees and reallocates weights)")
        self.ferry_reader = None
        self.ferry_ptrs = {}
        self.last_update = None

    def initialize(self):
        super().initialize()
        info = self.meta_server_client.get_object(META_KEY, timeout=self.timeout)
        spec = _spec(info["job"], self.parameters_meta)
        reader = ferry.Reader(spec, job=info["job"], rank=self.transfer_rank, world=self.infer_world_size,
                              meta=info["meta"], transport=info.get("transport"),
                              timeout=float(info.get("timeout", 300.0)))
        try:
            ptrs = {}
            for p in self.current_worker_parameters_meta:
                if not p.shards:
                    continue
                shard = p.shards[0]
                view = self.parameters[p.name]
                if tuple(view.shape) != tuple(shard.shape):
                    raise ValueError(f"ferry awex: engine view {p.name!r} is {tuple(view.shape)}, its shard meta "
                                     f"says {tuple(shard.shape)}")
                # the view itself: ferry writes the engine's parameter memory
                b = reader.add_buffer(p.name, view)
                reader.add_piece(p.name, _offset(shard), tuple(view.shape), b, 0, tuple(view.stride()))
                ptrs[p.name] = view.data_ptr()
            reader.commit()
        except BaseException:
            reader.close()
            raise
        self.ferry_reader, self.ferry_ptrs = reader, ptrs
        self.ferry_timeout = float(info.get("timeout", 300.0))

    def read_tensors(self, step_id, tensor_pairs, **kwargs):
        for name, parameter, _shard, _meta in tensor_pairs:
            want = self.ferry_ptrs.get(name)
            if want is not None and parameter.data_ptr() != want:
                raise RuntimeError(f"ferry awex: the engine moved parameter {name!r} since the ferry reader "
                                   f"registered it (offload/reload?); ferry would update the old memory")
        self.last_update = self.ferry_reader.update(_version(step_id), self.ferry_timeout)

    def finish_step(self, step_id):
        """Nothing: read_tensors verified the version."""

    def close(self):
        """Leaves the ferry job (closes the Reader)."""
        if self.ferry_reader is not None:
            self.ferry_reader.close()
            self.ferry_reader = None


def get_weights_exchange_writer(train_engine):
    """awex's get_weights_exchange_writer, with comm_backend "ferry"."""
    if getattr(train_engine, "comm_backend", None) == BACKEND:
        return FerryWeightsWriter(train_engine)
    return _ORIG["get_weights_exchange_writer"](train_engine)


def _init_in_tp_worker(infer_conf_bytes, parameters_meta_bytes, training_params_meta_bytes, engine_rank, num_engines,
                       meta_server_addr, weights_comm_backend, debug_mode_config, disable_pipeline,
                       enable_colocate_mode, ipc_backend, **kwargs):
    """WeightsReader._init_in_tp_worker with comm_backend "ferry": what
    awex's does for its backends, with FerryWorkerWeightsReader."""
    if weights_comm_backend != BACKEND:
        orig = _ORIG.get("_init_in_tp_worker") or _awex_reader.WeightsReader.__dict__["_init_in_tp_worker"].__func__
        return orig(infer_conf_bytes, parameters_meta_bytes, training_params_meta_bytes, engine_rank, num_engines,
                    meta_server_addr, weights_comm_backend, debug_mode_config, disable_pipeline, enable_colocate_mode,
                    ipc_backend, **kwargs)
    import pickle

    model_context = kwargs["model_context"]
    infer_conf = pickle.loads(infer_conf_bytes)
    engine_config = model_context.get("infer_engine_config")
    if isinstance(engine_config, dict):
        engine_config["comm_backend"] = weights_comm_backend
    elif engine_config is not None:
        engine_config.comm_backend = weights_comm_backend
    reader = FerryWorkerWeightsReader(
        engine_name=infer_conf.get("engine_name", "sglang"), model=kwargs["model"], model_context=model_context,
        infer_conf=infer_conf, engine_rank=engine_rank, num_engines=num_engines, meta_server_addr=meta_server_addr,
        parameters_meta=pickle.loads(parameters_meta_bytes),
        training_params_meta=pickle.loads(training_params_meta_bytes),
        enable_debug_mode=kwargs.get("enable_debug_mode", False), debug_mode_config=debug_mode_config,
        disable_pipeline=disable_pipeline, enable_colocate_mode=enable_colocate_mode, ipc_backend=ipc_backend,
        weights_comm_nccl_group_size=kwargs.get("weights_comm_nccl_group_size"))
    model_context["scheduler"].awes_weights_reader = reader
    reader.initialize()


def install():
    """Makes awex resolve comm_backend="ferry" to this module's writer and
    worker reader (patches listed in the module docstring). Idempotent;
    returns nothing."""
    if _ORIG:
        return
    _ORIG["get_weights_exchange_writer"] = _awex_writer.get_weights_exchange_writer
    _ORIG["_init_in_tp_worker"] = _awex_reader.WeightsReader.__dict__["_init_in_tp_worker"].__func__
    _awex_config._VALID_COMM_BACKENDS = frozenset(_awex_config._VALID_COMM_BACKENDS | {BACKEND})
    _awex_writer.get_weights_exchange_writer = get_weights_exchange_writer
    import awex.engine.mcore as _mcore

    _mcore.get_weights_exchange_writer = get_weights_exchange_writer
    _awex_reader.WeightsReader._init_in_tp_worker = staticmethod(_init_in_tp_worker)


def installed():
    """True once install() ran in this process."""
    return bool(_ORIG)
