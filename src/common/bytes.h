/* Little-endian integers in byte buffers (descriptors, frames): one place,
 * no alignment or host-order assumptions. */
#ifndef FERRY_COMMON_BYTES_H
#define FERRY_COMMON_BYTES_H

#include <stdint.h>

/* Writes the low `bytes` bytes of v at p, least significant first. */
static inline void ferry_put_le(uint8_t *p, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; i++) p[i] = (uint8_t)(v >> (8 * i));
}

/* Reads a `bytes`-byte little-endian integer at p. */
static inline uint64_t ferry_get_le(const uint8_t *p, int bytes) {
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++) v |= (uint64_t)p[i] << (8 * i);
    return v;
}

#endif
