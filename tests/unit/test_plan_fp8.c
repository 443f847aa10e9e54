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

#include "fp8_job.h"
#include "sync/sync_internal.h"

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
    /* the whole tensors and their quantization; the trainer's buffers from them */
    fp8_whole_t wh;
    memset(&wh, 0, sizeof wh);
    fp8_whole_make(&wh, 1);
    uint8_t **sb = alloc_buffers(src), **db = alloc_buffers(dst);
    fp8_fill_trainer(src, sb, UINT32_MAX, &wh);
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
    CHECK(fp8_engine_ok(dst, db, UINT32_MAX, &wh, &checked));
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
    fp8_whole_free(&wh);
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
    /* a transposed source: planned (and verified), but a writer cannot
       quantize from it row by row yet: the sync refuses the epoch */
    {
        ferry_model_t *tm = make_model(ctx, false, NULL);
        ferry_layout_t *src = trainer(ctx, tm, 2), *dst = engine(ctx, em, scale, 0);
        ferry_plan_t *plan;
        CHECK_OK(ferry_plan_build(ctx, src, dst, NULL, &plan), ferry_ctx_error(ctx));
        CHECK_OK(ferry_plan_verify(plan, src, dst), ferry_plan_error(plan));
        ferry_errbuf_t err = {{0}};
        CHECK(sync_check_quant(plan, false, &err) == FERRY_OK); /* readers read packed bytes */
        CHECK(sync_check_quant(plan, true, &err) == FERRY_ERR_UNSUPPORTED && strstr(err.text, "transposed"));
        printf("ok: refused by the sync: %s\n", err.text);
        ferry_plan_destroy(plan);
        ferry_layout_destroy(src);
        ferry_layout_destroy(dst);
        ferry_model_destroy(tm);
    }
    ferry_model_destroy(em);
    ferry_ctx_destroy(ctx);
    printf("test_plan_fp8: passed\n");
    return 0;
}
