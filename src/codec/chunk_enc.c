/* Encoding one chunk: find the changed elements, choose magnitude classes,
 * then per class one bit stream: Rice-coded gaps, sign bits, and the rare
 * changes of more than one ulp as a sparse stream of their own.
 * Falls back to the raw next contents when that is not larger. */

#include "codec/codec_internal.h"
#include "codec/enc_rules.h"
#include "common/hash.h"

size_t ferry_delta_chunk_bound(ferry_dtype_t dtype, uint32_t elems) {
    uint32_t w = delta_width(dtype);
    if (!w || elems == 0 || elems > FERRY_DELTA_CHUNK_MAX) return 0;
    return CHUNK_HEADER + (size_t)elems * w; /* raw is the worst case */
}

static void write_header(uint8_t *rec, uint32_t mode, uint32_t width, uint32_t classes, uint32_t elems,
                         uint32_t changed, uint32_t payload_len, uint64_t base_sum, uint64_t next_sum) {
    memset(rec, 0, CHUNK_HEADER);
    rec[0] = (uint8_t)mode;
    rec[1] = (uint8_t)width;
    rec[2] = (uint8_t)classes;
    put_u32(rec + 4, elems);
    put_u32(rec + 8, changed);
    put_u32(rec + 12, payload_len);
    put_u64(rec + 16, base_sum);
    put_u64(rec + 24, next_sum);
}

static void seal(uint8_t *rec, size_t len) { put_u64(rec + 32, delta_record_sum(rec, len)); }

/* One entry per element of the chunk and a sentinel; a piece's offsets. */
static bool scratch(ferry_delta_codec_t *c, size_t elems) {
    size_t n = elems + 1;
    return delta_grow(c, (void **)&c->pos, &c->pos_cap, n, 4) && delta_grow(c, (void **)&c->order, &c->order_cap, n, 4) &&
           delta_grow(c, (void **)&c->cls, &c->cls_cap, n, 1) && delta_grow(c, (void **)&c->val, &c->val_cap, n, 4) &&
           delta_grow(c, (void **)&c->sign, &c->sign_cap, n, 1) && delta_grow(c, (void **)&c->cval, &c->cval_cap, n, 4) &&
           delta_grow(c, (void **)&c->csign, &c->csign_cap, n, 1) &&
           /* format 2: per class and sub-block counts, and changes per sub-block */
           delta_grow(c, (void **)&c->sub, &c->sub_cap,
                      (FERRY_DELTA_CLASSES_MAX + 1) * (size_t)delta_nsub((uint32_t)elems, DELTA_SUB_LOG2_MIN), 4) &&
           (!c->enc.scan_w2 || delta_grow(c, (void **)&c->off, &c->off_cap, 2048 + 32, 2));
}

/* Pass 1, 2 KiB of each buffer at a time while they are in L1: the
 * checksums (the base's only if hash_base), the changed elements in position
 * order (c->pos; value changes in c->val as |d| - 1 and c->sign; base
 * magnitude buckets in c->cls) and a sample of the base's buckets for
 * choosing classes (every element of a small chunk, every 64th of a large
 * one). One read of base and next from memory. Returns the changed count. */
DELTA_HOT_BODY size_t scan_chunk(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, const uint8_t *next,
                                 uint32_t elems, uint32_t stride, uint32_t sample[4][256], bool hash_base,
                                 uint64_t *bs, uint64_t *ns) {
    XXH3_state_t hb, hn;
    XXH3_64bits_reset(&hb);
    XXH3_64bits_reset(&hn);
    size_t m = 0;
    uint32_t shift = delta_bucket_shift(w), mm = mag_mask(w), i4 = 0;
    /* pieces of 2 KiB per buffer: the first pass over a piece brings it
       into L1, where the others find it (larger pieces measured slower) */
    const uint32_t piece = 2048 / w;
    uint64_t chb[2048 / 64];
    for (uint32_t at = 0; at < elems; at += piece) {
        uint32_t nel = elems - at < piece ? elems - at : piece;
        const uint8_t *bp = base + (size_t)at * w, *np = next + (size_t)at * w;
        /* two pieces ahead on their way from memory: the hardware
           prefetcher alone leaves the hash waiting (the vector kernel
           prefetches as it goes) */
        if (!(w == 2 && c->enc.scan_w2) && elems - at > 3 * piece)
            for (uint32_t o = 0; o < 2048; o += 64) {
                __builtin_prefetch(bp + 2 * 2048 + o);
                __builtin_prefetch(np + 2 * 2048 + o);
            }
        if (w == 2 && c->enc.scan_w2) {
            /* the kernel packs the offsets; the checksums run before they
               are read back (a narrow load waits for a wide store to reach
               the cache); then value changes and buckets in a loop without
               branches (the piece is in L1) */
            size_t k = c->enc.scan_w2(bp, np, nel, c->off);
            if (hash_base) XXH3_64bits_update(&hb, bp, (size_t)nel * w);
            XXH3_64bits_update(&hn, np, (size_t)nel * w);
            for (size_t i = 0; i < k; i++, m++) {
                uint32_t p = c->off[i], v = elem_get(bp, 2, p);
                int32_t d = (int32_t)(elem_ord(elem_get(np, 2, p), 2) - elem_ord(v, 2));
                c->pos[m] = at + p;
                c->val[m] = (uint32_t)(d < 0 ? -d : d) - 1;
                c->sign[m] = d < 0;
                c->cls[m] = (uint8_t)((v & 0x7FFFu) >> 7);
            }
        } else {
            if (hash_base) XXH3_64bits_update(&hb, bp, (size_t)nel * w);
            XXH3_64bits_update(&hn, np, (size_t)nel * w);
            c->masks(bp, np, w, nel, NULL, 0, chb, NULL, 0);
            for (uint32_t b = 0; 64 * b < nel; b++)
                for (uint64_t ch = chb[b]; ch; ch &= ch - 1) {
                    uint32_t p = 64 * b + (uint32_t)__builtin_ctzll(ch);
                    uint32_t v = elem_get(bp, w, p);
                    int64_t d = elem_ord(elem_get(np, w, p), w) - elem_ord(v, w);
                    uint64_t a = d < 0 ? (uint64_t)-d : (uint64_t)d;
                    c->pos[m] = at + p;
                    c->val[m] = (uint32_t)(a - 1);
                    c->sign[m] = d < 0;
                    c->cls[m] = (uint8_t)((v & mm) >> shift);
                    m++;
                }
        }
        /* four counters per bucket, so neighbouring samples of one bucket do
           not wait on each other's increments (pieces are whole strides) */
        if (w == 2) /* the element width known to the compiler: no switch per sample */
            for (uint32_t i = 0; i < nel; i += stride, i4++) sample[i4 & 3][(elem_get(bp, 2, i) & 0x7FFFu) >> 7]++;
        else
            for (uint32_t i = 0; i < nel; i += stride, i4++) sample[i4 & 3][(elem_get(bp, w, i) & mm) >> shift]++;
    }
    if (hash_base) *bs = XXH3_64bits_digest(&hb);
    *ns = XXH3_64bits_digest(&hn);
    return m;
}
DELTA_V3 static size_t scan_chunk_v3(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, const uint8_t *next,
                                      uint32_t elems, uint32_t stride, uint32_t sample[4][256], bool hash_base,
                                      uint64_t *bs, uint64_t *ns) {
    return scan_chunk(c, w, base, next, elems, stride, sample, hash_base, bs, ns);
}
static size_t scan_chunk_base(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, const uint8_t *next,
                              uint32_t elems, uint32_t stride, uint32_t sample[4][256], bool hash_base, uint64_t *bs,
                              uint64_t *ns) {
    return scan_chunk(c, w, base, next, elems, stride, sample, hash_base, bs, ns);
}

/* A batch's class rows: per class k and block b its elements cm[k][b], and
 * its elements in the chunk before the block, before[k][b]. */
typedef struct class_rows {
    uint64_t cm[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH];
    uint32_t before[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH];
} class_rows_t;

/* The rows of the batch of nel elements at base; cnt[k] in: class k's
 * elements before the batch, out: after it. */
DELTA_HOT_BODY void rows_fill(const ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, uint32_t nel,
                              size_t ahead, uint32_t K, const uint32_t *lower, const uint8_t *bucket_lower,
                              class_rows_t *r, uint64_t *cnt) {
    if (w == 2 && c->enc.class_rows_w2) {
        c->enc.class_rows_w2(base, nel, ahead, bucket_lower, K, r->cm, r->before, cnt);
        return;
    }
    uint64_t gebuf[DELTA_MASK_BATCH][FERRY_DELTA_CLASSES_MAX + 1]; /* per block: elements at or above each class */
    uint32_t nblk = (nel + 63) / 64;
    c->masks(base, NULL, w, nel, lower + 1, K - 1, NULL, &gebuf[0][1], FERRY_DELTA_CLASSES_MAX + 1);
    for (uint32_t b = 0; b < nblk; b++) {
        gebuf[b][0] = delta_block_valid(nel, b);
        gebuf[b][K] = 0;
    }
    /* a second loop: reading gebuf right after the kernel's stores would
       stall on store forwarding */
    for (uint32_t k = 0; k < K; k++) {
        uint64_t run = cnt[k];
        for (uint32_t b = 0; b < nblk; b++) {
            uint64_t x = gebuf[b][k] & ~gebuf[b][k + 1];
            r->cm[k][b] = x;
            r->before[k][b] = (uint32_t)run;
            run += (uint64_t)__builtin_popcountll(x);
        }
        cnt[k] = run;
    }
}

/* Pass 2 (the chunk's base is still in cache): each change's rank among
 * the elements of its class, and the changes grouped by class in position
 * order: gaps (elements of the class skipped since its previous change) in
 * c->order, value changes in c->cval and c->csign, class k's from start[k].
 * count[k] gets the class's elements. */
DELTA_HOT_BODY void rank_changes(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, uint32_t elems, size_t m,
                                 uint32_t K, const uint32_t *lower, const uint8_t *class_of, const size_t *start,
                                 uint64_t *count) {
    /* two sets of rows: a batch's are made while the one before places its
       changes, so those loads never wait on the rows' wide stores */
    class_rows_t rows[2];
    size_t fill[FERRY_DELTA_CLASSES_MAX];
    uint32_t last[FERRY_DELTA_CLASSES_MAX] = {0}; /* one past the rank of the class's previous change */
    uint64_t cnt[FERRY_DELTA_CLASSES_MAX] = {0};
    uint8_t bucket_lower[FERRY_DELTA_CLASSES_MAX];
    for (uint32_t k = 0; k < K; k++) bucket_lower[k] = (uint8_t)(lower[k] >> delta_bucket_shift(w));
    memcpy(fill, start, sizeof fill);
    size_t i = 0;
    c->pos[m] = UINT32_MAX; /* a sentinel: the loop over a batch's changes exits once per batch */
    const uint32_t batch = 64 * DELTA_MASK_BATCH;
    rows_fill(c, w, base, elems < batch ? elems : batch, (size_t)elems * w, K, lower, bucket_lower, &rows[0], cnt);
    for (uint32_t at = 0, x = 0; at < elems; at += batch, x ^= 1) {
        uint32_t nel = elems - at < batch ? elems - at : batch;
        if (elems - at > batch) {
            uint32_t nx = elems - at - batch;
            rows_fill(c, w, base + (size_t)(at + batch) * w, nx < batch ? nx : batch, (size_t)nx * w, K, lower,
                      bucket_lower, &rows[x ^ 1], cnt);
        }
        const class_rows_t *r = &rows[x];
        for (; c->pos[i] < at + nel; i++) {
            uint32_t p = c->pos[i] - at, b = p / 64, bit = p % 64, k = class_of[c->cls[i]];
            uint32_t rk = r->before[k][b] + (uint32_t)__builtin_popcountll(r->cm[k][b] & ((1ull << bit) - 1));
            size_t j = fill[k]++;
            c->order[j] = rk - last[k];
            last[k] = rk + 1;
            c->cval[j] = c->val[i];
            c->csign[j] = c->sign[i];
        }
    }
    memcpy(count, cnt, sizeof cnt);
}
DELTA_V3 static void rank_changes_v3(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, uint32_t elems,
                                     size_t m, uint32_t K, const uint32_t *lower, const uint8_t *class_of,
                                     const size_t *start, uint64_t *count) {
    rank_changes(c, w, base, elems, m, K, lower, class_of, start, count);
}
static void rank_changes_base(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, uint32_t elems, size_t m,
                              uint32_t K, const uint32_t *lower, const uint8_t *class_of, const size_t *start,
                              uint64_t *count) {
    rank_changes(c, w, base, elems, m, K, lower, class_of, start, count);
}

/* One class's stream: Rice-coded gaps, sign bits, and the changes of more
 * than one ulp with their own sparse positions; the parameters each from one
 * pass over the class. nuidx has room for mk + 1 entries. Returns the
 * stream's length, 0 when it does not fit. */
DELTA_HOT_BODY size_t write_class(uint8_t *entry, uint8_t *dst, size_t room, uint64_t count, size_t mk,
                                  const uint32_t *gap, const uint32_t *val, const uint8_t *sign, uint32_t *nuidx) {
    /* the non-unit changes' indices, without a branch (which would
       mispredict on each of them) */
    size_t nu = 0;
    for (size_t j = 0; j < mk; j++) {
        nuidx[nu] = (uint32_t)j;
        nu += val[j] != 0;
    }
    nuidx[nu] = (uint32_t)mk; /* after the last non-unit change: none */
    /* three Rice parameters around the geometric optimum for the gaps and
       for the runs between non-unit changes, five exp-Golomb orders for
       their magnitudes */
    int g0 = er_rice_guess(count - mk, mk), n0 = nu ? er_rice_guess(mk - nu, nu) : 0;
    if (g0 < 1) g0 = 1;
    if (n0 < 1) n0 = 1;
    uint64_t gap_bits[3] = {0}, nu_bits[3] = {0}, mag_bits[5] = {0};
    for (size_t j = 0; j < mk; j++) { /* no branch: vectorizes */
        uint64_t g = gap[j];
        gap_bits[0] += g >> (g0 - 1);
        gap_bits[1] += g >> g0;
        gap_bits[2] += g >> (g0 + 1);
    }
    size_t prev_nu = 0;
    for (size_t x = 0; x < nu; x++) {
        size_t j = nuidx[x];
        uint64_t r = j - prev_nu;
        prev_nu = j + 1;
        for (int e = 0; e < 3; e++) nu_bits[e] += r >> (n0 - 1 + e);
        for (uint32_t e = 0; e < 5; e++) mag_bits[e] += er_expg_len((uint64_t)val[j] - 1, e);
    }
    uint32_t k_gap, k_nu, k_mag;
    er_choose_params(gap_bits, nu_bits, mag_bits, mk, nu, g0, n0, &k_gap, &k_nu, &k_mag);

    bitw_t bw;
    bitw_init(&bw, dst, room);
    size_t next_nu = mk, nu_left = nu;
    if (nu_left) {
        next_nu = nuidx[0];
        bitw_rice(&bw, (uint32_t)next_nu, k_nu);
    }
    const uint32_t low = (1u << k_gap) - 1;
    for (size_t j = 0; j < mk;) {
        /* every change as one code when it fits 56 bits: its gap and sign,
           and for a non-unit change its magnitude and the run to the next
           non-unit one; the general writer otherwise */
        if (bitw_room8(&bw)) bitw_flush8(&bw);
        for (; j < mk; j++) {
            uint32_t q = gap[j] >> k_gap;
            if (q > 30 || !bitw_room8(&bw)) break;
            uint64_t code = (1ull << q) | (uint64_t)(gap[j] & low) << (q + 1) | (uint64_t)sign[j] << (q + 1 + k_gap);
            uint32_t len = q + 2 + k_gap;
            if (j == next_nu) {
                uint64_t x = (uint64_t)val[j] - 1 + (1ull << k_mag); /* ExpGolomb(|d| - 2, k_mag) */
                uint32_t bits = 64u - (uint32_t)__builtin_clzll(x), extra = bits - 1 - k_mag;
                uint64_t ecode = (1ull << extra) | (x & ((1ull << (bits - 1)) - 1)) << (extra + 1);
                uint32_t elen = extra + bits, rlen = 0;
                size_t after = mk;
                uint64_t rcode = 0;
                if (nu_left > 1) {
                    after = nuidx[nu - nu_left + 1];
                    uint32_t run = (uint32_t)(after - j - 1), q2 = run >> k_nu;
                    if (q2 > 30) break;
                    rcode = (1ull << q2) | (uint64_t)(run & ((1u << k_nu) - 1)) << (q2 + 1);
                    rlen = q2 + 1 + k_nu;
                }
                if (len + elen + rlen > 56) break;
                code |= ecode << len | rcode << (len + elen);
                len += elen + rlen;
                nu_left--;
                next_nu = after;
            }
            bitw_put56(&bw, code, len);
        }
        if (j >= mk) break;
        bitw_rice(&bw, gap[j], k_gap);
        bitw_put(&bw, sign[j], 1);
        if (j == next_nu) {
            bitw_expg(&bw, val[j] - 1, k_mag);
            if (--nu_left) {
                size_t after = nuidx[nu - nu_left];
                bitw_rice(&bw, (uint32_t)(after - j - 1), k_nu);
                next_nu = after;
            } else {
                next_nu = mk;
            }
        }
        j++;
    }
    size_t len = bitw_finish(&bw);
    if (bw.overflow) return 0;
    put_u32(entry + 12, (uint32_t)nu);
    put_u32(entry + 16, (uint32_t)len);
    entry[20] = (uint8_t)k_gap;
    entry[21] = (uint8_t)k_nu;
    entry[22] = (uint8_t)k_mag;
    return len;
}
DELTA_V3 static size_t write_class_v3(uint8_t *entry, uint8_t *dst, size_t room, uint64_t count, size_t mk,
                                      const uint32_t *gap, const uint32_t *val, const uint8_t *sign,
                                      uint32_t *nuidx) {
    return write_class(entry, dst, room, count, mk, gap, val, sign, nuidx);
}
static size_t write_class_base(uint8_t *entry, uint8_t *dst, size_t room, uint64_t count, size_t mk,
                               const uint32_t *gap, const uint32_t *val, const uint8_t *sign, uint32_t *nuidx) {
    return write_class(entry, dst, room, count, mk, gap, val, sign, nuidx);
}

/* Format 2's class stream (docs/delta-format.md): the class's changes cut
 * at sub-blocks, each sub-stream restarting the codes with ranks local to
 * its sub-block, then the length table. gap: the class's format 1 gaps in
 * class order, rewritten here (the first of each sub-block becomes its
 * local rank); sub: the class's elements per sub-block (nsub of them);
 * mcnt: scratch for nsub entries. The parameters follow write_class's rule
 * on the gaps and non-unit runs as format 2 writes them. The general bit
 * writer only: format 2 is for a GPU to read, its CPU encoder need not be
 * the fastest. Returns the stream's length, 0 when it does not fit. */
static size_t write_class2(uint8_t *entry, uint8_t *dst, size_t room, uint64_t count, size_t mk, uint32_t *gap,
                           const uint32_t *val, const uint8_t *sign, uint32_t *nuidx, uint32_t nsub,
                           const uint32_t *sub, uint32_t *mcnt) {
    /* each change's sub-block from its rank in the class; local first gaps */
    memset(mcnt, 0, sizeof *mcnt * nsub);
    uint64_t rank = 0, before = 0;
    for (size_t j = 0, b = 0; j < mk; j++) {
        rank = j ? rank + gap[j] + 1 : gap[j];
        while (rank >= before + sub[b]) before += sub[b++]; /* rank < count: b stays below nsub */
        if (mcnt[b]++ == 0) gap[j] = (uint32_t)(rank - before);
    }
    size_t nu = 0;
    for (size_t j = 0; j < mk; j++) {
        nuidx[nu] = (uint32_t)j;
        nu += val[j] != 0;
    }
    nuidx[nu] = (uint32_t)mk;
    /* the non-unit runs as written: per sub-stream with changes, the first
       non-unit index (or m), then after each non-unit change the run to the
       next one (or to m) */
    int g0 = er_rice_guess(count - mk, mk);
    if (g0 < 1) g0 = 1;
    uint64_t gap_bits[3] = {0}, nu_bits[3] = {0}, mag_bits[5] = {0}, runs = 0;
    for (size_t j = 0; j < mk; j++) {
        uint64_t g = gap[j];
        gap_bits[0] += g >> (g0 - 1);
        gap_bits[1] += g >> g0;
        gap_bits[2] += g >> (g0 + 1);
    }
    int n0 = 1;
    if (nu) {
        for (uint32_t b = 0; b < nsub; b++) runs += mcnt[b] != 0;
        runs += nu;
        n0 = er_rice_guess(mk - nu, runs);
        if (n0 < 1) n0 = 1;
        size_t x = 0, j0 = 0;
        for (uint32_t b = 0; b < nsub; j0 += mcnt[b], b++) {
            if (!mcnt[b]) continue;
            size_t end = j0 + mcnt[b], from = j0;
            for (;; x++) {
                size_t at = nuidx[x] < end ? nuidx[x] : end;
                uint64_t r = at - from;
                for (int e = 0; e < 3; e++) nu_bits[e] += r >> (n0 - 1 + e);
                if (at == end) break;
                from = at + 1;
            }
        }
        for (size_t x2 = 0; x2 < nu; x2++)
            for (uint32_t e = 0; e < 5; e++) mag_bits[e] += er_expg_len((uint64_t)val[nuidx[x2]] - 1, e);
    }
    uint32_t k_gap, k_nu, k_mag;
    er_choose_params(gap_bits, nu_bits, mag_bits, mk, runs, g0, n0, &k_gap, &k_nu, &k_mag);

    /* the sub-streams; each one's length in bits replaces its count */
    bitw_t bw;
    bitw_init(&bw, dst, room);
    size_t x = 0, j0 = 0;
    uint32_t longest = 0;
    for (uint32_t b = 0; b < nsub; b++) {
        size_t m = mcnt[b], end = j0 + m;
        uint64_t start = (uint64_t)(bw.p - bw.start) * 8 + bw.n;
        if (m) {
            if (nu) bitw_rice(&bw, (uint32_t)((nuidx[x] < end ? nuidx[x] : end) - j0), k_nu);
            for (size_t j = j0; j < end; j++) {
                bitw_rice(&bw, gap[j], k_gap);
                bitw_put(&bw, sign[j], 1);
                if (j == nuidx[x]) {
                    bitw_expg(&bw, val[j] - 1, k_mag);
                    x++;
                    bitw_rice(&bw, (uint32_t)((nuidx[x] < end ? nuidx[x] : end) - j - 1), k_nu);
                }
            }
        }
        if (bw.overflow) return 0;
        uint64_t len = (uint64_t)(bw.p - bw.start) * 8 + bw.n - start; /* < 2^32: under raw's size */
        mcnt[b] = (uint32_t)len;
        longest |= (uint32_t)len;
        j0 = end;
    }
    size_t first = bitw_finish(&bw);
    if (bw.overflow) return 0;
    uint32_t W = longest ? 32u - (uint32_t)__builtin_clz(longest) : 0;
    bitw_t tw;
    bitw_init(&tw, dst + first, room - first);
    for (uint32_t b = 0; b < nsub; b++) bitw_put(&tw, mcnt[b], W);
    size_t table = bitw_finish(&tw);
    if (tw.overflow) return 0;
    put_u32(entry + 12, (uint32_t)nu);
    put_u32(entry + 16, (uint32_t)(first + table));
    entry[20] = (uint8_t)k_gap;
    entry[21] = (uint8_t)k_nu;
    entry[22] = (uint8_t)k_mag;
    entry[23] = (uint8_t)W;
    return first + table;
}

/* Writes the sparse record into dst[0, room); returns its length, or 0 when
 * it does not fit. The changes are as scan_chunk left them; sample holds
 * the sampled base buckets (every stride-th element). */
static size_t encode_sparse(ferry_delta_codec_t *c, uint32_t w, uint32_t max_classes, const uint8_t *base,
                            uint32_t elems, size_t m, uint32_t stride, uint32_t sample[4][256], uint32_t sub_log2,
                            uint8_t *dst, size_t room) {
    /* classes from the changed elements' magnitudes and the sample of all */
    uint32_t hist_all[256], hist_chg[256]; /* sampled elements (every stride-th), changed ones */
    uint32_t cnt[4][256], shift = delta_bucket_shift(w);
    for (uint32_t b = 0; b < 256; b++)
        hist_all[b] = sample[0][b] + sample[1][b] + sample[2][b] + sample[3][b];
    memset(cnt, 0, sizeof cnt);
    for (size_t i = 0; i < m; i++) cnt[i & 3][c->cls[i]]++; /* four counters: no chain through one */
    for (uint32_t b = 0; b < 256; b++) hist_chg[b] = cnt[0][b] + cnt[1][b] + cnt[2][b] + cnt[3][b];
    uint32_t lower[FERRY_DELTA_CLASSES_MAX];
    uint32_t K = delta_classes_choose(hist_all, stride, hist_chg, max_classes, shift, lower);
    /* classes are runs of whole buckets: a bucket's class by table */
    uint8_t class_of[256];
    uint64_t changed[FERRY_DELTA_CLASSES_MAX] = {0}, count[FERRY_DELTA_CLASSES_MAX];
    for (uint32_t b = 0, k = 0; b < 256; b++) {
        while (k + 1 < K && (b << shift) >= lower[k + 1]) k++;
        class_of[b] = (uint8_t)k;
        changed[k] += hist_chg[b];
    }
    size_t start[FERRY_DELTA_CLASSES_MAX + 1] = {0};
    for (uint32_t k = 0; k < K; k++) start[k + 1] = start[k] + changed[k];
    (c->v3 ? rank_changes_v3 : rank_changes_base)(c, w, base, elems, m, K, lower, class_of, start, count);

    size_t off = CHUNK_HEADER + (size_t)K * CLASS_ENTRY;
    if (off >= room) return 0;
    /* format 2: each class's elements per sub-block (a read of the base) */
    uint32_t nsub = sub_log2 ? delta_nsub(elems, sub_log2) : 0;
    if (sub_log2) delta_count_subblocks(c, base, w, elems, K, lower, sub_log2, c->sub);
    for (uint32_t k = 0; k < K; k++) {
        uint8_t *entry = dst + CHUNK_HEADER + (size_t)k * CLASS_ENTRY;
        memset(entry, 0, CLASS_ENTRY);
        put_u32(entry, lower[k]);
        put_u32(entry + 4, (uint32_t)count[k]);
        put_u32(entry + 8, (uint32_t)changed[k]);
        if (!changed[k]) continue;
        size_t len = sub_log2 ? write_class2(entry, dst + off, room - off, count[k], changed[k], c->order + start[k],
                                             c->cval + start[k], c->csign + start[k], c->pos, nsub,
                                             c->sub + (size_t)k * nsub, c->sub + (size_t)K * nsub)
                              : (c->v3 ? write_class_v3 : write_class_base)(
                                    entry, dst + off, room - off, count[k], changed[k], c->order + start[k],
                                    c->cval + start[k], c->csign + start[k], c->pos /* free once ranked */);
        if (!len) return 0;
        off += len;
    }
    write_header(dst, CHUNK_SPARSE, w, K, elems, (uint32_t)m, (uint32_t)(off - CHUNK_HEADER - K * CLASS_ENTRY), 0, 0);
    dst[3] = (uint8_t)sub_log2;
    return off;
}

ferry_status_t ferry_delta_chunk_encode(ferry_delta_codec_t *c, ferry_dtype_t dtype, uint32_t max_classes,
                                        uint32_t flags, const void *base_, const void *next_, uint32_t elems,
                                        void *dst_, size_t cap, size_t *len, uint64_t *base_sum_out,
                                        uint64_t *next_sum_out) {
    if (!c) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    const uint8_t *base = base_, *next = next_;
    uint8_t *dst = dst_;
    uint32_t w = delta_width(dtype);
    if (!w)
        return delta_fail(c, FERRY_ERR_UNSUPPORTED, "delta of dtype %s: only bf16, f16, f32 and f8 are supported",
                          ferry_dtype_name(dtype));
    if (!base || !next || !dst || !len || elems == 0 || elems > FERRY_DELTA_CHUNK_MAX)
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "chunk encode: a NULL buffer or %u elements (1 to %u)",
                          elems, FERRY_DELTA_CHUNK_MAX);
    if (max_classes == 0) max_classes = FERRY_DELTA_CLASSES_MAX;
    if (max_classes > FERRY_DELTA_CLASSES_MAX)
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "max_classes %u (1 to %u allowed)", max_classes,
                          FERRY_DELTA_CLASSES_MAX);
    if ((flags & ~(FERRY_DELTA_BASE_SUM_GIVEN | FERRY_DELTA_CHUNK_FORMAT2)) ||
        ((flags & FERRY_DELTA_BASE_SUM_GIVEN) && !base_sum_out))
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT,
                          "chunk encode: flags %#x (only FERRY_DELTA_BASE_SUM_GIVEN, which needs base_sum, and "
                          "FERRY_DELTA_CHUNK_FORMAT2)",
                          flags);
    size_t raw_len = CHUNK_HEADER + (size_t)elems * w;
    if (cap < CHUNK_HEADER)
        return delta_fail(c, FERRY_ERR_LIMIT, "chunk encode: %zu bytes of room, at least %u needed", cap,
                          CHUNK_HEADER);
    if (!scratch(c, elems)) return delta_fail(c, FERRY_ERR_NO_MEMORY, "chunk encode: out of memory");
    uint32_t stride = elems >= (1u << 16) ? 64 : 1, sample[4][256];
    memset(sample, 0, sizeof sample);
    bool given = flags & FERRY_DELTA_BASE_SUM_GIVEN;
    uint64_t bs = given ? *base_sum_out : 0, ns;
    size_t m =
        (c->v3 ? scan_chunk_v3 : scan_chunk_base)(c, w, base, next, elems, stride, sample, !given, &bs, &ns);
    if (m == 0) bs = ns; /* the same bytes */
    if (base_sum_out) *base_sum_out = bs;
    if (next_sum_out) *next_sum_out = ns;
    if (m == 0) {
        write_header(dst, CHUNK_UNCHANGED, w, 0, elems, 0, 0, bs, ns);
        seal(dst, CHUNK_HEADER);
        *len = CHUNK_HEADER;
        return FERRY_OK;
    }
    /* sparse must be smaller than raw to be worth decoding */
    size_t room = cap < raw_len - 1 ? cap : raw_len - 1;
    uint32_t sub_log2 = (flags & FERRY_DELTA_CHUNK_FORMAT2) ? er_sub_log2(m, elems) : 0;
    size_t off = encode_sparse(c, w, max_classes, base, elems, m, stride, sample, sub_log2, dst, room);
    if (off) {
        put_u64(dst + 16, bs);
        put_u64(dst + 24, ns);
        seal(dst, off);
        *len = off;
        return FERRY_OK;
    }
    if (cap < raw_len)
        return delta_fail(c, FERRY_ERR_LIMIT, "chunk encode: %zu bytes of room, %zu needed", cap, raw_len);
    write_header(dst, CHUNK_RAW, w, 0, elems, (uint32_t)m, elems * w, bs, ns);
    memcpy(dst + CHUNK_HEADER, next, (size_t)elems * w);
    seal(dst, raw_len);
    *len = raw_len;
    return FERRY_OK;
}
