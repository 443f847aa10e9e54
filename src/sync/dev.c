/* A member's GPU (sync/dev.h). */
#include "sync/dev.h"

#include <stdio.h>

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
ferry_status_t sync_dev_sums(sync_dev_t *d, const sync_dev_region_t *r, size_t n, uint64_t *out, ferry_errbuf_t *err) {
    (void)d, (void)r, (void)n, (void)out;
    return ferry_cuda_init(err);
}
ferry_status_t sync_dev_wait(sync_dev_t *d, ferry_errbuf_t *err) {
    (void)d;
    return ferry_cuda_init(err);
}

#else

#include "common/sum_cuda.h"
#include "sync/strided_cuda.h"

struct sync_dev {
    ferry_ctx_t *ctx;
    int device;
    cudaStream_t stream;
    ferry_sum_cuda_t *sum;
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
    if (st == FERRY_OK) st = ferry_sum_cuda_create(device, &d->sum, err);
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
    ferry_sum_cuda_destroy(d->sum);
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
    if (e == cudaSuccess && (e = cudaMemset(p, 0, n ? n : 1)) != cudaSuccess) {
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
    int64_t b = d->bytes + (int64_t)ferry_sum_cuda_device_bytes(d->sum) + (int64_t)sync_cuda_boxes_device_bytes(d->boxes);
    return b > 0 ? (uint64_t)b : 0;
}

ferry_status_t sync_dev_boxes(sync_dev_t *d, const sync_dev_box_t *jobs, size_t n, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    int prev = sync_dev_enter(d);
    ferry_status_t st = sync_cuda_boxes_enqueue(d->boxes, jobs, n, d->stream, err);
    sync_dev_leave(d, prev);
    return st;
}

ferry_status_t sync_dev_copy(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaMemcpyAsync(dst, src, n, cudaMemcpyDefault, d->stream);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaMemcpyAsync");
}

ferry_status_t sync_dev_sums(sync_dev_t *d, const sync_dev_region_t *r, size_t n, uint64_t *out, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    if (ferry_grow(d->ctx, (void **)&d->regions, sizeof *d->regions, &d->cap_regions, n) != 0)
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < n; i++) d->regions[i] = (ferry_sum_region_t){.device_ptr = r[i].ptr, .len = r[i].len};
    int prev = sync_dev_enter(d);
    ferry_status_t st = ferry_sum_cuda_enqueue(d->sum, d->regions, n, d->stream, err);
    if (st == FERRY_OK) st = ferry_sum_cuda_collect(d->sum, out, err);
    sync_dev_leave(d, prev);
    return st;
}

ferry_status_t sync_dev_wait(sync_dev_t *d, ferry_errbuf_t *err) {
    int prev = sync_dev_enter(d);
    cudaError_t e = cudaStreamSynchronize(d->stream);
    sync_dev_leave(d, prev);
    return e == cudaSuccess ? FERRY_OK : ferry_cuda_fail(err, FERRY_ERR_IO, e, "waiting for the GPU");
}

#endif
