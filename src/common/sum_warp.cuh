/* xxh3-64 of a long input (> 240 bytes) by one warp, for the kernels that
 * hash device memory (common/sum.cu, codec/delta.cu). The arithmetic is
 * common/sum_xxh3.h's; this is the warp's loop over 1 KiB blocks. Device
 * code only. */
#ifndef FERRY_COMMON_SUM_WARP_CUH
#define FERRY_COMMON_SUM_WARP_CUH

#include <stdint.h>

#include "common/sum_xxh3.h"

#define SUMW_FULL 0xffffffffu

/* 16 bytes at a 16-aligned address, read once (streaming: not kept in L2) */
static __device__ __forceinline__ uint4 sumw_ld_vec(uint64_t x) { return __ldcs((const uint4 *)(uintptr_t)x); }

static __device__ __forceinline__ uint4 sumw_shfl_vec(uint4 v, unsigned src) {
    uint4 r;
    r.x = __shfl_sync(SUMW_FULL, v.x, src);
    r.y = __shfl_sync(SUMW_FULL, v.y, src);
    r.z = __shfl_sync(SUMW_FULL, v.z, src);
    r.w = __shfl_sync(SUMW_FULL, v.w, src);
    return r;
}

/* The last stripe, [len - 64, len), into lanes 0-3's sums (the last
   block's part of them). */
static __device__ __forceinline__ void sumw_last_stripe(const uint8_t *p, uint64_t len, const uint8_t *sec, unsigned t,
                                                        uint64_t *s0, uint64_t *s1) {
    if (t < 4) {
        const uint8_t *x = p + len - 64 + 16 * t;
        sumx_contrib(sumx_rd64(x), sumx_rd64(x + 8), sumx_last_key(sec, t, 0), sumx_last_key(sec, t, 1), s0, s1);
    }
}

/* The merge: lanes hold accumulator pair t & 3 (all 8 lanes of a pair
   alike); the hash on every lane. */
static __device__ __forceinline__ uint64_t sumw_merge(uint64_t acc0, uint64_t acc1, uint64_t len, const uint8_t *sec,
                                                      unsigned t) {
    uint64_t m = sumx_fold64(acc0 ^ sumx_merge_key(sec, t, 0), acc1 ^ sumx_merge_key(sec, t, 1)); /* pair q's part */
    m += __shfl_xor_sync(SUMW_FULL, m, 1);
    m += __shfl_xor_sync(SUMW_FULL, m, 2);
    return sumx_avalanche(len * SUMX_PRIME64_1 + m);
}

/* XXH3 of [p, p + len), len > 240, with secret sec (192 bytes, shared
 * memory), by a whole warp (every lane calls it with its lane index t);
 * the hash is returned on every lane. */
static __device__ uint64_t sumw_warp_long(const uint8_t *p, uint64_t len, const uint8_t *sec, unsigned t) {
    sumx_keys_t k;
    sumx_lane_keys(sec, t, &k);
    const unsigned q = t & 3, r8 = t >> 2;
    uint64_t acc0 = sumx_init_acc(2 * q), acc1 = sumx_init_acc(2 * q + 1);
    const uint64_t nfull = sumx_nfull(len);
    const unsigned nstr = sumx_nstr(len);
    const unsigned a = (unsigned)((uintptr_t)p & 15); /* the same on every lane */
    const uint64_t base = (uint64_t)(uintptr_t)p - a, end = (uint64_t)(uintptr_t)p + len; /* vectors from base, 16-aligned */
    const uint4 zero = make_uint4(0, 0, 0, 0);
    for (uint64_t k0 = 0; k0 <= nfull; k0 += SUMX_GROUP) {
        uint4 v[SUMX_GROUP][2], vx = zero;
#pragma unroll
        for (int g = 0; g < SUMX_GROUP; g++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint64_t x = base + 1024 * (k0 + g) + 512 * h + 16 * t;
                v[g][h] = k0 + g <= nfull && x < end ? sumw_ld_vec(x) : zero;
            }
        if (a && t == 0) { /* the vector after the group, for lane 31's last bytes */
            const uint64_t x = base + 1024 * (k0 + SUMX_GROUP);
            if (x < end) vx = sumw_ld_vec(x);
        }
#pragma unroll
        for (int g = 0; g < SUMX_GROUP; g++) {
            const uint64_t kb = k0 + g;
            if (kb > nfull) break;
            const unsigned ns = kb < nfull ? 16 : nstr; /* stripes in this block */
            uint64_t s0 = 0, s1 = 0;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                uint4 d = v[g][h];
                if (a) { /* bytes [a, a + 16) of this lane's vector and the next lane's */
                    uint4 next0 = h == 0 ? v[g][1] : g + 1 < SUMX_GROUP ? v[g + 1][0] : vx;
                    uint4 nb = sumw_shfl_vec(t == 0 ? next0 : d, (t + 1) & 31);
                    uint32_t c[8] = {d.x, d.y, d.z, d.w, nb.x, nb.y, nb.z, nb.w}, o[4];
                    sumx_combine(c, a, o);
                    d = make_uint4(o[0], o[1], o[2], o[3]);
                }
                if (8 * (unsigned)h + r8 < ns)
                    sumx_contrib(d.x | (uint64_t)d.y << 32, d.z | (uint64_t)d.w << 32, k.k[h][0], k.k[h][1], &s0, &s1);
            }
            if (kb == nfull) sumw_last_stripe(p, len, sec, t, &s0, &s1);
#pragma unroll
            for (unsigned m = 4; m < 32; m <<= 1) { /* over the 8 lanes of this accumulator pair */
                s0 += __shfl_xor_sync(SUMW_FULL, s0, m);
                s1 += __shfl_xor_sync(SUMW_FULL, s1, m);
            }
            acc0 += s0;
            acc1 += s1;
            if (kb < nfull) {
                acc0 = sumx_scramble(acc0, k.scr[0]);
                acc1 = sumx_scramble(acc1, k.scr[1]);
            }
        }
    }
    return sumw_merge(acc0, acc1, len, sec, t);
}

/* xxh3-64 (seed 0) of [p, p + len) by a warp; on every lane. */
static __device__ uint64_t sumw_xxh3(const uint8_t *p, uint64_t len, const uint8_t *sec, unsigned t) {
    if (len > SUMX_SHORT_MAX) return sumw_warp_long(p, len, sec, t);
    uint64_t h = t == 0 ? sumx_xxh3_short(p, len, sec, 0) : 0;
    return __shfl_sync(SUMW_FULL, h, 0);
}

/* The end of xxh3-64 (seed 0) of [p, p + len) for a caller that has
 * taken its nfull full blocks through the accumulators itself (codec/
 * delta.cu's write pass): acc holds accumulator `lane` in lanes 0-7. The
 * last block's stripes, the last stripe and the merge, by a whole warp
 * (lane t), read from p (any alignment); the hash on every lane. Inputs of
 * 240 bytes or fewer (no blocks) are hashed whole. */
static __device__ uint64_t sumw_tail(const uint8_t *p, uint64_t len, uint64_t acc, const uint8_t *sec, unsigned t) {
    if (len <= SUMX_SHORT_MAX) return sumw_xxh3(p, len, sec, t);
    const unsigned q = t & 3, r8 = t >> 2, nstr = sumx_nstr(len);
    uint64_t acc0 = __shfl_sync(SUMW_FULL, acc, 2 * q), acc1 = __shfl_sync(SUMW_FULL, acc, 2 * q + 1);
    const uint8_t *blk = p + 1024 * sumx_nfull(len);
    uint64_t s0 = 0, s1 = 0;
    for (unsigned h = 0; h < 2; h++) {
        const unsigned st = 8 * h + r8; /* the stripe; this lane's words 2q, 2q + 1 */
        if (st < nstr) {
            const uint8_t *x = blk + 64 * st + 16 * q;
            sumx_contrib(sumx_rd64(x), sumx_rd64(x + 8), sumx_sec64(sec, 8 * (st + 2 * q)),
                         sumx_sec64(sec, 8 * (st + 2 * q) + 8), &s0, &s1);
        }
    }
    sumw_last_stripe(p, len, sec, t, &s0, &s1);
#pragma unroll
    for (unsigned m = 4; m < 32; m <<= 1) {
        s0 += __shfl_xor_sync(SUMW_FULL, s0, m);
        s1 += __shfl_xor_sync(SUMW_FULL, s1, m);
    }
    return sumw_merge(acc0 + s0, acc1 + s1, len, sec, t);
}

/* xxh3-64 with a seed; cs: this warp's 192 bytes of shared memory for the
   secret the seed derives (long inputs). */
static __device__ uint64_t sumw_xxh3_seeded(const uint8_t *p, uint64_t len, uint64_t seed, const uint8_t *sec,
                                            uint8_t *cs, unsigned t) {
    if (len <= SUMX_SHORT_MAX) {
        uint64_t h = t == 0 ? sumx_xxh3_short(p, len, sec, seed) : 0;
        return __shfl_sync(SUMW_FULL, h, 0);
    }
    __syncwarp(); /* the last input's readers of cs are done */
    if (t < 12) sumx_custom_secret16(sec, t, seed, cs);
    __syncwarp();
    return sumw_warp_long(p, len, cs, t);
}

#endif
