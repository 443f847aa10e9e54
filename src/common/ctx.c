#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/internal.h"
#include "common/intr.h"

struct ferry_ctx {
    ferry_allocator_t allocator;
    ferry_log_fn log_fn;
    void *log_opaque;
    ferry_log_level_t log_level;
    ferry_config_t config;
    ferry_errbuf_t err;
    ferry_intr_t intr; /* fn NULL: none */
};

const char *ferry_version_string(void) { return "0.1.0"; }

static void *default_alloc(void *opaque, size_t size) {
    (void)opaque;
    return malloc(size);
}
static void *default_realloc(void *opaque, void *ptr, size_t size) {
    (void)opaque;
    return realloc(ptr, size);
}
static void default_free(void *opaque, void *ptr) {
    (void)opaque;
    free(ptr);
}

static void default_log(void *opaque, ferry_log_level_t level, const char *message) {
    static const char *names[] = {"debug", "info", "warn", "error"};
    (void)opaque;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    fprintf(stderr, "%02d:%02d:%02d.%03ld ferry %s: %s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
            ts.tv_nsec / 1000000, names[level <= FERRY_LOG_ERROR ? level : FERRY_LOG_ERROR],
            message);
}

ferry_status_t ferry_ctx_create(const ferry_ctx_params_t *params, ferry_ctx_t **out, char *detail,
                                size_t detail_size) {
    if (detail && detail_size) detail[0] = '\0';
    if (!out) {
        if (detail && detail_size) snprintf(detail, detail_size, "ferry_ctx_create: out is NULL");
        return FERRY_ERR_INVALID_ARGUMENT;
    }
    ferry_allocator_t a = {default_alloc, default_realloc, default_free, NULL};
    if (params && (params->field_mask & FERRY_CTX_PARAM_ALLOCATOR)) {
        if (!params->allocator.alloc || !params->allocator.realloc || !params->allocator.free) {
            if (detail && detail_size)
                snprintf(detail, detail_size, "ferry_ctx_create: allocator needs alloc, realloc and free");
            return FERRY_ERR_INVALID_ARGUMENT;
        }
        a = params->allocator;
    }
    ferry_ctx_t *ctx = a.alloc(a.opaque, sizeof *ctx);
    if (!ctx) {
        if (detail && detail_size) snprintf(detail, detail_size, "ferry_ctx_create: out of memory");
        return FERRY_ERR_NO_MEMORY;
    }
    memset(ctx, 0, sizeof *ctx);
    ctx->allocator = a;
    ctx->log_fn = default_log;
    ferry_status_t st = ferry_config_load(ctx, &ctx->config, &ctx->err);
    if (st != FERRY_OK) {
        if (detail && detail_size) snprintf(detail, detail_size, "%s", ctx->err.text);
        a.free(a.opaque, ctx);
        return st;
    }
    ctx->log_level = ctx->config.log_level;
    if (params && (params->field_mask & FERRY_CTX_PARAM_LOG_FN) && params->log_fn) {
        ctx->log_fn = params->log_fn;
        ctx->log_opaque = params->log_opaque;
    }
    if (params && (params->field_mask & FERRY_CTX_PARAM_LOG_LEVEL)) {
        if ((unsigned)params->log_level > FERRY_LOG_OFF) {
            if (detail && detail_size)
                snprintf(detail, detail_size, "ferry_ctx_create: log_level %d is out of range",
                         (int)params->log_level);
            ferry_ctx_destroy(ctx);
            return FERRY_ERR_INVALID_ARGUMENT;
        }
        ctx->log_level = params->log_level;
    }
    if (params && (params->field_mask & FERRY_CTX_PARAM_INTERRUPT)) {
        ctx->intr.fn = params->interrupt_fn;
        ctx->intr.opaque = params->interrupt_opaque;
    }
    *out = ctx;
    return FERRY_OK;
}

void ferry_ctx_destroy(ferry_ctx_t *ctx) {
    if (!ctx) return;
    ferry_config_release(ctx, &ctx->config);
    ctx->allocator.free(ctx->allocator.opaque, ctx);
}

const char *ferry_ctx_error(const ferry_ctx_t *ctx) { return ctx ? ctx->err.text : ""; }

ferry_log_level_t ferry_ctx_log_level(const ferry_ctx_t *ctx) { return ctx->log_level; }

ferry_errbuf_t *ferry_ctx_errbuf(ferry_ctx_t *ctx) { return &ctx->err; }

const ferry_intr_t *ferry_ctx_intr(const ferry_ctx_t *ctx) { return ctx && ctx->intr.fn ? &ctx->intr : NULL; }

const char *ferry_ctx_config_value(const ferry_ctx_t *ctx, const char *name, int *from_env) {
    for (size_t i = 0; i < FERRY_CFG_COUNT; i++) {
        if (strcmp(ferry_config_var(i)->name, name) == 0) {
            if (from_env) *from_env = ctx->config.from_env[i];
            return ctx->config.value[i];
        }
    }
    return NULL;
}

ferry_status_t ferry_fail(ferry_errbuf_t *err, ferry_status_t status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->text, sizeof err->text, fmt, ap);
    va_end(ap);
    return status;
}

void ferry_err_clear(ferry_errbuf_t *err) { err->text[0] = '\0'; }

void *ferry_alloc(ferry_ctx_t *ctx, size_t size) {
    return ctx->allocator.alloc(ctx->allocator.opaque, size ? size : 1);
}

void *ferry_calloc(ferry_ctx_t *ctx, size_t count, size_t size) {
    size_t total;
    if (__builtin_mul_overflow(count, size, &total)) return NULL;
    void *p = ferry_alloc(ctx, total);
    if (p) memset(p, 0, total ? total : 1);
    return p;
}

void *ferry_realloc(ferry_ctx_t *ctx, void *ptr, size_t size) {
    return ctx->allocator.realloc(ctx->allocator.opaque, ptr, size ? size : 1);
}

void ferry_free(ferry_ctx_t *ctx, void *ptr) {
    if (ptr) ctx->allocator.free(ctx->allocator.opaque, ptr);
}

char *ferry_strdup(ferry_ctx_t *ctx, const char *s) {
    size_t n = strlen(s) + 1;
    char *p = ferry_alloc(ctx, n);
    if (p) memcpy(p, s, n);
    return p;
}

int ferry_grow(ferry_ctx_t *ctx, void **items, size_t elem, size_t *cap, size_t need) {
    if (need <= *cap) return 0;
    size_t ncap = *cap ? *cap : 16;
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2) return -1;
        ncap *= 2;
    }
    size_t bytes;
    if (__builtin_mul_overflow(ncap, elem, &bytes)) return -1;
    void *p = ferry_realloc(ctx, *items, bytes);
    if (!p) return -1;
    *items = p;
    *cap = ncap;
    return 0;
}

void ferry_log(const ferry_ctx_t *ctx, ferry_log_level_t level, const char *fmt, ...) {
    if (!ctx || level < ctx->log_level || level >= FERRY_LOG_OFF) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ctx->log_fn(ctx->log_opaque, level, msg);
}

double ferry_mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}
