/* Stage 1: pieces -> distinct (tensor, box) per side, with their holders in
 * a canonical order (box, rank, buffer, offset), so that the plan does not
 * depend on the order in which pieces were added. Tensors are matched by
 * name; dtype and shape must agree. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

/* Pieces of one rank are contiguous and ranks are in order, so piece index
 * order is rank order; ties within a rank (one box in two buffers) are put in
 * (buffer, offset) order so the plan does not depend on insertion order. */
static bool holder_before(const ferry_piece_t *a, const ferry_piece_t *b) {
    if (a->rank != b->rank) return a->rank < b->rank;
    if (a->buffer != b->buffer) return a->buffer < b->buffer;
    return a->byte_offset < b->byte_offset;
}

/* Grouping hashes compact keys, read in one sequential pass over the pieces,
 * instead of chasing 224-byte pieces. Boxes of up to two dimensions with
 * coordinates below 2^32 (nearly all) are keyed exactly; others by a hash
 * whose matches are checked against the boxes. */
typedef struct {
    uint64_t k0, k1;
    uint32_t piece, rank;
} keyed_t;

/* Whether two pieces of one tensor lie in one buffer with overlapping byte
 * spans (first to last byte addressed). */
static bool bytes_meet(const ferry_plan_t *p, const ferry_piece_t *a, const ferry_piece_t *b) {
    if (a->rank != b->rank || a->buffer != b->buffer) return false;
    size_t esize = plan_tensor_esize(p, a->tensor);
    uint64_t span[2];
    const ferry_piece_t *q[2] = {a, b};
    for (int i = 0; i < 2; i++) {
        uint64_t last = 0;
        for (uint32_t d = 0; d < q[i]->box.ndim; d++)
            last += (uint64_t)(q[i]->box.extent[d] - 1) * (uint64_t)q[i]->strides[d];
        span[i] = q[i]->byte_offset + (last + 1) * esize;
    }
    return a->byte_offset < span[1] && b->byte_offset < span[0];
}

static _Thread_local const plan_box_t *g_boxes;

static int cmp_box_index(const void *x, const void *y) {
    const plan_box_t *a = &g_boxes[*(const uint32_t *)x], *b = &g_boxes[*(const uint32_t *)y];
    return plan_box_cmp(a->box, b->box);
}

/* Source tensor index -> destination tensor index (PLAN_NONE if the
 * destination model has no tensor of that name). */
static ferry_status_t map_tensors(ferry_plan_t *p, uint32_t **out) {
    uint32_t ns = ferry_model_tensor_count(p->src_model);
    uint32_t *map = ferry_alloc(p->ctx, (size_t)(ns ? ns : 1) * sizeof *map);
    if (!map) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory mapping tensors");
    bool same = p->src_model == p->dst_model;
    for (uint32_t t = 0; t < ns; t++) {
        ferry_tensor_info_t info;
        uint32_t d = t;
        if (!same && (!ferry_model_tensor(p->src_model, t, &info) ||
                      !ferry_model_find(p->dst_model, info.name, &d)))
            d = PLAN_NONE;
        map[t] = d;
    }
    *out = map;
    return FERRY_OK;
}

/* The destination tensor t exists in the source with the same dtype and shape. */
/* needed[t]: 1 + the first destination piece of tensor t, 0 if none. */
static ferry_status_t check_tensor(ferry_plan_t *p, uint32_t t, uint32_t st, const uint32_t *has_src,
                                   const uint32_t *needed) {
    ferry_tensor_info_t di, si;
    ferry_model_tensor(p->dst_model, t, &di);
    ferry_tensor_quant_t dq, sq = {.kind = FERRY_QUANT_NONE};
    ferry_model_tensor_quant(p->dst_model, t, &dq);
    if (st != PLAN_NONE) ferry_model_tensor_quant(p->src_model, st, &sq);
    if (dq.kind != FERRY_QUANT_NONE && sq.kind != dq.kind) {
        /* an fp8 engine fed by an unquantized trainer: the writer must
         * quantize, which the planner does not plan yet */
        const char *had = "absent";
        if (st != PLAN_NONE) {
            ferry_model_tensor(p->src_model, st, &si);
            had = ferry_dtype_name(si.dtype);
        }
        ferry_tensor_info_t wi;
        ferry_model_tensor(p->dst_model, dq.partner, &wi);
        if (dq.kind == FERRY_QUANT_FP8_BLOCK)
            return ferry_fail(&p->err, FERRY_ERR_UNSUPPORTED,
                              "tensor %s: fp8 block-quantized in the destination (F8_E4M3, scales in %s), %s "
                              "in the source; quantizing on the writer is not planned yet (issue 20 step 4: "
                              "the planner's quantize ops)",
                              di.name, wi.name, had);
        return ferry_fail(&p->err, FERRY_ERR_UNSUPPORTED,
                          "tensor %s: the scales of fp8 tensor %s in the destination, %s in the source; "
                          "quantizing on the writer is not planned yet (issue 20 step 4: the planner's "
                          "quantize ops)",
                          di.name, wi.name, had);
    }
    if (st == PLAN_NONE)
        return ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                          "tensor %s: the destination holds it but the source model has no "
                          "tensor of that name", di.name);
    ferry_model_tensor(p->src_model, st, &si);
    if (si.dtype != di.dtype)
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                          "tensor %s: dtype %s in the source, %s in the destination (no "
                          "conversion requested)", di.name, ferry_dtype_name(si.dtype),
                          ferry_dtype_name(di.dtype));
    bool shape_ok = si.ndim == di.ndim;
    for (uint32_t d = 0; shape_ok && d < si.ndim; d++) shape_ok = si.shape[d] == di.shape[d];
    if (!shape_ok) {
        ferry_box_t a = ferry_box_of_shape(si.ndim, si.shape), b = ferry_box_of_shape(di.ndim, di.shape);
        char sa[160], sb[160];
        ferry_box_format(&a, sa, sizeof sa);
        ferry_box_format(&b, sb, sizeof sb);
        return ferry_fail(&p->err, FERRY_ERR_MISMATCH,
                          "tensor %s: shape %s in the source, %s in the destination", di.name, sa,
                          sb);
    }
    if (!has_src[t]) {
        const ferry_piece_t *q = &p->dst.pieces[needed[t] - 1];
        char b[200];
        ferry_box_format(&q->box, b, sizeof b);
        return ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                          "tensor %s: no source rank holds any of it (destination rank %u wants %s)",
                          di.name, q->rank, b);
    }
    return FERRY_OK;
}

/* Builds side->boxes/holders: per tensor, pieces grouped by box (hash, then
 * checked), boxes in canonical order, holders in rank order; the source side
 * keeps one holder per rank. */
static ferry_status_t index_side(ferry_plan_t *p, plan_side_t *s, bool is_src, const uint32_t *map,
                                 uint32_t *needed, uint32_t *has_src) {
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    size_t n = s->npieces;
    s->tensor_first = ferry_calloc(p->ctx, (size_t)nt + 2, sizeof *s->tensor_first);
    keyed_t *keyed = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *keyed);
    uint32_t *count = ferry_calloc(p->ctx, (size_t)nt + 1, sizeof *count);
    s->piece_box = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *s->piece_box);
    s->piece_tensor = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *s->piece_tensor);
    s->holders = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *s->holders);
    uint32_t *perm = NULL;
    plan_box_t *tmp = NULL;
    size_t cap_perm = 0, cap_tmp = 0, cap_boxes = 0;
    keyed_t *tmp_keys = NULL;
    uint32_t *table = NULL, *did = NULL, *rep = NULL, *fill = NULL;
    size_t cap_table = 0, cap_did = 0, cap_rep = 0, cap_fill = 0;
    ferry_status_t st = FERRY_OK;
    if (is_src) s->piece_dense = ferry_calloc(p->ctx, n ? n : 1, 1);
    if (!s->tensor_first || !keyed || !count || !s->piece_box || !s->piece_tensor || !s->holders ||
        (is_src && !s->piece_dense)) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing pieces");
        goto out;
    }
    /* One sequential pass over the pieces (they are large and cold): tensor,
     * box key, rank, and the digest's address hash; then a counting sort by
     * tensor over the compact keys, stable, so rank order within a tensor. */
    tmp_keys = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *tmp_keys);
    if (!tmp_keys) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing pieces");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const ferry_piece_t *q = &s->pieces[i];
        uint32_t t;
        if (is_src) {
            t = map[q->tensor];
            if (t != PLAN_NONE && !needed[t]) t = PLAN_NONE; /* the destination does not want it */
            if (t != PLAN_NONE) has_src[t] = 1;
        } else {
            t = q->tensor;
            if (!needed[t]) needed[t] = (uint32_t)i + 1;
        }
        s->piece_tensor[i] = t;
        s->piece_box[i] = PLAN_NONE;
        if (t == PLAN_NONE) continue;
        count[t]++;
        keyed_t *k = &tmp_keys[i];
        plan_box_key(&q->box, &k->k0, &k->k1);
        k->piece = (uint32_t)i;
        k->rank = q->rank;
        if (!is_src) {
            /* the destination addresses, for the digest (lean: 662 k pieces for Kimi-K2) */
            uint64_t h = plan_mix64(k->k0 ^ ((uint64_t)t << 32 | q->rank)) ^ k->k1;
            h = plan_mix64(h ^ ((uint64_t)q->buffer << 40) ^ q->byte_offset);
            /* strides weighted by random odd constants: no small change cancels out */
            static const uint64_t w[FERRY_MAX_DIMS] = {
                0x9e3779b97f4a7c15ull, 0xbf58476d1ce4e5b9ull, 0x94d049bb133111ebull, 0xd6e8feb86659fd93ull,
                0xa0761d6478bd642full, 0xe7037ed1a0b428dbull, 0x8ebc6af09c88c6e3ull, 0x589965cc75374cc3ull};
            uint64_t sw = 0;
            for (uint32_t d = 0; d < q->box.ndim; d++) sw += (uint64_t)q->strides[d] * w[d];
            p->dst_address_sum += plan_mix64(h ^ plan_mix64(sw));
        } else {
            s->piece_dense[i] = plan_run_elems(&q->box, q->strides, NULL) == ferry_box_numel(&q->box);
            /* where the bytes are, for the digest: summed, so piece order does not matter */
            uint64_t h = plan_mix64(((uint64_t)t << 32) ^ q->rank);
            h = plan_mix64(h ^ k->k0) ^ k->k1;
            h = plan_mix64(h ^ q->buffer) ^ q->byte_offset;
            for (uint32_t d = 0; d < q->box.ndim; d++) h = plan_mix64(h ^ (uint64_t)q->strides[d]);
            p->src_address_sum += plan_mix64(h);
        }
    }
    uint32_t sum = 0;
    for (uint32_t t = 0; t < nt; t++) {
        uint32_t c = count[t];
        count[t] = sum;
        sum += c;
    }
    for (size_t i = 0; i < n; i++)
        if (s->piece_tensor[i] != PLAN_NONE) keyed[count[s->piece_tensor[i]]++] = tmp_keys[i];
    ferry_free(p->ctx, tmp_keys);
    tmp_keys = NULL;
    s->nboxes = 0;
    s->nholders = 0;
    s->holder_rank = ferry_alloc(p->ctx, (n ? n : 1) * sizeof *s->holder_rank);
    if (!s->holder_rank) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing pieces");
        goto out;
    }
    size_t g = 0;
    for (uint32_t t = 0; t < nt; t++) { /* count[t] is now the end of tensor t's group */
        size_t end = count[t], first_box = s->nboxes;
        s->tensor_first[t] = (uint32_t)first_box;
        size_t gn = end - g;
        /* distinct boxes in order of first appearance, through a small hash
         * table on the keys (hashed keys are confirmed on the boxes) */
        size_t nslots = 16;
        while (nslots < 2 * gn) nslots *= 2;
        if (ferry_grow(p->ctx, (void **)&table, sizeof *table, &cap_table, nslots) ||
            ferry_grow(p->ctx, (void **)&did, sizeof *did, &cap_did, gn) ||
            ferry_grow(p->ctx, (void **)&rep, sizeof *rep, &cap_rep, gn + 1) ||
            ferry_grow(p->ctx, (void **)&fill, sizeof *fill, &cap_fill, gn + 1)) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing boxes");
            goto out;
        }
        memset(table, 0, nslots * sizeof *table);
        uint32_t nd = 0;
        for (size_t i = g; i < end; i++) {
            const keyed_t *k = &keyed[i];
            size_t h = (size_t)plan_mix64(k->k0 ^ plan_mix64(k->k1)) & (nslots - 1);
            for (;; h = (h + 1) & (nslots - 1)) {
                if (table[h] == 0) {
                    rep[nd] = (uint32_t)i;
                    table[h] = ++nd;
                    did[i - g] = nd - 1;
                    break;
                }
                const keyed_t *r = &keyed[rep[table[h] - 1]];
                if (r->k0 == k->k0 && r->k1 == k->k1 &&
                    (k->k1 != UINT64_MAX || ferry_box_equal(&s->pieces[r->piece].box, &s->pieces[k->piece].box))) {
                    did[i - g] = table[h] - 1;
                    break;
                }
            }
        }
        /* holders of each distinct box, in piece (= rank) order */
        memset(fill, 0, (nd + 1) * sizeof *fill);
        for (size_t i = 0; i < gn; i++) fill[did[i] + 1]++;
        for (uint32_t d = 0; d < nd; d++) fill[d + 1] += fill[d];
        size_t base = s->nholders;
        for (size_t i = g; i < end; i++) {
            uint32_t d = did[i - g], at = fill[d]++;
            s->holders[base + at] = keyed[i].piece;
            s->holder_rank[base + at] = keyed[i].rank;
            s->piece_box[keyed[i].piece] = (uint32_t)(first_box + d);
        }
        if (ferry_grow(p->ctx, (void **)&s->boxes, sizeof *s->boxes, &cap_boxes, s->nboxes + nd)) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing boxes");
            goto out;
        }
        size_t w = base, from = base; /* fill[d] is now the end of box d's holders */
        for (uint32_t d = 0; d < nd; d++) {
            plan_box_t *b = &s->boxes[s->nboxes++];
            const keyed_t *r = &keyed[rep[d]];
            memset(b, 0, sizeof *b);
            b->box = &s->pieces[r->piece].box;
            b->k0 = r->k0;
            b->k1 = r->k1;
            b->tensor = t;
            b->first_holder = (uint32_t)w;
            for (size_t at = from; at < base + fill[d]; at++) {
                uint32_t pc = s->holders[at], rk = s->holder_rank[at];
                uint32_t *h = s->holders + b->first_holder, *hr = s->holder_rank + b->first_holder;
                uint32_t nh = (uint32_t)(w - b->first_holder);
                if (nh && hr[nh - 1] == rk) {
                    if (is_src) { /* one holder per rank: the first in (buffer, offset) order */
                        if (holder_before(&s->pieces[pc], &s->pieces[h[nh - 1]])) h[nh - 1] = pc;
                        continue;
                    }
                    /* the same box twice on one rank (two parameters, or two places
                     * in a flat buffer): keep (buffer, offset) order; but the two
                     * must not share bytes */
                    for (uint32_t m = nh; m > 0 && hr[m - 1] == rk; m--) {
                        if (!bytes_meet(p, &s->pieces[h[m - 1]], &s->pieces[pc])) continue;
                        char bx[160];
                        ferry_buffer_info_t bi;
                        ferry_box_format(b->box, bx, sizeof bx);
                        ferry_layout_buffer(s->layout, s->pieces[pc].buffer, &bi);
                        st = ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                                        "tensor %s: buffer %s of destination rank %u holds box %s "
                                        "twice in the same bytes", plan_tensor_name(p, t), bi.name, rk, bx);
                        goto out;
                    }
                    uint32_t m = nh;
                    while (m > 0 && hr[m - 1] == rk && holder_before(&s->pieces[pc], &s->pieces[h[m - 1]])) {
                        h[m] = h[m - 1];
                        hr[m] = hr[m - 1];
                        m--;
                    }
                    h[m] = pc;
                    hr[m] = rk;
                    w++;
                    continue;
                }
                h[nh] = pc;
                hr[nh] = rk;
                w++;
            }
            from = base + fill[d];
            b->holder_count = (uint32_t)(w - b->first_holder);
        }
        s->nholders = w;
        /* canonical box order inside the tensor (hash order is arbitrary) */
        size_t nb = s->nboxes - first_box;
        if (nb > 1) {
            if (ferry_grow(p->ctx, (void **)&perm, sizeof *perm, &cap_perm, nb) ||
                ferry_grow(p->ctx, (void **)&tmp, sizeof *tmp, &cap_tmp, nb)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory ordering boxes");
                goto out;
            }
            for (size_t k = 0; k < nb; k++) perm[k] = (uint32_t)(first_box + k);
            g_boxes = s->boxes;
            qsort(perm, nb, sizeof *perm, cmp_box_index);
            for (size_t k = 0; k < nb; k++) tmp[k] = s->boxes[perm[k]];
            memcpy(s->boxes + first_box, tmp, nb * sizeof *tmp);
            for (size_t k = 0; k < nb; k++) /* piece -> box follows the move */
                for (uint32_t h = 0; h < tmp[k].holder_count; h++)
                    s->piece_box[s->holders[tmp[k].first_holder + h]] = (uint32_t)(first_box + k);
        }
        g = end;
    }
    s->tensor_first[nt] = (uint32_t)s->nboxes;
out:
    ferry_free(p->ctx, table);
    ferry_free(p->ctx, did);
    ferry_free(p->ctx, rep);
    ferry_free(p->ctx, fill);
    ferry_free(p->ctx, tmp_keys);
    ferry_free(p->ctx, keyed);
    ferry_free(p->ctx, count);
    ferry_free(p->ctx, perm);
    ferry_free(p->ctx, tmp);
    return st;
}

/* A destination rank may hold a tensor's elements twice (a tied embedding
 * kept as embed_tokens split one way and lm_head split another, in two
 * parameters or in one flat buffer), but two pieces whose boxes overlap must
 * not share bytes: one element would be written into itself twice. */
static ferry_status_t check_dst_overlaps(ferry_plan_t *p) {
    plan_side_t *s = &p->dst;
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    const ferry_box_t **boxes = NULL;
    uint32_t *scratch = NULL;
    size_t cap = 0, cap2 = 0;
    ferry_status_t st = FERRY_OK;
    for (uint32_t t = 0; t < nt && st == FERRY_OK; t++) {
        size_t first = s->tensor_first[t], n = s->tensor_first[t + 1] - first;
        if (n < 2) continue;
        if (ferry_grow(p->ctx, (void **)&boxes, sizeof *boxes, &cap, n) ||
            ferry_grow(p->ctx, (void **)&scratch, sizeof *scratch, &cap2, n)) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory checking overlaps");
            break;
        }
        for (size_t k = 0; k < n; k++) boxes[k] = s->boxes[first + k].box;
        size_t i, j;
        if (!plan_boxes_overlap(boxes, n, scratch, &i, &j)) continue;
        /* rare: boxes of different ranks overlap; look for a rank in both */
        for (size_t a = 0; a < n && st == FERRY_OK; a++) {
            for (size_t b = a + 1; b < n && st == FERRY_OK; b++) {
                const plan_box_t *x = &s->boxes[first + a], *y = &s->boxes[first + b];
                if (!ferry_box_intersect(x->box, y->box, NULL)) continue;
                for (uint32_t u = 0; u < x->holder_count && st == FERRY_OK; u++) {
                    const ferry_piece_t *px = &s->pieces[s->holders[x->first_holder + u]];
                    for (uint32_t v = 0; v < y->holder_count; v++) {
                        const ferry_piece_t *py = &s->pieces[s->holders[y->first_holder + v]];
                        if (px->rank != py->rank || !bytes_meet(p, px, py)) continue;
                        char bx[160], by[160];
                        ferry_box_format(x->box, bx, sizeof bx);
                        ferry_box_format(y->box, by, sizeof by);
                        ferry_buffer_info_t bi;
                        ferry_layout_buffer(s->layout, px->buffer, &bi);
                        st = ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                                        "tensor %s: buffer %s of destination rank %u holds boxes %s "
                                        "and %s, which overlap, in the same bytes",
                                        plan_tensor_name(p, t), bi.name, px->rank, bx, by);
                        break;
                    }
                }
            }
        }
    }
    ferry_free(p->ctx, boxes);
    ferry_free(p->ctx, scratch);
    return st;
}

ferry_status_t plan_index(ferry_plan_t *p) {
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    uint32_t *map = NULL, *has_src = NULL;
    ferry_status_t st = map_tensors(p, &map);
    if (st) return st;
    has_src = ferry_calloc(p->ctx, (size_t)nt + 1, sizeof *has_src);
    uint32_t *needed = ferry_calloc(p->ctx, (size_t)nt + 1, sizeof *needed);
    uint32_t *inverse = ferry_alloc(p->ctx, ((size_t)nt + 1) * sizeof *inverse);
    if (!has_src || !needed || !inverse) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing pieces");
        goto out;
    }
    /* the destination first: it says which tensors the source must provide */
    if ((st = index_side(p, &p->dst, false, map, needed, has_src)) != FERRY_OK) goto out;
    if ((st = index_side(p, &p->src, true, map, needed, has_src)) != FERRY_OK) goto out;
    for (uint32_t t = 0; t < nt; t++) inverse[t] = PLAN_NONE;
    for (uint32_t t = 0, ns = ferry_model_tensor_count(p->src_model); t < ns; t++)
        if (map[t] != PLAN_NONE) inverse[map[t]] = t;
    for (uint32_t t = 0; t < nt; t++)
        if (needed[t] && (st = check_tensor(p, t, inverse[t], has_src, needed)) != FERRY_OK) goto out;
    st = check_dst_overlaps(p);
out:
    ferry_free(p->ctx, map);
    ferry_free(p->ctx, has_src);
    ferry_free(p->ctx, needed);
    ferry_free(p->ctx, inverse);
    return st;
}
