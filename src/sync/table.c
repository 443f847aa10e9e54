/* TensorTable: put / complete / get of arbitrary tensor boxes keyed by
 * (sequence id, name, box), on the same machinery as writers and readers:
 * the service holds who put what, the planner cuts a get from the puts
 * that cover it, the transport reads one-sided, and a ferry sum checks every
 * canonical tile (docs/sync.md). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/sum.h"

#include "sync/sync_internal.h"

#define TILE_2D_COLS 512
#define TILE_2D_ROWS 128
#define TILE_1D 65536

typedef struct tput {
    char *name;
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
    ferry_box_t box;
    uint8_t *data; /* row-major copy */
    uint64_t bytes;
} tput_t;

typedef struct tseq {
    uint64_t seq_id;
    bool completed;
    tput_t *puts;
    size_t n, cap;
    ferry_xport_mem_t *mem; /* after complete: every put, row-major, one after another */
    /* after complete: the TABLE_COMPLETE sent, for a restarted service (its
       entries point into sent_dims, sent_sums and the puts' names) */
    meta_table_entry_t *sent;
    int64_t *sent_dims;
    uint64_t *sent_sums;
    uint8_t *sent_desc;     /* the region's transport descriptor */
    size_t sent_desc_len;
} tseq_t;


struct ferry_table {
    sync_member_t m;
    tseq_t *seqs;
    size_t nseqs, cap_seqs;
    sync_regions_t *peers;   /* by member rank */
    uint8_t *scratch;
    size_t scratch_cap;
};

const char *ferry_table_error(const ferry_table_t *t) { return t ? t->m.err.text : ""; }

/* memcpy of n dims; 0-d tensors come with NULL arrays */
static void copy_dims(int64_t *dst, const int64_t *src, size_t n) {
    if (n) memcpy(dst, src, n * sizeof *dst);
}

/* ---- tiles ----------------------------------------------------------------------- */

/* The canonical tiling of a tensor: depends on its shape only, so putters
 * and getters agree without talking. */
static void tile_shape(uint32_t ndim, const int64_t *shape, int64_t *tile) {
    for (uint32_t d = 0; d < ndim; d++) tile[d] = 1;
    if (ndim == 0) return;
    int64_t last = ndim == 1 ? TILE_1D : TILE_2D_COLS;
    tile[ndim - 1] = shape[ndim - 1] < last ? shape[ndim - 1] : last;
    if (ndim >= 2) tile[ndim - 2] = shape[ndim - 2] < TILE_2D_ROWS ? shape[ndim - 2] : TILE_2D_ROWS;
}

/* Tile-grid range [lo, hi) of the tiles a box meets. */
static void tile_range(const ferry_box_t *b, const int64_t *tile, int64_t *lo, int64_t *hi) {
    for (uint32_t d = 0; d < b->ndim; d++) {
        lo[d] = b->offset[d] / tile[d];
        hi[d] = (b->offset[d] + b->extent[d] - 1) / tile[d] + 1;
    }
}

static uint64_t tile_count(const ferry_box_t *b, const int64_t *tile) {
    int64_t lo[FERRY_MAX_DIMS], hi[FERRY_MAX_DIMS];
    tile_range(b, tile, lo, hi);
    uint64_t n = 1;
    for (uint32_t d = 0; d < b->ndim; d++) n *= (uint64_t)(hi[d] - lo[d]);
    return n;
}

static ferry_box_t tile_box(uint32_t ndim, const int64_t *idx, const int64_t *tile) {
    ferry_box_t t = {.ndim = ndim};
    for (uint32_t d = 0; d < ndim; d++) {
        t.offset[d] = idx[d] * tile[d];
        t.extent[d] = tile[d];
    }
    return t;
}

/* Row-major element strides of a box's own extents. */
static void rm_strides(const ferry_box_t *b, int64_t *s) {
    int64_t acc = 1;
    for (int d = (int)b->ndim - 1; d >= 0; d--) {
        s[d] = acc;
        acc *= b->extent[d];
    }
}

/* Byte offset of sub-box x's first element inside row-major box b. */
static uint64_t sub_offset(const ferry_box_t *b, const ferry_box_t *x, size_t esz) {
    int64_t s[FERRY_MAX_DIMS] = {0}, e = 0;
    rm_strides(b, s);
    for (uint32_t d = 0; d < b->ndim; d++) e += (x->offset[d] - b->offset[d]) * s[d];
    return (uint64_t)e * esz;
}

static bool next_idx(int64_t *idx, const int64_t *lo, const int64_t *hi, uint32_t ndim) {
    for (int d = (int)ndim - 1; d >= 0; d--) {
        if (++idx[d] < hi[d]) return true;
        idx[d] = lo[d];
    }
    return false;
}

/* t->scratch holds at least bytes. */
static ferry_status_t scratch_fit(ferry_table_t *t, uint64_t bytes) {
    if (bytes <= t->scratch_cap) return FERRY_OK;
    uint8_t *n = realloc(t->scratch, bytes);
    if (!n) return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory for %llu bytes", (unsigned long long)bytes);
    t->scratch = n;
    t->scratch_cap = bytes;
    return FERRY_OK;
}

/* ---- puts ------------------------------------------------------------------------ */

static tseq_t *find_seq(ferry_table_t *t, uint64_t seq_id, bool create) {
    for (size_t i = 0; i < t->nseqs; i++)
        if (t->seqs[i].seq_id == seq_id) return &t->seqs[i];
    if (!create || ferry_grow(t->m.ctx, (void **)&t->seqs, sizeof *t->seqs, &t->cap_seqs, t->nseqs + 1) != 0)
        return NULL;
    tseq_t *s = &t->seqs[t->nseqs++];
    memset(s, 0, sizeof *s);
    s->seq_id = seq_id;
    return s;
}

static void seq_free(ferry_table_t *t, tseq_t *s) {
    for (size_t i = 0; i < s->n; i++) {
        ferry_free(t->m.ctx, s->puts[i].name);
        free(s->puts[i].data);
    }
    ferry_free(t->m.ctx, s->puts);
    if (s->mem) ferry_xport_mem_deregister(s->mem);
    ferry_free(t->m.ctx, s->sent);
    ferry_free(t->m.ctx, s->sent_dims);
    ferry_free(t->m.ctx, s->sent_sums);
    ferry_free(t->m.ctx, s->sent_desc);
    memset(s, 0, sizeof *s);
}

/* The TABLE_COMPLETE of a completed sequence; region: storage for its one region. */
static meta_table_seq_t seq_sent(const tseq_t *s, meta_bytes_t *region) {
    *region = (meta_bytes_t){s->sent_desc, s->sent_desc_len};
    return (meta_table_seq_t){.seq_id = s->seq_id, .regions = region, .n_regions = 1, .entries = s->sent, .n_entries = s->n};
}

static ferry_status_t check_entry(ferry_table_t *t, const ferry_table_entry_t *e, bool put) {
    if (!e->name || !*e->name || !e->data)
        return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "table entry: a name and data are required");
    if (e->box.ndim > FERRY_MAX_DIMS)
        return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "%s: %u dims", e->name, e->box.ndim);
    for (uint32_t d = 0; d < e->box.ndim; d++)
        if (e->box.offset[d] < 0 || e->box.extent[d] <= 0)
            return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "%s: empty or negative box", e->name);
    if (!put) return FERRY_OK;
    if (ferry_dtype_size(e->dtype) == 0)
        return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "%s: dtype %d", e->name, (int)e->dtype);
    if (e->ndim != e->box.ndim || (e->ndim && !e->shape))
        return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "%s: the box has %u dims, the tensor %u", e->name,
                          e->box.ndim, e->ndim);
    for (uint32_t d = 0; d < e->ndim; d++)
        if (e->shape[d] <= 0 || e->box.offset[d] + e->box.extent[d] > e->shape[d]) {
            char b[200];
            ferry_box_format(&e->box, b, sizeof b);
            return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "%s: box %s is outside the tensor", e->name, b);
        }
    return FERRY_OK;
}

/* Bytes of an entry's box in its dtype. */
static uint64_t entry_bytes(const ferry_table_entry_t *e, ferry_dtype_t dtype) {
    return (uint64_t)ferry_box_numel(&e->box) * ferry_dtype_size(dtype);
}

ferry_status_t ferry_table_multi_put(ferry_table_t *t, uint64_t seq_id, const ferry_table_entry_t *entries, size_t n) {
    if (!t || (!entries && n)) return FERRY_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n && t->m.dev; i++) { /* GPU memory: all of it checked before anything is put */
        ferry_status_t st = check_entry(t, &entries[i], true);
        uint64_t bytes = st == FERRY_OK ? entry_bytes(&entries[i], entries[i].dtype) : 0;
        if (st == FERRY_OK && bytes) st = sync_check_device(&t->m, "table entry", entries[i].name, entries[i].data, bytes);
        if (st != FERRY_OK) return st;
    }
    for (size_t i = 0; i < n; i++) {
        ferry_status_t st = check_entry(t, &entries[i], true);
        if (st != FERRY_OK) return st;
    }
    tseq_t *s = find_seq(t, seq_id, true);
    if (!s) return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    if (s->completed)
        return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "sequence %llu is already complete",
                          (unsigned long long)seq_id);
    for (size_t i = 0; i < n; i++) {
        const ferry_table_entry_t *e = &entries[i];
        for (size_t k = 0; k < s->n; k++) /* one name, one tensor */
            if (!strcmp(s->puts[k].name, e->name) &&
                (s->puts[k].dtype != e->dtype || s->puts[k].ndim != e->ndim ||
                 (e->ndim && memcmp(s->puts[k].shape, e->shape, e->ndim * sizeof *e->shape))))
                return ferry_fail(&t->m.err, FERRY_ERR_MISMATCH, "%s was put with another dtype or shape", e->name);
        if (ferry_grow(t->m.ctx, (void **)&s->puts, sizeof *s->puts, &s->cap, s->n + 1) != 0)
            return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
        tput_t *p = &s->puts[s->n];
        memset(p, 0, sizeof *p);
        p->bytes = (uint64_t)ferry_box_numel(&e->box) * ferry_dtype_size(e->dtype);
        p->name = ferry_strdup(t->m.ctx, e->name);
        p->data = malloc(p->bytes ? p->bytes : 1);
        if (!p->name || !p->data) {
            ferry_free(t->m.ctx, p->name);
            free(p->data);
            return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory copying %s", e->name);
        }
        ferry_status_t cs = FERRY_OK;
        if (!t->m.dev) memcpy(p->data, e->data, p->bytes);
        else if (p->bytes) /* held in host memory like every put: the copy leaves the GPU now */
            if ((cs = sync_dev_copy(t->m.dev, p->data, e->data, p->bytes, &t->m.err)) == FERRY_OK)
                cs = sync_dev_wait(t->m.dev, &t->m.err);
        if (cs != FERRY_OK) {
            ferry_free(t->m.ctx, p->name);
            free(p->data);
            return cs;
        }
        p->dtype = e->dtype;
        p->ndim = e->ndim;
        copy_dims(p->shape, e->shape, e->ndim);
        p->box = e->box;
        s->n++;
    }
    return FERRY_OK;
}

ferry_status_t ferry_table_put(ferry_table_t *t, uint64_t seq_id, const ferry_table_entry_t *entry) {
    return ferry_table_multi_put(t, seq_id, entry, 1);
}

/* The ferry sum of every tile the put meets (restricted to the put), in order. */
static ferry_status_t put_sums(ferry_table_t *t, const tput_t *p, uint64_t *sums) {
    size_t esz = ferry_dtype_size(p->dtype);
    int64_t tile[FERRY_MAX_DIMS], lo[FERRY_MAX_DIMS], hi[FERRY_MAX_DIMS], idx[FERRY_MAX_DIMS], ps[FERRY_MAX_DIMS];
    tile_shape(p->ndim, p->shape, tile);
    tile_range(&p->box, tile, lo, hi);
    rm_strides(&p->box, ps);
    memcpy(idx, lo, sizeof lo);
    size_t k = 0;
    do {
        ferry_box_t tb = tile_box(p->ndim, idx, tile), r;
        if (p->ndim) ferry_box_intersect(&tb, &p->box, &r);
        else r = p->box;
        uint64_t bytes = (uint64_t)ferry_box_numel(&r) * esz;
        ferry_status_t st = scratch_fit(t, bytes);
        if (st != FERRY_OK) return st;
        sync_gather(t->scratch, p->data, sub_offset(&p->box, &r, esz), ps, &r, esz);
        sums[k++] = ferry_sum(t->scratch, bytes);
    } while (p->ndim && next_idx(idx, lo, hi, p->ndim));
    return FERRY_OK;
}

ferry_status_t ferry_table_complete(ferry_table_t *t, uint64_t seq_id) {
    if (!t) return FERRY_ERR_INVALID_ARGUMENT;
    tseq_t *s = find_seq(t, seq_id, true);
    if (!s) return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    if (s->completed)
        return ferry_fail(&t->m.err, FERRY_ERR_INVALID_ARGUMENT, "sequence %llu is already complete",
                          (unsigned long long)seq_id);
    ferry_ctx_t *ctx = t->m.ctx;
    uint64_t total = 0;
    for (size_t i = 0; i < s->n; i++) total += (s->puts[i].bytes + 63) / 64 * 64;
    ferry_status_t st = ferry_xport_mem_alloc(t->m.xp, total ? total : 64, FERRY_MEM_HOST, FERRY_XPORT_ACCESS_READ, &s->mem);
    if (st != FERRY_OK) return ferry_fail(&t->m.err, st, "%s", ferry_xport_error(t->m.xp));
    meta_table_entry_t *es = ferry_calloc(ctx, s->n + 1, sizeof *es);
    int64_t *dims = ferry_calloc(ctx, 3 * FERRY_MAX_DIMS * (s->n + 1), sizeof *dims);
    uint64_t nsums = 0;
    for (size_t i = 0; i < s->n; i++) {
        int64_t tile[FERRY_MAX_DIMS];
        tile_shape(s->puts[i].ndim, s->puts[i].shape, tile);
        nsums += tile_count(&s->puts[i].box, tile);
    }
    uint64_t *sums = ferry_calloc(ctx, nsums + 1, sizeof *sums);
    uint8_t *desc = ferry_alloc(ctx, FERRY_XPORT_DESC_MAX);
    size_t dlen = 0;
    if (!es || !dims || !sums || !desc) st = ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    if (st == FERRY_OK) {
        st = ferry_xport_mem_pack(s->mem, desc, FERRY_XPORT_DESC_MAX, &dlen);
        if (st != FERRY_OK) st = ferry_fail(&t->m.err, st, "%s", ferry_xport_error(t->m.xp));
    }
    uint8_t *base = ferry_xport_mem_ptr(s->mem);
    uint64_t at = 0, k = 0;
    for (size_t i = 0; i < s->n && st == FERRY_OK; i++) {
        tput_t *p = &s->puts[i];
        memcpy(base + at, p->data, p->bytes);
        int64_t tile[FERRY_MAX_DIMS];
        tile_shape(p->ndim, p->shape, tile);
        uint64_t nt = tile_count(&p->box, tile);
        st = put_sums(t, p, sums + k);
        int64_t *d = dims + 3 * FERRY_MAX_DIMS * i;
        copy_dims(d, p->shape, p->ndim);
        copy_dims(d + FERRY_MAX_DIMS, p->box.offset, p->ndim);
        copy_dims(d + 2 * FERRY_MAX_DIMS, p->box.extent, p->ndim);
        es[i] = (meta_table_entry_t){.name = p->name,
                                     .dtype = (uint32_t)p->dtype,
                                     .ndim = p->ndim,
                                     .shape = d,
                                     .offset = d + FERRY_MAX_DIMS,
                                     .extent = d + 2 * FERRY_MAX_DIMS,
                                     .region = 0,
                                     .byte_offset = at,
                                     .tile_sums = sums + k,
                                     .n_tile_sums = nt};
        k += nt;
        at += (p->bytes + 63) / 64 * 64;
    }
    if (st == FERRY_OK) {
        /* kept (the replay sends the same again) */
        s->sent = es;
        s->sent_dims = dims;
        s->sent_sums = sums;
        s->sent_desc = desc;
        s->sent_desc_len = dlen;
        meta_bytes_t region;
        meta_table_seq_t seq = seq_sent(s, &region);
        st = meta_table_complete(t->m.meta, &seq, &t->m.err);
        if (st != FERRY_OK) {
            s->sent = NULL;
            s->sent_dims = NULL;
            s->sent_sums = NULL;
            s->sent_desc = NULL;
        }
    }
    if (st != FERRY_OK) {
        ferry_free(ctx, es);
        ferry_free(ctx, dims);
        ferry_free(ctx, sums);
        ferry_free(ctx, desc);
        ferry_xport_mem_deregister(s->mem);
        s->mem = NULL;
        return st;
    }
    s->completed = true;
    for (size_t i = 0; i < s->n; i++) { /* the region holds them now */
        free(s->puts[i].data);
        s->puts[i].data = NULL;
    }
    return FERRY_OK;
}

ferry_status_t ferry_table_drop(ferry_table_t *t, uint64_t seq_id) {
    if (!t) return FERRY_ERR_INVALID_ARGUMENT;
    tseq_t *s = find_seq(t, seq_id, false);
    if (!s) return ferry_fail(&t->m.err, FERRY_ERR_NOT_FOUND, "sequence %llu has no puts here", (unsigned long long)seq_id);
    ferry_status_t st = s->completed ? meta_table_drop(t->m.meta, seq_id, &t->m.err) : FERRY_OK;
    seq_free(t, s);
    *s = t->seqs[--t->nseqs];
    return st;
}

/* ---- gets ------------------------------------------------------------------------ */

typedef struct tget { /* what a get needs from the contents */
    ferry_model_t *model;
    ferry_layout_t *src, *dst;
    uint32_t *src_base; /* per member: its first buffer (region 0) in src */
    const meta_table_contents_t *tc;
} tget_t;

static int cmp_entry_name(const void *a, const void *b) {
    return strcmp((*(const meta_table_entry_t *const *)a)->name, (*(const meta_table_entry_t *const *)b)->name);
}

/* Unpacks every member's regions (reusing those that did not change). */
static ferry_status_t resolve_peers(ferry_table_t *t, const meta_table_contents_t *tc) {
    for (size_t i = 0; i < tc->n_members; i++) {
        const meta_table_member_t *mb = &tc->members[i];
        if (mb->rank >= t->m.p.world)
            return ferry_fail(&t->m.err, FERRY_ERR_CORRUPT, "table member %u of %u", mb->rank, t->m.p.world);
        ferry_status_t st = sync_regions_resolve(&t->m, &t->peers[mb->rank], mb->incarnation, mb->seq.regions,
                                                 mb->seq.n_regions, "table member", mb->rank);
        if (st != FERRY_OK) return st;
    }
    return FERRY_OK;
}

/* Both layouts of a get: every put as a source piece (rank = member,
 * buffer = its region), every wanted box as a destination piece. */
static ferry_status_t build_layouts(ferry_table_t *t, tget_t *g, ferry_table_entry_t *want, size_t n) {
    ferry_ctx_t *ctx = t->m.ctx;
    const meta_table_contents_t *tc = g->tc;
    size_t total = 0;
    for (size_t i = 0; i < tc->n_members; i++) total += tc->members[i].seq.n_entries;
    const meta_table_entry_t **all = ferry_calloc(ctx, total + 1, sizeof *all);
    if (!all) return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < tc->n_members; i++)
        for (size_t e = 0; e < tc->members[i].seq.n_entries; e++) all[k++] = &tc->members[i].seq.entries[e];
    qsort(all, total, sizeof *all, cmp_entry_name);
    ferry_status_t st = ferry_model_create(ctx, "table", &g->model);
    for (size_t i = 0; i < total && st == FERRY_OK; i++) {
        if (i && !strcmp(all[i]->name, all[i - 1]->name)) {
            if (all[i]->dtype != all[i - 1]->dtype || all[i]->ndim != all[i - 1]->ndim ||
                (all[i]->ndim && memcmp(all[i]->shape, all[i - 1]->shape, all[i]->ndim * sizeof *all[i]->shape)))
                st = ferry_fail(&t->m.err, FERRY_ERR_MISMATCH, "table: %s was put with different dtypes or shapes",
                                all[i]->name);
            continue;
        }
        st = ferry_model_add_tensor(g->model, all[i]->name, (ferry_dtype_t)all[i]->dtype, all[i]->ndim, all[i]->shape,
                                    NULL);
        if (st != FERRY_OK) st = ferry_fail(&t->m.err, st, "table: %s", ferry_model_error(g->model));
    }
    ferry_free(ctx, all);
    if (st != FERRY_OK) return st;
    st = ferry_layout_create(ctx, g->model, t->m.p.world, &g->src);
    if (st == FERRY_OK) st = ferry_layout_create(ctx, g->model, 1, &g->dst);
    if (st != FERRY_OK) return ferry_fail(&t->m.err, st, "%s", ferry_ctx_error(ctx));
    g->src_base = ferry_calloc(ctx, t->m.p.world + 1, sizeof *g->src_base);
    if (!g->src_base) return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    for (size_t i = 0; i < tc->n_members && st == FERRY_OK; i++) {
        const meta_table_member_t *mb = &tc->members[i];
        uint32_t first = ferry_layout_buffer_count(g->src);
        g->src_base[mb->rank] = first;
        for (size_t r = 0; r < mb->seq.n_regions && st == FERRY_OK; r++) {
            char name[32];
            uint32_t idx;
            snprintf(name, sizeof name, "region%zu", r);
            st = ferry_layout_add_buffer(g->src, mb->rank, name, FERRY_DTYPE_U8,
                                         ferry_xport_rmem_size(t->peers[mb->rank].cur[r]), &idx);
        }
        for (size_t e = 0; e < mb->seq.n_entries && st == FERRY_OK; e++) {
            const meta_table_entry_t *te = &mb->seq.entries[e];
            ferry_piece_t p;
            memset(&p, 0, sizeof p);
            ferry_model_find(g->model, te->name, &p.tensor);
            p.rank = mb->rank;
            p.buffer = first + te->region;
            p.byte_offset = te->byte_offset;
            p.box.ndim = te->ndim;
            copy_dims(p.box.offset, te->offset, te->ndim);
            copy_dims(p.box.extent, te->extent, te->ndim);
            rm_strides(&p.box, p.strides);
            st = ferry_layout_add_piece(g->src, &p);
        }
        if (st != FERRY_OK) st = ferry_fail(&t->m.err, st, "table member %u: %s", mb->rank, ferry_layout_error(g->src));
    }
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        ferry_piece_t p;
        memset(&p, 0, sizeof p);
        ferry_tensor_info_t ti;
        if (!ferry_model_find(g->model, want[i].name, &p.tensor))
            return ferry_fail(&t->m.err, FERRY_ERR_NOT_FOUND, "table: no member put %s in this sequence", want[i].name);
        ferry_model_tensor(g->model, p.tensor, &ti);
        if (want[i].dtype && want[i].dtype != ti.dtype)
            return ferry_fail(&t->m.err, FERRY_ERR_MISMATCH, "table: %s is %s, not %s", want[i].name,
                              ferry_dtype_name(ti.dtype), ferry_dtype_name(want[i].dtype));
        uint64_t bytes = (uint64_t)ferry_box_numel(&want[i].box) * ferry_dtype_size(ti.dtype);
        st = ferry_layout_add_buffer(g->dst, 0, want[i].name, ti.dtype, bytes, &p.buffer);
        p.box = want[i].box;
        rm_strides(&p.box, p.strides);
        if (st == FERRY_OK) st = ferry_layout_add_piece(g->dst, &p);
        if (st != FERRY_OK) st = ferry_fail(&t->m.err, st, "table get of %s: %s", want[i].name, ferry_layout_error(g->dst));
    }
    return st;
}

/* Runs of one batched get, collected by sync_box_runs. */
typedef struct run_batch {
    ferry_ctx_t *ctx;
    ferry_xport_run_t *runs;
    size_t n, cap;
    bool oom;
    ferry_xport_rmem_t *rmem; /* where the runs being added read from, and land */
    uint64_t remote;
    uint8_t *local;
} run_batch_t;

static void add_run(void *arg, uint64_t remote, uint64_t local, size_t bytes) {
    run_batch_t *b = arg;
    if (ferry_grow(b->ctx, (void **)&b->runs, sizeof *b->runs, &b->cap, b->n + 1) != 0) {
        b->oom = true;
        return;
    }
    b->runs[b->n++] = (ferry_xport_run_t){b->rmem, b->remote + remote, b->local + local, bytes};
}

static ferry_status_t batch_get(ferry_table_t *t, run_batch_t *b) {
    ferry_status_t st = b->oom ? ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory for %zu runs", b->n)
                               : FERRY_OK;
    ferry_xport_req_t *req = NULL;
    if (st == FERRY_OK && b->n) {
        st = ferry_xport_get(t->m.xp, b->runs, b->n, &req);
        if (st == FERRY_OK) st = ferry_xport_req_wait(req, -1);
        ferry_xport_req_free(req);
        if (st != FERRY_OK)
            st = ferry_fail(&t->m.err, st, "table get%s: %s", st == FERRY_ERR_INTERRUPTED ? " interrupted" : "",
                            ferry_xport_error(t->m.xp));
    }
    ferry_free(b->ctx, b->runs);
    b->runs = NULL;
    b->n = b->cap = 0;
    return st;
}


/* Reads every op of the plan straight into the wanted buffers. */
static ferry_status_t pull_ops(ferry_table_t *t, const ferry_plan_t *plan, const tget_t *g, ferry_table_entry_t *want) {
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    run_batch_t b = {.ctx = t->m.ctx};
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        const ferry_copy_op_t *op = &ops[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(g->model, op->tensor, &ti);
        b.rmem = t->peers[op->src_rank].cur[op->src_buffer - g->src_base[op->src_rank]];
        b.remote = op->src_offset;
        b.local = (uint8_t *)want[op->dst_buffer].data + op->dst_offset;
        sync_box_runs(&op->box, op->src_strides, op->dst_strides, ferry_dtype_size(ti.dtype), add_run, &b);
    }
    return batch_get(t, &b);
}

typedef struct copy2 {
    uint8_t *to;
    const uint8_t *from;
} copy2_t;

/* A run between two strided boxes: at1 in the source, at2 in the destination. */
static void copy2_run(void *arg, uint64_t at1, uint64_t at2, size_t bytes) {
    copy2_t *c = arg;
    memcpy(c->to + at2, c->from + at1, bytes);
}

/* Every tile of every put a wanted box meets: a tile the box holds whole is
 * hashed where it landed; one it holds in part is read whole from the
 * putter, hashed, and its wanted part copied from that verified copy. */
static ferry_status_t verify_tiles(ferry_table_t *t, const tget_t *g, ferry_table_entry_t *want, size_t n) {
    const meta_table_contents_t *tc = g->tc;
    for (size_t i = 0; i < tc->n_members; i++) {
        const meta_table_member_t *mb = &tc->members[i];
        for (size_t e = 0; e < mb->seq.n_entries; e++) {
            const meta_table_entry_t *te = &mb->seq.entries[e];
            ferry_box_t P = {.ndim = te->ndim};
            copy_dims(P.offset, te->offset, te->ndim);
            copy_dims(P.extent, te->extent, te->ndim);
            size_t esz = ferry_dtype_size((ferry_dtype_t)te->dtype);
            int64_t tile[FERRY_MAX_DIMS], plo[FERRY_MAX_DIMS], phi[FERRY_MAX_DIMS], pstr[FERRY_MAX_DIMS];
            tile_shape(P.ndim, te->shape, tile);
            tile_range(&P, tile, plo, phi);
            rm_strides(&P, pstr);
            if (te->n_tile_sums != tile_count(&P, tile))
                return ferry_fail(&t->m.err, FERRY_ERR_CORRUPT, "table member %u: %s has %zu tile checksums, not %llu",
                                  mb->rank, te->name, te->n_tile_sums, (unsigned long long)tile_count(&P, tile));
            for (size_t w = 0; w < n; w++) {
                ferry_box_t X;
                if (strcmp(want[w].name, te->name) != 0) continue;
                if (P.ndim && !ferry_box_intersect(&P, &want[w].box, &X)) continue;
                if (!P.ndim) X = P;
                int64_t lo[FERRY_MAX_DIMS], hi[FERRY_MAX_DIMS], idx[FERRY_MAX_DIMS], gstr[FERRY_MAX_DIMS];
                tile_range(&X, tile, lo, hi);
                rm_strides(&want[w].box, gstr);
                memcpy(idx, lo, sizeof lo);
                do {
                    ferry_box_t tb = tile_box(P.ndim, idx, tile), R, RG;
                    if (P.ndim) ferry_box_intersect(&tb, &P, &R);
                    else R = P;
                    uint64_t k = 0; /* R's index among P's tiles */
                    for (uint32_t d = 0; d < P.ndim; d++) k = k * (uint64_t)(phi[d] - plo[d]) + (uint64_t)(idx[d] - plo[d]);
                    uint64_t bytes = (uint64_t)ferry_box_numel(&R) * esz;
                    ferry_status_t st = scratch_fit(t, bytes);
                    if (st != FERRY_OK) return st;
                    bool whole = !P.ndim || ferry_box_contains(&want[w].box, &R);
                    if (whole) {
                        sync_gather(t->scratch, want[w].data, sub_offset(&want[w].box, &R, esz), gstr, &R, esz);
                    } else { /* read the tile's part of the put whole, row-major into scratch */
                        run_batch_t b = {.ctx = t->m.ctx,
                                         .rmem = t->peers[mb->rank].cur[te->region],
                                         .remote = te->byte_offset + sub_offset(&P, &R, esz),
                                         .local = t->scratch};
                        sync_box_runs(&R, pstr, NULL, esz, add_run, &b);
                        if ((st = batch_get(t, &b)) != FERRY_OK) return st;
                    }
                    uint64_t got = ferry_sum(t->scratch, bytes);
                    if (got != te->tile_sums[k]) {
                        char b[200];
                        ferry_box_format(&R, b, sizeof b);
                        return ferry_fail(&t->m.err, FERRY_ERR_CORRUPT,
                                          "table: checksum mismatch on %s%s from member %u (sum %016llx, put's %016llx)",
                                          te->name, b, mb->rank, (unsigned long long)got,
                                          (unsigned long long)te->tile_sums[k]);
                    }
                    if (!whole && ferry_box_intersect(&R, &want[w].box, &RG)) {
                        /* the wanted part, from the verified copy */
                        int64_t rs[FERRY_MAX_DIMS];
                        rm_strides(&R, rs);
                        copy2_t c = {(uint8_t *)want[w].data + sub_offset(&want[w].box, &RG, esz),
                                     t->scratch + sub_offset(&R, &RG, esz)};
                        sync_box_runs(&RG, rs, gstr, esz, copy2_run, &c);
                    }
                } while (P.ndim && next_idx(idx, lo, hi, P.ndim));
            }
        }
    }
    return FERRY_OK;
}

/* Bytes of a wanted entry, in the dtype its tensor was put with. */
static uint64_t staged_bytes(const tget_t *g, const ferry_table_entry_t *e) {
    uint32_t tensor;
    ferry_tensor_info_t ti;
    if (!ferry_model_find(g->model, e->name, &tensor) || !ferry_model_tensor(g->model, tensor, &ti)) return 0;
    return entry_bytes(e, ti.dtype);
}

/* Host copies of GPU entries to get into (each checked to be device
 * memory of the member's GPU first). */
static ferry_status_t stage_gets(ferry_table_t *t, const tget_t *g, const ferry_table_entry_t *entries, size_t n,
                                 ferry_table_entry_t **out) {
    ferry_table_entry_t *w = ferry_calloc(t->m.ctx, n ? n : 1, sizeof *w);
    if (!w) return ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory");
    ferry_status_t st = FERRY_OK;
    for (size_t i = 0; i < n; i++) {
        w[i] = entries[i];
        w[i].data = NULL;
    }
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        uint64_t bytes = staged_bytes(g, &entries[i]);
        st = sync_check_device(&t->m, "table entry", entries[i].name, entries[i].data, bytes ? bytes : 1);
        if (st == FERRY_OK && !(w[i].data = malloc(bytes ? bytes : 1)))
            st = ferry_fail(&t->m.err, FERRY_ERR_NO_MEMORY, "out of memory staging %s", entries[i].name);
    }
    if (st != FERRY_OK) {
        for (size_t i = 0; i < n; i++) free(w[i].data);
        ferry_free(t->m.ctx, w);
        return st;
    }
    *out = w;
    return FERRY_OK;
}

ferry_status_t ferry_table_multi_get(ferry_table_t *t, uint64_t seq_id, ferry_table_entry_t *entries, size_t n,
                                     uint32_t timeout_ms) {
    if (!t || (!entries && n)) return FERRY_ERR_INVALID_ARGUMENT;
    for (size_t i = 0; i < n; i++) {
        ferry_status_t st = check_entry(t, &entries[i], false);
        if (st != FERRY_OK) return st;
    }
    meta_table_contents_t *tc = NULL;
    ferry_status_t st = meta_table_get(t->m.meta, seq_id, timeout_ms, &tc, &t->m.err);
    if (st != FERRY_OK) return st;
    tget_t g = {.tc = tc};
    ferry_plan_t *plan = NULL;
    st = resolve_peers(t, g.tc);
    if (st == FERRY_OK) st = build_layouts(t, &g, entries, n);
    if (st == FERRY_OK) {
        ferry_plan_params_t pp = {.field_mask = FERRY_PLAN_PARAM_PACK_BELOW, .pack_below = 0};
        st = ferry_plan_build(t->m.ctx, g.src, g.dst, &pp, &plan);
        if (st != FERRY_OK) st = ferry_fail(&t->m.err, st, "table get from sequence %llu: %s", (unsigned long long)seq_id,
                                            ferry_ctx_error(t->m.ctx));
        else if (ferry_plan_quant_op_count(plan))
            st = ferry_fail(&t->m.err, FERRY_ERR_UNSUPPORTED, "table get: FP8 destinations of bf16/fp32 entries are "
                                                              "not supported (tables move tensors as they are)");
    }
    /* GPU destinations: the get lands and is verified in host copies, which
       go to the GPU only once every tile checked out */
    ferry_table_entry_t *work = entries;
    if (st == FERRY_OK && t->m.dev) st = stage_gets(t, &g, entries, n, &work);
    if (st == FERRY_OK) st = pull_ops(t, plan, &g, work);
    if (st == FERRY_OK) st = verify_tiles(t, &g, work, n);
    if (work != entries) {
        for (size_t i = 0; i < n; i++) {
            uint64_t bytes = st == FERRY_OK ? staged_bytes(&g, &work[i]) : 0;
            if (bytes && st == FERRY_OK) st = sync_dev_copy(t->m.dev, entries[i].data, work[i].data, bytes, &t->m.err);
        }
        if (st == FERRY_OK) st = sync_dev_wait(t->m.dev, &t->m.err);
        for (size_t i = 0; i < n; i++) free(work[i].data);
        ferry_free(t->m.ctx, work);
    }
    ferry_plan_destroy(plan);
    ferry_free(t->m.ctx, g.src_base);
    ferry_layout_destroy(g.src);
    ferry_layout_destroy(g.dst);
    ferry_model_destroy(g.model);
    meta_table_contents_free(tc);
    return st;
}

ferry_status_t ferry_table_get(ferry_table_t *t, uint64_t seq_id, ferry_table_entry_t *entry, uint32_t timeout_ms) {
    return ferry_table_multi_get(t, seq_id, entry, 1, timeout_ms);
}

/* ---- lifetime -------------------------------------------------------------------- */

/* A restarted service learns every sequence this member completed. */
static ferry_status_t table_replay(meta_client_t *c, void *opaque, ferry_errbuf_t *err) {
    ferry_table_t *t = opaque;
    ferry_status_t st = FERRY_OK;
    for (size_t i = 0; i < t->nseqs && st == FERRY_OK; i++) {
        if (!t->seqs[i].completed) continue;
        meta_bytes_t region;
        meta_table_seq_t seq = seq_sent(&t->seqs[i], &region);
        st = meta_table_complete(c, &seq, err);
    }
    return st;
}

ferry_status_t ferry_table_create(ferry_ctx_t *ctx, const ferry_sync_params_t *params, ferry_table_t **out) {
    if (!ctx || !out) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_table_t *t = ferry_calloc(ctx, 1, sizeof *t);
    if (!t) return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "out of memory creating a table");
    ferry_status_t st = sync_member_init(&t->m, ctx, META_ROLE_TABLE, NULL, params);
    if (st != FERRY_OK) {
        ferry_free(ctx, t);
        return st;
    }
    t->peers = ferry_calloc(ctx, t->m.p.world, sizeof *t->peers);
    if (!t->peers) st = ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "out of memory");
    if (st == FERRY_OK) st = sync_member_connect(&t->m, table_replay, t);
    if (st != FERRY_OK) {
        ferry_table_destroy(t);
        return st;
    }
    *out = t;
    return FERRY_OK;
}

void ferry_table_destroy(ferry_table_t *t) {
    if (!t) return;
    for (size_t i = 0; i < t->nseqs; i++) seq_free(t, &t->seqs[i]);
    ferry_free(t->m.ctx, t->seqs);
    for (uint32_t r = 0; t->peers && r < t->m.p.world; r++) sync_regions_free(&t->peers[r], t->m.ctx);
    ferry_free(t->m.ctx, t->peers);
    free(t->scratch);
    sync_member_fini(&t->m);
    ferry_free(t->m.ctx, t);
}
