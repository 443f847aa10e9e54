"""Registering a model's own parameters: names -> layout buffers.

A layout names its buffers as the framework names its parameters: Megatron-core
for Layout.train, vLLM/SGLang for Layout.infer, the checkpoint (Hugging Face)
for Layout.hf. What differs between a module's named_parameters() and those
names is what the name maps here undo:

- wrapper components anywhere in the path: DDP/Float16Module ``module.``,
  torch.compile ``_orig_mod.``, FSDP ``_fsdp_wrapped_module.``, activation
  checkpointing ``_checkpoint_wrapped_module.``;
- Megatron pipeline stages number their layers from 0 in every model chunk:
  local layer j of chunk c is the j-th of the global layers the layout gives
  that chunk on this rank (chunks hold ascending layer ranges);
- Megatron experts: TE grouped ``mlp.experts.linear_fc1.weight{e}`` and
  SequentialMLP ``mlp.experts.local_experts.{e}.linear_fc1.weight`` are expert
  e's slice of the layout's ``mlp.experts.linear_fc1.weight`` [E_local, ...];
- a parameter that aliases one already placed (tied embeddings listed twice)
  is skipped.
Fusion itself (qkv_proj, gate_up_proj, linear_qkv, linear_fc1, w13) and vocab
padding are in the layouts, so the maps stay name-only; a parameter whose
shape or dtype disagrees with its buffer is refused naming both.
"""
import fnmatch
import re

from ferry import _ferry

NAMINGS = ("hf", "vllm", "sglang", "megatron")
_SIDE_NAMING = {"train": "megatron", "infer": "vllm", None: "hf"}
_WRAPPERS = {"module", "_orig_mod", "_fsdp_wrapped_module", "_checkpoint_wrapped_module"}
_LAYER = re.compile(r"^(decoder\.layers\.)(\d+)(\..*)$")
_TE_EXPERT = re.compile(r"^(.*\.mlp\.experts\.linear_fc[12]\.weight)(\d+)$")
_SEQ_EXPERT = re.compile(r"^(.*\.mlp\.experts)\.local_experts\.(\d+)\.(linear_fc[12]\.weight)$")


def _fail(status, msg):
    return _ferry.error(status, msg)


def _strip_wrappers(name):
    return ".".join(p for p in name.split(".") if p not in _WRAPPERS)


def _named_chunks(params):
    """[[(name, tensor), ...] per model chunk] from a module, a name->tensor
    mapping, or a list of either (Megatron virtual-pipeline chunks)."""
    if isinstance(params, (list, tuple)):
        return [_named(p) for p in params]
    return [_named(params)]


def _named(p):
    if hasattr(p, "named_parameters"):
        return list(p.named_parameters())
    if hasattr(p, "items"):
        return list(p.items())
    raise _fail(_ferry.FERRY_ERR_INVALID_ARGUMENT,
                f"register: params must be an nn.Module, a name->tensor mapping or a list of them, not {type(p).__name__}")


def _megatron_layers(buffers):
    """Global decoder layer numbers the rank holds, ascending."""
    layers = set()
    for b in buffers:
        m = _LAYER.match(b.name)
        if m:
            layers.add(int(m.group(2)))
    return sorted(layers)


def _target(naming, name, chunk, chunk_layers):
    """(buffer name, expert index or None) for a parameter name."""
    name = _strip_wrappers(name)
    if naming != "megatron":
        return name, None
    m = _LAYER.match(name)
    if m:
        local = int(m.group(2))
        layers = chunk_layers[chunk]
        if local >= len(layers):
            return name, None  # reported as unplaced, with its name
        name = f"{m.group(1)}{layers[local]}{m.group(3)}"
    m = _TE_EXPERT.match(name)
    if m:
        return m.group(1), int(m.group(2))
    m = _SEQ_EXPERT.match(name)
    if m:
        return f"{m.group(1)}.{m.group(3)}", int(m.group(2))
    return name, None


def _local_layer_count(named):
    top = -1
    for n, _ in named:
        m = _LAYER.match(_strip_wrappers(n))
        if m:
            top = max(top, int(m.group(2)))
    return top + 1


def _data_ptr(t):
    return t.data_ptr() if hasattr(t, "data_ptr") else None


def _device(t):
    """'cpu' or 'cuda:N', as the tensor's DLPack device says (pinned host
    memory is host memory; the buffer protocol is host memory)."""
    dev = getattr(t, "__dlpack_device__", None)
    if dev is None:
        return "cpu"
    kind, index = dev()
    kind = int(kind)
    if kind in (1, 3):  # kDLCPU, kDLCUDAHost
        return "cpu"
    return f"cuda:{index}" if kind == 2 else f"DLPack device ({kind}, {index})"


def _check_devices(member, placed):
    """MismatchError naming the first parameter that is not on the member's
    device (before anything is registered)."""
    want = member.device
    for bname, pname, t in placed:
        have = _device(t)
        if have != want:
            kind = "Writer" if hasattr(member, "alloc_buffer") else "Reader"
            raise _fail(_ferry.FERRY_ERR_MISMATCH,
                        f"register: parameter {pname!r} (buffer {bname!r}) is on {have}, this {kind}'s buffers are on "
                        f"{want} (its device=): move the module there, or make the {kind} with device={have!r}")


def register(member, params, layout, rank, naming=None, ignore=(), adopt=False):
    """register(member, params, layout, rank, naming=None, ignore=(), adopt=False) -> None

    Registers a module's own parameters (no copies) as `member`'s buffers and
    pieces: member is a Writer or Reader, params an nn.Module, a name->tensor
    mapping, or a list of Megatron model chunks; layout the rank's Layout;
    naming one of NAMINGS (default: 'megatron' for a train layout, 'vllm' for
    an infer layout, 'hf' for Layout.hf). ignore: glob patterns of parameter
    names ferry should not move.

    adopt=True moves the parameters into memory ferry allocates (once, now:
    their values are copied and each torch parameter, or mapping entry, is
    pointed at its new storage with `p.data = ...`; later in-place updates
    such as optimizer steps land there). On one host this is shm's fast
    path: readers map the memory instead of copying it through
    process_vm_readv (docs/python.md, "Where the tensors live"). The memory
    lives as long as the parameters do, also past the member's close(). A
    CUDA member (device=) adopts into GPU memory it allocates on its device.

    Raises NotFoundError naming a parameter the layout has no place for, or
    a buffer of the rank that no parameter fills; MismatchError naming a
    parameter whose dtype, shape or contiguity does not fit its buffer, or
    that is on another device than the member's buffers. Every check runs
    before anything is registered.
    """
    naming = naming or _SIDE_NAMING.get(layout.side, "hf")
    if naming not in NAMINGS:
        raise _fail(_ferry.FERRY_ERR_INVALID_ARGUMENT, f"register: naming {naming!r} is not one of {NAMINGS}")
    if naming == "sglang":
        naming = "vllm"  # same parameter names
    buffers = layout.buffers(rank)
    by_name = {b.name: b for b in buffers}
    chunks = _named_chunks(params)
    chunk_layers = []
    if naming == "megatron":
        layers = _megatron_layers(buffers)
        at = 0
        for named in chunks:
            n = _local_layer_count(named) if len(chunks) > 1 else len(layers)
            chunk_layers.append(layers[at:at + n])
            at += n
    whole = {}   # buffer name -> (param name, tensor)
    parts = {}   # buffer name -> {expert: (param name, tensor)}
    placed_ptrs = set()
    unplaced = []
    for c, named in enumerate(chunks):
        for pname, t in named:
            if any(fnmatch.fnmatchcase(pname, pat) for pat in ignore):
                continue
            bname, expert = _target(naming, pname, c, chunk_layers)
            if bname not in by_name:
                ptr = _data_ptr(t)
                if ptr is not None and ptr in placed_ptrs:
                    continue  # an alias of a placed parameter (tied weights)
                unplaced.append((pname, bname))
                continue
            if expert is None:
                if bname in whole or bname in parts:
                    raise _fail(_ferry.FERRY_ERR_INVALID_ARGUMENT,
                                f"register: parameters {whole[bname][0]!r} and {pname!r} both map to buffer {bname!r}")
                whole[bname] = (pname, t)
            else:
                parts.setdefault(bname, {})[expert] = (pname, t)
            ptr = _data_ptr(t)
            if ptr is not None:
                placed_ptrs.add(ptr)
    if unplaced:
        pname, bname = unplaced[0]
        more = f" (and {len(unplaced) - 1} more)" if len(unplaced) > 1 else ""
        raise _fail(_ferry.FERRY_ERR_NOT_FOUND,
                    f"register: parameter {pname!r} (as {bname!r}) has no place in the layout of rank {rank} "
                    f"(naming={naming}, {layout.parallel or 'custom'}){more}; pass ignore=[...] for parameters "
                    f"ferry should not move")
    missing = [b.name for b in buffers if b.name not in whole and b.name not in parts]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        raise _fail(_ferry.FERRY_ERR_NOT_FOUND,
                    f"register: buffer {missing[0]!r} of rank {rank} (naming={naming}) has no parameter in the "
                    f"module{more}")
    _check_devices(member, [(b, *whole[b]) for b in whole] +
                   [(b, *e) for b, ex in parts.items() for _, e in sorted(ex.items())])
    if not parts and not adopt:
        member.add_layout(layout, rank, [whole[b.name][1] for b in buffers])  # checked in C
        return
    if adopt and not hasattr(member, "alloc_buffer"):
        raise _fail(_ferry.FERRY_ERR_INVALID_ARGUMENT,
                    "register(adopt=True) is for writers: a reader writes into its own memory as fast")
    _register_parts(member, layout, rank, _plan_parts(buffers, whole, parts, adopt), adopt)


_TORCH_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64", "U8": "uint8",
                 "I8": "int8", "I16": "int16", "I32": "int32", "I64": "int64", "BOOL": "bool",
                 "F8_E4M3": "float8_e4m3fn", "F8_E5M2": "float8_e5m2"}


def _plan_parts(buffers, whole, parts, adopt):
    """{layout buffer index: [(member buffer name, param name, tensor, byte
    start in the layout buffer, bytes)]}: one part for a whole parameter,
    one per expert for a buffer split across expert parameters. Checks every
    part before anything is registered."""
    plan = {}
    for b in buffers:
        if b.name in whole:
            ents = [(b.name, *whole[b.name], 0, b.size)]
        else:
            experts = parts[b.name]
            n = b.shape[0] if b.shape else 0
            if sorted(experts) != list(range(n)):
                raise _fail(_ferry.FERRY_ERR_NOT_FOUND, f"register: buffer {b.name!r} holds {n} experts; parameters "
                                                        f"found for experts {sorted(experts)}")
            size = b.size // n
            ents = [(f"{b.name}[{e}]", *experts[e], e * size, size) for e in range(n)]
        for name, pname, t, _, size in ents:
            _check_part(b, name, pname, t, size, adopt)
        plan[b.index] = ents
    return plan


def _check_part(b, name, pname, t, size, adopt):
    is_torch = str(getattr(t, "dtype", "")).startswith("torch.")
    if adopt and not is_torch:
        raise _fail(_ferry.FERRY_ERR_INVALID_ARGUMENT, f"register(adopt=True): {pname!r} is not a torch tensor")
    if not is_torch:
        return  # add_buffer/add_piece check what the buffer protocol tells
    if not adopt and not t.is_contiguous():  # adopt copies: any layout will do
        raise _fail(_ferry.FERRY_ERR_MISMATCH, f"register: the parameter for buffer {name!r} is not contiguous")
    if str(t.dtype) != "torch." + _TORCH_DTYPES.get(b.dtype, "?"):
        raise _fail(_ferry.FERRY_ERR_MISMATCH, f"register: the parameter for buffer {name!r} is {t.dtype}, "
                                               f"the buffer {b.dtype}")
    if t.numel() * t.element_size() != size:
        raise _fail(_ferry.FERRY_ERR_MISMATCH, f"register: buffer {name!r} is {size} bytes, its parameter "
                                               f"{pname!r} {tuple(t.shape)} holds {t.numel() * t.element_size()}")


def _register_parts(member, layout, rank, plan, adopt):
    """Registers every part as a member buffer (the parameter's own storage,
    or with adopt a buffer ferry allocates) and rebases the rank's pieces
    onto the parts. With adopt, each parameter is then copied in and
    pointed there (t.data = view keeps the tensor object: optimizers and
    modules holding it see the new storage)."""
    torch = __import__("torch") if adopt else None
    index, moves = {}, []
    for bi, ents in plan.items():
        for k, (name, pname, t, start, size) in enumerate(ents):
            if adopt:
                # a HostBuffer, or a DeviceBuffer on the member's GPU: DLPack views either
                index[(bi, k)], buf = member.alloc_buffer(name, str(t.dtype)[len("torch."):], size)
                moves.append((t, torch.from_dlpack(buf).view(t.dtype).view(t.shape)))
            else:
                index[(bi, k)] = member.add_buffer(name, t)
    for p in layout.pieces(rank):
        ents = plan[p.buffer]
        k = 0 if len(ents) == 1 else p.byte_offset // ents[0][4]
        member.add_piece(p.tensor, p.offset, p.extent, index[(p.buffer, k)], p.byte_offset - ents[k][3], p.strides)
    if moves:
        with torch.no_grad():
            for t, view in moves:
                view.copy_(t)
                t.data = view
