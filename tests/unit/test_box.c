/* Boxes: numel, intersect, contains, equal, of_shape, format; and a property
 * test of intersect/contains against brute-force enumeration of grid points. */
#include <stdint.h>
#include <string.h>

#include "check.h"


static int rng_below(int n) { return (int)((rng_next() >> 33) % (uint64_t)n); }

/* A box from (offset, extent) pairs; unused dims get junk so that tests
 * notice if the library reads past ndim. */
static ferry_box_t mk(uint32_t ndim, const int64_t *off, const int64_t *ext) {
    ferry_box_t b;
    memset(&b, 0, sizeof b);
    for (int d = 0; d < FERRY_MAX_DIMS; d++) {
        b.offset[d] = -7777 - d;
        b.extent[d] = -3 - d;
    }
    b.ndim = ndim;
    for (uint32_t d = 0; d < ndim; d++) {
        b.offset[d] = off[d];
        b.extent[d] = ext[d];
    }
    return b;
}

static ferry_box_t mk1(int64_t o0, int64_t e0) {
    int64_t o[1] = {o0}, e[1] = {e0};
    return mk(1, o, e);
}

static ferry_box_t mk2(int64_t o0, int64_t e0, int64_t o1, int64_t e1) {
    int64_t o[2] = {o0, o1}, e[2] = {e0, e1};
    return mk(2, o, e);
}

static void fill_sentinel(ferry_box_t *b) { memset(b, 0xa5, sizeof *b); }

static int is_sentinel(const ferry_box_t *b) {
    ferry_box_t s;
    fill_sentinel(&s);
    return memcmp(&s, b, sizeof s) == 0;
}

static void test_numel(void) {
    ferry_box_t b = mk(0, NULL, NULL);
    CHECK_EQ_INT(ferry_box_numel(&b), 1);
    b = mk1(5, 7);
    CHECK_EQ_INT(ferry_box_numel(&b), 7);
    int64_t o[3] = {1, 2, 3}, e[3] = {2, 3, 4};
    b = mk(3, o, e);
    CHECK_EQ_INT(ferry_box_numel(&b), 24);
    int64_t ez[3] = {2, 0, 4};
    b = mk(3, o, ez);
    CHECK_EQ_INT(ferry_box_numel(&b), 0);
    int64_t en[3] = {2, 3, -4};
    b = mk(3, o, en);
    CHECK_EQ_INT(ferry_box_numel(&b), 0);
    int64_t en2[3] = {-2, -3, 4}; /* two negatives must not multiply to positive */
    b = mk(3, o, en2);
    CHECK_EQ_INT(ferry_box_numel(&b), 0);
    int64_t o8[8] = {0}, e8[8] = {2, 2, 2, 2, 2, 2, 2, 3};
    b = mk(8, o8, e8);
    CHECK_EQ_INT(ferry_box_numel(&b), 384);
}

static void test_intersect(void) {
    ferry_box_t out, want;

    /* overlapping */
    ferry_box_t a = mk2(0, 10, 0, 10), b = mk2(5, 10, 3, 4);
    fill_sentinel(&out);
    CHECK(ferry_box_intersect(&a, &b, &out));
    want = mk2(5, 5, 3, 4);
    CHECK(ferry_box_equal(&out, &want));
    CHECK_EQ_INT(out.ndim, 2);
    CHECK(ferry_box_intersect(&b, &a, &out)); /* symmetric */
    CHECK(ferry_box_equal(&out, &want));
    CHECK(ferry_box_intersect(&a, &b, NULL)); /* out may be NULL */
    CHECK(ferry_box_intersect(&a, &a, &out));
    CHECK(ferry_box_equal(&out, &a));

    /* nested */
    ferry_box_t in = mk2(2, 3, 4, 1);
    CHECK(ferry_box_intersect(&a, &in, &out));
    CHECK(ferry_box_equal(&out, &in));

    /* touching but disjoint: [0,4) and [4,8) share no element */
    ferry_box_t t1 = mk2(0, 4, 0, 4), t2 = mk2(4, 4, 0, 4), t3 = mk2(0, 4, 4, 4);
    fill_sentinel(&out);
    CHECK(!ferry_box_intersect(&t1, &t2, &out));
    CHECK(is_sentinel(&out));
    CHECK(!ferry_box_intersect(&t2, &t1, &out));
    CHECK(!ferry_box_intersect(&t1, &t3, &out));
    CHECK(!ferry_box_intersect(&t1, &t2, NULL));
    CHECK(is_sentinel(&out));

    /* overlap in one dimension only */
    ferry_box_t p = mk2(0, 4, 0, 4), q = mk2(2, 4, 10, 4);
    CHECK(!ferry_box_intersect(&p, &q, &out));
    CHECK(is_sentinel(&out));

    /* an empty box intersects nothing, not even a box around it */
    ferry_box_t empty = mk2(2, 0, 2, 2), negative = mk2(2, -1, 2, 2);
    CHECK(!ferry_box_intersect(&a, &empty, &out));
    CHECK(!ferry_box_intersect(&empty, &a, &out));
    CHECK(!ferry_box_intersect(&a, &negative, &out));
    CHECK(!ferry_box_intersect(&empty, &empty, &out));
    CHECK(is_sentinel(&out));

    /* different ndim never intersect, even with identical leading dims */
    ferry_box_t one = mk1(0, 10);
    int64_t o3[3] = {0, 0, 0}, e3[3] = {10, 10, 1};
    ferry_box_t three = mk(3, o3, e3);
    CHECK(!ferry_box_intersect(&one, &a, &out));
    CHECK(!ferry_box_intersect(&a, &three, &out));
    CHECK(!ferry_box_intersect(&three, &a, NULL));
    CHECK(is_sentinel(&out));

    /* ndim 0: one element each, the same one */
    ferry_box_t z1 = mk(0, NULL, NULL), z2 = mk(0, NULL, NULL);
    CHECK(ferry_box_intersect(&z1, &z2, &out));
    CHECK_EQ_INT(out.ndim, 0);

    /* negative offsets are fine */
    ferry_box_t n1 = mk1(-10, 8), n2 = mk1(-5, 100);
    CHECK(ferry_box_intersect(&n1, &n2, &out));
    want = mk1(-5, 3);
    CHECK(ferry_box_equal(&out, &want));
}

static void test_contains(void) {
    ferry_box_t outer = mk2(0, 10, 5, 5);
    ferry_box_t inner = mk2(2, 3, 6, 4);
    CHECK(ferry_box_contains(&outer, &inner));
    CHECK(!ferry_box_contains(&inner, &outer));
    CHECK(ferry_box_contains(&outer, &outer));
    ferry_box_t edge = mk2(0, 10, 5, 5);
    CHECK(ferry_box_contains(&outer, &edge));
    ferry_box_t past_end = mk2(5, 6, 5, 5);
    CHECK(!ferry_box_contains(&outer, &past_end));
    ferry_box_t before = mk2(0, 10, 4, 2);
    CHECK(!ferry_box_contains(&outer, &before));
    ferry_box_t disjoint = mk2(20, 1, 20, 1);
    CHECK(!ferry_box_contains(&outer, &disjoint));

    /* an empty inner is contained in any outer of the same ndim, wherever it sits */
    ferry_box_t empty_far = mk2(1000, 0, -1000, 7);
    ferry_box_t empty_neg = mk2(50, 3, 50, -2);
    CHECK(ferry_box_contains(&outer, &empty_far));
    CHECK(ferry_box_contains(&outer, &empty_neg));
    ferry_box_t empty_outer = mk2(0, 0, 0, 0);
    CHECK(ferry_box_contains(&empty_outer, &empty_far));
    CHECK(!ferry_box_contains(&empty_outer, &inner));

    /* different ndim: never */
    ferry_box_t one = mk1(0, 10), one_empty = mk1(0, 0);
    CHECK(!ferry_box_contains(&outer, &one));
    CHECK(!ferry_box_contains(&one, &outer));
    CHECK(!ferry_box_contains(&outer, &one_empty));

    ferry_box_t z = mk(0, NULL, NULL);
    CHECK(ferry_box_contains(&z, &z));
}

static void test_equal_of_shape(void) {
    ferry_box_t a = mk2(1, 2, 3, 4), b = mk2(1, 2, 3, 4);
    b.offset[5] = 99; /* entries at d >= ndim are ignored */
    b.extent[7] = -99;
    CHECK(ferry_box_equal(&a, &b));
    CHECK(ferry_box_equal(&b, &a));
    ferry_box_t c = mk2(1, 2, 3, 5), d = mk2(1, 2, 4, 4), e = mk2(0, 2, 3, 4);
    CHECK(!ferry_box_equal(&a, &c));
    CHECK(!ferry_box_equal(&a, &d));
    CHECK(!ferry_box_equal(&a, &e));
    ferry_box_t f = mk1(1, 2);
    CHECK(!ferry_box_equal(&a, &f));
    ferry_box_t z1 = mk(0, NULL, NULL), z2 = mk(0, NULL, NULL);
    z2.offset[0] = 5;
    CHECK(ferry_box_equal(&z1, &z2));

    int64_t shape[3] = {4, 5, 6};
    ferry_box_t s = ferry_box_of_shape(3, shape);
    CHECK_EQ_INT(s.ndim, 3);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ_INT(s.offset[i], 0);
        CHECK_EQ_INT(s.extent[i], shape[i]);
    }
    CHECK_EQ_INT(ferry_box_numel(&s), 120);
    int64_t zeros[3] = {0, 0, 0};
    ferry_box_t want = mk(3, zeros, shape);
    CHECK(ferry_box_equal(&s, &want));
    ferry_box_t s0 = ferry_box_of_shape(0, shape);
    CHECK_EQ_INT(s0.ndim, 0);
    CHECK_EQ_INT(ferry_box_numel(&s0), 1);
    int64_t shape8[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    ferry_box_t s8 = ferry_box_of_shape(8, shape8);
    CHECK_EQ_INT(s8.ndim, 8);
    CHECK_EQ_INT(s8.extent[7], 8);
    CHECK_EQ_INT(s8.offset[7], 0);
}

static void check_format(const ferry_box_t *b, const char *want) {
    char buf[256];
    memset(buf, 'x', sizeof buf);
    int n = ferry_box_format(b, buf, sizeof buf);
    if (strcmp(buf, want) != 0 || n != (int)strlen(want)) {
        fprintf(stderr, "ferry_box_format gave \"%s\" (%d), expected \"%s\" (%d)\n", buf, n, want,
                (int)strlen(want));
        exit(1);
    }
    /* every shorter buffer: truncated, NUL-terminated, same return value */
    for (size_t size = 1; size <= strlen(want); size++) {
        char small[256];
        memset(small, 'x', sizeof small);
        int m = ferry_box_format(b, small, size);
        CHECK_EQ_INT(m, strlen(want));
        CHECK_EQ_INT(strlen(small), size - 1);
        CHECK(strncmp(small, want, size - 1) == 0);
        for (size_t i = size; i < sizeof small; i++) CHECK(small[i] == 'x'); /* no overrun */
    }
    /* size 0 writes nothing */
    char none[4] = {'x', 'x', 'x', 'x'};
    CHECK_EQ_INT(ferry_box_format(b, none, 0), strlen(want));
    CHECK(none[0] == 'x');
    /* like snprintf, (NULL, 0) just measures */
    CHECK_EQ_INT(ferry_box_format(b, NULL, 0), strlen(want));
}

static void test_format(void) {
    ferry_box_t b = mk2(0, 128, 256, 256);
    check_format(&b, "[0:128, 256:512]");
    ferry_box_t z = mk(0, NULL, NULL);
    check_format(&z, "[]");
    ferry_box_t one = mk1(7, 1);
    check_format(&one, "[7:8]");
    ferry_box_t neg = mk1(-3, 5);
    check_format(&neg, "[-3:2]");
    int64_t o[8] = {0, 1, 2, 3, 4, 5, 6, 7}, e[8] = {1, 1, 1, 1, 1, 1, 1, 1};
    ferry_box_t eight = mk(8, o, e);
    check_format(&eight, "[0:1, 1:2, 2:3, 3:4, 4:5, 5:6, 6:7, 7:8]");
    int64_t bo[2] = {INT64_C(1) << 40, 0}, be[2] = {INT64_C(1) << 40, 3};
    ferry_box_t big = mk(2, bo, be);
    check_format(&big, "[1099511627776:2199023255552, 0:3]");

    /* explicit too-small case from the brief */
    char buf[5];
    CHECK_EQ_INT(ferry_box_format(&b, buf, sizeof buf), 16);
    CHECK(strcmp(buf, "[0:1") == 0);
}

/* ---- property test ---------------------------------------------------- */

#define GRID 8

static ferry_box_t random_box(uint32_t ndim) {
    int64_t o[4], e[4];
    for (uint32_t d = 0; d < ndim; d++) {
        o[d] = rng_below(GRID);
        /* mostly non-empty; sometimes zero or negative */
        int r = rng_below(16);
        e[d] = r == 0 ? 0 : r == 1 ? -1 - rng_below(3) : 1 + rng_below(GRID - (int)o[d]);
    }
    return mk(ndim, o, e);
}

static int point_in(const ferry_box_t *b, const int *p) {
    for (uint32_t d = 0; d < b->ndim; d++)
        if (p[d] < b->offset[d] || p[d] >= b->offset[d] + b->extent[d]) return 0;
    return 1;
}

/* Visits every point of [0,GRID)^ndim; returns 0 when done. */
static int next_point(int *p, uint32_t ndim) {
    for (uint32_t d = 0; d < ndim; d++) {
        if (++p[d] < GRID) return 1;
        p[d] = 0;
    }
    return 0;
}

static void fail_pair(const char *what, const ferry_box_t *a, const ferry_box_t *b) {
    char sa[256], sb[256];
    ferry_box_format(a, sa, sizeof sa);
    ferry_box_format(b, sb, sizeof sb);
    fprintf(stderr, "%s disagrees with brute force for %s and %s\n", what, sa, sb);
    exit(1);
}

static void test_property(void) {
    for (int iter = 0; iter < 6000; iter++) {
        uint32_t ndim = 1 + (uint32_t)rng_below(4);
        ferry_box_t a = random_box(ndim), b = random_box(ndim);
        if (iter % 5 == 0) b = a; /* some identical pairs */
        if (iter % 7 == 0) {     /* some nested pairs */
            for (uint32_t d = 0; d < ndim; d++) {
                if (a.extent[d] <= 0) continue;
                b.offset[d] = a.offset[d] + rng_below((int)a.extent[d]);
                b.extent[d] = 1 + rng_below((int)(a.offset[d] + a.extent[d] - b.offset[d]));
            }
        }

        ferry_box_t out;
        fill_sentinel(&out);
        bool got = ferry_box_intersect(&a, &b, &out);
        CHECK(got == ferry_box_intersect(&b, &a, NULL));

        int64_t common = 0, in_a = 0, in_b = 0;
        bool a_in_b = true, b_in_a = true;
        int p[4] = {0, 0, 0, 0};
        do {
            int pa = point_in(&a, p), pb = point_in(&b, p);
            in_a += pa;
            in_b += pb;
            if (pa && pb) common++;
            if (pa && !pb) a_in_b = false;
            if (pb && !pa) b_in_a = false;
            if (got && point_in(&out, p) != (pa && pb)) fail_pair("intersect (box)", &a, &b);
        } while (next_point(p, ndim));

        if (got != (common > 0)) fail_pair("intersect (bool)", &a, &b);
        if (got) {
            CHECK_EQ_INT(out.ndim, ndim);
            CHECK_EQ_INT(ferry_box_numel(&out), common);
        } else {
            CHECK(is_sentinel(&out));
        }
        CHECK_EQ_INT(ferry_box_numel(&a), in_a);
        CHECK_EQ_INT(ferry_box_numel(&b), in_b);
        if (ferry_box_contains(&b, &a) != a_in_b) fail_pair("contains(b, a)", &a, &b);
        if (ferry_box_contains(&a, &b) != b_in_a) fail_pair("contains(a, b)", &a, &b);
        CHECK(ferry_box_equal(&a, &b) ==
              (memcmp(a.offset, b.offset, ndim * sizeof a.offset[0]) == 0 &&
               memcmp(a.extent, b.extent, ndim * sizeof a.extent[0]) == 0));
    }
}

int main(void) {
    rng_state = 0x2545f4914f6cdd1dull;
    test_numel();
    test_intersect();
    test_contains();
    test_equal_of_shape();
    test_format();
    test_property();
    return 0;
}
