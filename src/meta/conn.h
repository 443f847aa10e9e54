/* Metadata protocol, socket side: addresses, listening, connecting with a
 * deadline, writing whole frames and reading the next frame. Only the
 * service (service.c) and the client (client.c) use it. */
#ifndef FERRY_META_CONN_H
#define FERRY_META_CONN_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "common/internal.h"
#include "common/intr.h"
#include "meta/frame.h"

#define META_HOST_MAX 256

/* "host:port" or "[v6addr]:port"; port 0 (listen only) picks a free one. */
ferry_status_t meta_addr_parse(const char *addr, char host[META_HOST_MAX], uint16_t *port,
                               ferry_errbuf_t *err);

/* A listening TCP socket (non-blocking, close-on-exec); *bound_port gets
 * the port actually bound. meta_bind + meta_listen_fd in one. */
ferry_status_t meta_listen(const char *host, uint16_t port, int *fd, uint16_t *bound_port,
                           ferry_errbuf_t *err);

/* A TCP socket bound to host:port but not listening yet (non-blocking,
 * close-on-exec): connections to it are refused until meta_listen_fd, so
 * whatever a client needs (the token file) can be put in place first.
 * *bound gets the address actually bound (port 0 resolved). */
ferry_status_t meta_bind(const char *host, uint16_t port, int *fd, struct sockaddr_storage *bound,
                         ferry_errbuf_t *err);
ferry_status_t meta_listen_fd(int fd, ferry_errbuf_t *err);

/* "1.2.3.4:5" or "[::1]:5" (an IPv4-mapped IPv6 address as IPv4). */
void meta_sockaddr_text(const struct sockaddr *sa, char *buf, size_t size);
/* The address as 16 bytes (IPv4 as IPv4-mapped IPv6) and its port. */
void meta_sockaddr_key(const struct sockaddr *sa, uint8_t addr[16], uint16_t *port);
/* A loopback address (127/8, ::1): only this host reaches it. */
bool meta_sockaddr_is_loopback(const struct sockaddr *sa);
/* A loopback or unspecified (0.0.0.0, ::) address: connecting to it
 * reaches this host only. */
bool meta_sockaddr_is_local(const struct sockaddr *sa);

/* Each wait below takes the caller's interrupt hook (common/intr.h; NULL
 * on ferry's own threads): when it asks to stop, the call fails with
 * FERRY_ERR_INTERRUPTED, leaving a frame possibly half sent or half read
 * (the connection is then out of step, as after a timeout). */

/* Connects before deadline (ferry_mono_s seconds); the socket is blocking,
 * close-on-exec, TCP_NODELAY. Fails at once if nothing listens. */
ferry_status_t meta_connect(const char *host, uint16_t port, double deadline, const ferry_intr_t *intr, int *fd,
                            ferry_errbuf_t *err);

/* Writes all len bytes before deadline (< 0: no deadline); no SIGPIPE. */
ferry_status_t meta_write_all(int fd, const void *buf, size_t len, double deadline, const ferry_intr_t *intr,
                              ferry_errbuf_t *err);

/* Reads until the reader holds a complete frame or deadline passes
 * (FERRY_ERR_TIMEOUT; < 0: no deadline); EOF or a reset is
 * FERRY_ERR_PEER_LOST. On success the frame is the reader's next one. */
ferry_status_t meta_read_frame(int fd, frame_reader_t *r, double deadline, const ferry_intr_t *intr, uint8_t *type,
                               const uint8_t **body, uint32_t *len, ferry_errbuf_t *err);

#endif
