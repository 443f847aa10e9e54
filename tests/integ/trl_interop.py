#!/usr/bin/python3
"""TRL sparse-patch interop, written from the format's description alone
(stdlib only): reads a patch that `ferry delta encode --format trl-*` wrote
and checks its metadata and that it turns BASE into NEXT; then writes its own
patch (gap_delta, uint16 gaps where they fit) for ferry to apply.

usage: trl_interop.py check BASE NEXT PATCH
       trl_interop.py write BASE NEXT PATCH_OUT"""
import json
import struct
import sys

SIZES = {"BF16": 2, "F16": 2, "F32": 4, "I32": 4, "U16": 2, "U32": 4, "U8": 1}


def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack_from("<Q", blob, 0)
    header = json.loads(blob[8:8 + n].decode("utf-8"))
    data = blob[8 + n:]
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        tensors[name] = (t["dtype"], t["shape"], data[b:e])
    return meta, tensors


def fail(msg):
    print("trl_interop: " + msg)
    sys.exit(1)


def check(base_p, next_p, patch_p):
    _, base = read(base_p)
    _, nxt = read(next_p)
    meta, patch = read(patch_p)
    for key in ("format", "version", "sparse", "model_version", "num_changed_params",
                "total_changed_elements", "total_elements", "sparsity", "encoding"):
        if key not in meta or not isinstance(meta[key], str):
            fail("metadata %s missing or not a string" % key)
    if meta["format"] != "sparse_weight_patch" or meta["sparse"] != "True":
        fail("format/sparse metadata: %r" % meta)
    enc = meta["encoding"]
    if enc not in ("raw", "gap_delta"):
        fail("encoding %r" % enc)
    changed_total, params = 0, 0
    for name, (dtype, shape, raw) in base.items():
        idx = patch.get(name + ".idx")
        val = patch.get(name + ".val")
        out = bytearray(raw)
        esz = SIZES[dtype]
        if idx is not None:
            params += 1
            idt, ishape, ib = idx
            vdt, vshape, vb = val
            if vdt != dtype or ishape != vshape or len(ishape) != 1:
                fail("%s: idx/val shapes or value dtype" % name)
            if enc == "raw" and idt != "I32":
                fail("%s: raw indices must be I32, are %s" % (name, idt))
            if enc == "gap_delta" and idt not in ("U16", "U32"):
                fail("%s: gaps must be U16/U32, are %s" % (name, idt))
            fmt = {"I32": "i", "U16": "H", "U32": "I"}[idt]
            ids = struct.unpack("<%d%s" % (ishape[0], fmt), ib)
            pos = 0
            for k, v in enumerate(ids):
                pos = (pos + v if k else v) if enc == "gap_delta" else v
                out[pos * esz:(pos + 1) * esz] = vb[k * esz:(k + 1) * esz]
            changed_total += ishape[0]
        if bytes(out) != nxt[name][2]:
            fail("%s: base + patch != next" % name)
    if int(meta["total_changed_elements"]) != changed_total or int(meta["num_changed_params"]) != params:
        fail("counts in metadata do not match the tensors")
    total = sum(len(t[2]) // SIZES[t[0]] for t in base.values())
    if int(meta["total_elements"]) != total:
        fail("total_elements %s, expected %d" % (meta["total_elements"], total))
    if abs(float(meta["sparsity"]) - (1 - changed_total / total)) > 1e-6:
        fail("sparsity %s" % meta["sparsity"])
    print("trl_interop: %s turns BASE into NEXT (%d changed elements, %s)" % (patch_p, changed_total, enc))


def write(base_p, next_p, out_p):
    _, base = read(base_p)
    _, nxt = read(next_p)
    header, blobs, at, changed, total = {}, [], 0, 0, 0
    for name, (dtype, shape, raw) in base.items():
        esz = SIZES[dtype]
        nraw = nxt[name][2]
        n = len(raw) // esz
        total += n
        ids = [i for i in range(n) if raw[i * esz:(i + 1) * esz] != nraw[i * esz:(i + 1) * esz]]
        if not ids:
            continue
        gaps = [ids[0]] + [b - a for a, b in zip(ids, ids[1:])]
        idt, fmt = ("U16", "H") if max(gaps) <= 0xFFFF else ("U32", "I")
        ib = struct.pack("<%d%s" % (len(gaps), fmt), *gaps)
        vb = b"".join(nraw[i * esz:(i + 1) * esz] for i in ids)
        for suffix, dt, blob in ((".idx", idt, ib), (".val", dtype, vb)):
            header[name + suffix] = {"dtype": dt, "shape": [len(ids)], "data_offsets": [at, at + len(blob)]}
            blobs.append(blob)
            at += len(blob)
        changed += len(ids)
    header["__metadata__"] = {
        "format": "sparse_weight_patch", "version": "1", "sparse": "True", "model_version": "5",
        "num_changed_params": str(len(blobs) // 2), "total_changed_elements": str(changed),
        "total_elements": str(total), "sparsity": str(1 - changed / total), "encoding": "gap_delta"}
    text = json.dumps(header).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(out_p, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print("trl_interop: wrote %s (%d changed elements)" % (out_p, changed))


if __name__ == "__main__":
    if len(sys.argv) != 5 or sys.argv[1] not in ("check", "write"):
        print(__doc__)
        sys.exit(2)
    (check if sys.argv[1] == "check" else write)(*sys.argv[2:])
