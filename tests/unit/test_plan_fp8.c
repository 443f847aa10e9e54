/* Plans into FP8 engines (include/ferry/plan.h, ferry_quant_op_t): a bf16
 * trainer (2 data-parallel replicas x 2 tensor-parallel ranks: rows split,
 * experts split, one replica's weight in padded rows) to an fp8 engine (2
 * replicas x 2 ranks: columns split, one expert tensor split by rows, the
 * scales mirroring every weight piece). The plan is executed in memory:
 * every source rank runs its quant ops (ferry_fp8_block_quantize_ld from its
 * own pieces into its pack area) and packs its other fragments, every op is
 * copied; then every engine fp8 byte and scale must equal the quantization
 * of the whole tensor (ferry_fp8_block_quantize, itself checked against
 * torch by test_fp8), sliced. Each block is quantized exactly once, by one
 * of the replicas holding it, both replicas taking a share; local plans
 * agree with the global one; verify passes. Then the refusals: a trainer
 * split that cuts a block, a weight piece without its scales, scales
 * without a weight piece, an engine shard that cuts a block. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ferry/ferry.h"
#include "ferry/fp8.h"

enum { T_W1, T_W2, T_E, T_NORM, NT };
static const char *const names[NT] = {"w1", "w2", "e", "norm"};
static const uint32_t ndims[NT] = {2, 2, 3, 1};
static const int64_t shapes[NT][3] = {{640, 384}, {300, 257}, {4, 256, 384}, {384}};

static ferry_model_t *make_model(ferry_ctx_t *ctx, bool fp8, uint32_t *scale) {
    ferry_model_t *m;
    CHECK_OK(ferry_model_create(ctx, fp8 ? "engine" : "trainer", &m), ferry_ctx_error(ctx));
    for (uint32_t t = 0; t < NT; t++) {
        uint32_t idx;
        CHECK_OK(ferry_model_add_tensor(m, names[t], FERRY_DTYPE_BF16, ndims[t], shapes[t], &idx),
                 ferry_model_error(m));
        CHECK(idx == t);
    }
    for (uint32_t t = 0; fp8 && t < T_NORM; t++)
        CHECK_OK(ferry_model_add_fp8(m, t, t == T_W2 ? FERRY_FP8_UE8M0 : 0, &scale[t]), ferry_model_error(m));
    return m;
}

static int64_t numel_of(uint32_t t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < ndims[t]; d++) n *= shapes[t][d];
    return n;
}

/* Adds a piece of tensor t with box (off, ext) on rank, in a buffer of its
 * own: row-major, or with `pad` unused elements after each row. */
static void add_piece(ferry_layout_t *l, uint32_t rank, uint32_t t, ferry_dtype_t dt, uint32_t nd, const int64_t *off,
                      const int64_t *ext, int64_t pad) {
    ferry_piece_t pc;
    memset(&pc, 0, sizeof pc);
    pc.tensor = t;
    pc.box.ndim = nd;
    for (uint32_t d = 0; d < nd; d++) pc.box.offset[d] = off[d], pc.box.extent[d] = ext[d];
    int64_t at = 1;
    for (int d = (int)nd - 1; d >= 0; d--) {
        pc.strides[d] = at;
        at *= ext[d] + (d == (int)nd - 1 ? pad : 0);
    }
    int64_t span = 1 + (ext[0] - 1) * pc.strides[0];
    for (uint32_t d = 1; d < nd; d++) span += (ext[d] - 1) * pc.strides[d];
    char name[64];
    snprintf(name, sizeof name, "r%u.t%u.%lld", rank, t, (long long)off[0]);
    CHECK_OK(ferry_layout_add_buffer(l, rank, name, dt, (uint64_t)span * ferry_dtype_size(dt), &pc.buffer),
             ferry_layout_error(l));
    pc.rank = rank;
    CHECK_OK(ferry_layout_add_piece(l, &pc), ferry_layout_error(l));
}

/* The trainer: ranks 2d + k hold row (or expert) half k of every weight;
 * replica 1's w1 in padded rows. cut: w1 split at row 320 (inside a block). */
static ferry_layout_t *trainer(ferry_ctx_t *ctx, const ferry_model_t *m, bool cut) {
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 4, &l), ferry_ctx_error(ctx));
    for (uint32_t r = 0; r < 4; r++) {
        uint32_t k = r % 2, dp = r / 2;
        int64_t w1r = cut ? 320 : 384, w2r = 128;
        int64_t o1[2] = {k ? w1r : 0, 0}, e1[2] = {k ? 640 - w1r : w1r, 384};
        add_piece(l, r, T_W1, FERRY_DTYPE_BF16, 2, o1, e1, dp ? 16 : 0);
        int64_t o2[2] = {k ? w2r : 0, 0}, e2[2] = {k ? 300 - w2r : w2r, 257};
        add_piece(l, r, T_W2, FERRY_DTYPE_BF16, 2, o2, e2, 0);
        int64_t o3[3] = {2 * k, 0, 0}, e3[3] = {2, 256, 384};
        add_piece(l, r, T_E, FERRY_DTYPE_BF16, 3, o3, e3, 0);
        int64_t o4[1] = {0}, e4[1] = {384};
        add_piece(l, r, T_NORM, FERRY_DTYPE_BF16, 1, o4, e4, 0);
    }
    return l;
}

/* A weight piece and the scale piece that mirrors it (unless no_scale). */
static void add_fp8_piece(ferry_layout_t *l, uint32_t rank, uint32_t t, uint32_t scale, uint32_t nd, const int64_t *off,
                          const int64_t *ext, bool no_scale) {
    add_piece(l, rank, t, FERRY_DTYPE_F8_E4M3, nd, off, ext, 0);
    if (no_scale) return;
    int64_t so[3], se[3];
    for (uint32_t d = 0; d < nd; d++) {
        so[d] = off[d], se[d] = ext[d];
        if (d + 2 >= nd) so[d] = off[d] / 128, se[d] = (off[d] + ext[d] + 127) / 128 - off[d] / 128;
    }
    add_piece(l, rank, scale, FERRY_DTYPE_F32, nd, so, se, 0);
}

/* The engine: ranks 2r + k hold column half k of w1 and w2, row half k of
 * e. bad 1: rank 0's w2 has no scale piece; 2: an extra scale piece; 3:
 * rank 0's w1 cut at column 200 (inside a block). */
static ferry_layout_t *engine(ferry_ctx_t *ctx, const ferry_model_t *m, const uint32_t *scale, int bad) {
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 4, &l), ferry_ctx_error(ctx));
    for (uint32_t r = 0; r < 4; r++) {
        uint32_t k = r % 2;
        int64_t c1 = bad == 3 ? 200 : 256;
        int64_t o1[2] = {0, k ? c1 : 0}, e1[2] = {640, k ? 384 - c1 : c1};
        add_fp8_piece(l, r, T_W1, scale[T_W1], 2, o1, e1, false);
        int64_t o2[2] = {0, k ? 128 : 0}, e2[2] = {300, k ? 129 : 128};
        add_fp8_piece(l, r, T_W2, scale[T_W2], 2, o2, e2, bad == 1 && r == 0);
        int64_t o3[3] = {0, 128 * k, 0}, e3[3] = {4, 128, 384};
        add_fp8_piece(l, r, T_E, scale[T_E], 3, o3, e3, false);
        int64_t o4[1] = {0}, e4[1] = {384};
        add_piece(l, r, T_NORM, FERRY_DTYPE_BF16, 1, o4, e4, 0);
    }
    if (bad == 2) {
        int64_t so[2] = {0, 0}, se[2] = {1, 1};
        add_piece(l, 1, scale[T_W2], FERRY_DTYPE_F32, 2, so, se, 0);
    }
    return l;
}

/* Byte offset, in a piece's buffer, of tensor element idx (inside its box). */
static uint64_t piece_at(const ferry_piece_t *q, const int64_t *idx, size_t esz) {
    uint64_t at = 0;
    for (uint32_t d = 0; d < q->box.ndim; d++) at += (uint64_t)((idx[d] - q->box.offset[d]) * q->strides[d]);
    return q->byte_offset + at * esz;
}

/* Calls body for every element of box (idx: its tensor coordinates, i: its
 * row-major rank in the box). */
#define FOR_BOX(box, idx, i, ...)                                                                              \
    do {                                                                                                       \
        int64_t idx[FERRY_MAX_DIMS] = {0}, n_ = ferry_box_numel(&(box));                                       \
        for (int64_t i = 0; i < n_; i++) {                                                                     \
            int64_t r_ = i;                                                                                    \
            for (int d_ = (int)(box).ndim - 1; d_ >= 0; d_--) {                                                \
                idx[d_] = (box).offset[d_] + r_ % (box).extent[d_];                                            \
                r_ /= (box).extent[d_];                                                                        \
            }                                                                                                  \
            __VA_ARGS__;                                                                                       \
        }                                                                                                      \
    } while (0)

static uint8_t **alloc_buffers(const ferry_layout_t *l) {
    uint32_t nb = ferry_layout_buffer_count(l);
    uint8_t **b = calloc(nb, sizeof *b);
    CHECK(b);
    for (uint32_t i = 0; i < nb; i++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, i, &bi);
        CHECK((b[i] = calloc(1, bi.size + 1)));
    }
    return b;
}

static void free_buffers(const ferry_layout_t *l, uint8_t **b) {
    for (uint32_t i = 0; i < ferry_layout_buffer_count(l); i++) free(b[i]);
    free(b);
}

static void run_plan(ferry_ctx_t *ctx, const ferry_model_t *em, const uint32_t *scale) {
    ferry_model_t *tm = make_model(ctx, false, NULL);
    ferry_layout_t *src = trainer(ctx, tm, false), *dst = engine(ctx, em, scale, 0);
    ferry_plan_t *plan;
    CHECK_OK(ferry_plan_build(ctx, src, dst, NULL, &plan), ferry_ctx_error(ctx));
    CHECK_OK(ferry_plan_verify(plan, src, dst), ferry_plan_error(plan));
    /* the whole tensors, bf16 weight-like values, and their quantization */
    uint16_t *full[NT];
    uint8_t *q[NT];
    float *s[NT];
    uint64_t seed = 7;
    for (uint32_t t = 0; t < NT; t++) {
        int64_t n = numel_of(t);
        CHECK((full[t] = malloc(2 * n)) && (q[t] = malloc(n)) && (s[t] = malloc(4 * n)));
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            float f = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23) * 0.05f;
            if (i % 997 == 0) f *= 40; /* an outlier now and then: blocks' scales differ */
            full[t][i] = ferry_bf16_from_f32(f);
        }
        if (t == T_NORM) continue;
        int64_t lead = ndims[t] == 3 ? shapes[t][0] : 1, rows = shapes[t][ndims[t] - 2], cols = shapes[t][ndims[t] - 1];
        uint64_t per_s = ferry_fp8_scale_count((uint64_t)rows, (uint64_t)cols);
        for (int64_t e = 0; e < lead; e++)
            CHECK_OK(ferry_fp8_block_quantize(FERRY_DTYPE_BF16, full[t] + e * rows * cols, rows, cols,
                                              t == T_W2 ? FERRY_FP8_UE8M0 : 0, q[t] + e * rows * cols, s[t] + e * per_s),
                     names[t]);
    }
    /* the trainer's buffers from the whole tensors */
    uint8_t **sb = alloc_buffers(src), **db = alloc_buffers(dst);
    const ferry_piece_t *sp = ferry_layout_pieces(src), *dp = ferry_layout_pieces(dst);
    for (size_t i = 0; i < ferry_layout_piece_count(src); i++) {
        const ferry_piece_t *pc = &sp[i];
        const int64_t *sh = shapes[pc->tensor];
        uint32_t nd = ndims[pc->tensor];
        FOR_BOX(pc->box, idx, el, {
            int64_t lin = 0;
            for (uint32_t d = 0; d < nd; d++) lin = lin * sh[d] + idx[d];
            memcpy(sb[pc->buffer] + piece_at(pc, idx, 2), &full[pc->tensor][lin], 2);
        });
    }
    /* each source rank: its quant ops, then its other packed fragments */
    uint8_t *pack[4];
    for (uint32_t r = 0; r < 4; r++) CHECK((pack[r] = calloc(1, ferry_plan_pack_bytes(plan, r) + 1)));
    const ferry_quant_op_t *qo = ferry_plan_quant_ops(plan);
    size_t nq = ferry_plan_quant_op_count(plan);
    uint64_t blocks[NT] = {0}, by_replica[2] = {0};
    for (size_t i = 0; i < nq; i++) {
        const ferry_quant_op_t *o = &qo[i];
        uint32_t nd = o->box.ndim;
        CHECK(o->src_dtype == FERRY_DTYPE_BF16 && o->src_strides[nd - 1] == 1 && o->scale_tensor == scale[o->tensor]);
        int64_t lead = nd == 3 ? o->box.extent[0] : 1, rows = o->box.extent[nd - 2], cols = o->box.extent[nd - 1];
        uint64_t per_s = ferry_fp8_scale_count((uint64_t)rows, (uint64_t)cols);
        for (int64_t e = 0; e < lead; e++)
            CHECK_OK(ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16,
                                                 sb[o->src_buffer] + o->src_offset + 2 * (uint64_t)(e * (nd == 3 ? o->src_strides[0] : 0)),
                                                 (uint64_t)o->src_strides[nd - 2], rows, cols, o->flags,
                                                 pack[o->src_rank] + o->fp8_offset + (uint64_t)(e * rows * cols), cols,
                                                 (float *)(pack[o->src_rank] + o->scale_offset) + e * per_s,
                                                 (cols + 127) / 128),
                     "quant op");
        blocks[o->tensor] += lead * per_s;
        by_replica[o->src_rank / 2] += lead * per_s;
    }
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    size_t nops = ferry_plan_op_count(plan), nquant_ops = 0;
    for (size_t i = 0; i < nops; i++) /* pack the plain packed fragments (quant slots are written) */
        if ((ops[i].flags & FERRY_OP_PACK) && !(ops[i].flags & FERRY_OP_QUANT)) {
            const ferry_copy_op_t *o = &ops[i];
            size_t esz = o->bytes / (uint64_t)ferry_box_numel(&o->box);
            FOR_BOX(o->box, idx, el, {
                uint64_t at = 0;
                for (uint32_t d = 0; d < o->box.ndim; d++)
                    at += (uint64_t)((idx[d] - o->box.offset[d]) * o->src_strides[d]);
                memcpy(pack[o->src_rank] + o->pack_offset + (uint64_t)el * esz,
                       sb[o->src_buffer] + o->src_offset + at * esz, esz);
            });
        }
    for (size_t i = 0; i < nops; i++) { /* every op lands */
        const ferry_copy_op_t *o = &ops[i];
        size_t esz = o->bytes / (uint64_t)ferry_box_numel(&o->box);
        nquant_ops += (o->flags & FERRY_OP_QUANT) != 0;
        FOR_BOX(o->box, idx, el, {
            uint64_t sat = 0, dat = 0;
            for (uint32_t d = 0; d < o->box.ndim; d++) {
                sat += (uint64_t)((idx[d] - o->box.offset[d]) * o->src_strides[d]);
                dat += (uint64_t)((idx[d] - o->box.offset[d]) * o->dst_strides[d]);
            }
            const uint8_t *from = (o->flags & FERRY_OP_PACK) ? pack[o->src_rank] + o->pack_offset + (uint64_t)el * esz
                                                             : sb[o->src_buffer] + o->src_offset + sat * esz;
            memcpy(db[o->dst_buffer] + o->dst_offset + dat * esz, from, esz);
        });
    }
    /* every engine byte: the whole tensor's quantization, sliced */
    size_t checked = 0;
    for (size_t i = 0; i < ferry_layout_piece_count(dst); i++) {
        const ferry_piece_t *pc = &dp[i];
        ferry_tensor_info_t ti;
        ferry_tensor_quant_t tq;
        ferry_model_tensor(em, pc->tensor, &ti);
        ferry_model_tensor_quant(em, pc->tensor, &tq);
        uint32_t t = tq.kind == FERRY_QUANT_FP8_SCALE ? tq.partner : pc->tensor, nd = ti.ndim;
        FOR_BOX(pc->box, idx, el, {
            int64_t lin = 0;
            for (uint32_t d = 0; d < nd; d++) lin = lin * ti.shape[d] + idx[d];
            const uint8_t *got = db[pc->buffer] + piece_at(pc, idx, ferry_dtype_size(ti.dtype));
            const void *want = tq.kind == FERRY_QUANT_FP8_SCALE ? (const void *)&s[t][lin]
                               : tq.kind == FERRY_QUANT_FP8_BLOCK ? (const void *)&q[t][lin]
                                                                  : (const void *)&full[t][lin];
            if (memcmp(got, want, ferry_dtype_size(ti.dtype)) != 0) {
                fprintf(stderr, "engine rank %u, %s element %lld differs\n", pc->rank, ti.name, (long long)lin);
                exit(1);
            }
        });
        checked++;
    }
    /* once per block: the blocks of w1, w2 and e, each by one rank, both replicas working */
    CHECK(blocks[T_W1] == 5 * 3 && blocks[T_W2] == 3 * 3 && blocks[T_E] == 4 * 2 * 3);
    CHECK(by_replica[0] > 0 && by_replica[1] > 0);
    ferry_plan_stats_t st;
    ferry_plan_stats(plan, &st);
    CHECK(st.quant_ops == nq && nq > 0 && st.quant_bytes > 0 && nquant_ops > 0 && nquant_ops % 2 == 0);
    printf("ok: %zu quant ops, %zu ops (%zu from quant slots), %zu engine pieces equal to the whole tensors' "
           "quantization; blocks quantized once, %llu / %llu by the two replicas\n",
           nq, nops, nquant_ops, checked, (unsigned long long)by_replica[0], (unsigned long long)by_replica[1]);
    /* local plans: a writer's quant ops are its share of the global ones; the same digest */
    for (uint32_t r = 0; r < 4; r++) {
        for (int side = 0; side < 2; side++) {
            ferry_plan_params_t pp = {.field_mask = FERRY_PLAN_PARAM_ONLY,
                                      .only_side = side ? FERRY_SIDE_INFER : FERRY_SIDE_TRAIN, .only_rank = r};
            ferry_plan_t *lp;
            CHECK_OK(ferry_plan_build(ctx, src, dst, &pp, &lp), ferry_ctx_error(ctx));
            CHECK_OK(ferry_plan_verify(lp, src, dst), ferry_plan_error(lp));
            CHECK(ferry_plan_digest(lp) == ferry_plan_digest(plan));
            size_t mine = 0;
            for (size_t i = 0; i < nq; i++) mine += qo[i].src_rank == r;
            if (side) {
                CHECK(ferry_plan_quant_op_count(lp) == 0);
            } else {
                CHECK(ferry_plan_quant_op_count(lp) == mine);
                for (size_t i = 0, j = 0; i < nq; i++)
                    if (qo[i].src_rank == r) {
                        const ferry_quant_op_t *a = &qo[i], *b = &ferry_plan_quant_ops(lp)[j++];
                        bool same = a->tensor == b->tensor && a->scale_tensor == b->scale_tensor &&
                                    ferry_box_equal(&a->box, &b->box) && a->src_buffer == b->src_buffer &&
                                    a->src_piece == b->src_piece && a->src_offset == b->src_offset &&
                                    !memcmp(a->src_strides, b->src_strides, sizeof a->src_strides) &&
                                    a->src_dtype == b->src_dtype && a->flags == b->flags &&
                                    a->fp8_offset == b->fp8_offset && a->scale_offset == b->scale_offset;
                        if (!same) { /* (fields: a box's padding is not part of it) */
                            fprintf(stderr, "rank %u: quant op %zu: tensor %u/%u piece %zu/%zu off %llu/%llu fp8 %llu/%llu\n", r, i, a->tensor, b->tensor, a->src_piece, b->src_piece, (unsigned long long)a->src_offset, (unsigned long long)b->src_offset, (unsigned long long)a->fp8_offset, (unsigned long long)b->fp8_offset);
                            exit(1);
                        }
                    }
            }
            ferry_plan_destroy(lp);
        }
    }
    for (uint32_t r = 0; r < 4; r++) free(pack[r]);
    for (uint32_t t = 0; t < NT; t++) free(full[t]), free(q[t]), free(s[t]);
    free_buffers(src, sb);
    free_buffers(dst, db);
    ferry_plan_destroy(plan);
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(tm);
}

static void refused(ferry_ctx_t *ctx, const ferry_model_t *em, const uint32_t *scale, bool cut, int bad,
                    ferry_status_t want, const char *text) {
    ferry_model_t *tm = make_model(ctx, false, NULL);
    ferry_layout_t *src = trainer(ctx, tm, cut), *dst = engine(ctx, em, scale, bad);
    ferry_plan_t *plan = NULL;
    ferry_status_t st = ferry_plan_build(ctx, src, dst, NULL, &plan);
    if (st != want || !strstr(ferry_ctx_error(ctx), text)) {
        fprintf(stderr, "want %s \"%s\", got %s: %s\n", ferry_status_name(want), text, ferry_status_name(st),
                ferry_ctx_error(ctx));
        exit(1);
    }
    printf("ok: refused: %s\n", ferry_ctx_error(ctx));
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(tm);
}

int main(void) {
    ferry_ctx_t *ctx;
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    uint32_t scale[NT] = {0};
    ferry_model_t *em = make_model(ctx, true, scale);
    run_plan(ctx, em, scale);
    refused(ctx, em, scale, true, 0, FERRY_ERR_UNSUPPORTED, "cuts 128 x 128 blocks");
    refused(ctx, em, scale, false, 1, FERRY_ERR_COVERAGE, "w2_scale_inv with box");
    refused(ctx, em, scale, false, 2, FERRY_ERR_COVERAGE, "mirror no piece of w2");
    refused(ctx, em, scale, false, 3, FERRY_ERR_UNSUPPORTED, "cuts 128 x 128 blocks");
    ferry_model_destroy(em);
    ferry_ctx_destroy(ctx);
    printf("test_plan_fp8: passed\n");
    return 0;
}
