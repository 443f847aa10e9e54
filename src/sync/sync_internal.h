/* The sync engine's shared state: what writers and readers have in common
 * (their own buffers and pieces, the service connection, the transport,
 * the layout epoch with both global layouts and this member's plan). */
#ifndef FERRY_SYNC_INTERNAL_H
#define FERRY_SYNC_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/internal.h"
#include "common/intr.h"
#include "ferry/codec.h"
#include "ferry/meta.h"
#include "ferry/plan.h"
#include "ferry/sync.h"
#include "meta/requests.h"
#include "sync/delta_area.h"
#include "sync/dev.h"

typedef struct sync_buf {
    char *name;
    ferry_dtype_t dtype;
    uint64_t size;
    uint8_t *ptr;
    bool owned;              /* reader: allocated here (free at the end; sync_dev_free on a GPU) */
    ferry_xport_mem_t *mem;  /* writer: its registration */
} sync_buf_t;

/* One side of an epoch, rebuilt from the service's LAYOUTS. */
typedef struct sync_side {
    ferry_model_t *model;    /* tensors of the side, sorted by name */
    ferry_layout_t *layout;
    uint32_t world;
    uint32_t *buf_base;      /* first global buffer index of each rank */
    uint32_t *hosts;         /* host label of each rank (shared numbering across sides) */
} sync_side_t;

/* Another member's transport regions, resolved from their descriptors and
 * kept while they are in use: the regions of a member's recent grants stay
 * resolved (least recently used go first), so alternating async slots are
 * mapped once; a new incarnation (a restarted process) drops them all. */
typedef struct sync_region {
    uint64_t desc_sum;  /* xxh3 of the descriptor */
    uint64_t used;      /* the resolve that last used it */
    ferry_xport_rmem_t *rmem;
} sync_region_t;

typedef struct sync_regions {
    uint64_t incarnation, clock;
    sync_region_t *cache;
    size_t ncache, cap_cache;
    ferry_xport_rmem_t **cur; /* the regions of the last resolve, in its order */
    size_t ncur, cap_cur;
} sync_regions_t;

typedef struct sync_member {
    ferry_ctx_t *ctx;
    ferry_errbuf_t err;
    uint32_t role;           /* META_ROLE_WRITER or META_ROLE_READER */
    ferry_sync_params_t p;
    char job[257], meta_addr[300], token[257];
    const ferry_model_t *model;
    ferry_layout_t *local;   /* this rank's buffers and pieces (validates them) */
    sync_buf_t *bufs;
    size_t nbufs, cap_bufs;
    uint8_t *blob;           /* the committed RankLayout */
    size_t blob_len;
    meta_client_t *meta;
    ferry_meta_service_t *svc; /* p.serve: the service this member runs */
    ferry_xport_t *xp;
    uint64_t epoch;          /* 0: none yet */
    meta_layouts_t *epoch_layouts; /* the LAYOUTS of the epoch, replayed to a restarted service */
    sync_side_t side[2];     /* [0] writers (source), [1] readers (destination) */
    ferry_plan_t *plan;      /* this member's local plan */
    uint64_t plan_digest;
    sync_dev_t *dev;         /* buffers in GPU memory (FERRY_SYNC_PARAM_MEMORY): its device and kernels */
    ferry_mem_type_t mem;    /* of every buffer */
} sync_member_t;

/* member.c */
ferry_status_t sync_member_init(sync_member_t *m, ferry_ctx_t *ctx, uint32_t role, const ferry_model_t *model,
                                const ferry_sync_params_t *params);
void sync_member_fini(sync_member_t *m);
/* Starts the service first if the member serves it, then connects. */
ferry_status_t sync_member_connect(sync_member_t *m, meta_replay_fn replay, void *opaque);
ferry_status_t sync_add_buffer(sync_member_t *m, const char *name, ferry_dtype_t dtype, void *ptr, uint64_t size,
                               bool owned, uint32_t *index);
/* For a member in GPU memory: [ptr, ptr + size) must be device memory of
 * its GPU; the error names `what name`. */
ferry_status_t sync_check_device(sync_member_t *m, const char *what, const char *name, const void *ptr, uint64_t size);
ferry_status_t sync_add_piece(sync_member_t *m, const ferry_piece_t *piece);
ferry_status_t sync_add_layout(sync_member_t *m, const ferry_layout_t *layout, uint32_t rank, void **ptrs,
                               size_t nptrs, void *(*alloc)(sync_member_t *, const ferry_buffer_info_t *, uint32_t *,
                                                            ferry_status_t *));
ferry_status_t sync_commit(sync_member_t *m);
/* Sends the committed layout again (after a reconnection). */
ferry_status_t sync_recommit(sync_member_t *m, ferry_errbuf_t *err);
/* Fetches the layouts (waiting for every member to commit) and, if the
 * epoch changed, rebuilds both sides and the local plan; *changed says so. */
ferry_status_t sync_refresh_epoch(sync_member_t *m, uint32_t wait_ms, bool *changed);
/* The local buffer index of a global one of this member's side. */
static inline uint32_t sync_local_buffer(const sync_member_t *m, int side, uint32_t rank, uint32_t global) {
    return global - m->side[side].buf_base[rank];
}

/* Resolves the n descriptors one member (rank, of `what`) gives into
 * rg->cur[0..n), reusing what is cached. */
ferry_status_t sync_regions_resolve(sync_member_t *m, sync_regions_t *rg, uint64_t incarnation,
                                    const meta_bytes_t *descs, size_t n, const char *what, uint32_t rank);
void sync_regions_free(sync_regions_t *rg, ferry_ctx_t *ctx);
/* FERRY_ERR_UNSUPPORTED (said on err) for a writer's plan whose quant ops
 * (FP8 destinations) it cannot run: from a source whose rows are not
 * contiguous. */
ferry_status_t sync_check_quant(const ferry_plan_t *plan, bool writer, ferry_errbuf_t *err);

/* wire.c: a rank's layout <-> its wire columns (meta/rank_layout.h). A
 * rank's columns name the tensors its pieces name, each fp8 one with its
 * partner (weight or scale) whether a piece names it or not. */
ferry_status_t sync_wire_encode(ferry_ctx_t *ctx, const ferry_layout_t *local, uint32_t rank, const char *host,
                                uint8_t **out, size_t *len, ferry_errbuf_t *err);
/* Rebuilds a side from its members' encoded RankLayouts (blobs[r] is rank
 * r's), with tensors sorted by name and fp8 pairs linked (ranks must agree
 * on each tensor's quant; a pair must name each other and fit
 * ferry_model_link_fp8, else FERRY_ERR_CORRUPT); everything is
 * bounds-checked. */
ferry_status_t sync_wire_decode(ferry_ctx_t *ctx, const meta_bytes_t *blobs, size_t n, const char *what,
                                sync_side_t *side, char ***hosts, ferry_errbuf_t *err);
void sync_side_free(ferry_ctx_t *ctx, sync_side_t *side);

/* strided.c: moving and hashing boxes between strided and row-major bytes */
bool sync_box_contiguous(const ferry_box_t *box, const int64_t *strides);
/* row-major packed <-> strided (base + offset with element strides) */
void sync_gather(uint8_t *packed, const uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box,
                 size_t esz);
void sync_scatter(uint8_t *base, uint64_t offset, const int64_t *strides, const ferry_box_t *box, size_t esz,
                  const uint8_t *packed);
void sync_copy_box(uint8_t *dst, const uint8_t *src, uint64_t offset, const int64_t *strides, const ferry_box_t *box,
                   size_t esz);
/* Elements of the trailing run contiguous under s1 (and s2 unless NULL),
 * and the number of leading dims to walk. */
int64_t sync_box_run(const ferry_box_t *box, const int64_t *s1, const int64_t *s2, uint32_t *outer);
/* Calls fn once per such run, in row-major order, with its byte offset under
 * s1, and under s2 (or, if s2 is NULL, in the row-major packed box). */
typedef void (*sync_run_fn)(void *arg, uint64_t at1, uint64_t at2, size_t bytes);
void sync_box_runs(const ferry_box_t *box, const int64_t *s1, const int64_t *s2, size_t esz, sync_run_fn fn,
                   void *arg);
/* Bytes from the first to one past the last byte the box addresses. */
uint64_t sync_box_span(const int64_t *strides, const ferry_box_t *box, size_t esz);

/* Bytes per element of op's tensor (the destination side's model). */
size_t sync_op_esz(const sync_member_t *m, const ferry_copy_op_t *op);

#endif
