/* tests/gpu/floor.h: a streaming read of one or two buffers, the least
 * any delta encoder (old and new) or verified apply (the result) must do. */
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

#include "floor.h"

#define THREADS 256
#define UNROLL 4 /* 16-byte loads per buffer in flight per thread */

__global__ void __launch_bounds__(THREADS) floor_read(const uint4 *a, const uint4 *b, uint64_t nvec,
                                                      uint32_t key, unsigned long long *differ) {
    const uint64_t stride = (uint64_t)gridDim.x * THREADS;
    uint32_t d = 0, x = 0;
    for (uint64_t i = (uint64_t)blockIdx.x * THREADS + threadIdx.x; i < nvec; i += UNROLL * stride) {
        uint4 va[UNROLL], vb[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            const uint64_t k = i + u * stride;
            va[u] = k < nvec ? __ldcs(a + k) : make_uint4(0, 0, 0, 0);
            vb[u] = b && k < nvec ? __ldcs(b + k) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNROLL; u++) {
            d += b && (va[u].x != vb[u].x || va[u].y != vb[u].y || va[u].z != vb[u].z || va[u].w != vb[u].w);
            x ^= va[u].x ^ va[u].y ^ va[u].z ^ va[u].w; /* uses a's bytes without b */
        }
    }
    for (int o = 16; o; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
    if ((threadIdx.x & 31) == 0 && d) atomicAdd(differ, (unsigned long long)d);
    if (x == key) differ[1] = x; /* (a sink the compiler cannot drop: a's loads stay without b) */
}

static int cmp_double(const void *x, const void *y) {
    double a = *(const double *)x, b = *(const double *)y;
    return a < b ? -1 : a > b;
}

extern "C" double gpu_floor_read(const void *const *a, const void *const *b, int n, size_t bytes, int reps,
                                 cudaStream_t stream, uint64_t *differ) {
    int dev, sms = 0, per_sm = 0;
    unsigned long long *dd = NULL, hd = 0;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double *t = (double *)calloc(reps > 0 ? reps : 1, sizeof *t), out = -1;
    if (!t || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, floor_read, THREADS, 0) != cudaSuccess ||
        cudaMalloc((void **)&dd, 2 * sizeof *dd) != cudaSuccess || cudaEventCreate(&e0) != cudaSuccess ||
        cudaEventCreate(&e1) != cudaSuccess)
        goto out;
    for (int rep = -1; rep < reps; rep++) {
        if (cudaMemsetAsync(dd, 0, sizeof *dd, stream) != cudaSuccess || cudaEventRecord(e0, stream) != cudaSuccess)
            goto out;
        for (int r = 0; r < n; r++)
            floor_read<<<sms * per_sm, THREADS, 0, stream>>>((const uint4 *)a[r], b ? (const uint4 *)b[r] : NULL,
                                                            bytes / 16, 0x9e3779b9u, dd);
        float ms = 0;
        if (cudaGetLastError() != cudaSuccess || cudaEventRecord(e1, stream) != cudaSuccess || cudaEventSynchronize(e1) != cudaSuccess ||
            cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
            goto out;
        if (rep >= 0) t[rep] = ms / 1e3;
    }
    if (cudaMemcpy(&hd, dd, sizeof hd, cudaMemcpyDeviceToHost) != cudaSuccess) goto out;
    *differ = hd;
    qsort(t, reps, sizeof *t, cmp_double);
    out = t[reps / 2];
out:
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(dd);
    free(t);
    return out;
}
