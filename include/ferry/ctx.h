/* ferry: library context — allocator, logging, configuration, error detail.
 *
 * Every ferry object is made from a context and uses its allocator and
 * logger. A failed call records a one-line detail text: calls on an object
 * record it on that object, calls that create objects record it on the
 * context. Detail text is overwritten by the next failure on the same object.
 */
#ifndef FERRY_CTX_H
#define FERRY_CTX_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Public symbols are exported from libferry; everything else is hidden. */
#pragma GCC visibility push(default)

#define FERRY_VERSION_MAJOR 0
#define FERRY_VERSION_MINOR 1
#define FERRY_VERSION_PATCH 0

/* "0.1.0"; thread-safe, static. */
const char *ferry_version_string(void);

typedef enum ferry_log_level {
    FERRY_LOG_DEBUG = 0,
    FERRY_LOG_INFO = 1,
    FERRY_LOG_WARN = 2,
    FERRY_LOG_ERROR = 3,
    FERRY_LOG_OFF = 4
} ferry_log_level_t;

typedef void (*ferry_log_fn)(void *opaque, ferry_log_level_t level, const char *message);

/* Allocator and log callbacks may be called from ferry's own threads (the
 * metadata service, heartbeats, transport threads) while the caller uses the
 * context: they must be thread-safe. */
typedef struct ferry_allocator {
    void *(*alloc)(void *opaque, size_t size);
    void *(*realloc)(void *opaque, void *ptr, size_t size);
    void (*free)(void *opaque, void *ptr);
    void *opaque;
} ferry_allocator_t;

/* Which fields of ferry_ctx_params_t are set; unset fields take defaults. */
enum {
    FERRY_CTX_PARAM_ALLOCATOR = 1u << 0, /* default: malloc/realloc/free */
    FERRY_CTX_PARAM_LOG_FN = 1u << 1,    /* default: one line per message on stderr */
    FERRY_CTX_PARAM_LOG_LEVEL = 1u << 2, /* default: FERRY_LOG, else warn */
    FERRY_CTX_PARAM_INTERRUPT = 1u << 3  /* default: none (waits end only by event, error or timeout) */
};

/* The interrupt hook: lets the caller cut blocking calls short (a Python
 * binding that released the GIL checks for Ctrl-C in it).
 *  - Called only on a thread blocked inside a ferry call on an object made
 *    from this context, never from ferry's own threads (metadata service,
 *    heartbeats, transport threads). Calls that block in several threads at
 *    once call it from each: it must be thread-safe. It must not call into
 *    ferry.
 *  - Called at least every 100 ms while such a call waits: for the metadata
 *    service (connecting, and the pauses between attempts; a reply; a
 *    parked request: a version to be ready, readers' acknowledgements, the
 *    layout epoch, readers letting a slot go, a table sequence to be
 *    completed, writers' checksums) and for a transport (shm connection
 *    set-up, UCX registration checks). Also at once when a signal
 *    interrupts such a wait (EINTR). A reader landing bytes asks it between
 *    batches (at most inflight_bytes) and between the 256 KiB chunks of shm
 *    copies; a UCX request in flight is not cut short (its bytes land in the
 *    caller's buffers: it ends, or fails at the timeout, first). Never
 *    called while nothing waits, nor during computation (planning,
 *    checksums, packing, delta coding).
 *  - Nonzero makes the call fail with FERRY_ERR_INTERRUPTED and a detail
 *    naming what it was waiting for ("interrupted while waiting for version
 *    3 to be ready"), with the same guarantees as a timeout at that point:
 *    an in-place reader interrupted while its bytes land reports itself
 *    torn until its next successful update; a writer's interrupted publish
 *    did not publish (its version is not ready; publish it again or a
 *    newer one). A request to the service that was cut short leaves its
 *    connection out of step: it is dropped as after a timeout, so the
 *    service reports the member as having left (its grants end, a writer's
 *    versions stop being ready) until its next call reconnects it and
 *    replays its state. The object stays usable.
 * With no hook set, nothing of this costs anything. */
typedef int (*ferry_interrupt_fn)(void *opaque);

typedef struct ferry_ctx_params {
    uint64_t field_mask;
    ferry_allocator_t allocator;
    ferry_log_fn log_fn;
    void *log_opaque;
    ferry_log_level_t log_level;
    ferry_interrupt_fn interrupt_fn; /* FERRY_CTX_PARAM_INTERRUPT; NULL: none */
    void *interrupt_opaque;          /* its argument */
} ferry_ctx_params_t;

typedef struct ferry_ctx ferry_ctx_t;

/* Creates a context; params may be NULL for all defaults. Reads the FERRY_*
 * environment once: a malformed variable fails with FERRY_ERR_INVALID_CONFIG
 * and the detail in *detail (if not NULL, at least 256 bytes).
 * Ownership: the caller owns *out and frees it with ferry_ctx_destroy.
 * Thread-safety: any thread. */
ferry_status_t ferry_ctx_create(const ferry_ctx_params_t *params, ferry_ctx_t **out,
                                char *detail, size_t detail_size);

/* Destroys a context; NULL is accepted. Objects made from it must be destroyed first.
 * Thread-safety: not concurrently with any other use of ctx. */
void ferry_ctx_destroy(ferry_ctx_t *ctx);

/* Detail text of the last failed creation call on this context ("" if none).
 * Ownership: the string belongs to ctx and lives until the next failing call.
 * Thread-safety: one thread at a time per context. */
const char *ferry_ctx_error(const ferry_ctx_t *ctx);

/* The log level in force. Thread-safety: any thread. */
ferry_log_level_t ferry_ctx_log_level(const ferry_ctx_t *ctx);

/* ---- configuration: the FERRY_* environment variables ------------------ */

typedef struct ferry_config_var {
    const char *name;        /* "FERRY_LOG" */
    const char *type;        /* "enum", "path", ... */
    const char *default_value;
    const char *description;
} ferry_config_var_t;

/* Number of FERRY_* variables ferry reads. Thread-safety: any thread. */
size_t ferry_config_var_count(void);

/* The i-th variable (i < ferry_config_var_count()), NULL otherwise.
 * Ownership: static. Thread-safety: any thread. */
const ferry_config_var_t *ferry_config_var(size_t i);

/* The value in force in ctx for a variable (environment, else default), and
 * whether it came from the environment. NULL for an unknown name.
 * Ownership: the string belongs to ctx. Thread-safety: any thread. */
const char *ferry_ctx_config_value(const ferry_ctx_t *ctx, const char *name, int *from_env);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
