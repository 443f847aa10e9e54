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
 *          time, each thread 16 of them, specialized by width: per class,
 *          the elements before each thread (16-bit counts, four to a word,
 *          scanned over the block) give each change its rank in its class
 *          and sub-block; the changes before it, its place in the list.
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
template <uint32_t W>
static __device__ __forceinline__ void scan_vec(uint4 b, uint4 n, uint32_t i0, uint32_t smask, uint32_t *hs,
                                                uint32_t *hc, uint32_t *mine) {
    const uint32_t bw[4] = {b.x, b.y, b.z, b.w}, nw[4] = {n.x, n.y, n.z, n.w};
    const uint32_t per = 4 / W, bits = 8 * W, mask = W == 4 ? 0xffffffffu : (1u << bits) - 1;
#pragma unroll
    for (uint32_t q = 0; q < 4; q++) {
        /* the common case: no change, and (smask + 1 a multiple of per) the
           word's one candidate for the sample, its first, not sampled */
        if (bw[q] == nw[q] && ((i0 + q * per) & smask) != 0) continue;
#pragma unroll
        for (uint32_t e = 0; e < per; e++) {
            const uint32_t i = i0 + q * per + e;
            const uint32_t bv = (bw[q] >> (bits * e)) & mask, nv = (nw[q] >> (bits * e)) & mask, bk = ek_bucket(bv, W);
            if ((i & smask) == 0) atomicAdd(&hs[bk], 1u);
            if (bv != nv) {
                atomicAdd(&hc[bk], 1u);
                (*mine)++;
            }
        }
    }
}

/* One chunk's scan, elements of W bytes (specialized: the generic loop
   ran the width's arithmetic on every word). */
template <uint32_t W>
static __device__ __forceinline__ uint32_t scan_chunk(const ek_chunk_t *c, uint32_t *hs, uint32_t *hc) {
    const unsigned tid = threadIdx.x;
    const uint8_t *base = (const uint8_t *)c->base, *next = (const uint8_t *)c->next;
    const uint32_t w = W, elems = c->elems, smask = elems >= (1u << 16) ? 63 : 0; /* every 64th, or all */
    /* 16-byte loads when both are 16-aligned (chunks of a 16-aligned region are) */
    const bool vec = (((uintptr_t)base | (uintptr_t)next) & 15) == 0;
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
                if (j < w && v < v1) scan_vec<W>(vb[j], vn[j], v * per, smask, hs, hc, &mine);
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
    return mine;
}

__global__ void __launch_bounds__(THREADS, 5) ek_scan(ek_batch_t b) {
    __shared__ uint32_t hs[256], hc[256], nchg;
    const unsigned tid = threadIdx.x, lane = tid & 31;
    ek_chunk_t *c = &b.chunks[blockIdx.x];
    hs[tid] = hc[tid] = 0;
    if (tid == 0) nchg = 0;
    __syncthreads();
    uint32_t mine = c->width == 2 ? scan_chunk<2>(c, hs, hc) : c->width == 4 ? scan_chunk<4>(c, hs, hc)
                                                                              : scan_chunk<1>(c, hs, hc);
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

/* The magnitude buckets of a thread's 16 elements (W bytes each, packed
 * in 4 * W words), one per byte: four elements to a word. */
template <uint32_t W>
static __device__ __forceinline__ void bucket_bytes(const uint32_t *wd, uint32_t bk[4]) {
#pragma unroll
    for (uint32_t j = 0; j < 4; j++) {
        if (W == 1) {
            bk[j] = wd[j] & 0x7F7F7F7Fu;
        } else if (W == 2) { /* each half's bucket is byte 1 or 3 of the word << 1 */
            bk[j] = __byte_perm(wd[2 * j] << 1, wd[2 * j + 1] << 1, 0x7531);
        } else { /* byte 3 of the word << 1 */
            const uint32_t lo = __byte_perm(wd[4 * j] << 1, wd[4 * j + 1] << 1, 0x0073),
                           hi = __byte_perm(wd[4 * j + 2] << 1, wd[4 * j + 3] << 1, 0x0073);
            bk[j] = __byte_perm(lo, hi, 0x5410);
        }
    }
}

/* Element e (a constant) of 16 packed in 4 * W words. */
template <uint32_t W>
static __device__ __forceinline__ uint32_t word_elem(const uint32_t *wd, uint32_t e) {
    return W == 4 ? wd[e] : W == 2 ? (wd[e / 2] >> (16 * (e % 2))) & 0xFFFF : (wd[e / 4] >> (8 * (e % 4))) & 0xFF;
}

/* The rank pass's shared state. ctab: per bucket, 1 << 5k (k its class)
 * in the low 40 bits, so that a thread adds up its 16 elements' class
 * counts in 5-bit fields, and k in the top 3 bits. */
typedef struct {
    uint64_t ctab[256];
    uint64_t wlo[WARPS], whi[WARPS];
    uint32_t wch[WARPS];
    uint32_t carry[EK_CLASSES], sub_m[EK_CLASSES], sub_nu[EK_CLASSES];
    uint32_t chg_before, sub_first;
} rank_smem_t;

/* One chunk's ranks, tile by tile; elements of W bytes. Per thread and
 * tile: its 16 elements' buckets and which of them changed (one mask),
 * their classes from ctab (counts in 5-bit fields, each element's class in
 * a nibble), one scan over the block; then each change alone: its rank is
 * the class's elements before the thread's (the scan) plus the thread's
 * own before it (the nibbles equal to its class), and its values are
 * loaded again (from L1), so no register array is indexed at run time.
 * Specialized by width: the generic pass ran twice the instructions, and
 * the pass was bound by them, not by memory. */
template <uint32_t W>
static __device__ __forceinline__ void rank_chunk(const ek_batch_t &b, const ek_chunk_t *c, rank_smem_t &sm) {
    const unsigned tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    const uint8_t *base = (const uint8_t *)c->base, *next = (const uint8_t *)c->next;
    const uint32_t elems = c->elems, S = c->sub_log2;
    uint64_t *list = b.list + c->list0;
    const bool vec = (((uintptr_t)base | (uintptr_t)next) & 15) == 0; /* then every thread's 16 are 16-aligned */
    for (uint32_t t0 = 0; t0 < elems; t0 += EK_TILE) {
        const uint32_t first = t0 + EPT * tid;
        const uint32_t nin = first >= elems ? 0 : elems - first < EPT ? elems - first : EPT;
        uint32_t bk[4], chg = 0;
        if (vec && nin == EPT) {
            uint32_t bw[4 * W], nw[4 * W];
            const uint4 *bp = (const uint4 *)(base + (uint64_t)first * W), *np = (const uint4 *)(next + (uint64_t)first * W);
#pragma unroll
            for (uint32_t j = 0; j < W; j++) {
                const uint4 x = bp[j], y = np[j];
                bw[4 * j] = x.x, bw[4 * j + 1] = x.y, bw[4 * j + 2] = x.z, bw[4 * j + 3] = x.w;
                nw[4 * j] = y.x, nw[4 * j + 1] = y.y, nw[4 * j + 2] = y.z, nw[4 * j + 3] = y.w;
            }
            uint32_t any = 0;
#pragma unroll
            for (uint32_t q = 0; q < 4 * W; q++) any |= bw[q] ^ nw[q];
            if (any) /* about a quarter of the threads at 2% changed */
#pragma unroll
                for (uint32_t e = 0; e < EPT; e++) chg |= (uint32_t)(word_elem<W>(bw, e) != word_elem<W>(nw, e)) << e;
            bucket_bytes<W>(bw, bk);
        } else {
            uint32_t bw[4 * W];
#pragma unroll
            for (uint32_t q = 0; q < 4 * W; q++) bw[q] = 0;
#pragma unroll
            for (uint32_t e = 0; e < EPT; e++) {
                if (e < nin) {
                    const uint32_t x = elem_load(base, W, first + e), y = elem_load(next, W, first + e);
                    bw[e / (4 / W)] |= x << (8 * W * (e % (4 / W)));
                    chg |= (uint32_t)(x != y) << e;
                }
            }
            bucket_bytes<W>(bw, bk);
        }
        uint64_t c5 = 0, cls = 0; /* class counts in 5-bit fields; each element's class in a nibble */
#pragma unroll
        for (uint32_t e = 0; e < EPT; e++) {
            if (e < nin) {
                const uint64_t t = sm.ctab[(bk[e / 4] >> (8 * (e % 4))) & 0xFF];
                c5 += t;
                cls |= (t >> 61) << (4 * e);
            }
        }
        uint64_t lo = 0, hi = 0;
#pragma unroll
        for (uint32_t k = 0; k < EK_CLASSES; k++) {
            const uint64_t n = (c5 >> (5 * k)) & 31;
            if (k < 4) lo |= n << (16 * k);
            else hi |= n << (16 * (k - 4));
        }
        const uint32_t nch = __popc(chg);
        /* inclusive scans over the warp, then over the warps */
        uint64_t slo = lo, shi = hi;
        uint32_t sch = nch;
#pragma unroll
        for (unsigned o = 1; o < 32; o <<= 1) {
            const uint64_t a = __shfl_up_sync(FULL, slo, o), h = __shfl_up_sync(FULL, shi, o);
            const uint32_t x = __shfl_up_sync(FULL, sch, o);
            if (lane >= o) slo += a, shi += h, sch += x;
        }
        if (lane == 31) sm.wlo[wp] = slo, sm.whi[wp] = shi, sm.wch[wp] = sch;
        __syncthreads();
        uint64_t plo = slo - lo, phi = shi - hi; /* this thread's exclusive prefix */
        uint32_t at = sm.chg_before + sch - nch;
        for (unsigned x = 0; x < wp; x++) plo += sm.wlo[x], phi += sm.whi[x], at += sm.wch[x];
        while (chg) {
            const uint32_t e = __ffs(chg) - 1;
            chg &= chg - 1;
            const uint32_t k = (uint32_t)(cls >> (4 * e)) & 15;
            /* the thread's elements before e whose nibble is k */
            const uint64_t x = cls ^ (0x1111111111111111ull * k);
            const uint64_t z = ~(((x & 0x7777777777777777ull) + 0x7777777777777777ull) | x) & 0x8888888888888888ull;
            const uint32_t own = __popcll(z & ((1ull << (4 * e)) - 1));
            uint32_t val, sign;
            ek_change(elem_load(base, W, first + e), elem_load(next, W, first + e), W, &val, &sign);
            list[at++] = ek_entry(sm.carry[k] + field(plo, phi, k) + own, k, sign, val);
            atomicAdd(&sm.sub_m[k], 1u);
            if (val) atomicAdd(&sm.sub_nu[k], 1u);
        }
        __syncthreads(); /* every thread has read carry and chg_before */
        const uint32_t t1 = t0 + EK_TILE;
        const bool sub_end = t1 >= elems || (t1 & ((1u << S) - 1)) == 0;
        if (tid < EK_CLASSES) {
            uint32_t tot = 0;
            for (unsigned x = 0; x < WARPS; x++) tot += field(sm.wlo[x], sm.whi[x], tid);
            sm.carry[tid] += tot;
            if (sub_end) {
                ek_sub_t *s = &b.subs[((uint64_t)c->sub0 + (t0 >> S)) * EK_CLASSES + tid];
                s->count = sm.carry[tid];
                s->m = sm.sub_m[tid];
                s->nu = sm.sub_nu[tid];
                sm.carry[tid] = sm.sub_m[tid] = sm.sub_nu[tid] = 0;
            }
        }
        if (tid == 0) {
            uint32_t tch = 0;
            for (unsigned x = 0; x < WARPS; x++) tch += sm.wch[x];
            sm.chg_before += tch;
            if (sub_end) {
                ek_subblk_t *k = &b.blks[c->sub0 + (t0 >> S)];
                k->first = sm.sub_first;
                k->m = sm.chg_before - sm.sub_first;
                sm.sub_first = sm.chg_before;
            }
        }
        __syncthreads();
    }
}

__global__ void __launch_bounds__(THREADS, 4) ek_rank(ek_batch_t b) {
    __shared__ rank_smem_t sm;
    __shared__ uint8_t class_of[256];
    const unsigned tid = threadIdx.x;
    const ek_chunk_t *c = &b.chunks[b.busy[blockIdx.x]];
    if (tid == 0) ek_class_table(c, class_of);
    __syncthreads();
    { /* THREADS == 256 buckets */
        const uint64_t k = class_of[tid];
        sm.ctab[tid] = 1ull << (5 * k) | k << 61;
    }
    if (tid < EK_CLASSES) sm.carry[tid] = sm.sub_m[tid] = sm.sub_nu[tid] = 0;
    if (tid == 0) sm.chg_before = sm.sub_first = 0;
    __syncthreads();
    if (c->width == 2) rank_chunk<2>(b, c, sm);
    else if (c->width == 4) rank_chunk<4>(b, c, sm);
    else rank_chunk<1>(b, c, sm);
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
