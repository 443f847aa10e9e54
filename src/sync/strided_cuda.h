/* Box copies on a GPU: a batch of sync_box_copy_t (sync/box_jobs.h:
 * gather, scatter, strided to strided) in one kernel launch (strided.cu),
 * byte for byte what sync_gather, sync_scatter, sync_copy_box and
 * sync_box_runs (strided.c) produce. Only in CUDA builds. */
#ifndef FERRY_SYNC_STRIDED_CUDA_H
#define FERRY_SYNC_STRIDED_CUDA_H

#include "sync/box_jobs.h"

#ifdef FERRY_CUDA
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The job tables of one device's box copies: two slots, each a pinned
 * staging buffer and its device copy, grown as batches need (never shrunk).
 * Owned by the caller (destroy). Not thread-safe: one thread at a time. */
typedef struct sync_cuda_boxes sync_cuda_boxes_t;

/* For copies run by device (a CUDA ordinal). Errors: FERRY_ERR_UNSUPPORTED
 * (no CUDA, no such device), FERRY_ERR_NO_MEMORY, FERRY_ERR_IO (a CUDA call
 * failed). */
ferry_status_t sync_cuda_boxes_create(ferry_ctx_t *ctx, int device, sync_cuda_boxes_t **out, ferry_errbuf_t *err);

/* Waits for the copies still reading its tables, then frees them. NULL is fine. */
void sync_cuda_boxes_destroy(sync_cuda_boxes_t *b);

/* Queues the n copies on stream (a stream of b's device, or 0) as one table
 * upload and one kernel launch, and returns; the copies are done when the
 * stream gets there. jobs and their strides are read before it returns; the
 * memory they copy must stay valid, addressable from b's device and
 * untouched by others until then. No destination byte of the batch may
 * overlap another's or any source byte. Jobs with an empty box move
 * nothing; n == 0 queues nothing. Blocks only while the upload of the
 * batch before last from the same slot is still queued (two batches in
 * flight), or when a slot grows (until the copies reading it are done).
 * Errors (nothing queued): FERRY_ERR_INVALID_ARGUMENT naming the job
 * (ndim, esz, extent, NULL pointer, offsets past 2^63), FERRY_ERR_LIMIT,
 * FERRY_ERR_NO_MEMORY (table buffers), FERRY_ERR_IO (a CUDA call failed,
 * including an earlier batch's copy that faulted). */
ferry_status_t sync_cuda_boxes_enqueue(sync_cuda_boxes_t *b, const sync_box_copy_t *jobs, size_t n,
                                       cudaStream_t stream, ferry_errbuf_t *err);

/* Device memory its tables hold now. */
size_t sync_cuda_boxes_device_bytes(const sync_cuda_boxes_t *b);

#ifdef __cplusplus
}
#endif
#endif

#endif
