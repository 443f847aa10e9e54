/* One member's layout on the wire (RankLayout in meta.proto) as plain
 * columns: the tensors its pieces name, its buffers, and its pieces column
 * by column. Encoding and decoding live here, so that the protobuf stays in
 * meta; sync converts a ferry_layout_t to and from these columns
 * (src/sync/wire.c). Pure: bytes in, bytes out. */
#ifndef FERRY_META_RANK_LAYOUT_H
#define FERRY_META_RANK_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"
#include "meta/defs.h"

typedef struct meta_rank_tensor {
    const char *name;
    uint32_t dtype; /* ferry_dtype_t */
    uint32_t ndim;  /* at most META_MAX_DIMS */
    const int64_t *shape;
    uint32_t quant;            /* ferry_quant_t; 0: plain (the fields below unused) */
    const char *quant_partner; /* name of its weight or scale; NULL or "" when plain */
    uint32_t quant_flags;
} meta_rank_tensor_t;

typedef struct meta_rank_buffer {
    const char *name;
    uint32_t dtype;
    uint64_t size;
} meta_rank_buffer_t;

typedef struct meta_rank_layout {
    uint32_t rank;
    const char *host;
    const meta_rank_tensor_t *tensors;
    size_t n_tensors;
    const meta_rank_buffer_t *buffers;
    size_t n_buffers;
    /* pieces, column-wise: n_pieces entries in each of the first four */
    size_t n_pieces;
    const uint32_t *tensor;      /* index into tensors */
    const uint32_t *buffer;      /* index into buffers */
    const uint64_t *byte_offset;
    const uint32_t *ndim;
    const int64_t *box;          /* per piece: ndim offsets, then ndim extents (2 * sum(ndim)) */
    const int64_t *strides;      /* per piece: ndim strides (sum(ndim)) */
    size_t n_box, n_strides;
    struct meta_reply_priv *priv; /* decoded: what the columns live in */
} meta_rank_layout_t;

/* Encodes rl; *out (free with ferry_free) and *len get the bytes. The same
 * columns always give the same bytes. */
ferry_status_t meta_rank_layout_encode(ferry_ctx_t *ctx, const meta_rank_layout_t *rl, uint8_t **out, size_t *len,
                                       ferry_errbuf_t *err);

/* Decodes the layout `what` (e.g. "writer") rank want_rank committed and
 * checks it before anything in it is used: it says it is want_rank, host
 * and names within limits, piece columns of equal length, at most
 * META_MAX_DIMS dims, every tensor and buffer index in range, box and
 * stride columns matching the dims, tensors named with at most
 * META_MAX_DIMS dims, a quant partner named exactly when quant is set. Errors (naming what and the rank): FERRY_ERR_CORRUPT,
 * FERRY_ERR_LIMIT, FERRY_ERR_NO_MEMORY. *out: free with
 * meta_rank_layout_free. */
ferry_status_t meta_rank_layout_decode(ferry_ctx_t *ctx, const uint8_t *data, size_t len, uint32_t want_rank,
                                       const char *what, meta_rank_layout_t **out, ferry_errbuf_t *err);
void meta_rank_layout_free(meta_rank_layout_t *rl); /* NULL is accepted */

#endif
