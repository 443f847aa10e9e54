/* Fuzz target: the sparse delta codec (ferry_delta_*), above all the apply
 * side, which reads deltas that come over the network.
 *
 * Input layout (bytes past the end read as 0):
 *   [0]     bits 0-2 dtype (% 5: BF16, F16, F32, F8_E4M3, F8_E5M2); bits 3-4
 *           chunk_elems (1024, 2048, 4096 or the default); bits 5-7 how the
 *           base is made (random bits, weight-like, zeros, a constant,
 *           norm-like, a magnitude per 64-element block, extremes, a ramp)
 *   [1]     bits 0-2 mode: 0 the delta is the input's tail as is; 1 the same,
 *           resealed (below); 2, 3 a valid delta, intact; 4, 5 a valid delta
 *           corrupted then resealed; 6 corrupted then deeply resealed; 7
 *           corrupted, not resealed. bits 3-5 max_classes - 1; bits 6-7 the
 *           region it is applied to: the base, a wrong base, a region one
 *           element longer or shorter, or the next contents (applied twice)
 *   [2]     bits 0-1 base_version passed to apply (any, the delta's, another,
 *           any); bit 2 also apply chunk by chunk; bit 3 set versions in the
 *           params; bit 4 pass base_sum in the params; bit 5 exact-capacity
 *           re-encodes and the chunk-level encoder + assemble; bits 6-7 how
 *           the wrong base differs (low bit, sign bit, one next value, a word)
 *   [3..4]  elements (little-endian, % 4097; in format 2, % 16385, so
 *           that a chunk has several sub-blocks of 2^12 or 2^13)
 *   [5..8]  seed of the base contents and versions; its bit 8 commits the
 *           chunk-by-chunk applies instead of rolling them back; its bit 9
 *           encodes format 2 (modes 2 to 7: params.format, and the chunk
 *           calls' FERRY_DELTA_CHUNK_FORMAT2)
 *   modes 0 and 1: [9..] the delta; the region takes the dtype and size
 *           its header names, where that is a codec dtype and <= 4096
 *           (16384 where its header says format 2)
 *   modes 2 to 7: [9] n, then n 4-byte edits that turn the base into next
 *           (op, pos lo, pos hi, arg: one-ulp, non-unit, arbitrary and huge
 *           changes, dense runs, strided runs, sign flips, a random fraction
 *           of a chunk), then 5-byte corruptions of the encoded delta (op,
 *           x0, x1, x2, val: xor/set/add/bit-flip of a byte anywhere, in a
 *           chunk record or in its header and class table; truncating or
 *           extending the delta; cutting or growing a chunk's last class
 *           stream with its lengths fixed up; a class's code parameters; a
 *           chunk's mode; swapping or copying chunk records).
 * Resealing recomputes every chunk record's checksum, the frame's region
 * checksums from the records and the header checksum, so corruptions reach
 * the stream decoder; a deep reseal also sets every record's base sum to the
 * region's chunk (and an unchanged or raw chunk's next sum to what applying
 * it gives), so made-up deltas can apply.
 *
 * Every kernel level the CPU runs (generic, AVX2, AVX-512: delta_codec_level)
 * encodes the same bytes and applies with the same status and contents as
 * the codec's own, failing at the same chunk.
 *
 * Checked: inspect and apply never crash, leak or read outside the delta
 * (an allocation of exactly its length) or the region; a refusal leaves a
 * detail text, and a failed apply leaves the region bit-identical; on
 * success the region's ferry_delta_region_sum is info->next_sum, and when
 * that is the true next contents' sum the region is exactly next. A valid
 * delta: inspect accepts it with every info field right (changed is the
 * true count, unchanged chunks counted, the byte counts add up to the
 * total), apply onto the base gives next exactly, a wrong base is refused
 * with FERRY_ERR_MISMATCH, as are a wrong size and a wrong version; encoding
 * into exactly its length gives the same bytes, one byte less is
 * FERRY_ERR_LIMIT; chunk_encode gives chunk_get's records and assemble the
 * same delta. Where inspect accepts a delta, apply's info agrees with
 * inspect's (except bytes_positions and bytes_values, which apply leaves 0:
 * it does not walk the streams), and chunk by chunk (chunk_get, then
 * chunk_apply on an exact copy of each chunk, then rollback) every chunk
 * applies exactly where the whole apply did, giving the same contents, or
 * is refused with a detail and left untouched; then every chunk applied in
 * place on a first copy and left logged, a whole apply on a second copy
 * gives the same status and contents as before and leaves the first copy
 * alone, and rollback restores the first copy exactly (commit: keeps it)
 * without touching the second. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "common/hash.h"
#include "fuzz_ctx.h"
#include "fuzz_input.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_ELEMS 4096u
#define MAX_ELEMS2 16384u /* format 2 */

/* What the current input is, for FAIL. */
static struct {
    unsigned mode, dtype, format;
    uint64_t elems;
    size_t size;
    const ferry_delta_codec_t *codec;
} cur;

/* Says what broke (the replay driver names no file) and stops. */
#define FAIL(why)                                                                                          \
    do {                                                                                                   \
        fprintf(stderr, "fuzz_delta: %s (mode %u, format %u, dtype %u, %llu elements, %zu-byte input; "     \
                        "detail: %s)\n",                                                                  \
                (why), cur.mode, cur.format, cur.dtype, (unsigned long long)cur.elems, cur.size,           \
                cur.codec ? ferry_delta_codec_detail(cur.codec) : "");                                     \
        abort();                                                                                           \
    } while (0)

static const ferry_dtype_t dtypes[5] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3,
                                        FERRY_DTYPE_F8_E5M2};
static const uint32_t exp_bits[5] = {8, 5, 8, 4, 5}, man_bits[5] = {7, 10, 23, 3, 2};

/* ---- element helpers ---- */

/* v moved by d in the order-preserving view; the other way round where that
 * leaves the range, and a flipped low bit where both do: always != v. */
static uint32_t shift_ord(uint32_t v, uint32_t w, int64_t d) {
    uint32_t out;
    int64_t o = elem_ord(v, w);
    if (d != 0 && elem_unord(o + d, w, &out)) return out;
    if (d != 0 && elem_unord(o - d, w, &out)) return out;
    return v ^ 1u;
}

static uint32_t width_mask(uint32_t w) { return w == 4 ? 0xFFFFFFFFu : (1u << (8 * w)) - 1; }

/* A float of dtype index t: sign, biased exponent, mantissa bits. */
static uint32_t make_float(unsigned t, uint32_t sign, uint32_t e, uint32_t mant) {
    uint32_t eb = exp_bits[t], mb = man_bits[t];
    uint32_t emax = (1u << eb) - 1;
    if (e > emax) e = emax;
    return (sign & 1u) << (eb + mb) | e << mb | (mant & ((1u << mb) - 1));
}

static void make_base(unsigned t, unsigned kind, uint64_t seed, uint8_t *base, uint32_t n) {
    uint32_t w = delta_width(dtypes[t]), bias = (1u << (exp_bits[t] - 1)) - 1, emax = (1u << exp_bits[t]) - 1;
    uint32_t konst = (uint32_t)mix(seed) & width_mask(w);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t r = mix(seed ^ ((uint64_t)i << 20 | kind));
        uint32_t v;
        switch (kind) {
        case 0: v = (uint32_t)r; break;
        case 1: { /* ~N(0, 0.02): exponents a few binades below 1 */
            uint32_t e = bias > 6 ? bias - 6 + (uint32_t)(r >> 8) % 4 : 1 + (uint32_t)(r >> 8) % 3;
            v = make_float(t, (uint32_t)(r >> 4), e, (uint32_t)(r >> 32));
            break;
        }
        case 2: v = 0; break;
        case 3: v = konst; break;
        case 4: v = make_float(t, (r >> 7) % 8 == 0, bias - (uint32_t)(r >> 4) % 2, (uint32_t)(r >> 32)); break;
        case 5: { /* one magnitude per block of 64, anywhere in the range */
            uint64_t rb = mix(seed ^ ((uint64_t)(i / 64) << 40) ^ 0x55);
            v = make_float(t, (uint32_t)(r >> 3), (uint32_t)rb % (emax + 1), (uint32_t)(r >> 32));
            break;
        }
        case 6: { /* extremes: the largest magnitudes, zeros, the smallest */
            uint32_t m = mag_mask(w), s = (uint32_t)(r >> 2) & 1u;
            uint32_t pick = (uint32_t)(r >> 8) % 4;
            uint32_t mag = pick == 0 ? m - (uint32_t)(r >> 16) % 4 : pick == 1 ? (uint32_t)(r >> 16) % 3
                                                                               : (uint32_t)(r >> 16) & m;
            v = s << (8 * w - 1) | mag;
            break;
        }
        default: v = i * 3u; break;
        }
        elem_put(base, w, i, v & width_mask(w));
    }
}

/* Applies one 4-byte edit to next (n elements). */
static void edit(uint32_t w, uint8_t *next, uint32_t n, const uint8_t op[4], uint64_t salt) {
    if (n == 0) return;
    uint32_t pos = ((uint32_t)op[1] | (uint32_t)op[2] << 8) % n, arg = op[3];
    uint32_t v = elem_get(next, w, pos);
    uint64_t h = mix(salt ^ ((uint64_t)op[0] << 32 | (uint64_t)pos << 8 | arg));
    switch (op[0] % 8) {
    case 0: elem_put(next, w, pos, shift_ord(v, w, (arg & 1) ? -1 : 1)); break;
    case 1: elem_put(next, w, pos, shift_ord(v, w, (op[0] & 8) ? -(int64_t)(arg + 2) : (int64_t)(arg + 2))); break;
    case 2: elem_put(next, w, pos, (uint32_t)h & width_mask(w)); break;
    case 3: /* a dense run of one-ulp changes */
        for (uint32_t i = pos; i < n && i <= pos + arg; i++, h = mix(h))
            elem_put(next, w, i, shift_ord(elem_get(next, w, i), w, (h & 1) ? -1 : 1));
        break;
    case 4: { /* a strided run */
        uint32_t stride = (arg & 15) + 1, count = ((arg >> 4) + 1) * 16;
        for (uint32_t i = pos, c = 0; i < n && c < count; i += stride, c++, h = mix(h))
            elem_put(next, w, i, shift_ord(elem_get(next, w, i), w, (h & 1) ? -1 : 1));
        break;
    }
    case 5: elem_put(next, w, pos, v ^ (1u << (8 * w - 1))); break;
    case 6: { /* a huge change */
        int64_t d = (int64_t)((uint64_t)(arg | 1) << ((op[0] >> 3) % 32));
        elem_put(next, w, pos, shift_ord(v, w, (op[0] & 0x80) ? -d : d));
        break;
    }
    default: { /* a random fraction (arg+1)/256 of the 1024 elements from pos's block, 1 in 8 non-unit */
        uint32_t from = pos & ~1023u;
        for (uint32_t i = from; i < n && i < from + 1024; i++) {
            h = mix(h);
            if ((h & 255) > arg) continue;
            int64_t d = ((h >> 8) & 7) ? 1 : 2 + (int64_t)((h >> 12) & 63);
            elem_put(next, w, i, shift_ord(elem_get(next, w, i), w, ((h >> 20) & 1) ? -d : d));
        }
        break;
    }
    }
}

/* ---- the delta's structure, as far as it holds together ---- */

/* The chunk table: chunks and where each record starts; false when the
 * header or the table does not fit in len or the records overrun it. */
static bool table_get(const uint8_t *d, size_t len, uint32_t *chunks, size_t **starts) {
    *starts = NULL;
    if (len < DELTA_FRAME_HEADER) return false;
    uint64_t n = get_u32(d + 20);
    if (DELTA_FRAME_HEADER + n * 4 > len) return false;
    size_t *s = xmalloc((size_t)(n + 1) * sizeof *s);
    uint64_t off = DELTA_FRAME_HEADER + n * 4;
    for (uint64_t i = 0; i < n; i++) {
        s[i] = (size_t)off;
        off += get_u32(d + DELTA_FRAME_HEADER + i * 4);
        if (off > len) {
            free(s);
            return false;
        }
    }
    s[n] = (size_t)off;
    *chunks = (uint32_t)n;
    *starts = s;
    return true;
}

/* The same region checksum ferry_delta_region_sum computes, from chunk sums. */
static uint64_t fold_sums(const uint64_t *sums, uint32_t n) {
    uint8_t *b = xmalloc((size_t)n * 8);
    for (uint32_t i = 0; i < n; i++) put_u64(b + (size_t)i * 8, sums[i]);
    uint64_t h = XXH3_64bits(b, (size_t)n * 8);
    free(b);
    return h;
}

/* Recomputes the checksums that need no base (see the header comment);
 * deep: also sets record base and next sums from region (elems of width w). */
static void reseal(uint8_t *d, size_t len, bool deep, const uint8_t *region, uint64_t elems, uint32_t w) {
    uint32_t chunks;
    size_t *st;
    if (len < DELTA_FRAME_HEADER) return;
    if (table_get(d, len, &chunks, &st)) {
        uint64_t *bs = xmalloc((size_t)chunks * 8), *ns = xmalloc((size_t)chunks * 8);
        uint32_t chunk_elems = get_u32(d + 16);
        bool all = true;
        for (uint32_t i = 0; i < chunks; i++) {
            uint8_t *rec = d + st[i];
            size_t rl = st[i + 1] - st[i];
            if (rl < CHUNK_HEADER) {
                all = false;
                continue;
            }
            uint64_t at = (uint64_t)i * chunk_elems;
            if (deep && region && chunk_elems && at < elems && rec[1] == w) {
                uint64_t n = elems - at < chunk_elems ? elems - at : chunk_elems;
                uint64_t h = XXH3_64bits(region + at * w, (size_t)n * w);
                put_u64(rec + 16, h);
                if (rec[0] == CHUNK_UNCHANGED) put_u64(rec + 24, h);
                if (rec[0] == CHUNK_RAW) put_u64(rec + 24, XXH3_64bits(rec + CHUNK_HEADER, rl - CHUNK_HEADER));
            }
            put_u64(rec + 32, delta_record_sum(rec, rl));
            bs[i] = get_u64(rec + 16);
            ns[i] = get_u64(rec + 24);
        }
        if (all) {
            put_u64(d + 40, fold_sums(bs, chunks));
            put_u64(d + 48, fold_sums(ns, chunks));
        }
        free(bs);
        free(ns);
        free(st);
    }
    uint64_t n = get_u32(d + 20);
    if (DELTA_FRAME_HEADER + n * 4 <= len) {
        uint64_t h = XXH3_64bits(d, 56);
        put_u64(d + 56, XXH3_64bits_withSeed(d + DELTA_FRAME_HEADER, (size_t)n * 4, h));
    }
}

/* A growable delta buffer for the corruptions. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} dbuf_t;

static void dbuf_reserve(dbuf_t *b, size_t need) {
    if (need <= b->cap) return;
    size_t c = b->cap ? b->cap : 64;
    while (c < need) c *= 2;
    b->p = realloc(b->p, c);
    if (!b->p) abort();
    b->cap = c;
}

/* Replaces bytes [at, at + cut) with add bytes of fill (from src if not NULL). */
static void dbuf_splice(dbuf_t *b, size_t at, size_t cut, size_t add, const uint8_t *src, uint8_t fill) {
    dbuf_reserve(b, b->len - cut + add);
    memmove(b->p + at + add, b->p + at + cut, b->len - at - cut);
    if (src)
        memcpy(b->p + at, src, add);
    else
        memset(b->p + at, fill, add);
    b->len = b->len - cut + add;
}

/* Shrinks (delta < 0) or grows chunk c's last class stream with non-empty
 * bytes (or its raw payload) by |delta| bytes, fixing the lengths. */
static void resize_record(dbuf_t *b, uint32_t c, int32_t delta, uint8_t fill) {
    uint32_t chunks;
    size_t *st;
    if (!table_get(b->p, b->len, &chunks, &st)) return;
    if (c >= chunks) c = chunks ? c % chunks : 0;
    if (chunks == 0 || st[c + 1] - st[c] < CHUNK_HEADER) {
        free(st);
        return;
    }
    size_t at = st[c], rl = st[c + 1] - st[c];
    uint8_t *rec = b->p + at;
    uint32_t classes = rec[0] == CHUNK_SPARSE ? rec[2] : 0;
    size_t entry = 0; /* offset of the class entry to fix, 0: none */
    for (uint32_t k = 0; k < classes && CHUNK_HEADER + (size_t)(k + 1) * CLASS_ENTRY <= rl; k++)
        if (get_u32(rec + CHUNK_HEADER + (size_t)k * CLASS_ENTRY + 16)) entry = CHUNK_HEADER + (size_t)k * CLASS_ENTRY;
    uint32_t plen = get_u32(rec + 12);
    if (delta < 0 && (size_t)-delta > rl - CHUNK_HEADER) delta = -(int32_t)(rl - CHUNK_HEADER);
    if (delta < 0 && (uint32_t)-delta > plen) delta = -(int32_t)plen;
    if (entry && delta < 0 && (uint32_t)-delta > get_u32(rec + entry + 16))
        delta = -(int32_t)get_u32(rec + entry + 16);
    put_u32(rec + 12, plen + (uint32_t)delta);
    if (entry) put_u32(rec + entry + 16, get_u32(rec + entry + 16) + (uint32_t)delta);
    uint8_t *tab = b->p + DELTA_FRAME_HEADER + (size_t)c * 4;
    put_u32(tab, get_u32(tab) + (uint32_t)delta);
    if (delta < 0)
        dbuf_splice(b, at + rl + (size_t)delta, (size_t)-delta, 0, NULL, 0);
    else
        dbuf_splice(b, at + rl, 0, (size_t)delta, NULL, fill);
    free(st);
}

/* Copies record src over record dst (swap: exchanges them), fixing the table. */
static void move_record(dbuf_t *b, uint32_t x, uint32_t y, bool swap) {
    uint32_t chunks;
    size_t *st;
    if (!table_get(b->p, b->len, &chunks, &st)) return;
    if (chunks < 2) {
        free(st);
        return;
    }
    x %= chunks;
    y %= chunks;
    if (x == y) y = (x + 1) % chunks;
    size_t total = st[chunks] - st[0];
    uint8_t *recs = xmalloc(total), *out = xmalloc(2 * total); /* a copy can grow it */
    memcpy(recs, b->p + st[0], total);
    size_t o = 0;
    for (uint32_t i = 0; i < chunks; i++) {
        uint32_t from = i;
        if (i == y) from = x;
        if (swap && i == x) from = y;
        size_t l = st[from + 1] - st[from];
        memcpy(out + o, recs + (st[from] - st[0]), l);
        put_u32(b->p + DELTA_FRAME_HEADER + (size_t)i * 4, (uint32_t)l);
        o += l;
    }
    dbuf_splice(b, st[0], total, o, out, 0);
    free(recs);
    free(out);
    free(st);
}

/* One 5-byte corruption. */
static void corrupt(dbuf_t *b, const uint8_t op[5]) {
    uint32_t where = op[0] & 3, act = (op[0] >> 2) & 7, val = op[4];
    uint32_t x = (uint32_t)op[1] | (uint32_t)op[2] << 8 | (uint32_t)op[3] << 16;
    if (where == 3) {
        switch (act) {
        case 0: b->len = b->len ? x % b->len : 0; return;
        case 1: dbuf_splice(b, b->len, 0, val + 1, NULL, op[1]); return;
        case 2: resize_record(b, op[1], -(int32_t)(val % 16 + 1), 0); return;
        case 3: resize_record(b, op[1], (int32_t)(val % 16 + 1), op[2]); return;
        case 6: move_record(b, op[1], op[2], true); return;
        case 7: move_record(b, op[1], op[2], false); return;
        default: break;
        }
        /* 4, 5: a field of chunk op[1]'s header or class table */
        uint32_t chunks;
        size_t *st;
        if (!table_get(b->p, b->len, &chunks, &st)) return;
        if (chunks) {
            uint32_t c = op[1] % chunks;
            uint8_t *rec = b->p + st[c];
            size_t rl = st[c + 1] - st[c];
            if (act == 4 && rl >= CHUNK_HEADER) { /* the mode */
                rec[0] = (uint8_t)(val % 3);
            } else if (act == 5 && rl >= CHUNK_HEADER + CLASS_ENTRY) { /* a class's code parameter */
                uint32_t k = op[2] % ((rl - CHUNK_HEADER) / CLASS_ENTRY < 8 ? (rl - CHUNK_HEADER) / CLASS_ENTRY : 8);
                rec[CHUNK_HEADER + k * CLASS_ENTRY + 20 + op[3] % 3] = (uint8_t)(val % 26);
            }
        }
        free(st);
        return;
    }
    if (b->len == 0) return;
    size_t off = x % b->len;
    if (where != 0) {
        uint32_t chunks;
        size_t *st;
        if (table_get(b->p, b->len, &chunks, &st) && chunks) {
            uint32_t c = op[1] % chunks;
            size_t rl = st[c + 1] - st[c], span = where == 2 ? CHUNK_HEADER + 8 * CLASS_ENTRY : rl;
            if (span > rl) span = rl;
            if (span) off = st[c] + ((uint32_t)op[2] | (uint32_t)op[3] << 8) % span;
        }
        free(st);
    }
    switch (act & 3) {
    case 0: b->p[off] ^= (uint8_t)(val ? val : 1); break;
    case 1: b->p[off] = (uint8_t)val; break;
    case 2:
        if (off + 4 <= b->len) put_u32(b->p + off, get_u32(b->p + off) + (uint32_t)(int8_t)val);
        break;
    default: b->p[off] ^= (uint8_t)(1u << (val & 7)); break;
    }
}

/* ---- the checks ---- */

typedef struct {
    ferry_dtype_t dtype;
    uint32_t w;
    uint64_t elems;          /* the region's */
    const uint8_t *next;     /* the true next contents (elems), or NULL */
    bool intact;             /* an encoder's delta, unchanged */
    bool right_base;         /* the region is the delta's base */
    bool right_size;         /* the region has the delta's size */
    uint64_t base_version;   /* passed to apply */
    bool version_ok;         /* base_version matches the delta's or is ANY */
    bool chunk_api;
    bool commit;             /* commit the chunk-level applies instead of rolling back */
} apply_case_t;

static bool same_info(const ferry_delta_info_t *a, const ferry_delta_info_t *b) {
    return a->dtype == b->dtype && a->elems == b->elems && a->chunk_elems == b->chunk_elems &&
           a->chunks == b->chunks && a->base_version == b->base_version && a->next_version == b->next_version &&
           a->base_sum == b->base_sum && a->next_sum == b->next_sum && a->changed == b->changed &&
           a->chunks_unchanged == b->chunks_unchanged && a->chunks_sparse == b->chunks_sparse &&
           a->chunks_raw == b->chunks_raw && a->bytes_total == b->bytes_total && a->bytes_header == b->bytes_header &&
           a->bytes_raw == b->bytes_raw;
}

/* Every other kernel level this CPU runs applies the delta with the status
 * and contents the codec's own level gave (ast, result), failing at the
 * same chunk. */
static void check_levels_apply(ferry_delta_codec_t *codec, const uint8_t *d, size_t len, const uint8_t *before,
                               const apply_case_t *c, ferry_status_t ast, const uint8_t *result) {
    size_t rbytes = (size_t)c->elems * c->w;
    char detail[FERRY_ERR_TEXT];
    snprintf(detail, sizeof detail, "%s", ferry_delta_codec_detail(codec));
    delta_level_t own = codec->level;
    for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
        if (l == (int)own || !delta_codec_level(codec, (delta_level_t)l)) continue;
        uint8_t *r = exact_copy(before, rbytes);
        ferry_status_t st = ferry_delta_apply(codec, d, len, r, c->elems, c->base_version, NULL);
        if (st != ast) FAIL("kernel levels gave an apply different statuses");
        /* the same failing chunk (the detail's "chunk i:"); the reason's
           words may differ: the portable walk decodes a stream whole
           before placing, the AVX-512 walk as it places */
        const char *other = ferry_delta_codec_detail(codec), *colon = strchr(detail, ':');
        size_t head = colon ? (size_t)(colon - detail) : strlen(detail) + 1;
        if (strncmp(detail, other, head) != 0) {
            fprintf(stderr, "level %s: %s\nlevel %s: %s\n", delta_level_name(own), detail,
                    delta_level_name((delta_level_t)l), other);
            FAIL("kernel levels failed an apply at different chunks");
        }
        if (rbytes && memcmp(r, result, rbytes) != 0) FAIL("kernel levels applied to different contents");
        free(r);
    }
    delta_codec_level(codec, own);
    ferry_err_clear(&codec->err);
    snprintf(codec->err.text, sizeof codec->err.text, "%s", detail);
}

/* Inspect, apply and the chunk-level calls on one delta (exactly len bytes
 * at d) and region (exactly c->elems elements, its contents in before). */
static void check_delta(ferry_delta_codec_t *codec, const uint8_t *d, size_t len, const uint8_t *before,
                        const apply_case_t *c) {
    size_t rbytes = (size_t)c->elems * c->w;
    ferry_delta_info_t info, ai;
    ferry_status_t ist = ferry_delta_inspect(codec, d, len, &info);
    if (ist != FERRY_OK) {
        if (!ferry_delta_codec_detail(codec)[0]) FAIL("a refused inspect left no detail");
        if (c->intact) FAIL("inspect refused a valid delta");
    } else {
        if (ferry_delta_codec_detail(codec)[0]) FAIL("a successful inspect left a detail");
        if (info.bytes_total != len) FAIL("inspect: bytes_total is not the delta's length");
        if (info.bytes_header + info.bytes_positions + info.bytes_values + info.bytes_raw != info.bytes_total)
            FAIL("inspect: the byte counts do not add up to bytes_total");
        if ((uint64_t)info.chunks_unchanged + info.chunks_sparse + info.chunks_raw != info.chunks)
            FAIL("inspect: the chunk kinds do not add up to the chunks");
        if (info.chunk_elems < FERRY_DELTA_CHUNK_MIN || info.chunk_elems > FERRY_DELTA_CHUNK_MAX ||
            info.chunks != (info.elems + info.chunk_elems - 1) / info.chunk_elems)
            FAIL("inspect: chunks and chunk_elems do not fit elems");
        if (info.changed > info.elems) FAIL("inspect: more changes than elements");
        if (delta_width(info.dtype) == 0) FAIL("inspect: an unsupported dtype accepted");
    }

    /* the peek callers run before applying: it takes all inspect takes and
       says the same, but for the position/value split it does not walk */
    ferry_delta_info_t pk;
    ferry_status_t pst = ferry_delta_peek(codec, d, len, &pk);
    if (pst != FERRY_OK && !ferry_delta_codec_detail(codec)[0]) FAIL("a refused peek left no detail");
    if (ist == FERRY_OK && pst != FERRY_OK) FAIL("peek refused a delta inspect accepted");
    if (ist == FERRY_OK && (!same_info(&pk, &info) || pk.bytes_positions || pk.bytes_values))
        FAIL("peek's info differs from inspect's");

    /* the whole-region apply */
    uint8_t *region = exact_copy(before, rbytes);
    ferry_status_t ast = ferry_delta_apply(codec, d, len, region, c->elems, c->base_version, &ai);
    check_levels_apply(codec, d, len, before, c, ast, region);
    if (ast != FERRY_OK) {
        if (!ferry_delta_codec_detail(codec)[0]) FAIL("a failed apply left no detail");
        if (rbytes && memcmp(region, before, rbytes) != 0) FAIL("a failed apply changed the region");
        if (c->intact && c->right_base && c->right_size && c->version_ok) FAIL("a valid delta did not apply");
        if (c->intact && ast != FERRY_ERR_MISMATCH) FAIL("a valid delta for another base was not a mismatch");
        if (ist == FERRY_OK && (!c->right_size || !c->version_ok) && ast != FERRY_ERR_MISMATCH)
            FAIL("a wrong size or version was not a mismatch");
    } else {
        if (ferry_delta_codec_detail(codec)[0]) FAIL("a successful apply left a detail");
        if (ist != FERRY_OK && c->intact) FAIL("apply took a delta inspect refused");
        if (!c->right_size) FAIL("a delta applied to a region of another size");
        if (!c->version_ok) FAIL("a delta applied to another version");
        if (ai.elems != c->elems) FAIL("apply's info names another region");
        /* a corrupted, resealed delta may name another dtype of the same
           width (any dtype, for no elements): its bytes are still exactly
           what applies, and callers that care compare the dtype first (the
           sync reader does) */
        if (c->intact ? ai.dtype != c->dtype : c->elems && delta_width(ai.dtype) != delta_width(c->dtype))
            FAIL("apply's info names another dtype");
        uint64_t sum;
        if (ferry_delta_region_sum(ai.dtype, region, c->elems, ai.chunk_elems, &sum) != FERRY_OK)
            FAIL("region_sum refused an applied region");
        if (sum != ai.next_sum) FAIL("the applied region's sum is not info->next_sum");
        if (c->next) {
            uint64_t want;
            if (ferry_delta_region_sum(ai.dtype, c->next, c->elems, ai.chunk_elems, &want) != FERRY_OK)
                FAIL("region_sum refused next");
            if (want == ai.next_sum && rbytes && memcmp(region, c->next, rbytes) != 0)
                FAIL("the applied region has next's sum but other contents");
            if (c->intact && c->right_base && rbytes && memcmp(region, c->next, rbytes) != 0)
                FAIL("a valid delta did not give next exactly");
        }
        if (ist == FERRY_OK && !same_info(&info, &ai)) FAIL("apply's info differs from inspect's");
        if (pst != FERRY_OK) FAIL("apply took a delta peek refused");
        if (!same_info(&pk, &ai) || ai.bytes_positions || ai.bytes_values) FAIL("apply's info is not the peek's");
    }

    if (ist != FERRY_OK || !c->chunk_api || c->dtype != info.dtype) {
        free(region);
        return;
    }
    /* each chunk alone, on an exact copy of its slice: applied, checked, rolled back */
    bool all_ok = true;
    const void **recs = xmalloc((size_t)info.chunks * sizeof *recs);
    size_t *rls = xmalloc((size_t)info.chunks * sizeof *rls);
    uint32_t nch = 0; /* chunks that lie in the region */
    for (uint32_t i = 0; i < info.chunks; i++) {
        if (ferry_delta_chunk_get(codec, d, len, i, &recs[i], &rls[i]) != FERRY_OK) FAIL("chunk_get refused a chunk");
        const uint8_t *rec = recs[i];
        if (rec < d + DELTA_FRAME_HEADER || rls[i] > len || rec + rls[i] > d + len)
            FAIL("chunk_get's record lies outside the delta");
        uint64_t at = (uint64_t)i * info.chunk_elems;
        if (at >= c->elems) break; /* a region of another size */
        nch = i + 1;
        uint32_t n = (uint32_t)(c->elems - at < info.chunk_elems ? c->elems - at : info.chunk_elems);
        size_t sb = (size_t)n * c->w;
        uint8_t *slice = exact_copy(before + at * c->w, sb);
        ferry_status_t st = ferry_delta_chunk_apply(codec, c->dtype, rec, rls[i], slice, n);
        if (st != FERRY_OK) {
            all_ok = false;
            if (!ferry_delta_codec_detail(codec)[0]) FAIL("a failed chunk_apply left no detail");
            if (memcmp(slice, before + at * c->w, sb) != 0) FAIL("a failed chunk_apply changed the chunk");
        } else {
            if (XXH3_64bits(slice, sb) != get_u64(rec + 24)) FAIL("an applied chunk does not have its record's next sum");
            if (ast == FERRY_OK && memcmp(slice, region + at * c->w, sb) != 0)
                FAIL("chunk_apply gave other contents than the whole apply");
        }
        ferry_delta_codec_rollback(codec);
        if (memcmp(slice, before + at * c->w, sb) != 0) FAIL("rollback did not restore a chunk");
        free(slice);
    }
    if (c->intact && c->right_base && c->right_size && !all_ok) FAIL("a valid delta's chunks did not apply");
    if (ast == FERRY_OK && !all_ok) FAIL("chunk_apply refused a chunk the whole apply took");
    if (ast != FERRY_OK && all_ok && c->right_size && c->version_ok)
        FAIL("the whole apply refused a delta whose every chunk applies");

    /* every chunk in place on a first copy, left logged (failed ones restored at once) */
    uint8_t *one = exact_copy(before, rbytes);
    for (uint32_t i = 0; i < nch; i++) {
        uint64_t at = (uint64_t)i * info.chunk_elems;
        uint32_t n = (uint32_t)(c->elems - at < info.chunk_elems ? c->elems - at : info.chunk_elems);
        if (ferry_delta_chunk_apply(codec, c->dtype, recs[i], rls[i], one + at * c->w, n) != FERRY_OK &&
            memcmp(one + at * c->w, before + at * c->w, (size_t)n * c->w) != 0)
            FAIL("a failed chunk_apply changed the region");
    }
    if (ast == FERRY_OK && c->right_size && rbytes && memcmp(one, region, rbytes) != 0)
        FAIL("chunk by chunk gave other contents than the whole apply");
    free(recs);
    free(rls);
    /* a whole apply on a second copy must leave the first copy's log alone */
    uint8_t *two = exact_copy(before, rbytes), *one_now = exact_copy(one, rbytes);
    ferry_status_t st2 = ferry_delta_apply(codec, d, len, two, c->elems, c->base_version, NULL);
    if (st2 != ast) FAIL("a second apply of the same delta gave another status");
    if (rbytes && memcmp(two, region, rbytes) != 0) FAIL("a second apply of the same delta gave other contents");
    if (rbytes && memcmp(one, one_now, rbytes) != 0) FAIL("a whole apply touched chunks logged before it");
    if (c->commit) { /* keep them: a later rollback has nothing to undo */
        ferry_delta_codec_commit(codec);
        ferry_delta_codec_rollback(codec);
        if (rbytes && memcmp(one, one_now, rbytes) != 0) FAIL("a rollback after a commit changed the region");
    } else {
        ferry_delta_codec_rollback(codec);
        if (rbytes && memcmp(one, before, rbytes) != 0) FAIL("rollback did not restore the region");
        ferry_delta_codec_rollback(codec); /* nothing left: a no-op */
        if (rbytes && memcmp(one, before, rbytes) != 0) FAIL("a second rollback changed the region");
    }
    if (rbytes && memcmp(two, region, rbytes) != 0) FAIL("rollback undid a finished whole apply");
    free(one_now);
    free(two);
    free(one);
    free(region);
}

/* Encodes base -> next; checks the encoder's own promises. */
static uint8_t *encode_valid(ferry_delta_codec_t *codec, const ferry_delta_params_t *p, const uint8_t *base,
                             const uint8_t *next, uint64_t n, bool cap_tests, bool sum_tests, size_t *len_out) {
    uint32_t w = delta_width(p->dtype);
    uint32_t chunk = (p->field_mask & FERRY_DELTA_PARAM_CHUNK_ELEMS) ? p->chunk_elems : FERRY_DELTA_CHUNK_DEFAULT;
    size_t cap = ferry_delta_bound(p->dtype, n, chunk);
    if (cap < DELTA_FRAME_HEADER) FAIL("ferry_delta_bound refused a valid region");
    uint8_t *dst = xmalloc(cap);
    size_t len = 0;
    if (ferry_delta_encode(codec, p, base, next, n, dst, cap, &len) != FERRY_OK) FAIL("encode failed");
    if (len > cap || len < DELTA_FRAME_HEADER) FAIL("encode's length is outside its bound");
    uint8_t *d = exact_copy(dst, len);
    free(dst);
    if (sum_tests) { /* the next's chunk sums out, the base's given: the same bytes */
        uint32_t chunks = ferry_delta_chunk_count(n, chunk);
        uint64_t *bsums = xmalloc((size_t)chunks * 8 + 8), *nsums = xmalloc((size_t)chunks * 8 + 8);
        for (uint32_t i = 0; i < chunks; i++) {
            uint64_t at = (uint64_t)i * chunk, m = n - at < chunk ? n - at : chunk;
            bsums[i] = XXH3_64bits(base + at * w, (size_t)m * w);
        }
        ferry_delta_params_t q = *p;
        q.field_mask |= FERRY_DELTA_PARAM_BASE_CHUNK_SUMS | FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS;
        q.base_chunk_sums = bsums;
        q.next_chunk_sums = nsums;
        uint8_t *again = xmalloc(len);
        size_t l2 = 0;
        if (ferry_delta_encode(codec, &q, base, next, n, again, len, &l2) != FERRY_OK || l2 != len ||
            memcmp(again, d, len) != 0)
            FAIL("encoding with the base's chunk sums given gave other bytes");
        for (uint32_t i = 0; i < chunks; i++) {
            uint64_t at = (uint64_t)i * chunk, m = n - at < chunk ? n - at : chunk;
            if (nsums[i] != XXH3_64bits(next + at * w, (size_t)m * w)) FAIL("next_chunk_sums is not the chunks' xxh3");
        }
        free(again), free(bsums), free(nsums);
    }
    if (cap_tests) {
        uint8_t *again = xmalloc(len);
        size_t l2 = 0;
        if (ferry_delta_encode(codec, p, base, next, n, again, len, &l2) != FERRY_OK || l2 != len ||
            memcmp(again, d, len) != 0)
            FAIL("encoding into exactly the delta's length gave other bytes");
        free(again);
        uint8_t *small = xmalloc(len - 1); /* len >= the frame header */
        ferry_status_t st = ferry_delta_encode(codec, p, base, next, n, small, len - 1, &l2);
        if (st != FERRY_ERR_LIMIT) FAIL("encoding into one byte less than needed was not FERRY_ERR_LIMIT");
        if (!ferry_delta_codec_detail(codec)[0]) FAIL("a refused encode left no detail");
        free(small);
        /* chunk_encode gives chunk_get's records; assemble the same delta */
        uint32_t chunks = (uint32_t)((n + chunk - 1) / chunk);
        const void **recs = xmalloc((size_t)chunks * sizeof *recs);
        size_t *lens = xmalloc((size_t)chunks * sizeof *lens);
        for (uint32_t i = 0; i < chunks; i++) {
            uint64_t at = (uint64_t)i * chunk;
            uint32_t m = (uint32_t)(n - at < chunk ? n - at : chunk);
            size_t cb = ferry_delta_chunk_bound(p->dtype, m);
            uint8_t *rec = xmalloc(cb);
            size_t rl = 0;
            uint64_t bs = 0, ns = 0;
            uint32_t mc = (p->field_mask & FERRY_DELTA_PARAM_MAX_CLASSES) ? p->max_classes : 0;
            uint32_t flags = (p->field_mask & FERRY_DELTA_PARAM_FORMAT) && p->format == 2 ? FERRY_DELTA_CHUNK_FORMAT2 : 0;
            if (ferry_delta_chunk_encode(codec, p->dtype, mc, flags, base + at * w, next + at * w, m, rec, cb, &rl,
                                         &bs, &ns) != FERRY_OK)
                FAIL("chunk_encode failed");
            if (bs != XXH3_64bits(base + at * w, (size_t)m * w) || ns != XXH3_64bits(next + at * w, (size_t)m * w))
                FAIL("chunk_encode's sums are not the chunks' xxh3");
            const void *got;
            size_t gl;
            if (ferry_delta_chunk_get(codec, d, len, i, &got, &gl) != FERRY_OK) FAIL("chunk_get failed");
            if (gl != rl || memcmp(got, rec, rl) != 0) FAIL("chunk_encode and encode give other records");
            recs[i] = rec;
            lens[i] = rl;
        }
        uint8_t *as = xmalloc(len);
        size_t al = 0;
        if (ferry_delta_assemble(codec, p, n, recs, lens, as, len, &al) != FERRY_OK || al != len ||
            memcmp(as, d, len) != 0)
            FAIL("assemble gave another delta than encode");
        free(as);
        for (uint32_t i = 0; i < chunks; i++) free((void *)recs[i]);
        free(recs);
        free(lens);
    }
    *len_out = len;
    return d;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    input_t in = {data, size};
    uint32_t b0 = take8(&in), b1 = take8(&in), b2 = take8(&in);
    uint32_t en = take8(&in);
    en |= take8(&in) << 8;
    uint64_t seed = take8(&in);
    for (int i = 1; i < 4; i++) seed |= (uint64_t)take8(&in) << (8 * i);

    unsigned t = (b0 & 7) % 5, mode = b1 & 7;
    static const uint32_t chunk_choice[4] = {1024, 2048, 4096, 0};
    uint32_t chunk = chunk_choice[(b0 >> 3) & 3];
    ferry_dtype_t dt = dtypes[t];
    uint32_t w = delta_width(dt);
    uint32_t format = (seed >> 9) & 1 ? 2 : 1;
    uint64_t elems = en % ((format == 2 ? MAX_ELEMS2 : MAX_ELEMS) + 1);
    unsigned variant = b1 >> 6;
    cur.elems = elems;

    cur.mode = mode;
    cur.format = format;
    cur.dtype = dt;
    cur.size = size;
    cur.codec = NULL;

    ferry_delta_codec_t *codec;
    if (ferry_delta_codec_create(fuzz_ctx(), &codec) != FERRY_OK) FAIL("codec_create failed");
    cur.codec = codec;

    ferry_delta_params_t p = {.dtype = dt};
    if (chunk) {
        p.field_mask |= FERRY_DELTA_PARAM_CHUNK_ELEMS;
        p.chunk_elems = chunk;
    }
    p.field_mask |= FERRY_DELTA_PARAM_MAX_CLASSES;
    p.max_classes = ((b1 >> 3) & 7) + 1;
    if (format == 2) {
        p.field_mask |= FERRY_DELTA_PARAM_FORMAT;
        p.format = 2;
    }
    uint64_t bv = 0, nv = 0;
    if (b2 & 8) {
        p.field_mask |= FERRY_DELTA_PARAM_VERSIONS;
        bv = p.base_version = mix(seed) >> 1;
        nv = p.next_version = bv + 1;
    }

    uint8_t *delta = NULL, *base = NULL, *next = NULL;
    size_t len = 0;
    bool intact = false;
    if (mode <= 1) {
        /* the tail is the delta; the region takes its dtype and size where sane */
        len = in.n;
        delta = exact_copy(in.p, len);
        if (len >= DELTA_FRAME_HEADER) {
            if (in.p[6] < FERRY_DTYPE_COUNT && delta_width((ferry_dtype_t)in.p[6])) {
                dt = (ferry_dtype_t)in.p[6];
                w = delta_width(dt);
                for (t = 0; dtypes[t] != dt; t++) continue;
            }
            uint64_t he = get_u64(in.p + 8);
            cur.format = in.p[4];
            if (he <= (in.p[4] == 2 ? MAX_ELEMS2 : MAX_ELEMS)) elems = he;
        }
        cur.dtype = dt;
        cur.elems = elems;
        base = xmalloc((size_t)elems * w);
        make_base(t, b0 >> 5, seed, base, (uint32_t)elems);
        if (mode == 1) reseal(delta, len, true, base, elems, w);
    } else {
        base = xmalloc((size_t)elems * w);
        make_base(t, b0 >> 5, seed, base, (uint32_t)elems);
        next = xmalloc((size_t)elems * w);
        if (elems) memcpy(next, base, (size_t)elems * w);
        uint32_t nedits = take8(&in);
        for (uint32_t i = 0; i < nedits && in.n >= 4; i++) {
            edit(w, next, (uint32_t)elems, in.p, seed ^ i);
            in.p += 4;
            in.n -= 4;
        }
        delta = encode_valid(codec, &p, base, next, elems, (b2 & 32) != 0, (b2 & 16) != 0, &len);
        /* every kernel level this CPU runs writes the same bytes */
        delta_level_t own = codec->level;
        for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
            if (l == (int)own || !delta_codec_level(codec, (delta_level_t)l)) continue;
            size_t l2 = 0;
            uint8_t *again = xmalloc(len);
            if (ferry_delta_encode(codec, &p, base, next, elems, again, len, &l2) != FERRY_OK || l2 != len ||
                memcmp(again, delta, len) != 0)
                FAIL("kernel levels encoded different bytes");
            free(again);
        }
        delta_codec_level(codec, own);
        if (mode <= 3) {
            intact = true;
            /* inspect's info, field by field */
            ferry_delta_info_t info;
            if (ferry_delta_inspect(codec, delta, len, &info) != FERRY_OK) FAIL("inspect refused a valid delta");
            uint32_t ce = chunk ? chunk : FERRY_DELTA_CHUNK_DEFAULT;
            uint64_t changed = 0, bs, ns;
            uint32_t unchanged = 0;
            for (uint64_t at = 0; at < elems; at += ce) {
                uint64_t m = elems - at < ce ? elems - at : ce, c0 = changed;
                for (uint64_t i = at; i < at + m; i++) changed += elem_get(base, w, i) != elem_get(next, w, i);
                unchanged += changed == c0;
            }
            ferry_delta_region_sum(dt, base, elems, ce, &bs);
            ferry_delta_region_sum(dt, next, elems, ce, &ns);
            if (info.dtype != dt || info.elems != elems || info.chunk_elems != ce ||
                info.chunks != (elems + ce - 1) / ce || info.base_version != bv || info.next_version != nv ||
                info.format != format)
                FAIL("inspect's info does not describe the encoded region");
            if (info.base_sum != bs || info.next_sum != ns) FAIL("inspect's region sums are not base's and next's");
            if (info.changed != changed) FAIL("inspect's changed count is not the true count");
            if (info.chunks_unchanged != unchanged) FAIL("inspect's unchanged chunks are not the true count");
        } else {
            dbuf_t b = {NULL, 0, 0};
            dbuf_reserve(&b, len);
            memcpy(b.p, delta, len);
            b.len = len;
            while (in.n >= 5) {
                corrupt(&b, in.p);
                in.p += 5;
                in.n -= 5;
            }
            if (mode <= 6) reseal(b.p, b.len, mode == 6, base, elems, w);
            free(delta);
            len = b.len;
            delta = exact_copy(b.p, len);
            free(b.p);
        }
    }

    /* the region: base, a wrong base, another size, or next */
    apply_case_t c = {.dtype = dt, .w = w, .elems = elems, .next = next, .intact = intact, .right_base = true,
                      .right_size = true, .chunk_api = (b2 & 4) != 0, .commit = (seed >> 8) & 1};
    uint64_t dver = len >= DELTA_FRAME_HEADER ? get_u64(delta + 24) : 0;
    switch (b2 & 3) {
    case 1: c.base_version = dver; break;
    case 2: c.base_version = dver + 1 + (seed & 1); break;
    default: c.base_version = FERRY_DELTA_ANY_BASE; break;
    }
    uint8_t *region = base;
    if (variant == 1 && elems) { /* a wrong base */
        region = exact_copy(base, (size_t)elems * w);
        uint32_t pos = (uint32_t)(mix(seed ^ 77) % elems);
        uint32_t v = elem_get(region, w, pos);
        switch (b2 >> 6) {
        case 0: v ^= 1; break;
        case 1: v ^= 1u << (8 * w - 1); break;
        case 2: { /* one element already at next's value (a changed one if any) */
            for (uint64_t i = 0; next && i < elems; i++) {
                uint32_t j = (uint32_t)((pos + i) % elems);
                if (elem_get(base, w, j) != elem_get(next, w, j)) {
                    pos = j;
                    break;
                }
            }
            v = next ? elem_get(next, w, pos) : v ^ 2;
            if (v == elem_get(base, w, pos)) v ^= 2;
            break;
        }
        default: v = (uint32_t)mix(seed ^ 99) & width_mask(w); if (v == elem_get(base, w, pos)) v ^= 4; break;
        }
        elem_put(region, w, pos, v & width_mask(w));
        c.right_base = false;
    } else if (variant == 2) { /* one element more or fewer */
        c.elems = (seed & 2) && elems ? elems - 1 : elems + 1;
        region = xmalloc((size_t)c.elems * w);
        make_base(t, b0 >> 5, seed, region, (uint32_t)c.elems);
        if (elems && c.elems > elems) memcpy(region, base, (size_t)elems * w);
        c.right_base = false;
        c.next = NULL;
    } else if (variant == 3 && next) { /* next: applied twice */
        region = next;
        c.right_base = !elems || memcmp(base, next, (size_t)elems * w) == 0;
    }
    /* what the delta says, as the apply will find it */
    c.right_size = len >= DELTA_FRAME_HEADER && get_u64(delta + 8) == c.elems;
    c.version_ok = c.base_version == FERRY_DELTA_ANY_BASE || c.base_version == dver;

    check_delta(codec, delta, len, region, &c);

    if (region != base && region != next) free(region);
    free(base);
    free(next);
    free(delta);
    ferry_delta_codec_destroy(codec);
    return 0;
}
