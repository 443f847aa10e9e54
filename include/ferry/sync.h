/* ferry: the sync engine — writers publish versions of the weights, readers
 * pull exactly their bytes into their own buffers, verified.
 *
 * A job has W writers (trainer ranks) and R readers (engine ranks). Each
 * member describes its buffers and pieces (ferry_layout.h vocabulary: the
 * box of a logical tensor at an offset of a buffer, with strides), commits
 * them to the metadata service (meta.h), and from then on:
 *  - a writer publishes version numbers (increasing; 0 is reserved). In
 *    sync mode readers read the writer's live buffers while publish waits
 *    for every live reader to acknowledge (or the timeout); in async mode
 *    publish snapshots into one of `slots` registered staging slots and
 *    returns at once, and a slot is overwritten only when no reader holds
 *    a grant on the version it holds;
 *  - a reader updates to a version (a number, the newest ready one, or the
 *    next newer one): it plans its part of the resharding once per layout
 *    epoch, pulls its runs one-sided through the transport, scatters them
 *    in place (or into a staging copy first), checks an xxh3 of every
 *    region it received against the writer's, and acknowledges.
 * A version is ready when every writer published it. Members that die are
 * dropped by the service (closed connection or expired lease) and never
 * block the others beyond a timeout.
 *
 * Thread-safety: a writer or reader is used by one thread at a time; each
 * runs one heartbeat thread (the lease) and its transport's thread; a
 * writer that serves the metadata service runs the service's thread.
 */
#ifndef FERRY_SYNC_H
#define FERRY_SYNC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/layout.h"
#include "ferry/status.h"
#include "ferry/xport.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

typedef enum ferry_sync_mode {
    FERRY_SYNC_MODE_SYNC = 1,  /* readers read live weights while publish waits */
    FERRY_SYNC_MODE_ASYNC = 2  /* publish snapshots into a staging slot and returns */
} ferry_sync_mode_t;

/* Which fields of ferry_sync_params_t are set; unset fields take defaults.
 * job, rank and world are always required. */
enum {
    FERRY_SYNC_PARAM_META = 1u << 0,       /* default: FERRY_META */
    FERRY_SYNC_PARAM_TOKEN = 1u << 1,      /* default: FERRY_TOKEN, else FERRY_TOKEN_FILE, else a serving
                                              writer generates one and same-user members on the
                                              host find it (docs/protocol.md, "Handshake and token") */
    FERRY_SYNC_PARAM_TRANSPORT = 1u << 2,  /* default: FERRY_XPORT_SHM */
    FERRY_SYNC_PARAM_TIMEOUT_MS = 1u << 3, /* default: 30000 */
    FERRY_SYNC_PARAM_LEASE_MS = 1u << 4,   /* default: 10000 */
    FERRY_SYNC_PARAM_MODE = 1u << 5,       /* writer; default: FERRY_SYNC_MODE_SYNC */
    FERRY_SYNC_PARAM_SLOTS = 1u << 6,      /* writer, async; default: 2 */
    FERRY_SYNC_PARAM_SERVE = 1u << 7,      /* writer; default: true for rank 0 */
    FERRY_SYNC_PARAM_STAGED = 1u << 8,     /* reader; default: false (in place) */
    FERRY_SYNC_PARAM_INFLIGHT = 1u << 9,   /* reader; default: 64 MiB (CUDA readers: 256 MiB) */
    FERRY_SYNC_PARAM_THREADS = 1u << 10,   /* transport copy threads; default: 1 */
    FERRY_SYNC_PARAM_DELTAS = 1u << 11,    /* sync mode; default: FERRY_SYNC_DELTAS_AUTO */
    FERRY_SYNC_PARAM_MEMORY = 1u << 12,    /* memory and device; default: FERRY_MEM_HOST */
    FERRY_SYNC_PARAM_PACK_LIMIT = 1u << 13, /* every member alike; default: 0, no limit */
    FERRY_SYNC_PARAM_DELTA_CHAIN = 1u << 14 /* sync mode; default: 8 */
};

/* Most steps of a delta chain (delta_chain below). */
#define FERRY_SYNC_DELTA_CHAIN_MAX 64u

/* Sparse deltas (docs/sync.md, "Deltas"; sync and async mode): writers encode each
 * served region's change from the previous version and keep those of a few
 * versions before (a chain of steps, while it is smaller than the region);
 * a reader that holds one of those versions in place applies the steps
 * from it instead of pulling the region. */
typedef enum ferry_sync_deltas {
    FERRY_SYNC_DELTAS_AUTO = 0,   /* between hosts: a writer offers deltas to readers on other hosts,
                                     and those use them; on one host memory copies are faster */
    FERRY_SYNC_DELTAS_ALWAYS = 1, /* also on one host (tests, slow shared memory) */
    FERRY_SYNC_DELTAS_OFF = 2     /* writer: offer none; reader: always pull whole */
} ferry_sync_deltas_t;

typedef struct ferry_sync_params {
    uint64_t field_mask;
    const char *job;        /* members of one job share a service and a version sequence */
    uint32_t rank, world;   /* this member's rank among its side's world */
    const char *meta;       /* service address host:port */
    const char *token;
    ferry_xport_kind_t transport; /* every member of a job uses the same kind */
    uint32_t timeout_ms;    /* service round trips, transfers, ack waits */
    uint32_t lease_ms;
    ferry_sync_mode_t mode;
    uint32_t slots;         /* async staging slots (1..16) */
    bool serve;             /* run the metadata service on this writer, listening at `meta` */
    bool staged;            /* reader: nothing touches live buffers until all arrived and verified */
    uint64_t inflight_bytes;/* reader: bytes requested and not yet landed, at most */
    uint32_t threads;
    ferry_sync_deltas_t deltas;
    /* Where every buffer of this member lives: FERRY_MEM_HOST, or
     * FERRY_MEM_CUDA on CUDA device `device` (this process's ordinal). A
     * CUDA member's buffers are device memory of that GPU (checked when each
     * is added); the member packs, scatters and checksums on that GPU, on a
     * stream of its own, and every call that moves bytes returns once the
     * GPU is done with them. That stream does not wait on the caller's
     * work: the caller's own writes to its buffers must be done before it
     * publishes (its stream or device synchronized; a cudaMemcpy from
     * pageable memory may return before its bytes land), and a reader's
     * buffers must not be written while it updates. Buffers it allocates (NULL pointers to
     * add_layout, ferry_writer_alloc_buffer) are cudaMalloc'd there. Extra
     * GPU memory it takes is reported (device_bytes in the infos below);
     * docs/sync.md lists what it is. Needs a ferry built with CUDA. */
    ferry_mem_type_t memory;
    int device;
    /* The plan's pack_limit (ferry/plan.h): most bytes of the pack area a
     * writer keeps beside its buffers for strided sources (on its GPU, for
     * a CUDA writer); strided sources past it are read by their readers run
     * by run. Every member of a job must give the same value: members that
     * plan differently are refused (FERRY_ERR_MISMATCH, naming the plans'
     * digests). docs/sync.md, "Memory". */
    uint64_t pack_limit;
    /* Sync mode, deltas: the most steps of a chain (1..FERRY_SYNC_DELTA_CHAIN_MAX).
     * A writer keeps each reader's deltas of up to this many versions, the
     * newest always and older ones only while all of them together take
     * fewer bytes than the reader's ops; a reader applies at most this
     * many steps (more: it pulls whole). 1: deltas only for readers one
     * version behind. The writer's memory grows with it by 56 bytes per
     * reader and step only (index and bookkeeping: a chain is kept in the
     * room one step has at worst; docs/sync.md, "Deltas"). */
    uint32_t delta_chain;
} ferry_sync_params_t;

/* Pseudo-versions for ferry_reader_update. */
#define FERRY_VERSION_LATEST UINT64_MAX        /* the newest ready version (no wait if held) */
#define FERRY_VERSION_NEXT (UINT64_MAX - 1)    /* the newest ready version newer than the held one */

/* ---- writers ------------------------------------------------------------- */

typedef struct ferry_writer ferry_writer_t;

typedef struct ferry_publish_info {
    uint64_t version;
    double seconds;          /* whole publish */
    double snapshot_seconds; /* async: copying into the slot */
    double pack_seconds;     /* gathering strided sources into the pack area */
    double hash_seconds;     /* checksums of every served region */
    double wait_seconds;     /* sync: waiting for readers' acknowledgements */
    uint64_t bytes_served;   /* bytes the plan has readers pull from this writer */
    uint32_t readers_acked;  /* sync: readers that acknowledged */
    uint32_t readers_missing;/* sync: live readers that did not within the timeout */
    double delta_seconds;    /* sync: encoding deltas and keeping the base for the next */
    uint64_t delta_bytes;    /* sync: bytes of this version's deltas (its steps and the area's index; 0: none, e.g.
                                the first version); older steps still offered are not counted again */
    uint64_t device_bytes;   /* CUDA writers: GPU memory ferry holds for this writer (pack area, slots, scratch) */
} ferry_publish_info_t;

/* Creates a writer of `model`'s tensors (the model must outlive it) and, if
 * it serves, starts the metadata service; connects to the service.
 * Ownership: caller owns *out (ferry_writer_destroy). Errors: detail on ctx.
 * Thread-safety: one thread at a time per ctx. */
ferry_status_t ferry_writer_create(ferry_ctx_t *ctx, const ferry_model_t *model, const ferry_sync_params_t *params,
                                   ferry_writer_t **out);

/* Adds a buffer the caller owns (it must stay valid and in place while the
 * writer lives; shm reads it with process_vm_readv). *index gets its index.
 * Errors: detail on the writer. */
ferry_status_t ferry_writer_add_buffer(ferry_writer_t *w, const char *name, ferry_dtype_t dtype, void *ptr,
                                       uint64_t size, uint32_t *index);
/* Allocates a zeroed buffer peers can map directly (the fast path for shm);
 * the writer owns it, *ptr lives until ferry_writer_destroy. */
ferry_status_t ferry_writer_alloc_buffer(ferry_writer_t *w, const char *name, ferry_dtype_t dtype, uint64_t size,
                                         void **ptr, uint32_t *index);
/* Adds a piece: piece->buffer is an index from add/alloc_buffer, piece->rank
 * is ignored (the writer's rank). Checked as ferry_layout_add_piece does. */
ferry_status_t ferry_writer_add_piece(ferry_writer_t *w, const ferry_piece_t *piece);
/* Adds every buffer and piece a built layout gives rank `rank`: ptrs[i] is
 * the i-th buffer of that rank (in buffer index order), or NULL to allocate
 * it (the pointer is then written back). nptrs must equal that count. */
ferry_status_t ferry_writer_add_layout(ferry_writer_t *w, const ferry_layout_t *layout, uint32_t rank, void **ptrs,
                                       size_t nptrs);

/* Sends the layout to the service. Publishing waits until every writer and
 * reader of the job has committed (the layout epoch). */
ferry_status_t ferry_writer_commit(ferry_writer_t *w);

/* Publishes `version` (> every version published before). info may be NULL.
 * Errors: FERRY_ERR_TIMEOUT (the epoch never completed: some member has not
 * committed), FERRY_ERR_BUSY (async: readers kept every slot past the
 * timeout), FERRY_ERR_MISMATCH (members planned differently),
 * FERRY_ERR_INTERRUPTED (the context's interrupt hook, ctx.h: the version
 * was not published), detail on w. */
ferry_status_t ferry_writer_publish(ferry_writer_t *w, uint64_t version, ferry_publish_info_t *info);

const char *ferry_writer_error(const ferry_writer_t *w);
/* Address of the service this writer serves ("" if it does not). */
const char *ferry_writer_service_address(const ferry_writer_t *w);
/* Leaves the job (readers stop being granted this writer's versions);
 * NULL is accepted. */
void ferry_writer_destroy(ferry_writer_t *w);

/* ---- readers ------------------------------------------------------------- */

typedef struct ferry_reader ferry_reader_t;

typedef struct ferry_update_info {
    uint64_t version;        /* the version now held */
    uint64_t bytes;          /* bytes pulled */
    double seconds;          /* whole update */
    double wait_seconds;     /* waiting for the version to be ready */
    double pull_seconds;     /* transfers and scatter */
    double verify_seconds;   /* checksums */
    double apply_seconds;    /* staged: copying into the live buffers */
    uint32_t retries;        /* attempts that failed and were retried */
    uint32_t sources;        /* writers read from */
    uint32_t delta_pairs;    /* writers whose bytes arrived as deltas */
    uint32_t delta_steps;    /* versions the deltas spanned: steps of the longest chain applied (1: from the
                                version just before; 0: no deltas) */
    uint64_t delta_bytes;    /* of bytes, those of deltas (every step, and the areas' index) */
    uint64_t device_bytes;   /* CUDA readers: GPU memory ferry holds for this reader (scratch, staging) */
} ferry_update_info_t;

ferry_status_t ferry_reader_create(ferry_ctx_t *ctx, const ferry_model_t *model, const ferry_sync_params_t *params,
                                   ferry_reader_t **out);
/* Destination buffers: the engine's own parameters (updates land in place). */
ferry_status_t ferry_reader_add_buffer(ferry_reader_t *r, const char *name, ferry_dtype_t dtype, void *ptr,
                                       uint64_t size, uint32_t *index);
ferry_status_t ferry_reader_add_piece(ferry_reader_t *r, const ferry_piece_t *piece);
/* As ferry_writer_add_layout; a NULL pointer gets a zeroed buffer the reader owns. */
ferry_status_t ferry_reader_add_layout(ferry_reader_t *r, const ferry_layout_t *layout, uint32_t rank, void **ptrs,
                                       size_t nptrs);
ferry_status_t ferry_reader_commit(ferry_reader_t *r);

/* Brings the buffers to `version` (a number, FERRY_VERSION_LATEST or
 * FERRY_VERSION_NEXT), waiting up to timeout_ms for it to be ready. A
 * version that arrives torn or corrupt is retried while time remains.
 * Errors: FERRY_ERR_TIMEOUT, FERRY_ERR_STALE (that version is gone),
 * FERRY_ERR_CORRUPT (checksums kept failing), FERRY_ERR_PEER_LOST,
 * FERRY_ERR_INTERRUPTED (the context's interrupt hook, ctx.h; never
 * retried); detail on r. After a failed in-place update the buffers may be torn
 * (ferry_reader_torn); the next successful update repairs them. A staged
 * reader's buffers keep their last verified version. info may be NULL. */
ferry_status_t ferry_reader_update(ferry_reader_t *r, uint64_t version, uint32_t timeout_ms,
                                   ferry_update_info_t *info);

/* The version the buffers hold, verified (0: none, or torn). */
uint64_t ferry_reader_version(const ferry_reader_t *r);
/* True when a failed in-place update left the buffers partly written. */
bool ferry_reader_torn(const ferry_reader_t *r);
const char *ferry_reader_error(const ferry_reader_t *r);
void ferry_reader_destroy(ferry_reader_t *r);

/* ---- TensorTable -------------------------------------------------------- */

/* A table of arbitrary tensors on the same machinery: members put boxes of
 * named tensors under a sequence id, say complete, and any member gets any
 * box of any of them once every member completed that sequence id — the
 * box is cut from whichever puts cover it (resharded), read one-sided, and
 * checked tile by tile against the putters' xxh3 (docs/sync.md).
 * Members of a table share the job's service with role "table"; world is
 * the number of table members, each of which completes every sequence id
 * (with or without puts). */
typedef struct ferry_table ferry_table_t;

typedef struct ferry_table_entry {
    const char *name;
    ferry_dtype_t dtype;        /* put: the tensor's dtype; get: checked if not 0 */
    uint32_t ndim;              /* put: the tensor's rank */
    const int64_t *shape;       /* put: the whole tensor's shape */
    ferry_box_t box;            /* the part put, or wanted */
    void *data;                 /* the box's elements, row-major: read by put, written by get */
} ferry_table_entry_t;

/* params: job, rank, world as for writers; meta, token, transport,
 * timeout_ms, lease_ms, serve (default false) apply. */
ferry_status_t ferry_table_create(ferry_ctx_t *ctx, const ferry_sync_params_t *params, ferry_table_t **out);
/* Copies each entry's data (the caller may reuse it at once). Errors name
 * the entry: a box outside the shape, a name put twice in one sequence with
 * another dtype or shape. */
ferry_status_t ferry_table_put(ferry_table_t *t, uint64_t seq_id, const ferry_table_entry_t *entry);
ferry_status_t ferry_table_multi_put(ferry_table_t *t, uint64_t seq_id, const ferry_table_entry_t *entries, size_t n);
/* Publishes this member's puts of seq_id (none is fine); they stay readable
 * until ferry_table_drop or the table's end. */
ferry_status_t ferry_table_complete(ferry_table_t *t, uint64_t seq_id);
/* Fills entry->data with entry->box of the tensor, waiting up to timeout_ms
 * for every member to complete seq_id. FERRY_ERR_COVERAGE names a box no
 * put covers; FERRY_ERR_CORRUPT a tile whose checksum fails (nothing is
 * reported as read unless every tile verified); FERRY_ERR_INTERRUPTED the
 * context's interrupt hook (ctx.h; entry->data may be partly written). */
ferry_status_t ferry_table_get(ferry_table_t *t, uint64_t seq_id, ferry_table_entry_t *entry, uint32_t timeout_ms);
ferry_status_t ferry_table_multi_get(ferry_table_t *t, uint64_t seq_id, ferry_table_entry_t *entries, size_t n,
                                     uint32_t timeout_ms);
/* Frees this member's puts of seq_id. Later gets of seq_id wait for this
 * member to complete it again (and time out); a get reading meanwhile fails
 * with a transport error or its checksums, never with wrong data. */
ferry_status_t ferry_table_drop(ferry_table_t *t, uint64_t seq_id);
const char *ferry_table_error(const ferry_table_t *t);
void ferry_table_destroy(ferry_table_t *t);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
