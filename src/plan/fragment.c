/* Stage 3: every distinct destination box is cut by the source cells of its
 * tensor into fragments. Cells are disjoint, so the fragments of a box cover
 * it exactly once iff their sizes add up to the box's. The cells meeting a
 * box are found by a sorted-interval query along the tensor's split
 * dimension, not by trying every cell. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

static int cmp_u32(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    return a < b ? -1 : a > b;
}

typedef struct {
    uint32_t dim;            /* split dimension of the tensor's cells */
    uint32_t *order;         /* cells sorted by offset along dim */
    int64_t *reach;          /* prefix maximum of cell ends along dim, in that order */
    const ferry_box_t **boxes; /* the tensor's cell boxes (scratch) */
} cell_index_t;

/* Fills ix for the cells [first, first+n) of one tensor. */
static void index_cells(const plan_side_t *s, size_t first, size_t n, cell_index_t *ix) {
    for (size_t k = 0; k < n; k++) ix->boxes[k] = s->boxes[first + k].box;
    uint32_t dim = plan_sort_split_dim(ix->boxes, n, ix->order);
    for (size_t k = 0; k < n; k++) ix->order[k] += (uint32_t)first;
    ix->dim = dim;
    int64_t r = INT64_MIN;
    for (size_t k = 0; k < n; k++) {
        const ferry_box_t *b = s->boxes[ix->order[k]].box;
        int64_t e = b->offset[dim] + b->extent[dim];
        if (e > r) r = e;
        ix->reach[k] = r;
    }
}

static ferry_status_t gap_error(ferry_plan_t *p, const plan_box_t *db, const uint32_t *found, size_t nf) {
    const ferry_box_t **parts = ferry_alloc(p->ctx, (nf ? nf : 1) * sizeof *parts);
    if (!parts) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory naming a gap");
    for (size_t k = 0; k < nf; k++) parts[k] = p->src.boxes[found[k]].box;
    ferry_box_t gap = *db->box;
    int r = plan_box_uncovered(p->ctx, db->box, parts, nf, &gap);
    ferry_free(p->ctx, parts);
    if (r < 0) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory naming a gap");
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
    ix.boxes = ferry_alloc(p->ctx, (src->nboxes ? src->nboxes : 1) * sizeof *ix.boxes);
    uint32_t *found = NULL;
    size_t cap_found = 0;
    ferry_status_t st = FERRY_OK;
    if (!ix.order || !ix.reach || !ix.boxes) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory indexing cells");
        goto out;
    }
    for (uint32_t t = 0; t < nt && st == FERRY_OK; t++) {
        size_t dfirst = dst->tensor_first[t], dn = dst->tensor_first[t + 1] - dfirst;
        if (dn == 0) continue;
        size_t sfirst = src->tensor_first[t], sn = src->tensor_first[t + 1] - sfirst;
        index_cells(src, sfirst, sn, &ix);
        size_t esize = plan_tensor_esize(p, t);
        const bool quant = plan_is_quant(p, t);
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
                if (!plan_box_intersect(src->boxes[c].box, D, NULL)) continue;
                if (ferry_grow(p->ctx, (void **)&found, sizeof *found, &cap_found, nf + 1)) {
                    st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory cutting fragments");
                    goto out;
                }
                found[nf++] = c;
            }
            /* canonical order: by cell (collected backwards, so usually a reversal) */
            for (size_t u = 0; u < nf / 2; u++) {
                uint32_t v = found[u];
                found[u] = found[nf - 1 - u];
                found[nf - 1 - u] = v;
            }
            if (nf > 1) qsort(found, nf, sizeof *found, cmp_u32);
            int64_t covered = 0;
            if (ferry_grow(p->ctx, (void **)&p->frags, sizeof *p->frags, &p->cap_frags, p->nfrags + nf)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory cutting fragments");
                goto out;
            }
            db->first_frag = (uint32_t)p->nfrags;
            for (size_t u = 0; u < nf; u++) {
                ferry_box_t x;
                plan_box_intersect(src->boxes[found[u]].box, D, &x);
                int64_t numel = ferry_box_numel(&x);
                covered += numel;
                plan_frag_t *f = &p->frags[p->nfrags++];
                memset(f, 0, sizeof *f);
                f->cell = found[u];
                f->dbox = (uint32_t)(dfirst + k);
                f->route = PLAN_NONE;
                /* an fp8 fragment: its quant slot, fp8 bytes and scales (quant.c) */
                f->bytes = quant ? plan_quant_fp8_bytes(&x) + plan_quant_scale_bytes(&x) : (uint64_t)numel * esize;
                f->whole = numel == ferry_box_numel(src->boxes[found[u]].box);
            }
            db->frag_count = (uint32_t)nf;
            if (covered != ferry_box_numel(D)) {
                st = gap_error(p, db, found, nf);
                goto out;
            }
            if (p->nfrags > UINT32_MAX / 2) {
                st = ferry_fail(&p->err, FERRY_ERR_LIMIT,
                                "more than %u fragments (reached at tensor %s): the layouts cut the "
                                "model too finely", UINT32_MAX / 2, plan_tensor_name(p, t));
                goto out;
            }
        }
    }
out:
    ferry_free(p->ctx, ix.order);
    ferry_free(p->ctx, ix.reach);
    ferry_free(p->ctx, ix.boxes);
    ferry_free(p->ctx, found);
    return st;
}
