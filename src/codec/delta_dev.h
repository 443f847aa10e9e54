/* Reading class streams (docs/delta-format.md, formats 1 and 2) as the GPU
 * apply does (codec/delta.cu): the bit reader, a format 1 class, a format 2
 * class's length table and one of its sub-streams. Host and device code
 * alike, so that test_delta_dev.c runs exactly these on the CPU against the
 * CPU codec's own reader, in CI, where no GPU is. Streams are plain
 * addresses the caller may read (device memory on a GPU). */
#ifndef FERRY_CODEC_DELTA_DEV_H
#define FERRY_CODEC_DELTA_DEV_H

#include <stdbool.h>
#include <stdint.h>

#include "codec/delta_kern.h"

#ifdef __CUDACC__
#define DK_HD static __host__ __device__ __forceinline__
#else
#define DK_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define DK_CTZ64(x) ((uint32_t)(__ffsll((long long)(x)) - 1))
#define DK_CLZ32(x) ((uint32_t)__clz((int)(x)))
#else
#define DK_CTZ64(x) ((uint32_t)__builtin_ctzll(x))
#define DK_CLZ32(x) ((uint32_t)__builtin_clz(x))
#endif

/* ---- a class stream, read as class_dec.h reads it ------------------------------ */

typedef struct dbits {
    const uint8_t *start, *p, *end;
    uint64_t acc;
    uint32_t n, pad;
    bool overrun;
} dbits_t;

DK_HD void br_refill(dbits_t *r) {
    while (r->n <= 56) {
        uint64_t b = 0;
        if (r->p < r->end) b = *r->p++;
        else r->pad += 8;
        r->acc |= b << r->n;
        r->n += 8;
    }
}
DK_HD void br_skip(dbits_t *r, uint32_t n) {
    r->acc = n >= 64 ? 0 : r->acc >> n;
    r->n -= n;
    if (r->n < r->pad) r->overrun = true;
}
DK_HD uint32_t br_bits(dbits_t *r, uint32_t n) { /* n <= 32 */
    br_refill(r);
    uint32_t v = (uint32_t)(r->acc & ((1ull << n) - 1));
    br_skip(r, n);
    return v;
}
DK_HD uint32_t br_rice(dbits_t *r, uint32_t k, uint32_t limit) {
    uint64_t q = 0;
    for (;;) {
        br_refill(r);
        if (r->acc == 0) {
            q += r->n;
            br_skip(r, r->n);
            if (r->overrun || q > limit) {
                r->overrun = true;
                return 0;
            }
            continue;
        }
        uint32_t t = DK_CTZ64(r->acc);
        q += t;
        br_skip(r, t + 1);
        break;
    }
    uint32_t low = k ? br_bits(r, k) : 0;
    if (r->overrun || q > (uint64_t)(limit >> k)) {
        r->overrun = true;
        return 0;
    }
    return (uint32_t)(q << k) | low;
}
DK_HD uint64_t br_expg(dbits_t *r, uint32_t k) {
    uint32_t extra = br_rice(r, 0, 33 - k - 1);
    if (r->overrun) return 0;
    uint32_t low = extra + k;
    uint64_t x = 1ull << low;
    if (low > 32) {
        x |= br_bits(r, 32);
        x |= (uint64_t)br_bits(r, low - 32) << 32;
    } else if (low) {
        x |= br_bits(r, low);
    }
    return x - (1ull << k);
}

/* Tops the window up by 4 bytes when it holds 32 bits or fewer: four
   independent byte loads (one wait, not four), zeros past the end counted
   as padding, as br_refill does one byte at a time. */
DK_HD void br_top(dbits_t *r) {
    if (r->n > 32) return;
    const uint8_t *p = r->p;
#ifdef __CUDA_ARCH__
    if (r->end - p >= 8) {
        /* on the GPU, far from the end: the two aligned words holding the
           four bytes, through the read-only cache (the stream does not
           change while it is read), instead of four byte loads and their
           bounds; both lie inside the frame buffer the apply copied the
           frames into (cudaMalloc'd, so 4-aligned; and p + 7 < end) */
        const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
        const uint32_t v = __funnelshift_r(__ldg(a), __ldg(a + 1), 8u * (uint32_t)((uintptr_t)p & 3));
        r->acc |= (uint64_t)v << r->n;
        r->n += 32;
        r->p = p + 4;
        return;
    }
#endif
    uint32_t b0 = p < r->end ? p[0] : 0, b1 = p + 1 < r->end ? p[1] : 0, b2 = p + 2 < r->end ? p[2] : 0,
             b3 = p + 3 < r->end ? p[3] : 0;
    const uint32_t have = r->end - p >= 4 ? 4 : (uint32_t)(r->end - p);
    r->acc |= (uint64_t)(b0 | b1 << 8 | b2 << 16 | b3 << 24) << r->n;
    r->n += 32;
    r->pad += 8 * (4 - have);
    r->p += have;
}

/* Rice(k) with at most `limit`, from the window when the code is in it
   (the common case: a short quotient), else br_rice. */
DK_HD uint32_t br_rice_fast(dbits_t *r, uint32_t k, uint32_t limit) {
    br_top(r);
    const uint64_t win = r->n >= 64 ? r->acc : r->acc & ((1ull << r->n) - 1);
    if (win) {
        const uint32_t t = DK_CTZ64(win), used = t + 1 + k;
        if (used <= r->n) {
            const uint32_t low = (uint32_t)((r->acc >> (t + 1)) & ((1ull << k) - 1));
            br_skip(r, used);
            if (r->overrun || t > (limit >> k)) {
                r->overrun = true;
                return 0;
            }
            return t << k | low;
        }
    }
    return br_rice(r, k, limit);
}

/* One class's changes in rank order; false when the stream is malformed, a
   rank falls past the class's elements or the stream does not end with its
   last change (class_cursor_start, next_value, class_cursor_sound). The
   window is topped up 4 bytes at a time and short codes are read straight
   from it; long ones take the general reader, which gives the same values
   and the same verdicts. */
DK_HD bool decode_class(const dk_class_t *e, uint32_t *rank, int64_t *delta) {
    dbits_t r = {(const uint8_t *)e->stream, (const uint8_t *)e->stream, (const uint8_t *)e->stream + e->len, 0, 0, 0,
                 false};
    /* the class's fields in locals: the stores to rank and delta could
       alias *e, so reading them from *e in the loop loads them again per
       change (from memory, on the GPU) */
    const uint32_t changed = e->changed, count = e->count, k_gap = e->k_gap, k_nu = e->k_nu, k_mag = e->k_mag;
    uint32_t nu_left = e->nonunit, nu_next = nu_left ? br_rice_fast(&r, k_nu, changed) : 0;
    uint64_t target = changed ? br_rice_fast(&r, k_gap, count) : UINT64_MAX;
    bool past = false;
    for (uint32_t j = 0; j < changed && !r.overrun; j++) {
        past |= target >= count;
        rank[j] = (uint32_t)target;
        br_top(&r);
        const uint32_t neg = (uint32_t)(r.acc & 1);
        br_skip(&r, 1);
        uint64_t a = 1;
        if (nu_left && j == nu_next) {
            a = br_expg(&r, k_mag) + 2;
            if (--nu_left) {
                nu_next += br_rice_fast(&r, k_nu, changed) + 1;
                if (nu_next >= changed) r.overrun = true;
            }
        }
        target = j + 1 == changed ? UINT64_MAX : target + (uint64_t)br_rice_fast(&r, k_gap, count) + 1;
        delta[j] = neg ? -(int64_t)a : (int64_t)a;
    }
    uint64_t tell = (uint64_t)(r.p - r.start) * 8 + r.pad - r.n;
    return !past && !r.overrun && nu_left == 0 && tell + 7 >= (uint64_t)e->len * 8;
}

/* Format 2: class e's (index i) sub-stream table from its length table at
   the end of its stream: subs[b] = (slot, bit, bits) for each of its nsub
   sub-streams, *slot_end the end of the slots they take, *class_end of
   those the class has (host: delta_cuda.c's class_slots). False when the
   table is unsound as the CPU reader judges it (the lengths add up to the
   codes' bits less under a byte of zero padding, W is the longest length's
   bit count, the table's padding is zero); with ok false (the chunk is
   refused already) every entry is written empty. */
DK_HD bool dk_table(const dk_class_t *e, uint32_t i, bool ok, dk_sub_t *subs, uint64_t *slot_end,
                    uint64_t *class_end) {
    const uint64_t table = ((uint64_t)e->nsub * e->len_bits + 7) / 8;
    ok = ok && table <= e->len;
    const uint64_t part = ok ? e->len - table : 0;
    const uint8_t *st = (const uint8_t *)(uintptr_t)e->stream;
    dbits_t r = {st + part, st + part, st + (ok ? e->len : part), 0, 0, 0, false};
    uint64_t bit = 0, slot = e->change0;
    uint32_t longest = 0;
    const uint32_t nsub = e->nsub, len_bits = e->len_bits, per = 2 + e->k_gap; /* locals: subs could alias *e */
    for (uint32_t x = 0; x < nsub; x++) {
        const uint32_t len = ok ? br_bits(&r, len_bits) : 0;
        subs[x] = (dk_sub_t){slot, bit, len, 0, i, 0};
        bit += len;
        slot += len / per;
        longest = len > longest ? len : longest;
    }
    const uint32_t tail = (uint32_t)(table * 8 - (uint64_t)e->nsub * e->len_bits);
    const bool sound = ok && !r.overrun && (bit + 7) / 8 == part &&
                       e->len_bits == (longest ? 32u - DK_CLZ32(longest) : 0u) &&
                       (!tail || br_bits(&r, tail) == 0) && !r.overrun &&
                       (bit % 8 == 0 || !(st[part - 1] >> (bit % 8)));
    *slot_end = slot;
    *class_end = e->change0 + part * 8 / (2 + e->k_gap);
    return sound;
}

/* Format 2: one sub-stream's changes, ranks local to its sub-block, into
   its slots; false when malformed (docs/delta-format.md, format 2: a code
   past its length, an end not at a change's end, the non-unit index not
   ending at the change count, a rank past the sub-block). */
DK_HD bool decode_sub(const dk_class_t *e, dk_sub_t *sb, uint32_t limit, uint32_t *rank, int64_t *delta,
                                  uint32_t *nonunit_out) {
    const uint64_t table = ((uint64_t)e->nsub * e->len_bits + 7) / 8;
    const uint8_t *st = (const uint8_t *)e->stream, *p = st + sb->bit / 8;
    dbits_t r = {p, p, st + (e->len - table), 0, 0, 0, false};
    /* the class's fields in locals (decode_class says why) */
    const uint32_t k_gap = e->k_gap, k_nu = e->k_nu, k_mag = e->k_mag, has_nu = e->nonunit != 0;
    const uint32_t skip = (uint32_t)(sb->bit % 8), cap = sb->bits / (2 + k_gap);
    br_refill(&r);
    br_skip(&r, skip);
    const uint64_t end = skip + (uint64_t)sb->bits;
    uint32_t m = 0, nu = 0, nu_next = 0;
    uint64_t next_rank = 0; /* the lowest rank the next change may have */
    if (sb->bits && has_nu) nu_next = br_rice_fast(&r, k_nu, limit);
    while (!r.overrun && (uint64_t)(r.p - r.start) * 8 + r.pad - r.n < end) {
        if (m >= cap) return false;
        const uint64_t rk = next_rank + br_rice_fast(&r, k_gap, limit);
        br_top(&r);
        const uint32_t neg = (uint32_t)(r.acc & 1);
        br_skip(&r, 1);
        uint64_t a = 1;
        if (has_nu && m == nu_next) {
            a = br_expg(&r, k_mag) + 2;
            nu_next = m + 1 + br_rice_fast(&r, k_nu, limit);
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
    for (uint32_t j = m; j < cap; j++) delta[j] = 0; /* unused slots: nothing to undo */
    return !r.overrun && tell == end && (sb->bits == 0 || m > 0) && (!has_nu || m == 0 || nu_next == m);
}

#endif
