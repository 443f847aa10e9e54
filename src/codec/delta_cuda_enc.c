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
#include "codec/enc_slices.h"
#include "common/cuda.h"

_Static_assert(EK_HEADER == CHUNK_HEADER && EK_ENTRY == CLASS_ENTRY && EK_CLASSES == FERRY_DELTA_CLASSES_MAX &&
                   (int)EK_UNCHANGED == (int)CHUNK_UNCHANGED && (int)EK_SPARSE == (int)CHUNK_SPARSE &&
                   (int)EK_RAW == (int)CHUNK_RAW && EK_TILE == (1u << DELTA_SUB_LOG2_MIN),
               "delta_enc_dev.h's constants");

#define HIST_WORDS 512u
#define EVENTS 7
/* A slice's budget (enc_slices.h): the change list takes 10 bytes a change
   (640 MiB), the sub-block tables 20 + 8 * 68 bytes a sub-block (141 MiB).
   At lr 1e-6 (2% changed) a slice covers 6 GiB of bf16 versions. */
#define SLICE_CHANGES ((uint64_t)1 << 26)
#define SLICE_BLKS ((uint64_t)1 << 18)

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
    uint64_t slice_changes, slice_blks; /* 0: SLICE_CHANGES, SLICE_BLKS */
    cudaEvent_t ev[EVENTS];
    ferry_delta_cuda_enc_times_t times;
};

/* A CUDA failure, reported; cleared as the last error too (none here is
   sticky): a failed allocation would otherwise be taken for the next
   launch's error, in this call or the next one. */
static ferry_status_t cuda_fail(ferry_errbuf_t *err, cudaError_t e, const char *what) {
    (void)cudaGetLastError();
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
    if (cudaEventElapsedTime(&ms, a, b) == cudaSuccess) return ms / 1e3;
    (void)cudaGetLastError(); /* a timing that failed must not be taken for the next launch's error */
    return 0;
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

/* d_out grown to `need` bytes, its first `keep` (the records of the
   batch's slices before, written by passes queued on stream) kept. */
static cudaError_t grow_out(ferry_delta_cuda_enc_t *d, size_t need, size_t keep, cudaStream_t stream) {
    if (need <= d->cap_out) return cudaSuccess;
    const size_t want = need + need / 4 + 64;
    uint8_t *q = NULL;
    cudaError_t e = cudaMalloc((void **)&q, want);
    if (e == cudaSuccess && keep) e = cudaMemcpyAsync(q, d->d_out, keep, cudaMemcpyDeviceToDevice, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream); /* no pass still writes the old area */
    if (e != cudaSuccess) {
        cudaFree(q);
        return e;
    }
    cudaFree(d->d_out);
    d->d_out = q;
    d->cap_out = want;
    return cudaSuccess;
}

/* One slice of a batch (enc_slices.h): its chunks with changes, h_busy[from,
   to), and its chunks, [c_lo, c_hi): from the end of the slice before (0
   for the first) to its last chunk with changes (to the batch's end for
   the last slice), those without changes among them included. Its
   chunks' list0 and sub0 count from the starts of the change list and the
   sub-block tables, which each slice uses afresh. */
typedef struct slice {
    size_t from, to, c_lo, c_hi;
    size_t nblks;  /* its sub-blocks */
    uint64_t out;  /* the batch's records so far: bytes of d_out */
} slice_t;

static ek_batch_t slice_batch(const ferry_delta_cuda_enc_t *d, const slice_t *sl) {
    return (ek_batch_t){.chunks = d->d_chunks, .hist = d->d_hist, .busy = d->d_busy + sl->from, .blks = d->d_blks,
                        .subs = d->d_subs, .list = d->d_list, .runs = d->d_runs, .out = d->d_out, .raw = d->d_raw,
                        .sparse_blks = d->d_sparse_blks, .nchunks = (uint32_t)(sl->c_hi - sl->c_lo),
                        .nbusy = (uint32_t)(sl->to - sl->from), .nblks = (uint32_t)sl->nblks,
                        .chunk0 = (uint32_t)sl->c_lo};
}

/* Round 2 for a slice: its sub-blocks laid out; rank .. choose (the
   batch's classes first, with the first slice); the host waits for its
   records' lengths. */
static ferry_status_t plan_slice(ferry_delta_cuda_enc_t *d, slice_t *sl, size_t nchunks, size_t nbusy,
                                 cudaStream_t stream, ferry_errbuf_t *err) {
    size_t nblks = 0;
    for (size_t x = sl->from; x < sl->to; x++) {
        const ek_chunk_t *h = &d->h_chunks[d->h_busy[x]];
        for (uint32_t s = 0; s < h->nsub; s++) d->h_blks[nblks + s] = (ek_subblk_t){.chunk = d->h_busy[x], .b = s};
        nblks += h->nsub;
    }
    sl->nblks = nblks;
    if (!nbusy) return FERRY_OK; /* nothing changed: write_slice has the table */
    cudaError_t e;
    const ek_batch_t b = slice_batch(d, sl);
    /* with the first slice, the table (every slice's list0 and sub0 set) and the classes, for all slices */
    const ek_batch_t all = {.chunks = d->d_chunks, .hist = d->d_hist, .busy = d->d_busy, .nbusy = (uint32_t)nbusy};
    const size_t c0 = d->h_busy[sl->from], tab = (d->h_busy[sl->to - 1] + 1 - c0) * sizeof(ek_chunk_t);
    if ((e = cudaEventRecord(d->ev[2], stream)) != cudaSuccess ||
        (sl->from == 0 &&
         ((e = cudaMemcpyAsync(d->d_chunks, d->h_chunks, nchunks * sizeof(ek_chunk_t), cudaMemcpyHostToDevice,
                               stream)) != cudaSuccess ||
          (e = cudaMemcpyAsync(d->d_busy, d->h_busy, nbusy * 4, cudaMemcpyHostToDevice, stream)) != cudaSuccess ||
          (e = ek_classes_enqueue(&all, stream)) != cudaSuccess)) ||
        (nblks && (e = cudaMemcpyAsync(d->d_blks, d->h_blks, nblks * sizeof(ek_subblk_t), cudaMemcpyHostToDevice,
                                       stream)) != cudaSuccess) ||
        (e = ek_plan_enqueue(&b, stream)) != cudaSuccess ||
        (e = cudaMemcpyAsync(d->h_chunks + c0, d->d_chunks + c0, tab, cudaMemcpyDeviceToHost, stream)) != cudaSuccess ||
        (e = cudaEventRecord(d->ev[3], stream)) != cudaSuccess || (e = cudaStreamSynchronize(stream)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: classes and code parameters");
    d->times.plan_s += ms_between(d->ev[2], d->ev[3]);
    if (sl->from) d->times.write_s += ms_between(d->ev[4], d->ev[5]); /* the slice before's, done by now */
    return FERRY_OK;
}

/* Round 3 for a slice: its records laid out after the batch's so far (each
   item's back to back, from a 16-aligned start); written. */
static ferry_status_t write_slice(ferry_delta_cuda_enc_t *d, slice_t *sl, cudaStream_t stream, ferry_errbuf_t *err) {
    const uint64_t out0 = sl->out;
    uint64_t out = out0;
    size_t nraw = 0;
    for (size_t c = sl->c_lo; c < sl->c_hi; c++) {
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
    cudaError_t e = grow_out(d, out + 8, out0, stream);
    if (e != cudaSuccess) return cuda_fail(err, e, "delta encode: the records");
    for (size_t c = sl->c_lo; c < sl->c_hi; c++) d->h_chunks[c].rec += (uint64_t)(uintptr_t)d->d_out;
    size_t nsb = 0;
    for (size_t x = 0; x < sl->nblks; x++)
        if (d->h_chunks[d->h_blks[x].chunk].mode == EK_SPARSE) d->h_sparse_blks[nsb++] = (uint32_t)x;
    ek_batch_t b = slice_batch(d, sl);
    b.nraw = (uint32_t)nraw;
    b.nsparse_blks = (uint32_t)nsb;
    const size_t tab = (sl->c_hi - sl->c_lo) * sizeof(ek_chunk_t);
    if ((tab && (e = cudaMemcpyAsync(d->d_chunks + sl->c_lo, d->h_chunks + sl->c_lo, tab, cudaMemcpyHostToDevice,
                                     stream)) != cudaSuccess) ||
        (nraw && (e = cudaMemcpyAsync(d->d_raw, d->h_raw, nraw * 4, cudaMemcpyHostToDevice, stream)) != cudaSuccess) ||
        (nsb && (e = cudaMemcpyAsync(d->d_sparse_blks, d->h_sparse_blks, nsb * 4, cudaMemcpyHostToDevice, stream)) !=
                    cudaSuccess) ||
        (e = cudaMemsetAsync(d->d_out + out0, 0, out + 8 - out0, stream)) != cudaSuccess ||
        (e = cudaEventRecord(d->ev[4], stream)) != cudaSuccess || (e = ek_write_enqueue(&b, stream)) != cudaSuccess ||
        (e = cudaEventRecord(d->ev[5], stream)) != cudaSuccess)
        return cuda_fail(err, e, "delta encode: writing the records");
    sl->out = out;
    return FERRY_OK;
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
        (e = cudaEventRecord(d->ev[1], stream)) != cudaSuccess || (e = cudaStreamSynchronize(stream)) != cudaSuccess) {
        cudaStreamSynchronize(stream); /* nothing queued reads the caller's regions once the call returns */
        return cuda_fail(err, e, "delta encode: scan");
    }

    /* rounds 2 and 3, a slice of the chunks with changes at a time (enc_slices.h) */
    uint32_t *counts = malloc((2 * nchunks + 1) * sizeof *counts); /* per busy chunk: changes, then sub-blocks */
    size_t *ends = malloc((nchunks + 1) * sizeof *ends);            /* per slice, its end in h_busy */
    if (!counts || !ends) {
        free(counts);
        free(ends);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    }
    size_t nbusy = 0;
    for (c = 0; c < nchunks; c++) {
        ek_chunk_t *h = &d->h_chunks[c];
        if (!h->changed) { /* base is next's bytes, whatever sum was given (as the CPU encoder has it) */
            h->base_sum = h->next_sum;
            continue;
        }
        h->sub_log2 = er_sub_log2(h->changed, h->elems);
        h->nsub = (h->elems + (1u << h->sub_log2) - 1) >> h->sub_log2;
        counts[nbusy] = h->changed, counts[nchunks + nbusy] = h->nsub;
        d->h_busy[nbusy++] = (uint32_t)c;
    }
    /* the slices, and each chunk's place in its slice's list and tables */
    size_t nslices = 0;
    uint64_t most_changes = 0, most_blks = 0;
    for (size_t from = 0; from < nbusy; from = ends[nslices++]) {
        ends[nslices] = enc_slice_end(counts, counts + nchunks, from, nbusy,
                                      d->slice_changes ? d->slice_changes : SLICE_CHANGES,
                                      d->slice_blks ? d->slice_blks : SLICE_BLKS);
        uint64_t changes = 0, blks = 0;
        for (size_t x = from; x < ends[nslices]; x++) {
            ek_chunk_t *h = &d->h_chunks[d->h_busy[x]];
            h->list0 = changes, h->sub0 = (uint32_t)blks;
            changes += h->changed, blks += h->nsub;
        }
        most_changes = changes > most_changes ? changes : most_changes;
        most_blks = blks > most_blks ? blks : most_blks;
    }
    free(counts);
    if (!nslices) ends[nslices++] = 0; /* nothing changed: one slice of unchanged chunks */
    if ((e = grow_blks(d, most_blks)) != cudaSuccess || (e = grow_list(d, most_changes)) != cudaSuccess) {
        free(ends);
        return cuda_fail(err, e, "delta encode: the change list");
    }
    slice_t sl = {.out = 0};
    d->times = (ferry_delta_cuda_enc_times_t){.scan_s = ms_between(d->ev[0], d->ev[1])};
    ferry_status_t st = FERRY_OK;
    for (size_t k = 0; k < nslices && st == FERRY_OK; k++) {
        sl.from = k ? ends[k - 1] : 0, sl.to = ends[k];
        sl.c_lo = sl.c_hi, sl.c_hi = k + 1 == nslices ? nchunks : d->h_busy[sl.to - 1] + 1;
        st = plan_slice(d, &sl, nchunks, nbusy, stream, err);
        if (st == FERRY_OK) st = write_slice(d, &sl, stream, err);
    }
    free(ends);
    if (st != FERRY_OK) { /* no pass of an earlier slice still runs on the regions or the tables */
        cudaStreamSynchronize(stream);
        return st;
    }
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
        if ((e = copy_records(d, i, it->dst, stream)) != cudaSuccess) {
            cudaStreamSynchronize(stream); /* no copy queued before it may write into a caller's frame later */
            return cuda_fail(err, e, "delta encode: copying a frame to the host");
        }
    }
    if ((e = cudaEventRecord(d->ev[6], stream)) != cudaSuccess ||
        (e = cudaStreamSynchronize(stream)) != cudaSuccess) {
        cudaStreamSynchronize(stream); /* (as above) */
        return cuda_fail(err, e, "delta encode: writing the records");
    }
    for (size_t i = 0; i < n; i++)
        if (items[i].dst && items[i].status == FERRY_OK) put_frame_head(d, i, items[i].dst);
    d->nframes = n;
    d->times.write_s += ms_between(d->ev[4], d->ev[5]); /* the last slice's */
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

void ferry_delta_cuda_enc_set_slice_max(ferry_delta_cuda_enc_t *d, uint64_t changes, uint64_t blks) {
    if (d) d->slice_changes = changes, d->slice_blks = blks;
}

void ferry_delta_cuda_enc_last_times(const ferry_delta_cuda_enc_t *d, ferry_delta_cuda_enc_times_t *out) {
    if (out) *out = d ? d->times : (ferry_delta_cuda_enc_times_t){0};
}

size_t ferry_delta_cuda_enc_device_bytes(const ferry_delta_cuda_enc_t *d) {
    if (!d) return 0;
    return d->cap_chunks * (sizeof(ek_chunk_t) + HIST_WORDS * 4 + 8) +
           d->cap_blks * (sizeof(ek_subblk_t) + 4 + sizeof(ek_sub_t) * EK_CLASSES) + d->cap_list * 10 + d->cap_out;
}
