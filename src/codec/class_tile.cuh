/* A tile of 4096 elements, 16 per thread of a 256-thread block, and the
 * magnitude classes of its elements: the shared step of the encoder's rank
 * pass (delta_enc.cu), which gives each change its rank in its class, and
 * the apply's write pass (delta.cu), which finds the element of each rank.
 * Both are bound by their instructions, not by memory, so the elements'
 * width is a template parameter (the generic loops ran the width's
 * arithmetic on every word). Device code only. */
#ifndef FERRY_CODEC_CLASS_TILE_CUH
#define FERRY_CODEC_CLASS_TILE_CUH

#include <stdint.h>

#define CT_THREADS 256u
#define CT_EPT 16u                        /* elements per thread and tile */
#define CT_TILE (CT_THREADS * CT_EPT)     /* 4096 */
#define CT_CLASSES 8u                     /* ER_CLASSES_MAX */

/* The class table's entry of a bucket of class k: 1 << 5k in the low 40
   bits, so that a thread adds up its 16 elements' class counts in 5-bit
   fields, and k in the top 3 bits. */
static __device__ __forceinline__ uint64_t ct_entry(uint32_t k) { return 1ull << (5 * k) | (uint64_t)k << 61; }

/* How many of a thread's 16 elements from element `first` lie in a chunk
   of elems. */
static __device__ __forceinline__ uint32_t ct_nin(uint32_t first, uint32_t elems) {
    return first >= elems ? 0 : elems - first < CT_EPT ? elems - first : CT_EPT;
}

/* A thread's 16 elements from element `first` of p (W bytes each, nin of
 * them inside the chunk) into 4 * W words, packed as in memory; the
 * elements past nin are 0. vec: p is 16-aligned, so a whole thread's 16 are
 * W vector loads. */
template <uint32_t W>
static __device__ __forceinline__ void ct_load(const uint8_t *p, uint32_t first, uint32_t nin, bool vec,
                                               uint32_t wd[4 * W]) {
    if (vec && nin == CT_EPT) {
        const uint4 *q = (const uint4 *)(p + (uint64_t)first * W);
#pragma unroll
        for (uint32_t j = 0; j < W; j++) {
            const uint4 x = q[j];
            wd[4 * j] = x.x, wd[4 * j + 1] = x.y, wd[4 * j + 2] = x.z, wd[4 * j + 3] = x.w;
        }
        return;
    }
#pragma unroll
    for (uint32_t q = 0; q < 4 * W; q++) wd[q] = 0;
#pragma unroll
    for (uint32_t e = 0; e < CT_EPT; e++) {
        if (e < nin) {
            const uint64_t i = (uint64_t)first + e;
            const uint32_t x = W == 2 ? ((const uint16_t *)p)[i] : W == 4 ? ((const uint32_t *)p)[i] : p[i];
            wd[e / (4 / W)] |= x << (8 * W * (e % (4 / W)));
        }
    }
}

/* Element e (a constant) of 16 packed in 4 * W words. */
template <uint32_t W>
static __device__ __forceinline__ uint32_t ct_elem(const uint32_t *wd, uint32_t e) {
    return W == 4 ? wd[e] : W == 2 ? (wd[e / 2] >> (16 * (e % 2))) & 0xFFFF : (wd[e / 4] >> (8 * (e % 4))) & 0xFF;
}

/* The magnitude buckets (codec_internal.h's delta_bucket_shift) of 16
 * elements packed in 4 * W words, one per byte, four elements to a word. */
template <uint32_t W>
static __device__ __forceinline__ void ct_buckets(const uint32_t *wd, uint32_t bk[4]) {
#pragma unroll
    for (uint32_t j = 0; j < 4; j++) {
        if (W == 1) {
            bk[j] = wd[j] & 0x7F7F7F7Fu;
        } else if (W == 2) { /* each half's bucket is byte 1 or 3 of the word << 1 */
            bk[j] = __byte_perm(wd[2 * j] << 1, wd[2 * j + 1] << 1, 0x7531);
        } else { /* byte 3 of the word << 1 */
            const uint32_t lo = __byte_perm(wd[4 * j] << 1, wd[4 * j + 1] << 1, 0x0073),
                           hi = __byte_perm(wd[4 * j + 2] << 1, wd[4 * j + 3] << 1, 0x0073);
            bk[j] = __byte_perm(lo, hi, 0x5410);
        }
    }
}

/* The classes of a thread's elements (nin of its 16 in the chunk) from
 * ctab (ct_entry per bucket): per class, its count, in 16-bit fields
 * (classes 0-3 in *lo, 4-7 in *hi, ready to be scanned over the block);
 * per element, its class in a nibble (*cls; 0 past nin). */
static __device__ __forceinline__ void ct_classes(const uint64_t *ctab, const uint32_t bk[4], uint32_t nin,
                                                  uint64_t *lo, uint64_t *hi, uint64_t *cls) {
    uint64_t c5 = 0, cl = 0;
#pragma unroll
    for (uint32_t e = 0; e < CT_EPT; e++) {
        if (e < nin) {
            const uint64_t t = ctab[(bk[e / 4] >> (8 * (e % 4))) & 0xFF];
            c5 += t;
            cl |= (t >> 61) << (4 * e);
        }
    }
    uint64_t l = 0, h = 0;
#pragma unroll
    for (uint32_t k = 0; k < CT_CLASSES; k++) {
        const uint64_t n = (c5 >> (5 * k)) & 31;
        if (k < 4) l |= n << (16 * k);
        else h |= n << (16 * (k - 4));
    }
    *lo = l, *hi = h, *cls = cl;
}

/* 16-bit field k of a pair of class counts (classes 0-3 in lo, 4-7 in hi). */
static __device__ __forceinline__ uint32_t ct_field(uint64_t lo, uint64_t hi, uint32_t k) {
    return (uint32_t)((k < 4 ? lo >> (16 * k) : hi >> (16 * (k - 4))) & 0xFFFF);
}

/* Bit 4e + 3 set for each nibble e of cls that equals k. */
static __device__ __forceinline__ uint64_t ct_nibbles_eq(uint64_t cls, uint32_t k) {
    const uint64_t x = cls ^ (0x1111111111111111ull * k);
    return ~(((x & 0x7777777777777777ull) + 0x7777777777777777ull) | x) & 0x8888888888888888ull;
}

#endif
