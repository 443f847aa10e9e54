/* Metadata protocol, socket side: addresses, listening, connecting with a
 * deadline, writing whole frames and reading the next frame. Only the
 * service (service.c) and the client (client.c) use it. */
#ifndef FERRY_META_CONN_H
#define FERRY_META_CONN_H

#include <stdbool.h>
#include <stdint.h>

#include "common/internal.h"
#include "meta/frame.h"

#define META_HOST_MAX 256

/* "host:port" or "[v6addr]:port"; port 0 (listen only) picks a free one. */
ferry_status_t meta_addr_parse(const char *addr, char host[META_HOST_MAX], uint16_t *port,
                               ferry_errbuf_t *err);

/* A listening TCP socket (non-blocking, close-on-exec); *bound_port gets
 * the port actually bound. */
ferry_status_t meta_listen(const char *host, uint16_t port, int *fd, uint16_t *bound_port,
                           ferry_errbuf_t *err);

/* Connects before deadline (ferry_mono_s seconds); the socket is blocking,
 * close-on-exec, TCP_NODELAY. Fails at once if nothing listens. */
ferry_status_t meta_connect(const char *host, uint16_t port, double deadline, int *fd, ferry_errbuf_t *err);

/* Writes all len bytes before deadline (< 0: no deadline); no SIGPIPE. */
ferry_status_t meta_write_all(int fd, const void *buf, size_t len, double deadline, ferry_errbuf_t *err);

/* Reads until the reader holds a complete frame or deadline passes
 * (FERRY_ERR_TIMEOUT; < 0: no deadline); EOF or a reset is
 * FERRY_ERR_PEER_LOST. On success the frame is the reader's next one. */
ferry_status_t meta_read_frame(int fd, frame_reader_t *r, double deadline, uint8_t *type,
                               const uint8_t **body, uint32_t *len, ferry_errbuf_t *err);

#endif
