/* Internal view of layouts, shared by the layout object, the builders and
 * the validator. */
#ifndef FERRY_LAYOUT_LAYOUT_INTERNAL_H
#define FERRY_LAYOUT_LAYOUT_INTERNAL_H

#include "common/internal.h"
#include "ferry/layout.h"
#include "layout/model_internal.h"

typedef struct layout_buffer {
    size_t name_off;
    uint32_t rank;
    uint64_t size;
    ferry_dtype_t dtype; /* U8: raw bytes (a flat buffer), holds any dtype */
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
} layout_buffer_t;

struct ferry_layout {
    ferry_ctx_t *ctx;
    const ferry_model_t *model;
    uint32_t world;
    ferry_piece_t *pieces;
    size_t npieces, cap_pieces;
    size_t *rank_first; /* world + 1 prefix offsets into pieces */
    layout_buffer_t *buffers;
    size_t nbuffers, cap_buffers;
    char *names;
    size_t names_len, names_cap;
    ferry_rank_info_t *rank_info;
    bool has_parallel;
    ferry_parallel_t parallel;
    ferry_errbuf_t err;
};

/* Appends a buffer without ordering work (builders). */
ferry_status_t layout_push_buffer(ferry_layout_t *l, uint32_t rank, const char *name,
                                  ferry_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                                  uint64_t size, uint32_t *index);

/* Checks a piece against the model and its buffer (see ferry_layout_add_piece). */
ferry_status_t layout_check_piece(ferry_layout_t *l, const ferry_piece_t *p);

/* Appends a checked piece; builders append in rank order and call
 * layout_index_ranks once at the end. */
ferry_status_t layout_push_piece(ferry_layout_t *l, const ferry_piece_t *p);
void layout_index_ranks(ferry_layout_t *l);

static inline const char *layout_buffer_name(const ferry_layout_t *l, uint32_t b) {
    return l->names + l->buffers[b].name_off;
}

#endif
