/* Shared machinery of the layout builders: parameters (buffers with a
 * logical storage shape) and placement of tensor boxes into them. */
#ifndef FERRY_LAYOUT_BUILD_H
#define FERRY_LAYOUT_BUILD_H

#include "layout/layout_internal.h"

#define BUILD_FLAT_ALIGN 256 /* bytes; a flat buffer aligns each parameter like a DDP bucket */

typedef struct builder {
    ferry_layout_t *l;
    const ferry_model_t *m;
    const ferry_arch_t *a;
    const ferry_parallel_t *p;
    uint32_t only_rank;   /* FERRY_ALL_RANKS or the one rank to emit */
    uint32_t rank;        /* rank being emitted */
    bool emit;            /* rank == only_rank or all */
    uint32_t flat_buffer; /* flat mode: the rank's buffer, UINT32_MAX before it exists */
    ferry_status_t st;    /* first failure sticks; later calls do nothing */
    ferry_errbuf_t *err;  /* the context's */
} builder_t;

/* A parameter: one buffer (or a region of the rank's flat buffer) holding a
 * logical array of shape[ndim], possibly stored with its last two dims swapped.
 * A parameter of fp8 block-quantized tensors comes with its scale parameter
 * (`<name>_scale_inv`, F32, the last two dims in 128-blocks, rounded up), into
 * which every placement of a weight box places the box's blocks. */
typedef struct param {
    bool valid;
    uint32_t buffer;
    uint64_t base; /* byte offset of element 0 */
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[3];
    int64_t stride[3]; /* elements */
    bool quant;        /* holds FERRY_QUANT_FP8_BLOCK tensors; s* is the scale parameter */
    uint32_t sbuffer;
    uint64_t sbase;
    int64_t sstride[3];
    char name[200];    /* for errors */
} param_t;

/* Starts rank emission (sets b->rank/emit, resets flat state). */
void build_begin_rank(builder_t *b, uint32_t rank);
/* Ends rank emission (fixes the flat buffer's size). */
void build_end_rank(builder_t *b);

/* Opens a parameter of shape (d0[, d1[, d2]]) named by fmt; transposed is
 * decided from the parallel config's transpose glob. Returns an invalid
 * param (and does nothing) when the rank is not emitted or after a failure. */
param_t param_open(builder_t *b, ferry_dtype_t dtype, uint32_t ndim, int64_t d0, int64_t d1,
                   int64_t d2, const char *fmt, ...) FERRY_PRINTF(7, 8);

/* Opens the parameter of tensor t (and of the tensors fused with it, which
 * must agree with t: build_quant_group): t's dtype; when t is fp8
 * block-quantized, its scale parameter too. A transpose glob matching an fp8
 * parameter or its scale is FERRY_ERR_UNSUPPORTED (v1), decided on every
 * rank, emitted or not. */
param_t param_open_q(builder_t *b, uint32_t t, uint32_t ndim, int64_t d0, int64_t d1, int64_t d2,
                     const char *fmt, ...) FERRY_PRINTF(7, 8);

/* Whether the n tensors fused into parameter `param` are fp8 block-quantized:
 * all of them or none (vLLM quantizes a fused layer's shards alike), else
 * FERRY_ERR_UNSUPPORTED naming the parameter and a tensor of each kind. */
bool build_quant_group(builder_t *b, const char *param, const uint32_t *ts, size_t n);

/* vLLM's refusals of fp8 shards that cut a 128-block (validate_fp8_block_shape):
 * a split (split > 1) column-parallel parameter needs every output part a
 * multiple of 128; an unsplit merged one every part but the last; */
void build_fp8_out_parts(builder_t *b, const char *param, const int64_t *parts, size_t n, uint32_t split);
/* a split row-parallel parameter needs its input partition a multiple of 128. */
void build_fp8_in_part(builder_t *b, const char *param, int64_t in_part, uint32_t split);

static inline bool build_is_fp8(const builder_t *b, uint32_t t) {
    return b->m->tensors[t].quant == FERRY_QUANT_FP8_BLOCK;
}

/* Looks up a tensor by name; a missing one is an internal error. */
uint32_t build_tensor(builder_t *b, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Places `box` of tensor t into param q: the box's first element lands at
 * param coordinates origin[], and box dim d runs along param dim map[d]. For
 * a quantized param, also blocks(box) of t's scale into the scale param at
 * origin / 128 (box and origin must lie on the block grid, a box's extent may
 * end in a partial block only at the tensor's end). */
void place(builder_t *b, const param_t *q, uint32_t t, const ferry_box_t *box,
           const int64_t *origin, const uint32_t *map);

/* Common shapes of placement, for 1-d and 2-d tensors:
 * rows [row0, row0 + nrows) of t (all columns) at param row dst_row
 * (with a leading index lead for 3-d params, ignored for 2-d/1-d). */
void place_rows(builder_t *b, const param_t *q, uint32_t t, int64_t row0, int64_t nrows,
                int64_t lead, int64_t dst_row);
/* columns [col0, col0 + ncols) of a 2-d t (all rows) at param column dst_col. */
void place_cols(builder_t *b, const param_t *q, uint32_t t, int64_t col0, int64_t ncols,
                int64_t lead, int64_t dst_col);
/* the whole tensor t as the whole param (a replicated parameter). */
void place_whole(builder_t *b, const param_t *q, uint32_t t);

/* Parameters made of one tensor:
 * a replicated copy of the whole tensor; */
void emit_replicated(builder_t *b, const char *buffer, const char *tensor);
/* rows [index*n, (index+1)*n) of a [rows_total, cols] tensor (cols 0: 1-d), n = rows_total/split; */
void emit_split_rows(builder_t *b, const char *buffer, const char *tensor, int64_t rows_total,
                     int64_t cols, uint32_t split, uint32_t index);
/* columns [index*n, (index+1)*n) of a [rows, cols_total] tensor, n = cols_total/split; */
void emit_split_cols(builder_t *b, const char *buffer, const char *tensor, int64_t rows,
                     int64_t cols_total, uint32_t split, uint32_t index);
/* a vocabulary shard of `rows` padded rows starting at index*rows; padding rows hold nothing. */
void emit_vocab_shard(builder_t *b, const char *buffer, const char *tensor, int64_t rows,
                      uint32_t index);

/* Records a configuration failure (first one sticks). */
void build_fail(builder_t *b, ferry_status_t st, const char *fmt, ...) FERRY_PRINTF(3, 4);

/* Divides with a clear error naming both quantities; returns 0 after failing. */
int64_t build_div(builder_t *b, int64_t num, const char *num_name, int64_t den, const char *den_name);

static inline int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

ferry_status_t build_train(builder_t *b);
ferry_status_t build_infer(builder_t *b);

#endif
