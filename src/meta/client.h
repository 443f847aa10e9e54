/* Metadata protocol, client side: one connection to the service, requests
 * answered in order, pushed events absorbed, a heartbeat thread keeping the
 * lease, and transparent reconnection: when the service goes away (or is
 * restarted) a request reconnects within the client's timeout, the owner's
 * replay callback re-registers what the new service must know (layout,
 * published versions), and the request is sent again. */
#ifndef FERRY_META_CLIENT_H
#define FERRY_META_CLIENT_H

#include <stdint.h>

#include "common/internal.h"
#include "meta/proto.h"

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

/* Connects (retrying while nothing listens, up to timeout_ms) and says
 * HELLO. A refusal (token, job or world mismatch) fails at once. */
ferry_status_t meta_client_create(ferry_ctx_t *ctx, const meta_client_params_t *params, meta_client_t **out,
                                  ferry_errbuf_t *err);
/* Says BYE and closes; NULL is accepted. */
void meta_client_destroy(meta_client_t *c);
void meta_client_set_replay(meta_client_t *c, meta_replay_fn fn, void *opaque);

/* Sends a request and returns its reply (*reply, of reply_type; free with
 * meta_free). wait_ms is how long the service may hold the request (a
 * parked wait); the client waits that plus its timeout. An ERROR reply
 * returns its status with its detail. */
ferry_status_t meta_client_call(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint8_t reply_type,
                                uint32_t wait_ms, ProtobufCMessage **reply, ferry_errbuf_t *err);
/* As meta_client_call; between sending the request and reading its reply
 * it runs between(), which may send one-way messages with
 * meta_client_send_raw (e.g. a writer's SUMS while its PUBLISH waits). After
 * a reconnection the request is sent again and between() runs again. */
typedef ferry_status_t (*meta_between_fn)(meta_client_t *c, void *opaque, ferry_errbuf_t *err);
ferry_status_t meta_client_call_between(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint8_t reply_type,
                                        uint32_t wait_ms, ProtobufCMessage **reply, meta_between_fn between,
                                        void *opaque, ferry_errbuf_t *err);
ferry_status_t meta_client_send_raw(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, ferry_errbuf_t *err);
/* Sends a message that has no reply (RETIRE). */
ferry_status_t meta_client_send(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, ferry_errbuf_t *err);

uint64_t meta_client_incarnation(const meta_client_t *c);
/* Events seen so far (members that left, versions that became ready). */
uint64_t meta_client_events(const meta_client_t *c);
const char *meta_client_host(const meta_client_t *c);

#endif
