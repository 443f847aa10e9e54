/* Applying deltas (docs/delta-format.md) to regions in GPU memory, on the
 * GPU: many regions in one batch, each verified and either wholly the next
 * version or exactly as before, as ferry_delta_apply does on the CPU. The
 * results are those of ferry_delta_apply, byte for byte, and deltas encoded
 * on the CPU apply here unchanged.
 *
 * The frames are in host memory; the object copies them to the GPU,
 * parses and checks their headers on the CPU meanwhile (ferry_delta_peek;
 * the copy and the checks overlap where the frames are in pinned memory),
 * and runs every other check and every write there (codec/delta.cu says
 * how): record checksums, the class streams, the changes written in place,
 * each chunk's result against its checksum. A region that fails is
 * restored on the GPU from the changes it logged, then hashed once more to
 * tell a wrong base (FERRY_ERR_MISMATCH) from damaged data
 * (FERRY_ERR_CORRUPT).
 *
 * Formats 1 and 2 both apply; format 2 (class streams cut at sub-blocks)
 * decodes far more of its streams at once, and a batch of it is applied in
 * groups of its items, each group's check and decode passes starting once
 * its own frames are on the device (ferry_delta_cuda_times_t says more).
 * The object has three streams of its own besides the caller's,
 * non-blocking: one copies the frames, two take the groups' check and
 * decode passes in turn (at the device's highest stream priority); events
 * order them after what the caller's stream holds, and the write pass on
 * the caller's stream after them. It needs a device with unified
 * addressing (every 64-bit CUDA platform): kernels read its tables from
 * pinned host memory.
 *
 * Device memory it holds (grow-only, ferry_delta_cuda_device_bytes): the
 * batch's frames, 12 bytes per changed element (the decoded changes, then
 * the undo log; format 2 reserves the most its streams' bits can hold,
 * 1.25x to 1.8x as many), 32 bytes per format 2 sub-stream, the raw chunks'
 * old contents and about 100 bytes per chunk; the chunk and class tables
 * again in pinned host memory. A batch in groups sizes them from its
 * first group, scaled to all of its frames. Callers bound it by the
 * batches they pass.
 *
 * Thread-safety: one object per thread (or serialized calls); objects are
 * independent. Builds without CUDA have no such object (FERRY_CUDA). */
#ifndef FERRY_CODEC_DELTA_CUDA_H
#define FERRY_CODEC_DELTA_CUDA_H

#ifdef FERRY_CUDA
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/internal.h"
#include "ferry/codec.h"

typedef struct ferry_delta_cuda ferry_delta_cuda_t;

/* An object that applies deltas on GPU `device` (an ordinal). Errors:
 * FERRY_ERR_UNSUPPORTED (no GPU, no driver), FERRY_ERR_INVALID_ARGUMENT (no
 * such device), FERRY_ERR_NO_MEMORY. */
ferry_status_t ferry_delta_cuda_create(int device, ferry_delta_cuda_t **out, ferry_errbuf_t *err);
/* Frees everything. NULL is ignored. */
void ferry_delta_cuda_destroy(ferry_delta_cuda_t *d);

/* One region and the delta to apply to it. */
typedef struct ferry_delta_cuda_item {
    const void *delta;     /* the delta frame, host memory (pageable or pinned) */
    size_t len;
    void *region;          /* elems elements of dtype in memory the device writes (its own, or a
                              peer's mapped here), aligned to the element size; regions of one
                              batch do not overlap */
    ferry_dtype_t dtype;   /* the region's: the delta's must be the same */
    uint64_t elems;
    uint64_t base_version; /* the version the region holds, or FERRY_DELTA_ANY_BASE */
    ferry_status_t status; /* out: FERRY_OK, or why this region was left as it was */
} ferry_delta_cuda_item_t;

/* Applies items[0..n) on stream (of the object's device, or 0) after what
 * the stream holds, and returns once done (the regions' bytes must not
 * change meanwhile except by this call). Every region either becomes its
 * delta's next version, verified, or stays exactly as it was: items[i].status
 * says which. Returns FERRY_OK when every item applied, else the status of
 * the first that did not, with err's detail naming it ("delta 3 of 8: ...").
 * Per item: FERRY_ERR_MISMATCH (the delta is for another dtype, size,
 * version or base contents), FERRY_ERR_CORRUPT (damaged delta),
 * FERRY_ERR_UNSUPPORTED (a delta format this ferry does not read),
 * FERRY_ERR_INVALID_ARGUMENT (no delta, a region that is NULL or not
 * aligned). For the whole batch: FERRY_ERR_INVALID_ARGUMENT (items NULL with
 * n > 0), FERRY_ERR_NO_MEMORY (scratch: a batch that outgrows the object's
 * tables once started is applied in parts, each growing them first; the
 * items of the part that could not have them and those after it say
 * FERRY_ERR_NO_MEMORY and are as they were, earlier parts' items say what
 * became of them), FERRY_ERR_IO (a CUDA call failed, e.g. a region the
 * device cannot write: every item then says FERRY_ERR_IO and the regions'
 * contents are unknown). The frames are read (copied) before they are
 * checked, so each must have its len bytes. The calling thread's current
 * device is unchanged on return. */
ferry_status_t ferry_delta_cuda_apply(ferry_delta_cuda_t *d, ferry_delta_cuda_item_t *items, size_t n,
                                      cudaStream_t stream, ferry_errbuf_t *err);

/* Where the last batch's time went, from CUDA events (a restore after a
 * failure is not in it). Every frame is queued for the device at once. A
 * batch of format 2 frames of 32 MiB or more is checked and decoded in
 * groups of its items (one per 16 MiB of frames, up to 8): each group's
 * frames are checked on the CPU while the groups before are decoded on
 * the GPU, and its passes start once its own bytes are there; one write
 * pass then takes every group. The check and decode times are added up
 * over the groups, which may overlap. A batch too big for the object's
 * tables when it has started is applied in parts (each first grows the
 * tables); the times are then the last part's. */
typedef struct ferry_delta_cuda_times {
    uint32_t groups; /* the groups the batch (its last part) was applied in */
    double host_s;   /* the CPU's work before the GPU had any: the first group's frames checked, its tables
                        filled */
    double total_s;  /* the batch on the GPU: from its first copy to the end of the write pass */
    double copy_s;   /* from the start to the first group's passes: its deltas copied (while the CPU checked
                        them) and its tables pulled */
    double check_s;  /* record checksums; unchanged and raw chunks checked (the groups' times added up) */
    double decode_s; /* class streams decoded (added up) */
    double write_s;  /* changes written in place and the results hashed against their checksums, raw chunks
                        copied */
} ferry_delta_cuda_times_t;
void ferry_delta_cuda_last_times(const ferry_delta_cuda_t *d, ferry_delta_cuda_times_t *out);

/* For tests and benchmarks: the least bytes of frames a group takes
 * (default 16 MiB; 0 restores it). */
void ferry_delta_cuda_set_group_min(ferry_delta_cuda_t *d, size_t bytes);

/* Device memory the object holds, in bytes. */
size_t ferry_delta_cuda_device_bytes(const ferry_delta_cuda_t *d);

#endif
#endif
