/* The host side of applying deltas on a GPU (codec/delta_cuda.h): frames
 * parsed and checked here, their bytes and the tables of delta_kern.h
 * copied to the device, the passes of delta.cu run, and each region's
 * outcome read back. */
#include "codec/delta_cuda.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/delta_groups.h"
#include "codec/delta_kern.h"
#include "common/cuda.h"
#include "common/hash.h"
#include "ferry/ctx.h"

_Static_assert(DK_PACK_RANK_BITS >= DELTA_SUB_LOG2_MAX, "a sub-block's ranks fit a packed entry (delta_kern.h)");

_Static_assert((int)DK_UNCHANGED_CHUNK == (int)CHUNK_UNCHANGED && (int)DK_SPARSE_CHUNK == (int)CHUNK_SPARSE &&
                   (int)DK_RAW_CHUNK == (int)CHUNK_RAW,
               "chunk modes");

/* A batch of format 2 frames is checked and decoded in groups of
   consecutive items, one per GROUP_MIN bytes of frames, up to GROUPS_MAX
   and up to one per item, each group's passes starting once its bytes are
   on the device. (Format 1 is not: its decode is bound by its longest
   class stream, however few the classes, so each group would pay it
   again.) H200, lr 1e-6, 16 frames of 4.3 MiB (session 18): 4 groups
   0.0084 s, 8 groups 0.0086 s, 16 groups 0.0088 s; each group costs the
   CPU its enqueues, and the last one's decode is the GPU's to wait for. */
#define GROUPS_MAX 8u
#define GROUP_MIN ((size_t)16 << 20)
#define DECS 2u /* streams the groups' check and decode passes take in turn */
#define NEV (1 + 3 * GROUPS_MAX + 2)

struct ferry_delta_cuda {
    int device;
    unsigned sms;
    ferry_ctx_t *ctx;
    ferry_delta_codec_t *codec; /* peeks at frames */
    /* device scratch, grow-only */
    uint8_t *d_frames;
    size_t cap_frames;
    dk_chunk_t *d_chunks;
    uint32_t *d_status;
    uint8_t *d_applied;
    uint64_t *d_hashes;
    uint32_t *d_lists; /* sparse chunks, raw chunks, chunks to restore: cap_chunks each */
    size_t cap_chunks;
    dk_class_t *d_classes;
    uint32_t *d_cls_sum;
    size_t cap_classes;
    dk_sub_t *d_subs;
    size_t cap_subs;
    uint32_t *d_rank;
    int64_t *d_delta;
    size_t cap_changes;
    uint8_t *d_save;
    size_t cap_save;
    /* pinned host memory, grow-only */
    dk_chunk_t *h_chunks;
    uint32_t *h_status;
    uint64_t *h_hashes;
    uint32_t *h_lists;
    size_t hcap_chunks;
    dk_class_t *h_classes;
    size_t hcap_classes;
    /* host memory, grow-only: per chunk its item */
    size_t *chunk_item;
    size_t cap_chunk_item;
    /* Streams of the object's own, non-blocking (they neither wait on
       nor hold up the legacy default stream; events order them against
       the caller's stream): the frames are copied on `copy`, all queued
       at once; with groups, each group's pull, pre and decode passes run
       on dec[g % DECS] (the highest priority), so that they wait only for
       their own group's bytes and may overlap the group before's; the
       write pass runs on the caller's stream once every group is decoded.
       copied[g]: group g's bytes are on the device. */
    cudaStream_t copy, dec[DECS];
    size_t group_min; /* 0: GROUP_MIN */
    cudaEvent_t copied[GROUPS_MAX];
    /* the last batch, timed: the start, then per group before its pre
       pass, before its decode and after it, then before and after the
       write pass */
    cudaEvent_t ev[NEV];
    ferry_delta_cuda_times_t times;
};

/* A CUDA failure, reported; cleared as the last error too (none here is
   sticky): a failed copy, event or allocation would otherwise be taken for
   the next launch's error, in this call or the next one. */
static ferry_status_t cuda_fail(ferry_errbuf_t *err, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
    return ferry_cuda_fail(err, e == cudaErrorMemoryAllocation ? FERRY_ERR_NO_MEMORY : FERRY_ERR_IO, e, what);
}

static ferry_status_t enter(const ferry_delta_cuda_t *d, int *prev, ferry_errbuf_t *err) {
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != d->device) e = cudaSetDevice(d->device);
    return e == cudaSuccess ? FERRY_OK : cuda_fail(err, e, "delta apply: selecting the GPU");
}
static void leave(const ferry_delta_cuda_t *d, int prev) {
    if (prev != d->device) cudaSetDevice(prev);
}

/* The streams and events, those that were made (the object's device current). */
static void destroy_sync(ferry_delta_cuda_t *d) {
    for (unsigned i = 0; i < NEV; i++)
        if (d->ev[i]) cudaEventDestroy(d->ev[i]);
    for (unsigned i = 0; i < GROUPS_MAX; i++)
        if (d->copied[i]) cudaEventDestroy(d->copied[i]);
    if (d->copy) cudaStreamDestroy(d->copy);
    for (unsigned i = 0; i < DECS; i++)
        if (d->dec[i]) cudaStreamDestroy(d->dec[i]);
}

ferry_status_t ferry_delta_cuda_create(int device, ferry_delta_cuda_t **out, ferry_errbuf_t *err) {
    if (!out) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta apply: out is NULL");
    *out = NULL;
    ferry_status_t st = ferry_cuda_init(err);
    if (st != FERRY_OK) return st;
    int count = 0, sms = 0;
    cudaError_t e;
    e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDeviceCount");
    if (device < 0 || device >= count)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta apply: no GPU %d (this host has %d)", device, count);
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e != cudaSuccess) return cuda_fail(err, e, "delta apply: asking the GPU's size");
    int uva = 0; /* the kernels read the tables from pinned host memory at their host addresses (dk_pull) */
    e = cudaDeviceGetAttribute(&uva, cudaDevAttrUnifiedAddressing, device);
    if (e != cudaSuccess) return cuda_fail(err, e, "delta apply: asking the GPU for unified addressing");
    if (!uva)
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "delta apply: GPU %d has no unified addressing with the host",
                          device);
    ferry_delta_cuda_t *d = calloc(1, sizeof *d);
    if (!d) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    d->device = device;
    d->sms = sms > 0 ? (unsigned)sms : 1;
    int prev = 0;
    if ((st = enter(d, &prev, err)) != FERRY_OK) {
        free(d);
        return st;
    }
    e = cudaStreamCreateWithFlags(&d->copy, cudaStreamNonBlocking);
    int least = 0, greatest = 0; /* the decode streams first where blocks wait for room (the write pass's) */
    if (e == cudaSuccess) e = cudaDeviceGetStreamPriorityRange(&least, &greatest);
    for (unsigned i = 0; i < DECS && e == cudaSuccess; i++)
        e = cudaStreamCreateWithPriority(&d->dec[i], cudaStreamNonBlocking, greatest);
    for (unsigned i = 0; i < NEV && e == cudaSuccess; i++) e = cudaEventCreate(&d->ev[i]);
    for (unsigned i = 0; i < GROUPS_MAX && e == cudaSuccess; i++)
        e = cudaEventCreateWithFlags(&d->copied[i], cudaEventDisableTiming);
    const cudaError_t ek = e == cudaSuccess ? dk_init() : cudaSuccess;
    if (e != cudaSuccess || ek != cudaSuccess) destroy_sync(d);
    leave(d, prev);
    if (e != cudaSuccess || ek != cudaSuccess) {
        free(d);
        return e != cudaSuccess ? cuda_fail(err, e, "delta apply: making its streams and events")
                                : cuda_fail(err, ek, "delta apply: setting the write pass's shared memory");
    }
    char detail[256] = "";
    if (ferry_ctx_create(NULL, &d->ctx, detail, sizeof detail) != FERRY_OK ||
        ferry_delta_codec_create(d->ctx, &d->codec) != FERRY_OK) {
        ferry_ctx_destroy(d->ctx);
        if (enter(d, &prev, err) == FERRY_OK) {
            destroy_sync(d);
            leave(d, prev);
        }
        free(d);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta apply: making a codec: %s", detail);
    }
    *out = d;
    return FERRY_OK;
}

static void free_scratch(ferry_delta_cuda_t *d) {
    cudaFree(d->d_frames);
    cudaFree(d->d_chunks);
    cudaFree(d->d_status);
    cudaFree(d->d_applied);
    cudaFree(d->d_hashes);
    cudaFree(d->d_lists);
    cudaFree(d->d_classes);
    cudaFree(d->d_cls_sum);
    cudaFree(d->d_subs);
    cudaFree(d->d_rank);
    cudaFree(d->d_delta);
    cudaFree(d->d_save);
    cudaFreeHost(d->h_chunks);
    cudaFreeHost(d->h_status);
    cudaFreeHost(d->h_hashes);
    cudaFreeHost(d->h_lists);
    cudaFreeHost(d->h_classes);
}

void ferry_delta_cuda_destroy(ferry_delta_cuda_t *d) {
    if (!d) return;
    int prev = 0;
    ferry_errbuf_t ignored;
    bool entered = enter(d, &prev, &ignored) == FERRY_OK;
    free_scratch(d);
    destroy_sync(d);
    if (entered) leave(d, prev);
    free(d->chunk_item);
    ferry_delta_codec_destroy(d->codec);
    ferry_ctx_destroy(d->ctx);
    free(d);
}

void ferry_delta_cuda_set_group_min(ferry_delta_cuda_t *d, size_t bytes) {
    if (d) d->group_min = bytes;
}

void ferry_delta_cuda_last_times(const ferry_delta_cuda_t *d, ferry_delta_cuda_times_t *out) {
    *out = d ? d->times : (ferry_delta_cuda_times_t){0};
}

size_t ferry_delta_cuda_device_bytes(const ferry_delta_cuda_t *d) {
    if (!d) return 0;
    return d->cap_frames +
           d->cap_chunks * (sizeof(dk_chunk_t) + sizeof(uint32_t) + 1 + sizeof(uint64_t) + 3 * sizeof(uint32_t)) +
           d->cap_classes * (sizeof(dk_class_t) + 2 * sizeof(uint32_t)) + d->cap_subs * sizeof(dk_sub_t) +
           d->cap_changes * (sizeof(uint32_t) + sizeof(int64_t)) + d->cap_save;
}

/* Buffers (device memory, or pinned host memory when host), one per
   pointer in ptrs, each of sizes[i] bytes per item, grown together (old
   contents dropped) to at least need items; one capacity for all. */
static ferry_status_t grow_bufs(bool host, void **ptrs[], const size_t *sizes, size_t nptr, size_t *cap, size_t need,
                                const char *what, ferry_errbuf_t *err) {
    if (need <= *cap) return FERRY_OK;
    size_t c = need < 2 * *cap ? 2 * *cap : need;
    for (size_t i = 0; i < nptr; i++) {
        if (host) cudaFreeHost(*ptrs[i]);
        else cudaFree(*ptrs[i]);
        *ptrs[i] = NULL;
    }
    *cap = 0;
    for (size_t i = 0; i < nptr; i++) {
        if (c > SIZE_MAX / sizes[i]) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "%s: %zu entries", what, c);
        cudaError_t e = host ? cudaMallocHost(ptrs[i], c * sizes[i]) : cudaMalloc(ptrs[i], c * sizes[i]);
        if (e != cudaSuccess) {
            (void)cudaGetLastError(); /* not sticky: else the next launch's check would report it */
            return cuda_fail(err, e, what);
        }
    }
    *cap = c;
    return FERRY_OK;
}

/* A format 2 class's sub-streams (0 in format 1, and for a class without
   changes, whose sub-streams are all empty). */
static uint32_t class_subs(const delta_chunk_t *h, const delta_class_t *q) {
    return h->sub_log2 && q->changed ? delta_nsub(h->elems, h->sub_log2) : 0;
}

/* Entries of the decoded arrays a class takes: its changes (format 1), or
   the most its sub-streams' bits can hold (format 2: each change takes at
   least a Rice code of k_gap + 1 bits and a sign bit), which the device
   splits between the sub-streams from their lengths, each sub-stream's
   rounded up to 4 (dk_table). The decoders write 16 bytes at a time
   (decode_class, decode_sub), so a sparse chunk's first slot is a
   multiple of 4 and so is each class's count here. delta_chunk_parse
   bounds both by the class's bytes. */
static size_t class_slots(const delta_chunk_t *h, const delta_class_t *q) {
    if (!h->sub_log2 || !q->changed) return (q->changed + 3) & ~(size_t)3;
    uint64_t table = delta_table_bytes(class_subs(h, q), q->len_bits);
    size_t s = table > q->len ? 0 : (size_t)((q->len - table) * 8 / (2 + q->k_gap));
    return (s + 3 * (size_t)class_subs(h, q) + 3) & ~(size_t)3;
}

/* The device tables' sizes that a part of a batch needs (frames apart:
   their capacity is settled before any table is). */
typedef struct sizes {
    size_t chunks, classes, subs, slots, save;
} sizes_t;

static bool sizes_fit(const ferry_delta_cuda_t *d, const sizes_t *z) {
    return z->chunks <= d->cap_chunks && z->chunks <= d->hcap_chunks && z->chunks <= d->cap_chunk_item &&
           z->classes <= d->cap_classes && z->classes <= d->hcap_classes && z->subs <= d->cap_subs &&
           z->slots <= d->cap_changes && z->save <= d->cap_save;
}

/* Room for tables of these sizes (the old contents dropped: nothing may
   be in flight that uses them). */
static ferry_status_t grow(ferry_delta_cuda_t *d, const sizes_t *z, ferry_errbuf_t *err) {
    void **save_p[] = {(void **)&d->d_save};
    void **chunk_p[] = {(void **)&d->d_chunks, (void **)&d->d_status, (void **)&d->d_applied, (void **)&d->d_hashes,
                        (void **)&d->d_lists};
    void **class_p[] = {(void **)&d->d_classes, (void **)&d->d_cls_sum}, **sub_p[] = {(void **)&d->d_subs};
    void **change_p[] = {(void **)&d->d_rank, (void **)&d->d_delta};
    void **hchunk_p[] = {(void **)&d->h_chunks, (void **)&d->h_status, (void **)&d->h_hashes, (void **)&d->h_lists};
    void **hclass_p[] = {(void **)&d->h_classes};
    const size_t one[] = {1}, chunk_s[] = {sizeof(dk_chunk_t), 4, 1, 8, 3 * 4}, class_s[] = {sizeof(dk_class_t), 2 * 4},
                 sub_s[] = {sizeof(dk_sub_t)}, change_s[] = {4, 8}, hchunk_s[] = {sizeof(dk_chunk_t), 4, 8, 3 * 4},
                 hclass_s[] = {sizeof(dk_class_t)};
    ferry_status_t st;
    if ((st = grow_bufs(false, chunk_p, chunk_s, 5, &d->cap_chunks, z->chunks, "delta apply: cudaMalloc (chunks)",
                        err)) ||
        (st = grow_bufs(false, class_p, class_s, 2, &d->cap_classes, z->classes, "delta apply: cudaMalloc (classes)",
                        err)) ||
        (st = grow_bufs(false, sub_p, sub_s, 1, &d->cap_subs, z->subs, "delta apply: cudaMalloc (sub-streams)", err)) ||
        (st = grow_bufs(false, change_p, change_s, 2, &d->cap_changes, z->slots, "delta apply: cudaMalloc (changes)",
                        err)) ||
        (st = grow_bufs(false, save_p, one, 1, &d->cap_save, z->save, "delta apply: cudaMalloc (raw chunks' contents)",
                        err)) ||
        (st = grow_bufs(true, hchunk_p, hchunk_s, 4, &d->hcap_chunks, z->chunks,
                        "delta apply: cudaMallocHost (chunks)", err)) ||
        (st = grow_bufs(true, hclass_p, hclass_s, 1, &d->hcap_classes, z->classes,
                        "delta apply: cudaMallocHost (classes)", err)))
        return st;
    if (z->chunks > d->cap_chunk_item) {
        size_t *p = realloc(d->chunk_item, z->chunks * sizeof *p);
        if (!p) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta apply: out of memory");
        d->chunk_item = p;
        d->cap_chunk_item = z->chunks;
    }
    return FERRY_OK;
}

/* Where the tables stand as a batch is filled: the next chunk, class,
   slot and sub-stream, the raw chunks' saved bytes, the sparse and raw
   chunks listed (h_lists, and h_lists + hcap_chunks). */
typedef struct fill {
    size_t nc, ncls, nch, nsub, nsave, nsparse, nraw;
} fill_t;

/* The sizes that a group's tables need on top of `at`'s. */
static sizes_t sizes_after(const fill_t *at, const sizes_t *g) {
    return (sizes_t){.chunks = at->nc + g->chunks, .classes = at->ncls + g->classes, .subs = at->nsub + g->subs,
                     .slots = at->nch + g->slots, .save = at->nsave + g->save};
}

static void sizes_add(sizes_t *a, const sizes_t *b) {
    a->chunks += b->chunks, a->classes += b->classes, a->subs += b->subs, a->slots += b->slots, a->save += b->save;
}

/* Chunk c of item i (record rec, len bytes inside it->delta, header h;
   the frame at `dev` on the device once copied) into the host tables at *at. */
static void fill_chunk(ferry_delta_cuda_t *d, const ferry_delta_cuda_item_t *it, size_t i, uint64_t dev,
                       uint32_t chunk_elems, uint32_t c, const uint8_t *rec, size_t len, const delta_chunk_t *h,
                       fill_t *at) {
    const uint8_t *f = it->delta;
    const uint32_t w = h->width;
    dk_chunk_t *k = &d->h_chunks[at->nc];
    if (h->mode == CHUNK_SPARSE) at->nch = (at->nch + 3) & ~(size_t)3; /* (class_slots) */
    *k = (dk_chunk_t){
        .region = (uint64_t)(uintptr_t)it->region + (uint64_t)c * chunk_elems * w,
        .rec = dev + (uint64_t)(rec - f) + CHUNK_HEADER,
        .payload = dev + (uint64_t)(h->payload - f),
        .base_sum = h->base_sum,
        .next_sum = h->next_sum,
        .rec_sum = h->rec_sum,
        .rec_seed = XXH3_64bits(rec, 32),
        .change0 = at->nch,
        .save = at->nsave,
        .rec_len = (uint32_t)(len - CHUNK_HEADER),
        .elems = h->elems,
        .mode = h->mode,
        .width = w,
        .classes = h->classes,
        .class0 = (uint32_t)at->ncls,
        .changed = h->changed,
        .sub_log2 = h->mode == CHUNK_SPARSE ? h->sub_log2 : 0,
    };
    d->chunk_item[at->nc] = i;
    if (h->mode == CHUNK_SPARSE) {
        uint64_t s = k->payload;
        for (uint32_t x = 0; x < h->classes; x++) {
            const delta_class_t *q = &h->cls[x];
            d->h_classes[at->ncls++] = (dk_class_t){
                .stream = s, .change0 = at->nch, .lower = q->lower, .count = q->count,
                .changed = q->changed, .nonunit = q->nonunit, .len = q->len, .k_gap = q->k_gap,
                .k_nu = q->k_nu, .k_mag = q->k_mag, .chunk = (uint32_t)at->nc, .len_bits = q->len_bits,
                .nsub = class_subs(h, q), .sub0 = (uint32_t)at->nsub};
            s += q->len;
            at->nch += class_slots(h, q);
            at->nsub += class_subs(h, q);
        }
        k->changed = (uint32_t)(at->nch - k->change0); /* format 2: its slots, for the undo */
        d->h_lists[at->nsparse++] = (uint32_t)at->nc;
    } else if (h->mode == CHUNK_RAW) {
        d->h_lists[d->hcap_chunks + at->nraw++] = (uint32_t)at->nc;
        at->nsave += (size_t)h->elems * w;
    }
    at->nc++;
}

/* Item i's chunks into the host tables from *at on, its records parsed
   again (its frame at `frame` on the device, once copied): where the
   check's walk could not fill them (walk_chunk). */
static ferry_status_t fill_item(ferry_delta_cuda_t *d, const ferry_delta_cuda_item_t *it, size_t i,
                                const uint8_t *frame, fill_t *at, ferry_errbuf_t *err) {
    const uint8_t *f = it->delta;
    uint32_t nchunks = get_u32(f + 20), chunk_elems = get_u32(f + 16), w = delta_width(it->dtype);
    size_t off = DELTA_FRAME_HEADER + (size_t)nchunks * 4; /* peek checked that the lengths add up */
    delta_ahead_t ahead = delta_ahead_start(f, nchunks);
    for (uint32_t c = 0; c < nchunks; c++) {
        delta_ahead_step(&ahead);
        size_t len = get_u32(f + DELTA_FRAME_HEADER + 4 * (size_t)c);
        delta_chunk_t h;
        ferry_errbuf_t ignored;
        if (delta_chunk_parse(f + off, len, w, false, &h, &ignored) != FERRY_OK)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "delta %zu: chunk %u: a record peek accepted fails to parse",
                              i, c);
        fill_chunk(d, it, i, (uint64_t)(uintptr_t)frame, chunk_elems, c, f + off, len, &h, at);
        off += len;
    }
    return FERRY_OK;
}

/* One record's share of the sizes (class_slots; need's 3 slots per sparse
   chunk are slack: class_slots keeps every class's slots a multiple of 4). */
static sizes_t chunk_sizes(const delta_chunk_t *h) {
    sizes_t z = {.chunks = 1};
    if (h->mode == CHUNK_RAW) z.save = (size_t)h->elems * h->width;
    if (h->mode != CHUNK_SPARSE) return z;
    z.classes = h->classes;
    z.slots = 3; /* (slack, above) */
    for (uint32_t k = 0; k < h->classes; k++) {
        z.slots += class_slots(h, &h->cls[k]);
        z.subs += class_subs(h, &h->cls[k]);
    }
    return z;
}

/* An item's walk of its records in its checks (delta_peek_each's
   callback): each record's sizes counted, and, while the tables have room
   (at not NULL, full false), the record put into them: one walk of each
   frame, not a second to fill the tables (0.65 ms of CPU for the 4096
   records of 8 GiB of bf16 on the GPU host, session 18, beside 0.40 for
   the checks). */
typedef struct walk {
    ferry_delta_cuda_t *d;
    const ferry_delta_cuda_item_t *it;
    const ferry_delta_info_t *info; /* the frame's header, read before the records */
    size_t i;                       /* the item's index in the batch */
    uint64_t dev;                   /* its frame's device address */
    sizes_t mine;                   /* its records' sizes so far */
    fill_t *at;                     /* the tables (NULL: sizes only) */
    bool full;                      /* a record found no room: the rest counted only */
} walk_t;

static void walk_chunk(void *ctx, uint32_t c, const uint8_t *rec, size_t len, const delta_chunk_t *h) {
    walk_t *k = ctx;
    const sizes_t z = chunk_sizes(h);
    sizes_add(&k->mine, &z);
    if (!k->at || k->full) return;
    const sizes_t after = sizes_after(k->at, &z); /* as `need` counts it: then no room here means a cut */
    if (!sizes_fit(k->d, &after)) {
        k->full = true;
        return;
    }
    fill_chunk(k->d, k->it, k->i, k->dev, k->info->chunk_elems, c, rec, len, h, k->at);
}

/* An item's own checks: its frame peeks well and is for this region; *z
   gets its sizes when it is good. Its records go into the tables at *at
   as they are checked while they have room (at NULL: none); when a record
   of a good item found none, *full is set (the item's entries before it
   stay: the caller walks the group again). On failure *at is as it was
   and *full unchanged. */
static ferry_status_t item_check(ferry_delta_cuda_t *d, const ferry_delta_cuda_item_t *it, size_t i,
                                 const uint8_t *frame, ferry_delta_info_t *info, sizes_t *z, fill_t *at, bool *full,
                                 char *why, size_t why_len) {
    if (!it->delta || !it->len) {
        snprintf(why, why_len, "no delta (NULL or 0 bytes)");
        return FERRY_ERR_INVALID_ARGUMENT;
    }
    const fill_t before = at ? *at : (fill_t){0};
    walk_t k = {.d = d, .it = it, .info = info, .i = i, .dev = (uint64_t)(uintptr_t)frame, .at = at};
    ferry_status_t st = delta_peek_each(d->codec, it->delta, it->len, info, walk_chunk, &k);
    const uint32_t w = st == FERRY_OK ? delta_width(info->dtype) : 0;
    if (st != FERRY_OK) {
        snprintf(why, why_len, "%s", ferry_delta_codec_detail(d->codec));
    } else if (info->dtype != it->dtype) {
        snprintf(why, why_len, "a delta of %s applied to a region of %s", ferry_dtype_name(info->dtype),
                 ferry_dtype_name(it->dtype));
        st = FERRY_ERR_MISMATCH;
    } else if (info->elems != it->elems) {
        snprintf(why, why_len, "a delta of %llu elements applied to %llu elements", (unsigned long long)info->elems,
                 (unsigned long long)it->elems);
        st = FERRY_ERR_MISMATCH;
    } else if (it->base_version != FERRY_DELTA_ANY_BASE && it->base_version != info->base_version) {
        snprintf(why, why_len, "the delta is from version %llu, the region holds version %llu",
                 (unsigned long long)info->base_version, (unsigned long long)it->base_version);
        st = FERRY_ERR_MISMATCH;
    } else if (it->elems && (!it->region || (uintptr_t)it->region % w)) {
        snprintf(why, why_len, "region %p is NULL or not aligned to its %u-byte elements", it->region, w);
        st = FERRY_ERR_INVALID_ARGUMENT;
    }
    if (st != FERRY_OK) {
        if (at) *at = before; /* its records' entries, if any were filled, are left unused */
        return st;
    }
    *full |= k.full;
    sizes_add(z, &k.mine); /* (its chunks: info->chunks, one a record) */
    return FERRY_OK;
}

/* Why chunk c failed, once restored (hashes read back). */
static ferry_status_t chunk_blame(const ferry_delta_cuda_t *d, uint32_t c, uint32_t idx, char *why, size_t why_len) {
    const dk_chunk_t *ch = &d->h_chunks[c];
    uint32_t code = d->h_status[c];
    bool base_ok = d->h_hashes[c] == ch->base_sum;
    switch (code) {
    case DK_REC_SUM:
        snprintf(why, why_len, "chunk %u: record checksum mismatch (damaged bytes)", idx);
        return FERRY_ERR_CORRUPT;
    case DK_UNCHANGED:
        snprintf(why, why_len, "the region is not this delta's base (chunk %u, unchanged, differs)", idx);
        return FERRY_ERR_MISMATCH;
    case DK_RAW_BASE:
        snprintf(why, why_len, "the region is not this delta's base (chunk %u: base checksum differs)", idx);
        return FERRY_ERR_MISMATCH;
    case DK_RAW_DATA:
        snprintf(why, why_len, "chunk %u: raw chunk's contents do not match its checksum", idx);
        return FERRY_ERR_CORRUPT;
    case DK_COUNT:
        snprintf(why, why_len, "the region is not this delta's base: chunk %u's magnitude classes hold other counts",
                 idx);
        return FERRY_ERR_MISMATCH;
    default: break;
    }
    if (!base_ok) {
        snprintf(why, why_len, "the region is not this delta's base (chunk %u: base checksum differs)", idx);
        return FERRY_ERR_MISMATCH;
    }
    snprintf(why, why_len, "chunk %u: %s", idx,
             code == DK_STREAM  ? "a class stream is malformed, cut short or too long"
             : code == DK_RANGE ? "a value change out of the element's range"
             : code == DK_PAST  ? "stream malformed, a change past the class's elements"
                                : "the applied chunk does not match the delta's checksum");
    return FERRY_ERR_CORRUPT;
}

/* A CUDA failure once work is enqueued: the streams drained first (the
   object's and the caller's), so that nothing in flight reads the
   caller's frames or the object's tables once the call returns. */
static void drain(ferry_delta_cuda_t *d, cudaStream_t stream) {
    cudaStreamSynchronize(d->copy);
    for (unsigned i = 0; i < DECS; i++) cudaStreamSynchronize(d->dec[i]);
    cudaStreamSynchronize(stream); /* the write pass, the undo */
}
static ferry_status_t fail_drained(ferry_delta_cuda_t *d, cudaStream_t stream, ferry_errbuf_t *err, cudaError_t e,
                                   const char *what) {
    drain(d, stream);
    (void)cudaGetLastError(); /* (as cuda_fail) */
    return ferry_cuda_fail(err, FERRY_ERR_IO, e, what); /* passes may have run: the regions are unknown */
}

/* Items [from, to)'s frames to the device from *foff on, on the copy
   stream: every item with a frame (bytes[i] > 0, its place rounded up to
   16), checked or not, so that a group's bytes travel while the CPU checks
   them; a frame that fails its checks is never read there. */
static cudaError_t copy_frames(ferry_delta_cuda_t *d, const ferry_delta_cuda_item_t *items, const size_t *bytes,
                               size_t from, size_t to, size_t *foff) {
    for (size_t i = from; i < to; i++) {
        if (!bytes[i]) continue;
        cudaError_t e = cudaMemcpyAsync(d->d_frames + *foff, items[i].delta, items[i].len, cudaMemcpyHostToDevice,
                                        d->copy);
        if (e != cudaSuccess) return e;
        *foff += bytes[i];
    }
    return cudaSuccess;
}

/* The write pass for the batch's ns sparse and nr raw chunks (the lists),
   on stream between events ev[0] and ev[1]: the sparse ones by kernel
   (dk_place_kind); both lists pulled to the device (dk_pull), as the
   group tables are. */
static cudaError_t write_enqueue(ferry_delta_cuda_t *d, const dk_batch_t *b, size_t ns, size_t nr, cudaStream_t stream,
                                 cudaEvent_t *ev) {
    const uint32_t *sparse = d->h_lists, *raw = d->h_lists + d->hcap_chunks;
    uint32_t *tmp = d->h_lists + 2 * d->hcap_chunks, *d_sparse = d->d_lists, *d_raw = d->d_lists + d->cap_chunks;
    uint32_t nsp[DK_PLACE_KINDS] = {0};
    size_t k = 0;
    for (uint32_t kind = 0; kind < DK_PLACE_KINDS; kind++)
        for (size_t j = 0; j < ns; j++)
            if (dk_place_kind(d->h_chunks[sparse[j]].width, d->h_chunks[sparse[j]].sub_log2) == kind)
                tmp[k++] = sparse[j], nsp[kind]++;
    cudaError_t e;
    if ((e = dk_pull_enqueue(d_sparse, tmp, ns * 4, stream)) || (e = dk_pull_enqueue(d_raw, raw, nr * 4, stream)) ||
        (e = cudaEventRecord(ev[0], stream)) ||
        (e = dk_write_enqueue(b, d_sparse, nsp, d_raw, (uint32_t)nr, stream)))
        return e;
    return cudaEventRecord(ev[1], stream);
}

/* x * k, rounded up, within what an allocation could hold. */
static size_t scaled(size_t x, double k) {
    const double v = (double)x * k + 1;
    return v < (double)(SIZE_MAX / 1024) ? (size_t)v : SIZE_MAX / 1024;
}

/* A part of a batch: items [from, n), or [from, *to) where the tables
   would have to grow after a group's passes are enqueued (the rest is the
   next part, applied once this one is done: growing drops the tables'
   contents, which the undo at the end still needs). Every group's frames
   are queued for the copy engine first; then per group, in order, its
   items checked on the CPU while the groups before are decoded on the GPU,
   its tables filled and pulled to the device, its check and decode passes
   enqueued; then one write pass for every group. Then the outcome read
   back, failed items restored and blamed. */
static ferry_status_t part(ferry_delta_cuda_t *d, ferry_delta_cuda_item_t *items, size_t from, size_t n,
                           cudaStream_t stream, ferry_errbuf_t *err, size_t *to, size_t *first_bad, char *why,
                           size_t why_len, size_t *bytes, bool *bad) {
    /* 1. the groups (delta_groups.h), from the frames' sizes alone; the
       format from the first frame's header (format 1 goes in one group),
       checked with the rest later: a wrong guess costs time, not results */
    const size_t m = n - from;
    ferry_delta_cuda_item_t *const its = items + from;
    const double t0 = ferry_mono_s();
    *to = n;
    size_t frames = 0, nframes = 0;
    int format = 0;
    for (size_t i = 0; i < m; i++) {
        bytes[i] = its[i].delta && its[i].len ? (its[i].len + 15) & ~(size_t)15 : 0;
        frames += bytes[i], nframes += bytes[i] > 0;
        if (!format && its[i].len >= 6 && its[i].delta) {
            const uint8_t *f = its[i].delta;
            format = f[4] | f[5] << 8;
        }
    }
    size_t gfirst[GROUPS_MAX + 1], G = 1;
    gfirst[0] = 0, gfirst[1] = m;
    if (format != 1 && nframes > 1) {
        G = frames / (d->group_min ? d->group_min : GROUP_MIN);
        G = G < 1 ? 1 : G > GROUPS_MAX ? GROUPS_MAX : G;
        if (G > 1) G = delta_groups(bytes, m, G, frames, gfirst);
    }
    const bool groups = G > 1;
    ferry_status_t st = FERRY_OK;
    void **frame_p[] = {(void **)&d->d_frames};
    const size_t one[] = {1};
    if (frames && (st = grow_bufs(false, frame_p, one, 1, &d->cap_frames, frames, "delta apply: cudaMalloc (frames)",
                                  err)) != FERRY_OK)
        return st;

    /* 2. per group: checks, tables, check and decode passes */
    size_t foff = 0, cfoff = 0;
    fill_t at = {0};
    dk_batch_t b = {0};
    cudaError_t e;
    double host_s = 0;
    /* every group's frames queued at once, before any is checked: the copy
       engine then runs at its own pace, not the CPU's */
    if ((e = cudaEventRecord(d->ev[0], stream)) || (e = cudaStreamWaitEvent(d->copy, d->ev[0], 0)))
        return fail_drained(d, stream, err, e, "delta apply: starting");
    for (unsigned i = 0; i < DECS && groups; i++)
        if ((e = cudaStreamWaitEvent(d->dec[i], d->ev[0], 0)))
            return fail_drained(d, stream, err, e, "delta apply: starting");
    for (size_t g = 0; g < G; g++)
        if ((e = copy_frames(d, its, bytes, gfirst[g], gfirst[g + 1], &cfoff)) ||
            (e = cudaEventRecord(d->copied[g], d->copy)))
            return fail_drained(d, stream, err, e, "delta apply: copying the deltas to the GPU");
    for (size_t g = 0; g < G; g++) {
        /* the group's items checked, their records put into the tables as
           they are checked while the tables have room */
        sizes_t zg = {0};
        const fill_t at0 = at;
        bool full = false;
        size_t ioff = foff; /* each item's frame on the device */
        for (size_t i = gfirst[g]; i < gfirst[g + 1]; i++) {
            ferry_delta_cuda_item_t *it = &its[i];
            ferry_delta_info_t info;
            char w[FERRY_ERR_TEXT];
            it->status = item_check(d, it, from + i, d->d_frames + ioff, &info, &zg, full ? NULL : &at, &full, w,
                                    sizeof w);
            if (it->status != FERRY_OK && *first_bad == SIZE_MAX) *first_bad = from + i, snprintf(why, why_len, "%s", w);
            ioff += bytes[i];
        }
        const sizes_t need = sizes_after(&at0, &zg);
        bool filled = !full;
        if (g == 0) {
            /* nothing of this part uses the tables yet: grown for the whole
               part at this group's rate (so that neither a first call nor
               a batch larger than the last is cut into parts), or, where
               that much cannot be had, for the group */
            sizes_t est = need;
            if (G > 1) {
                size_t good = 0, refused = 0;
                for (size_t i = gfirst[0]; i < gfirst[1]; i++)
                    *(its[i].status == FERRY_OK ? &good : &refused) += bytes[i];
                const double scale = good ? (double)(frames - refused) / (double)good : 1.0;
                est = (sizes_t){scaled(need.chunks, scale), scaled(need.classes, scale), scaled(need.subs, scale),
                                scaled(need.slots, scale), scaled(need.save, scale)};
            }
            ferry_errbuf_t ignored;
            if (!sizes_fit(d, &est)) {
                filled = false; /* grown: the tables' contents are dropped */
                if (grow(d, &est, &ignored) != FERRY_OK && !sizes_fit(d, &need)) st = grow(d, &need, err);
            }
            if (st != FERRY_OK) {
                drain(d, stream); /* the frames' copies read the caller's memory */
                return st;
            }
            b = (dk_batch_t){.chunks = d->d_chunks, .classes = d->d_classes, .status = d->d_status,
                             .applied = d->d_applied, .rank = d->d_rank, .delta = d->d_delta, .save = d->d_save,
                             .hashes = d->d_hashes, .subs = d->d_subs, .cls_sum = d->d_cls_sum};
        } else if (!sizes_fit(d, &need)) { /* the rest is the next part */
            at = at0;
            *to = from + gfirst[g];
            G = g;
            break;
        }
        if (!filled) { /* a second walk: group 0 grew the tables (for a later group, no room means a cut) */
            at = at0;
            for (size_t i = gfirst[g], o = foff; i < gfirst[g + 1]; o += bytes[i++]) {
                ferry_delta_cuda_item_t *it = &its[i];
                if (it->status == FERRY_OK && fill_item(d, it, from + i, d->d_frames + o, &at, err) != FERRY_OK) {
                    drain(d, stream); /* cannot happen: peek parsed it */
                    return FERRY_ERR_CORRUPT;
                }
            }
        }
        foff = ioff;
        const size_t c0 = at0.nc, k0 = at0.ncls, s0 = at0.nsub;
        b.chunk0 = (uint32_t)c0, b.nchunks = (uint32_t)(at.nc - c0), b.class0 = (uint32_t)k0;
        b.nclasses = (uint32_t)(at.ncls - k0), b.sub0 = (uint32_t)s0, b.nsubs = (uint32_t)(at.nsub - s0);
        cudaStream_t ds = groups ? d->dec[g % DECS] : stream; /* pre and decode */
        cudaEvent_t *ev = d->ev + 1 + 3 * g;
        if (g == 0) host_s = ferry_mono_s() - t0; /* the CPU's share before the GPU has work */
        if ((e = dk_pull_enqueue(d->d_chunks + c0, d->h_chunks + c0, (at.nc - c0) * sizeof(dk_chunk_t), ds)) ||
            (e = dk_pull_enqueue(d->d_classes + k0, d->h_classes + k0, (at.ncls - k0) * sizeof(dk_class_t), ds)) ||
            (e = cudaStreamWaitEvent(ds, d->copied[g], 0)) ||
            (at.nsub > s0 &&
             (e = cudaMemsetAsync(d->d_cls_sum + 2 * k0, 0, (at.ncls - k0) * 2 * sizeof(uint32_t), ds))) ||
            (e = cudaEventRecord(ev[0], ds)) || (e = dk_pre_enqueue(&b, d->sms, ds)) ||
            (e = cudaEventRecord(ev[1], ds)) || (e = dk_decode_enqueue(&b, d->sms, ds)) ||
            (e = cudaEventRecord(ev[2], ds)) || (groups && (e = cudaStreamWaitEvent(stream, ev[2], 0))))
            return fail_drained(d, stream, err, e, "delta apply: the GPU's passes");
    }

    /* 3. one write pass for every group, once all are decoded. A pass per
       group, each after its decode, had been a wave of blocks that ended
       together, with the next group's passes squeezed beside it: 1.02 ms a
       group on the H200 where the whole batch's pass takes 0.75 ms an
       eighth (docs/benchmarks.md, session 18) */
    b.chunk0 = 0, b.nchunks = (uint32_t)at.nc, b.class0 = 0, b.nclasses = (uint32_t)at.ncls, b.sub0 = 0;
    b.nsubs = (uint32_t)at.nsub;
    cudaEvent_t *wev = d->ev + 1 + 3 * GROUPS_MAX;
    if ((e = write_enqueue(d, &b, at.nsparse, at.nraw, stream, wev)) ||
        (at.nc && (e = cudaMemcpyAsync(d->h_status, d->d_status, at.nc * 4, cudaMemcpyDeviceToHost, stream))) ||
        (e = cudaStreamSynchronize(stream)) || (e = cudaStreamSynchronize(d->copy)))
        return fail_drained(d, stream, err, e, "delta apply: the GPU's passes");
    /* the copy stream synchronized too: a part cut short left the next group's frames queued */
    d->times = (ferry_delta_cuda_times_t){.groups = (uint32_t)G, .host_s = host_s};
    float ms = 0;
    for (size_t g = 0; g < G; g++) {
        const cudaEvent_t *ev = d->ev + 1 + 3 * g;
        if (g == 0 && cudaEventElapsedTime(&ms, d->ev[0], ev[0]) == cudaSuccess) d->times.copy_s = ms / 1e3;
        if (cudaEventElapsedTime(&ms, ev[0], ev[1]) == cudaSuccess) d->times.check_s += ms / 1e3;
        if (cudaEventElapsedTime(&ms, ev[1], ev[2]) == cudaSuccess) d->times.decode_s += ms / 1e3;
    }
    if (cudaEventElapsedTime(&ms, wev[0], wev[1]) == cudaSuccess) d->times.write_s = ms / 1e3;
    if (cudaEventElapsedTime(&ms, d->ev[0], wev[1]) == cudaSuccess) d->times.total_s = ms / 1e3;
    (void)cudaGetLastError(); /* a timing read that failed must not be taken for the next launch's error */
    if (!at.nc) return FERRY_OK;

    /* 4. items with a failed chunk restored, then their failed chunks blamed */
    uint32_t *undo = d->h_lists + 2 * d->hcap_chunks, *d_undo = d->d_lists + 2 * d->cap_chunks;
    size_t nundo = 0;
    for (size_t c = 0; c < at.nc; c++)
        if (d->h_status[c] != DK_OK) bad[d->chunk_item[c]] = true;
    for (size_t c = 0; c < at.nc; c++)
        if (bad[d->chunk_item[c]]) undo[nundo++] = (uint32_t)c;
    if (nundo) {
        if ((e = cudaMemcpyAsync(d_undo, undo, nundo * 4, cudaMemcpyHostToDevice, stream)) ||
            (e = dk_undo_enqueue(&b, d_undo, (uint32_t)nundo, stream)) ||
            (e = cudaMemcpyAsync(d->h_hashes, d->d_hashes, at.nc * 8, cudaMemcpyDeviceToHost, stream)) ||
            (e = cudaStreamSynchronize(stream))) {
            return fail_drained(d, stream, err, e, "delta apply: restoring the regions that failed");
        }
    }
    /* per failed item, the chunk it is blamed on: a damaged record first
       (the CPU checks every record before it writes anything), else the
       first chunk that failed */
    for (int pass = 0; pass < 2; pass++)
        for (size_t c = 0, first = 0; c < at.nc; c++) {
            size_t i = d->chunk_item[c];
            if (c == 0 || d->chunk_item[c - 1] != i) first = c;
            if (!bad[i] || d->h_status[c] == DK_OK || items[i].status != FERRY_OK) continue;
            if (pass == 0 && d->h_status[c] != DK_REC_SUM) continue;
            char w[FERRY_ERR_TEXT];
            items[i].status = chunk_blame(d, (uint32_t)c, (uint32_t)(c - first), w, sizeof w);
            if (*first_bad == SIZE_MAX || i < *first_bad) *first_bad = i, snprintf(why, why_len, "%s", w);
        }
    return FERRY_OK;
}

/* A part of a batch (part()), with its scratch on the host: bytes per
   item of the part, bad per item of the batch (allocated before anything
   is enqueued: no failure of the host's memory after a pass ran). */
static ferry_status_t run(ferry_delta_cuda_t *d, ferry_delta_cuda_item_t *items, size_t from, size_t n,
                          cudaStream_t stream, ferry_errbuf_t *err, size_t *to, size_t *first_bad, char *why,
                          size_t why_len) {
    *to = n;
    size_t *bytes = malloc((n - from) * sizeof *bytes);
    bool *bad = calloc(n, sizeof *bad);
    ferry_status_t st = bytes && bad ? part(d, items, from, n, stream, err, to, first_bad, why, why_len, bytes, bad)
                                     : ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta apply: out of memory");
    free(bytes);
    free(bad);
    return st;
}

ferry_status_t ferry_delta_cuda_apply(ferry_delta_cuda_t *d, ferry_delta_cuda_item_t *items, size_t n,
                                      cudaStream_t stream, ferry_errbuf_t *err) {
    if (!d || (n && !items)) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta apply: no object or no items");
    int prev = 0;
    ferry_status_t st = enter(d, &prev, err);
    if (st != FERRY_OK) return st;
    size_t first_bad = SIZE_MAX;
    char why[FERRY_ERR_TEXT] = "";
    d->times = (ferry_delta_cuda_times_t){0};
    for (size_t from = 0, to; from < n && st == FERRY_OK; from = to) {
        st = run(d, items, from, n, stream, err, &to, &first_bad, why, sizeof why);
        /* a CUDA failure leaves every region unknown; scratch that cannot be
           had, the part's items and those after it as they were */
        if (st != FERRY_OK)
            for (size_t i = st == FERRY_ERR_IO ? 0 : from; i < n; i++) items[i].status = st;
    }
    leave(d, prev);
    if (st != FERRY_OK) return st;
    if (first_bad == SIZE_MAX) return FERRY_OK;
    return ferry_fail(err, items[first_bad].status, "delta %zu of %zu: %s", first_bad, n, why);
}
