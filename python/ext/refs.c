/* Named tensors from a Python mapping (name -> tensor), as the file channel
 * and delta files take them: ferry_tensor_ref_t over the caller's storage,
 * which must be C-contiguous (those calls read and write flat bytes). */
#include <string.h>

#include "pyferry.h"

void pyf_refs_release(pyf_refs_t *r) {
    for (size_t i = 0; r->ts && i < r->n; i++) pyf_tensor_release(&r->ts[i]);
    PyMem_Free(r->ts);
    PyMem_Free(r->refs);
    Py_CLEAR(r->items);
    memset(r, 0, sizeof *r);
}

bool pyf_refs_get(PyObject *mapping, int access, const char *what, pyf_refs_t *out) {
    memset(out, 0, sizeof *out);
    if (!PyDict_Check(mapping) && (!PyMapping_Check(mapping) || PySequence_Check(mapping))) {
        char msg[200];
        snprintf(msg, sizeof msg, "%s: a dict of name -> tensor is required, not %.60s", what,
                 Py_TYPE(mapping)->tp_name);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return false;
    }
    /* a list of (name, tensor) pairs of our own: the names stay alive while
       the call runs without the GIL, whatever happens to the mapping */
    PyObject *items = PyMapping_Items(mapping);
    if (!items) return false;
    out->items = items;
    Py_ssize_t n = PyList_GET_SIZE(items);
    out->n = (size_t)n;
    out->refs = PyMem_Calloc(n ? (size_t)n : 1, sizeof *out->refs);
    out->ts = PyMem_Calloc(n ? (size_t)n : 1, sizeof *out->ts);
    if (!out->refs || !out->ts) {
        pyf_refs_release(out);
        PyErr_NoMemory();
        return false;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *pair = PyList_GET_ITEM(items, i);
        PyObject *key = PyTuple_GET_ITEM(pair, 0), *val = PyTuple_GET_ITEM(pair, 1);
        const char *name = PyUnicode_Check(key) ? PyUnicode_AsUTF8(key) : NULL;
        if (!name) {
            if (!PyErr_Occurred()) {
                char msg[160];
                snprintf(msg, sizeof msg, "%s: tensor names must be str, not %.60s", what, Py_TYPE(key)->tp_name);
                pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
            }
            pyf_refs_release(out);
            return false;
        }
        char label[300];
        snprintf(label, sizeof label, "%s['%.200s']", what, name);
        if (!pyf_tensor_get(val, access, NULL, label, &out->ts[i])) {
            pyf_refs_release(out);
            return false;
        }
        const pyf_tensor_t *t = &out->ts[i];
        if (!t->contiguous) {
            char msg[400];
            snprintf(msg, sizeof msg, "%s: the tensor is not C-contiguous (pass .contiguous() for a copy%s)", label,
                     access == PYF_WRITE ? ", then copy it back" : "");
            pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
            pyf_refs_release(out);
            return false;
        }
        ferry_tensor_ref_t *r = &out->refs[i];
        r->name = name;
        r->dtype = t->dtype;
        r->ndim = t->ndim;
        memcpy(r->shape, t->shape, sizeof r->shape);
        r->data = t->data;
        r->bytes = t->numel * ferry_dtype_size(t->dtype);
    }
    return true;
}
