/* Box copies on a GPU (strided_cuda.h): one table upload and one kernel
 * launch per batch. The table (box_jobs.h) cuts the work into pieces of at
 * most SYNC_BOX_PIECE bytes; each warp takes pieces in grid-stride order.
 * A piece of a split run is one contiguous segment: 16-byte vectors where
 * dst and src are aligned alike (after a head of single bytes), else the
 * widest width they share. A piece of grouped short runs is moved as one
 * flat array of vectors of the job's width, 32 runs at a time, each lane
 * finding its run's offsets from the lane that computed them. Every
 * contiguous job goes through the kernel too, never cudaMemcpyAsync: one
 * launch whatever the mix, no per-job API call, and whole-tensor copies
 * run at copy bandwidth with 16-byte vectors and 4 loads in flight per
 * lane. */
#include <cuda_runtime.h>
#include <stdint.h>

extern "C" {
#include "common/cuda.h"
#include "common/internal.h"
}
#include "sync/strided_cuda.h"

static_assert(sizeof(sync_box_job_t) == 56 && sizeof(sync_box_dim_t) == 24, "the table layout of box_jobs.c");

#define BOX_BLOCK 256u           /* threads per block: 8 warps */
#define BOX_WARPS (BOX_BLOCK / 32u)
#define BOX_MIN_TABLE 65536u     /* first size of a slot's buffers */

/* ---- the kernel ---- */

/* Global-space loads and stores, streaming: each byte is touched once. */
template <typename T> static __device__ __forceinline__ T ld(const T *p) { return __ldcs(p); }
template <typename T> static __device__ __forceinline__ void st(T *p, T v) { __stcs(p, v); }

/* n vectors of T, 4 loads in flight per lane */
template <typename T>
static __device__ __forceinline__ void copy_vectors(uint8_t *dst8, const uint8_t *src8, uint32_t n, uint32_t lane) {
    T *dst = reinterpret_cast<T *>(dst8);
    const T *src = reinterpret_cast<const T *>(src8);
    uint32_t i = lane;
    for (; i + 96 < n; i += 128) {
        T a = ld(src + i), b = ld(src + i + 32), c = ld(src + i + 64), d = ld(src + i + 96);
        st(dst + i, a);
        st(dst + i + 32, b);
        st(dst + i + 64, c);
        st(dst + i + 96, d);
    }
    for (; i < n; i += 32) st(dst + i, ld(src + i));
}

/* One contiguous segment by the whole warp. */
static __device__ __forceinline__ void copy_segment(uint8_t *dst, const uint8_t *src, uint32_t len, uint32_t lane) {
    const sync_box_seg_t g = sync_box_seg((uint64_t)(uintptr_t)dst, (uint64_t)(uintptr_t)src, len);
    if (lane < g.head) st(dst + lane, ld(src + lane));
    dst += g.head;
    src += g.head;
    switch (g.width) {
    case 16: copy_vectors<uint4>(dst, src, g.nvec, lane); break;
    case 8: copy_vectors<uint2>(dst, src, g.nvec, lane); break;
    case 4: copy_vectors<unsigned int>(dst, src, g.nvec, lane); break;
    case 2: copy_vectors<unsigned short>(dst, src, g.nvec, lane); break;
    default: copy_vectors<unsigned char>(dst, src, g.nvec, lane); break;
    }
    const uint32_t done = g.nvec * g.width;
    if (lane < g.tail) st(dst + done + lane, ld(src + done + lane));
}

/* nb runs of vpr vectors of T each, run k at dst + doff, src + soff of lane
 * k: nv = nb * vpr vectors as one array, 4 per lane in flight. Every lane
 * goes round the loop the same number of times (the shuffles need all). */
template <typename T>
static __device__ __forceinline__ void copy_runs_as(uint8_t *dst, const uint8_t *src, int64_t doff, int64_t soff,
                                                    uint32_t nv, uint32_t vpr, uint32_t lane) {
    for (uint32_t base = 0; base < nv; base += 4 * 32) {
        T v[4];
        T *to[4];
#pragma unroll
        for (uint32_t u = 0; u < 4; u++) {
            const uint32_t i = base + u * 32 + lane;
            const uint32_t k = i < nv ? i / vpr : 0, o = i - k * vpr;
            const int64_t d = __shfl_sync(0xffffffffu, doff, (int)k);
            const int64_t s = __shfl_sync(0xffffffffu, soff, (int)k);
            v[u] = T();
            to[u] = nullptr;
            if (i < nv) {
                v[u] = ld(reinterpret_cast<const T *>(src + s + (int64_t)o * (int64_t)sizeof(T)));
                to[u] = reinterpret_cast<T *>(dst + d + (int64_t)o * (int64_t)sizeof(T));
            }
        }
#pragma unroll
        for (uint32_t u = 0; u < 4; u++)
            if (to[u]) st(to[u], v[u]);
    }
}

/* A piece of grouped runs (each shorter than SYNC_BOX_SPLIT bytes). */
static __device__ __forceinline__ void copy_grouped(const sync_box_job_t &jb, const sync_box_dim_t *dims,
                                                    const sync_box_piece_t &q, uint32_t lane) {
    uint8_t *dst = reinterpret_cast<uint8_t *>((uintptr_t)jb.dst);
    const uint8_t *src = reinterpret_cast<const uint8_t *>((uintptr_t)jb.src);
    const uint32_t vpr = (uint32_t)(jb.run_bytes / jb.vec);
    for (uint64_t b = 0; b < q.nruns; b += 32) {
        const uint32_t nb = q.nruns - b < 32 ? (uint32_t)(q.nruns - b) : 32u;
        int64_t doff = 0, soff = 0;
        if (lane < nb) sync_box_run_at(&jb, dims, q.run + b + lane, &doff, &soff);
        const uint32_t nv = nb * vpr;
        switch (jb.vec) {
        case 16: copy_runs_as<uint4>(dst, src, doff, soff, nv, vpr, lane); break;
        case 8: copy_runs_as<uint2>(dst, src, doff, soff, nv, vpr, lane); break;
        case 4: copy_runs_as<unsigned int>(dst, src, doff, soff, nv, vpr, lane); break;
        case 2: copy_runs_as<unsigned short>(dst, src, doff, soff, nv, vpr, lane); break;
        default: copy_runs_as<unsigned char>(dst, src, doff, soff, nv, vpr, lane); break;
        }
    }
}

__global__ void __launch_bounds__(BOX_BLOCK)
    sync_box_kernel(const sync_box_job_t *__restrict__ jobs, uint32_t njobs, const sync_box_dim_t *__restrict__ dims,
                    uint64_t npieces) {
    const uint32_t lane = threadIdx.x & 31u;
    const uint64_t nwarps = (uint64_t)gridDim.x * BOX_WARPS;
    uint32_t j = 0;
    for (uint64_t p = (uint64_t)blockIdx.x * BOX_WARPS + threadIdx.x / 32u; p < npieces; p += nwarps) {
        j = sync_box_find(jobs, njobs, p, j);
        const sync_box_job_t jb = jobs[j];
        const sync_box_piece_t q = sync_box_piece(&jb, p - jb.piece0);
        if (jb.split) {
            int64_t doff, soff;
            sync_box_run_at(&jb, dims, q.run, &doff, &soff);
            copy_segment(reinterpret_cast<uint8_t *>((uintptr_t)jb.dst) + doff + q.at,
                         reinterpret_cast<const uint8_t *>((uintptr_t)jb.src) + soff + q.at, (uint32_t)q.len, lane);
        } else {
            copy_grouped(jb, dims, q, lane);
        }
    }
}

/* ---- the host side ---- */

/* A table buffer pair. used: copied and done were recorded for its last
 * batch (copied: its upload from host read; done: its kernel, which reads
 * dev, finished). */
typedef struct box_slot {
    uint8_t *host, *dev;
    size_t cap;
    cudaEvent_t copied, done;
    bool used;
} box_slot_t;

struct sync_cuda_boxes {
    ferry_ctx_t *ctx;
    int device;
    unsigned max_blocks; /* resident blocks the device holds */
    unsigned next;       /* the slot the next batch takes */
    box_slot_t slot[2];
};

static ferry_status_t use_device(int device, int *prev, ferry_errbuf_t *err) {
    cudaError_t e = cudaGetDevice(prev);
    if (e != cudaSuccess) return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaGetDevice");
    if (*prev != device && (e = cudaSetDevice(device)) != cudaSuccess)
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "cudaSetDevice");
    return FERRY_OK;
}

static void restore_device(int device, int prev) {
    if (prev != device) cudaSetDevice(prev);
}

static void slot_free(box_slot_t *s) {
    if (s->used) cudaEventSynchronize(s->done);
    if (s->dev) cudaFree(s->dev);
    if (s->host) cudaFreeHost(s->host);
    s->dev = s->host = NULL;
    s->cap = 0;
    s->used = false;
}

void sync_cuda_boxes_destroy(sync_cuda_boxes_t *b) {
    if (!b) return;
    int prev = b->device;
    if (cudaGetDevice(&prev) != cudaSuccess || (prev != b->device && cudaSetDevice(b->device) != cudaSuccess))
        prev = b->device;
    for (int i = 0; i < 2; i++) {
        slot_free(&b->slot[i]);
        if (b->slot[i].copied) cudaEventDestroy(b->slot[i].copied);
        if (b->slot[i].done) cudaEventDestroy(b->slot[i].done);
    }
    restore_device(b->device, prev);
    ferry_free(b->ctx, b);
}

ferry_status_t sync_cuda_boxes_create(ferry_ctx_t *ctx, int device, sync_cuda_boxes_t **out, ferry_errbuf_t *err) {
    ferry_status_t st = ferry_cuda_init(err);
    if (st) return st;
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess) return ferry_cuda_fail(err, FERRY_ERR_UNSUPPORTED, e, "cudaGetDeviceCount");
    if (device < 0 || device >= ndev)
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "box copies on CUDA device %d: there are %d devices", device,
                          ndev);
    int prev;
    if ((st = use_device(device, &prev, err))) return st;
    sync_cuda_boxes_t *b = (sync_cuda_boxes_t *)ferry_calloc(ctx, 1, sizeof *b);
    if (!b) {
        restore_device(device, prev);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "box copies: no memory for their state");
    }
    b->ctx = ctx;
    b->device = device;
    int sms = 0, per_sm = 0;
    const char *what = "cudaDeviceGetAttribute(MultiProcessorCount)";
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) {
        what = "cudaOccupancyMaxActiveBlocksPerMultiprocessor";
        e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sync_box_kernel, BOX_BLOCK, 0);
    }
    for (int i = 0; i < 2 && e == cudaSuccess; i++) {
        what = "cudaEventCreateWithFlags";
        e = cudaEventCreateWithFlags(&b->slot[i].copied, cudaEventDisableTiming);
        if (e == cudaSuccess) e = cudaEventCreateWithFlags(&b->slot[i].done, cudaEventDisableTiming);
    }
    restore_device(device, prev);
    if (e != cudaSuccess) {
        sync_cuda_boxes_destroy(b);
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, what);
    }
    b->max_blocks = (unsigned)(sms > 0 ? sms : 1) * (unsigned)(per_sm > 0 ? per_sm : 1);
    *out = b;
    return FERRY_OK;
}

size_t sync_cuda_boxes_device_bytes(const sync_cuda_boxes_t *b) { return b->slot[0].cap + b->slot[1].cap; }

/* Makes s's staging buffer free to write and need bytes long. */
static ferry_status_t slot_ready(box_slot_t *s, size_t need, ferry_errbuf_t *err) {
    cudaError_t e;
    if (s->used && (e = cudaEventSynchronize(s->copied)) != cudaSuccess)
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "box copies: waiting for an earlier table upload");
    if (s->cap >= need) return FERRY_OK;
    if (s->used && (e = cudaEventSynchronize(s->done)) != cudaSuccess)
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "box copies: waiting for earlier copies");
    slot_free(s);
    size_t cap = BOX_MIN_TABLE;
    while (cap < need) cap = cap > SIZE_MAX / 2 ? need : cap * 2;
    if ((e = cudaMalloc((void **)&s->dev, cap)) != cudaSuccess) {
        s->dev = NULL;
        return ferry_cuda_fail(err, FERRY_ERR_NO_MEMORY, e, "box copies: cudaMalloc of their table");
    }
    if ((e = cudaHostAlloc((void **)&s->host, cap, cudaHostAllocDefault)) != cudaSuccess) {
        s->host = NULL;
        slot_free(s);
        return ferry_cuda_fail(err, FERRY_ERR_NO_MEMORY, e, "box copies: cudaHostAlloc of their table");
    }
    s->cap = cap;
    return FERRY_OK;
}

/* Uploads the built table in s and launches the kernel on stream. */
static ferry_status_t launch(sync_cuda_boxes_t *b, box_slot_t *s, const sync_box_batch_t *bt, cudaStream_t stream,
                             ferry_errbuf_t *err) {
    cudaError_t e;
    /* a kernel of another stream may still read dev */
    if (s->used && (e = cudaStreamWaitEvent(stream, s->done, 0)) != cudaSuccess)
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "box copies: cudaStreamWaitEvent");
    if ((e = cudaMemcpyAsync(s->dev, s->host, bt->table_bytes, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, "box copies: uploading their table");
    s->used = false; /* until both events stand for this batch */
    const char *what = "box copies: cudaEventRecord";
    e = cudaEventRecord(s->copied, stream);
    if (e == cudaSuccess) {
        uint64_t want = (bt->pieces + BOX_WARPS - 1) / BOX_WARPS;
        unsigned blocks = want < b->max_blocks ? (unsigned)want : b->max_blocks;
        sync_box_kernel<<<blocks, BOX_BLOCK, 0, stream>>>((const sync_box_job_t *)s->dev, bt->njobs,
                                                         (const sync_box_dim_t *)(s->dev + bt->dims_at), bt->pieces);
        what = "box copies: launching their kernel";
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        what = "box copies: cudaEventRecord";
        e = cudaEventRecord(s->done, stream);
    }
    if (e != cudaSuccess) {
        cudaStreamSynchronize(stream); /* nothing may still read the slot when it is next written */
        return ferry_cuda_fail(err, FERRY_ERR_IO, e, what);
    }
    s->used = true;
    return FERRY_OK;
}

ferry_status_t sync_cuda_boxes_enqueue(sync_cuda_boxes_t *b, const sync_box_copy_t *jobs, size_t n,
                                       cudaStream_t stream, ferry_errbuf_t *err) {
    if (n == 0) return FERRY_OK;
    if (!jobs) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "%zu box copies at NULL", n);
    size_t need = sync_box_table_bound(jobs, n);
    if (need == SIZE_MAX) return ferry_fail(err, FERRY_ERR_LIMIT, "%zu box copies are too many for one batch", n);
    int prev;
    ferry_status_t st = use_device(b->device, &prev, err);
    if (st) return st;
    box_slot_t *s = &b->slot[b->next];
    sync_box_batch_t bt;
    st = slot_ready(s, need, err);
    if (!st) st = sync_box_table_build(jobs, n, s->host, s->cap, &bt, err);
    if (!st && bt.pieces) {
        st = launch(b, s, &bt, stream, err);
        if (!st) b->next ^= 1u;
    }
    restore_device(b->device, prev);
    return st;
}
