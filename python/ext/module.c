/* ferry._ferry: module init, the exception hierarchy, contexts with a
 * Ctrl-C hook, and argument helpers shared by the object files. */
#include <ctype.h>
#include <string.h>

#include "pyferry.h"

/* ---- exceptions ---- */

static PyObject *error_base;

static const struct {
    ferry_status_t st;
    const char *name;       /* ferry.<name> */
    PyObject **builtin;     /* a second base, so `except ValueError` works too */
    const char *doc;
} error_kinds[] = {
    {FERRY_ERR_INVALID_ARGUMENT, "InvalidArgumentError", &PyExc_ValueError, "An argument is missing, out of range or inconsistent."},
    {FERRY_ERR_INVALID_CONFIG, "ConfigError", &PyExc_ValueError, "A config file, spec string or FERRY_* variable is malformed."},
    {FERRY_ERR_UNSUPPORTED, "UnsupportedError", NULL, "Well-formed but not supported (model_type, dtype, device, option)."},
    {FERRY_ERR_NOT_FOUND, "NotFoundError", &PyExc_LookupError, "A named tensor, buffer, rank or file does not exist."},
    {FERRY_ERR_COVERAGE, "CoverageError", NULL, "Pieces leave a gap or overlap partially."},
    {FERRY_ERR_MISMATCH, "MismatchError", NULL, "Two descriptions of the same thing disagree."},
    {FERRY_ERR_CORRUPT, "CorruptError", NULL, "Bytes fail a checksum or a format check; nothing was applied."},
    {FERRY_ERR_NO_MEMORY, "NoMemoryError", &PyExc_MemoryError, "Out of memory."},
    {FERRY_ERR_IO, "IOFailure", &PyExc_OSError, "A file or system call failed."},
    {FERRY_ERR_LIMIT, "LimitError", NULL, "A hard limit (size, count, length) was exceeded."},
    {FERRY_ERR_TIMEOUT, "TimeoutError", &PyExc_TimeoutError, "A wait ran past its timeout."},
    {FERRY_ERR_PEER_LOST, "PeerLostError", &PyExc_ConnectionError, "A peer or the metadata service went away."},
    {FERRY_ERR_INTERRUPTED, "InterruptedError", NULL, "A wait was interrupted (a signal handler asked to stop)."},
    {FERRY_ERR_BUSY, "BusyError", NULL, "The object is in use (by another thread, or readers hold every slot)."},
    {FERRY_ERR_STALE, "StaleError", NULL, "The version asked for is gone."},
    {FERRY_ERR_INTERNAL, "InternalError", NULL, "A bug in ferry."},
};
#define N_ERRORS (sizeof error_kinds / sizeof error_kinds[0])
static PyObject *error_classes[N_ERRORS];

static bool errors_init(PyObject *m) {
    error_base = PyErr_NewExceptionWithDoc(
        "ferry.Error",
        "Base of every ferry error: .status (the C status code), .status_name\n"
        "(\"FERRY_ERR_TIMEOUT\") and .detail (what was wrong, as the C library said it).",
        NULL, NULL);
    if (!error_base || PyModule_AddObjectRef(m, "Error", error_base) < 0) return false;
    for (size_t i = 0; i < N_ERRORS; i++) {
        char qual[64];
        snprintf(qual, sizeof qual, "ferry.%s", error_kinds[i].name);
        PyObject *bases = error_kinds[i].builtin ? PyTuple_Pack(2, error_base, *error_kinds[i].builtin)
                                                 : PyTuple_Pack(1, error_base);
        if (!bases) return false;
        error_classes[i] = PyErr_NewExceptionWithDoc(qual, error_kinds[i].doc, bases, NULL);
        Py_DECREF(bases);
        if (!error_classes[i] || PyModule_AddObjectRef(m, error_kinds[i].name, error_classes[i]) < 0) return false;
    }
    return true;
}

PyObject *pyf_raise(ferry_status_t st, const char *detail) {
    PyObject *cls = error_base;
    for (size_t i = 0; i < N_ERRORS; i++)
        if (error_kinds[i].st == st) cls = error_classes[i];
    if (!detail || !*detail) detail = ferry_status_describe(st);
    PyObject *exc = PyObject_CallFunction(cls, "s", detail);
    if (!exc) return NULL;
    PyObject *code = PyLong_FromLong((long)st), *name = PyUnicode_FromString(ferry_status_name(st)),
             *text = PyUnicode_FromString(detail);
    if (code && name && text && PyObject_SetAttrString(exc, "status", code) == 0 &&
        PyObject_SetAttrString(exc, "status_name", name) == 0 && PyObject_SetAttrString(exc, "detail", text) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(code);
    Py_XDECREF(name);
    Py_XDECREF(text);
    Py_DECREF(exc);
    return NULL;
}

PyObject *pyf_raise_call(ferry_status_t st, const char *detail) {
    if (PyErr_Occurred()) return NULL; /* the interrupt hook ran a handler that raised */
    return pyf_raise(st, detail);
}

/* ---- contexts ---- */

/* Called by ferry on the thread blocked in one of its calls (GIL released):
 * runs Python's signal handlers, so Ctrl-C's KeyboardInterrupt (or any
 * handler that raises) ends the wait. The exception stays set on this
 * thread's state and is what the call raises. Handlers run on the main
 * thread only; elsewhere this returns 0 at once. */
static int interrupt_hook(void *opaque) {
    (void)opaque;
    PyGILState_STATE g = PyGILState_Ensure();
    int raised = PyErr_Occurred() ? 1 : PyErr_CheckSignals() < 0;
    PyGILState_Release(g);
    return raised;
}

ferry_ctx_t *pyf_ctx_create(void) {
    ferry_ctx_params_t p = {.field_mask = FERRY_CTX_PARAM_INTERRUPT, .interrupt_fn = interrupt_hook};
    ferry_ctx_t *ctx = NULL;
    char detail[512] = "";
    ferry_status_t st = ferry_ctx_create(&p, &ctx, detail, sizeof detail);
    if (st != FERRY_OK) {
        pyf_raise(st, detail);
        return NULL;
    }
    return ctx;
}

bool pyf_enter(int *busy, const char *what) {
    if (*busy) {
        pyf_raise(FERRY_ERR_BUSY, what);
        return false;
    }
    *busy = 1;
    return true;
}

/* ---- argument helpers ---- */

bool pyf_timeout_ms(PyObject *o, uint32_t dflt, uint32_t *out) {
    if (!o || o == Py_None) {
        *out = dflt;
        return true;
    }
    double s = PyFloat_AsDouble(o);
    if (s == -1.0 && PyErr_Occurred()) return false;
    if (!(s >= 0.0) || s > 4e6) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "timeout: seconds in [0, 4e6] (or None for the default)");
        return false;
    }
    *out = (uint32_t)(s * 1000.0 + 0.5);
    return true;
}

bool pyf_dtype_arg(PyObject *o, ferry_dtype_t *out, bool *given) {
    *given = false;
    if (!o || o == Py_None) return true;
    PyObject *s = PyUnicode_Check(o) ? Py_NewRef(o) : PyObject_Str(o); /* torch.bfloat16 -> "torch.bfloat16" */
    if (!s) return false;
    const char *name = PyUnicode_AsUTF8(s);
    bool ok = name != NULL;
    if (ok) {
        if (strncmp(name, "torch.", 6) == 0) name += 6;
        ok = ferry_dtype_parse(name, out);
        char upper[64];
        size_t n = strlen(name);
        if (!ok && n < sizeof upper) { /* "bf16" as "BF16": safetensors names in any case */
            for (size_t i = 0; i <= n; i++) upper[i] = (char)toupper((unsigned char)name[i]);
            ok = ferry_dtype_parse(upper, out);
        }
        if (!ok) {
            char msg[160];
            snprintf(msg, sizeof msg, "dtype '%.60s' is not one ferry knows (BF16, F16, F32, F8_E4M3, U8, ...)", name);
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        }
    }
    Py_DECREF(s);
    *given = ok;
    return ok;
}

static bool i64_seq(PyObject *o, const char *what, int64_t *v, uint32_t *n) {
    PyObject *seq = PySequence_Fast(o, what);
    if (!seq) return false;
    Py_ssize_t k = PySequence_Fast_GET_SIZE(seq);
    if (k > FERRY_MAX_DIMS) {
        Py_DECREF(seq);
        char msg[96];
        snprintf(msg, sizeof msg, "%s: %zd dimensions, at most %d", what, k, FERRY_MAX_DIMS);
        pyf_raise(FERRY_ERR_LIMIT, msg);
        return false;
    }
    for (Py_ssize_t i = 0; i < k; i++) {
        v[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
        if (v[i] == -1 && PyErr_Occurred()) {
            Py_DECREF(seq);
            return false;
        }
    }
    Py_DECREF(seq);
    *n = (uint32_t)k;
    return true;
}

bool pyf_box_arg(PyObject *offset, PyObject *extent, ferry_box_t *out) {
    memset(out, 0, sizeof *out);
    uint32_t ne = 0, no = 0;
    if (!i64_seq(extent, "extent must be a sequence of ints", out->extent, &ne)) return false;
    if (offset && offset != Py_None) {
        if (!i64_seq(offset, "offset must be a sequence of ints", out->offset, &no)) return false;
        if (no != ne) {
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "offset and extent have different lengths");
            return false;
        }
    }
    out->ndim = ne;
    return true;
}

bool pyf_strides_arg(PyObject *o, uint32_t ndim, int64_t *out) {
    memset(out, 0, sizeof(int64_t) * FERRY_MAX_DIMS);
    if (!o || o == Py_None) { /* row-major over the box's extents is the caller's job: no default here */
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "strides are required (elements between neighbours per dimension)");
        return false;
    }
    uint32_t n = 0;
    if (!i64_seq(o, "strides must be a sequence of ints", out, &n)) return false;
    if (n != ndim) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "strides must have one entry per box dimension");
        return false;
    }
    return true;
}

PyObject *pyf_tuple_i64(const int64_t *v, uint32_t n) {
    PyObject *t = PyTuple_New(n);
    if (!t) return NULL;
    for (uint32_t i = 0; i < n; i++) {
        PyObject *x = PyLong_FromLongLong(v[i]);
        if (!x) {
            Py_DECREF(t);
            return NULL;
        }
        PyTuple_SET_ITEM(t, i, x);
    }
    return t;
}

bool pyf_u64_arg(PyObject *o, const char *what, uint64_t *out) {
    if (!PyLong_Check(o)) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: an int is required, not %.60s", what, Py_TYPE(o)->tp_name);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    unsigned long long v = PyLong_AsUnsignedLongLong(o); /* refuses negatives and >= 2^64 */
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
        PyErr_Clear();
        char msg[160];
        snprintf(msg, sizeof msg, "%s: must be an int in [0, 2**64)", what);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    *out = v;
    return true;
}

bool pyf_u32_arg(PyObject *o, const char *what, uint32_t *out) {
    uint64_t v;
    if (!pyf_u64_arg(o, what, &v)) return false;
    if (v > UINT32_MAX) {
        char msg[160];
        snprintf(msg, sizeof msg, "%s: %llu is out of range [0, 2**32)", what, (unsigned long long)v);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    *out = (uint32_t)v;
    return true;
}

PyObject *pyf_dtype_str(ferry_dtype_t d) { return PyUnicode_FromString(ferry_dtype_name(d)); }

/* ---- named tuples ---- */

PyTypeObject *pyf_TensorInfo, *pyf_BufferInfo, *pyf_Piece, *pyf_PublishInfo, *pyf_UpdateInfo;

static PyStructSequence_Field tensor_info_fields[] = {
    {"name", "canonical (Hugging Face) name"}, {"dtype", "safetensors dtype name"}, {"shape", "tuple of ints"}, {0}};
static PyStructSequence_Field buffer_info_fields[] = {
    {"index", "buffer index in the layout"}, {"name", "trainer/engine parameter name, or \"flat\""},
    {"rank", "rank holding it"}, {"size", "bytes"}, {"dtype", "safetensors dtype name"},
    {"shape", "storage shape as the owner sees it"}, {0}};
static PyStructSequence_Field piece_fields[] = {
    {"tensor", "logical tensor name"}, {"offset", "box offset per dimension"}, {"extent", "box extent per dimension"},
    {"rank", "rank"}, {"buffer", "buffer index"}, {"byte_offset", "of the box's first element in the buffer"},
    {"strides", "elements between neighbours per box dimension"}, {0}};
static PyStructSequence_Field publish_fields[] = {
    {"version", NULL}, {"seconds", "whole publish"}, {"snapshot_seconds", "async: copying into the slot"},
    {"pack_seconds", "gathering strided sources"}, {"hash_seconds", "checksums of served regions"},
    {"wait_seconds", "sync: waiting for acknowledgements"}, {"bytes_served", "bytes readers pull from this writer"},
    {"readers_acked", NULL}, {"readers_missing", "live readers that did not acknowledge in time"},
    {"delta_seconds", "encoding deltas"}, {"delta_bytes", "bytes of this version's deltas"},
    {"device_bytes", "CUDA writers: GPU memory ferry holds for this writer"}, {0}};
static PyStructSequence_Field update_fields[] = {
    {"version", "the version now held"}, {"bytes", "bytes pulled"}, {"seconds", "whole update"},
    {"wait_seconds", "waiting for the version"}, {"pull_seconds", "transfers and scatter"},
    {"verify_seconds", "checksums"}, {"apply_seconds", "staged: copying into the live buffers"},
    {"retries", NULL}, {"sources", "writers read from"}, {"delta_pairs", "writers whose bytes came as deltas"},
    {"delta_bytes", "of bytes, those of deltas"},
    {"device_bytes", "CUDA readers: GPU memory ferry holds for this reader"},
    {"delta_steps", "versions the deltas spanned (1: one behind; 0: none)"}, {0}};

static PyTypeObject *structseq(PyObject *m, const char *name, const char *doc, PyStructSequence_Field *f) {
    int n = 0;
    while (f[n].name) n++;
    PyStructSequence_Desc d = {(char *)name, (char *)doc, f, n};
    PyTypeObject *t = PyStructSequence_NewType(&d);
    if (!t) return NULL;
    const char *dot = strrchr(name, '.');
    if (PyModule_AddObjectRef(m, dot ? dot + 1 : name, (PyObject *)t) < 0) return NULL;
    return t;
}

bool pyf_structseq_init(PyObject *m) {
    return (pyf_TensorInfo = structseq(m, "ferry.TensorInfo", "A logical tensor of a model.", tensor_info_fields)) &&
           (pyf_BufferInfo = structseq(m, "ferry.BufferInfo", "A buffer of a layout.", buffer_info_fields)) &&
           (pyf_Piece = structseq(m, "ferry.Piece", "A box of a tensor at an offset of a buffer.", piece_fields)) &&
           (pyf_PublishInfo = structseq(m, "ferry.PublishInfo", "What Writer.publish did.", publish_fields)) &&
           (pyf_UpdateInfo = structseq(m, "ferry.UpdateInfo", "What Reader.update did.", update_fields));
}

/* ---- module ---- */

static bool status_constants(PyObject *m) {
    for (size_t i = 0; i < N_ERRORS; i++)
        if (PyModule_AddIntConstant(m, ferry_status_name(error_kinds[i].st), (long)error_kinds[i].st) < 0) return false;
    return true;
}

static PyObject *mod_dtype_size(PyObject *self, PyObject *arg) {
    (void)self;
    ferry_dtype_t d;
    bool given;
    if (!pyf_dtype_arg(arg, &d, &given)) return NULL;
    if (!given) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "dtype_size: a dtype is required");
    return PyLong_FromSize_t(ferry_dtype_size(d));
}

static PyObject *mod_error(PyObject *self, PyObject *args) {
    (void)self;
    int st;
    const char *detail;
    if (!PyArg_ParseTuple(args, "is:error", &st, &detail)) return NULL;
    pyf_raise((ferry_status_t)st, detail);
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    Py_XDECREF(type);
    Py_XDECREF(tb);
    return value;
}

static PyMethodDef module_methods[] = {
    {"error", mod_error, METH_VARARGS,
     "error(status, detail) -> ferry.Error\n\nThe exception the C library's status would raise (for the Python layer)."},
    {"dtype_size", mod_dtype_size, METH_O, "dtype_size(dtype) -> bytes per element"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "ferry._ferry",
    "ferry's C extension; use the ferry package, which re-exports it.", -1, module_methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__ferry(void); /* the one exported symbol */
PyMODINIT_FUNC PyInit__ferry(void) {
    PyObject *m = PyModule_Create(&module_def);
    if (!m) return NULL;
    if (!errors_init(m) || !pyf_structseq_init(m) || !pyf_model_init(m) || !pyf_layout_init(m) ||
        !pyf_member_init(m) || !pyf_table_init(m) || !pyf_channel_init(m) || !pyf_delta_init(m) ||
        !pyf_plan_init(m) || !pyf_fp8_init(m) || !status_constants(m) ||
        PyModule_AddStringConstant(m, "__version__", ferry_version_string()) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
