/* Streaming copy: see copy.h. Chosen once per call by the CPU's features;
 * below 4 KiB an ordinary memcpy is as good and the lines are likely to be
 * wanted. */
#include "common/copy.h"

#include "common/cpu.h"

#include <stdint.h>
#include <string.h>

#if defined(FERRY_CPU_X86)
#include <immintrin.h>

/* dst 32-byte aligned, n a multiple of 128 */
FERRY_TARGET_AVX2 static void stream_avx2(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 128) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i b = _mm256_loadu_si256((const __m256i *)(src + i + 32));
        __m256i c = _mm256_loadu_si256((const __m256i *)(src + i + 64));
        __m256i d = _mm256_loadu_si256((const __m256i *)(src + i + 96));
        _mm256_stream_si256((__m256i *)(dst + i), a);
        _mm256_stream_si256((__m256i *)(dst + i + 32), b);
        _mm256_stream_si256((__m256i *)(dst + i + 64), c);
        _mm256_stream_si256((__m256i *)(dst + i + 96), d);
    }
    _mm_sfence();
}

/* dst 64-byte aligned, n a multiple of 128 */
FERRY_TARGET_AVX512F static void stream_avx512(uint8_t *dst, const uint8_t *src, size_t n) {
    for (size_t i = 0; i < n; i += 128) {
        __m512i a = _mm512_loadu_si512((const void *)(src + i));
        __m512i b = _mm512_loadu_si512((const void *)(src + i + 64));
        _mm512_stream_si512((void *)(dst + i), a);
        _mm512_stream_si512((void *)(dst + i + 64), b);
    }
    _mm_sfence();
}

void ferry_copy_stream(void *dst, const void *src, size_t n) {
    uint32_t cpu = ferry_cpu();
    int lv = (cpu & FERRY_CPU_AVX512F) ? 2 : (cpu & FERRY_CPU_AVX2) ? 1 : 0;
    if (lv == 0 || n < 4096) {
        memcpy(dst, src, n);
        return;
    }
    uint8_t *d = dst;
    const uint8_t *s = src;
    size_t head = (size_t)(-(uintptr_t)d & 63); /* to a 64-byte boundary */
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t body = n & ~(size_t)127;
    if (lv == 2) stream_avx512(d, s, body);
    else stream_avx2(d, s, body);
    memcpy(d + body, s + body, n - body);
}

#else

void ferry_copy_stream(void *dst, const void *src, size_t n) { memcpy(dst, src, n); }

#endif
