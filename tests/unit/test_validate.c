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

/* ---- scales mirror weights: fp8 pieces and their scale pieces pair up per rank ---- */

static ferry_model_t *qm;     /* q [256, 320] F8_E4M3 (scale [2, 3]), e [2, 200, 128] (scale [2, 2, 1]) */
static uint32_t tq, tqs, te, tes;

/* a piece of a 2-d tensor in a buffer of its own on `rank`, row-major */
static void add2(ferry_layout_t *l, uint32_t t, uint32_t rank, int64_t r0, int64_t nr, int64_t c0, int64_t nc) {
    ferry_tensor_info_t ti;
    ferry_model_tensor(qm, t, &ti);
    uint32_t b;
    char name[96];
    snprintf(name, sizeof name, "%s.%lld.%lld", ti.name, (long long)r0, (long long)c0);
    CHECK_OK(ferry_layout_add_buffer(l, rank, name, ti.dtype, (uint64_t)(nr * nc) * ferry_dtype_size(ti.dtype), &b),
             ferry_layout_error(l));
    add_ok(l, piece(t, rank, b, r0, nr, c0, nc, 0, nc, 1));
}

/* a piece of expert slice [e0:e0+ne] of a 3-d tensor, whole in its last two dims */
static void add3(ferry_layout_t *l, uint32_t t, uint32_t rank, int64_t e0, int64_t ne, int64_t r0, int64_t nr) {
    ferry_tensor_info_t ti;
    ferry_model_tensor(qm, t, &ti);
    uint32_t b;
    char name[96];
    snprintf(name, sizeof name, "%s.%lld.%lld", ti.name, (long long)e0, (long long)r0);
    int64_t c = ti.shape[2];
    CHECK_OK(ferry_layout_add_buffer(l, rank, name, ti.dtype, (uint64_t)(ne * nr * c) * ferry_dtype_size(ti.dtype), &b),
             ferry_layout_error(l));
    ferry_piece_t p;
    memset(&p, 0, sizeof p);
    p.tensor = t;
    p.rank = rank;
    p.buffer = b;
    p.box.ndim = 3;
    p.box.offset[0] = e0;
    p.box.extent[0] = ne;
    p.box.offset[1] = r0;
    p.box.extent[1] = nr;
    p.box.extent[2] = c;
    p.strides[0] = nr * c;
    p.strides[1] = c;
    p.strides[2] = 1;
    add_ok(l, p);
}

/* A valid fp8 layout on 2 ranks: q split by rows at 128 (rank 1's ends in
 * the tensor's last, whole, block), cols whole (320: 2.5 blocks); e split by
 * experts, rank 0 holding e in two row pieces [0:128] and [128:200] (its
 * last block partial). `mutation` breaks it one way. */
static ferry_layout_t *fp8_layout(int mutation) {
    ferry_layout_t *l = NULL;
    CHECK_OK(ferry_layout_create(ctx, qm, 2, &l), ferry_ctx_error(ctx));
    add2(l, tq, 0, 0, mutation == 1 ? 100 : 128, 0, 320);            /* 1: cuts a block */
    add2(l, tq, 1, mutation == 1 ? 100 : 128, mutation == 1 ? 156 : 128, 0, 320);
    if (mutation != 2) add2(l, tqs, 0, 0, 1, 0, 3);                  /* 2: a scale piece missing */
    add2(l, tqs, mutation == 3 ? 0 : 1, 1, 1, 0, 3);                  /* 3: on the wrong rank */
    add3(l, te, 0, 0, 1, 0, 128);
    add3(l, te, 0, 0, 1, 128, 72);
    add3(l, te, 1, 1, 1, 0, 200);
    add3(l, tes, 0, 0, 1, 0, 1);
    add3(l, tes, 0, 0, 1, mutation == 4 ? 0 : 1, 1);                 /* 4: the wrong blocks */
    add3(l, tes, 1, 1, 1, 0, 2);
    if (mutation == 5) add2(l, tq, 1, 128, 128, 0, 320);              /* 5: held twice, its scale once */
    if (mutation == 6) add3(l, tes, 1, 0, 1, 0, 1);                   /* 6: a scale with no weight */
    return l;
}

static void test_scales_mirror(void) {
    CHECK_OK(ferry_model_create(ctx, "fp8", &qm), ferry_ctx_error(ctx));
    CHECK_OK(ferry_model_add_tensor(qm, "q", FERRY_DTYPE_BF16, 2, (int64_t[]){256, 320}, &tq), ferry_model_error(qm));
    CHECK_OK(ferry_model_add_tensor(qm, "e", FERRY_DTYPE_BF16, 3, (int64_t[]){2, 200, 128}, &te), ferry_model_error(qm));
    CHECK_OK(ferry_model_add_fp8(qm, tq, 0, &tqs), ferry_model_error(qm));
    CHECK_OK(ferry_model_add_fp8(qm, te, 0, &tes), ferry_model_error(qm));
    ferry_coverage_t cov;
    ferry_layout_t *l = fp8_layout(0);
    CHECK_OK(ferry_layout_validate(l, &cov), ferry_layout_error(l));
    CHECK(cov.tensors == 4 && cov.pieces == 10);
    ferry_layout_destroy(l);
    static const char *const want[] = {
        NULL,
        "rank 0: fp8 tensor q: piece [0:100, 0:320] cuts a 128x128 scale block",
        "rank 0: fp8 tensor q [0:128, 0:320] has no piece of its scale q_scale_inv [0:1, 0:3] on the rank",
        "rank 0: scale tensor q_scale_inv [1:2, 0:3] matches no piece of its fp8 tensor q on the rank",
        "rank 0: fp8 tensor e [0:1, 0:128, 0:128] is held 1 times but its scale e_scale_inv [0:1, 0:1, 0:1] 2 times",
        "rank 1: fp8 tensor q [128:256, 0:320] is held 2 times but its scale q_scale_inv [1:2, 0:3] 1 times",
        "rank 1: scale tensor e_scale_inv [0:1, 0:1, 0:1] matches no piece of its fp8 tensor e on the rank",
    };
    for (int mut = 1; mut < (int)(sizeof want / sizeof want[0]); mut++) {
        l = fp8_layout(mut);
        CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l), want[mut]);
        ferry_layout_destroy(l);
    }
    /* one copy: e in two row pieces, the second ending in the partial block ... */
    l = NULL;
    CHECK_OK(ferry_layout_create(ctx, qm, 1, &l), ferry_ctx_error(ctx));
    add2(l, tq, 0, 0, 256, 0, 320);
    add2(l, tqs, 0, 0, 2, 0, 3);
    add3(l, te, 0, 0, 2, 0, 128);
    add3(l, te, 0, 0, 2, 128, 72);
    add3(l, tes, 0, 0, 2, 0, 1);
    add3(l, tes, 0, 0, 2, 1, 1);
    CHECK_OK(ferry_layout_validate(l, &cov), ferry_layout_error(l));
    ferry_layout_destroy(l);
    CHECK_OK(ferry_layout_create(ctx, qm, 1, &l), ferry_ctx_error(ctx));
    add2(l, tq, 0, 0, 256, 0, 320);
    add2(l, tqs, 0, 0, 2, 0, 3);
    add3(l, te, 0, 0, 2, 0, 200);   /* one piece of blocks [0:2] ... */
    add3(l, tes, 0, 0, 2, 0, 1);    /* ... whose scale comes in two */
    add3(l, tes, 0, 0, 2, 1, 1);
    CHECK_FAILS(ferry_layout_validate(l, &cov), FERRY_ERR_COVERAGE, ferry_layout_error(l),
                "rank 0: scale tensor e_scale_inv [0:2, 0:1, 0:1] matches no piece of its fp8 tensor e on the rank");
    ferry_layout_destroy(l);
    ferry_model_destroy(qm);
}

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
    test_scales_mirror();
    ferry_ctx_destroy(ctx);
    return 0;
}
