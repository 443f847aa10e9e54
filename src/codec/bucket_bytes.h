/* The magnitude buckets of 64 16-bit elements as 64 bytes, for the AVX-512
 * kernels (enc_avx512.c, apply_avx512.c). A 16-bit element's bucket (its
 * magnitude shifted right by 7) is the high byte of the element shifted left
 * by one, so one byte permute of the two doubled vectors gathers them. Needs
 * AVX-512 VBMI; include only where <immintrin.h> is. */
#ifndef FERRY_CODEC_BUCKET_BYTES_H
#define FERRY_CODEC_BUCKET_BYTES_H

#include <immintrin.h>

/* Elements 0..31 in v0, 32..63 in v1; byte i of the result is element i's
 * bucket. */
__attribute__((target("avx512f,avx512bw,avx512vbmi"))) static inline __m512i delta_bucket_bytes16(__m512i v0,
                                                                                                  __m512i v1) {
    const __m512i odd = _mm512_set_epi8(127, 125, 123, 121, 119, 117, 115, 113, 111, 109, 107, 105, 103, 101, 99, 97,
                                        95, 93, 91, 89, 87, 85, 83, 81, 79, 77, 75, 73, 71, 69, 67, 65, 63, 61, 59, 57,
                                        55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27, 25, 23, 21, 19, 17,
                                        15, 13, 11, 9, 7, 5, 3, 1);
    return _mm512_permutex2var_epi8(_mm512_add_epi16(v0, v0), odd, _mm512_add_epi16(v1, v1));
}

#endif
