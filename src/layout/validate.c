/* Layout validation.
 * Scales mirror weights: on each rank, the pieces of an fp8 block-quantized
 * tensor (block-aligned boxes) and those of its scale tensor pair up, box B
 * with blocks(B), one for one.
 * Coverage: per tensor, the distinct boxes (with how many pieces hold each)
 * are accumulated on a grid compressed to the boxes' boundaries; every cell
 * must be held at least once and all cells equally often, i.e. each replica
 * of the tensor is complete and no region is held an extra time.
 * Buffer bytes: per buffer, the byte spans of pieces are swept; where spans
 * interleave (strided pieces) the pieces are expanded into contiguous runs. */
#include <stdlib.h>
#include <string.h>

#include "layout/layout_internal.h"

#define MAX_GRID_CELLS (1u << 24)
#define MAX_RUNS (1u << 26)

/* qsort has no context argument; thread-local so layouts validate in parallel */
static _Thread_local const ferry_layout_t *g_sort_layout;

static int cmp_by_tensor_box(const void *x, const void *y) {
    const ferry_piece_t *a = &g_sort_layout->pieces[*(const size_t *)x];
    const ferry_piece_t *b = &g_sort_layout->pieces[*(const size_t *)y];
    if (a->tensor != b->tensor) return a->tensor < b->tensor ? -1 : 1;
    for (uint32_t d = 0; d < a->box.ndim; d++) {
        if (a->box.offset[d] != b->box.offset[d]) return a->box.offset[d] < b->box.offset[d] ? -1 : 1;
        if (a->box.extent[d] != b->box.extent[d]) return a->box.extent[d] < b->box.extent[d] ? -1 : 1;
    }
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    return 0;
}

static int cmp_i64(const void *x, const void *y) {
    int64_t a = *(const int64_t *)x, b = *(const int64_t *)y;
    return a < b ? -1 : a > b;
}

static size_t find_bound(const int64_t *b, size_t n, int64_t v) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (b[mid] < v) lo = mid + 1;
        else hi = mid;
    }
    return lo;
}

typedef struct {
    ferry_box_t box;
    uint32_t count;
} dbox_t;

/* Checks one tensor's distinct boxes; fills min/max multiplicity. */
static ferry_status_t check_tensor(ferry_layout_t *l, uint32_t ti, const dbox_t *boxes, size_t nbox,
                                   uint32_t *min_out, uint32_t *max_out) {
    const ferry_model_t *m = l->model;
    const model_tensor_t *t = &m->tensors[ti];
    const char *name = model_tensor_name(m, ti);
    uint32_t nd = t->ndim;
    int64_t *bounds[FERRY_MAX_DIMS] = {0};
    size_t nb[FERRY_MAX_DIMS] = {0};
    int32_t *grid = NULL;
    ferry_status_t st = FERRY_OK;
    uint64_t gsize = 1;
    for (uint32_t d = 0; d < nd; d++) {
        bounds[d] = ferry_calloc(l->ctx, 2 * nbox + 2, sizeof(int64_t));
        if (!bounds[d]) {
            st = ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory validating %s", name);
            goto out;
        }
        size_t n = 0;
        bounds[d][n++] = 0;
        bounds[d][n++] = t->shape[d];
        for (size_t i = 0; i < nbox; i++) {
            bounds[d][n++] = boxes[i].box.offset[d];
            bounds[d][n++] = boxes[i].box.offset[d] + boxes[i].box.extent[d];
        }
        qsort(bounds[d], n, sizeof(int64_t), cmp_i64);
        size_t u = 0;
        for (size_t i = 0; i < n; i++)
            if (u == 0 || bounds[d][i] != bounds[d][u - 1]) bounds[d][u++] = bounds[d][i];
        nb[d] = u;
        gsize *= u;
        if (gsize > MAX_GRID_CELLS) {
            st = ferry_fail(&l->err, FERRY_ERR_LIMIT,
                            "tensor %s is split into too many distinct boxes to validate (%zu)", name,
                            nbox);
            goto out;
        }
    }
    grid = ferry_calloc(l->ctx, (size_t)gsize, sizeof *grid);
    if (!grid) {
        st = ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory validating %s", name);
        goto out;
    }
    size_t gstride[FERRY_MAX_DIMS];
    size_t s = 1;
    for (int d = (int)nd - 1; d >= 0; d--) {
        gstride[d] = s;
        s *= nb[d];
    }
    /* n-d difference array: +/- count at the 2^nd corners of each box */
    for (size_t i = 0; i < nbox; i++) {
        size_t lo[FERRY_MAX_DIMS], hi[FERRY_MAX_DIMS];
        for (uint32_t d = 0; d < nd; d++) {
            lo[d] = find_bound(bounds[d], nb[d], boxes[i].box.offset[d]);
            hi[d] = find_bound(bounds[d], nb[d], boxes[i].box.offset[d] + boxes[i].box.extent[d]);
        }
        for (uint32_t corner = 0; corner < (1u << nd); corner++) {
            size_t at = 0;
            int sign = 1;
            for (uint32_t d = 0; d < nd; d++) {
                if (corner & (1u << d)) {
                    at += hi[d] * gstride[d];
                    sign = -sign;
                } else {
                    at += lo[d] * gstride[d];
                }
            }
            grid[at] += sign * (int32_t)boxes[i].count;
        }
    }
    for (uint32_t d = 0; d < nd; d++) { /* prefix sums along each dimension */
        for (size_t at = 0; at < gsize; at++) {
            size_t coord = (at / gstride[d]) % nb[d];
            if (coord > 0) grid[at] += grid[at - gstride[d]];
        }
    }
    /* walk the cells (coordinates < nb-1 in every dim) */
    int32_t first = -1;
    size_t first_at = 0;
    for (size_t at = 0; at < gsize && st == FERRY_OK; at++) {
        size_t coord[FERRY_MAX_DIMS];
        bool is_cell = true;
        for (uint32_t d = 0; d < nd; d++) {
            coord[d] = (at / gstride[d]) % nb[d];
            if (coord[d] + 1 >= nb[d]) is_cell = false;
        }
        if (!is_cell) continue;
        int32_t v = grid[at];
        ferry_box_t cell = {.ndim = nd};
        for (uint32_t d = 0; d < nd; d++) {
            cell.offset[d] = bounds[d][coord[d]];
            cell.extent[d] = bounds[d][coord[d] + 1] - bounds[d][coord[d]];
        }
        char cb[256];
        ferry_box_format(&cell, cb, sizeof cb);
        if (v <= 0) {
            st = ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                            "tensor %s: elements %s are held by no rank (a gap)", name, cb);
        } else if (first < 0) {
            first = v;
            first_at = at;
        } else if (v != first) {
            ferry_box_t fc = {.ndim = nd};
            for (uint32_t d = 0; d < nd; d++) {
                size_t c0 = (first_at / gstride[d]) % nb[d];
                fc.offset[d] = bounds[d][c0];
                fc.extent[d] = bounds[d][c0 + 1] - bounds[d][c0];
            }
            char fb[256];
            ferry_box_format(&fc, fb, sizeof fb);
            st = ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                            "tensor %s: elements %s are held %d times but elements %s %d times "
                            "(pieces overlap partially)",
                            name, cb, v, fb, first);
        }
        if (v > 0) {
            if ((uint32_t)v < *min_out) *min_out = (uint32_t)v;
            if ((uint32_t)v > *max_out) *max_out = (uint32_t)v;
        }
    }
out:
    for (uint32_t d = 0; d < nd; d++) ferry_free(l->ctx, bounds[d]);
    ferry_free(l->ctx, grid);
    return st;
}

static ferry_status_t check_coverage(ferry_layout_t *l, ferry_coverage_t *cov) {
    const ferry_model_t *m = l->model;
    size_t n = l->npieces;
    size_t *idx = ferry_calloc(l->ctx, n ? n : 1, sizeof *idx);
    dbox_t *boxes = ferry_calloc(l->ctx, n ? n : 1, sizeof *boxes);
    ferry_status_t st = FERRY_OK;
    if (!idx || !boxes) {
        st = ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory validating %zu pieces", n);
        goto out;
    }
    for (size_t i = 0; i < n; i++) idx[i] = i;
    g_sort_layout = l;
    qsort(idx, n, sizeof *idx, cmp_by_tensor_box);
    size_t i = 0;
    for (uint32_t ti = 0; ti < m->ntensors && st == FERRY_OK; ti++) {
        size_t nbox = 0;
        const ferry_piece_t *prev = NULL;
        for (; i < n && l->pieces[idx[i]].tensor == ti; i++) {
            const ferry_piece_t *p = &l->pieces[idx[i]];
            if (prev && ferry_box_equal(&prev->box, &p->box)) {
                /* a second holder of the same box: a replica (possibly on the same
                 * rank, e.g. tied embedding and LM head kept as two parameters) */
                boxes[nbox - 1].count++;
            } else {
                boxes[nbox].box = p->box;
                boxes[nbox].count = 1;
                nbox++;
            }
            prev = p;
        }
        if (nbox == 0) {
            const model_tensor_t *t = &m->tensors[ti];
            ferry_box_t whole = ferry_box_of_shape(t->ndim, t->shape);
            char bx[256];
            ferry_box_format(&whole, bx, sizeof bx);
            st = ferry_fail(&l->err, FERRY_ERR_COVERAGE, "tensor %s: elements %s are held by no rank",
                            model_tensor_name(m, ti), bx);
            break;
        }
        cov->distinct_boxes += nbox;
        st = check_tensor(l, ti, boxes, nbox, &cov->min_replicas, &cov->max_replicas);
        const model_tensor_t *t = &m->tensors[ti];
        uint64_t e = 1;
        for (uint32_t d = 0; d < t->ndim; d++) e *= (uint64_t)t->shape[d];
        cov->elements += e;
    }
out:
    ferry_free(l->ctx, idx);
    ferry_free(l->ctx, boxes);
    return st;
}

/* ---- buffer bytes ------------------------------------------------------ */

typedef struct {
    uint64_t lo, hi; /* byte span [lo, hi) */
    size_t piece;
} span_t;

static int cmp_span(const void *x, const void *y) {
    const span_t *a = x, *b = y;
    const ferry_piece_t *pa = &g_sort_layout->pieces[a->piece], *pb = &g_sort_layout->pieces[b->piece];
    if (pa->buffer != pb->buffer) return pa->buffer < pb->buffer ? -1 : 1;
    if (a->lo != b->lo) return a->lo < b->lo ? -1 : 1;
    return a->hi < b->hi ? -1 : a->hi > b->hi;
}

static void piece_span(const ferry_layout_t *l, const ferry_piece_t *p, uint64_t *lo, uint64_t *hi) {
    uint64_t esz = ferry_dtype_size(l->model->tensors[p->tensor].dtype), last = 0;
    for (uint32_t d = 0; d < p->box.ndim; d++)
        last += (uint64_t)(p->box.extent[d] - 1) * (uint64_t)p->strides[d];
    *lo = p->byte_offset;
    *hi = p->byte_offset + (last + 1) * esz;
}

/* Expands a piece into contiguous byte runs appended to *runs. */
static ferry_status_t piece_runs(ferry_layout_t *l, size_t pi, span_t **runs, size_t *nruns,
                                 size_t *cap) {
    const ferry_piece_t *p = &l->pieces[pi];
    uint64_t esz = ferry_dtype_size(l->model->tensors[p->tensor].dtype);
    uint32_t nd = p->box.ndim;
    uint32_t order[FERRY_MAX_DIMS];
    for (uint32_t d = 0; d < nd; d++) order[d] = d;
    for (uint32_t i = 1; i < nd; i++) /* insertion sort by stride, ascending */
        for (uint32_t j = i; j > 0 && p->strides[order[j]] < p->strides[order[j - 1]]; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    /* merge the innermost dims that are contiguous */
    uint64_t run = 1;
    uint32_t k = 0;
    while (k < nd && p->strides[order[k]] == (int64_t)run) {
        run *= (uint64_t)p->box.extent[order[k]];
        k++;
    }
    if (k == 0) {
        while (k < nd && p->box.extent[order[k]] == 1) k++; /* size-1 dims add nothing */
    }
    uint64_t count = 1;
    for (uint32_t d = k; d < nd; d++) count *= (uint64_t)p->box.extent[order[d]];
    if (*nruns + count > MAX_RUNS)
        return ferry_fail(&l->err, FERRY_ERR_LIMIT,
                          "buffer %s: strided pieces expand to more than %u runs to check",
                          layout_buffer_name(l, p->buffer), MAX_RUNS);
    if (ferry_grow(l->ctx, (void **)runs, sizeof **runs, cap, *nruns + count))
        return ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory validating buffers");
    int64_t idx[FERRY_MAX_DIMS] = {0};
    for (uint64_t c = 0; c < count; c++) {
        uint64_t off = 0;
        for (uint32_t d = k; d < nd; d++) off += (uint64_t)idx[order[d]] * (uint64_t)p->strides[order[d]];
        span_t *r = &(*runs)[(*nruns)++];
        r->lo = p->byte_offset + off * esz;
        r->hi = r->lo + run * esz;
        r->piece = pi;
        for (uint32_t d = k; d < nd; d++) { /* odometer */
            if (++idx[order[d]] < p->box.extent[order[d]]) break;
            idx[order[d]] = 0;
        }
    }
    return FERRY_OK;
}

static ferry_status_t report_overlap(ferry_layout_t *l, size_t a, size_t b) {
    const ferry_piece_t *pa = &l->pieces[a], *pb = &l->pieces[b];
    char ba[256], bb[256];
    ferry_box_format(&pa->box, ba, sizeof ba);
    ferry_box_format(&pb->box, bb, sizeof bb);
    return ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                      "rank %u buffer %s: bytes of %s %s and %s %s overlap", pa->rank,
                      layout_buffer_name(l, pa->buffer), model_tensor_name(l->model, pa->tensor), ba,
                      model_tensor_name(l->model, pb->tensor), bb);
}


#define LATTICE_MAX_PIECES 4096

/* Fast path for interleaved pieces that share one stride vector (a
 * transposed or grouped parameter): with strides sorted ascending, s0 = 1 and
 * each stride a multiple of the previous one, an element offset decomposes
 * into unique mixed-radix coordinates, so every piece is a box on the storage
 * grid and bytes overlap exactly when boxes intersect. Returns false when the
 * pieces do not fit this shape (the caller then expands runs). */
static bool same_lattice(ferry_layout_t *l, const span_t *sp, size_t n, ferry_status_t *st) {
    if (n > LATTICE_MAX_PIECES) return false;
    const ferry_piece_t *p0 = &l->pieces[sp[0].piece];
    uint32_t nd = p0->box.ndim;
    uint64_t esz = ferry_dtype_size(l->model->tensors[p0->tensor].dtype);
    uint32_t order[FERRY_MAX_DIMS];
    for (uint32_t d = 0; d < nd; d++) order[d] = d;
    for (uint32_t i = 1; i < nd; i++)
        for (uint32_t j = i; j > 0 && p0->strides[order[j]] < p0->strides[order[j - 1]]; j--) {
            uint32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    if (nd == 0 || p0->strides[order[0]] != 1) return false;
    for (uint32_t k = 0; k + 1 < nd; k++)
        if (p0->strides[order[k]] <= 0 || p0->strides[order[k + 1]] % p0->strides[order[k]] != 0)
            return false;
    ferry_box_t *grid = ferry_calloc(l->ctx, n, sizeof *grid);
    if (!grid) return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        const ferry_piece_t *p = &l->pieces[sp[i].piece];
        if (p->box.ndim != nd || ferry_dtype_size(l->model->tensors[p->tensor].dtype) != esz ||
            p->byte_offset % esz != 0) {
            ok = false;
            break;
        }
        for (uint32_t d = 0; d < nd; d++)
            if (p->strides[d] != p0->strides[d]) ok = false;
        uint64_t off = p->byte_offset / esz;
        grid[i].ndim = nd;
        for (int k = (int)nd - 1; k >= 0 && ok; k--) {
            uint64_t s = (uint64_t)p0->strides[order[k]], q = off / s, end, bytes;
            off %= s;
            /* coordinates that do not fit int64 (buffers past 2^63 bytes) or
             * that reach the next radix would alias: leave those to the slow path */
            if (q > (uint64_t)INT64_MAX - (uint64_t)p->box.extent[order[k]]) {
                ok = false;
                break;
            }
            grid[i].offset[k] = (int64_t)q;
            grid[i].extent[k] = p->box.extent[order[k]];
            end = q + (uint64_t)grid[i].extent[k];
            if (k + 1 < (int)nd &&
                (__builtin_mul_overflow(end, s, &bytes) || bytes > (uint64_t)p0->strides[order[k + 1]]))
                ok = false;
        }
    }
    for (size_t i = 0; i < n && ok; i++)
        for (size_t j = i + 1; j < n; j++)
            if (ferry_box_intersect(&grid[i], &grid[j], NULL)) {
                *st = report_overlap(l, sp[i].piece, sp[j].piece);
                i = n;
                break;
            }
    ferry_free(l->ctx, grid);
    return ok;
}

static ferry_status_t check_buffers(ferry_layout_t *l) {
    size_t n = l->npieces;
    span_t *spans = ferry_calloc(l->ctx, n ? n : 1, sizeof *spans);
    span_t *runs = NULL;
    size_t nruns = 0, cap = 0;
    ferry_status_t st = FERRY_OK;
    if (!spans) return ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory validating buffers");
    for (size_t i = 0; i < n; i++) {
        piece_span(l, &l->pieces[i], &spans[i].lo, &spans[i].hi);
        spans[i].piece = i;
    }
    g_sort_layout = l;
    qsort(spans, n, sizeof *spans, cmp_span);
    for (size_t i = 0; i < n && st == FERRY_OK;) {
        uint32_t buf = l->pieces[spans[i].piece].buffer;
        size_t j = i;
        bool interleaved = false;
        uint64_t max_hi = 0;
        for (; j < n && l->pieces[spans[j].piece].buffer == buf; j++) {
            if (j > i && spans[j].lo < max_hi) interleaved = true;
            if (spans[j].hi > max_hi) max_hi = spans[j].hi;
        }
        if (interleaved && same_lattice(l, spans + i, j - i, &st)) {
            /* decided on the storage grid */
        } else if (interleaved) { /* spans interleave: compare exact runs */
            nruns = 0;
            for (size_t k = i; k < j && st == FERRY_OK; k++)
                st = piece_runs(l, spans[k].piece, &runs, &nruns, &cap);
            if (st == FERRY_OK) {
                qsort(runs, nruns, sizeof *runs, cmp_span);
                for (size_t k = 1; k < nruns; k++) {
                    if (runs[k].lo < runs[k - 1].hi) {
                        st = report_overlap(l, runs[k - 1].piece, runs[k].piece);
                        break;
                    }
                }
            }
        }
        i = j;
    }
    ferry_free(l->ctx, spans);
    ferry_free(l->ctx, runs);
    return st;
}

/* ---- scales mirror weights -------------------------------------------- */

/* A piece of an fp8 pair, keyed by its box in scale-block coordinates (fp8
 * tensors have 2 or 3 dimensions). */
typedef struct {
    uint32_t rank, weight; /* the pair: its FP8_BLOCK tensor */
    uint32_t ndim, side;   /* side 0: a weight piece, 1: a scale piece */
    int64_t off[3], ext[3];
    size_t piece;
} mirror_t;

static int cmp_mirror(const void *x, const void *y) {
    const mirror_t *a = x, *b = y;
    if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
    if (a->weight != b->weight) return a->weight < b->weight ? -1 : 1;
    for (uint32_t d = 0; d < a->ndim; d++) {
        if (a->off[d] != b->off[d]) return a->off[d] < b->off[d] ? -1 : 1;
        if (a->ext[d] != b->ext[d]) return a->ext[d] < b->ext[d] ? -1 : 1;
    }
    if (a->side != b->side) return a->side < b->side ? -1 : 1;
    return a->piece < b->piece ? -1 : a->piece > b->piece;
}

static bool same_group(const mirror_t *a, const mirror_t *b) {
    if (a->rank != b->rank || a->weight != b->weight) return false;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->off[d] != b->off[d] || a->ext[d] != b->ext[d]) return false;
    return true;
}

static void mirror_box(const mirror_t *k, ferry_box_t *box) {
    memset(box, 0, sizeof *box);
    box->ndim = k->ndim;
    for (uint32_t d = 0; d < k->ndim; d++) {
        box->offset[d] = k->off[d];
        box->extent[d] = k->ext[d];
    }
}

/* Fills k from weight piece p: its box in blocks, or fails naming a box that
 * cuts a block (only a box reaching the tensor's end may end in a partial one). */
static ferry_status_t weight_key(ferry_layout_t *l, const ferry_piece_t *p, mirror_t *k) {
    const model_tensor_t *t = &l->model->tensors[p->tensor];
    const int64_t B = FERRY_FP8_BLOCK;
    k->ndim = p->box.ndim;
    for (uint32_t d = 0; d < p->box.ndim; d++) {
        int64_t off = p->box.offset[d], end = off + p->box.extent[d];
        if (d + 2 < p->box.ndim) { /* leading (expert) dims: as they are */
            k->off[d] = off;
            k->ext[d] = p->box.extent[d];
            continue;
        }
        if (off % B != 0 || (end % B != 0 && end != t->shape[d])) {
            char bx[256];
            ferry_box_format(&p->box, bx, sizeof bx);
            return ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                              "rank %u: fp8 tensor %s: piece %s cuts a 128x128 scale block (an fp8 "
                              "piece holds whole blocks; only the tensor's last block may be partial)",
                              p->rank, model_tensor_name(l->model, p->tensor), bx);
        }
        k->off[d] = off / B;
        k->ext[d] = (end + B - 1) / B - off / B;
    }
    return FERRY_OK;
}

static ferry_status_t mirror_error(ferry_layout_t *l, const mirror_t *g, size_t n, size_t nw) {
    const ferry_model_t *m = l->model;
    uint32_t w = g[0].weight, s = m->tensors[w].partner;
    char bb[256], pb[256];
    ferry_box_t blocks;
    mirror_box(&g[0], &blocks);
    ferry_box_format(&blocks, bb, sizeof bb);
    ferry_box_format(&l->pieces[g[0].piece].box, pb, sizeof pb);
    if (nw == n)
        return ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                          "rank %u: fp8 tensor %s %s has no piece of its scale %s %s on the rank "
                          "(each fp8 piece needs the scale blocks it holds)",
                          g[0].rank, model_tensor_name(m, w), pb, model_tensor_name(m, s), bb);
    if (nw == 0)
        return ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                          "rank %u: scale tensor %s %s matches no piece of its fp8 tensor %s on the rank "
                          "(a scale piece holds the blocks of one fp8 piece)",
                          g[0].rank, model_tensor_name(m, s), pb, model_tensor_name(m, w));
    return ferry_fail(&l->err, FERRY_ERR_COVERAGE,
                      "rank %u: fp8 tensor %s %s is held %zu times but its scale %s %s %zu times",
                      g[0].rank, model_tensor_name(m, w), pb, nw, model_tensor_name(m, s), bb, n - nw);
}

static ferry_status_t check_scales(ferry_layout_t *l) {
    const ferry_model_t *m = l->model;
    if (m->nquant == 0) return FERRY_OK;
    size_t n = 0;
    for (size_t i = 0; i < l->npieces; i++) n += m->tensors[l->pieces[i].tensor].quant != FERRY_QUANT_NONE;
    if (n == 0) return FERRY_OK;
    mirror_t *keys = ferry_calloc(l->ctx, n, sizeof *keys);
    if (!keys) return ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory validating fp8 scales");
    ferry_status_t st = FERRY_OK;
    size_t k = 0;
    for (size_t i = 0; i < l->npieces && st == FERRY_OK; i++) {
        const ferry_piece_t *p = &l->pieces[i];
        const model_tensor_t *t = &m->tensors[p->tensor];
        if (t->quant == FERRY_QUANT_NONE) continue;
        if (p->box.ndim < 2 || p->box.ndim > 3) { /* ferry_model_add_fp8 / link_fp8 allow 2-d and 3-d */
            st = ferry_fail(&l->err, FERRY_ERR_INTERNAL, "fp8 tensor %s has %u dimensions",
                            model_tensor_name(m, p->tensor), p->box.ndim);
            break;
        }
        mirror_t *key = &keys[k++];
        key->rank = p->rank;
        key->piece = i;
        if (t->quant == FERRY_QUANT_FP8_BLOCK) {
            key->weight = p->tensor;
            key->side = 0;
            st = weight_key(l, p, key);
        } else {
            key->weight = t->partner;
            key->side = 1;
            key->ndim = p->box.ndim;
            for (uint32_t d = 0; d < p->box.ndim; d++) {
                key->off[d] = p->box.offset[d];
                key->ext[d] = p->box.extent[d];
            }
        }
    }
    if (st == FERRY_OK) qsort(keys, n, sizeof *keys, cmp_mirror);
    for (size_t i = 0; i < n && st == FERRY_OK;) {
        size_t j = i, nw = 0;
        for (; j < n && same_group(&keys[i], &keys[j]); j++) nw += keys[j].side == 0;
        if (2 * nw != j - i) {
            /* name a weight piece if the group has one, else the scale piece */
            st = mirror_error(l, keys + i, j - i, nw);
        }
        i = j;
    }
    ferry_free(l->ctx, keys);
    return st;
}

ferry_status_t ferry_layout_validate(ferry_layout_t *l, ferry_coverage_t *out) {
    if (!l) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_coverage_t cov;
    memset(&cov, 0, sizeof cov);
    cov.tensors = l->model->ntensors;
    cov.pieces = l->npieces;
    cov.min_replicas = UINT32_MAX;
    ferry_status_t st = check_scales(l);
    if (st == FERRY_OK) st = check_coverage(l, &cov);
    if (st == FERRY_OK) st = check_buffers(l);
    if (st != FERRY_OK) return st;
    if (cov.min_replicas == UINT32_MAX) cov.min_replicas = 0;
    if (out) *out = cov;
    return FERRY_OK;
}
