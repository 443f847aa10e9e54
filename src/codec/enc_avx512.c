/* The encoder's two per-element passes for 16-bit elements (bf16, f16) on
 * CPUs with AVX-512 (BW, VBMI, VBMI2, VPOPCNTDQ) and BMI2; picked at run
 * time (delta_enc_kernels_pick).
 * - The change scan compresses the offsets of the changed lanes of each 32
 *   elements into a packed array, so no branch depends on where changes
 *   fall (a loop over a block's set bits mispredicts about once per block).
 *   Offsets only: each compress costs a few cycles on current cores.
 * - The class rows work on the exponent byte of 64 elements at once: a
 *   16-bit element's magnitude bucket is the high byte of the element
 *   shifted left by one, and class thresholds are whole buckets, so one byte
 *   compare per threshold gives a block's 64-bit mask. */
#include "codec/codec_internal.h"

#if defined(FERRY_CPU_X86)
#include <immintrin.h>

#include "codec/bucket_bytes.h"

#define AVX512 FERRY_TARGET_AVX512_CODEC

AVX512 static size_t scan_w2(const uint8_t *base, const uint8_t *next, uint32_t n, uint16_t *off) {
    size_t m = 0;
    const __m512i step = _mm512_set1_epi16(32);
    __m512i idx = _mm512_set_epi16(31, 30, 29, 28, 27, 26, 25, 24, 23, 22, 21, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10,
                                   9, 8, 7, 6, 5, 4, 3, 2, 1, 0);
    for (uint32_t i = 0; i < n; i += 32) {
        /* the same line two pieces ahead on its way from memory, one per
           step (a burst of them fills the miss buffers and stalls) */
        __builtin_prefetch(base + 2 * (size_t)i + 4096);
        __builtin_prefetch(next + 2 * (size_t)i + 4096);
        __mmask32 valid = n - i >= 32 ? ~0u : (1u << (n - i)) - 1; /* lanes past n load as equal zeros */
        __mmask32 ch = _mm512_cmpneq_epi16_mask(_mm512_maskz_loadu_epi16(valid, base + 2 * (size_t)i),
                                                _mm512_maskz_loadu_epi16(valid, next + 2 * (size_t)i));
        _mm512_storeu_si512((void *)(off + m), _mm512_maskz_compress_epi16(ch, idx));
        m += (uint32_t)__builtin_popcount(ch);
        idx = _mm512_add_epi16(idx, step);
    }
    return m;
}

/* Inclusive prefix sums over 8 lanes of popcounts, plus the carry in; the
 * carry out is the last lane. */
AVX512 static inline __m512i prefix8(__m512i pc, __m512i *carry) {
    const __m512i z = _mm512_setzero_si512();
    __m512i x = _mm512_add_epi64(pc, _mm512_alignr_epi64(pc, z, 7));
    x = _mm512_add_epi64(x, _mm512_alignr_epi64(x, z, 6));
    x = _mm512_add_epi64(x, _mm512_alignr_epi64(x, z, 4));
    x = _mm512_add_epi64(x, *carry);
    *carry = _mm512_permutexvar_epi64(_mm512_set1_epi64(7), x);
    return x;
}

AVX512 static void class_rows_w2(const uint8_t *base, uint32_t nel, size_t ahead, const uint8_t *bucket_lower, uint32_t K,
                                 uint64_t cm[][DELTA_MASK_BATCH], uint32_t before[][DELTA_MASK_BATCH],
                                 uint64_t *count) {
    /* ge[k][b]: elements of block b in class k or above; row 0 the valid
       elements, row K none */
    uint64_t ge[FERRY_DELTA_CLASSES_MAX + 1][DELTA_MASK_BATCH];
    __m512i thr[FERRY_DELTA_CLASSES_MAX];
    for (uint32_t k = 1; k < K; k++) thr[k] = _mm512_set1_epi8((char)bucket_lower[k]);
    uint32_t nblk = (nel + 63) / 64;
    for (uint32_t b = 0; b < DELTA_MASK_BATCH; b++) {
        uint64_t valid = delta_block_valid(nel, b);
        ge[0][b] = valid;
        ge[K][b] = 0;
        if (b >= nblk) {
            for (uint32_t k = 1; k < K; k++) ge[k][b] = 0;
            continue;
        }
        const uint8_t *bp = base + 128 * (size_t)b;
        /* the same block of the next batch on its way from memory */
        if (128 * (size_t)(b + DELTA_MASK_BATCH + 1) <= ahead) {
            __builtin_prefetch(bp + 128 * DELTA_MASK_BATCH);
            __builtin_prefetch(bp + 128 * DELTA_MASK_BATCH + 64);
        }
        __m512i v0 = _mm512_maskz_loadu_epi16((__mmask32)valid, bp);
        __m512i v1 = _mm512_maskz_loadu_epi16((__mmask32)(valid >> 32), bp + 64);
        __m512i e = delta_bucket_bytes16(v0, v1);
        for (uint32_t k = 1; k < K; k++) ge[k][b] = _cvtmask64_u64(_mm512_mask_cmpge_epu8_mask(valid, e, thr[k]));
    }
    for (uint32_t k = 0; k < K; k++) {
        __m512i carry = _mm512_set1_epi64((long long)count[k]);
        for (uint32_t g = 0; g < DELTA_MASK_BATCH; g += 8) {
            __m512i x = _mm512_andnot_si512(_mm512_loadu_si512((const void *)&ge[k + 1][g]),
                                            _mm512_loadu_si512((const void *)&ge[k][g]));
            _mm512_storeu_si512((void *)&cm[k][g], x);
            __m512i pc = _mm512_popcnt_epi64(x);
            __m512i incl = prefix8(pc, &carry);
            _mm256_storeu_si256((__m256i *)&before[k][g], _mm512_cvtepi64_epi32(_mm512_sub_epi64(incl, pc)));
        }
        count[k] = (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(carry));
    }
}

bool delta_enc_kernels_pick(delta_enc_kernels_t *k) {
    if (!ferry_cpu_has(FERRY_CPU_AVX512_CODEC)) return false;
    k->scan_w2 = scan_w2;
    k->class_rows_w2 = class_rows_w2;
    return true;
}
#else
bool delta_enc_kernels_pick(delta_enc_kernels_t *k) {
    (void)k;
    return false;
}
#endif
