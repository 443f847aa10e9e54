/* ferry.Layout: where every box of every tensor lives, per rank and
 * buffer — built from a parallel configuration, or piece by piece. */
#include <string.h>

#include "pyferry.h"

static void layout_dealloc(pyf_layout_t *self) {
    ferry_layout_destroy(self->layout);
    ferry_ctx_destroy(self->ctx);
    Py_XDECREF(self->model);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static pyf_layout_t *layout_new_empty(PyTypeObject *cls, PyObject *model) {
    pyf_layout_t *self = (pyf_layout_t *)cls->tp_alloc(cls, 0);
    if (!self) return NULL;
    self->model = Py_NewRef(model);
    self->ctx = pyf_ctx_create();
    if (!self->ctx) Py_CLEAR(self);
    return self;
}

static PyObject *layout_build(PyObject *cls, PyObject *args, PyObject *kw) {
    static char *kws[] = {"model", "side", "spec", "rank", NULL};
    PyObject *model, *rank_obj = Py_None;
    const char *side_s, *spec = "";
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O!s|sO:build", kws, &pyf_ModelType, &model, &side_s, &spec, &rank_obj))
        return NULL;
    ferry_side_t side;
    if (strcmp(side_s, "train") == 0) side = FERRY_SIDE_TRAIN;
    else if (strcmp(side_s, "infer") == 0)
        side = FERRY_SIDE_INFER;
    else
        return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "Layout.build: side must be 'train' or 'infer'");
    uint32_t rank = FERRY_ALL_RANKS;
    if (rank_obj != Py_None && !pyf_u32_arg(rank_obj, "Layout.build: rank", &rank)) return NULL;
    pyf_layout_t *self = layout_new_empty((PyTypeObject *)cls, model);
    if (!self) return NULL;
    ferry_parallel_t par;
    ferry_status_t st = ferry_parallel_parse(self->ctx, side, spec, &par);
    if (st == FERRY_OK) st = ferry_layout_build(self->ctx, ((pyf_model_t *)model)->model, &par, rank, &self->layout);
    if (st != FERRY_OK) {
        pyf_raise(st, ferry_ctx_error(self->ctx));
        Py_CLEAR(self);
    }
    return (PyObject *)self;
}

static PyObject *layout_custom(PyObject *cls, PyObject *args) {
    PyObject *model;
    unsigned int world;
    if (!PyArg_ParseTuple(args, "O!I:custom", &pyf_ModelType, &model, &world)) return NULL;
    pyf_layout_t *self = layout_new_empty((PyTypeObject *)cls, model);
    if (!self) return NULL;
    ferry_status_t st = ferry_layout_create(self->ctx, ((pyf_model_t *)model)->model, world, &self->layout);
    if (st != FERRY_OK) {
        pyf_raise(st, ferry_ctx_error(self->ctx));
        Py_CLEAR(self);
    }
    return (PyObject *)self;
}

static PyObject *layout_add_buffer(pyf_layout_t *self, PyObject *args) {
    unsigned int rank;
    const char *name;
    PyObject *dtype_obj;
    unsigned long long size;
    if (!PyArg_ParseTuple(args, "IsOK:add_buffer", &rank, &name, &dtype_obj, &size)) return NULL;
    ferry_dtype_t dtype;
    bool given;
    if (!pyf_dtype_arg(dtype_obj, &dtype, &given)) return NULL;
    if (!given) return pyf_raise(FERRY_ERR_INVALID_ARGUMENT, "add_buffer: a dtype is required");
    uint32_t index;
    ferry_status_t st = ferry_layout_add_buffer(self->layout, rank, name, dtype, size, &index);
    if (st != FERRY_OK) return pyf_raise(st, ferry_layout_error(self->layout));
    return PyLong_FromUnsignedLong(index);
}

/* A tensor given by name or index. */
static bool tensor_index(const ferry_model_t *model, PyObject *o, uint32_t *out) {
    if (PyLong_Check(o)) {
        unsigned long i = PyLong_AsUnsignedLong(o);
        if (PyErr_Occurred()) return false;
        if (i >= ferry_model_tensor_count(model)) {
            pyf_raise(FERRY_ERR_NOT_FOUND, "tensor index out of range");
            return false;
        }
        *out = (uint32_t)i;
        return true;
    }
    const char *s = PyUnicode_AsUTF8(o);
    if (!s) return false;
    if (!ferry_model_find(model, s, out)) {
        char msg[300];
        snprintf(msg, sizeof msg, "model '%s' has no tensor '%.200s'", ferry_model_name(model), s);
        pyf_raise(FERRY_ERR_NOT_FOUND, msg);
        return false;
    }
    return true;
}

/* (tensor, offset, extent, buffer, byte_offset, strides) -> piece; shared
 * with Writer/Reader.add_piece through pyf_piece_args. */
bool pyf_piece_args(const ferry_model_t *model, PyObject *tensor, PyObject *offset, PyObject *extent,
                    unsigned int buffer, unsigned long long byte_offset, PyObject *strides, ferry_piece_t *out) {
    memset(out, 0, sizeof *out);
    if (!tensor_index(model, tensor, &out->tensor) || !pyf_box_arg(offset, extent, &out->box) ||
        !pyf_strides_arg(strides, out->box.ndim, out->strides))
        return false;
    out->buffer = buffer;
    out->byte_offset = byte_offset;
    return true;
}

static PyObject *layout_add_piece(pyf_layout_t *self, PyObject *args, PyObject *kw) {
    static char *kws[] = {"tensor", "offset", "extent", "rank", "buffer", "byte_offset", "strides", NULL};
    PyObject *tensor, *offset, *extent, *strides;
    unsigned int rank, buffer;
    unsigned long long byte_offset;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OOOIIKO:add_piece", kws, &tensor, &offset, &extent, &rank, &buffer,
                                     &byte_offset, &strides))
        return NULL;
    ferry_piece_t p;
    if (!pyf_piece_args(ferry_layout_model(self->layout), tensor, offset, extent, buffer, byte_offset, strides, &p))
        return NULL;
    p.rank = rank;
    ferry_status_t st = ferry_layout_add_piece(self->layout, &p);
    if (st != FERRY_OK) return pyf_raise(st, ferry_layout_error(self->layout));
    Py_RETURN_NONE;
}

static PyObject *layout_validate(pyf_layout_t *self, PyObject *unused) {
    (void)unused;
    ferry_coverage_t c;
    ferry_status_t st = ferry_layout_validate(self->layout, &c);
    if (st != FERRY_OK) return pyf_raise(st, ferry_layout_error(self->layout));
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:I,s:I}", "tensors", (unsigned long long)c.tensors, "pieces",
                         (unsigned long long)c.pieces, "distinct_boxes", (unsigned long long)c.distinct_boxes,
                         "elements", (unsigned long long)c.elements, "min_replicas", c.min_replicas, "max_replicas",
                         c.max_replicas);
}

static bool rank_arg(pyf_layout_t *self, PyObject *o, uint32_t *first, uint32_t *end) {
    uint32_t world = ferry_layout_world_size(self->layout);
    if (!o || o == Py_None) {
        *first = 0, *end = world;
        return true;
    }
    uint32_t r;
    if (!pyf_u32_arg(o, "rank", &r)) return false;
    if (r >= world) {
        char msg[96];
        snprintf(msg, sizeof msg, "rank %u: the layout has %u ranks", r, world);
        pyf_raise(FERRY_ERR_NOT_FOUND, msg);
        return false;
    }
    *first = r, *end = r + 1;
    return true;
}

static PyObject *buffer_info(uint32_t index, const ferry_buffer_info_t *b) {
    PyObject *o = PyStructSequence_New(pyf_BufferInfo);
    if (!o) return NULL;
    PyStructSequence_SET_ITEM(o, 0, PyLong_FromUnsignedLong(index));
    PyStructSequence_SET_ITEM(o, 1, PyUnicode_FromString(b->name));
    PyStructSequence_SET_ITEM(o, 2, PyLong_FromUnsignedLong(b->rank));
    PyStructSequence_SET_ITEM(o, 3, PyLong_FromUnsignedLongLong(b->size));
    PyStructSequence_SET_ITEM(o, 4, pyf_dtype_str(b->dtype));
    PyStructSequence_SET_ITEM(o, 5, pyf_tuple_i64(b->shape, b->ndim));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *layout_buffers(pyf_layout_t *self, PyObject *args) {
    PyObject *rank_obj = Py_None;
    uint32_t first, end;
    if (!PyArg_ParseTuple(args, "|O:buffers", &rank_obj) || !rank_arg(self, rank_obj, &first, &end)) return NULL;
    PyObject *list = PyList_New(0);
    uint32_t n = ferry_layout_buffer_count(self->layout);
    for (uint32_t i = 0; list && i < n; i++) {
        ferry_buffer_info_t b;
        ferry_layout_buffer(self->layout, i, &b);
        if (b.rank < first || b.rank >= end) continue;
        PyObject *o = buffer_info(i, &b);
        if (!o || PyList_Append(list, o) < 0) Py_CLEAR(list);
        Py_XDECREF(o);
    }
    return list;
}

static PyObject *piece_obj(const ferry_model_t *model, const ferry_piece_t *p) {
    ferry_tensor_info_t t;
    ferry_model_tensor(model, p->tensor, &t);
    PyObject *o = PyStructSequence_New(pyf_Piece);
    if (!o) return NULL;
    PyStructSequence_SET_ITEM(o, 0, PyUnicode_FromString(t.name));
    PyStructSequence_SET_ITEM(o, 1, pyf_tuple_i64(p->box.offset, p->box.ndim));
    PyStructSequence_SET_ITEM(o, 2, pyf_tuple_i64(p->box.extent, p->box.ndim));
    PyStructSequence_SET_ITEM(o, 3, PyLong_FromUnsignedLong(p->rank));
    PyStructSequence_SET_ITEM(o, 4, PyLong_FromUnsignedLong(p->buffer));
    PyStructSequence_SET_ITEM(o, 5, PyLong_FromUnsignedLongLong(p->byte_offset));
    PyStructSequence_SET_ITEM(o, 6, pyf_tuple_i64(p->strides, p->box.ndim));
    if (PyErr_Occurred()) Py_CLEAR(o);
    return o;
}

static PyObject *layout_pieces(pyf_layout_t *self, PyObject *args) {
    PyObject *rank_obj = Py_None;
    uint32_t first, end;
    if (!PyArg_ParseTuple(args, "|O:pieces", &rank_obj) || !rank_arg(self, rank_obj, &first, &end)) return NULL;
    const ferry_piece_t *pieces = ferry_layout_pieces(self->layout);
    const ferry_model_t *model = ferry_layout_model(self->layout);
    PyObject *list = PyList_New(0);
    for (uint32_t r = first; list && r < end; r++) {
        size_t at, count;
        ferry_layout_rank_pieces(self->layout, r, &at, &count);
        for (size_t i = at; list && i < at + count; i++) {
            PyObject *o = piece_obj(model, &pieces[i]);
            if (!o || PyList_Append(list, o) < 0) Py_CLEAR(list);
            Py_XDECREF(o);
        }
    }
    return list;
}

static PyObject *layout_rank_info(pyf_layout_t *self, PyObject *arg) {
    uint32_t first, end;
    if (!rank_arg(self, arg, &first, &end)) return NULL;
    ferry_rank_info_t ri;
    ferry_layout_rank_info(self->layout, first, &ri);
    return Py_BuildValue("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I}", "replica", ri.replica, "tp", ri.tp, "pp", ri.pp,
                         "cp", ri.cp, "ep", ri.ep, "etp", ri.etp, "edp", ri.edp, "dp_attn", ri.dp_attn, "num_layers",
                         ri.num_layers, "first_layer", ri.first_layer);
}

static PyObject *layout_get(pyf_layout_t *self, void *which) {
    switch ((intptr_t)which) {
    case 0: return Py_NewRef(self->model);
    case 1: return PyLong_FromUnsignedLong(ferry_layout_world_size(self->layout));
    case 2: {
        char hex[17];
        snprintf(hex, sizeof hex, "%016llx", (unsigned long long)ferry_layout_digest(self->layout));
        return PyUnicode_FromString(hex);
    }
    case 3: {
        const ferry_parallel_t *p = ferry_layout_parallel(self->layout);
        if (!p) Py_RETURN_NONE;
        char buf[1024];
        ferry_parallel_format(p, buf, sizeof buf);
        return PyUnicode_FromString(buf);
    }
    case 4: {
        const ferry_parallel_t *p = ferry_layout_parallel(self->layout);
        if (!p) Py_RETURN_NONE;
        return PyUnicode_FromString(p->side == FERRY_SIDE_TRAIN ? "train" : "infer");
    }
    default: return PyLong_FromSize_t(ferry_layout_piece_count(self->layout));
    }
}

static PyObject *layout_repr(pyf_layout_t *self) {
    const ferry_parallel_t *p = ferry_layout_parallel(self->layout);
    char spec[1024] = "custom";
    if (p) ferry_parallel_format(p, spec, sizeof spec);
    return PyUnicode_FromFormat("<ferry.Layout of '%s' (%s): %u ranks, %zu pieces>",
                                ferry_model_name(ferry_layout_model(self->layout)), spec,
                                ferry_layout_world_size(self->layout), ferry_layout_piece_count(self->layout));
}

static PyMethodDef layout_methods[] = {
    {"build", (PyCFunction)(void (*)(void))layout_build, METH_VARARGS | METH_KEYWORDS | METH_CLASS,
     "build(model, side, spec='', rank=None) -> Layout\n\nThe layout of a parallel configuration: side 'train' "
     "(Megatron-core names) or 'infer' (vLLM/SGLang names), spec as 'tp=2,pp=2' (docs/layouts.md). rank: "
     "only that rank's pieces (every rank's info is still filled). Raises ConfigError or InvalidArgumentError "
     "naming the key or the model field that does not fit."},
    {"custom", (PyCFunction)layout_custom, METH_VARARGS | METH_CLASS,
     "custom(model, world_size) -> Layout\n\nAn empty layout to fill with add_buffer and add_piece."},
    {"add_buffer", (PyCFunction)layout_add_buffer, METH_VARARGS,
     "add_buffer(rank, name, dtype, nbytes) -> index\n\nAdds a buffer on a rank of a custom layout."},
    {"add_piece", (PyCFunction)(void (*)(void))layout_add_piece, METH_VARARGS | METH_KEYWORDS,
     "add_piece(tensor, offset, extent, rank, buffer, byte_offset, strides)\n\nAdds a piece: box [offset, "
     "offset+extent) of tensor (name or index) at byte_offset of buffer, strides in elements per box dimension. "
     "Checked: the box lies in the tensor, its bytes in the buffer, dtypes and ranks agree."},
    {"validate", (PyCFunction)layout_validate, METH_NOARGS,
     "validate() -> dict\n\nChecks that the pieces cover every element of every tensor equally often and that no "
     "two pieces of a rank share bytes; raises CoverageError naming the tensor and box otherwise."},
    {"buffers", (PyCFunction)layout_buffers, METH_VARARGS,
     "buffers(rank=None) -> list of BufferInfo\n\nThe buffers of one rank (or all), in index order."},
    {"pieces", (PyCFunction)layout_pieces, METH_VARARGS,
     "pieces(rank=None) -> list of Piece\n\nThe pieces of one rank (or all)."},
    {"rank_info", (PyCFunction)layout_rank_info, METH_O,
     "rank_info(rank) -> dict\n\nWhere a rank sits: replica, tp, pp, cp, ep, etp, edp, dp_attn, num_layers, "
     "first_layer (zeros for custom layouts)."},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef layout_getset[] = {
    {"model", (getter)layout_get, NULL, "the Model it places", (void *)0},
    {"world_size", (getter)layout_get, NULL, "ranks it spans", (void *)1},
    {"digest", (getter)layout_get, NULL, "hex xxh3 of tensors, pieces and buffers: equal digests, equal layouts",
     (void *)2},
    {"parallel", (getter)layout_get, NULL, "the parallel spec it was built from (None for custom layouts)", (void *)3},
    {"side", (getter)layout_get, NULL, "'train', 'infer' or None (custom)", (void *)4},
    {"piece_count", (getter)layout_get, NULL, "pieces over all ranks", (void *)5},
    {NULL, NULL, NULL, NULL, NULL},
};

PyTypeObject pyf_LayoutType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "ferry.Layout",
    .tp_basicsize = sizeof(pyf_layout_t),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
    .tp_doc = "Where a model's tensors live: buffers per rank, and pieces (a box of a tensor at an offset of a\n"
              "buffer, with strides). Made by Layout.build (train/infer), Layout.hf or Layout.custom.\n"
              "Not to be modified from two threads at once.",
    .tp_dealloc = (destructor)layout_dealloc,
    .tp_repr = (reprfunc)layout_repr,
    .tp_methods = layout_methods,
    .tp_getset = layout_getset,
};

bool pyf_layout_init(PyObject *m) {
    return PyType_Ready(&pyf_LayoutType) == 0 && PyModule_AddObjectRef(m, "Layout", (PyObject *)&pyf_LayoutType) == 0;
}
