/* ferry: safetensors files, read and written in memory.
 *
 * A safetensors file is an 8-byte little-endian header length N, N bytes of
 * JSON naming each tensor's dtype, shape and byte range in the data that
 * follows, and an optional "__metadata__" map of strings. ferry reads full
 * checkpoints, its own delta files and Hugging Face TRL's sparse patches
 * through this module, and writes them with it. Pure: caller buffers, no
 * file I/O (the CLI maps and writes the files).
 *
 * Parsing checks everything before anything is used: the header length and
 * JSON (at most FERRY_SAFETENSORS_HEADER_MAX bytes, no duplicate keys), every
 * dtype, shape and range, ranges inside the data, sizes equal to shape times
 * element size, and ranges covering the data exactly without overlap, as the
 * reference implementation requires.
 */
#ifndef FERRY_SAFETENSORS_H
#define FERRY_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/layout.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

#define FERRY_SAFETENSORS_HEADER_MAX (100u << 20) /* the reference implementation's limit */

typedef struct ferry_safetensors ferry_safetensors_t;

typedef struct ferry_safetensors_tensor {
    const char *name;
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
    uint64_t elems;
    const void *data; /* inside the parsed file's buffer */
    uint64_t bytes;
} ferry_safetensors_tensor_t;

/* Parses file[0, len) without copying the data: the result points into it,
 * so the buffer must outlive *out. FERRY_ERR_CORRUPT (or FERRY_ERR_LIMIT,
 * FERRY_ERR_UNSUPPORTED for a dtype ferry does not know) names what is wrong.
 * Ownership: caller owns *out (ferry_safetensors_destroy).
 * Errors: detail on ctx. Thread-safety: one thread at a time per ctx. */
ferry_status_t ferry_safetensors_parse(ferry_ctx_t *ctx, const void *file, size_t len, ferry_safetensors_t **out);
void ferry_safetensors_destroy(ferry_safetensors_t *st);

/* Tensors in data order. Thread-safe on a parsed file. */
size_t ferry_safetensors_count(const ferry_safetensors_t *st);
const ferry_safetensors_tensor_t *ferry_safetensors_at(const ferry_safetensors_t *st, size_t i);
/* The tensor of that name, or NULL. */
const ferry_safetensors_tensor_t *ferry_safetensors_find(const ferry_safetensors_t *st, const char *name);
/* A "__metadata__" value, or NULL when absent. */
const char *ferry_safetensors_meta(const ferry_safetensors_t *st, const char *key);
/* The i-th metadata key in file order, or NULL past the last. */
const char *ferry_safetensors_meta_key(const ferry_safetensors_t *st, size_t i);

/* Building a file: add tensors (the data is referenced, not copied, until
 * ferry_safetensors_writer_write) and metadata, then write. Tensors are laid
 * out contiguously in the order added; the header is padded with spaces to a
 * multiple of 8 bytes, so the data starts 8-byte aligned. */
typedef struct ferry_safetensors_writer ferry_safetensors_writer_t;

/* Ownership: caller owns *out (ferry_safetensors_writer_destroy). */
ferry_status_t ferry_safetensors_writer_create(ferry_ctx_t *ctx, ferry_safetensors_writer_t **out);
void ferry_safetensors_writer_destroy(ferry_safetensors_writer_t *w);

/* Adds a tensor: bytes must equal the product of shape times the dtype's
 * size; names are unique and not "__metadata__". Errors: detail on ctx. */
ferry_status_t ferry_safetensors_writer_add(ferry_safetensors_writer_t *w, const char *name, ferry_dtype_t dtype,
                                            uint32_t ndim, const int64_t *shape, const void *data, uint64_t bytes);
/* Sets a metadata entry (copied), replacing one of the same key. */
ferry_status_t ferry_safetensors_writer_meta(ferry_safetensors_writer_t *w, const char *key, const char *value);
/* Bytes the file will have. */
uint64_t ferry_safetensors_writer_size(const ferry_safetensors_writer_t *w);
/* Writes the file into dst (cap >= ferry_safetensors_writer_size). */
ferry_status_t ferry_safetensors_writer_write(ferry_safetensors_writer_t *w, void *dst, size_t cap, size_t *len);
/* Writes only the file's first *len bytes, the header length and the
 * header, for callers that place the tensors' data themselves (tensor i at
 * *len plus the bytes of the tensors added before it; the data pointers
 * given to add are not read). Errors: detail on ctx. */
ferry_status_t ferry_safetensors_writer_header(ferry_safetensors_writer_t *w, void *dst, size_t cap, size_t *len);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
