/* ferry sum: the checksum of a region of bytes, the same value on the CPU
 * and on a GPU, computed at memory speed on both. A tree of xxh3-64 whose
 * leaves hash in parallel (one GPU warp per leaf; docs/sync.md).
 *
 * The definition (the spec; CPU, GPU and every peer compute exactly this):
 *   LEAF = 65536 bytes.
 *   len <= LEAF:  sum = XXH3_64bits(data, len)
 *                 (plain xxh3-64, so a small region costs nothing extra)
 *   len >  LEAF:  leaf i is bytes [i*LEAF, min((i+1)*LEAF, len)) (the last
 *                 may be shorter), h_i = XXH3_64bits(leaf i);
 *                 sum = XXH3_64bits_withSeed(H, 8 * nleaves, seed = len)
 *                 where H is h_0, h_1, ... as little-endian u64.
 * xxh3 is xxhash's XXH3 64-bit with the default secret. */
#ifndef FERRY_COMMON_SUM_H
#define FERRY_COMMON_SUM_H

#include <stddef.h>
#include <stdint.h>

#include "common/hash.h"

#define FERRY_SUM_LEAF ((uint64_t)65536)

/* The sum of [p, p + len). Thread-safety: any thread. */
uint64_t ferry_sum(const void *p, size_t len);

/* Streaming: the sum of a region fed in pieces of any size, equal to
 * ferry_sum of the whole. The region's length is given up front (the tree's
 * seed is the length, and xxh3's seeded long hash needs its seed before the
 * first byte). A plain struct: put it on the stack or in another struct
 * (it contains xxhash states, 64-byte aligned: a heap copy needs
 * aligned_alloc). No allocation; one state per thread. */
typedef struct ferry_sum_state {
    XXH3_state_t leaf;   /* the current leaf's bytes, when it arrives in pieces */
    XXH3_state_t tree;   /* seeded with len; fed each leaf's hash (8 bytes LE) */
    uint64_t len;        /* the length promised to reset */
    uint64_t fed;        /* bytes given to update so far */
    uint64_t in_leaf;    /* of those, in the current leaf (in `leaf`) */
    uint32_t nbuf;       /* leaf hashes in buf, not yet fed to tree */
    uint8_t buf[256];    /* leaf hashes (LE), fed to tree 32 at a time */
} ferry_sum_state_t;

/* Starts the sum of a region of len bytes. */
void ferry_sum_reset(ferry_sum_state_t *st, uint64_t len);
/* Feeds the next n bytes of the region (n may be 0). Feeding more than the
 * length given to reset is a caller error: digest then returns no defined
 * value. */
void ferry_sum_update(ferry_sum_state_t *st, const void *p, size_t n);
/* The sum, once exactly len bytes were fed (then equal to ferry_sum of
 * them); another count gives no defined value. The state is unchanged. */
uint64_t ferry_sum_digest(const ferry_sum_state_t *st);

#endif
