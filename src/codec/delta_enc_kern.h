/* The GPU encoder's passes (delta_enc.cu) as the host side
 * (delta_cuda_enc.c) launches them, over the tables of delta_enc_dev.h. */
#ifndef FERRY_CODEC_DELTA_ENC_KERN_H
#define FERRY_CODEC_DELTA_ENC_KERN_H

#include <stdint.h>

#include <cuda_runtime_api.h>

#include "codec/delta_enc_dev.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The device arrays of one batch. */
typedef struct ek_batch {
    ek_chunk_t *chunks;
    uint32_t *hist;        /* per chunk: 256 sampled bucket counts, then 256 changed ones (zeroed before scan) */
    const uint32_t *busy;  /* the chunks with changes (indices) */
    ek_subblk_t *blks;     /* the sub-blocks of the chunks with changes */
    ek_sub_t *subs;        /* per sub-block and class */
    uint64_t *list;        /* the changes, per chunk from its list0 */
    uint16_t *runs;        /* per change: a non-unit change's run */
    uint8_t *out;          /* the record area (zeroed before write), 4-aligned; records at chunks[c].rec */
    const uint32_t *raw;   /* the chunks choose made raw */
    uint32_t nchunks, nbusy, nblks, nsparse_blks, nraw;
    uint32_t chunk0;       /* head and seal: chunks [chunk0, chunk0 + nchunks) (scan: 0) */
    const uint32_t *sparse_blks; /* the sub-blocks of sparse chunks */
} ek_batch_t;

/* scan: a block per chunk, changes counted, histograms; then hash: a warp
 * per chunk and version, the checksums. */
cudaError_t ek_scan_enqueue(const ek_batch_t *b, cudaStream_t stream);
/* classes, over the chunks with changes (busy[0, nbusy)). */
cudaError_t ek_classes_enqueue(const ek_batch_t *b, cudaStream_t stream);
/* rank, totals, part, choose, over the chunks with changes (busy[0, nbusy),
 * their sub-blocks blks[0, nblks)), once their classes are chosen. */
cudaError_t ek_plan_enqueue(const ek_batch_t *b, cudaStream_t stream);
/* write (sparse chunks' sub-streams), head (every chunk), raw contents,
 * seal (every chunk). */
cudaError_t ek_write_enqueue(const ek_batch_t *b, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
