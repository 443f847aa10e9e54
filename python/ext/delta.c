/* The sparse-delta codec (codec.h, docs/delta-format.md) as module
 * functions, wrapped by the pure-Python module ferry.delta (which holds the
 * manual). Each call makes its own context and codec, so calls from any
 * number of threads run at once; the long ones release the GIL. */
#include <string.h>

#include "pyferry.h"

static PyTypeObject *DeltaInfo;

/* A context and a codec for one call; the detail text of a failure is on
 * the codec (its calls) or on the context (file calls). */
typedef struct call {
    ferry_ctx_t *ctx;
    ferry_delta_codec_t *codec;
} call_t;

static bool call_open(call_t *c, bool codec) {
    c->codec = NULL;
    if (!(c->ctx = pyf_ctx_create())) return false;
    if (!codec) return true;
    ferry_status_t st = ferry_delta_codec_create(c->ctx, &c->codec);
    if (st != FERRY_OK) {
        pyf_raise(st, ferry_ctx_error(c->ctx));
        ferry_ctx_destroy(c->ctx);
        return false;
    }
    return true;
}

static void call_close(call_t *c) {
    ferry_delta_codec_destroy(c->codec);
    ferry_ctx_destroy(c->ctx);
}

static PyObject *info_obj(const ferry_delta_info_t *in) {
    PyObject *o = PyStructSequence_New(DeltaInfo);
    if (!o) return NULL;
    int i = 0;
    PyStructSequence_SET_ITEM(o, i++, pyf_dtype_str(in->dtype));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->elems));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(in->chunk_elems));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(in->chunks));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->base_version));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->next_version));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->base_sum));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->next_sum));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->changed));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(in->chunks_unchanged));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(in->chunks_sparse));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(in->chunks_raw));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->bytes_total));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->bytes_header));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->bytes_positions));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->bytes_values));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(in->bytes_raw));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(in->format));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

/* A delta's bytes: anything with the buffer protocol, C-contiguous. */
static bool delta_bytes(PyObject *o, Py_buffer *view) {
    if (!PyObject_CheckBuffer(o)) {
        char msg[160];
        snprintf(msg, sizeof msg, "delta: bytes, bytearray or memoryview required, not %.60s", Py_TYPE(o)->tp_name);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    if (PyObject_GetBuffer(o, view, PyBUF_C_CONTIGUOUS) < 0) return false;
    return true;
}

/* A flat region: C-contiguous (the codec reads and writes elements in
 * order). */
static bool region_arg(PyObject *o, int access, PyObject *dtype_obj, const char *what, pyf_tensor_t *t) {
    ferry_dtype_t dt;
    bool given;
    if (!pyf_dtype_arg(dtype_obj, &dt, &given) || !pyf_tensor_get(o, access, given ? &dt : NULL, what, t))
        return false;
    if (t->contiguous) return true;
    char msg[300];
    snprintf(msg, sizeof msg, "%s: the tensor is not C-contiguous (pass .contiguous()%s)", what,
             access == PYF_WRITE ? " and copy the result back" : "");
    pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
    pyf_tensor_release(t);
    return false;
}

static bool opt_u32(PyObject *o, const char *what, uint32_t *out) {
    return o == Py_None || pyf_u32_arg(o, what, out);
}

/* Returns a bytes object of len bytes from the first len of b (which it takes). */
static PyObject *shrink(PyObject *b, size_t len) {
    if (_PyBytes_Resize(&b, (Py_ssize_t)len) < 0) return NULL;
    return b;
}

/* ---- frames ---- */

static PyObject *d_encode(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"base",        "next",  "base_version", "next_version", "chunk_elems",
                          "max_classes", "dtype", "format",       NULL};
    PyObject *base_o, *next_o, *bv = NULL, *nv = NULL, *chunk_o = Py_None, *classes_o = Py_None, *dtype_o = Py_None,
                               *format_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OOOOOO:encode", kws, &base_o, &next_o, &bv, &nv, &chunk_o,
                                     &classes_o, &dtype_o, &format_o))
        return NULL;
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS};
    if ((bv && !pyf_u64_arg(bv, "base_version", &p.base_version)) ||
        (nv && !pyf_u64_arg(nv, "next_version", &p.next_version)) ||
        !opt_u32(chunk_o, "chunk_elems", &p.chunk_elems) || !opt_u32(classes_o, "max_classes", &p.max_classes) ||
        !opt_u32(format_o, "format", &p.format))
        return NULL;
    if (chunk_o != Py_None) p.field_mask |= FERRY_DELTA_PARAM_CHUNK_ELEMS;
    if (classes_o != Py_None) p.field_mask |= FERRY_DELTA_PARAM_MAX_CLASSES;
    if (format_o != Py_None) p.field_mask |= FERRY_DELTA_PARAM_FORMAT;
    pyf_tensor_t base, next;
    if (!region_arg(base_o, PYF_READ, dtype_o, "encode: base", &base)) return NULL;
    if (!region_arg(next_o, PYF_READ, dtype_o, "encode: next", &next)) {
        pyf_tensor_release(&base);
        return NULL;
    }
    PyObject *res = NULL, *out = NULL;
    call_t c = {0};
    if (base.dtype != next.dtype || base.ndim != next.ndim ||
        memcmp(base.shape, next.shape, sizeof(int64_t) * base.ndim) != 0) {
        pyf_raise(FERRY_ERR_MISMATCH, "encode: base and next differ in dtype or shape");
        goto done;
    }
    p.dtype = base.dtype;
    size_t bound = ferry_delta_bound(p.dtype, base.numel, p.chunk_elems);
    if (bound == 0) {
        char msg[200];
        snprintf(msg, sizeof msg,
                 "encode: the codec takes BF16, F16, F32, F8_E4M3 and F8_E5M2 with chunk_elems a power of two in "
                 "[%u, %u] (got %s, chunk_elems %u)",
                 FERRY_DELTA_CHUNK_MIN, FERRY_DELTA_CHUNK_MAX, ferry_dtype_name(p.dtype), p.chunk_elems);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        goto done;
    }
    if (bound > PY_SSIZE_T_MAX || !(out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound))) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    if (!call_open(&c, true)) goto done;
    size_t len = 0;
    ferry_status_t st;
    char *dst = PyBytes_AS_STRING(out);
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_delta_encode(c.codec, &p, base.data, next.data, base.numel, dst, bound, &len);
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) {
        pyf_raise_call(st, ferry_delta_codec_detail(c.codec));
        goto done;
    }
    res = shrink(out, len);
    out = NULL;
done:
    Py_XDECREF(out);
    if (c.ctx) call_close(&c);
    pyf_tensor_release(&base);
    pyf_tensor_release(&next);
    return res;
}

static PyObject *d_apply(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"delta", "region", "base_version", "dtype", NULL};
    PyObject *delta_o, *region_o, *bv = Py_None, *dtype_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|OO:apply", kws, &delta_o, &region_o, &bv, &dtype_o)) return NULL;
    uint64_t base_version = FERRY_DELTA_ANY_BASE;
    if (bv != Py_None && !pyf_u64_arg(bv, "base_version", &base_version)) return NULL;
    Py_buffer view;
    if (!delta_bytes(delta_o, &view)) return NULL;
    pyf_tensor_t region;
    if (!region_arg(region_o, PYF_WRITE, dtype_o, "apply: region", &region)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    call_t c = {0};
    PyObject *res = NULL;
    if (call_open(&c, true)) {
        ferry_delta_info_t info;
        ferry_status_t st;
        bool fits = true;
        Py_BEGIN_ALLOW_THREADS;
        /* apply trusts the region to hold the delta's elements of its dtype:
           peek (O(chunks)) to check the tensor's dtype against it first */
        st = ferry_delta_peek(c.codec, view.buf, (size_t)view.len, &info);
        if (st == FERRY_OK && !(fits = pyf_dtype_fits(region.dtype, info.dtype) &&
                                       ferry_dtype_size(region.dtype) == ferry_dtype_size(info.dtype)))
            st = FERRY_ERR_MISMATCH;
        if (st == FERRY_OK)
            st = ferry_delta_apply(c.codec, view.buf, (size_t)view.len, region.data, region.numel, base_version, &info);
        Py_END_ALLOW_THREADS;
        if (!fits) {
            char msg[200];
            snprintf(msg, sizeof msg, "apply: the delta is of %s elements, the region holds %s",
                     ferry_dtype_name(info.dtype), ferry_dtype_name(region.dtype));
            pyf_raise(st, msg);
        } else if (st != FERRY_OK)
            pyf_raise_call(st, ferry_delta_codec_detail(c.codec));
        else
            res = info_obj(&info);
        call_close(&c);
    }
    pyf_tensor_release(&region);
    PyBuffer_Release(&view);
    return res;
}

static PyObject *d_read(PyObject *delta_o, bool full) {
    Py_buffer view;
    if (!delta_bytes(delta_o, &view)) return NULL;
    call_t c;
    PyObject *res = NULL;
    if (call_open(&c, true)) {
        ferry_delta_info_t info;
        ferry_status_t st;
        Py_BEGIN_ALLOW_THREADS;
        st = full ? ferry_delta_inspect(c.codec, view.buf, (size_t)view.len, &info)
                  : ferry_delta_peek(c.codec, view.buf, (size_t)view.len, &info);
        Py_END_ALLOW_THREADS;
        if (st != FERRY_OK) pyf_raise_call(st, ferry_delta_codec_detail(c.codec));
        else
            res = info_obj(&info);
        call_close(&c);
    }
    PyBuffer_Release(&view);
    return res;
}

static PyObject *d_inspect(PyObject *self, PyObject *delta) {
    (void)self;
    return d_read(delta, true);
}

static PyObject *d_peek(PyObject *self, PyObject *delta) {
    (void)self;
    return d_read(delta, false);
}

static PyObject *d_bound(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"dtype", "elems", "chunk_elems", NULL};
    PyObject *dtype_o, *elems_o, *chunk_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:bound", kws, &dtype_o, &elems_o, &chunk_o)) return NULL;
    ferry_dtype_t dt;
    bool given;
    uint64_t elems;
    uint32_t chunk = 0;
    if (!pyf_dtype_arg(dtype_o, &dt, &given) || !pyf_u64_arg(elems_o, "elems", &elems) ||
        !opt_u32(chunk_o, "chunk_elems", &chunk))
        return NULL;
    if (!given) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "bound: a dtype is required");
    size_t b = ferry_delta_bound(dt, elems, chunk);
    if (!b) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "bound: dtype, elems or chunk_elems out of range");
    return PyLong_FromSize_t(b);
}

static PyObject *d_region_sum(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"region", "chunk_elems", "dtype", NULL};
    PyObject *region_o, *chunk_o = Py_None, *dtype_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OO:region_sum", kws, &region_o, &chunk_o, &dtype_o)) return NULL;
    uint32_t chunk = 0;
    pyf_tensor_t t;
    if (!opt_u32(chunk_o, "chunk_elems", &chunk) || !region_arg(region_o, PYF_READ, dtype_o, "region_sum: region", &t))
        return NULL;
    uint64_t sum = 0;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_delta_region_sum(t.dtype, t.data, t.numel, chunk, &sum);
    Py_END_ALLOW_THREADS;
    pyf_tensor_release(&t);
    if (st != FERRY_OK)
        return pyf_raise(st, "region_sum: the codec takes BF16, F16, F32, F8_E4M3 and F8_E5M2, chunk_elems a "
                             "power of two in its range");
    return PyLong_FromUnsignedLongLong(sum);
}

/* ---- files ---- */

/* metadata: a dict str -> str, or None. */
typedef struct meta {
    size_t n;
    ferry_delta_meta_t *v;
    PyObject *items;
} meta_t;

static void meta_release(meta_t *m) {
    PyMem_Free(m->v);
    Py_CLEAR(m->items);
}

static bool meta_arg(PyObject *o, meta_t *m) {
    memset(m, 0, sizeof *m);
    if (o == Py_None) return true;
    if (!PyDict_Check(o)) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "encode_file: metadata must be a dict of str -> str");
        return false;
    }
    if (!(m->items = PyDict_Items(o))) return false;
    m->n = (size_t)PyList_GET_SIZE(m->items);
    if (!(m->v = PyMem_Calloc(m->n ? m->n : 1, sizeof *m->v))) {
        meta_release(m);
        PyErr_NoMemory();
        return false;
    }
    for (size_t i = 0; i < m->n; i++) {
        PyObject *kv = PyList_GET_ITEM(m->items, (Py_ssize_t)i);
        PyObject *k = PyTuple_GET_ITEM(kv, 0), *v = PyTuple_GET_ITEM(kv, 1);
        if (!PyUnicode_Check(k) || !PyUnicode_Check(v)) {
            meta_release(m);
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "encode_file: metadata keys and values must be str");
            return false;
        }
        if (!(m->v[i].key = PyUnicode_AsUTF8(k)) || !(m->v[i].value = PyUnicode_AsUTF8(v))) {
            meta_release(m);
            return false;
        }
    }
    return true;
}

static PyObject *d_encode_file(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"base", "next", "base_version", "next_version", "metadata", NULL};
    PyObject *base_o, *next_o, *bv_o, *nv_o, *meta_o = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOO|O:encode_file", kws, &base_o, &next_o, &bv_o, &nv_o, &meta_o))
        return NULL;
    uint64_t bv, nv;
    if (!pyf_u64_arg(bv_o, "base_version", &bv) || !pyf_u64_arg(nv_o, "next_version", &nv)) return NULL;
    meta_t meta;
    pyf_refs_t base = {0}, next = {0};
    PyObject *out = NULL, *res = NULL;
    call_t c = {0};
    if (!meta_arg(meta_o, &meta)) return NULL;
    if (!pyf_refs_get(base_o, PYF_READ, "encode_file: base", &base) ||
        !pyf_refs_get(next_o, PYF_READ, "encode_file: next", &next))
        goto done;
    if (base.n != next.n) {
        pyf_raise(FERRY_ERR_MISMATCH, "encode_file: base and next hold different numbers of tensors");
        goto done;
    }
    size_t bound = meta_o != Py_None ? ferry_delta_file_bound_meta(next.refs, next.n, meta.v, meta.n)
                                     : ferry_delta_file_bound(next.refs, next.n);
    if (bound == 0) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "encode_file: the tensors (or metadata) are malformed");
        goto done;
    }
    if (bound > PY_SSIZE_T_MAX || !(out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)bound))) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        goto done;
    }
    if (!call_open(&c, false)) goto done;
    size_t len = 0;
    char *dst = PyBytes_AS_STRING(out);
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = meta_o != Py_None ? ferry_delta_file_build_meta(c.ctx, base.refs, next.refs, next.n, bv, nv, meta.v, meta.n,
                                                         dst, bound, &len, NULL)
                           : ferry_delta_file_build(c.ctx, base.refs, next.refs, next.n, bv, nv, dst, bound, &len,
                                                    NULL);
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) {
        pyf_raise_call(st, ferry_ctx_error(c.ctx));
        goto done;
    }
    res = shrink(out, len);
    out = NULL;
done:
    Py_XDECREF(out);
    if (c.ctx) call_close(&c);
    pyf_refs_release(&base);
    pyf_refs_release(&next);
    meta_release(&meta);
    return res;
}

static PyObject *d_apply_file(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"data", "tensors", "base_version", NULL};
    PyObject *data_o, *tensors_o, *bv = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:apply_file", kws, &data_o, &tensors_o, &bv)) return NULL;
    uint64_t base_version = FERRY_DELTA_ANY_BASE;
    if (bv != Py_None && !pyf_u64_arg(bv, "base_version", &base_version)) return NULL;
    Py_buffer view;
    if (!delta_bytes(data_o, &view)) return NULL;
    pyf_refs_t refs;
    if (!pyf_refs_get(tensors_o, PYF_WRITE, "apply_file: tensors", &refs)) {
        PyBuffer_Release(&view);
        return NULL;
    }
    call_t c;
    PyObject *res = NULL;
    if (call_open(&c, false)) {
        ferry_status_t st;
        Py_BEGIN_ALLOW_THREADS;
        st = ferry_delta_file_apply(c.ctx, view.buf, (size_t)view.len, refs.refs, refs.n, base_version);
        Py_END_ALLOW_THREADS;
        if (st != FERRY_OK) pyf_raise_call(st, ferry_ctx_error(c.ctx));
        else
            res = Py_NewRef(Py_None);
        call_close(&c);
    }
    pyf_refs_release(&refs);
    PyBuffer_Release(&view);
    return res;
}

static PyMethodDef delta_methods[] = {
    {"delta_encode", (PyCFunction)(void (*)(void))d_encode, METH_VARARGS | METH_KEYWORDS,
     "delta_encode(base, next, base_version=0, next_version=0, chunk_elems=None, max_classes=None, dtype=None)\n"
     "-> bytes\n\nSee ferry.delta.encode."},
    {"delta_apply", (PyCFunction)(void (*)(void))d_apply, METH_VARARGS | METH_KEYWORDS,
     "delta_apply(delta, region, base_version=None, dtype=None) -> DeltaInfo\n\nSee ferry.delta.apply."},
    {"delta_inspect", (PyCFunction)d_inspect, METH_O, "delta_inspect(delta) -> DeltaInfo\n\nSee ferry.delta.inspect."},
    {"delta_peek", (PyCFunction)d_peek, METH_O, "delta_peek(delta) -> DeltaInfo\n\nSee ferry.delta.peek."},
    {"delta_bound", (PyCFunction)(void (*)(void))d_bound, METH_VARARGS | METH_KEYWORDS,
     "delta_bound(dtype, elems, chunk_elems=None) -> int\n\nSee ferry.delta.bound."},
    {"delta_region_sum", (PyCFunction)(void (*)(void))d_region_sum, METH_VARARGS | METH_KEYWORDS,
     "delta_region_sum(region, chunk_elems=None, dtype=None) -> int\n\nSee ferry.delta.region_sum."},
    {"delta_encode_file", (PyCFunction)(void (*)(void))d_encode_file, METH_VARARGS | METH_KEYWORDS,
     "delta_encode_file(base, next, base_version, next_version, metadata=None) -> bytes\n\n"
     "See ferry.delta.encode_file."},
    {"delta_apply_file", (PyCFunction)(void (*)(void))d_apply_file, METH_VARARGS | METH_KEYWORDS,
     "delta_apply_file(data, tensors, base_version=None)\n\nSee ferry.delta.apply_file."},
    {NULL, NULL, 0, NULL},
};

static PyStructSequence_Field info_fields[] = {
    {"dtype", "element dtype name ('BF16', ...)"},
    {"elems", "elements in the region"},
    {"chunk_elems", "elements per chunk"},
    {"chunks", "chunks in the region"},
    {"base_version", "version recorded for the base"},
    {"next_version", "version recorded for the result"},
    {"base_sum", "region checksum of the base (delta.region_sum)"},
    {"next_sum", "region checksum of the result"},
    {"changed", "elements that differ"},
    {"chunks_unchanged", NULL},
    {"chunks_sparse", NULL},
    {"chunks_raw", NULL},
    {"bytes_total", "the whole delta"},
    {"bytes_header", "frame header, chunk table and chunk headers"},
    {"bytes_positions", "coded positions of sparse chunks (inspect only; 0 from peek and apply)"},
    {"bytes_values", "coded values of sparse chunks (inspect only; 0 from peek and apply)"},
    {"bytes_raw", "dense payloads of raw chunks"},
    {"format", "the delta's format (1, or 2: class streams cut at sub-blocks)"},
    {NULL, NULL},
};

static bool int_constant(PyObject *m, const char *name, unsigned long long v) {
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    if (!o) return false;
    int r = PyModule_AddObjectRef(m, name, o);
    Py_DECREF(o);
    return r == 0;
}

bool pyf_delta_init(PyObject *m) {
    PyStructSequence_Desc d = {"ferry.DeltaInfo", "What a delta holds (ferry_delta_info_t).", info_fields,
                               (int)(sizeof info_fields / sizeof info_fields[0]) - 1};
    if (!(DeltaInfo = PyStructSequence_NewType(&d)) || PyModule_AddObjectRef(m, "DeltaInfo", (PyObject *)DeltaInfo) < 0)
        return false;
    if (PyModule_AddFunctions(m, delta_methods) < 0) return false;
    return int_constant(m, "DELTA_CHUNK_DEFAULT", FERRY_DELTA_CHUNK_DEFAULT) &&
           int_constant(m, "DELTA_CHUNK_MIN", FERRY_DELTA_CHUNK_MIN) &&
           int_constant(m, "DELTA_CHUNK_MAX", FERRY_DELTA_CHUNK_MAX) &&
           int_constant(m, "DELTA_CLASSES_MAX", FERRY_DELTA_CLASSES_MAX);
}
