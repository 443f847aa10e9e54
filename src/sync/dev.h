/* A member whose buffers are GPU memory (FERRY_MEM_CUDA): its device, one
 * stream its work runs on in order, the kernels that pack, scatter and
 * checksum on the GPU (sync/strided.cu, common/sum.cu), and a count of the
 * device memory ferry holds for it (reported in publish and update infos).
 * Without CUDA in the build, creating one fails with FERRY_ERR_UNSUPPORTED. */
#ifndef FERRY_SYNC_DEV_H
#define FERRY_SYNC_DEV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"
#include "ferry/layout.h"
#include "sync/box_jobs.h"

typedef struct sync_dev sync_dev_t;

/* One box between two regions of GPU memory (either may be another GPU's
 * memory opened here): strides NULL means packed row-major. */
typedef sync_box_copy_t sync_dev_box_t;

/* A contiguous region to checksum (common/sum.h's definition). */
typedef struct sync_dev_region {
    const void *ptr;
    uint64_t len;
} sync_dev_region_t;

ferry_status_t sync_dev_create(ferry_ctx_t *ctx, int device, sync_dev_t **out, ferry_errbuf_t *err);
void sync_dev_destroy(sync_dev_t *d);
int sync_dev_device(const sync_dev_t *d);

/* Makes the member's device current on the calling thread; returns what to
 * give sync_dev_leave (the caller's device is restored there). */
int sync_dev_enter(const sync_dev_t *d);
void sync_dev_leave(const sync_dev_t *d, int prev);

/* Zeroed device memory for the member, counted in sync_dev_bytes. */
ferry_status_t sync_dev_alloc(sync_dev_t *d, size_t n, void **out, ferry_errbuf_t *err);
void sync_dev_free(sync_dev_t *d, void *p, size_t n);
/* Counts memory allocated elsewhere for the member (transport
 * registrations it owns), or uncounts it (negative). */
void sync_dev_account(sync_dev_t *d, int64_t n);
/* Device memory ferry holds for the member: its allocations and the
 * kernels' scratch. */
uint64_t sync_dev_bytes(const sync_dev_t *d);

/* Enqueue on the member's stream, in order. */
ferry_status_t sync_dev_boxes(sync_dev_t *d, const sync_dev_box_t *jobs, size_t n, ferry_errbuf_t *err);
ferry_status_t sync_dev_copy(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err);
/* FP8 block quantization of a matrix whose rows lie apart
 * (ferry_fp8_cuda_block_quantize_ld: leading dimensions in elements), all
 * in GPU memory, on the member's stream. */
ferry_status_t sync_dev_fp8(sync_dev_t *d, ferry_dtype_t dtype, const void *src, uint64_t src_ld, uint64_t rows,
                            uint64_t cols, uint32_t flags, uint8_t *dst, uint64_t dst_ld, float *scale,
                            uint64_t scale_ld, ferry_errbuf_t *err);
/* Waits for everything enqueued (both streams). */
ferry_status_t sync_dev_wait(sync_dev_t *d, ferry_errbuf_t *err);

/* A reader's copies from other processes' GPU memory (views), on a second
 * stream of the member (the copy engines) so that they overlap the
 * kernels; the streams are ordered on the GPU, never by waiting here:
 *  - sync_dev_copy_async queues a copy (nothing moves yet; a failure
 *    drops the copies queued since the last ordering);
 *  - sync_dev_copies_drop forgets the queued copies (a batch that failed);
 *  - sync_dev_copies_then_compute puts the queued copies on the copy
 *    stream as one batch and makes compute work enqueued from now on wait
 *    for every copy so far;
 *  - sync_dev_mark_compute(slot) marks the compute stream's progress, and
 *    sync_dev_copy_after_mark(slot) makes later copies wait for that mark
 *    (a scratch area is reused only once its last reader is done). */
ferry_status_t sync_dev_copy_async(sync_dev_t *d, void *dst, const void *src, size_t n, ferry_errbuf_t *err);
void sync_dev_copies_drop(sync_dev_t *d);
ferry_status_t sync_dev_copies_then_compute(sync_dev_t *d, ferry_errbuf_t *err);
ferry_status_t sync_dev_mark_compute(sync_dev_t *d, int slot, ferry_errbuf_t *err);
ferry_status_t sync_dev_copy_after_mark(sync_dev_t *d, int slot, ferry_errbuf_t *err);
/* Checksums of n regions after everything enqueued before on the compute
 * stream, without waiting: got[idx[k]] (got[k] if idx is NULL) receives
 * region k's sum by sync_dev_sums_flush (several batches stay in flight;
 * idx is copied). */
ferry_status_t sync_dev_sums_async(sync_dev_t *d, const sync_dev_region_t *r, size_t n, uint64_t *got,
                                   const size_t *idx, ferry_errbuf_t *err);
/* Waits for every batch of sync_dev_sums_async and both streams, and
 * writes the sums. */
ferry_status_t sync_dev_sums_flush(sync_dev_t *d, ferry_errbuf_t *err);

#endif
