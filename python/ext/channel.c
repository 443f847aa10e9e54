/* ferry.Channel: the file channel (channel.h, docs/channel.md): a writer
 * publishes versions of named tensors into a directory as snapshots and
 * deltas; readers follow it and update their tensors in place. */
#include <string.h>

#include "pyferry.h"

typedef struct pyf_channel {
    PyObject_HEAD
    ferry_ctx_t *ctx;
    ferry_channel_writer_t *w; /* mode 'w' */
    ferry_channel_reader_t *r; /* mode 'r' */
    PyObject *dir;             /* str, as given */
    uint64_t version;          /* what the tensors hold (r) or the last published (w); FERRY_CHANNEL_NONE: none */
    bool writer;
    int busy;
} pyf_channel_t;

static PyTypeObject *ChannelUpdateInfo;

static bool check_open(pyf_channel_t *c) {
    if (c->w || c->r) return true;
    pyf_raise(FERRY_ERR_STALE, "the Channel is closed");
    return false;
}

static void channel_release(pyf_channel_t *c) {
    ferry_channel_writer_destroy(c->w);
    ferry_channel_reader_destroy(c->r);
    c->w = NULL, c->r = NULL;
}

static void channel_dealloc(pyf_channel_t *c) {
    channel_release(c);
    ferry_ctx_destroy(c->ctx);
    Py_XDECREF(c->dir);
    Py_TYPE(c)->tp_free((PyObject *)c);
}

static bool u32_param(PyObject *o, const char *what, uint32_t *out) {
    if (!pyf_u32_arg(o, what, out)) return false;
    if (*out == 0) {
        char msg[120];
        snprintf(msg, sizeof msg, "%s: must be in [1, 2**32)", what);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    return true;
}

static PyObject *channel_new(PyTypeObject *cls, PyObject *args, PyObject *kw) {
    static char *kws[] = {"dir", "mode", "snapshot_every", "keep", NULL};
    PyObject *dir_bytes = NULL, *snap = Py_None, *keep = Py_None;
    const char *mode = "r";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|s$OO:Channel", kws, PyUnicode_FSConverter, &dir_bytes, &mode, &snap,
                                     &keep))
        return NULL;
    bool writer = strcmp(mode, "w") == 0;
    ferry_channel_params_t p = {.field_mask = 0};
    PyObject *res = NULL;
    if (!writer && strcmp(mode, "r") != 0) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "Channel: mode is 'r' (follow) or 'w' (publish)");
        goto out;
    }
    if (!writer && (snap != Py_None || keep != Py_None)) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "Channel: snapshot_every and keep are the writer's (mode='w')");
        goto out;
    }
    if (snap != Py_None) {
        if (!u32_param(snap, "snapshot_every", &p.snapshot_every)) goto out;
        p.field_mask |= FERRY_CHANNEL_PARAM_SNAPSHOT_EVERY;
    }
    if (keep != Py_None) {
        if (!u32_param(keep, "keep", &p.keep)) goto out;
        p.field_mask |= FERRY_CHANNEL_PARAM_KEEP;
    }
    pyf_channel_t *c = (pyf_channel_t *)cls->tp_alloc(cls, 0);
    if (!c) goto out;
    c->writer = writer;
    c->version = FERRY_CHANNEL_NONE;
    const char *path = PyBytes_AS_STRING(dir_bytes);
    if (!(c->dir = PyUnicode_DecodeFSDefault(path)) || !(c->ctx = pyf_ctx_create())) {
        Py_DECREF(c);
        goto out;
    }
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS; /* a writer cleans up after a killed one */
    st = writer ? ferry_channel_writer_create(c->ctx, path, &p, &c->w)
                : ferry_channel_reader_create(c->ctx, path, &c->r);
    Py_END_ALLOW_THREADS;
    if (st != FERRY_OK) {
        pyf_raise_call(st, ferry_ctx_error(c->ctx));
        Py_DECREF(c);
        goto out;
    }
    res = (PyObject *)c;
out:
    Py_XDECREF(dir_bytes);
    return res;
}

static PyObject *version_obj(uint64_t v) {
    if (v == FERRY_CHANNEL_NONE) Py_RETURN_NONE;
    return PyLong_FromUnsignedLongLong(v);
}

static PyObject *channel_publish(pyf_channel_t *c, PyObject *args) {
    PyObject *vobj, *tensors;
    if (!PyArg_ParseTuple(args, "OO:publish", &vobj, &tensors) || !check_open(c)) return NULL;
    if (!c->w) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "publish: this Channel reads (mode='r')");
    uint64_t version;
    if (!pyf_u64_arg(vobj, "publish: version", &version)) return NULL;
    pyf_refs_t refs;
    if (!pyf_refs_get(tensors, PYF_READ, "publish: tensors", &refs)) return NULL;
    if (!pyf_enter(&c->busy, "publish: another thread is using this Channel")) {
        pyf_refs_release(&refs);
        return NULL;
    }
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_channel_publish(c->w, version, refs.refs, refs.n);
    Py_END_ALLOW_THREADS;
    pyf_leave(&c->busy);
    pyf_refs_release(&refs);
    if (st != FERRY_OK) return pyf_raise_call(st, ferry_ctx_error(c->ctx));
    c->version = version;
    Py_RETURN_NONE;
}

static PyObject *channel_update(pyf_channel_t *c, PyObject *tensors) {
    if (!check_open(c)) return NULL;
    if (!c->r) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "update: this Channel publishes (mode='w')");
    pyf_refs_t refs;
    if (!pyf_refs_get(tensors, PYF_WRITE, "update: tensors", &refs)) return NULL;
    if (!pyf_enter(&c->busy, "update: another thread is using this Channel")) {
        pyf_refs_release(&refs);
        return NULL;
    }
    ferry_channel_update_info_t info;
    uint64_t version = c->version;
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_channel_update(c->r, refs.refs, refs.n, &version, &info);
    Py_END_ALLOW_THREADS;
    /* on a failure too: the tensors hold the version it says, whole */
    c->version = version;
    pyf_leave(&c->busy);
    pyf_refs_release(&refs);
    if (st != FERRY_OK) return pyf_raise_call(st, ferry_ctx_error(c->ctx));
    PyObject *o = PyStructSequence_New(ChannelUpdateInfo);
    if (!o) return NULL;
    PyStructSequence_SET_ITEM(o, 0, version_obj(info.from));
    PyStructSequence_SET_ITEM(o, 1, PyLong_FromUnsignedLongLong(info.to));
    PyStructSequence_SET_ITEM(o, 2, PyLong_FromUnsignedLong(info.snapshots));
    PyStructSequence_SET_ITEM(o, 3, PyLong_FromUnsignedLong(info.deltas));
    PyStructSequence_SET_ITEM(o, 4, PyLong_FromUnsignedLongLong(info.bytes_read));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *channel_close(pyf_channel_t *c, PyObject *unused) {
    (void)unused;
    if (c->busy) return pyf_raise(FERRY_ERR_BUSY, "close: another thread is inside a call on this Channel");
    channel_release(c);
    Py_RETURN_NONE;
}

static PyObject *channel_enter(PyObject *self, PyObject *unused) {
    (void)unused;
    return Py_NewRef(self);
}

static PyObject *channel_exit(pyf_channel_t *c, PyObject *args) {
    (void)args;
    PyObject *r = channel_close(c, NULL);
    if (!r) return NULL;
    Py_DECREF(r);
    Py_RETURN_FALSE;
}

static PyObject *channel_get(pyf_channel_t *c, void *which) {
    switch ((intptr_t)which) {
    case 0: return Py_NewRef(c->dir);
    case 1: return PyUnicode_FromString(c->writer ? "w" : "r");
    case 2: return version_obj(c->version);
    default: return PyBool_FromLong(!c->w && !c->r);
    }
}

/* A reader's version: what the caller's tensors hold (None: nothing, the
 * next update loads a snapshot). */
static int channel_set_version(pyf_channel_t *c, PyObject *v, void *unused) {
    (void)unused;
    if (!v) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "version cannot be deleted (set None)");
        return -1;
    }
    if (c->writer) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "version: a writer's is the last one it published (read-only)");
        return -1;
    }
    uint64_t x = FERRY_CHANNEL_NONE;
    if (v != Py_None && !pyf_u64_arg(v, "version", &x)) return -1;
    if (v != Py_None && x == FERRY_CHANNEL_NONE) {
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "version: 2**64 - 1 means none: set None");
        return -1;
    }
    if (c->busy) {
        pyf_raise(FERRY_ERR_BUSY, "version: another thread is inside a call on this Channel");
        return -1;
    }
    c->version = x;
    return 0;
}

static PyObject *channel_repr(pyf_channel_t *c) {
    return PyUnicode_FromFormat("<ferry.Channel %R mode '%s'%s>", c->dir, c->writer ? "w" : "r",
                                c->w || c->r ? "" : " (closed)");
}

static PyMethodDef channel_methods[] = {
    {"publish", (PyCFunction)channel_publish, METH_VARARGS,
     "publish(version, tensors)\n\n"
     "Mode 'w': publishes version (greater than the last published, at most 2**63 - 1) of tensors, a dict\n"
     "name -> tensor (C-contiguous; dtype and shape the tensor's own; the same names, dtypes and shapes every\n"
     "time): a snapshot (the first publish, then every snapshot_every versions) or a delta from the previous\n"
     "version, then the manifest. The writer keeps a copy as the next base (host memory: the tensors' size).\n"
     "Raises InvalidArgumentError (version not increasing, a strided tensor), MismatchError (names, dtypes\n"
     "or shapes changed), IOFailure. Releases the GIL."},
    {"update", (PyCFunction)channel_update, METH_O,
     "update(tensors) -> ChannelUpdateInfo(from_version, to_version, snapshots, deltas, bytes_read)\n\n"
     "Mode 'r': brings tensors (a dict name -> tensor as published: C-contiguous, writable, the published\n"
     "dtypes and shapes) from .version to the newest published version, in place: the chain of deltas, or\n"
     "the newest snapshot and the deltas after it, whichever reads fewer bytes; every step verified.\n"
     "from_version is None when the tensors held nothing. Pass the same tensors every time (or set\n"
     ".version to what they hold). A version is applied to all tensors or to none: on an error the tensors\n"
     "hold the version .version then says, whole and verified (possibly another than before).\n"
     "Raises NotFoundError (nothing published yet), BusyError (the writer collected files faster than they\n"
     "could be read: call again), CorruptError or MismatchError naming the file. Releases the GIL."},
    {"close", (PyCFunction)channel_close, METH_NOARGS, "close()\n\nCloses the channel (the files stay). Idempotent."},
    {"__enter__", channel_enter, METH_NOARGS, NULL},
    {"__exit__", (PyCFunction)channel_exit, METH_VARARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef channel_getset[] = {
    {"dir", (getter)channel_get, NULL, "the channel's directory", (void *)0},
    {"mode", (getter)channel_get, NULL, "'r' or 'w'", (void *)1},
    {"version", (getter)channel_get, (setter)channel_set_version,
     "reader: the version the tensors hold (None before any update; settable: None forces a snapshot, an int\n"
     "says what the tensors already hold); writer: the last version published (None before any)",
     (void *)2},
    {"closed", (getter)channel_get, NULL, "True after close()", (void *)3},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyf_ChannelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Channel",
    .tp_basicsize = sizeof(pyf_channel_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Channel(dir, mode='r', *, snapshot_every=None, keep=None)\n\n"
              "The file channel, for readers decoupled from the trainer (docs/channel.md). mode='w' opens (creating\n"
              "if needed) dir for publishing: one writer per directory; an existing channel is continued.\n"
              "snapshot_every: a full safetensors snapshot every N versions (default 10; the first publish always);\n"
              "keep: readers up to this many versions behind get deltas (default 4). mode='r' follows dir.\n"
              "Every file appears whole (written under a temporary name, renamed, the manifest last).\n"
              "Thread-safety: one thread at a time (a second gets BusyError). A context manager.",
    .tp_dealloc = (destructor)channel_dealloc,
    .tp_repr = (reprfunc)channel_repr,
    .tp_methods = channel_methods,
    .tp_getset = channel_getset,
    .tp_new = channel_new,
};

static PyStructSequence_Field update_fields[] = {
    {"from_version", "the version the tensors held before (None: none)"},
    {"to_version", "the version they hold now"},
    {"snapshots", "snapshots loaded (0 or 1)"},
    {"deltas", "deltas applied"},
    {"bytes_read", "bytes of snapshot and delta files read"},
    {NULL, NULL},
};

bool pyf_channel_init(PyObject *m) {
    PyStructSequence_Desc d = {"ferry.ChannelUpdateInfo", "What Channel.update did.", update_fields, 5};
    if (!(ChannelUpdateInfo = PyStructSequence_NewType(&d)) ||
        PyModule_AddObjectRef(m, "ChannelUpdateInfo", (PyObject *)ChannelUpdateInfo) < 0)
        return false;
    return PyType_Ready(&pyf_ChannelType) == 0 &&
           PyModule_AddObjectRef(m, "Channel", (PyObject *)&pyf_ChannelType) == 0;
}
