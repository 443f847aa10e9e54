/* ferry: the metadata service.
 *
 * One service per job holds who is there (writers, readers, with leases),
 * every member's layout, which versions every writer has published, which
 * reader holds a read grant on which version, and the acknowledgements.
 * Clients (ferry_writer_t, ferry_reader_t, `ferry meta --status`) talk to it
 * over TCP with the framed protocol of docs/protocol.md; waiting is done by
 * the service answering late (a parked request), never by polling.
 *
 * The service runs on one thread of its own: embedded in a process (writer
 * rank 0 by default, see sync.h) or standalone (`ferry meta --listen`).
 */
#ifndef FERRY_META_H
#define FERRY_META_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* Which fields of ferry_meta_params_t are set; unset fields take defaults. */
enum {
    FERRY_META_PARAM_LISTEN = 1u << 0,   /* default: FERRY_META (127.0.0.1:7470) */
    FERRY_META_PARAM_TOKEN = 1u << 1,    /* default: FERRY_TOKEN ("" = none) */
    FERRY_META_PARAM_LEASE_MS = 1u << 2, /* default: 10000 */
    FERRY_META_PARAM_MAX_FRAME = 1u << 3 /* default: 256 MiB */
};

typedef struct ferry_meta_params {
    uint64_t field_mask;
    const char *listen;  /* "host:port"; port 0 picks a free port */
    const char *token;   /* members must present the same token */
    uint32_t lease_ms;   /* a member silent this long is dropped */
    uint32_t max_frame;  /* largest message body accepted after the handshake */
} ferry_meta_params_t;

typedef struct ferry_meta_service ferry_meta_service_t;

/* Binds the address and starts the service thread.
 * Ownership: caller owns *out (ferry_meta_service_destroy). Errors: detail on
 * ctx (e.g. the address is in use). Thread-safety: any thread. */
ferry_status_t ferry_meta_service_create(ferry_ctx_t *ctx, const ferry_meta_params_t *params,
                                         ferry_meta_service_t **out);

/* "host:port" the service listens on (the port resolved if 0 was asked).
 * The string belongs to the service. Thread-safety: any. */
const char *ferry_meta_service_address(const ferry_meta_service_t *svc);

/* Stops the thread and closes every connection (members see the service
 * go away and reconnect to a new one if one comes up); NULL is accepted. */
void ferry_meta_service_destroy(ferry_meta_service_t *svc);

/* Asks a running service who is there: writes a JSON object (job, world
 * sizes, epoch, newest ready version, and per member: role, rank, host, pid,
 * committed, newest published / acknowledged version) into *json, which the
 * caller frees with free(). Connects as an observer with `token` (NULL:
 * FERRY_TOKEN). Errors: detail on ctx. Thread-safety: any thread. */
ferry_status_t ferry_meta_status_json(ferry_ctx_t *ctx, const char *address, const char *token,
                                      uint32_t timeout_ms, char **json);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
