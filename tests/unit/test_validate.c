/* Hand-made layouts: ferry_layout_add_piece bounds checks and the validator's
 * gap / overlap / byte-collision reports, each naming tensor and box. */
#include "check.h"

static ferry_ctx_t *ctx;
static ferry_model_t *m; /* w [8, 4] BF16, b [8] F32 */
static uint32_t tw, tb;

static ferry_piece_t piece(uint32_t t, uint32_t rank, uint32_t buf, int64_t r0, int64_t nr, int64_t c0,
                           int64_t nc, uint64_t off, int64_t s0, int64_t s1) {
    ferry_piece_t p;
    memset(&p, 0, sizeof p);
    p.tensor = t;
    p.rank = rank;
    p.buffer = buf;
    p.box.ndim = nc ? 2 : 1;
    p.box.offset[0] = r0;
    p.box.extent[0] = nr;
    p.box.offset[1] = c0;
    p.box.extent[1] = nc;
    p.byte_offset = off;
    p.strides[0] = s0;
    p.strides[1] = s1;
    return p;
}

static ferry_layout_t *fresh(uint32_t world) {
    ferry_layout_t *l = NULL;
    CHECK_OK(ferry_layout_create(ctx, m, world, &l), ferry_ctx_error(ctx));
    return l;
}

static void add_ok(ferry_layout_t *l, ferry_piece_t p) { CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l)); }

int main(void) {
    ctx = test_ctx();
    CHECK_OK(ferry_model_create(ctx, "hand", &m), ferry_ctx_error(ctx));
    CHECK_OK(ferry_model_add_tensor(m, "w", FERRY_DTYPE_BF16, 2, (int64_t[]){8, 4}, &tw), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "b", FERRY_DTYPE_F32, 1, (int64_t[]){8}, &tb), ferry_model_error(m));

    /* a valid two-rank row split, pieces added out of rank order */
    ferry_layout_t *l = fresh(2);
    uint32_t b0, b1, bb0, bb1;
    CHECK_OK(ferry_layout_add_buffer(l, 1, "w1", FERRY_DTYPE_BF16, 4 * 4 * 2, &b1), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w0", FERRY_DTYPE_BF16, 4 * 4 * 2, &b0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 32, &bb0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 1, "b", FERRY_DTYPE_F32, 32, &bb1), ferry_layout_error(l));
    add_ok(l, piece(tw, 1, b1, 4, 4, 0, 4, 0, 4, 1));
    add_ok(l, piece(tb, 1, bb1, 0, 8, 0, 0, 0, 1, 0));
    add_ok(l, piece(tw, 0, b0, 0, 4, 0, 4, 0, 4, 1));
    add_ok(l, piece(tb, 0, bb0, 0, 8, 0, 0, 0, 1, 0));
    size_t first, count;
    ferry_layout_rank_pieces(l, 0, &first, &count);
    CHECK(first == 0 && count == 2);
    ferry_layout_rank_pieces(l, 1, &first, &count);
    CHECK(first == 2 && count == 2);
    for (size_t i = 0; i < 4; i++) CHECK(ferry_layout_pieces(l)[i].rank == (i < 2 ? 0u : 1u));
    ferry_coverage_t cov;
    CHECK_OK(ferry_layout_validate(l, &cov), ferry_layout_error(l));
    CHECK(cov.tensors == 2 && cov.pieces == 4 && cov.elements == 40 && cov.min_replicas == 1 &&
          cov.max_replicas == 2 && cov.distinct_boxes == 3);
    uint64_t digest = ferry_layout_digest(l);
    CHECK(digest != 0);

    /* add_piece rejections */
    ferry_piece_t p = piece(tw, 0, b0, 6, 4, 0, 4, 0, 4, 1);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_INVALID_ARGUMENT, ferry_layout_error(l),
                "piece of w: box [6:10, 0:4] is empty or outside the tensor");
    p = piece(tw, 0, b0, 0, 4, 0, 4, 2, 4, 1);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_INVALID_ARGUMENT, ferry_layout_error(l),
                "fall outside buffer w0 of 32 bytes");
    p = piece(tw, 0, b1, 0, 4, 0, 4, 0, 4, 1);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_INVALID_ARGUMENT, ferry_layout_error(l),
                "is not a buffer of rank 0");
    p = piece(tb, 0, b0, 0, 8, 0, 0, 0, 1, 0);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_MISMATCH, ferry_layout_error(l),
                "buffer w0 holds BF16, the tensor is F32");
    p = piece(tw, 0, b0, 0, 2, 0, 4, 0, -4, 1);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_INVALID_ARGUMENT, ferry_layout_error(l), "negative stride");
    p = piece(7, 0, b0, 0, 2, 0, 4, 0, 4, 1);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_NOT_FOUND, ferry_layout_error(l), "tensor 7");
    p = piece(tw, 5, b0, 0, 2, 0, 4, 0, 4, 1);
    CHECK_FAILS(ferry_layout_add_piece(l, &p), FERRY_ERR_INVALID_ARGUMENT, ferry_layout_error(l),
                "rank 5 is outside the world of 2 ranks");
    uint32_t bx;
    CHECK_FAILS(ferry_layout_add_buffer(l, 0, "odd", FERRY_DTYPE_F32, 6, &bx), FERRY_ERR_INVALID_ARGUMENT,
                ferry_layout_error(l), "not a positive multiple");
    CHECK(ferry_layout_digest(l) == digest); /* rejected calls changed nothing */
    ferry_layout_destroy(l);

    /* a gap: rows 4..8 of w held by nobody */
    l = fresh(1);
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_BF16, 64, &b0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 32, &bb0), ferry_layout_error(l));
    add_ok(l, piece(tw, 0, b0, 0, 4, 0, 4, 0, 4, 1));
    add_ok(l, piece(tb, 0, bb0, 0, 8, 0, 0, 0, 1, 0));
    CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l),
                "tensor w: elements [4:8, 0:4] are held by no rank");
    ferry_layout_destroy(l);

    /* a tensor with no piece at all */
    l = fresh(1);
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_BF16, 64, &b0), ferry_layout_error(l));
    add_ok(l, piece(tw, 0, b0, 0, 8, 0, 4, 0, 4, 1));
    CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l),
                "tensor b: elements [0:8] are held by no rank");
    ferry_layout_destroy(l);

    /* a partial overlap across ranks: rows 0..5 and 4..8 */
    l = fresh(2);
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_BF16, 64, &b0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 1, "w", FERRY_DTYPE_BF16, 64, &b1), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 32, &bb0), ferry_layout_error(l));
    add_ok(l, piece(tw, 0, b0, 0, 5, 0, 4, 0, 4, 1));
    add_ok(l, piece(tw, 1, b1, 4, 4, 0, 4, 0, 4, 1));
    add_ok(l, piece(tb, 0, bb0, 0, 8, 0, 0, 0, 1, 0));
    CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l),
                "tensor w: elements [4:5, 0:4] are held 2 times but elements [0:4, 0:4] 1 times");
    ferry_layout_destroy(l);

    /* two pieces sharing buffer bytes (contiguous) */
    l = fresh(1);
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_BF16, 64, &b0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 32, &bb0), ferry_layout_error(l));
    add_ok(l, piece(tw, 0, b0, 0, 4, 0, 4, 0, 4, 1));
    add_ok(l, piece(tw, 0, b0, 4, 4, 0, 4, 16, 4, 1)); /* should start at byte 32 */
    add_ok(l, piece(tb, 0, bb0, 0, 8, 0, 0, 0, 1, 0));
    CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l),
                "rank 0 buffer w: bytes of w [0:4, 0:4] and w [4:8, 0:4] overlap");
    ferry_layout_destroy(l);

    /* interleaved strided pieces (transposed halves), disjoint: valid ... */
    for (int clash = 0; clash < 2; clash++) {
        l = fresh(1);
        CHECK_OK(ferry_layout_add_buffer(l, 0, "wt", FERRY_DTYPE_BF16, 64, &b0), ferry_layout_error(l));
        CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 32, &bb0), ferry_layout_error(l));
        /* storage [4 cols][8 rows]: rows 0..4 at element 0, rows 4..8 at element 4 */
        add_ok(l, piece(tw, 0, b0, 0, 4, 0, 4, 0, 1, 8));
        add_ok(l, piece(tw, 0, b0, 4, 4, 0, 4, clash ? 4 : 8, 1, 8));
        add_ok(l, piece(tb, 0, bb0, 0, 8, 0, 0, 0, 1, 0));
        if (!clash)
            CHECK_OK(ferry_layout_validate(l, &cov), ferry_layout_error(l));
        else /* ... and the second half shifted onto the first: caught */
            CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l), "overlap");
        ferry_layout_destroy(l);
    }
    /* strided pieces with different strides (no common grid): the run check decides */
    l = fresh(1);
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_BF16, 64, &b0), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "b", FERRY_DTYPE_F32, 32, &bb0), ferry_layout_error(l));
    add_ok(l, piece(tw, 0, b0, 0, 4, 0, 4, 0, 1, 8));   /* column-major in elements 0..27 */
    add_ok(l, piece(tw, 0, b0, 4, 4, 0, 4, 6, 4, 1));   /* row-major from element 3 */
    add_ok(l, piece(tb, 0, bb0, 0, 8, 0, 0, 0, 1, 0));
    CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l), "overlap");
    ferry_layout_destroy(l);

    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    return 0;
}
