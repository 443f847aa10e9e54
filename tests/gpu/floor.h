/* Physical floors for the GPU benchmarks: what any kernel that reads the
 * same bytes once costs on this GPU, timed in the same run as the kernel
 * it bounds (tests/gpu/floor.cu). */
#ifndef FERRY_TESTS_GPU_FLOOR_H
#define FERRY_TESTS_GPU_FLOOR_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Reads a[r] (and b[r] when b is not NULL) for r < n, `bytes` each (a
 * multiple of 16, 16-aligned), once, with 16-byte loads from every SM at
 * full occupancy; *differ gets the number of 16-byte vectors where a[r] and
 * b[r] differ (0 without b), so the reads cannot be optimized away. Returns
 * the median seconds of `reps` timed passes (after one warm-up) on stream,
 * or a negative number when a CUDA call failed. */
double gpu_floor_read(const void *const *a, const void *const *b, int n, size_t bytes, int reps,
                      cudaStream_t stream, uint64_t *differ);

#ifdef __cplusplus
}
#endif

#endif
