/* ferry: status codes shared by every fallible call.
 *
 * Values are pinned: they never change once released, and new codes are only
 * appended inside their group. The hundreds digit says what an error breaks:
 *   1xx  the call was wrong (argument, configuration, unsupported request);
 *        nothing changed, fix the caller or its input.
 *   2xx  the data is wrong (a layout with gaps or overlaps, sides that
 *        disagree, corrupt bytes); nothing was applied.
 *   3xx  a resource ran out or failed (memory, files, a hard limit).
 *   4xx  a peer or link failed (timeout, peer lost); retrying may succeed.
 *   5xx  the object is in the wrong state for the call (busy, stale, not ready).
 *   9xx  a bug in ferry.
 */
#ifndef FERRY_STATUS_H
#define FERRY_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

/* Public symbols are exported from libferry; everything else is hidden. */
#pragma GCC visibility push(default)

typedef enum ferry_status {
    FERRY_OK = 0,

    FERRY_ERR_INVALID_ARGUMENT = 100, /* a parameter is NULL, out of range or inconsistent */
    FERRY_ERR_INVALID_CONFIG = 101,   /* a config file, spec string or FERRY_* variable is malformed */
    FERRY_ERR_UNSUPPORTED = 102,      /* well-formed but not supported (model_type, dtype, option) */
    FERRY_ERR_NOT_FOUND = 103,        /* a named tensor, buffer, rank or file does not exist */

    FERRY_ERR_COVERAGE = 200,         /* pieces leave a gap or overlap partially */
    FERRY_ERR_MISMATCH = 201,         /* two descriptions of the same thing disagree */
    FERRY_ERR_CORRUPT = 202,          /* bytes fail a checksum or a format check */

    FERRY_ERR_NO_MEMORY = 300,
    FERRY_ERR_IO = 301,               /* a file or system call failed */
    FERRY_ERR_LIMIT = 302,            /* a hard limit (size, count, length) was exceeded */

    FERRY_ERR_TIMEOUT = 400,
    FERRY_ERR_PEER_LOST = 401,
    FERRY_ERR_INTERRUPTED = 402,      /* a wait was cut short by the context's interrupt hook */

    FERRY_ERR_BUSY = 500,
    FERRY_ERR_STALE = 501,

    FERRY_ERR_INTERNAL = 900
} ferry_status_t;

/* Short stable name of a status ("FERRY_ERR_COVERAGE"); never NULL.
 * Thread-safe; the string is static. */
const char *ferry_status_name(ferry_status_t status);

/* One-line description of what a status means; never NULL.
 * Thread-safe; the string is static. */
const char *ferry_status_describe(ferry_status_t status);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
