/* The CLI's strict parser (tools/cli_parse.c): every accepted form gives
 * the value a reference computation gives, every refused form leaves the
 * output untouched and says why. Values near the limits are checked against
 * 128-bit arithmetic, not against the parser's own reasoning. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "cli_parse.h"

#define SENTINEL 0xA5A5A5A5A5A5A5A5ull

static void u64_ok(const char *s, uint64_t lo, uint64_t hi, uint64_t want) {
    uint64_t v = SENTINEL;
    const char *why = cli_scan_u64(s, lo, hi, &v);
    if (why || v != want) {
        fprintf(stderr, "u64 \"%s\": %s, %llu (want %llu)\n", s, why ? why : "ok", (unsigned long long)v,
                (unsigned long long)want);
        exit(1);
    }
}

static void u64_bad(const char *s, uint64_t lo, uint64_t hi, const char *needle) {
    uint64_t v = SENTINEL;
    const char *why = cli_scan_u64(s, lo, hi, &v);
    if (!why || v != SENTINEL || !strstr(why, needle)) {
        fprintf(stderr, "u64 \"%s\": %s (want a refusal with \"%s\"), out %llu\n", s ? s : "(null)", why ? why : "accepted",
                needle, (unsigned long long)v);
        exit(1);
    }
}

static void size_ok(const char *s, uint64_t want) {
    uint64_t v = SENTINEL;
    const char *why = cli_scan_size(s, 0, UINT64_MAX, &v);
    if (why || v != want) {
        fprintf(stderr, "size \"%s\": %s, %llu (want %llu)\n", s, why ? why : "ok", (unsigned long long)v,
                (unsigned long long)want);
        exit(1);
    }
}

static void size_bad(const char *s, uint64_t lo, uint64_t hi, const char *needle) {
    uint64_t v = SENTINEL;
    const char *why = cli_scan_size(s, lo, hi, &v);
    if (!why || v != SENTINEL || !strstr(why, needle)) {
        fprintf(stderr, "size \"%s\": %s (want a refusal with \"%s\")\n", s, why ? why : "accepted", needle);
        exit(1);
    }
}

static void f64_ok(const char *s, cli_range_t r, double want) {
    double v = -42;
    const char *why = cli_scan_f64(s, r, &v);
    if (why || v != want) {
        fprintf(stderr, "f64 \"%s\": %s, %.17g (want %.17g)\n", s, why ? why : "ok", v, want);
        exit(1);
    }
}

static void f64_bad(const char *s, cli_range_t r, const char *needle) {
    double v = -42;
    const char *why = cli_scan_f64(s, r, &v);
    if (!why || v != -42 || !strstr(why, needle)) {
        fprintf(stderr, "f64 \"%s\": %s (want a refusal with \"%s\")\n", s, why ? why : "accepted", needle);
        exit(1);
    }
}

/* Every decimal string of up to 20 digits around 2^64: accepted exactly when
 * its 128-bit value fits, with that value. */
static void u64_boundary(void) {
    const unsigned __int128 max = (unsigned __int128)UINT64_MAX;
    for (int delta = -3; delta <= 3; delta++) {
        for (int scale = 0; scale < 2; scale++) {
            /* values near 2^64 and near 2^64 * 10 (21 digits) */
            unsigned __int128 x = scale ? max * 10 + (unsigned)(delta + 3) : max + delta;
            char buf[64];
            int n = 0;
            unsigned __int128 y = x;
            char tmp[64];
            do {
                tmp[n++] = (char)('0' + (int)(y % 10));
                y /= 10;
            } while (y);
            for (int i = 0; i < n; i++) buf[i] = tmp[n - 1 - i];
            buf[n] = '\0';
            if (x <= max) u64_ok(buf, 0, UINT64_MAX, (uint64_t)x);
            else u64_bad(buf, 0, UINT64_MAX, "out of range");
        }
    }
    /* the issue's case: 2^32 + 1 is no 32-bit count, and wraps to nothing */
    u64_bad("4294967297", 1, 100000, "out of range");
    u64_ok("4294967297", 0, UINT64_MAX, 4294967297ull);
}

int main(void) {
    /* integers */
    u64_ok("0", 0, 10, 0);
    u64_ok("10", 0, 10, 10);
    u64_ok("007", 0, 10, 7);
    u64_bad("11", 0, 10, "out of range");
    u64_bad("0", 1, 10, "out of range");
    u64_bad("", 0, 10, "empty");
    u64_bad(NULL, 0, 10, "no value");
    u64_bad("-1", 0, 10, "negative");
    u64_bad("-0", 0, 10, "negative");
    u64_bad("+1", 0, 10, "sign");
    u64_bad(" 1", 0, 10, "blank");
    u64_bad("1 ", 0, 10, "trailing");
    u64_bad("abc", 0, 10, "not a number");
    u64_bad("5x", 0, 10, "trailing");
    u64_bad("0x10", 0, 100, "trailing");
    u64_bad("1.5", 0, 10, "not an integer");
    u64_bad("1e3", 0, 10000, "not an integer");
    u64_bad("4K", 0, UINT64_MAX, "size suffix");
    u64_boundary();

    /* sizes: binary suffixes, either case, overflow refused */
    size_ok("0", 0);
    size_ok("4096", 4096);
    size_ok("1K", 1024);
    size_ok("1k", 1024);
    size_ok("64M", 64ull << 20);
    size_ok("1G", 1ull << 30);
    size_ok("3g", 3ull << 30);
    size_ok("2T", 2ull << 40);
    size_ok("16777215T", 16777215ull << 40);
    size_bad("16777216T", 0, UINT64_MAX, "out of range"); /* 2^64 */
    size_bad("18446744073709551616", 0, UINT64_MAX, "out of range");
    size_bad("1KB", 0, UINT64_MAX, "trailing");
    size_bad("1Ki", 0, UINT64_MAX, "trailing");
    size_bad("1P", 0, UINT64_MAX, "not a size");
    size_bad("K", 0, UINT64_MAX, "not a number");
    size_bad("1.5G", 0, UINT64_MAX, "not an integer");
    size_bad("-1M", 0, UINT64_MAX, "negative");
    size_bad("", 0, UINT64_MAX, "empty");
    size_bad("5G", 1, 4ull << 30, "out of range");
    size_bad("0", 1, 100, "out of range");

    /* reals */
    cli_range_t unit = {0, 1, true, false}, any = {-1e300, 1e300, false, false};
    f64_ok("1e-6", unit, 1e-6);
    f64_ok("0.5", unit, 0.5);
    f64_ok(".5", unit, 0.5);
    f64_ok("1", unit, 1);
    f64_ok("-2.5e3", any, -2500);
    f64_bad("0", unit, "out of range"); /* open at 0 */
    f64_bad("1.0000001", unit, "out of range");
    f64_bad("abc", unit, "not a decimal");
    f64_bad("", unit, "empty");
    f64_bad("1e-6x", unit, "not a decimal");
    f64_bad(" 0.5", unit, "not a decimal");
    f64_bad("0.5 ", unit, "not a decimal");
    f64_bad("inf", any, "not a decimal");
    f64_bad("nan", any, "not a decimal");
    f64_bad("0x1p-3", unit, "not a decimal");
    f64_bad("1e999", any, "out of range");
    f64_bad("1e-999", any, "too close to zero");
    f64_bad("e5", any, "not a decimal");
    f64_bad("1e", any, "not a decimal");
    f64_bad("--1", any, "not a decimal");

    /* option forms: refusal leaves the output alone */
    uint32_t u32 = 77;
    CHECK(!cli_u32("--steps", "4294967297", 1, 100000, &u32) && u32 == 77);
    CHECK(!cli_u32("--steps", "abc", 1, 100000, &u32) && u32 == 77);
    CHECK(cli_u32("--steps", "100000", 1, 100000, &u32) && u32 == 100000);
    double d = 3;
    CHECK(!cli_f64("--lr", "abc", unit, &d) && d == 3);

    /* lists */
    uint64_t sz[4];
    size_t n = 9;
    CHECK(cli_size_list("--size", "64M,1G", 1, UINT64_MAX, sz, 4, &n) && n == 2 && sz[0] == 64ull << 20 &&
          sz[1] == 1ull << 30);
    CHECK(cli_size_list("--size", "4K", 1, UINT64_MAX, sz, 4, &n) && n == 1 && sz[0] == 4096);
    CHECK(!cli_size_list("--size", "64M,,1G", 1, UINT64_MAX, sz, 4, &n));
    CHECK(!cli_size_list("--size", "64M,", 1, UINT64_MAX, sz, 4, &n));
    CHECK(!cli_size_list("--size", ",64M", 1, UINT64_MAX, sz, 4, &n));
    CHECK(!cli_size_list("--size", "", 1, UINT64_MAX, sz, 4, &n));
    CHECK(!cli_size_list("--size", "1,2,3,4,5", 1, UINT64_MAX, sz, 4, &n));
    CHECK(!cli_size_list("--size", "0", 1, UINT64_MAX, sz, 4, &n));
    double lr[3];
    cli_range_t rate = {0, 1, true, false};
    CHECK(cli_f64_list("--lr", "1e-6,3e-6,1e-5", rate, lr, 3, &n) && n == 3 && lr[0] == 1e-6 && lr[2] == 1e-5);
    CHECK(!cli_f64_list("--lr", "1e-6,,1e-5", rate, lr, 3, &n));
    CHECK(!cli_f64_list("--lr", "1e-6,0", rate, lr, 3, &n));
    CHECK(!cli_f64_list("--lr", "1e-6,fast", rate, lr, 3, &n));
    CHECK(!cli_f64_list("--lr", "0.1,0.2,0.3,0.4", rate, lr, 3, &n));
    static const char *const tr[] = {"shm", "ucx"};
    size_t idx[2];
    CHECK(cli_word_list("--transports", "ucx,shm", tr, 2, idx, &n) && n == 2 && idx[0] == 1 && idx[1] == 0);
    CHECK(cli_word_list("--transports", "shm", tr, 2, idx, &n) && n == 1 && idx[0] == 0);
    CHECK(!cli_word_list("--transports", "shm,shm", tr, 2, idx, &n));
    CHECK(!cli_word_list("--transports", "shm,", tr, 2, idx, &n));
    CHECK(!cli_word_list("--transports", "tcp", tr, 2, idx, &n));
    CHECK(!cli_word_list("--transports", "shmx", tr, 2, idx, &n));
    size_t k = 5;
    CHECK(cli_word("--mode", "ucx", tr, 2, &k) && k == 1);
    CHECK(!cli_word("--mode", "UCX", tr, 2, &k) && k == 1);

    /* fields */
    char line[] = "R 3 17 0.5";
    char *f[8];
    CHECK(cli_fields(line, f, 8) == 4 && !strcmp(f[0], "R") && !strcmp(f[3], "0.5"));
    char two[] = "a  b", trail[] = "a b ", many[] = "a b c";
    CHECK(cli_fields(two, f, 8) == SIZE_MAX);
    CHECK(cli_fields(trail, f, 8) == SIZE_MAX);
    CHECK(cli_fields(many, f, 2) == SIZE_MAX);
    return 0;
}
