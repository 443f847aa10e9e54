/* Tensors in: DLPack (torch, numpy, anything with __dlpack__) first, the
 * buffer protocol otherwise. Nothing is copied: ferry gets the address of
 * the caller's storage and the caller's object is kept alive instead. */
#include <dlpack/dlpack.h>
#include <string.h>

#include "pyferry.h"

/* Type and device codes of DLPack 1.x that the dlpack 0.6 header predates. */
enum { DL_BOOL = 6, DL_F8_E4M3FN = 10, DL_F8_E5M2 = 12 };
enum { DL_ONEAPI = 14 };

static bool dl_dtype(DLDataType t, ferry_dtype_t *out) {
    if (t.lanes != 1) return false;
    switch (t.code) {
    case kDLFloat:
        return t.bits == 16 ? (*out = FERRY_DTYPE_F16, true)
             : t.bits == 32 ? (*out = FERRY_DTYPE_F32, true)
             : t.bits == 64 ? (*out = FERRY_DTYPE_F64, true) : false;
    case kDLBfloat: return t.bits == 16 && (*out = FERRY_DTYPE_BF16, true);
    case kDLInt:
        return t.bits == 8 ? (*out = FERRY_DTYPE_I8, true) : t.bits == 16 ? (*out = FERRY_DTYPE_I16, true)
             : t.bits == 32 ? (*out = FERRY_DTYPE_I32, true) : t.bits == 64 ? (*out = FERRY_DTYPE_I64, true) : false;
    case kDLUInt:
        return t.bits == 8 ? (*out = FERRY_DTYPE_U8, true) : t.bits == 16 ? (*out = FERRY_DTYPE_U16, true)
             : t.bits == 32 ? (*out = FERRY_DTYPE_U32, true) : t.bits == 64 ? (*out = FERRY_DTYPE_U64, true) : false;
    case DL_BOOL: return t.bits == 8 && (*out = FERRY_DTYPE_BOOL, true);
    case DL_F8_E4M3FN: return t.bits == 8 && (*out = FERRY_DTYPE_F8_E4M3, true);
    case DL_F8_E5M2: return t.bits == 8 && (*out = FERRY_DTYPE_F8_E5M2, true);
    default: return false;
    }
}

static bool fail(const char *what, const char *why, ferry_status_t st) {
    char msg[320];
    snprintf(msg, sizeof msg, "%s: %s", what, why);
    pyf_raise(st, msg);
    return false;
}

/* Shape, strides, span and contiguity from shape and element strides. */
static bool finish(pyf_tensor_t *t, const char *what) {
    size_t es = ferry_dtype_size(t->dtype);
    uint64_t numel = 1, last = 0;
    int64_t expect = 1;
    t->contiguous = true;
    for (int d = (int)t->ndim - 1; d >= 0; d--) {
        if (t->shape[d] <= 0) return fail(what, "empty tensors hold nothing to move", FERRY_ERR_INVALID_ARGUMENT);
        if (t->strides[d] < 0)
            return fail(what, "negative strides are not supported (make it contiguous)", FERRY_ERR_UNSUPPORTED);
        if (t->shape[d] > 1 && t->strides[d] != expect) t->contiguous = false;
        expect *= t->shape[d];
        numel *= (uint64_t)t->shape[d];
        last += (uint64_t)(t->shape[d] - 1) * (uint64_t)t->strides[d];
    }
    t->numel = numel;
    t->span = (last + 1) * es;
    return true;
}

void pyf_device_name(ferry_mem_type_t mem, int device, char *buf, size_t size) {
    if (mem == FERRY_MEM_CUDA) snprintf(buf, size, "cuda:%d", device);
    else
        snprintf(buf, size, "cpu");
}

/* The DLPack device an object says it is on (__dlpack_device__), without
 * exporting it: *type 0 when it does not say. */
static bool dl_device_of(PyObject *obj, int *type, int *id) {
    *type = 0, *id = 0;
    if (!PyObject_HasAttrString(obj, "__dlpack_device__")) return true;
    PyObject *d = PyObject_CallMethod(obj, "__dlpack_device__", NULL);
    if (!d) return false;
    bool ok = PyTuple_Check(d) && PyTuple_GET_SIZE(d) == 2;
    if (ok) {
        long t = PyLong_AsLong(PyTuple_GET_ITEM(d, 0)), i = PyLong_AsLong(PyTuple_GET_ITEM(d, 1));
        ok = !PyErr_Occurred();
        *type = (int)t, *id = (int)i;
    }
    Py_DECREF(d);
    if (!ok && !PyErr_Occurred()) PyErr_SetString(PyExc_TypeError, "__dlpack_device__() must return (type, id)");
    return ok;
}

/* torch.utils.dlpack.to_dlpack if torch is loaded and obj is a torch
 * tensor, else NULL (no error). torch's own __dlpack__ refuses a CUDA
 * tensor of another device than the current one (its stream handshake is
 * per current device); ferry takes no stream work from the producer
 * (publish and update wait for the device first: ferry/__init__.py), so the
 * plain export is what it needs. */
static PyObject *torch_export(PyObject *obj) {
    PyObject *name = PyUnicode_FromString("torch");
    if (!name) return NULL;
    PyObject *torch = PyImport_GetModule(name); /* loaded already, or NULL: never imports */
    Py_DECREF(name);
    if (!torch) return NULL;
    PyObject *cls = PyObject_GetAttrString(torch, "Tensor");
    PyObject *utils = cls ? PyObject_GetAttrString(torch, "utils") : NULL;
    PyObject *dl = utils ? PyObject_GetAttrString(utils, "dlpack") : NULL;
    PyObject *fn = dl ? PyObject_GetAttrString(dl, "to_dlpack") : NULL;
    PyObject *cap = NULL;
    int is = fn ? PyObject_IsInstance(obj, cls) : -1;
    if (is == 1) cap = PyObject_CallOneArg(fn, obj); /* its error, if any, is the caller's */
    else
        PyErr_Clear(); /* not torch's, or a torch without it: the protocol's own path */
    Py_XDECREF(fn);
    Py_XDECREF(dl);
    Py_XDECREF(utils);
    Py_XDECREF(cls);
    Py_DECREF(torch);
    return cap;
}

static bool from_dlpack(PyObject *obj, int access, pyf_tensor_t *t, const char *what) {
    /* torch: export a detached alias (torch refuses tensors that require
     * grad) and keep it: it holds the storage even if the caller's tensor
     * is later pointed at another one. */
    PyObject *src = NULL;
    if (PyObject_HasAttrString(obj, "detach")) {
        src = PyObject_CallMethod(obj, "detach", NULL);
        if (!src) return false;
        t->keep = Py_NewRef(src);
    } else
        src = Py_NewRef(obj);
    int dev_type, dev_id;
    if (!dl_device_of(src, &dev_type, &dev_id)) {
        Py_DECREF(src);
        return false;
    }
    PyObject *cap = NULL;
    if (dev_type == kDLCUDA) {
        /* ferry takes no stream work from the producer: stream=-1 (no
         * synchronization; publish and update wait for the device first) */
        cap = torch_export(src);
        if (!cap && !PyErr_Occurred()) {
            PyObject *kw = Py_BuildValue("{s:i}", "stream", -1);
            PyObject *meth = kw ? PyObject_GetAttrString(src, "__dlpack__") : NULL;
            PyObject *noargs = meth ? PyTuple_New(0) : NULL;
            cap = noargs ? PyObject_Call(meth, noargs, kw) : NULL;
            Py_XDECREF(noargs);
            Py_XDECREF(meth);
            Py_XDECREF(kw);
        }
    } else
        cap = PyObject_CallMethod(src, "__dlpack__", NULL);
    Py_DECREF(src);
    if (!cap) return false;
    DLManagedTensor *mt = PyCapsule_GetPointer(cap, "dltensor");
    if (!mt) {
        Py_DECREF(cap);
        return false;
    }
    const DLTensor *dl = &mt->dl_tensor;
    bool ok = true;
    char why[200];
    switch ((int)dl->device.device_type) {
    case kDLCPU:
    case kDLCUDAHost: /* pinned host memory is host memory */
        t->mem = FERRY_MEM_HOST, t->device = -1;
        break;
    case kDLCUDA:
        t->mem = FERRY_MEM_CUDA, t->device = dl->device.device_id;
        if (!(access & PYF_CUDA)) {
            snprintf(why, sizeof why, "the tensor is on cuda:%d; this takes host memory only (copy it with .cpu())",
                     t->device);
            ok = fail(what, why, FERRY_ERR_UNSUPPORTED);
        }
        break;
    case kDLCUDAManaged:
        ok = fail(what, "CUDA managed (unified) memory is not supported: use device memory (a torch 'cuda' tensor, "
                        "cudaMalloc) or host memory",
                  FERRY_ERR_UNSUPPORTED);
        break;
    default:
        snprintf(why, sizeof why, "the tensor is on DLPack device type %d (%s): ferry takes host memory and CUDA "
                                  "device memory",
                 (int)dl->device.device_type,
                 dl->device.device_type == kDLROCM || dl->device.device_type == kDLROCMHost ? "ROCm"
                 : dl->device.device_type == kDLMetal                                      ? "Metal"
                 : (int)dl->device.device_type == DL_ONEAPI                                ? "oneAPI"
                                                                                            : "not host or CUDA");
        ok = fail(what, why, FERRY_ERR_UNSUPPORTED);
    }
    if (ok && !dl_dtype(dl->dtype, &t->dtype))
        ok = fail(what, "its dtype has no ferry equivalent", FERRY_ERR_UNSUPPORTED);
    else if (ok && (dl->ndim < 0 || dl->ndim > FERRY_MAX_DIMS))
        ok = fail(what, "more dimensions than ferry's 8", FERRY_ERR_LIMIT);
    if (ok) {
        t->ndim = (uint32_t)dl->ndim;
        int64_t expect = 1;
        for (int d = dl->ndim - 1; d >= 0; d--) {
            t->shape[d] = dl->shape[d];
            t->strides[d] = dl->strides ? dl->strides[d] : expect;
            expect *= dl->shape[d];
        }
        t->data = (char *)dl->data + dl->byte_offset;
    }
    /* Consumed: the owner (kept) holds the storage from here on. */
    PyCapsule_SetName(cap, "used_dltensor");
    if (mt->deleter) mt->deleter(mt);
    Py_DECREF(cap);
    return ok;
}

static bool fmt_dtype(const char *fmt, Py_ssize_t itemsize, ferry_dtype_t *out) {
    if (!fmt) fmt = "B";
    if (*fmt == '@' || *fmt == '=' || *fmt == '<') fmt++;
    if (!fmt[0] || fmt[1]) return false;
    switch (fmt[0]) {
    case '?': *out = FERRY_DTYPE_BOOL; return itemsize == 1;
    case 'b': *out = FERRY_DTYPE_I8; return itemsize == 1;
    case 'B': *out = FERRY_DTYPE_U8; return itemsize == 1;
    case 'h': *out = FERRY_DTYPE_I16; return itemsize == 2;
    case 'H': *out = FERRY_DTYPE_U16; return itemsize == 2;
    case 'i': case 'l': case 'q':
        *out = itemsize == 4 ? FERRY_DTYPE_I32 : FERRY_DTYPE_I64;
        return itemsize == 4 || itemsize == 8;
    case 'I': case 'L': case 'Q':
        *out = itemsize == 4 ? FERRY_DTYPE_U32 : FERRY_DTYPE_U64;
        return itemsize == 4 || itemsize == 8;
    case 'e': *out = FERRY_DTYPE_F16; return itemsize == 2;
    case 'f': *out = FERRY_DTYPE_F32; return itemsize == 4;
    case 'd': *out = FERRY_DTYPE_F64; return itemsize == 8;
    default: return false;
    }
}

static bool from_buffer(PyObject *obj, int access, pyf_tensor_t *t, const char *what) {
    int flags = PyBUF_RECORDS_RO | ((access & PYF_WRITE) ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, &t->view, flags) < 0) return false;
    t->has_view = true;
    Py_buffer *v = &t->view;
    if (!fmt_dtype(v->format, v->itemsize, &t->dtype)) return fail(what, "its buffer format has no ferry equivalent", FERRY_ERR_UNSUPPORTED);
    if (v->ndim > FERRY_MAX_DIMS) return fail(what, "more dimensions than ferry's 8", FERRY_ERR_LIMIT);
    t->ndim = (uint32_t)v->ndim;
    for (int d = 0; d < v->ndim; d++) {
        t->shape[d] = v->shape[d];
        if (v->strides[d] % v->itemsize) return fail(what, "strides that are not whole elements", FERRY_ERR_UNSUPPORTED);
        t->strides[d] = v->strides[d] / v->itemsize;
    }
    t->data = v->buf;
    t->mem = FERRY_MEM_HOST, t->device = -1; /* the buffer protocol is host memory */
    return true;
}

bool pyf_tensor_get(PyObject *obj, int access, const ferry_dtype_t *dtype_override, const char *what,
                    pyf_tensor_t *out) {
    memset(out, 0, sizeof *out);
    bool ok;
    if (PyObject_HasAttrString(obj, "__dlpack__")) ok = from_dlpack(obj, access, out, what);
    else if (PyObject_CheckBuffer(obj))
        ok = from_buffer(obj, access, out, what);
    else {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: a %.60s is not a tensor (no __dlpack__, no buffer protocol)", what,
                 Py_TYPE(obj)->tp_name);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        ok = false;
    }
    if (ok && dtype_override && *dtype_override != out->dtype) {
        if (ferry_dtype_size(*dtype_override) != ferry_dtype_size(out->dtype))
            ok = fail(what, "dtype= must have the element size of the tensor's own dtype", FERRY_ERR_INVALID_ARGUMENT);
        else
            out->dtype = *dtype_override;
    }
    if (ok) ok = finish(out, what);
    if (!ok) {
        pyf_tensor_release(out);
        return false;
    }
    out->owner = Py_NewRef(obj);
    return true;
}

void pyf_tensor_release(pyf_tensor_t *t) {
    if (t->has_view) PyBuffer_Release(&t->view);
    t->has_view = false;
    Py_CLEAR(t->owner);
    Py_CLEAR(t->keep);
}

bool pyf_tensor_moved(const pyf_tensor_t *t, uintptr_t *now) {
    if (!t->owner || t->has_view || !PyObject_HasAttrString(t->owner, "data_ptr")) return false;
    PyObject *p = PyObject_CallMethod(t->owner, "data_ptr", NULL);
    if (!p) {
        PyErr_Clear();
        return false;
    }
    uintptr_t v = (uintptr_t)PyLong_AsUnsignedLongLong(p);
    Py_DECREF(p);
    if (PyErr_Occurred()) {
        PyErr_Clear();
        return false;
    }
    *now = v;
    return v != (uintptr_t)t->data;
}

bool pyf_dtype_fits(ferry_dtype_t have, ferry_dtype_t want) {
    if (have == want) return true;
    bool raw = have == FERRY_DTYPE_U8 || have == FERRY_DTYPE_I8 || have == FERRY_DTYPE_U16 || have == FERRY_DTYPE_I16 ||
               have == FERRY_DTYPE_U32 || have == FERRY_DTYPE_I32 || have == FERRY_DTYPE_U64 || have == FERRY_DTYPE_I64;
    return raw && ferry_dtype_size(have) == ferry_dtype_size(want);
}
