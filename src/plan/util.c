/* Small helpers of the planner: box order and arithmetic, interned rank lists. */
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "plan/plan_internal.h"

const char *plan_tensor_name(const ferry_plan_t *p, uint32_t tensor) {
    ferry_tensor_info_t info;
    return ferry_model_tensor(p->dst_model, tensor, &info) ? info.name : "?";
}

size_t plan_tensor_esize(const ferry_plan_t *p, uint32_t tensor) {
    ferry_tensor_info_t info;
    return ferry_model_tensor(p->dst_model, tensor, &info) ? ferry_dtype_size(info.dtype) : 0;
}

int plan_box_cmp(const ferry_box_t *a, const ferry_box_t *b) {
    if (a->ndim != b->ndim) return a->ndim < b->ndim ? -1 : 1;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->offset[d] != b->offset[d]) return a->offset[d] < b->offset[d] ? -1 : 1;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->extent[d] != b->extent[d]) return a->extent[d] < b->extent[d] ? -1 : 1;
    return 0;
}

bool plan_box_key(const ferry_box_t *b, uint64_t *k0, uint64_t *k1) {
    bool exact = b->ndim <= 2;
    for (uint32_t d = 0; d < b->ndim && exact; d++)
        exact = (uint64_t)b->offset[d] < (1ull << 32) && (uint64_t)b->extent[d] < (1ull << 32);
    if (exact) {
        *k0 = b->ndim == 0 ? 0 : ((uint64_t)b->offset[0] << 32) | (uint64_t)b->extent[0];
        *k1 = b->ndim < 2 ? (uint64_t)b->ndim << 62 : ((uint64_t)b->offset[1] << 32) | (uint64_t)b->extent[1];
        return *k1 != UINT64_MAX;
    }
    uint64_t h = 0x9e3779b97f4a7c15ull ^ b->ndim;
    for (uint32_t d = 0; d < b->ndim; d++) {
        h = (h ^ (uint64_t)b->offset[d]) * 0xff51afd7ed558ccdull;
        h = (h ^ (uint64_t)b->extent[d]) * 0xc4ceb9fe1a85ec53ull;
        h ^= h >> 29;
    }
    *k0 = h;
    *k1 = UINT64_MAX;
    return false;
}

uint64_t plan_piece_offset(const ferry_piece_t *q, const ferry_box_t *box, size_t esize) {
    uint64_t off = 0;
    for (uint32_t d = 0; d < box->ndim; d++)
        off += (uint64_t)(box->offset[d] - q->box.offset[d]) * (uint64_t)q->strides[d];
    return q->byte_offset + off * esize;
}

int64_t plan_run_elems(const ferry_box_t *box, const int64_t *a, const int64_t *b) {
    int64_t run = 1;
    for (uint32_t k = box->ndim; k-- > 0;) {
        if (box->extent[k] == 1) continue; /* a unit dimension never breaks a run */
        if (a[k] != run || (b && b[k] != run)) break;
        run *= box->extent[k];
    }
    return run;
}

static int64_t box_hi(const ferry_box_t *b, uint32_t d) { return b->offset[d] + b->extent[d]; }

/* Box minus box: up to 2*ndim disjoint pieces of a outside b, appended to out. */
static size_t box_subtract(const ferry_box_t *a, const ferry_box_t *b, ferry_box_t *out) {
    ferry_box_t rest = *a, cut;
    size_t n = 0;
    if (!ferry_box_intersect(a, b, &cut)) {
        out[n++] = *a;
        return n;
    }
    for (uint32_t d = 0; d < a->ndim; d++) {
        if (rest.offset[d] < cut.offset[d]) {
            ferry_box_t lo = rest;
            lo.extent[d] = cut.offset[d] - rest.offset[d];
            out[n++] = lo;
        }
        if (box_hi(&rest, d) > box_hi(&cut, d)) {
            ferry_box_t hi = rest;
            hi.offset[d] = box_hi(&cut, d);
            hi.extent[d] = box_hi(&rest, d) - hi.offset[d];
            out[n++] = hi;
        }
        rest.offset[d] = cut.offset[d];
        rest.extent[d] = cut.extent[d];
    }
    return n;
}

int plan_box_uncovered(ferry_ctx_t *ctx, const ferry_box_t *box, const ferry_box_t *const *parts, size_t n,
                       ferry_box_t *out) {
    /* Keep subtracting parts from the remaining pieces (depth first) until
     * one piece meets no part. Only used to name a gap in an error. */
    ferry_box_t *work = NULL;
    size_t nw = 0, cap = 0;
    int found = 0;
    if (ferry_grow(ctx, (void **)&work, sizeof *work, &cap, 1)) return -1;
    work[nw++] = *box;
    while (nw > 0 && !found) {
        ferry_box_t cur = work[--nw];
        size_t i = 0;
        for (; i < n; i++)
            if (ferry_box_intersect(&cur, parts[i], NULL)) break;
        if (i == n) {
            *out = cur;
            found = 1;
            break;
        }
        if (ferry_grow(ctx, (void **)&work, sizeof *work, &cap, nw + 2 * FERRY_MAX_DIMS)) {
            ferry_free(ctx, work);
            return -1;
        }
        nw += box_subtract(&cur, parts[i], work + nw);
    }
    ferry_free(ctx, work);
    return found;
}

static _Thread_local const ferry_box_t *const *g_sort_boxes;
static _Thread_local uint32_t g_sort_dim;

static int cmp_offset(const void *x, const void *y) {
    int64_t a = g_sort_boxes[*(const uint32_t *)x]->offset[g_sort_dim];
    int64_t b = g_sort_boxes[*(const uint32_t *)y]->offset[g_sort_dim];
    if (a != b) return a < b ? -1 : 1;
    return *(const uint32_t *)x < *(const uint32_t *)y ? -1 : *(const uint32_t *)x > *(const uint32_t *)y;
}

uint32_t plan_sort_split_dim(const ferry_box_t *const *boxes, size_t n, uint32_t *order) {
    uint32_t nd = n ? boxes[0]->ndim : 0, dim = 0;
    size_t best = 0;
    g_sort_boxes = boxes;
    for (uint32_t d = 0; d < nd && n > 1; d++) { /* distinct offsets per dimension */
        for (size_t k = 0; k < n; k++) order[k] = (uint32_t)k;
        g_sort_dim = d;
        qsort(order, n, sizeof *order, cmp_offset);
        size_t distinct = 1;
        for (size_t k = 1; k < n; k++) distinct += boxes[order[k]]->offset[d] != boxes[order[k - 1]]->offset[d];
        if (distinct > best) best = distinct, dim = d;
    }
    for (size_t k = 0; k < n; k++) order[k] = (uint32_t)k;
    g_sort_dim = dim;
    if (n > 1) qsort(order, n, sizeof *order, cmp_offset);
    return dim;
}

bool plan_boxes_overlap(const ferry_box_t *const *boxes, size_t n, uint32_t *scratch, size_t *i,
                        size_t *j) {
    if (n < 2) return false;
    uint32_t dim = plan_sort_split_dim(boxes, n, scratch);
    /* sweep: a box can only meet those still open along dim */
    size_t open_first = 0;
    for (size_t k = 0; k < n; k++) {
        const ferry_box_t *b = boxes[scratch[k]];
        while (open_first < k && box_hi(boxes[scratch[open_first]], dim) <= b->offset[dim])
            open_first++;
        for (size_t m = open_first; m < k; m++) {
            if (ferry_box_intersect(boxes[scratch[m]], b, NULL)) {
                *i = scratch[m];
                *j = scratch[k];
                return true;
            }
        }
    }
    return false;
}

/* ---- interned rank lists ------------------------------------------------ */

static uint64_t list_hash(const uint32_t *items, size_t n) {
    return XXH3_64bits(items, n * sizeof *items);
}

static bool list_equal(const plan_sets_t *s, uint32_t id, const uint32_t *items, size_t n) {
    size_t len = s->first[id + 1] - s->first[id];
    return len == n && memcmp(s->items + s->first[id], items, n * sizeof *items) == 0;
}

static int sets_rehash(ferry_ctx_t *ctx, plan_sets_t *s, size_t nslots) {
    uint32_t *slots = ferry_calloc(ctx, nslots, sizeof *slots);
    if (!slots) return -1;
    for (size_t id = 0; id < s->count; id++) {
        uint64_t h = list_hash(s->items + s->first[id], s->first[id + 1] - s->first[id]);
        size_t k = (size_t)h & (nslots - 1);
        while (slots[k]) k = (k + 1) & (nslots - 1);
        slots[k] = (uint32_t)id + 1;
    }
    ferry_free(ctx, s->slots);
    s->slots = slots;
    s->nslots = nslots;
    return 0;
}

uint32_t plan_sets_intern(ferry_ctx_t *ctx, plan_sets_t *s, const uint32_t *items, size_t n) {
    if (s->nslots == 0 && sets_rehash(ctx, s, 1024)) return PLAN_NONE;
    uint64_t h = list_hash(items, n);
    size_t k = (size_t)h & (s->nslots - 1);
    for (; s->slots[k]; k = (k + 1) & (s->nslots - 1))
        if (list_equal(s, s->slots[k] - 1, items, n)) return s->slots[k] - 1;
    if (ferry_grow(ctx, (void **)&s->items, sizeof *s->items, &s->cap_items, s->nitems + n) ||
        ferry_grow(ctx, (void **)&s->first, sizeof *s->first, &s->cap, s->count + 2))
        return PLAN_NONE;
    if (s->count == 0) s->first[0] = 0;
    memcpy(s->items + s->nitems, items, n * sizeof *items);
    s->nitems += n;
    uint32_t id = (uint32_t)s->count++;
    s->first[id + 1] = (uint32_t)s->nitems;
    s->slots[k] = id + 1;
    if (s->count * 2 > s->nslots && sets_rehash(ctx, s, s->nslots * 2)) return PLAN_NONE;
    return id;
}

void plan_sets_free(ferry_ctx_t *ctx, plan_sets_t *s) {
    ferry_free(ctx, s->items);
    ferry_free(ctx, s->first);
    ferry_free(ctx, s->slots);
    memset(s, 0, sizeof *s);
}
