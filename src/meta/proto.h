/* Metadata protocol, message layer: which protobuf message each frame type
 * carries, encoding a message into one frame and decoding a frame body into
 * a message with every length and count checked against hard limits.
 * Sans-I/O like frame.h: bytes in, bytes out. docs/protocol.md lists the
 * messages and the exchange. */
#ifndef FERRY_META_PROTO_H
#define FERRY_META_PROTO_H

#include <stddef.h>
#include <stdint.h>

#include "common/internal.h"
#include "meta/defs.h"
#include "meta/meta.pb-c.h"

#define META_PROTOCOL 1

/* Frame type bytes; each names the message its body holds. */
typedef enum meta_type {
    META_HELLO = 1,       /* Hello: first frame of a client */
    META_WELCOME = 2,     /* Welcome */
    META_ERROR = 3,       /* Error: a request failed */
    META_OK = 4,          /* Ok */
    META_HEARTBEAT = 5,   /* Ok, no reply */
    META_BYE = 6,         /* Ok, no reply: the member leaves */
    META_COMMIT = 7,      /* Commit -> Ok */
    META_GET_LAYOUTS = 8, /* GetLayouts -> Layouts */
    META_LAYOUTS = 9,
    META_PUBLISH = 10,    /* Publish -> Published */
    META_PUBLISHED = 11,
    META_RECLAIM = 12,    /* Reclaim -> Ok */
    META_RETIRE = 13,     /* Retire, no reply */
    META_READ_BEGIN = 14, /* ReadBegin -> Grant */
    META_GRANT = 15,
    META_READ_END = 16,   /* ReadEnd -> ReadEnded */
    META_READ_ENDED = 17,
    META_GET_STATUS = 18, /* GetStatus -> Status */
    META_STATUS = 19,
    META_EVENT = 20,      /* Event, pushed by the service */
    META_SUMS = 21,       /* Sums, no reply (may follow a pending PUBLISH) */
    META_GET_SUMS = 22,   /* GetSums -> Grant */
    META_TABLE_COMPLETE = 23, /* TableComplete -> Ok */
    META_TABLE_GET = 24,      /* TableGet -> TableContents */
    META_TABLE_CONTENTS = 25,
    META_TABLE_DROP = 26,     /* TableDrop, no reply */
    META_TYPE_END
} meta_type_t;


const char *meta_type_name(uint8_t type);

/* The message descriptor a frame type carries; NULL if the type is unknown. */
const ProtobufCMessageDescriptor *meta_descriptor(uint8_t type);

/* A protobuf-c allocator drawing from ctx. */
ProtobufCAllocator meta_allocator(ferry_ctx_t *ctx);

/* Encodes msg (whose descriptor must match type) as one frame: *out gets
 * header and body (free with ferry_free), *len their size. */
ferry_status_t meta_encode(ferry_ctx_t *ctx, uint8_t type, const ProtobufCMessage *msg, uint8_t **out,
                           size_t *len, ferry_errbuf_t *err);

/* Decodes a frame body of the given type and checks its limits; *out is
 * freed with meta_free. Errors: FERRY_ERR_CORRUPT (not a valid message),
 * FERRY_ERR_LIMIT (a field too long or too many), FERRY_ERR_UNSUPPORTED
 * (unknown type). */
ferry_status_t meta_decode(ferry_ctx_t *ctx, uint8_t type, const uint8_t *body, size_t len,
                           ProtobufCMessage **out, ferry_errbuf_t *err);
void meta_free(ferry_ctx_t *ctx, ProtobufCMessage *msg);

/* What a typed reply (meta/requests.h, meta/rank_layout.h) hides: the
 * decoded message its pointers lead into, and the context both were
 * allocated from. The reply struct, this and its arrays are one
 * allocation, carved with meta_carve. */
struct meta_reply_priv {
    ferry_ctx_t *ctx;
    ProtobufCMessage *msg;
};
/* The next `size` bytes of a block being carved (8-aligned); NULL past its end. */
static inline void *meta_carve(uint8_t **at, const uint8_t *end, size_t size) {
    size_t need = (size + 7) & ~(size_t)7;
    if ((size_t)(end - *at) < need) return NULL;
    void *p = *at;
    *at += need;
    return p;
}
/* Bytes meta_carve needs for `count` items of `size`, added to `total`
 * (saturating at SIZE_MAX, which no allocation gets). */
static inline size_t meta_carve_size(size_t total, size_t count, size_t size) {
    if (size && count > (SIZE_MAX - 8) / size) return SIZE_MAX;
    size_t need = (count * size + 7) & ~(size_t)7;
    return total > SIZE_MAX - need ? SIZE_MAX : total + need;
}

/* Checks a SlotMap: region count and descriptor sizes within limits, every
 * buffer and the pack area naming an existing region. */
ferry_status_t meta_check_slot_map(const FerryMeta__SlotMap *map, ferry_errbuf_t *err);

#endif
