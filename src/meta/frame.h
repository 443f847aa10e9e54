/* Metadata protocol, framing layer: a sans-I/O encoder and incremental
 * reader of length-prefixed, checksummed frames. The caller moves the bytes
 * (sockets, files, tests); this code never does I/O and never allocates more
 * than one frame's worth beyond what it was fed.
 *
 * Frame: magic "FM" | version (1) | type (1) | body length (u32 LE)
 *        | xxh3-64 of the body seeded with those 8 bytes (u64 LE) | body
 * A reader refuses, before buffering the body, any frame whose length
 * exceeds its limit, and refuses any frame whose checksum, magic or version
 * is wrong; after an error the reader stays failed (the stream is lost). */
#ifndef FERRY_META_FRAME_H
#define FERRY_META_FRAME_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"

#define FRAME_VERSION 1
#define FRAME_HEADER 16
#define FRAME_DEFAULT_MAX_BODY (64u << 20)

/* Writes the 16-byte header of a frame carrying body into out. */
void frame_header(uint8_t type, const void *body, uint32_t len, uint8_t out[FRAME_HEADER]);

typedef struct frame_reader {
    ferry_ctx_t *ctx;
    ferry_errbuf_t err;
    uint32_t max_body;
    uint8_t *buf;           /* fed bytes not yet consumed */
    size_t len, cap, start; /* valid bytes are buf[start .. len) */
    ferry_status_t failed;  /* FERRY_OK until the stream is lost */
} frame_reader_t;

void frame_reader_init(frame_reader_t *r, ferry_ctx_t *ctx, uint32_t max_body);
void frame_reader_free(frame_reader_t *r);

/* Appends bytes the caller received. Fails (and the reader with it) if the
 * bytes of one unfinished frame would exceed the limit, or on no memory. */
ferry_status_t frame_reader_feed(frame_reader_t *r, const void *data, size_t len);

/* The next complete frame: returns 1 and sets *type, *body, *len (the body
 * stays valid until the next feed or next call); 0 if more bytes are needed;
 * an error status (< 0 is not used: FERRY_ERR_*, detail in r->err) if the
 * stream is corrupt. */
int frame_reader_next(frame_reader_t *r, uint8_t *type, const uint8_t **body, uint32_t *len,
                      ferry_status_t *error);

#endif
