/* Metadata protocol constants that callers outside meta need (member roles,
 * event kinds, hard limits), apart from the message layer: including this
 * brings in no protobuf. */
#ifndef FERRY_META_DEFS_H
#define FERRY_META_DEFS_H

enum { META_ROLE_WRITER = 1, META_ROLE_READER = 2, META_ROLE_OBSERVER = 3, META_ROLE_TABLE = 4, META_ROLE_END };
enum { META_EVENT_JOINED = 1, META_EVENT_LEFT = 2, META_EVENT_READY = 3 };

/* Hard limits a decoded message must respect (beyond the frame's size). */
#define META_MAX_NAME 256          /* job, host, tensor and buffer names */
#define META_MAX_DETAIL 4096
#define META_MAX_TOKEN 256
#define META_MAX_WORLD (1u << 20)  /* ranks per side */
#define META_MAX_REGIONS (1u << 20) /* transport regions in one slot map */
#define META_MAX_BUFFERS (1u << 24)
#define META_MAX_HELLO_BODY 4096   /* before the handshake, frames are tiny */
#define META_MAX_REPLY (1u << 30)  /* a client accepts replies this large (LAYOUTS holds every member's) */
#define META_MAX_TENSOR_NAME 4096  /* tensor and buffer names inside a layout or a table entry */
#define META_MAX_DIMS 8            /* dims of a tensor in a layout; sync/wire.c checks it equals FERRY_MAX_DIMS */

#endif
