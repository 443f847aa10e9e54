/* Encoding one chunk: find the changed elements, choose magnitude classes,
 * then per class one bit stream: Rice-coded gaps, sign bits, and the rare
 * changes of more than one ulp as a sparse stream of their own.
 * Falls back to the raw next contents when that is not larger. */
#include <math.h>

#include "codec/codec_internal.h"
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

/* Rice parameter near the optimum for geometric gaps of this mean; the
 * caller then tries it and its two neighbours on the real gaps. */
static int rice_guess(double mean) { return mean > 1 ? (int)floor(log2(mean * 0.69314718)) : 0; }

static uint64_t expg_len(uint64_t v, uint32_t k) {
    uint32_t len = 64u - (uint32_t)__builtin_clzll(v + (1ull << k));
    return 2ull * len - 1 - k;
}

/* Index of the first change at or after j that is more than one ulp. */
static size_t next_nonunit(const uint32_t *val, size_t m, size_t j) {
    while (j < m && val[j] == 0) j++;
    return j;
}

static bool scratch(ferry_delta_codec_t *c, size_t n) {
    return delta_grow(c, (void **)&c->pos, &c->pos_cap, n, 4) && delta_grow(c, (void **)&c->rank, &c->rank_cap, n, 4) &&
           delta_grow(c, (void **)&c->order, &c->order_cap, n, 4) && delta_grow(c, (void **)&c->cls, &c->cls_cap, n, 1) &&
           delta_grow(c, (void **)&c->val, &c->val_cap, n, 4) && delta_grow(c, (void **)&c->sign, &c->sign_cap, n, 1) &&
           delta_grow(c, (void **)&c->cval, &c->cval_cap, n, 4) && delta_grow(c, (void **)&c->csign, &c->csign_cap, n, 1);
}

/* Writes the sparse record into dst[0, room); returns its length, or 0 when
 * it does not fit. The changes are c->pos[0, m), as find_changes left them. */
DELTA_HOT static size_t encode_sparse(ferry_delta_codec_t *c, uint32_t w, uint32_t max_classes, const uint8_t *base,
                                      uint32_t elems, size_t m, uint8_t *dst, size_t room) {
    /* classes from the changed elements' magnitudes and a sample of all */
    double hist_all[256] = {0}, hist_chg[256] = {0};
    uint32_t shift = delta_bucket_shift(w), mm = mag_mask(w);
    uint32_t stride = elems >= (1u << 16) ? 64 : 1, cnt[4][256];
    memset(cnt, 0, sizeof cnt);
    /* four counters per bucket, so neighbouring samples of one bucket do not
       wait on each other's increments */
    uint32_t i4 = 0;
    for (uint32_t i = 0; i < elems; i += stride, i4++) cnt[i4 & 3][(elem_get(base, w, i) & mm) >> shift]++;
    for (uint32_t b = 0; b < 256; b++)
        hist_all[b] = (double)stride * (double)(cnt[0][b] + cnt[1][b] + cnt[2][b] + cnt[3][b]);
    memset(cnt, 0, sizeof cnt);
    for (size_t i = 0; i < m; i++) cnt[i & 3][c->cls[i]]++;
    for (uint32_t b = 0; b < 256; b++) hist_chg[b] = (double)(cnt[0][b] + cnt[1][b] + cnt[2][b] + cnt[3][b]);
    uint32_t lower[FERRY_DELTA_CLASSES_MAX];
    uint32_t K = delta_classes_choose(hist_all, hist_chg, max_classes, shift, lower);

    /* pass 2: each change's class and its rank within the class, a batch of
       blocks at a time: the batch's masks, each block's class counts before
       it, then the batch's changes (c->pos ends with a sentinel, so the loop
       exits once per batch, not once per block) */
    uint64_t count[FERRY_DELTA_CLASSES_MAX] = {0}, changed[FERRY_DELTA_CLASSES_MAX] = {0};
    size_t i = 0;
    uint64_t gebuf[DELTA_MASK_BATCH][FERRY_DELTA_CLASSES_MAX + 1]; /* per block: elements at or above each class */
    uint32_t before[DELTA_MASK_BATCH][FERRY_DELTA_CLASSES_MAX];    /* class elements in the chunk before the block */
    c->pos[m] = UINT32_MAX;
    for (uint32_t at = 0; at < elems; at += 64 * DELTA_MASK_BATCH) {
        uint32_t nel = elems - at < 64 * DELTA_MASK_BATCH ? elems - at : 64 * DELTA_MASK_BATCH;
        uint32_t nblk = (nel + 63) / 64;
        c->masks(base + (size_t)at * w, NULL, w, nel, lower + 1, K - 1, NULL, &gebuf[0][1], FERRY_DELTA_CLASSES_MAX + 1);
        for (uint32_t b = 0; b < nblk; b++) {
            uint64_t *ge = gebuf[b];
            ge[0] = delta_block_valid(nel, b);
            for (uint32_t j = K; j <= FERRY_DELTA_CLASSES_MAX; j++) ge[j] = 0;
            for (uint32_t k = 0; k < K; k++) {
                before[b][k] = (uint32_t)count[k];
                count[k] += (uint64_t)__builtin_popcountll(ge[k] & ~ge[k + 1]);
            }
        }
        for (; c->pos[i] < at + nel; i++) {
            uint32_t p = c->pos[i] - at, b = p / 64, bit = p % 64;
            const uint64_t *ge = gebuf[b];
            /* nested masks: the class is how many thresholds the element
               reaches; a plain sum (a vectorised one pays a horizontal add
               per change); written for up to 8 classes */
            _Static_assert(FERRY_DELTA_CLASSES_MAX == 8, "the sum below has one term per threshold");
            uint32_t k = (uint32_t)((ge[1] >> bit) & 1) + (uint32_t)((ge[2] >> bit) & 1) +
                         (uint32_t)((ge[3] >> bit) & 1) + (uint32_t)((ge[4] >> bit) & 1) +
                         (uint32_t)((ge[5] >> bit) & 1) + (uint32_t)((ge[6] >> bit) & 1) +
                         (uint32_t)((ge[7] >> bit) & 1);
            uint64_t cm = ge[k] & ~ge[k + 1];
            c->cls[i] = (uint8_t)k;
            c->rank[i] = before[b][k] + (uint32_t)__builtin_popcountll(cm & ((1ull << bit) - 1));
        }
    }
    {
        uint32_t cnt4[4][FERRY_DELTA_CLASSES_MAX];
        memset(cnt4, 0, sizeof cnt4);
        for (i = 0; i < m; i++) cnt4[i & 3][c->cls[i]]++; /* four counters: no chain through one */
        for (uint32_t k = 0; k < K; k++) changed[k] = cnt4[0][k] + cnt4[1][k] + cnt4[2][k] + cnt4[3][k];
    }
    /* the changes grouped by class, each group in position order: ranks in
       order[], value changes in cval[] and csign[] */
    size_t start[FERRY_DELTA_CLASSES_MAX + 1] = {0};
    for (uint32_t k = 0; k < K; k++) start[k + 1] = start[k] + changed[k];
    size_t fill[FERRY_DELTA_CLASSES_MAX];
    memcpy(fill, start, sizeof fill);
    for (i = 0; i < m; i++) {
        size_t j = fill[c->cls[i]]++;
        c->order[j] = c->rank[i];
        c->cval[j] = c->val[i];
        c->csign[j] = c->sign[i];
    }

    for (uint32_t k = 0; k < K; k++) /* ranks to gaps: changes of the class skipped since its previous change */
        for (size_t j = start[k + 1]; j-- > start[k] + 1;) c->order[j] -= c->order[j - 1] + 1;

    size_t off = CHUNK_HEADER + (size_t)K * CLASS_ENTRY;
    if (off >= room) return 0;
    for (uint32_t k = 0; k < K; k++) {
        uint8_t *entry = dst + CHUNK_HEADER + (size_t)k * CLASS_ENTRY;
        memset(entry, 0, CLASS_ENTRY);
        put_u32(entry, lower[k]);
        put_u32(entry + 4, (uint32_t)count[k]);
        put_u32(entry + 8, (uint32_t)changed[k]);
        if (!changed[k]) continue;
        size_t mk = changed[k];
        const uint32_t *gap = c->order + start[k], *val = c->cval + start[k];
        const uint8_t *sign = c->csign + start[k];
        /* code parameters, each from one pass: three Rice parameters around
           the geometric optimum for the gaps and for the runs between
           non-unit changes, five exp-Golomb orders for their magnitudes */
        size_t nu = 0;
        for (size_t j = 0; j < mk; j++) nu += val[j] != 0;
        int g0 = rice_guess((double)(count[k] - mk) / (double)mk), n0 = nu ? rice_guess((double)(mk - nu) / nu) : 0;
        if (g0 < 1) g0 = 1;
        if (n0 < 1) n0 = 1;
        uint64_t gap_bits[3] = {0}, nu_bits[3] = {0}, mag_bits[5] = {0};
        size_t prev_nu = 0;
        for (size_t j = 0; j < mk; j++) {
            uint64_t g = gap[j];
            for (int e = 0; e < 3; e++) gap_bits[e] += g >> (g0 - 1 + e);
            if (val[j]) {
                uint64_t r = j - prev_nu;
                prev_nu = j + 1;
                for (int e = 0; e < 3; e++) nu_bits[e] += r >> (n0 - 1 + e);
                for (uint32_t e = 0; e < 5; e++) mag_bits[e] += expg_len((uint64_t)val[j] - 1, e);
            }
        }
        uint32_t k_gap = 0, k_nu = 0, k_mag = 0;
        uint64_t best = UINT64_MAX, best_nu = UINT64_MAX;
        for (int e = 0; e < 3; e++) {
            uint64_t kk = (uint64_t)(g0 - 1 + e), bits = gap_bits[e] + mk * (1 + kk);
            if (kk <= 24 && bits < best) best = bits, k_gap = (uint32_t)kk;
            kk = (uint64_t)(n0 - 1 + e), bits = nu_bits[e] + nu * (1 + kk);
            if (kk <= 24 && bits < best_nu) best_nu = bits, k_nu = (uint32_t)kk;
        }
        for (uint32_t e = 1; e < 5; e++)
            if (mag_bits[e] < mag_bits[k_mag]) k_mag = e;

        bitw_t bw;
        bitw_init(&bw, dst + off, room - off);
        size_t next_nu = 0, nu_left = nu;
        if (nu_left) {
            next_nu = next_nonunit(val, mk, 0);
            bitw_rice(&bw, (uint32_t)next_nu, k_nu);
        }
        for (size_t j = 0; j < mk; j++) {
            bitw_rice(&bw, gap[j], k_gap);
            bitw_put(&bw, sign[j], 1);
            if (nu_left && j == next_nu) {
                bitw_expg(&bw, val[j] - 1, k_mag);
                if (--nu_left) {
                    size_t after = next_nonunit(val, mk, j + 1);
                    bitw_rice(&bw, (uint32_t)(after - j - 1), k_nu);
                    next_nu = after;
                }
            }
        }
        size_t len = bitw_finish(&bw);
        if (bw.overflow) return 0;
        off += len;
        put_u32(entry + 12, (uint32_t)nu);
        put_u32(entry + 16, (uint32_t)len);
        entry[20] = (uint8_t)k_gap;
        entry[21] = (uint8_t)k_nu;
        entry[22] = (uint8_t)k_mag;
    }
    write_header(dst, CHUNK_SPARSE, w, K, elems, (uint32_t)m, (uint32_t)(off - CHUNK_HEADER - K * CLASS_ENTRY), 0, 0);
    return off;
}

/* Pass 1: the changed elements, in position order, into c->pos, with their
 * value changes (c->val: |d| - 1, c->sign) and base magnitude buckets
 * (c->cls, until classes replace them), read while the block is in L1;
 * returns their count. */
DELTA_HOT static size_t find_changes(ferry_delta_codec_t *c, uint32_t w, const uint8_t *base, const uint8_t *next,
                                     uint32_t elems) {
    size_t m = 0;
    uint32_t shift = delta_bucket_shift(w), mm = mag_mask(w);
    uint64_t chb[DELTA_MASK_BATCH];
    for (uint32_t at = 0; at < elems; at += 64) {
        uint32_t blk = (at / 64) % DELTA_MASK_BATCH;
        if (blk == 0) { /* the next batch's masks, in one call (and still in L1 below) */
            uint32_t nel = elems - at < 64 * DELTA_MASK_BATCH ? elems - at : 64 * DELTA_MASK_BATCH;
            c->masks(base + (size_t)at * w, next + (size_t)at * w, w, nel, NULL, 0, chb, NULL, 0);
        }
        uint64_t ch = chb[blk];
        for (; ch; ch &= ch - 1) {
            uint32_t p = at + (uint32_t)__builtin_ctzll(ch);
            uint32_t b = elem_get(base, w, p);
            int64_t d = elem_ord(elem_get(next, w, p), w) - elem_ord(b, w);
            uint64_t a = d < 0 ? (uint64_t)-d : (uint64_t)d;
            c->pos[m] = p;
            c->val[m] = (uint32_t)(a - 1);
            c->sign[m] = d < 0;
            c->cls[m] = (uint8_t)((b & mm) >> shift);
            m++;
        }
    }
    return m;
}

ferry_status_t ferry_delta_chunk_encode(ferry_delta_codec_t *c, ferry_dtype_t dtype, uint32_t max_classes,
                                        const void *base_, const void *next_, uint32_t elems, void *dst_,
                                        size_t cap, size_t *len, uint64_t *base_sum_out, uint64_t *next_sum_out) {
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
    size_t raw_len = CHUNK_HEADER + (size_t)elems * w;
    if (cap < CHUNK_HEADER)
        return delta_fail(c, FERRY_ERR_LIMIT, "chunk encode: %zu bytes of room, at least %u needed", cap,
                          CHUNK_HEADER);
    if (!scratch(c, (size_t)elems + 1)) return delta_fail(c, FERRY_ERR_NO_MEMORY, "chunk encode: out of memory");
    uint64_t bs = XXH3_64bits(base, (size_t)elems * w), ns = XXH3_64bits(next, (size_t)elems * w);
    if (base_sum_out) *base_sum_out = bs;
    if (next_sum_out) *next_sum_out = ns;

    size_t m = find_changes(c, w, base, next, elems);
    if (m == 0) {
        write_header(dst, CHUNK_UNCHANGED, w, 0, elems, 0, 0, bs, ns);
        seal(dst, CHUNK_HEADER);
        *len = CHUNK_HEADER;
        return FERRY_OK;
    }
    /* sparse must be smaller than raw to be worth decoding */
    size_t room = cap < raw_len - 1 ? cap : raw_len - 1;
    size_t off = encode_sparse(c, w, max_classes, base, elems, m, dst, room);
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
