/* ferry.Plan: the resharding planner (plan.h) over two Layouts: the byte
 * copies that move every destination piece's elements from the source
 * ranks that hold them, for inspecting and reporting a resharding. */
#include <string.h>

#include "pyferry.h"

typedef struct pyf_plan {
    PyObject_HEAD
    ferry_ctx_t *ctx;
    ferry_plan_t *plan;
    PyObject *src, *dst; /* the Layouts: kept alive for verify() and names */
    int busy;
} pyf_plan_t;

static PyTypeObject *CopyOp, *PlanBucket, *PlanPair;

static const ferry_layout_t *lay(PyObject *o) { return ((pyf_layout_t *)o)->layout; }

static void plan_dealloc(pyf_plan_t *p) {
    ferry_plan_destroy(p->plan);
    ferry_ctx_destroy(p->ctx);
    Py_XDECREF(p->src);
    Py_XDECREF(p->dst);
    Py_TYPE(p)->tp_free((PyObject *)p);
}

/* Host labels, one per rank of a layout. */
static bool hosts_arg(PyObject *o, const char *what, uint32_t world, uint32_t **out) {
    *out = NULL;
    if (o == Py_None) return true;
    PyObject *seq = PySequence_Fast(o, "hosts must be a sequence of ints (one label per rank)");
    if (!seq) return false;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    bool ok = true;
    if (n != (Py_ssize_t)world) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: %zd labels for %u ranks (one per rank)", what, n, world);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        ok = false;
    } else if (!(*out = PyMem_Calloc(world ? world : 1, sizeof **out))) {
        PyErr_NoMemory();
        ok = false;
    }
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        uint64_t v;
        char label[80];
        snprintf(label, sizeof label, "%s[%zd]", what, i);
        if (!pyf_u64_arg(PySequence_Fast_GET_ITEM(seq, i), label, &v)) ok = false;
        else if (v > UINT32_MAX) {
            char msg[120];
            snprintf(msg, sizeof msg, "%s: host labels are in [0, 2**32)", label);
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
            ok = false;
        } else
            (*out)[i] = (uint32_t)v;
    }
    Py_DECREF(seq);
    if (!ok) {
        PyMem_Free(*out);
        *out = NULL;
    }
    return ok;
}

static PyObject *plan_new(PyTypeObject *cls, PyObject *args, PyObject *kw) {
    static char *kws[] = {"src_layout", "dst_layout", "bucket_bytes", "pack_below", "src_hosts", "dst_hosts",
                          "src_rank", "dst_rank", "pack_limit", NULL};
    PyObject *src, *dst, *bucket = Py_None, *pack = Py_None, *src_hosts_o = Py_None, *dst_hosts_o = Py_None,
                         *src_rank = Py_None, *dst_rank = Py_None, *limit = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!O!|$OOOOOOO:Plan", kws, &pyf_LayoutType, &src, &pyf_LayoutType, &dst,
                                     &bucket, &pack, &src_hosts_o, &dst_hosts_o, &src_rank, &dst_rank, &limit))
        return NULL;
    ferry_plan_params_t pp = {.field_mask = 0};
    if (src_rank != Py_None && dst_rank != Py_None)
        return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "Plan: src_rank or dst_rank (a local plan is one side's)");
    if (src_rank != Py_None || dst_rank != Py_None) {
        bool dst_side = dst_rank != Py_None;
        uint64_t r;
        if (!pyf_u64_arg(dst_side ? dst_rank : src_rank, dst_side ? "dst_rank" : "src_rank", &r)) return NULL;
        uint32_t world = ferry_layout_world_size(lay(dst_side ? dst : src));
        if (r >= world) {
            char msg[120];
            snprintf(msg, sizeof msg, "Plan: %s %llu: the layout has %u ranks", dst_side ? "dst_rank" : "src_rank",
                     (unsigned long long)r, world);
            return pyf_raise(FERRY_ERR_NOT_FOUND, msg);
        }
        pp.field_mask |= FERRY_PLAN_PARAM_ONLY;
        pp.only_side = dst_side ? FERRY_SIDE_INFER : FERRY_SIDE_TRAIN;
        pp.only_rank = (uint32_t)r;
    }
    if (bucket != Py_None) {
        if (!pyf_u64_arg(bucket, "bucket_bytes", &pp.bucket_bytes)) return NULL;
        pp.field_mask |= FERRY_PLAN_PARAM_BUCKET_BYTES;
    }
    if (pack != Py_None) {
        if (!pyf_u64_arg(pack, "pack_below", &pp.pack_below)) return NULL;
        pp.field_mask |= FERRY_PLAN_PARAM_PACK_BELOW;
    }
    if (limit != Py_None) {
        if (!pyf_u64_arg(limit, "pack_limit", &pp.pack_limit)) return NULL;
        pp.field_mask |= FERRY_PLAN_PARAM_PACK_LIMIT;
    }
    uint32_t *sh = NULL, *dh = NULL;
    if (!hosts_arg(src_hosts_o, "src_hosts", ferry_layout_world_size(lay(src)), &sh) ||
        !hosts_arg(dst_hosts_o, "dst_hosts", ferry_layout_world_size(lay(dst)), &dh)) {
        PyMem_Free(sh);
        return NULL;
    }
    if (sh) pp.field_mask |= FERRY_PLAN_PARAM_SRC_HOSTS, pp.src_hosts = sh;
    if (dh) pp.field_mask |= FERRY_PLAN_PARAM_DST_HOSTS, pp.dst_hosts = dh;
    pyf_plan_t *p = (pyf_plan_t *)cls->tp_alloc(cls, 0);
    if (p) {
        p->src = Py_NewRef(src);
        p->dst = Py_NewRef(dst);
        if (!(p->ctx = pyf_ctx_create())) Py_CLEAR(p);
    }
    if (p) {
        ferry_status_t st;
        Py_BEGIN_ALLOW_THREADS; /* planning a large model takes a while */
        st = ferry_plan_build(p->ctx, lay(src), lay(dst), &pp, &p->plan);
        Py_END_ALLOW_THREADS;
        if (st != FERRY_OK) {
            pyf_raise_call(st, ferry_ctx_error(p->ctx));
            Py_CLEAR(p);
        }
    }
    PyMem_Free(sh);
    PyMem_Free(dh);
    return (PyObject *)p;
}

static PyObject *tensor_name(pyf_plan_t *p, uint32_t index) {
    ferry_tensor_info_t t;
    if (!ferry_model_tensor(ferry_layout_model(lay(p->dst)), index, &t)) return PyLong_FromUnsignedLong(index);
    return PyUnicode_FromString(t.name);
}

static PyObject *op_obj(pyf_plan_t *p, const ferry_copy_op_t *op) {
    PyObject *o = PyStructSequence_New(CopyOp);
    if (!o) return NULL;
    int i = 0;
    PyStructSequence_SET_ITEM(o, i++, tensor_name(p, op->tensor));
    PyStructSequence_SET_ITEM(o, i++, pyf_tuple_i64(op->box.offset, op->box.ndim));
    PyStructSequence_SET_ITEM(o, i++, pyf_tuple_i64(op->box.extent, op->box.ndim));
    PyStructSequence_SET_ITEM(o, i++, PyBool_FromLong(op->flags & FERRY_OP_PACK));
    PyStructSequence_SET_ITEM(o, i++, PyBool_FromLong(op->flags & FERRY_OP_SCATTER));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(op->src_rank));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(op->src_buffer));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(op->src_piece));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(op->src_offset));
    PyStructSequence_SET_ITEM(o, i++, pyf_tuple_i64(op->src_strides, op->box.ndim));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(op->dst_rank));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(op->dst_buffer));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(op->dst_piece));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(op->dst_offset));
    PyStructSequence_SET_ITEM(o, i++, pyf_tuple_i64(op->dst_strides, op->box.ndim));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(op->bytes));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(op->run_bytes));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(op->runs));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(op->pack_offset));
    PyStructSequence_SET_ITEM(o, i++, PyBool_FromLong(op->flags & FERRY_OP_GATHER));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *bucket_obj(const ferry_plan_bucket_t *b) {
    PyObject *o = PyStructSequence_New(PlanBucket);
    if (!o) return NULL;
    int i = 0;
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(b->first_op));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(b->op_count));
    PyStructSequence_SET_ITEM(o, i++, PyBool_FromLong(b->flags & FERRY_BUCKET_PACKED));
    PyStructSequence_SET_ITEM(o, i++, PyBool_FromLong(b->flags & FERRY_BUCKET_DIRECT));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(b->src_buffer));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(b->src_offset));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(b->bytes));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(b->dst_buffer));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(b->dst_offset));
    PyStructSequence_SET_ITEM(o, i++, PyBool_FromLong(b->flags & FERRY_BUCKET_GATHER));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *pair_obj(const ferry_plan_pair_t *q) {
    PyObject *o = PyStructSequence_New(PlanPair);
    if (!o) return NULL;
    int i = 0;
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(q->src_rank));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(q->dst_rank));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(q->first_op));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(q->op_count));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(q->first_bucket));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromSize_t(q->bucket_count));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(q->bytes));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

/* [start, stop) of n items from optional (start, count) arguments. */
static bool range_args(PyObject *args, PyObject *kw, const char *fmt, size_t n, size_t *start, size_t *stop) {
    static char *kws[] = {"start", "count", NULL};
    Py_ssize_t s = 0, c = -1;
    if (!PyArg_ParseTupleAndKeywords(args, kw, fmt, kws, &s, &c)) return false;
    if (s < 0 || (size_t)s > n) {
        char msg[120];
        snprintf(msg, sizeof msg, "start %zd: the plan has %zu", s, n);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    *start = (size_t)s;
    *stop = c < 0 || (size_t)c > n - *start ? n : *start + (size_t)c;
    return true;
}

static PyObject *plan_ops(pyf_plan_t *p, PyObject *args, PyObject *kw) {
    size_t a, b;
    if (!range_args(args, kw, "|nn:ops", ferry_plan_op_count(p->plan), &a, &b)) return NULL;
    const ferry_copy_op_t *ops = ferry_plan_ops(p->plan);
    PyObject *list = PyList_New((Py_ssize_t)(b - a));
    for (size_t i = a; list && i < b; i++) {
        PyObject *o = op_obj(p, &ops[i]);
        if (!o) Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)(i - a), o);
    }
    return list;
}

static PyObject *plan_buckets(pyf_plan_t *p, PyObject *args, PyObject *kw) {
    size_t a, b;
    if (!range_args(args, kw, "|nn:buckets", ferry_plan_bucket_count(p->plan), &a, &b)) return NULL;
    const ferry_plan_bucket_t *bs = ferry_plan_buckets(p->plan);
    PyObject *list = PyList_New((Py_ssize_t)(b - a));
    for (size_t i = a; list && i < b; i++) {
        PyObject *o = bucket_obj(&bs[i]);
        if (!o) Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)(i - a), o);
    }
    return list;
}

static PyObject *plan_pairs(pyf_plan_t *p, PyObject *unused) {
    (void)unused;
    size_t n = ferry_plan_pair_count(p->plan);
    const ferry_plan_pair_t *qs = ferry_plan_pairs(p->plan);
    PyObject *list = PyList_New((Py_ssize_t)n);
    for (size_t i = 0; list && i < n; i++) {
        PyObject *o = pair_obj(&qs[i]);
        if (!o) Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, (Py_ssize_t)i, o);
    }
    return list;
}

static PyObject *rank_bytes(pyf_plan_t *p, PyObject *arg, int which) {
    uint64_t r;
    if (!pyf_u64_arg(arg, "rank", &r)) return NULL;
    uint32_t world = ferry_layout_world_size(lay(which == 1 ? p->dst : p->src));
    if (r >= world) {
        char msg[120];
        snprintf(msg, sizeof msg, "rank %llu: the %s layout has %u ranks", (unsigned long long)r,
                 which == 1 ? "destination" : "source", world);
        return pyf_raise(FERRY_ERR_NOT_FOUND, msg);
    }
    uint64_t v = which == 0   ? ferry_plan_src_bytes(p->plan, (uint32_t)r)
                 : which == 1 ? ferry_plan_dst_bytes(p->plan, (uint32_t)r)
                              : ferry_plan_pack_bytes(p->plan, (uint32_t)r);
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *plan_src_bytes(pyf_plan_t *p, PyObject *r) { return rank_bytes(p, r, 0); }
static PyObject *plan_dst_bytes(pyf_plan_t *p, PyObject *r) { return rank_bytes(p, r, 1); }
static PyObject *plan_pack_bytes(pyf_plan_t *p, PyObject *r) { return rank_bytes(p, r, 2); }

static PyObject *plan_verify(pyf_plan_t *p, PyObject *unused) {
    (void)unused;
    if (!pyf_enter(&p->busy, "verify: another thread is verifying this Plan")) return NULL;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_plan_verify(p->plan, lay(p->src), lay(p->dst));
    Py_END_ALLOW_THREADS;
    pyf_leave(&p->busy);
    if (st != FERRY_OK) return pyf_raise_call(st, ferry_plan_error(p->plan));
    Py_RETURN_NONE;
}

static PyObject *plan_get(pyf_plan_t *p, void *which) {
    switch ((intptr_t)which) {
    case 0: {
        ferry_plan_stats_t s;
        ferry_plan_stats(p->plan, &s);
        return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:I,s:K,s:K,s:K,s:K,s:K,s:K,s:K}", "bytes",
                             (unsigned long long)s.bytes, "fragments", (unsigned long long)s.fragments, "routes",
                             (unsigned long long)s.routes, "pack_bytes", (unsigned long long)s.pack_bytes, "src_max",
                             (unsigned long long)s.src_max, "src_lower_bound", (unsigned long long)s.src_lower_bound,
                             "src_host_max", (unsigned long long)s.src_host_max, "src_serving", s.src_serving, "ops",
                             (unsigned long long)s.ops, "runs", (unsigned long long)s.runs, "packed_ops",
                             (unsigned long long)s.packed_ops, "gather_ops", (unsigned long long)s.gather_ops, "buckets", (unsigned long long)s.buckets, "pairs",
                             (unsigned long long)s.pairs, "op_bytes", (unsigned long long)s.op_bytes);
    }
    case 1: {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ferry_plan_digest(p->plan));
        return PyUnicode_FromString(hex);
    }
    case 2: return PyLong_FromSize_t(ferry_plan_op_count(p->plan));
    case 3: return PyLong_FromSize_t(ferry_plan_bucket_count(p->plan));
    case 4: return PyLong_FromSize_t(ferry_plan_pair_count(p->plan));
    case 5: return Py_NewRef(p->src);
    default: return Py_NewRef(p->dst);
    }
}

static PyObject *plan_repr(pyf_plan_t *p) {
    ferry_plan_stats_t s;
    ferry_plan_stats(p->plan, &s);
    return PyUnicode_FromFormat("<ferry.Plan: %llu bytes in %zu ops, %zu buckets, %zu pairs>",
                                (unsigned long long)s.bytes, ferry_plan_op_count(p->plan),
                                ferry_plan_bucket_count(p->plan), ferry_plan_pair_count(p->plan));
}

static PyMethodDef plan_methods[] = {
    {"ops", (PyCFunction)(void (*)(void))plan_ops, METH_VARARGS | METH_KEYWORDS,
     "ops(start=0, count=None) -> list of CopyOp\n\n"
     "The copies, ordered by pair (see pairs()): CopyOp(tensor, offset, extent, pack, scatter, src_rank,\n"
     "src_buffer, src_piece, src_offset, src_strides, dst_rank, dst_buffer, dst_piece, dst_offset, dst_strides,\n"
     "bytes, run_bytes, runs, pack_offset, gather). tensor is the name; pieces and buffers are indices of the source and\n"
     "destination layouts; offsets in bytes, strides in elements; pack: the source gathers the box into its\n"
     "pack area (at pack_offset); scatter: the destination box is not one contiguous run; gather: a strided\n"
     "source past the plan's pack_limit, which its reader reads run by run."},
    {"buckets", (PyCFunction)(void (*)(void))plan_buckets, METH_VARARGS | METH_KEYWORDS,
     "buckets(start=0, count=None) -> list of PlanBucket\n\n"
     "The transfers: PlanBucket(first_op, op_count, packed, direct, src_buffer, src_offset, bytes, dst_buffer,\n"
     "dst_offset): consecutive ops of one pair read with one transfer of `bytes` (from the pack area if\n"
     "packed; landing as is if direct)."},
    {"pairs", (PyCFunction)plan_pairs, METH_NOARGS,
     "pairs() -> list of PlanPair\n\n"
     "PlanPair(src_rank, dst_rank, first_op, op_count, first_bucket, bucket_count, bytes): all ops and buckets\n"
     "from one source rank to one destination rank, ordered by destination rank and, for one destination, in\n"
     "its staggered reading order."},
    {"src_bytes", (PyCFunction)plan_src_bytes, METH_O,
     "src_bytes(rank) -> int\n\nBytes source rank serves. NotFoundError for a rank out of range."},
    {"dst_bytes", (PyCFunction)plan_dst_bytes, METH_O,
     "dst_bytes(rank) -> int\n\nBytes destination rank receives. NotFoundError for a rank out of range."},
    {"pack_bytes", (PyCFunction)plan_pack_bytes, METH_O,
     "pack_bytes(rank) -> int\n\nSize of source rank's pack area. NotFoundError for a rank out of range."},
    {"verify", (PyCFunction)plan_verify, METH_NOARGS,
     "verify()\n\n"
     "Checks the plan against its layouts independently of how it was built: every op names pieces whose\n"
     "boxes contain its box with offsets and strides that address it, the same tensor and dtype on both\n"
     "sides, and the ops tile every destination piece exactly once. Raises CoverageError or MismatchError\n"
     "naming the piece and box. Releases the GIL; one thread at a time (BusyError otherwise)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef plan_getset[] = {
    {"stats", (getter)plan_get, NULL,
     "dict: bytes (all destination pieces receive), fragments, routes, pack_bytes (all pack areas), src_max\n"
     "(most bytes one source rank serves), src_lower_bound (no plan does better), src_host_max, src_serving,\n"
     "and of the plan's ops: ops, runs, packed_ops, buckets, pairs, op_bytes",
     (void *)0},
    {"digest", (getter)plan_get, NULL, "hex xxh3 of the inputs and global decisions: equal digests, equal plans",
     (void *)1},
    {"op_count", (getter)plan_get, NULL, "number of ops", (void *)2},
    {"bucket_count", (getter)plan_get, NULL, "number of buckets (transfers)", (void *)3},
    {"pair_count", (getter)plan_get, NULL, "number of (source, destination) pairs", (void *)4},
    {"src_layout", (getter)plan_get, NULL, "the source Layout", (void *)5},
    {"dst_layout", (getter)plan_get, NULL, "the destination Layout", (void *)6},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyf_PlanType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Plan",
    .tp_basicsize = sizeof(pyf_plan_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Plan(src_layout, dst_layout, *, bucket_bytes=None, pack_below=None, src_hosts=None, dst_hosts=None,\n"
              "     src_rank=None, dst_rank=None, pack_limit=None)\n\n"
              "The resharding plan from where a trainer holds the weights (src_layout) to where engine ranks want\n"
              "them (dst_layout): every element of every destination piece written exactly once, from a source\n"
              "rank that holds it, balanced over source ranks and hosts. Tensors are matched by name (same dtype\n"
              "and shape). bucket_bytes: largest transfer grouping several ops (default 4 MiB); pack_below: ops\n"
              "smaller than this are packed (default 64 KiB; 0: only strided sources); pack_limit: most bytes one\n"
              "source rank's pack area holds (default None: no limit; strided sources past it are read run by\n"
              "run, stats' gather_ops); src_hosts/dst_hosts: a host\n"
              "label per rank (equal labels: one machine). dst_rank (or src_rank): a local plan holding only that\n"
              "destination's (source's) ops, as each rank computes its own; the global figures (stats' bytes,\n"
              "src_bytes, ..., digest) are the global plan's. Pure and deterministic: equal inputs, equal plans.\n"
              "Raises CoverageError (an element no source holds), MismatchError (dtype or shape differ),\n"
              "InvalidArgumentError, naming the tensor and box. Building releases the GIL; the layouts must not be\n"
              "changed meanwhile (the plan keeps both alive). Read-only afterwards: any number of threads.",
    .tp_dealloc = (destructor)plan_dealloc,
    .tp_repr = (reprfunc)plan_repr,
    .tp_methods = plan_methods,
    .tp_getset = plan_getset,
    .tp_new = plan_new,
};

static PyStructSequence_Field op_fields[] = {
    {"tensor", "tensor name"}, {"offset", "box offset"}, {"extent", "box extent"},
    {"pack", "the source packs the box"}, {"scatter", "the destination box is not one run"},
    {"src_rank", NULL}, {"src_buffer", "buffer index in the source layout"},
    {"src_piece", "piece index in the source layout"}, {"src_offset", "bytes"},
    {"src_strides", "elements per box dimension"}, {"dst_rank", NULL},
    {"dst_buffer", "buffer index in the destination layout"}, {"dst_piece", "piece index in the destination layout"},
    {"dst_offset", "bytes"}, {"dst_strides", "elements per box dimension"}, {"bytes", NULL},
    {"run_bytes", "longest run contiguous on both sides"}, {"runs", "bytes / run_bytes"},
    {"pack_offset", "in the source's pack area (pack only)"},
    {"gather", "a strided source past the pack limit, read run by run"}, {NULL, NULL},
};
static PyStructSequence_Field bucket_fields[] = {
    {"first_op", NULL}, {"op_count", NULL}, {"packed", "read from the source's pack area"},
    {"direct", "lands as is at dst_buffer/dst_offset"}, {"src_buffer", "unless packed"},
    {"src_offset", "in src_buffer or the pack area"}, {"bytes", "one contiguous read, unless gather"},
    {"dst_buffer", "if direct"}, {"dst_offset", "if direct"},
    {"gather", "one strided op read run by run from src_offset (its op's src_strides)"}, {NULL, NULL},
};
static PyStructSequence_Field pair_fields[] = {
    {"src_rank", NULL}, {"dst_rank", NULL}, {"first_op", NULL}, {"op_count", NULL},
    {"first_bucket", NULL}, {"bucket_count", NULL}, {"bytes", NULL}, {NULL, NULL},
};

static PyTypeObject *seqtype(PyObject *m, const char *name, const char *doc, PyStructSequence_Field *f) {
    int n = 0;
    while (f[n].name) n++;
    PyStructSequence_Desc d = {(char *)name, (char *)doc, f, n};
    PyTypeObject *t = PyStructSequence_NewType(&d);
    if (!t || PyModule_AddObjectRef(m, strrchr(name, '.') + 1, (PyObject *)t) < 0) return NULL;
    return t;
}

bool pyf_plan_init(PyObject *m) {
    return (CopyOp = seqtype(m, "ferry.CopyOp", "One box of one tensor copied between two pieces.", op_fields)) &&
           (PlanBucket = seqtype(m, "ferry.PlanBucket", "One transfer of consecutive ops.", bucket_fields)) &&
           (PlanPair = seqtype(m, "ferry.PlanPair", "The ops from one source rank to one destination rank.",
                               pair_fields)) &&
           PyType_Ready(&pyf_PlanType) == 0 && PyModule_AddObjectRef(m, "Plan", (PyObject *)&pyf_PlanType) == 0;
}
