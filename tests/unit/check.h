/* Minimal test helpers: each test is a program that exits 0 on success and 1
 * on the first failed check, printing where and why (liburing style). */
#ifndef FERRY_TESTS_CHECK_H
#define FERRY_TESTS_CHECK_H

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "ferry/ferry.h"

/* Monotonic seconds, for deadlines and elapsed times. */
static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sleeps ms milliseconds, resuming after signals. */
static inline void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

#define CHECK(cond)                                                             \
    do {                                                                        \
        if (!(cond)) {                                                          \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                      \
    do {                                                                        \
        long long a_ = (long long)(a), b_ = (long long)(b);                     \
        if (a_ != b_) {                                                         \
            fprintf(stderr, "%s:%d: %s = %lld, expected %s = %lld\n", __FILE__, __LINE__, #a, \
                    a_, #b, b_);                                                \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* status must be OK; otherwise print the detail text from `where` */
#define CHECK_OK(st, detail)                                                    \
    do {                                                                        \
        ferry_status_t s_ = (st);                                               \
        if (s_ != FERRY_OK) {                                                   \
            fprintf(stderr, "%s:%d: %s failed: %s (%s)\n", __FILE__, __LINE__, #st, \
                    ferry_status_name(s_), (detail));                           \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* status must be `want` and the detail text must contain `needle` */
#define CHECK_FAILS(st, want, detail_expr, needle)                              \
    do {                                                                        \
        ferry_status_t s_ = (st);                                               \
        const char *d_ = (detail_expr);                                         \
        if (s_ != (want) || !strstr(d_, (needle))) {                            \
            fprintf(stderr, "%s:%d: %s gave %s \"%s\"; expected %s containing \"%s\"\n", __FILE__, \
                    __LINE__, #st, ferry_status_name(s_), d_, ferry_status_name(want), (needle)); \
            exit(1);                                                            \
        }                                                                       \
    } while (0)

/* xorshift64*: a fixed seed, so every run checks the same inputs. */
static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
/* The whole file at path (*n bytes, then a NUL for text), or NULL if it
 * cannot be opened. Caller frees. */
static inline uint8_t *test_read_file(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *buf = malloc(len > 0 ? (size_t)len + 1 : 1);
    CHECK(len >= 0 && buf && fread(buf, 1, (size_t)len, f) == (size_t)len);
    buf[len > 0 ? len : 0] = 0;
    fclose(f);
    *n = (size_t)len;
    return buf;
}

static inline uint64_t rng_next(void) {
    uint64_t x = rng_state;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    rng_state = x;
    return x * 0x2545f4914f6cdd1dull;
}

static inline ferry_ctx_t *test_ctx(void) {
    ferry_ctx_t *ctx = NULL;
    char detail[512];
    if (ferry_ctx_create(NULL, &ctx, detail, sizeof detail) != FERRY_OK) {
        fprintf(stderr, "ferry_ctx_create: %s\n", detail);
        exit(1);
    }
    return ctx;
}

/* Loads a bundled model by file name from FERRY_TEST_MODELS (set by ctest). */
static inline ferry_model_t *test_model(ferry_ctx_t *ctx, const char *name,
                                        const ferry_model_options_t *opts) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s.json", FERRY_TEST_MODELS, name);
    ferry_model_t *m = NULL;
    ferry_status_t st = ferry_model_from_hf_config_file(ctx, path, opts, &m);
    if (st != FERRY_OK) {
        fprintf(stderr, "loading %s: %s\n", path, ferry_ctx_error(ctx));
        exit(1);
    }
    return m;
}

/* Builds a layout from a spec string or fails the test. */
static inline ferry_layout_t *test_layout(ferry_ctx_t *ctx, const ferry_model_t *m,
                                          ferry_side_t side, const char *spec) {
    ferry_parallel_t p;
    ferry_status_t st = ferry_parallel_parse(ctx, side, spec, &p);
    if (st != FERRY_OK) {
        fprintf(stderr, "parse %s: %s\n", spec, ferry_ctx_error(ctx));
        exit(1);
    }
    ferry_layout_t *l = NULL;
    st = ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l);
    if (st != FERRY_OK) {
        fprintf(stderr, "build %s %s: %s\n", ferry_model_name(m), spec, ferry_ctx_error(ctx));
        exit(1);
    }
    return l;
}

/* detail text (hay) must contain needle */
#define CHECK_STR_HAS(hay, needle)                                                        \
    do {                                                                                  \
        const char *h_ = (hay);                                                           \
        if (!h_ || !strstr(h_, (needle))) {                                               \
            fprintf(stderr, "%s:%d: \"%s\" does not contain \"%s\"\n", __FILE__, __LINE__, \
                    h_ ? h_ : "(null)", (needle));                                        \
            exit(1);                                                                      \
        }                                                                                 \
    } while (0)

#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif

/* Under TSan, UCX's memory hooks (set up as UCX loads) catch a thread's
 * exit-time madvise after TSan has let go of the thread, a crash: a test
 * that loads UCX runs itself again without them (its peers inherit it).
 * scripts/test.sh sets UCX_MEM_MMAP_HOOK_MODE=none itself; this is for
 * running a test by hand. */
#include <unistd.h>
static inline void test_ucx_tsan_setup(char **argv) {
#ifdef TEST_TSAN
    if (!getenv("UCX_MEM_MMAP_HOOK_MODE")) {
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        execv("/proc/self/exe", argv);
    }
#else
    (void)argv;
#endif
}

#endif
