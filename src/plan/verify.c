/* An independent check of a finished plan against its layouts: it uses only
 * the pieces and box arithmetic, none of the planner's indexes. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

static ferry_status_t check_side(ferry_plan_t *p, const ferry_layout_t *l, const ferry_copy_op_t *op,
                                 size_t op_index, bool is_src, const char *tname, ferry_dtype_t dtype) {
    size_t piece = is_src ? op->src_piece : op->dst_piece;
    uint32_t rank = is_src ? op->src_rank : op->dst_rank, buffer = is_src ? op->src_buffer : op->dst_buffer;
    uint64_t offset = is_src ? op->src_offset : op->dst_offset;
    const int64_t *strides = is_src ? op->src_strides : op->dst_strides;
    const char *side = is_src ? "source" : "destination";
    char b[200];
    ferry_box_format(&op->box, b, sizeof b);
    if (piece >= ferry_layout_piece_count(l))
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu (%s %s): %s piece %zu does not exist",
                          op_index, tname, b, side, piece);
    const ferry_piece_t *q = &ferry_layout_pieces(l)[piece];
    ferry_tensor_info_t ti;
    ferry_model_tensor(ferry_layout_model(l), q->tensor, &ti);
    if (strcmp(ti.name, tname) != 0)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu (%s %s): %s piece %zu holds %s",
                          op_index, tname, b, side, piece, ti.name);
    if (ti.dtype != dtype)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu (%s %s): %s piece %zu is %s, the op moves %s",
                          op_index, tname, b, side, piece, ferry_dtype_name(ti.dtype), ferry_dtype_name(dtype));
    if (q->rank != rank || q->buffer != buffer)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                          "op %zu (%s %s): %s piece %zu is in rank %u buffer %u, the op says rank %u "
                          "buffer %u", op_index, tname, b, side, piece, q->rank, q->buffer, rank, buffer);
    if (!ferry_box_contains(&q->box, &op->box))
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu (%s %s): outside %s piece %zu",
                          op_index, tname, b, side, piece);
    size_t esize = ferry_dtype_size(ti.dtype);
    if (offset != plan_piece_offset(q, &op->box, esize) ||
        memcmp(strides, q->strides, sizeof q->strides) != 0 ||
        op->bytes != (uint64_t)ferry_box_numel(&op->box) * esize)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                          "op %zu (%s %s): offset, strides or size disagree with %s piece %zu",
                          op_index, tname, b, side, piece);
    return FERRY_OK;
}

/* A quant op: its box block-aligned and inside its source piece (of the
 * weight's name, in BF16 or F32), at the piece's address; its fp8 and scale
 * slots inside the rank's pack area, the scales 4-aligned after the fp8
 * bytes; no two slots of a rank overlapping (they are sorted). */
static ferry_status_t check_quant(ferry_plan_t *p, const ferry_layout_t *src, const ferry_model_t *dm, size_t i) {
    const ferry_quant_op_t *q = &p->qops[i];
    ferry_tensor_info_t ti, si;
    ferry_tensor_quant_t tq;
    char b[200];
    ferry_box_format(&q->box, b, sizeof b);
    if (!ferry_model_tensor(dm, q->tensor, &ti) || !ferry_model_tensor_quant(dm, q->tensor, &tq) ||
        tq.kind != FERRY_QUANT_FP8_BLOCK || tq.partner != q->scale_tensor)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "quant op %zu: tensor %u is no fp8 weight of scale %u", i,
                          q->tensor, q->scale_tensor);
    if (q->src_piece >= ferry_layout_piece_count(src))
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "quant op %zu (%s %s): no source piece %zu", i, ti.name, b,
                          q->src_piece);
    const ferry_piece_t *sq = &ferry_layout_pieces(src)[q->src_piece];
    ferry_model_tensor(ferry_layout_model(src), sq->tensor, &si);
    ferry_box_t blocks = plan_block_box(&q->box);
    bool aligned = plan_block_aligned(&q->box, ti.shape);
    if (strcmp(si.name, ti.name) != 0 || si.dtype != q->src_dtype ||
        (si.dtype != FERRY_DTYPE_BF16 && si.dtype != FERRY_DTYPE_F32) || sq->rank != q->src_rank ||
        sq->buffer != q->src_buffer || !ferry_box_contains(&sq->box, &q->box) || !aligned ||
        q->src_offset != plan_piece_offset(sq, &q->box, ferry_dtype_size(si.dtype)) ||
        memcmp(q->src_strides, sq->strides, sizeof sq->strides) != 0)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                          "quant op %zu (%s %s): its source piece %zu (%s, rank %u), address or block alignment "
                          "disagree", i, ti.name, b, q->src_piece, si.name, sq->rank);
    uint64_t fb = (uint64_t)ferry_box_numel(&q->box), sb = 4 * (uint64_t)ferry_box_numel(&blocks);
    uint64_t end = q->scale_offset + sb, area = q->src_rank < p->src.world ? p->pack_size[q->src_rank] : 0;
    bool overlap = false; /* with the previous op of the rank (sorted by offset) */
    if (i > 0 && p->qops[i - 1].src_rank == q->src_rank) {
        ferry_box_t rb = plan_block_box(&p->qops[i - 1].box);
        overlap = p->qops[i - 1].scale_offset + 4 * (uint64_t)ferry_box_numel(&rb) > q->fp8_offset;
    }
    if (q->scale_offset % 4 || q->scale_offset < q->fp8_offset + fb || end > area || overlap)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                          "quant op %zu (%s %s): its slots (fp8 at %llu, scales at %llu) are not inside rank %u's pack "
                          "area of %llu bytes, in order and apart from the others", i, ti.name, b,
                          (unsigned long long)q->fp8_offset, (unsigned long long)q->scale_offset, q->src_rank,
                          (unsigned long long)area);
    return FERRY_OK;
}

/* A QUANT op reads what a quant op of its source rank wrote: that op's fp8
 * slot with its box, or its scales with the block box. The quant ops are
 * sorted by (rank, fp8 offset) and their slots apart (check_quant), so the
 * one to look at is the last of the rank at or before the op's offset. Only
 * where the plan holds quant ops (a global or a writer's plan). */
static bool quant_source(const ferry_plan_t *p, const ferry_copy_op_t *op, bool scale) {
    size_t lo = 0, hi = p->nqops;
    while (lo < hi) { /* the first quant op after (rank, offset) */
        size_t mid = (lo + hi) / 2;
        const ferry_quant_op_t *q = &p->qops[mid];
        if (q->src_rank < op->src_rank || (q->src_rank == op->src_rank && q->fp8_offset <= op->pack_offset)) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return false;
    const ferry_quant_op_t *q = &p->qops[lo - 1];
    ferry_box_t qb = scale ? plan_block_box(&q->box) : q->box;
    return q->src_rank == op->src_rank && (scale ? q->scale_tensor : q->tensor) == op->tensor &&
           ferry_box_equal(&qb, &op->box) && op->pack_offset == (scale ? q->scale_offset : q->fp8_offset);
}

ferry_status_t ferry_plan_verify(ferry_plan_t *p, const ferry_layout_t *src, const ferry_layout_t *dst) {
    if (!src || !dst) return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT, "verify: NULL layout");
    const ferry_model_t *dm = ferry_layout_model(dst);
    size_t nd = ferry_layout_piece_count(dst);
    for (size_t i = 0; i < p->nqops; i++) {
        ferry_status_t st = check_quant(p, src, dm, i);
        if (st) return st;
    }
    for (size_t i = 0; i < p->nops; i++) {
        const ferry_copy_op_t *op = &p->ops[i];
        ferry_tensor_info_t ti;
        if (!ferry_model_tensor(dm, op->tensor, &ti))
            return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu: no tensor %u", i, op->tensor);
        if (op->flags & FERRY_OP_QUANT) { /* read from a quant slot: the destination side as any op's */
            ferry_tensor_quant_t tq;
            bool scale = ferry_model_tensor_quant(dm, op->tensor, &tq) && tq.kind == FERRY_QUANT_FP8_SCALE;
            ferry_status_t st = check_side(p, dst, op, i, false, ti.name, ti.dtype);
            if (st) return st;
            if (!(op->flags & FERRY_OP_PACK) || (op->flags & FERRY_OP_GATHER) ||
                (p->nqops && !quant_source(p, op, scale)))
                return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                                  "op %zu (%s): a quantized op that reads no quant op's slot", i, ti.name);
            continue;
        }
        ferry_status_t st = check_side(p, src, op, i, true, ti.name, ti.dtype);
        if (st == FERRY_OK) st = check_side(p, dst, op, i, false, ti.name, ti.dtype);
        if (st) return st;
        /* a strided source is packed or read run by run (FERRY_OP_GATHER), never one read */
        bool strided = plan_run_elems(&op->box, op->src_strides, NULL) != ferry_box_numel(&op->box);
        bool gather = op->flags & FERRY_OP_GATHER, packed = op->flags & FERRY_OP_PACK;
        if (gather != (strided && !packed) || (gather && packed))
            return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu (%s): %s source %s", i, ti.name,
                              strided ? "a strided" : "a contiguous",
                              gather ? (packed ? "both packed and gathered" : "marked as gathered")
                                     : "neither packed nor gathered");
        uint64_t esz = op->bytes / (uint64_t)ferry_box_numel(&op->box);
        if (gather && (uint64_t)plan_run_elems(&op->box, op->src_strides, NULL) * esz < p->gather_min_run)
            return ferry_fail(&p->err, FERRY_ERR_MISMATCH, "op %zu (%s): gathered in runs shorter than %llu bytes", i,
                              ti.name, (unsigned long long)p->gather_min_run);
    }
    if (p->only && p->only_side == FERRY_SIDE_TRAIN) return FERRY_OK; /* a writer sees part of each piece */
    /* the ops of each destination piece must tile it: sizes add up, no two overlap */
    size_t *first = ferry_calloc(p->ctx, nd + 1, sizeof *first);
    size_t *order = ferry_alloc(p->ctx, (p->nops ? p->nops : 1) * sizeof *order);
    const ferry_box_t **boxes = NULL;
    uint32_t *scratch = NULL;
    size_t cap = 0, cap2 = 0;
    ferry_status_t st = FERRY_OK;
    if (!first || !order) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory verifying");
        goto out;
    }
    for (size_t i = 0; i < p->nops; i++) first[p->ops[i].dst_piece + 1]++;
    for (size_t i = 0; i < nd; i++) first[i + 1] += first[i];
    for (size_t i = 0; i < p->nops; i++) order[first[p->ops[i].dst_piece]++] = i;
    for (size_t i = nd; i > 0; i--) first[i] = first[i - 1];
    first[0] = 0;
    const ferry_piece_t *pieces = ferry_layout_pieces(dst);
    for (size_t i = 0; i < nd && st == FERRY_OK; i++) {
        const ferry_piece_t *q = &pieces[i];
        if (p->only && q->rank != p->only_rank) continue;
        size_t n = first[i + 1] - first[i];
        int64_t sum = 0;
        if (ferry_grow(p->ctx, (void **)&boxes, sizeof *boxes, &cap, n + 1) ||
            ferry_grow(p->ctx, (void **)&scratch, sizeof *scratch, &cap2, n + 1)) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory verifying");
            break;
        }
        for (size_t k = 0; k < n; k++) {
            boxes[k] = &p->ops[order[first[i] + k]].box;
            sum += ferry_box_numel(boxes[k]);
        }
        size_t x, y;
        bool twice = plan_boxes_overlap(boxes, n, scratch, &x, &y);
        if (!twice && sum == ferry_box_numel(&q->box)) continue;
        ferry_tensor_info_t ti;
        ferry_model_tensor(dm, q->tensor, &ti);
        char b[200], bx[200], by[200];
        ferry_box_format(&q->box, b, sizeof b);
        if (twice) {
            ferry_box_format(boxes[x], bx, sizeof bx);
            ferry_box_format(boxes[y], by, sizeof by);
            st = ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                            "destination piece %zu (%s %s on rank %u) is written twice: ops %zu %s and "
                            "%zu %s overlap", i, ti.name, b, q->rank, order[first[i] + x], bx,
                            order[first[i] + y], by);
        } else {
            st = ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                            "destination piece %zu (%s %s on rank %u): ops write %lld of its %lld "
                            "elements", i, ti.name, b, q->rank, (long long)sum,
                            (long long)ferry_box_numel(&q->box));
        }
    }
out:
    ferry_free(p->ctx, first);
    ferry_free(p->ctx, order);
    ferry_free(p->ctx, boxes);
    ferry_free(p->ctx, scratch);
    return st;
}
