/* ferry.Model: a model spec (the logical tensors), from a config.json or
 * built tensor by tensor. */
#include <string.h>

#include "pyferry.h"

static void model_dealloc(pyf_model_t *self) {
    ferry_model_destroy(self->model);
    ferry_ctx_destroy(self->ctx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static pyf_model_t *model_new_empty(PyTypeObject *cls) {
    pyf_model_t *self = (pyf_model_t *)cls->tp_alloc(cls, 0);
    if (!self) return NULL;
    self->ctx = pyf_ctx_create();
    if (!self->ctx) {
        Py_DECREF(self);
        return NULL;
    }
    return self;
}

/* quant: None or "none", "auto", "fp8" (FERRY_MODEL_QUANT_*). */
static bool options(PyObject *dtype, int mtp, const char *quant, ferry_model_options_t *o) {
    memset(o, 0, sizeof *o);
    if (quant) {
        static const char *const q[] = {"none", "auto", "fp8"};
        int k = -1;
        for (int i = 0; i < 3; i++)
            if (!strcmp(quant, q[i])) k = i;
        if (k < 0) {
            PyErr_Format(PyExc_ValueError, "quant='%.100s': want 'none', 'auto' or 'fp8'", quant);
            return false;
        }
        o->field_mask |= FERRY_MODEL_OPT_QUANT;
        o->quant = (ferry_model_quant_t)k;
    }
    bool given;
    if (!pyf_dtype_arg(dtype, &o->dtype, &given)) return false;
    if (given) o->field_mask |= FERRY_MODEL_OPT_DTYPE;
    if (mtp) {
        o->field_mask |= FERRY_MODEL_OPT_MTP;
        o->include_mtp = true;
    }
    return true;
}

static PyObject *model_from_file(PyObject *cls, PyObject *args, PyObject *kw) {
    static char *kws[] = {"path", "dtype", "mtp", "quant", NULL};
    PyObject *path_obj, *dtype = Py_None;
    int mtp = 0;
    const char *quant = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|$Opz:from_file", kws, PyUnicode_FSConverter, &path_obj, &dtype, &mtp,
                                     &quant))
        return NULL;
    ferry_model_options_t o;
    pyf_model_t *self = NULL;
    if (options(dtype, mtp, quant, &o) && (self = model_new_empty((PyTypeObject *)cls))) {
        ferry_status_t st = ferry_model_from_hf_config_file(self->ctx, PyBytes_AS_STRING(path_obj), &o, &self->model);
        if (st != FERRY_OK) {
            pyf_raise(st, ferry_ctx_error(self->ctx));
            Py_CLEAR(self);
        }
    }
    Py_DECREF(path_obj);
    return (PyObject *)self;
}

static PyObject *model_from_json(PyObject *cls, PyObject *args, PyObject *kw) {
    static char *kws[] = {"text", "name", "dtype", "mtp", "quant", NULL};
    const char *text, *name = "model", *quant = NULL;
    Py_ssize_t len;
    PyObject *dtype = Py_None;
    int mtp = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|s$Opz:from_json", kws, &text, &len, &name, &dtype, &mtp, &quant))
        return NULL;
    ferry_model_options_t o;
    if (!options(dtype, mtp, quant, &o)) return NULL;
    pyf_model_t *self = model_new_empty((PyTypeObject *)cls);
    if (!self) return NULL;
    ferry_status_t st = ferry_model_from_hf_config(self->ctx, name, text, (size_t)len, &o, &self->model);
    if (st != FERRY_OK) {
        pyf_raise(st, ferry_ctx_error(self->ctx));
        Py_CLEAR(self);
    }
    return (PyObject *)self;
}

static PyObject *model_custom(PyObject *cls, PyObject *args) {
    const char *name;
    if (!PyArg_ParseTuple(args, "s:custom", &name)) return NULL;
    pyf_model_t *self = model_new_empty((PyTypeObject *)cls);
    if (!self) return NULL;
    ferry_status_t st = ferry_model_create(self->ctx, name, &self->model);
    if (st != FERRY_OK) {
        pyf_raise(st, ferry_ctx_error(self->ctx));
        Py_CLEAR(self);
    }
    return (PyObject *)self;
}

static PyObject *model_add_tensor(pyf_model_t *self, PyObject *args) {
    const char *name;
    PyObject *dtype_obj, *shape_obj;
    if (!PyArg_ParseTuple(args, "sOO:add_tensor", &name, &dtype_obj, &shape_obj)) return NULL;
    ferry_dtype_t dtype;
    bool given;
    ferry_box_t box;
    if (!pyf_dtype_arg(dtype_obj, &dtype, &given) || !pyf_box_arg(NULL, shape_obj, &box)) return NULL;
    if (!given) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "add_tensor: a dtype is required");
    if (!pyf_enter(&self->busy, "Model is in use by another thread")) return NULL;
    uint32_t index = 0;
    ferry_status_t st = ferry_model_add_tensor(self->model, name, dtype, box.ndim, box.extent, &index);
    pyf_leave(&self->busy);
    if (st != FERRY_OK) return pyf_raise(st, ferry_model_error(self->model));
    return PyLong_FromUnsignedLong(index);
}

static PyObject *tensor_info(const ferry_tensor_info_t *t) {
    PyObject *o = PyStructSequence_New(pyf_TensorInfo);
    if (!o) return NULL;
    PyStructSequence_SET_ITEM(o, 0, PyUnicode_FromString(t->name));
    PyStructSequence_SET_ITEM(o, 1, pyf_dtype_str(t->dtype));
    PyStructSequence_SET_ITEM(o, 2, pyf_tuple_i64(t->shape, t->ndim));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *model_tensor(pyf_model_t *self, PyObject *name) {
    const char *s = PyUnicode_AsUTF8(name);
    if (!s) return NULL;
    uint32_t i;
    ferry_tensor_info_t t;
    if (!ferry_model_find(self->model, s, &i) || !ferry_model_tensor(self->model, i, &t)) {
        char msg[300];
        snprintf(msg, sizeof msg, "model '%s' has no tensor '%.200s'", ferry_model_name(self->model), s);
        return pyf_raise(FERRY_ERR_NOT_FOUND, msg);
    }
    return tensor_info(&t);
}

/* None for a plain tensor; else a dict: kind 'fp8' (a block-quantized
 * weight: its 'scale' tensor) or 'fp8_scale' (its 'weight'), 'block',
 * 'ue8m0'. */
static PyObject *model_tensor_quant(pyf_model_t *self, PyObject *name) {
    const char *s = PyUnicode_AsUTF8(name);
    if (!s) return NULL;
    uint32_t i;
    ferry_tensor_quant_t q;
    if (!ferry_model_find(self->model, s, &i) || !ferry_model_tensor_quant(self->model, i, &q)) {
        char msg[300];
        snprintf(msg, sizeof msg, "model '%s' has no tensor '%.200s'", ferry_model_name(self->model), s);
        return pyf_raise(FERRY_ERR_NOT_FOUND, msg);
    }
    if (q.kind == FERRY_QUANT_NONE) Py_RETURN_NONE;
    ferry_tensor_info_t pt;
    ferry_model_tensor(self->model, q.partner, &pt);
    bool weight = q.kind == FERRY_QUANT_FP8_BLOCK;
    return Py_BuildValue("{s:s,s:s,s:(II),s:O}", "kind", weight ? "fp8" : "fp8_scale", weight ? "scale" : "weight",
                         pt.name, "block", q.block[0], q.block[1], "ue8m0",
                         (q.flags & FERRY_FP8_UE8M0) ? Py_True : Py_False);
}

static PyObject *model_get_tensors(pyf_model_t *self, void *c) {
    (void)c;
    uint32_t n = ferry_model_tensor_count(self->model);
    PyObject *list = PyList_New(n);
    for (uint32_t i = 0; list && i < n; i++) {
        ferry_tensor_info_t t;
        ferry_model_tensor(self->model, i, &t);
        PyObject *o = tensor_info(&t);
        if (!o) Py_CLEAR(list);
        else
            PyList_SET_ITEM(list, i, o);
    }
    return list;
}

static Py_ssize_t model_len(pyf_model_t *self) { return ferry_model_tensor_count(self->model); }

static int model_contains(pyf_model_t *self, PyObject *name) {
    if (!PyUnicode_Check(name)) return 0;
    const char *s = PyUnicode_AsUTF8(name);
    uint32_t i;
    return s ? ferry_model_find(self->model, s, &i) : -1;
}

static const char *family_name(ferry_family_t f) {
    switch (f) {
    case FERRY_FAMILY_DENSE: return "dense";
    case FERRY_FAMILY_QWEN3_MOE: return "qwen3_moe";
    case FERRY_FAMILY_DEEPSEEK: return "deepseek";
    default: return "custom";
    }
}

static PyObject *model_get(pyf_model_t *self, void *which) {
    const ferry_arch_t *a = ferry_model_arch(self->model);
    switch ((intptr_t)which) {
    case 0: return PyUnicode_FromString(ferry_model_name(self->model));
    case 1: return PyUnicode_FromString(family_name(a->family));
    case 2: return PyUnicode_FromString(a->model_type);
    case 3: return pyf_dtype_str(a->dtype);
    case 4: return PyLong_FromUnsignedLongLong(ferry_model_param_count(self->model));
    case 5: return PyLong_FromUnsignedLongLong(ferry_model_byte_size(self->model));
    default: {
        /* the architecture numbers a config gave, for name maps and checks */
        return Py_BuildValue("{s:s,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:L,s:O,s:L,s:L,s:L}", "model_type", a->model_type,
                             "vocab_size", (long long)a->vocab_size, "hidden_size", (long long)a->hidden_size,
                             "num_layers", (long long)a->num_layers, "num_heads", (long long)a->num_heads,
                             "num_kv_heads", (long long)a->num_kv_heads, "head_dim", (long long)a->head_dim,
                             "intermediate_size", (long long)a->intermediate_size, "num_experts",
                             (long long)a->num_experts, "tie_embeddings", a->tie_embeddings ? Py_True : Py_False,
                             "moe_intermediate_size", (long long)a->moe_intermediate_size, "num_mtp_layers",
                             (long long)a->num_mtp_layers, "num_shared_experts", (long long)a->num_shared_experts);
    }
    }
}

static PyObject *model_repr(pyf_model_t *self) {
    return PyUnicode_FromFormat("<ferry.Model '%s': %u tensors, %llu parameters>", ferry_model_name(self->model),
                                ferry_model_tensor_count(self->model),
                                (unsigned long long)ferry_model_param_count(self->model));
}

static PyMethodDef model_methods[] = {
    {"from_file", (PyCFunction)(void (*)(void))model_from_file, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_file(path, *, dtype=None, mtp=False, quant=None) -> Model\n\nThe spec of a Hugging Face config.json file "
     "(llama, qwen2, qwen3, qwen3_moe, deepseek_v3, kimi_k2). dtype overrides torch_dtype; mtp includes "
     "multi-token-prediction layers. Raises ConfigError naming a missing or malformed field."},
    {"from_json", (PyCFunction)(void (*)(void))model_from_json, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "from_json(text, name='model', *, dtype=None, mtp=False, quant=None) -> Model\n\nAs from_file, from config.json "
     "text."},
    {"custom", (PyCFunction)model_custom, METH_VARARGS | METH_CLASS,
     "custom(name) -> Model\n\nAn empty spec to fill with add_tensor."},
    {"add_tensor", (PyCFunction)model_add_tensor, METH_VARARGS,
     "add_tensor(name, dtype, shape) -> index\n\nAdds a logical tensor to a custom spec (unique name, positive shape)."},
    {"tensor", (PyCFunction)model_tensor, METH_O, "tensor(name) -> TensorInfo; NotFoundError if absent."},
    {"tensor_quant", (PyCFunction)model_tensor_quant, METH_O,
     "tensor_quant(name) -> None | dict\n\nNone for a plain tensor. For an FP8 block-quantized weight: "
     "{'kind': 'fp8', 'scale': its weight_scale_inv tensor, 'block': (128, 128), 'ue8m0': bool}; for the "
     "scale tensor: {'kind': 'fp8_scale', 'weight': ..., ...}. NotFoundError if absent."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef model_getset[] = {
    {"name", (getter)model_get, NULL, "the spec's name", (void *)0},
    {"family", (getter)model_get, NULL, "'dense', 'qwen3_moe', 'deepseek' or 'custom'", (void *)1},
    {"model_type", (getter)model_get, NULL, "config.json model_type ('' for custom)", (void *)2},
    {"dtype", (getter)model_get, NULL, "dtype of the weights", (void *)3},
    {"param_count", (getter)model_get, NULL, "elements over all tensors", (void *)4},
    {"byte_size", (getter)model_get, NULL, "bytes over all tensors", (void *)5},
    {"arch", (getter)model_get, NULL, "the architecture numbers (dict)", (void *)6},
    {"tensors", (getter)model_get_tensors, NULL, "list of TensorInfo(name, dtype, shape), in spec order", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PySequenceMethods model_seq = {.sq_length = (lenfunc)model_len, .sq_contains = (objobjproc)model_contains};

PyTypeObject pyf_ModelType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Model",
    .tp_basicsize = sizeof(pyf_model_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "A model spec: the logical tensors (Hugging Face names, dtypes, shapes) that layouts place.\n"
              "Immutable once made, except that a custom spec takes add_tensor. Made by the class methods\n"
              "from_config, from_file, from_json and custom.",
    .tp_dealloc = (destructor)model_dealloc,
    .tp_repr = (reprfunc)model_repr,
    .tp_methods = model_methods,
    .tp_getset = model_getset,
    .tp_as_sequence = &model_seq,
};

bool pyf_model_init(PyObject *m) {
    return PyType_Ready(&pyf_ModelType) == 0 && PyModule_AddObjectRef(m, "Model", (PyObject *)&pyf_ModelType) == 0;
}
