/* The AVX-512 apply walks' batch rows (apply_avx512.c: format 1;
 * apply2_avx512.c: format 2): per batch of 64 blocks, the masks of elements
 * at or above each class bound, each class's running counts per block as
 * vectors, and a change's element from its rank. Two files, not one: the
 * compiler's inlining budget is per file, and a second walk in the same
 * file took the general bit reader out of line in the first one. */
#ifndef FERRY_CODEC_APPLY_ROWS_H
#define FERRY_CODEC_APPLY_ROWS_H

#include "codec/codec_internal.h"

#if defined(FERRY_CPU_X86)
#include <immintrin.h>

#include "codec/bucket_bytes.h"

#define AVX512 FERRY_TARGET_AVX512_CODEC

/* Running counts of a row of 64 block masks: lane b of lo (b < 32) or hi
 * holds the set bits in blocks 0..b. */
typedef struct counts {
    __m512i lo, hi;
} counts_t;

/* Inclusive prefix sums over the 32 u16 lanes of x: five steps, each adding
 * x shifted up by 1, 2, 4, 8, 16 lanes (one word permute with zeros in). */
AVX512 static inline __m512i prefix32(__m512i x) {
    const __m512i iota = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13,
                                          12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (int s = 1; s < 32; s *= 2) { /* lane i takes lane i - s; lanes below s take zero */
        __m512i from = _mm512_sub_epi16(iota, _mm512_set1_epi16((short)s));
        x = _mm512_add_epi16(x, _mm512_maskz_permutexvar_epi16(~0u << s, from, x));
    }
    return x;
}

AVX512 static inline counts_t row_counts(const uint64_t *row) {
    __m128i q[8];
    for (int i = 0; i < 8; i++)
        q[i] = _mm512_cvtepi64_epi16(_mm512_popcnt_epi64(_mm512_loadu_si512((const void *)(row + 8 * i))));
    counts_t c;
    c.lo = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(q[0]), q[1], 1), q[2], 2),
                              q[3], 3);
    c.hi = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(_mm512_castsi128_si512(q[4]), q[5], 1), q[6], 2),
                              q[7], 3);
    c.lo = prefix32(c.lo);
    c.hi = _mm512_add_epi16(prefix32(c.hi), _mm512_permutexvar_epi16(_mm512_set1_epi16(31), c.lo));
    return c;
}

/* ge_rows' full blocks of 16-bit elements: one byte compare of the 64
 * elements' buckets per threshold (see thr in walk). */
AVX512 static inline __attribute__((always_inline)) void ge_rows_w2(const uint8_t *base, uint32_t full,
                                                                    const __m512i *thr, uint32_t K,
                                                                    uint64_t ge[][DELTA_MASK_BATCH], size_t ahead) {
    for (uint32_t b = 0; b < full; b++) {
        const uint8_t *bp = base + b * 128;
        /* the same block of the next batch on its way from memory, spread
           over the loop (all at once they overflow the miss buffers and the
           loads here wait anyway) */
        if ((b + DELTA_MASK_BATCH + 1) * 128 <= ahead) {
            __builtin_prefetch(bp + DELTA_MASK_BATCH * 128);
            __builtin_prefetch(bp + DELTA_MASK_BATCH * 128 + 64);
        }
        __m512i e =
            delta_bucket_bytes16(_mm512_loadu_si512((const void *)bp), _mm512_loadu_si512((const void *)(bp + 64)));
        for (uint32_t k = 1; k < K; k++) ge[k][b] = _cvtmask64_u64(_mm512_cmpge_epu8_mask(e, thr[k]));
    }
}

/* Rows 1..K-1 of ge for the batch's blocks: bit i of ge[k][b] is set when
 * element i of block b has magnitude >= thr[k]. Rows are zero past the
 * batch's blocks. base holds `ahead` bytes from the batch's start. */
AVX512 static inline void ge_rows(const uint8_t *base, const uint32_t w, uint32_t nel, const __m512i *thr,
                                  const uint32_t *lower, uint32_t K, uint64_t ge[][DELTA_MASK_BATCH], size_t ahead) {
    uint32_t full = nel / 64, nblk = (nel + 63) / 64;
    const size_t step = (size_t)64 * w;
    if (w == 2) {
        switch (K) { /* the class count known to the compiler: no test per threshold and block */
        case 2: ge_rows_w2(base, full, thr, 2, ge, ahead); break;
        case 3: ge_rows_w2(base, full, thr, 3, ge, ahead); break;
        case 4: ge_rows_w2(base, full, thr, 4, ge, ahead); break;
        case 5: ge_rows_w2(base, full, thr, 5, ge, ahead); break;
        case 6: ge_rows_w2(base, full, thr, 6, ge, ahead); break;
        case 7: ge_rows_w2(base, full, thr, 7, ge, ahead); break;
        case 8: ge_rows_w2(base, full, thr, 8, ge, ahead); break;
        default: ge_rows_w2(base, full, thr, K, ge, ahead); break;
        }
    }
    for (uint32_t b = 0; b < full && w != 2; b++) {
        const uint8_t *bp = base + b * step;
        /* the same block of the next batch on its way from memory, spread
           over the loop (all at once they overflow the miss buffers and the
           loads here wait anyway) */
        if ((b + DELTA_MASK_BATCH + 1) * step <= ahead)
            for (uint32_t o = 0; o < step; o += 64) __builtin_prefetch(bp + DELTA_MASK_BATCH * step + o);
        if (w == 4) {
            const __m512i mm = _mm512_set1_epi32(0x7FFFFFFF);
            __m512i m[4];
            for (int i = 0; i < 4; i++) m[i] = _mm512_and_si512(_mm512_loadu_si512((const void *)(bp + 64 * i)), mm);
            for (uint32_t k = 1; k < K; k++) {
                __mmask32 a = _mm512_kunpackw(_mm512_cmpge_epu32_mask(m[1], thr[k]),
                                              _mm512_cmpge_epu32_mask(m[0], thr[k]));
                __mmask32 c = _mm512_kunpackw(_mm512_cmpge_epu32_mask(m[3], thr[k]),
                                              _mm512_cmpge_epu32_mask(m[2], thr[k]));
                ge[k][b] = _cvtmask64_u64(_mm512_kunpackd(c, a));
            }
        } else {
            __m512i m = _mm512_and_si512(_mm512_loadu_si512((const void *)bp), _mm512_set1_epi8(0x7F));
            for (uint32_t k = 1; k < K; k++) ge[k][b] = _cvtmask64_u64(_mm512_cmpge_epu8_mask(m, thr[k]));
        }
    }
    if (full < nblk) { /* a short last block, element by element */
        uint64_t g[FERRY_DELTA_CLASSES_MAX];
        delta_masks_scalar(base + full * step, NULL, w, nel - 64 * full, lower + 1, K - 1, NULL, g, 1);
        for (uint32_t k = 1; k < K; k++) ge[k][full] = g[k - 1];
    }
    for (uint32_t k = 1; k < K; k++)
        for (uint32_t b = nblk; b < DELTA_MASK_BATCH; b++) ge[k][b] = 0;
}

/* The walks' class rows, kept across batches: the bounds as compare
 * operands (thr), the masks of elements at or above each bound per block
 * (ge; row 0 the batch's elements, row K none), each class's running
 * counts per block (up[k][b + 1]: its elements in blocks 0..b) and its
 * elements in the batch (run). */
typedef struct walk_rows {
    uint32_t lower[FERRY_DELTA_CLASSES_MAX];
    __m512i thr[FERRY_DELTA_CLASSES_MAX];
    uint64_t ge[FERRY_DELTA_CLASSES_MAX + 1][DELTA_MASK_BATCH];
    uint16_t up[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH + 1];
    uint32_t run[FERRY_DELTA_CLASSES_MAX];
} walk_rows_t;

AVX512 static inline __attribute__((always_inline)) void rows_init(walk_rows_t *r, const delta_chunk_t *h,
                                                                   const uint32_t w) {
    const uint32_t K = h->classes;
    for (uint32_t k = 0; k < K; k++) {
        /* bounds are whole buckets within the width's magnitudes
           (delta_chunk_parse checks); 16-bit elements compare their
           bucket, the high byte of the element shifted left by one */
        uint32_t c = r->lower[k] = h->cls[k].lower;
        r->thr[k] = w == 2   ? _mm512_set1_epi8((char)(c >> 7))
                    : w == 4 ? _mm512_set1_epi32((int)c)
                             : _mm512_set1_epi8((char)c);
    }
    for (uint32_t b = 0; b < DELTA_MASK_BATCH; b++) {
        r->ge[0][b] = ~0ull;
        r->ge[K][b] = 0;
    }
    for (uint32_t k = 0; k < K; k++) r->up[k][0] = 0;
}

/* The rows of the batch of nel elements at base (ahead: bytes from there
   to the chunk's end). */
AVX512 static inline __attribute__((always_inline)) void rows_batch(walk_rows_t *r, const uint8_t *base,
                                                                    const uint32_t w, uint32_t nel, uint32_t K,
                                                                    size_t ahead) {
    uint32_t nblk = (nel + 63) / 64;
    if (nel < 64 * DELTA_MASK_BATCH) /* the chunk's last batch, short */
        for (uint32_t b = 0; b < DELTA_MASK_BATCH; b++)
            r->ge[0][b] = delta_block_valid(nel, b);
    ge_rows(base, w, nel, r->thr, r->lower, K, r->ge, ahead);
    counts_t p = row_counts(r->ge[0]);
    for (uint32_t k = 0; k < K; k++) {
        counts_t q = k + 1 < K ? row_counts(r->ge[k + 1]) : (counts_t){_mm512_setzero_si512(), _mm512_setzero_si512()};
        counts_t c = {_mm512_sub_epi16(p.lo, q.lo), _mm512_sub_epi16(p.hi, q.hi)}; /* class k's */
        p = q;
        r->run[k] = (uint32_t)_mm_extract_epi16(_mm512_extracti32x4_epi32(c.hi, 3), 7);
        if (nblk < DELTA_MASK_BATCH) { /* counts past the batch above every rank */
            const __m512i all = _mm512_set1_epi16(-1);
            uint64_t past = ~0ull << nblk;
            c.lo = _mm512_mask_mov_epi16(c.lo, (__mmask32)past, all);
            c.hi = _mm512_mask_mov_epi16(c.hi, (__mmask32)(past >> 32), all);
        }
        _mm512_storeu_si512((void *)(r->up[k] + 1), c.lo);
        _mm512_storeu_si512((void *)(r->up[k] + 33), c.hi);
    }
}

/* The element of class rank t (counted from the batch's first) of the class
   whose counts are u (lo, hi: the same as vectors) and masks g0 & ~g1: two
   compares of t against the counts give its block, one PDEP its element. */
AVX512 static inline __attribute__((always_inline)) uint32_t rows_place(const uint16_t *u, __m512i lo, __m512i hi,
                                                                        const uint64_t *g0, const uint64_t *g1,
                                                                        uint32_t t) {
    __m512i tv = _mm512_set1_epi16((short)t);
    uint32_t b = (uint32_t)__builtin_popcountll(
        _cvtmask64_u64(_mm512_kunpackd(_mm512_cmple_epu16_mask(hi, tv), _mm512_cmple_epu16_mask(lo, tv))));
    uint64_t cm = g0[b] & ~g1[b];
    return 64 * b + (uint32_t)__builtin_ctzll(_pdep_u64(1ull << (t - u[b]), cm));
}

#endif
#endif
