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
#include <string.h>

#include "codec/delta_kern.h"

#ifdef __CUDACC__
#define DK_HD static __host__ __device__ __forceinline__
#else
#define DK_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define DK_CTZ64(x) ((uint32_t)(__ffsll((long long)(x)) - 1))
#define DK_CLZ32(x) ((uint32_t)__clz((int)(x)))
#define DK_CTZ32(x) ((uint32_t)(__ffs((int)(x)) - 1))
#else
#define DK_CTZ64(x) ((uint32_t)__builtin_ctzll(x))
#define DK_CLZ32(x) ((uint32_t)__builtin_clz(x))
#define DK_CTZ32(x) ((uint32_t)__builtin_ctz(x))
#endif

/* ---- a class stream, read as class_dec.h reads it ------------------------------ */

typedef struct dbits {
    const uint8_t *start, *p, *end;
    uint64_t acc;
    uint32_t n, pad;
    bool overrun;
    bool ahead;      /* GPU: w0, w1 hold the aligned words at and after p's, loaded ahead (br_top) */
    bool shared;     /* GPU: the bytes are in shared memory (dk_decode2's copy) */
    uint32_t w0, w1;
} dbits_t;

/* A reader of bytes [p, end). */
DK_HD dbits_t br_open(const uint8_t *p, const uint8_t *end) {
#ifdef __CUDA_ARCH__
    const bool sh = __isShared(p);
#else
    const bool sh = false;
#endif
    const dbits_t r = {p, p, end, 0, 0, 0, false, false, sh, 0, 0};
    return r;
}

/* The aligned word at a. On the GPU, from shared memory as a shared-memory
   load: through a pointer that may point to either, the compiler emits a
   generic load, and generic loads wait in the queue of loads and stores to
   device memory, behind the decode's stores (ncu, 2026-11-29). The memory
   clobber keeps it after the barrier that follows the copy. */
DK_HD uint32_t br_word(const uint32_t *a, bool shared) {
#ifdef __CUDA_ARCH__
    if (shared) {
        uint32_t v;
        asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"((uint32_t)__cvta_generic_to_shared(a)) : "memory");
        return v;
    }
#else
    (void)shared;
#endif
    return *a;
}

DK_HD void br_refill(dbits_t *r) {
    r->ahead = false; /* p moves by bytes */
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
           four bytes, instead of four byte loads and their bounds; both
           lie inside the buffer the stream is read from (the frames the
           apply copied to the device, or dk_decode2's copy in shared
           memory: 4-aligned where the stream's bytes are; and p + 7 <
           end). The word the next top-up needs is loaded now, so that its
           wait can fall behind the codes of these 32 bits (without it,
           format 1's decode took 3.5 ms against 3.3, format 2's the same
           2.8: H200, lr 1e-6, 2026-11-28). */
        const uint32_t *a = (const uint32_t *)((uintptr_t)p & ~(uintptr_t)3);
        const uint32_t w0 = r->ahead ? r->w0 : br_word(a, r->shared), w1 = r->ahead ? r->w1 : br_word(a + 1, r->shared);
        const uint32_t v = __funnelshift_r(w0, w1, 8u * (uint32_t)((uintptr_t)p & 3));
        r->ahead = r->end - p >= 12; /* the next top-up takes this path too */
        r->w0 = w1;
        if (r->ahead) r->w1 = br_word(a + 2, r->shared);
        r->acc |= (uint64_t)v << r->n;
        r->n += 32;
        r->p = p + 4;
        return;
    }
    r->ahead = false;
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

/* ---- codes read straight from the window ----
 * The decoders below read most of a change's codes from the low 32 bits
 * of the window in 32-bit arithmetic, and take the general reader for
 * what does not fit there (a long code, a broken limit, the stream's end),
 * from the same place, with the same values and verdicts. Doing little per
 * change, with few branches, matters on a GPU: its lanes decode different
 * streams, and every path one lane takes, the whole warp waits through
 * (the general reader's non-unit path, taken by some lane nearly every
 * step, cost 5x the one-ulp path's instructions; ncu, 2026-11-28). */

/* bits [at, at + 32) of the window (at < 32) */
DK_HD uint32_t win32(uint64_t acc, uint32_t at) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r((uint32_t)acc, (uint32_t)(acc >> 32), at);
#else
    return (uint32_t)(acc >> at);
#endif
}

/* Consumes the first `used` bits of the window (used <= 32), as br_skip. */
DK_HD void br_drop(dbits_t *r, uint32_t used) {
#ifdef __CUDA_ARCH__
    const uint32_t lo = (uint32_t)r->acc, hi = (uint32_t)(r->acc >> 32);
    r->acc = (uint64_t)__funnelshift_rc(hi, 0u, used) << 32 | __funnelshift_rc(lo, hi, used);
#else
    r->acc >>= used;
#endif
    r->n -= used;
    if (r->n < r->pad) r->overrun = true;
}

/* After the window's first a bits (a < 32; the window topped up), a
   Rice(k) code into *v, then b bits (0 or 1) into *after: all consumed
   when they end in the window's low 32 bits and the quotient keeps
   limit >> k; false, consuming nothing, otherwise. */
DK_HD bool rice_low(dbits_t *r, uint32_t a, uint32_t b, uint32_t k, uint32_t limit, uint32_t *v, uint32_t *after) {
    const uint32_t x = win32(r->acc, a);
    if (!x) return false;
    const uint32_t t = DK_CTZ32(x), e = a + t + 1 + k + b;
    if (e > 32 || t > (limit >> k)) return false;
    const uint32_t rest = x >> t >> 1; /* the bits after the code's one */
    *v = t << k | (rest & ((1u << k) - 1));
    *after = b ? (rest >> k) & 1 : 0;
    br_drop(r, e);
    return true;
}

/* After the window's first a bits (a: 0 or 1; the window topped up), a
   non-unit change's magnitude (ExpGolomb(|d| - 2, k_mag)) into *mag, then
   when run_follows the run to the next non-unit change (Rice(k_nu), at
   most run_limit) into *run: consumed when all of it ends in the window's
   low 32 bits; false, consuming nothing, otherwise. */
DK_HD bool nu_low(dbits_t *r, uint32_t a, uint32_t k_mag, bool run_follows, uint32_t k_nu, uint32_t run_limit,
                  uint64_t *mag, uint32_t *run) {
    const uint32_t x = win32(r->acc, a);
    if (!x) return false;
    const uint32_t z = DK_CTZ32(x), low = z + k_mag, e = a + z + 1 + low; /* low <= 31 once e <= 32 */
    if (z > 32 - k_mag || e > 32) return false;
    const uint32_t value = ((1u << low) | ((x >> z >> 1) & ((1u << low) - 1))) - (1u << k_mag);
    uint32_t used = e, rv = 0;
    if (run_follows) {
        if (e >= 32) return false;
        const uint32_t y = win32(r->acc, e);
        if (!y) return false;
        const uint32_t z2 = DK_CTZ32(y);
        used = e + z2 + 1 + k_nu;
        if (used > 32 || z2 > (run_limit >> k_nu)) return false;
        rv = z2 << k_nu | ((y >> z2 >> 1) & ((1u << k_nu) - 1));
    }
    br_drop(r, used);
    *mag = (uint64_t)value + 2;
    *run = rv;
    return true;
}

/* ---- the decoded changes ----
 * The decoders write 16 bytes at a time into 16-aligned slots: each lane's
 * 4- and 8-byte stores, one per change to addresses of its own, were half
 * of format 1's decode (2026-11-28). decode_class (format 1) keeps a group
 * of 4 ranks and 2 value changes in registers (dk_group_t); decode_sub
 * (format 2) two packed entries (dk_pack, below). The last group's slots
 * past the changes get 0 (value change 0: nothing there for the undo). */

DK_HD void store4(uint32_t *p, uint32_t a, uint32_t b, uint32_t c, uint32_t d) { /* p 16-aligned */
#ifdef __CUDA_ARCH__
    *(uint4 *)p = make_uint4(a, b, c, d);
#else
    const uint32_t v[4] = {a, b, c, d};
    memcpy(p, v, sizeof v);
#endif
}
DK_HD void store2(int64_t *p, int64_t a, int64_t b) { /* p 16-aligned */
#ifdef __CUDA_ARCH__
    *(longlong2 *)p = make_longlong2(a, b);
#else
    const int64_t v[2] = {a, b};
    memcpy(p, v, sizeof v);
#endif
}

/* The group being gathered: the ranks of changes 4x .. 4x + 2, and an
   even change's value change. */
typedef struct dk_group {
    uint32_t q0, q1, q2;
    int64_t dq;
} dk_group_t;

/* Change j's rank, stored with its group's 4th. */
DK_HD void group_rank(dk_group_t *g, uint32_t *rank, uint32_t j, uint32_t rk) {
    const uint32_t m = j & 3;
    g->q0 = m == 0 ? rk : g->q0;
    g->q1 = m == 1 ? rk : g->q1;
    g->q2 = m == 2 ? rk : g->q2;
    if (m == 3) store4(rank + j - 3, g->q0, g->q1, g->q2, rk);
}

/* Change j's value change, stored with its pair's second. An odd change
   leaves dq as it is (no one reads it before the next even one): written
   right after the store, its register would wait until the store had read
   it, and stores queue (ncu, 2026-11-29). */
DK_HD void group_delta(dk_group_t *g, int64_t *delta, uint32_t j, int64_t dv) {
    if (j & 1) store2(delta + j - 1, g->dq, dv);
    else g->dq = dv;
}

/* Format 2's decoded changes, one 8-byte entry each: the rank (local to
   the sub-block: below 2^DELTA_SUB_LOG2_MAX, 2^24) in the low 24 bits, the
   value change above them (a decoded magnitude is below 2^34, so it fits
   with its sign in 40 bits). A change took a 4-byte rank and an 8-byte
   value change before, in two arrays: the decode waited on its stores
   (ncu, 2026-11-29: a third of its stall samples were on the store
   queue), and a 16-byte store now holds two changes, not 4/3. The write
   pass replaces the rank by the element's place in its sub-block once it
   is written (the undo's log); entry 0 (value change 0): nothing written. */
DK_HD int64_t dk_pack(uint32_t rank, int64_t d) { return (int64_t)((uint64_t)d << DK_PACK_RANK_BITS | rank); }
DK_HD uint32_t dk_pack_rank(int64_t p) { return (uint32_t)p & ((1u << DK_PACK_RANK_BITS) - 1); }
DK_HD int64_t dk_pack_delta(int64_t p) { return p >> DK_PACK_RANK_BITS; } /* arithmetic: the sign comes down */

/* After n changes: the last group, its slots past them 0. */
DK_HD void group_end(const dk_group_t *g, uint32_t *rank, int64_t *delta, uint32_t n) {
    if (n & 3) store4(rank + (n & ~3u), g->q0, n % 4 > 1 ? g->q1 : 0, n % 4 > 2 ? g->q2 : 0, 0);
    if (n & 1) store2(delta + n - 1, g->dq, 0);
    if (((n + 1) & ~1u) & 3) store2(delta + ((n + 1) & ~1u), 0, 0);
}

/* One class's changes in rank order; false when the stream is malformed, a
   rank falls past the class's elements or the stream does not end with its
   last change (class_cursor_start, next_value, class_cursor_sound). A
   one-ulp change's sign bit and the gap to the next change are read at
   once from the window; a non-unit change's magnitude and run at once,
   then its gap (above). rank and delta are 16-aligned with room for
   changed rounded up to 4: written a group at a time (above), the slots
   past the last change with rank and delta 0. */
DK_HD bool decode_class(const dk_class_t *e, uint32_t *rank, int64_t *delta) {
    dbits_t r = br_open((const uint8_t *)e->stream, (const uint8_t *)e->stream + e->len);
    /* the class's fields in locals: the stores to rank and delta could
       alias *e, so reading them from *e in the loop loads them again per
       change (from memory, on the GPU) */
    const uint32_t changed = e->changed, count = e->count, k_gap = e->k_gap, k_nu = e->k_nu, k_mag = e->k_mag;
    uint32_t nu_left = e->nonunit, nu_next = nu_left ? br_rice_fast(&r, k_nu, changed) : 0;
    uint64_t target = changed ? br_rice_fast(&r, k_gap, count) : UINT64_MAX;
    bool past = false;
    dk_group_t grp = {0, 0, 0, 0};
    for (uint32_t j = 0; j < changed && !r.overrun; j++) {
        past |= target >= count;
        group_rank(&grp, rank, j, (uint32_t)target);
        br_top(&r);
        const uint32_t neg = (uint32_t)(r.acc & 1);
        const bool last = j + 1 == changed;
        uint32_t gap = 0, unused;
        uint64_t a = 1;
        if (nu_left && j == nu_next) {
            uint32_t run = 0;
            if (!nu_low(&r, 1, k_mag, nu_left > 1, k_nu, changed, &a, &run)) {
                br_skip(&r, 1);
                a = br_expg(&r, k_mag) + 2;
                if (nu_left > 1) run = br_rice_fast(&r, k_nu, changed);
            }
            if (--nu_left) {
                nu_next += run + 1;
                if (nu_next >= changed) r.overrun = true;
            }
            if (!last) {
                br_top(&r);
                if (!rice_low(&r, 0, 0, k_gap, count, &gap, &unused)) gap = br_rice_fast(&r, k_gap, count);
            }
        } else if (last) {
            br_skip(&r, 1);
        } else if (!rice_low(&r, 1, 0, k_gap, count, &gap, &unused)) {
            br_skip(&r, 1);
            gap = br_rice_fast(&r, k_gap, count);
        }
        target = last ? UINT64_MAX : target + gap + 1;
        group_delta(&grp, delta, j, neg ? -(int64_t)a : (int64_t)a);
    }
    group_end(&grp, rank, delta, changed);
    uint64_t tell = (uint64_t)(r.p - r.start) * 8 + r.pad - r.n;
    return !past && !r.overrun && nu_left == 0 && tell + 7 >= (uint64_t)e->len * 8;
}

/* Format 2: class e's (index i) sub-stream table from its length table at
   the end of its stream: subs[b] = (slot, bit, bits) for each of its nsub
   sub-streams (a sub-stream's slots, bits / (2 + k_gap), rounded up to 4;
   e->change0 is a multiple of 4), *slot_end the end of the slots they
   take, *class_end of those the class has (host: delta_cuda.c's
   class_slots, whose rounding this bounds). False when the
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
    dbits_t r = br_open(st + part, st + (ok ? e->len : part));
    uint64_t bit = 0, slot = e->change0;
    uint32_t longest = 0;
    const uint32_t nsub = e->nsub, len_bits = e->len_bits, per = 2 + e->k_gap; /* locals: subs could alias *e */
    for (uint32_t x = 0; x < nsub; x++) {
        const uint32_t len = ok ? br_bits(&r, len_bits) : 0;
        subs[x] = (dk_sub_t){slot, bit, len, 0, i, 0};
        bit += len;
        slot += (len / per + 3) & ~3u; /* 16-aligned for decode_sub's stores, as change0 is */
        longest = len > longest ? len : longest;
    }
    const uint32_t tail = (uint32_t)(table * 8 - (uint64_t)e->nsub * e->len_bits);
    const bool sound = ok && !r.overrun && (bit + 7) / 8 == part &&
                       e->len_bits == (longest ? 32u - DK_CLZ32(longest) : 0u) &&
                       (!tail || br_bits(&r, tail) == 0) && !r.overrun &&
                       (bit % 8 == 0 || !(st[part - 1] >> (bit % 8)));
    *slot_end = slot;
    *class_end = e->change0 + part * 8 / (2 + e->k_gap) + 3 * (uint64_t)nsub;
    return sound;
}

/* Format 2: the bytes of class e's stream that sub-stream sb is read
   from, [*from, *to): its first byte to the one holding its last bit,
   within the stream's first part. Reading no further changes no verdict: a
   sub-stream that reads past its last bit is refused either way (its end
   is not where its length says, or it runs out of bits). */
DK_HD void dk_sub_span(const dk_class_t *e, const dk_sub_t *sb, uint64_t *from, uint64_t *to) {
    const uint64_t table = ((uint64_t)e->nsub * e->len_bits + 7) / 8, part = table <= e->len ? e->len - table : 0;
    const uint64_t f = sb->bit / 8, t = (sb->bit + sb->bits + 7) / 8;
    *from = f < part ? f : part;
    *to = t < part ? t : part;
}

/* Format 2: one sub-stream's changes, ranks local to its sub-block, into
   its slots as packed entries (dk_pack); false when malformed
   (docs/delta-format.md, format 2: a code past its length, an end not at a
   change's end, the non-unit index not ending at the change count, a rank
   past the sub-block). limit: the sub-block's elements, at most 2^24. st:
   where the class stream's bytes are read (e->stream, or a copy of the
   bytes dk_sub_span names). Each change's codes come from the window at
   once, and two changes are written with one 16-byte store: its slots
   start 16-aligned (dk_table), and those past its changes up to a multiple
   of 4 get 0; the rest are left as they are (the undo walks each
   sub-stream's count, dk_undo). */
DK_HD bool decode_sub(const dk_class_t *e, const uint8_t *st, dk_sub_t *sb, uint32_t limit, int64_t *packed,
                      uint32_t *nonunit_out) {
    uint64_t from, to;
    dk_sub_span(e, sb, &from, &to);
    const uint8_t *p = st + from;
    dbits_t r = br_open(p, st + to);
    /* the class's and the sub-stream's fields in locals (decode_class says
       why; read from *sb after the loop, the GPU's lanes each waited on the
       load on their own, 15% of the pass: ncu, 2026-11-29) */
    const uint32_t k_gap = e->k_gap, k_nu = e->k_nu, k_mag = e->k_mag, has_nu = e->nonunit != 0;
    const uint32_t bits = sb->bits, skip = (uint32_t)(sb->bit % 8), cap = bits / (2 + k_gap);
    br_top(&r); /* 4 bytes at once (on the GPU, aligned words), not br_refill's 8 loads one after another */
    br_skip(&r, skip);
    const uint64_t end = skip + (uint64_t)bits;
    uint32_t m = 0, nu = 0, nu_next = 0;
    int64_t even = 0;       /* an even change's entry, stored with the next one's */
    uint64_t next_rank = 0; /* the lowest rank the next change may have */
    bool bad = false;
#ifdef __CUDA_ARCH__
    /* The lanes that decode a sub-stream together, made to meet again after
       the loop: else each lane, once its own sub-stream ended, ran the rest
       alone (ncu, 2026-11-29: 660 K runs of it by one lane each, a tenth of
       the pass's stalls). */
    const unsigned lanes = __activemask();
#endif
    if (bits && has_nu) nu_next = br_rice_fast(&r, k_nu, limit);
    while (!r.overrun && (uint64_t)(r.p - r.start) * 8 + r.pad - r.n < end) {
        if (m >= cap) {
            bad = true;
            break;
        }
        br_top(&r);
        uint32_t gap, neg;
        if (!rice_low(&r, 0, 1, k_gap, limit, &gap, &neg)) { /* the gap and the sign bit */
            gap = br_rice_fast(&r, k_gap, limit);
            br_top(&r);
            neg = (uint32_t)(r.acc & 1);
            br_skip(&r, 1);
        }
        const uint64_t rk = next_rank + gap;
        uint64_t a = 1;
        if (has_nu && m == nu_next) {
            uint32_t run;
            br_top(&r);
            if (!nu_low(&r, 0, k_mag, true, k_nu, limit, &a, &run)) {
                a = br_expg(&r, k_mag) + 2;
                run = br_rice_fast(&r, k_nu, limit);
            }
            nu_next = m + 1 + run;
            nu++;
        }
        if (rk >= limit) {
            bad = true;
            break;
        }
        const int64_t en = dk_pack((uint32_t)rk, neg ? -(int64_t)a : (int64_t)a);
        if (m & 1) store2(packed + m - 1, even, en);
        else even = en; /* not written after the store: the store's register would hold it up (group_delta) */
        next_rank = rk + 1;
        m++;
    }
#ifdef __CUDA_ARCH__
    __syncwarp(lanes);
#endif
    if (bad) return false;
    if (m & 1) store2(packed + m - 1, even, 0);
    if (((m + 1) & ~1u) & 3) store2(packed + ((m + 1) & ~1u), 0, 0);
    const uint64_t tell = (uint64_t)(r.p - r.start) * 8 + r.pad - r.n;
    sb->count = m;
    *nonunit_out = nu;
    return !r.overrun && tell == end && (bits == 0 || m > 0) && (!has_nu || m == 0 || nu_next == m);
}

#endif
