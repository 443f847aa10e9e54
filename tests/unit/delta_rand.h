/* Random test data for the delta codec's tests: a splitmix64 stream, and
 * pairs of versions of which a share changed, a tenth of those by more
 * than one ulp. Header only: each test is one program. */
#ifndef FERRY_TESTS_DELTA_RAND_H
#define FERRY_TESTS_DELTA_RAND_H

#include <stdint.h>

#include "codec/codec_internal.h"

static inline uint64_t rng(uint64_t *s) {
    *s += 0x9e3779b97f4a7c15ull;
    uint64_t z = *s;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* n random patterns of width w in base; next the same with a share p
 * changed, a tenth of them by 2 to big + 1 steps of elem_ord (the other
 * way where that leaves the range). */
static inline void delta_make_random(uint8_t *base, uint8_t *next, uint32_t w, uint64_t n, double p, uint32_t big,
                                     uint64_t seed) {
    uint64_t s = seed;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t v = (uint32_t)rng(&s) & (w == 4 ? ~0u : (1u << (8 * w)) - 1), nv = v;
        elem_put(base, w, i, v);
        if ((double)(rng(&s) % 1000000) < p * 1e6) {
            int64_t d = rng(&s) % 10 ? 1 : 2 + (int64_t)(rng(&s) % big);
            if (rng(&s) & 1) d = -d;
            if (!elem_unord(elem_ord(v, w) + d, w, &nv)) elem_unord(elem_ord(v, w) - d, w, &nv);
        }
        elem_put(next, w, i, nv);
    }
}

#endif
