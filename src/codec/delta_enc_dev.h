/* Encoding format 2 deltas (docs/delta-format.md) on a GPU: the tables the
 * passes of delta_enc.cu share, and every step of theirs that is not about
 * how a GPU runs it, as host and device code alike. test_delta_enc_dev.c
 * runs these same steps on the CPU, in CI, and checks that they write
 * ferry_delta_encode's bytes.
 *
 * The passes, each over every chunk of a batch of regions:
 *   scan     a chunk's changes counted, the buckets of its changed
 *            elements and of a sample of all, its checksums
 *   classes  the magnitude classes (enc_rules.h's DP)
 *   rank     each change's class and rank among its class's elements of
 *            its sub-block, into a list in position order (ek_entry);
 *            per class and sub-block, its elements, changes and non-unit
 *            changes
 *   totals   per class: its counts, the Rice parameters' first guesses
 *   part     per class and sub-block, one walk of its changes: the bit
 *            counts each candidate parameter would spend, the runs
 *            between non-unit changes
 *   choose   per class: the parameters, then every sub-stream's length,
 *            the length tables, the record's length and mode
 *   write    per class and sub-block, its sub-stream's bits, at offsets
 *            known in advance, and its length table entry
 *   head     the record headers and class tables; raw records' contents
 *   seal     the record checksums */
#ifndef FERRY_CODEC_DELTA_ENC_DEV_H
#define FERRY_CODEC_DELTA_ENC_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "codec/enc_rules.h"

#define EK_CLASSES 8u  /* ER_CLASSES_MAX */
#define EK_TILE 4096u  /* elements a rank or scan block takes at a time: 2^ER_SUB_LOG2_MIN */
#define EK_HEADER 40u  /* a chunk record's header (CHUNK_HEADER) */
#define EK_ENTRY 24u   /* a class table entry (CLASS_ENTRY) */
enum { EK_UNCHANGED = 0, EK_SPARSE = 1, EK_RAW = 2 };

/* One chunk of a batch. In: base, next, elems, width, given (+ base_sum),
 * max_classes; the host fills sub_log2, nsub, sub0 and list0 after the scan,
 * rec after choose. */
typedef struct ek_chunk {
    uint64_t base, next;         /* device addresses of its first elements */
    uint64_t base_sum, next_sum; /* xxh3-64 of its base and next bytes (base_sum in when given) */
    uint64_t list0;              /* index of its first change in the change list */
    uint64_t rec;                /* device address of its record */
    uint32_t elems, width, given, max_classes;
    uint32_t changed;            /* scan */
    uint32_t sub_log2, nsub, sub0;
    uint32_t classes;            /* classes */
    uint32_t mode, rec_len;      /* choose */
    uint32_t lower[EK_CLASSES];  /* classes: each class's smallest magnitude */
    /* per class (totals, choose) */
    uint32_t count[EK_CLASSES], chg[EK_CLASSES], nonunit[EK_CLASSES], runs[EK_CLASSES];
    int32_t g0[EK_CLASSES], n0[EK_CLASSES];
    uint8_t k_gap[EK_CLASSES], k_nu[EK_CLASSES], k_mag[EK_CLASSES], len_bits[EK_CLASSES];
    uint32_t first_bytes[EK_CLASSES]; /* bytes of its sub-streams, padded */
    uint32_t stream_len[EK_CLASSES];  /* bytes of its whole stream, length table included */
    uint32_t stream_off[EK_CLASSES];  /* where its stream starts in the record */
} ek_chunk_t;

/* One class of one sub-block: index (sub0 + b) * EK_CLASSES + k. */
typedef struct ek_sub {
    uint32_t count;     /* rank: the class's elements in the sub-block */
    uint32_t m, nu;     /* rank: its changes, of them non-unit */
    uint32_t first_run; /* part: index of its first non-unit change, or m */
    uint32_t gs[3];     /* part: sum over changes of gap >> (g0 - 1 + e) */
    uint32_t rs[3];     /* part: sum over run codes of run >> (n0 - 1 + e) */
    uint32_t ms[5];     /* part: sum over non-unit changes of ExpGolomb(|d| - 2, e) bits */
    uint32_t bits;      /* choose: its sub-stream's length */
    uint32_t off;       /* choose: where it starts, in bits from its class stream's start */
} ek_sub_t;

/* One sub-block: which chunk, and where its changes are in the list. */
typedef struct ek_subblk {
    uint32_t chunk, b;
    uint32_t first; /* rank: its first change's index from the chunk's list0 */
    uint32_t m;     /* rank: its changes */
} ek_subblk_t;

/* Sub-blocks of at most 2^15 elements: ranks fit the entry's 28 bits and
   runs between non-unit changes a uint16_t. */
#if ER_SUB_LOG2_MAX_CHOSEN > 15
#error "delta_enc_dev.h: sub-blocks over 2^15 elements need wider runs"
#endif

/* ---- the change list: one 64-bit entry per change, in position order ---- */

/* rank: among its class's elements of its sub-block (< 2^15); val: |d| - 1 */
ER_HD uint64_t ek_entry(uint32_t rank, uint32_t k, uint32_t sign, uint32_t val) {
    return (uint64_t)val << 32 | (uint64_t)sign << 31 | (uint64_t)k << 28 | rank;
}
ER_HD uint32_t ek_entry_rank(uint64_t e) { return (uint32_t)e & 0x0FFFFFFFu; }
ER_HD uint32_t ek_entry_class(uint64_t e) { return (uint32_t)(e >> 28) & 7u; }
ER_HD uint32_t ek_entry_sign(uint64_t e) { return (uint32_t)(e >> 31) & 1u; }
ER_HD uint32_t ek_entry_val(uint64_t e) { return (uint32_t)(e >> 32); }

/* An element's change: val = |d| - 1 and the sign of d, d = ord(n) - ord(b)
 * (codec_internal.h's elem_ord); b != n. */
ER_HD void ek_change(uint32_t b, uint32_t n, uint32_t w, uint32_t *val, uint32_t *sign) {
    uint32_t mm = w == 4 ? 0x7FFFFFFFu : (1u << (8 * w - 1)) - 1;
    int64_t ob = (int64_t)(b & mm) ^ -(int64_t)((b >> (8 * w - 1)) & 1u);
    int64_t on = (int64_t)(n & mm) ^ -(int64_t)((n >> (8 * w - 1)) & 1u);
    int64_t d = on - ob;
    *sign = d < 0;
    *val = (uint32_t)((uint64_t)(d < 0 ? -d : d) - 1);
}
/* A magnitude's bucket (delta_bucket_shift). */
ER_HD uint32_t ek_bucket(uint32_t v, uint32_t w) {
    return w == 2 ? (v >> 7) & 0xFF : w == 4 ? (v >> 23) & 0xFF : v & 0x7F;
}
/* Each bucket's class, from the classes' lower bounds. */
ER_HD void ek_class_table(const ek_chunk_t *c, uint8_t *class_of /* 256 */) {
    uint32_t shift = c->width == 1 ? 0 : c->width == 2 ? 7 : 23;
    for (uint32_t b = 0, k = 0; b < 256; b++) {
        while (k + 1 < c->classes && (b << shift) >= c->lower[k + 1]) k++;
        class_of[b] = (uint8_t)k;
    }
}

/* ---- totals: per class, from its sub-blocks ---- */

ER_HD void ek_totals(ek_chunk_t *c, const ek_sub_t *subs /* this chunk's */) {
    for (uint32_t k = 0; k < c->classes; k++) {
        uint64_t count = 0, m = 0, nu = 0, with = 0;
        for (uint32_t b = 0; b < c->nsub; b++) {
            const ek_sub_t *s = &subs[b * EK_CLASSES + k];
            count += s->count;
            m += s->m;
            nu += s->nu;
            with += s->m != 0;
        }
        c->count[k] = (uint32_t)count;
        c->chg[k] = (uint32_t)m;
        c->nonunit[k] = (uint32_t)nu;
        /* format 2's run codes: one first run per sub-stream with changes,
           one after each non-unit change (chunk_enc.c's write_class2) */
        c->runs[k] = nu ? (uint32_t)(with + nu) : 0;
        int g0 = m ? er_rice_guess(count - m, m) : 1, n0 = 1;
        if (nu) n0 = er_rice_guess(m - nu, with + nu);
        c->g0[k] = g0 < 1 ? 1 : g0;
        c->n0[k] = n0 < 1 ? 1 : n0;
    }
}

/* ---- part: one walk over a class's changes of one sub-block ---- */

typedef struct ek_part {
    uint32_t j;           /* changes seen */
    uint32_t next_rank;   /* one past the previous change's rank */
    uint32_t pend_j;      /* the last non-unit change seen: its index in the sub-stream */
    uint64_t pend_i;      /* and in the list (runs[] is written there) */
    bool pend, any_nu;
    uint32_t first_run;
    uint32_t gs[3], rs[3], ms[5];
} ek_part_t;

ER_HD void ek_part_init(ek_part_t *p) {
    p->j = p->next_rank = p->pend_j = p->first_run = 0;
    p->pend_i = 0;
    p->pend = p->any_nu = false;
    for (int e = 0; e < 3; e++) p->gs[e] = p->rs[e] = 0;
    for (int e = 0; e < 5; e++) p->ms[e] = 0;
}
ER_HD void ek_part_run(ek_part_t *p, uint32_t r, int n0) {
    for (int e = 0; e < 3; e++) p->rs[e] += r >> (n0 - 1 + e);
}
/* The next change of the class in the sub-block: entry e at list index i.
 * runs[i] gets a non-unit change's run to the next one (or to the end). */
ER_HD void ek_part_change(ek_part_t *p, uint64_t e, uint64_t i, int g0, int n0, uint16_t *runs) {
    uint32_t rank = ek_entry_rank(e), g = rank - p->next_rank, val = ek_entry_val(e);
    p->next_rank = rank + 1;
    for (int x = 0; x < 3; x++) p->gs[x] += g >> (g0 - 1 + x);
    if (val) {
        for (uint32_t x = 0; x < 5; x++) p->ms[x] += er_expg_len((uint64_t)val - 1, x);
        if (p->pend) {
            uint32_t r = p->j - p->pend_j - 1;
            runs[p->pend_i] = (uint16_t)r;
            ek_part_run(p, r, n0);
        } else {
            p->first_run = p->j;
            p->any_nu = true;
        }
        p->pend = true;
        p->pend_j = p->j;
        p->pend_i = i;
    }
    p->j++;
}
/* After the sub-block's last change of the class: class_nu, the class's
 * non-unit changes in the whole chunk (run codes are written only when it
 * has some). */
ER_HD void ek_part_end(ek_part_t *p, uint32_t class_nu, int n0, uint16_t *runs, ek_sub_t *s) {
    uint32_t m = p->j;
    if (!p->any_nu) p->first_run = m;
    if (p->pend) {
        uint32_t r = m - p->pend_j - 1;
        runs[p->pend_i] = (uint16_t)r;
        ek_part_run(p, r, n0);
    }
    if (m && class_nu) ek_part_run(p, p->first_run, n0);
    s->first_run = p->first_run;
    for (int e = 0; e < 3; e++) s->gs[e] = p->gs[e], s->rs[e] = p->rs[e];
    for (int e = 0; e < 5; e++) s->ms[e] = p->ms[e];
}

/* ---- choose: parameters, lengths, the record's layout ---- */

/* Bits of a sub-stream under the class's chosen parameters. */
ER_HD uint32_t ek_sub_bits(const ek_chunk_t *c, uint32_t k, const ek_sub_t *s) {
    if (!s->m) return 0;
    uint32_t kg = c->k_gap[k], kn = c->k_nu[k];
    uint64_t bits = (uint64_t)s->gs[kg - (uint32_t)(c->g0[k] - 1)] + (uint64_t)s->m * (2 + kg) + s->ms[c->k_mag[k]];
    if (c->nonunit[k]) bits += (uint64_t)s->rs[kn - (uint32_t)(c->n0[k] - 1)] + (uint64_t)(1 + s->nu) * (1 + kn);
    return (uint32_t)bits;
}

/* The chunk's parameters, sub-stream offsets, length tables, streams and
 * record length; mode sparse when the record is smaller than raw's, else
 * raw. A chunk without changes is unchanged. */
ER_HD void ek_choose(ek_chunk_t *c, ek_sub_t *subs /* this chunk's */) {
    const uint64_t raw_len = EK_HEADER + (uint64_t)c->elems * c->width;
    if (!c->changed) {
        c->mode = EK_UNCHANGED;
        c->rec_len = EK_HEADER;
        return;
    }
    uint64_t off = EK_HEADER + (uint64_t)c->classes * EK_ENTRY;
    for (uint32_t k = 0; k < c->classes; k++) {
        c->k_gap[k] = c->k_nu[k] = c->k_mag[k] = c->len_bits[k] = 0;
        c->first_bytes[k] = c->stream_len[k] = 0;
        c->stream_off[k] = (uint32_t)(off < UINT32_MAX ? off : UINT32_MAX);
        if (!c->chg[k]) continue;
        uint64_t gap_bits[3] = {0, 0, 0}, nu_bits[3] = {0, 0, 0}, mag_bits[5] = {0, 0, 0, 0, 0};
        for (uint32_t b = 0; b < c->nsub; b++) {
            const ek_sub_t *s = &subs[b * EK_CLASSES + k];
            for (int e = 0; e < 3; e++) gap_bits[e] += s->gs[e], nu_bits[e] += s->rs[e];
            for (int e = 0; e < 5; e++) mag_bits[e] += s->ms[e];
        }
        uint32_t kg, kn, km;
        er_choose_params(gap_bits, nu_bits, mag_bits, c->chg[k], c->runs[k], c->g0[k], c->n0[k], &kg, &kn, &km);
        c->k_gap[k] = (uint8_t)kg;
        c->k_nu[k] = (uint8_t)kn;
        c->k_mag[k] = (uint8_t)km;
        uint64_t at = 0;
        uint32_t longest = 0;
        for (uint32_t b = 0; b < c->nsub; b++) {
            ek_sub_t *s = &subs[b * EK_CLASSES + k];
            s->bits = ek_sub_bits(c, k, s);
            s->off = (uint32_t)at;
            at += s->bits;
            longest |= s->bits;
        }
        uint32_t W = longest ? 32u - (uint32_t)(ER_CLZ64((uint64_t)longest) - 32u) : 0;
        uint64_t first = (at + 7) / 8, len = first + ((uint64_t)c->nsub * W + 7) / 8;
        c->len_bits[k] = (uint8_t)W;
        c->first_bytes[k] = (uint32_t)(first < UINT32_MAX ? first : UINT32_MAX);
        c->stream_len[k] = (uint32_t)(len < UINT32_MAX ? len : UINT32_MAX);
        off += len;
    }
    if (off <= raw_len - 1) {
        c->mode = EK_SPARSE;
        c->rec_len = (uint32_t)off;
    } else {
        c->mode = EK_RAW;
        c->rec_len = (uint32_t)raw_len;
    }
}

/* ---- write: a sub-stream's bits into the zeroed record area ---- */

/* Bits go out a 32-bit word at a time, ORed into place: sub-streams share
 * their first and last words with their neighbours. words: the record
 * area's start, 4-aligned; bit positions count from it. */
typedef struct ek_bw {
    uint64_t acc, word;
    uint32_t n; /* bits in acc, from the word's first bit */
} ek_bw_t;

ER_HD void ek_or_word(uint32_t *words, uint64_t i, uint32_t v) {
    if (!v) return;
#ifdef __CUDA_ARCH__
    atomicOr(&words[i], v);
#else
    uint8_t *p = (uint8_t *)&words[i]; /* little-endian whatever the host */
    p[0] |= (uint8_t)v;
    p[1] |= (uint8_t)(v >> 8);
    p[2] |= (uint8_t)(v >> 16);
    p[3] |= (uint8_t)(v >> 24);
#endif
}
ER_HD void ek_bw_init(ek_bw_t *w, uint64_t bit) {
    w->acc = 0;
    w->word = bit >> 5;
    w->n = (uint32_t)(bit & 31);
}
ER_HD void ek_bw_put(ek_bw_t *w, uint32_t *words, uint64_t bits, uint32_t n) { /* n <= 32, bits < 2^n */
    w->acc |= bits << w->n;
    w->n += n;
    if (w->n >= 32) {
        ek_or_word(words, w->word++, (uint32_t)w->acc);
        w->acc >>= 32;
        w->n -= 32;
    }
}
ER_HD void ek_bw_rice(ek_bw_t *w, uint32_t *words, uint32_t v, uint32_t k) {
    uint32_t q = v >> k;
    while (q >= 32) {
        ek_bw_put(w, words, 0, 32);
        q -= 32;
    }
    ek_bw_put(w, words, 1ull << q, q + 1);
    if (k) ek_bw_put(w, words, v & ((1u << k) - 1), k);
}
ER_HD void ek_bw_expg(ek_bw_t *w, uint32_t *words, uint32_t v, uint32_t k) {
    uint64_t x = (uint64_t)v + (1ull << k);
    uint32_t len = 64u - ER_CLZ64(x); /* k+1 .. 33 */
    ek_bw_rice(w, words, len - 1 - k, 0);
    uint32_t low = len - 1; /* the top bit is implied */
    if (low > 32) {
        ek_bw_put(w, words, x & 0xFFFFFFFFu, 32);
        ek_bw_put(w, words, (x >> 32) & ((1ull << (low - 32)) - 1), low - 32);
    } else if (low) {
        ek_bw_put(w, words, x & ((1ull << low) - 1), low);
    }
}
ER_HD void ek_bw_end(ek_bw_t *w, uint32_t *words) {
    if (w->n) ek_or_word(words, w->word, (uint32_t)w->acc);
}

/* The walk that writes: after ek_wr_begin, each change of the class in the
 * sub-block in order (entry e, its run from runs[] when non-unit), then
 * ek_wr_end, which also writes the sub-stream's length table entry. */
typedef struct ek_wr {
    ek_bw_t bw;
    uint32_t next_rank;
    uint32_t k_gap, k_nu, k_mag;
} ek_wr_t;

/* Bit position of class k's stream in the record area (rec_at: the
 * record's byte offset from words). */
ER_HD uint64_t ek_stream_bit(const ek_chunk_t *c, uint32_t k, uint64_t rec_at) {
    return 8 * (rec_at + c->stream_off[k]);
}
ER_HD void ek_wr_begin(ek_wr_t *wr, const ek_chunk_t *c, uint32_t k, const ek_sub_t *s, uint64_t rec_at,
                           uint32_t *words) {
    ek_bw_init(&wr->bw, ek_stream_bit(c, k, rec_at) + s->off);
    wr->next_rank = 0;
    wr->k_gap = c->k_gap[k];
    wr->k_nu = c->k_nu[k];
    wr->k_mag = c->k_mag[k];
    if (s->m && c->nonunit[k]) ek_bw_rice(&wr->bw, words, s->first_run, wr->k_nu);
}
ER_HD void ek_wr_change(ek_wr_t *wr, uint64_t e, uint32_t run, uint32_t *words) {
    uint32_t rank = ek_entry_rank(e), val = ek_entry_val(e);
    ek_bw_rice(&wr->bw, words, rank - wr->next_rank, wr->k_gap);
    wr->next_rank = rank + 1;
    ek_bw_put(&wr->bw, words, ek_entry_sign(e), 1);
    if (val) {
        ek_bw_expg(&wr->bw, words, val - 1, wr->k_mag);
        ek_bw_rice(&wr->bw, words, run, wr->k_nu);
    }
}
ER_HD void ek_wr_end(ek_wr_t *wr, const ek_chunk_t *c, uint32_t k, uint32_t b, const ek_sub_t *s,
                         uint64_t rec_at, uint32_t *words) {
    ek_bw_end(&wr->bw, words);
    uint32_t W = c->len_bits[k];
    if (!W) return;
    ek_bw_t t;
    ek_bw_init(&t, ek_stream_bit(c, k, rec_at) + 8ull * c->first_bytes[k] + (uint64_t)b * W);
    ek_bw_put(&t, words, s->bits, W);
    ek_bw_end(&t, words);
}

/* ---- head: a record's header and class table ---- */

ER_HD void ek_put32(uint8_t *p, uint32_t v) {
    p[0] = (uint8_t)v, p[1] = (uint8_t)(v >> 8), p[2] = (uint8_t)(v >> 16), p[3] = (uint8_t)(v >> 24);
}
ER_HD void ek_put64(uint8_t *p, uint64_t v) {
    ek_put32(p, (uint32_t)v);
    ek_put32(p + 4, (uint32_t)(v >> 32));
}
/* The header (its checksum field left zero) and, sparse, the class table.
 * A raw record's contents are the caller's to copy. */
ER_HD void ek_head(const ek_chunk_t *c, uint8_t *rec) {
    for (uint32_t i = 0; i < EK_HEADER; i++) rec[i] = 0;
    uint32_t sparse = c->mode == EK_SPARSE;
    rec[0] = (uint8_t)c->mode;
    rec[1] = (uint8_t)c->width;
    rec[2] = (uint8_t)(sparse ? c->classes : 0);
    rec[3] = (uint8_t)(sparse ? c->sub_log2 : 0);
    ek_put32(rec + 4, c->elems);
    ek_put32(rec + 8, c->changed);
    uint32_t payload = c->mode == EK_RAW ? c->elems * c->width
                       : sparse          ? c->rec_len - EK_HEADER - c->classes * EK_ENTRY
                                         : 0;
    ek_put32(rec + 12, payload);
    ek_put64(rec + 16, c->base_sum);
    ek_put64(rec + 24, c->next_sum);
    if (!sparse) return;
    for (uint32_t k = 0; k < c->classes; k++) {
        uint8_t *e = rec + EK_HEADER + k * EK_ENTRY;
        ek_put32(e, c->lower[k]);
        ek_put32(e + 4, c->count[k]);
        ek_put32(e + 8, c->chg[k]);
        ek_put32(e + 12, c->chg[k] ? c->nonunit[k] : 0);
        ek_put32(e + 16, c->stream_len[k]);
        e[20] = c->k_gap[k];
        e[21] = c->k_nu[k];
        e[22] = c->k_mag[k];
        e[23] = c->len_bits[k];
    }
}

#endif
