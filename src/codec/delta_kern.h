/* The tables the delta apply kernels (delta.cu) read, and their launchers:
 * the interface between the host side in C (delta_cuda.c), which parses
 * frames, and the kernels. Plain structs of fixed layout, filled in pinned
 * host memory and pulled to the device a group of the batch at a time
 * (dk_pull_enqueue). */
#ifndef FERRY_CODEC_DELTA_KERN_H
#define FERRY_CODEC_DELTA_KERN_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One chunk of a batch. */
typedef struct dk_chunk {
    uint64_t region;   /* device address of the chunk's first element */
    uint64_t rec;      /* device address of its record's bytes [40, rec_len) (the part rec_sum covers) */
    uint64_t payload;  /* device address of the payload (raw: the next contents) */
    uint64_t base_sum, next_sum;
    uint64_t rec_sum;  /* the record checksum, and the seed it is computed with (xxh3 of bytes [0, 32)) */
    uint64_t rec_seed;
    uint64_t change0;  /* sparse: index of its first change in the decoded arrays */
    uint64_t save;     /* raw: offset of the old contents' copy in the save area */
    uint32_t rec_len;  /* bytes hashed for rec_sum: record length - 40 */
    uint32_t elems;
    uint32_t mode;     /* CHUNK_UNCHANGED, CHUNK_SPARSE, CHUNK_RAW */
    uint32_t width;
    uint32_t classes;
    uint32_t class0;   /* index of its first class in the class table */
    uint32_t changed;  /* sparse: its entries from change0 (format 2: slots, some unused) */
    uint32_t sub_log2; /* format 2 sparse chunks: log2 of the sub-block's elements; 0: format 1 */
} dk_chunk_t;

/* Chunk modes, as the record has them (codec_internal.h's CHUNK_*). */
enum { DK_UNCHANGED_CHUNK = 0, DK_SPARSE_CHUNK = 1, DK_RAW_CHUNK = 2 };

/* One magnitude class of a sparse chunk. */
typedef struct dk_class {
    uint64_t stream;  /* device address of its stream */
    uint64_t change0; /* index of its first change (format 2: slot) in the decoded arrays */
    uint32_t lower, count, changed, nonunit, len, k_gap, k_nu, k_mag;
    uint32_t chunk;    /* its chunk's index in the batch */
    uint32_t len_bits; /* format 2: bits per length table entry */
    uint32_t nsub;     /* format 2: its sub-streams (0: format 1) */
    uint32_t sub0;     /* format 2: index of its first sub-stream in the sub-stream table */
} dk_class_t;

/* One sub-stream of a format 2 class, filled on the device from the
   class's length table (dk_subs), then by its decoder. A sub-stream of
   `bits` bits holds at most bits / (2 + k_gap) changes (each code is at
   least a Rice code and a sign bit), so its slots in the decoded arrays
   are fixed before decoding. */
typedef struct dk_sub {
    uint64_t slot;  /* index of its first slot in the decoded arrays */
    uint64_t bit;   /* where it starts, in bits from its class stream's start */
    uint32_t bits;  /* its length */
    uint32_t count; /* its changes, once decoded */
    uint32_t cls;   /* its class's index in the class table */
    uint32_t pad;
} dk_sub_t;

/* Per-chunk outcome, written by the kernels (0: good so far). */
enum {
    DK_OK = 0,
    DK_REC_SUM = 1,   /* record checksum differs: corrupt */
    DK_UNCHANGED = 2, /* an unchanged chunk differs from the delta's: not its base */
    DK_RAW_BASE = 3,  /* a raw chunk's base checksum differs: not its base */
    DK_RAW_DATA = 4,  /* a raw chunk's contents differ from its checksum: corrupt */
    DK_STREAM = 5,    /* a class stream is malformed: corrupt, unless the base is wrong */
    DK_RANGE = 6,     /* a value change leaves the element's range: likewise */
    DK_COUNT = 7,     /* a class holds another number of elements than the delta's base did */
    DK_PAST = 8,      /* a change past its class's elements: corrupt, unless the base is wrong */
    DK_NEXT_SUM = 9   /* the result's checksum differs: corrupt, unless the base is wrong */
};

/* Format 2's decoded changes are packed, rank in the low DK_PACK_RANK_BITS
   bits (a sub-block's, so DELTA_SUB_LOG2_MAX at most: delta_cuda.c checks),
   value change above (delta_dev.h's dk_pack). */
#define DK_PACK_RANK_BITS 24u

/* The device arrays of one batch, and the part of it a launch takes:
   chunks [chunk0, chunk0 + nchunks), classes [class0, class0 + nclasses),
   sub-streams [sub0, sub0 + nsubs) (a batch is applied in groups of its
   frames, each group's passes once its frames are on the device). Every
   index in the tables is the batch's. */
typedef struct dk_batch {
    const dk_chunk_t *chunks;
    const dk_class_t *classes;
    uint32_t *status;  /* per chunk, DK_* */
    uint8_t *applied;  /* per chunk: the kernels wrote into it (undo needed on failure) */
    uint32_t *rank;    /* format 1, per change: its rank in its class; once placed, its element in the chunk */
    int64_t *delta;    /* per change: its value change in elem_ord steps, 0: not written; format 2: packed
                          with its rank, then with its element's place in its sub-block (delta_dev.h's
                          dk_pack), rank unused */
    uint8_t *save;     /* raw chunks' old contents */
    uint64_t *hashes;  /* per chunk, for the blame pass */
    dk_sub_t *subs;    /* format 2 sub-streams */
    uint32_t *cls_sum; /* format 2, per class: changes and non-unit changes its sub-streams decoded (zeroed) */
    uint32_t chunk0, nchunks, class0, nclasses, sub0, nsubs;
} dk_batch_t;

/* The write pass's kernels (delta.cu), one per element width and tile:
 * 2-byte elements go 8192 to a tile (32 a thread: the tile's fixed costs,
 * its barrier, scans and the search setup of each class's changes, over
 * twice the elements) where every tile holds whole sub-blocks, that is in
 * format 1 and where format 2's sub-blocks are 2^13 elements or more;
 * other chunks go 4096 to a tile. A kernel per kind, so that each is
 * compiled for one tile (together, the two spilled registers in their loops). */
enum { DK_PLACE_W1, DK_PLACE_W2, DK_PLACE_W2_WIDE, DK_PLACE_W4, DK_PLACE_KINDS };
#define DK_WIDE_SUB_LOG2_MIN 13u
static inline uint32_t dk_place_kind(uint32_t width, uint32_t sub_log2) {
    return width == 1 ? DK_PLACE_W1
           : width == 4 ? DK_PLACE_W4
           : !sub_log2 || sub_log2 >= DK_WIDE_SUB_LOG2_MIN ? DK_PLACE_W2_WIDE : DK_PLACE_W2;
}

#ifndef DK_TABLES_ONLY /* the tables alone for CPU code that reads them (test_delta_dev.c) */
#include <cuda_runtime_api.h>

/* The passes of an apply, enqueued on stream for b's part of its batch, in
 * this order:
 * pre: record checksums; unchanged chunks' contents; raw chunks' base and
 *      contents (a warp per chunk); each chunk's status set and its
 *      applied flag cleared;
 * decode: every format 1 class stream into (rank, delta) (a thread per
 *      class); format 2: the sub-stream table from each class's length
 *      table (a thread per class), then every sub-stream (a thread each);
 * write: sparse chunks' changes written into place and each result hashed
 *      against next_sum as it is written (a block per chunk; `sparse`
 *      lists their indices by dk_place_kind, nsparse[kind] of each, kind
 *      0 first); raw chunks' old contents saved and the new ones copied in
 *      (`raw` lists nraw).
 * sms: the device's multiprocessor count (grid sizes). */
cudaError_t dk_pre_enqueue(const dk_batch_t *b, unsigned sms, cudaStream_t stream);
cudaError_t dk_decode_enqueue(const dk_batch_t *b, unsigned sms, cudaStream_t stream);
cudaError_t dk_write_enqueue(const dk_batch_t *b, const uint32_t *sparse, const uint32_t nsparse[DK_PLACE_KINDS],
                             const uint32_t *raw, uint32_t nraw, cudaStream_t stream);

/* Copies bytes (a multiple of 4; both 4-aligned) from pinned host memory
 * (src as the host addresses it: unified addressing) to device memory
 * with a kernel, on stream: a group's tables, which a copy engine would
 * queue behind the frames before them. */
cudaError_t dk_pull_enqueue(void *dst, const void *src, size_t bytes, cudaStream_t stream);

/* Kernel attributes that the write pass needs on the current device (its
 * shared memory, over the default 48 KB): once per device, before the
 * first enqueue. */
cudaError_t dk_init(void);

/* Restores chunks idx[0..n) (device array) where the kernels wrote into
 * them, then hashes each into hashes[chunk] (for blame). */
cudaError_t dk_undo_enqueue(const dk_batch_t *b, const uint32_t *idx, uint32_t n, cudaStream_t stream);
#endif

#ifdef __cplusplus
}
#endif
#endif
