/* Encoding format 2 deltas in GPU memory: the kernels behind
 * codec/delta_cuda_enc.h. The steps that decide bytes are
 * codec/delta_enc_dev.h's (host and device code, checked on the CPU by
 * test_delta_enc_dev.c); these kernels only lay them out over the GPU:
 *
 * scan     a block per chunk, 4096 elements (a tile) at a time: every
 *          element compared, the changed ones' buckets and every
 *          stride-th one's counted in shared memory.
 * hash     a warp per chunk and version: the checksums of next and (when
 *          it changed and its sums were not given) base.
 * classes  a warp per chunk with changes: lane 0 groups the buckets, the
 *          lanes price every range of groups, lane 0 runs the DP.
 * rank     a block per chunk with changes, 4096 elements (a tile) at a
 *          time, each thread 16 of them: per class, the elements before
 *          each thread (16-bit counts, four to a word, scanned over the
 *          block) give each change its rank in its class and sub-block;
 *          the changes before it, its place in the list.
 * totals   a thread per chunk with changes.
 * part     a warp per sub-block: 32 list entries at a time, one ballot per
 *          class, and lane k walks class k's.
 * choose   a thread per chunk with changes.
 * write    a warp per sub-block of a sparse chunk, walking as part does,
 *          ORing its sub-streams' words into the zeroed record area.
 * head     a thread per chunk; raw: a block per raw chunk copies the next
 *          contents; seal: a warp per chunk, the record checksum. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec/delta_enc_kern.h"
#include "common/sum_warp.cuh"
#include "common/sum_xxh3.h"

#define THREADS 256u
#define WARPS (THREADS / 32u)
#define EPT (EK_TILE / THREADS) /* elements per thread and tile: 16 */
#define FULL 0xffffffffu

static_assert(EPT == 16, "16 elements per thread");

__constant__ uint8_t ek_ksecret[192] = {SUMX_KSECRET_BYTES};

static __device__ __forceinline__ uint32_t elem_load(const uint8_t *p, uint32_t w, uint64_t i) {
    return w == 2 ? ((const uint16_t *)p)[i] : w == 4 ? ((const uint32_t *)p)[i] : p[i];
}

/* ---- scan ----------------------------------------------------------------------- */

/* The elements of 16 bytes of base (b) and next (n), element i0 first:
 * each sampled one's bucket and each changed one's counted. */
static __device__ __forceinline__ void scan_vec(uint4 b, uint4 n, uint32_t w, uint32_t i0, uint32_t smask,
                                                uint32_t *hs, uint32_t *hc, uint32_t *mine) {
    const uint32_t bw[4] = {b.x, b.y, b.z, b.w}, nw[4] = {n.x, n.y, n.z, n.w};
    const uint32_t per = 4 / w, bits = 8 * w, mask = w == 4 ? 0xffffffffu : (1u << bits) - 1;
#pragma unroll
    for (uint32_t q = 0; q < 4; q++) {
        /* the common case: no change, and (smask + 1 a multiple of per) the
           word's one candidate for the sample, its first, not sampled */
        if (bw[q] == nw[q] && ((i0 + q * per) & smask) != 0) continue;
        for (uint32_t e = 0; e < per; e++) {
            const uint32_t i = i0 + q * per + e;
            const uint32_t bv = (bw[q] >> (bits * e)) & mask, nv = (nw[q] >> (bits * e)) & mask, bk = ek_bucket(bv, w);
            if ((i & smask) == 0) atomicAdd(&hs[bk], 1u);
            if (bv != nv) {
                atomicAdd(&hc[bk], 1u);
                (*mine)++;
            }
        }
    }
}

__global__ void __launch_bounds__(THREADS) ek_scan(ek_batch_t b) {
    __shared__ uint32_t hs[256], hc[256], nchg;
    const unsigned tid = threadIdx.x, lane = tid & 31;
    ek_chunk_t *c = &b.chunks[blockIdx.x];
    const uint8_t *base = (const uint8_t *)c->base, *next = (const uint8_t *)c->next;
    const uint32_t w = c->width, elems = c->elems, smask = elems >= (1u << 16) ? 63 : 0; /* every 64th, or all */
    /* 16-byte loads when both are 16-aligned (chunks of a 16-aligned region are) */
    const bool vec = (((uintptr_t)base | (uintptr_t)next) & 15) == 0;
    hs[tid] = hc[tid] = 0;
    if (tid == 0) nchg = 0;
    __syncthreads();
    uint32_t mine = 0;
    for (uint32_t t0 = 0; t0 < elems; t0 += EK_TILE) {
        const uint32_t t1 = elems - t0 < EK_TILE ? elems : t0 + EK_TILE;
        uint32_t i = t0 + tid; /* the scalar loop's first element: the tile's, or the tail's */
        if (vec) {
            /* 16-byte loads, all of a thread's issued before any is used
               (w of them per stream and tile), so that enough bytes are in
               flight; the tail of a chunk that ends within a vector goes
               through the scalar loop below */
            const uint32_t per = 16 / w, v0 = t0 / per, v1 = t1 / per;
            const uint4 *bp = (const uint4 *)base, *np = (const uint4 *)next;
            uint4 vb[4], vn[4];
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) {
                const uint32_t v = v0 + tid + j * THREADS;
                const bool in = j < w && v < v1;
                vb[j] = in ? bp[v] : make_uint4(0, 0, 0, 0);
                vn[j] = in ? np[v] : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) {
                const uint32_t v = v0 + tid + j * THREADS;
                if (j < w && v < v1) scan_vec(vb[j], vn[j], w, v * per, smask, hs, hc, &mine);
            }
            i = v1 * per + tid;
        }
        for (; i < t1; i += THREADS) {
            uint32_t bv = elem_load(base, w, i), nv = elem_load(next, w, i), bk = ek_bucket(bv, w);
            if ((i & smask) == 0) atomicAdd(&hs[bk], 1u);
            if (bv != nv) {
                atomicAdd(&hc[bk], 1u);
                mine++;
            }
        }
    }
    for (unsigned o = 16; o; o >>= 1) mine += __shfl_xor_sync(FULL, mine, o);
    if (lane == 0 && mine) atomicAdd(&nchg, mine);
    __syncthreads();
    uint32_t *hist = b.hist + (uint64_t)blockIdx.x * 512;
    hist[tid] = hs[tid];
    hist[256 + tid] = hc[tid];
    if (tid == 0) c->changed = nchg;
}

/* ---- hash ------------------------------------------------------------------------- */

/* After ek_scan: a warp per chunk and version, xxh3 of the whole chunk
 * at a time (common/sum_warp.cuh, as ferry sum hashes its leaves): next's,
 * which is base's too when nothing changed, and base's when it changed
 * and its sum was not given. Hashing tile by tile inside the scan, while
 * the tile was in cache, took 126 registers there and left memory idle
 * while a block hashed: scan and hash apart read the bytes twice and are
 * 1.7x faster (docs/benchmarks.md). */
__global__ void __launch_bounds__(THREADS) ek_hash(ek_batch_t b) {
    __shared__ uint8_t sec[192];
    if (threadIdx.x < 192) sec[threadIdx.x] = ek_ksecret[threadIdx.x];
    __syncthreads();
    const unsigned lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const uint64_t j = (uint64_t)blockIdx.x * WARPS + wp;
    if (j >= 2ull * b.nchunks) return;
    ek_chunk_t *c = &b.chunks[j >> 1];
    const bool of_base = j & 1;
    if (of_base && (!c->changed || c->given)) return;
    const uint64_t h = sumw_xxh3((const uint8_t *)(of_base ? c->base : c->next), (uint64_t)c->elems * c->width, sec,
                                 lane);
    if (lane == 0) {
        if (of_base) {
            c->base_sum = h;
        } else {
            c->next_sum = h;
            if (!c->changed) c->base_sum = h; /* the same bytes */
        }
    }
}

/* ---- classes ---------------------------------------------------------------------- */

__global__ void __launch_bounds__(32) ek_classes(ek_batch_t b) {
    __shared__ er_groups_t gr;
    __shared__ er_scratch_t ws;
    __shared__ uint64_t cost[ER_GROUPS_MAX * (ER_GROUPS_MAX + 1) / 2];
    const unsigned lane = threadIdx.x;
    ek_chunk_t *c = &b.chunks[b.busy[blockIdx.x]];
    const uint32_t *hist = b.hist + (uint64_t)b.busy[blockIdx.x] * 512;
    const uint32_t stride = c->elems >= (1u << 16) ? 64 : 1;
    if (lane == 0) er_groups_make(hist, stride, hist + 256, &gr, &ws);
    __syncwarp();
    const uint32_t g = gr.g;
    if (c->max_classes > 1 && g > 1)
        for (uint32_t x = lane; x < er_cost_entries(g); x += 32) {
            uint32_t j, i;
            er_cost_pair(g, x, &j, &i);
            cost[x] = er_class_cost(&gr, j, i);
        }
    __syncwarp();
    if (lane == 0) {
        uint32_t lower[EK_CLASSES];
        uint32_t K = er_classes_dp(&gr, cost, c->max_classes, c->width == 1 ? 0 : c->width == 2 ? 7 : 23, lower, &ws);
        c->classes = K;
        for (uint32_t k = 0; k < EK_CLASSES; k++) c->lower[k] = k < K ? lower[k] : 0;
    }
}

/* ---- rank ------------------------------------------------------------------------- */

/* 16-bit field k of a class count pair (classes 0-3 in lo, 4-7 in hi) */
static __device__ __forceinline__ uint32_t field(uint64_t lo, uint64_t hi, uint32_t k) {
    return (uint32_t)((k < 4 ? lo >> (16 * k) : hi >> (16 * (k - 4))) & 0xFFFF);
}

/* Elements [first, first + 16) of p (W bytes each, 16-aligned) with W
 * 16-byte loads: the rank pass's thread reads its 16 that way instead of
 * one element per load (a sixteenth of the L1 requests). */
template <uint32_t W>
static __device__ __forceinline__ void load16(const uint8_t *p, uint32_t first, uint32_t out[EPT]) {
    const uint4 *vp = (const uint4 *)(p + (uint64_t)first * W);
    uint32_t word[4 * W];
#pragma unroll
    for (uint32_t j = 0; j < W; j++) {
        const uint4 v = vp[j];
        word[4 * j] = v.x, word[4 * j + 1] = v.y, word[4 * j + 2] = v.z, word[4 * j + 3] = v.w;
    }
#pragma unroll
    for (uint32_t e = 0; e < EPT; e++)
        out[e] = W == 4 ? word[e] : W == 2 ? (word[e / 2] >> (16 * (e % 2))) & 0xFFFF : (word[e / 4] >> (8 * (e % 4))) & 0xFF;
}

__global__ void __launch_bounds__(THREADS, 4) ek_rank(ek_batch_t b) {
    __shared__ uint8_t class_of[256];
    __shared__ uint64_t ctab[256]; /* per bucket: 1 << 5 * its class (a thread's 16 counted in 5-bit fields) */
    __shared__ uint64_t wlo[WARPS], whi[WARPS];
    __shared__ uint32_t wch[WARPS];
    __shared__ uint32_t carry[EK_CLASSES], sub_m[EK_CLASSES], sub_nu[EK_CLASSES];
    __shared__ uint32_t chg_before, sub_first;
    const unsigned tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    const uint32_t ci = b.busy[blockIdx.x];
    const ek_chunk_t *c = &b.chunks[ci];
    const uint8_t *base = (const uint8_t *)c->base, *next = (const uint8_t *)c->next;
    const uint32_t w = c->width, elems = c->elems, S = c->sub_log2;
    uint64_t *list = b.list + c->list0;
    const bool vec = (((uintptr_t)base | (uintptr_t)next) & 15) == 0; /* then every thread's 16 are 16-aligned */
    if (tid == 0) ek_class_table(c, class_of);
    __syncthreads();
    ctab[tid] = 1ull << (5 * class_of[tid]); /* THREADS == 256 buckets */
    if (tid < EK_CLASSES) carry[tid] = sub_m[tid] = sub_nu[tid] = 0;
    if (tid == 0) chg_before = sub_first = 0;
    __syncthreads();
    for (uint32_t t0 = 0; t0 < elems; t0 += EK_TILE) {
        const uint32_t first = t0 + EPT * tid;
        uint32_t bv[EPT], nv[EPT];
        uint64_t lo = 0, hi = 0;
        uint32_t nch = 0;
        if (vec && first + EPT <= elems) {
            if (w == 2) load16<2>(base, first, bv), load16<2>(next, first, nv);
            else if (w == 4) load16<4>(base, first, bv), load16<4>(next, first, nv);
            else load16<1>(base, first, bv), load16<1>(next, first, nv);
        } else {
#pragma unroll
            for (uint32_t e = 0; e < EPT; e++) {
                bool in = first + e < elems;
                bv[e] = in ? elem_load(base, w, first + e) : 0;
                nv[e] = in ? elem_load(next, w, first + e) : 0;
            }
        }
        uint64_t c5 = 0; /* the thread's class counts, 5 bits each (at most 16) */
#pragma unroll
        for (uint32_t e = 0; e < EPT; e++) {
            if (first + e < elems) c5 += ctab[ek_bucket(bv[e], w)];
            nch += bv[e] != nv[e];
        }
#pragma unroll
        for (uint32_t k = 0; k < EK_CLASSES; k++) {
            const uint64_t n = (c5 >> (5 * k)) & 31;
            if (k < 4) lo |= n << (16 * k);
            else hi |= n << (16 * (k - 4));
        }
        /* inclusive scans over the warp, then over the warps */
        uint64_t slo = lo, shi = hi;
        uint32_t sch = nch;
        for (unsigned o = 1; o < 32; o <<= 1) {
            uint64_t a = __shfl_up_sync(FULL, slo, o), h = __shfl_up_sync(FULL, shi, o);
            uint32_t x = __shfl_up_sync(FULL, sch, o);
            if (lane >= o) slo += a, shi += h, sch += x;
        }
        if (lane == 31) wlo[wp] = slo, whi[wp] = shi, wch[wp] = sch;
        __syncthreads();
        uint64_t plo = 0, phi = 0;
        uint32_t pch = 0;
        for (unsigned x = 0; x < wp; x++) plo += wlo[x], phi += whi[x], pch += wch[x];
        plo += slo - lo; /* this thread's exclusive prefix */
        phi += shi - hi;
        pch += sch - nch;
        uint64_t tlo = 0, thi = 0; /* the tile's totals */
        uint32_t tch = 0;
        for (unsigned x = 0; x < WARPS; x++) tlo += wlo[x], thi += whi[x], tch += wch[x];
        uint32_t at = chg_before + pch;
        uint64_t run5 = 0; /* the thread's elements so far, per class in 5-bit fields */
#pragma unroll
        for (uint32_t e = 0; e < EPT; e++) {
            if (first + e >= elems) break;
            const uint32_t bk = ek_bucket(bv[e], w);
            if (bv[e] != nv[e]) {
                const uint32_t k = class_of[bk];
                uint32_t val, sign;
                ek_change(bv[e], nv[e], w, &val, &sign);
                list[at++] = ek_entry(carry[k] + field(plo, phi, k) + (uint32_t)((run5 >> (5 * k)) & 31), k, sign, val);
                atomicAdd(&sub_m[k], 1u);
                if (val) atomicAdd(&sub_nu[k], 1u);
            }
            run5 += ctab[bk];
        }
        __syncthreads(); /* every thread has read carry and chg_before */
        const uint32_t t1 = t0 + EK_TILE;
        const bool sub_end = t1 >= elems || (t1 & ((1u << S) - 1)) == 0;
        if (tid < EK_CLASSES) {
            carry[tid] += field(tlo, thi, tid);
            if (sub_end) {
                ek_sub_t *s = &b.subs[((uint64_t)c->sub0 + (t0 >> S)) * EK_CLASSES + tid];
                s->count = carry[tid];
                s->m = sub_m[tid];
                s->nu = sub_nu[tid];
                carry[tid] = sub_m[tid] = sub_nu[tid] = 0;
            }
        }
        if (tid == 0) {
            chg_before += tch;
            if (sub_end) {
                ek_subblk_t *k = &b.blks[c->sub0 + (t0 >> S)];
                k->first = sub_first;
                k->m = chg_before - sub_first;
                sub_first = chg_before;
            }
        }
        __syncthreads();
    }
}

/* ---- totals, choose --------------------------------------------------------------- */

__global__ void __launch_bounds__(THREADS) ek_totals_k(ek_batch_t b) {
    const uint32_t i = blockIdx.x * THREADS + threadIdx.x;
    if (i >= b.nbusy) return;
    ek_chunk_t *c = &b.chunks[b.busy[i]];
    ek_totals(c, b.subs + (uint64_t)c->sub0 * EK_CLASSES);
}

__global__ void __launch_bounds__(THREADS) ek_choose_k(ek_batch_t b) {
    const uint32_t i = blockIdx.x * THREADS + threadIdx.x;
    if (i >= b.nbusy) return;
    ek_chunk_t *c = &b.chunks[b.busy[i]];
    ek_choose(c, b.subs + (uint64_t)c->sub0 * EK_CLASSES);
}

/* ---- part and write: a warp per sub-block, lane k walking class k ---------------- */

/* Calls f(entry, list index) on lane k for each change of class k in the
   sub-block, in order. */
template <typename F>
static __device__ __forceinline__ void walk(const uint64_t *list, uint64_t at, uint32_t m, uint32_t K, uint64_t *ent,
                                            unsigned lane, F f) {
    for (uint32_t o = 0; o < m; o += 32) {
        const bool in = o + lane < m;
        const uint64_t e = in ? list[at + o + lane] : 0;
        const uint32_t k = ek_entry_class(e);
        uint32_t mine = 0;
        for (uint32_t x = 0; x < K; x++) {
            uint32_t bal = __ballot_sync(FULL, in && k == x);
            if (lane == x) mine = bal;
        }
        ent[lane] = e;
        __syncwarp();
        while (mine) {
            const uint32_t i = __ffs(mine) - 1;
            mine &= mine - 1;
            f(ent[i], at + o + i);
        }
        __syncwarp();
    }
}

__global__ void __launch_bounds__(THREADS) ek_part_k(ek_batch_t b) {
    __shared__ uint64_t ent[WARPS][32];
    const unsigned lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const uint32_t s = blockIdx.x * WARPS + wp;
    if (s >= b.nblks) return;
    const ek_subblk_t blk = b.blks[s];
    const ek_chunk_t *c = &b.chunks[blk.chunk];
    const uint32_t K = c->classes;
    const int g0 = lane < K ? c->g0[lane] : 1, n0 = lane < K ? c->n0[lane] : 1;
    uint16_t *runs = b.runs;
    ek_part_t p;
    ek_part_init(&p);
    walk(b.list, c->list0 + blk.first, blk.m, K, ent[wp], lane,
         [&](uint64_t e, uint64_t i) { ek_part_change(&p, e, i, g0, n0, runs); });
    if (lane < K)
        ek_part_end(&p, c->nonunit[lane], n0, runs, &b.subs[((uint64_t)c->sub0 + blk.b) * EK_CLASSES + lane]);
}

__global__ void __launch_bounds__(THREADS) ek_write_k(ek_batch_t b) {
    __shared__ uint64_t ent[WARPS][32];
    const unsigned lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const uint32_t x = blockIdx.x * WARPS + wp;
    if (x >= b.nsparse_blks) return;
    const ek_subblk_t blk = b.blks[b.sparse_blks[x]];
    const ek_chunk_t *c = &b.chunks[blk.chunk];
    const uint32_t K = c->classes;
    const uint64_t rec_at = c->rec - (uint64_t)(uintptr_t)b.out;
    uint32_t *words = (uint32_t *)b.out;
    const uint16_t *runs = b.runs;
    const ek_sub_t *s = lane < K ? &b.subs[((uint64_t)c->sub0 + blk.b) * EK_CLASSES + lane] : NULL;
    ek_wr_t wr;
    if (lane < K) ek_wr_begin(&wr, c, lane, s, rec_at, words);
    walk(b.list, c->list0 + blk.first, blk.m, K, ent[wp], lane,
         [&](uint64_t e, uint64_t i) { ek_wr_change(&wr, e, runs[i], words); });
    if (lane < K) ek_wr_end(&wr, c, lane, blk.b, s, rec_at, words);
}

/* ---- head, raw, seal ---------------------------------------------------------------- */

__global__ void __launch_bounds__(THREADS) ek_head_k(ek_batch_t b) {
    const uint32_t i = blockIdx.x * THREADS + threadIdx.x;
    if (i >= b.nchunks) return;
    ek_head(&b.chunks[i], (uint8_t *)b.chunks[i].rec);
}

__global__ void __launch_bounds__(THREADS) ek_raw_k(ek_batch_t b) {
    const ek_chunk_t *c = &b.chunks[b.raw[blockIdx.x]];
    uint8_t *dst = (uint8_t *)c->rec + EK_HEADER;
    const uint8_t *src = (const uint8_t *)c->next;
    const uint64_t n = (uint64_t)c->elems * c->width;
    for (uint64_t i = threadIdx.x; i < n; i += THREADS) dst[i] = src[i];
}

__global__ void __launch_bounds__(THREADS) ek_seal_k(ek_batch_t b) {
    __shared__ uint8_t sec[192];
    __shared__ uint8_t cs[WARPS][192];
    if (threadIdx.x < 192) sec[threadIdx.x] = ek_ksecret[threadIdx.x];
    __syncthreads();
    const unsigned lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const uint32_t i = blockIdx.x * WARPS + wp;
    if (i >= b.nchunks) return;
    const ek_chunk_t *c = &b.chunks[i];
    uint8_t *rec = (uint8_t *)c->rec;
    uint64_t seed = lane == 0 ? sumx_xxh3_short(rec, 32, sec, 0) : 0;
    seed = __shfl_sync(FULL, seed, 0);
    uint64_t h = sumw_xxh3_seeded(rec + EK_HEADER, c->rec_len - EK_HEADER, seed, sec, cs[wp], lane);
    if (lane == 0) ek_put64(rec + 32, h);
}

/* ---- launchers ------------------------------------------------------------------------ */

static unsigned blocks(uint64_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

extern "C" cudaError_t ek_scan_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nchunks) return cudaSuccess;
    ek_scan<<<b->nchunks, THREADS, 0, stream>>>(*b);
    ek_hash<<<blocks(2ull * b->nchunks, WARPS), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}

extern "C" cudaError_t ek_plan_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nbusy) return cudaSuccess;
    ek_classes<<<b->nbusy, 32, 0, stream>>>(*b);
    ek_rank<<<b->nbusy, THREADS, 0, stream>>>(*b);
    ek_totals_k<<<blocks(b->nbusy, THREADS), THREADS, 0, stream>>>(*b);
    if (b->nblks) ek_part_k<<<blocks(b->nblks, WARPS), THREADS, 0, stream>>>(*b);
    ek_choose_k<<<blocks(b->nbusy, THREADS), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}

extern "C" cudaError_t ek_write_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (b->nsparse_blks) ek_write_k<<<blocks(b->nsparse_blks, WARPS), THREADS, 0, stream>>>(*b);
    if (b->nchunks) ek_head_k<<<blocks(b->nchunks, THREADS), THREADS, 0, stream>>>(*b);
    if (b->nraw) ek_raw_k<<<b->nraw, THREADS, 0, stream>>>(*b);
    if (b->nchunks) ek_seal_k<<<blocks(b->nchunks, WARPS), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}
