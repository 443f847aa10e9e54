/* Applying one chunk: decode every change (the classes come from the base
 * magnitudes) and write it in place, keeping the old values as the undo
 * log, then verify the chunk's next checksum. A chunk that fails is
 * restored before the error returns. */
#include "codec/codec_internal.h"
#include "common/hash.h"

/* Where one class's stream stands while decoding. */
typedef struct class_cursor {
    bitr_t br;
    uint64_t target;  /* rank of the class's next change; UINT64_MAX when done */
    uint64_t seen;    /* class elements in the batches before this one */
    uint32_t left;    /* changes still to decode */
    uint32_t j;       /* index of the next change within the class */
    uint32_t nu_next; /* index of the next non-unit change */
    uint32_t nu_left;
} class_cursor_t;

/* Decodes one change of class k: its value change, then where the next is. */
static inline int64_t next_value(class_cursor_t *q, const delta_class_t *e) {
    /* the common case in one refill: a one-ulp change whose sign bit and
       following gap code lie in the bits at hand */
    bitr_t *r = &q->br;
    if (!(q->nu_left && q->j == q->nu_next) && q->left > 1) {
        bitr_refill(r);
        uint64_t acc = r->acc >> 1;
        uint32_t k = e->k_gap;
        if (acc) {
            uint32_t t = (uint32_t)__builtin_ctzll(acc);
            uint32_t used = 1 + t + 1 + k;
            if (used <= r->n && (uint64_t)t <= (uint64_t)(e->count >> k)) {
                uint32_t neg = (uint32_t)(r->acc & 1);
                uint64_t low = k ? (acc >> (t + 1)) & ((1ull << k) - 1) : 0;
                bitr_skip(r, used);
                q->j++;
                q->left--;
                q->target += ((uint64_t)t << k | low) + 1;
                return 1 - 2 * (int64_t)neg; /* no branch on a coin flip */
            }
        }
    }
    uint32_t neg = bitr_bits(&q->br, 1);
    uint64_t a = 1;
    if (q->nu_left && q->j == q->nu_next) {
        a = bitr_expg(&q->br, e->k_mag) + 2;
        if (--q->nu_left) {
            q->nu_next += bitr_rice(&q->br, e->k_nu, e->changed) + 1;
            if (q->nu_next >= e->changed) q->br.overrun = true; /* past the class's changes: corrupt */
        }
    }
    q->j++;
    if (--q->left == 0)
        q->target = UINT64_MAX;
    else
        q->target += (uint64_t)bitr_rice(&q->br, e->k_gap, e->count) + 1;
    return neg ? -(int64_t)a : (int64_t)a;
}

/* Decodes a sparse chunk's changes and writes them in place as it goes,
 * logging (position, old value) in c->log[c->log_n, ...). Safe: a block's
 * classes are taken before any of its elements is written, and later blocks
 * are untouched. On a failure everything written is restored. */
DELTA_HOT static ferry_status_t decode_sparse(ferry_delta_codec_t *c, const delta_chunk_t *h, uint8_t *base,
                                              size_t *n_out) {
    uint32_t w = h->width, K = h->classes;
    if (!delta_grow(c, (void **)&c->log, &c->log_cap, c->log_n + h->changed, sizeof *c->log))
        return delta_fail(c, FERRY_ERR_NO_MEMORY, "delta apply: out of memory for %u changes", h->changed);
    delta_change_t *out = c->log + c->log_n;
    size_t n = 0;
    ferry_status_t st = FERRY_OK;
    class_cursor_t q[FERRY_DELTA_CLASSES_MAX];
    uint32_t lower[FERRY_DELTA_CLASSES_MAX];
    const uint8_t *p = h->payload;
    for (uint32_t k = 0; k < K; k++) {
        const delta_class_t *e = &h->cls[k];
        lower[k] = e->lower;
        bitr_init(&q[k].br, p, e->len);
        p += e->len;
        q[k].seen = 0;
        q[k].j = 0;
        q[k].left = e->changed;
        q[k].nu_left = e->nonunit;
        q[k].nu_next = e->nonunit ? bitr_rice(&q[k].br, e->k_nu, e->changed) : 0;
        q[k].target = e->changed ? bitr_rice(&q[k].br, e->k_gap, e->count) : UINT64_MAX;
    }
    /* A batch of blocks at a time: first every block's class masks (from
     * the base, before anything in the batch is written), then class by
     * class each change's block is found by counting the blocks wholly
     * before its rank (no branch per block and class, which mispredicted
     * about once per change), and its element by select. */
    uint64_t gebuf[DELTA_MASK_BATCH][FERRY_DELTA_CLASSES_MAX + 1]; /* per block: elements at or above each class */
    uint64_t cmask[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH];
    uint16_t upto[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH]; /* class elements in the batch's blocks 0..b */
    for (uint32_t at = 0; at < h->elems; at += 64 * DELTA_MASK_BATCH) {
        uint32_t nel = h->elems - at < 64 * DELTA_MASK_BATCH ? h->elems - at : 64 * DELTA_MASK_BATCH;
        uint32_t nblk = (nel + 63) / 64;
        c->masks(base + (size_t)at * w, NULL, w, nel, lower + 1, K - 1, NULL, &gebuf[0][1], FERRY_DELTA_CLASSES_MAX + 1);
        for (uint32_t b = 0; b < nblk; b++) {
            uint32_t nb = nel - 64 * b < 64 ? nel - 64 * b : 64;
            gebuf[b][0] = nb == 64 ? ~0ull : (1ull << nb) - 1;
            gebuf[b][K] = 0;
        }
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t b = 0; b < nblk; b++) cmask[k][b] = gebuf[b][k] & ~gebuf[b][k + 1];
        for (uint32_t k = 0; k < K; k++) {
            uint32_t run = 0;
            for (uint32_t b = 0; b < nblk; b++) {
                run += (uint32_t)__builtin_popcountll(cmask[k][b]);
                upto[k][b] = (uint16_t)run;
            }
            for (uint32_t b = nblk; b < DELTA_MASK_BATCH; b++) upto[k][b] = UINT16_MAX; /* never before a rank */
            uint64_t end = q[k].seen + run;
            if (q[k].target >= end) {
                q[k].seen = end;
                continue;
            }
            class_cursor_t qk = q[k]; /* in registers while the class's changes decode */
            const uint16_t *up = upto[k];
            while (qk.target < end) {
                uint32_t t = (uint32_t)(qk.target - qk.seen), b = 0;
                for (uint32_t i = 0; i < DELTA_MASK_BATCH; i++) b += up[i] <= t; /* blocks wholly before rank t */
                uint32_t before = b ? up[b - 1] : 0;
                uint32_t pos = at + 64 * b + select_bit(cmask[k][b], t - before);
                int64_t d = next_value(&qk, &h->cls[k]);
                uint32_t old = elem_get(base, w, pos), v;
                if (qk.br.overrun || !elem_unord(elem_ord(old, w) + d, w, &v)) {
                    st = delta_fail(c, FERRY_ERR_CORRUPT, "class %u: stream cut short or a value out of range", k);
                    goto undo;
                }
                elem_put(base, w, pos, v);
                out[n].pos = pos;
                out[n].val = old;
                n++;
            }
            qk.seen = end;
            q[k] = qk;
        }
    }
    for (uint32_t k = 0; k < K && st == FERRY_OK; k++) {
        if (q[k].seen != h->cls[k].count)
            st = delta_fail(c, FERRY_ERR_MISMATCH,
                            "the region is not this delta's base: magnitude class %u holds %llu elements, "
                            "the delta's base had %u",
                            k, (unsigned long long)q[k].seen, h->cls[k].count);
    }
    for (uint32_t k = 0; k < K && st == FERRY_OK; k++) {
        if (q[k].left || q[k].nu_left || q[k].br.overrun || bitr_tell(&q[k].br) + 7 < (uint64_t)h->cls[k].len * 8)
            st = delta_fail(c, FERRY_ERR_CORRUPT,
                            "class %u: %u of %u changes left undecoded, or a stream cut short or too long", k,
                            q[k].left, h->cls[k].changed);
    }
    if (st == FERRY_OK) {
        *n_out = n;
        return FERRY_OK;
    }
undo:
    for (size_t i = n; i-- > 0;) elem_put(base, w, out[i].pos, out[i].val);
    return st;
}

/* After a failed check: tells a wrong base from damaged data. */
static ferry_status_t blame(ferry_delta_codec_t *c, const delta_chunk_t *h, const uint8_t *base) {
    if (XXH3_64bits(base, (size_t)h->elems * h->width) != h->base_sum)
        return delta_fail(c, FERRY_ERR_MISMATCH, "the region is not this delta's base (base checksum differs)");
    return delta_fail(c, FERRY_ERR_CORRUPT, "the applied chunk does not match the delta's checksum");
}

ferry_status_t ferry_delta_chunk_apply(ferry_delta_codec_t *c, ferry_dtype_t dtype, const void *chunk,
                                       size_t chunk_len, void *base_, uint32_t elems) {
    if (!c) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    uint8_t *base = base_;
    uint32_t w = delta_width(dtype);
    if (!w) return delta_fail(c, FERRY_ERR_UNSUPPORTED, "delta of dtype %s", ferry_dtype_name(dtype));
    if (!chunk || !base) return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "chunk apply: NULL chunk or region");
    delta_chunk_t h;
    ferry_status_t st = delta_chunk_parse(chunk, chunk_len, w, &h, &c->err);
    if (st != FERRY_OK) return st;
    if (h.elems != elems)
        return delta_fail(c, FERRY_ERR_MISMATCH, "chunk of %u elements applied to %u elements", h.elems, elems);
    size_t bytes = (size_t)elems * w;
    if (!delta_grow(c, (void **)&c->undo, &c->undo_cap, c->undo_n + 1, sizeof *c->undo))
        return delta_fail(c, FERRY_ERR_NO_MEMORY, "delta apply: out of memory");
    delta_undo_t *u = &c->undo[c->undo_n];
    *u = (delta_undo_t){.base = base, .width = w, .elems = elems, .first = c->log_n, .count = 0, .raw_off = SIZE_MAX};

    if (h.mode == CHUNK_UNCHANGED) {
        if (XXH3_64bits(base, bytes) != h.next_sum)
            return delta_fail(c, FERRY_ERR_MISMATCH, "the region is not this delta's base (unchanged chunk differs)");
        return FERRY_OK; /* nothing to undo */
    }
    if (h.mode == CHUNK_RAW) {
        if (XXH3_64bits(base, bytes) != h.base_sum)
            return delta_fail(c, FERRY_ERR_MISMATCH, "the region is not this delta's base (base checksum differs)");
        if (XXH3_64bits(h.payload, bytes) != h.next_sum)
            return delta_fail(c, FERRY_ERR_CORRUPT, "raw chunk's contents do not match its checksum");
        if (!delta_grow(c, (void **)&c->arena, &c->arena_cap, c->arena_n + bytes, 1))
            return delta_fail(c, FERRY_ERR_NO_MEMORY, "delta apply: out of memory for a %zu-byte undo copy", bytes);
        memcpy(c->arena + c->arena_n, base, bytes);
        memcpy(base, h.payload, bytes);
        u->raw_off = c->arena_n;
        c->arena_n += bytes;
        c->undo_n++;
        return FERRY_OK;
    }
    size_t n = 0;
    st = decode_sparse(c, &h, base, &n);
    /* a stream that decodes badly against this region may be sound and the
       region the wrong base: the base checksum tells (only on this path) */
    if (st == FERRY_ERR_CORRUPT && XXH3_64bits(base, bytes) != h.base_sum) return blame(c, &h, base);
    if (st != FERRY_OK) return st;
    delta_change_t *ch = c->log + c->log_n; /* written; old values kept */
    if (XXH3_64bits(base, bytes) != h.next_sum) {
        for (size_t i = n; i-- > 0;) elem_put(base, w, ch[i].pos, ch[i].val);
        return blame(c, &h, base);
    }
    u->count = n;
    c->log_n += n;
    c->undo_n++;
    return FERRY_OK;
}
