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
    FERRY_META_PARAM_TOKEN = 1u << 1,    /* default: FERRY_TOKEN (""/unset: see below) */
    FERRY_META_PARAM_LEASE_MS = 1u << 2, /* default: 10000 */
    FERRY_META_PARAM_MAX_FRAME = 1u << 3, /* default: 256 MiB */
    FERRY_META_PARAM_MAX_CONNS = 1u << 4, /* default: 65536, or RLIMIT_NOFILE's soft limit less 128 if lower */
    FERRY_META_PARAM_MAX_PEER_CONNS = 1u << 5, /* default: 4096 (at most max_conns) */
    FERRY_META_PARAM_MAX_PENDING = 1u << 6     /* default: 4096 (at most max_conns) */
};

/* The token: a service never runs without one. Given none (token and
 * FERRY_TOKEN empty), it reads FERRY_TOKEN_FILE if that file exists, else
 * generates one (256 random bits, hex) and writes it, 0600 and before it
 * listens, to FERRY_TOKEN_FILE or into the user's token directory
 * (FERRY_TOKEN_DIR, else $XDG_RUNTIME_DIR/ferry, else ~/.ferry; 0700) under
 * a name keyed by this host and the bound address; it removes the file
 * when destroyed. Clients of the same user on the same host that have no
 * token find it there; members elsewhere need FERRY_TOKEN or
 * FERRY_TOKEN_FILE (the service logs, at warn, where the file is when it
 * listens on a non-loopback address). docs/protocol.md, "Handshake and
 * token". */
typedef struct ferry_meta_params {
    uint64_t field_mask;
    const char *listen;  /* "host:port"; port 0 picks a free port */
    const char *token;   /* members must present the same token ("": generated, see above) */
    uint32_t lease_ms;   /* a member silent this long is dropped */
    uint32_t max_frame;  /* largest message body accepted after the handshake */
    /* Connections over a cap are closed at once (after an ERROR saying
     * which cap): */
    uint32_t max_conns;      /* all connections, members and not yet introduced */
    uint32_t max_peer_conns; /* connections from one peer address (one host) */
    uint32_t max_pending;    /* connections that have not said HELLO (each has 5 s to) */
} ferry_meta_params_t;

typedef struct ferry_meta_service ferry_meta_service_t;

/* Binds the address, puts the token in place (above) and starts the
 * service thread; the listening socket is non-blocking and the thread
 * never spins: out of file descriptors, it refuses newcomers with a spare
 * descriptor or pauses listening.
 * Ownership: caller owns *out (ferry_meta_service_destroy). Errors: detail on
 * ctx (the address is in use; an unsafe token file or directory, naming it).
 * Thread-safety: any thread. */
ferry_status_t ferry_meta_service_create(ferry_ctx_t *ctx, const ferry_meta_params_t *params,
                                         ferry_meta_service_t **out);

/* "host:port" the service listens on (the port resolved if 0 was asked).
 * The string belongs to the service. Thread-safety: any. */
const char *ferry_meta_service_address(const ferry_meta_service_t *svc);

/* The file holding the token the service generated ("" when it was given
 * one or read FERRY_TOKEN_FILE). The string belongs to the service; the
 * file is removed by ferry_meta_service_destroy. Thread-safety: any. */
const char *ferry_meta_service_token_file(const ferry_meta_service_t *svc);

/* Stops the thread and closes every connection (members see the service
 * go away and reconnect to a new one if one comes up); NULL is accepted. */
void ferry_meta_service_destroy(ferry_meta_service_t *svc);

/* Asks a running service who is there: writes a JSON object (job, world
 * sizes, epoch, newest ready version, and per member: role, rank, host, pid,
 * committed, newest published / acknowledged version) into *json, which the
 * caller frees with free(). Connects as an observer with `token` (NULL:
 * FERRY_TOKEN; empty: FERRY_TOKEN_FILE, or on this host the file a service
 * of this user generated). Errors: detail on ctx (FERRY_ERR_INTERRUPTED: the
 * context's interrupt hook, ctx.h). Thread-safety: any thread. */
ferry_status_t ferry_meta_status_json(ferry_ctx_t *ctx, const char *address, const char *token,
                                      uint32_t timeout_ms, char **json);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
