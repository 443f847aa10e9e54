/* Readers: per update, ask the service for a ready version (a grant: where
 * each writer's bytes are and their checksums), pull the local plan's
 * buckets one-sided, scatter what does not land in place, check every op's
 * destination region against the writer's sum, then acknowledge. In
 * staged mode everything lands in a shadow copy first and reaches the live
 * buffers only once all of it verified. See docs/sync.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/copy.h"
#include "codec/delta_cuda.h"
#include "common/sum.h"

#include "sync/sync_internal.h"

#define MAX_CORRUPT_RETRIES 2
#define MAX_ATTEMPTS 8 /* failed attempts of one update, whatever the cause */
/* shm: a DIRECT bucket lands in chunks this large, each hashed while it is
 * still in cache (one pass over memory instead of two) */
#define FUSE_CHUNK (256u << 10)

typedef struct reader_src {      /* one writer as the current update sees it */
    sync_regions_t regions;
    const meta_writer_grant_t *grant; /* of the current update */
    const uint64_t *sums;        /* its checksums for us (from the grant, or GET_SUMS) */
    size_t nsums;
    bool sums_fetched;           /* asked for with GET_SUMS in this attempt */
    bool skip_delta;             /* offers deltas we do not use (same host, auto) */
} reader_src_t;

struct ferry_reader {
    sync_member_t m;
    bool committed, torn;
    uint64_t version;
    /* per epoch */
    uint32_t *writers;           /* writers the local plan reads from */
    size_t nwriters;
    reader_src_t *src;           /* by writer rank */
    uint32_t nsrc;
    uint8_t **shadow;            /* staged: a copy of each buffer */
    uint8_t *scratch;            /* landing area of buckets that are not DIRECT */
    size_t scratch_cap;
    uint8_t *gather;             /* row-major copy of a scattered region, for its checksum */
    size_t gather_cap;
    ferry_xport_run_t *runs;     /* a batch's reads: one per bucket, one per source run of a GATHER bucket */
    size_t nruns, cap_runs;
    uint64_t *got;               /* per op: ferry sum of its destination region after landing */
    bool source_hashed;          /* this attempt hashed some ops from the writer's bytes (views) */
    uint64_t pulling;            /* the version this attempt reads (for errors) */
    double intr_tick;            /* when the interrupt hook is asked next while bytes land (ferry_intr_due) */
    ferry_sum_state_t *hash;     /* an op's checksum, fed chunk by chunk as it lands (64-byte aligned) */
    /* deltas (sync mode): pairs that arrived as deltas this attempt */
    bool *pair_done;
    uint8_t *dscratch;           /* a writer's delta index and our blob */
    size_t dscratch_cap;
    ferry_delta_codec_t *codec;
#ifdef FERRY_CUDA
    /* a CUDA reader's deltas, applied on its GPU: per op of a pair, an item
       of a step, and its region for the checksum */
    ferry_delta_cuda_t *gdec;
    ferry_delta_cuda_item_t *gitems;
    sync_dev_region_t *gregions;
    size_t *gidx, cap_gitems, cap_gregions, cap_gidx;
#endif
    /* a CUDA reader's batches of boxes and checksum regions */
    sync_dev_box_t *dboxes;
    sync_dev_region_t *dregions;
    size_t *dops;
    size_t cap_dboxes, cap_dregions, cap_dops;
    const uint8_t **dviews;      /* a batch's runs as device pointers into the writers' memory */
    ferry_xport_rmem_t **vchecked; /* regions read through views this update (checked before and after) */
    size_t cap_dviews, cap_vchecked, nvchecked;
};

const char *ferry_reader_error(const ferry_reader_t *r) { return r ? r->m.err.text : ""; }
uint64_t ferry_reader_version(const ferry_reader_t *r) { return r && !r->torn ? r->version : 0; }
bool ferry_reader_torn(const ferry_reader_t *r) { return r && r->torn; }

/* ---- per-epoch state ------------------------------------------------------------ */

/* Scratch memory: on the reader's GPU for a CUDA reader (counted there). */
static void *scratch_alloc(ferry_reader_t *r, size_t n) {
    if (!r->m.dev) return malloc(n ? n : 1);
    void *p = NULL;
    return sync_dev_alloc(r->m.dev, n, &p, &r->m.err) == FERRY_OK ? p : NULL;
}

static void scratch_free(ferry_reader_t *r, void *p, size_t n) {
    if (r->m.dev) sync_dev_free(r->m.dev, p, n);
    else free(p);
}

static void epoch_free(ferry_reader_t *r) {
    ferry_ctx_t *ctx = r->m.ctx;
    for (uint32_t i = 0; i < r->nsrc; i++) sync_regions_free(&r->src[i].regions, ctx);
    ferry_free(ctx, r->src);
    for (size_t b = 0; r->shadow && b < r->m.nbufs; b++) scratch_free(r, r->shadow[b], r->m.bufs[b].size);
    ferry_free(ctx, r->shadow);
    ferry_free(ctx, r->writers);
    ferry_free(ctx, r->got);
    r->got = NULL;
    ferry_free(ctx, r->pair_done);
    r->pair_done = NULL;
    scratch_free(r, r->scratch, r->scratch_cap);
    scratch_free(r, r->gather, r->gather_cap);
    r->src = NULL;
    r->nsrc = 0;
    r->shadow = NULL;
    r->writers = NULL;
    r->nwriters = 0;
    r->scratch = r->gather = NULL;
    r->scratch_cap = r->gather_cap = 0;
}

static ferry_status_t epoch_setup(ferry_reader_t *r) {
    sync_member_t *m = &r->m;
    ferry_ctx_t *ctx = m->ctx;
    epoch_free(r);
    /* the service's copy of our layout must be the one our buffers have */
    const sync_side_t *d = &m->side[1];
    uint32_t nb = d->buf_base[m->p.rank + 1] - d->buf_base[m->p.rank];
    if (nb != m->nbufs)
        return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "the service holds %u buffers for reader %u, it has %zu", nb,
                          m->p.rank, m->nbufs);
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(d->layout, d->buf_base[m->p.rank] + b, &bi);
        if (bi.size != m->bufs[b].size)
            return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "buffer %s: %llu bytes at the service, %llu here",
                              m->bufs[b].name, (unsigned long long)bi.size, (unsigned long long)m->bufs[b].size);
    }
    r->nsrc = m->side[0].world;
    r->got = ferry_calloc(ctx, ferry_plan_op_count(m->plan) + 1, sizeof *r->got);
    r->pair_done = ferry_calloc(ctx, ferry_plan_pair_count(m->plan) + 1, sizeof *r->pair_done);
    if (!r->got || !r->pair_done) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    r->src = ferry_calloc(ctx, r->nsrc, sizeof *r->src);
    r->writers = ferry_calloc(ctx, r->nsrc, sizeof *r->writers);
    if (!r->src || !r->writers) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(m->plan);
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    bool *seen = ferry_calloc(ctx, r->nsrc, sizeof *seen);
    if (!seen) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t scratch = 0, gather = 0;
    for (size_t p = 0; p < ferry_plan_pair_count(m->plan); p++) {
        if (!seen[pairs[p].src_rank]) r->writers[r->nwriters++] = pairs[p].src_rank;
        seen[pairs[p].src_rank] = true;
    }
    ferry_free(ctx, seen);
    for (size_t j = 0; j < ferry_plan_bucket_count(m->plan); j++)
        if (!(bk[j].flags & FERRY_BUCKET_DIRECT) && bk[j].bytes > scratch) scratch = bk[j].bytes;
    for (size_t i = 0; i < ferry_plan_op_count(m->plan); i++)
        if (!sync_box_contiguous(&ops[i].box, ops[i].dst_strides) && ops[i].bytes > gather) gather = ops[i].bytes;
    r->scratch_cap = scratch > m->p.inflight_bytes ? scratch : m->p.inflight_bytes;
    if (scratch == 0) r->scratch_cap = 0;
    if (m->dev) r->scratch_cap *= 2; /* two batches in flight, a half each */
    r->scratch = r->scratch_cap ? scratch_alloc(r, r->scratch_cap) : NULL;
    r->gather_cap = gather;
    r->gather = gather ? scratch_alloc(r, gather) : NULL;
    if ((r->scratch_cap && !r->scratch) || (gather && !r->gather))
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory for %zu bytes of scratch", r->scratch_cap);
    if (m->p.staged) {
        r->shadow = ferry_calloc(ctx, m->nbufs + 1, sizeof *r->shadow);
        if (!r->shadow) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        for (size_t b = 0; b < m->nbufs; b++) {
            r->shadow[b] = scratch_alloc(r, m->bufs[b].size);
            if (!r->shadow[b])
                return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory staging buffer %s (%llu bytes)",
                                  m->bufs[b].name, (unsigned long long)m->bufs[b].size);
        }
    }
    return FERRY_OK;
}

/* Unpacks the regions of a writer's grant, reusing what did not change. */
static ferry_status_t resolve_src(ferry_reader_t *r, const meta_writer_grant_t *g) {
    sync_member_t *m = &r->m;
    if (g->rank >= r->nsrc) return ferry_fail(&m->err, FERRY_ERR_CORRUPT, "grant for writer %u of %u", g->rank, r->nsrc);
    reader_src_t *s = &r->src[g->rank];
    if (!g->has_map) return ferry_fail(&m->err, FERRY_ERR_CORRUPT, "the grant for writer %u has no slot map", g->rank);
    const meta_slot_map_t *map = &g->map;
    uint32_t want_bufs = m->side[0].buf_base[g->rank + 1] - m->side[0].buf_base[g->rank];
    if (map->n_buffers != want_bufs)
        return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "writer %u's map has %zu buffers, its layout %u", g->rank,
                          map->n_buffers, want_bufs);
    ferry_status_t st = sync_regions_resolve(m, &s->regions, g->incarnation, map->regions, map->n_regions, "writer",
                                             g->rank);
    if (st != FERRY_OK) return st;
    if (map->has_delta && map->delta_region >= map->n_regions)
        return ferry_fail(&m->err, FERRY_ERR_CORRUPT, "writer %u's delta region %u of %zu", g->rank, map->delta_region,
                          map->n_regions);
    s->grant = g;
    s->sums = g->sums;
    s->nsums = g->n_sums;
    s->sums_fetched = false;
    s->skip_delta = false;
    return FERRY_OK;
}

/* ---- pulling ------------------------------------------------------------------------ */

static uint8_t *dst_base(ferry_reader_t *r, uint32_t local) {
    return r->shadow ? r->shadow[local] : r->m.bufs[local].ptr;
}

/* A failed read from writer `rank`, with the transport's detail. */
static ferry_status_t read_fail(ferry_reader_t *r, uint32_t rank, ferry_status_t st) {
    if (st == FERRY_ERR_INTERRUPTED)
        return ferry_fail(&r->m.err, st, "interrupted while reading version %llu from writer %u (%s)",
                          (unsigned long long)r->pulling, rank, ferry_xport_error(r->m.xp));
    char gone[META_MAX_DETAIL]; /* the writer may have left: the service says who, and doing what */
    bool left = meta_client_departed(r->m.meta, META_ROLE_WRITER, rank, gone, sizeof gone);
    return ferry_fail(&r->m.err, st, "reading from writer %u: %s%s%.300s", rank, ferry_xport_error(r->m.xp),
                      left ? "; " : "", left ? gone : "");
}

/* Between slices of landing bytes (batches, chunks): the interrupt hook,
 * every 100 ms. */
static ferry_status_t pull_tick(ferry_reader_t *r, uint32_t rank) {
    if (!ferry_intr_due(ferry_ctx_intr(r->m.ctx), &r->intr_tick)) return FERRY_OK;
    return ferry_fail(&r->m.err, FERRY_ERR_INTERRUPTED, "interrupted while reading version %llu from writer %u",
                      (unsigned long long)r->pulling, rank);
}

/* Hashes op's destination region in row-major order (as the writer did). */
static uint64_t dst_sum(ferry_reader_t *r, const ferry_copy_op_t *op) {
    uint32_t b = sync_local_buffer(&r->m, 1, r->m.p.rank, op->dst_buffer);
    const uint8_t *base = dst_base(r, b);
    if (sync_box_contiguous(&op->box, op->dst_strides)) return ferry_sum(base + op->dst_offset, op->bytes);
    sync_gather(r->gather, base, op->dst_offset, op->dst_strides, &op->box, sync_op_esz(&r->m, op));
    return ferry_sum(r->gather, op->bytes);
}

/* Describes an op for an error message. */
static void op_text(ferry_reader_t *r, const ferry_copy_op_t *op, char *buf, size_t size) {
    ferry_tensor_info_t ti;
    ferry_model_tensor(ferry_layout_model(r->m.side[1].layout), op->tensor, &ti);
    char box[200];
    ferry_box_format(&op->box, box, sizeof box);
    snprintf(buf, size, "%s%s from writer %u", ti.name, box, op->src_rank);
}

/* A CUDA reader: the checksums of ops [i0, i1)'s destination regions into
 * r->got, on the GPU; strided regions are gathered into the gather area
 * first, as many at once as it holds (the compute stream orders a gather
 * after the checksums of the one before). The sums arrive at
 * sync_dev_sums_flush. */
static ferry_status_t dev_land_sums(ferry_reader_t *r, size_t i0, size_t i1) {
    sync_member_t *m = &r->m;
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    size_t n = i1 - i0;
    if (n == 0) return FERRY_OK;
    if (ferry_grow(m->ctx, (void **)&r->dregions, sizeof *r->dregions, &r->cap_dregions, n) != 0 ||
        ferry_grow(m->ctx, (void **)&r->dboxes, sizeof *r->dboxes, &r->cap_dboxes, n) != 0 ||
        ferry_grow(m->ctx, (void **)&r->dops, sizeof *r->dops, &r->cap_dops, n) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t nr = 0, nb = 0;
    uint64_t gat = 0;
    for (size_t i = i0;; i++) {
        bool strided = i < i1 && !sync_box_contiguous(&ops[i].box, ops[i].dst_strides);
        if (nr && (i == i1 || (strided && gat + ops[i].bytes > r->gather_cap))) { /* flush */
            ferry_status_t st = sync_dev_boxes(m->dev, r->dboxes, nb, &m->err);
            if (st == FERRY_OK) st = sync_dev_sums_async(m->dev, r->dregions, nr, r->got, r->dops, &m->err);
            if (st != FERRY_OK) return st;
            nr = nb = 0;
            gat = 0;
        }
        if (i == i1) return FERRY_OK;
        uint32_t lb = sync_local_buffer(m, 1, m->p.rank, ops[i].dst_buffer);
        const uint8_t *at = dst_base(r, lb) + ops[i].dst_offset;
        if (strided) {
            r->dboxes[nb++] = (sync_dev_box_t){.dst = r->gather + gat, .src = at, .src_strides = ops[i].dst_strides,
                                               .box = ops[i].box, .esz = (uint32_t)sync_op_esz(m, &ops[i])};
            at = r->gather + gat;
            gat += ops[i].bytes;
        }
        r->dops[nr] = i;
        r->dregions[nr++] = (sync_dev_region_t){at, ops[i].bytes};
    }
}

typedef struct pull_stats {
    double pull_s, verify_s;
    uint64_t bytes;
} pull_stats_t;

/* Appends a GATHER bucket's reads to r->runs: its op's runs contiguous in
 * the writer's buffer, row-major, each landing after the one before. */
typedef struct gather_runs {
    ferry_xport_run_t *run;
    ferry_xport_rmem_t *rmem;
    uint64_t remote;
    uint8_t *local;
} gather_runs_t;

/* How many source runs a FERRY_OP_GATHER op is read in. */
static size_t gather_runs_of(const sync_member_t *m, const ferry_copy_op_t *op) {
    uint32_t outer;
    return (size_t)(op->bytes / ((uint64_t)sync_box_run(&op->box, op->src_strides, NULL, &outer) * sync_op_esz(m, op)));
}

static void gather_run(void *arg, uint64_t strided, uint64_t packed, size_t n) {
    gather_runs_t *g = arg;
    *g->run++ = (ferry_xport_run_t){.rmem = g->rmem, .remote_offset = g->remote + strided, .len = n,
                                    .local = g->local + packed};
}

/* The reads of buckets [j0, j1) of pair p into r->runs (r->nruns of them):
 * DIRECT ones into the destination, the others one after another into
 * `scratch`; a GATHER bucket is one read per source run. */
static ferry_status_t batch_runs(ferry_reader_t *r, const ferry_plan_pair_t *p, size_t j0, size_t j1,
                                 uint8_t *scratch) {
    sync_member_t *m = &r->m;
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    reader_src_t *s = &r->src[p->src_rank];
    const meta_slot_map_t *map = &s->grant->map;
    size_t n = 0;
    for (size_t j = j0; j < j1; j++) {
        if (!(bk[j].flags & FERRY_BUCKET_GATHER)) {
            n++;
            continue;
        }
        n += gather_runs_of(m, &ops[bk[j].first_op]);
    }
    if (ferry_grow(m->ctx, (void **)&r->runs, sizeof *r->runs, &r->cap_runs, n) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t scratch_at = 0;
    ferry_xport_run_t *run = r->runs;
    for (size_t j = j0; j < j1; j++) {
        const ferry_plan_bucket_t *b = &bk[j];
        if (b->flags & FERRY_BUCKET_PACKED) {
            if (!map->has_pack) return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "writer %u has no pack area", p->src_rank);
            run->rmem = s->regions.cur[map->pack_region];
            run->remote_offset = map->pack_offset + b->src_offset;
        } else {
            uint32_t lb = sync_local_buffer(m, 0, p->src_rank, b->src_buffer);
            run->rmem = s->regions.cur[map->buffer_region[lb]];
            run->remote_offset = map->buffer_offset[lb] + b->src_offset;
        }
        run->len = b->bytes;
        if (b->flags & FERRY_BUCKET_DIRECT) {
            run->local = dst_base(r, sync_local_buffer(m, 1, m->p.rank, b->dst_buffer)) + b->dst_offset;
        } else {
            run->local = scratch + scratch_at;
            scratch_at += b->bytes;
        }
        if (b->flags & FERRY_BUCKET_GATHER) { /* (its destination, if DIRECT, is one run: row-major) */
            const ferry_copy_op_t *op = &ops[b->first_op];
            gather_runs_t g = {run, run->rmem, run->remote_offset, run->local};
            sync_box_runs(&op->box, op->src_strides, NULL, sync_op_esz(m, op), gather_run, &g);
            run = g.run;
        } else {
            run++;
        }
    }
    r->nruns = (size_t)(run - r->runs);
    return FERRY_OK;
}

/* A CUDA reader's batch: its copies run on the copy engines while the batch
 * before is scattered and checksummed on the GPU (two in flight, each with
 * its half of the scratch area). */
typedef struct dev_batch {
    const ferry_plan_pair_t *p;
    size_t j0, j1;
    uint8_t *scratch;
    ferry_xport_req_t *req;
} dev_batch_t;

static ferry_status_t dev_start(ferry_reader_t *r, dev_batch_t *b) {
    ferry_status_t st = batch_runs(r, b->p, b->j0, b->j1, b->scratch);
    if (st != FERRY_OK) return st;
    if (!r->shadow) r->torn = true; /* live bytes may change from here on, even if the get fails */
    st = ferry_xport_get(r->m.xp, r->runs, r->nruns, &b->req);
    return st == FERRY_OK ? FERRY_OK : read_fail(r, b->p->src_rank, st);
}

/* Enqueues the scatter of a batch's staged buckets from its scratch, then
 * its checksums, on the compute stream. */
static ferry_status_t dev_land(ferry_reader_t *r, const dev_batch_t *b, pull_stats_t *ps) {
    sync_member_t *m = &r->m;
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    size_t nb = 0, i0 = bk[b->j0].first_op, i1 = bk[b->j1 - 1].first_op + bk[b->j1 - 1].op_count;
    if (ferry_grow(m->ctx, (void **)&r->dboxes, sizeof *r->dboxes, &r->cap_dboxes, i1 - i0 + 1) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t scratch_at = 0;
    for (size_t j = b->j0; j < b->j1; j++) {
        ps->bytes += bk[j].bytes;
        if (bk[j].flags & FERRY_BUCKET_DIRECT) continue;
        const uint8_t *from = b->scratch + scratch_at;
        for (size_t i = bk[j].first_op; i < bk[j].first_op + bk[j].op_count; i++) {
            uint32_t lb = sync_local_buffer(m, 1, m->p.rank, ops[i].dst_buffer);
            r->dboxes[nb++] = (sync_dev_box_t){.dst = dst_base(r, lb) + ops[i].dst_offset,
                                               .dst_strides = ops[i].dst_strides, .src = from, .box = ops[i].box,
                                               .esz = (uint32_t)sync_op_esz(m, &ops[i])};
            from += ops[i].bytes;
        }
        scratch_at += bk[j].bytes;
    }
    double t = ferry_mono_s();
    ferry_status_t st = sync_dev_boxes(m->dev, r->dboxes, nb, &m->err);
    if (st == FERRY_OK) st = dev_land_sums(r, i0, i1); /* (after the scatter, on the same stream) */
    ps->verify_s += ferry_mono_s() - t;
    return st;
}

/* Waits for a batch's copies (a transport request), then scatters and
 * checksums it on the GPU, and waits for that too (its scratch half is
 * the transport's to fill again next). */
static ferry_status_t dev_finish(ferry_reader_t *r, dev_batch_t *b, pull_stats_t *ps) {
    ferry_status_t st = ferry_xport_req_wait(b->req, -1);
    ferry_xport_req_free(b->req);
    b->req = NULL;
    if (st != FERRY_OK) return read_fail(r, b->p->src_rank, st);
    st = dev_land(r, b, ps);
    return st == FERRY_OK ? sync_dev_sums_flush(r->m.dev, &r->m.err) : st;
}

/* Whether every run of the batch (in r->runs) is a writer's GPU memory
 * mapped here: r->dviews gets the device pointers. */
static bool dev_views(ferry_reader_t *r, size_t n) {
    if (ferry_grow(r->m.ctx, (void **)&r->dviews, sizeof *r->dviews, &r->cap_dviews, n) != 0) return false;
    for (size_t i = 0; i < n; i++) {
        const ferry_xport_run_t *run = &r->runs[i];
        if (ferry_xport_rmem_mem_type(run->rmem) != FERRY_MEM_CUDA ||
            ferry_xport_rmem_view(run->rmem, run->remote_offset, run->len, (const void **)&r->dviews[i]) != FERRY_OK)
            return false;
    }
    return true;
}

/* A batch read through views: the regions are checked (once per update)
 * before any byte moves, the copies go to the copy engines, the scatter
 * and checksums to the compute stream after them, and nothing here waits
 * for the GPU: the streams order the work (the scratch half is rewritten
 * only after its last reader, two batches back), and the sums arrive at
 * sync_dev_sums_flush, after which every region is checked again. */
static ferry_status_t dev_view_batch(ferry_reader_t *r, const dev_batch_t *b, int half, pull_stats_t *ps) {
    sync_member_t *m = &r->m;
    size_t n = r->nruns;
    for (size_t i = 0; i < n; i++) {
        ferry_xport_rmem_t *rm = r->runs[i].rmem;
        bool seen = false;
        for (size_t k = r->nvchecked; k-- > 0 && !seen;) seen = r->vchecked[k] == rm;
        if (seen) continue;
        if (ferry_grow(m->ctx, (void **)&r->vchecked, sizeof *r->vchecked, &r->cap_vchecked, r->nvchecked + 1) != 0)
            return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        r->vchecked[r->nvchecked++] = rm;
        ferry_status_t st = ferry_xport_rmem_check(rm);
        if (st != FERRY_OK) return read_fail(r, b->p->src_rank, st);
    }
    /* A GATHER bucket is one box kernel job reading the writer's strided
     * bytes through the view (one copy-engine copy per run of a few KiB
     * would leave the engines idle between runs); the others are copies. */
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    if (ferry_grow(m->ctx, (void **)&r->dboxes, sizeof *r->dboxes, &r->cap_dboxes, b->j1 - b->j0) != 0)
        return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    ferry_status_t st = sync_dev_copy_after_mark(m->dev, half, &m->err);
    if (!r->shadow) r->torn = true; /* live bytes may change from here on */
    size_t k = 0, ng = 0;
    for (size_t j = b->j0; j < b->j1 && st == FERRY_OK; j++) {
        if (!(bk[j].flags & FERRY_BUCKET_GATHER)) {
            st = sync_dev_copy_async(m->dev, r->runs[k].local, r->dviews[k], r->runs[k].len, &m->err);
            k++;
            continue; /* (a failure drops the batch's queued copies) */
        }
        const ferry_copy_op_t *op = &ops[bk[j].first_op];
        size_t esz = sync_op_esz(m, op);
        const void *src = NULL;
        st = ferry_xport_rmem_view(r->runs[k].rmem, r->runs[k].remote_offset, sync_box_span(op->src_strides, &op->box, esz),
                                   &src);
        if (st != FERRY_OK) {
            sync_dev_copies_drop(m->dev); /* the copies queued so far belong to this batch */
            return read_fail(r, b->p->src_rank, st);
        }
        r->dboxes[ng++] = (sync_dev_box_t){.dst = r->runs[k].local, .src = src, .src_strides = op->src_strides,
                                            .box = op->box, .esz = (uint32_t)esz};
        k += gather_runs_of(m, op);
    }
    if (st == FERRY_OK) st = sync_dev_copies_then_compute(m->dev, &m->err);
    if (st == FERRY_OK) st = sync_dev_boxes(m->dev, r->dboxes, ng, &m->err); /* (before the scatter, same stream) */
    if (st == FERRY_OK) st = dev_land(r, b, ps);
    if (st == FERRY_OK) st = sync_dev_mark_compute(m->dev, half, &m->err);
    return st;
}

/* After the last view batch: the sums, and every region checked again (a
 * registration that ended, or an owner that died, during the copies). */
static ferry_status_t dev_views_end(ferry_reader_t *r, uint32_t rank) {
    ferry_status_t st = sync_dev_sums_flush(r->m.dev, &r->m.err);
    for (size_t k = 0; k < r->nvchecked && st == FERRY_OK; k++) {
        st = ferry_xport_rmem_check(r->vchecked[k]);
        if (st != FERRY_OK) return read_fail(r, rank, st);
    }
    r->nvchecked = 0;
    return st;
}

/* Every pair's buckets, batch after batch, two in flight. */
static ferry_status_t pull_all_dev(ferry_reader_t *r, pull_stats_t *ps) {
    sync_member_t *m = &r->m;
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(m->plan);
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    dev_batch_t prev = {0};
    bool have_prev = false, viewed = false;
    uint32_t last_rank = 0;
    int half = 0;
    ferry_status_t st = FERRY_OK;
    double t = ferry_mono_s(), verify0 = ps->verify_s;
    for (size_t pi = 0; pi < ferry_plan_pair_count(m->plan) && st == FERRY_OK; pi++) {
        const ferry_plan_pair_t *p = &pairs[pi];
        if (r->pair_done[pi]) continue;
        if (!r->src[p->src_rank].grant) {
            st = ferry_fail(&m->err, FERRY_ERR_MISMATCH, "the grant has no map for writer %u", p->src_rank);
            break;
        }
        for (size_t j = p->first_bucket, end = p->first_bucket + p->bucket_count; j < end && st == FERRY_OK;) {
            if ((st = pull_tick(r, p->src_rank)) != FERRY_OK) break;
            size_t k = j; /* buckets up to inflight bytes whose staged parts fit half the scratch */
            uint64_t bytes = 0, staged = 0;
            while (k < end) {
                uint64_t sb = (bk[k].flags & FERRY_BUCKET_DIRECT) ? 0 : bk[k].bytes;
                if (k > j && (bytes + bk[k].bytes > m->p.inflight_bytes || staged + sb > r->scratch_cap / 2)) break;
                bytes += bk[k].bytes;
                staged += sb;
                k++;
            }
            dev_batch_t cur = {p, j, k, r->scratch + (size_t)half * (r->scratch_cap / 2), NULL};
            if ((st = batch_runs(r, p, j, k, cur.scratch)) != FERRY_OK) break;
            if (dev_views(r, r->nruns)) { /* the writer's GPU memory is mapped here: copy it ourselves */
                if (have_prev && (st = dev_finish(r, &prev, ps)) != FERRY_OK) break;
                have_prev = false;
                viewed = true;
                last_rank = p->src_rank;
                st = dev_view_batch(r, &cur, half, ps);
            } else {
                if ((st = dev_start(r, &cur)) != FERRY_OK) break;
                if (have_prev) st = dev_finish(r, &prev, ps);
                prev = cur;
                have_prev = true;
            }
            half ^= 1;
            j = k;
        }
    }
    if (have_prev) {
        if (st == FERRY_OK) st = dev_finish(r, &prev, ps);
        else ferry_xport_req_free(prev.req); /* (waits: nothing may land later) */
    }
    if (viewed) { /* the view batches' sums and checks (after a failure too: nothing stays in flight) */
        ferry_status_t vs = dev_views_end(r, last_rank);
        if (st == FERRY_OK) st = vs;
        r->nvchecked = 0;
    }
    ps->pull_s += ferry_mono_s() - t - (ps->verify_s - verify0);
    return st;
}

/* Transfers buckets [j0, j1) of pair p in one request, lands them, checks them. */
static ferry_status_t pull_batch(ferry_reader_t *r, const ferry_plan_pair_t *p, size_t j0, size_t j1,
                                 pull_stats_t *ps) {
    sync_member_t *m = &r->m;
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    double t = ferry_mono_s();
    ferry_status_t st = batch_runs(r, p, j0, j1, r->scratch);
    if (st != FERRY_OK) return st;
    ferry_xport_req_t *req = NULL;
    if (!r->shadow) r->torn = true; /* live bytes may change from here on, even if the get fails */
    st = ferry_xport_get(m->xp, r->runs, r->nruns, &req);
    if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    if (st != FERRY_OK) return read_fail(r, p->src_rank, st);
    size_t scratch_at = 0;
    for (size_t j = j0; j < j1; j++) {
        const ferry_plan_bucket_t *b = &bk[j];
        ps->bytes += b->bytes;
        if (b->flags & FERRY_BUCKET_DIRECT) continue;
        const uint8_t *from = r->scratch + scratch_at;
        for (size_t i = b->first_op; i < b->first_op + b->op_count; i++) {
            uint32_t lb = sync_local_buffer(m, 1, m->p.rank, ops[i].dst_buffer);
            sync_scatter(dst_base(r, lb), ops[i].dst_offset, ops[i].dst_strides, &ops[i].box, sync_op_esz(&r->m, &ops[i]), from);
            from += ops[i].bytes;
        }
        scratch_at += b->bytes;
    }
    double t2 = ferry_mono_s();
    ps->pull_s += t2 - t;
    for (size_t j = j0; j < j1; j++)
        for (size_t i = bk[j].first_op; i < bk[j].first_op + bk[j].op_count; i++) r->got[i] = dst_sum(r, &ops[i]);
    ps->verify_s += ferry_mono_s() - t2;
    return FERRY_OK;
}

/* GET_SUMS for the writers whose checksums are still pending (only those
 * that offer deltas, if deltas_only); the reply holds them. */
static ferry_status_t fetch_sums(ferry_reader_t *r, uint64_t version, bool deltas_only, meta_grant_t **sums_reply,
                                 double deadline) {
    sync_member_t *m = &r->m;
    uint32_t *pending = ferry_calloc(m->ctx, r->nwriters + 1, sizeof *pending);
    if (!pending) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t np = 0;
    for (size_t i = 0; i < r->nwriters; i++) {
        reader_src_t *s = &r->src[r->writers[i]];
        if (s->grant && s->grant->sums_pending && !s->sums_fetched &&
            (!deltas_only || (s->grant->map.has_delta && !s->skip_delta))) {
            pending[np++] = r->writers[i];
            s->sums_fetched = true;
        }
    }
    ferry_status_t st = FERRY_OK;
    if (np) {
        double left = deadline - ferry_mono_s();
        st = meta_get_sums(m->meta, version, pending, np, left > 0 ? (uint32_t)(left * 1000.0) : 0, sums_reply,
                           &m->err);
        if (st == FERRY_OK) {
            const meta_grant_t *g = *sums_reply;
            for (size_t i = 0; i < g->n_writers; i++)
                if (g->writers[i].rank < r->nsrc) {
                    r->src[g->writers[i].rank].sums = g->writers[i].sums;
                    r->src[g->writers[i].rank].nsums = g->writers[i].n_sums;
                }
        }
    }
    ferry_free(m->ctx, pending);
    return st;
}

/* Every op's checksum (r->got) against its writer's. */
static ferry_status_t compare_sums(ferry_reader_t *r) {
    sync_member_t *m = &r->m;
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(m->plan);
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    for (size_t pi = 0; pi < ferry_plan_pair_count(m->plan); pi++) {
        const ferry_plan_pair_t *p = &pairs[pi];
        const reader_src_t *s = &r->src[p->src_rank];
        if (s->nsums != p->op_count)
            return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "writer %u sent %zu checksums for reader %u, the plan has %zu ops",
                              p->src_rank, s->nsums, m->p.rank, p->op_count);
        for (size_t i = p->first_op; i < p->first_op + p->op_count; i++)
            if (r->got[i] != s->sums[i - p->first_op]) {
                char what[400];
                op_text(r, &ops[i], what, sizeof what);
                return ferry_fail(&m->err, FERRY_ERR_CORRUPT, "checksum mismatch on %s (sum %016llx, writer's %016llx)",
                                  what, (unsigned long long)r->got[i], (unsigned long long)s->sums[i - p->first_op]);
            }
    }
    return FERRY_OK;
}

/* Checksums that were still being computed when the grant came, then every
 * op's landed bytes against its writer's checksum. */
static ferry_status_t verify_all(ferry_reader_t *r, uint64_t version, meta_grant_t **sums_reply, double deadline) {
    ferry_status_t st = fetch_sums(r, version, false, sums_reply, deadline);
    return st != FERRY_OK ? st : compare_sums(r);
}

/* shm: one DIRECT bucket, landed chunk by chunk and hashed as it lands. */
static ferry_status_t pull_direct_fused(ferry_reader_t *r, const ferry_plan_pair_t *p, size_t j, pull_stats_t *ps) {
    sync_member_t *m = &r->m;
    const ferry_plan_bucket_t *b = &ferry_plan_buckets(m->plan)[j];
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    reader_src_t *s = &r->src[p->src_rank];
    const meta_slot_map_t *map = &s->grant->map;
    ferry_xport_run_t run;
    if (b->flags & FERRY_BUCKET_PACKED) {
        if (!map->has_pack) return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "writer %u has no pack area", p->src_rank);
        run.rmem = s->regions.cur[map->pack_region];
        run.remote_offset = map->pack_offset + b->src_offset;
    } else {
        uint32_t lb = sync_local_buffer(m, 0, p->src_rank, b->src_buffer);
        run.rmem = s->regions.cur[map->buffer_region[lb]];
        run.remote_offset = map->buffer_offset[lb] + b->src_offset;
    }
    uint8_t *dst = dst_base(r, sync_local_buffer(m, 1, m->p.rank, b->dst_buffer)) + b->dst_offset;
    if (!r->hash && !(r->hash = aligned_alloc(64, (sizeof *r->hash + 63) & ~(size_t)63))) return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
    /* Where the writer's bytes are mapped here, copy them ourselves with
     * streaming stores (no read-for-ownership of the destination) and hash
     * the source lines the copy just loaded, still in cache: the bytes the
     * copy wrote, read after it (a source changed meanwhile fails the check,
     * unless it changed back). Else a get per chunk, hashing the
     * destination. */
    const uint8_t *view = NULL;
    /* staged: the shadow is read again at once, so a cached copy is better;
     * a CUDA writer's memory: its view is a device pointer (a get copies it) */
    if (r->shadow || ferry_xport_rmem_mem_type(run.rmem) == FERRY_MEM_CUDA ||
        ferry_xport_rmem_view(run.rmem, run.remote_offset, b->bytes, (const void **)&view) != FERRY_OK)
        view = NULL;
    if (view) {
        ferry_status_t st = ferry_xport_rmem_check(run.rmem); /* as a get would, before anything moves */
        if (st != FERRY_OK)
            return read_fail(r, p->src_rank, st);
        r->source_hashed = true;
    }
    const uint8_t *hashed = view ? view : dst;
    double t = ferry_mono_s();
    size_t op = b->first_op, op_end = b->first_op + b->op_count;
    uint64_t op_left = op < op_end ? ops[op].bytes : 0, base_off = run.remote_offset;
    bool streaming = false;
    for (uint64_t at = 0; at < b->bytes;) {
        uint64_t n = b->bytes - at < FUSE_CHUNK ? b->bytes - at : FUSE_CHUNK;
        ferry_status_t st = at ? pull_tick(r, p->src_rank) : FERRY_OK;
        if (st != FERRY_OK) return st;
        if (!r->shadow) r->torn = true; /* live bytes may change from here on, even if the read fails */
        if (view) {
            ferry_copy_stream(dst + at, view + at, n); /* checked once the bucket is in (below) */
        } else {
            run.remote_offset = base_off + at;
            run.local = dst + at;
            run.len = n;
            ferry_xport_req_t *req = NULL;
            st = ferry_xport_get(m->xp, &run, 1, &req);
            if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
            ferry_xport_req_free(req);
        }
        if (st != FERRY_OK)
            return read_fail(r, p->src_rank, st);
        for (uint64_t c = at; c < at + n && op < op_end;) {
            uint64_t take = op_left < at + n - c ? op_left : at + n - c;
            if (!streaming && take == ops[op].bytes) {
                r->got[op] = ferry_sum(hashed + c, take);
                op_left = 0;
            } else {
                if (!streaming) ferry_sum_reset(r->hash, ops[op].bytes);
                streaming = true;
                ferry_sum_update(r->hash, hashed + c, take);
                op_left -= take;
                if (op_left == 0) r->got[op] = ferry_sum_digest(r->hash);
            }
            c += take;
            if (op_left == 0) {
                streaming = false;
                if (++op < op_end) op_left = ops[op].bytes;
            }
        }
        at += n;
    }
    /* the mapping stays valid whatever the owner does (memfds are never
     * shrunk), so one check after the copy covers all of it */
    if (view) {
        ferry_status_t st = ferry_xport_rmem_check(run.rmem);
        if (st != FERRY_OK)
            return read_fail(r, p->src_rank, st);
    }
    ps->bytes += b->bytes;
    ps->pull_s += ferry_mono_s() - t;
    return FERRY_OK;
}

static ferry_status_t pull_all(ferry_reader_t *r, pull_stats_t *ps) {
    sync_member_t *m = &r->m;
    if (m->dev) return pull_all_dev(r, ps);
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(m->plan);
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(m->plan);
    for (size_t pi = 0; pi < ferry_plan_pair_count(m->plan); pi++) {
        const ferry_plan_pair_t *p = &pairs[pi];
        if (r->pair_done[pi]) continue; /* arrived as deltas */
        if (!r->src[p->src_rank].grant)
            return ferry_fail(&m->err, FERRY_ERR_MISMATCH, "the grant has no map for writer %u", p->src_rank);
        size_t j = p->first_bucket, end = p->first_bucket + p->bucket_count;
        bool fuse = m->p.transport == FERRY_XPORT_SHM && !m->dev; /* (CPU copies of mapped bytes) */
        while (j < end) {
            ferry_status_t tst = pull_tick(r, p->src_rank);
            if (tst != FERRY_OK) return tst;
            if (fuse && (bk[j].flags & (FERRY_BUCKET_DIRECT | FERRY_BUCKET_GATHER)) == FERRY_BUCKET_DIRECT) {
                ferry_status_t st = pull_direct_fused(r, p, j, ps);
                if (st != FERRY_OK) return st;
                j++;
                continue;
            }
            /* a batch: buckets up to inflight bytes whose staged parts fit the scratch */
            size_t k = j;
            uint64_t bytes = 0, staged = 0;
            while (k < end && !(fuse && (bk[k].flags & (FERRY_BUCKET_DIRECT | FERRY_BUCKET_GATHER)) == FERRY_BUCKET_DIRECT)) {
                uint64_t sb = (bk[k].flags & FERRY_BUCKET_DIRECT) ? 0 : bk[k].bytes;
                if (k > j && (bytes + bk[k].bytes > m->p.inflight_bytes || staged + sb > r->scratch_cap)) break;
                bytes += bk[k].bytes;
                staged += sb;
                k++;
            }
            ferry_status_t st = pull_batch(r, p, j, k, ps);
            if (st != FERRY_OK) return st;
            j = k;
        }
    }
    return FERRY_OK;
}

/* ---- deltas ------------------------------------------------------------------------- */

static ferry_status_t get_one(ferry_reader_t *r, ferry_xport_rmem_t *rmem, uint64_t off, uint64_t len, void *local) {
    ferry_xport_run_t run = {.rmem = rmem, .remote_offset = off, .len = len, .local = local};
    ferry_xport_req_t *req = NULL;
    ferry_status_t st = ferry_xport_get(r->m.xp, &run, 1, &req);
    if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    return st;
}

static bool dscratch(ferry_reader_t *r, uint64_t need) {
    if (need <= r->dscratch_cap) return true;
    if (need > ((uint64_t)1 << 40)) return false;
    uint8_t *p = realloc(r->dscratch, need);
    if (!p) return false;
    r->dscratch = p;
    r->dscratch_cap = need;
    return true;
}

#ifdef FERRY_CUDA
/* A CUDA reader's pair: every frame checked on the host as the CPU path
 * checks it, then applied on its GPU: per step, the ops with contiguous
 * destinations in one batch (each region verified chunk by chunk there, and
 * left as it was when refused); each op with a strided destination
 * gathered into the gather area, its steps applied there, scattered back.
 * Then the ops' checksums on the GPU (a strided op's from its gathered
 * copy, as the pull checks it). */
static bool pair_delta_dev(ferry_reader_t *r, const ferry_plan_pair_t *p, uint64_t v, uint32_t n,
                           const sync_delta_entry_t *step, const uint64_t *blob_at, uint64_t *frame_at,
                           ferry_errbuf_t *why) {
    sync_member_t *m = &r->m;
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan) + p->first_op;
    const size_t nops = p->op_count;
    ferry_errbuf_t e;
    if (!r->gdec && ferry_delta_cuda_create(sync_dev_device(m->dev), &r->gdec, &e) != FERRY_OK) {
        ferry_fail(why, FERRY_ERR_NO_MEMORY, "no GPU delta decoder: %s", e.text);
        return false;
    }
    /* per op a template item (its region, dtype, size), then the batch */
    if (ferry_grow(m->ctx, (void **)&r->gitems, sizeof *r->gitems, &r->cap_gitems, 2 * nops + 1) != 0 ||
        ferry_grow(m->ctx, (void **)&r->gregions, sizeof *r->gregions, &r->cap_gregions, nops + 1) != 0 ||
        ferry_grow(m->ctx, (void **)&r->gidx, sizeof *r->gidx, &r->cap_gidx, nops + 1) != 0) {
        ferry_fail(why, FERRY_ERR_NO_MEMORY, "out of memory");
        return false;
    }
    ferry_delta_cuda_item_t *tmpl = r->gitems, *batch = r->gitems + nops;
    /* every frame's place: step j, op k at [j * nops + k] */
    const uint8_t **frame = ferry_alloc(m->ctx, (n * nops + 1) * sizeof *frame);
    uint64_t *flen = ferry_alloc(m->ctx, (n * nops + 1) * sizeof *flen);
    bool ok = frame && flen;
    if (!ok) ferry_fail(why, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t k = 0; ok && k < nops; k++) {
        size_t esz = sync_op_esz(m, &ops[k]);
        ferry_dtype_t dt;
        uint64_t elems;
        if (!sync_delta_dtype(esz, ops[k].bytes, &dt, &elems)) {
            ferry_fail(why, FERRY_ERR_UNSUPPORTED, "op %zu has %zu-byte elements", k, esz);
            ok = false;
            break;
        }
        uint32_t lb = sync_local_buffer(m, 1, m->p.rank, ops[k].dst_buffer);
        tmpl[k] = (ferry_delta_cuda_item_t){.region = dst_base(r, lb) + ops[k].dst_offset, .dtype = dt, .elems = elems};
    }
    for (uint32_t j = 0; ok && j < n; j++) {
        uint64_t from = step[j].base_version, to = j + 1 < n ? step[j + 1].base_version : v;
        for (size_t k = 0; ok && k < nops; k++) {
            uint64_t len = sync_delta_frame_len(r->dscratch + blob_at[j], (uint32_t)k); /* inside the blob: checked */
            frame[j * nops + k] = r->dscratch + frame_at[j];
            flen[j * nops + k] = len;
            frame_at[j] += len;
            /* the frame must be for exactly this region (the writer is not trusted with its size) */
            ferry_delta_info_t fi;
            if (ferry_delta_peek(r->codec, frame[j * nops + k], len, &fi) != FERRY_OK || fi.dtype != tmpl[k].dtype ||
                fi.elems != tmpl[k].elems || fi.base_version != from || fi.next_version != to) {
                ferry_fail(why, FERRY_ERR_CORRUPT, "frame %zu of step %u of %u is not a delta of this region from "
                           "version %llu to %llu", k, j + 1, n, (unsigned long long)from, (unsigned long long)to);
                ok = false;
            }
        }
    }
    if (ok) r->torn = true; /* live bytes change from here on */
    /* contiguous destinations: a batch per step, then their checksums */
    size_t nc = 0;
    for (uint32_t j = 0; ok && j < n; j++) {
        nc = 0;
        for (size_t k = 0; k < nops; k++) {
            if (!sync_box_contiguous(&ops[k].box, ops[k].dst_strides)) continue;
            batch[nc] = tmpl[k];
            batch[nc].delta = frame[j * nops + k];
            batch[nc].len = flen[j * nops + k];
            batch[nc].base_version = step[j].base_version;
            r->gregions[nc] = (sync_dev_region_t){tmpl[k].region, ops[k].bytes};
            r->gidx[nc++] = p->first_op + k;
        }
        if (nc && ferry_delta_cuda_apply(r->gdec, batch, nc, NULL, &e) != FERRY_OK) {
            ferry_fail(why, FERRY_ERR_CORRUPT, "step %u of %u does not apply on the GPU: %s", j + 1, n, e.text);
            ok = false;
        }
    }
    if (ok && nc && sync_dev_sums_async(m->dev, r->gregions, nc, r->got, r->gidx, why) != FERRY_OK) ok = false;
    /* strided destinations, one at a time through the gather area */
    for (size_t k = 0; ok && k < nops; k++) {
        if (sync_box_contiguous(&ops[k].box, ops[k].dst_strides)) continue;
        uint32_t esz = (uint32_t)sync_op_esz(m, &ops[k]);
        uint8_t *region = tmpl[k].region;
        sync_dev_box_t in = {.dst = r->gather, .src = region, .src_strides = ops[k].dst_strides, .box = ops[k].box,
                             .esz = esz},
                       out = {.dst = region, .dst_strides = ops[k].dst_strides, .src = r->gather, .box = ops[k].box,
                              .esz = esz};
        ok = sync_dev_boxes(m->dev, &in, 1, why) == FERRY_OK && sync_dev_wait(m->dev, why) == FERRY_OK;
        for (uint32_t j = 0; ok && j < n; j++) {
            ferry_delta_cuda_item_t x = tmpl[k];
            x.region = r->gather;
            x.delta = frame[j * nops + k];
            x.len = flen[j * nops + k];
            x.base_version = step[j].base_version;
            if (ferry_delta_cuda_apply(r->gdec, &x, 1, NULL, &e) != FERRY_OK) {
                ferry_fail(why, FERRY_ERR_CORRUPT, "op %zu, step %u of %u does not apply on the GPU: %s", k, j + 1, n,
                           e.text);
                ok = false;
            }
        }
        size_t idx = p->first_op + k;
        sync_dev_region_t g = {r->gather, ops[k].bytes};
        /* scattered back; its sum from the gathered copy; done before the area takes the next op */
        ok = ok && sync_dev_boxes(m->dev, &out, 1, why) == FERRY_OK &&
             sync_dev_sums_async(m->dev, &g, 1, r->got, &idx, why) == FERRY_OK &&
             sync_dev_sums_flush(m->dev, why) == FERRY_OK;
    }
    if (ok && sync_dev_sums_flush(m->dev, why) != FERRY_OK) ok = false;
    ferry_free(m->ctx, frame);
    ferry_free(m->ctx, flen);
    return ok;
}
#endif

/* Pair p's ops from its writer's chain of deltas from `held` to v, in
 * place: its steps held -> ... -> v (one step when held is the version
 * published before v), each op's frames applied step by step, then its
 * destination hashed for the usual check. False when the writer offers no
 * chain from held for us (why stays empty), or any step fails (why says
 * which): the pair is then pulled whole, which overwrites what the deltas
 * wrote. Everything the area says is checked (sync/delta_area.h) against
 * the registered size before use; the codec checks each frame's base (the
 * version, and each chunk's xxh3) before it writes. *bytes: what was read;
 * *nsteps: the steps applied. A read the interrupt hook cut short sets
 * *stop (the update ends there). */
static bool pair_delta(ferry_reader_t *r, const ferry_plan_pair_t *p, uint64_t v, uint64_t held, uint64_t *bytes,
                       uint32_t *nsteps, ferry_errbuf_t *why, ferry_status_t *stop) {
    sync_member_t *m = &r->m;
    reader_src_t *s = &r->src[p->src_rank];
    ferry_xport_rmem_t *rmem = s->regions.cur[s->grant->map.delta_region];
    const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
    uint64_t area = ferry_xport_rmem_size(rmem);
    uint8_t hdr[SYNC_DELTA_HEADER];
    sync_delta_header_t h;
    if (area < SYNC_DELTA_HEADER) {
        ferry_fail(why, FERRY_ERR_CORRUPT, "a delta area of %llu bytes", (unsigned long long)area);
        return false;
    }
    ferry_status_t gs = get_one(r, rmem, 0, sizeof hdr, hdr);
    if (gs != FERRY_OK) {
        if (gs == FERRY_ERR_INTERRUPTED) *stop = gs;
        ferry_fail(why, FERRY_ERR_PEER_LOST, "reading the delta area: %s", ferry_xport_error(m->xp));
        return false;
    }
    if (sync_delta_header_parse(hdr, area, &h, why) != FERRY_OK) return false;
    if (h.version != v || h.entries == 0 || p->op_count > UINT32_MAX) return false; /* none for this version */
    uint64_t index = sync_delta_index_end(h.entries) - SYNC_DELTA_HEADER;
    if (!dscratch(r, index) || (gs = get_one(r, rmem, SYNC_DELTA_HEADER, index, r->dscratch)) != FERRY_OK) {
        if (gs == FERRY_ERR_INTERRUPTED) *stop = gs;
        ferry_fail(why, FERRY_ERR_PEER_LOST, "reading %u delta area entries", h.entries);
        return false;
    }
    sync_delta_entry_t step[FERRY_SYNC_DELTA_CHAIN_MAX];
    uint32_t n = 0;
    if (sync_delta_chain_find(r->dscratch, &h, area, m->p.rank, held, step, m->p.delta_chain, &n, why) != FERRY_OK)
        return false;
    if (n == 0) return false; /* not for us, or not from our version */
    if (step[0].ops != p->op_count) {
        ferry_fail(why, FERRY_ERR_CORRUPT, "the deltas for us have %u ops, our plan %zu from this writer", step[0].ops,
                   p->op_count);
        return false;
    }
    /* every step's blob, back to back in the scratch: one read */
    ferry_xport_run_t runs[FERRY_SYNC_DELTA_CHAIN_MAX];
    uint64_t blob_at[FERRY_SYNC_DELTA_CHAIN_MAX], frame_at[FERRY_SYNC_DELTA_CHAIN_MAX], total = 0;
    for (uint32_t j = 0; j < n; j++) {
        if (step[j].blob_len > ((uint64_t)1 << 40) - total) {
            ferry_fail(why, FERRY_ERR_LIMIT, "a chain of %u delta blobs past 1 TiB", n);
            return false;
        }
        blob_at[j] = total;
        total += step[j].blob_len;
    }
    if (!dscratch(r, total)) {
        ferry_fail(why, FERRY_ERR_NO_MEMORY, "no memory for %llu bytes of deltas", (unsigned long long)total);
        return false;
    }
    for (uint32_t j = 0; j < n; j++)
        runs[j] = (ferry_xport_run_t){.rmem = rmem, .remote_offset = step[j].blob, .len = step[j].blob_len,
                                      .local = r->dscratch + blob_at[j]};
    ferry_xport_req_t *req = NULL;
    gs = ferry_xport_get(m->xp, runs, n, &req);
    if (gs == FERRY_OK) gs = ferry_xport_req_wait(req, -1);
    ferry_xport_req_free(req);
    if (gs != FERRY_OK) {
        if (gs == FERRY_ERR_INTERRUPTED) *stop = gs;
        ferry_fail(why, FERRY_ERR_PEER_LOST, "reading %llu bytes of delta blobs", (unsigned long long)total);
        return false;
    }
    for (uint32_t j = 0; j < n; j++) {
        if (sync_delta_blob_parse(r->dscratch + blob_at[j], step[j].blob_len, step[j].ops, why) != FERRY_OK)
            return false;
        frame_at[j] = blob_at[j] + 8 * (uint64_t)step[j].ops;
    }
    *bytes = sync_delta_index_end(h.entries) + total;
    if (!r->codec && ferry_delta_codec_create(m->ctx, &r->codec) != FERRY_OK) {
        ferry_fail(why, FERRY_ERR_NO_MEMORY, "out of memory for a delta codec");
        return false;
    }
#ifdef FERRY_CUDA
    if (m->dev) {
        if (!pair_delta_dev(r, p, v, n, step, blob_at, frame_at, why)) return false;
        *nsteps = n;
        return true;
    }
#endif
    r->torn = true; /* live bytes change from here on */
    for (size_t i = p->first_op; i < p->first_op + p->op_count; i++) {
        uint32_t k = (uint32_t)(i - p->first_op);
        const ferry_copy_op_t *op = &ops[i];
        size_t esz = sync_op_esz(&r->m, op);
        ferry_dtype_t dt;
        uint64_t elems;
        if (!sync_delta_dtype(esz, op->bytes, &dt, &elems)) {
            ferry_fail(why, FERRY_ERR_UNSUPPORTED, "op %u has %zu-byte elements", k, esz);
            return false;
        }
        uint32_t lb = sync_local_buffer(m, 1, m->p.rank, op->dst_buffer);
        uint8_t *base = dst_base(r, lb);
        bool contiguous = sync_box_contiguous(&op->box, op->dst_strides);
        uint8_t *region = contiguous ? base + op->dst_offset : r->gather;
        if (!contiguous) sync_gather(r->gather, base, op->dst_offset, op->dst_strides, &op->box, esz);
        /* the op's region, step by step: each frame turns the version before into the next */
        for (uint32_t j = 0; j < n; j++) {
            uint64_t from = step[j].base_version, to = j + 1 < n ? step[j + 1].base_version : v;
            uint64_t len = sync_delta_frame_len(r->dscratch + blob_at[j], k); /* inside the blob: checked */
            const uint8_t *frame = r->dscratch + frame_at[j];
            frame_at[j] += len;
            /* the frame must be for exactly this region: its dtype and size decide
               how many bytes apply writes (the writer is not trusted with that) */
            ferry_delta_info_t fi;
            if (ferry_delta_peek(r->codec, frame, len, &fi) != FERRY_OK || fi.dtype != dt || fi.elems != elems ||
                fi.base_version != from || fi.next_version != to) {
                ferry_fail(why, FERRY_ERR_CORRUPT, "frame %u of step %u of %u is not a delta of this region from "
                           "version %llu to %llu", k, j + 1, n, (unsigned long long)from, (unsigned long long)to);
                return false;
            }
            if (ferry_delta_apply(r->codec, frame, len, region, elems, from, NULL) != FERRY_OK) {
                ferry_fail(why, FERRY_ERR_CORRUPT, "frame %u of step %u of %u does not apply: %s", k, j + 1, n,
                           ferry_delta_codec_detail(r->codec));
                return false;
            }
        }
        if (!contiguous) sync_scatter(base, op->dst_offset, op->dst_strides, &op->box, esz, r->gather);
        r->got[i] = ferry_sum(region, op->bytes);
    }
    *nsteps = n;
    return true;
}

/* In place and behind: the pairs whose writers offer deltas from the
 * version held (one step, or a chain) arrive as deltas (their checksums are
 * fetched first: a writer sends them once its deltas are written).
 * Failures fall back to pulling whole. */
static ferry_status_t pull_deltas(ferry_reader_t *r, uint64_t v, uint64_t held, meta_grant_t **sums_reply,
                                  double deadline, pull_stats_t *ps, ferry_update_info_t *inf) {
    sync_member_t *m = &r->m;
    const ferry_plan_pair_t *pairs = ferry_plan_pairs(m->plan);
    size_t np = ferry_plan_pair_count(m->plan);
    memset(r->pair_done, 0, np * sizeof *r->pair_done);
    if (m->p.deltas == FERRY_SYNC_DELTAS_OFF || r->shadow || r->torn || held == 0 || v <= held) return FERRY_OK;
    bool any = false;
    for (size_t i = 0; i < r->nwriters; i++) {
        reader_src_t *s = &r->src[r->writers[i]];
        /* auto: deltas only from writers on other hosts; one host copies at memory speed */
        bool wanted = m->p.deltas == FERRY_SYNC_DELTAS_ALWAYS ||
                      m->side[0].hosts[r->writers[i]] != m->side[1].hosts[m->p.rank];
        if (s->grant && s->grant->map.has_delta && !wanted) s->skip_delta = true;
        else s->skip_delta = false;
        any |= s->grant && s->grant->map.has_delta && wanted;
    }
    if (!any) return FERRY_OK;
    ferry_status_t st = fetch_sums(r, v, true, sums_reply, deadline);
    if (st != FERRY_OK) return st;
    double t = ferry_mono_s();
    for (size_t pi = 0; pi < np; pi++) {
        const reader_src_t *s = &r->src[pairs[pi].src_rank];
        if (!s->grant || !s->grant->map.has_delta || s->skip_delta) continue;
        uint64_t bytes = 0;
        uint32_t steps = 0;
        ferry_errbuf_t why;
        why.text[0] = '\0';
        ferry_status_t stop = FERRY_OK;
        bool ok = pair_delta(r, &pairs[pi], v, held, &bytes, &steps, &why, &stop);
        if (stop != FERRY_OK) return read_fail(r, pairs[pi].src_rank, stop);
        if (ok) {
            r->pair_done[pi] = true;
            ps->bytes += bytes;
            inf->delta_bytes += bytes;
            inf->delta_pairs++;
            if (steps > inf->delta_steps) inf->delta_steps = steps;
        } else if (why.text[0]) {
            ferry_log(m->ctx, FERRY_LOG_INFO, "reader %u: deltas of version %llu from writer %u refused (%s); pulling "
                      "whole", m->p.rank, (unsigned long long)v, pairs[pi].src_rank, why.text);
        }
    }
    ps->pull_s += ferry_mono_s() - t;
    return FERRY_OK;
}

static ferry_status_t apply_staged(ferry_reader_t *r) {
    const ferry_copy_op_t *ops = ferry_plan_ops(r->m.plan);
    sync_member_t *m = &r->m;
    if (m->dev) {
        size_t n = ferry_plan_op_count(m->plan);
        if (ferry_grow(m->ctx, (void **)&r->dboxes, sizeof *r->dboxes, &r->cap_dboxes, n + 1) != 0)
            return ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory");
        for (size_t i = 0; i < n; i++) {
            uint32_t lb = sync_local_buffer(m, 1, m->p.rank, ops[i].dst_buffer);
            r->dboxes[i] = (sync_dev_box_t){.dst = m->bufs[lb].ptr + ops[i].dst_offset, .dst_strides = ops[i].dst_strides,
                                            .src = r->shadow[lb] + ops[i].dst_offset, .src_strides = ops[i].dst_strides,
                                            .box = ops[i].box, .esz = (uint32_t)sync_op_esz(m, &ops[i])};
        }
        ferry_status_t st = sync_dev_boxes(m->dev, r->dboxes, n, &m->err);
        return st == FERRY_OK ? sync_dev_wait(m->dev, &m->err) : st;
    }
    for (size_t i = 0; i < ferry_plan_op_count(r->m.plan); i++) {
        uint32_t lb = sync_local_buffer(&r->m, 1, r->m.p.rank, ops[i].dst_buffer);
        sync_copy_box(r->m.bufs[lb].ptr, r->shadow[lb], ops[i].dst_offset, ops[i].dst_strides, &ops[i].box,
                      sync_op_esz(&r->m, &ops[i]));
    }
    return FERRY_OK;
}

/* ---- updates ------------------------------------------------------------------------ */

static ferry_status_t read_end(ferry_reader_t *r, uint64_t version, bool ok, bool *retired) {
    ferry_errbuf_t err;
    *retired = false;
    return meta_read_end(r->m.meta, version, ok, retired, &err);
}

static ferry_status_t reader_update(ferry_reader_t *r, uint64_t version, uint32_t timeout_ms,
                                    ferry_update_info_t *info) {
    sync_member_t *m = &r->m;
    if (!r->committed) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "update before commit");
    if (version == 0) return ferry_fail(&m->err, FERRY_ERR_INVALID_ARGUMENT, "version 0 is reserved");
    ferry_update_info_t inf;
    memset(&inf, 0, sizeof inf);
    double t0 = ferry_mono_s(), deadline = t0 + timeout_ms / 1000.0;
    r->intr_tick = 0;
    uint32_t corrupt = 0;
    char first_err[FERRY_ERR_TEXT] = "";
    ferry_status_t st = FERRY_OK;
    for (;;) {
        double left = deadline - ferry_mono_s();
        uint32_t left_ms = left > 0 ? (uint32_t)(left * 1000.0) : 0;
        bool changed;
        double tw = ferry_mono_s();
        st = sync_refresh_epoch(m, left_ms, &changed);
        if (st == FERRY_OK && changed) st = epoch_setup(r);
        if (st != FERRY_OK) {
            if (changed) m->epoch = 0;
            break;
        }
        meta_read_begin_req_t rb = {0};
        rb.epoch = m->epoch;
        rb.plan_digest = m->plan_digest;
        uint64_t held = ferry_reader_version(r);
        rb.min_version = version == FERRY_VERSION_LATEST ? (held ? held : 1)
                         : version == FERRY_VERSION_NEXT ? held + 1
                                                         : version;
        rb.max_version = version >= FERRY_VERSION_NEXT ? 0 : version;
        left = deadline - ferry_mono_s();
        rb.wait_ms = left > 0 ? (uint32_t)(left * 1000.0) : 0;
        rb.grant_ms = rb.wait_ms > UINT32_MAX - m->p.timeout_ms ? UINT32_MAX : rb.wait_ms + m->p.timeout_ms;
        rb.n_writers = r->nwriters;
        rb.writers = r->writers;
        meta_grant_t *g = NULL;
        st = meta_read_begin(m->meta, &rb, &g, &m->err);
        inf.wait_seconds += ferry_mono_s() - tw;
        if (st == FERRY_ERR_STALE && strstr(m->err.text, "epoch") && ferry_mono_s() < deadline) {
            m->epoch = 0; /* layouts changed: plan again */
            continue;
        }
        if (st != FERRY_OK) break;
        uint64_t v = g->version;
        if (v == held && !r->torn) { /* already there */
            bool retired;
            read_end(r, v, true, &retired);
            meta_grant_free(g);
            inf.version = v;
            break;
        }
        for (uint32_t i = 0; i < r->nsrc; i++) r->src[i].grant = NULL;
        for (size_t i = 0; i < g->n_writers && st == FERRY_OK; i++) st = resolve_src(r, &g->writers[i]);
        pull_stats_t ps = {0};
        meta_grant_t *sums_reply = NULL, *delta_sums_reply = NULL;
        r->source_hashed = false;
        r->pulling = v;
        if (st == FERRY_OK) st = pull_deltas(r, v, held, &delta_sums_reply, deadline, &ps, &inf);
        if (st == FERRY_OK) st = pull_all(r, &ps);
        if (st == FERRY_OK) {
            double tv = ferry_mono_s();
            st = verify_all(r, v, &sums_reply, deadline);
            ps.verify_s += ferry_mono_s() - tv;
        }
        inf.pull_seconds += ps.pull_s;
        inf.verify_seconds += ps.verify_s;
        inf.bytes += ps.bytes;
        inf.sources = (uint32_t)r->nwriters;
        if (st == FERRY_OK && r->shadow) {
            double ta = ferry_mono_s();
            st = apply_staged(r);
            inf.apply_seconds += ferry_mono_s() - ta;
        }
        bool retired = false;
        ferry_status_t est = read_end(r, v, st == FERRY_OK, &retired);
        if (st == FERRY_OK && retired && r->source_hashed) {
            /* The writer moved on while we read, and some checksums were of
             * its bytes just after each copy, not of ours: a value changed
             * and changed back in between would have passed. Hash what
             * landed (rare: only after a publish timed out). */
            const ferry_copy_op_t *ops = ferry_plan_ops(m->plan);
            for (size_t i = 0; i < ferry_plan_op_count(m->plan); i++) r->got[i] = dst_sum(r, &ops[i]);
            st = compare_sums(r);
        }
        meta_grant_free(sums_reply);
        meta_grant_free(delta_sums_reply);
        meta_grant_free(g);
        if (st == FERRY_OK) {
            r->version = v;
            r->torn = false;
            inf.version = v;
            (void)est; /* acknowledged or not, the bytes are verified */
            break;
        }
        /* failed: torn by the writer moving on, corrupt, or a writer lost */
        inf.retries++;
        bool exact = version < FERRY_VERSION_NEXT;
        if (retired && st == FERRY_ERR_CORRUPT) {
            char why[FERRY_ERR_TEXT];
            snprintf(why, sizeof why, "%s", m->err.text);
            st = ferry_fail(&m->err, FERRY_ERR_STALE, "version %llu was retired while being read (%s)",
                            (unsigned long long)v, why);
        } else if (st == FERRY_ERR_CORRUPT && ++corrupt > MAX_CORRUPT_RETRIES)
            break;
        if (!first_err[0]) snprintf(first_err, sizeof first_err, "%s", m->err.text);
        if (exact && st == FERRY_ERR_STALE) break;
        /* what another attempt cannot change, and a bound on attempts in all */
        if (st == FERRY_ERR_MISMATCH || st == FERRY_ERR_INVALID_ARGUMENT || st == FERRY_ERR_UNSUPPORTED ||
            st == FERRY_ERR_NO_MEMORY || st == FERRY_ERR_COVERAGE || st == FERRY_ERR_INTERRUPTED ||
            inf.retries >= MAX_ATTEMPTS)
            break;
        if (ferry_mono_s() >= deadline) break;
        ferry_log(m->ctx, FERRY_LOG_INFO, "reader %u: version %llu failed (%s); retrying", m->p.rank,
                  (unsigned long long)v, m->err.text);
    }
    if (st != FERRY_OK && first_err[0] && strcmp(first_err, m->err.text) != 0) {
        char was[FERRY_ERR_TEXT];
        snprintf(was, sizeof was, "%s", m->err.text);
        ferry_fail(&m->err, st, "%.300s (after a first attempt failed: %.150s)", was, first_err);
    }
    if (st != FERRY_OK && r->torn) {
        char was[FERRY_ERR_TEXT];
        snprintf(was, sizeof was, "%s", m->err.text);
        ferry_fail(&m->err, st, "%.400s; the buffers are torn (partly written) until the next successful update", was);
    }
    inf.seconds = ferry_mono_s() - t0;
    inf.device_bytes = sync_dev_bytes(m->dev);
#ifdef FERRY_CUDA
    inf.device_bytes += ferry_delta_cuda_device_bytes(r->gdec); /* the GPU delta decoder's scratch */
#endif
    if (info) *info = inf;
    return st;
}

ferry_status_t ferry_reader_update(ferry_reader_t *r, uint64_t version, uint32_t timeout_ms,
                                   ferry_update_info_t *info) {
    if (!r) return FERRY_ERR_INVALID_ARGUMENT;
    int prev = sync_dev_enter(r->m.dev); /* a CUDA reader's work (and the GPU memory it opens) is on its device */
    ferry_status_t st = reader_update(r, version, timeout_ms, info);
    sync_dev_leave(r->m.dev, prev);
    return st;
}

/* ---- lifetime ------------------------------------------------------------------------ */

static ferry_status_t reader_replay(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    (void)c;
    ferry_reader_t *r = opaque;
    return r->m.blob ? sync_recommit(&r->m, err) : FERRY_OK;
}

ferry_status_t ferry_reader_create(ferry_ctx_t *ctx, const ferry_model_t *model, const ferry_sync_params_t *params,
                                   ferry_reader_t **out) {
    if (!ctx || !out) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_reader_t *r = ferry_calloc(ctx, 1, sizeof *r);
    if (!r) return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "out of memory creating a reader");
    ferry_status_t st = sync_member_init(&r->m, ctx, META_ROLE_READER, model, params);
    if (st != FERRY_OK) {
        ferry_free(ctx, r);
        return st;
    }
    st = sync_member_connect(&r->m, reader_replay, r);
    if (st != FERRY_OK) {
        ferry_reader_destroy(r);
        return st;
    }
    *out = r;
    return FERRY_OK;
}

void ferry_reader_destroy(ferry_reader_t *r) {
    if (!r) return;
    epoch_free(r);
    ferry_free(r->m.ctx, r->runs);
    free(r->hash);
    ferry_delta_codec_destroy(r->codec);
#ifdef FERRY_CUDA
    ferry_delta_cuda_destroy(r->gdec);
    ferry_free(r->m.ctx, r->gitems);
    ferry_free(r->m.ctx, r->gregions);
    ferry_free(r->m.ctx, r->gidx);
#endif
    free(r->dscratch);
    ferry_free(r->m.ctx, r->dboxes);
    ferry_free(r->m.ctx, r->dregions);
    ferry_free(r->m.ctx, r->dops);
    ferry_free(r->m.ctx, r->dviews);
    ferry_free(r->m.ctx, r->vchecked);
    sync_member_fini(&r->m);
    ferry_free(r->m.ctx, r);
}

ferry_status_t ferry_reader_add_buffer(ferry_reader_t *r, const char *name, ferry_dtype_t dtype, void *ptr,
                                       uint64_t size, uint32_t *index) {
    if (!r) return FERRY_ERR_INVALID_ARGUMENT;
    return sync_add_buffer(&r->m, name, dtype, ptr, size, false, index);
}

static void *reader_alloc(sync_member_t *m, const ferry_buffer_info_t *bi, uint32_t *index, ferry_status_t *st) {
    if (m->dev) { /* the engine's own buffer on its GPU: not counted as ferry's extra memory */
        void *p = NULL;
        if ((*st = sync_dev_alloc(m->dev, bi->size, &p, &m->err)) != FERRY_OK) return NULL;
        sync_dev_account(m->dev, -(int64_t)bi->size);
        *st = sync_add_buffer(m, bi->name, bi->dtype, p, bi->size, true, index);
        if (*st != FERRY_OK) {
            sync_dev_account(m->dev, (int64_t)bi->size);
            sync_dev_free(m->dev, p, bi->size);
            return NULL;
        }
        return p;
    }
    void *p = calloc(1, bi->size ? bi->size : 1);
    if (!p) {
        *st = ferry_fail(&m->err, FERRY_ERR_NO_MEMORY, "out of memory for buffer %s (%llu bytes)", bi->name,
                         (unsigned long long)bi->size);
        return NULL;
    }
    *st = sync_add_buffer(m, bi->name, bi->dtype, p, bi->size, true, index);
    if (*st != FERRY_OK) {
        free(p);
        return NULL;
    }
    return p;
}

ferry_status_t ferry_reader_add_piece(ferry_reader_t *r, const ferry_piece_t *piece) {
    if (!r) return FERRY_ERR_INVALID_ARGUMENT;
    return sync_add_piece(&r->m, piece);
}

ferry_status_t ferry_reader_add_layout(ferry_reader_t *r, const ferry_layout_t *layout, uint32_t rank, void **ptrs,
                                       size_t nptrs) {
    if (!r) return FERRY_ERR_INVALID_ARGUMENT;
    return sync_add_layout(&r->m, layout, rank, ptrs, nptrs, reader_alloc);
}

ferry_status_t ferry_reader_commit(ferry_reader_t *r) {
    if (!r) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_status_t st = sync_commit(&r->m);
    r->committed = st == FERRY_OK;
    return st;
}
