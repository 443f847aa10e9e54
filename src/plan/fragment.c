/* Stage 3: every distinct destination box is cut by the source cells of its
 * tensor into fragments. Cells are disjoint, so the fragments of a box cover
 * it exactly once iff their sizes add up to the box's. The cells meeting a
 * box are found by a sorted-interval query along the tensor's split
 * dimension, not by trying every cell. */
#include <string.h>

#include "plan/plan_internal.h"

typedef struct {
    uint32_t dim;            /* split dimension of the tensor's cells */
    uint32_t *order;         /* cells sorted by offset along dim */
    int64_t *reach;          /* prefix maximum of cell ends along dim, in that order */
} cell_index_t;

/* Fills ix for the cells [first, first+n) of one tensor. */
static void index_cells(const plan_side_t *s, size_t first, size_t n, cell_index_t *ix) {
    uint32_t nd = n ? s->boxes[first].box->ndim : 0, dim = 0;
    size_t best = 0;
    for (uint32_t d = 0; d < nd; d++) {
        size_t distinct = 0;
        int64_t prev = INT64_MIN;
        for (size_t k = 0; k < n; k++) { /* counts changes: exact for the usual sorted input */
            int64_t o = s->boxes[first + k].box->offset[d];
            if (k == 0 || o != prev) distinct++;
            prev = o;
        }
        if (distinct > best) best = distinct, dim = d;
    }
    ix->dim = dim;
    for (size_t k = 0; k < n; k++) { /* insertion sort: cells come sorted on dim 0 already */
        uint32_t v = (uint32_t)(first + k);
        size_t m = k;
        while (m > 0 && s->boxes[ix->order[m - 1]].box->offset[dim] > s->boxes[v].box->offset[dim]) {
            ix->order[m] = ix->order[m - 1];
            m--;
        }
        ix->order[m] = v;
    }
    int64_t r = INT64_MIN;
    for (size_t k = 0; k < n; k++) {
        const ferry_box_t *b = s->boxes[ix->order[k]].box;
        int64_t e = b->offset[dim] + b->extent[dim];
        if (e > r) r = e;
        ix->reach[k] = r;
    }
}

static ferry_status_t gap_error(ferry_plan_t *p, const plan_box_t *db, const uint32_t *found, size_t nf) {
    const ferry_box_t *parts[256];
    size_t np = 0;
    for (size_t k = 0; k < nf && np < 256; k++) parts[np++] = p->src.boxes[found[k]].box;
    ferry_box_t gap = *db->box;
    plan_box_uncovered(db->box, parts, np, &gap);
    char g[200], b[200];
    ferry_box_format(&gap, g, sizeof g);
    ferry_box_format(db->box, b, sizeof b);
    uint32_t rank = p->dst.pieces[p->dst.holders[db->first_holder]].rank;
    return ferry_fail(&p->err, FERRY_ERR_COVERAGE,
                      "tensor %s: no source piece holds %s (wanted by destination rank %u, box %s)",
                      plan_tensor_name(p, db->tensor), g, rank, b);
}

ferry_status_t plan_fragments(ferry_plan_t *p) {
    plan_side_t *src = &p->src, *dst = &p->dst;
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    cell_index_t ix;
    ix.order = ferry_alloc(p->ctx, (src->nboxes ? src->nboxes : 1) * sizeof *ix.order);
    ix.reach = ferry_alloc(p->ctx, (src->nboxes ? src->nboxes : 1) * sizeof *ix.reach);
    uint32_t *found = NULL;
    size_t cap_found = 0;
    ferry_status_t st = FERRY_OK;
    if (!ix.order || !ix.reach) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing cells");
        goto out;
    }
    for (uint32_t t = 0; t < nt && st == FERRY_OK; t++) {
        size_t dfirst = dst->tensor_first[t], dn = dst->tensor_first[t + 1] - dfirst;
        if (dn == 0) continue;
        size_t sfirst = src->tensor_first[t], sn = src->tensor_first[t + 1] - sfirst;
        index_cells(src, sfirst, sn, &ix);
        size_t esize = plan_tensor_esize(p, t);
        uint32_t dim = ix.dim;
        for (size_t k = 0; k < dn; k++) {
            plan_box_t *db = &dst->boxes[dfirst + k];
            const ferry_box_t *D = db->box;
            int64_t lo = D->offset[dim], hi = D->offset[dim] + D->extent[dim];
            if (D->ndim == 0) lo = INT64_MIN, hi = INT64_MAX; /* a scalar: every cell is the scalar */
            /* last cell starting before hi, then back while some earlier cell reaches past lo */
            size_t a = 0, b = sn;
            while (a < b) {
                size_t mid = (a + b) / 2;
                if (src->boxes[ix.order[mid]].box->offset[dim] < hi) a = mid + 1;
                else b = mid;
            }
            size_t nf = 0;
            for (size_t m = a; m-- > 0 && ix.reach[m] > lo;) {
                uint32_t c = ix.order[m];
                if (!ferry_box_intersect(src->boxes[c].box, D, NULL)) continue;
                if (ferry_grow(p->ctx, (void **)&found, sizeof *found, &cap_found, nf + 1)) {
                    st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory cutting fragments");
                    goto out;
                }
                found[nf++] = c;
            }
            for (size_t u = 1; u < nf; u++) { /* canonical order: by cell */
                uint32_t v = found[u];
                size_t m = u;
                while (m > 0 && found[m - 1] > v) found[m] = found[m - 1], m--;
                found[m] = v;
            }
            int64_t covered = 0;
            if (ferry_grow(p->ctx, (void **)&p->frags, sizeof *p->frags, &p->cap_frags, p->nfrags + nf)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory cutting fragments");
                goto out;
            }
            db->first_frag = (uint32_t)p->nfrags;
            for (size_t u = 0; u < nf; u++) {
                ferry_box_t x;
                ferry_box_intersect(src->boxes[found[u]].box, D, &x);
                int64_t numel = ferry_box_numel(&x);
                covered += numel;
                plan_frag_t *f = &p->frags[p->nfrags++];
                memset(f, 0, sizeof *f);
                f->cell = found[u];
                f->dbox = (uint32_t)(dfirst + k);
                f->route = PLAN_NONE;
                f->bytes = (uint64_t)numel * esize;
                f->whole = numel == ferry_box_numel(src->boxes[found[u]].box);
            }
            db->frag_count = (uint32_t)nf;
            if (covered != ferry_box_numel(D)) {
                st = gap_error(p, db, found, nf);
                goto out;
            }
            if (p->nfrags > UINT32_MAX / 2) {
                st = ferry_fail(&p->err, FERRY_ERR_LIMIT, "more than %u fragments", UINT32_MAX / 2);
                goto out;
            }
        }
    }
out:
    ferry_free(p->ctx, ix.order);
    ferry_free(p->ctx, ix.reach);
    ferry_free(p->ctx, found);
    return st;
}
