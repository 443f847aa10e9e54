/* Writers: register the trainer rank's buffers, and per version pack the
 * strided sources its plan serves, checksum every served region and
 * publish where the bytes are (live buffers in sync mode, a staging slot in
 * async mode). Readers do the moving; see docs/sync.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "codec/delta_cuda_enc.h"
#include "ferry/fp8.h"
#include "common/sum.h"

#include "sync/sync_internal.h"

#define SLOT_ALIGN 64

typedef struct writer_slot {
    uint64_t version;          /* held version, 0 if empty */
    ferry_xport_mem_t *mem;    /* async: the slot's region (buffers, then pack area) */
    uint8_t *base;             /* async: its memory */
    uint64_t *sums;            /* one per op of the local plan */
    bool sums_ready;           /* sums hold this version's checksums */
    meta_slot_map_t map;
    meta_bytes_t *regions;
    uint8_t *desc;             /* descriptor bytes of every region */
    uint32_t *buffer_region;
    uint64_t *buffer_offset;
    /* deltas: the slot's delta area (sync mode's one slot, and each async
       slot, since readers of an older slot's version still read its area) */
    ferry_xport_mem_t *dmem;
    uint8_t *darea;
} writer_slot_t;

/* One step of a reader's chain in the delta area: its deltas from
 * base_version to the next version published. */
typedef struct delta_step {
    uint64_t base_version, at, len; /* the blob: at, len bytes */
} delta_step_t;

/* A reader's section of the delta area: room for the raw bound of all its
 * ops (what one step can take at worst), holding the steps it is offered
 * back to back, oldest first (their blobs), then free room. */
typedef struct delta_sec {
    uint64_t at, cap;
    uint32_t nsteps;
    delta_step_t *step;        /* chain of them */
} delta_sec_t;

struct ferry_writer {
    sync_member_t m;
    uint64_t setup_epoch;      /* the epoch the state below was built for (0: none) */
    bool committed;
    uint64_t last_version;
    /* per epoch */
    uint64_t pack_bytes;
    ferry_xport_mem_t *pack;   /* sync mode: the pack area */
    uint64_t *slot_offset;     /* async: offset of each buffer in a slot */
    uint64_t slot_bytes;
    writer_slot_t *slots;
    uint32_t nslots;
    size_t *pack_ops;          /* ops that fill a pack slot (one per pack offset) */
    size_t npack_ops;
    size_t *hash_order;        /* ops sorted by the bytes they read (equal reads hash once) */
    uint8_t *gscratch;         /* a FERRY_OP_GATHER op's bytes, gathered to be hashed or encoded (on a
                                  CUDA writer's GPU), as large as the largest such op */
    uint64_t gscratch_cap;
    meta_pair_sums_t *pair_sums; /* per reader: its checksums in the slot being published */
    size_t npairs;
    /* deltas: the served bytes as of base_version, grouped by distinct
       read, and the registered areas readers fetch deltas from */
    bool deltas;
    size_t ngroups;
    size_t *op_group;          /* per op: its read group */
    size_t *group_op;          /* per group: an op that reads it */
    uint64_t *group_base;      /* per group: offset in base */
    uint64_t *frame_at, *frame_len, *frame_ver; /* per group: its frame in the area this version */
    /* per group: the chunk checksums of its last encode's next (sums from
       sum_at[g]), which became its base: given back to the next encode, the
       base is not hashed again; sum_ver[g] is their version (0: none) */
    uint64_t *sums, *sum_at, *sum_ver;
    ferry_dtype_t *sum_dt;
    uint8_t *base;             /* host memory; a CUDA writer's on its GPU (NULL with slot_base) */
    uint64_t base_bytes;
    uint64_t base_version;     /* 0: base holds nothing usable */
    /* async with 2 or more slots: the base is the slot that holds
       base_version (it stays until two publishes later), not a copy */
    bool slot_base;
    const writer_slot_t *bslot; /* that slot, while a version is encoded */
    uint8_t *bscratch;         /* slot_base: a gathered read of the base slot (gscratch_cap bytes) */
#ifdef FERRY_CUDA
    /* a CUDA writer's deltas, encoded on its GPU: every group a step needs,
       one batch per version; the frames wait on the GPU until placed */
    ferry_delta_cuda_enc_t *genc;
    ferry_delta_cuda_enc_item_t *gitems;
    size_t *gitem;             /* per group: its item in the last batch (SIZE_MAX: none) */
    bool *gneed;               /* per group: an offered reader reads it (only those have a base) */
    bool gwarned;              /* a batch failed this epoch (said once) */
#endif
    uint8_t *delta_area;       /* the area of the slot whose version is being encoded */
    uint8_t *kept_area;        /* the area that holds the kept steps (the last one written) */
    ferry_delta_codec_t *codec;
    bool *delta_pair;          /* per pair: offered deltas (auto: the reader is on another host) */
    /* chains: each offered pair's steps, kept in its own section of the area */
    uint32_t chain;            /* most steps kept per reader (delta_chain; fewer where the index would pass
                                  its limit) */
    size_t *dorder, ndorder;   /* the pairs offered deltas, by reader rank: the entries' order */
    delta_sec_t *sec;          /* per pair */
    delta_step_t *sec_steps;   /* npairs x chain: the sections' steps */
};

const char *ferry_writer_error(const ferry_writer_t *w) { return w ? w->m.err.text : ""; }
const char *ferry_writer_service_address(const ferry_writer_t *w) {
    return w && w->m.svc ? ferry_meta_service_address(w->m.svc) : "";
}

/* ---- per-epoch state ------------------------------------------------------------ */

/* GPU memory of a registration the writer allocated for itself (pack
 * area, slots), counted as ferry's own. */
static void count_mem(ferry_writer_t *w, ferry_xport_mem_t *mem, int sign) {
    if (w->m.dev && mem) sync_dev_account(w->m.dev, sign * (int64_t)ferry_xport_mem_size(mem));
}

static void slot_free(ferry_writer_t *w, writer_slot_t *s) {
    count_mem(w, s->mem, -1);
    if (s->mem) ferry_xport_mem_deregister(s->mem);
    if (s->dmem) ferry_xport_mem_deregister(s->dmem);
    ferry_free(w->m.ctx, s->sums);
    ferry_free(w->m.ctx, s->regions);
    ferry_free(w->m.ctx, s->desc);
    ferry_free(w->m.ctx, s->buffer_region);
    ferry_free(w->m.ctx, s->buffer_offset);
    memset(s, 0, sizeof *s);
}

static void epoch_free(ferry_writer_t *w) {
    for (uint32_t i = 0; i < w->nslots; i++) slot_free(w, &w->slots[i]);
    ferry_free(w->m.ctx, w->slots);
    count_mem(w, w->pack, -1);
    if (w->pack) ferry_xport_mem_deregister(w->pack);
    ferry_free(w->m.ctx, w->slot_offset);
    ferry_free(w->m.ctx, w->pack_ops);
    ferry_free(w->m.ctx, w->hash_order);
    if (w->m.dev) sync_dev_free(w->m.dev, w->gscratch, w->gscratch_cap);
    else ferry_free(w->m.ctx, w->gscratch);
    w->gscratch = NULL;
    w->gscratch_cap = 0;
    ferry_free(w->m.ctx, w->pair_sums);
    w->slots = NULL;
    w->nslots = 0;
    w->pack = NULL;
    w->slot_offset = NULL;
    w->pack_ops = w->hash_order = NULL;
    w->pair_sums = NULL;
    w->npairs = w->npack_ops = 0;
    w->setup_epoch = 0;
    ferry_free(w->m.ctx, w->op_group);
    ferry_free(w->m.ctx, w->group_op);
    ferry_free(w->m.ctx, w->group_base);
    ferry_free(w->m.ctx, w->frame_at);
    ferry_free(w->m.ctx, w->frame_len);
    ferry_free(w->m.ctx, w->frame_ver);
    ferry_free(w->m.ctx, w->sums);
    ferry_free(w->m.ctx, w->sum_at);
    ferry_free(w->m.ctx, w->sum_ver);
    ferry_free(w->m.ctx, w->sum_dt);
    w->sums = w->sum_at = w->sum_ver = NULL;
    w->sum_dt = NULL;
    ferry_free(w->m.ctx, w->delta_pair);
    w->delta_pair = NULL;
    ferry_free(w->m.ctx, w->dorder);
    ferry_free(w->m.ctx, w->sec);
    ferry_free(w->m.ctx, w->sec_steps);
    w->dorder = NULL;
    w->sec = NULL;
    w->sec_steps = NULL;
    w->ndorder = 0;
    w->chain = 0;
    if (w->m.dev && w->base) sync_dev_free(w->m.dev, w->base, w->base_bytes);
    else free(w->base);
    w->base_bytes = 0;
    ferry_free(w->m.ctx, w->bscratch);
    w->bscratch = NULL;
    w->slot_base = false;
    w->bslot = NULL;
#ifdef FERRY_CUDA
    ferry_free(w->m.ctx, w->gitems);
    ferry_free(w->m.ctx, w->gitem);
    ferry_free(w->m.ctx, w->gneed);
    w->gitems = NULL;
    w->gitem = NULL;
    w->gneed = NULL;
    w->gwarned = false;
#endif
    w->delta_area = w->kept_area = NULL;
    w->op_group = w->group_op = NULL;
    w->group_base = w->frame_at = w->frame_len = w->frame_ver = NULL;
    w->base = NULL;
    w->base_version = 0;
    w->ngroups = 0;
    w->deltas = false;
}

/* Fills a slot's map: regions[] are the registrations' descriptors. */
static ferry_status_t slot_map(ferry_writer_t *w, writer_slot_t *s, ferry_xport_mem_t **regs, size_t nregs,
                               const uint32_t *buf_region, const uint64_t *buf_offset, int pack_region,
                               uint64_t pack_offset) {
    ferry_ctx_t *ctx = w->m.ctx;
    s->regions = ferry_calloc(ctx, nregs ? nregs : 1, sizeof *s->regions);
    s->desc = ferry_alloc(ctx, (nregs ? nregs : 1) * FERRY_XPORT_DESC_MAX);
    s->buffer_region = ferry_calloc(ctx, w->m.nbufs ? w->m.nbufs : 1, sizeof *s->buffer_region);
    s->buffer_offset = ferry_calloc(ctx, w->m.nbufs ? w->m.nbufs : 1, sizeof *s->buffer_offset);
    s->sums = ferry_calloc(ctx, ferry_plan_op_count(w->m.plan) + 1, sizeof *s->sums);
    if (!s->regions || !s->desc || !s->buffer_region || !s->buffer_offset || !s->sums)
        return ferry_fail(&w->m.err, FERRY_ERR_NO_MEMORY, "out of memory for a staging slot");
    for (size_t i = 0; i < nregs; i++) {
        size_t len;
        ferry_status_t st = ferry_xport_mem_pack(regs[i], s->desc + i * FERRY_XPORT_DESC_MAX, FERRY_XPORT_DESC_MAX, &len);
        if (st != FERRY_OK) return ferry_fail(&w->m.err, st, "%s", ferry_xport_error(w->m.xp));
        s->regions[i] = (meta_bytes_t){s->desc + i * FERRY_XPORT_DESC_MAX, len};
    }
    memcpy(s->buffer_region, buf_region, w->m.nbufs * sizeof *buf_region);
    memcpy(s->buffer_offset, buf_offset, w->m.nbufs * sizeof *buf_offset);
    memset(&s->map, 0, sizeof s->map);
    s->map.n_regions = nregs;
    s->map.regions = s->regions;
    s->map.n_buffers = w->m.nbufs;
    s->map.buffer_region = s->buffer_region;
    s->map.buffer_offset = s->buffer_offset;
    s->map.has_pack = pack_region >= 0;
    s->map.pack_region = pack_region >= 0 ? (uint32_t)pack_region : 0;
    s->map.pack_offset = pack_offset;
    return FERRY_OK;
}

/* Where op i's bytes are read from: a pack offset or a local buffer offset. */
static inline uint64_t op_key_region(const ferry_writer_t *w, const ferry_copy_op_t *op) {
    return (op->flags & FERRY_OP_PACK) ? UINT64_MAX
                                       : sync_local_buffer(&w->m, 0, w->m.p.rank, op->src_buffer);
}
static inline uint64_t op_key_offset(const ferry_copy_op_t *op) {
    return (op->flags & FERRY_OP_PACK) ? op->pack_offset : op->src_offset;
}

/* Whether two ops that start at the same source byte and move as many
 * bytes read the same bytes: yes unless one is a FERRY_OP_GATHER, whose
 * box and strides must then match too. */
static bool same_gather(const ferry_copy_op_t *a, const ferry_copy_op_t *b) {
    if (!((a->flags | b->flags) & FERRY_OP_GATHER)) return true;
    if ((a->flags ^ b->flags) & FERRY_OP_GATHER || a->box.ndim != b->box.ndim) return false;
    return memcmp(a->box.extent, b->box.extent, a->box.ndim * sizeof *a->box.extent) == 0 &&
           memcmp(a->src_strides, b->src_strides, a->box.ndim * sizeof *a->src_strides) == 0;
}

/* Orders ops by the bytes they read (qsort_r: writers in several threads
 * sort at once). */
static int cmp_read(const void *a, const void *b, void *arg) {
    const ferry_writer_t *sw = arg;
    const ferry_copy_op_t *ops = ferry_plan_ops(sw->m.plan);
    const ferry_copy_op_t *x = &ops[*(const size_t *)a], *y = &ops[*(const size_t *)b];
    uint64_t rx = op_key_region(sw, x), ry = op_key_region(sw, y);
    if (rx != ry) return rx < ry ? -1 : 1;
    uint64_t ox = op_key_offset(x), oy = op_key_offset(y);
    if (ox != oy) return ox < oy ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes < y->bytes ? -1 : 1;
    return *(const size_t *)a < *(const size_t *)b ? -1 : 1;
}

/* Whether group g has a place in the base: every group for a host writer;
 * for a CUDA writer, those its delta readers read. */
static bool group_based(const ferry_writer_t *w, size_t g) {
#ifdef FERRY_CUDA
    if (w->m.dev) return w->gneed[g];
#endif
    (void)w, (void)g;
    return true;
}

/* Allocates the base copy (one per distinct read) and each slot's
 * registered delta area. Leaves deltas off
 * (and returns OK) when some op's elements have no codec width. */
static ferry_status_t delta_setup(ferry_writer_t *w) {
    sync_member_t *m = &w->m;
    ferry_ctx_t *ctx = m->ctx;
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    size_t nops = ferry_plan_op_count(m->plan);
    if (m->p.deltas == FERRY_SYNC_DELTAS_OFF || nops == 0) return FERRY_OK;
#ifndef FERRY_CUDA
    if (m->dev) return FERRY_OK; /* (no such writer without CUDA) */
#endif
    /* auto: only for readers on other hosts; none, no deltas (and no cost) */
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(m->plan);
    w->delta_pair = ferry_calloc(ctx, w->npairs + 1, sizeof *w->delta_pair);
    if (!w->delta_pair) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    bool any = false;
    for (size_t pi = 0; pi < w->npairs; pi++) {
        w->delta_pair[pi] = (m->p.deltas == FERRY_SYNC_DELTAS_ALWAYS ||
                             m->side[1].hosts[pairs[pi].dst_rank] != m->side[0].hosts[m->p.rank]) &&
                            pairs[pi].op_count <= UINT32_MAX; /* an entry counts ops in 32 bits */
        /* a CUDA writer encodes every read of a version in one batch on its
           GPU; a gathered read exists one at a time (in gscratch): such a
           reader pulls whole */
        for (size_t i = pairs[pi].first_op; m->dev && i < pairs[pi].first_op + pairs[pi].op_count; i++)
            if (ops[i].flags & FERRY_OP_GATHER) w->delta_pair[pi] = false;
        any |= w->delta_pair[pi];
    }
    if (!any) return FERRY_OK;
    /* the entries go by reader rank (delta_area.h): the offered pairs in that order, one per reader (the plan's
       order already, in practice) */
    w->dorder = ferry_alloc(ctx, (w->npairs + 1) * sizeof *w->dorder);
    w->sec = ferry_calloc(ctx, w->npairs + 1, sizeof *w->sec);
    if (!w->dorder || !w->sec) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t pi = 0; pi < w->npairs; pi++) {
        if (!w->delta_pair[pi]) continue;
        size_t k = w->ndorder++;
        for (; k > 0 && pairs[w->dorder[k - 1]].dst_rank > pairs[pi].dst_rank; k--) w->dorder[k] = w->dorder[k - 1];
        w->dorder[k] = pi;
        /* two pairs for one reader would break the entries' order (never: a writer has one pair per reader) */
        if (k > 0 && pairs[w->dorder[k - 1]].dst_rank == pairs[pi].dst_rank) return FERRY_OK;
    }
    if (w->ndorder > SYNC_DELTA_MAX_ENTRIES) return FERRY_OK; /* more readers than an area can name: pull whole */
    w->chain = m->p.delta_chain;
    if ((uint64_t)w->chain * w->ndorder > SYNC_DELTA_MAX_ENTRIES)
        w->chain = (uint32_t)(SYNC_DELTA_MAX_ENTRIES / w->ndorder);
    w->sec_steps = ferry_calloc(ctx, w->npairs * w->chain + 1, sizeof *w->sec_steps);
    if (!w->sec_steps) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    uint64_t *bound = ferry_alloc(ctx, (nops + 1) * sizeof *bound);
    if (!bound) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < nops; i++) {
        ferry_dtype_t dt;
        uint64_t elems;
        bound[i] = sync_delta_dtype(sync_op_esz(&w->m, &ops[i]), ops[i].bytes, &dt, &elems)
                       ? ferry_delta_bound(dt, elems, 0) : 0;
        if (!bound[i]) { /* elements the codec cannot carry: pull whole */
            ferry_free(ctx, bound);
            return FERRY_OK;
        }
    }
    /* the index has room for every step of every reader; then each reader's
       section, the raw bound of its ops: any one step fits, and so does the
       chain (fewer bytes than the ops, by the chain rule) */
    uint64_t cap = sync_delta_index_end((uint32_t)(w->ndorder * w->chain));
    for (size_t k = 0; k < w->ndorder; k++) {
        size_t pi = w->dorder[k];
        delta_sec_t *sec = &w->sec[pi];
        sec->at = cap;
        sec->step = w->sec_steps + pi * w->chain;
        for (size_t i = pairs[pi].first_op; i < pairs[pi].first_op + pairs[pi].op_count; i++)
            sec->cap += 8 + bound[i];
        cap += sec->cap;
    }
    ferry_free(ctx, bound);
    w->group_base = ferry_alloc(ctx, w->ngroups * sizeof *w->group_base);
    w->frame_at = ferry_calloc(ctx, w->ngroups, sizeof *w->frame_at);
    w->frame_len = ferry_calloc(ctx, w->ngroups, sizeof *w->frame_len);
    w->frame_ver = ferry_calloc(ctx, w->ngroups, sizeof *w->frame_ver);
    w->sum_at = ferry_calloc(ctx, w->ngroups, sizeof *w->sum_at);
    w->sum_ver = ferry_calloc(ctx, w->ngroups, sizeof *w->sum_ver);
    w->sum_dt = ferry_calloc(ctx, w->ngroups, sizeof *w->sum_dt);
    if (!w->group_base || !w->frame_at || !w->frame_len || !w->frame_ver || !w->sum_at || !w->sum_ver || !w->sum_dt)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
#ifdef FERRY_CUDA
    if (m->dev) { /* a CUDA writer's base holds only what its delta readers read (on its GPU: dear) */
        w->gneed = ferry_calloc(ctx, w->ngroups + 1, sizeof *w->gneed);
        if (!w->gneed) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        for (size_t k = 0; k < w->ndorder; k++)
            for (size_t i = pairs[w->dorder[k]].first_op; i < pairs[w->dorder[k]].first_op + pairs[w->dorder[k]].op_count;
                 i++)
                w->gneed[w->op_group[i]] = true;
    }
#endif
    uint64_t base_bytes = 0, nsums = 0;
    for (size_t g = 0; g < w->ngroups; g++) {
        /* 16-aligned: whole elements of any width, and the GPU encoder's vector loads */
        base_bytes = (base_bytes + 15) & ~(uint64_t)15;
        w->group_base[g] = base_bytes;
        if (!group_based(w, g)) continue;
        base_bytes += ops[w->group_op[g]].bytes;
        w->sum_at[g] = nsums;
        nsums += ops[w->group_op[g]].bytes / FERRY_DELTA_CHUNK_DEFAULT + 1; /* chunks at any element width */
    }
    w->sums = ferry_alloc(ctx, nsums * sizeof *w->sums);
    if (!w->sums) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    w->slot_base = m->p.mode == FERRY_SYNC_MODE_ASYNC && w->nslots >= 2;
    if (w->slot_base && !m->dev && w->gscratch_cap && !(w->bscratch = ferry_alloc(ctx, w->gscratch_cap)))
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory for %llu bytes of gather scratch",
                          (unsigned long long)w->gscratch_cap);
    w->base_bytes = w->slot_base ? 0 : base_bytes ? base_bytes : 1;
    if (m->dev) {
#ifdef FERRY_CUDA
        /* the base on the writer's GPU, where its deltas are encoded; without
           the memory (or an encoder) the writer serves whole bytes, as before */
        ferry_errbuf_t e;
        w->gitems = ferry_calloc(ctx, w->ngroups + 1, sizeof *w->gitems);
        w->gitem = ferry_alloc(ctx, (w->ngroups + 1) * sizeof *w->gitem);
        if (!w->gitems || !w->gitem) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        if ((!w->slot_base && sync_dev_alloc(m->dev, w->base_bytes, (void **)&w->base, &e) != FERRY_OK) ||
            (!w->genc && ferry_delta_cuda_enc_create(sync_dev_device(m->dev), &w->genc, &e) != FERRY_OK)) {
            if (w->slot_base)
                ferry_log(ctx, FERRY_LOG_WARN, "writer %u: no deltas this epoch: the delta encoder on GPU %d: %s",
                          m->p.rank, sync_dev_device(m->dev), e.text);
            else
                ferry_log(ctx, FERRY_LOG_WARN, "writer %u: no deltas this epoch: a %llu-byte base on GPU %d: %s",
                          m->p.rank, (unsigned long long)w->base_bytes, sync_dev_device(m->dev), e.text);
            if (w->base) sync_dev_free(m->dev, w->base, w->base_bytes);
            w->base = NULL;
            w->base_bytes = 0;
            return FERRY_OK; /* w->deltas stays false; epoch_free frees the rest */
        }
        for (size_t g = 0; g < w->ngroups; g++) w->gitem[g] = SIZE_MAX;
#endif
    } else if (!w->slot_base) {
        w->base = malloc(w->base_bytes);
        if (!w->base)
            return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory for the %llu-byte delta base",
                              (unsigned long long)base_bytes);
    }
    if (!w->codec && ferry_delta_codec_create(ctx, &w->codec) != FERRY_OK)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory for a delta codec");
    for (uint32_t k = 0; k < w->nslots; k++) {
        writer_slot_t *sl = &w->slots[k];
        ferry_status_t st = ferry_xport_mem_alloc(m->xp, cap, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &sl->dmem);
        if (st != FERRY_OK)
            return ferry_fail(&m->err, st, "delta area of %llu bytes: %s", (unsigned long long)cap,
                              ferry_xport_error(m->xp));
        sl->darea = ferry_xport_mem_ptr(sl->dmem);
        sync_delta_header_put(sl->darea, &(sync_delta_header_t){0, 0}); /* no entries yet */
    }
    w->base_version = 0;
    w->deltas = true;
    return FERRY_OK;
}

static ferry_status_t epoch_setup(ferry_writer_t *w) {
    sync_member_t *m = &w->m;
    ferry_ctx_t *ctx = m->ctx;
    epoch_free(w);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    size_t nops = ferry_plan_op_count(m->plan);
    w->pack_bytes = ferry_plan_pack_bytes(m->plan, m->p.rank);
    /* ops that fill the pack area, each pack offset once */
    w->pack_ops = ferry_alloc(ctx, (nops + 1) * sizeof *w->pack_ops);
    w->hash_order = ferry_alloc(ctx, (nops + 1) * sizeof *w->hash_order);
    if (!w->pack_ops || !w->hash_order) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < nops; i++) w->hash_order[i] = i;
    qsort_r(w->hash_order, nops, sizeof *w->hash_order, cmp_read, w);
    /* distinct reads: equal reads (two engine replicas) are hashed, kept and
       encoded once */
    w->op_group = ferry_alloc(ctx, (nops + 1) * sizeof *w->op_group);
    w->group_op = ferry_alloc(ctx, (nops + 1) * sizeof *w->group_op);
    if (!w->op_group || !w->group_op) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t k = 0; k < nops; k++) {
        const ferry_copy_op_t *op = &ops[w->hash_order[k]], *prev = k ? &ops[w->hash_order[k - 1]] : NULL;
        if (!prev || op_key_region(w, op) != op_key_region(w, prev) || op_key_offset(op) != op_key_offset(prev) ||
            op->bytes != prev->bytes || !same_gather(op, prev))
            w->group_op[w->ngroups++] = w->hash_order[k];
        w->op_group[w->hash_order[k]] = w->ngroups - 1;
    }
    uint64_t gather = 0; /* the largest op read run by run: the scratch its bytes are gathered into */
    for (size_t i = 0; i < nops; i++)
        if ((ops[i].flags & FERRY_OP_GATHER) && ops[i].bytes > gather) gather = ops[i].bytes;
    if (gather) {
        w->gscratch_cap = gather;
        if (m->dev) {
            ferry_status_t ds = sync_dev_alloc(m->dev, gather, (void **)&w->gscratch, &m->err);
            if (ds != FERRY_OK) {
                w->gscratch_cap = 0;
                return ds;
            }
        } else if (!(w->gscratch = ferry_alloc(ctx, gather))) {
            w->gscratch_cap = 0;
            return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory for %llu bytes of gather scratch",
                              (unsigned long long)gather);
        }
    }
    for (size_t k = 0; k < nops; k++) {
        size_t i = w->hash_order[k];
        if (!(ops[i].flags & FERRY_OP_PACK)) continue;
        if (w->npack_ops && ops[w->pack_ops[w->npack_ops - 1]].pack_offset == ops[i].pack_offset) continue;
        w->pack_ops[w->npack_ops++] = i;
    }
    /* checksums per reader */
    w->npairs = ferry_plan_pair_count(m->plan);
    w->pair_sums = ferry_calloc(ctx, w->npairs + 1, sizeof *w->pair_sums);
    uint32_t nslots = m->p.mode == FERRY_SYNC_MODE_ASYNC ? m->p.slots : 1;
    w->slots = ferry_calloc(ctx, nslots, sizeof *w->slots);
    w->nslots = w->slots ? nslots : 0;
    uint32_t *breg = ferry_calloc(ctx, m->nbufs + 1, sizeof *breg);
    uint64_t *boff = ferry_calloc(ctx, m->nbufs + 1, sizeof *boff);
    ferry_xport_mem_t **regs = ferry_calloc(ctx, m->nbufs + 3, sizeof *regs);
    ferry_status_t st = FERRY_OK;
    if (!w->pair_sums || !w->slots || !breg || !boff || !regs) {
        st = ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    st = delta_setup(w);
    if (st != FERRY_OK) goto done;
    if (m->p.mode == FERRY_SYNC_MODE_SYNC) {
        /* readers read the live buffers; strided sources go to one pack area */
        for (size_t b = 0; b < m->nbufs; b++) {
            regs[b] = m->bufs[b].mem;
            breg[b] = (uint32_t)b;
        }
        int pack_region = -1;
        if (w->pack_bytes) {
            st = ferry_xport_mem_alloc(m->xp, w->pack_bytes, m->mem, FERRY_XPORT_ACCESS_READ, &w->pack);
            count_mem(w, st == FERRY_OK ? w->pack : NULL, 1);
            if (st != FERRY_OK) {
                st = ferry_fail(&m->err, st, "pack area of %llu bytes: %s", (unsigned long long)w->pack_bytes,
                                ferry_xport_error(m->xp));
                goto done;
            }
            regs[m->nbufs] = w->pack;
            pack_region = (int)m->nbufs;
        }
        size_t nregs = m->nbufs + (pack_region >= 0);
        if (w->deltas) regs[nregs++] = w->slots[0].dmem;
        st = slot_map(w, &w->slots[0], regs, nregs, breg, boff, pack_region, 0);
        if (st == FERRY_OK && w->deltas) {
            w->slots[0].map.has_delta = true;
            w->slots[0].map.delta_region = (uint32_t)(nregs - 1);
        }
    } else {
        /* a slot is one region: every buffer, then the pack area */
        w->slot_offset = ferry_calloc(ctx, m->nbufs + 1, sizeof *w->slot_offset);
        if (!w->slot_offset) {
            st = ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
            goto done;
        }
        uint64_t at = 0;
        for (size_t b = 0; b < m->nbufs; b++) {
            w->slot_offset[b] = at;
            at += (m->bufs[b].size + SLOT_ALIGN - 1) / SLOT_ALIGN * SLOT_ALIGN;
        }
        uint64_t pack_at = at;
        w->slot_bytes = at + w->pack_bytes;
        for (uint32_t k = 0; k < w->nslots && st == FERRY_OK; k++) {
            writer_slot_t *s = &w->slots[k];
            st = ferry_xport_mem_alloc(m->xp, w->slot_bytes ? w->slot_bytes : 1, m->mem, FERRY_XPORT_ACCESS_READ, &s->mem);
            count_mem(w, st == FERRY_OK ? s->mem : NULL, 1);
            if (st != FERRY_OK) {
                st = ferry_fail(&m->err, st, "staging slot %u of %llu bytes: %s", k,
                                (unsigned long long)w->slot_bytes, ferry_xport_error(m->xp));
                break;
            }
            s->base = ferry_xport_mem_ptr(s->mem);
            regs[0] = s->mem;
            regs[1] = s->dmem; /* (with deltas) */
            st = slot_map(w, s, regs, w->deltas ? 2 : 1, breg, w->slot_offset, w->pack_bytes ? 0 : -1, pack_at);
            if (st == FERRY_OK && w->deltas) {
                s->map.has_delta = true;
                s->map.delta_region = 1;
            }
        }
    }
done:
    ferry_free(ctx, breg);
    ferry_free(ctx, boff);
    ferry_free(ctx, regs);
    return st;
}

/* ---- publishing --------------------------------------------------------------------- */

/* Bytes of buffer b as this version's readers see them. */
static uint8_t *buf_bytes(ferry_writer_t *w, const writer_slot_t *s, size_t b) {
    return w->m.p.mode == FERRY_SYNC_MODE_ASYNC ? s->base + w->slot_offset[b] : w->m.bufs[b].ptr;
}
static uint8_t *pack_bytes(ferry_writer_t *w, const writer_slot_t *s) {
    if (!w->pack_bytes) return NULL;
    return w->m.p.mode == FERRY_SYNC_MODE_ASYNC ? s->base + s->map.pack_offset : ferry_xport_mem_ptr(w->pack);
}

static ferry_status_t pack_slot(ferry_writer_t *w, const writer_slot_t *s) {
    const ferry_copy_op_t *ops = ferry_plan_ops(w->m.plan);
    const ferry_model_t *dm = ferry_layout_model(w->m.side[1].layout);
    uint8_t *pack = pack_bytes(w, s);
    sync_dev_box_t *jobs = NULL;
    if (w->m.dev && w->npack_ops && !(jobs = ferry_calloc(w->m.ctx, w->npack_ops, sizeof *jobs)))
        return ferry_fail(&w->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t njobs = 0;
    for (size_t k = 0; k < w->npack_ops; k++) {
        const ferry_copy_op_t *op = &ops[w->pack_ops[k]];
        if (op->flags & FERRY_OP_QUANT) continue; /* its slot is a quant op's (below) */
        ferry_tensor_info_t ti;
        ferry_model_tensor(dm, op->tensor, &ti);
        uint32_t b = sync_local_buffer(&w->m, 0, w->m.p.rank, op->src_buffer);
        if (jobs)
            jobs[njobs++] = (sync_dev_box_t){.dst = pack + op->pack_offset, .src = buf_bytes(w, s, b) + op->src_offset,
                                             .src_strides = op->src_strides, .box = op->box,
                                             .esz = (uint32_t)ferry_dtype_size(ti.dtype)};
        else
            sync_gather(pack + op->pack_offset, buf_bytes(w, s, b), op->src_offset, op->src_strides, &op->box,
                        ferry_dtype_size(ti.dtype));
    }
    ferry_status_t st = jobs ? sync_dev_boxes(w->m.dev, jobs, njobs, &w->m.err) : FERRY_OK;
    ferry_free(w->m.ctx, jobs);
    /* FP8 destinations: each quant op's box of this version's weight into
       its slots, on the CPU or on the member's GPU (queued after the
       packing; one wait for both, before the checksums) */
    const ferry_quant_op_t *q = ferry_plan_quant_ops(w->m.plan);
    for (size_t i = 0; i < ferry_plan_quant_op_count(w->m.plan) && st == FERRY_OK; i++) {
        const uint32_t nd = q[i].box.ndim;
        const uint64_t lead = nd == 3 ? (uint64_t)q[i].box.extent[0] : 1, rows = (uint64_t)q[i].box.extent[nd - 2],
                       cols = (uint64_t)q[i].box.extent[nd - 1], bcols = (cols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
        const uint64_t esz = ferry_dtype_size(q[i].src_dtype), per_s = ferry_fp8_scale_count(rows, cols);
        const uint8_t *src = buf_bytes(w, s, sync_local_buffer(&w->m, 0, w->m.p.rank, q[i].src_buffer)) + q[i].src_offset;
        for (uint64_t e = 0; e < lead && st == FERRY_OK; e++) {
            const uint8_t *from = src + e * (uint64_t)(nd == 3 ? q[i].src_strides[0] : 0) * esz;
            uint8_t *fp8 = pack + q[i].fp8_offset + e * rows * cols;
            float *scale = (float *)(void *)(pack + q[i].scale_offset) + e * per_s;
            if (w->m.dev) {
                st = sync_dev_fp8(w->m.dev, q[i].src_dtype, from, (uint64_t)q[i].src_strides[nd - 2], rows, cols,
                                  q[i].flags, fp8, cols, scale, bcols, &w->m.err);
                continue;
            }
            st = ferry_fp8_block_quantize_ld(q[i].src_dtype, from, (uint64_t)q[i].src_strides[nd - 2], rows, cols,
                                             q[i].flags, fp8, cols, scale, bcols);
            if (st != FERRY_OK)
                st = ferry_fail(&w->m.err, st, "quantizing tensor %u for an FP8 engine failed", q[i].tensor);
        }
    }
    if (st == FERRY_OK && w->m.dev) st = sync_dev_wait(w->m.dev, &w->m.err);
    return st;
}

/* Where op i's current bytes are. */
static const uint8_t *op_bytes(ferry_writer_t *w, const writer_slot_t *s, const ferry_copy_op_t *op) {
    return (op->flags & FERRY_OP_PACK)
               ? pack_bytes(w, s) + op->pack_offset
               : buf_bytes(w, s, sync_local_buffer(&w->m, 0, w->m.p.rank, op->src_buffer)) + op->src_offset;
}

/* A host writer's op's bytes in slot s, contiguous: where they are, or for
 * a FERRY_OP_GATHER gathered (row-major) into scratch, valid until the next
 * call with that scratch. */
static const uint8_t *op_read_into(ferry_writer_t *w, const writer_slot_t *s, const ferry_copy_op_t *op,
                                   uint8_t *scratch) {
    if (!(op->flags & FERRY_OP_GATHER)) return op_bytes(w, s, op);
    uint32_t b = sync_local_buffer(&w->m, 0, w->m.p.rank, op->src_buffer);
    sync_gather(scratch, buf_bytes(w, s, b), op->src_offset, op->src_strides, &op->box, sync_op_esz(&w->m, op));
    return scratch;
}
static const uint8_t *op_read(ferry_writer_t *w, const writer_slot_t *s, const ferry_copy_op_t *op) {
    return op_read_into(w, s, op, w->gscratch);
}

/* Group g's bytes at base_version, to encode from (op reads it): the
 * base copy, or with slot_base the base slot's (a gathered read gathered
 * into bscratch, beside next's in gscratch). */
static const uint8_t *base_of(ferry_writer_t *w, size_t g, const ferry_copy_op_t *op) {
    return w->slot_base ? op_read_into(w, w->bslot, op, w->bscratch) : w->base + w->group_base[g];
}

/* A CUDA writer's sums of every group into gs: the contiguous reads in one
 * batch, then each gathered read, gathered into the scratch by the box
 * kernel and summed there (the stream orders each gather after the sum of
 * the one before). */
static ferry_status_t hash_dev(ferry_writer_t *w, writer_slot_t *s, uint64_t *gs) {
    const ferry_copy_op_t *ops = ferry_plan_ops(w->m.plan);
    sync_dev_region_t *rg = ferry_calloc(w->m.ctx, w->ngroups + 1, sizeof *rg);
    size_t *idx = ferry_calloc(w->m.ctx, w->ngroups + 1, sizeof *idx), n = 0;
    ferry_status_t st = rg && idx ? FERRY_OK : ferry_fail(&w->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t g = 0; g < w->ngroups && st == FERRY_OK; g++) {
        const ferry_copy_op_t *op = &ops[w->group_op[g]];
        if (op->flags & FERRY_OP_GATHER) continue;
        idx[n] = g;
        rg[n++] = (sync_dev_region_t){op_bytes(w, s, op), op->bytes};
    }
    if (st == FERRY_OK) st = sync_dev_sums_async(w->m.dev, rg, n, gs, idx, &w->m.err);
    for (size_t g = 0; g < w->ngroups && st == FERRY_OK; g++) {
        const ferry_copy_op_t *op = &ops[w->group_op[g]];
        if (!(op->flags & FERRY_OP_GATHER)) continue;
        uint32_t b = sync_local_buffer(&w->m, 0, w->m.p.rank, op->src_buffer);
        sync_dev_box_t job = {.dst = w->gscratch, .src = buf_bytes(w, s, b) + op->src_offset,
                              .src_strides = op->src_strides, .box = op->box, .esz = (uint32_t)sync_op_esz(&w->m, op)};
        sync_dev_region_t one = {w->gscratch, op->bytes};
        st = sync_dev_boxes(w->m.dev, &job, 1, &w->m.err);
        if (st == FERRY_OK) st = sync_dev_sums_async(w->m.dev, &one, 1, gs, &g, &w->m.err);
    }
    ferry_status_t fs = sync_dev_sums_flush(w->m.dev, &w->m.err); /* (after a failure too: nothing stays queued) */
    ferry_free(w->m.ctx, rg);
    ferry_free(w->m.ctx, idx);
    return st != FERRY_OK ? st : fs;
}

/* One ferry sum per distinct read, given to every op that reads it (on the
 * GPU for a CUDA writer). */
static ferry_status_t hash_slot(ferry_writer_t *w, writer_slot_t *s) {
    const ferry_copy_op_t *ops = ferry_plan_ops(w->m.plan);
    size_t nops = ferry_plan_op_count(w->m.plan);
    if (w->m.dev) {
        uint64_t *gs = ferry_calloc(w->m.ctx, w->ngroups + 1, sizeof *gs);
        ferry_status_t st = gs ? hash_dev(w, s, gs) : ferry_fail(&w->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
        for (size_t i = 0; i < nops && st == FERRY_OK; i++) s->sums[i] = gs[w->op_group[i]];
        ferry_free(w->m.ctx, gs);
        return st;
    }
    uint64_t sum = 0;
    for (size_t k = 0; k < nops; k++) {
        size_t i = w->hash_order[k], g = w->op_group[i];
        if (k == 0 || g != w->op_group[w->hash_order[k - 1]]) sum = ferry_sum(op_read(w, s, &ops[i]), ops[i].bytes);
        s->sums[i] = sum;
    }
    return FERRY_OK;
}

static void fill_pair_sums(ferry_writer_t *w, writer_slot_t *s) {
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(w->m.plan);
    for (size_t i = 0; i < w->npairs; i++)
        w->pair_sums[i] = (meta_pair_sums_t){pairs[i].dst_rank, s->sums + pairs[i].first_op, pairs[i].op_count};
}

typedef struct publish_ctx {
    ferry_writer_t *w;
    writer_slot_t *s;
    double hash_seconds, delta_seconds;
    uint64_t delta_bytes;
} publish_ctx_t;

/* Op i's frame of s->version into the area at `at` (room bytes there):
 * copied if another reader's op of the same read has it this version, else
 * encoded from the base. FERRY_ERR_LIMIT when it does not fit: nothing is
 * kept of the attempt (its chunk sums are forgotten), so it may be made
 * again elsewhere. */
static ferry_status_t op_frame(ferry_writer_t *w, writer_slot_t *s, size_t i, uint64_t at, uint64_t room,
                               uint64_t *len) {
    const ferry_copy_op_t *op = &ferry_plan_ops(w->m.plan)[i];
    uint8_t *a = w->delta_area;
    uint64_t v = s->version;
    size_t g = w->op_group[i];
    if (w->frame_ver[g] == v) { /* another reader's op reads the same bytes */
        if (w->frame_len[g] > room) return FERRY_ERR_LIMIT;
        memcpy(a + at, a + w->frame_at[g], w->frame_len[g]);
        *len = w->frame_len[g];
        return FERRY_OK;
    }
#ifdef FERRY_CUDA
    if (w->m.dev) { /* encoded with the version's batch: copied out of the GPU into place */
        if (w->gitem[g] == SIZE_MAX) return FERRY_ERR_INVALID_ARGUMENT; /* not in the batch: cannot happen */
        ferry_errbuf_t e;
        ferry_status_t st = ferry_delta_cuda_enc_copy(w->genc, w->gitem[g], a + at, room, &e);
        if (st != FERRY_OK) return st;
        w->frame_at[g] = at;
        w->frame_len[g] = *len = w->gitems[w->gitem[g]].len;
        w->frame_ver[g] = v;
        return FERRY_OK;
    }
#endif
    ferry_dtype_t dt;
    uint64_t elems;
    sync_delta_dtype(sync_op_esz(&w->m, op), op->bytes, &dt, &elems);
    uint64_t *gs = w->sums + w->sum_at[g]; /* base sums in, next sums out: chunk by chunk */
    ferry_delta_params_t dp = {.field_mask = FERRY_DELTA_PARAM_VERSIONS | FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS,
                               .dtype = dt, .base_version = w->base_version, .next_version = v,
                               .next_chunk_sums = gs};
    if (w->sum_ver[g] && w->sum_ver[g] == w->base_version && w->sum_dt[g] == dt) {
        dp.field_mask |= FERRY_DELTA_PARAM_BASE_CHUNK_SUMS;
        dp.base_chunk_sums = gs;
    }
    size_t l = 0;
    const uint8_t *next = op_read(w, s, op);
    ferry_status_t st = ferry_delta_encode(w->codec, &dp, base_of(w, g, op), next, elems, a + at, room, &l);
    w->sum_ver[g] = st == FERRY_OK ? v : 0; /* a failed encode leaves some of them next's */
    w->sum_dt[g] = dt;
    if (st != FERRY_OK) return st;
    if ((op->flags & FERRY_OP_GATHER) && !w->slot_base) /* its base moves on now, from this gather (see encode_deltas) */
        memcpy(w->base + w->group_base[g], next, op->bytes);
    w->frame_at[g] = at;
    w->frame_len[g] = l;
    w->frame_ver[g] = v;
    *len = l;
    return FERRY_OK;
}

static void sec_drop_oldest(delta_sec_t *sec) {
    memmove(sec->step, sec->step + 1, (sec->nsteps - 1) * sizeof *sec->step);
    sec->nsteps--;
}

/* Moves a reader's kept steps, and the step of version v being written
 * after them at [*blob, *at), to the start of its section: the room of
 * dropped steps comes back. Frames of the new step that other readers' ops
 * copy move along. */
static void sec_compact(ferry_writer_t *w, delta_sec_t *sec, uint64_t v, uint64_t *blob, uint64_t *at) {
    uint64_t from = sec->nsteps ? sec->step[0].at : *blob, shift = from - sec->at;
    if (!shift) return;
    memmove(w->delta_area + sec->at, w->delta_area + from, *at - from);
    for (uint32_t k = 0; k < sec->nsteps; k++) sec->step[k].at -= shift;
    for (size_t g = 0; g < w->ngroups; g++)
        if (w->frame_ver[g] == v && w->frame_at[g] >= *blob && w->frame_at[g] < *at) w->frame_at[g] -= shift;
    *blob -= shift;
    *at -= shift;
}

/* The most bytes ops [i0, i1)'s frames can take (their raw bound). */
static uint64_t ops_bound(ferry_writer_t *w, size_t i0, size_t i1) {
    const ferry_copy_op_t *ops = ferry_plan_ops(w->m.plan);
    uint64_t b = 0;
    for (size_t i = i0; i < i1; i++) {
        ferry_dtype_t dt;
        uint64_t elems;
        sync_delta_dtype(sync_op_esz(&w->m, &ops[i]), ops[i].bytes, &dt, &elems);
        b += ferry_delta_bound(dt, elems, 0);
    }
    return b;
}

/* Reader pi's step of s->version (from base_version), written after the
 * steps its section keeps, then the chain rule: its steps together take
 * fewer bytes than its ops, else the oldest go (the newest always stays,
 * as a one-step chain). A frame that does not fit beside the kept steps
 * sends the oldest away until the rest of the step surely fits (its raw
 * bound; the section holds that with nothing kept), and is made again:
 * once per step at most. False when the step cannot be written. *len: its
 * bytes. */
static bool encode_step(ferry_writer_t *w, writer_slot_t *s, size_t pi, uint64_t *len) {
    const ferry_plan_pair_t *p = &ferry_plan_pairs(w->m.plan)[pi];
    delta_sec_t *sec = &w->sec[pi];
    uint64_t v = s->version, end = sec->at + sec->cap, table = 8 * (uint64_t)p->op_count;
    while (sec->nsteps >= w->chain) sec_drop_oldest(sec); /* a place in the chain for this one */
    uint64_t blob = sec->nsteps ? sec->step[sec->nsteps - 1].at + sec->step[sec->nsteps - 1].len : sec->at, at = blob;
    sec_compact(w, sec, v, &blob, &at); /* what dropped steps took (at most the kept steps' bytes move) */
    while (end - at < table && sec->nsteps) {
        sec_drop_oldest(sec);
        sec_compact(w, sec, v, &blob, &at);
    }
    if (end - at < table) return false;
    at += table;
    for (size_t i = p->first_op; i < p->first_op + p->op_count; i++) {
        uint64_t l = 0;
        ferry_status_t st = op_frame(w, s, i, at, end - at, &l);
        if (st == FERRY_ERR_LIMIT && sec->nsteps) {
            uint64_t rest = ops_bound(w, i, p->first_op + p->op_count);
            while (end - at < rest && sec->nsteps) {
                sec_drop_oldest(sec);
                sec_compact(w, sec, v, &blob, &at);
            }
            st = op_frame(w, s, i, at, end - at, &l);
        }
        if (st != FERRY_OK) return false; /* cannot happen: the section holds the step's raw bound */
        sync_delta_frame_len_put(w->delta_area + blob, (uint32_t)(i - p->first_op), l);
        at += l;
    }
    uint64_t total = at - blob;
    for (uint32_t k = 0; k < sec->nsteps; k++) total += sec->step[k].len;
    while (sec->nsteps && total >= p->bytes) {
        total -= sec->step[0].len;
        sec_drop_oldest(sec);
    }
    sec->step[sec->nsteps++] = (delta_step_t){w->base_version, blob, at - blob};
    *len = at - blob;
    return true;
}

#ifdef FERRY_CUDA
/* A CUDA writer's frames of s->version for reader pi: the groups it reads
 * that no reader before it this version had framed, from the base, in one
 * batch on the GPU (the frames wait there; op_frame copies each into
 * place). Chunk sums as for the CPU encoder (the base's given when they are
 * the base's; next's out). False when the batch or one of its items
 * failed (say, a source not aligned to its elements): this reader then
 * gets no step (logged once per epoch). */
static bool encode_dev(ferry_writer_t *w, writer_slot_t *s, size_t pi) {
    const ferry_copy_op_t *ops = ferry_plan_ops(w->m.plan);
    const ferry_plan_pair_t *p = &ferry_plan_pairs(w->m.plan)[pi];
    size_t n = 0;
    for (size_t i = p->first_op; i < p->first_op + p->op_count; i++) w->gitem[w->op_group[i]] = SIZE_MAX;
    for (size_t i = p->first_op; i < p->first_op + p->op_count; i++) {
        size_t g = w->op_group[i];
        if (w->frame_ver[g] == s->version) continue; /* framed for a reader before: copied from the area */
        if (w->gitem[g] != SIZE_MAX) continue;       /* another op of this reader reads it too */
        const ferry_copy_op_t *op = &ops[i];
        ferry_dtype_t dt;
        uint64_t elems;
        sync_delta_dtype(sync_op_esz(&w->m, op), op->bytes, &dt, &elems);
        uint64_t *gs = w->sums + w->sum_at[g];
        bool given = w->sum_ver[g] && w->sum_ver[g] == w->base_version && w->sum_dt[g] == dt;
        w->gitems[n] = (ferry_delta_cuda_enc_item_t){
            .base = base_of(w, g, op), .next = op_bytes(w, s, op), .dtype = dt, .elems = elems,
            .base_version = w->base_version, .next_version = s->version, .base_chunk_sums = given ? gs : NULL,
            .next_chunk_sums = gs};
        w->sum_dt[g] = dt;
        w->gitem[g] = n++;
    }
    ferry_errbuf_t e;
    ferry_status_t st = sync_dev_wait(w->m.dev, &e); /* the pack area and the checksums' kernels are done */
    if (st == FERRY_OK && n) st = ferry_delta_cuda_encode(w->genc, w->gitems, n, NULL, &e);
    for (size_t i = p->first_op; i < p->first_op + p->op_count; i++) {
        size_t g = w->op_group[i];
        if (w->frame_ver[g] == s->version || w->gitem[g] >= n) continue;
        bool good = st == FERRY_OK || (st != FERRY_ERR_IO && st != FERRY_ERR_NO_MEMORY &&
                                       w->gitems[w->gitem[g]].status == FERRY_OK);
        w->sum_ver[g] = good ? s->version : 0; /* a failed item leaves its sums unknown */
    }
    if (st != FERRY_OK && !w->gwarned) {
        w->gwarned = true;
        ferry_log(w->m.ctx, FERRY_LOG_WARN, "writer %u: deltas of version %llu for reader %u not encoded on the GPU "
                  "(%s); it pulls whole (said once per epoch)", w->m.p.rank, (unsigned long long)s->version,
                  p->dst_rank, e.text);
    }
    return st == FERRY_OK;
}
#endif

/* While the PUBLISH of s->version is pending, into s's area: each
 * reader's step from base_version (when the base holds the version
 * published before) joins the steps kept for it, then the base moves on to
 * this version (with slot_base: to s). Returns this version's bytes: the
 * index and the new steps. */
static uint64_t encode_deltas(ferry_writer_t *w, writer_slot_t *s) {
    const ferry_copy_op_t *ops = ferry_plan_ops(w->m.plan);
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(w->m.plan);
    uint8_t *a = w->delta_area = s->darea;
    uint64_t v = s->version, bytes = 0;
    uint32_t entries = 0;
    w->bslot = NULL;
    for (uint32_t k = 0; w->slot_base && k < w->nslots; k++)
        if (&w->slots[k] != s && w->slots[k].version && w->slots[k].version == w->base_version) w->bslot = &w->slots[k];
    bool have_base = w->base_version && w->base_version == w->last_version && (!w->slot_base || w->bslot);
    sync_delta_header_put(a, &(sync_delta_header_t){0, v}); /* readers see no entries while the area is rewritten */
    /* async: the kept steps are in the previous version's slot, whose
       readers may still read them there: they are copied into this slot's
       area, at the same places (the sections are laid out alike) */
    for (size_t k = 0; have_base && w->kept_area && w->kept_area != a && k < w->ndorder; k++) {
        const delta_sec_t *sec = &w->sec[w->dorder[k]];
        if (sec->nsteps)
            memcpy(a + sec->step[0].at, w->kept_area + sec->step[0].at,
                   sec->step[sec->nsteps - 1].at + sec->step[sec->nsteps - 1].len - sec->step[0].at);
    }
    w->kept_area = a;
    bool ok = have_base;
    for (size_t k = 0; ok && k < w->ndorder; k++) {
        uint64_t len = 0;
#ifdef FERRY_CUDA
        if (w->m.dev && !encode_dev(w, s, w->dorder[k])) {
            w->sec[w->dorder[k]].nsteps = 0; /* no step for this reader: its chain ends, it pulls whole */
            continue;
        }
#endif
        ok = encode_step(w, s, w->dorder[k], &len);
        bytes += len;
    }
    for (size_t k = 0; k < w->ndorder; k++) {
        size_t pi = w->dorder[k];
        delta_sec_t *sec = &w->sec[pi];
        if (!ok) sec->nsteps = 0; /* no step of this version: every chain ends here, and readers pull whole */
        for (uint32_t j = 0; j < sec->nsteps; j++) {
            sync_delta_entry_t e = {pairs[pi].dst_rank, (uint32_t)pairs[pi].op_count, sec->step[j].base_version,
                                    sec->step[j].at, sec->step[j].len};
            sync_delta_entry_put(a, entries++, &e);
        }
    }
    /* the base moves on (with slot_base: to this slot, which holds v) */
    bool moved = true;
    ferry_errbuf_t e;
    for (size_t g = 0; g < w->ngroups && !w->slot_base; g++) {
        const ferry_copy_op_t *op = &ops[w->group_op[g]];
        if ((op->flags & FERRY_OP_GATHER) && have_base && w->frame_ver[g] == v) continue; /* moved on when encoded */
        if (!w->m.dev) memcpy(w->base + w->group_base[g], op_read(w, s, op), op->bytes);
        else if (group_based(w, g)) /* (a CUDA writer's delta readers have no gathered reads) */
            moved &= sync_dev_copy(w->m.dev, w->base + w->group_base[g], op_bytes(w, s, op), op->bytes, &e) == FERRY_OK;
    }
    if (w->m.dev && !w->slot_base) moved &= sync_dev_wait(w->m.dev, &e) == FERRY_OK;
    w->base_version = moved ? v : 0; /* a base that did not move holds nothing usable */
    sync_delta_header_put(a, &(sync_delta_header_t){entries, v}); /* last: the entries are complete */
    return entries ? sync_delta_index_end(entries) + bytes : 0;
}

/* Runs while the PUBLISH is pending (readers are already pulling): the
 * checksums, then SUMS. */
static ferry_status_t publish_between(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    publish_ctx_t *pc = opaque;
    if (pc->w->setup_epoch != pc->w->m.epoch) return FERRY_OK; /* replanned meanwhile: the PUBLISH gets STALE */
    if (!pc->s->sums_ready) {
        double t = ferry_mono_s();
        ferry_status_t hs = hash_slot(pc->w, pc->s);
        if (hs != FERRY_OK) return ferry_fail(err, hs, "checksums of version %llu: %s",
                                              (unsigned long long)pc->s->version, pc->w->m.err.text);
        pc->hash_seconds = ferry_mono_s() - t;
        /* deltas before SUMS: readers that want them wait for SUMS */
        t = ferry_mono_s();
        if (pc->w->deltas) pc->delta_bytes = encode_deltas(pc->w, pc->s);
        pc->delta_seconds = ferry_mono_s() - t;
        pc->s->sums_ready = true;
    }
    fill_pair_sums(pc->w, pc->s);
    return meta_publish_sums(c, pc->s->version, pc->w->pair_sums, pc->w->npairs, err);
}

/* PUBLISH of slot k. Fresh versions announce the slot first and send their
 * checksums while readers pull (sums_follow); a replay has them already. */
static ferry_status_t send_publish(ferry_writer_t *w, uint32_t k, bool wait_acks, ferry_errbuf_t *err,
                                   meta_published_t *out, ferry_publish_info_t *inf) {
    writer_slot_t *s = &w->slots[k];
    meta_publish_req_t p = {.epoch = w->m.epoch,
                            .plan_digest = w->m.plan_digest,
                            .version = s->version,
                            .slot = k,
                            .map = &s->map,
                            .wait_acks = wait_acks,
                            .wait_ms = w->m.p.timeout_ms};
    publish_ctx_t pc = {w, s, 0, 0, 0};
    if (s->sums_ready) {
        fill_pair_sums(w, s);
        p.n_sums = w->npairs;
        p.sums = w->pair_sums;
    } else {
        p.sums_follow = true;
    }
    ferry_status_t st = meta_publish(w->m.meta, &p, p.sums_follow ? publish_between : NULL, &pc, out, err);
    if (inf) {
        inf->hash_seconds = pc.hash_seconds;
        inf->delta_seconds = pc.delta_seconds;
        inf->delta_bytes = pc.delta_bytes;
    }
    return st;
}

/* After a reconnection: the new service learns the layout and the versions
 * this writer still holds in its slots. */
static ferry_status_t writer_replay(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    (void)c;
    ferry_writer_t *w = opaque;
    ferry_status_t st = w->m.blob ? sync_recommit(&w->m, err) : FERRY_OK;
    if (st != FERRY_OK || w->m.p.mode != FERRY_SYNC_MODE_ASYNC || !w->m.epoch) return st;
    bool changed;
    st = sync_refresh_epoch(&w->m, w->m.p.timeout_ms, &changed);
    /* a new epoch: nothing held is valid; setup_epoch no longer matches, so
     * publish sets everything up again (not here: a PUBLISH may be in flight) */
    if (st != FERRY_OK || changed) return st;
    for (uint32_t k = 0; k < w->nslots && st == FERRY_OK; k++)
        if (w->slots[k].version && w->slots[k].sums_ready) st = send_publish(w, k, false, err, NULL, NULL);
    return st;
}

/* Members of `role` other than this writer that the service said left:
 * their accounts, "; "-separated, into buf; false if none. */
static bool departed_list(ferry_writer_t *w, uint32_t role, char *buf, size_t size) {
    sync_member_t *m = &w->m;
    uint32_t world = m->side[role == META_ROLE_WRITER ? 0 : 1].world;
    size_t at = 0;
    buf[0] = '\0';
    for (uint32_t r = 0; r < world && at + 1 < size; r++) {
        char who[META_MAX_DETAIL];
        if ((role == META_ROLE_WRITER && r == m->p.rank) || !meta_client_departed(m->meta, role, r, who, sizeof who))
            continue;
        int k = snprintf(buf + at, size - at, "%s%s", at ? "; " : "", who);
        at = k < 0 ? at : at + (size_t)k >= size ? size - 1 : at + (size_t)k;
    }
    return at > 0;
}

/* Sync mode: a publish returns OK whoever acknowledged it; when a version
 * never became ready (another writer did not publish it) or readers left,
 * the log says who left and what it was doing. */
static void report_departures(ferry_writer_t *w, uint64_t version, const meta_published_t *pub) {
    sync_member_t *m = &w->m;
    char gone[2048];
    if (!pub->ready) { /* (with no live reader to wait for, the reply may simply come first) */
        bool any = departed_list(w, META_ROLE_WRITER, gone, sizeof gone);
        if (any || pub->n_missing)
            ferry_log(m->ctx, FERRY_LOG_WARN,
                      "writer %u: version %llu never became ready (%u of %u readers acknowledged it): %s", m->p.rank,
                      (unsigned long long)version, pub->acked, m->side[1].world,
                      any ? gone : "another writer has not published it");
    }
    if (pub->acked + pub->n_missing < m->side[1].world && departed_list(w, META_ROLE_READER, gone, sizeof gone))
        ferry_log(m->ctx, FERRY_LOG_WARN, "writer %u: version %llu acknowledged by %u of %u readers; gone: %s",
                  m->p.rank, (unsigned long long)version, pub->acked, m->side[1].world, gone);
}

static ferry_status_t writer_publish(ferry_writer_t *w, uint64_t version, ferry_publish_info_t *info) {
    sync_member_t *m = &w->m;
    if (!w->committed) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "publish before commit");
    if (version == 0 || version >= FERRY_VERSION_NEXT || version <= w->last_version)
        return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT,
                          "version %llu must be above the last published (%llu) and below 2^64-2",
                          (unsigned long long)version, (unsigned long long)w->last_version);
    ferry_publish_info_t inf;
    memset(&inf, 0, sizeof inf);
    inf.version = version;
    double t0 = ferry_mono_s();
    for (int attempt = 0;; attempt++) {
        bool changed;
        ferry_status_t st = sync_refresh_epoch(m, m->p.timeout_ms, &changed);
        if (st == FERRY_OK && (changed || w->setup_epoch != m->epoch)) {
            st = epoch_setup(w);
            if (st == FERRY_OK) w->setup_epoch = m->epoch;
        }
        if (st != FERRY_OK) {
            m->epoch = 0; /* plan and set up again next time */
            return st;
        }
        /* the slot to fill: empty, else the oldest; its readers must be done */
        uint32_t k = 0;
        for (uint32_t i = 1; i < w->nslots; i++)
            if (w->slots[i].version < w->slots[k].version) k = i;
        writer_slot_t *s = &w->slots[k];
        if (s->version && m->p.mode == FERRY_SYNC_MODE_ASYNC) {
            st = meta_reclaim(m->meta, s->version, m->p.timeout_ms, &m->err);
            if (st != FERRY_OK) return st;
        }
        s->version = 0;
        s->sums_ready = false;
        double t = ferry_mono_s();
        if (m->p.mode == FERRY_SYNC_MODE_ASYNC && m->dev) {
            for (size_t b = 0; b < m->nbufs && st == FERRY_OK; b++)
                st = sync_dev_copy(m->dev, buf_bytes(w, s, b), m->bufs[b].ptr, m->bufs[b].size, &m->err);
        } else if (m->p.mode == FERRY_SYNC_MODE_ASYNC) {
            for (size_t b = 0; b < m->nbufs; b++) memcpy(buf_bytes(w, s, b), m->bufs[b].ptr, m->bufs[b].size);
        }
        inf.snapshot_seconds = ferry_mono_s() - t;
        t = ferry_mono_s();
        if (st == FERRY_OK) st = pack_slot(w, s); /* (waits for the snapshot too) */
        inf.pack_seconds = ferry_mono_s() - t;
        if (st != FERRY_OK) return st;
        s->version = version;
        t = ferry_mono_s();
        meta_published_t pub;
        st = send_publish(w, k, m->p.mode == FERRY_SYNC_MODE_SYNC, &m->err, &pub, &inf);
        inf.wait_seconds = ferry_mono_s() - t - inf.hash_seconds - inf.delta_seconds;
        if (st == FERRY_ERR_STALE && attempt == 0) { /* the epoch moved under us: plan again */
            s->version = 0;
            s->sums_ready = false;
            continue;
        }
        if (st != FERRY_OK) {
            s->version = 0;
            s->sums_ready = false;
            return st;
        }
        inf.readers_acked = pub.acked;
        inf.readers_missing = pub.n_missing;
        if (m->p.mode == FERRY_SYNC_MODE_SYNC) report_departures(w, version, &pub);
        if (m->p.mode == FERRY_SYNC_MODE_SYNC) {
            /* the live weights move on as soon as we return */
            (void)meta_retire(m->meta, version, &m->err);
            s->version = 0;
            s->sums_ready = false;
        }
        break;
    }
    w->last_version = version;
    inf.bytes_served = ferry_plan_src_bytes(m->plan, m->p.rank);
    inf.device_bytes = sync_dev_bytes(m->dev);
#ifdef FERRY_CUDA
    inf.device_bytes += ferry_delta_cuda_enc_device_bytes(w->genc); /* the GPU delta encoder's scratch */
#endif
    inf.seconds = ferry_mono_s() - t0;
    if (info) *info = inf;
    return FERRY_OK;
}

ferry_status_t ferry_writer_publish(ferry_writer_t *w, uint64_t version, ferry_publish_info_t *info) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    int prev = sync_dev_enter(w->m.dev); /* a CUDA writer's work runs on its device */
    ferry_status_t st = writer_publish(w, version, info);
    sync_dev_leave(w->m.dev, prev);
    return st;
}

/* ---- lifetime ------------------------------------------------------------------------ */

ferry_status_t ferry_writer_create(ferry_ctx_t *ctx, const ferry_model_t *model, const ferry_sync_params_t *params,
                                   ferry_writer_t **out) {
    if (!ctx || !out) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_writer_t *w = ferry_calloc(ctx, 1, sizeof *w);
    if (!w) return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "out of memory creating a writer");
    ferry_status_t st = sync_member_init(&w->m, ctx, META_ROLE_WRITER, model, params);
    if (st != FERRY_OK) {
        ferry_free(ctx, w);
        return st;
    }
    st = sync_member_connect(&w->m, writer_replay, w);
    if (st != FERRY_OK) {
        ferry_writer_destroy(w);
        return st;
    }
    *out = w;
    return FERRY_OK;
}

void ferry_writer_destroy(ferry_writer_t *w) {
    if (!w) return;
    epoch_free(w);
    ferry_delta_codec_destroy(w->codec);
#ifdef FERRY_CUDA
    ferry_delta_cuda_enc_destroy(w->genc);
#endif
    sync_member_fini(&w->m);
    ferry_free(w->m.ctx, w);
}

ferry_status_t ferry_writer_add_buffer(ferry_writer_t *w, const char *name, ferry_dtype_t dtype, void *ptr,
                                       uint64_t size, uint32_t *index) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    return sync_add_buffer(&w->m, name, dtype, ptr, size, false, index);
}

static void *writer_alloc(sync_member_t *m, const ferry_buffer_info_t *bi, uint32_t *index, ferry_status_t *st) {
    ferry_xport_mem_t *mem;
    int prev = sync_dev_enter(m->dev); /* CUDA: allocated on the member's device */
    *st = ferry_xport_mem_alloc(m->xp, bi->size ? bi->size : 1, m->mem, FERRY_XPORT_ACCESS_READ, &mem);
    sync_dev_leave(m->dev, prev);
    if (*st != FERRY_OK) {
        *st = ferry_fail(&m->err, *st, "buffer %s (%llu bytes): %s", bi->name, (unsigned long long)bi->size,
                         ferry_xport_error(m->xp));
        return NULL;
    }
    *st = sync_add_buffer(m, bi->name, bi->dtype, ferry_xport_mem_ptr(mem), bi->size, false, index);
    if (*st != FERRY_OK) {
        ferry_xport_mem_deregister(mem);
        return NULL;
    }
    m->bufs[*index].mem = mem;
    return ferry_xport_mem_ptr(mem);
}

ferry_status_t ferry_writer_alloc_buffer(ferry_writer_t *w, const char *name, ferry_dtype_t dtype, uint64_t size,
                                         void **ptr, uint32_t *index) {
    if (!w || !ptr || !name) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_buffer_info_t bi = {.name = name, .rank = w->m.p.rank, .size = size, .dtype = dtype};
    uint32_t idx;
    ferry_status_t st;
    void *p = writer_alloc(&w->m, &bi, &idx, &st);
    if (st != FERRY_OK) return st;
    *ptr = p;
    if (index) *index = idx;
    return FERRY_OK;
}

ferry_status_t ferry_writer_add_piece(ferry_writer_t *w, const ferry_piece_t *piece) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    return sync_add_piece(&w->m, piece);
}

ferry_status_t ferry_writer_add_layout(ferry_writer_t *w, const ferry_layout_t *layout, uint32_t rank, void **ptrs,
                                       size_t nptrs) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    return sync_add_layout(&w->m, layout, rank, ptrs, nptrs, writer_alloc);
}

ferry_status_t ferry_writer_commit(ferry_writer_t *w) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    sync_member_t *m = &w->m;
    for (size_t b = 0; b < m->nbufs; b++) {
        if (m->bufs[b].mem || m->bufs[b].size == 0) continue;
        ferry_status_t st = ferry_xport_mem_register(m->xp, m->bufs[b].ptr, m->bufs[b].size, m->mem,
                                                     FERRY_XPORT_ACCESS_READ, &m->bufs[b].mem);
        if (st != FERRY_OK)
            return ferry_fail(&m->err, st, "registering buffer %s: %s", m->bufs[b].name, ferry_xport_error(m->xp));
    }
    ferry_status_t st = sync_commit(m);
    w->committed = st == FERRY_OK;
    return st;
}
