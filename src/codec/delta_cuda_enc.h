/* Encoding deltas (docs/delta-format.md, format 2) from regions in GPU
 * memory, on the GPU: many regions in one batch. The frames are those
 * ferry_delta_encode writes with FERRY_DELTA_PARAM_FORMAT 2 and the same
 * chunk size, classes and versions, byte for byte, so either side may
 * apply them (ferry_delta_apply, ferry_delta_cuda_apply); every decision
 * is the integer arithmetic of codec/enc_rules.h on both.
 *
 * The passes (codec/delta_enc.cu) read each region's base and next twice
 * (to count and hash, to rank the changes; three times when a region is
 * not 16-aligned), write 10 bytes per change and the records, then copy the
 * frames to the host buffers. The
 * host waits for the GPU after the scan (to size the change list), after
 * each slice's records' lengths are known (below; to lay them out), and at
 * the end.
 *
 * Device memory it holds (grow-only, ferry_delta_cuda_enc_device_bytes):
 * about 2.5 KiB per chunk; the change list, 10 bytes per changed element
 * (counted before a chunk turns out raw), and 20 + 8 * 68 bytes per
 * sub-block (of 4096 to 32768 elements) of the chunks with changes, both
 * for a slice of the batch at a time: the plan and write passes run on at
 * most 2^26 changes and 2^18 sub-blocks at once (781 MiB, a quarter more
 * as the arrays grow), or on one chunk
 * when a chunk alone has more (a chunk of 2^20 elements every one of which
 * changed: 10 MiB); and the batch's records (at most its regions' bytes
 * plus 40 per chunk; as large as the frames, which stay on the device for
 * ferry_delta_cuda_enc_copy).
 *
 * Thread-safety: one object per thread (or serialized calls); objects are
 * independent. Builds without CUDA have no such object (FERRY_CUDA). */
#ifndef FERRY_CODEC_DELTA_CUDA_ENC_H
#define FERRY_CODEC_DELTA_CUDA_ENC_H

#ifdef FERRY_CUDA
#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "common/internal.h"
#include "ferry/codec.h"

typedef struct ferry_delta_cuda_enc ferry_delta_cuda_enc_t;

/* An encoder on GPU `device` (an ordinal). Errors: FERRY_ERR_UNSUPPORTED
 * (no GPU, no driver), FERRY_ERR_INVALID_ARGUMENT (no such device),
 * FERRY_ERR_NO_MEMORY. */
ferry_status_t ferry_delta_cuda_enc_create(int device, ferry_delta_cuda_enc_t **out, ferry_errbuf_t *err);
/* Frees everything. NULL is ignored. */
void ferry_delta_cuda_enc_destroy(ferry_delta_cuda_enc_t *e);

/* One region to encode. */
typedef struct ferry_delta_cuda_enc_item {
    const void *base, *next; /* elems elements of dtype each, in memory the device reads, aligned to the
                                element size; NULL only when elems is 0 */
    ferry_dtype_t dtype;
    uint64_t elems;
    uint32_t chunk_elems;    /* 0: FERRY_DELTA_CHUNK_DEFAULT */
    uint32_t max_classes;    /* 0: FERRY_DELTA_CLASSES_MAX */
    uint64_t base_version, next_version;
    const uint64_t *base_chunk_sums; /* host, optional: the base's chunk checksums, trusted (not hashed) */
    uint64_t *next_chunk_sums;       /* host, optional out: the next version's chunk checksums */
    void *dst;               /* host memory for the frame (ferry_delta_bound(dtype, elems, chunk) is enough),
                                or NULL: the frame stays on the device, for ferry_delta_cuda_enc_copy */
    size_t cap;
    size_t len;              /* out: the frame's length (also when dst is NULL) */
    ferry_status_t status;   /* out: FERRY_OK, or why this item has no frame */
} ferry_delta_cuda_enc_item_t;

/* Encodes items[0..n) on stream (of the object's device, or 0) after what
 * the stream holds, and returns once the frames are in their buffers (the
 * regions must not change meanwhile). Returns FERRY_OK when every item
 * encoded, else the status of the first that did not, with err's detail
 * naming it ("delta 3 of 8: ..."). Per item: FERRY_ERR_UNSUPPORTED (a
 * dtype without deltas), FERRY_ERR_INVALID_ARGUMENT (a NULL region, a
 * chunk size that is not a power of two in [2^10, 2^24], max_classes over
 * 8), FERRY_ERR_LIMIT (the frame does not fit cap; nothing is written past
 * it; never with dst NULL). For the whole batch:
 * FERRY_ERR_INVALID_ARGUMENT (items NULL with n > 0), FERRY_ERR_NO_MEMORY (scratch), FERRY_ERR_IO (a CUDA call failed,
 * e.g. a region the device cannot read: every item then says
 * FERRY_ERR_IO). The calling thread's current device is unchanged. */
ferry_status_t ferry_delta_cuda_encode(ferry_delta_cuda_enc_t *e, ferry_delta_cuda_enc_item_t *items, size_t n,
                                       cudaStream_t stream, ferry_errbuf_t *err);

/* Copies item i's frame of the last batch (one whose dst was NULL, or any
 * that encoded) into dst (host memory, cap bytes; the item's len is
 * enough), and waits for it. For callers that place frames once their
 * lengths are known. Errors: FERRY_ERR_INVALID_ARGUMENT (no such item, or
 * it did not encode), FERRY_ERR_LIMIT (cap too small), FERRY_ERR_IO. The
 * frames stay until the next ferry_delta_cuda_encode. */
ferry_status_t ferry_delta_cuda_enc_copy(ferry_delta_cuda_enc_t *e, size_t i, void *dst, size_t cap,
                                        ferry_errbuf_t *err);

/* Where the last batch's time went, from CUDA events on its stream. */
typedef struct ferry_delta_cuda_enc_times {
    double scan_s;  /* changes counted, histograms, checksums */
    double plan_s;  /* classes, ranks, parameters, lengths (with the tables' copies) */
    double write_s; /* the records written and sealed (after their layout and uploads) */
    double copy_s;  /* the frames copied to the host */
} ferry_delta_cuda_enc_times_t;
void ferry_delta_cuda_enc_last_times(const ferry_delta_cuda_enc_t *e, ferry_delta_cuda_enc_times_t *out);

/* For tests and benchmarks: a slice's budget, in changes and in sub-blocks
 * (0: the defaults, 2^26 and 2^18). */
void ferry_delta_cuda_enc_set_slice_max(ferry_delta_cuda_enc_t *e, uint64_t changes, uint64_t blks);

/* Device memory the object holds, in bytes. */
size_t ferry_delta_cuda_enc_device_bytes(const ferry_delta_cuda_enc_t *e);

#endif
#endif
