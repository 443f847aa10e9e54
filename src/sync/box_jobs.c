/* Laying out a batch of box copies for the GPU kernel (box_jobs.h): the
 * same runs as sync_box_run finds, with the outer dims in bytes. Plain C,
 * built with or without CUDA (the CPU walk in the tests uses it too). */
#include <stdbool.h>
#include <string.h>

#include "sync/box_jobs.h"

/* strided.cu reads the same layout */
_Static_assert(sizeof(sync_box_job_t) == 56 && sizeof(sync_box_dim_t) == 24, "the kernel's table layout");

size_t sync_box_table_bound(const sync_box_copy_t *jobs, size_t n) {
    size_t dims = 0;
    for (size_t i = 0; i < n; i++) dims += jobs[i].box.ndim < FERRY_MAX_DIMS ? jobs[i].box.ndim : FERRY_MAX_DIMS;
    if (n > SIZE_MAX / 2 / sizeof(sync_box_job_t) || dims > SIZE_MAX / 2 / sizeof(sync_box_dim_t)) return SIZE_MAX;
    return n * sizeof(sync_box_job_t) + dims * sizeof(sync_box_dim_t);
}

/* Largest |offset| in bytes the side reaches: fails past INT64_MAX. */
static int side_reach(const int64_t *strides, const ferry_box_t *box, uint32_t esz, int64_t *out) {
    uint64_t sum = 0;
    for (uint32_t d = 0; d < box->ndim; d++) {
        uint64_t s = strides[d] < 0 ? 0 - (uint64_t)strides[d] : (uint64_t)strides[d], t;
        if (ferry_mul_u64(s, (uint64_t)(box->extent[d] - 1), &t) || ferry_mul_u64(t, esz, &t) ||
            ferry_add_u64(sum, t, &sum) || sum > INT64_MAX)
            return -1;
    }
    *out = (int64_t)sum;
    return 0;
}

static uint32_t low_bit(uint64_t x) { return (uint32_t)(x & (~x + 1)); }

ferry_status_t sync_box_table_build(const sync_box_copy_t *jobs, size_t n, void *table, size_t cap,
                                    sync_box_batch_t *out, ferry_errbuf_t *err) {
    if (n > UINT32_MAX)
        return ferry_fail(err, FERRY_ERR_LIMIT, "%zu box copies in one batch (at most %u)", n, UINT32_MAX);
    if (n && !jobs) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%zu box copies at NULL", n);
    size_t need = n * sizeof(sync_box_job_t);
    if (cap < need || ((uintptr_t)table & 7))
        return ferry_fail(err, FERRY_ERR_LIMIT, "box copy table: %zu bytes at %p, %zu needed (8-byte aligned)", cap,
                          table, need);
    sync_box_job_t *tj = table;
    sync_box_dim_t *td = (sync_box_dim_t *)((uint8_t *)table + need);
    size_t dims_cap = (cap - need) / sizeof(sync_box_dim_t);
    sync_box_batch_t b = {0, 0, need, need, 0, 0};
    for (size_t i = 0; i < n; i++) {
        const sync_box_copy_t *c = &jobs[i];
        const ferry_box_t *box = &c->box;
        if (box->ndim > FERRY_MAX_DIMS)
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "box copy %zu: ndim %u is over %d", i, box->ndim,
                              FERRY_MAX_DIMS);
        if (c->esz != 1 && c->esz != 2 && c->esz != 4 && c->esz != 8)
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "box copy %zu: esz %u is not 1, 2, 4 or 8", i, c->esz);
        uint64_t numel = 1;
        bool empty = false;
        for (uint32_t d = 0; d < box->ndim; d++) {
            if (box->extent[d] < 0)
                return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "box copy %zu: extent[%u] = %lld is negative", i,
                                  d, (long long)box->extent[d]);
            if (box->extent[d] == 0) empty = true;
            else if (ferry_mul_u64(numel, (uint64_t)box->extent[d], &numel) || numel > INT64_MAX / 8)
                return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "box copy %zu: the box has over 2^60 elements", i);
        }
        if (empty) continue;
        if (!c->dst || !c->src)
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "box copy %zu: %s is NULL", i, c->dst ? "src" : "dst");
        int64_t packed[FERRY_MAX_DIMS], ds[FERRY_MAX_DIMS], ss[FERRY_MAX_DIMS], reach;
        int64_t pk = 1;
        for (int d = (int)box->ndim - 1; d >= 0; d--) {
            packed[d] = pk;
            pk *= box->extent[d];
        }
        memcpy(ds, c->dst_strides ? c->dst_strides : packed, box->ndim * sizeof(int64_t));
        memcpy(ss, c->src_strides ? c->src_strides : packed, box->ndim * sizeof(int64_t));
        if (side_reach(ds, box, c->esz, &reach) || side_reach(ss, box, c->esz, &reach))
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                              "box copy %zu: strides reach past 2^63 bytes from element 0", i);
        /* the run: as sync_box_run (the packed side always agrees with it) */
        uint64_t run = 1;
        int d = (int)box->ndim - 1;
        for (; d >= 0; d--) {
            if (box->extent[d] != 1 && (ds[d] != (int64_t)run || ss[d] != (int64_t)run)) break;
            run *= (uint64_t)box->extent[d];
        }
        uint32_t outer = (uint32_t)(d + 1);
        sync_box_job_t *j = &tj[b.njobs];
        j->dst = (uint64_t)(uintptr_t)c->dst;
        j->src = (uint64_t)(uintptr_t)c->src;
        j->run_bytes = run * c->esz;
        j->nruns = numel / run;
        j->dim0 = (uint32_t)b.ndims;
        j->outer = 0;
        j->unused = 0;
        uint64_t align = j->dst | j->src | j->run_bytes | 16;
        for (uint32_t k = 0; k < outer; k++) {
            if (box->extent[k] == 1) continue;
            int64_t e = box->extent[k], dst_b = ds[k] * (int64_t)c->esz, src_b = ss[k] * (int64_t)c->esz;
            align |= (uint64_t)dst_b | (uint64_t)src_b;
            sync_box_dim_t *prev = j->outer ? &td[b.ndims - 1] : NULL;
            if (prev && prev->dst_stride == dst_b * e && prev->src_stride == src_b * e) { /* flattens into prev */
                prev->extent *= e;
                prev->dst_stride = dst_b;
                prev->src_stride = src_b;
                continue;
            }
            if (b.ndims >= dims_cap)
                return ferry_fail(err, FERRY_ERR_LIMIT, "box copy table: %zu bytes are too few for its dims", cap);
            td[b.ndims++] = (sync_box_dim_t){e, dst_b, src_b};
            j->outer++;
        }
        j->vec = (uint8_t)low_bit(align);
        uint64_t pieces;
        if (j->run_bytes >= SYNC_BOX_SPLIT) {
            j->split = 1;
            j->per = (j->run_bytes + SYNC_BOX_PIECE - 1) / SYNC_BOX_PIECE;
            pieces = j->nruns * j->per; /* <= bytes: no overflow */
        } else {
            j->split = 0;
            j->per = SYNC_BOX_PIECE / j->run_bytes;
            pieces = (j->nruns + j->per - 1) / j->per;
        }
        j->piece0 = b.pieces;
        b.pieces += pieces;
        if (ferry_add_u64(b.bytes, numel * c->esz, &b.bytes))
            return ferry_fail(err, FERRY_ERR_LIMIT, "box copies 0..%zu move over 2^64 bytes", i);
        b.njobs++;
    }
    b.table_bytes = need + b.ndims * sizeof(sync_box_dim_t);
    *out = b;
    return FERRY_OK;
}
