/* For the sync tests: building layouts, and an element-wise check of a sync
 * between two layouts of one model (every element of every destination
 * piece equals the source element of the same tensor index, wherever the
 * layouts keep them). */
#ifndef FERRY_TESTS_LAYOUT_CHECK_H
#define FERRY_TESTS_LAYOUT_CHECK_H

#include "check.h"

/* Every rank's pieces of a parallel spec, or the test stops. */
static inline ferry_layout_t *build_layout(ferry_ctx_t *ctx, const ferry_model_t *m, ferry_side_t side,
                                           const char *spec) {
    ferry_parallel_t p;
    ferry_layout_t *l;
    CHECK_OK(ferry_parallel_parse(ctx, side, spec, &p), ferry_ctx_error(ctx));
    CHECK_OK(ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l), ferry_ctx_error(ctx));
    return l;
}

/* Returns the elements checked: those of destination rank `rank`'s pieces
 * (UINT32_MAX: every rank's). */
static inline size_t check_layout_copy_rank(const ferry_model_t *model, const ferry_layout_t *src,
                                            const ferry_layout_t *dst, void **wb, void **rb, uint32_t rank) {
    size_t nd = ferry_layout_piece_count(dst), ns = ferry_layout_piece_count(src), checked = 0;
    for (size_t i = 0; i < nd; i++) {
        const ferry_piece_t *dp = &ferry_layout_pieces(dst)[i];
        if (rank != UINT32_MAX && dp->rank != rank) continue;
        ferry_tensor_info_t ti;
        ferry_model_tensor(model, dp->tensor, &ti);
        size_t esz = ferry_dtype_size(ti.dtype);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        for (;;) {
            int64_t doff = 0;
            for (uint32_t d = 0; d < dp->box.ndim; d++) doff += idx[d] * dp->strides[d];
            const uint8_t *got = (const uint8_t *)rb[dp->buffer] + dp->byte_offset + (uint64_t)doff * esz;
            bool found = false;
            for (size_t j = 0; j < ns && !found; j++) {
                const ferry_piece_t *sp = &ferry_layout_pieces(src)[j];
                if (sp->tensor != dp->tensor) continue;
                int64_t soff = 0;
                bool in = true;
                for (uint32_t d = 0; d < dp->box.ndim && in; d++) {
                    int64_t g = dp->box.offset[d] + idx[d] - sp->box.offset[d];
                    in = g >= 0 && g < sp->box.extent[d];
                    soff += g * sp->strides[d];
                }
                if (!in) continue;
                found = true;
                CHECK(memcmp(got, (const uint8_t *)wb[sp->buffer] + sp->byte_offset + (uint64_t)soff * esz, esz) == 0);
                checked++;
            }
            CHECK(found);
            int d = (int)dp->box.ndim - 1;
            for (; d >= 0; d--) {
                if (++idx[d] < dp->box.extent[d]) break;
                idx[d] = 0;
            }
            if (d < 0) break;
        }
    }
    return checked;
}

/* Returns the elements checked. */
static inline size_t check_layout_copy(const ferry_model_t *model, const ferry_layout_t *src, const ferry_layout_t *dst,
                                       void **wb, void **rb) {
    return check_layout_copy_rank(model, src, dst, wb, rb, UINT32_MAX);
}

#endif
