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
 * logical array of shape[ndim], possibly stored with its last two dims swapped. */
typedef struct param {
    bool valid;
    uint32_t buffer;
    uint64_t base; /* byte offset of element 0 */
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[3];
    int64_t stride[3]; /* elements */
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

/* Looks up a tensor by name; a missing one is an internal error. */
uint32_t build_tensor(builder_t *b, const char *fmt, ...) FERRY_PRINTF(2, 3);

/* Places `box` of tensor t into param q: the box's first element lands at
 * param coordinates origin[], and box dim d runs along param dim map[d]. */
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
