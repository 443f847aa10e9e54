/* Internals of the delta codec: record layouts, the bit and range coders,
 * the block kernels. Pure: no I/O, no threads. Layouts in docs/delta-format.md. */
#ifndef FERRY_CODEC_INTERNAL_H
#define FERRY_CODEC_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "common/cpu.h"
#include "common/internal.h"
#include "ferry/codec.h"

/* ---- Frame and chunk records (little-endian) ---- */
#define DELTA_MAGIC 0x4C445246u /* "FRDL" */
#define DELTA_FORMAT 1u     /* format 1: one stream per class (the default) */
#define DELTA_FORMAT_MAX 2u /* format 2: class streams cut at sub-blocks, with a length table */
#define DELTA_SUB_LOG2_MIN 12u /* format 2's sub-block sizes, 2^12 to 2^24 elements */
#define DELTA_SUB_LOG2_MAX 24u
#define DELTA_FRAME_HEADER 64u
#define CHUNK_HEADER 40u
#define CLASS_ENTRY 24u

enum { CHUNK_UNCHANGED = 0, CHUNK_SPARSE = 1, CHUNK_RAW = 2 };

/* A chunk's class table entry, decoded. */
typedef struct delta_class {
    uint32_t lower;   /* smallest magnitude (bit pattern without sign) in the class */
    uint32_t count;   /* elements of the chunk in the class */
    uint32_t changed; /* of them, changed */
    uint32_t nonunit; /* of those, changed by more than one ulp */
    uint32_t len;     /* bytes of the class's stream */
    uint32_t k_gap;   /* Rice parameter of the position gaps */
    uint32_t k_nu;    /* Rice parameter of the gaps between non-unit changes */
    uint32_t k_mag;   /* exp-Golomb order of non-unit magnitudes (|d| - 2) */
    uint32_t len_bits; /* format 2: W, the bits of each length table entry (entry byte 23); 0 in format 1 */
} delta_class_t;

/* A chunk header, decoded and bounds-checked against the record length. */
typedef struct delta_chunk {
    uint32_t mode, width, classes;
    uint32_t elems, changed, payload_len;
    uint32_t sub_log2; /* S of a format 2 sparse chunk (record byte 3), sub-blocks of 2^S elements; 0 otherwise */
    uint64_t base_sum, next_sum, rec_sum;
    delta_class_t cls[FERRY_DELTA_CLASSES_MAX];
    const uint8_t *payload;
} delta_chunk_t;

static inline void put_u32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline void put_u64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> (8 * i));
}
static inline uint32_t get_u32(const uint8_t *p) {
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static inline uint64_t get_u64(const uint8_t *p) { return (uint64_t)get_u32(p) | (uint64_t)get_u32(p + 4) << 32; }

/* A frame's chunk headers read ahead while they are parsed one by one:
 * each header and class table (up to 232 bytes) is a cache miss of its
 * own, records lying kilobytes apart, so a walk over a frame's headers
 * waited on memory once per chunk (about 0.9 ms for the 4096 chunks of 8
 * GiB of bf16 on the GPU host, 2026-11-28). delta_ahead_step prefetches
 * the next chunk's header; the walker starts DELTA_AHEAD chunks ahead of
 * the parse. d: a frame whose chunk table frame_parse checked (the
 * records add up to the frame). */
#define DELTA_AHEAD 8u
typedef struct delta_ahead {
    const uint8_t *d;
    uint32_t next, chunks;
    size_t off; /* chunk next's record */
} delta_ahead_t;
static inline void delta_ahead_step(delta_ahead_t *a) {
    if (a->next >= a->chunks) return;
    const uint8_t *h = a->d + a->off;
    for (uint32_t l = 0; l < CHUNK_HEADER + 8 * CLASS_ENTRY; l += 64) __builtin_prefetch(h + l);
    a->off += get_u32(a->d + DELTA_FRAME_HEADER + 4 * (size_t)a->next++);
}
static inline delta_ahead_t delta_ahead_start(const uint8_t *d, uint32_t chunks) {
    delta_ahead_t a = {d, 0, chunks, DELTA_FRAME_HEADER + (size_t)chunks * 4};
    for (uint32_t i = 0; i < DELTA_AHEAD; i++) delta_ahead_step(&a);
    return a;
}

/* Width in bytes of a dtype the codec takes (sign bit is the top bit), or 0. */
uint32_t delta_width(ferry_dtype_t dtype);

/* Parses a chunk record of width-byte elements; FERRY_ERR_CORRUPT with detail.
 * verify: also check the record checksum (every use of the payload does;
 * ferry_delta_peek reads only the header and class table). A sparse
 * record's format comes from its byte 3: 0 is format 1, 12..24 format 2
 * (sub_log2; each class's len_bits checked to fit its stream), anything
 * else corrupt. Reads no stream bytes. */
ferry_status_t delta_chunk_parse(const void *rec, size_t len, uint32_t width, bool verify, delta_chunk_t *out,
                                 ferry_errbuf_t *err);

/* ferry_delta_peek, calling each(ctx, i, rec, len, h) with every chunk
 * record it has checked, in order (chunk i, its len bytes at rec, its
 * header h, where info's header fields are already set), so that a caller
 * that needs the records too (the GPU apply's sizes and tables) walks the
 * frame once. On failure each may have been called for any of them, every
 * one included (the region sums are checked after the last record). */
typedef void (*delta_each_fn)(void *ctx, uint32_t i, const uint8_t *rec, size_t len, const delta_chunk_t *h);
ferry_status_t delta_peek_each(ferry_delta_codec_t *c, const void *delta, size_t len, ferry_delta_info_t *info,
                               delta_each_fn each, void *ctx);

/* Walks class k's stream of sparse chunk h without the base (positions
 * need it, the codes do not), in either format: false when it is
 * malformed; else the bits spent on positions and on values. */
bool delta_class_walk(const delta_chunk_t *h, uint32_t k, const uint8_t *stream, uint64_t *pos_bits,
                      uint64_t *val_bits);

/* Format 2: sub-blocks of a chunk of elems elements at 2^sub_log2 each. */
static inline uint32_t delta_nsub(uint32_t elems, uint32_t sub_log2) {
    return (uint32_t)(((uint64_t)elems + (1ull << sub_log2) - 1) >> sub_log2);
}
/* Format 2: the bytes of a class's length table. */
static inline uint64_t delta_table_bytes(uint32_t nsub, uint32_t len_bits) {
    return ((uint64_t)nsub * len_bits + 7) / 8;
}

/* Format 2: checks class k's length table (the longest entry's bit length
 * is len_bits; the entries add up to the first part's bits less its
 * padding; the table's padding bits zero; a class without changes has
 * neither) and gives its entries, each sub-stream's bits, in lens[] (nsub
 * of them, or NULL) and the bytes of the sub-streams before the table in
 * *first. False when the table is wrong. */
bool delta_class2_table(const delta_chunk_t *h, uint32_t k, const uint8_t *stream, uint32_t *lens, uint64_t *first);

/* Format 2: decodes class k's stream of sparse chunk h (its sub-streams and
 * length table), checking everything the stream says: the table's entries
 * (the longest one's bit length is len_bits; they add up to the first
 * part's bits less its padding; padding bits zero), each sub-stream ending
 * exactly at a change with its non-unit index at its change count, no code
 * running past its sub-stream, the changed and non-unit counts adding up to
 * the class entry's. sub_count: the class's elements per sub-block (as the
 * base has them; nsub entries), or NULL to bound local ranks by the
 * sub-block's size only. rank, delta (or NULL): each change's rank in the
 * class, chunk-wide (the class's elements before its sub-block plus its
 * local rank; needs sub_count), and value change, with rank[changed] =
 * UINT32_MAX. *pos_bits, *val_bits (or NULL): bits of the gap codes and of
 * the rest. False when anything is wrong, a local rank at or past its
 * sub-block's class elements included. */
bool delta_class2_decode(const delta_chunk_t *h, uint32_t k, const uint8_t *stream, const uint32_t *sub_count,
                         uint32_t *rank, int64_t *delta, uint64_t *pos_bits, uint64_t *val_bits);


/* A frame's 64-byte header at d, whose chunk table (the records' lengths)
 * is already in place after it: the region sums folded from the chunks'
 * (ferry_delta_region_sum's rule), the header checksum. For encoders that
 * lay out records themselves (the GPU's). chunk: a valid chunk size. */
void delta_frame_header_put(uint8_t *d, uint32_t format, ferry_dtype_t dtype, uint64_t elems, uint32_t chunk,
                            uint64_t base_version, uint64_t next_version, const uint64_t *base_sums,
                            const uint64_t *next_sums);

/* xxh3 of a record's bytes except its rec_sum field. */
uint64_t delta_record_sum(const uint8_t *rec, size_t len);

/* ---- Element views ---- */
static inline uint32_t elem_get(const uint8_t *p, uint32_t width, size_t i) {
    switch (width) {
    case 1: return p[i];
    case 2: { uint16_t v; memcpy(&v, p + 2 * i, 2); return v; }
    default: { uint32_t v; memcpy(&v, p + 4 * i, 4); return v; }
    }
}
static inline void elem_put(uint8_t *p, uint32_t width, size_t i, uint32_t v) {
    switch (width) {
    case 1: p[i] = (uint8_t)v; break;
    case 2: { uint16_t h = (uint16_t)v; memcpy(p + 2 * i, &h, 2); break; }
    default: memcpy(p + 4 * i, &v, 4); break;
    }
}
static inline uint32_t mag_mask(uint32_t width) { return width == 4 ? 0x7FFFFFFFu : (1u << (8 * width - 1)) - 1; }

/* Order-preserving signed view of a bit pattern: +x -> mag, -x -> -mag-1.
 * A bijection, so -0 and +0 stay apart. Branch free: the sign of a changed
 * element is a coin flip, so a branch here mispredicts half the time. */
static inline int64_t elem_ord(uint32_t v, uint32_t width) {
    int64_t sign = (int64_t)((v >> (8 * width - 1)) & 1u);
    return (int64_t)(v & mag_mask(width)) ^ -sign; /* ~mag == -mag-1 */
}
/* Inverse of elem_ord; false when o is outside the width's range. */
static inline bool elem_unord(int64_t o, uint32_t width, uint32_t *v) {
    int64_t s = o >> 63; /* -1 when negative */
    uint64_t m = (uint64_t)(o ^ s);
    *v = (uint32_t)m | ((uint32_t)s & (mag_mask(width) + 1));
    return m <= mag_mask(width);
}

/* ---- Kernel levels ----
 * Each per-element or per-change pass has builds for CPU tiers. A codec
 * takes the highest level its CPU runs when created; tests and fuzz targets
 * force each level in turn (delta_codec_level) and check that all write the
 * same bytes and apply with the same results. */
typedef enum {
    DELTA_LEVEL_GENERIC = 0, /* scalar masks, the portable walk and encoder for baseline x86-64 */
    DELTA_LEVEL_AVX2 = 1,    /* AVX2 masks, the portable walk and encoder built for x86-64-v3 */
    DELTA_LEVEL_AVX512 = 2,  /* AVX-512BW masks, and where the CPU has VBMI, VBMI2 and VPOPCNTDQ
                                the AVX-512 apply walk and encoder kernels */
    DELTA_LEVELS = 3
} delta_level_t;
/* Whether this CPU runs level; the highest it runs. */
bool delta_level_runs(delta_level_t level);
delta_level_t delta_level_best(void);
/* Sets the codec's kernels to level's; false, changing nothing, when the
 * CPU does not run it. */
bool delta_codec_level(ferry_delta_codec_t *c, delta_level_t level);
static inline const char *delta_level_name(delta_level_t l) {
    return l == DELTA_LEVEL_GENERIC ? "generic" : l == DELTA_LEVEL_AVX2 ? "avx2" : "avx512";
}

/* ---- Block kernels: 64 elements at a time ----
 * For n elements from base, in blocks of 64 (the last may be shorter), block
 * b: changed[b] (if next) gets a bit per element that differs from next, and
 * ge[b * stride + j] a bit per element whose magnitude is >= thr[j], j < nthr
 * (stride >= nthr). Many blocks per call: the thresholds are loaded once. */
typedef void (*delta_masks_fn)(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n,
                               const uint32_t *thr, uint32_t nthr, uint64_t *changed, uint64_t *ge,
                               uint32_t stride);
#define DELTA_MASK_BATCH 64 /* blocks per kernel call in encode and apply (4096 elements, in L1) */
/* The masks kernel of a level (the best below it the CPU runs). */
delta_masks_fn delta_masks_at(delta_level_t level);
/* Every kernel this CPU runs, fastest first, the scalar one last (for tests). */
size_t delta_masks_kernels(delta_masks_fn *out, size_t cap);
void delta_masks_scalar(const uint8_t *base, const uint8_t *next, uint32_t width, uint32_t n,
                        const uint32_t *thr, uint32_t nthr, uint64_t *changed, uint64_t *ge, uint32_t stride);

/* Format 2: the elements of each of K classes (lower bounds lower[0..K-1],
 * lower[0] = 0) in each sub-block of 2^sub_log2 of a chunk of elems
 * elements at base: out[k * nsub + b]. Reads base only, with the codec's
 * masks kernel (every level counts the same). */
void delta_count_subblocks(const ferry_delta_codec_t *c, const uint8_t *base, uint32_t width, uint32_t elems,
                           uint32_t K, const uint32_t *lower, uint32_t sub_log2, uint32_t *out);

/* Hot loops over every element or every change are built twice, for
 * x86-64-v3 (AVX2, BMI, LZCNT, POPCNT: popcounts become one instruction)
 * and for the baseline: the loop is an always-inline body (DELTA_HOT_BODY)
 * that two thin wrappers take in, name_v3 (DELTA_V3) and name_base; the
 * codec calls one by its level (c->v3). Chosen explicitly, not by
 * target_clones: ifunc resolvers run before ThreadSanitizer is up. */
#define DELTA_HOT_BODY static inline __attribute__((always_inline))
#if defined(FERRY_CPU_X86)
#define DELTA_V3 FERRY_TARGET_V3
#else
#define DELTA_V3
#endif

/* The r-th (0-based) set bit of m, which has more than r set bits. Branch
 * free (broadword: byte popcounts, their prefix sums by one multiply, the
 * byte found by a SWAR compare, the bit by a table), because a branchy loop
 * mispredicts on nearly every changed element. */
extern const uint8_t delta_select8[256][8];
static inline uint32_t select_bit(uint64_t m, uint32_t r) {
    const uint64_t ones = 0x0101010101010101ull, highs = 0x8080808080808080ull;
    uint64_t s = m - ((m >> 1) & 0x5555555555555555ull);
    s = (s & 0x3333333333333333ull) + ((s >> 2) & 0x3333333333333333ull);
    s = (s + (s >> 4)) & 0x0F0F0F0F0F0F0F0Full;
    uint64_t cum = s * ones; /* byte i: set bits in bytes 0..i */
    uint64_t le = (((uint64_t)r * ones | highs) - cum) & highs; /* bytes with cum <= r */
    uint32_t b = (uint32_t)__builtin_popcountll(le);       /* the byte holding the bit */
    uint32_t before = (uint32_t)(((cum << 8) >> (8 * b)) & 0xFF);
    return 8 * b + delta_select8[(m >> (8 * b)) & 0xFF][r - before];
}

/* ---- Bit streams: LSB-first, Rice and exp-Golomb codes ----
 * Rice(v, k): v >> k zero bits, a one bit, then the k low bits of v. With
 * k = 0 a run of gaps is exactly a bitmap, so no separate bitmap mode is
 * needed. ExpGolomb(v, k): Rice of the bit length of v + 2^k, then its bits;
 * for values whose tail must not blow up. Static inline: these run once per
 * changed element inside the hot loops. */
typedef struct bitw {
    uint8_t *start, *p, *end;
    uint64_t acc;
    uint32_t n; /* bits in acc */
    bool overflow;
} bitw_t;

static inline void bitw_init(bitw_t *w, uint8_t *p, size_t cap) {
    w->start = w->p = p;
    w->end = p + cap;
    w->acc = 0;
    w->n = 0;
    w->overflow = false;
}

static inline void bitw_put(bitw_t *w, uint64_t bits, uint32_t n) { /* n <= 32, bits < 2^n */
    w->acc |= bits << w->n;
    w->n += n;
    if (w->n >= 32) {
        if (w->end - w->p < 4) {
            w->overflow = true;
            w->p = w->end;
        } else {
            put_u32(w->p, (uint32_t)w->acc);
            w->p += 4;
        }
        w->acc >>= 32;
        w->n -= 32;
    }
}

static inline void bitw_rice(bitw_t *w, uint32_t v, uint32_t k) {
    uint32_t q = v >> k;
    while (q >= 32) {
        bitw_put(w, 0, 32);
        q -= 32;
    }
    bitw_put(w, 1ull << q, q + 1);
    if (k) bitw_put(w, v & ((1u << k) - 1), k);
}

static inline void bitw_expg(bitw_t *w, uint32_t v, uint32_t k) {
    uint64_t x = (uint64_t)v + (1ull << k);
    uint32_t len = 64u - (uint32_t)__builtin_clzll(x); /* k+1 .. 33 */
    bitw_rice(w, len - 1 - k, 0);
    uint32_t low = len - 1; /* the top bit is implied */
    if (low > 32) {
        bitw_put(w, x & 0xFFFFFFFFu, 32);
        bitw_put(w, (x >> 32) & ((1ull << (low - 32)) - 1), low - 32);
    } else if (low) {
        bitw_put(w, x & ((1ull << low) - 1), low);
    }
}

/* The fast writer for codes of up to 56 bits: whole bytes leave acc after
 * each code by one unaligned 8-byte store, so no branch on the bit count.
 * Needs 8 bytes of room (bitw_room8) and, before the first code, a flush. */
static inline bool bitw_room8(const bitw_t *w) { return w->end - w->p >= 8; }
static inline void bitw_flush8(bitw_t *w) { /* leaves fewer than 8 bits in acc */
    put_u64(w->p, w->acc);
    uint32_t bytes = w->n >> 3;
    w->p += bytes;
    w->acc = bytes == 8 ? 0 : w->acc >> (8 * bytes);
    w->n &= 7;
}
static inline void bitw_put56(bitw_t *w, uint64_t bits, uint32_t n) { /* n <= 56, bits < 2^n, acc < 8 bits */
    w->acc |= bits << w->n;
    w->n += n;
    bitw_flush8(w);
}

/* Bytes written; 0 with overflow set when the room ran out. */
static inline size_t bitw_finish(bitw_t *w) {
    for (; w->n > 0 && !w->overflow; w->n = w->n > 8 ? w->n - 8 : 0) {
        if (w->p >= w->end) {
            w->overflow = true;
            break;
        }
        *w->p++ = (uint8_t)w->acc;
        w->acc >>= 8;
    }
    return w->overflow ? 0 : (size_t)(w->p - w->start);
}

typedef struct bitr {
    const uint8_t *start, *p, *end;
    uint64_t acc;
    uint32_t n;
    uint32_t pad; /* zero bits appended past the end, at the top of acc */
    bool overrun; /* a value was cut short or out of range: the stream is corrupt */
} bitr_t;

static inline void bitr_init(bitr_t *r, const uint8_t *p, size_t len) {
    r->start = r->p = p;
    r->end = p + len;
    r->acc = 0;
    r->n = 0;
    r->pad = 0;
    r->overrun = false;
}

/* Tops acc up to at least 57 bits; past the end it appends zeros and counts
 * them, so that consuming any of them marks the stream as overrun. */
static inline void bitr_refill(bitr_t *r) {
    if (r->n <= 56 && r->end - r->p >= 8) {
        uint64_t v = get_u64(r->p);
        r->acc |= v << r->n;
        uint32_t take = (63 - r->n) >> 3;
        r->p += take;
        r->n += take * 8;
        r->acc &= ~0ull >> (64 - r->n); /* keep only the counted bits: the slow path ORs zeros above them */
        return;
    }
    while (r->n <= 56) {
        uint64_t b = 0;
        if (r->p < r->end)
            b = *r->p++;
        else
            r->pad += 8;
        r->acc |= b << r->n;
        r->n += 8;
    }
}

static inline void bitr_skip(bitr_t *r, uint32_t n) {
    r->acc = n >= 64 ? 0 : r->acc >> n;
    r->n -= n;
    if (r->n < r->pad) r->overrun = true;
}

static inline uint32_t bitr_bits(bitr_t *r, uint32_t n) { /* n <= 32 */
    bitr_refill(r);
    uint32_t v = (uint32_t)(r->acc & ((1ull << n) - 1));
    bitr_skip(r, n);
    return v;
}

/* Bits consumed so far. */
static inline uint64_t bitr_tell(const bitr_t *r) { return (uint64_t)(r->p - r->start) * 8 + r->pad - r->n; }

/* One Rice value; values above limit mark the stream overrun. */
static inline uint32_t bitr_rice(bitr_t *r, uint32_t k, uint32_t limit) {
    uint64_t q = 0;
    for (;;) {
        bitr_refill(r);
        if (r->acc == 0) {
            q += r->n;
            bitr_skip(r, r->n);
            if (r->overrun || q > limit) {
                r->overrun = true;
                return 0;
            }
            continue;
        }
        uint32_t t = (uint32_t)__builtin_ctzll(r->acc);
        q += t;
        bitr_skip(r, t + 1);
        break;
    }
    uint32_t low = k ? bitr_bits(r, k) : 0;
    if (r->overrun || q > (uint64_t)(limit >> k)) {
        r->overrun = true;
        return 0;
    }
    return (uint32_t)(q << k) | low;
}

static inline uint64_t bitr_expg(bitr_t *r, uint32_t k) {
    uint32_t extra = bitr_rice(r, 0, 33 - k - 1);
    if (r->overrun) return 0;
    uint32_t low = extra + k; /* bits below the implied top bit */
    uint64_t x = 1ull << low;
    if (low > 32) {
        x |= bitr_bits(r, 32);
        x |= (uint64_t)bitr_bits(r, low - 32) << 32;
    } else if (low) {
        x |= bitr_bits(r, low);
    }
    return x - (1ull << k);
}

/* ---- Magnitude classes ---- */
/* Chooses up to max_classes classes (thresholds lower[1..], lower[0] = 0) for
 * positions, from the counts over 256 magnitude buckets of a sample of every
 * stride-th element (sample) and of the changed ones (chg); returns the
 * class count. */
uint32_t delta_classes_choose(const uint32_t *sample, uint32_t stride, const uint32_t *chg, uint32_t max_classes,
                              uint32_t bucket_shift, uint32_t *lower);
/* log2(x) for x >= 1 in fixed point (DELTA_LOG2_FRAC fractional bits,
 * truncated), with integers only: the class choice it prices comes out the
 * same on every machine, as a GPU encoder must reproduce it bit for bit. */
#define DELTA_LOG2_FRAC 16
uint64_t delta_log2_fixed(uint64_t x);
/* Bucket of a magnitude for class choice: the exponent field, roughly. */
static inline uint32_t delta_bucket_shift(uint32_t width) { return width == 1 ? 0 : width == 2 ? 7 : 23; }


/* ---- The codec object ---- */
typedef struct delta_change {
    uint32_t pos; /* element index in the chunk */
    uint32_t val; /* decoded: the next value; once applied: the old one */
} delta_change_t;

typedef struct delta_undo {
    uint8_t *base;      /* the chunk's first element */
    uint32_t width, elems;
    size_t first, count; /* sparse: entries of the change log */
    size_t raw_off;      /* raw: offset of the old contents in the arena, or SIZE_MAX */
} delta_undo_t;

/* The elements of block b of a batch of nel: all 64 bits, fewer in a short
 * last block, none past the batch. */
static inline uint64_t delta_block_valid(uint32_t nel, uint32_t b) {
    return 64 * b >= nel ? 0 : nel - 64 * b >= 64 ? ~0ull : (1ull << (nel - 64 * b)) - 1;
}

/* Puts back the old values of n logged changes, last first. */
static inline void delta_undo_changes(uint8_t *base, uint32_t w, const delta_change_t *log, size_t n) {
    for (size_t i = n; i-- > 0;) elem_put(base, w, log[i].pos, log[i].val);
}

/* Writes one decoded change (d steps of elem_ord) at pos and logs the old
 * value; false, writing nothing, when the value would leave the width's
 * range. Inlined with a constant width where the caller has one. */
static inline bool delta_apply_one(uint8_t *base, uint32_t w, uint32_t pos, int64_t d, delta_change_t *log) {
    uint32_t old = elem_get(base, w, pos), v;
    if (!elem_unord(elem_ord(old, w) + d, w, &v)) return false;
    elem_put(base, w, pos, v);
    log->pos = pos;
    log->val = old;
    return true;
}

/* The batch walk of a sparse apply: the changes of each class, decoded in
 * rank order, go to their elements batch by batch (chunk_apply.c,
 * apply_avx512.c). */
typedef struct apply_job {
    /* in */
    const delta_chunk_t *h;
    uint8_t *base;
    delta_masks_fn masks;
    /* per class, decoded by decode_sparse for a walk that does not decode
       (rank ends with a sentinel above every rank) ... */
    const uint32_t *rank[FERRY_DELTA_CLASSES_MAX];
    const int64_t *delta[FERRY_DELTA_CLASSES_MAX];
    const uint8_t *stream[FERRY_DELTA_CLASSES_MAX]; /* ... else its stream (delta_apply_batches_decode) */
    const uint32_t *sub_len[FERRY_DELTA_CLASSES_MAX]; /* format 2: its length table's entries (checked) */
    delta_change_t *log;       /* room for every change: (position, old value) */
    struct XXH3_state_s *hash; /* takes the chunk's new contents */
    /* out */
    size_t n;                                   /* changes written */
    uint64_t seen[FERRY_DELTA_CLASSES_MAX];      /* class elements met in the base */
    uint32_t placed[FERRY_DELTA_CLASSES_MAX];   /* class changes written */
    uint32_t bad_class;                         /* a class whose value left the range, else UINT32_MAX */
    uint32_t bad_stream;                        /* a class whose stream is malformed, else UINT32_MAX */
} apply_job_t;
typedef void (*apply_batches_fn)(apply_job_t *j);
/* A walk's results, whether it finished or stopped at a bad class. */
static inline void apply_job_finish(apply_job_t *j, size_t n, const uint64_t *seen, const uint32_t *placed) {
    j->n = n;
    for (uint32_t k = 0; k < j->h->classes; k++) {
        j->seen[k] = seen[k];
        j->placed[k] = placed[k];
    }
}
/* The walk of a level (the best below it the CPU runs). */
apply_batches_fn delta_apply_batches_at(delta_level_t level);
void delta_apply_batches_avx512(apply_job_t *j); /* x86-64 with FERRY_CPU_AVX512_CODEC only */
/* The AVX-512 walk of format 2, which reads each class's sub-streams as it
   places (j->stream, j->sub_len); at the AVX-512 level. */
void delta_apply_batches_avx512_fmt2(apply_job_t *j);
/* Whether walk f reads the class streams itself (job.stream) rather than
 * decoded changes (job.rank, job.delta). */
bool delta_apply_batches_decode(apply_batches_fn f);

/* The encoder's per-element passes for 16-bit elements, vectorized
 * (enc_avx512.c); the portable code in chunk_enc.c does the same.
 * scan_w2: the offsets of the changed elements among n <= 65536, in order,
 * into off (room for 32 entries past the count); returns the count.
 * class_rows_w2: for a batch of nel elements (base readable for ahead
 * bytes, which it prefetches), per class k < K (buckets from
 * bucket_lower[k]) and block b, its elements cm[k][b] and those of the
 * chunk before the block, before[k][b] (count[k] in: before the batch; out:
 * after it). */
typedef struct delta_enc_kernels {
    size_t (*scan_w2)(const uint8_t *base, const uint8_t *next, uint32_t n, uint16_t *off);
    void (*class_rows_w2)(const uint8_t *base, uint32_t nel, size_t ahead, const uint8_t *bucket_lower, uint32_t K,
                          uint64_t cm[][DELTA_MASK_BATCH], uint32_t before[][DELTA_MASK_BATCH], uint64_t *count);
} delta_enc_kernels_t;
/* False, leaving *k alone, when the CPU lacks what the kernels need. */
bool delta_enc_kernels_pick(delta_enc_kernels_t *k);

struct ferry_delta_codec {
    ferry_ctx_t *ctx;
    ferry_errbuf_t err;
    delta_level_t level;
    bool v3; /* the hot loops' x86-64-v3 builds */
    delta_masks_fn masks;
    apply_batches_fn apply_batches;
    delta_enc_kernels_t enc; /* all NULL: the portable encoder */
    /* decoder scratch: each class's changes, in rank order */
    uint32_t *dec_rank;
    int64_t *dec_delta;
    size_t dec_rank_cap, dec_delta_cap;
    /* encoder scratch, one entry per changed element of a chunk */
    uint32_t *pos, *order, *val, *cval;
    uint16_t *off; /* a piece's changes, from enc.scan_w2 */
    uint8_t *cls, *sign, *csign;
    size_t pos_cap, order_cap, cls_cap, val_cap, sign_cap, cval_cap, csign_cap, off_cap;
    /* format 2, encoder and decoder: per class and sub-block element
       counts, the encoder's changes per sub-block, the AVX-512 walk's
       length table entries */
    uint32_t *sub;
    size_t sub_cap;
    /* decoded changes and, once applied, the undo log */
    delta_change_t *log;
    size_t log_n, log_cap;
    uint8_t *arena; /* old contents of raw chunks */
    size_t arena_n, arena_cap;
    delta_undo_t *undo;
    size_t undo_n, undo_cap;
};

ferry_status_t delta_fail(ferry_delta_codec_t *c, ferry_status_t st, const char *fmt, ...) FERRY_PRINTF(3, 4);
/* Undoes (rollback_to) or forgets (truncate) the chunks applied since the
 * undo log held mark entries. */
void delta_rollback_to(ferry_delta_codec_t *c, size_t mark);
void delta_truncate(ferry_delta_codec_t *c, size_t mark);
/* ferry_delta_apply that keeps the applied chunks in the undo log (for
 * ferry_delta_codec_rollback) instead of forgetting them; *info filled. */
ferry_status_t delta_apply_logged(ferry_delta_codec_t *c, const void *delta, size_t len, void *region,
                                  uint64_t elems, uint64_t base_version, ferry_delta_info_t *info);
/* Grows an array so it holds need elements of size elem. */
bool delta_grow(ferry_delta_codec_t *c, void **items, size_t *cap, size_t need, size_t elem);

#endif
