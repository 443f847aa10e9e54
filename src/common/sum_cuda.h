/* ferry sum (common/sum.h) on a GPU: many regions of device memory summed
 * in one batch, bit-identical to ferry_sum on the CPU, at memory speed.
 *
 * One kernel hashes every 64 KiB leaf of every region (a warp per leaf,
 * xxh3's 1 KiB blocks split across its lanes), a second combines each
 * region's leaf hashes (a warp per region). Regions may start at any byte
 * and may live in a peer GPU's memory mapped here (CUDA IPC, or peer access
 * enabled): they are plain pointers the device can read.
 *
 * Thread-safety: one object per thread (or serialized calls); objects are
 * independent. Builds without CUDA have no such object (FERRY_CUDA). */
#ifndef FERRY_COMMON_SUM_CUDA_H
#define FERRY_COMMON_SUM_CUDA_H

#ifdef FERRY_CUDA
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/internal.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A region: len bytes at device_ptr (any alignment; NULL only when len is 0). */
typedef struct ferry_sum_region {
    const void *device_ptr;
    uint64_t len;
} ferry_sum_region_t;

typedef struct ferry_sum_cuda ferry_sum_cuda_t;

/* An object that sums on GPU `device` (an ordinal). It owns device scratch
 * and pinned host memory, both grow-only (ferry_sum_cuda_device_bytes).
 * Errors: FERRY_ERR_UNSUPPORTED (no GPU, no driver: ferry_cuda_init's
 * detail), FERRY_ERR_INVALID_ARGUMENT (no such device), FERRY_ERR_NO_MEMORY. */
ferry_status_t ferry_sum_cuda_create(int device, ferry_sum_cuda_t **out, ferry_errbuf_t *err);
/* Waits for a batch still running, then frees everything. NULL is ignored. */
void ferry_sum_cuda_destroy(ferry_sum_cuda_t *s);

/* Enqueues the sums of regions[0..n) on stream (a stream of the object's
 * device, or 0), after whatever the stream already holds: the regions'
 * bytes must be final when the stream reaches this work, and stay so until
 * collect returns. regions is read before the call returns. One batch at a
 * time: collect it before the next enqueue. The calling thread's current
 * device is unchanged on return.
 * Errors: FERRY_ERR_INVALID_ARGUMENT (regions NULL with n > 0, a region
 * with len > 0 and no pointer, a batch not collected), FERRY_ERR_LIMIT
 * (more than 2^32 leaves), FERRY_ERR_NO_MEMORY (scratch), FERRY_ERR_IO (a
 * CUDA call failed; detail names it). On error nothing stays enqueued. */
ferry_status_t ferry_sum_cuda_enqueue(ferry_sum_cuda_t *s, const ferry_sum_region_t *regions, size_t n,
                                      cudaStream_t stream, ferry_errbuf_t *err);

/* Waits for the batch of the last enqueue and writes its n sums to out (in
 * the regions' order; out may be NULL when n was 0). Errors:
 * FERRY_ERR_INVALID_ARGUMENT (nothing enqueued; out NULL: the batch stays),
 * FERRY_ERR_IO (the stream failed, e.g. a region the device cannot read:
 * CUDA's error, which may be sticky for the process's context; the batch is
 * dropped). */
ferry_status_t ferry_sum_cuda_collect(ferry_sum_cuda_t *s, uint64_t *out, ferry_errbuf_t *err);

/* Runs later batches on at most `blocks` thread blocks (0: as many as the
 * device holds at once, the default). Fewer blocks leave HBM bandwidth to
 * other work on the device, copy engines included, at a lower rate for the
 * sums. Not thread-safe with enqueue on the same object. */
void ferry_sum_cuda_limit_blocks(ferry_sum_cuda_t *s, unsigned blocks);

/* Device memory the object holds (scratch for the leaf table, leaf hashes
 * and sums), in bytes. */
size_t ferry_sum_cuda_device_bytes(const ferry_sum_cuda_t *s);

#ifdef __cplusplus
}
#endif
#endif

#endif
