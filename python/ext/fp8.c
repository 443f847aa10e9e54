/* ferry.fp8: FP8 block quantization (ferry/fp8.h) on tensors in host
 * memory, into outputs the caller made (ferry/fp8.py makes them). */
#include "pyferry.h"

#include "ferry/fp8.h"

/* Releases every view got so far. */
static void release3(pyf_tensor_t *t, int n) {
    for (int i = 0; i < n; i++) pyf_tensor_release(&t[i]);
}

static PyObject *f_block_quantize(PyObject *self, PyObject *args, PyObject *kw) {
    (void)self;
    static char *kws[] = {"weight", "q", "scale_inv", "ue8m0", NULL};
    PyObject *w_o, *q_o, *s_o;
    int ue8m0 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOO|p:fp8_block_quantize", kws, &w_o, &q_o, &s_o, &ue8m0))
        return NULL;
    pyf_tensor_t t[3];
    const ferry_dtype_t f8 = FERRY_DTYPE_F8_E4M3, f32 = FERRY_DTYPE_F32;
    if (!pyf_tensor_get(w_o, PYF_READ, NULL, "fp8: weight", &t[0])) return NULL;
    if (!pyf_tensor_get(q_o, PYF_WRITE, &f8, "fp8: q", &t[1])) {
        release3(t, 1);
        return NULL;
    }
    if (!pyf_tensor_get(s_o, PYF_WRITE, &f32, "fp8: scale_inv", &t[2])) {
        release3(t, 2);
        return NULL;
    }
    char msg[300] = "";
    uint64_t rows = t[0].ndim == 2 ? (uint64_t)t[0].shape[0] : 0, cols = t[0].ndim == 2 ? (uint64_t)t[0].shape[1] : 0;
    if (t[0].ndim != 2 || !t[0].contiguous || !t[1].contiguous || !t[2].contiguous)
        snprintf(msg, sizeof msg, "fp8: the weight must be 2-D and every tensor C-contiguous");
    else if (t[0].dtype != FERRY_DTYPE_BF16 && t[0].dtype != FERRY_DTYPE_F32)
        snprintf(msg, sizeof msg, "fp8: a weight of %s (bf16 or f32 are quantized)", ferry_dtype_name(t[0].dtype));
    else if (t[1].numel != rows * cols || t[2].numel != ferry_fp8_scale_count(rows, cols))
        snprintf(msg, sizeof msg, "fp8: q must hold %llu elements and scale_inv %llu, not %llu and %llu",
                 (unsigned long long)(rows * cols), (unsigned long long)ferry_fp8_scale_count(rows, cols),
                 (unsigned long long)t[1].numel, (unsigned long long)t[2].numel);
    if (msg[0]) {
        release3(t, 3);
        pyf_raise(FERRY_ERR_INVALID_ARGUMENT, msg);
        return NULL;
    }
    ferry_status_t st;
    Py_BEGIN_ALLOW_THREADS;
    st = ferry_fp8_block_quantize(t[0].dtype, t[0].data, rows, cols, ue8m0 ? FERRY_FP8_UE8M0 : 0, t[1].data,
                                  t[2].data);
    Py_END_ALLOW_THREADS;
    release3(t, 3);
    if (st != FERRY_OK) {
        pyf_raise(st, "fp8: block quantization refused its arguments");
        return NULL;
    }
    Py_RETURN_NONE;
}

static PyMethodDef fp8_methods[] = {
    {"fp8_block_quantize", (PyCFunction)(void (*)(void))f_block_quantize, METH_VARARGS | METH_KEYWORDS,
     "fp8_block_quantize(weight, q, scale_inv, ue8m0=False)\n\nSee ferry.fp8.block_quantize."},
    {NULL, NULL, 0, NULL},
};

bool pyf_fp8_init(PyObject *m) {
    return PyModule_AddFunctions(m, fp8_methods) == 0 && PyModule_AddIntConstant(m, "FP8_BLOCK", FERRY_FP8_BLOCK) == 0;
}
