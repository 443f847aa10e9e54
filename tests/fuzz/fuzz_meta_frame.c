/* Fuzz target: the metadata protocol's frame reader on arbitrary streams fed
 * in arbitrary chunks. Every frame it returns must carry a header that
 * re-encodes to itself (magic, version, length, checksum all right) and a
 * body within the limit; every failure must leave a detail and stick. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "meta/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    static ferry_ctx_t *ctx;
    if (!ctx && ferry_ctx_create(NULL, &ctx, NULL, 0) != FERRY_OK) abort();
    size_t chunk = 1 + data[0] % 64;
    data++, size--;
    frame_reader_t r;
    frame_reader_init(&r, ctx, 4096);
    bool failed = false;
    for (size_t at = 0; at < size;) {
        size_t k = size - at < chunk ? size - at : chunk;
        ferry_status_t st = frame_reader_feed(&r, data + at, k);
        at += k;
        if (st != FERRY_OK) {
            if (r.err.text[0] == '\0') abort();
            failed = true;
            break;
        }
        uint8_t type;
        const uint8_t *body;
        uint32_t len;
        ferry_status_t err;
        while (frame_reader_next(&r, &type, &body, &len, &err) == 1) {
            uint8_t head[FRAME_HEADER];
            frame_header(type, body, len, head);
            if (len > 4096 || memcmp(head, body - FRAME_HEADER, FRAME_HEADER) != 0) abort();
        }
        if (err != FERRY_OK) {
            if (r.err.text[0] == '\0') abort();
            failed = true;
            break;
        }
    }
    if (failed && frame_reader_feed(&r, data, 0) == FERRY_OK) abort(); /* a lost stream stays lost */
    frame_reader_free(&r);
    return 0;
}
