/* The planner against a brute-force reference: random small layout pairs,
 * each plan executed in memory byte by byte twice (op by op with strides,
 * and through the pack areas and buckets a transport would read), then
 * every destination byte compared with the logical tensor byte it must hold
 * and counted (exactly one write per covered byte, none elsewhere). Also
 * the op fields against the pieces they name, the pair/bucket structure,
 * and every statistic against sums over the ops and the layouts.
 *
 * Layouts: (a) built from random tiny HF configs and random trainer/engine
 * configurations; (b) hand-made: random tilings with replicas, partially
 * overlapping source boxes (rank 0 whole + row blocks elsewhere), transposed
 * and padded strides, flat U8 buffers at odd offsets, and source/destination
 * models that list the tensors in different orders. */
#include "plan_exec.h"

static ferry_ctx_t *ctx;
static unsigned long plans, ops, buckets, packed, gathered, refused;

/* Plans src -> dst with NULL params and with two random parameter sets. */
static void plan_and_check(const ferry_layout_t *src, const ferry_layout_t *dst) {
    char base[sizeof pe_case], pd[256];
    pe_dump_src = src;
    pe_dump_dst = dst;
    /* plan.h: two pieces of a destination rank with overlapping boxes must
     * not share bytes of a buffer (random hand-made layouts sometimes do):
     * the planner must refuse them by name. In different bytes they may
     * (tied embeddings under DP attention) and must plan. */
    const char *clash = pe_dst_overlap(dst);
    if (clash) {
        ferry_plan_t *plan = NULL;
        ferry_status_t st = ferry_plan_build(ctx, src, dst, NULL, &plan);
        if (st != FERRY_ERR_INVALID_ARGUMENT || !strstr(ferry_ctx_error(ctx), clash))
            PE_FAIL("overlapping destination boxes of %s: got %s (%s)", clash, ferry_status_name(st),
                    ferry_ctx_error(ctx));
        CHECK(plan == NULL);
        refused++;
        return;
    }
    memcpy(base, pe_case, sizeof base);
    for (int v = 0; v < 3; v++) {
        pe_params_t pp;
        pe_random_params(&pp, ferry_layout_world_size(src), ferry_layout_world_size(dst));
        const ferry_plan_params_t *params = v == 0 ? NULL : &pp.p;
        pe_params_desc(params, pd, sizeof pd);
        snprintf(pe_case, sizeof pe_case, "%.3000s; %s", base, pd);
        ferry_plan_t *plan = NULL;
        ferry_status_t st = ferry_plan_build(ctx, src, dst, params, &plan);
        if (st != FERRY_OK) PE_FAIL("ferry_plan_build: %s (%s)", ferry_status_name(st), ferry_ctx_error(ctx));
        pe_check_plan(plan, src, dst, params);
        ferry_plan_stats_t s;
        ferry_plan_stats(plan, &s);
        plans++;
        ops += s.ops;
        buckets += s.buckets;
        packed += s.packed_ops;
        gathered += s.gather_ops;
        ferry_plan_destroy(plan);
    }
    memcpy(pe_case, base, sizeof base);
    pe_dump_src = pe_dump_dst = NULL;
}

static void built_case(void) {
    ferry_model_t *sm, *dm;
    ferry_layout_t *src, *dst;
    pe_built_pair(ctx, &sm, &dm, &src, &dst);
    plan_and_check(src, dst);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(sm);
    ferry_model_destroy(dm);
}

static void hand_case(int iter) {
    ferry_model_t *sm, *dm;
    bool separate = pe_rnd(2);
    pe_hand_models(ctx, separate, &sm, &dm);
    uint32_t ns = 1 + (uint32_t)pe_rnd(6), nd = 1 + (uint32_t)pe_rnd(6);
    pe_hand_t hs, hd;
    pe_hand_gen(sm, ns, true, false, &hs);
    pe_hand_gen(dm, nd, false, false, &hd);
    ferry_layout_t *src = pe_hand_layout(ctx, sm, &hs, NULL), *dst = pe_hand_layout(ctx, dm, &hd, NULL);
    snprintf(pe_case, sizeof pe_case, "hand-made iteration %d: %u tensors, %u source ranks (%zu pieces) -> %u "
             "destination ranks (%zu pieces), %s models", iter, ferry_model_tensor_count(dm), ns, hs.npieces, nd,
             hd.npieces, separate ? "separate" : "one");
    plan_and_check(src, dst);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    pe_hand_free(&hs);
    pe_hand_free(&hd);
    if (sm != dm) ferry_model_destroy(sm);
    ferry_model_destroy(dm);
}

/* One hand-made pair per side spec: "rank:tensor:rows" entries, each a row
 * block [r0:r1) of tensor 0 (rows, 1-d F32 [6]) or the scalar tensor 1. */
static ferry_layout_t *edge_layout(const ferry_model_t *m, uint32_t world, const int (*spec)[4], size_t n) {
    ferry_layout_t *l = NULL;
    CHECK_OK(ferry_layout_create(ctx, m, world, &l), ferry_ctx_error(ctx));
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        ferry_piece_t p;
        memset(&p, 0, sizeof p);
        p.rank = (uint32_t)spec[i][0];
        p.tensor = (uint32_t)spec[i][1];
        if (p.tensor == 0) {
            p.box.ndim = 1;
            p.box.offset[0] = spec[i][2];
            p.box.extent[0] = spec[i][3] - spec[i][2];
            p.strides[0] = 1;
        }
        CHECK_OK(ferry_layout_add_buffer(l, p.rank, "b", FERRY_DTYPE_F32, 4 * (uint64_t)ferry_box_numel(&p.box), &b),
                 ferry_layout_error(l));
        p.buffer = b;
        CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l));
    }
    return l;
}

/* Inputs the random cases reach only by chance: a destination rank (rank
 * 0, which is planned first) holding nothing, and a 0-d tensor (one
 * element: ferry_box_numel of a 0-d box is 1; models, layouts and the
 * validator accept it). */
static void edge_cases(void) {
    ferry_model_t *m = NULL;
    CHECK_OK(ferry_model_create(ctx, "edge", &m), ferry_ctx_error(ctx));
    CHECK_OK(ferry_model_add_tensor(m, "rows", FERRY_DTYPE_F32, 1, (int64_t[]){6}, NULL), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "logit_scale", FERRY_DTYPE_F32, 0, NULL, NULL), ferry_model_error(m));
    static const int src_spec[][4] = {{0, 0, 0, 6}, {1, 0, 0, 3}, {1, 0, 3, 6}, {0, 1, 0, 0}, {1, 1, 0, 0}};
    static const int empty0[][4] = {{2, 0, 0, 6}, {1, 0, 2, 5}};
    static const int scalar[][4] = {{0, 1, 0, 0}, {1, 1, 0, 0}, {1, 0, 0, 6}, {2, 1, 0, 0}};
    ferry_layout_t *src = edge_layout(m, 2, src_spec, 5);
    ferry_layout_t *dst = edge_layout(m, 3, empty0, 2);
    snprintf(pe_case, sizeof pe_case, "edge case: destination rank 0 holds nothing");
    plan_and_check(src, dst);
    ferry_layout_destroy(dst);
    dst = edge_layout(m, 3, scalar, 4);
    snprintf(pe_case, sizeof pe_case, "edge case: a 0-d tensor");
    plan_and_check(src, dst);
    ferry_layout_destroy(dst);
    ferry_layout_destroy(src);
    ferry_model_destroy(m);
}

int main(void) {
    ctx = test_ctx();
    edge_cases();
    int built = 0, hand = 0;
    for (int iter = 0; iter < 900; iter++) {
        if (iter % 3 == 0) {
            built_case();
            built++;
        } else {
            hand_case(iter);
            hand++;
        }
    }
    printf("plan reference: %d built + %d hand-made layout pairs (%lu refused: overlapping destination boxes), "
           "%lu plans (%lu ops, %lu packed, %lu gathered past a pack_limit, %lu buckets) "
           "executed op by op and through pack areas and buckets, every destination byte checked\n",
           built, hand, refused, plans, ops, packed, gathered, buckets);
    ferry_ctx_destroy(ctx);
    return 0;
}
