/* ferry.Writer and ferry.Reader: members of a sync job (sync.h), over the
 * caller's own tensors, in host memory or on a CUDA device (device=). Both
 * types share this struct and most methods. */
#include <dlpack/dlpack.h>
#include <stdlib.h>
#include <string.h>

#include "pyferry.h"

typedef struct pyf_member {
    PyObject_HEAD
    ferry_ctx_t *ctx;
    ferry_writer_t *w;  /* a Writer has w, a Reader r */
    ferry_reader_t *r;
    PyObject *model;
    pyf_tensor_t *regs; /* tensors registered as buffers: kept alive, checked for moves */
    char **reg_names;
    size_t nregs, cap;
    int busy;
    Py_ssize_t live_buffers; /* Host/DeviceBuffer objects alive (tensors made from them hold one) */
    bool closing;            /* closed by the caller; freed when the last buffer object goes */
    ferry_mem_type_t mem;    /* where every buffer lives (device=) */
    int device;              /* FERRY_MEM_CUDA: the CUDA ordinal; host: -1 */
} pyf_member_t;

/* A buffer ferry allocated (alloc_buffer, None in add_layout): a HostBuffer
 * (host memory: the buffer protocol and DLPack) or a DeviceBuffer (GPU
 * memory: DLPack only). torch.from_dlpack(buf) views its bytes. */
typedef struct pyf_hostbuf {
    PyObject_HEAD
    pyf_member_t *member;
    void *ptr;
    Py_ssize_t size;
    ferry_mem_type_t mem;
    int device;
} pyf_hostbuf_t;

/* (ferry.Writer is a Python subclass of the C type) */
static bool is_writer(const pyf_member_t *m) { return PyObject_TypeCheck((PyObject *)m, &pyf_WriterType); }

static const char *member_error(const pyf_member_t *m) {
    return m->w ? ferry_writer_error(m->w) : ferry_reader_error(m->r);
}

static bool check_open(pyf_member_t *m) {
    if ((m->w || m->r) && !m->closing) return true;
    pyf_raise(FERRY_ERR_STALE, is_writer(m) ? "the Writer is closed" : "the Reader is closed");
    return false;
}

static void member_release(pyf_member_t *m) {
    PyThreadState *ts = PyEval_SaveThread(); /* leaving a job talks to the service */
    ferry_writer_destroy(m->w);
    ferry_reader_destroy(m->r);
    PyEval_RestoreThread(ts);
    m->w = NULL, m->r = NULL;
    for (size_t i = 0; i < m->nregs; i++) {
        pyf_tensor_release(&m->regs[i]);
        PyMem_Free(m->reg_names[i]);
    }
    PyMem_Free(m->regs);
    PyMem_Free(m->reg_names);
    m->regs = NULL, m->reg_names = NULL, m->nregs = m->cap = 0;
}

static void member_dealloc(pyf_member_t *m) {
    member_release(m);
    ferry_ctx_destroy(m->ctx);
    Py_XDECREF(m->model);
    Py_TYPE(m)->tp_free((PyObject *)m);
}

/* ---- construction ---- */

static bool enum_arg(const char *s, const char *what, const char *const *names, const int *values, int *out) {
    if (!s) return true;
    for (int i = 0; names[i]; i++)
        if (strcmp(s, names[i]) == 0) {
            *out = values[i];
            return true;
        }
    char msg[160];
    snprintf(msg, sizeof msg, "%s: '%.40s' is not one of the accepted values", what, s);
    pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
    return false;
}

static bool bad_device(PyObject *o) {
    PyObject *r = PyObject_Repr(o);
    const char *txt = r ? PyUnicode_AsUTF8(r) : NULL;
    char msg[320];
    snprintf(msg, sizeof msg,
             "device=%.60s is not one ferry takes: None or 'cpu' (host memory), 'cuda' (the current CUDA device), "
             "'cuda:N', an int N, or a torch.device of type cpu or cuda",
             txt ? txt : "?");
    Py_XDECREF(r);
    PyErr_Clear();
    pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
    return false;
}

/* 'cuda' without an index: torch's current device where torch is loaded
 * (never imported from here), else 0, as CUDA's own default. */
static bool current_cuda_device(int *out) {
    *out = 0;
    PyObject *name = PyUnicode_FromString("torch");
    if (!name) return false;
    PyObject *torch = PyImport_GetModule(name);
    Py_DECREF(name);
    if (!torch) return !PyErr_Occurred();
    PyObject *cuda = PyObject_GetAttrString(torch, "cuda");
    Py_DECREF(torch);
    if (!cuda) return false;
    PyObject *avail = PyObject_CallMethod(cuda, "is_available", NULL);
    int yes = avail ? PyObject_IsTrue(avail) : -1;
    Py_XDECREF(avail);
    PyObject *cur = yes == 1 ? PyObject_CallMethod(cuda, "current_device", NULL) : NULL;
    Py_DECREF(cuda);
    if (yes < 0 || (yes == 1 && !cur)) return false;
    if (cur) {
        long d = PyLong_AsLong(cur);
        Py_DECREF(cur);
        if (d == -1 && PyErr_Occurred()) return false;
        *out = (int)d;
    }
    return true;
}

/* device= (pyferry.h): None or 'cpu' (host), 'cuda' (the current device), 'cuda:N', an
 * int N, or an object with .type and .index (a torch.device, read without
 * torch). *given false for None (the library's default, host). */
bool pyf_device_arg(PyObject *o, ferry_mem_type_t *mem, int *device, bool *given) {
    *mem = FERRY_MEM_HOST, *device = -1, *given = o != Py_None;
    if (o == Py_None) return true;
    char type[16] = "";
    long index = -1; /* none given */
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        index = PyLong_AsLong(o);
        if ((index == -1 && PyErr_Occurred()) || index < 0 || index > INT32_MAX) return bad_device(o);
        snprintf(type, sizeof type, "cuda");
    } else if (PyUnicode_Check(o)) {
        const char *s = PyUnicode_AsUTF8(o);
        if (!s) return false;
        const char *colon = strchr(s, ':');
        size_t tlen = colon ? (size_t)(colon - s) : strlen(s);
        if (tlen >= sizeof type) return bad_device(o);
        memcpy(type, s, tlen);
        type[tlen] = 0;
        if (colon) {
            char *end = NULL;
            if (colon[1] < '0' || colon[1] > '9') return bad_device(o);
            index = strtol(colon + 1, &end, 10);
            if (*end || index > INT32_MAX) return bad_device(o);
        }
    } else if (PyObject_HasAttrString(o, "type") && PyObject_HasAttrString(o, "index")) {
        PyObject *t = PyObject_GetAttrString(o, "type"), *i = t ? PyObject_GetAttrString(o, "index") : NULL;
        const char *ts = t && PyUnicode_Check(t) ? PyUnicode_AsUTF8(t) : NULL;
        bool ok = ts && strlen(ts) < sizeof type && i && (i == Py_None || (PyLong_Check(i) && !PyBool_Check(i)));
        if (ok) {
            snprintf(type, sizeof type, "%s", ts);
            if (i != Py_None) {
                index = PyLong_AsLong(i);
                ok = !(index == -1 && PyErr_Occurred()) && index >= 0 && index <= INT32_MAX;
            }
        }
        Py_XDECREF(t);
        Py_XDECREF(i);
        if (!ok) return bad_device(o);
    } else
        return bad_device(o);
    if (strcmp(type, "cpu") == 0) return true;
    if (strcmp(type, "cuda") != 0) return bad_device(o);
    *mem = FERRY_MEM_CUDA;
    if (index >= 0) *device = (int)index;
    else if (!current_cuda_device(device))
        return false;
    return true;
}

static PyObject *member_new(PyTypeObject *cls, PyObject *args, PyObject *kw) {
    bool writer = cls == &pyf_WriterType || PyType_IsSubtype(cls, &pyf_WriterType);
    static char *wkws[] = {"model", "job", "rank", "world", "meta", "token", "transport", "timeout", "lease",
                           "threads", "deltas", "device", "mode", "slots", "serve", "pack_limit", "delta_chain", NULL};
    static char *rkws[] = {"model", "job", "rank", "world", "meta", "token", "transport", "timeout", "lease",
                           "threads", "deltas", "device", "staged", "inflight", "pack_limit", "delta_chain", NULL};
    PyObject *model, *timeout = Py_None, *lease = Py_None, *serve = Py_None, *slots = Py_None, *inflight = Py_None,
                     *threads = Py_None, *device = Py_None, *pack_limit = Py_None, *delta_chain = Py_None;
    const char *job = NULL, *meta = NULL, *token = NULL, *transport = NULL, *deltas = NULL, *mode = NULL;
    unsigned int rank = UINT32_MAX, world = UINT32_MAX;
    int staged = 0;
    int ok = writer ? PyArg_ParseTupleAndKeywords(args, kw, "O!|$sIIzzzOOOzOzOOOO:Writer", wkws, &pyf_ModelType,
                                                  &model, &job, &rank, &world, &meta, &token, &transport, &timeout,
                                                  &lease, &threads, &deltas, &device, &mode, &slots, &serve,
                                                  &pack_limit, &delta_chain)
                    : PyArg_ParseTupleAndKeywords(args, kw, "O!|$sIIzzzOOOzOpOOO:Reader", rkws, &pyf_ModelType,
                                                  &model, &job, &rank, &world, &meta, &token, &transport, &timeout,
                                                  &lease, &threads, &deltas, &device, &staged, &inflight, &pack_limit,
                                                  &delta_chain);
    if (!ok) return NULL;
    if (!job || rank == UINT32_MAX || world == UINT32_MAX)
        return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, writer ? "Writer: job=, rank= and world= are required"
                                                            : "Reader: job=, rank= and world= are required");

    ferry_sync_params_t p = {.field_mask = 0, .job = job, .rank = rank, .world = world};
    if (meta) p.field_mask |= FERRY_SYNC_PARAM_META, p.meta = meta;
    if (token) p.field_mask |= FERRY_SYNC_PARAM_TOKEN, p.token = token;
    static const char *const xports[] = {"shm", "ucx", NULL};
    static const int xport_v[] = {FERRY_XPORT_SHM, FERRY_XPORT_UCX};
    static const char *const deltas_n[] = {"auto", "always", "off", NULL};
    static const int deltas_v[] = {FERRY_SYNC_DELTAS_AUTO, FERRY_SYNC_DELTAS_ALWAYS, FERRY_SYNC_DELTAS_OFF};
    static const char *const modes[] = {"sync", "async", NULL};
    static const int mode_v[] = {FERRY_SYNC_MODE_SYNC, FERRY_SYNC_MODE_ASYNC};
    int v = 0;
    if (transport) {
        if (!enum_arg(transport, "transport ('shm' or 'ucx')", xports, xport_v, &v)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_TRANSPORT, p.transport = (ferry_xport_kind_t)v;
    }
    if (deltas) {
        if (!enum_arg(deltas, "deltas ('auto', 'always' or 'off')", deltas_n, deltas_v, &v)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_DELTAS, p.deltas = (ferry_sync_deltas_t)v;
    }
    if (mode) {
        if (!enum_arg(mode, "mode ('sync' or 'async')", modes, mode_v, &v)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_MODE, p.mode = (ferry_sync_mode_t)v;
    }
    if (timeout != Py_None) {
        if (!pyf_timeout_ms(timeout, 0, &p.timeout_ms)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_TIMEOUT_MS;
    }
    if (lease != Py_None) {
        if (!pyf_timeout_ms(lease, 0, &p.lease_ms)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_LEASE_MS;
    }
    if (threads != Py_None) {
        if (!pyf_u32_arg(threads, "threads", &p.threads)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_THREADS;
    }
    if (slots != Py_None) {
        if (!pyf_u32_arg(slots, "slots", &p.slots)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_SLOTS;
    }
    if (serve != Py_None) {
        int b = PyObject_IsTrue(serve);
        if (b < 0) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_SERVE, p.serve = b;
    }
    if (staged) p.field_mask |= FERRY_SYNC_PARAM_STAGED, p.staged = true;
    if (inflight != Py_None) {
        if (!pyf_u64_arg(inflight, "inflight", &p.inflight_bytes)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_INFLIGHT;
    }
    if (pack_limit != Py_None) {
        if (!pyf_u64_arg(pack_limit, "pack_limit", &p.pack_limit)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_PACK_LIMIT;
    }
    if (delta_chain != Py_None) {
        if (!pyf_u32_arg(delta_chain, "delta_chain", &p.delta_chain)) return NULL;
        p.field_mask |= FERRY_SYNC_PARAM_DELTA_CHAIN;
    }
    bool dev_given;
    if (!pyf_device_arg(device, &p.memory, &p.device, &dev_given)) return NULL;
    if (dev_given) p.field_mask |= FERRY_SYNC_PARAM_MEMORY;

    pyf_member_t *m = (pyf_member_t *)cls->tp_alloc(cls, 0);
    if (!m) return NULL;
    m->model = Py_NewRef(model);
    m->mem = p.memory;
    m->device = p.memory == FERRY_MEM_CUDA ? p.device : -1;
    if (!(m->ctx = pyf_ctx_create())) {
        Py_DECREF(m);
        return NULL;
    }
    const ferry_model_t *fm = ((pyf_model_t *)model)->model;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = writer ? ferry_writer_create(m->ctx, fm, &p, &m->w) : ferry_reader_create(m->ctx, fm, &p, &m->r);
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) {
        pyf_raise_call(st, ferry_ctx_error(m->ctx));
        Py_DECREF(m);
        return NULL;
    }
    return (PyObject *)m;
}

/* ---- buffers and pieces ---- */

static bool keep_tensor(pyf_member_t *m, pyf_tensor_t *t, const char *name) {
    if (m->nregs == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        pyf_tensor_t *regs = PyMem_Realloc(m->regs, cap * sizeof *regs);
        if (regs) m->regs = regs;
        char **names = regs ? PyMem_Realloc(m->reg_names, cap * sizeof *names) : NULL;
        if (!names) {
            PyErr_NoMemory();
            return false;
        }
        m->reg_names = names;
        m->cap = cap;
    }
    size_t len = strlen(name) + 1;
    char *copy = PyMem_Malloc(len);
    if (!copy) {
        PyErr_NoMemory();
        return false;
    }
    memcpy(copy, name, len);
    m->regs[m->nregs] = *t;
    m->reg_names[m->nregs++] = copy;
    memset(t, 0, sizeof *t); /* moved */
    return true;
}

/* A tensor on another device than the member's buffers: MismatchError
 * naming the tensor and both devices (before anything is registered). */
static bool check_device(const pyf_member_t *m, const pyf_tensor_t *t, const char *what) {
    if (t->mem == m->mem && (t->mem != FERRY_MEM_CUDA || t->device == m->device)) return true;
    char have[32], want[32], msg[600];
    pyf_device_name(t->mem, t->device, have, sizeof have);
    pyf_device_name(m->mem, m->device, want, sizeof want);
    const char *kind = is_writer(m) ? "Writer" : "Reader";
    snprintf(msg, sizeof msg,
             "%s: the tensor is on %s, this %s's buffers are on %s (its device=): move the tensor there, or make "
             "the %s with device='%s'",
             what, have, kind, want, kind, have);
    pyf_raise(FERRY_ERR_MISMATCH, msg);
    return false;
}

static int tensor_access(const pyf_member_t *m) { return (is_writer(m) ? PYF_READ : PYF_WRITE) | PYF_CUDA; }

static PyObject *member_add_buffer(pyf_member_t *m, PyObject *args, PyObject *kw) {
    static char *kws[] = {"name", "tensor", "dtype", NULL};
    const char *name;
    PyObject *tensor, *dtype_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "sO|O:add_buffer", kws, &name, &tensor, &dtype_obj) ||
        !check_open(m))
        return NULL;
    ferry_dtype_t dt;
    bool given;
    if (!pyf_dtype_arg(dtype_obj, &dt, &given)) return NULL;
    char what[300];
    snprintf(what, sizeof what, "buffer '%.200s'", name);
    pyf_tensor_t t;
    if (!pyf_tensor_get(tensor, tensor_access(m), given ? &dt : NULL, what, &t)) return NULL;
    if (!check_device(m, &t, what)) {
        pyf_tensor_release(&t);
        return NULL;
    }
    /* the buffer is the tensor's whole storage span; pieces address it */
    uint32_t index;
    ferry_status_t st = m->w ? ferry_writer_add_buffer(m->w, name, t.dtype, t.data, t.span, &index)
                             : ferry_reader_add_buffer(m->r, name, t.dtype, t.data, t.span, &index);
    if (st != FERRY_OK) {
        pyf_tensor_release(&t);
        return pyf_raise(st, member_error(m));
    }
    if (!keep_tensor(m, &t, name)) {
        pyf_tensor_release(&t);
        return NULL;
    }
    return PyLong_FromUnsignedLong(index);
}

/* The member's memory ferry allocated: a HostBuffer, or a DeviceBuffer for
 * a CUDA member. */
static PyObject *hostbuf_new(pyf_member_t *m, void *ptr, uint64_t size) {
    pyf_hostbuf_t *b = PyObject_New(pyf_hostbuf_t, m->mem == FERRY_MEM_CUDA ? &pyf_DeviceBufferType : &pyf_HostBufferType);
    if (!b) return NULL;
    b->member = (pyf_member_t *)Py_NewRef(m);
    m->live_buffers++;
    b->ptr = ptr;
    b->size = (Py_ssize_t)size;
    b->mem = m->mem;
    b->device = m->device;
    return (PyObject *)b;
}

static PyObject *member_alloc_buffer(pyf_member_t *m, PyObject *args) {
    const char *name;
    PyObject *dtype_obj;
    unsigned long long size;
    if (!PyArg_ParseTuple(args, "sOK:alloc_buffer", &name, &dtype_obj, &size) || !check_open(m)) return NULL;
    if (!m->w) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "alloc_buffer: readers get ferry-owned buffers through add_layout");
    ferry_dtype_t dt;
    bool given;
    if (!pyf_dtype_arg(dtype_obj, &dt, &given)) return NULL;
    if (!given) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "alloc_buffer: a dtype is required");
    void *ptr;
    uint32_t index;
    ferry_status_t st = ferry_writer_alloc_buffer(m->w, name, dt, size, &ptr, &index);
    if (st != FERRY_OK) return pyf_raise(st, member_error(m));
    PyObject *buf = hostbuf_new(m, ptr, size);
    if (!buf) return NULL;
    return Py_BuildValue("(kN)", (unsigned long)index, buf);
}

static PyObject *member_add_piece(pyf_member_t *m, PyObject *args, PyObject *kw) {
    static char *kws[] = {"tensor", "offset", "extent", "buffer", "byte_offset", "strides", NULL};
    PyObject *tensor, *offset, *extent, *strides;
    unsigned int buffer;
    unsigned long long byte_offset;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOIKO:add_piece", kws, &tensor, &offset, &extent, &buffer,
                                     &byte_offset, &strides) ||
        !check_open(m))
        return NULL;
    ferry_piece_t p;
    if (!pyf_piece_args(((pyf_model_t *)m->model)->model, tensor, offset, extent, buffer, byte_offset, strides, &p))
        return NULL;
    ferry_status_t st = m->w ? ferry_writer_add_piece(m->w, &p) : ferry_reader_add_piece(m->r, &p);
    if (st != FERRY_OK) return pyf_raise(st, member_error(m));
    Py_RETURN_NONE;
}

/* add_layout(layout, rank, tensors): tensors[i] for the rank's i-th buffer
 * (C-contiguous, the buffer's dtype and byte size), or None to have ferry
 * allocate it (returned as a HostBuffer in its place). */
static PyObject *member_add_layout(pyf_member_t *m, PyObject *args) {
    PyObject *layout_obj, *tensors;
    unsigned int rank;
    if (!PyArg_ParseTuple(args, "O!IO:add_layout", &pyf_LayoutType, &layout_obj, &rank, &tensors) || !check_open(m))
        return NULL;
    const ferry_layout_t *lay = ((pyf_layout_t *)layout_obj)->layout;
    if (ferry_layout_model(lay) != ((pyf_model_t *)m->model)->model)
        return pyf_raise(FERRY_ERR_MISMATCH, "add_layout: the layout places another Model than this member's");
    uint32_t nbuf = ferry_layout_buffer_count(lay), nrank = 0;
    ferry_buffer_info_t *infos = PyMem_Malloc(sizeof *infos * (nbuf ? nbuf : 1));
    if (!infos) return PyErr_NoMemory();
    for (uint32_t i = 0; i < nbuf; i++) {
        ferry_buffer_info_t b;
        ferry_layout_buffer(lay, i, &b);
        if (b.rank == rank) infos[nrank++] = b;
    }
    PyObject *seq = PySequence_Fast(tensors, "add_layout: tensors must be a sequence (one per buffer of the rank)");
    pyf_tensor_t *ts = NULL;
    void **ptrs = NULL;
    PyObject *result = NULL;
    Py_ssize_t got = 0;
    if (!seq) goto out;
    if (PySequence_Fast_GET_SIZE(seq) != (Py_ssize_t)nrank) {
        char msg[160];
        snprintf(msg, sizeof msg, "add_layout: rank %u has %u buffers, %zd tensors given", rank, nrank,
                 PySequence_Fast_GET_SIZE(seq));
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        goto out;
    }
    ts = PyMem_Calloc(nrank ? nrank : 1, sizeof *ts);
    ptrs = PyMem_Calloc(nrank ? nrank : 1, sizeof *ptrs);
    if (!ts || !ptrs) {
        PyErr_NoMemory();
        goto out;
    }
    for (; got < (Py_ssize_t)nrank; got++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, got);
        if (o == Py_None) continue;
        const ferry_buffer_info_t *b = &infos[got];
        char what[300];
        snprintf(what, sizeof what, "buffer '%.200s' (rank %u)", b->name, rank);
        if (!pyf_tensor_get(o, tensor_access(m), NULL, what, &ts[got])) goto out;
        if (!check_device(m, &ts[got], what)) {
            got++;
            goto out;
        }
        if (!pyf_dtype_fits(ts[got].dtype, b->dtype)) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s: the tensor holds %s, the buffer %s", what, ferry_dtype_name(ts[got].dtype),
                     ferry_dtype_name(b->dtype));
            got++;
            pyf_raise(FERRY_ERR_MISMATCH, msg);
            goto out;
        }
        if (!ts[got].contiguous || ts[got].span != b->size) {
            char shape[128] = "";
            size_t at = 0;
            for (uint32_t d = 0; d < ts[got].ndim && at < sizeof shape; d++)
                at += (size_t)snprintf(shape + at, sizeof shape - at, "%s%lld", d ? ", " : "", (long long)ts[got].shape[d]);
            char want[128] = "";
            at = 0;
            for (uint32_t d = 0; d < b->ndim && at < sizeof want; d++)
                at += (size_t)snprintf(want + at, sizeof want - at, "%s%lld", d ? ", " : "", (long long)b->shape[d]);
            char msg[700];
            snprintf(msg, sizeof msg, "%s: the tensor [%s] (%s, %llu bytes) does not fit the buffer [%s] %s of %llu bytes",
                     what, shape, ts[got].contiguous ? "contiguous" : "not contiguous",
                     (unsigned long long)ts[got].span, want, ferry_dtype_name(b->dtype), (unsigned long long)b->size);
            got++;
            pyf_raise(FERRY_ERR_MISMATCH, msg);
            goto out;
        }
        ptrs[got] = ts[got].data;
    }
    ferry_status_t st = m->w ? ferry_writer_add_layout(m->w, lay, rank, ptrs, nrank)
                             : ferry_reader_add_layout(m->r, lay, rank, ptrs, nrank);
    if (st != FERRY_OK) {
        pyf_raise(st, member_error(m));
        goto out;
    }
    result = PyList_New(nrank);
    for (uint32_t i = 0; result && i < nrank; i++) {
        PyObject *o = PySequence_Fast_GET_ITEM(seq, i);
        PyObject *item = o == Py_None ? hostbuf_new(m, ptrs[i], infos[i].size) : Py_NewRef(o);
        if (!item) Py_CLEAR(result);
        else
            PyList_SET_ITEM(result, i, item);
        if (o != Py_None && !keep_tensor(m, &ts[i], infos[i].name)) Py_CLEAR(result);
    }
out:
    for (Py_ssize_t i = 0; ts && i < (Py_ssize_t)nrank; i++) pyf_tensor_release(&ts[i]);
    PyMem_Free(ts);
    PyMem_Free(ptrs);
    PyMem_Free(infos);
    Py_XDECREF(seq);
    return result;
}

/* ---- blocking calls ---- */

/* Refuses to run when a registered tensor's storage was swapped since
 * registration: ferry would move the old memory, not the new. */
static bool check_moves(pyf_member_t *m) {
    for (size_t i = 0; i < m->nregs; i++) {
        uintptr_t now;
        if (pyf_tensor_moved(&m->regs[i], &now)) {
            char msg[400];
            snprintf(msg, sizeof msg,
                     "buffer '%.200s': its tensor's storage moved since it was registered (data_ptr %#llx, now %#llx); "
                     "ferry moves the registered memory only: update tensors in place (copy_, optimizer steps) or "
                     "register again",
                     m->reg_names[i], (unsigned long long)(uintptr_t)m->regs[i].data, (unsigned long long)now);
            pyf_raise(FERRY_ERR_MISMATCH, msg);
            return false;
        }
    }
    return true;
}

static PyObject *member_commit(pyf_member_t *m, PyObject *unused) {
    (void)unused;
    if (!check_open(m) || !pyf_enter(&m->busy, "commit: another thread is using this member")) return NULL;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = m->w ? ferry_writer_commit(m->w) : ferry_reader_commit(m->r);
    Py_END_ALLOW_THREADS;
    pyf_leave(&m->busy);
    if (st != FERRY_OK) return pyf_raise_call(st, member_error(m));
    Py_RETURN_NONE;
}

static PyObject *writer_publish(pyf_member_t *m, PyObject *arg) {
    uint64_t version;
    if (!pyf_u64_arg(arg, "publish: version", &version)) return NULL;
    if (!check_open(m) || !check_moves(m) || !pyf_enter(&m->busy, "publish: another thread is using this Writer"))
        return NULL;
    ferry_publish_info_t info;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_writer_publish(m->w, version, &info);
    Py_END_ALLOW_THREADS;
    pyf_leave(&m->busy);
    if (st != FERRY_OK) return pyf_raise_call(st, member_error(m));
    if (PyErr_Occurred()) return NULL; /* Ctrl-C right as it finished */
    PyObject *o = PyStructSequence_New(pyf_PublishInfo);
    if (!o) return NULL;
    int i = 0;
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.version));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.snapshot_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.pack_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.hash_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.wait_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.bytes_served));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(info.readers_acked));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(info.readers_missing));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.delta_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.delta_bytes));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.device_bytes));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *reader_update(pyf_member_t *m, PyObject *args, PyObject *kw) {
    static char *kws[] = {"version", "timeout", NULL};
    PyObject *vobj = Py_None, *tobj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|OO:update", kws, &vobj, &tobj)) return NULL;
    uint64_t version = FERRY_VERSION_LATEST;
    if (PyUnicode_Check(vobj)) {
        const char *s = PyUnicode_AsUTF8(vobj);
        if (!s) return NULL;
        if (strcmp(s, "next") == 0) version = FERRY_VERSION_NEXT;
        else if (strcmp(s, "latest") != 0)
            return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "update: version is a number, 'latest' or 'next'");
    } else if (vobj != Py_None) {
        if (!pyf_u64_arg(vobj, "update: version", &version)) return NULL;
        if (version == 0 || version >= FERRY_VERSION_NEXT)
            return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "update: version numbers are >= 1");
    }
    uint32_t timeout_ms;
    if (!pyf_timeout_ms(tobj, 30000, &timeout_ms)) return NULL;
    if (!check_open(m) || !check_moves(m) || !pyf_enter(&m->busy, "update: another thread is using this Reader"))
        return NULL;
    ferry_update_info_t info;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_reader_update(m->r, version, timeout_ms, &info);
    Py_END_ALLOW_THREADS;
    pyf_leave(&m->busy);
    if (st != FERRY_OK) return pyf_raise_call(st, member_error(m));
    if (PyErr_Occurred()) return NULL;
    PyObject *o = PyStructSequence_New(pyf_UpdateInfo);
    if (!o) return NULL;
    int i = 0;
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.version));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.bytes));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.wait_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.pull_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.verify_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyFloat_FromDouble(info.apply_seconds));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(info.retries));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(info.sources));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(info.delta_pairs));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.delta_bytes));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLongLong(info.device_bytes));
    PyStructSequence_SET_ITEM(o, i++, PyLong_FromUnsignedLong(info.delta_steps));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

/* Memory ferry allocated must outlive the tensors made from it (adopted
 * parameters): while any is alive, close() makes the member unusable at
 * once and the C object, which owns that memory, goes with the last one. */
static PyObject *member_close(pyf_member_t *m, PyObject *unused) {
    (void)unused;
    if (m->busy) return pyf_raise(FERRY_ERR_BUSY, "close: another thread is inside a call on this member");
    if (m->live_buffers > 0) PyGC_Collect(); /* cycles (modules) may be all that holds them */
    if (m->live_buffers > 0) m->closing = true;
    else
        member_release(m);
    Py_RETURN_NONE;
}

static PyObject *member_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *member_exit(pyf_member_t *m, PyObject *args) {
    (void)args;
    PyObject *r = member_close(m, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *member_get(pyf_member_t *m, void *which) {
    switch ((intptr_t)which) {
    case 0: return Py_NewRef(m->model);
    case 1: return PyBool_FromLong(m->closing || !(m->w || m->r));
    case 2: return PyUnicode_FromString(m->w ? ferry_writer_service_address(m->w) : "");
    case 3: return PyLong_FromUnsignedLongLong(m->r ? ferry_reader_version(m->r) : 0);
    case 4: return PyBool_FromLong(m->r && ferry_reader_torn(m->r));
    default: {
        char name[32];
        pyf_device_name(m->mem, m->device, name, sizeof name);
        return PyUnicode_FromString(name);
    }
    }
}

#define COMMON_METHODS                                                                                              \
    {"add_buffer", (PyCFunction)(void (*)(void))member_add_buffer, METH_VARARGS | METH_KEYWORDS,                    \
     "add_buffer(name, tensor, dtype=None) -> index\n\nRegisters a tensor's storage (no copy) as a buffer. The "    \
     "tensor must stay alive and in place (ferry keeps a reference) and be on the member's device "                 \
     "(MismatchError otherwise); dtype reinterprets same-size elements (uint8 storage as 'F8_E4M3')."},                                                                              \
        {"add_piece", (PyCFunction)(void (*)(void))member_add_piece, METH_VARARGS | METH_KEYWORDS,                   \
         "add_piece(tensor, offset, extent, buffer, byte_offset, strides)\n\nAdds a piece on a buffer (checked as " \
         "Layout.add_piece)."},                                                                                     \
        {"add_layout", (PyCFunction)member_add_layout, METH_VARARGS,                                                \
         "add_layout(layout, rank, tensors) -> list\n\nRegisters every buffer and piece the layout gives rank: "    \
         "tensors[i] is the rank's i-th buffer (C-contiguous, its dtype and byte size, on the member's device; "  \
         "MismatchError names the buffer otherwise) or None for a ferry-allocated one, returned as a HostBuffer "  \
         "(DeviceBuffer for a CUDA member) in its place."},            \
        {"commit", (PyCFunction)member_commit, METH_NOARGS,                                                         \
         "commit()\n\nSends this member's layout to the service (releases the GIL)."},                             \
        {"close", (PyCFunction)member_close, METH_NOARGS,                                                           \
         "close()\n\nLeaves the job and frees what ferry holds; the member is unusable from then on. Memory "     \
         "ferry allocated (HostBuffers, adopted parameters) stays valid while tensors use it: the member then "     \
         "leaves the job when the last of them is freed."},                                                        \
        {"__enter__", member_enter, METH_NOARGS, NULL}, {"__exit__", (PyCFunction)member_exit, METH_VARARGS, NULL}

static PyMethodDef writer_methods[] = {
    COMMON_METHODS,
    {"alloc_buffer", (PyCFunction)member_alloc_buffer, METH_VARARGS,
     "alloc_buffer(name, dtype, nbytes) -> (index, HostBuffer or DeviceBuffer)\n\nA zeroed buffer peers map "
     "directly (the fast path of shm), on the member's device: a HostBuffer (torch.frombuffer(buf, dtype=...)) "
     "or, for a CUDA Writer, a DeviceBuffer (torch.from_dlpack(buf).view(dtype))."},
    {"publish", (PyCFunction)writer_publish, METH_O,
     "publish(version) -> PublishInfo\n\nPublishes version (greater than every one before). Sync mode: readers read "
     "the live tensors while this waits for their acknowledgements (up to the timeout); async: snapshots and "
     "returns. Releases the GIL; Ctrl-C interrupts its waits."},
    {NULL, NULL, 0, NULL},
};

static PyMethodDef reader_methods[] = {
    COMMON_METHODS,
    {"update", (PyCFunction)(void (*)(void))reader_update, METH_VARARGS | METH_KEYWORDS,
     "update(version='latest', timeout=30.0) -> UpdateInfo\n\nBrings the registered tensors to version (a number, "
     "'latest' or 'next'), in place and verified, waiting up to timeout seconds for it. Raises TimeoutError, "
     "StaleError (gone), CorruptError (checksums kept failing), PeerLostError. Releases the GIL; Ctrl-C "
     "interrupts its waits (the tensors may then be torn: see .torn; the next update repairs them)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef writer_getset[] = {
    {"model", (getter)member_get, NULL, "the Model", (void *)0},
    {"closed", (getter)member_get, NULL, "True after close()", (void *)1},
    {"service_address", (getter)member_get, NULL, "host:port of the service this writer runs ('' if none)", (void *)2},
    {"device", (getter)member_get, NULL, "where this member's buffers are: 'cpu' or 'cuda:N' (device=)", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyGetSetDef reader_getset[] = {
    {"model", (getter)member_get, NULL, "the Model", (void *)0},
    {"closed", (getter)member_get, NULL, "True after close()", (void *)1},
    {"version", (getter)member_get, NULL, "the version the tensors hold, verified (0: none, or torn)", (void *)3},
    {"torn", (getter)member_get, NULL, "True when a failed update left the tensors partly written", (void *)4},
    {"device", (getter)member_get, NULL, "where this member's buffers are: 'cpu' or 'cuda:N' (device=)", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyf_WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Writer",
    .tp_basicsize = sizeof(pyf_member_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Writer(model, *, job, rank, world, meta=None, token=None, transport='shm', timeout=None, lease=None,\n"
              "       threads=None, deltas='auto', device=None, mode='sync', slots=None, serve=None, pack_limit=None,\n"
              "       delta_chain=None)\n\n"
              "A trainer rank of a sync job: registers its tensors (add_layout, add_buffer/add_piece, or\n"
              "ferry.register for a module), commits, and publishes versions. Rank 0 runs the metadata service\n"
              "at meta (default FERRY_META) unless serve=False. timeout and lease in seconds. device: where every\n"
              "buffer is (None/'cpu', 'cuda', 'cuda:N', an int N or a torch.device). pack_limit: most bytes of the\n"
              "area where strided sources are packed (None: no limit); every member of a job gives the same.\n"
              "delta_chain: sync deltas, most versions a reader may be behind and still get them (default 8).\n"
              "One thread at a time.",
    .tp_dealloc = (destructor)member_dealloc,
    .tp_methods = writer_methods,
    .tp_getset = writer_getset,
    .tp_new = member_new,
};

PyTypeObject pyf_ReaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Reader",
    .tp_basicsize = sizeof(pyf_member_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Reader(model, *, job, rank, world, meta=None, token=None, transport='shm', timeout=None, lease=None,\n"
              "       threads=None, deltas='auto', device=None, staged=False, inflight=None, pack_limit=None,\n"
              "       delta_chain=None)\n\n"
              "An engine rank of a sync job: registers its own tensors as destinations, commits, and updates\n"
              "them in place to published versions. device: where every buffer is (None/'cpu', 'cuda',\n"
              "'cuda:N', an int N or a torch.device). pack_limit: as the writers'. delta_chain: most delta steps\n"
              "applied in one update (default 8; more: pull whole). One thread at a time.",
    .tp_dealloc = (destructor)member_dealloc,
    .tp_methods = reader_methods,
    .tp_getset = reader_getset,
    .tp_new = member_new,
};

/* ---- HostBuffer, DeviceBuffer ---- */

static bool hostbuf_open(const pyf_hostbuf_t *b) {
    if (b->member->w || b->member->r) return true;
    pyf_raise(FERRY_ERR_STALE, Py_TYPE(b) == &pyf_DeviceBufferType ? "DeviceBuffer: its Writer/Reader is closed"
                                                                  : "HostBuffer: its Writer/Reader is closed");
    return false;
}

static int hostbuf_getbuffer(pyf_hostbuf_t *b, Py_buffer *view, int flags) {
    if (!hostbuf_open(b)) return -1;
    return PyBuffer_FillInfo(view, (PyObject *)b, b->ptr, b->size, 0, flags);
}

static void hostbuf_dealloc(pyf_hostbuf_t *b) {
    if (--b->member->live_buffers == 0 && b->member->closing) member_release(b->member);
    Py_XDECREF(b->member);
    PyObject_Free(b);
}

static Py_ssize_t hostbuf_len(pyf_hostbuf_t *b) { return b->size; }

/* DLPack export: a 1-D uint8 tensor over the buffer's bytes whose manager
 * holds the buffer object (so the memory, and its member, live while the
 * consumer's tensor does). */
typedef struct dl_export {
    DLManagedTensor mt;
    int64_t shape[1], strides[1];
} dl_export_t;

static void dl_export_free(DLManagedTensor *mt) {
    /* the consumer frees its tensor on any thread, with or without the GIL */
    if (mt->manager_ctx && Py_IsInitialized()) {
        PyGILState_STATE g = PyGILState_Ensure();
        Py_DECREF((PyObject *)mt->manager_ctx);
        PyGILState_Release(g);
    }
    PyMem_RawFree(mt);
}

static void dl_capsule_free(PyObject *cap) {
    if (!PyCapsule_IsValid(cap, "dltensor")) return; /* consumed: the consumer calls the deleter */
    DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
    if (mt && mt->deleter) mt->deleter(mt);
}

static void hostbuf_dl_device(const pyf_hostbuf_t *b, int *type, int *id) {
    *type = b->mem == FERRY_MEM_CUDA ? kDLCUDA : kDLCPU;
    *id = b->mem == FERRY_MEM_CUDA ? b->device : 0;
}

static PyObject *hostbuf_dlpack_device(pyf_hostbuf_t *b, PyObject *unused) {
    (void)unused;
    int type, id;
    hostbuf_dl_device(b, &type, &id);
    return Py_BuildValue("(ii)", type, id);
}

/* __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None):
 * the stream needs nothing (ferry's own GPU work on the memory is done
 * before its calls return); an unversioned capsule whatever max_version
 * asks (the protocol lets a producer answer so); no copies, no other device. */
static PyObject *hostbuf_dlpack(pyf_hostbuf_t *b, PyObject *args, PyObject *kw) {
    static char *kws[] = {"stream", "max_version", "dl_device", "copy", NULL};
    PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|$OOOO:__dlpack__", kws, &stream, &max_version, &dl_device, &copy))
        return NULL;
    if (!hostbuf_open(b)) return NULL;
    int type, id;
    hostbuf_dl_device(b, &type, &id);
    if (copy != Py_None && PyObject_IsTrue(copy) == 1) {
        PyErr_SetString(PyExc_BufferError, "ferry's buffers are exported without a copy (copy=True is not supported)");
        return NULL;
    }
    if (dl_device != Py_None) {
        PyObject *mine = Py_BuildValue("(ii)", type, id);
        PyObject *theirs = mine ? PySequence_Tuple(dl_device) : NULL;
        int same = theirs ? PyObject_RichCompareBool(mine, theirs, Py_EQ) : -1;
        Py_XDECREF(mine);
        Py_XDECREF(theirs);
        if (same < 0) return NULL;
        if (!same) {
            PyErr_SetString(PyExc_BufferError, "ferry's buffers are exported on their own device only");
            return NULL;
        }
    }
    dl_export_t *e = PyMem_RawCalloc(1, sizeof *e);
    if (!e) return PyErr_NoMemory();
    e->shape[0] = b->size;
    e->strides[0] = 1;
    e->mt.dl_tensor = (DLTensor){.data = b->ptr,
                                 .device = {.device_type = (DLDeviceType)type, .device_id = id},
                                 .ndim = 1,
                                 .dtype = {.code = kDLUInt, .bits = 8, .lanes = 1},
                                 .shape = e->shape,
                                 .strides = e->strides,
                                 .byte_offset = 0};
    e->mt.manager_ctx = Py_NewRef((PyObject *)b);
    e->mt.deleter = dl_export_free;
    PyObject *cap = PyCapsule_New(&e->mt, "dltensor", dl_capsule_free);
    if (!cap) dl_export_free(&e->mt);
    return cap;
}

static PyObject *hostbuf_device(pyf_hostbuf_t *b, void *unused) {
    (void)unused;
    char name[32];
    pyf_device_name(b->mem, b->device, name, sizeof name);
    return PyUnicode_FromString(name);
}

static PyMethodDef hostbuf_methods[] = {
    {"__dlpack__", (PyCFunction)(void (*)(void))hostbuf_dlpack, METH_VARARGS | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None) -> capsule of the bytes (uint8)"},
    {"__dlpack_device__", (PyCFunction)hostbuf_dlpack_device, METH_NOARGS, "__dlpack_device__() -> (type, id)"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef hostbuf_getset[] = {
    {"device", (getter)hostbuf_device, NULL, "where the memory is: 'cpu' or 'cuda:N'", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyBufferProcs hostbuf_as_buffer = {(getbufferproc)hostbuf_getbuffer, NULL};
static PySequenceMethods hostbuf_seq = {.sq_length = (lenfunc)hostbuf_len};

PyTypeObject pyf_HostBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.HostBuffer",
    .tp_basicsize = sizeof(pyf_hostbuf_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Host memory ferry allocated for a Writer or Reader: its bytes through the buffer protocol\n"
              "(torch.frombuffer, numpy.frombuffer) and DLPack (torch.from_dlpack). The memory lives while a\n"
              "HostBuffer (or a tensor made from one, which holds it) does, also past the member's close().",
    .tp_dealloc = (destructor)hostbuf_dealloc,
    .tp_as_buffer = &hostbuf_as_buffer,
    .tp_as_sequence = &hostbuf_seq,
    .tp_methods = hostbuf_methods,
    .tp_getset = hostbuf_getset,
};

PyTypeObject pyf_DeviceBufferType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.DeviceBuffer",
    .tp_basicsize = sizeof(pyf_hostbuf_t),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "GPU memory ferry allocated for a CUDA Writer or Reader (device=): its bytes through DLPack\n"
              "(torch.from_dlpack(buf) is a uint8 CUDA tensor over them). The memory lives while a DeviceBuffer\n"
              "(or a tensor made from one, which holds it) does, also past the member's close().",
    .tp_dealloc = (destructor)hostbuf_dealloc,
    .tp_as_sequence = &hostbuf_seq,
    .tp_methods = hostbuf_methods,
    .tp_getset = hostbuf_getset,
};

bool pyf_member_init(PyObject *m) {
    return PyType_Ready(&pyf_WriterType) == 0 && PyType_Ready(&pyf_ReaderType) == 0 &&
           PyType_Ready(&pyf_HostBufferType) == 0 && PyType_Ready(&pyf_DeviceBufferType) == 0 &&
           PyModule_AddObjectRef(m, "Writer", (PyObject *)&pyf_WriterType) == 0 &&
           PyModule_AddObjectRef(m, "Reader", (PyObject *)&pyf_ReaderType) == 0 &&
           PyModule_AddObjectRef(m, "HostBuffer", (PyObject *)&pyf_HostBufferType) == 0 &&
           PyModule_AddObjectRef(m, "DeviceBuffer", (PyObject *)&pyf_DeviceBufferType) == 0;
}
