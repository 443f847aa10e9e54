/* Stage 6: ops, pairs and buckets, for the ranks asked for. A reader takes
 * its own pieces, their fragments and the holders its routes assign; a
 * writer walks only the routes on which it serves someone. Within a pair the
 * packed ops come first in pack-area order, then the direct ones in source
 * buffer order, so that neighbours on the source side meet in one bucket. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

/* An FP8 weight's fragment for reader piece dpiece, served from holder h's
 * quant slot: the fp8 box into the weight piece, then its block scales into
 * the scale piece that mirrors it. The source fields name the weight's
 * source piece (the fp8 op: where its box lies there). */
static int push_quant_ops(ferry_plan_t *p, const plan_frag_t *fr, uint32_t f, uint32_t h, uint32_t dpiece) {
    if (ferry_grow(p->ctx, (void **)&p->ops, sizeof *p->ops, &p->cap_ops, p->nops + 2)) return -1;
    const plan_box_t *cell = &p->src.boxes[fr->cell];
    const plan_box_t *db = &p->dst.boxes[fr->dbox];
    uint32_t spiece = p->src.holders[cell->first_holder + h], scale = p->scale_piece[dpiece];
    const ferry_piece_t *sq = &p->src.pieces[spiece];
    ferry_tensor_info_t si;
    ferry_model_tensor(ferry_layout_model(p->src.layout), sq->tensor, &si);
    uint64_t slot = p->pack_slot[p->frag_pack_first[f] + h];
    ferry_box_t box;
    plan_box_intersect(cell->box, db->box, &box);
    for (int k = 0; k < 2; k++) {
        const ferry_piece_t *dq = &p->dst.pieces[k ? scale : dpiece];
        ferry_copy_op_t *op = &p->ops[p->nops++];
        memset(op, 0, sizeof *op);
        op->tensor = k ? p->dst_partner[db->tensor] : db->tensor;
        op->box = k ? plan_block_box(&box) : box;
        size_t esize = k ? 4 : 1;
        op->flags = FERRY_OP_PACK | FERRY_OP_QUANT;
        op->src_rank = sq->rank;
        op->src_buffer = sq->buffer;
        op->src_piece = spiece;
        if (!k) {
            op->src_offset = plan_piece_offset(sq, &box, ferry_dtype_size(si.dtype));
            memcpy(op->src_strides, sq->strides, sizeof op->src_strides);
        }
        op->dst_rank = dq->rank;
        op->dst_buffer = dq->buffer;
        op->dst_piece = k ? scale : dpiece;
        op->dst_offset = plan_piece_offset(dq, &op->box, esize);
        memcpy(op->dst_strides, dq->strides, sizeof op->dst_strides);
        int64_t numel = ferry_box_numel(&op->box);
        op->bytes = (uint64_t)numel * esize;
        op->run_bytes = (uint64_t)plan_run_elems(&op->box, op->dst_strides, NULL) * esize; /* packed row-major */
        op->runs = op->bytes / op->run_bytes;
        if (op->run_bytes != op->bytes) op->flags |= FERRY_OP_SCATTER;
        op->pack_offset = k ? slot + plan_quant_fp8_bytes(&box) : slot;
    }
    return 0;
}

static int push_op(ferry_plan_t *p, const plan_frag_t *fr, uint32_t f, uint32_t h, uint32_t dpiece) {
    if (plan_is_quant(p, p->dst.boxes[fr->dbox].tensor)) return push_quant_ops(p, fr, f, h, dpiece);
    if (ferry_grow(p->ctx, (void **)&p->ops, sizeof *p->ops, &p->cap_ops, p->nops + 1)) return -1;
    const plan_box_t *cell = &p->src.boxes[fr->cell];
    const plan_box_t *db = &p->dst.boxes[fr->dbox];
    uint32_t spiece = p->src.holders[cell->first_holder + h];
    const ferry_piece_t *sq = &p->src.pieces[spiece], *dq = &p->dst.pieces[dpiece];
    size_t esize = plan_tensor_esize(p, db->tensor);
    ferry_copy_op_t *op = &p->ops[p->nops++];
    memset(op, 0, sizeof *op);
    op->tensor = db->tensor;
    plan_box_intersect(cell->box, db->box, &op->box);
    op->src_rank = sq->rank;
    op->src_buffer = sq->buffer;
    op->src_piece = spiece;
    op->src_offset = plan_piece_offset(sq, &op->box, esize);
    memcpy(op->src_strides, sq->strides, sizeof op->src_strides);
    op->dst_rank = dq->rank;
    op->dst_buffer = dq->buffer;
    op->dst_piece = dpiece;
    op->dst_offset = plan_piece_offset(dq, &op->box, esize);
    memcpy(op->dst_strides, dq->strides, sizeof op->dst_strides);
    int64_t numel = ferry_box_numel(&op->box);
    op->bytes = (uint64_t)numel * esize;
    op->run_bytes = (uint64_t)plan_run_elems(&op->box, op->src_strides, op->dst_strides) * esize;
    op->runs = op->bytes / op->run_bytes;
    if (plan_run_elems(&op->box, op->dst_strides, NULL) != numel) op->flags |= FERRY_OP_SCATTER;
    uint64_t slot = p->pack_slot[p->frag_pack_first[f] + h];
    if (slot != UINT64_MAX) {
        op->flags |= FERRY_OP_PACK;
        op->pack_offset = slot;
    } else if (plan_run_elems(&op->box, op->src_strides, NULL) != numel) { /* past the pack limit */
        op->flags |= FERRY_OP_GATHER;
    }
    return 0;
}

static bool source_adjacent(const ferry_copy_op_t *prev, const ferry_copy_op_t *op) {
    if ((prev->flags | op->flags) & FERRY_OP_GATHER) return false; /* a gather travels alone */
    bool pp = prev->flags & FERRY_OP_PACK, po = op->flags & FERRY_OP_PACK;
    if (pp != po) return false;
    if (pp) return op->pack_offset == prev->pack_offset + prev->bytes;
    return op->src_buffer == prev->src_buffer && op->src_offset == prev->src_offset + prev->bytes;
}

static bool dest_adjacent(const ferry_copy_op_t *prev, const ferry_copy_op_t *op) {
    return !(op->flags & FERRY_OP_SCATTER) && op->dst_buffer == prev->dst_buffer &&
           op->dst_offset == prev->dst_offset + prev->bytes;
}

/* Cuts the ops [start, nops) into pairs (runs of equal src/dst rank) and
 * each pair into buckets. */
static ferry_status_t make_pairs(ferry_plan_t *p, size_t start) {
    for (size_t i = start; i < p->nops;) {
        if (ferry_grow(p->ctx, (void **)&p->pairs, sizeof *p->pairs, &p->cap_pairs, p->npairs + 1))
            return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory making pairs");
        ferry_plan_pair_t *pair = &p->pairs[p->npairs++];
        memset(pair, 0, sizeof *pair);
        pair->src_rank = p->ops[i].src_rank;
        pair->dst_rank = p->ops[i].dst_rank;
        pair->first_op = i;
        pair->first_bucket = p->nbuckets;
        bool bucket_large = false; /* the last bucket holds a large op that lands in place */
        for (; i < p->nops && p->ops[i].src_rank == pair->src_rank &&
               p->ops[i].dst_rank == pair->dst_rank;
             i++) {
            const ferry_copy_op_t *op = &p->ops[i];
            pair->bytes += op->bytes;
            ferry_plan_bucket_t *b = p->nbuckets > pair->first_bucket ? &p->buckets[p->nbuckets - 1] : NULL;
            /* An op joins the bucket only if no large op that could land in
             * place ends up staged: that would copy every byte of it twice
             * (into the staging area, then out). So a large op joins a
             * direct bucket only adjacent to it, a staged one only if it
             * scatters anyway. Small ops (packed for their size) share one
             * read, staged if need be (one transfer each would cost more
             * than the second copy), unless that stages a large op. */
            bool joins = false, small = (op->flags & FERRY_OP_PACK) && op->bytes < p->pack_below;
            if (b && source_adjacent(&p->ops[i - 1], op) && b->bytes + op->bytes <= p->bucket_bytes) {
                bool direct = b->flags & FERRY_BUCKET_DIRECT, adjacent = dest_adjacent(&p->ops[i - 1], op);
                if (small) joins = !direct || adjacent || !bucket_large;
                else joins = direct ? adjacent : (op->flags & FERRY_OP_SCATTER) != 0;
                if (joins && !adjacent) b->flags &= ~(uint32_t)FERRY_BUCKET_DIRECT;
            }
            if (joins) {
                bucket_large |= !small && !(op->flags & FERRY_OP_SCATTER);
                b->op_count++;
                b->bytes += op->bytes;
                continue;
            }
            if (ferry_grow(p->ctx, (void **)&p->buckets, sizeof *p->buckets, &p->cap_buckets,
                           p->nbuckets + 1))
                return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory making buckets");
            b = &p->buckets[p->nbuckets++];
            memset(b, 0, sizeof *b);
            bucket_large = !small && !(op->flags & FERRY_OP_SCATTER);
            b->first_op = i;
            b->op_count = 1;
            b->bytes = op->bytes;
            if (op->flags & FERRY_OP_PACK) {
                b->flags |= FERRY_BUCKET_PACKED;
                b->src_offset = op->pack_offset;
            } else {
                b->src_buffer = op->src_buffer;
                b->src_offset = op->src_offset;
            }
            if (!(op->flags & FERRY_OP_SCATTER)) b->flags |= FERRY_BUCKET_DIRECT;
            if (op->flags & FERRY_OP_GATHER) b->flags |= FERRY_BUCKET_GATHER;
            b->dst_buffer = op->dst_buffer;
            b->dst_offset = op->dst_offset;
        }
        pair->op_count = i - pair->first_op;
        pair->bucket_count = p->nbuckets - pair->first_bucket;
    }
    return FERRY_OK;
}

/* Sort key of an op: ops are 352 bytes, so they are ordered through small
 * keys and moved once. Inside a pair: packed ops by slot, then direct ops by
 * source bytes, then by destination bytes. */
typedef struct {
    uint32_t major;          /* source rank (a reader's ops) or destination rank (a writer's) */
    uint32_t direct;         /* 0 packed, 1 direct */
    uint64_t a, b, c, d;
    size_t index;
} op_key_t;

static int cmp_key(const void *x, const void *y) {
    const op_key_t *p = x, *q = y;
    if (p->major != q->major) return p->major < q->major ? -1 : 1;
    if (p->direct != q->direct) return p->direct < q->direct ? -1 : 1;
    if (p->a != q->a) return p->a < q->a ? -1 : 1;
    if (p->b != q->b) return p->b < q->b ? -1 : 1;
    if (p->c != q->c) return p->c < q->c ? -1 : 1;
    if (p->d != q->d) return p->d < q->d ? -1 : 1;
    return p->index < q->index ? -1 : p->index > q->index;
}

/* Orders the ops [start, nops): by source rank for a reader (then its
 * source groups rotated so reader r starts on source r mod n, and the readers
 * of an engine fan out over the trainer instead of queueing on its first
 * rank), by destination rank for a writer. */
static ferry_status_t order_ops(ferry_plan_t *p, size_t start, bool reader, uint32_t rank) {
    size_t n = p->nops - start;
    if (n < 2) return FERRY_OK;
    /* scratch kept across readers: fresh pages per reader cost more than the sort */
    if (ferry_grow(p->ctx, &p->sort_keys, sizeof(op_key_t), &p->cap_sort_keys, n) ||
        ferry_grow(p->ctx, (void **)&p->sort_ops, sizeof *p->sort_ops, &p->cap_sort_ops, n))
        return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory ordering ops");
    op_key_t *keys = p->sort_keys;
    ferry_copy_op_t *tmp = p->sort_ops;
    for (size_t i = 0; i < n; i++) {
        const ferry_copy_op_t *op = &p->ops[start + i];
        op_key_t *k = &keys[i];
        bool packed = op->flags & FERRY_OP_PACK;
        k->major = reader ? op->src_rank : op->dst_rank;
        k->direct = !packed;
        k->a = packed ? op->pack_offset : op->src_buffer;
        k->b = packed ? 0 : op->src_offset;
        k->c = op->dst_buffer;
        k->d = op->dst_offset;
        k->index = start + i;
    }
    qsort(keys, n, sizeof *keys, cmp_key);
    size_t cut = 0;
    if (reader) {
        size_t ngroups = 0;
        for (size_t i = 0; i < n; i++) ngroups += i == 0 || keys[i].major != keys[i - 1].major;
        size_t want = rank % ngroups, g = 0;
        for (size_t i = 0; i < n; i++) {
            if (i > 0 && keys[i].major != keys[i - 1].major && ++g == want) {
                cut = i;
                break;
            }
        }
    }
    for (size_t i = 0; i < n; i++) tmp[i] = p->ops[keys[(cut + i) % n].index];
    memcpy(p->ops + start, tmp, n * sizeof *tmp);
    return FERRY_OK;
}

/* slot (global plans): each destination piece's position among its box's
 * holders, so that a box held by every rank costs linear, not quadratic, time. */
static ferry_status_t emit_reader(ferry_plan_t *p, uint32_t r, const uint32_t *slot) {
    size_t first, count, start = p->nops;
    ferry_layout_rank_pieces(p->dst.layout, r, &first, &count);
    for (size_t i = first; i < first + count; i++) {
        uint32_t b = p->dst.piece_box[i];
        if (b == PLAN_NONE) continue;
        const plan_box_t *db = &p->dst.boxes[b];
        uint32_t j = 0;
        if (slot) j = slot[i];
        else
            while (j < db->holder_count && p->dst.holders[db->first_holder + j] != i) j++;
        for (uint32_t u = 0; u < db->frag_count; u++) {
            uint32_t f = db->first_frag + u;
            const plan_frag_t *fr = &p->frags[f];
            const plan_route_t *rt = &p->routes[fr->route];
            uint32_t h = p->assign[rt->first_assign + (size_t)fr->chunk * rt->readers + j];
            if (push_op(p, fr, f, h, (uint32_t)i))
                return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory emitting ops");
        }
    }
    ferry_status_t st = order_ops(p, start, true, r);
    return st ? st : make_pairs(p, start);
}

static ferry_status_t emit_writer(ferry_plan_t *p, uint32_t s) {
    for (size_t r = 0; r < p->nroutes; r++) {
        const plan_route_t *rt = &p->routes[r];
        uint32_t m = rt->readers;
        const uint32_t *hold = p->sets.items + p->sets.first[rt->src_set];
        const uint32_t *as = p->assign + rt->first_assign;
        bool serves = false;
        for (size_t u = 0; u < (size_t)rt->chunks * m && !serves; u++) serves = hold[as[u]] == s;
        for (uint32_t i = 0; serves && i < rt->frag_count; i++) {
            uint32_t f = p->route_order[rt->first_frag + i];
            const plan_frag_t *fr = &p->frags[f];
            const plan_box_t *db = &p->dst.boxes[fr->dbox];
            for (uint32_t j = 0; j < m; j++) {
                uint32_t h = as[(size_t)fr->chunk * m + j];
                if (hold[h] != s) continue;
                if (push_op(p, fr, f, h, p->dst.holders[db->first_holder + j]))
                    return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory emitting ops");
            }
        }
    }
    ferry_status_t st = order_ops(p, 0, false, s);
    return st ? st : make_pairs(p, 0);
}

static int cmp_qop(const void *x, const void *y) {
    const ferry_quant_op_t *a = x, *b = y;
    if (a->src_rank != b->src_rank) return a->src_rank < b->src_rank ? -1 : 1;
    return a->fp8_offset < b->fp8_offset ? -1 : a->fp8_offset > b->fp8_offset;
}

/* The quant ops of source rank `only` (or every rank's, when only is
 * PLAN_NONE): one per FP8 fragment and holder with a slot. */
static ferry_status_t emit_quant(ferry_plan_t *p, uint32_t only) {
    if (!p->nquant) return FERRY_OK;
    const ferry_model_t *sm = ferry_layout_model(p->src.layout);
    for (size_t f = 0; f < p->nfrags; f++) {
        const plan_frag_t *fr = &p->frags[f];
        const plan_box_t *db = &p->dst.boxes[fr->dbox], *cell = &p->src.boxes[fr->cell];
        if (!plan_is_quant(p, db->tensor)) continue;
        for (uint32_t h = 0; h < cell->holder_count; h++) {
            uint64_t slot = p->pack_slot[p->frag_pack_first[f] + h];
            uint32_t rank = p->src.holder_rank[cell->first_holder + h];
            if (slot == UINT64_MAX || (only != PLAN_NONE && rank != only)) continue;
            if (ferry_grow(p->ctx, (void **)&p->qops, sizeof *p->qops, &p->cap_qops, p->nqops + 1))
                return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory emitting quant ops");
            uint32_t spiece = p->src.holders[cell->first_holder + h];
            const ferry_piece_t *sq = &p->src.pieces[spiece];
            ferry_tensor_info_t si;
            ferry_model_tensor(sm, sq->tensor, &si);
            ferry_quant_op_t *q = &p->qops[p->nqops++];
            memset(q, 0, sizeof *q);
            q->tensor = db->tensor;
            q->scale_tensor = p->dst_partner[db->tensor];
            plan_box_intersect(cell->box, db->box, &q->box);
            q->src_rank = rank;
            q->src_buffer = sq->buffer;
            q->src_piece = spiece;
            q->src_offset = plan_piece_offset(sq, &q->box, ferry_dtype_size(si.dtype));
            memcpy(q->src_strides, sq->strides, sizeof q->src_strides);
            q->src_dtype = si.dtype;
            q->flags = p->dst_qflags[db->tensor];
            q->fp8_offset = slot;
            q->scale_offset = slot + plan_quant_fp8_bytes(&q->box);
            p->stats.quant_bytes += plan_quant_fp8_bytes(&q->box) + plan_quant_scale_bytes(&q->box);
        }
    }
    if (p->nqops > 1) qsort(p->qops, p->nqops, sizeof *p->qops, cmp_qop);
    p->stats.quant_ops = p->nqops;
    return FERRY_OK;
}

ferry_status_t plan_emit(ferry_plan_t *p) {
    ferry_status_t st = FERRY_OK;
    if (!p->only) st = emit_quant(p, PLAN_NONE);
    else if (p->only_side == FERRY_SIDE_TRAIN) st = emit_quant(p, p->only_rank);
    if (st) return st;
    if (p->only && p->only_side == FERRY_SIDE_TRAIN) {
        st = emit_writer(p, p->only_rank);
    } else if (p->only) {
        st = emit_reader(p, p->only_rank, NULL);
    } else {
        uint32_t *slot = ferry_alloc(p->ctx, (p->dst.npieces ? p->dst.npieces : 1) * sizeof *slot);
        if (!slot) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory emitting ops");
        for (size_t b = 0; b < p->dst.nboxes; b++)
            for (uint32_t j = 0; j < p->dst.boxes[b].holder_count; j++)
                slot[p->dst.holders[p->dst.boxes[b].first_holder + j]] = j;
        for (uint32_t r = 0; r < p->dst.world && st == FERRY_OK; r++) st = emit_reader(p, r, slot);
        ferry_free(p->ctx, slot);
    }
    if (st) return st;
    ferry_plan_stats_t *s = &p->stats;
    s->ops = p->nops;
    s->buckets = p->nbuckets;
    s->pairs = p->npairs;
    for (size_t i = 0; i < p->nops; i++) {
        s->runs += p->ops[i].runs;
        s->op_bytes += p->ops[i].bytes;
        if (p->ops[i].flags & FERRY_OP_PACK) s->packed_ops++;
        if (p->ops[i].flags & FERRY_OP_GATHER) s->gather_ops++;
    }
    return FERRY_OK;
}
