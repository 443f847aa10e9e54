"""verl checkpoint engine "ferry" (verl.checkpoint_engine; run against
verl 0.9.1). Importing this module registers it with
CheckpointEngineRegistry, which is what verl's
``checkpoint_engine.custom_backend_module: ferry.adapters.verl`` does on
every worker before it looks the backend up.

Config (verl's CheckpointEngineConfig)::

    actor_rollout_ref.rollout.checkpoint_engine:
      backend: ferry
      custom_backend_module: ferry.adapters.verl
      engine_kwargs:
        ferry: {model: /path/to/hf_model_dir, dtype: BF16, job: rl}

How verl's calls map onto ferry. verl runs prepare -> build_topology ->
init_process_group -> send_weights / receive_weights -> finalize on every
weight update, on every actor and rollout worker. The ferry members live
across updates (created at the first one, their layouts committed once),
so an update after the first is one ferry version: the actor's rank 0 (the
worker verl makes with ``is_master=True``) runs a ferry.Writer (in sync
mode) and its metadata service; every rollout worker runs a ferry.Reader
of its own rank. Both hold the weights whole, named as the checkpoint
(Layout.hf), in host memory ferry allocated.

- ``prepare()``: the writer's service address (actor rank 0), else {}.
- ``build_topology``: actor rank 0 writes (rank 0 of 1); other actor
  ranks only walk the weights generator (gathering is collective there);
  rollout worker i is reader i of the rollout world.
- ``init_process_group(rank, world, meta)``: a reader joins the job (once:
  an unchanged topology keeps it).
- ``send_weights(weights, global_steps)``: copies every (name, tensor)
  into the writer's buffers (names, shapes checked against the spec;
  dtypes converted), then publishes the next version and waits until every
  reader has it. Other actor ranks drain the generator.
- ``receive_weights(global_steps)``: an async generator: pulls the next
  version into the reader's buffers (verified against the writer's
  checksums) and yields (name, tensor) over those buffers. The tensors are
  ferry's: the next update overwrites them, so the consumer (verl's server
  adapter) copies them, as it does with every backend's buckets.
- ``finalize()``: nothing (the members stay for the next update);
  ``close()`` ends them.

What both sides move (the spec) comes from engine_kwargs, the same on
both: ``model`` (an HF model directory, a config.json path, a dict as
config.json holds it, or a ferry bundled name; ``dtype`` overrides its
dtype) or ``tensors`` (``[[name, dtype, shape], ...]``). Also: ``job``,
``meta`` (where actor rank 0 serves, ``host:port``, default
127.0.0.1 and a free port: set it to an address rollout hosts reach),
``advertise`` (the address readers dial, when meta binds a wildcard),
``token``, ``transport``, ``timeout`` (seconds), as ferry's Writer and
Reader take them. ``bucket_size`` is accepted and unused (ferry plans its
own transfers).
"""
import asyncio
import os

import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry

import ferry
from ferry.adapters._torch import host_tensors, spec_from_tensors

BACKEND = "ferry"


def _spec(job, model, tensors, dtype):
    if (model is None) == (tensors is None):
        raise ValueError("ferry checkpoint engine: give engine_kwargs either model (an HF model directory, "
                         "config.json, config dict or bundled name) or tensors ([[name, dtype, shape], ...])")
    if tensors is not None:
        return spec_from_tensors(job, tensors)
    if isinstance(model, (str, os.PathLike)) and os.path.isdir(model):
        model = os.path.join(model, "config.json")
    if not isinstance(model, (str, os.PathLike)):
        model = dict(model)  # an OmegaConf DictConfig from verl's config
    return ferry.Model.from_config(model, dtype=dtype)


@CheckpointEngineRegistry.register(BACKEND)
class FerryCheckpointEngine(CheckpointEngine):
    """A verl CheckpointEngine over a ferry Writer (actor rank 0) and
    Readers (rollout workers); see the module docstring. ``version`` is
    the last version sent or received, ``last_info`` its
    ferry.PublishInfo / ferry.UpdateInfo."""

    wire_format = "named_tensors"

    def __init__(self, bucket_size: int = 0, is_master: bool = False, *, model=None, tensors=None, dtype=None,
                 job: str = "verl", meta: str = "127.0.0.1:0", advertise=None, token=None, transport=None, timeout: float = 300.0):
        self.bucket_size = bucket_size
        self.is_master = is_master
        self.spec = _spec(job, model, tensors, dtype)
        self.advertise = advertise
        self.job, self.meta, self.token, self.transport, self.timeout = job, meta, token, transport, timeout
        self.writer = None
        self.reader = None
        self.reader_key = None
        self.rank = None
        self.tensors = {}
        self.version = 0
        self.last_info = None

    def prepare(self):
        if not self.is_master:
            return {}
        if self.writer is None:
            writer = ferry.Writer(self.spec, job=self.job, rank=0, world=1, meta=self.meta, serve=True,
                                  token=self.token, transport=self.transport, timeout=self.timeout)
            try:
                self.tensors = host_tensors(writer, ferry.Layout.hf(self.spec), 0)
                writer.commit()
            except BaseException:
                writer.close()
                self.tensors = {}
                raise
            self.writer = writer
        return {"ferry_meta": self.advertise or self.writer.service_address}

    @classmethod
    def build_topology(cls, actor_wg_world_size, rollout_world_size, metadata):
        meta = metadata[0].get("ferry_meta") if metadata else None
        if not meta:
            raise ValueError("ferry checkpoint engine: actor rank 0 (is_master=True) gave no service address")
        actor = {"rank": [0] + [-1] * (actor_wg_world_size - 1), "world": [1] * actor_wg_world_size,
                 "meta": [meta] * actor_wg_world_size}
        rollout = {"rank": list(range(rollout_world_size)), "world": [rollout_world_size] * rollout_world_size,
                   "meta": [meta] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank, world, meta, **kwargs):
        self.rank = rank
        if self.is_master or rank < 0:
            return
        key = (rank, world, meta)
        if self.reader is not None and self.reader_key == key:
            return  # the same job as last update: the committed layout stays
        self._close_reader()
        reader = ferry.Reader(self.spec, job=self.job, rank=rank, world=world, meta=meta, token=self.token,
                              transport=self.transport, timeout=self.timeout)
        try:
            self.tensors = host_tensors(reader, ferry.Layout.hf(self.spec, world), rank)
            reader.commit()
        except BaseException:
            reader.close()
            self.tensors = {}
            raise
        self.reader, self.reader_key = reader, key

    @torch.no_grad()
    async def send_weights(self, weights, global_steps=None):
        if not self.is_master:
            if self.reader is not None:
                raise RuntimeError("ferry checkpoint engine: a rollout worker cannot send weights")
            for _ in weights:  # producing each weight may be collective over the actor group
                pass
            return
        if self.writer is None:
            raise RuntimeError("ferry checkpoint engine: send_weights before prepare")
        seen = set()
        for name, t in weights:
            dst = self.tensors.get(name)
            if dst is None:
                raise KeyError(f"ferry checkpoint engine: weight {name!r} is not in the spec "
                               f"({len(self.tensors)} tensors, e.g. {next(iter(self.tensors), None)!r})")
            if tuple(t.shape) != tuple(dst.shape):
                raise ValueError(f"ferry checkpoint engine: weight {name!r} has shape {tuple(t.shape)}, "
                                 f"the spec says {tuple(dst.shape)}")
            dst.copy_(t.detach())
            seen.add(name)
        missing = set(self.tensors) - seen
        if missing:
            raise ValueError(f"ferry checkpoint engine: the weights lacked {len(missing)} tensors of the spec, "
                             f"e.g. {sorted(missing)[:3]}")
        version = self.version + 1
        # sync publish: returns once every reader verified the version
        info = await asyncio.to_thread(self.writer.publish, version)
        self.version, self.last_info = version, info
        if info.readers_missing:
            raise RuntimeError(f"ferry checkpoint engine: version {version}: {info.readers_missing} rollout "
                               f"readers did not acknowledge ({info.readers_acked} did)")
        return {}

    async def receive_weights(self, global_steps=None):
        if self.reader is None:
            raise RuntimeError("ferry checkpoint engine: receive_weights on a worker without a reader "
                               "(init_process_group gave it no rollout rank)")
        info = await asyncio.to_thread(self.reader.update, "next", self.timeout)
        self.version, self.last_info = info.version, info
        for name, t in self.tensors.items():
            yield name, t

    def finalize(self):
        """Nothing: the ferry members stay for the next update."""

    def _close_reader(self):
        if self.reader is not None:
            self.reader.close()
            self.reader, self.reader_key = None, None
            self.tensors = {}

    def close(self):
        """Leaves the job: closes the writer or reader."""
        self._close_reader()
        if self.writer is not None:
            self.writer.close()
            self.writer = None
            self.tensors = {}
