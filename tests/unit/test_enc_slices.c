/* The GPU encoder's slices (codec/enc_slices.h): every chunk with changes
 * in exactly one slice, in order; no slice over either budget unless it is
 * one chunk; no slice that could have taken its next chunk; a budget that
 * holds everything makes one slice. CPU only: the arithmetic the CUDA
 * code's driver runs. */
#include <stdint.h>
#include <stdio.h>

#include "check.h"
#include "codec/enc_slices.h"

#define MAXN 200

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

/* Slices of chunks [0, n) under the budgets, checked; returns how many. */
static size_t slice_all(const uint32_t *ch, const uint32_t *nsub, size_t n, uint64_t mc, uint64_t mb) {
    size_t slices = 0;
    for (size_t from = 0; from < n;) {
        const size_t to = enc_slice_end(ch, nsub, from, n, mc, mb);
        CHECK(to > from && to <= n);
        uint64_t c = 0, b = 0;
        for (size_t i = from; i < to; i++) c += ch[i], b += nsub[i];
        CHECK(to - from == 1 || (c <= mc && b <= mb)); /* over a budget only as one chunk */
        CHECK(to == n || c + ch[to] > mc || b + nsub[to] > mb); /* the next did not fit */
        from = to;
        slices++;
    }
    return slices;
}

int main(void) {
    uint32_t ch[MAXN], nsub[MAXN];
    for (size_t i = 0; i < 4; i++) ch[i] = 100, nsub[i] = 2;
    CHECK(slice_all(ch, nsub, 4, 400, 8) == 1);  /* everything fits: one slice */
    CHECK(slice_all(ch, nsub, 4, 399, 8) == 2);  /* one change short: two of 3 and 1 */
    CHECK(enc_slice_end(ch, nsub, 0, 4, 399, 8) == 3);
    CHECK(slice_all(ch, nsub, 4, 400, 3) == 4);  /* sub-blocks bind: a chunk each */
    CHECK(slice_all(ch, nsub, 4, 1, 1) == 4);    /* each chunk over both budgets: still one a slice */
    ch[1] = 1000000;                              /* a chunk whose every element changed */
    CHECK(enc_slice_end(ch, nsub, 0, 4, 1000, 100) == 1 && enc_slice_end(ch, nsub, 1, 4, 1000, 100) == 2);
    uint64_t s = 7;
    size_t total = 0;
    for (int round = 0; round < 20000; round++) {
        const size_t n = 1 + rng(&s) % MAXN;
        for (size_t i = 0; i < n; i++) ch[i] = 1 + (uint32_t)(rng(&s) % 5000), nsub[i] = 1 + (uint32_t)(rng(&s) % 256);
        total += slice_all(ch, nsub, n, 1 + rng(&s) % 50000, 1 + rng(&s) % 2000);
    }
    printf("ok: slices within their budgets, each as full as the next chunk allows (%zu slices in 20000 random "
           "batches besides)\n", total);
    return 0;
}
