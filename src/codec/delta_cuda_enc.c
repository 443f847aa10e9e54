/* The host side of encoding deltas on a GPU (codec/delta_cuda_enc.h): the
 * chunk tables filled, the passes of delta_enc.cu launched in three
 * rounds, with the sizes each round needs read back in between, and the
 * frames finished here: the chunk table and the header around the records
 * the GPU wrote. */
#include "codec/delta_cuda_enc.h"

#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "codec/delta_enc_kern.h"
#include "common/cuda.h"

_Static_assert(EK_HEADER == CHUNK_HEADER && EK_ENTRY == CLASS_ENTRY && EK_CLASSES == FERRY_DELTA_CLASSES_MAX &&
                   (int)EK_UNCHANGED == (int)CHUNK_UNCHANGED && (int)EK_SPARSE == (int)CHUNK_SPARSE &&
                   (int)EK_RAW == (int)CHUNK_RAW && EK_TILE == (1u << DELTA_SUB_LOG2_MIN),
               "delta_enc_dev.h's constants");

#define HIST_WORDS 512u
#define EVENTS 7

/* An item's frame in the last batch: its chunks' entries in h_chunks, its
   records at d_out + item_out[i]. */
typedef struct enc_frame {
    size_t first;
    uint32_t chunks, chunk;
    ferry_dtype_t dtype;
    uint64_t elems, base_version, next_version, len;
    bool kept; /* encoded: its frame can be copied out */
} enc_frame_t;

struct ferry_delta_cuda_enc {
    int device;
    /* device scratch, grow-only */
    ek_chunk_t *d_chunks;
    uint32_t *d_hist, *d_busy, *d_raw;
    size_t cap_chunks;
    ek_subblk_t *d_blks;
    uint32_t *d_sparse_blks;
    ek_sub_t *d_subs;
    size_t cap_blks;
    uint64_t *d_list;
    uint16_t *d_runs;
    size_t cap_list;
    uint8_t *d_out;
    size_t cap_out;
    /* pinned host memory, grow-only */
    ek_chunk_t *h_chunks;
    uint32_t *h_busy, *h_raw;
    size_t hcap_chunks;
    ek_subblk_t *h_blks;
    uint32_t *h_sparse_blks;
    size_t hcap_blks;
    /* host memory: per chunk its item; per item where its records start in d_out */
    size_t *chunk_item, cap_chunk_item;
    uint64_t *item_out, *sums;
    size_t cap_items, cap_sums;
    enc_frame_t *frames; /* per item of the last batch */
    size_t nframes, cap_frames;
    cudaEvent_t ev[EVENTS];
    ferry_delta_cuda_enc_times_t times;
};

static ferry_status_t cuda_fail(ferry_errbuf_t *err, cudaError_t e, const char *what) {
    return ferry_cuda_fail(err, e == cudaErrorMemoryAllocation ? FERRY_ERR_NO_MEMORY : FERRY_ERR_IO, e, what);
}

ferry_status_t ferry_delta_cuda_enc_create(int device, ferry_delta_cuda_enc_t **out, ferry_errbuf_t *err) {
    if (!out) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta encode: out is NULL");
    *out = NULL;
    ferry_status_t st = ferry_cuda_init(err);
    if (st != FERRY_OK) return st;
    int count = 0, prev = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDeviceCount");
    if (device < 0 || device >= count)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta encode: no GPU %d (this host has %d)", device, count);
    ferry_delta_cuda_enc_t *d = calloc(1, sizeof *d);
    if (!d) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    d->device = device;
    e = cudaGetDevice(&prev);
    bool got = e == cudaSuccess;
    if (e == cudaSuccess) e = cudaSetDevice(device);
    for (int i = 0; i < EVENTS && e == cudaSuccess; i++) e = cudaEventCreate(&d->ev[i]);
    if (got) cudaSetDevice(prev);
    if (e != cudaSuccess) {
        for (int i = 0; i < EVENTS; i++)
            if (d->ev[i]) cudaEventDestroy(d->ev[i]);
        free(d);
        return cuda_fail(err, e, "delta encode: setting up the GPU");
    }
    *out = d;
    return FERRY_OK;
}

void ferry_delta_cuda_enc_destroy(ferry_delta_cuda_enc_t *d) {
    if (!d) return;
    int prev = 0;
    if (cudaGetDevice(&prev) == cudaSuccess) cudaSetDevice(d->device);
    void *dev[] = {d->d_chunks, d->d_hist, d->d_busy, d->d_raw, d->d_blks, d->d_sparse_blks,
                   d->d_subs,   d->d_list, d->d_runs, d->d_out};
    for (size_t i = 0; i < sizeof dev / sizeof dev[0]; i++) cudaFree(dev[i]);
    void *host[] = {d->h_chunks, d->h_busy, d->h_raw, d->h_blks, d->h_sparse_blks};
    for (size_t i = 0; i < sizeof host / sizeof host[0]; i++) cudaFreeHost(host[i]);
    for (int i = 0; i < EVENTS; i++) cudaEventDestroy(d->ev[i]);
    cudaSetDevice(prev);
    free(d->chunk_item);
    free(d->item_out);
    free(d->sums);
    free(d->frames);
    free(d);
}

/* Grow-only device (dev) or pinned host (!dev) arrays to n elements of
   size bytes, keeping nothing. */
static cudaError_t grow(void **p, size_t *cap, size_t n, size_t size, bool dev) {
    if (n <= *cap) return cudaSuccess;
    size_t want = n + n / 4 + 64;
    void *q = NULL;
    cudaError_t e = dev ? cudaMalloc(&q, want * size) : cudaMallocHost(&q, want * size);
    if (e != cudaSuccess) return e;
    if (dev) cudaFree(*p);
    else cudaFreeHost(*p);
    *p = q;
    *cap = want;
    return cudaSuccess;
}
/* Grows arrays that share one capacity (*cap, elements) to n elements
   each, of the given sizes; device (dev) or pinned host memory. */
static cudaError_t grow_set(void **const *p, const size_t *size, size_t k, bool dev, size_t *cap, size_t n) {
    if (n <= *cap) return cudaSuccess;
    for (size_t i = 0; i < k; i++) {
        size_t c = *cap;
        cudaError_t e = grow(p[i], &c, n, size[i], dev);
        if (e != cudaSuccess) return e; /* those grown keep their room: the set's cap stays the least */
    }
    *cap = n + n / 4 + 64; /* what grow gave each */
    return cudaSuccess;
}
static cudaError_t grow_chunks(ferry_delta_cuda_enc_t *d, size_t n) {
    void **dp[] = {(void **)&d->d_chunks, (void **)&d->d_hist, (void **)&d->d_busy, (void **)&d->d_raw};
    const size_t ds[] = {sizeof(ek_chunk_t), HIST_WORDS * 4, 4, 4};
    void **hp[] = {(void **)&d->h_chunks, (void **)&d->h_busy, (void **)&d->h_raw};
    const size_t hs[] = {sizeof(ek_chunk_t), 4, 4};
    cudaError_t e = grow_set(dp, ds, 4, true, &d->cap_chunks, n);
    return e == cudaSuccess ? grow_set(hp, hs, 3, false, &d->hcap_chunks, n) : e;
}
static cudaError_t grow_blks(ferry_delta_cuda_enc_t *d, size_t n) {
    void **dp[] = {(void **)&d->d_blks, (void **)&d->d_sparse_blks, (void **)&d->d_subs};
    const size_t ds[] = {sizeof(ek_subblk_t), 4, sizeof(ek_sub_t) * EK_CLASSES};
    void **hp[] = {(void **)&d->h_blks, (void **)&d->h_sparse_blks};
    const size_t hs[] = {sizeof(ek_subblk_t), 4};
    cudaError_t e = grow_set(dp, ds, 3, true, &d->cap_blks, n);
    return e == cudaSuccess ? grow_set(hp, hs, 2, false, &d->hcap_blks, n) : e;
}
static cudaError_t grow_list(ferry_delta_cuda_enc_t *d, size_t n) {
    void **dp[] = {(void **)&d->d_list, (void **)&d->d_runs};
    const size_t ds[] = {8, 2};
    return grow_set(dp, ds, 2, true, &d->cap_list, n);
}
static bool grow_host(void **p, size_t *cap, size_t n, size_t size) {
    if (n <= *cap) return true;
    void *q = realloc(*p, (n + 16) * size);
    if (!q) return false;
    *p = q;
    *cap = n + 16;
    return true;
}

/* Checks an item; its chunk size and chunks. */
static ferry_status_t check_item(const ferry_delta_cuda_enc_item_t *it, uint32_t *chunk, uint32_t *chunks,
                                 ferry_errbuf_t *err) {
    uint32_t w = delta_width(it->dtype);
    *chunk = it->chunk_elems ? it->chunk_elems : FERRY_DELTA_CHUNK_DEFAULT;
    if (!w)
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "delta of dtype %s: only bf16, f16, f32 and f8 are supported",
                          ferry_dtype_name(it->dtype));
    if (*chunk < FERRY_DELTA_CHUNK_MIN || *chunk > FERRY_DELTA_CHUNK_MAX || (*chunk & (*chunk - 1)))
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "chunk_elems %u is not a power of two in [%u, %u]", *chunk,
                          FERRY_DELTA_CHUNK_MIN, FERRY_DELTA_CHUNK_MAX);
    if (it->max_classes > FERRY_DELTA_CLASSES_MAX)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "max_classes %u (1 to %u allowed)", it->max_classes,
                          FERRY_DELTA_CLASSES_MAX);
    if (it->elems && (!it->base || !it->next)) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "a NULL region");
    if (((uintptr_t)it->base | (uintptr_t)it->next) % w)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "a region not aligned to its %u-byte elements", w);
    uint64_t n = (it->elems + *chunk - 1) / *chunk;
    if (n >= UINT32_MAX - 1)
        return ferry_fail(err, FERRY_ERR_LIMIT, "%llu elements need more than 2^32 chunks of %u",
                          (unsigned long long)it->elems, *chunk);
    *chunks = (uint32_t)n;
    if (it->dst && it->cap < DELTA_FRAME_HEADER + 4 * n)
        return ferry_fail(err, FERRY_ERR_LIMIT, "%zu bytes of room, %llu needed for the frame's header alone",
                          it->cap, (unsigned long long)(DELTA_FRAME_HEADER + 4 * n));
    return FERRY_OK;
}

static double ms_between(cudaEvent_t a, cudaEvent_t b) {
    float ms = 0;
    return cudaEventElapsedTime(&ms, a, b) == cudaSuccess ? ms / 1e3 : 0;
}

/* Item i's records of the last batch, from the device to dst's frame (after
   its header and chunk table), on stream. */
static cudaError_t copy_records(ferry_delta_cuda_enc_t *d, size_t i, void *dst, cudaStream_t stream) {
    const enc_frame_t *f = &d->frames[i];
    uint64_t head = DELTA_FRAME_HEADER + (uint64_t)f->chunks * 4;
    if (f->len == head) return cudaSuccess;
    return cudaMemcpyAsync((uint8_t *)dst + head, d->d_out + d->item_out[i], f->len - head, cudaMemcpyDeviceToHost,
                           stream);
}
/* Item i's frame header and chunk table at dst. */
static void put_frame_head(ferry_delta_cuda_enc_t *d, size_t i, void *dst_) {
    const enc_frame_t *f = &d->frames[i];
    uint8_t *dst = dst_;
    uint64_t *bs = d->sums, *ns = d->sums + f->chunks;
    for (uint32_t k = 0; k < f->chunks; k++) {
        const ek_chunk_t *h = &d->h_chunks[f->first + k];
        put_u32(dst + DELTA_FRAME_HEADER + (size_t)k * 4, h->rec_len);
        bs[k] = h->base_sum;
        ns[k] = h->next_sum;
    }
    delta_frame_header_put(dst, 2, f->dtype, f->elems, f->chunk, f->base_version, f->next_version, bs, ns);
}

/* The batch's rounds; items whose status is not FERRY_OK are left out. */
static ferry_status_t run(ferry_delta_cuda_enc_t *d, ferry_delta_cuda_enc_item_t *items, size_t n,
                          cudaStream_t stream, ferry_errbuf_t *err) {
    /* round 1: the chunk table; scan */
    size_t nchunks = 0;
    for (size_t i = 0; i < n; i++)
        if (items[i].status == FERRY_OK) nchunks += d->frames[i].chunks;
    cudaError_t e = grow_chunks(d, nchunks);
    if (e != cudaSuccess) return cuda_fail(err, e, "delta encode: chunk tables");
    if (!grow_host((void **)&d->chunk_item, &d->cap_chunk_item, nchunks, sizeof *d->chunk_item) ||
        !grow_host((void **)&d->item_out, &d->cap_items, n, sizeof *d->item_out) ||
        !grow_host((void **)&d->sums, &d->cap_sums, 2 * nchunks, sizeof *d->sums))
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    size_t c = 0;
    for (size_t i = 0; i < n; i++) {
        ferry_delta_cuda_enc_item_t *it = &items[i];
        if (it->status != FERRY_OK) continue;
        const uint32_t w = delta_width(it->dtype), chunk = d->frames[i].chunk, chunks = d->frames[i].chunks;
        for (uint32_t k = 0; k < chunks; k++, c++) {
            ek_chunk_t *h = &d->h_chunks[c];
            uint64_t at = (uint64_t)k * chunk;
            memset(h, 0, sizeof *h);
            h->base = (uint64_t)(uintptr_t)it->base + at * w;
            h->next = (uint64_t)(uintptr_t)it->next + at * w;
            h->elems = (uint32_t)(it->elems - at < chunk ? it->elems - at : chunk);
            h->width = w;
            h->max_classes = it->max_classes ? it->max_classes : FERRY_DELTA_CLASSES_MAX;
            if (it->base_chunk_sums) {
                h->given = 1;
                h->base_sum = it->base_chunk_sums[k];
            }
            d->chunk_item[c] = i;
        }
    }
    ek_batch_t b = {.chunks = d->d_chunks, .hist = d->d_hist, .busy = d->d_busy, .blks = d->d_blks,
                    .subs = d->d_subs, .list = d->d_list, .runs = d->d_runs, .out = d->d_out, .raw = d->d_raw,
                    .sparse_blks = d->d_sparse_blks, .nchunks = (uint32_t)nchunks};
    const size_t tab = nchunks * sizeof(ek_chunk_t);
    if ((e = cudaEventRecord(d->ev[0], stream)) != cudaSuccess ||
        (tab && (e = cudaMemcpyAsync(d->d_chunks, d->h_chunks, tab, cudaMemcpyHostToDevice, stream)) != cudaSuccess) ||
        (tab && (e = cudaMemsetAsync(d->d_hist, 0, nchunks * HIST_WORDS * 4, stream)) != cudaSuccess) ||
        (e = ek_scan_enqueue(&b, stream)) != cudaSuccess ||
        (tab && (e = cudaMemcpyAsync(d->h_chunks, d->d_chunks, tab, cudaMemcpyDeviceToHost, stream)) != cudaSuccess) ||
        (e = cudaEventRecord(d->ev[1], stream)) != cudaSuccess || (e = cudaStreamSynchronize(stream)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: scan");

    /* round 2: sub-blocks and the change list laid out; classes .. choose */
    uint64_t changes = 0;
    size_t nbusy = 0, nblks = 0;
    for (c = 0; c < nchunks; c++) {
        ek_chunk_t *h = &d->h_chunks[c];
        if (!h->changed) { /* base is next's bytes, whatever sum was given (as the CPU encoder has it) */
            h->base_sum = h->next_sum;
            continue;
        }
        h->sub_log2 = er_sub_log2(h->changed, h->elems);
        h->nsub = (h->elems + (1u << h->sub_log2) - 1) >> h->sub_log2;
        h->sub0 = (uint32_t)nblks;
        h->list0 = changes;
        changes += h->changed;
        nblks += h->nsub;
        d->h_busy[nbusy++] = (uint32_t)c;
    }
    if ((e = grow_blks(d, nblks)) != cudaSuccess || (e = grow_list(d, changes)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: the change list");
    for (size_t x = 0, blk = 0; x < nbusy; x++) {
        const ek_chunk_t *h = &d->h_chunks[d->h_busy[x]];
        for (uint32_t s = 0; s < h->nsub; s++, blk++)
            d->h_blks[blk] = (ek_subblk_t){.chunk = d->h_busy[x], .b = s};
    }
    b.blks = d->d_blks, b.sparse_blks = d->d_sparse_blks, b.subs = d->d_subs, b.list = d->d_list,
    b.runs = d->d_runs;
    b.nbusy = (uint32_t)nbusy;
    b.nblks = (uint32_t)nblks;
    if ((e = cudaEventRecord(d->ev[2], stream)) != cudaSuccess ||
        (tab && (e = cudaMemcpyAsync(d->d_chunks, d->h_chunks, tab, cudaMemcpyHostToDevice, stream)) != cudaSuccess) ||
        (nbusy && (e = cudaMemcpyAsync(d->d_busy, d->h_busy, nbusy * 4, cudaMemcpyHostToDevice, stream)) != cudaSuccess) ||
        (nblks && (e = cudaMemcpyAsync(d->d_blks, d->h_blks, nblks * sizeof(ek_subblk_t), cudaMemcpyHostToDevice,
                                       stream)) != cudaSuccess) ||
        (e = ek_plan_enqueue(&b, stream)) != cudaSuccess ||
        (tab && (e = cudaMemcpyAsync(d->h_chunks, d->d_chunks, tab, cudaMemcpyDeviceToHost, stream)) != cudaSuccess) ||
        (e = cudaEventRecord(d->ev[3], stream)) != cudaSuccess || (e = cudaStreamSynchronize(stream)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: classes and code parameters");

    /* round 3: the records laid out, each item's back to back; written */
    uint64_t out = 0;
    size_t nraw = 0;
    for (c = 0; c < nchunks; c++) {
        ek_chunk_t *h = &d->h_chunks[c];
        if (c == 0 || d->chunk_item[c] != d->chunk_item[c - 1]) {
            out = (out + 15) & ~(uint64_t)15;
            d->item_out[d->chunk_item[c]] = out;
        }
        if (!h->changed) h->mode = EK_UNCHANGED, h->rec_len = EK_HEADER;
        h->rec = out; /* an offset until d_out is sized */
        out += h->rec_len;
        if (h->mode == EK_RAW) d->h_raw[nraw++] = (uint32_t)c;
    }
    size_t cap_out = d->cap_out;
    if ((e = grow((void **)&d->d_out, &cap_out, out + 8, 1, true)) != cudaSuccess) /* (never NULL after) */
        return cuda_fail(err, e, "delta encode: the records");
    d->cap_out = cap_out;
    for (c = 0; c < nchunks; c++) d->h_chunks[c].rec += (uint64_t)(uintptr_t)d->d_out;
    size_t nsb = 0;
    for (size_t x = 0; x < nblks; x++)
        if (d->h_chunks[d->h_blks[x].chunk].mode == EK_SPARSE) d->h_sparse_blks[nsb++] = (uint32_t)x;
    b.out = d->d_out;
    b.nraw = (uint32_t)nraw;
    b.nsparse_blks = (uint32_t)nsb;
    if ((tab && (e = cudaMemcpyAsync(d->d_chunks, d->h_chunks, tab, cudaMemcpyHostToDevice, stream)) != cudaSuccess) ||
        (nraw && (e = cudaMemcpyAsync(d->d_raw, d->h_raw, nraw * 4, cudaMemcpyHostToDevice, stream)) != cudaSuccess) ||
        (nsb && (e = cudaMemcpyAsync(d->d_sparse_blks, d->h_sparse_blks, nsb * 4, cudaMemcpyHostToDevice, stream)) !=
                    cudaSuccess) ||
        (e = cudaMemsetAsync(d->d_out, 0, out + 8, stream)) != cudaSuccess ||
        (e = cudaEventRecord(d->ev[4], stream)) != cudaSuccess || (e = ek_write_enqueue(&b, stream)) != cudaSuccess ||
        (e = cudaEventRecord(d->ev[5], stream)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: writing the records");
    /* the frames: each item's records copied into place (or kept for
       ferry_delta_cuda_enc_copy), then the chunk table and header */
    for (size_t i = 0, first = 0; i < n; i++) {
        ferry_delta_cuda_enc_item_t *it = &items[i];
        enc_frame_t *f = &d->frames[i];
        if (it->status != FERRY_OK) continue;
        const uint32_t chunks = f->chunks;
        *f = (enc_frame_t){.first = first, .chunks = chunks, .chunk = f->chunk, .dtype = it->dtype,
                           .elems = it->elems, .base_version = it->base_version, .next_version = it->next_version,
                           .len = DELTA_FRAME_HEADER + (uint64_t)chunks * 4, .kept = true};
        for (uint32_t k = 0; k < chunks; k++) {
            const ek_chunk_t *h = &d->h_chunks[first + k];
            f->len += h->rec_len;
            if (it->next_chunk_sums) it->next_chunk_sums[k] = h->next_sum;
        }
        first += chunks;
        it->len = (size_t)f->len;
        if (!it->dst) continue;
        if (f->len > it->cap) {
            it->status = FERRY_ERR_LIMIT;
            it->len = 0;
            continue;
        }
        if ((e = copy_records(d, i, it->dst, stream)) != cudaSuccess)
            return cuda_fail(err, e, "delta encode: copying a frame to the host");
    }
    if ((e = cudaEventRecord(d->ev[6], stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(stream)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: writing the records");
    for (size_t i = 0; i < n; i++)
        if (items[i].dst && items[i].status == FERRY_OK) put_frame_head(d, i, items[i].dst);
    d->nframes = n;
    d->times.scan_s = ms_between(d->ev[0], d->ev[1]);
    d->times.plan_s = ms_between(d->ev[2], d->ev[3]);
    d->times.write_s = ms_between(d->ev[4], d->ev[5]);
    d->times.copy_s = ms_between(d->ev[5], d->ev[6]);
    return FERRY_OK;
}

ferry_status_t ferry_delta_cuda_encode(ferry_delta_cuda_enc_t *d, ferry_delta_cuda_enc_item_t *items, size_t n,
                                       cudaStream_t stream, ferry_errbuf_t *err) {
    if (!d || (n && !items)) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta encode: no object or items");
    if (!grow_host((void **)&d->frames, &d->cap_frames, n, sizeof *d->frames))
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    d->nframes = 0; /* the last batch's frames are gone */
    ferry_errbuf_t ierr, first_err; /* the first refused item's why */
    size_t first_bad = n;
    for (size_t i = 0; i < n; i++) {
        enc_frame_t *f = &d->frames[i];
        *f = (enc_frame_t){0};
        items[i].len = 0;
        items[i].status = check_item(&items[i], &f->chunk, &f->chunks, &ierr);
        if (items[i].status != FERRY_OK && first_bad == n) first_bad = i, first_err = ierr;
    }
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != d->device) e = cudaSetDevice(d->device);
    if (e != cudaSuccess) {
        for (size_t i = 0; i < n; i++)
            if (items[i].status == FERRY_OK) items[i].status = FERRY_ERR_IO;
        return cuda_fail(err, e, "delta encode: selecting the GPU");
    }
    ferry_errbuf_t rerr;
    ferry_status_t st = run(d, items, n, stream, &rerr);
    if (prev != d->device) cudaSetDevice(prev);
    if (st != FERRY_OK) {
        for (size_t i = 0; i < n; i++)
            if (items[i].status == FERRY_OK) items[i].status = st == FERRY_ERR_NO_MEMORY ? st : FERRY_ERR_IO;
        return ferry_fail(err, st, "%s", rerr.text);
    }
    for (size_t i = 0; i < n; i++) {
        if (items[i].status == FERRY_OK) continue;
        if (i == first_bad) /* refused before the batch */
            return ferry_fail(err, items[i].status, "delta %zu of %zu: %s", i + 1, n, first_err.text);
        return ferry_fail(err, items[i].status, "delta %zu of %zu: the frame needs more than its %zu bytes of room",
                          i + 1, n, items[i].cap); /* FERRY_ERR_LIMIT, after the batch */
    }
    return FERRY_OK;
}

ferry_status_t ferry_delta_cuda_enc_copy(ferry_delta_cuda_enc_t *d, size_t i, void *dst, size_t cap,
                                        ferry_errbuf_t *err) {
    if (!d || !dst) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta encode: no object or buffer");
    if (i >= d->nframes || !d->frames[i].kept)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta encode: item %zu of the last batch has no frame", i);
    if (d->frames[i].len > cap)
        return ferry_fail(err, FERRY_ERR_LIMIT, "delta encode: the frame takes %llu bytes, %zu given",
                          (unsigned long long)d->frames[i].len, cap);
    int prev = 0;
    cudaError_t e = cudaGetDevice(&prev);
    if (e == cudaSuccess && prev != d->device) e = cudaSetDevice(d->device);
    if (e == cudaSuccess) e = copy_records(d, i, dst, 0);
    if (e == cudaSuccess) e = cudaStreamSynchronize(0);
    if (prev != d->device) cudaSetDevice(prev);
    if (e != cudaSuccess) return cuda_fail(err, e, "delta encode: copying a frame to the host");
    put_frame_head(d, i, dst);
    return FERRY_OK;
}

void ferry_delta_cuda_enc_last_times(const ferry_delta_cuda_enc_t *d, ferry_delta_cuda_enc_times_t *out) {
    if (out) *out = d ? d->times : (ferry_delta_cuda_enc_times_t){0};
}

size_t ferry_delta_cuda_enc_device_bytes(const ferry_delta_cuda_enc_t *d) {
    if (!d) return 0;
    return d->cap_chunks * (sizeof(ek_chunk_t) + HIST_WORDS * 4 + 8) +
           d->cap_blks * (sizeof(ek_subblk_t) + 4 + sizeof(ek_sub_t) * EK_CLASSES) + d->cap_list * 10 + d->cap_out;
}
