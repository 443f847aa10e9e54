/* Metadata service: how many connections each peer address holds, so that
 * a per-peer cap costs O(1) per accept. An open-addressing table keyed by
 * the 16-byte address (IPv4 as IPv4-mapped IPv6); only the service thread
 * uses it. */
#ifndef FERRY_META_PEERS_H
#define FERRY_META_PEERS_H

#include <stdint.h>

#include "common/internal.h"

typedef struct meta_peer {
    uint8_t addr[16];
    uint32_t count; /* 0: a free slot */
} meta_peer_t;

typedef struct meta_peers {
    ferry_ctx_t *ctx;
    meta_peer_t *slots;
    size_t cap, used; /* cap: a power of two, or 0 */
} meta_peers_t;

void meta_peers_init(meta_peers_t *t, ferry_ctx_t *ctx);
void meta_peers_free(meta_peers_t *t);
/* Connections addr holds now. */
uint32_t meta_peers_count(const meta_peers_t *t, const uint8_t addr[16]);
/* Counts one more connection of addr; -1 when out of memory (nothing counted). */
int meta_peers_add(meta_peers_t *t, const uint8_t addr[16]);
/* Counts one connection of addr less (it must have been added). */
void meta_peers_remove(meta_peers_t *t, const uint8_t addr[16]);

#endif
