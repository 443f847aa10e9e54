/* Metadata protocol, client side: one connection to the service, requests
 * answered in order, pushed events absorbed, a heartbeat thread keeping the
 * lease, and transparent reconnection: when the service goes away (or is
 * restarted) a request reconnects within the client's timeout, the owner's
 * replay callback re-registers what the new service must know (layout,
 * published versions), and the request is sent again.
 *
 * The calling thread's waits (connecting, sending, a reply or a parked
 * request) call the context's interrupt hook (ferry_ctx_params_t,
 * common/intr.h); the heartbeat thread's never do. A request it cuts short
 * fails with FERRY_ERR_INTERRUPTED and, like one that timed out, drops the
 * connection (its reply may still come): the next request reconnects and
 * replays.
 *
 * This header holds the connection only; the requests are typed calls in
 * meta/requests.h (callers outside meta never see a protobuf message), and
 * the message-level calls they are built on are in meta/client_msg.h. */
#ifndef FERRY_META_CLIENT_H
#define FERRY_META_CLIENT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"
#include "meta/defs.h"

typedef struct meta_client meta_client_t;

typedef struct meta_client_params {
    const char *address; /* host:port */
    const char *token;
    const char *job;
    uint32_t role, rank, world;
    uint32_t lease_ms;   /* heartbeats go out every lease_ms / 3 */
    uint32_t timeout_ms; /* connecting, and waiting for a reply beyond a request's own wait */
} meta_client_params_t;

/* Called after a reconnection, before the interrupted request is sent
 * again; it may make requests itself (they do not reconnect). */
typedef ferry_status_t (*meta_replay_fn)(meta_client_t *c, void *opaque, ferry_errbuf_t *err);
/* Runs between sending a request and reading its reply (see
 * meta_client_call_between, meta_publish); after a reconnection the request
 * is sent again and it runs again. */
typedef ferry_status_t (*meta_between_fn)(meta_client_t *c, void *opaque, ferry_errbuf_t *err);

/* Connects (retrying while nothing listens, up to timeout_ms) and says
 * HELLO. A refusal (token, job or world mismatch) fails at once. */
ferry_status_t meta_client_create(ferry_ctx_t *ctx, const meta_client_params_t *params, meta_client_t **out,
                                  ferry_errbuf_t *err);
/* Says BYE and closes; NULL is accepted. */
void meta_client_destroy(meta_client_t *c);
void meta_client_set_replay(meta_client_t *c, meta_replay_fn fn, void *opaque);

uint64_t meta_client_incarnation(const meta_client_t *c);
/* Events seen so far (members that left, versions that became ready). */
uint64_t meta_client_events(const meta_client_t *c);
const char *meta_client_host(const meta_client_t *c);
ferry_ctx_t *meta_client_ctx(const meta_client_t *c);

/* True if the service announced that member (role, rank) left and it has not
 * come back since; buf then gets the service's account of it (who, host,
 * pid, how it left and what it was doing).
 * Events already received are read first, without waiting: call it between
 * requests, from the thread that makes them. */
bool meta_client_departed(meta_client_t *c, uint32_t role, uint32_t rank, char *buf, size_t size);

#endif
