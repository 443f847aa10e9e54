/* ferry sum (common/sum.h): the definition recomputed here from xxhash's own
 * XXH3 calls, golden values computed independently (Python's xxhash package,
 * the definition written out in a few lines), and streaming in random pieces
 * equal to one call. */
#define FERRY_HASH_IMPL /* this file calls xxhash's own XXH3, not ferry's builds */
#include "common/sum.h"

#include "check.h"

#define PATTERN_LEN ((size_t)1 << 21)

/* byte i of the fixed pattern: the top byte of i * 0x9E3779B97F4A7C15 */
static uint8_t *pattern(void) {
    uint8_t *p = malloc(PATTERN_LEN);
    CHECK(p);
    for (size_t i = 0; i < PATTERN_LEN; i++) p[i] = (uint8_t)(((uint64_t)i * 0x9E3779B97F4A7C15ull) >> 56);
    return p;
}

/* The definition, written out from XXH3_64bits and XXH3_64bits_withSeed. */
static uint64_t reference(const uint8_t *p, size_t len) {
    if (len <= 65536) return XXH3_64bits(p, len);
    size_t n = (len + 65535) / 65536;
    uint8_t *h = malloc(8 * n);
    CHECK(h);
    for (size_t i = 0; i < n; i++) {
        size_t size = len - i * 65536 < 65536 ? len - i * 65536 : 65536;
        uint64_t v = XXH3_64bits(p + i * 65536, size);
        for (int k = 0; k < 8; k++) h[8 * i + k] = (uint8_t)(v >> (8 * k));
    }
    uint64_t s = XXH3_64bits_withSeed(h, 8 * n, len);
    free(h);
    return s;
}

/* A piece size: small, near a leaf, or large. */
static size_t piece(void) {
    switch (rng_next() % 6) {
    case 0: return 0;
    case 1: return rng_next() % 16;
    case 2: return rng_next() % 1024;
    case 3: return 65536 - 8 + rng_next() % 16;
    case 4: return rng_next() % 200000;
    default: return rng_next() % 4096;
    }
}

static uint64_t streamed(const uint8_t *p, size_t len) {
    ferry_sum_state_t st;
    ferry_sum_reset(&st, len);
    size_t at = 0;
    while (at < len) {
        size_t n = piece();
        if (n > len - at) n = len - at;
        ferry_sum_update(&st, p + at, n);
        at += n;
        if (rng_next() % 8 == 0) (void)ferry_sum_digest(&st); /* a digest midway changes nothing */
    }
    return ferry_sum_digest(&st);
}

int main(void) {
    uint8_t *p = pattern();
    /* from Python: xxhash 3.x's xxh3_64_intdigest, the definition applied to the pattern */
    static const struct {
        size_t len;
        uint64_t sum;
    } golden[] = {
        {0u, 0x2d06800538d394c2ull},       {1u, 0xc44bdff4074eecdbull},
        {3u, 0xe14090f554a5ea90ull},       {8u, 0xcd1c7f88482fcaefull},
        {100u, 0x4ff5f6c0d102cd55ull},     {240u, 0x5eb2467c8c9e3969ull},
        {241u, 0x2d431e984c441f15ull},     {65535u, 0x454032ceefbc317full},
        {65536u, 0xbd195f126e2b8999ull},   {65537u, 0x10131853dff69689ull},
        {131072u, 0x4c8d3c3e7ea9b468ull},  {200000u, 0xae269e958169d7a2ull},
        {1966080u, 0x9fb7a7008eb3a405ull}, {1966081u, 0x6713e4f8bd9190c4ull},
        {1048576u, 0x832fb21d8691d8bcull}, {2097147u, 0x2cb6f9010e64c748ull},
    };
    for (size_t i = 0; i < sizeof golden / sizeof golden[0]; i++) {
        size_t n = golden[i].len;
        uint64_t got = ferry_sum(p, n), ref = reference(p, n), str = streamed(p, n);
        if (got != golden[i].sum || ref != golden[i].sum || str != golden[i].sum) {
            fprintf(stderr, "len %zu: ferry_sum %016llx, definition %016llx, streamed %016llx, golden %016llx\n", n,
                    (unsigned long long)got, (unsigned long long)ref, (unsigned long long)str,
                    (unsigned long long)golden[i].sum);
            return 1;
        }
    }
    /* every length class of xxh3 and the leaf edges, at odd offsets, one-shot
       and streamed in random pieces */
    static const size_t lens[] = {2,      4,      9,      16,     17,     128,    129,     241,     1024,
                                  65534,  65537,  65536 * 2 - 1, 65536 * 2 + 1, 65536 * 31, 65536 * 31 + 7,
                                  999999, 1 << 20, PATTERN_LEN - 16};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t off = 0; off < 16; off += 5) {
            size_t n = lens[i] + off > PATTERN_LEN ? PATTERN_LEN - off : lens[i];
            uint64_t ref = reference(p + off, n);
            for (int rep = 0; rep < 3; rep++) {
                uint64_t got = rep ? streamed(p + off, n) : ferry_sum(p + off, n);
                if (got != ref) {
                    fprintf(stderr, "len %zu at offset %zu (%s): %016llx, definition %016llx\n", n, off,
                            rep ? "streamed" : "one call", (unsigned long long)got, (unsigned long long)ref);
                    return 1;
                }
            }
        }
    }
    /* random lengths, random pieces */
    for (int t = 0; t < 200; t++) {
        size_t n = (size_t)(rng_next() % (t < 100 ? 300000 : PATTERN_LEN)), off = (size_t)(rng_next() % 16);
        if (n + off > PATTERN_LEN) n = PATTERN_LEN - off;
        uint64_t ref = reference(p + off, n);
        CHECK(ferry_sum(p + off, n) == ref);
        CHECK(streamed(p + off, n) == ref);
    }
    /* one byte changed anywhere changes the sum */
    uint64_t whole = ferry_sum(p, PATTERN_LEN);
    for (size_t at = 0; at < PATTERN_LEN; at += 65536 + 4097) {
        p[at] ^= 0x40;
        CHECK(ferry_sum(p, PATTERN_LEN) != whole);
        p[at] ^= 0x40;
    }
    free(p);
    printf("ok\n");
    return 0;
}
