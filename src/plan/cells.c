/* Stage 2: source boxes -> disjoint source cells.
 * Usually the distinct source boxes of a tensor already tile it (replicas
 * merged), and each is a cell. Where boxes of different granularity overlap
 * (one rank holds the whole tensor, others hold row blocks) the tensor is cut
 * on the grid of all box boundaries; a cell is held by every rank whose box
 * contains it, so any of them may serve it and each element is planned once. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static _Thread_local const ferry_piece_t *g_cell_pieces;

static int cmp_holder(const void *x, const void *y) {
    const ferry_piece_t *a = &g_cell_pieces[*(const uint32_t *)x], *b = &g_cell_pieces[*(const uint32_t *)y];
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->buffer != b->buffer) return a->buffer < b->buffer ? -1 : 1;
    if (a->byte_offset != b->byte_offset) return a->byte_offset < b->byte_offset ? -1 : 1;
    return 0;
}

typedef struct {
    plan_box_t *boxes;
    uint32_t *arena;          /* per box: index of its refined box in p->cell_boxes, or PLAN_NONE */
    size_t nboxes, cap_boxes, cap_arena;
    uint32_t *holders, *holder_rank;
    size_t nholders, cap_holders, cap_ranks;
} cell_out_t;

/* arena: the box's index in p->cell_boxes (which may still move), or PLAN_NONE */
static int push_box(ferry_ctx_t *ctx, cell_out_t *o, const plan_box_t *b, uint32_t arena) {
    if (ferry_grow(ctx, (void **)&o->boxes, sizeof *o->boxes, &o->cap_boxes, o->nboxes + 1) ||
        ferry_grow(ctx, (void **)&o->arena, sizeof *o->arena, &o->cap_arena, o->nboxes + 1))
        return -1;
    o->arena[o->nboxes] = arena;
    o->boxes[o->nboxes++] = *b;
    return 0;
}

static int push_holder(ferry_ctx_t *ctx, cell_out_t *o, uint32_t piece, uint32_t rank) {
    if (ferry_grow(ctx, (void **)&o->holders, sizeof *o->holders, &o->cap_holders, o->nholders + 1) ||
        ferry_grow(ctx, (void **)&o->holder_rank, sizeof *o->holder_rank, &o->cap_ranks, o->nholders + 1))
        return -1;
    o->holder_rank[o->nholders] = rank;
    o->holders[o->nholders++] = piece;
    return 0;
}

/* Cuts one tensor's overlapping boxes [first, first+n) into cells. */
static ferry_status_t refine_tensor(ferry_plan_t *p, uint32_t t, size_t first, size_t n,
                                    cell_out_t *o) {
    plan_side_t *s = &p->src;
    const ferry_box_t *b0 = s->boxes[first].box;
    uint32_t nd = b0->ndim;
    int64_t *cuts[FERRY_MAX_DIMS] = {0};
    size_t ncut[FERRY_MAX_DIMS] = {0};
    uint64_t cells = 1;
    ferry_status_t st = FERRY_OK;
    uint32_t *cand = NULL;
    size_t cap_cand = 0;
    for (uint32_t d = 0; d < nd; d++) {
        cuts[d] = ferry_alloc(p->ctx, 2 * n * sizeof(int64_t));
        if (!cuts[d]) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory refining %s",
                            plan_tensor_name(p, t));
            goto out;
        }
        for (size_t k = 0; k < n; k++) {
            const ferry_box_t *b = s->boxes[first + k].box;
            cuts[d][2 * k] = b->offset[d];
            cuts[d][2 * k + 1] = b->offset[d] + b->extent[d];
        }
        qsort(cuts[d], 2 * n, sizeof(int64_t), cmp_i64);
        size_t u = 0;
        for (size_t k = 0; k < 2 * n; k++)
            if (u == 0 || cuts[d][u - 1] != cuts[d][k]) cuts[d][u++] = cuts[d][k];
        ncut[d] = u;
        cells *= u - 1;
        if (cells > PLAN_MAX_CELLS_PER_TENSOR) {
            st = ferry_fail(&p->err, FERRY_ERR_LIMIT,
                            "tensor %s: its overlapping source boxes cut it into more than %u "
                            "cells", plan_tensor_name(p, t), PLAN_MAX_CELLS_PER_TENSOR);
            goto out;
        }
    }
    uint32_t at[FERRY_MAX_DIMS] = {0};
    for (uint64_t c = 0; c < cells; c++) {
        ferry_box_t cell;
        memset(&cell, 0, sizeof cell);
        cell.ndim = nd;
        for (uint32_t d = 0; d < nd; d++) {
            cell.offset[d] = cuts[d][at[d]];
            cell.extent[d] = cuts[d][at[d] + 1] - cuts[d][at[d]];
        }
        /* holders: every rank whose box contains the cell, one piece each, by rank */
        size_t nc = 0;
        for (size_t k = 0; k < n; k++) {
            const plan_box_t *b = &s->boxes[first + k];
            if (!ferry_box_contains(b->box, &cell)) continue;
            if (ferry_grow(p->ctx, (void **)&cand, sizeof *cand, &cap_cand, nc + b->holder_count)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory refining cells");
                goto out;
            }
            for (uint32_t h = 0; h < b->holder_count; h++) cand[nc++] = s->holders[b->first_holder + h];
        }
        if (nc > 0) {
            /* by (rank, buffer, offset): the content, not the insertion order,
             * decides which of a rank's pieces serves */
            g_cell_pieces = s->pieces;
            qsort(cand, nc, sizeof *cand, cmp_holder);
            if (ferry_grow(p->ctx, (void **)&p->cell_boxes, sizeof *p->cell_boxes, &p->cap_cell_boxes,
                           p->ncell_boxes + 1)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory refining cells");
                goto out;
            }
            uint32_t arena = (uint32_t)p->ncell_boxes++;
            p->cell_boxes[arena] = cell;
            plan_box_t nb;
            memset(&nb, 0, sizeof nb); /* nb.box is set once the arena stops moving */
            nb.tensor = t;
            plan_box_key(&cell, &nb.k0, &nb.k1);
            nb.first_holder = (uint32_t)o->nholders;
            uint32_t last = PLAN_NONE;
            for (size_t k = 0; k < nc; k++) {
                if (s->pieces[cand[k]].rank == last) continue;
                last = s->pieces[cand[k]].rank;
                if (push_holder(p->ctx, o, cand[k], last)) {
                    st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory refining cells");
                    goto out;
                }
            }
            nb.holder_count = (uint32_t)(o->nholders - nb.first_holder);
            if (push_box(p->ctx, o, &nb, arena)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory refining cells");
                goto out;
            }
        }
        for (uint32_t d = nd; d-- > 0;) { /* odometer, last dimension fastest */
            if (++at[d] + 1 < ncut[d]) break;
            at[d] = 0;
        }
    }
out:
    for (uint32_t d = 0; d < nd; d++) ferry_free(p->ctx, cuts[d]);
    ferry_free(p->ctx, cand);
    return st;
}

ferry_status_t plan_cells(ferry_plan_t *p) {
    plan_side_t *s = &p->src;
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    const ferry_box_t **boxes = NULL;
    uint32_t *scratch = NULL;
    size_t cap = 0, cap2 = 0;
    uint8_t *overlaps = ferry_calloc(p->ctx, (size_t)nt + 1, 1);
    bool any = false;
    ferry_status_t st = FERRY_OK;
    cell_out_t o;
    memset(&o, 0, sizeof o);
    if (!overlaps) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory finding cells");
    for (uint32_t t = 0; t < nt; t++) {
        size_t first = s->tensor_first[t], n = s->tensor_first[t + 1] - first;
        if (n < 2) continue;
        if (ferry_grow(p->ctx, (void **)&boxes, sizeof *boxes, &cap, n) ||
            ferry_grow(p->ctx, (void **)&scratch, sizeof *scratch, &cap2, n)) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory finding cells");
            goto out;
        }
        for (size_t k = 0; k < n; k++) boxes[k] = s->boxes[first + k].box;
        size_t i, j;
        if (plan_boxes_overlap(boxes, n, scratch, &i, &j)) overlaps[t] = 1, any = true;
    }
    if (!any) goto out;
    /* rebuild the box and holder arrays, refining the overlapping tensors */
    uint32_t *tensor_first = ferry_calloc(p->ctx, (size_t)nt + 2, sizeof *tensor_first);
    if (!tensor_first) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory finding cells");
        goto out;
    }
    for (uint32_t t = 0; t < nt && st == FERRY_OK; t++) {
        size_t first = s->tensor_first[t], n = s->tensor_first[t + 1] - first;
        tensor_first[t] = (uint32_t)o.nboxes;
        if (overlaps[t]) {
            st = refine_tensor(p, t, first, n, &o);
            continue;
        }
        for (size_t k = 0; k < n && st == FERRY_OK; k++) {
            plan_box_t b = s->boxes[first + k];
            uint32_t h0 = b.first_holder;
            b.first_holder = (uint32_t)o.nholders;
            for (uint32_t h = 0; h < b.holder_count && st == FERRY_OK; h++)
                if (push_holder(p->ctx, &o, s->holders[h0 + h], s->holder_rank[h0 + h]))
                    st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory finding cells");
            if (st == FERRY_OK && push_box(p->ctx, &o, &b, PLAN_NONE))
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory finding cells");
        }
    }
    tensor_first[nt] = (uint32_t)o.nboxes;
    if (st != FERRY_OK) {
        ferry_free(p->ctx, tensor_first);
        goto out;
    }
    for (size_t k = 0; k < o.nboxes; k++)
        if (o.arena[k] != PLAN_NONE) o.boxes[k].box = &p->cell_boxes[o.arena[k]];
    ferry_free(p->ctx, s->boxes);
    ferry_free(p->ctx, s->holders);
    ferry_free(p->ctx, s->holder_rank);
    ferry_free(p->ctx, s->tensor_first);
    s->boxes = o.boxes;
    s->nboxes = o.nboxes;
    s->holders = o.holders;
    s->holder_rank = o.holder_rank;
    s->nholders = o.nholders;
    s->tensor_first = tensor_first;
    ferry_free(p->ctx, o.arena);
    memset(&o, 0, sizeof o);
out:
    ferry_free(p->ctx, o.boxes);
    ferry_free(p->ctx, o.arena);
    ferry_free(p->ctx, o.holders);
    ferry_free(p->ctx, o.holder_rank);
    ferry_free(p->ctx, boxes);
    ferry_free(p->ctx, scratch);
    ferry_free(p->ctx, overlaps);
    return st;
}
