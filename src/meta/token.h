/* Metadata protocol, the token: which one a service demands and which one a
 * client presents when none was given. No service runs without one: when
 * neither FERRY_TOKEN nor FERRY_TOKEN_FILE names one, the service makes a
 * random token and writes it, 0600 and atomically, into the user's token
 * directory (0700) under a name keyed by this host and the bound address,
 * before its socket listens; a client of the same user on the same host
 * finds it there by the address it connected to. docs/protocol.md,
 * "Handshake and token". */
#ifndef FERRY_META_TOKEN_H
#define FERRY_META_TOKEN_H

#include <sys/socket.h>

#include "common/internal.h"
#include "meta/proto.h"

#define META_TOKEN_PATH 1024
#define META_TOKEN_BYTES 32 /* random bytes of a generated token (64 hex digits) */

/* The token a service bound (not yet listening) at `bound` demands: `given`
 * when not empty; else the content of FERRY_TOKEN_FILE when that file
 * exists; else a new random one, written to FERRY_TOKEN_FILE or to the
 * token directory. *path names the file written (empty when none was: the
 * service removes it when it ends, meta_token_remove). Errors (detail in
 * err): an unsafe or unreadable token file or directory (INVALID_CONFIG,
 * IO), no randomness (IO). */
ferry_status_t meta_token_service(ferry_ctx_t *ctx, const char *given, const struct sockaddr *bound,
                                  char token[META_MAX_TOKEN + 1], char path[META_TOKEN_PATH], ferry_errbuf_t *err);

/* Removes the file at path if it still holds token (a successor on the
 * same address may have replaced it). */
void meta_token_remove(const char *path, const char *token);

/* The token a client given none presents to the service it is connected to
 * on socket fd: FERRY_TOKEN_FILE's, else the one in the token directory for
 * the address connected to. *from names the file read. None found for a loopback peer
 * gives "" (the service refuses it, naming what to set); for any other
 * peer it is an error (INVALID_CONFIG) saying to set FERRY_TOKEN or
 * FERRY_TOKEN_FILE. A token file that another uid owns or that group or
 * others may read is refused (INVALID_CONFIG naming it and why). */
ferry_status_t meta_token_client(ferry_ctx_t *ctx, int fd, char token[META_MAX_TOKEN + 1],
                                 char from[META_TOKEN_PATH], ferry_errbuf_t *err);

/* Before connecting to host:port without a token: fails at once
 * (INVALID_CONFIG) when FERRY_TOKEN_FILE is unset and no address of host
 * is a loopback one or has a token file, so that a member of another host
 * is told to set FERRY_TOKEN or FERRY_TOKEN_FILE instead of timing out. */
ferry_status_t meta_token_precheck(ferry_ctx_t *ctx, const char *host, uint16_t port, ferry_errbuf_t *err);

#endif
