/* `ferry bench xport --device cuda` buffers (bench_gpu.h). */
#include "bench_gpu.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef FERRY_CUDA
#include <cuda_runtime_api.h>
#endif

/* The owner's byte at offset k: never 0 (the reader's buffer starts zeroed),
 * different from byte to byte and from page to page, so a get that moved
 * nothing, or the wrong range, shows. bench_gpu_fill computes it page by
 * page without a division. */
static uint8_t bench_gpu_pat(uint64_t k) {
    return (uint8_t)(1 + ((k & 4095) * 7 + (k >> 12) * 13 + (k >> 20)) % 255);
}

#ifndef FERRY_CUDA

void *bench_gpu_alloc(size_t n, char *err, size_t size) {
    (void)n;
    snprintf(err, size, "built without CUDA");
    return NULL;
}
void bench_gpu_free(void *p) { (void)p; }
bool bench_gpu_fill(void *p, size_t n, char *err, size_t size) {
    (void)p, (void)n;
    snprintf(err, size, "built without CUDA");
    return false;
}
bool bench_gpu_check(const void *p, size_t n, char *err, size_t size) {
    (void)p, (void)n, (void)bench_gpu_pat;
    snprintf(err, size, "built without CUDA");
    return false;
}

#else

void *bench_gpu_alloc(size_t n, char *err, size_t size) {
    void *p = NULL;
    cudaError_t e = cudaMalloc(&p, n);
    if (e == cudaSuccess && (e = cudaMemset(p, 0, n)) == cudaSuccess) e = cudaDeviceSynchronize();
    if (e != cudaSuccess) {
        int d = -1;
        cudaGetDevice(&d);
        snprintf(err, size, "%zu bytes on GPU %d: %s", n, d, cudaGetErrorString(e));
        if (p) cudaFree(p);
        return NULL;
    }
    return p;
}

void bench_gpu_free(void *p) {
    if (p) cudaFree(p);
}

bool bench_gpu_fill(void *p, size_t n, char *err, size_t size) {
    enum { CHUNK = 16 << 20 }; /* a multiple of the 4 KiB page */
    uint8_t *h = malloc(n < CHUNK ? n : CHUNK);
    if (!h) {
        snprintf(err, size, "out of host memory");
        return false;
    }
    cudaError_t e = cudaSuccess;
    for (size_t at = 0; at < n && e == cudaSuccess; at += CHUNK) {
        size_t len = n - at < CHUNK ? n - at : CHUNK;
        for (size_t pg = 0; pg < len; pg += 4096) {
            uint64_t k = at + pg;
            unsigned v = (unsigned)(((k >> 12) * 13 + (k >> 20)) % 255);
            size_t end = len - pg < 4096 ? len - pg : 4096;
            for (size_t i = 0; i < end; i++) {
                h[pg + i] = (uint8_t)(1 + v);
                v += 7;
                if (v >= 255) v -= 255;
            }
        }
        e = cudaMemcpy((uint8_t *)p + at, h, len, cudaMemcpyHostToDevice);
    }
    free(h);
    if (e != cudaSuccess) snprintf(err, size, "filling %zu bytes of GPU memory: %s", n, cudaGetErrorString(e));
    return e == cudaSuccess;
}

bool bench_gpu_check(const void *p, size_t n, char *err, size_t size) {
    /* 64 bytes at the ends, around page boundaries and inside */
    uint64_t at[] = {0, 4096 - 32, n / 3, n / 2 + 4099, n > 4096 ? n - 4096 - 32 : 0, n > 64 ? n - 64 : 0};
    for (size_t a = 0; a < sizeof at / sizeof at[0]; a++) {
        uint8_t got[64];
        if (at[a] >= n) continue;
        size_t len = n - at[a] < sizeof got ? n - at[a] : sizeof got;
        cudaError_t e = cudaMemcpy(got, (const uint8_t *)p + at[a], len, cudaMemcpyDeviceToHost);
        if (e != cudaSuccess) {
            snprintf(err, size, "reading back %zu bytes at offset %llu: %s", len, (unsigned long long)at[a],
                     cudaGetErrorString(e));
            return false;
        }
        for (size_t i = 0; i < len; i++) {
            uint64_t k = at[a] + i;
            if (got[i] != bench_gpu_pat(k)) {
                snprintf(err, size, "byte %llu of %zu is 0x%02x, the owner's is 0x%02x", (unsigned long long)k, n, got[i],
                         bench_gpu_pat(k));
                return false;
            }
        }
    }
    return true;
}

#endif
