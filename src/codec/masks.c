/* Block kernels: per 64 elements, a bit mask of the elements that changed
 * and, per class threshold, of the elements at or above it in magnitude.
 * These passes touch every element, so they run 16-32 elements per AVX2
 * instruction where the CPU has it; the scalar kernel gives the same masks
 * everywhere else (and for a chunk's last, partial block). */
#include "codec/codec_internal.h"

void delta_masks_scalar(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n,
                        const uint32_t *thr, uint32_t nthr, uint64_t *changed, uint64_t *ge) {
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

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#define AVX2 __attribute__((target("avx2")))

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

AVX2 static void masks_avx2(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n,
                            const uint32_t *thr, uint32_t nthr, uint64_t *changed, uint64_t *ge) {
    if (n != 64) {
        delta_masks_scalar(base, next, width, n, thr, nthr, changed, ge);
        return;
    }
    if (width == 2) {
        __m256i b[4], m[4];
        const __m256i mm = _mm256_set1_epi16(0x7FFF);
        for (int i = 0; i < 4; i++) {
            b[i] = _mm256_loadu_si256((const __m256i *)(base + 32 * i));
            m[i] = _mm256_and_si256(b[i], mm);
        }
        if (next) {
            __m256i e[4];
            for (int i = 0; i < 4; i++)
                e[i] = _mm256_cmpeq_epi16(b[i], _mm256_loadu_si256((const __m256i *)(next + 32 * i)));
            *changed = ~bits16(e[0], e[1], e[2], e[3]);
        }
        for (uint32_t j = 0; j < nthr; j++) {
            __m256i t = _mm256_set1_epi16((short)(thr[j] - 1));
            ge[j] = bits16(_mm256_cmpgt_epi16(m[0], t), _mm256_cmpgt_epi16(m[1], t), _mm256_cmpgt_epi16(m[2], t),
                           _mm256_cmpgt_epi16(m[3], t));
        }
    } else if (width == 4) {
        __m256i b[8], m[8];
        const __m256i mm = _mm256_set1_epi32(0x7FFFFFFF);
        for (int i = 0; i < 8; i++) {
            b[i] = _mm256_loadu_si256((const __m256i *)(base + 32 * i));
            m[i] = _mm256_and_si256(b[i], mm);
        }
        if (next) {
            __m256i e[8];
            for (int i = 0; i < 8; i++)
                e[i] = _mm256_cmpeq_epi32(b[i], _mm256_loadu_si256((const __m256i *)(next + 32 * i)));
            *changed = ~bits16(pack32(e[0], e[1]), pack32(e[2], e[3]), pack32(e[4], e[5]), pack32(e[6], e[7]));
        }
        for (uint32_t j = 0; j < nthr; j++) {
            __m256i t = _mm256_set1_epi32((int)(thr[j] - 1)), c[8];
            for (int i = 0; i < 8; i++) c[i] = _mm256_cmpgt_epi32(m[i], t);
            ge[j] = bits16(pack32(c[0], c[1]), pack32(c[2], c[3]), pack32(c[4], c[5]), pack32(c[6], c[7]));
        }
    } else {
        __m256i b[2], m[2];
        const __m256i mm = _mm256_set1_epi8(0x7F);
        for (int i = 0; i < 2; i++) {
            b[i] = _mm256_loadu_si256((const __m256i *)(base + 32 * i));
            m[i] = _mm256_and_si256(b[i], mm);
        }
        if (next) {
            uint64_t eq = 0;
            for (int i = 0; i < 2; i++)
                eq |= (uint64_t)(uint32_t)_mm256_movemask_epi8(
                          _mm256_cmpeq_epi8(b[i], _mm256_loadu_si256((const __m256i *)(next + 32 * i))))
                      << (32 * i);
            *changed = ~eq;
        }
        for (uint32_t j = 0; j < nthr; j++) {
            __m256i t = _mm256_set1_epi8((char)(thr[j] - 1));
            ge[j] = (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(m[0], t)) |
                    (uint64_t)(uint32_t)_mm256_movemask_epi8(_mm256_cmpgt_epi8(m[1], t)) << 32;
        }
    }
}

delta_masks_fn delta_masks_pick(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") ? masks_avx2 : delta_masks_scalar;
}
#else
delta_masks_fn delta_masks_pick(void) { return delta_masks_scalar; }
#endif
