/* ferry's CPython extension (ferry._ferry): what its files share.
 *
 * The extension sits on the public C API only (include/ferry). Every object
 * owns its own ferry context, so objects can be used from different Python
 * threads at once; an object is used by one thread at a time (a second
 * thread gets ferry.BusyError rather than a data race), and every call that
 * can take long releases the GIL and lets Ctrl-C interrupt its waits.
 */
#ifndef PYFERRY_H
#define PYFERRY_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdbool.h>
#include <stdint.h>

#include "ferry/ferry.h"

/* ---- module state and errors (module.c) ---- */

/* Raises the ferry.Error subclass of st with text "detail (FERRY_ERR_X)";
 * returns NULL. */
PyObject *pyf_raise(ferry_status_t st, const char *detail);
/* pyf_raise, or the pending Python exception when the call was interrupted
 * by a signal handler that raised (Ctrl-C: KeyboardInterrupt). */
PyObject *pyf_raise_call(ferry_status_t st, const char *detail);

/* A fresh context whose waits poll Python's signal handlers. Sets a Python
 * error and returns NULL on failure. */
ferry_ctx_t *pyf_ctx_create(void);

/* Marks obj busy for a call that releases the GIL: false (and BusyError
 * raised) when another thread is inside a call on the same object. */
bool pyf_enter(int *busy, const char *what);
static inline void pyf_leave(int *busy) { *busy = 0; }

/* Timeouts: seconds (int or float, >= 0) or None for the default. */
bool pyf_timeout_ms(PyObject *o, uint32_t dflt, uint32_t *out);
/* A ferry dtype from a name ("BF16", "bfloat16"), a torch dtype or None
 * (*out untouched, *given false). */
bool pyf_dtype_arg(PyObject *o, ferry_dtype_t *out, bool *given);
/* A box from offset and extent sequences (offset None: zeros). */
bool pyf_box_arg(PyObject *offset, PyObject *extent, ferry_box_t *out);
bool pyf_strides_arg(PyObject *o, uint32_t ndim, int64_t *out);
PyObject *pyf_tuple_i64(const int64_t *v, uint32_t n);
/* An unsigned 64-bit argument (a version, a sequence id): an int in
 * [0, 2^64), with `what` naming it in the error. */
bool pyf_u64_arg(PyObject *o, const char *what, uint64_t *out);
/* pyf_u64_arg for values below 2**32. */
bool pyf_u32_arg(PyObject *o, const char *what, uint32_t *out);
PyObject *pyf_dtype_str(ferry_dtype_t d);

/* Named-tuple types (PyStructSequence), made at import. */
extern PyTypeObject *pyf_TensorInfo, *pyf_BufferInfo, *pyf_Piece, *pyf_PublishInfo, *pyf_UpdateInfo;
bool pyf_structseq_init(PyObject *module);

/* ---- tensors (tensor.c) ---- */

/* A view of a caller's tensor: the address of its first element, dtype,
 * shape and element strides; the owner is kept alive while the view is. */
typedef struct pyf_tensor {
    PyObject *owner;    /* the caller's object (a new reference) */
    PyObject *keep;     /* torch: a detached alias holding the storage even if
                           the caller's tensor gets another one (param.data = x) */
    Py_buffer view;     /* when it came through the buffer protocol */
    bool has_view;
    void *data;
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
    int64_t strides[FERRY_MAX_DIMS]; /* elements */
    uint64_t numel;
    uint64_t span;      /* bytes from data to one past the last element */
    bool contiguous;    /* row-major, no gaps */
    ferry_mem_type_t mem; /* FERRY_MEM_HOST (pinned host memory too) or FERRY_MEM_CUDA */
    int device;         /* FERRY_MEM_CUDA: the CUDA ordinal in this process; host: -1 */
} pyf_tensor_t;

/* access: PYF_READ or PYF_WRITE, plus PYF_CUDA where the caller takes CUDA
 * device memory (sync members); without it a CUDA tensor is refused. */
enum { PYF_READ = 0, PYF_WRITE = 1, PYF_CUDA = 2 };

/* Reads obj through __dlpack__ or the buffer protocol. dtype_override (if
 * given) reinterprets elements of the same size ("F8_E4M3" over uint8).
 * Host memory (pinned included), and CUDA device memory with PYF_CUDA
 * (DLPack kDLCUDA: t->mem and t->device say which GPU); managed memory and
 * other devices are refused (UnsupportedError), as are negative strides and
 * empty tensors. */
bool pyf_tensor_get(PyObject *obj, int access, const ferry_dtype_t *dtype_override, const char *what,
                    pyf_tensor_t *out);
void pyf_tensor_release(pyf_tensor_t *t);
/* True if a tensor of dtype `have` may serve as a buffer of dtype `want`:
 * the same dtype, or integer storage of the same element size (uint8
 * holding fp8, int16 holding bf16). */
bool pyf_dtype_fits(ferry_dtype_t have, ferry_dtype_t want);
/* "cpu" or "cuda:N" for a memory type and device (what errors and .device
 * show). */
void pyf_device_name(ferry_mem_type_t mem, int device, char *buf, size_t size);
/* device=: None/'cpu' (host), 'cuda', 'cuda:N', an int N or a torch.device;
 * *given says whether one was passed. False with an exception set. */
bool pyf_device_arg(PyObject *o, ferry_mem_type_t *mem, int *device, bool *given);
/* The storage's current address if the owner can tell (torch data_ptr):
 * used to catch a tensor whose storage was replaced after registration. */
bool pyf_tensor_moved(const pyf_tensor_t *t, uintptr_t *now);

/* ---- objects ---- */

typedef struct pyf_model {
    PyObject_HEAD
    ferry_ctx_t *ctx;
    ferry_model_t *model;
    int busy;
} pyf_model_t;

typedef struct pyf_layout {
    PyObject_HEAD
    ferry_ctx_t *ctx;
    ferry_layout_t *layout;
    PyObject *model; /* keeps the spec alive */
} pyf_layout_t;

/* (tensor name or index, offset, extent, buffer, byte_offset, strides) -> piece */
bool pyf_piece_args(const ferry_model_t *model, PyObject *tensor, PyObject *offset, PyObject *extent,
                    unsigned int buffer, unsigned long long byte_offset, PyObject *strides, ferry_piece_t *out);

/* Named tensors from a mapping name -> tensor (refs.c): each C-contiguous,
 * its dtype and shape its own; what names the argument in errors. The
 * names and tensors stay alive until pyf_refs_release. */
typedef struct pyf_refs {
    size_t n;
    ferry_tensor_ref_t *refs;
    pyf_tensor_t *ts;
    PyObject *items; /* the mapping's items: holds the names */
} pyf_refs_t;
bool pyf_refs_get(PyObject *mapping, int access, const char *what, pyf_refs_t *out);
void pyf_refs_release(pyf_refs_t *r);

extern PyTypeObject pyf_ModelType, pyf_LayoutType, pyf_WriterType, pyf_ReaderType, pyf_HostBufferType,
    pyf_DeviceBufferType;
extern PyTypeObject pyf_TableType, pyf_ChannelType, pyf_PlanType;
bool pyf_model_init(PyObject *module);
bool pyf_layout_init(PyObject *module);
bool pyf_member_init(PyObject *module);
bool pyf_table_init(PyObject *module);
bool pyf_channel_init(PyObject *module);
bool pyf_delta_init(PyObject *module);
bool pyf_fp8_init(PyObject *module);
bool pyf_plan_init(PyObject *module);

#endif
