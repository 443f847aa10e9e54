/* Metadata protocol, typed requests: one plain-C call per request a member
 * makes (docs/protocol.md lists the messages). Arguments and replies are
 * plain structs; the protobuf messages are built and read in requests.c
 * alone. Every call goes through the client (meta/client.h): it reconnects,
 * runs the owner's replay and sends the request again exactly as the
 * message-level call does, and a parked request waits wait_ms at the
 * service plus the client's timeout.
 *
 * Ownership: request structs and the arrays they point to stay the
 * caller's, read only during the call. A reply is either caller storage
 * (meta_published_t, bool *retired) or allocated by the call and freed
 * with its own free function (meta_layouts_free, meta_grant_free,
 * meta_table_contents_free); pointers inside a reply stay valid until it is
 * freed. A failed call leaves *out untouched. Thread-safety: as the client,
 * one request at a time. */
#ifndef FERRY_META_REQUESTS_H
#define FERRY_META_REQUESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/client.h"

/* A byte string (an encoded layout, a transport descriptor). */
typedef struct meta_bytes {
    const uint8_t *data;
    size_t len;
} meta_bytes_t;

/* ---- layouts ------------------------------------------------------------------ */

/* COMMIT: this member's encoded layout (meta/rank_layout.h) and, after a
 * service restart, every layout of the epoch it last saw. */
typedef struct meta_commit_req {
    meta_bytes_t layout;
    const meta_bytes_t *epoch_writers, *epoch_readers; /* by rank */
    size_t n_epoch_writers, n_epoch_readers;
} meta_commit_req_t;
ferry_status_t meta_commit(meta_client_t *c, const meta_commit_req_t *req, ferry_errbuf_t *err);

/* LAYOUTS: every member's encoded layout, by rank. */
typedef struct meta_layouts {
    uint64_t epoch;
    const meta_bytes_t *writers, *readers;
    size_t n_writers, n_readers;
    struct meta_reply_priv *priv; /* the decoded message the bytes live in */
} meta_layouts_t;
/* GET_LAYOUTS: waits (up to wait_ms at the service) until every member
 * committed; when the epoch is still known_epoch the reply holds the epoch
 * alone (no layouts). *out: free with meta_layouts_free. */
ferry_status_t meta_get_layouts(meta_client_t *c, uint32_t wait_ms, uint64_t known_epoch, meta_layouts_t **out,
                                ferry_errbuf_t *err);
void meta_layouts_free(meta_layouts_t *l); /* NULL is accepted */

/* ---- versions ----------------------------------------------------------------- */

/* Where a writer's bytes are for one version (SlotMap in meta.proto):
 * transport descriptors, and per buffer of the writer its region and
 * offset; the pack area and, in sync mode, the delta area. */
typedef struct meta_slot_map {
    const meta_bytes_t *regions;
    size_t n_regions;
    const uint32_t *buffer_region;
    const uint64_t *buffer_offset;
    size_t n_buffers;
    bool has_pack;
    uint32_t pack_region;
    uint64_t pack_offset;
    bool has_delta;
    uint32_t delta_region;
} meta_slot_map_t;

/* The ferry sum (common/sum.h) of every op a writer serves to one reader, in plan order. */
typedef struct meta_pair_sums {
    uint32_t dst_rank;
    const uint64_t *sums;
    size_t n_sums;
} meta_pair_sums_t;

typedef struct meta_publish_req {
    uint64_t epoch, plan_digest, version;
    uint32_t slot;
    const meta_slot_map_t *map;
    const meta_pair_sums_t *sums; /* per reader; none when sums_follow */
    size_t n_sums;
    bool wait_acks;               /* reply once every live reader acknowledged ... */
    uint32_t wait_ms;             /* ... or this long passed */
    bool sums_follow;             /* the checksums follow in meta_publish_sums */
} meta_publish_req_t;

typedef struct meta_published {
    bool ready;         /* every writer published this version */
    uint32_t acked;     /* readers that acknowledged it */
    uint32_t n_missing; /* live readers that did not (wait_acks) */
} meta_published_t;

/* PUBLISH, answered PUBLISHED (*out, caller storage; NULL: not wanted).
 * between (NULL: none) runs while the reply is pending, and again after a
 * reconnection re-sent the request; it sends the checksums of a
 * sums_follow publish with meta_publish_sums. */
ferry_status_t meta_publish(meta_client_t *c, const meta_publish_req_t *req, meta_between_fn between, void *opaque,
                            meta_published_t *out, ferry_errbuf_t *err);
/* SUMS of a version published with sums_follow. Only from inside
 * meta_publish's between callback, on the client it is given: sent on the
 * current connection without reconnecting (the PUBLISH's retry covers it). */
ferry_status_t meta_publish_sums(meta_client_t *c, uint64_t version, const meta_pair_sums_t *sums, size_t n,
                                 ferry_errbuf_t *err);
/* RECLAIM: answered once no reader holds a grant on version (parked up to
 * wait_ms); BUSY naming the readers when that does not happen. */
ferry_status_t meta_reclaim(meta_client_t *c, uint64_t version, uint32_t wait_ms, ferry_errbuf_t *err);
/* RETIRE, one-way: the writer's bytes of version are gone. */
ferry_status_t meta_retire(meta_client_t *c, uint64_t version, ferry_errbuf_t *err);

typedef struct meta_read_begin_req {
    uint64_t epoch, plan_digest;
    uint64_t min_version, max_version; /* max 0: no bound */
    uint32_t wait_ms;                  /* for a version to be ready */
    uint32_t grant_ms;                 /* how long the grant pins the slots */
    const uint32_t *writers;           /* whose maps and sums the reader needs */
    size_t n_writers;
} meta_read_begin_req_t;

/* One writer in a grant. */
typedef struct meta_writer_grant {
    uint32_t rank;
    uint64_t incarnation;
    uint32_t slot;
    bool has_map;        /* false in an answer to GET_SUMS (checksums only) */
    meta_slot_map_t map; /* checked: descriptor sizes, every region index in range */
    const uint64_t *sums; /* for this reader, in plan order */
    size_t n_sums;
    bool sums_pending;   /* not computed yet: ask with meta_get_sums */
} meta_writer_grant_t;

typedef struct meta_grant {
    uint64_t version;
    const meta_writer_grant_t *writers;
    size_t n_writers;
    struct meta_reply_priv *priv;
} meta_grant_t;

/* READ_BEGIN, parked until a version in range is ready. *out: free with
 * meta_grant_free. */
ferry_status_t meta_read_begin(meta_client_t *c, const meta_read_begin_req_t *req, meta_grant_t **out,
                               ferry_errbuf_t *err);
/* GET_SUMS: the checksums of the named writers for version, parked until
 * they are in; answered with a grant holding ranks and sums only. */
ferry_status_t meta_get_sums(meta_client_t *c, uint64_t version, const uint32_t *writers, size_t n, uint32_t wait_ms,
                             meta_grant_t **out, ferry_errbuf_t *err);
void meta_grant_free(meta_grant_t *g); /* NULL is accepted */
/* READ_END: ok = verified (counts as an acknowledgement); *retired (may be
 * NULL) says some writer retired or reclaimed the version meanwhile. */
ferry_status_t meta_read_end(meta_client_t *c, uint64_t version, bool ok, bool *retired, ferry_errbuf_t *err);

/* ---- TensorTable -------------------------------------------------------------- */

/* One put: a box of a tensor, row-major at byte_offset of a region, with
 * the ferry sum of every canonical tile it meets (docs/sync.md). */
typedef struct meta_table_entry {
    const char *name;
    uint32_t dtype;
    uint32_t ndim; /* at most FERRY_MAX_DIMS */
    const int64_t *shape, *offset, *extent; /* ndim each */
    uint32_t region;
    uint64_t byte_offset;
    const uint64_t *tile_sums;
    size_t n_tile_sums;
} meta_table_entry_t;

/* A member's puts of one sequence id. */
typedef struct meta_table_seq {
    uint64_t seq_id;
    const meta_bytes_t *regions; /* transport descriptors */
    size_t n_regions;
    const meta_table_entry_t *entries;
    size_t n_entries;
} meta_table_seq_t;

typedef struct meta_table_member {
    uint32_t rank;
    uint64_t incarnation;
    meta_table_seq_t seq; /* checked: every entry's dims and region in range */
} meta_table_member_t;

typedef struct meta_table_contents {
    uint64_t seq_id;
    const meta_table_member_t *members;
    size_t n_members;
    struct meta_reply_priv *priv;
} meta_table_contents_t;

/* TABLE_COMPLETE: this member's puts of seq->seq_id, complete. */
ferry_status_t meta_table_complete(meta_client_t *c, const meta_table_seq_t *seq, ferry_errbuf_t *err);
/* TABLE_GET, parked until every table member completed seq_id. *out: free
 * with meta_table_contents_free. */
ferry_status_t meta_table_get(meta_client_t *c, uint64_t seq_id, uint32_t wait_ms, meta_table_contents_t **out,
                              ferry_errbuf_t *err);
void meta_table_contents_free(meta_table_contents_t *tc); /* NULL is accepted */
/* TABLE_DROP, one-way: this member no longer holds seq_id's puts. */
ferry_status_t meta_table_drop(meta_client_t *c, uint64_t seq_id, ferry_errbuf_t *err);

#endif
