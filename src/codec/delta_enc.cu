/* Encoding format 2 deltas in GPU memory: the kernels behind
 * codec/delta_cuda_enc.h. The steps that decide bytes are
 * codec/delta_enc_dev.h's (host and device code, checked on the CPU by
 * test_delta_enc_dev.c); these kernels only lay them out over the GPU:
 *
 * scan     a block per chunk, 8 KiB of each version (a round) at a time:
 *          every element compared, the changed ones' buckets and every
 *          stride-th one's counted in shared memory, and both versions
 *          hashed as they are read (base unless its sums were given).
 * hash     a warp per chunk and version, for the chunks the scan could not
 *          hash (not 16-aligned, or short): the checksums of next and
 *          (when it changed and its sums were not given) base.
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
 * choose   a warp per chunk with changes: its lanes add up each class's
 *          sub-blocks and lay out their sub-streams with a scan.
 * write    a warp per sub-block of a sparse chunk, walking as part does,
 *          ORing its sub-streams' words into the zeroed record area.
 * head     a thread per chunk; raw: a block per raw chunk copies the next
 *          contents; seal: a warp per chunk, the record checksum. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec/class_tile.cuh"
#include "codec/delta_enc_kern.h"
#include "common/sum_warp.cuh"
#include "common/sum_xxh3.h"

#define THREADS 256u
#define WARPS (THREADS / 32u)
#define EPT (EK_TILE / THREADS) /* elements per thread and tile: 16 */
#define FULL 0xffffffffu

static_assert(EPT == CT_EPT && THREADS == CT_THREADS && EK_CLASSES == CT_CLASSES, "class_tile.cuh's tile");

__constant__ uint8_t ek_ksecret[192] = {SUMX_KSECRET_BYTES};

static __device__ __forceinline__ uint32_t elem_load(const uint8_t *p, uint32_t w, uint64_t i) {
    return w == 2 ? ((const uint16_t *)p)[i] : w == 4 ? ((const uint32_t *)p)[i] : p[i];
}

/* ---- scan ----------------------------------------------------------------------- */

/* Element i of a chunk (values bv, nv), W bytes: its bucket counted when
 * it is sampled (every smask + 1-th) and when it changed. */
template <uint32_t W>
static __device__ __forceinline__ void scan_elem(uint32_t bv, uint32_t nv, uint64_t i, uint32_t smask, uint32_t *hs,
                                                 uint32_t *hc, uint32_t *mine) {
    const uint32_t bk = ek_bucket(bv, W);
    if ((i & smask) == 0) atomicAdd(&hs[bk], 1u);
    if (bv != nv) {
        atomicAdd(&hc[bk], 1u);
        (*mine)++;
    }
}

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
            scan_elem<W>((bw[q] >> (bits * e)) & mask, (nw[q] >> (bits * e)) & mask, i0 + q * per + e, smask, hs, hc,
                         mine);
        }
    }
}

/* One chunk's scan without its hashes (the chunks hashed_by_scan leaves
   to ek_hash), elements of W bytes (specialized: the generic loop ran the
   width's arithmetic on every word). */
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
        for (; i < t1; i += THREADS) scan_elem<W>(elem_load(base, W, i), elem_load(next, W, i), i, smask, hs, hc, &mine);
    }
    return mine;
}

/* Whether the scan hashes a chunk as it reads it (scan_hash_chunk): base
   and next 16-aligned (then a warp's 16-byte loads are xxh3's lanes) and
   longer than xxh3's short inputs. ek_hash takes the others. */
static __device__ __forceinline__ bool hashed_by_scan(const ek_chunk_t *c) {
    return ((c->base | c->next) & 15) == 0 && (uint64_t)c->elems * c->width > SUMX_SHORT_MAX;
}

/* Per 1 KiB block of a round, per accumulator pair q: the block's sums
   (common/sum_warp.cuh's s0, s1) of base, then next. */
typedef struct {
    uint64_t s[2][WARPS][4][4];
} scan_sums_t;

/* One chunk's scan with both versions hashed as they are read: a round is
   8 KiB of each, warp w taking xxh3 block 8r + w of both (lane t the 16
   bytes at 512h + 16t, h = 0, 1, as sumw_warp_long lays a block out). Each
   warp compares its elements and adds up its block's stripes; warp 0's
   lanes 0-7 then run the chain of accumulators over the round's blocks in
   order (the scramble after each 1 KiB is what keeps xxh3 sequential), one
   lane per version and accumulator pair. Base is hashed unless its sum was
   given. (The scan and the hash apart read both versions twice: 11.4 ms at
   lr 1e-6, where one read takes 5.6 and this 7.9; at 4 blocks per SM,
   with the keys in shared memory, no faster.) */
template <uint32_t W>
static __device__ __forceinline__ uint32_t scan_hash_chunk(ek_chunk_t *c, uint32_t *hs, uint32_t *hc,
                                                           const uint8_t *sec, scan_sums_t *sums) {
    const unsigned tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    const uint8_t *base = (const uint8_t *)c->base, *next = (const uint8_t *)c->next;
    const uint32_t elems = c->elems, smask = elems >= (1u << 16) ? 63 : 0; /* every 64th, or all */
    const uint64_t len = (uint64_t)elems * W, nfull = sumx_nfull(len);
    const unsigned nstr = sumx_nstr(len), q = lane & 3, r8 = lane >> 2;
    const bool hb = !c->given;
    sumx_keys_t k;
    sumx_lane_keys(sec, lane, &k);
    /* warp 0, lanes 0-7: version lane >> 2's accumulators 2q, 2q + 1 */
    uint64_t acc0 = sumx_init_acc(2 * q), acc1 = sumx_init_acc(2 * q + 1);
    const uint4 zero = make_uint4(0, 0, 0, 0);
    uint32_t mine = 0;
    for (uint64_t r = 0; 8 * r <= nfull; r++) {
        const uint64_t kb = 8 * r + wp;
        if (kb <= nfull) {
            uint4 vb[2], vn[2];
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint64_t x = 1024 * kb + 512 * h + 16 * lane;
                vb[h] = x < len ? *(const uint4 *)(base + x) : zero;
                vn[h] = x < len ? *(const uint4 *)(next + x) : zero;
            }
            const unsigned ns = kb < nfull ? 16 : nstr; /* stripes in this block */
            uint64_t b0 = 0, b1 = 0, n0 = 0, n1 = 0;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint64_t x = 1024 * kb + 512 * h + 16 * lane;
                if (x + 16 <= len) {
                    scan_vec<W>(vb[h], vn[h], (uint32_t)(x / W), smask, hs, hc, &mine);
                } else { /* the chunk ends inside this vector */
                    for (uint64_t i = x / W; i < elems; i++)
                        scan_elem<W>(elem_load(base, W, i), elem_load(next, W, i), i, smask, hs, hc, &mine);
                }
                if (8 * (unsigned)h + r8 < ns) {
                    sumx_contrib(vn[h].x | (uint64_t)vn[h].y << 32, vn[h].z | (uint64_t)vn[h].w << 32, k.k[h][0],
                                 k.k[h][1], &n0, &n1);
                    if (hb)
                        sumx_contrib(vb[h].x | (uint64_t)vb[h].y << 32, vb[h].z | (uint64_t)vb[h].w << 32, k.k[h][0],
                                     k.k[h][1], &b0, &b1);
                }
            }
            if (kb == nfull && lane < 4) { /* the last stripe, [len - 64, len): lanes 0-3 */
                const uint64_t x = len - 64 + 16 * lane;
                const uint64_t l0 = sumx_last_key(sec, lane, 0), l1 = sumx_last_key(sec, lane, 1);
                sumx_contrib(sumx_rd64(next + x), sumx_rd64(next + x + 8), l0, l1, &n0, &n1);
                if (hb) sumx_contrib(sumx_rd64(base + x), sumx_rd64(base + x + 8), l0, l1, &b0, &b1);
            }
#pragma unroll
            for (unsigned m = 4; m < 32; m <<= 1) { /* over the 8 lanes of each accumulator pair */
                n0 += __shfl_xor_sync(FULL, n0, m);
                n1 += __shfl_xor_sync(FULL, n1, m);
                if (hb) {
                    b0 += __shfl_xor_sync(FULL, b0, m);
                    b1 += __shfl_xor_sync(FULL, b1, m);
                }
            }
            if (lane < 4) {
                uint64_t *o = sums->s[r & 1][wp][lane];
                o[0] = b0, o[1] = b1, o[2] = n0, o[3] = n1;
            }
        }
        __syncthreads(); /* the round's sums are in; the next round writes the other half */
        if (wp == 0 && lane < 8)
            for (unsigned w = 0; w < WARPS && 8 * r + w <= nfull; w++) {
                const uint64_t *o = sums->s[r & 1][w][q] + 2 * (lane >> 2);
                acc0 += o[0];
                acc1 += o[1];
                if (8 * r + w < nfull) {
                    acc0 = sumx_scramble(acc0, k.scr[0]);
                    acc1 = sumx_scramble(acc1, k.scr[1]);
                }
            }
    }
    if (wp == 0) { /* the merge: pair q's part, over the 4 pairs of each version */
        uint64_t m = sumx_fold64(acc0 ^ sumx_merge_key(sec, lane, 0), acc1 ^ sumx_merge_key(sec, lane, 1));
        m += __shfl_xor_sync(FULL, m, 1);
        m += __shfl_xor_sync(FULL, m, 2);
        const uint64_t h = sumx_avalanche(len * SUMX_PRIME64_1 + m);
        if (lane == 0 && hb) c->base_sum = h;
        if (lane == 4) c->next_sum = h;
    }
    return mine;
}

__global__ void __launch_bounds__(THREADS, 3) ek_scan(ek_batch_t b) {
    __shared__ uint32_t hs[256], hc[256], nchg;
    __shared__ uint8_t sec[192];
    __shared__ scan_sums_t sums;
    const unsigned tid = threadIdx.x, lane = tid & 31;
    ek_chunk_t *c = &b.chunks[blockIdx.x];
    hs[tid] = hc[tid] = 0;
    if (tid < 192) sec[tid] = ek_ksecret[tid];
    if (tid == 0) nchg = 0;
    __syncthreads();
    const uint32_t w = c->width;
    uint32_t mine;
    if (hashed_by_scan(c))
        mine = w == 2 ? scan_hash_chunk<2>(c, hs, hc, sec, &sums) : w == 4 ? scan_hash_chunk<4>(c, hs, hc, sec, &sums)
                                                                          : scan_hash_chunk<1>(c, hs, hc, sec, &sums);
    else
        mine = w == 2 ? scan_chunk<2>(c, hs, hc) : w == 4 ? scan_chunk<4>(c, hs, hc) : scan_chunk<1>(c, hs, hc);
    for (unsigned o = 16; o; o >>= 1) mine += __shfl_xor_sync(FULL, mine, o);
    if (lane == 0 && mine) atomicAdd(&nchg, mine);
    __syncthreads();
    uint32_t *hist = b.hist + (uint64_t)blockIdx.x * 512;
    hist[tid] = hs[tid];
    hist[256 + tid] = hc[tid];
    if (tid == 0) c->changed = nchg;
}

/* ---- hash ------------------------------------------------------------------------- */

/* After ek_scan, for the chunks it did not hash (hashed_by_scan): a warp
 * per chunk and version, xxh3 of the whole chunk at a time
 * (common/sum_warp.cuh, as ferry sum hashes its leaves): next's, and
 * base's when it changed and its sum was not given (when nothing changed
 * the host takes next's for base's, whichever pass hashed it). */
__global__ void __launch_bounds__(THREADS) ek_hash(ek_batch_t b) {
    __shared__ uint8_t sec[192];
    if (threadIdx.x < 192) sec[threadIdx.x] = ek_ksecret[threadIdx.x];
    __syncthreads();
    const unsigned lane = threadIdx.x & 31, wp = threadIdx.x >> 5;
    const uint64_t j = (uint64_t)blockIdx.x * WARPS + wp;
    if (j >= 2ull * b.nchunks) return;
    ek_chunk_t *c = &b.chunks[j >> 1];
    const bool of_base = j & 1;
    if (hashed_by_scan(c) || (of_base && (!c->changed || c->given))) return;
    const uint64_t h = sumw_xxh3((const uint8_t *)(of_base ? c->base : c->next), (uint64_t)c->elems * c->width, sec,
                                 lane);
    if (lane == 0) *(of_base ? &c->base_sum : &c->next_sum) = h;
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

/* The rank pass's shared state. ctab: per bucket, ct_entry of its class.
   Per warp: its class counts (class_tile.cuh's words) and changes, and
   what comes before it in the chunk's sub-block (the tile's warps before
   it; the changes before it in the chunk). ctile: per class, its elements
   in the sub-block's tiles before this one. */
typedef struct {
    uint64_t ctab[256];
    uint4 wcnt[WARPS], wpre[WARPS];
    uint32_t wch[WARPS], wat[WARPS];
    uint32_t ctile[EK_CLASSES], sub_m[EK_CLASSES], sub_nu[EK_CLASSES];
} rank_smem_t;

/* Sub-block sub's changes and non-unit changes of class k, once every
   change of its last tile is counted. */
static __device__ __forceinline__ void rank_sub_done(const ek_batch_t &b, const rank_smem_t &sm, uint64_t sub,
                                                     uint32_t k) {
    ek_sub_t *d = &b.subs[sub * EK_CLASSES + k];
    d->m = sm.sub_m[k];
    d->nu = sm.sub_nu[k];
}

/* One chunk's ranks, tile by tile; elements of W bytes. Per thread and
 * tile: its 16 elements' buckets and which of them changed (one mask),
 * their classes from ctab (counts in 16-bit fields, each element's class in
 * a nibble), one scan over the warp; then warp 0 alone scans the warps'
 * counts and carries the chunk's (its lanes hold the running counts, so
 * no other thread waits on them); then each change alone: its rank is the
 * class's elements before its thread's (the sub-block's tiles, the tile's
 * warps, the warp's lanes) plus the thread's own before it (the nibbles
 * equal to its class), and its values are loaded again (from L1), so no
 * register array is indexed at run time. Two barriers a tile: warp 0's
 * counts are for the tile's changes, and the next tile's warp 0 runs only
 * when they are placed (so the sub-block's changes are counted then).
 * Specialized by width: the generic pass ran twice the instructions, and
 * the pass was bound by them, not by memory. */
template <uint32_t W>
static __device__ __forceinline__ void rank_chunk(const ek_batch_t &b, const ek_chunk_t *c, rank_smem_t &sm) {
    const unsigned tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    const uint8_t *base = (const uint8_t *)c->base, *next = (const uint8_t *)c->next;
    const uint32_t elems = c->elems, S = c->sub_log2;
    uint64_t *list = b.list + c->list0;
    const bool vec = (((uintptr_t)base | (uintptr_t)next) & 15) == 0; /* then every thread's 16 are 16-aligned */
    /* warp 0's running state: lane k < EK_CLASSES, class k's elements in
       the sub-block's tiles so far; every lane, the chunk's changes so far
       and the sub-block's first; the sub-block whose changes are yet to be
       counted (-1: none) */
    uint32_t carry = 0, chg_before = 0, sub_first = 0;
    int64_t done_sub = -1;
    for (uint32_t t0 = 0; t0 < elems; t0 += EK_TILE) {
        const uint32_t first = t0 + EPT * tid;
        const uint32_t nin = ct_nin(first, elems);
        uint32_t bw[4 * W], nw[4 * W], bk[4], chg = 0;
        ct_load<W>(base, first, nin, vec, bw);
        ct_load<W>(next, first, nin, vec, nw);
        uint32_t any = 0;
#pragma unroll
        for (uint32_t q = 0; q < 4 * W; q++) any |= bw[q] ^ nw[q];
        if (any) /* about a quarter of the threads at 2% changed */
#pragma unroll
            for (uint32_t e = 0; e < EPT; e++) chg |= (uint32_t)(ct_elem<W>(bw, e) != ct_elem<W>(nw, e)) << e;
        ct_buckets<W>(bw, bk);
        uint32_t cnt[4], pre[4];
        uint64_t cls;
        ct_classes(sm.ctab, bk, nin, cnt, &cls);
        const uint32_t nch = __popc(chg);
#pragma unroll
        for (uint32_t j = 0; j < 4; j++) pre[j] = ct_warp_sum(cnt[j]);
        const uint32_t ich = ct_warp_sum(nch);
        if (lane == 31) sm.wcnt[wp] = make_uint4(pre[0], pre[1], pre[2], pre[3]), sm.wch[wp] = ich;
#pragma unroll
        for (uint32_t j = 0; j < 4; j++) pre[j] -= cnt[j]; /* exclusive: the warp's lanes before this one */
        const uint32_t at0 = ich - nch;
        __syncthreads();
        if (wp == 0) { /* the warps' prefixes; the running counts; the sub-blocks done */
            const uint32_t t1 = t0 + EK_TILE;
            const bool sub_end = t1 >= elems || (t1 & ((1u << S) - 1)) == 0;
            const uint64_t sub = (uint64_t)c->sub0 + (t0 >> S);
            uint32_t v[4] = {0, 0, 0, 0}, vch = 0, s[4];
            if (lane < WARPS) {
                const uint4 x = sm.wcnt[lane];
                v[0] = x.x, v[1] = x.y, v[2] = x.z, v[3] = x.w, vch = sm.wch[lane];
            }
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) s[j] = ct_warp_sum<WARPS>(v[j]);
            const uint32_t sch = ct_warp_sum<WARPS>(vch);
            if (lane < WARPS)
                sm.wpre[lane] = make_uint4(s[0] - v[0], s[1] - v[1], s[2] - v[2], s[3] - v[3]),
                sm.wat[lane] = chg_before + sch - vch;
            uint32_t tot[4];
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) tot[j] = __shfl_sync(FULL, s[j], WARPS - 1);
            if (done_sub >= 0 && lane < EK_CLASSES) { /* the sub-block before: its changes are all counted */
                rank_sub_done(b, sm, (uint64_t)done_sub, lane);
                sm.sub_m[lane] = sm.sub_nu[lane] = 0;
            }
            done_sub = -1;
            if (lane < EK_CLASSES) {
                sm.ctile[lane] = carry;
                carry += ct_count(tot, lane);
            }
            chg_before += __shfl_sync(FULL, sch, WARPS - 1);
            if (sub_end) {
                if (lane < EK_CLASSES) b.subs[sub * EK_CLASSES + lane].count = carry;
                if (lane == 0) {
                    ek_subblk_t *k = &b.blks[sub];
                    k->first = sub_first;
                    k->m = chg_before - sub_first;
                }
                carry = 0, sub_first = chg_before, done_sub = (int64_t)sub;
            }
        }
        __syncthreads();
        if (chg) {
            const uint4 wq = sm.wpre[wp];
            pre[0] += wq.x, pre[1] += wq.y, pre[2] += wq.z, pre[3] += wq.w; /* the tile's lanes before */
            uint32_t at = sm.wat[wp] + at0;
            do {
                const uint32_t e = __ffs(chg) - 1;
                chg &= chg - 1;
                const uint32_t k = (uint32_t)(cls >> (4 * e)) & 15;
                const uint32_t own = __popcll(ct_nibbles_eq(cls, k) & ((1ull << (4 * e)) - 1)); /* its class's before it */
                uint32_t val, sign;
                ek_change(elem_load(base, W, first + e), elem_load(next, W, first + e), W, &val, &sign);
                list[at++] = ek_entry(sm.ctile[k] + ct_count(pre, k) + own, k, sign, val);
                atomicAdd(&sm.sub_m[k], 1u);
                if (val) atomicAdd(&sm.sub_nu[k], 1u);
            } while (chg);
        }
    }
    __syncthreads(); /* the last sub-block's changes are counted */
    if (wp == 0 && done_sub >= 0 && lane < EK_CLASSES) rank_sub_done(b, sm, (uint64_t)done_sub, lane);
}

__global__ void __launch_bounds__(THREADS, 4) ek_rank(ek_batch_t b) {
    __shared__ rank_smem_t sm;
    __shared__ uint8_t class_of[256];
    const unsigned tid = threadIdx.x;
    const ek_chunk_t *c = &b.chunks[b.busy[blockIdx.x]];
    if (tid == 0) ek_class_table(c, class_of);
    __syncthreads();
    { /* THREADS == 256 buckets */
        sm.ctab[tid] = ct_entry(class_of[tid]);
    }
    if (tid < EK_CLASSES) sm.sub_m[tid] = sm.sub_nu[tid] = 0;
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

/* ek_choose (delta_enc_dev.h, which the CPU tests run) with a warp per
 * chunk: the lanes add up a class's sub-blocks' sums, and lay out their
 * sub-streams with a scan, 32 sub-blocks at a time. The same integers into
 * the same fields (the sums are order-free, the offsets an exclusive scan).
 * A thread per chunk walked each class's sub-blocks one after another, a
 * chain of loads: about 3 ms a launch at lr 1e-5 however few the chunks,
 * paid again by every slice (H200, 2026-11-29). */
static __device__ __forceinline__ void choose_warp(ek_chunk_t *c, ek_sub_t *subs, unsigned lane) {
    if (!c->changed) {
        if (lane == 0) c->mode = EK_UNCHANGED, c->rec_len = EK_HEADER;
        return;
    }
    const uint64_t raw_len = EK_HEADER + (uint64_t)c->elems * c->width;
    const uint32_t K = c->classes, nsub = c->nsub;
    uint64_t off = EK_HEADER + (uint64_t)K * EK_ENTRY;
    for (uint32_t k = 0; k < K; k++) {
        const uint32_t stream_off = (uint32_t)(off < UINT32_MAX ? off : UINT32_MAX);
        uint32_t W = 0;
        uint64_t first = 0, len = 0;
        if (c->chg[k]) {
            uint64_t v[11] = {0}; /* gap bits 0-2, run bits 3-5, magnitude bits 6-10 */
            for (uint32_t b = lane; b < nsub; b += 32) {
                const ek_sub_t *s = &subs[b * EK_CLASSES + k];
#pragma unroll
                for (int e = 0; e < 3; e++) v[e] += s->gs[e], v[3 + e] += s->rs[e];
#pragma unroll
                for (int e = 0; e < 5; e++) v[6 + e] += s->ms[e];
            }
#pragma unroll
            for (int e = 0; e < 11; e++)
#pragma unroll
                for (unsigned m = 16; m; m >>= 1) v[e] += __shfl_xor_sync(FULL, v[e], m);
            uint32_t kg, kn, km; /* every lane the same */
            er_choose_params(v, v + 3, v + 6, c->chg[k], c->runs[k], c->g0[k], c->n0[k], &kg, &kn, &km);
            if (lane == 0) c->k_gap[k] = (uint8_t)kg, c->k_nu[k] = (uint8_t)kn, c->k_mag[k] = (uint8_t)km;
            __syncwarp(); /* ek_sub_bits reads them */
            uint64_t at = 0;
            uint32_t longest = 0;
            for (uint32_t b0 = 0; b0 < nsub; b0 += 32) {
                const uint32_t b = b0 + lane;
                ek_sub_t *s = b < nsub ? &subs[b * EK_CLASSES + k] : NULL;
                const uint32_t bits = s ? ek_sub_bits(c, k, s) : 0;
                uint64_t incl = bits;
#pragma unroll
                for (unsigned o = 1; o < 32; o <<= 1) {
                    const uint64_t t = __shfl_up_sync(FULL, incl, o);
                    if (lane >= o) incl += t;
                }
                if (s) s->bits = bits, s->off = (uint32_t)(at + incl - bits);
                at += __shfl_sync(FULL, incl, 31);
#if __CUDA_ARCH__ >= 800
                longest |= __reduce_or_sync(FULL, bits);
#else /* no warp reduction before sm_80 */
                uint32_t any = bits;
#pragma unroll
                for (unsigned m = 16; m; m >>= 1) any |= __shfl_xor_sync(FULL, any, m);
                longest |= any;
#endif
            }
            W = longest ? 32u - (uint32_t)(ER_CLZ64((uint64_t)longest) - 32u) : 0;
            first = (at + 7) / 8, len = first + ((uint64_t)nsub * W + 7) / 8;
        }
        if (lane == 0) {
            if (!c->chg[k]) c->k_gap[k] = c->k_nu[k] = c->k_mag[k] = 0;
            c->len_bits[k] = (uint8_t)W;
            c->first_bytes[k] = (uint32_t)(first < UINT32_MAX ? first : UINT32_MAX);
            c->stream_len[k] = (uint32_t)(len < UINT32_MAX ? len : UINT32_MAX);
            c->stream_off[k] = stream_off;
        }
        off += len;
    }
    if (lane == 0) {
        if (off <= raw_len - 1) c->mode = EK_SPARSE, c->rec_len = (uint32_t)off;
        else c->mode = EK_RAW, c->rec_len = (uint32_t)raw_len;
    }
}

__global__ void __launch_bounds__(THREADS) ek_choose_k(ek_batch_t b) {
    const uint32_t i = blockIdx.x * WARPS + (threadIdx.x >> 5);
    if (i >= b.nbusy) return;
    ek_chunk_t *c = &b.chunks[b.busy[i]];
    choose_warp(c, b.subs + (uint64_t)c->sub0 * EK_CLASSES, threadIdx.x & 31);
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
    const uint32_t x = blockIdx.x * THREADS + threadIdx.x;
    if (x >= b.nchunks) return;
    const uint32_t i = b.chunk0 + x;
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
    const uint32_t x = blockIdx.x * WARPS + wp;
    if (x >= b.nchunks) return;
    const ek_chunk_t *c = &b.chunks[b.chunk0 + x];
    uint8_t *rec = (uint8_t *)c->rec;
    uint64_t seed = lane == 0 ? sumx_xxh3_short(rec, 32, sec, 0) : 0;
    seed = __shfl_sync(FULL, seed, 0);
    uint64_t h = sumw_xxh3_seeded(rec + EK_HEADER, c->rec_len - EK_HEADER, seed, sec, cs[wp], lane);
    if (lane == 0) ek_put64(rec + 32, h);
}

/* ---- launchers ------------------------------------------------------------------------ */

static unsigned blocks(uint64_t n, unsigned per) { return (unsigned)((n + per - 1) / per); }

/* Each launch is checked before the next: a pass launched after one that
   failed to launch would read what that pass never wrote (counts, ranks,
   lengths) and could write past the tables. */
#define LAUNCHED()                                              \
    do {                                                        \
        const cudaError_t e_ = cudaGetLastError();              \
        if (e_ != cudaSuccess) return e_;                       \
    } while (0)

extern "C" cudaError_t ek_scan_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nchunks) return cudaSuccess;
    ek_scan<<<b->nchunks, THREADS, 0, stream>>>(*b);
    LAUNCHED();
    ek_hash<<<blocks(2ull * b->nchunks, WARPS), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}

extern "C" cudaError_t ek_classes_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nbusy) return cudaSuccess;
    ek_classes<<<b->nbusy, 32, 0, stream>>>(*b);
    return cudaGetLastError();
}

extern "C" cudaError_t ek_plan_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (!b->nbusy) return cudaSuccess;
    ek_rank<<<b->nbusy, THREADS, 0, stream>>>(*b);
    LAUNCHED();
    ek_totals_k<<<blocks(b->nbusy, THREADS), THREADS, 0, stream>>>(*b);
    LAUNCHED();
    if (b->nblks) {
        ek_part_k<<<blocks(b->nblks, WARPS), THREADS, 0, stream>>>(*b);
        LAUNCHED();
    }
    ek_choose_k<<<blocks(b->nbusy, WARPS), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}

extern "C" cudaError_t ek_write_enqueue(const ek_batch_t *b, cudaStream_t stream) {
    if (b->nsparse_blks) {
        ek_write_k<<<blocks(b->nsparse_blks, WARPS), THREADS, 0, stream>>>(*b);
        LAUNCHED();
    }
    if (b->nchunks) {
        ek_head_k<<<blocks(b->nchunks, THREADS), THREADS, 0, stream>>>(*b);
        LAUNCHED();
    }
    if (b->nraw) {
        ek_raw_k<<<b->nraw, THREADS, 0, stream>>>(*b);
        LAUNCHED();
    }
    if (b->nchunks) ek_seal_k<<<blocks(b->nchunks, WARPS), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}
