/* FP8 destinations (ferry/fp8.h, ferry_model_tensor_quant): a weight the
 * destination holds as float8_e4m3fn with 128 x 128 block scales, from a
 * BF16 or F32 source. Its fragments are quantized by the one source rank
 * that serves them (assign.c), into that rank's pack area (pack.c), and
 * read as two ops: the fp8 box into the weight piece, the box's scales into
 * the scale piece that mirrors it (emit.c). This file pairs the mirrors and
 * checks that no block is cut. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

ferry_box_t plan_block_box(const ferry_box_t *b) {
    ferry_box_t r = *b;
    for (uint32_t d = b->ndim >= 2 ? b->ndim - 2 : 0; d < b->ndim; d++) {
        int64_t lo = b->offset[d] / FERRY_FP8_BLOCK, hi = (b->offset[d] + b->extent[d] + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
        r.offset[d] = lo;
        r.extent[d] = hi - lo;
    }
    return r;
}

uint64_t plan_quant_fp8_bytes(const ferry_box_t *b) { return ((uint64_t)ferry_box_numel(b) + 3) & ~(uint64_t)3; }

uint64_t plan_quant_scale_bytes(const ferry_box_t *b) {
    ferry_box_t k = plan_block_box(b);
    return 4 * (uint64_t)ferry_box_numel(&k);
}

bool plan_block_aligned(const ferry_box_t *b, const int64_t *shape) {
    for (uint32_t d = b->ndim >= 2 ? b->ndim - 2 : 0; d < b->ndim; d++) {
        int64_t end = b->offset[d] + b->extent[d];
        if (b->offset[d] % FERRY_FP8_BLOCK || (end % FERRY_FP8_BLOCK && end != shape[d])) return false;
    }
    return true;
}

typedef struct {
    uint32_t rank, tensor;
    uint32_t piece;
    uint8_t used;
} scale_key_t;

static _Thread_local const ferry_piece_t *g_pieces;

static int cmp_scale(const void *x, const void *y) {
    const scale_key_t *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
    return plan_box_cmp(&g_pieces[a->piece].box, &g_pieces[b->piece].box);
}

ferry_status_t plan_quant_pairs(ferry_plan_t *p) {
    if (!p->nquant) return FERRY_OK;
    const ferry_piece_t *pc = p->dst.pieces;
    size_t n = p->dst.npieces, ns = 0;
    p->scale_piece = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *p->scale_piece);
    scale_key_t *keys = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *keys);
    ferry_status_t st = FERRY_OK;
    if (!p->scale_piece || !keys) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory pairing fp8 scales");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        p->scale_piece[i] = PLAN_NONE;
        if (p->dst_quant[pc[i].tensor] == FERRY_QUANT_FP8_SCALE)
            keys[ns++] = (scale_key_t){pc[i].rank, pc[i].tensor, (uint32_t)i, 0};
    }
    g_pieces = pc;
    qsort(keys, ns, sizeof *keys, cmp_scale);
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        uint32_t t = pc[i].tensor;
        if (!plan_is_quant(p, t)) continue;
        ferry_tensor_info_t ti;
        ferry_model_tensor(p->dst_model, t, &ti);
        char b[200], k[200];
        ferry_box_format(&pc[i].box, b, sizeof b);
        if (!plan_block_aligned(&pc[i].box, ti.shape)) {
            st = ferry_fail(&p->err, FERRY_ERR_UNSUPPORTED,
                            "tensor %s: destination rank %u holds %s, which cuts 128 x 128 blocks (an FP8 engine's "
                            "shards keep blocks whole)", ti.name, pc[i].rank, b);
            break;
        }
        ferry_box_t want = plan_block_box(&pc[i].box);
        ferry_box_format(&want, k, sizeof k);
        size_t lo = 0, hi = ns; /* the first key not before (rank, scale tensor, want) */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            const scale_key_t *x = &keys[mid];
            int c = x->rank != pc[i].rank ? (x->rank < pc[i].rank ? -1 : 1)
                    : x->tensor != p->dst_partner[t] ? (x->tensor < p->dst_partner[t] ? -1 : 1)
                                                      : plan_box_cmp(&pc[x->piece].box, &want);
            if (c < 0) lo = mid + 1;
            else hi = mid;
        }
        if (lo == ns || keys[lo].rank != pc[i].rank || keys[lo].tensor != p->dst_partner[t] ||
            !ferry_box_equal(&pc[keys[lo].piece].box, &want) || keys[lo].used) {
            st = ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                            "tensor %s: destination rank %u holds %s but no piece of %s with box %s (its scales)%s",
                            ti.name, pc[i].rank, b, plan_tensor_name(p, p->dst_partner[t]), k,
                            lo < ns && keys[lo].used ? ": that one mirrors another piece" : "");
            break;
        }
        keys[lo].used = 1;
        p->scale_piece[i] = keys[lo].piece;
        /* where the scales land, for the digest (the index skipped these pieces) */
        const ferry_piece_t *sp = &pc[keys[lo].piece];
        uint64_t k0, k1;
        plan_box_key(&sp->box, &k0, &k1);
        uint64_t h = plan_mix64(((uint64_t)sp->tensor << 32 | sp->rank) ^ k0) ^ k1;
        h = plan_mix64(h ^ ((uint64_t)sp->buffer << 40) ^ sp->byte_offset);
        for (uint32_t d = 0; d < sp->box.ndim; d++) h = plan_mix64(h ^ (uint64_t)sp->strides[d]);
        p->dst_address_sum += plan_mix64(h);
    }
    for (size_t j = 0; j < ns && st == FERRY_OK; j++)
        if (!keys[j].used) {
            char b[200];
            ferry_box_format(&pc[keys[j].piece].box, b, sizeof b);
            st = ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                            "tensor %s: destination rank %u holds scales %s that mirror no piece of %s",
                            plan_tensor_name(p, keys[j].tensor), keys[j].rank, b,
                            plan_tensor_name(p, p->dst_partner[keys[j].tensor]));
        }
out:
    ferry_free(p->ctx, keys);
    return st;
}

ferry_status_t plan_quant_check(ferry_plan_t *p) {
    if (!p->nquant) return FERRY_OK;
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    for (uint32_t t = 0; t < nt; t++) {
        if (!plan_is_quant(p, t)) continue;
        ferry_tensor_info_t ti;
        ferry_model_tensor(p->dst_model, t, &ti);
        for (uint32_t c = p->src.tensor_first[t]; c < p->src.tensor_first[t + 1]; c++) {
            const plan_box_t *cell = &p->src.boxes[c];
            if (plan_block_aligned(cell->box, ti.shape)) continue;
            char b[200];
            ferry_box_format(cell->box, b, sizeof b);
            return ferry_fail(&p->err, FERRY_ERR_UNSUPPORTED,
                              "tensor %s: source rank %u holds %s, which cuts 128 x 128 blocks: quantizing for an "
                              "FP8 destination needs every block whole on one source rank (a trainer split at "
                              "multiples of 128)", ti.name, p->src.holder_rank[cell->first_holder], b);
        }
    }
    return FERRY_OK;
}
