/* Applying deltas (docs/delta-format.md, formats 1 and 2) in GPU memory:
 * the kernels behind codec/delta_cuda.h. The host side (delta_cuda.c)
 * parses the frames and fills the tables of delta_kern.h; these passes run
 * on them, every chunk of every region of a batch at once:
 *
 * pull    a group's tables from pinned host memory, by the SMs' loads
 *         (a copy engine would queue them behind the frames before them).
 * pre     a warp per chunk: the record checksum; an unchanged chunk's
 *         contents, a raw chunk's base and contents, against their sums;
 *         its status set, its applied flag cleared.
 * decode  format 1: a thread per magnitude class, its stream into (rank,
 *         value change) pairs, with every check the CPU decoder makes
 *         (class_dec.h). A class stream is one chain of codes, so this is
 *         serial per class. Format 2: a thread per class reads its length
 *         table (where each sub-stream starts, and its slots), then a
 *         thread per sub-stream decodes it, ranks local to its sub-block,
 *         each change's rank and value change packed in 8 bytes
 *         (dk_pack). Both write 16 bytes at a time into 16-aligned slots
 *         (format 1: 4 ranks or 2 value changes; format 2: 2 changes): a
 *         store per change and lane had been half the pass's time.
 *         The readers are codec/delta_dev.h's, host and device code, which
 *         test_delta_dev.c checks on the CPU.
 * place   a block per sparse chunk, a tile at a time (4096 elements, or
 *         8192 of 2 bytes: dk_place_kind): each thread takes 16 or 32
 *         elements' classes (class_tile.cuh), each warp scans their
 *         counts, and warp k writes class k's changes of the tile: a
 *         change's rank finds its warp among the warps' sums, its thread
 *         by binary search over the warp's scanned counts and its element
 *         among that thread's by their class nibbles. Each tile comes into
 *         shared memory by cp.async while the one before is written.
 *         Written in place; each change's slot then holds its element, for
 *         the undo. The result's xxh3 is summed from each tile's final
 *         contents in shared memory as it goes, and checked against
 *         next_sum at the chunk's end (no pass reads the chunk again).
 * raw     a block per raw chunk: the old contents saved, the new copied in.
 * undo    a block per chunk to restore: the logged changes taken back (or
 *         the saved contents copied back), then the chunk hashed again so
 *         the host can tell a wrong base from damaged data. */
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec/class_tile.cuh"
#include "codec/delta_dev.h"
#include "codec/delta_kern.h"
#include "common/sum_warp.cuh"
#include "common/sum_xxh3.h"

#define THREADS 256u
#define WARPS (THREADS / 32u)
#define TILE 4096u               /* elements a place block takes at a time */
#define EPT (TILE / THREADS)     /* elements per thread and tile: 16 */
#define FULL 0xffffffffu
#define CLASSES_MAX 8u

static_assert(TILE == CT_TILE && THREADS == CT_THREADS && CLASSES_MAX == CT_CLASSES, "class_tile.cuh's tile");
static_assert(sizeof(dk_chunk_t) == 104 && sizeof(dk_class_t) == 64 && sizeof(dk_sub_t) == 32, "delta_kern.h's layout");

__constant__ uint8_t dk_ksecret[192] = {SUMX_KSECRET_BYTES};

static __device__ __forceinline__ void load_secret(uint8_t *sec) {
    for (unsigned i = threadIdx.x; i < 192; i += blockDim.x) sec[i] = dk_ksecret[i];
    __syncthreads();
}

/* The first failure of a chunk sticks. */
static __device__ __forceinline__ void fail(uint32_t *status, uint32_t code) { atomicCAS(status, 0u, code); }

/* ---- elements ---------------------------------------------------------------- */

static __device__ __forceinline__ uint32_t elem_load(const uint8_t *p, uint32_t w, uint32_t i) {
    return w == 2 ? ((const uint16_t *)p)[i] : w == 4 ? ((const uint32_t *)p)[i] : p[i];
}
static __device__ __forceinline__ void elem_store(uint8_t *p, uint32_t w, uint32_t i, uint32_t v) {
    if (w == 2) ((uint16_t *)p)[i] = (uint16_t)v;
    else if (w == 4) ((uint32_t *)p)[i] = v;
    else p[i] = (uint8_t)v;
}
static __device__ __forceinline__ uint32_t mag_mask(uint32_t w) {
    return w == 4 ? 0x7FFFFFFFu : (1u << (8 * w - 1)) - 1;
}
/* codec_internal.h's elem_ord and elem_unord */
static __device__ __forceinline__ int64_t elem_ord(uint32_t v, uint32_t w) {
    int64_t sign = (int64_t)((v >> (8 * w - 1)) & 1u);
    return (int64_t)(v & mag_mask(w)) ^ -sign;
}
static __device__ __forceinline__ bool elem_unord(int64_t o, uint32_t w, uint32_t *v) {
    int64_t s = o >> 63;
    uint64_t m = (uint64_t)(o ^ s);
    *v = (uint32_t)m | ((uint32_t)s & (mag_mask(w) + 1));
    return m <= mag_mask(w);
}

/* ---- the passes ----------------------------------------------------------------- */

/* Tables from pinned host memory into device memory by the SMs' own
   loads: a copy engine takes its copies in order, so a group's tables
   would wait behind every frame queued before them. */
__global__ void __launch_bounds__(THREADS) dk_pull(uint32_t *dst, const uint32_t *src, uint64_t words) {
    for (uint64_t i = (uint64_t)blockIdx.x * THREADS + threadIdx.x; i < words; i += (uint64_t)gridDim.x * THREADS)
        dst[i] = src[i];
}

__global__ void __launch_bounds__(THREADS) dk_pre(dk_batch_t b) {
    __shared__ uint8_t sec[192];
    __shared__ uint8_t cs[WARPS][192];
    load_secret(sec);
    const unsigned t = threadIdx.x & 31, wp = threadIdx.x >> 5;
    for (uint64_t c = b.chunk0 + (uint64_t)blockIdx.x * WARPS + wp; c < (uint64_t)b.chunk0 + b.nchunks;
         c += (uint64_t)gridDim.x * WARPS) {
        const dk_chunk_t *ch = &b.chunks[c];
        const uint64_t bytes = (uint64_t)ch->elems * ch->width;
        uint32_t code = DK_OK;
        if (sumw_xxh3_seeded((const uint8_t *)ch->rec, ch->rec_len, ch->rec_seed, sec, cs[wp], t) != ch->rec_sum)
            code = DK_REC_SUM;
        else if (ch->mode == DK_UNCHANGED_CHUNK) {
            if (sumw_xxh3((const uint8_t *)ch->region, bytes, sec, t) != ch->next_sum) code = DK_UNCHANGED;
        } else if (ch->mode == DK_RAW_CHUNK) {
            if (sumw_xxh3((const uint8_t *)ch->region, bytes, sec, t) != ch->base_sum) code = DK_RAW_BASE;
            else if (sumw_xxh3((const uint8_t *)ch->payload, bytes, sec, t) != ch->next_sum) code = DK_RAW_DATA;
        }
        if (t == 0) b.status[c] = code, b.applied[c] = 0; /* before this chunk's write pass, on any stream */
    }
}

__global__ void __launch_bounds__(THREADS) dk_decode(dk_batch_t b) {
    const uint64_t stride = (uint64_t)gridDim.x * THREADS;
    for (uint64_t i = b.class0 + (uint64_t)blockIdx.x * THREADS + threadIdx.x; i < (uint64_t)b.class0 + b.nclasses;
         i += stride) {
        const dk_class_t *e = &b.classes[i];
        if (e->nsub || *(volatile uint32_t *)&b.status[e->chunk] != DK_OK) continue;
        if (!decode_class(e, b.rank + e->change0, b.delta + e->change0)) fail(&b.status[e->chunk], DK_STREAM);
    }
}

/* Format 2: a class's sub-stream table from its length table (at the end
   of its stream): where each sub-stream starts and its slots. The lengths
   must add up to the bits of the first part, less its padding. */
__global__ void __launch_bounds__(THREADS) dk_subs(dk_batch_t b) {
    const uint64_t stride = (uint64_t)gridDim.x * THREADS;
    for (uint64_t i = b.class0 + (uint64_t)blockIdx.x * THREADS + threadIdx.x; i < (uint64_t)b.class0 + b.nclasses;
         i += stride) {
        const dk_class_t *e = &b.classes[i];
        if (!e->nsub) continue;
        /* every entry is written, so the decoders find their class; a
           chunk already refused gets empty sub-streams */
        const bool ok = *(volatile uint32_t *)&b.status[e->chunk] == DK_OK;
        uint64_t slot = 0, end = 0;
        if (!dk_table(e, (uint32_t)i, ok, b.subs + e->sub0, &slot, &end)) fail(&b.status[e->chunk], DK_STREAM);
    }
}

/* Format 2, a thread per sub-stream. A round's 256 sub-streams are
   consecutive, so their bytes (dk_sub_span) lie together in the frames:
   the block copies them into shared memory with 16-byte loads first, and
   each thread decodes from there. Read from device memory, every top-up
   of a thread's window was a load of its own that the thread then waited
   on: two thirds of the pass's stall samples (ncu, 2026-11-28). A round
   whose bytes do not fit decodes from device memory. */
#define STAGE_BYTES 40960u

__global__ void __launch_bounds__(THREADS) dk_decode2(dk_batch_t b) {
    __shared__ uint4 stage[STAGE_BYTES / 16];
    __shared__ unsigned long long span[2];
    const unsigned t = threadIdx.x;
    const uint64_t end = (uint64_t)b.sub0 + b.nsubs;
    for (uint64_t first = b.sub0 + (uint64_t)blockIdx.x * THREADS; first < end; first += (uint64_t)gridDim.x * THREADS) {
        const uint64_t i = first + t;
        dk_sub_t *sb = i < end ? &b.subs[i] : NULL;
        const uint32_t cls = sb ? sb->cls : 0; /* here: after the decode's stores it would be loaded again */
        const dk_class_t *e = sb ? &b.classes[cls] : NULL;
        const bool go = e && *(volatile uint32_t *)&b.status[e->chunk] == DK_OK;
        unsigned long long lo = ~0ull, hi = 0;
        if (go) {
            uint64_t from, to;
            dk_sub_span(e, sb, &from, &to);
            lo = e->stream + from, hi = e->stream + to;
        }
#pragma unroll
        for (unsigned m = 16; m; m >>= 1) {
            const unsigned long long l2 = __shfl_xor_sync(FULL, lo, m), h2 = __shfl_xor_sync(FULL, hi, m);
            lo = l2 < lo ? l2 : lo, hi = h2 > hi ? h2 : hi;
        }
        if (t == 0) span[0] = ~0ull, span[1] = 0;
        __syncthreads();
        if ((t & 31) == 0 && hi) atomicMin(&span[0], lo), atomicMax(&span[1], hi);
        __syncthreads();
        const uint64_t lo16 = span[0] & ~15ull, hi16 = (span[1] + 15) & ~15ull; /* inside the frames (16-aligned, rounded) */
        const bool staged = span[1] > span[0] && hi16 - lo16 <= STAGE_BYTES;
        if (staged)
            for (uint64_t k = t; k < (hi16 - lo16) / 16; k += THREADS) stage[k] = ((const uint4 *)(uintptr_t)lo16)[k];
        __syncthreads();
        if (!go) continue;
        const uint32_t limit = 1u << b.chunks[e->chunk].sub_log2;
        const uint8_t *st = staged ? (const uint8_t *)stage + (e->stream - lo16) : (const uint8_t *)(uintptr_t)e->stream;
        uint32_t nu = 0;
        const uint32_t chunk = e->chunk;
        const bool ok = decode_sub(e, st, sb, limit, b.delta + sb->slot, &nu);
        if (!ok) {
            fail(&b.status[chunk], DK_STREAM);
            continue;
        }
        atomicAdd(&b.cls_sum[2 * cls], sb->count);
        atomicAdd(&b.cls_sum[2 * cls + 1], nu);
    }
}

#define HSLOTS 16u /* hash sums a tile holds: 4 * W blocks of 1 KiB, or 8 half blocks (W = 1) */

/* Shared-memory layouts that keep a warp's accesses on distinct banks
   (`ncu`, 2026-11-28: a third of the write pass's shared wavefronts were
   bank conflicts, and shared memory was its busiest unit). A count word's
   prefixes are kept per word, one padding word after every 32 threads:
   the binary search's first step reads thread 32x + 16 for each warp x,
   which would all sit on one bank. */
#define PRE_STRIDE (THREADS + WARPS)
static __device__ __forceinline__ uint32_t pre_at(uint32_t a) { return a + (a >> 5); }
/* The tile's 16-byte pieces, piece i at vals_at(i): a thread stores its W
   consecutive pieces, so 8 threads' stores (one phase of a 16-byte store)
   would fall on the same 4 or 2 bank groups; the XOR spreads them over all
   8, and 8 consecutive pieces (the hash's reads) stay on distinct ones. */
static __device__ __forceinline__ uint32_t vals_at(uint32_t i) { return i ^ ((i >> 3) & 7); }
/* Byte offset in the tile's copy of element e of W bytes. */
template <uint32_t W>
static __device__ __forceinline__ uint32_t vals_byte(uint32_t e) {
    const uint32_t o = e * W;
    return vals_at(o >> 4) << 4 | (o & 15);
}

/* The write pass's shared state. The tile's counts and classes are kept
   for two tiles, by the tile's parity: a warp still placing tile t reads
   its buffer while the others fill the other one with tile t + 1, and none
   can reach tile t + 2 before every warp is done with t (the barrier of
   t + 1 comes after), so one barrier a tile is enough. */
typedef struct {
    uint64_t sec[24];             /* xxh3's secret, as words */
    uint64_t hsum[2][HSLOTS][8];  /* per tile: each 1 KiB block's sums for the 8 accumulators (1-byte elements: each half block's) */
    uint64_t hacc[8];             /* the accumulators, through the blocks scrambled so far */
    uint64_t ctab[256];           /* per bucket: ct_entry of its class */
    uint4 wcnt[2][WARPS];         /* per warp, its class counts (class_tile.cuh's words) */
    uint32_t pre[2][4][PRE_STRIDE]; /* per count word and thread (at pre_at), its warp's elements of those classes before it */
    uint64_t cls[2][2][THREADS];  /* per thread, its elements' classes, a nibble each (16 a word: 32 2-byte elements take two) */
    uint4 vals[2][THREADS * 4];   /* the tile's elements (4 bytes each at most), in 16-byte pieces at vals_at */
    uint32_t fin_seen[CLASSES_MAX];
    uint32_t fin_placed[CLASSES_MAX];
    uint32_t go;
} place_smem_t;

/* ---- the result's hash, as the write pass goes ----
 * A chunk's xxh3 (common/sum_warp.cuh's arithmetic) is summed tile by tile
 * from the tile's final contents in shared memory: each warp takes the
 * bytes its own threads loaded (32 E W of them: two blocks of 1 KiB, one,
 * or half of one), sums its stripes' products and words for each of the 8
 * accumulators (sums add in any order), and warp 0's lanes 0-7 carry the
 * accumulators, one each, through the blocks' scrambles in order, a tile
 * later. The chunk's last block and the merge are done at its end, from
 * memory (sumw_tail). This replaced a pass that read every chunk again
 * (2.8 ms of 16 at lr 1e-6). */

/* Warp wp's share of tile tt's sums (its contents in v; blocks from
   nfull on are left for the tail). */
template <uint32_t W>
static __device__ __forceinline__ void hash_tile(const uint4 *v, const uint64_t *sec, uint64_t tt, uint64_t nfull,
                                                 unsigned wp, unsigned lane, uint64_t (*hs)[8]) {
    const unsigned q = lane & 3, r8 = lane >> 2;
#pragma unroll
    for (uint32_t u = 0; u < (W == 4 ? 2u : 1u); u++) {
        const uint32_t lb = W == 1 ? wp >> 1 : W == 2 ? wp : 2 * wp + u; /* the block in the tile */
        if (tt * (4 * W) + lb >= nfull) break;                            /* warp-uniform */
        uint64_t s0 = 0, s1 = 0;
#pragma unroll
        for (uint32_t h = 0; h < 2; h++) {
            if (W == 1 && h != (wp & 1)) continue;
            const uint4 d = v[vals_at(64 * lb + 32 * h + lane)];
            const unsigned k = 8 * h + r8 + 2 * q; /* stripe 8h + r8's words 2q, 2q + 1 */
            sumx_contrib(d.x | (uint64_t)d.y << 32, d.z | (uint64_t)d.w << 32, sec[k], sec[k + 1], &s0, &s1);
        }
#pragma unroll
        for (unsigned m = 4; m < 32; m <<= 1) {
            s0 += __shfl_xor_sync(FULL, s0, m);
            s1 += __shfl_xor_sync(FULL, s1, m);
        }
        const uint32_t slot = W == 1 ? wp : lb;
        if (lane < 4) hs[slot][2 * q] = s0, hs[slot][2 * q + 1] = s1;
    }
}

/* Tile tt's blocks (below nfull) through accumulator `lane` (warp 0's
   lanes 0-7; kept in shared memory, not in a register the pass has none
   of to spare): added, then scrambled, in order. */
template <uint32_t W>
static __device__ __forceinline__ void hash_chain(uint64_t *hacc, const uint64_t (*hs)[8], const uint64_t *sec,
                                                  uint64_t tt, uint64_t nfull, unsigned lane) {
    uint64_t acc = hacc[lane];
    const uint64_t key = sec[16 + lane];
    if ((tt + 1) * (4 * W) <= nfull) { /* the whole tile: unrolled, no bound tested a block */
#pragma unroll
        for (uint32_t lb = 0; lb < 4 * W; lb++)
            acc = sumx_scramble(acc + (W == 1 ? hs[2 * lb][lane] + hs[2 * lb + 1][lane] : hs[lb][lane]), key);
    } else {
        for (uint32_t lb = 0; lb < 4 * W && tt * (4 * W) + lb < nfull; lb++)
            acc = sumx_scramble(acc + (W == 1 ? hs[2 * lb][lane] + hs[2 * lb + 1][lane] : hs[lb][lane]), key);
    }
    hacc[lane] = acc;
}

/* Decoded change i: its rank and value change (format 2: one packed
   entry, dk_pack; format 1: from the two arrays). */
template <bool F2>
static __device__ __forceinline__ void load_change(const dk_batch_t &b, uint64_t i, uint32_t *r, int64_t *d) {
    if (F2) {
        const int64_t p = b.delta[i];
        *r = dk_pack_rank(p), *d = dk_pack_delta(p);
    } else {
        *r = b.rank[i], *d = b.delta[i];
    }
}

/* Thread threadIdx.x's E elements of a tile, from element `first` of reg,
 * copied into its pieces of the tile's buffer v with cp.async (global to
 * shared memory: no registers held while they travel), issued a tile
 * ahead. False, and nothing issued, where they are not all in the chunk or
 * not 16-aligned: the thread then loads them itself when the tile comes.
 * (Loaded into registers a tile ahead, 2-byte elements had no registers
 * for 32 a thread, and without loading ahead a third of the stalls waited
 * on memory; ncu, 2026-11-29.) */
template <uint32_t W, uint32_t E>
static __device__ __forceinline__ bool tile_fetch(const uint8_t *reg, uint32_t first, uint32_t elems, uint4 *v) {
    constexpr uint32_t HW = E * W / 16;
    const uint8_t *p = reg + (uint64_t)first * W;
    if (!ct_vec(p) || (uint64_t)first + E > elems) return false;
    const uint4 *src = (const uint4 *)p;
#pragma unroll
    for (uint32_t j = 0; j < HW; j++) {
        const uint32_t dst = (uint32_t)__cvta_generic_to_shared(&v[vals_at(HW * threadIdx.x + j)]);
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src + j) : "memory");
    }
    asm volatile("cp.async.commit_group;\n" ::: "memory");
    return true;
}

/* One sparse chunk's changes written, a tile at a time, elements of W
 * bytes (specialized, as the encoder's rank pass: the generic pass ran the
 * width's arithmetic on every element), E of them a thread: 16, or 32
 * 2-byte ones where the tile of 8192 holds whole sub-blocks (dk_place_kind:
 * at lr 1e-6 the wide tile cut the pass's instructions by a quarter and its
 * time from 6.85 to 6.35 ms, ncu 2026-11-29). Per tile: each thread its
 * elements' classes (class_tile.cuh), their counts scanned over its warp;
 * then warp k writes class k's changes of the tile: it sums the warps'
 * counts of class k itself, in its lanes, so a change's rank finds its
 * warp by comparing with those 8 sums, its thread by a binary search over
 * the warp's scanned counts, and its element among that thread's by
 * their class nibbles. Each change's slot then holds its element, the undo
 * log (format 1: in the rank array; format 2: its place in its sub-block,
 * in the packed entry's rank bits). (Marking the tile's changes in a
 * bitmap in class order for each thread to find its own ran 1.6x the
 * instructions: at 2% changed most threads have none, and a thread's
 * classes are walked one after another; 2026-11-28.) */
template <uint32_t W, bool F2, uint32_t E>
static __device__ __forceinline__ void place_chunk(const dk_batch_t &b, uint32_t c, const dk_chunk_t &ch,
                                                   place_smem_t &sm) {
    static_assert(E == EPT || (E == 2 * EPT && W == 2), "16 elements a thread, or 32 of 2 bytes");
    constexpr uint32_t T = THREADS * E; /* the tile's elements */
    constexpr uint32_t HW = E * W / 16; /* the tile's bytes over 4096: what hash_tile and hash_chain take as W */
    constexpr uint32_t HALVES = E / EPT; /* a thread's groups of 16 elements (class_tile.cuh's unit) */
    constexpr uint32_t HP = HW / HALVES; /* 16-byte pieces of such a group */
    const unsigned tid = threadIdx.x, lane = tid & 31, wp = tid >> 5;
    const uint32_t K = ch.classes, S = ch.sub_log2, elems = ch.elems;
    uint8_t *reg = (uint8_t *)ch.region;
    /* warp k < K places class k's changes: format 1, the class's in one
       run of ranks over the chunk; format 2, each sub-block's in its own
       sub-stream's slots, ranks local to the sub-block */
    const dk_class_t *ek = wp < K ? &b.classes[ch.class0 + wp] : NULL;
    const uint32_t kw = ct_word(wp), ksh = 16 * (wp >> 2); /* class wp's counts: word and shift */
    uint64_t run0 = 0;          /* the run's first slot in rank and delta */
    uint32_t cend = 0;          /* the run's changes */
    uint32_t before = 0;        /* class elements in the run's tiles before this one */
    uint32_t seen = 0;          /* class elements in the chunk's sub-blocks before the run's (format 1: 0) */
    uint32_t ci = 0;            /* the run's next change */
    uint32_t placed_before = 0; /* changes placed in earlier runs */
    /* the run's next 64 changes, loaded ahead: lane l holds change ci + l
       (r_a, d_a) and ci + 32 + l (r_b, d_b); the loads for the second half
       are issued 32 changes before they are needed */
    uint32_t r_a = 0, r_b = 0;
    int64_t d_a = 0, d_b = 0;
    if (ek && !F2) {
        run0 = ek->change0, cend = ek->changed;
        if (lane < cend) load_change<false>(b, run0 + lane, &r_a, &d_a);
        if (32 + lane < cend) load_change<false>(b, run0 + 32 + lane, &r_b, &d_b);
    }
    /* its hash: the blocks below nfull summed and scrambled as the tiles go (hash_tile, hash_chain) */
    const uint64_t len = (uint64_t)elems * W, nfull = len > SUMX_SHORT_MAX ? sumx_nfull(len) : 0;
    bool fetched = tile_fetch<W, E>(reg, E * tid, elems, sm.vals[0]); /* tile 0 */
    for (uint32_t at = 0, par = 0; at < elems; at += T, par ^= 1) {
        if (F2 && ek && (at & ((1u << S) - 1)) == 0) { /* format 2: the sub-block's run */
            for (uint32_t i = ci + lane; i < cend; i += 32) b.delta[run0 + i] = 0; /* past the class's elements */
            placed_before += ci;
            seen += before;
            if (ek->nsub) {
                const dk_sub_t *sb = &b.subs[ek->sub0 + (at >> S)];
                run0 = sb->slot, cend = sb->count;
            } else { /* a class without changes has no sub-streams */
                cend = 0;
            }
            ci = 0, before = 0;
            if (lane < cend) load_change<F2>(b, run0 + lane, &r_a, &d_a);
            if (32 + lane < cend) load_change<F2>(b, run0 + 32 + lane, &r_b, &d_b);
        }
        const uint32_t first = at + E * tid;
        /* the thread's elements in the tile's buffer: its copy landed, or
           loaded and stored now; both classify from there, 16 at a time
           (a thread's 32 held in registers at once spilled) */
        if (fetched) {
            asm volatile("cp.async.wait_all;\n" ::: "memory");
        } else {
#pragma unroll
            for (uint32_t h = 0; h < HALVES; h++) {
                uint32_t wd[4 * W];
                ct_load<W>(reg, first + EPT * h, ct_nin(first + EPT * h, elems), ct_vec(reg), wd);
#pragma unroll
                for (uint32_t j = 0; j < HP; j++)
                    sm.vals[par][vals_at(HW * tid + HP * h + j)] = make_uint4(wd[4 * j], wd[4 * j + 1], wd[4 * j + 2], wd[4 * j + 3]);
            }
        }
        {
            uint32_t cnt[4] = {0, 0, 0, 0}, inc[4];
#pragma unroll
            for (uint32_t h = 0; h < HALVES; h++) { /* (a thread's 32 counts still fit their fields) */
                uint32_t wd[4 * W], bk[4], ch4[4];
                uint64_t cls;
#pragma unroll
                for (uint32_t j = 0; j < HP; j++) {
                    const uint4 x = sm.vals[par][vals_at(HW * tid + HP * h + j)];
                    wd[4 * j] = x.x, wd[4 * j + 1] = x.y, wd[4 * j + 2] = x.z, wd[4 * j + 3] = x.w;
                }
                ct_buckets<W>(wd, bk);
                ct_classes(sm.ctab, bk, ct_nin(first + EPT * h, elems), ch4, &cls);
#pragma unroll
                for (uint32_t j = 0; j < 4; j++) cnt[j] += ch4[j];
                sm.cls[par][h][tid] = cls;
            }
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) inc[j] = ct_warp_sum(cnt[j]);
            if (lane == 31) sm.wcnt[par][wp] = make_uint4(inc[0], inc[1], inc[2], inc[3]);
#pragma unroll
            for (uint32_t j = 0; j < 4; j++) sm.pre[par][j][pre_at(tid)] = inc[j] - cnt[j];
        }
        __syncthreads();
        if (at) { /* the last tile's contents are final: its sums; the one before it through the chain */
            hash_tile<HW>(sm.vals[par ^ 1], sm.sec, at / T - 1, nfull, wp, lane, sm.hsum[par ^ 1]);
            __syncwarp(); /* read before this warp's threads copy tile + 1 into the buffer */
            if (wp == 0 && lane < 8 && at >= 2 * T)
                hash_chain<HW>(sm.hacc, sm.hsum[par], sm.sec, at / T - 2, nfull, lane);
        }
        /* the next tile on its way while this one is written (its buffer's
           part that this warp's threads fill, only this warp reads: hash_tile) */
        fetched = at + T < elems && tile_fetch<W, E>(reg, first + T, elems, sm.vals[par ^ 1]);
        if (ek) {
            const uint32_t k = wp;
            /* class k's elements in the warps before warp x, in every lane */
            const uint32_t *wk = (const uint32_t *)sm.wcnt[par] + kw;
            const uint32_t mine = lane < WARPS ? (wk[4 * lane] >> ksh) & 0xFFFF : 0, upto = ct_warp_sum<WARPS>(mine);
            uint32_t wpre[WARPS];
#pragma unroll
            for (uint32_t x = 0; x < WARPS; x++) wpre[x] = x ? __shfl_sync(FULL, upto, x - 1) : 0;
            const uint32_t tot = __shfl_sync(FULL, upto, WARPS - 1);
            const uint32_t *pk = sm.pre[par][kw];
            const uint32_t lim = before + tot;
            for (;;) {
                const uint32_t i = ci + lane;
                const uint32_t r = r_a;
                const bool in = i < cend && r < lim; /* ranks rise, so the run's next ones are the tile's */
                const unsigned m = __ballot_sync(FULL, in);
                if (in) {
                    const uint32_t tr = r - before;
                    /* its warp: the last whose elements before it are <= tr */
                    uint32_t wv = 0, wb = 0;
#pragma unroll
                    for (uint32_t x = 1; x < WARPS; x++)
                        if (wpre[x] <= tr) wv = x, wb = wpre[x];
                    /* its thread: the warp's last whose prefix is <= tr - wb */
                    const uint32_t wr = tr - wb;
                    const uint32_t *pw = pk + wv; /* pre_at(a) for a thread a of warp wv */
                    uint32_t a = 32 * wv;
#pragma unroll
                    for (uint32_t step = 16; step; step >>= 1)
                        if (((pw[a + step] >> ksh) & 0xFFFF) <= wr) a += step;
                    /* the (wr - prefix)-th of thread a's elements of class k */
                    uint32_t nth = wr - ((pw[a] >> ksh) & 0xFFFF), el0 = 0;
                    uint64_t eq = ct_nibbles_eq(sm.cls[par][0][a], k);
                    if (HALVES == 2) { /* past the first 16's: in the second */
                        const uint32_t c0 = (uint32_t)__popcll(eq);
                        if (nth >= c0) nth -= c0, el0 = EPT, eq = ct_nibbles_eq(sm.cls[par][1][a], k);
                    }
                    const uint32_t in16 = ct_nth(eq, nth);
                    const bool found = in16 < EPT;
                    const uint32_t pos = at + E * a + el0 + in16;
                    uint32_t v;
                    /* its old value from the tile's copy, not from memory: the
                       warp's load would hold up the tile's barrier */
                    uint8_t *tv = (uint8_t *)sm.vals[par] + vals_byte<W>(pos - at);
                    if (found && elem_unord(elem_ord(elem_load(tv, W, 0), W) + d_a, W, &v)) {
                        elem_store(reg, W, pos, v);
                        elem_store(tv, W, 0, v); /* for the hash */
                        if (F2) b.delta[run0 + i] = dk_pack(pos & ((1u << S) - 1), d_a); /* the undo's log */
                        else b.rank[run0 + i] = pos;
                    } else {
                        b.delta[run0 + i] = 0; /* not written */
                        fail(&b.status[c], DK_RANGE);
                    }
                }
                const uint32_t placed = (uint32_t)__popc(m);
                if (placed) { /* the window moves on by `placed`; its new tail is loaded */
                    const unsigned src = (lane + placed) & 31;
                    const bool from_a = lane + placed < 32;
                    const uint32_t ra = __shfl_sync(FULL, r_a, src), rb = __shfl_sync(FULL, r_b, src);
                    const int64_t da = __shfl_sync(FULL, d_a, src), db = __shfl_sync(FULL, d_b, src);
                    ci += placed;
                    r_a = from_a ? ra : rb;
                    d_a = from_a ? da : db;
                    if (from_a) {
                        r_b = rb, d_b = db;
                    } else if (ci + 32 + lane < cend) {
                        load_change<F2>(b, run0 + ci + 32 + lane, &r_b, &d_b);
                    }
                }
                if (m != FULL) break;
            }
            before = lim; /* (not also added to `seen` here: a register the loop has none of to spare) */
        }
    }
    if (ek) {
        for (uint32_t i = ci + lane; i < cend; i += 32) b.delta[run0 + i] = 0; /* past the class's elements */
        if (lane == 0) sm.fin_seen[wp] = seen + before, sm.fin_placed[wp] = placed_before + ci;
    }
    __syncthreads(); /* every change written, in memory and in the last tile's buffer */
    const uint64_t tiles = (elems + T - 1) / T;
    hash_tile<HW>(sm.vals[(tiles - 1) & 1], sm.sec, tiles - 1, nfull, wp, lane, sm.hsum[(tiles - 1) & 1]);
    if (wp == 0 && lane < 8 && tiles >= 2) hash_chain<HW>(sm.hacc, sm.hsum[tiles & 1], sm.sec, tiles - 2, nfull, lane);
    __syncthreads();
    if (wp == 0) {
        if (lane < 8) hash_chain<HW>(sm.hacc, sm.hsum[(tiles - 1) & 1], sm.sec, tiles - 1, nfull, lane);
        __syncwarp();
        const uint64_t h = sumw_tail(reg, len, sm.hacc[lane & 7], (const uint8_t *)sm.sec, lane);
        if (lane == 0 && h != ch.next_sum) fail(&b.status[c], DK_NEXT_SUM);
    }
    if (tid == 0) /* the first class at fault, as the CPU walk reports it */
        for (uint32_t k = 0; k < K; k++) {
            const dk_class_t *e = &b.classes[ch.class0 + k];
            if (sm.fin_seen[k] != e->count) {
                fail(&b.status[c], DK_COUNT);
                break;
            }
            if (sm.fin_placed[k] != e->changed) {
                fail(&b.status[c], DK_PAST);
                break;
            }
        }
}

/* A kernel per element width (a batch's chunks of each width listed
   apart): compiled into one kernel, the three widths' code spilled
   registers at 64 in its loops. Each alone (with both formats' loops since
   session 16) spills 8 bytes once per block, outside them (ncu: one store
   and one load per warp and chunk). */
template <uint32_t W, uint32_t E>
__global__ void __launch_bounds__(THREADS, 4) dk_place(dk_batch_t b, const uint32_t *sparse) {
    extern __shared__ uint4 dk_dyn[]; /* a place_smem_t: more than the 48 KiB of static shared memory */
    place_smem_t &sm = *(place_smem_t *)dk_dyn;
    __shared__ uint32_t lower[CLASSES_MAX];
    const uint32_t c = sparse[blockIdx.x];
    const unsigned tid = threadIdx.x;
    const dk_chunk_t ch = b.chunks[c];
    const uint32_t K = ch.classes, shift = W == 1 ? 0 : W == 2 ? 7 : 23, S = ch.sub_log2;
    if (tid == 0) {
        uint32_t go = *(volatile uint32_t *)&b.status[c] == DK_OK;
        /* format 2: the sub-streams' counts add up to the class entries' */
        for (uint32_t k = 0; k < K && go && S; k++) {
            const uint32_t i = ch.class0 + k;
            if (b.cls_sum[2 * i] != b.classes[i].changed || b.cls_sum[2 * i + 1] != b.classes[i].nonunit) {
                fail(&b.status[c], DK_STREAM);
                go = 0;
            }
        }
        if (go) b.applied[c] = 1;
        sm.go = go;
    }
    if (tid < CLASSES_MAX) lower[tid] = tid < K ? b.classes[ch.class0 + tid].lower >> shift : 0;
    if (tid < 192) ((uint8_t *)sm.sec)[tid] = dk_ksecret[tid];
    if (tid < 8) sm.hacc[tid] = sumx_init_acc(tid);
    __syncthreads();
    if (!sm.go) return;
    { /* bucket tid's class: the bounds it reaches */
        uint32_t k = 0;
        for (uint32_t j = 1; j < K; j++) k += tid >= lower[j];
        sm.ctab[tid] = ct_entry(k);
    }
    __syncthreads();
    /* the format's reads and writes of the decoded changes compiled apart
       (a branch on it per change cost format 1's pass 7%) */
    if (S) place_chunk<W, true, E>(b, c, ch, sm);
    else place_chunk<W, false, E>(b, c, ch, sm);
}

__global__ void __launch_bounds__(THREADS) dk_raw(dk_batch_t b, const uint32_t *raw) {
    const uint32_t c = raw[blockIdx.x];
    if (*(volatile uint32_t *)&b.status[c] != DK_OK) return;
    const dk_chunk_t *ch = &b.chunks[c];
    const uint64_t bytes = (uint64_t)ch->elems * ch->width;
    uint8_t *reg = (uint8_t *)ch->region, *save = b.save + ch->save;
    const uint8_t *src = (const uint8_t *)ch->payload;
    if (threadIdx.x == 0) b.applied[c] = 1;
    for (uint64_t i = threadIdx.x; i < bytes; i += THREADS) {
        save[i] = reg[i];
        reg[i] = src[i];
    }
}

/* A placed change taken back: at element `at` (format 1: its slot's rank;
   format 2: its sub-block's first element and the entry's place in it),
   value change d (0: not written). */
static __device__ __forceinline__ void undo_one(uint8_t *reg, uint32_t w, uint32_t at, int64_t d) {
    uint32_t v;
    if (d && elem_unord(elem_ord(elem_load(reg, w, at), w) - d, w, &v)) elem_store(reg, w, at, v);
}

__global__ void __launch_bounds__(THREADS) dk_undo(dk_batch_t b, const uint32_t *idx) {
    __shared__ uint8_t sec[192];
    load_secret(sec);
    const uint32_t c = idx[blockIdx.x];
    const dk_chunk_t *ch = &b.chunks[c];
    uint8_t *reg = (uint8_t *)ch->region;
    const uint32_t w = ch->width;
    const uint64_t bytes = (uint64_t)ch->elems * w;
    if (b.applied[c]) {
        if (ch->mode == DK_SPARSE_CHUNK && !ch->sub_log2) {
            for (uint64_t i = ch->change0 + threadIdx.x; i < ch->change0 + ch->changed; i += THREADS)
                undo_one(reg, w, b.rank[i], b.delta[i]);
        } else if (ch->mode == DK_SPARSE_CHUNK) { /* format 2: each sub-stream's changes (slots past them hold nothing) */
            for (uint32_t k = 0; k < ch->classes; k++) {
                const dk_class_t *e = &b.classes[ch->class0 + k];
                for (uint32_t x = 0; x < e->nsub; x++) {
                    const dk_sub_t *sb = &b.subs[e->sub0 + x];
                    for (uint32_t i = threadIdx.x; i < sb->count; i += THREADS) {
                        const int64_t p = b.delta[sb->slot + i];
                        undo_one(reg, w, (x << ch->sub_log2) + dk_pack_rank(p), dk_pack_delta(p));
                    }
                }
            }
        } else if (ch->mode == DK_RAW_CHUNK) {
            const uint8_t *save = b.save + ch->save;
            for (uint64_t i = threadIdx.x; i < bytes; i += THREADS) reg[i] = save[i];
        }
    }
    __syncthreads(); /* every restore seen by the hashing warp */
    if (threadIdx.x < 32) {
        uint64_t h = sumw_xxh3(reg, bytes, sec, threadIdx.x);
        if (threadIdx.x == 0) b.hashes[c] = h;
    }
}

/* ---- launchers ------------------------------------------------------------------ */

static unsigned grid_for(uint64_t items, unsigned per_block, unsigned sms) {
    uint64_t g = (items + per_block - 1) / per_block, cap = (uint64_t)sms * 16;
    if (g > cap) g = cap;
    return g ? (unsigned)g : 1;
}

/* The write kernel of each dk_place_kind. */
static void (*const place_kernels[DK_PLACE_KINDS])(dk_batch_t, const uint32_t *) = {
    dk_place<1, EPT>, dk_place<2, EPT>, dk_place<2, 2 * EPT>, dk_place<4, EPT>};
static_assert(THREADS * 2 * EPT == 1u << DK_WIDE_SUB_LOG2_MIN, "the wide tile is the smallest sub-block it takes");

extern "C" cudaError_t dk_init(void) {
    const int smem = (int)sizeof(place_smem_t);
    cudaError_t e = cudaSuccess;
    for (uint32_t k = 0; k < DK_PLACE_KINDS && e == cudaSuccess; k++)
        e = cudaFuncSetAttribute(place_kernels[k], cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    return e;
}

extern "C" cudaError_t dk_pull_enqueue(void *dst, const void *src, size_t bytes, cudaStream_t stream) {
    const uint64_t words = bytes / 4, blocks = (words + THREADS - 1) / THREADS;
    if (words)
        dk_pull<<<blocks < 128 ? (unsigned)blocks : 128u, THREADS, 0, stream>>>((uint32_t *)dst, (const uint32_t *)src,
                                                                               words);
    return cudaGetLastError();
}

extern "C" cudaError_t dk_pre_enqueue(const dk_batch_t *b, unsigned sms, cudaStream_t stream) {
    if (b->nchunks) dk_pre<<<grid_for(b->nchunks, WARPS, sms), THREADS, 0, stream>>>(*b);
    return cudaGetLastError();
}

/* Each launch checked before the next: a pass launched after one that
   failed to launch would read tables that pass never wrote (dk_decode2
   the sub-stream table of dk_subs: its class index, then anything). */
extern "C" cudaError_t dk_decode_enqueue(const dk_batch_t *b, unsigned sms, cudaStream_t stream) {
    cudaError_t e = cudaSuccess;
    if (b->nclasses) {
        dk_decode<<<grid_for(b->nclasses, THREADS, sms), THREADS, 0, stream>>>(*b);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
    }
    if (b->nsubs) {
        dk_subs<<<grid_for(b->nclasses, THREADS, sms), THREADS, 0, stream>>>(*b);
        if ((e = cudaGetLastError()) != cudaSuccess) return e;
        dk_decode2<<<grid_for(b->nsubs, THREADS, sms), THREADS, 0, stream>>>(*b);
        e = cudaGetLastError();
    }
    return e;
}

extern "C" cudaError_t dk_write_enqueue(const dk_batch_t *b, const uint32_t *sparse,
                                        const uint32_t nsparse[DK_PLACE_KINDS], const uint32_t *raw, uint32_t nraw,
                                        cudaStream_t stream) {
    const size_t smem = sizeof(place_smem_t);
    cudaError_t e = cudaSuccess;
    for (uint32_t k = 0, from = 0; k < DK_PLACE_KINDS; from += nsparse[k++])
        if (nsparse[k]) {
            place_kernels[k]<<<nsparse[k], THREADS, smem, stream>>>(*b, sparse + from);
            if ((e = cudaGetLastError()) != cudaSuccess) return e; /* (as dk_decode_enqueue) */
        }
    if (nraw) {
        dk_raw<<<nraw, THREADS, 0, stream>>>(*b, raw);
        e = cudaGetLastError();
    }
    return e;
}

extern "C" cudaError_t dk_undo_enqueue(const dk_batch_t *b, const uint32_t *idx, uint32_t n, cudaStream_t stream) {
    if (n) dk_undo<<<n, THREADS, 0, stream>>>(*b, idx);
    return cudaGetLastError();
}
