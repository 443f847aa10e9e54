/* Fuzz target: the metadata protocol's message layer. The first byte is the
 * frame type (1.. the last type carries a message; any other byte must be
 * refused as UNSUPPORTED), the rest the body given to meta_decode. Every
 * message it accepts must re-encode with meta_encode into one well-formed
 * frame of that type, and the re-encoded body must decode again (within the
 * limits) and re-encode to the same bytes; every refusal must leave a
 * detail text. Never a crash or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta/frame.h"
#include "meta/proto.h"
#include "fuzz_ctx.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Says what broke (the replay driver names no file) and stops. */
#define FAIL(why)                                                                                        \
    do {                                                                                                 \
        fprintf(stderr, "fuzz_meta_proto: %s (frame type %u, %zu-byte body)\n", (why), type, len);     \
        abort();                                                                                         \
    } while (0)

/* Encodes m as a frame of type, checks the frame, returns it. */
static uint8_t *encode_checked(ferry_ctx_t *ctx, uint8_t type, const ProtobufCMessage *m, size_t *out_len,
                               size_t len) {
    uint8_t *buf;
    ferry_errbuf_t err;
    err.text[0] = '\0';
    if (meta_encode(ctx, type, m, &buf, out_len, &err) != FERRY_OK || *out_len < FRAME_HEADER)
        FAIL("a decoded message does not encode");
    frame_reader_t r;
    frame_reader_init(&r, ctx, 0);
    if (frame_reader_feed(&r, buf, *out_len) != FERRY_OK) FAIL("the frame reader refuses an encoded message");
    uint8_t t;
    const uint8_t *body;
    uint32_t n;
    ferry_status_t st;
    if (frame_reader_next(&r, &t, &body, &n, &st) != 1) FAIL("an encoded message is no complete frame");
    if (t != type || n != *out_len - FRAME_HEADER || memcmp(body, buf + FRAME_HEADER, n) != 0)
        FAIL("an encoded message's frame has another type or body");
    if (frame_reader_next(&r, &t, &body, &n, &st) != 0 || st != FERRY_OK) FAIL("an encoding holds more than one frame");
    frame_reader_free(&r);
    return buf;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    ferry_ctx_t *ctx = fuzz_ctx();
    uint8_t type = data[0];
    const uint8_t *body = data + 1;
    size_t len = size - 1;
    ferry_errbuf_t err;
    err.text[0] = '\0';
    ProtobufCMessage *m = NULL;
    ferry_status_t st = meta_decode(ctx, type, body, len, &m, &err);
    if (!meta_descriptor(type)) { /* no message for this type */
        if (st != FERRY_ERR_UNSUPPORTED || err.text[0] == '\0') FAIL("an unknown type was not refused as UNSUPPORTED");
        return 0;
    }
    if (st != FERRY_OK) {
        if (err.text[0] == '\0' || m != NULL) FAIL("a refusal left no detail (or a message)");
        if (st != FERRY_ERR_CORRUPT && st != FERRY_ERR_LIMIT && st != FERRY_ERR_INVALID_ARGUMENT)
            FAIL("a refusal with an unexpected status");
        return 0;
    }
    if (!m || m->descriptor != meta_descriptor(type)) FAIL("decoded into another message");
    size_t l1, l2;
    uint8_t *e1 = encode_checked(ctx, type, m, &l1, len);
    meta_free(ctx, m);
    ProtobufCMessage *m2 = NULL;
    err.text[0] = '\0';
    if (meta_decode(ctx, type, e1 + FRAME_HEADER, l1 - FRAME_HEADER, &m2, &err) != FERRY_OK) {
        fprintf(stderr, "fuzz_meta_proto: re-decoding: %s\n", err.text);
        FAIL("an accepted message re-encodes into one that is refused");
    }
    uint8_t *e2 = encode_checked(ctx, type, m2, &l2, len);
    if (l1 != l2 || memcmp(e1, e2, l1) != 0) FAIL("a message re-encodes to different bytes the second time");
    meta_free(ctx, m2);
    ferry_free(ctx, e1);
    ferry_free(ctx, e2);
    return 0;
}
