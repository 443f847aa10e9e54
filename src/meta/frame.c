/* Metadata protocol framing: see frame.h. */
#include <string.h>
#include <xxhash.h>

#include "common/bytes.h"
#include "meta/frame.h"

/* xxh3-64 of the body, seeded with the first 8 header bytes: one pass, and
 * a flipped type or length changes the sum as much as a flipped body byte */
static uint64_t frame_sum(const uint8_t head[8], const void *body, uint32_t len) {
    return XXH3_64bits_withSeed(len ? body : "", len, ferry_get_le(head, 8));
}

void frame_header(uint8_t type, const void *body, uint32_t len, uint8_t out[FRAME_HEADER]) {
    out[0] = 'F';
    out[1] = 'M';
    out[2] = FRAME_VERSION;
    out[3] = type;
    ferry_put_le(out + 4, len, 4);
    ferry_put_le(out + 8, frame_sum(out, body, len), 8);
}

void frame_reader_init(frame_reader_t *r, ferry_ctx_t *ctx, uint32_t max_body) {
    memset(r, 0, sizeof *r);
    r->ctx = ctx;
    r->max_body = max_body ? max_body : FRAME_DEFAULT_MAX_BODY;
}

void frame_reader_free(frame_reader_t *r) {
    ferry_free(r->ctx, r->buf);
    r->buf = NULL;
    r->len = r->cap = r->start = 0;
}

/* Checks the header of the frame at buf[start] (if complete). */
static ferry_status_t check_header(frame_reader_t *r) {
    const uint8_t *h = r->buf + r->start;
    if (h[0] != 'F' || h[1] != 'M')
        return ferry_fail(&r->err, FERRY_ERR_CORRUPT, "frame: bad magic 0x%02x%02x (not a ferry metadata stream)",
                          h[0], h[1]);
    if (h[2] != FRAME_VERSION)
        return ferry_fail(&r->err, FERRY_ERR_UNSUPPORTED, "frame: protocol version %u, this side speaks %u", h[2],
                          FRAME_VERSION);
    uint32_t len = (uint32_t)ferry_get_le(h + 4, 4);
    if (len > r->max_body)
        return ferry_fail(&r->err, FERRY_ERR_LIMIT, "frame: a %u-byte body exceeds the %u-byte limit", len,
                          r->max_body);
    return FERRY_OK;
}

ferry_status_t frame_reader_feed(frame_reader_t *r, const void *data, size_t len) {
    if (r->failed) return r->failed;
    if (r->start > 0 && r->start == r->len) r->start = r->len = 0;
    if (r->start > 0 && r->len + len > r->cap) { /* keep the unconsumed bytes at the front */
        memmove(r->buf, r->buf + r->start, r->len - r->start);
        r->len -= r->start;
        r->start = 0;
    }
    /* never hold more than one maximal frame plus what the caller hands us at once */
    if (r->len - r->start >= FRAME_HEADER) {
        ferry_status_t st = check_header(r);
        if (st) return r->failed = st;
    }
    if (ferry_grow(r->ctx, (void **)&r->buf, 1, &r->cap, r->len + len))
        return r->failed = ferry_fail(&r->err, FERRY_ERR_NO_MEMORY, "frame: out of memory buffering %zu bytes", len);
    if (len) memcpy(r->buf + r->len, data, len);
    r->len += len;
    return FERRY_OK;
}

int frame_reader_next(frame_reader_t *r, uint8_t *type, const uint8_t **body, uint32_t *len, ferry_status_t *error) {
    *error = r->failed;
    if (r->failed) return 0;
    size_t have = r->len - r->start;
    if (have < FRAME_HEADER) return 0;
    ferry_status_t st = check_header(r);
    if (st) {
        *error = r->failed = st;
        return 0;
    }
    const uint8_t *h = r->buf + r->start;
    uint32_t n = (uint32_t)ferry_get_le(h + 4, 4);
    if (have - FRAME_HEADER < n) return 0;
    if (frame_sum(h, h + FRAME_HEADER, n) != ferry_get_le(h + 8, 8)) {
        *error = r->failed = ferry_fail(&r->err, FERRY_ERR_CORRUPT, "frame: checksum mismatch on a %u-byte frame", n);
        return 0;
    }
    *type = h[3];
    *body = h + FRAME_HEADER;
    *len = n;
    r->start += FRAME_HEADER + (size_t)n;
    return 1;
}
