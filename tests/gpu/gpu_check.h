/* Shared by the GPU tests: CUDA calls that must succeed, and the skip (77)
 * where no GPU can be used. */
#ifndef FERRY_TESTS_GPU_CHECK_H
#define FERRY_TESTS_GPU_CHECK_H

#include <cuda_runtime_api.h>

#include "check.h"
#include "common/cuda.h"

#define CUDA_OK(call)                                                                          \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

#define CU_OK(call)                                                                            \
    do {                                                                                       \
        CUresult r_ = (call);                                                                  \
        if (r_ != CUDA_SUCCESS) {                                                              \
            fprintf(stderr, "%s:%d: %s: CUDA driver error %d\n", __FILE__, __LINE__, #call, (int)r_); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* Exits 77 (skipped) when this process cannot use a GPU; returns the count. */
static inline int gpu_require(void) {
    ferry_errbuf_t err = {{0}};
    if (ferry_cuda_init(&err) != FERRY_OK) {
        printf("skipped: %s\n", err.text);
        exit(77);
    }
    int n = 0;
    CUDA_OK(cudaGetDeviceCount(&n));
    return n;
}

/* A byte of the test pattern at offset off (seed picks the pattern). */
static inline uint8_t gpu_pattern(uint64_t off, uint32_t seed) {
    uint64_t x = (off + seed * 0x1000193ull) * 0x9e3779b97f4a7c15ull;
    return (uint8_t)(x >> 56);
}

/* Fills n bytes of device memory with the pattern from offset off. */
static inline void gpu_fill(void *dev, size_t n, uint64_t off, uint32_t seed) {
    uint8_t *h = malloc(n ? n : 1);
    CHECK(h);
    for (size_t i = 0; i < n; i++) h[i] = gpu_pattern(off + i, seed);
    CUDA_OK(cudaMemcpy(dev, h, n, cudaMemcpyHostToDevice));
    free(h);
}

/* Whether n host bytes hold the pattern from offset off; prints the first difference. */
static inline int host_matches(const uint8_t *h, size_t n, uint64_t off, uint32_t seed, const char *what) {
    for (size_t i = 0; i < n; i++)
        if (h[i] != gpu_pattern(off + i, seed)) {
            fprintf(stderr, "%s: byte %zu is %02x, want %02x\n", what, i, h[i], gpu_pattern(off + i, seed));
            return 0;
        }
    return 1;
}

/* The same for device memory. */
static inline int gpu_matches(const void *dev, size_t n, uint64_t off, uint32_t seed, const char *what) {
    uint8_t *h = malloc(n ? n : 1);
    CHECK(h);
    CUDA_OK(cudaMemcpy(h, dev, n, cudaMemcpyDeviceToHost));
    int ok = host_matches(h, n, off, seed, what);
    free(h);
    return ok;
}

#endif
