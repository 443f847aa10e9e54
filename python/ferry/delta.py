"""ferry.delta: lossless sparse deltas between two versions of a tensor.

A delta turns a region's base bit patterns into its next ones exactly:
elements are compared as integers, never as floats, so -0/+0, NaN payloads
and infinities round-trip. Between RL steps only a few percent of bf16
elements change, mostly by one ulp, so a delta is a small fraction of a byte
per element (docs/delta-format.md gives the format).

A region is a C-contiguous tensor (torch, numpy, anything with __dlpack__ or
the buffer protocol) taken as a flat run of elements; the codec takes BF16,
F16, F32, F8_E4M3 and F8_E5M2. Integer storage of the same element size
(int16 holding bf16 bits, uint8 holding fp8) is accepted where a dtype is
given, and by apply/apply_file as the delta's dtype. Deltas are bytes;
anything with the buffer protocol (bytes, bytearray, memoryview, a numpy
uint8 array) is accepted as one.

Every call makes its own codec: calls from several threads run in parallel
(encode, apply, inspect and the file calls release the GIL). Errors are
ferry.Error subclasses carrying the C library's detail text.
"""
from ferry import _ferry
from ferry._ferry import DeltaInfo  # noqa: F401

#: Elements per chunk by default, and the bounds of chunk_elems (a power of two).
CHUNK_DEFAULT = _ferry.DELTA_CHUNK_DEFAULT
CHUNK_MIN = _ferry.DELTA_CHUNK_MIN
CHUNK_MAX = _ferry.DELTA_CHUNK_MAX
#: Most magnitude classes a chunk's values are coded with (max_classes).
CLASSES_MAX = _ferry.DELTA_CLASSES_MAX

__all__ = ["DeltaInfo", "encode", "apply", "inspect", "peek", "bound", "region_sum", "encode_file", "apply_file",
           "CHUNK_DEFAULT", "CHUNK_MIN", "CHUNK_MAX", "CLASSES_MAX"]


def encode(base, next, base_version=0, next_version=0, chunk_elems=None, max_classes=None, *, dtype=None,
           format=None):
    """encode(base, next, base_version=0, next_version=0, chunk_elems=None, max_classes=None, *, dtype=None,
    format=None) -> bytes

    The delta turning base into next: two C-contiguous tensors of the same
    dtype and shape. base_version and next_version are recorded in it (apply
    can insist on the base's). chunk_elems: elements per independently coded
    and checksummed chunk, a power of two in [CHUNK_MIN, CHUNK_MAX] (default
    CHUNK_DEFAULT); max_classes: 1..CLASSES_MAX magnitude classes (default
    the most; 1 codes positions without looking at the base). dtype
    reinterprets both tensors' elements (int16 storage as "BF16"). format:
    1 (the default) or 2, whose class streams restart at sub-blocks so a GPU
    decodes them in parallel (about 2% larger; docs/delta-format.md).

    Raises InvalidArgumentError (a dtype the codec does not take, a strided
    tensor, chunk_elems out of range, a format other than 1 or 2),
    MismatchError (base and next differ in dtype or shape). Releases the GIL.
    """
    return _ferry.delta_encode(base, next, base_version, next_version, chunk_elems, max_classes, dtype, format)


def apply(delta, region, base_version=None, *, dtype=None):
    """apply(delta, region, base_version=None, *, dtype=None) -> DeltaInfo

    Applies delta in place onto region (C-contiguous, writable, the delta's
    dtype or integer storage of its size, as many elements as the delta's),
    verifying every chunk's result. All or nothing: on any error the region is
    exactly as before. base_version: the version region holds; None skips that
    check. Returns what the delta held (as peek gives it).

    Raises MismatchError (the delta is for another base: version, size, dtype
    or contents), CorruptError (its bytes are damaged), UnsupportedError (a
    format version this build does not read). Releases the GIL.
    """
    return _ferry.delta_apply(delta, region, base_version, dtype)


def inspect(delta):
    """inspect(delta) -> DeltaInfo

    Checks a delta's framing and every checksum that needs no base, walks
    every coded stream and reports what it holds, with the split of bytes
    between positions and values. Costs about as much as applying it.
    Raises CorruptError naming what is wrong. Releases the GIL.
    """
    return _ferry.delta_inspect(delta)


def peek(delta):
    """peek(delta) -> DeltaInfo

    What a caller checks before applying, cheaply: the frame header, chunk
    table and chunk headers only (dtype, elems, versions, changed count);
    bytes_positions and bytes_values are 0. A delta that peeks well may still
    be refused as CorruptError by apply, which leaves the region as it was.
    Raises CorruptError or UnsupportedError.
    """
    return _ferry.delta_peek(delta)


def bound(dtype, elems, chunk_elems=None):
    """bound(dtype, elems, chunk_elems=None) -> int: the largest delta encode can make for elems elements."""
    return _ferry.delta_bound(dtype, elems, chunk_elems)


def region_sum(region, chunk_elems=None, *, dtype=None):
    """region_sum(region, chunk_elems=None, *, dtype=None) -> int

    The checksum deltas record for a region's contents (DeltaInfo.base_sum,
    next_sum): xxh3 over the xxh3 of each chunk. Compare it with a delta's
    base_sum to see whether a tensor is the delta's base without applying it.
    """
    return _ferry.delta_region_sum(region, chunk_elems, dtype)


def encode_file(base, next, base_version, next_version, metadata=None):
    """encode_file(base, next, base_version, next_version, metadata=None) -> bytes

    A delta file for a whole set of tensors: base and next are dicts
    name -> tensor (C-contiguous) with the same names, dtypes and shapes. The
    file is a safetensors file (metadata format "ferry_delta"), in next's
    order: per tensor a U8 tensor holding its delta frame, or the next tensor
    whole for dtypes the codec does not take (integers, F64). metadata (a
    dict str -> str) is recorded as next's own safetensors metadata
    ("next_metadata"), as `ferry delta encode` does.

    Raises MismatchError (names, dtypes or shapes differ), InvalidArgumentError.
    Releases the GIL.
    """
    return _ferry.delta_encode_file(base, next, base_version, next_version, metadata)


def apply_file(data, tensors, base_version=None):
    """apply_file(data, tensors, base_version=None)

    Applies a delta file (bytes-like) in place onto tensors, a dict
    name -> tensor (C-contiguous, writable) holding every tensor of the file
    with its dtype and shape (more are fine). All or nothing: on any error
    every tensor is as before. base_version: the version the tensors hold;
    None skips that check.

    Raises MismatchError (another base), CorruptError (damaged), NotFoundError
    (a tensor of the file is missing). Releases the GIL.
    """
    return _ferry.delta_apply_file(data, tensors, base_version)
