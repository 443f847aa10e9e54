/* Metadata protocol, client side at the message level: a request is a
 * protobuf message of a frame type, its reply another. Inside meta only
 * (meta/requests.c builds every request from plain C); tests of the
 * service use it to send what a typed call would not. */
#ifndef FERRY_META_CLIENT_MSG_H
#define FERRY_META_CLIENT_MSG_H

#include "meta/client.h"
#include "meta/proto.h"

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
ferry_status_t meta_client_call_between(meta_client_t *c, uint8_t type, const ProtobufCMessage *req, uint8_t reply_type,
                                        uint32_t wait_ms, ProtobufCMessage **reply, meta_between_fn between,
                                        void *opaque, ferry_errbuf_t *err);
ferry_status_t meta_client_send_raw(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, ferry_errbuf_t *err);
/* Sends a message that has no reply (RETIRE), reconnecting once if the
 * connection is gone. */
ferry_status_t meta_client_send(meta_client_t *c, uint8_t type, const ProtobufCMessage *msg, ferry_errbuf_t *err);

#endif
