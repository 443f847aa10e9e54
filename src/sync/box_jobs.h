/* Batches of box copies (gather, scatter, strided to strided) as one GPU
 * kernel walks them: laid out on the host (box_jobs.c), walked by
 * strided.cu. The walk (which job a piece is in, which runs and bytes it
 * moves, where a run starts, how a segment splits into aligned vectors) is
 * here as inline functions C and CUDA share, so tests/unit/test_box_jobs.c
 * runs the kernel's decomposition on the CPU.
 *
 * A job moves the elements of a box: element i (row-major over the box) goes
 * from src + (i under src_strides) * esz to dst + (i under dst_strides) *
 * esz, exactly as sync_gather / sync_scatter / sync_copy_box / sync_box_runs
 * (strided.c) move them. Its trailing dims contiguous on both sides form one
 * run (sync_box_run); the leading ("outer") dims are walked. The work is
 * cut into pieces, each moved by one warp: a run of SYNC_BOX_SPLIT bytes or
 * more is split into pieces of up to SYNC_BOX_PIECE bytes ("split"); shorter
 * runs are grouped, up to SYNC_BOX_PIECE bytes of whole runs per piece. */
#ifndef FERRY_SYNC_BOX_JOBS_H
#define FERRY_SYNC_BOX_JOBS_H

#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"
#include "ferry/layout.h"

#ifdef __CUDACC__
#define SYNC_HD static inline __host__ __device__
#else
#define SYNC_HD static inline
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* One box copy. Pointers may be anything the copying device can address
 * (its memory, a peer's or one mapped by CUDA IPC, pinned host memory; for
 * the CPU walk, host memory). Within a batch no job's destination bytes may
 * overlap another's, or any source bytes. */
typedef struct sync_box_copy {
    uint8_t *dst;               /* element 0 of the box (byte offset included) */
    const int64_t *dst_strides; /* in elements; NULL: dst is the packed row-major box */
    const uint8_t *src;
    const int64_t *src_strides; /* NULL: packed */
    ferry_box_t box;            /* ndim and extent (offset is already in dst and src) */
    uint32_t esz;               /* bytes per element: 1, 2, 4 or 8 */
} sync_box_copy_t;

#define SYNC_BOX_PIECE 16384u /* most bytes one warp moves per piece (a multiple of 16) */
#define SYNC_BOX_SPLIT 2048u  /* runs this long or longer are split, shorter ones grouped */

/* A job as the kernel reads it (56 bytes). */
typedef struct sync_box_job {
    uint64_t dst, src;   /* addresses of element 0 */
    uint64_t piece0;     /* the job's first piece in the batch */
    uint64_t nruns;
    uint64_t run_bytes;
    uint64_t per;        /* split: pieces per run; grouped: runs per piece */
    uint32_t dim0;       /* its outer dims are dims[dim0 .. dim0 + outer), outermost first */
    uint8_t outer;
    uint8_t split;
    uint8_t vec;         /* grouped: the vector width in bytes (1..16) every run start and length allow */
    uint8_t unused;
} sync_box_job_t;

/* An outer dim: extent and byte strides (dims of extent 1 are left out,
 * neighbours that flatten into one are merged). */
typedef struct sync_box_dim {
    int64_t extent, dst_stride, src_stride;
} sync_box_dim_t;

/* What a built table holds: njobs jobs at its start (jobs with no elements
 * left out), ndims dims at byte dims_at. */
typedef struct sync_box_batch {
    uint32_t njobs;
    size_t ndims;
    size_t dims_at;
    size_t table_bytes; /* bytes of the table in use */
    uint64_t pieces;
    uint64_t bytes;     /* bytes the jobs move */
} sync_box_batch_t;

/* Bytes a table of these n jobs may need (SIZE_MAX if that overflows). */
size_t sync_box_table_bound(const sync_box_copy_t *jobs, size_t n);

/* Checks the jobs and lays out their table in table[0..cap) (8-byte
 * aligned, cap >= sync_box_table_bound). *out is written only on success.
 * Errors: FERRY_ERR_INVALID_ARGUMENT naming the job and what is wrong
 * (ndim, esz, a negative extent, a NULL pointer, offsets past 63 bits),
 * FERRY_ERR_LIMIT (more than 2^32 - 1 jobs, cap too small). */
ferry_status_t sync_box_table_build(const sync_box_copy_t *jobs, size_t n, void *table, size_t cap,
                                    sync_box_batch_t *out, ferry_errbuf_t *err);

#ifdef __cplusplus
}
#endif

/* The job holding piece p: the last whose piece0 <= p. A warp's pieces only
 * grow, so the search starts at the job of its previous piece (lo). */
SYNC_HD uint32_t sync_box_find(const sync_box_job_t *jobs, uint32_t njobs, uint64_t p, uint32_t lo) {
    if (lo + 1 >= njobs || jobs[lo + 1].piece0 > p) return lo;
    uint32_t hi = njobs; /* jobs[lo].piece0 <= p < jobs[hi].piece0 (or hi is the end) */
    while (hi - lo > 1) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (jobs[mid].piece0 <= p) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* What piece p of a job moves: bytes [at, at + len) of runs run .. run + nruns. */
typedef struct sync_box_piece {
    uint64_t run, nruns, at, len;
} sync_box_piece_t;

SYNC_HD sync_box_piece_t sync_box_piece(const sync_box_job_t *j, uint64_t p) {
    sync_box_piece_t q;
    if (j->split) {
        q.run = j->per == 1 ? p : p / j->per;
        q.nruns = 1;
        q.at = (p - q.run * j->per) * SYNC_BOX_PIECE;
        q.len = j->run_bytes - q.at < SYNC_BOX_PIECE ? j->run_bytes - q.at : SYNC_BOX_PIECE;
    } else {
        q.run = p * j->per;
        q.nruns = j->nruns - q.run < j->per ? j->nruns - q.run : j->per;
        q.at = 0;
        q.len = j->run_bytes;
    }
    return q;
}

/* Byte offsets of run r from the job's dst and src: r in mixed radix over
 * the outer dims (the outermost takes what is left, no division). */
SYNC_HD void sync_box_run_at(const sync_box_job_t *j, const sync_box_dim_t *dims, uint64_t r, int64_t *dst_off,
                             int64_t *src_off) {
    const sync_box_dim_t *dm = dims + j->dim0;
    int64_t d = 0, s = 0;
    for (int k = (int)j->outer - 1; k > 0; k--) {
        uint64_t e = (uint64_t)dm[k].extent, q = r / e;
        int64_t i = (int64_t)(r - q * e);
        d += i * dm[k].dst_stride;
        s += i * dm[k].src_stride;
        r = q;
    }
    if (j->outer) {
        d += (int64_t)r * dm[0].dst_stride;
        s += (int64_t)r * dm[0].src_stride;
    }
    *dst_off = d;
    *src_off = s;
}

/* A contiguous segment of a split run, as a warp moves it: head bytes one
 * per lane until dst is aligned to width (the widest of 16/8/4/2/1 bytes
 * at which dst and src are aligned alike), nvec vectors of width, tail bytes. */
typedef struct sync_box_seg {
    uint32_t width, head, nvec, tail;
} sync_box_seg_t;

SYNC_HD sync_box_seg_t sync_box_seg(uint64_t dst, uint64_t src, uint32_t len) {
    uint64_t x = (dst ^ src) | 16;
    sync_box_seg_t g;
    g.width = (uint32_t)(x & (~x + 1)); /* the lowest bit where they differ */
    g.head = (uint32_t)((g.width - (dst & (g.width - 1))) & (g.width - 1));
    if (g.head > len) g.head = len;
    g.nvec = (len - g.head) / g.width;
    g.tail = len - g.head - g.nvec * g.width;
    return g;
}

#endif
