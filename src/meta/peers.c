/* Metadata service, connections per peer: see peers.h. Linear probing with
 * backward-shift deletion, so no tombstones pile up as peers come and go. */
#include <stdbool.h>
#include <string.h>
#include <xxhash.h>

#include "meta/peers.h"

void meta_peers_init(meta_peers_t *t, ferry_ctx_t *ctx) {
    memset(t, 0, sizeof *t);
    t->ctx = ctx;
}

void meta_peers_free(meta_peers_t *t) {
    ferry_free(t->ctx, t->slots);
    t->slots = NULL;
    t->cap = t->used = 0;
}

static size_t home(const meta_peers_t *t, const uint8_t addr[16]) {
    return (size_t)XXH3_64bits(addr, 16) & (t->cap - 1);
}

/* The slot holding addr, or the free slot where it would go. */
static size_t find(const meta_peers_t *t, const uint8_t addr[16]) {
    size_t i = home(t, addr);
    while (t->slots[i].count && memcmp(t->slots[i].addr, addr, 16) != 0) i = (i + 1) & (t->cap - 1);
    return i;
}

uint32_t meta_peers_count(const meta_peers_t *t, const uint8_t addr[16]) {
    return t->cap ? t->slots[find(t, addr)].count : 0;
}

static int rehash(meta_peers_t *t, size_t cap) {
    meta_peer_t *old = t->slots;
    size_t old_cap = t->cap;
    t->slots = ferry_calloc(t->ctx, cap, sizeof *t->slots);
    if (!t->slots) {
        t->slots = old;
        return -1;
    }
    t->cap = cap;
    for (size_t i = 0; i < old_cap; i++)
        if (old[i].count) t->slots[find(t, old[i].addr)] = old[i];
    ferry_free(t->ctx, old);
    return 0;
}

int meta_peers_add(meta_peers_t *t, const uint8_t addr[16]) {
    if ((t->used + 1) * 2 > t->cap && rehash(t, t->cap ? t->cap * 2 : 64) != 0) return -1;
    size_t i = find(t, addr);
    if (!t->slots[i].count) {
        memcpy(t->slots[i].addr, addr, 16);
        t->used++;
    }
    t->slots[i].count++;
    return 0;
}

void meta_peers_remove(meta_peers_t *t, const uint8_t addr[16]) {
    if (!t->cap) return;
    size_t i = find(t, addr);
    if (!t->slots[i].count || --t->slots[i].count) return;
    t->used--;
    /* shift back the entries after i whose home is not between the hole and them */
    for (size_t j = (i + 1) & (t->cap - 1); t->slots[j].count; j = (j + 1) & (t->cap - 1)) {
        size_t h = home(t, t->slots[j].addr);
        bool movable = i <= j ? (h <= i || h > j) : (h <= i && h > j);
        if (movable) {
            t->slots[i] = t->slots[j];
            t->slots[j].count = 0;
            i = j;
        }
    }
}
