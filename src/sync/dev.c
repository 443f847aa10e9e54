/* A member's GPU (sync/dev.h). */
#include "sync/dev.h"

#include <stdio.h>
#include <string.h>

#include "common/cuda.h"

#ifndef FERRY_CUDA

ferry_status_t sync_dev_create(ferry_ctx_t *ctx, int device, sync_dev_t **out, ferry_errbuf_t *err) {
    (void)ctx, (void)device, (void)out;
    return ferry_cuda_init(err);
}
void sync_dev_destroy(sync_dev_t *d) { (void)d; }
int sync_dev_device(const sync_dev_t *d) {
    (void)d;
    return -1;
}
int sync_dev_enter(const sync_dev_t *d) {
    (void)d;
    return -1;
}
void sync_dev_leave(const sync_dev_t *d, int prev) { (void)d, (void)prev; }
ferry_status_t sync_dev_alloc(sync_dev_t *d, size_t n, void **out, ferry_errbuf_t *err) {
    (void)d, (void)n, (void)out;
    return ferry_cuda_init(err);
}
void sync_dev_free(sync_dev_t *d, void *p, size_t n) { (void)d, (void)p, (void)n; }
void sync_dev_account(sync_dev_t *d, int64_t n) { (void)d, (void)n; }
uint64_t sync_dev_bytes(const sync_dev_t *d) {
    (void)d;
    return 0;
}
ferry_status_t sync_dev_boxes(sync_dev_t *d, const sync_dev_box_t *jobs, size_t n, ferry_errbuf_t *err) {
    (void)d, (void)jobs, (void)n;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_copy(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err) {
    (void)d, (void)dst, (void)src, (void)n;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_fp8(sync_dev_t *d, ferry_dtype_t dtype, const void *src, uint64_t src_ld, uint64_t rows,
                            uint64_t cols, uint32_t flags, uint8_t *dst, uint64_t dst_ld, float *scale,
                            uint64_t scale_ld, ferry_errbuf_t *err) {
    (void)d, (void)dtype, (void)src, (void)src_ld, (void)rows, (void)cols, (void)flags, (void)dst, (void)dst_ld;
    (void)scale, (void)scale_ld;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_wait(sync_dev_t *d, ferry_errbuf_t *err) {
    (void)d;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_copy_async(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err) {
    (void)d, (void)dst, (void)src, (void)n;
    return ferry_cuda_init(err);
}
void sync_dev_copies_drop(sync_dev_t *d) { (void)d; }
ferry_status_t sync_dev_copies_then_compute(sync_dev_t *d, ferry_errbuf_t *err) {
    (void)d;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_mark_compute(sync_dev_t *d, int slot, ferry_errbuf_t *err) {
    (void)d, (void)slot;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_copy_after_mark(sync_dev_t *d, int slot, ferry_errbuf_t *err) {
    (void)d, (void)slot;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_sums_async(sync_dev_t *d, const sync_dev_region_t *r, size_t n, uint64_t *got,
                                   const size_t *idx, ferry_errbuf_t *err) {
    (void)d, (void)r, (void)n, (void)got, (void)idx;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_sums_flush(sync_dev_t *d, ferry_errbuf_t *err) {
    (void)d;
    return ferry_cuda_init(err);
}

#else

#include "codec/fp8_cuda.h"

#include "common/sum_cuda.h"
#include "sync/strided_cuda.h"

#define RING 8 /* batches of checksums in flight */

typedef struct ring_slot {
    ferry_sum_cuda_t *sum;
    bool busy;
    size_t n, cap;
    uint64_t *got;  /* where collected sums go: got[idx[k]], or got[k] */
    bool indexed;
    size_t *idx;
    uint64_t *out;
} ring_slot_t;

struct sync_dev {
    ferry_ctx_t *ctx;
    int device;
    cudaStream_t stream;    /* compute: kernels, in order */
    cudaStream_t copy;      /* a reader's copies from views */
    cudaEvent_t copied, mark[2];
    /* the copies queued for the next sync_dev_copies_then_compute */
    void **qdst;
    const void **qsrc;
    size_t *qlen, nq, cap_qdst, cap_qsrc, cap_qlen;
    ring_slot_t ring[RING];
    uint32_t next;
    sync_cuda_boxes_t *boxes;
    ferry_sum_region_t *regions;
    size_t cap_regions;
    int64_t bytes;          /* allocations and accounted registrations */
};

ferry_status_t sync_dev_create(ferry_ctx_t *ctx, int device, sync_dev_t **out, ferry_errbuf_t *err) {
    ferry_status_t st = ferry_cuda_init(err);
    if (st) return st;
    int n = 0;
    cudaGetDeviceCount(&n);
    if (device < 0 || device >= n)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "CUDA device %d does not exist (this process sees %d)", device, n);
    sync_dev_t *d = ferry_calloc(ctx, 1, sizeof *d);
    if (!d) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    d->ctx = ctx;
    d->device = device;
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaStreamCreateWithFlags(&d->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        d->stream = NULL;
        st = ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaStreamCreate");
    }
    if (st == FERRY_OK) {
        e = cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&d->copied, cudaEventDisableTiming);
        for (int i = 0; i < 2 && e == cudaSuccess; i++) e = cudaEventCreateWithFlags(&d->mark[i], cudaEventDisableTiming);
        if (e != cudaSuccess) st = ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaStreamCreate (copies)");
    }
    /* A member's checksums run beside transfers that read or write the same
     * HBM (a writer's while readers pull, a reader's while its next batch
     * lands): one block per SM leaves the copy engines their bandwidth and
     * still sums faster than NVLink moves bytes. Qwen3-8B GPU 0 -> GPU 1:
     * 0.0438 s per update against 0.0460 s with every block the GPU holds
     * (docs/benchmarks.md). */
    int sms = 0;
    if (st == FERRY_OK && cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) sms = 0;
    for (int i = 0; i < RING && st == FERRY_OK; i++) {
        st = ferry_sum_cuda_create(device, &d->ring[i].sum, err);
        if (st == FERRY_OK) ferry_sum_cuda_limit_blocks(d->ring[i].sum, (unsigned)(sms > 0 ? sms : 0));
    }
    if (st == FERRY_OK) st = sync_cuda_boxes_create(ctx, device, &d->boxes, err);
    sync_dev_leave(d, prev);
    if (st) {
        sync_dev_destroy(d);
        return st;
    }
    *out = d;
    return FERRY_OK;
}

void sync_dev_destroy(sync_dev_t *d) {
    if (!d) return;
    int prev = sync_dev_enter(d);
    if (d->stream) {
        cudaStreamSynchronize(d->stream);
        cudaStreamDestroy(d->stream);
    }
    if (d->copy) {
        cudaStreamSynchronize(d->copy);
        cudaStreamDestroy(d->copy);
    }
    if (d->copied) cudaEventDestroy(d->copied);
    ferry_free(d->ctx, d->qdst);
    ferry_free(d->ctx, d->qsrc);
    ferry_free(d->ctx, d->qlen);
    for (int i = 0; i < 2; i++)
        if (d->mark[i]) cudaEventDestroy(d->mark[i]);
    for (int i = 0; i < RING; i++) {
        ferry_sum_cuda_destroy(d->ring[i].sum);
        ferry_free(d->ctx, d->ring[i].idx);
        ferry_free(d->ctx, d->ring[i].out);
    }
    sync_cuda_boxes_destroy(d->boxes);
    sync_dev_leave(d, prev);
    ferry_free(d->ctx, d->regions);
    ferry_free(d->ctx, d);
}

int sync_dev_device(const sync_dev_t *d) { return d ? d->device : -1; }

int sync_dev_enter(const sync_dev_t *d) {
    int prev = -1;
    if (!d || cudaGetDevice(&prev) != cudaSuccess) return -1;
    if (prev != d->device) cudaSetDevice(d->device);
    return prev;
}

void sync_dev_leave(const sync_dev_t *d, int prev) {
    if (d && prev >= 0 && prev != d->device) cudaSetDevice(prev);
}

ferry_status_t sync_dev_alloc(sync_dev_t *d, size_t n, void **out, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n ? n : 1);
    /* Zeroed on the member's stream, and waited for: cudaMemset runs on the
       default stream, returns before it is done, and ferry's non-blocking
       streams do not wait for it, so it could land on bytes an update had
       just written there (test_sync --gpu failed 2 runs of 10 on the H200
       without this, 2026-11-29: a reader's version verified, then 160
       elements of it, one whole 20 x 8 tensor, found wrong; with it, 19
       runs of 19 passed). */
    if (e == cudaSuccess && ((e = cudaMemsetAsync(p, 0, n ? n : 1, d->stream)) != cudaSuccess ||
                             (e = cudaStreamSynchronize(d->stream)) != cudaSuccess)) {
        cudaFree(p);
        p = NULL;
    }
    sync_dev_leave(d, prev);
    if (e != cudaSuccess) {
        cudaGetLastError();
        char what[96];
        snprintf(what, sizeof what, "allocating %zu bytes on GPU %d", n, d->device);
        return ferry_cuda_fail(err, FERRY_ERR_NO_MEMORY, e, what);
    }
    d->bytes += (int64_t)n;
    *out = p;
    return FERRY_OK;
}

void sync_dev_free(sync_dev_t *d, void *p, size_t n) {
    if (!p) return;
    int prev = sync_dev_enter(d);
    cudaStreamSynchronize(d->stream); /* nothing enqueued may still use it */
    cudaFree(p);
    sync_dev_leave(d, prev);
    d->bytes -= (int64_t)n;
}

void sync_dev_account(sync_dev_t *d, int64_t n) {
    if (d) d->bytes += n;
}

uint64_t sync_dev_bytes(const sync_dev_t *d) {
    if (!d) return 0;
    int64_t b = d->bytes + (int64_t)sync_cuda_boxes_device_bytes(d->boxes);
    for (int i = 0; i < RING; i++) b += (int64_t)ferry_sum_cuda_device_bytes(d->ring[i].sum);
    return b > 0 ? (uint64_t)b : 0;
}

ferry_status_t sync_dev_boxes(sync_dev_t *d, const sync_dev_box_t *jobs, size_t n, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    int prev = sync_dev_enter(d);
    ferry_status_t st = sync_cuda_boxes_enqueue(d->boxes, jobs, n, d->stream, err);
    sync_dev_leave(d, prev);
    return st;
}

ferry_status_t sync_dev_fp8(sync_dev_t *d, ferry_dtype_t dtype, const void *src, uint64_t src_ld, uint64_t rows,
                            uint64_t cols, uint32_t flags, uint8_t *dst, uint64_t dst_ld, float *scale,
                            uint64_t scale_ld, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    ferry_status_t st = ferry_fp8_cuda_block_quantize_ld(dtype, src, src_ld, rows, cols, flags, dst, dst_ld, scale,
                                                         scale_ld, d->stream);
    sync_dev_leave(d, prev);
    return st == FERRY_OK ? FERRY_OK : ferry_fail(err, st, "quantizing to fp8 on GPU %d failed", d->device);
}

ferry_status_t sync_dev_copy(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, d->stream);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaMemcpyAsync");
}


ferry_status_t sync_dev_wait(sync_dev_t *d, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaStreamSynchronize(d->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(d->copy);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "waiting for the GPU");
}

ferry_status_t sync_dev_copy_async(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    if (ferry_grow(d->ctx, (void **)&d->qdst, sizeof *d->qdst, &d->cap_qdst, d->nq + 1) != 0 ||
        ferry_grow(d->ctx, (void **)&d->qsrc, sizeof *d->qsrc, &d->cap_qsrc, d->nq + 1) != 0 ||
        ferry_grow(d->ctx, (void **)&d->qlen, sizeof *d->qlen, &d->cap_qlen, d->nq + 1) != 0)
        return d->nq = 0, ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory"); /* (the batch fails whole) */
    d->qdst[d->nq] = dst;
    d->qsrc[d->nq] = src;
    d->qlen[d->nq++] = n;
    return FERRY_OK;
}

/* The queued copies as one cudaMemcpyBatchAsync: the driver spreads a
 * batch over the copy engines, where one cudaMemcpyAsync per run leaves
 * them idle between runs (a resharded layer is runs of 1-4 MiB, each a few
 * microseconds on NVLink: 0.0492 s against 0.0462 s per Qwen3-8B update,
 * docs/benchmarks.md). Destinations never overlap, so the copies' order
 * within the batch does not matter. */
static cudaError_t copy_queued(sync_dev_t *d) {
    if (d->nq == 0) return cudaSuccess;
    struct cudaMemcpyAttributes a;
    memset(&a, 0, sizeof a);
    a.srcAccessOrder = cudaMemcpySrcAccessOrderStream; /* sources stay put until the stream gets there */
    size_t first = 0;
#if CUDART_VERSION >= 13000
    cudaError_t e = cudaMemcpyBatchAsync((void *const *)d->qdst, (const void *const *)d->qsrc, d->qlen, d->nq, &a,
                                         &first, 1, d->copy);
#else /* (12.8's call has another signature; before it, none) */
    (void)a, (void)first;
    cudaError_t e = cudaSuccess;
    for (size_t i = 0; i < d->nq && e == cudaSuccess; i++)
        e = cudaMemcpyAsync(d->qdst[i], d->qsrc[i], d->qlen[i], cudaMemcpyDefault, d->copy);
#endif
    d->nq = 0;
    return e;
}

void sync_dev_copies_drop(sync_dev_t *d) { d->nq = 0; }

ferry_status_t sync_dev_copies_then_compute(sync_dev_t *d, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    cudaError_t e = copy_queued(d);
    if (e != cudaSuccess) {
        sync_dev_leave(d, prev);
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaMemcpyBatchAsync (copies from views)");
    }
    e = cudaEventRecord(d->copied, d->copy);
    if (e == cudaSuccess) e = cudaStreamWaitEvent(d->stream, d->copied, 0);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "ordering copies before kernels");
}

ferry_status_t sync_dev_mark_compute(sync_dev_t *d, int slot, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaEventRecord(d->mark[slot & 1], d->stream);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaEventRecord");
}

ferry_status_t sync_dev_copy_after_mark(sync_dev_t *d, int slot, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaStreamWaitEvent(d->copy, d->mark[slot & 1], 0);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "ordering kernels before copies");
}

/* Collects a ring slot's batch into its destinations. */
static ferry_status_t ring_collect(sync_dev_t *d, ring_slot_t *s, ferry_errbuf_t *err) {
    if (!s->busy) return FERRY_OK;
    s->busy = false;
    ferry_status_t st = ferry_sum_cuda_collect(s->sum, s->out, err);
    for (size_t k = 0; k < s->n && st == FERRY_OK; k++) s->got[s->indexed ? s->idx[k] : k] = s->out[k];
    (void)d;
    return st;
}

ferry_status_t sync_dev_sums_async(sync_dev_t *d, const sync_dev_region_t *r, size_t n, uint64_t *got,
                                   const size_t *idx, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    ring_slot_t *s = &d->ring[d->next++ % RING];
    int prev = sync_dev_enter(d);
    ferry_status_t st = ring_collect(d, s, err); /* its batch from RING batches ago */
    if (st == FERRY_OK && n > s->cap) {
        size_t *idx2 = ferry_realloc(d->ctx, s->idx, n * sizeof *idx2);
        if (idx2) s->idx = idx2;
        uint64_t *out2 = idx2 ? ferry_realloc(d->ctx, s->out, n * sizeof *out2) : NULL;
        if (out2) s->out = out2;
        if (!idx2 || !out2) st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
        else s->cap = n;
    }
    if (st == FERRY_OK && ferry_grow(d->ctx, (void **)&d->regions, sizeof *d->regions, &d->cap_regions, n) != 0)
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    if (st == FERRY_OK) {
        for (size_t i = 0; i < n; i++) d->regions[i] = (ferry_sum_region_t){.device_ptr = r[i].ptr, .len = r[i].len};
        if (idx) memcpy(s->idx, idx, n * sizeof *idx);
        st = ferry_sum_cuda_enqueue(s->sum, d->regions, n, d->stream, err);
    }
    if (st == FERRY_OK) {
        s->busy = true;
        s->n = n;
        s->got = got;
        s->indexed = idx != NULL;
    }
    sync_dev_leave(d, prev);
    return st;
}

ferry_status_t sync_dev_sums_flush(sync_dev_t *d, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    ferry_status_t st = FERRY_OK;
    for (int i = 0; i < RING; i++) {
        ferry_status_t s2 = ring_collect(d, &d->ring[i], err);
        if (st == FERRY_OK) st = s2;
    }
    sync_dev_leave(d, prev);
    if (st == FERRY_OK) st = sync_dev_wait(d, err);
    return st;
}


#endif
