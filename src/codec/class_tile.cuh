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

/* The class table's entry of a bucket of class k: 1 << 4k in the low word,
   so that a thread adds up the class counts of 8 of its elements in
   nibbles, and k in the high word. */
static __device__ __forceinline__ uint64_t ct_entry(uint32_t k) { return 1ull << (4 * k) | (uint64_t)k << 32; }

/* How many of a thread's 16 elements from element `first` lie in a chunk
   of elems. */
static __device__ __forceinline__ uint32_t ct_nin(uint32_t first, uint32_t elems) {
    return first >= elems ? 0 : elems - first < CT_EPT ? elems - first : CT_EPT;
}

/* Whether p is 16-aligned: then so is every thread's 16 elements of a
   tile (recomputed where needed: a flag kept through the write pass's loop
   was spilled). */
static __device__ __forceinline__ bool ct_vec(const void *p) { return ((uintptr_t)p & 15) == 0; }

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

/* Class counts travel in 16-bit fields of 4 words, two classes a word:
 * class k in word ct_word(k), field k >> 2. A block's counts fit (4096
 * elements a tile), so counts of threads and warps add up word by word.
 * The order of classes over the words is the one ct_classes gets them in
 * at the least cost. */
static __device__ __forceinline__ uint32_t ct_word(uint32_t k) { return (k & 1) << 1 | (k >> 1 & 1); }
/* Class k's count of 4 words of counts. */
static __device__ __forceinline__ uint32_t ct_count(const uint32_t c[4], uint32_t k) {
    const uint32_t j = ct_word(k);
    const uint32_t w = j == 0 ? c[0] : j == 1 ? c[1] : j == 2 ? c[2] : c[3];
    return (w >> (16 * (k >> 2))) & 0xFFFF;
}

/* The classes of a thread's elements (nin of its 16 in the chunk; past nin
 * ct_load left zeros: bucket 0, class 0) from ctab (ct_entry per bucket):
 * per class, its count (c, the fields above); per element, its class in a
 * nibble (*cls; 0 past nin). Per element: a byte permute, an address, one
 * shared load and two adds; the elements past nin are taken back from
 * class 0 at the end rather than tested one by one. Bucket 0 is always
 * class 0: the encoder's bounds start past group 0, and a frame whose
 * lower[1] is 0 (or not a whole bucket) fails to parse (codec.c) before
 * the apply builds its table, so no count here is taken from the wrong
 * class and no search lands past nin. */
static __device__ __forceinline__ void ct_classes(const uint64_t *ctab, const uint32_t bk[4], uint32_t nin,
                                                  uint32_t c[4], uint64_t *cls) {
    const uint2 *tab = (const uint2 *)ctab;
    uint32_t n[2] = {0, 0}, k[2] = {0, 0}; /* elements 0-7 and 8-15: at most 8 per nibble */
#pragma unroll
    for (uint32_t e = 0; e < CT_EPT; e++) {
        const uint2 t = tab[__byte_perm(bk[e / 4], 0, 0x4440 | (e % 4))];
        n[e / 8] += t.x;
        k[e / 8] += t.y << (4 * (e % 8)); /* the nibbles do not overlap: one shift-and-add */
    }
    const uint32_t ev = (n[0] & 0x0F0F0F0Fu) + (n[1] & 0x0F0F0F0Fu),               /* classes 0, 2, 4, 6 */
        od = (n[0] >> 4 & 0x0F0F0F0Fu) + (n[1] >> 4 & 0x0F0F0F0Fu);                 /* 1, 3, 5, 7 */
    c[0] = (ev & 0x00FF00FFu) - (CT_EPT - nin); /* classes 0 and 4; class 0 less the padding */
    c[1] = ev >> 8 & 0x00FF00FFu;               /* 2 and 6 */
    c[2] = od & 0x00FF00FFu;                    /* 1 and 5 */
    c[3] = od >> 8 & 0x00FF00FFu;               /* 3 and 7 */
    *cls = (uint64_t)k[1] << 32 | k[0];
}

/* Inclusive sum of v over the lanes up to this one within its group of N
   lanes (N a power of 2; callers read the first group), v's fields adding
   up without carries. shfl.up with its in-range predicate, as CUB does: two
   instructions a step; volatile, as a shuffle every lane must reach. */
template <uint32_t N = 32>
static __device__ __forceinline__ uint32_t ct_warp_sum(uint32_t v) {
#pragma unroll
    for (uint32_t o = 1; o < N; o <<= 1)
        asm volatile("{\n\t.reg .u32 t;\n\t.reg .pred p;\n\t"
            "shfl.sync.up.b32 t|p, %0, %1, %2, 0xffffffff;\n\t"
            "@p add.u32 %0, %0, t;\n\t}"
            : "+r"(v)
            : "r"(o), "r"((32 - N) << 8));
    return v;
}

/* Bit 4e + 3 set for each nibble e of cls that equals k. */
static __device__ __forceinline__ uint64_t ct_nibbles_eq(uint64_t cls, uint32_t k) {
    const uint64_t x = cls ^ (0x1111111111111111ull * k);
    return ~(((x & 0x7777777777777777ull) + 0x7777777777777777ull) | x) & 0x8888888888888888ull;
}

/* The element (0-15) of the nth (from 0) bit of e, which has bits only at
   4i + 3 (ct_nibbles_eq); CT_EPT when e has nth or fewer. By halving with
   popc, the same few instructions for any nth: clearing e's lowest bit
   nth times, a loop whose trip count differs from lane to lane, was a
   tenth of the write pass's instructions (ncu, 2026-11-29). */
static __device__ __forceinline__ uint32_t ct_nth(uint64_t e, uint32_t nth) {
    uint32_t w = (uint32_t)e, at = 0, c = __popc(w);
    if (nth >= c) w = (uint32_t)(e >> 32), nth -= c, at = 8;
    c = __popc(w & 0xFFFFu);
    if (nth >= c) w >>= 16, nth -= c, at += 4;
    c = __popc(w & 0xFFu);
    if (nth >= c) w >>= 8, nth -= c, at += 2;
    c = (w >> 3) & 1u;
    if (nth >= c) w >>= 4, nth -= c, at += 1;
    return nth == 0 && (w & 8u) ? at : CT_EPT;
}

#endif
