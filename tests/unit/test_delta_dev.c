/* The GPU apply's stream readers (codec/delta_dev.h: the bit reader, a
 * format 1 class, a format 2 length table and sub-stream), run on the CPU
 * as the kernels run them, with the write pass's rules done plainly here
 * (a change's rank among its class's elements, within its sub-block in
 * format 2; class counts; value ranges; the result's checksum). Against
 * ferry_delta_chunk_apply: the same result for every delta, and for every
 * resealed bit flip of a few records the same verdict (applied, or refused
 * as CORRUPT or MISMATCH). CI has no GPU: this is how the GPU's decoding
 * is checked there. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/codec_internal.h"
#define DK_TABLES_ONLY
#include "codec/delta_dev.h"
#include "common/hash.h"
#include "delta_rand.h"
#include "ferry/ctx.h"
#include "synth.h"

static ferry_delta_codec_t *codec;

/* What the GPU passes decide for one sparse chunk record applied to base
 * (elems elements of width w), in place: FERRY_OK with base the result, or
 * CORRUPT / MISMATCH with base as it was. The record's checksum is good. */
static ferry_status_t gpu_rules(const uint8_t *rec, size_t len, uint32_t w, uint8_t *base, uint32_t elems) {
    delta_chunk_t h;
    ferry_errbuf_t err;
    if (delta_chunk_parse(rec, len, w, false, &h, &err) != FERRY_OK) return FERRY_ERR_CORRUPT; /* the host's peek */
    if (h.elems != elems) return FERRY_ERR_MISMATCH;
    const uint32_t K = h.classes, S = h.sub_log2;
    uint8_t *orig = malloc((size_t)elems * w + 1);
    uint32_t *rank[FERRY_DELTA_CLASSES_MAX] = {0}, nsub = S ? delta_nsub(elems, S) : 1;
    int64_t *dl[FERRY_DELTA_CLASSES_MAX] = {0}, *lg[FERRY_DELTA_CLASSES_MAX] = {0}; /* lg: format 2's undo log */
    dk_sub_t *subs[FERRY_DELTA_CLASSES_MAX] = {0};
    CHECK(orig);
    memcpy(orig, base, (size_t)elems * w);
    bool decoded = true;
    const uint8_t *p = h.payload;
    for (uint32_t k = 0; k < K; k++) {
        const delta_class_t *q = &h.cls[k];
        dk_class_t e = {.stream = (uint64_t)(uintptr_t)p, .change0 = 0, .lower = q->lower, .count = q->count,
                        .changed = q->changed, .nonunit = q->nonunit, .len = q->len, .k_gap = q->k_gap,
                        .k_nu = q->k_nu, .k_mag = q->k_mag, .len_bits = q->len_bits,
                        .nsub = S && q->changed ? nsub : 0};
        p += q->len;
        /* the slots delta_cuda.c reserves */
        uint64_t slots = q->changed;
        if (e.nsub) {
            uint64_t table = delta_table_bytes(nsub, q->len_bits);
            slots = (table > q->len ? 0 : (q->len - table) * 8 / (2 + q->k_gap)) + 3 * (uint64_t)nsub;
        }
        /* 16-aligned (malloc's alignment here), room for slots rounded up
           to 4: decode_class writes 16 bytes at a time */
        rank[k] = calloc(slots + 4, sizeof *rank[k]);
        dl[k] = calloc(slots + 4, sizeof *dl[k]);
        lg[k] = calloc(slots + 4, sizeof *lg[k]);
        subs[k] = calloc(nsub, sizeof *subs[k]);
        CHECK(rank[k] && dl[k] && lg[k] && subs[k] && (uintptr_t)rank[k] % 16 == 0 && (uintptr_t)dl[k] % 16 == 0);
        if (!e.nsub) {
            if (!S) decoded &= decode_class(&e, rank[k], dl[k]);
            continue;
        }
        uint64_t slot_end, class_end;
        if (!dk_table(&e, k, true, subs[k], &slot_end, &class_end)) {
            decoded = false;
            continue;
        }
        CHECK(slot_end <= class_end && class_end == slots); /* the host's reservation holds every sub-stream's */
        uint32_t sum = 0, nu_sum = 0;
        for (uint32_t b = 0; b < nsub; b++) {
            uint32_t nu = 0;
            const uint64_t at = subs[k][b].slot;
            if (!decode_sub(&e, (const uint8_t *)(uintptr_t)e.stream, &subs[k][b], 1u << S, dl[k] + at, &nu)) {
                decoded = false;
                break;
            }
            for (uint32_t i = 0; i < subs[k][b].count; i++) { /* the packed entries, as the write pass reads them */
                rank[k][at + i] = dk_pack_rank(dl[k][at + i]);
                dl[k][at + i] = dk_pack_delta(dl[k][at + i]);
            }
            CHECK(subs[k][b].slot + subs[k][b].count <= slot_end);
            /* 16-aligned, and the next one's past this one's stores (decode_sub) */
            CHECK(subs[k][b].slot % 4 == 0 &&
                  (b + 1 == nsub || subs[k][b].slot + ((subs[k][b].count + 3) & ~3u) <= subs[k][b + 1].slot));
            sum += subs[k][b].count;
            nu_sum += nu;
        }
        decoded &= sum == q->changed && nu_sum == q->nonunit; /* dk_place's check of the sums */
    }
    ferry_status_t st = FERRY_OK;
    if (!decoded) {
        st = FERRY_ERR_CORRUPT;
        goto blame;
    }
    /* the write pass: each element's class and rank (local to its sub-block
       in format 2); a change is written where its rank is met */
    uint64_t seen[FERRY_DELTA_CLASSES_MAX] = {0}, before[FERRY_DELTA_CLASSES_MAX] = {0};
    uint32_t ci[FERRY_DELTA_CLASSES_MAX] = {0}, placed[FERRY_DELTA_CLASSES_MAX] = {0}, cend[FERRY_DELTA_CLASSES_MAX];
    const uint32_t *rk[FERRY_DELTA_CLASSES_MAX];
    const int64_t *dd[FERRY_DELTA_CLASSES_MAX];
    const uint32_t shift = delta_bucket_shift(w);
    for (uint32_t i = 0; i < elems; i++) {
        if (i == 0 || (S && (i & ((1u << S) - 1)) == 0))
            for (uint32_t k = 0; k < K; k++) { /* a new run of ranks */
                if (i) placed[k] += ci[k];
                const dk_sub_t *sb = S && h.cls[k].changed ? &subs[k][i >> S] : NULL;
                rk[k] = rank[k] + (sb ? sb->slot : 0);
                dd[k] = dl[k] + (sb ? sb->slot : 0);
                cend[k] = sb ? sb->count : S ? 0 : h.cls[k].changed;
                ci[k] = 0;
                before[k] = 0;
            }
        uint32_t v = elem_get(base, w, i), b = (v & mag_mask(w)) >> shift, k = 0;
        for (uint32_t j = 1; j < K; j++) k += b >= h.cls[j].lower >> shift;
        if (ci[k] < cend[k] && rk[k][ci[k]] == before[k]) {
            uint32_t nv;
            if (!elem_unord(elem_ord(v, w) + dd[k][ci[k]], w, &nv)) {
                st = FERRY_ERR_CORRUPT;
                goto blame;
            }
            elem_put(base, w, i, nv);
            if (S) /* the write pass's log: the element's place in its sub-block, packed with the change */
                lg[k][(rk[k] - rank[k]) + ci[k]] = dk_pack(i & ((1u << S) - 1), dd[k][ci[k]]);
            ci[k]++;
        }
        before[k]++;
        seen[k]++;
    }
    for (uint32_t k = 0; k < K && st == FERRY_OK; k++) {
        if (seen[k] != h.cls[k].count) st = FERRY_ERR_MISMATCH;
        else if (placed[k] + ci[k] != h.cls[k].changed) st = FERRY_ERR_CORRUPT;
    }
    if (st == FERRY_OK && XXH3_64bits(base, (size_t)elems * w) != h.next_sum) st = FERRY_ERR_CORRUPT;
    if (st == FERRY_OK && S) { /* dk_undo's walk of the log takes the result back to the base */
        uint8_t *back = malloc((size_t)elems * w + 1);
        CHECK(back);
        memcpy(back, base, (size_t)elems * w);
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t x = 0; h.cls[k].changed && x < nsub; x++)
                for (uint32_t i = 0; i < subs[k][x].count; i++) {
                    const int64_t e = lg[k][subs[k][x].slot + i], d = dk_pack_delta(e);
                    const uint32_t at = (x << S) + dk_pack_rank(e);
                    uint32_t v;
                    CHECK(d != 0 && elem_unord(elem_ord(elem_get(back, w, at), w) - d, w, &v));
                    elem_put(back, w, at, v);
                }
        CHECK(memcmp(back, orig, (size_t)elems * w) == 0);
        free(back);
    }
blame: /* restored; a corrupt verdict on a region that is not the base is a mismatch */
    if (st != FERRY_OK) {
        memcpy(base, orig, (size_t)elems * w);
        if (st == FERRY_ERR_CORRUPT && XXH3_64bits(base, (size_t)elems * w) != h.base_sum) st = FERRY_ERR_MISMATCH;
    }
    for (uint32_t k = 0; k < K; k++) free(rank[k]), free(dl[k]), free(lg[k]), free(subs[k]);
    free(orig);
    return st;
}

/* Every chunk of a delta: the GPU rules and the CPU apply agree. */
static void check_delta(const uint8_t *d, size_t len, uint32_t w, const uint8_t *base, const uint8_t *next,
                        uint64_t n, const char *what) {
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_peek(codec, d, len, &info), ferry_delta_codec_detail(codec));
    uint8_t *region = malloc(n * w + 1);
    CHECK(region);
    memcpy(region, base, n * w);
    size_t sparse = 0;
    for (uint32_t c = 0; c < info.chunks; c++) {
        const void *rec;
        size_t rl;
        CHECK_OK(ferry_delta_chunk_get(codec, d, len, c, &rec, &rl), ferry_delta_codec_detail(codec));
        if (((const uint8_t *)rec)[0] != CHUNK_SPARSE) continue; /* raw and unchanged chunks: no streams */
        uint32_t elems = get_u32((const uint8_t *)rec + 4);
        CHECK_EQ_INT(gpu_rules(rec, rl, w, region + (size_t)c * info.chunk_elems * w, elems), FERRY_OK);
        sparse++;
    }
    for (uint32_t c = 0; c < info.chunks; c++) { /* the other chunks as the delta has them */
        uint64_t at = (uint64_t)c * info.chunk_elems, e = n - at < info.chunk_elems ? n - at : info.chunk_elems;
        const void *rec;
        size_t rl;
        CHECK_OK(ferry_delta_chunk_get(codec, d, len, c, &rec, &rl), ferry_delta_codec_detail(codec));
        if (((const uint8_t *)rec)[0] != CHUNK_SPARSE) memcpy(region + at * w, next + at * w, e * w);
    }
    CHECK(memcmp(region, next, n * w) == 0);
    printf("%s, format %u: %zu sparse chunks decoded by the GPU's readers as the CPU applies them\n", what,
           info.format, sparse);
    free(region);
}

/* ---- the fast readers against the general one ----
 * decode_class and decode_sub read most changes straight from the window
 * and fall back to the general reader for the rest. Here the general
 * reader alone (br_rice, br_bits, br_expg: no window fast path) decodes the
 * same streams, and both must agree: the verdict always, the changes when
 * good. The streams are written by the format's rules from random changes
 * (long gaps and magnitudes included, so that the fallbacks run), then
 * some have a bit flipped or are cut short. A format 2 sub-stream is also
 * decoded from a copy of only the bytes dk_sub_span names (garbage around
 * them), as the GPU decodes it from shared memory: the same again. */

static bool ref_class(const dk_class_t *e, uint32_t *rank, int64_t *delta) {
    dbits_t r = br_open((const uint8_t *)e->stream, (const uint8_t *)e->stream + e->len);
    uint32_t nu_left = e->nonunit, nu_next = nu_left ? br_rice(&r, e->k_nu, e->changed) : 0;
    uint64_t target = e->changed ? br_rice(&r, e->k_gap, e->count) : UINT64_MAX;
    bool past = false;
    for (uint32_t j = 0; j < e->changed && !r.overrun; j++) {
        past |= target >= e->count;
        rank[j] = (uint32_t)target;
        const uint32_t neg = br_bits(&r, 1);
        uint64_t a = 1;
        if (nu_left && j == nu_next) {
            a = br_expg(&r, e->k_mag) + 2;
            if (--nu_left) {
                nu_next += br_rice(&r, e->k_nu, e->changed) + 1;
                if (nu_next >= e->changed) r.overrun = true;
            }
        }
        target = j + 1 == e->changed ? UINT64_MAX : target + (uint64_t)br_rice(&r, e->k_gap, e->count) + 1;
        delta[j] = neg ? -(int64_t)a : (int64_t)a;
    }
    const uint64_t tell = (uint64_t)(r.p - r.start) * 8 + r.pad - r.n;
    return !past && !r.overrun && nu_left == 0 && tell + 7 >= (uint64_t)e->len * 8;
}

static bool ref_sub(const dk_class_t *e, dk_sub_t *sb, uint32_t limit, uint32_t *rank, int64_t *delta,
                    uint32_t *nonunit_out) {
    const uint8_t *st = (const uint8_t *)e->stream, *p = st + sb->bit / 8;
    dbits_t r = br_open(p, st + e->len);
    const uint32_t cap = sb->bits / (2 + e->k_gap);
    br_skip((br_refill(&r), &r), (uint32_t)(sb->bit % 8));
    const uint64_t end = sb->bit % 8 + (uint64_t)sb->bits;
    uint32_t m = 0, nu = 0, nu_next = 0;
    uint64_t next_rank = 0;
    if (sb->bits && e->nonunit) nu_next = br_rice(&r, e->k_nu, limit);
    while (!r.overrun && (uint64_t)(r.p - r.start) * 8 + r.pad - r.n < end) {
        if (m >= cap) return false;
        const uint64_t rk = next_rank + br_rice(&r, e->k_gap, limit);
        const uint32_t neg = br_bits(&r, 1);
        uint64_t a = 1;
        if (e->nonunit && m == nu_next) {
            a = br_expg(&r, e->k_mag) + 2;
            nu_next = m + 1 + br_rice(&r, e->k_nu, limit);
            nu++;
        }
        if (rk >= limit) return false;
        rank[m] = (uint32_t)rk;
        delta[m] = neg ? -(int64_t)a : (int64_t)a;
        next_rank = rk + 1;
        m++;
    }
    const uint64_t tell = (uint64_t)(r.p - r.start) * 8 + r.pad - r.n;
    sb->count = m;
    *nonunit_out = nu;
    return !r.overrun && tell == end && (sb->bits == 0 || m > 0) && (!e->nonunit || m == 0 || nu_next == m);
}

typedef struct bw {
    uint8_t *buf;
    uint64_t bit, cap;
} bw_t;

static void bw_put(bw_t *w, uint64_t v, uint32_t n) {
    for (uint32_t i = 0; i < n && w->bit < w->cap * 8; i++, w->bit++)
        if (v >> i & 1) w->buf[w->bit / 8] |= (uint8_t)(1u << (w->bit % 8));
}
static void bw_rice(bw_t *w, uint64_t v, uint32_t k) {
    for (uint64_t q = v >> k; q; q--) bw_put(w, 0, 1);
    bw_put(w, 1, 1);
    bw_put(w, v, k);
}
static void bw_expg(bw_t *w, uint64_t v, uint32_t k) { /* ExpGolomb(v, k) */
    const uint64_t x = v + (1ull << k);
    uint32_t len = 0;
    while (len < 64 && x >> len) len++;
    bw_rice(w, len - 1 - k, 0);
    bw_put(w, x, len - 1);
}

static uint64_t rnd(uint64_t *s) {
    *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
    return *s;
}

/* A change list: m changes, ranks rising from 0 with gaps mostly short,
   some non-unit (magnitudes up to 2^33). */
static void random_changes(uint64_t *s, uint32_t m, uint32_t k_gap, uint32_t *rank, int64_t *d, bool *nu_out) {
    uint64_t at = 0;
    for (uint32_t j = 0; j < m; j++) {
        const uint32_t pick = (uint32_t)(rnd(s) % 100);
        uint64_t gap = pick < 3 ? rnd(s) % 5000 : rnd(s) % ((2ull << k_gap) + 1);
        at += gap + (j ? 1 : 0);
        rank[j] = (uint32_t)at;
        const uint32_t q = (uint32_t)(rnd(s) % 100);
        uint64_t a = q < 80 ? 1 : q < 97 ? 2 + rnd(s) % 20 : q < 99 ? 2 + rnd(s) % (1u << 20) : 2 + rnd(s) % (1ull << 33);
        d[j] = rnd(s) & 1 ? -(int64_t)a : (int64_t)a;
        nu_out[j] = a != 1;
    }
}

/* n packed entries (dk_pack) into ranks (r) and value changes (in place). */
static void unpack(int64_t *d, uint32_t n, uint32_t *r) {
    for (uint32_t i = 0; i < n; i++) r[i] = dk_pack_rank(d[i]), d[i] = dk_pack_delta(d[i]);
}

static void check_fast_readers(void) {
    enum { M = 300, BYTES = 16384, TRIALS = 30000 };
    static _Alignas(16) uint8_t buf[BYTES + 48], fenced[BYTES + 8];
    /* a sub-stream's slots: up to bits / 2; decode_class's, 16-aligned and
       rounded up to 4 (it writes 16 bytes at a time) */
    static _Alignas(16) uint32_t r1[BYTES * 4 + 4], r2[BYTES * 4 + 4], r3[BYTES * 4 + 4], rank[M];
    static _Alignas(16) int64_t d1[BYTES * 4 + 4], d2[BYTES * 4 + 4], d3[BYTES * 4 + 4], d[M];
    static bool isnu[M];
    uint64_t s = 0x9E3779B97F4A7C15ull;
    size_t good[2] = {0, 0}, bad[2] = {0, 0};
    for (uint32_t t = 0; t < TRIALS; t++) {
        const uint32_t fmt = 1 + (t & 1), m = 1 + (uint32_t)(rnd(&s) % M);
        const uint32_t k_gap = (uint32_t)(rnd(&s) % 100 < 90 ? rnd(&s) % 9 : rnd(&s) % 25);
        const uint32_t k_nu = (uint32_t)(rnd(&s) % 8), k_mag = (uint32_t)(rnd(&s) % 5);
        random_changes(&s, m, k_gap, rank, d, isnu);
        uint32_t nonunit = 0, first_nu = m;
        for (uint32_t j = m; j-- > 0;)
            if (isnu[j]) nonunit++, first_nu = j;
        memset(buf, 0, sizeof buf);
        /* a sub-stream starts mid-byte; a class stream at any byte of a
           16-byte unit (the GPU reads aligned words around it) */
        const uint32_t lead = (uint32_t)(rnd(&s) % 16) * (fmt == 2 ? 1 : 8);
        bw_t w = {buf, lead, BYTES};
        if (nonunit) bw_rice(&w, first_nu, k_nu);
        if (fmt == 1) bw_rice(&w, rank[0], k_gap);
        uint32_t nu_left = nonunit;
        for (uint32_t j = 0; j < m; j++) {
            if (fmt == 2) bw_rice(&w, j ? rank[j] - rank[j - 1] - 1 : rank[0], k_gap);
            bw_put(&w, d[j] < 0, 1);
            if (isnu[j]) {
                bw_expg(&w, (uint64_t)(d[j] < 0 ? -d[j] : d[j]) - 2, k_mag);
                uint32_t nx = j + 1;
                while (nx < m && !isnu[nx]) nx++;
                if (fmt == 2 || --nu_left) bw_rice(&w, nx - j - 1, k_nu);
            }
            if (fmt == 1 && j + 1 < m) bw_rice(&w, rank[j + 1] - rank[j] - 1, k_gap);
        }
        if (w.bit >= (uint64_t)BYTES * 8) continue; /* did not fit: drawn again */
        uint64_t bits = w.bit - lead;
        const uint32_t harm = (uint32_t)(rnd(&s) % 4); /* 0, 1: as written; 2: a bit flipped; 3: cut or grown */
        if (harm == 2) {
            const uint64_t b = lead + rnd(&s) % bits;
            buf[b / 8] ^= (uint8_t)(1u << (b % 8));
        } else if (harm == 3) {
            const uint64_t cut = rnd(&s) % 24;
            bits = rnd(&s) & 1 ? (bits > cut ? bits - cut : 0) : bits + cut;
        }
        const uint32_t count = (uint32_t)(rank[m - 1] + 1 + (rnd(&s) & 1 ? 0 : rnd(&s) % 100));
        const uint32_t at = fmt == 1 ? lead / 8 : 0; /* format 1: the stream's first byte */
        dk_class_t e = {.stream = (uint64_t)(uintptr_t)(buf + at), .count = count, .changed = m, .nonunit = nonunit,
                        .len = (uint32_t)((lead + bits + 7) / 8) - at, .k_gap = k_gap, .k_nu = k_nu, .k_mag = k_mag,
                        .nsub = fmt == 2};
        bool ok1, ok2;
        uint32_t got = m; /* changes decoded (a format 2 sub-stream's count) */
        if (fmt == 1) {
            if (harm == 3 && rnd(&s) & 1) e.count = count - 1 - (uint32_t)(rnd(&s) % 4); /* a rank past the class */
            memset(buf + at + e.len, 0xA5, 32);   /* what follows a class stream: the next one's bytes */
            memset(buf, 0x5A, at);                 /* and what precedes it */
            memset(d2, 0x5A, sizeof d2);
            ok1 = ref_class(&e, r1, d1);
            ok2 = decode_class(&e, r2, d2);
            for (uint32_t x = m; ok2 && x % 4; x++) CHECK(d2[x] == 0); /* its last group's slots past the changes */
        } else {
            uint32_t limit = rnd(&s) & 1 ? count : rank[m - 1] + 1;
            if (limit > 1u << DK_PACK_RANK_BITS) limit = 1u << DK_PACK_RANK_BITS; /* a sub-block's most */
            dk_sub_t s1 = {.bit = lead, .bits = (uint32_t)bits}, s2 = s1;
            uint32_t nu1 = 0, nu2 = 0;
            memset(d2, 0x5A, sizeof d2);
            ok1 = ref_sub(&e, &s1, limit, r1, d1, &nu1);
            ok2 = decode_sub(&e, buf, &s2, limit, d2, &nu2);
            for (uint32_t x = s2.count; ok2 && x % 4; x++) CHECK(d2[x] == 0); /* as decode_class's */
            unpack(d2, s2.count, r2);
            if (ok1 && ok2) CHECK(s1.count == s2.count && nu1 == nu2);
            got = s1.count;
            /* only the bytes dk_sub_span names, as dk_decode2 copies them
               into shared memory: anything read past them is garbage here */
            uint64_t from, to;
            dk_sub_span(&e, &s2, &from, &to);
            memset(fenced, 0xA5, sizeof fenced);
            memcpy(fenced + from, buf + from, to - from);
            dk_sub_t s3 = s1;
            uint32_t nu3 = 0;
            const bool ok3 = decode_sub(&e, fenced, &s3, limit, d3, &nu3);
            CHECK(ok3 == ok2);
            if (ok3) unpack(d3, s3.count, r3);
            if (ok3)
                CHECK(s3.count == s2.count && nu3 == nu2 && memcmp(r3, r2, s3.count * sizeof *r3) == 0 &&
                      memcmp(d3, d2, s3.count * sizeof *d3) == 0);
            if (ok1 && harm < 2) CHECK(s1.count == m && nu1 == nonunit);
        }
        if (ok1 != ok2)
            fprintf(stderr, "trial %u (format %u, %u changes, k_gap %u, k_nu %u, k_mag %u, harm %u): general %d, fast %d\n",
                    t, fmt, m, k_gap, k_nu, k_mag, harm, ok1, ok2);
        CHECK(ok1 == ok2);
        if (ok1) {
            CHECK(memcmp(r1, r2, got * sizeof *r1) == 0 && memcmp(d1, d2, got * sizeof *d1) == 0);
            if (harm < 2) CHECK(memcmp(r1, rank, m * sizeof *r1) == 0 && memcmp(d1, d, m * sizeof *d1) == 0);
        }
        (ok1 ? good : bad)[fmt - 1]++;
    }
    printf("fast readers against the general one: format 1 %zu good / %zu refused, format 2 %zu / %zu, "
           "the same verdicts and changes\n",
           good[0], bad[0], good[1], bad[1]);
    CHECK(good[0] > TRIALS / 8 && bad[0] > TRIALS / 20 && good[1] > TRIALS / 8 && bad[1] > TRIALS / 20);
}

/* A delta of n elements, format fmt, chunks of chunk elements. */
static uint8_t *encode(ferry_dtype_t dt, const void *base, const void *next, uint64_t n, uint32_t fmt, uint32_t chunk,
                       size_t *len) {
    size_t cap = ferry_delta_bound(dt, n, chunk);
    uint8_t *d = malloc(cap);
    CHECK(d);
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_FORMAT | (chunk ? FERRY_DELTA_PARAM_CHUNK_ELEMS : 0),
                              .dtype = dt, .format = fmt, .chunk_elems = chunk};
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, n, d, cap, len), ferry_delta_codec_detail(codec));
    return d;
}

/* Random patterns of width w, a share p changed (a tenth by up to 300 steps). */
static void make_random(uint8_t *base, uint8_t *next, uint32_t w, uint64_t n, double p, uint64_t seed) {
    delta_make_random(base, next, w, n, p, 299, seed);
}

int main(void) {
    ferry_ctx_t *ctx;
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(ctx, &codec) == FERRY_OK);
    check_fast_readers();
    /* synthetic Adam steps at three learning rates, 3 chunks (the last partial) */
    const uint64_t n = (2u << 20) + 12345;
    uint16_t *b16 = malloc(n * 2), *n16 = malloc(n * 2);
    float *a = malloc(4 * n * sizeof(float));
    CHECK(b16 && n16 && a);
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    for (int l = 0; l < 3; l++) {
        delta_synth_t s;
        delta_synth_init(&s, n, false, lrs[l], 7, a, a + n, a + 2 * n, a + 3 * n);
        for (int st = 0; st < 3; st++) delta_synth_step_range(&s, 0, n), delta_synth_next(&s);
        delta_synth_bf16(&s, b16, 0, n);
        delta_synth_step_range(&s, 0, n);
        delta_synth_next(&s);
        delta_synth_bf16(&s, n16, 0, n);
        for (uint32_t fmt = 1; fmt <= 2; fmt++) {
            size_t len;
            uint8_t *d = encode(FERRY_DTYPE_BF16, b16, n16, n, fmt, 0, &len);
            char what[64];
            snprintf(what, sizeof what, "bf16 Adam lr %.0e", lrs[l]);
            check_delta(d, len, 2, (uint8_t *)b16, (uint8_t *)n16, n, what);
            free(d);
        }
    }
    /* random changes with non-unit ones, every width, small chunks */
    static const struct {
        ferry_dtype_t dt;
        double p;
        uint32_t chunk;
    } r[] = {{FERRY_DTYPE_F32, 0.05, 16384}, {FERRY_DTYPE_F16, 0.3, 8192}, {FERRY_DTYPE_F8_E4M3, 0.1, 65536},
             {FERRY_DTYPE_BF16, 0.02, 4096}};
    uint8_t *rb = malloc(300000 * 4), *rn = malloc(300000 * 4);
    CHECK(rb && rn);
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        uint32_t w = delta_width(r[i].dt);
        make_random(rb, rn, w, 300000, r[i].p, 100 + i);
        for (uint32_t fmt = 1; fmt <= 2; fmt++) {
            size_t len;
            uint8_t *d = encode(r[i].dt, rb, rn, 300000, fmt, r[i].chunk, &len);
            check_delta(d, len, w, rb, rn, 300000, ferry_dtype_name(r[i].dt));
            free(d);
        }
    }
    /* every bit of a record flipped and the record resealed: the GPU's rules
       and the CPU apply give the same verdict, and the same result */
    /* (the last case: 32768 elements at 20%, four sub-blocks of 2^13, every
       7th bit) */
    static const struct {
        uint32_t fmt, elems, stride;
        double p;
    } fl[] = {{1, 16384, 1, 0.03}, {2, 16384, 1, 0.03}, {2, 32768, 7, 0.2}};
    for (size_t f = 0; f < sizeof fl / sizeof fl[0]; f++) {
        const uint32_t fmt = fl[f].fmt, E = fl[f].elems;
        make_random(rb, rn, 2, E, fl[f].p, 5);
        static uint8_t rec[40 + 8 * 24 + 32768 * 2], flip[sizeof rec];
        static uint8_t r1[32768 * 2], r2[32768 * 2];
        size_t rl;
        CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, fmt == 2 ? FERRY_DELTA_CHUNK_FORMAT2 : 0, rb, rn,
                                          E, rec, sizeof rec, &rl, NULL, NULL),
                 ferry_delta_codec_detail(codec));
        CHECK(rec[0] == CHUNK_SPARSE);
        if (f == 2) CHECK_EQ_INT(rec[3], 13);
        size_t agree = 0, applied = 0;
        for (size_t bit = 0; bit < rl * 8; bit += fl[f].stride) {
            if (bit / 8 >= 32 && bit / 8 < 40) continue; /* the record checksum itself */
            memcpy(flip, rec, rl);
            flip[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            put_u64(flip + 32, delta_record_sum(flip, rl));
            memcpy(r1, rb, E * 2);
            memcpy(r2, rb, E * 2);
            ferry_status_t cpu = ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, flip, rl, r1, E);
            if (cpu == FERRY_OK) ferry_delta_codec_commit(codec);
            if (cpu == FERRY_ERR_UNSUPPORTED) cpu = FERRY_ERR_CORRUPT; /* an unknown byte 3: the host's peek */
            ferry_status_t gpu = gpu_rules(flip, rl, 2, r2, E);
            if (cpu != gpu)
                fprintf(stderr, "format %u, bit %zu (byte %zu): CPU %s, GPU rules %s\n", fmt, bit, bit / 8,
                        ferry_status_name(cpu), ferry_status_name(gpu));
            CHECK(cpu == gpu);
            CHECK(memcmp(r1, r2, E * 2) == 0);
            applied += cpu == FERRY_OK;
            agree++;
        }
        printf("format %u, %u elements: %zu resealed bit flips of a %zu-byte record, the same verdict and result on "
               "both (%zu applied: flips that change no decoded value)\n",
               fmt, E, agree, rl, applied);
    }
    free(rb);
    free(rn);
    free(a);
    free(b16);
    free(n16);
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    return 0;
}
