/* ferry sum on a GPU (common/sum_cuda.h; the definition in common/sum.h).
 *
 * Kernel 1 (sum_leaves): one warp per leaf of every region, from a leaf
 * table the host fills (pinned memory, one copy per batch). A leaf of more
 * than 240 bytes takes xxh3's long path split across the warp
 * (common/sum_xxh3.h says how); a shorter one is hashed by lane 0. Each
 * lane loads SUMX_GROUP blocks of 16-byte aligned vectors at once (4 KiB
 * per warp in flight); an input that is not 16-aligned is shifted into
 * place from the neighbouring lane's vector (a shuffle and funnel shifts),
 * never loaded unaligned. Every load is of an aligned word that overlaps
 * the input.
 * Kernel 2 (sum_regions): one warp per region: one leaf is the sum itself;
 * else the leaf hashes, as bytes, are hashed with seed = len (up to 30
 * leaves xxh3's short path on lane 0, beyond it the same warp routine with
 * the secret derived from the seed). */
#include <cuda.h>
#include <cuda_runtime.h>
#include <cuda_runtime_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "common/internal.h"
#include "common/cuda.h"
#include "common/sum_cuda.h"
}
#include "common/sum_xxh3.h"
#include "common/sum_warp.cuh"

#define WARPS_PER_BLOCK 8
#define THREADS (32 * WARPS_PER_BLOCK)

typedef struct sum_leaf { /* one leaf, as kernel 1 reads it */
    uint64_t addr;
    uint64_t len;
} sum_leaf_t;

typedef struct sum_rgn { /* one region, as kernel 2 reads it */
    uint64_t len;
    uint64_t first_leaf;
} sum_rgn_t;

__constant__ uint8_t sum_ksecret[192] = {SUMX_KSECRET_BYTES};

static __device__ __forceinline__ void load_secret(uint8_t *sec) {
    for (unsigned i = threadIdx.x; i < 192; i += blockDim.x) sec[i] = sum_ksecret[i];
    __syncthreads();
}

__global__ void __launch_bounds__(THREADS) sum_leaves(const sum_leaf_t *leaves, uint64_t n, uint64_t *hashes) {
    __shared__ uint8_t sec[192];
    load_secret(sec);
    const unsigned t = threadIdx.x & 31;
    const uint64_t stride = (uint64_t)gridDim.x * WARPS_PER_BLOCK;
    for (uint64_t w = (uint64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5); w < n; w += stride) {
        const uint8_t *p = (const uint8_t *)leaves[w].addr;
        const uint64_t len = leaves[w].len;
        uint64_t h;
        if (len > SUMX_SHORT_MAX) h = sumw_warp_long(p, len, sec, t);
        else h = t == 0 ? sumx_xxh3_short(p, len, sec, 0) : 0;
        if (t == 0) hashes[w] = h;
    }
}

__global__ void __launch_bounds__(THREADS) sum_regions(const sum_rgn_t *rgns, uint64_t n, const uint64_t *hashes,
                                                       uint64_t *sums) {
    __shared__ uint8_t sec[192];
    __shared__ uint8_t custom[WARPS_PER_BLOCK][192];
    load_secret(sec);
    const unsigned t = threadIdx.x & 31;
    uint8_t *cs = custom[threadIdx.x >> 5];
    const uint64_t stride = (uint64_t)gridDim.x * WARPS_PER_BLOCK;
    for (uint64_t r = (uint64_t)blockIdx.x * WARPS_PER_BLOCK + (threadIdx.x >> 5); r < n; r += stride) {
        const uint64_t len = rgns[r].len, first = rgns[r].first_leaf;
        if (len <= SUMX_LEAF) { /* one leaf: plain xxh3 */
            if (t == 0) sums[r] = hashes[first];
            continue;
        }
        const uint64_t nleaves = (len + SUMX_LEAF - 1) / SUMX_LEAF;
        const uint8_t *h = (const uint8_t *)(hashes + first); /* the leaf hashes, little-endian u64 */
        if (8 * nleaves <= SUMX_SHORT_MAX) {
            if (t == 0) sums[r] = sumx_xxh3_short(h, 8 * nleaves, sec, len);
            continue;
        }
        __syncwarp(); /* the last region's readers of cs are done */
        if (t < 12) sumx_custom_secret16(sec, t, len, cs);
        __syncwarp();
        const uint64_t s = sumw_warp_long(h, 8 * nleaves, cs, t);
        if (t == 0) sums[r] = s;
    }
}

/* ---- host side ------------------------------------------------------------------ */

struct ferry_sum_cuda {
    int device;
    unsigned grid_full; /* blocks that fit on the device at once */
    unsigned grid_max;  /* blocks a launch takes at most */
    /* device scratch, grow-only */
    sum_leaf_t *d_leaves;
    uint64_t *d_hashes;
    size_t cap_leaves;
    sum_rgn_t *d_rgns;
    uint64_t *d_sums;
    size_t cap_rgns;
    /* pinned host memory, grow-only */
    sum_leaf_t *h_leaves;
    size_t hcap_leaves;
    sum_rgn_t *h_rgns;
    uint64_t *h_sums;
    size_t hcap_rgns;
    /* the batch enqueued and not yet collected */
    bool pending;
    size_t pending_n;
    cudaStream_t stream;
    cudaEvent_t done; /* the batch's sums are in h_sums (collect waits for this, not the whole stream) */
};

static ferry_status_t cuda_fail(ferry_errbuf_t *err, cudaError_t e, const char *what) {
    return ferry_cuda_fail(err, e == cudaErrorMemoryAllocation ? FERRY_ERR_NO_MEMORY : FERRY_ERR_IO, e, what);
}

/* Makes device current for the calling thread, remembering the old one. */
static ferry_status_t enter(const ferry_sum_cuda_t *s, int *prev, ferry_errbuf_t *err) {
    cudaError_t e = cudaGetDevice(prev);
    if (e == cudaSuccess && *prev != s->device) e = cudaSetDevice(s->device);
    return e == cudaSuccess ? FERRY_OK : cuda_fail(err, e, "ferry sum: selecting the GPU");
}
static void leave(const ferry_sum_cuda_t *s, int prev) {
    if (prev != s->device) cudaSetDevice(prev);
}

ferry_status_t ferry_sum_cuda_create(int device, ferry_sum_cuda_t **out, ferry_errbuf_t *err) {
    if (!out) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: out is NULL");
    *out = NULL;
    ferry_status_t st = ferry_cuda_init(err);
    if (st != FERRY_OK) return st;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) return cuda_fail(err, e, "cudaGetDeviceCount");
    if (device < 0 || device >= count)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: no GPU %d (this host has %d)", device, count);
    ferry_sum_cuda_t *s = (ferry_sum_cuda_t *)calloc(1, sizeof *s);
    if (!s) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    s->device = device;
    int prev = 0, sms = 0, per_sm = 0;
    if ((st = enter(s, &prev, err)) != FERRY_OK) {
        free(s);
        return st;
    }
    e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, sum_leaves, THREADS, 0);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&s->done, cudaEventDisableTiming);
    leave(s, prev);
    if (e != cudaSuccess) {
        free(s);
        return cuda_fail(err, e, "ferry sum: asking the GPU's size");
    }
    s->grid_full = s->grid_max = (unsigned)(sms > 0 ? sms : 1) * (unsigned)(per_sm > 0 ? per_sm : 1);
    *out = s;
    return FERRY_OK;
}

static void free_scratch(ferry_sum_cuda_t *s) {
    cudaFree(s->d_leaves);
    cudaFree(s->d_hashes);
    cudaFree(s->d_rgns);
    cudaFree(s->d_sums);
    cudaFreeHost(s->h_leaves);
    cudaFreeHost(s->h_rgns);
    cudaFreeHost(s->h_sums);
}

void ferry_sum_cuda_destroy(ferry_sum_cuda_t *s) {
    if (!s) return;
    int prev = 0;
    ferry_errbuf_t ignored;
    bool entered = enter(s, &prev, &ignored) == FERRY_OK;
    if (s->pending) cudaEventSynchronize(s->done);
    free_scratch(s);
    if (s->done) cudaEventDestroy(s->done);
    if (entered) leave(s, prev);
    free(s);
}

size_t ferry_sum_cuda_device_bytes(const ferry_sum_cuda_t *s) {
    if (!s) return 0;
    return s->cap_leaves * (sizeof(sum_leaf_t) + sizeof(uint64_t)) + s->cap_rgns * (sizeof(sum_rgn_t) + sizeof(uint64_t));
}

/* Room for nleaves leaves and n regions; the old contents are not kept. */
static ferry_status_t grow(ferry_sum_cuda_t *s, size_t nleaves, size_t n, ferry_errbuf_t *err) {
    cudaError_t e = cudaSuccess;
    if (nleaves > s->cap_leaves) {
        size_t cap = nleaves < 2 * s->cap_leaves ? 2 * s->cap_leaves : nleaves;
        cudaFree(s->d_leaves);
        cudaFree(s->d_hashes);
        s->d_leaves = NULL;
        s->d_hashes = NULL;
        s->cap_leaves = 0;
        if ((e = cudaMalloc((void **)&s->d_leaves, cap * sizeof(sum_leaf_t))) != cudaSuccess ||
            (e = cudaMalloc((void **)&s->d_hashes, cap * sizeof(uint64_t))) != cudaSuccess) {
            cudaFree(s->d_leaves);
            s->d_leaves = NULL;
            return cuda_fail(err, e, "ferry sum: cudaMalloc (leaf table)");
        }
        s->cap_leaves = cap;
    }
    if (nleaves > s->hcap_leaves) {
        size_t cap = nleaves < 2 * s->hcap_leaves ? 2 * s->hcap_leaves : nleaves;
        cudaFreeHost(s->h_leaves);
        s->h_leaves = NULL;
        s->hcap_leaves = 0;
        if ((e = cudaMallocHost((void **)&s->h_leaves, cap * sizeof(sum_leaf_t))) != cudaSuccess)
            return cuda_fail(err, e, "ferry sum: cudaMallocHost (leaf table)");
        s->hcap_leaves = cap;
    }
    if (n > s->cap_rgns) {
        size_t cap = n < 2 * s->cap_rgns ? 2 * s->cap_rgns : n;
        cudaFree(s->d_rgns);
        cudaFree(s->d_sums);
        s->d_rgns = NULL;
        s->d_sums = NULL;
        s->cap_rgns = 0;
        if ((e = cudaMalloc((void **)&s->d_rgns, cap * sizeof(sum_rgn_t))) != cudaSuccess ||
            (e = cudaMalloc((void **)&s->d_sums, cap * sizeof(uint64_t))) != cudaSuccess) {
            cudaFree(s->d_rgns);
            s->d_rgns = NULL;
            return cuda_fail(err, e, "ferry sum: cudaMalloc (region table)");
        }
        s->cap_rgns = cap;
    }
    if (n > s->hcap_rgns) {
        size_t cap = n < 2 * s->hcap_rgns ? 2 * s->hcap_rgns : n;
        cudaFreeHost(s->h_rgns);
        cudaFreeHost(s->h_sums);
        s->h_rgns = NULL;
        s->h_sums = NULL;
        s->hcap_rgns = 0;
        if ((e = cudaMallocHost((void **)&s->h_rgns, cap * sizeof(sum_rgn_t))) != cudaSuccess ||
            (e = cudaMallocHost((void **)&s->h_sums, cap * sizeof(uint64_t))) != cudaSuccess) {
            cudaFreeHost(s->h_rgns);
            s->h_rgns = NULL;
            return cuda_fail(err, e, "ferry sum: cudaMallocHost (region table)");
        }
        s->hcap_rgns = cap;
    }
    return FERRY_OK;
}

void ferry_sum_cuda_limit_blocks(ferry_sum_cuda_t *s, unsigned blocks) {
    if (s) s->grid_max = blocks && blocks < s->grid_full ? blocks : s->grid_full;
}

static unsigned grid_for(const ferry_sum_cuda_t *s, uint64_t warps) {
    uint64_t blocks = (warps + WARPS_PER_BLOCK - 1) / WARPS_PER_BLOCK;
    return (unsigned)(blocks < s->grid_max ? blocks : s->grid_max);
}

ferry_status_t ferry_sum_cuda_enqueue(ferry_sum_cuda_t *s, const ferry_sum_region_t *regions, size_t n,
                                      cudaStream_t stream, ferry_errbuf_t *err) {
    if (!s) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: no object");
    if (s->pending)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: a batch of %zu regions is not collected yet",
                          s->pending_n);
    if (n && !regions) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: regions is NULL (n = %zu)", n);
    uint64_t nleaves = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t len = regions[i].len;
        if (len && !regions[i].device_ptr)
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: region %zu has %llu bytes and no pointer", i,
                              (unsigned long long)len);
        nleaves += len <= SUMX_LEAF ? 1 : (len + SUMX_LEAF - 1) / SUMX_LEAF;
        if (nleaves > UINT32_MAX)
            return ferry_fail(err, FERRY_ERR_LIMIT, "ferry sum: more than 2^32 leaves of 64 KiB in one batch");
    }
    if (n == 0) {
        s->pending = true;
        s->pending_n = 0;
        s->stream = stream;
        return FERRY_OK;
    }
    int prev = 0;
    ferry_status_t st = enter(s, &prev, err);
    if (st != FERRY_OK) return st;
    if ((st = grow(s, (size_t)nleaves, n, err)) != FERRY_OK) {
        leave(s, prev);
        return st;
    }
    uint64_t leaf = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t len = regions[i].len, addr = (uint64_t)(uintptr_t)regions[i].device_ptr;
        s->h_rgns[i] = sum_rgn_t{len, leaf};
        if (len <= SUMX_LEAF) {
            s->h_leaves[leaf++] = sum_leaf_t{addr, len};
            continue;
        }
        for (uint64_t off = 0; off < len; off += SUMX_LEAF)
            s->h_leaves[leaf++] = sum_leaf_t{addr + off, len - off < SUMX_LEAF ? len - off : SUMX_LEAF};
    }
    cudaError_t e = cudaMemcpyAsync(s->d_leaves, s->h_leaves, nleaves * sizeof(sum_leaf_t), cudaMemcpyHostToDevice, stream);
    const char *what = "cudaMemcpyAsync (leaf table)";
    if (e == cudaSuccess) {
        what = "cudaMemcpyAsync (region table)";
        e = cudaMemcpyAsync(s->d_rgns, s->h_rgns, n * sizeof(sum_rgn_t), cudaMemcpyHostToDevice, stream);
    }
    if (e == cudaSuccess) {
        what = "launching sum_leaves";
        sum_leaves<<<grid_for(s, nleaves), THREADS, 0, stream>>>(s->d_leaves, nleaves, s->d_hashes);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        what = "launching sum_regions";
        sum_regions<<<grid_for(s, n), THREADS, 0, stream>>>(s->d_rgns, n, s->d_hashes, s->d_sums);
        e = cudaGetLastError();
    }
    if (e == cudaSuccess) {
        what = "cudaMemcpyAsync (sums)";
        e = cudaMemcpyAsync(s->h_sums, s->d_sums, n * sizeof(uint64_t), cudaMemcpyDeviceToHost, stream);
    }
    if (e == cudaSuccess) {
        what = "cudaEventRecord";
        e = cudaEventRecord(s->done, stream);
    }
    if (e != cudaSuccess) {
        cudaStreamSynchronize(stream); /* nothing of this batch stays in flight */
        leave(s, prev);
        return cuda_fail(err, e, what);
    }
    leave(s, prev);
    s->pending = true;
    s->pending_n = n;
    s->stream = stream;
    return FERRY_OK;
}

ferry_status_t ferry_sum_cuda_collect(ferry_sum_cuda_t *s, uint64_t *out, ferry_errbuf_t *err) {
    if (!s) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: no object");
    if (!s->pending) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: nothing enqueued to collect");
    if (s->pending_n && !out) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry sum: out is NULL");
    s->pending = false;
    if (s->pending_n == 0) return FERRY_OK;
    int prev = 0;
    ferry_status_t st = enter(s, &prev, err);
    if (st != FERRY_OK) return st;
    cudaError_t e = cudaEventSynchronize(s->done); /* this batch, not what the stream got since */
    leave(s, prev);
    if (e != cudaSuccess) return cuda_fail(err, e, "ferry sum: the batch failed (cudaEventSynchronize)");
    memcpy(out, s->h_sums, s->pending_n * sizeof(uint64_t));
    return FERRY_OK;
}
