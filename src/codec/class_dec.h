/* Reading one magnitude class's stream of a sparse chunk, change by change:
 * shared by the decoder that writes a class's changes out (chunk_apply.c)
 * and the AVX-512 walks that place them as they read (apply_avx512.c):
 * format 1's class cursor, and format 2's sub-stream cursor. */
#ifndef FERRY_CODEC_CLASS_DEC_H
#define FERRY_CODEC_CLASS_DEC_H

#include "codec/codec_internal.h"

/* Where one class's stream stands while decoding. */
typedef struct class_cursor {
    bitr_t br;
    uint64_t target;  /* rank of the class's next change; UINT64_MAX when done */
    uint32_t left;    /* changes still to decode */
    uint32_t j;       /* index of the next change within the class */
    uint32_t nu_next; /* index of the next non-unit change */
    uint32_t nu_left;
} class_cursor_t;

/* Decodes one change of class k: its value change, then where the next is.
 * The general reader; decode_class takes one-ulp changes faster itself. */
static inline int64_t next_value(class_cursor_t *q, const delta_class_t *e) {
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

/* The end of one change in decode_class's fast loop: after head bits (the
 * sign bit first, then a non-unit change's magnitude and run), the Rice
 * gap to the next change. Writes the change (magnitude mag, signed by that
 * bit) at *rank_i and *delta_i and consumes its bits; false, consuming
 * nothing, when the gap does not fit the window. Inlined with head 1 for
 * one-ulp changes, so their path keeps constant shifts. */
static inline __attribute__((always_inline)) bool gap_step(uint64_t *acc, uint32_t *nb, uint64_t *target,
                                                           uint32_t head, uint32_t k, int64_t mag, uint32_t count,
                                                           bool *past, uint32_t *rank_i, int64_t *delta_i) {
    uint64_t u = *acc >> head;
    uint32_t t = (uint32_t)__builtin_ctzll(u | 1ull << (63 - head));
    uint32_t used = head + t + 1 + k;
    if (used > *nb) return false;
    *past |= *target >= count;
    *rank_i = (uint32_t)*target;
    int64_t neg = -(int64_t)(*acc & 1);
    *delta_i = (mag ^ neg) - neg; /* no branch on a coin flip */
    *target += ((uint64_t)t << k | ((u >> (t + 1)) & ((1ull << k) - 1))) + 1;
    *acc >>= used;
    *nb -= used;
    return true;
}

/* The head of a non-unit change in the fast step's window of nb bits (acc):
 * after its sign bit, ExpGolomb(|d| - 2, k_mag) in mag, and while more
 * non-unit changes follow (nu_left > 1), Rice(run to the next, k_nu), whose
 * index goes to nu_new (UINT32_MAX: none; UINT32_MAX - 1: past the class's
 * `changed`, which is corrupt). head: the bits before the gap. False when
 * it does not fit the window or the magnitude is too long for the window;
 * the general reader takes such a change. */
static inline __attribute__((always_inline)) bool nu_head(uint64_t acc, uint32_t nb, uint32_t k_mag, uint32_t k_nu,
                                                          uint32_t nu_left, uint32_t i, uint32_t changed,
                                                          int64_t *mag, uint32_t *head, uint32_t *nu_new) {
    uint64_t x = acc >> 1;
    uint32_t z = (uint32_t)__builtin_ctzll(x | 1ull << 62), low = z + k_mag;
    if (z > 32 - k_mag || 2 + z + low > nb) return false;
    *mag = (int64_t)(((1ull << low) | ((x >> (z + 1)) & ((1ull << low) - 1))) - (1ull << k_mag)) + 2;
    *head = 2 + z + low;
    *nu_new = UINT32_MAX;
    if (nu_left > 1) {
        uint64_t v = acc >> *head;
        uint32_t z2 = (uint32_t)__builtin_ctzll(v | 1ull << (63 - *head));
        if (*head + z2 + 1 + k_nu > nb) return false;
        uint64_t run = (uint64_t)z2 << k_nu | ((v >> (z2 + 1)) & ((1ull << k_nu) - 1));
        *nu_new = i + 1 + run >= changed ? UINT32_MAX - 1 : i + 1 + (uint32_t)run;
        *head += z2 + 1 + k_nu;
    }
    return true;
}

/* A cursor at the start of class e's stream: target is its first change's
 * rank (UINT64_MAX for a class without changes). */
static inline void class_cursor_start(class_cursor_t *q, const delta_class_t *e, const uint8_t *stream) {
    *q = (class_cursor_t){.j = 0, .left = e->changed, .nu_left = e->nonunit};
    bitr_init(&q->br, stream, e->len);
    q->nu_next = e->nonunit ? bitr_rice(&q->br, e->k_nu, e->changed) : 0;
    q->target = e->changed ? bitr_rice(&q->br, e->k_gap, e->count) : UINT64_MAX;
}

/* A fast loop's registers back into the cursor, for the general reader or
 * for later: the window (acc, nb bits, refilled up to p), the next change's
 * rank and index, and the non-unit changes left and the next one's index. */
static inline __attribute__((always_inline)) void class_cursor_put(class_cursor_t *q, const delta_class_t *e,
                                                                   uint64_t acc, uint32_t nb, const uint8_t *p,
                                                                   uint64_t target, uint32_t i, uint32_t nu_left,
                                                                   uint32_t nu_at) {
    q->br.acc = acc & ((1ull << nb) - 1); /* the general reader keeps nothing above the count */
    q->br.n = nb;
    q->br.p = p;
    q->target = target;
    q->j = i;
    q->left = e->changed - i;
    q->nu_left = nu_left;
    if (nu_left) q->nu_next = nu_at;
}

/* After the class's last change: every value was whole, every non-unit
 * change was met, and the stream ends there (bar its last byte's padding). */
static inline bool class_cursor_sound(const class_cursor_t *q, const delta_class_t *e) {
    return !q->br.overrun && q->nu_left == 0 && bitr_tell(&q->br) + 7 >= (uint64_t)e->len * 8;
}

/* ---- Format 2: a class's sub-streams, read as the walk places ----
 * The sub-streams lie back to back without padding, so one reader goes
 * through them in order: at each sub-block the cursor takes that
 * sub-stream's length from the (checked) length table and reads its first
 * codes, and the sub-stream ends where its length says, which must be at
 * the end of a change. Ranks are local to the sub-block; target holds them
 * chunk-wide (the class's elements before the sub-block added), as the
 * walk places them. The checks are delta_class2_decode's, bar one: a local
 * rank at or past the class's elements in its sub-block is never placed,
 * which the walk finds at the sub-block's end (target not UINT64_MAX). */
typedef struct sub_cursor {
    bitr_t br;        /* over the class's whole stream */
    uint64_t target;  /* rank in the class, chunk-wide, of the next change; UINT64_MAX: none left in the sub-block */
    uint64_t end;     /* the bit where the current sub-stream ends */
    uint32_t j;       /* index of the next change within the class (those before it are read) */
    uint32_t nu_at;   /* index within the class of the next non-unit change; UINT32_MAX in a class without */
    uint32_t nu_left; /* non-unit changes the class entry has left */
    uint32_t limit;   /* elements of the current sub-block: the most a gap or a run may be */
} sub_cursor_t;

static inline void sub_cursor_init(sub_cursor_t *q, const delta_class_t *e, const uint8_t *stream) {
    *q = (sub_cursor_t){.target = UINT64_MAX, .nu_at = UINT32_MAX, .nu_left = e->nonunit};
    bitr_init(&q->br, stream, e->len);
}

/* A sub-block starts: its sub-stream of len bits follows the last one's
 * end (which the cursor reached: target UINT64_MAX). Reads its first codes,
 * the index of its first non-unit change (in a class with any) and the
 * first change's local rank; before: the class's elements in earlier
 * sub-blocks. False when the stream is corrupt. */
static inline bool sub_cursor_begin(sub_cursor_t *q, const delta_class_t *e, uint32_t len, uint32_t sub_elems,
                                    uint64_t before) {
    q->end += len;
    q->limit = sub_elems;
    if (!len) return true; /* no change in the sub-block */
    bitr_t *r = &q->br;
    if (r->end - r->p >= 8 && q->j < e->changed) {
        /* both codes straight from a 64-bit window (once per class and
           sub-block, so worth it: the general reader refills per code);
           the general reader takes them where they do not fit it or
           where it would refuse them */
        const uint32_t kn = e->k_nu, kg = e->k_gap;
        uint32_t nb = r->n, used = 0;
        uint64_t acc = r->acc | get_u64(r->p) << nb, run = 0;
        const uint8_t *p = r->p + ((63 - nb) >> 3);
        nb |= 56;
        if (e->nonunit) {
            uint32_t z = (uint32_t)__builtin_ctzll(acc | 1ull << 63);
            used = z + 1 + kn;
            if (used > nb || z > (sub_elems >> kn)) goto general;
            run = (uint64_t)z << kn | ((acc >> (z + 1)) & ((1ull << kn) - 1));
        }
        uint64_t v = acc >> used;
        uint32_t z = (uint32_t)__builtin_ctzll(v | 1ull << (63 - used));
        if (used + z + 1 + kg > nb || z > (sub_elems >> kg)) goto general;
        uint64_t gap = (uint64_t)z << kg | ((v >> (z + 1)) & ((1ull << kg) - 1));
        used += z + 1 + kg;
        r->acc = (acc >> used) & ((1ull << (nb - used)) - 1);
        r->n = nb - used;
        r->p = p;
        if (e->nonunit) q->nu_at = q->j + (uint32_t)run;
        q->target = before + gap;
        return true;
    }
general:
    if (e->nonunit) q->nu_at = q->j + bitr_rice(r, e->k_nu, sub_elems);
    if (q->j >= e->changed) return false; /* more changes than the class has */
    q->target = before + bitr_rice(r, e->k_gap, sub_elems);
    return !r->overrun;
}

/* The general reader of one change of the current sub-stream (its rank is
 * target): its value change, then the next change's rank, or, where the
 * sub-stream ends, target UINT64_MAX. Anything wrong marks the reader
 * overrun: a code past the sub-stream, a value over the sub-block's
 * elements, more changes or non-unit changes than the class has, a
 * sub-stream that ends with its non-unit index short of its change count. */
static inline int64_t sub_next_value(sub_cursor_t *q, const delta_class_t *e) {
    bitr_t *r = &q->br;
    uint32_t neg = bitr_bits(r, 1);
    uint64_t a = 1;
    if (q->j == q->nu_at) {
        if (!q->nu_left) {
            r->overrun = true;
            return 0;
        }
        a = bitr_expg(r, e->k_mag) + 2;
        q->nu_at = q->j + 1 + bitr_rice(r, e->k_nu, q->limit);
        q->nu_left--;
    }
    q->j++;
    uint64_t pos = bitr_tell(r);
    if (pos > q->end) {
        r->overrun = true;
    } else if (pos == q->end) { /* the sub-stream's last change: its non-unit index must point past it */
        if (e->nonunit && q->nu_at != q->j) r->overrun = true;
        q->target = UINT64_MAX;
    } else {
        if (q->j >= e->changed) r->overrun = true; /* more changes than the class has */
        q->target += (uint64_t)bitr_rice(r, e->k_gap, q->limit) + 1;
    }
    return neg ? -(int64_t)a : (int64_t)a;
}

/* gap_step for a sub-stream: also false, consuming nothing, unless the
 * gap ends before the sub-stream does (rem: its bits left, negative when
 * the reader is past it), so that a change's last code and anything odd
 * go to the general reader. */
static inline __attribute__((always_inline)) bool sub_gap_step(uint64_t *acc, uint32_t *nb, int64_t *rem,
                                                               uint64_t *target, uint32_t head, uint32_t k,
                                                               int64_t mag, int64_t *delta_i) {
    uint64_t u = *acc >> head;
    uint32_t t = (uint32_t)__builtin_ctzll(u | 1ull << (63 - head));
    uint32_t used = head + t + 1 + k;
    if (used > *nb || (int64_t)used >= *rem) return false;
    int64_t neg = -(int64_t)(*acc & 1);
    *delta_i = (mag ^ neg) - neg;
    *target += ((uint64_t)t << k | ((u >> (t + 1)) & ((1ull << k) - 1))) + 1;
    *acc >>= used;
    *nb -= used;
    *rem -= used;
    return true;
}

/* A fast loop's registers back into the cursor (as class_cursor_put). */
static inline __attribute__((always_inline)) void sub_cursor_put(sub_cursor_t *q, uint64_t acc, uint32_t nb,
                                                                 const uint8_t *p, uint64_t target, uint32_t i,
                                                                 uint32_t nu_left, uint32_t nu_at) {
    q->br.acc = acc & ((1ull << nb) - 1);
    q->br.n = nb;
    q->br.p = p;
    q->target = target;
    q->j = i;
    q->nu_left = nu_left;
    q->nu_at = nu_at;
}

/* After the chunk's last sub-block: its sub-stream ended, every change and
 * non-unit change of the class entry was met, and the bits between the
 * sub-streams' end and the table (first: the bytes before it) are zero. */
static inline bool sub_cursor_sound(sub_cursor_t *q, const delta_class_t *e, uint64_t first) {
    if (q->target != UINT64_MAX || q->j != e->changed || q->nu_left || q->br.overrun) return false;
    uint32_t pad = (uint32_t)(first * 8 - q->end); /* under 8 (delta_class2_table), before the stream's end */
    return !pad || bitr_bits(&q->br, pad) == 0;
}

#endif
