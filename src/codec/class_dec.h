/* Reading one magnitude class's stream of a sparse chunk, change by change:
 * shared by the decoder that writes a class's changes out (chunk_apply.c)
 * and the AVX-512 walk that places them as it reads (apply_avx512.c). */
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

#endif
