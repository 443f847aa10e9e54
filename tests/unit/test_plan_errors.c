/* Planner error paths: each refusal has the documented status, a detail on
 * the context naming the tensor (and, for gaps, the uncovered box), and
 * leaves *out untouched. Also ferry_plan_verify catching a plan checked
 * against layouts it was not built from. */
#include "check.h"
#include "ferry/plan.h"

static ferry_ctx_t *ctx;

#define W "layers.0.attn.qkv.weight" /* [8, 4] BF16 */
#define B "layers.0.norm.bias"       /* [8] F32 */
#define X "layers.0.extra.weight"    /* [2, 2] F32, destination models only */

/* A model with W and B, W's dtype and shape as given, and optionally X. */
static ferry_model_t *model(ferry_dtype_t wdtype, int64_t wcols, bool extra) {
    ferry_model_t *m = NULL;
    CHECK_OK(ferry_model_create(ctx, "m", &m), ferry_ctx_error(ctx));
    CHECK_OK(ferry_model_add_tensor(m, W, wdtype, 2, (int64_t[]){8, wcols}, NULL), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, B, FERRY_DTYPE_F32, 1, (int64_t[]){8}, NULL), ferry_model_error(m));
    if (extra) CHECK_OK(ferry_model_add_tensor(m, X, FERRY_DTYPE_F32, 2, (int64_t[]){2, 2}, NULL), ferry_model_error(m));
    return m;
}

static uint32_t tensor(const ferry_layout_t *l, const char *name) {
    uint32_t t;
    CHECK(ferry_model_find(ferry_layout_model(l), name, &t));
    return t;
}

/* Adds box [r0:r0+nr] x [c0:c0+nc] (nc == 0: 1-d) of a tensor on a rank, in
 * a buffer of its own holding the box row-major at byte `off`. */
/* Rows [a0, a0+na) and [b0, b0+nb) of a 2-d tensor with 4 columns, both in
 * one buffer of rank, the second starting `gap` rows after the first (a gap
 * smaller than na makes their bytes overlap). */
static void add_pair_one_buffer(ferry_layout_t *l, const char *name, uint32_t rank, int64_t a0, int64_t na,
                                int64_t b0, int64_t nb, int64_t gap) {
    ferry_tensor_info_t ti;
    uint32_t t = tensor(l, name), b;
    ferry_model_tensor(ferry_layout_model(l), t, &ti);
    uint64_t esz = ferry_dtype_size(ti.dtype);
    CHECK_OK(ferry_layout_add_buffer(l, rank, name, ti.dtype, (uint64_t)(na + gap + nb) * 4 * esz, &b),
             ferry_layout_error(l));
    int64_t r0[2] = {a0, b0}, nr[2] = {na, nb};
    uint64_t off = 0;
    for (int i = 0; i < 2; i++) {
        ferry_piece_t p;
        memset(&p, 0, sizeof p);
        p.tensor = t;
        p.rank = rank;
        p.buffer = b;
        p.byte_offset = off;
        p.box.ndim = 2;
        p.box.offset[0] = r0[i];
        p.box.extent[0] = nr[i];
        p.box.extent[1] = 4;
        p.strides[0] = 4;
        p.strides[1] = 1;
        CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l));
        off += (uint64_t)gap * 4 * esz;
    }
}

static void add(ferry_layout_t *l, const char *name, uint32_t rank, int64_t r0, int64_t nr, int64_t c0, int64_t nc,
                uint64_t off) {
    ferry_tensor_info_t ti;
    uint32_t t = tensor(l, name), b;
    ferry_model_tensor(ferry_layout_model(l), t, &ti);
    uint64_t esz = ferry_dtype_size(ti.dtype), numel = (uint64_t)(nr * (nc ? nc : 1));
    CHECK_OK(ferry_layout_add_buffer(l, rank, name, ti.dtype, off + (numel + 4) * esz, &b), ferry_layout_error(l));
    ferry_piece_t p;
    memset(&p, 0, sizeof p);
    p.tensor = t;
    p.rank = rank;
    p.buffer = b;
    p.byte_offset = off;
    p.box.ndim = nc ? 2 : 1;
    p.box.offset[0] = r0;
    p.box.extent[0] = nr;
    p.box.offset[1] = c0;
    p.box.extent[1] = nc;
    p.strides[0] = nc ? nc : 1;
    p.strides[1] = 1;
    CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l));
}

static ferry_layout_t *layout(const ferry_model_t *m, uint32_t world) {
    ferry_layout_t *l = NULL;
    CHECK_OK(ferry_layout_create(ctx, m, world, &l), ferry_ctx_error(ctx));
    return l;
}

/* A source with both tensors whole on rank 0 and a row split on rank 1. */
static ferry_layout_t *good_src(const ferry_model_t *m) {
    ferry_layout_t *l = layout(m, 2);
    add(l, W, 0, 0, 8, 0, 4, 0);
    add(l, B, 0, 0, 8, 0, 0, 0);
    add(l, W, 1, 0, 4, 0, 4, 0);
    add(l, W, 1, 4, 4, 0, 4, 0);
    add(l, B, 1, 0, 8, 0, 0, 0);
    return l;
}

/* A destination of 3 ranks: rank r holds W's columns split 2 ways (ranks 0
 * and 1) or whole (rank 2), and B whole. */
static ferry_layout_t *good_dst(const ferry_model_t *m) {
    ferry_layout_t *l = layout(m, 3);
    add(l, W, 0, 0, 8, 0, 2, 0);
    add(l, W, 1, 0, 8, 2, 2, 0);
    add(l, W, 2, 0, 8, 0, 4, 0);
    for (uint32_t r = 0; r < 3; r++) add(l, B, r, 0, 8, 0, 0, 0);
    return l;
}

static int checks;
static int sentinel_storage;
#define SENTINEL ((ferry_plan_t *)&sentinel_storage)

/* The build must fail with `want` (or `alt`, if not FERRY_OK), the detail
 * must contain every needle, and *out must stay the sentinel. */
static void expect_fail(int line, const ferry_layout_t *src, const ferry_layout_t *dst, const ferry_plan_params_t *params,
                        ferry_status_t want, ferry_status_t alt, const char *n1, const char *n2) {
    ferry_plan_t *out = SENTINEL;
    checks++;
    ferry_status_t st = ferry_plan_build(ctx, src, dst, params, &out);
    const char *d = ferry_ctx_error(ctx);
    bool ok = (st == want || (alt != FERRY_OK && st == alt)) && (!n1 || strstr(d, n1)) && (!n2 || strstr(d, n2)) &&
              out == SENTINEL;
    if (!ok) {
        fprintf(stderr, "%s:%d: ferry_plan_build gave %s \"%s\" (out %s); expected %s%s%s containing \"%s\" and \"%s\"\n",
                __FILE__, line, ferry_status_name(st), d, out == SENTINEL ? "untouched" : "CHANGED",
                ferry_status_name(want), alt != FERRY_OK ? " or " : "", alt != FERRY_OK ? ferry_status_name(alt) : "",
                n1 ? n1 : "", n2 ? n2 : "");
        if (out != SENTINEL) ferry_plan_destroy(out);
        exit(1);
    }
}
#define FAILS(src, dst, params, want, n1, n2) expect_fail(__LINE__, src, dst, params, want, FERRY_OK, n1, n2)

static ferry_plan_t *builds(const ferry_layout_t *src, const ferry_layout_t *dst, const ferry_plan_params_t *params) {
    ferry_plan_t *p = NULL;
    checks++;
    CHECK_OK(ferry_plan_build(ctx, src, dst, params, &p), ferry_ctx_error(ctx));
    CHECK(p != NULL);
    return p;
}

static void coverage(void) {
    ferry_model_t *m = model(FERRY_DTYPE_BF16, 4, false);
    /* one reader holding both tensors whole, so the uncovered box is unique */
    ferry_layout_t *dst = layout(m, 1);
    add(dst, W, 0, 0, 8, 0, 4, 0);
    add(dst, B, 0, 0, 8, 0, 0, 0);
    /* rows 3..5 of W held by no source: the uncovered box is named */
    ferry_layout_t *src = layout(m, 2);
    add(src, W, 0, 0, 3, 0, 4, 0);
    add(src, W, 1, 5, 3, 0, 4, 0);
    add(src, B, 1, 0, 8, 0, 0, 0);
    FAILS(src, dst, NULL, FERRY_ERR_COVERAGE, W, "[3:5, 0:4]");
    ferry_layout_destroy(src);
    /* a corner: W [6:8, 2:4] missing, rank 0 and 1 have the rest */
    src = layout(m, 2);
    add(src, W, 0, 0, 6, 0, 4, 0);
    add(src, W, 1, 6, 2, 0, 2, 0);
    add(src, B, 0, 0, 8, 0, 0, 0);
    FAILS(src, dst, NULL, FERRY_ERR_COVERAGE, W, "[6:8, 2:4]");
    ferry_layout_destroy(src);
    /* B held by no source piece at all (it exists in the model) */
    src = layout(m, 1);
    add(src, W, 0, 0, 8, 0, 4, 0);
    FAILS(src, dst, NULL, FERRY_ERR_COVERAGE, B, "[0:8]");
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(m);
    /* many source pieces, one row missing at the end: the gap named exactly */
    m = model(FERRY_DTYPE_BF16, 4, false);
    ferry_model_t *tall = NULL;
    CHECK_OK(ferry_model_create(ctx, "tall", &tall), ferry_ctx_error(ctx));
    CHECK_OK(ferry_model_add_tensor(tall, W, FERRY_DTYPE_BF16, 2, (int64_t[]){600, 4}, NULL), ferry_model_error(tall));
    src = layout(tall, 1);
    for (int64_t r = 0; r < 599; r++) add(src, W, 0, r, 1, 0, 4, 0);
    dst = layout(tall, 1);
    add(dst, W, 0, 0, 600, 0, 4, 0);
    FAILS(src, dst, NULL, FERRY_ERR_COVERAGE, W, "no source piece holds [599:600, 0:4]");
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(tall);
    ferry_model_destroy(m);
}

static void models_disagree(void) {
    ferry_model_t *sm = model(FERRY_DTYPE_BF16, 4, false);
    ferry_layout_t *src = good_src(sm);
    /* the destination holds a tensor the source model lacks */
    ferry_model_t *dm = model(FERRY_DTYPE_BF16, 4, true);
    ferry_layout_t *dst = good_dst(dm);
    add(dst, X, 1, 0, 2, 0, 2, 0);
    expect_fail(__LINE__, src, dst, NULL, FERRY_ERR_COVERAGE, FERRY_ERR_NOT_FOUND, X, NULL);
    ferry_layout_destroy(dst);
    ferry_model_destroy(dm);
    /* ... but a destination model tensor no destination piece holds is no error */
    dm = model(FERRY_DTYPE_BF16, 4, true);
    dst = good_dst(dm);
    ferry_plan_destroy(builds(src, dst, NULL));
    ferry_layout_destroy(dst);
    ferry_model_destroy(dm);
    /* same name, other dtype */
    dm = model(FERRY_DTYPE_F32, 4, false);
    dst = good_dst(dm);
    FAILS(src, dst, NULL, FERRY_ERR_MISMATCH, W, NULL);
    ferry_layout_destroy(dst);
    ferry_model_destroy(dm);
    /* same name, other shape (the destination's boxes still fit its own shape) */
    dm = model(FERRY_DTYPE_BF16, 6, false);
    dst = layout(dm, 1);
    add(dst, W, 0, 0, 8, 0, 4, 0);
    FAILS(src, dst, NULL, FERRY_ERR_MISMATCH, W, NULL);
    ferry_layout_destroy(dst);
    ferry_model_destroy(dm);
    ferry_layout_destroy(src);
    ferry_model_destroy(sm);
}

static void bad_arguments(void) {
    ferry_model_t *m = model(FERRY_DTYPE_BF16, 4, false);
    ferry_layout_t *src = good_src(m), *dst = good_dst(m);
    ferry_plan_destroy(builds(src, dst, NULL)); /* the baseline is fine */

    /* two overlapping boxes of W sharing bytes of one buffer of a destination rank */
    ferry_layout_t *bad = layout(m, 2);
    add_pair_one_buffer(bad, W, 1, 0, 5, 4, 4, 2);
    FAILS(src, bad, NULL, FERRY_ERR_INVALID_ARGUMENT, W, "[0:5, 0:4]");
    ferry_layout_destroy(bad);
    /* one box twice at the same bytes (a piece added twice) */
    bad = layout(m, 2);
    add_pair_one_buffer(bad, W, 1, 0, 8, 0, 8, 0);
    FAILS(src, bad, NULL, FERRY_ERR_INVALID_ARGUMENT, W, "twice in the same bytes");
    ferry_layout_destroy(bad);
    /* the same boxes one after the other in one flat buffer: planned, both written */
    bad = layout(m, 2);
    add_pair_one_buffer(bad, W, 1, 0, 5, 4, 4, 5);
    add(bad, W, 0, 0, 8, 0, 4, 0);
    ferry_plan_destroy(builds(src, bad, NULL));
    ferry_layout_destroy(bad);
    /* the same boxes in two buffers of the rank (a tied embedding kept twice): planned */
    bad = layout(m, 2);
    add(bad, W, 1, 0, 5, 0, 4, 0);
    add(bad, W, 1, 4, 4, 0, 4, 0);
    add(bad, W, 0, 0, 8, 0, 4, 0);
    ferry_plan_destroy(builds(src, bad, NULL));
    ferry_layout_destroy(bad);
    /* identical boxes on one rank are replicas, not overlaps: allowed */
    bad = layout(m, 1);
    add(bad, W, 0, 0, 8, 0, 4, 0);
    add(bad, W, 0, 0, 8, 0, 4, 16);
    ferry_plan_destroy(builds(src, bad, NULL));
    ferry_layout_destroy(bad);
    /* overlapping boxes on two different destination ranks are fine too */
    bad = layout(m, 2);
    add(bad, W, 0, 0, 5, 0, 4, 0);
    add(bad, W, 1, 4, 4, 0, 4, 0);
    ferry_plan_destroy(builds(src, bad, NULL));
    ferry_layout_destroy(bad);

    /* NULL layouts and out */
    FAILS(NULL, dst, NULL, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    FAILS(src, NULL, NULL, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    CHECK_EQ_INT(ferry_plan_build(ctx, src, dst, NULL, NULL), FERRY_ERR_INVALID_ARGUMENT);
    checks++;

    /* host arrays announced but missing */
    ferry_plan_params_t p = {.field_mask = FERRY_PLAN_PARAM_SRC_HOSTS};
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    p.field_mask = FERRY_PLAN_PARAM_DST_HOSTS;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    /* unset fields are ignored, whatever they hold */
    p.field_mask = 0;
    p.bucket_bytes = 0;
    p.only_side = (ferry_side_t)77;
    p.only_rank = 99;
    ferry_plan_destroy(builds(src, dst, &p));

    /* only_rank must be a rank of the chosen side: source world 2, destination 3 */
    p.field_mask = FERRY_PLAN_PARAM_ONLY;
    p.only_side = FERRY_SIDE_TRAIN;
    p.only_rank = 2;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    p.only_side = FERRY_SIDE_INFER;
    ferry_plan_destroy(builds(src, dst, &p)); /* rank 2 of the destination exists */
    p.only_rank = 3;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    p.only_rank = UINT32_MAX;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    /* only_side neither TRAIN nor INFER */
    p.only_rank = 0;
    p.only_side = (ferry_side_t)0;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    p.only_side = (ferry_side_t)3;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);
    /* bucket_bytes 0 is not a transfer size */
    p.field_mask = FERRY_PLAN_PARAM_BUCKET_BYTES;
    p.bucket_bytes = 0;
    FAILS(src, dst, &p, FERRY_ERR_INVALID_ARGUMENT, NULL, NULL);

    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(m);
}

/* A copy of layout l with piece `victim` moved by `shift` bytes (its
 * buffers are large enough: `add` leaves 4 spare elements). */
static ferry_layout_t *shifted(const ferry_layout_t *l, size_t victim, uint64_t shift) {
    ferry_layout_t *c = layout(ferry_layout_model(l), ferry_layout_world_size(l));
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        uint32_t idx;
        ferry_layout_buffer(l, b, &bi);
        CHECK_OK(ferry_layout_add_buffer(c, bi.rank, bi.name, bi.dtype, bi.size, &idx), ferry_layout_error(c));
    }
    for (size_t i = 0; i < ferry_layout_piece_count(l); i++) {
        ferry_piece_t p = ferry_layout_pieces(l)[i];
        if (i == victim) p.byte_offset += shift;
        CHECK_OK(ferry_layout_add_piece(c, &p), ferry_layout_error(c));
    }
    return c;
}

/* verify checks a plan against layouts independently of how it was built:
 * against the right layouts it passes, against a layout with one piece
 * moved it fails naming that piece's tensor and box. */
static void verify(void) {
    ferry_model_t *m = model(FERRY_DTYPE_BF16, 4, false);
    /* one source rank, whole tensors: every op box is a whole piece box */
    ferry_layout_t *src = layout(m, 1), *dst = layout(m, 2);
    add(src, W, 0, 0, 8, 0, 4, 0);
    add(src, B, 0, 0, 8, 0, 0, 0);
    add(dst, B, 0, 0, 8, 0, 0, 0);
    add(dst, W, 1, 0, 8, 0, 4, 0);
    ferry_plan_t *plan = builds(src, dst, NULL);
    CHECK_OK(ferry_plan_verify(plan, src, dst), ferry_plan_error(plan));
    checks++;
    for (size_t victim = 0; victim < 2; victim++) {
        const ferry_piece_t *v = &ferry_layout_pieces(dst)[victim];
        const char *name = victim == 0 ? B : W;
        char box[64];
        ferry_box_format(&v->box, box, sizeof box);
        CHECK(strcmp(name, v->tensor == tensor(dst, W) ? W : B) == 0);
        for (int side = 0; side < 2; side++) {
            /* move one element: the op's offset no longer addresses the piece */
            const ferry_layout_t *base = side ? src : dst;
            size_t pi = victim;
            if (side) /* the source piece of the same tensor */
                pi = ferry_layout_pieces(src)[0].tensor == v->tensor ? 0 : 1;
            uint64_t esz = v->tensor == tensor(dst, W) ? 2 : 4;
            ferry_layout_t *moved = shifted(base, pi, esz);
            ferry_status_t st = side ? ferry_plan_verify(plan, moved, dst) : ferry_plan_verify(plan, src, moved);
            const char *d = ferry_plan_error(plan);
            if ((st != FERRY_ERR_MISMATCH && st != FERRY_ERR_COVERAGE) || !strstr(d, name) || !strstr(d, box)) {
                fprintf(stderr, "%s:%d: verify against %s piece %zu moved by %llu bytes gave %s \"%s\"; expected "
                        "MISMATCH or COVERAGE naming %s %s\n", __FILE__, __LINE__, side ? "source" : "destination",
                        pi, (unsigned long long)esz, ferry_status_name(st), d, name, box);
                exit(1);
            }
            checks++;
            ferry_layout_destroy(moved);
        }
    }
    /* a destination piece no op writes (appended on the last rank, so the
     * other pieces keep their indices): the ops no longer tile the layout */
    ferry_layout_t *more = shifted(dst, SIZE_MAX, 0);
    add(more, B, 1, 2, 3, 0, 0, 0);
    ferry_status_t st = ferry_plan_verify(plan, src, more);
    CHECK_FAILS(st, FERRY_ERR_COVERAGE, ferry_plan_error(plan), "[2:5]");
    CHECK(strstr(ferry_plan_error(plan), B));
    checks++;
    ferry_layout_destroy(more);
    /* a source whose model says F16 where the plan moved BF16 (same element
     * size, so offsets and sizes still agree): plan.h has verify check "the
     * same tensor and dtype on both sides" */
    ferry_model_t *m16 = model(FERRY_DTYPE_F16, 4, false);
    ferry_layout_t *src16 = layout(m16, 1);
    add(src16, W, 0, 0, 8, 0, 4, 0);
    add(src16, B, 0, 0, 8, 0, 0, 0);
    st = ferry_plan_verify(plan, src16, dst);
    if ((st != FERRY_ERR_MISMATCH && st != FERRY_ERR_COVERAGE) || !strstr(ferry_plan_error(plan), W)) {
        fprintf(stderr, "%s:%d: verify against a source holding %s as F16 (the plan moved BF16) gave %s \"%s\"; "
                "expected MISMATCH naming the tensor\n", __FILE__, __LINE__, W, ferry_status_name(st),
                st == FERRY_OK ? "" : ferry_plan_error(plan));
        exit(1);
    }
    checks++;
    ferry_layout_destroy(src16);
    ferry_model_destroy(m16);
    /* and the plan still verifies against its own layouts afterwards */
    CHECK_OK(ferry_plan_verify(plan, src, dst), ferry_plan_error(plan));
    checks++;
    ferry_plan_destroy(plan);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(m);
}

int main(void) {
    ctx = test_ctx();
    coverage();
    models_disagree();
    bad_arguments();
    verify();
    ferry_plan_destroy(NULL);
    printf("plan errors: %d checks: gaps name tensor and uncovered box, missing tensors, dtype/shape mismatches, "
           "overlapping destination boxes, bad arguments and parameters refused with *out untouched; verify "
           "catches moved pieces by name\n", checks);
    ferry_ctx_destroy(ctx);
    return 0;
}
