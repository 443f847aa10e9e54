/* Block kernels: per 64 elements, a bit mask of the elements that changed
 * and, per class threshold, of the elements at or above it in magnitude.
 * These passes touch every element, so they run 16-64 elements per vector
 * instruction where the CPU has AVX2 or AVX-512BW, over many blocks per call
 * (the thresholds are broadcast once); the scalar kernel gives the same
 * masks everywhere else (and for a chunk's last, partial block). */
#include "codec/codec_internal.h"
#include "common/cpu.h"

static void block_scalar(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n, const uint32_t *thr,
                         uint32_t nthr, uint64_t *changed, uint64_t *ge) {
    uint64_t ch = 0;
    uint32_t mm = mag_mask(width);
    for (uint32_t j = 0; j < nthr; j++) ge[j] = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t b = elem_get(base, width, i);
        if (next && b != elem_get(next, width, i)) ch |= 1ull << i;
        uint32_t m = b & mm;
        for (uint32_t j = 0; j < nthr; j++)
            if (m >= thr[j]) ge[j] |= 1ull << i;
    }
    if (changed) *changed = ch;
}

/* The blocks from index `from` on, one at a time (all of them, or a vector
 * kernel's partial last block). */
static void blocks_scalar(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n, const uint32_t *thr,
                          uint32_t nthr, uint64_t *changed, uint64_t *ge, uint32_t stride, uint32_t from) {
    for (uint32_t b = from; 64 * b < n; b++) {
        uint32_t at = 64 * b, k = n - at < 64 ? n - at : 64;
        block_scalar(base + (size_t)at * width, next ? next + (size_t)at * width : NULL, width, k, thr, nthr,
                     changed ? changed + b : NULL, ge ? ge + (size_t)b * stride : NULL);
    }
}

void delta_masks_scalar(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n, const uint32_t *thr,
                        uint32_t nthr, uint64_t *changed, uint64_t *ge, uint32_t stride) {
    blocks_scalar(base, next, width, n, thr, nthr, changed, ge, stride, 0);
}

#if defined(FERRY_CPU_X86)
#include <immintrin.h>

#define AVX2 FERRY_TARGET_AVX2
#define AVX512 FERRY_TARGET_AVX512BW

/* A threshold above every magnitude selects nothing; in the element's own
 * width that is mag_mask + 1 (which the compares below handle: the sign bit
 * is masked off). Thresholds wider than the element would wrap otherwise. */
static inline uint32_t clamp_thr(uint32_t thr, uint32_t width) {
    uint32_t top = mag_mask(width) + 1;
    return thr > top ? top : thr;
}

/* 4 x 16 lanes of 16-bit all-ones/zero -> 64 bits in element order */
AVX2 static inline uint64_t bits16(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i lo = _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), 0xD8);
    __m256i hi = _mm256_permute4x64_epi64(_mm256_packs_epi16(c, d), 0xD8);
    return (uint64_t)(uint32_t)_mm256_movemask_epi8(lo) | (uint64_t)(uint32_t)_mm256_movemask_epi8(hi) << 32;
}

/* 8 x 8 lanes of 32-bit -> 64 bits in element order */
AVX2 static inline __m256i pack32(__m256i a, __m256i b) {
    return _mm256_permute4x64_epi64(_mm256_packs_epi32(a, b), 0xD8);
}

AVX2 static void masks_avx2(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n, const uint32_t *thr,
                            uint32_t nthr, uint64_t *changed, uint64_t *ge, uint32_t stride) {
    if (nthr > FERRY_DELTA_CLASSES_MAX) return delta_masks_scalar(base, next, width, n, thr, nthr, changed, ge, stride);
    uint32_t full = n / 64;
    __m256i t[FERRY_DELTA_CLASSES_MAX];
    for (uint32_t j = 0; j < nthr; j++) {
        uint32_t c = clamp_thr(thr[j], width) - 1; /* signed compare: m > c */
        t[j] = width == 2 ? _mm256_set1_epi16((short)c) : width == 4 ? _mm256_set1_epi32((int)c) : _mm256_set1_epi8((char)c);
    }
    for (uint32_t blk = 0; blk < full; blk++) {
        const uint8_t *bp = base + (size_t)blk * 64 * width, *np = next ? next + (size_t)blk * 64 * width : NULL;
        uint64_t *g = nthr ? ge + (size_t)blk * stride : NULL;
        if (width == 2) {
            __m256i b[4], m[4];
            const __m256i mm = _mm256_set1_epi16(0x7FFF);
            for (int i = 0; i < 4; i++) {
                b[i] = _mm256_loadu_si256((const __m256i *)(bp + 32 * i));
                m[i] = _mm256_and_si256(b[i], mm);
            }
            if (np) {
                __m256i e[4];
                for (int i = 0; i < 4; i++) e[i] = _mm256_cmpeq_epi16(b[i], _mm256_loadu_si256((const __m256i *)(np + 32 * i)));
                changed[blk] = ~bits16(e[0], e[1], e[2], e[3]);
            }
            for (uint32_t j = 0; j < nthr; j++)
                g[j] = bits16(_mm256_cmpgt_epi16(m[0], t[j]), _mm256_cmpgt_epi16(m[1], t[j]),
                              _mm256_cmpgt_epi16(m[2], t[j]), _mm256_cmpgt_epi16(m[3], t[j]));
        } else if (width == 4) {
            __m256i b[8], m[8];
            const __m256i mm = _mm256_set1_epi32(0x7FFFFFFF);
            for (int i = 0; i < 8; i++) {
                b[i] = _mm256_loadu_si256((const __m256i *)(bp + 32 * i));
                m[i] = _mm256_and_si256(b[i], mm);
            }
            if (np) {
                __m256i e[8];
                for (int i = 0; i < 8; i++) e[i] = _mm256_cmpeq_epi32(b[i], _mm256_loadu_si256((const __m256i *)(np + 32 * i)));
                changed[blk] = ~bits16(pack32(e[0], e[1]), pack32(e[2], e[3]), pack32(e[4], e[5]), pack32(e[6], e[7]));
            }
            for (uint32_t j = 0; j < nthr; j++) {
                __m256i c[8];
                for (int i = 0; i < 8; i++) c[i] = _mm256_cmpgt_epi32(m[i], t[j]);
                g[j] = bits16(pack32(c[0], c[1]), pack32(c[2], c[3]), pack32(c[4], c[5]), pack32(c[6], c[7]));
            }
        } else {
            __m256i b[2], m[2];
            const __m256i mm = _mm256_set1_epi8(0x7F);
            for (int i = 0; i < 2; i++) {
                b[i] = _mm256_loadu_si256((const __m256i *)(bp + 32 * i));
                m[i] = _mm256_and_si256(b[i], mm);
            }
            if (np) {
                uint64_t eq = 0;
                for (int i = 0; i < 2; i++)
                    eq |= (uint64_t)(uint32_t)_mm256_movemask_epi8(
                              _mm256_cmpeq_epi8(b[i], _mm256_loadu_si256((const __m256i *)(np + 32 * i))))
                          << (32 * i);
                changed[blk] = ~eq;
            }
            for (uint32_t j = 0; j < nthr; j++)
                g[j] = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(m[0], t[j])) |
                       (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(m[1], t[j])) << 32;
        }
    }
    blocks_scalar(base, next, width, n, thr, nthr, changed, ge, stride, full);
}

/* AVX-512BW: a compare yields the 64-bit mask itself, no packing */
AVX512 static void masks_avx512(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n,
                                const uint32_t *thr, uint32_t nthr, uint64_t *changed, uint64_t *ge, uint32_t stride) {
    if (nthr > FERRY_DELTA_CLASSES_MAX) return delta_masks_scalar(base, next, width, n, thr, nthr, changed, ge, stride);
    uint32_t full = n / 64;
    __m512i t[FERRY_DELTA_CLASSES_MAX];
    for (uint32_t j = 0; j < nthr; j++) {
        uint32_t c = clamp_thr(thr[j], width); /* unsigned compare: m >= c */
        t[j] = width == 2 ? _mm512_set1_epi16((short)c) : width == 4 ? _mm512_set1_epi32((int)c) : _mm512_set1_epi8((char)c);
    }
    for (uint32_t blk = 0; blk < full; blk++) {
        const uint8_t *bp = base + (size_t)blk * 64 * width, *np = next ? next + (size_t)blk * 64 * width : NULL;
        uint64_t *g = nthr ? ge + (size_t)blk * stride : NULL;
        if (width == 2) {
            const __m512i mm = _mm512_set1_epi16(0x7FFF);
            __m512i b0 = _mm512_loadu_si512((const void *)bp), b1 = _mm512_loadu_si512((const void *)(bp + 64));
            if (np)
                changed[blk] = (uint64_t)_mm512_cmpneq_epi16_mask(b0, _mm512_loadu_si512((const void *)np)) |
                               (uint64_t)_mm512_cmpneq_epi16_mask(b1, _mm512_loadu_si512((const void *)(np + 64))) << 32;
            __m512i m0 = _mm512_and_si512(b0, mm), m1 = _mm512_and_si512(b1, mm);
            for (uint32_t j = 0; j < nthr; j++)
                g[j] = (uint64_t)_mm512_cmpge_epu16_mask(m0, t[j]) | (uint64_t)_mm512_cmpge_epu16_mask(m1, t[j]) << 32;
        } else if (width == 4) {
            const __m512i mm = _mm512_set1_epi32(0x7FFFFFFF);
            __m512i b[4], m[4];
            for (int i = 0; i < 4; i++) {
                b[i] = _mm512_loadu_si512((const void *)(bp + 64 * i));
                m[i] = _mm512_and_si512(b[i], mm);
            }
            if (np) {
                uint64_t c = 0;
                for (int i = 0; i < 4; i++)
                    c |= (uint64_t)_mm512_cmpneq_epi32_mask(b[i], _mm512_loadu_si512((const void *)(np + 64 * i)))
                         << (16 * i);
                changed[blk] = c;
            }
            for (uint32_t j = 0; j < nthr; j++) {
                uint64_t c = 0;
                for (int i = 0; i < 4; i++) c |= (uint64_t)_mm512_cmpge_epu32_mask(m[i], t[j]) << (16 * i);
                g[j] = c;
            }
        } else {
            __m512i b = _mm512_loadu_si512((const void *)bp);
            if (np) changed[blk] = _mm512_cmpneq_epi8_mask(b, _mm512_loadu_si512((const void *)np));
            __m512i m = _mm512_and_si512(b, _mm512_set1_epi8(0x7F));
            for (uint32_t j = 0; j < nthr; j++) g[j] = _mm512_cmpge_epu8_mask(m, t[j]);
        }
    }
    blocks_scalar(base, next, width, n, thr, nthr, changed, ge, stride, full);
}

delta_masks_fn delta_masks_at(delta_level_t level) {
    uint32_t cpu = ferry_cpu();
    if (level >= DELTA_LEVEL_AVX512 && (cpu & FERRY_CPU_AVX512BW)) return masks_avx512;
    if (level >= DELTA_LEVEL_AVX2 && (cpu & FERRY_CPU_AVX2)) return masks_avx2;
    return delta_masks_scalar;
}

size_t delta_masks_kernels(delta_masks_fn *out, size_t cap) {
    size_t n = 0;
    uint32_t cpu = ferry_cpu();
    if (n < cap && (cpu & FERRY_CPU_AVX512BW)) out[n++] = masks_avx512;
    if (n < cap && (cpu & FERRY_CPU_AVX2)) out[n++] = masks_avx2;
    if (n < cap) out[n++] = delta_masks_scalar;
    return n;
}
#else
delta_masks_fn delta_masks_at(delta_level_t level) {
    (void)level;
    return delta_masks_scalar;
}

size_t delta_masks_kernels(delta_masks_fn *out, size_t cap) {
    if (cap) out[0] = delta_masks_scalar;
    return cap ? 1 : 0;
}
#endif
