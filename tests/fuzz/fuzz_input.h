/* What the delta fuzz targets share: reading the input a byte at a time,
 * a seed mixer, and allocations sized exactly (so ASan sees every
 * overread). */
#ifndef FERRY_FUZZ_INPUT_H
#define FERRY_FUZZ_INPUT_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline void *xmalloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p) abort();
    return p;
}

/* A copy in an allocation of exactly n bytes (1 when n is 0). */
static inline uint8_t *exact_copy(const void *src, size_t n) {
    uint8_t *p = xmalloc(n);
    if (n) memcpy(p, src, n);
    return p;
}

/* The fuzzer's bytes, taken from the front; 0 once they run out. */
typedef struct {
    const uint8_t *p;
    size_t n;
} input_t;

static inline uint32_t take8(input_t *in) {
    if (in->n == 0) return 0;
    in->n--;
    return *in->p++;
}

#endif
