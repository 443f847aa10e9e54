/* Internal helpers shared by every module: allocation through the context,
 * error detail buffers, logging. Not installed. */
#ifndef FERRY_COMMON_INTERNAL_H
#define FERRY_COMMON_INTERNAL_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"

#define FERRY_ERR_TEXT 512

typedef struct ferry_errbuf {
    char text[FERRY_ERR_TEXT];
} ferry_errbuf_t;

#if defined(__GNUC__)
#define FERRY_PRINTF(f, a) __attribute__((format(printf, f, a)))
#else
#define FERRY_PRINTF(f, a)
#endif

/* Records detail text and returns status, so failures read
 * `return ferry_fail(&obj->err, FERRY_ERR_..., "what was wrong", ...);`. */
ferry_status_t ferry_fail(ferry_errbuf_t *err, ferry_status_t status, const char *fmt, ...)
    FERRY_PRINTF(3, 4);
void ferry_err_clear(ferry_errbuf_t *err);

/* The context's own error buffer, for creation calls. */
ferry_errbuf_t *ferry_ctx_errbuf(ferry_ctx_t *ctx);

void *ferry_alloc(ferry_ctx_t *ctx, size_t size);
void *ferry_calloc(ferry_ctx_t *ctx, size_t count, size_t size); /* overflow-checked */
void *ferry_realloc(ferry_ctx_t *ctx, void *ptr, size_t size);
void ferry_free(ferry_ctx_t *ctx, void *ptr);
char *ferry_strdup(ferry_ctx_t *ctx, const char *s);

/* Grows *items (element size elem) so it holds at least need elements;
 * *cap is updated. Returns 0 on success, -1 on overflow or no memory. */
int ferry_grow(ferry_ctx_t *ctx, void **items, size_t elem, size_t *cap, size_t need);

void ferry_log(const ferry_ctx_t *ctx, ferry_log_level_t level, const char *fmt, ...)
    FERRY_PRINTF(3, 4);

/* Overflow-checked arithmetic on non-negative sizes: return 0 and write *out,
 * or -1 on overflow. */
static inline int ferry_mul_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_mul_overflow(a, b, out) ? -1 : 0;
}
static inline int ferry_add_u64(uint64_t a, uint64_t b, uint64_t *out) {
    return __builtin_add_overflow(a, b, out) ? -1 : 0;
}

/* Seconds on the monotonic clock (deadlines and timeouts; never in plan/ or
 * codec/, which keep no clocks). */
double ferry_mono_s(void);

/* Greatest common divisor of non-negative values (gcd(a, 0) = a). */
static inline uint64_t ferry_gcd_u64(uint64_t a, uint64_t b) {
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

#endif
