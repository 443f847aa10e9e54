/* ferry.TensorTable: members put boxes of named tensors under a sequence
 * id, complete it, and get any box of any of them back, resharded from
 * whichever puts cover it and checked tile by tile (sync.h, docs/sync.md). */
#include <string.h>

#include "pyferry.h"

typedef struct pyf_table {
    PyObject_HEAD
    ferry_ctx_t *ctx;
    ferry_table_t *t;
    uint32_t timeout_ms; /* gets without a timeout of their own */
    uint32_t rank, world;
    PyObject *job;
    int busy;
    ferry_mem_type_t mem; /* where every put's and get's tensor lives (device=) */
    int device;           /* FERRY_MEM_CUDA: the CUDA ordinal; host: -1 */
} pyf_table_t;

static bool check_open(pyf_table_t *t) {
    if (t->t) return true;
    pyf_raise(FERRY_ERR_STALE, "the TensorTable is closed");
    return false;
}

static void table_release(pyf_table_t *t) {
    if (!t->t) return;
    PyThreadState *ts = PyEval_SaveThread(); /* leaving the job talks to the service */
    ferry_table_destroy(t->t);
    PyEval_RestoreThread(ts);
    t->t = NULL;
}

static void table_dealloc(pyf_table_t *t) {
    table_release(t);
    ferry_ctx_destroy(t->ctx);
    Py_XDECREF(t->job);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *table_new(PyTypeObject *cls, PyObject *args, PyObject *kw) {
    static char *kws[] = {"job", "rank", "world", "meta", "token", "transport", "timeout", "lease", "serve", "device",
                          NULL};
    const char *job = NULL, *meta = NULL, *token = NULL, *transport = NULL;
    unsigned int rank = UINT32_MAX, world = UINT32_MAX;
    PyObject *timeout = Py_None, *lease = Py_None, *device = Py_None;
    int serve = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$sIIzzzOOpO:TensorTable", kws, &job, &rank, &world, &meta, &token,
                                     &transport, &timeout, &lease, &serve, &device))
        return NULL;
    if (!job || rank == UINT32_MAX || world == UINT32_MAX)
        return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "TensorTable: job=, rank= and world= are required");
    ferry_sync_params_t p = {.field_mask = FERRY_SYNC_PARAM_SERVE, .job = job, .rank = rank, .world = world,
                             .serve = serve != 0};
    if (meta) p.field_mask |= FERRY_SYNC_PARAM_META, p.meta = meta;
    if (token) p.field_mask |= FERRY_SYNC_PARAM_TOKEN, p.token = token;
    if (transport) {
        if (strcmp(transport, "shm") == 0) p.transport = FERRY_XPORT_SHM;
        else if (strcmp(transport, "ucx") == 0)
            p.transport = FERRY_XPORT_UCX;
        else
            return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "TensorTable: transport is 'shm' or 'ucx'");
        p.field_mask |= FERRY_SYNC_PARAM_TRANSPORT;
    }
    uint32_t gets_ms = 30000; /* the C default */
    if (timeout != Py_None) {
        if (!pyf_timeout_ms(timeout, 0, &p.timeout_ms)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_TIMEOUT_MS;
        if (p.timeout_ms) gets_ms = p.timeout_ms;
    }
    if (lease != Py_None) {
        if (!pyf_timeout_ms(lease, 0, &p.lease_ms)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_LEASE_MS;
    }
    bool dev_given;
    if (!pyf_device_arg(device, &p.memory, &p.device, &dev_given)) return NULL;
    if (dev_given) p.field_mask |= FERRY_SYNC_PARAM_MEMORY;
    pyf_table_t *t = (pyf_table_t *)cls->tp_alloc(cls, 0);
    if (!t) return NULL;
    t->mem = p.memory;
    t->device = p.memory == FERRY_MEM_CUDA ? p.device : -1;
    t->timeout_ms = gets_ms;
    t->rank = rank, t->world = world;
    if (!(t->job = PyUnicode_FromString(job)) || !(t->ctx = pyf_ctx_create())) {
        Py_DECREF(t);
        return NULL;
    }
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_table_create(t->ctx, &p, &t->t);
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) {
        pyf_raise_call(st, ferry_ctx_error(t->ctx));
        Py_DECREF(t);
        return NULL;
    }
    return (PyObject *)t;
}

/* ---- entries ---- */

/* One entry of a put or get, with what keeps its memory alive. */
typedef struct entry {
    PyObject *name; /* holds e.name's text */
    pyf_tensor_t ten;
    int64_t shape[FERRY_MAX_DIMS];
    void *copy; /* put of a strided tensor: its elements gathered row-major (raw malloc: filled without the GIL) */
    ferry_table_entry_t e;
} entry_t;

typedef struct entries {
    size_t n;
    entry_t *v;
} entries_t;

static void entries_release(entries_t *es) {
    for (size_t i = 0; es->v && i < es->n; i++) {
        pyf_tensor_release(&es->v[i].ten);
        Py_CLEAR(es->v[i].name);
        PyMem_RawFree(es->v[i].copy);
    }
    PyMem_Free(es->v);
    es->v = NULL, es->n = 0;
}

static bool entries_alloc(entries_t *es, size_t n) {
    es->n = n;
    es->v = PyMem_Calloc(n ? n : 1, sizeof *es->v);
    if (!es->v) PyErr_NoMemory();
    return es->v != NULL;
}

/* Copies a strided tensor's elements into dst, row-major; a contiguous
 * innermost dimension goes as one run. Runs without the GIL. */
static void gather(const pyf_tensor_t *t, char *dst) {
    size_t es = ferry_dtype_size(t->dtype);
    uint32_t nd = t->ndim;
    if (nd == 0) {
        memcpy(dst, t->data, es);
        return;
    }
    int64_t inner = t->shape[nd - 1];
    bool run = t->strides[nd - 1] == 1;
    int64_t idx[FERRY_MAX_DIMS] = {0};
    for (;;) {
        const char *src = t->data;
        for (uint32_t d = 0; d + 1 < nd; d++) src += idx[d] * t->strides[d] * (int64_t)es;
        if (run) {
            memcpy(dst, src, (size_t)inner * es);
            dst += (size_t)inner * es;
        } else
            for (int64_t k = 0; k < inner; k++, dst += es) memcpy(dst, src + k * t->strides[nd - 1] * (int64_t)es, es);
        int d = (int)nd - 2;
        for (; d >= 0; d--) {
            if (++idx[d] < t->shape[d]) break;
            idx[d] = 0;
        }
        if (d < 0) return;
    }
}

static bool dims_arg(PyObject *o, const char *what, const pyf_tensor_t *t, int64_t *out, bool dflt_shape) {
    if (!o || o == Py_None) {
        for (uint32_t d = 0; d < t->ndim; d++) out[d] = dflt_shape ? t->shape[d] : 0;
        return true;
    }
    ferry_box_t b;
    if (!pyf_box_arg(NULL, o, &b)) return false;
    if (b.ndim != t->ndim) {
        char msg[300];
        snprintf(msg, sizeof msg, "%s has %u dimensions, the tensor %u (the tensor is the box)", what, b.ndim,
                 t->ndim);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    memcpy(out, b.extent, sizeof(int64_t) * b.ndim);
    return true;
}

/* A tensor on another device than the table's: MismatchError naming both. */
static bool check_device(const pyf_table_t *tab, const pyf_tensor_t *t, const char *what) {
    if (t->mem == tab->mem && (t->mem != FERRY_MEM_CUDA || t->device == tab->device)) return true;
    char have[32], want[32], msg[600];
    pyf_device_name(t->mem, t->device, have, sizeof have);
    pyf_device_name(tab->mem, tab->device, want, sizeof want);
    snprintf(msg, sizeof msg,
             "%s: the tensor is on %s, this TensorTable's tensors are on %s (its device=): move the tensor there, or "
             "make the TensorTable with device='%s'",
             what, have, want, have);
    pyf_raise(FERRY_ERR_MISMATCH, msg);
    return false;
}

/* A put entry: the tensor is the box, at global_offset of a tensor of
 * global_shape (defaults: the tensor's shape, zeros). */
static bool put_entry(const pyf_table_t *tab, PyObject *name, PyObject *tensor, PyObject *gshape, PyObject *goff,
                      PyObject *dtype_obj, entry_t *en) {
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!s) {
        if (!PyErr_Occurred()) pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "put: the name must be a str");
        return false;
    }
    ferry_dtype_t dt;
    bool given;
    if (!pyf_dtype_arg(dtype_obj, &dt, &given)) return false;
    char what[300];
    snprintf(what, sizeof what, "put '%.200s'", s);
    if (!pyf_tensor_get(tensor, PYF_READ | PYF_CUDA, given ? &dt : NULL, what, &en->ten)) return false;
    const pyf_tensor_t *t = &en->ten;
    if (!check_device(tab, t, what)) return false;
    if (t->mem == FERRY_MEM_CUDA && !t->contiguous) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s: a CUDA tensor put must be C-contiguous (pass tensor.contiguous())", what);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    ferry_box_t *b = &en->e.box;
    b->ndim = t->ndim;
    memcpy(b->extent, t->shape, sizeof(int64_t) * t->ndim);
    snprintf(what, sizeof what, "put '%.200s': global_shape", s);
    if (!dims_arg(gshape, what, t, en->shape, true)) return false;
    snprintf(what, sizeof what, "put '%.200s': global_offset", s);
    if (!dims_arg(goff, what, t, b->offset, false)) return false;
    if (!t->contiguous) {
        en->copy = PyMem_RawMalloc(t->numel * ferry_dtype_size(t->dtype));
        if (!en->copy) {
            PyErr_NoMemory();
            return false;
        }
    }
    en->name = Py_NewRef(name); /* e.name stays valid whatever the caller does meanwhile */
    en->e.name = s;
    en->e.dtype = t->dtype;
    en->e.ndim = t->ndim;
    en->e.shape = en->shape;
    en->e.data = en->copy ? en->copy : t->data;
    return true;
}

/* A get entry: out (C-contiguous, written) is the box at global_offset. */
static bool get_entry(const pyf_table_t *tab, PyObject *name, PyObject *out, PyObject *goff, PyObject *dtype_obj,
                      entry_t *en) {
    const char *s = PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : NULL;
    if (!s) {
        if (!PyErr_Occurred()) pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "get: the name must be a str");
        return false;
    }
    ferry_dtype_t dt;
    bool given;
    if (!pyf_dtype_arg(dtype_obj, &dt, &given)) return false;
    char what[300];
    snprintf(what, sizeof what, "get '%.200s': out", s);
    if (!pyf_tensor_get(out, PYF_WRITE | PYF_CUDA, given ? &dt : NULL, what, &en->ten)) return false;
    const pyf_tensor_t *t = &en->ten;
    if (!check_device(tab, t, what)) return false;
    if (!t->contiguous) {
        char msg[400];
        snprintf(msg, sizeof msg, "%s is not C-contiguous: get writes row-major (pass a contiguous tensor and copy)",
                 what);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    ferry_box_t *b = &en->e.box;
    b->ndim = t->ndim;
    memcpy(b->extent, t->shape, sizeof(int64_t) * t->ndim);
    snprintf(what, sizeof what, "get '%.200s': global_offset", s);
    if (!dims_arg(goff, what, t, b->offset, false)) return false;
    en->name = Py_NewRef(name);
    en->e.name = s;
    en->e.dtype = t->dtype; /* checked against the puts' */
    en->e.data = t->data;
    return true;
}

/* Entries of multi_put/multi_get: tuples (name, tensor, ...) or dicts. */
static bool entries_from(const pyf_table_t *tab, PyObject *seq_obj, bool put, entries_t *es) {
    PyObject *seq =
        PySequence_Fast(seq_obj, put ? "multi_put: entries must be a list" : "multi_get: entries must be a list");
    if (!seq) return false;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    bool ok = entries_alloc(es, (size_t)n);
    for (Py_ssize_t i = 0; ok && i < n; i++) {
        PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *name = NULL, *tensor = NULL, *a = Py_None, *b = Py_None, *dtype = Py_None;
        if (PyDict_Check(item)) {
            static const char *const put_keys[] = {"name", "tensor", "global_shape", "global_offset", "dtype", NULL};
            static const char *const get_keys[] = {"name", "out", "global_offset", "dtype", NULL};
            const char *const *keys = put ? put_keys : get_keys;
            PyObject *key, *val;
            Py_ssize_t pos = 0;
            while (ok && PyDict_Next(item, &pos, &key, &val)) {
                const char *k = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
                int which = -1;
                for (int j = 0; k && keys[j]; j++)
                    if (strcmp(k, keys[j]) == 0) which = j;
                if (which < 0) {
                    char msg[200];
                    snprintf(msg, sizeof msg, "entry %zd: unknown key %.60s (keys: %s)", i, k ? k : "(not a str)",
                             put ? "name, tensor, global_shape, global_offset, dtype"
                                 : "name, out, global_offset, dtype");
                    PyErr_Clear();
                    pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
                    ok = false;
                    break;
                }
                PyObject **slot[] = {&name, &tensor, put ? &a : &b, put ? &b : &dtype, &dtype};
                *slot[which] = val;
            }
        } else if (PyTuple_Check(item) || PyList_Check(item)) {
            Py_ssize_t k = PySequence_Size(item);
            Py_ssize_t most = put ? 5 : 4;
            if (k < 2 || k > most) {
                char msg[200];
                snprintf(msg, sizeof msg, "entry %zd: %s, not %zd items", i,
                         put ? "(name, tensor[, global_shape[, global_offset[, dtype]]])"
                             : "(name, out[, global_offset[, dtype]])",
                         k);
                pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
                ok = false;
                break;
            }
            PyObject **slot[] = {&name, &tensor, put ? &a : &b, put ? &b : &dtype, &dtype};
            for (Py_ssize_t j = 0; j < k; j++) *slot[j] = PySequence_Fast_GET_ITEM(item, j);
        } else {
            char msg[200];
            snprintf(msg, sizeof msg, "entry %zd: a tuple or a dict, not %.60s", i, Py_TYPE(item)->tp_name);
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
            ok = false;
            break;
        }
        if (!ok) break;
        if (!name || !tensor) {
            char msg[120];
            snprintf(msg, sizeof msg, "entry %zd: name and %s are required", i, put ? "tensor" : "out");
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
            ok = false;
            break;
        }
        ok = put ? put_entry(tab, name, tensor, a, b, dtype, &es->v[i]) : get_entry(tab, name, tensor, b, dtype, &es->v[i]);
    }
    Py_DECREF(seq);
    if (!ok) entries_release(es);
    return ok;
}

/* ---- calls ---- */

static bool seq_arg(PyObject *o, uint64_t *out) { return pyf_u64_arg(o, "seq_id", out); }

static ferry_status_t run_put(ferry_table_t *tab, uint64_t seq, entries_t *es, ferry_table_entry_t *flat) {
    for (size_t i = 0; i < es->n; i++) {
        if (es->v[i].copy) gather(&es->v[i].ten, es->v[i].copy);
        flat[i] = es->v[i].e;
    }
    return ferry_table_multi_put(tab, seq, flat, es->n);
}

static PyObject *do_put(pyf_table_t *t, uint64_t seq, entries_t *es, const char *busy) {
    ferry_table_entry_t *flat = PyMem_Calloc(es->n ? es->n : 1, sizeof *flat);
    if (!flat) {
        entries_release(es);
        return PyErr_NoMemory();
    }
    if (!pyf_enter(&t->busy, busy)) {
        PyMem_Free(flat);
        entries_release(es);
        return NULL;
    }
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS; /* put copies (and gathers) the boxes: as long as the data is big */
    st = run_put(t->t, seq, es, flat);
    Py_END_ALLOW_THREADS;
    pyf_leave(&t->busy);
    PyMem_Free(flat);
    entries_release(es);
    if (st != FERRY_OK) return pyf_raise_call(st, ferry_table_error(t->t));
    Py_RETURN_NONE;
}

static PyObject *table_put(pyf_table_t *t, PyObject *args, PyObject *kw) {
    static char *kws[] = {"seq_id", "name", "tensor", "global_shape", "global_offset", "dtype", NULL};
    PyObject *seq_o, *name, *tensor, *gshape = Py_None, *goff = Py_None, *dtype = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OUO|OO$O:put", kws, &seq_o, &name, &tensor, &gshape, &goff, &dtype))
        return NULL;
    uint64_t seq;
    entries_t es;
    if (!check_open(t) || !seq_arg(seq_o, &seq) || !entries_alloc(&es, 1)) return NULL;
    if (!put_entry(t, name, tensor, gshape, goff, dtype, &es.v[0])) {
        entries_release(&es);
        return NULL;
    }
    return do_put(t, seq, &es, "put: another thread is using this TensorTable");
}

static PyObject *table_multi_put(pyf_table_t *t, PyObject *args, PyObject *kw) {
    static char *kws[] = {"seq_id", "entries", NULL};
    PyObject *seq_o, *list;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO:multi_put", kws, &seq_o, &list)) return NULL;
    uint64_t seq;
    entries_t es;
    if (!check_open(t) || !seq_arg(seq_o, &seq) || !entries_from(t, list, true, &es)) return NULL;
    return do_put(t, seq, &es, "multi_put: another thread is using this TensorTable");
}

static PyObject *do_get(pyf_table_t *t, uint64_t seq, entries_t *es, PyObject *timeout, const char *busy) {
    uint32_t ms;
    ferry_table_entry_t *flat = NULL;
    if (!pyf_timeout_ms(timeout, t->timeout_ms, &ms) ||
        !(flat = PyMem_Calloc(es->n ? es->n : 1, sizeof *flat))) {
        if (!PyErr_Occurred()) PyErr_NoMemory();
        entries_release(es);
        return NULL;
    }
    for (size_t i = 0; i < es->n; i++) flat[i] = es->v[i].e;
    if (!pyf_enter(&t->busy, busy)) {
        PyMem_Free(flat);
        entries_release(es);
        return NULL;
    }
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_table_multi_get(t->t, seq, flat, es->n, ms);
    Py_END_ALLOW_THREADS;
    pyf_leave(&t->busy);
    PyMem_Free(flat);
    entries_release(es);
    if (st != FERRY_OK) return pyf_raise_call(st, ferry_table_error(t->t));
    if (PyErr_Occurred()) return NULL; /* Ctrl-C right as it finished */
    Py_RETURN_NONE;
}

static PyObject *table_get(pyf_table_t *t, PyObject *args, PyObject *kw) {
    static char *kws[] = {"seq_id", "name", "out", "global_offset", "timeout", "dtype", NULL};
    PyObject *seq_o, *name, *out, *goff = Py_None, *timeout = Py_None, *dtype = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OUO|OO$O:get", kws, &seq_o, &name, &out, &goff, &timeout, &dtype))
        return NULL;
    uint64_t seq;
    entries_t es;
    if (!check_open(t) || !seq_arg(seq_o, &seq) || !entries_alloc(&es, 1)) return NULL;
    if (!get_entry(t, name, out, goff, dtype, &es.v[0])) {
        entries_release(&es);
        return NULL;
    }
    return do_get(t, seq, &es, timeout, "get: another thread is using this TensorTable");
}

static PyObject *table_multi_get(pyf_table_t *t, PyObject *args, PyObject *kw) {
    static char *kws[] = {"seq_id", "entries", "timeout", NULL};
    PyObject *seq_o, *list, *timeout = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OO|O:multi_get", kws, &seq_o, &list, &timeout)) return NULL;
    uint64_t seq;
    entries_t es;
    if (!check_open(t) || !seq_arg(seq_o, &seq) || !entries_from(t, list, false, &es)) return NULL;
    return do_get(t, seq, &es, timeout, "multi_get: another thread is using this TensorTable");
}

static PyObject *seq_call(pyf_table_t *t, PyObject *seq_o, bool complete) {
    uint64_t seq;
    if (!check_open(t) || !seq_arg(seq_o, &seq)) return NULL;
    if (!pyf_enter(&t->busy, complete ? "complete: another thread is using this TensorTable"
                                      : "drop: another thread is using this TensorTable"))
        return NULL;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS; /* both talk to the service */
    st = complete ? ferry_table_complete(t->t, seq) : ferry_table_drop(t->t, seq);
    Py_END_ALLOW_THREADS;
    pyf_leave(&t->busy);
    if (st != FERRY_OK) return pyf_raise_call(st, ferry_table_error(t->t));
    Py_RETURN_NONE;
}

static PyObject *table_complete(pyf_table_t *t, PyObject *seq) { return seq_call(t, seq, true); }
static PyObject *table_drop(pyf_table_t *t, PyObject *seq) { return seq_call(t, seq, false); }

static PyObject *table_close(pyf_table_t *t, PyObject *unused) {
    (void)unused;
    if (t->busy) return pyf_raise(FERRY_ERR_BUSY, "close: another thread is inside a call on this TensorTable");
    table_release(t);
    Py_RETURN_NONE;
}

static PyObject *table_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *table_exit(pyf_table_t *t, PyObject *args) {
    (void)args;
    PyObject *r = table_close(t, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *table_get_attr(pyf_table_t *t, void *which) {
    switch ((intptr_t)which) {
    case 0: return Py_NewRef(t->job);
    case 1: return PyLong_FromUnsignedLong(t->rank);
    case 2: return PyLong_FromUnsignedLong(t->world);
    case 4: {
        char name[32];
        pyf_device_name(t->mem, t->device, name, sizeof name);
        return PyUnicode_FromString(name);
    }
    default: return PyBool_FromLong(t->t == NULL);
    }
}

static PyObject *table_repr(pyf_table_t *t) {
    return PyUnicode_FromFormat("<ferry.TensorTable job %R, rank %u of %u%s>", t->job, t->rank, t->world,
                                t->t ? "" : " (closed)");
}

static PyMethodDef table_methods[] = {
    {"put", (PyCFunction)(void (*)(void))table_put, METH_VARARGS | METH_KEYWORDS,
     "put(seq_id, name, tensor, global_shape=None, global_offset=None, *, dtype=None)\n\n"
     "Puts tensor as the box [global_offset, global_offset + tensor.shape) of the tensor `name` of shape\n"
     "global_shape (default: the tensor's own shape; offset default: zeros) under sequence seq_id. The\n"
     "elements are copied (the tensor may be reused at once); any strided tensor is fine (a non-contiguous one\n"
     "is gathered first). dtype: the tensor's own, or one of the same element size given here ('F8_E4M3'\n"
     "over uint8). Every put of one name in one sequence must agree on dtype and global shape.\n"
     "Raises InvalidArgumentError (box outside the shape, sequence already complete, dimensions that differ),\n"
     "MismatchError (another dtype or shape for a name). Releases the GIL while copying."},
    {"multi_put", (PyCFunction)(void (*)(void))table_multi_put, METH_VARARGS | METH_KEYWORDS,
     "multi_put(seq_id, entries)\n\n"
     "put of several tensors: entries is a list of tuples (name, tensor[, global_shape[, global_offset[,\n"
     "dtype]]]) or dicts with those keys (name and tensor required). Errors as put; each entry's box is\n"
     "checked before any entry is kept."},
    {"get", (PyCFunction)(void (*)(void))table_get, METH_VARARGS | METH_KEYWORDS,
     "get(seq_id, name, out, global_offset=None, timeout=None, *, dtype=None)\n\n"
     "Fills out (a C-contiguous, writable tensor) with the box [global_offset, global_offset + out.shape) of\n"
     "the tensor `name` of sequence seq_id, read from whichever members' puts cover it (resharded) and\n"
     "verified tile by tile. Waits up to timeout seconds (default: the table's timeout) for every member to\n"
     "complete seq_id. out's dtype must be the puts' (dtype= reinterprets same-size storage).\n"
     "Raises TimeoutError (not complete in time), NotFoundError (no such name), MismatchError (dtype),\n"
     "CoverageError (no put covers part of the box), CorruptError (a tile's checksum failed),\n"
     "PeerLostError. On an error out's contents are unspecified. Releases the GIL; Ctrl-C interrupts it."},
    {"multi_get", (PyCFunction)(void (*)(void))table_multi_get, METH_VARARGS | METH_KEYWORDS,
     "multi_get(seq_id, entries, timeout=None)\n\n"
     "get of several boxes in one plan: entries is a list of tuples (name, out[, global_offset[, dtype]]) or\n"
     "dicts with those keys. Errors as get."},
    {"complete", (PyCFunction)table_complete, METH_O,
     "complete(seq_id)\n\n"
     "Publishes this member's puts of seq_id (none is fine): every member completes every sequence id before\n"
     "any get of it returns. They stay readable until drop(seq_id) or close(). Raises InvalidArgumentError if\n"
     "seq_id is already complete, PeerLostError if the service is gone. Releases the GIL."},
    {"drop", (PyCFunction)table_drop, METH_O,
     "drop(seq_id)\n\n"
     "Frees this member's puts of seq_id. Later gets of seq_id wait for this member to complete it again (and\n"
     "time out); a get reading meanwhile fails (a transport error or its checksums), never returns wrong data.\n"
     "Releases the GIL."},
    {"close", (PyCFunction)table_close, METH_NOARGS,
     "close()\n\nLeaves the job and frees every put (a serving member stops the service). Idempotent."},
    {"__enter__", table_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)table_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef table_getset[] = {
    {"job", (getter)table_get_attr, NULL, "the job name", (void *)0},
    {"rank", (getter)table_get_attr, NULL, "this member's rank", (void *)1},
    {"world", (getter)table_get_attr, NULL, "members of the table", (void *)2},
    {"closed", (getter)table_get_attr, NULL, "True after close()", (void *)3},
    {"device", (getter)table_get_attr, NULL, "where the table's tensors are: 'cpu' or 'cuda:N' (device=)", (void *)4},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyf_TableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.TensorTable",
    .tp_basicsize = sizeof(pyf_table_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "TensorTable(*, job, rank, world, meta=None, token=None, transport=None, timeout=None, lease=None,\n"
              "            serve=False, device=None)\n\n"
              "A table of arbitrary tensors shared by `world` members (this one is `rank`): members put boxes of\n"
              "named tensors under a sequence id and complete it; once every member completed a sequence id, any\n"
              "member gets any box of any of its tensors, cut from whichever puts cover it and verified. An entry\n"
              "is keyed by (seq_id, name, global shape, global offset).\n\n"
              "meta: the service's host:port (default FERRY_META); serve=True runs the service on this member,\n"
              "listening at meta (one member serves, or a Writer of the same job does). token: default\n"
              "FERRY_TOKEN, else FERRY_TOKEN_FILE, else the token a serving member on this host wrote into\n"
              "FERRY_TOKEN_DIR. transport: 'shm' (default) or 'ucx'. timeout (service round trips, transfers,\n"
              "and gets without their own) and lease in seconds. device: where the tensors put and got are: None or\n"
              "'cpu', 'cuda', 'cuda:N', an int or a torch.device; a CUDA table's puts and gets go through host\n"
              "memory (a copy each way), and a tensor on another device raises MismatchError. Connecting releases\n"
              "the GIL.\n"
              "Thread-safety: one thread at a time (a second thread gets BusyError); use a TensorTable per\n"
              "thread to work in parallel. A context manager: `with ferry.TensorTable(...) as t:` closes it.",
    .tp_dealloc = (destructor)table_dealloc,
    .tp_repr = (reprfunc)table_repr,
    .tp_methods = table_methods,
    .tp_getset = table_getset,
    .tp_new = table_new,
};

bool pyf_table_init(PyObject *m) {
    return PyType_Ready(&pyf_TableType) == 0 &&
           PyModule_AddObjectRef(m, "TensorTable", (PyObject *)&pyf_TableType) == 0;
}
