/* The GPU apply's groups (codec/delta_groups.h): every item in exactly one
 * group, every group holding an item that applies, at most the groups
 * asked for, no cut before its share, and the cases that
 * the first rule got wrong (two items, the smaller first, stayed in one
 * group). CPU only: the arithmetic the CUDA code runs. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "codec/delta_groups.h"

#define MAXN 64

/* The invariants of any split; returns the groups. */
static size_t split(const size_t *bytes, size_t n, size_t want, size_t *first) {
    size_t total = 0, apply = 0;
    for (size_t i = 0; i < n; i++) total += bytes[i], apply += bytes[i] != 0;
    CHECK(total > 0 && want >= 1);
    size_t g = delta_groups(bytes, n, want, total, first);
    CHECK(g >= 1 && g <= want && g <= apply);
    CHECK(first[0] == 0 && first[g] == n);
    for (size_t k = 0; k < g; k++) {
        CHECK(first[k] < first[k + 1]);
        size_t in = 0;
        for (size_t i = first[k]; i < first[k + 1]; i++) in += bytes[i] != 0;
        CHECK(in >= 1); /* no group without work */
    }
    return g;
}

static uint64_t rng(uint64_t *s) {
    *s = *s * 6364136223846793005ull + 1442695040888963407ull;
    return *s >> 33;
}

int main(void) {
    size_t first[MAXN + 1];
    { /* 16 equal items into 8: two each, as the bench has them */
        size_t b[16];
        for (int i = 0; i < 16; i++) b[i] = 4 << 20;
        CHECK(split(b, 16, 8, first) == 8);
        for (int k = 0; k <= 8; k++) CHECK(first[k] == (size_t)(2 * k));
    }
    { /* two items of any sizes make two groups, the smaller first or not */
        const size_t pairs[][2] = {{960, 992}, {992, 960}, {16, 1 << 30}, {1 << 30, 16}, {4 << 20, 8 << 20}};
        for (size_t p = 0; p < sizeof pairs / sizeof pairs[0]; p++) {
            CHECK(split(pairs[p], 2, 2, first) == 2);
            CHECK(first[1] == 1);
        }
    }
    { /* items that do not apply (0 bytes) are never alone in a group, wherever they lie */
        const size_t b[] = {0, 960, 0, 0, 992, 0};
        CHECK(split(b, 6, 2, first) == 2);
        CHECK(first[1] >= 2 && first[1] <= 4);
        const size_t c[] = {0, 0, 500, 0};
        CHECK(split(c, 4, 3, first) == 1);
    }
    { /* one huge item among small ones: the cuts land beside it, none inside a share twice */
        const size_t b[] = {10, 10, 1000, 10, 10, 10};
        size_t g = split(b, 6, 4, first);
        CHECK(g >= 2);
        printf("huge item in the middle: %zu groups, first items", g);
        for (size_t k = 0; k < g; k++) printf(" %zu", first[k]);
        printf("\n");
    }
    { /* one group asked: all in it */
        const size_t b[] = {5, 7, 9};
        CHECK(split(b, 3, 1, first) == 1);
    }
    { /* random sizes, holes and asks: the invariants, and equal shares within one item's size */
        uint64_t s = 7;
        for (int t = 0; t < 20000; t++) {
            size_t n = 1 + rng(&s) % MAXN, b[MAXN], total = 0, big = 0;
            for (size_t i = 0; i < n; i++) {
                b[i] = rng(&s) % 4 == 0 ? 0 : 16 * (1 + rng(&s) % (rng(&s) % 2 ? 8 : 100000));
                total += b[i];
                if (b[i] > big) big = b[i];
            }
            if (!total) b[0] = 16, total = 16, big = 16;
            size_t apply = 0;
            for (size_t i = 0; i < n; i++) apply += b[i] != 0;
            size_t want = 1 + rng(&s) % 8;
            if (want > apply) want = apply; /* as the apply asks */
            size_t g = split(b, n, want, first);
            /* no cut comes early: the next item's middle lies past the cut's share (a cut can come late,
               where one item spans several shares: it is at most one a boundary) */
            size_t acc = 0, k = 1;
            for (size_t i = 0; i < n && k < g; i++) {
                acc += b[i];
                if (i + 1 == first[k]) {
                    size_t j = i + 1;
                    while (j < n && !b[j]) j++;
                    CHECK(j < n);
                    CHECK((2 * acc + b[j]) * want >= 2 * k * total);
                    k++;
                }
            }
            if (want == apply) { /* as many groups as items that apply, when every item is its own share's */
                size_t eq = 1;
                for (size_t i = 0; i < n; i++) eq &= b[i] == 0 || b[i] == big;
                if (eq) CHECK(g == want);
            }
        }
        printf("20000 random splits: every item in one group, every group with work, no cut before its share\n");
    }
    printf("delta groups: all cases passed\n");
    return 0;
}
