/* The second half of applying a sparse chunk, included once per instruction
 * set (chunk_apply.c: baseline and x86-64-v3 clones; apply_avx512.c:
 * AVX-512BW with BMI2). Each class's changes are already decoded into rank
 * order; this walks the chunk a batch of 64 blocks at a time: the batch's
 * class masks from the base, then for each change its block (by counting the
 * blocks wholly before its rank: no branch per block) and its element (select
 * in the block's class mask), the write, the undo entry, and the batch's
 * share of the next checksum while the batch is still in cache.
 *
 * The includer defines APPLY_BATCHES_FN (the function's name), and may define
 * APPLY_ATTR (attributes), APPLY_LINKAGE (static unless set) and APPLY_AVX512 (use AVX-512BW compares and PDEP,
 * which every AVX-512 CPU runs fast). */
#ifndef APPLY_ATTR
#define APPLY_ATTR
#endif
#ifndef APPLY_LINKAGE
#define APPLY_LINKAGE static
#endif

#ifdef APPLY_AVX512
/* A class's running counts over the batch's 64 blocks, as two vectors of
 * 32 u16 (block b's count includes b) that each change's block search
 * compares against, and in memory (up[b + 1]) for the count before a block. */
typedef struct class_prefix {
    __m512i lo, hi;
} class_prefix_t;

/* Inclusive prefix sums of the popcounts of 8 masks, plus carry. */
APPLY_ATTR static inline __m512i prefix8(__m512i m, __m512i *carry) {
    const __m512i z = _mm512_setzero_si512();
    __m512i x = _mm512_popcnt_epi64(m);
    x = _mm512_add_epi64(x, _mm512_alignr_epi64(x, z, 7)); /* lanes shifted up by 1 */
    x = _mm512_add_epi64(x, _mm512_alignr_epi64(x, z, 6)); /* by 2 */
    x = _mm512_add_epi64(x, _mm512_alignr_epi64(x, z, 4)); /* by 4 */
    x = _mm512_add_epi64(x, *carry);
    *carry = _mm512_permutexvar_epi64(_mm512_set1_epi64(7), x);
    return x;
}

/* Fills the class's prefix from its 64 block masks (blocks past the batch
 * hold 0 and count as full: their counts sit above every rank); returns
 * the class's elements in the batch. */
APPLY_ATTR static inline uint32_t class_prefix(const uint64_t *cm, uint32_t nblk, class_prefix_t *p, uint16_t *up) {
    __m512i carry = _mm512_setzero_si512();
    __m128i q[8];
    for (int i = 0; i < 8; i++) q[i] = _mm512_cvtepi64_epi16(prefix8(_mm512_loadu_si512((const void *)(cm + 8 * i)), &carry));
    uint32_t run = (uint32_t)_mm_extract_epi16(q[7], 7);
    __m512i lo = _mm512_castsi128_si512(q[0]), hi = _mm512_castsi128_si512(q[4]);
    lo = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(lo, q[1], 1), q[2], 2), q[3], 3);
    hi = _mm512_inserti32x4(_mm512_inserti32x4(_mm512_inserti32x4(hi, q[5], 1), q[6], 2), q[7], 3);
    if (nblk < DELTA_MASK_BATCH) {
        const __m512i top = _mm512_set1_epi16(-1);
        uint64_t past = ~0ull << nblk;
        lo = _mm512_mask_mov_epi16(lo, (__mmask32)past, top);
        hi = _mm512_mask_mov_epi16(hi, (__mmask32)(past >> 32), top);
    }
    _mm512_storeu_si512((void *)(up + 1), lo);
    _mm512_storeu_si512((void *)(up + 33), hi);
    p->lo = lo;
    p->hi = hi;
    return run;
}

APPLY_ATTR static inline uint32_t apply_block_of(const class_prefix_t *p, uint32_t t) {
    __m512i tv = _mm512_set1_epi16((short)t);
    __mmask32 lo = _mm512_cmple_epu16_mask(p->lo, tv), hi = _mm512_cmple_epu16_mask(p->hi, tv);
    return (uint32_t)__builtin_popcount((uint32_t)lo) + (uint32_t)__builtin_popcount((uint32_t)hi);
}

/* Per block of the batch, each class's mask: cm[k][b]. Blocks past the
 * batch get 0. base holds ahead bytes from the batch's start. */
APPLY_ATTR static inline void class_masks(const uint8_t *base, uint32_t w, uint32_t nel, const uint32_t *lower,
                                          uint32_t K, uint64_t cm[][DELTA_MASK_BATCH], size_t ahead) {
    uint32_t full = nel / 64, nblk = (nel + 63) / 64;
    __m512i t[FERRY_DELTA_CLASSES_MAX];
    uint32_t top = mag_mask(w) + 1;
    for (uint32_t k = 1; k < K; k++) {
        uint32_t c = lower[k] > top ? top : lower[k];
        t[k] = w == 2 ? _mm512_set1_epi16((short)c) : w == 4 ? _mm512_set1_epi32((int)c) : _mm512_set1_epi8((char)c);
    }
    for (uint32_t b = 0; b < full; b++) {
        const uint8_t *bp = base + (size_t)b * 64 * w;
        uint64_t prev = ~0ull;
        /* the same block of the next batch on its way from memory; spread
           over the loop (all at once they overflow the miss buffers and the
           loads here wait anyway) */
        if ((size_t)(b + DELTA_MASK_BATCH + 1) * 64 * w <= ahead)
            for (uint32_t o = 0; o < 64 * w; o += 64) __builtin_prefetch(bp + (size_t)DELTA_MASK_BATCH * 64 * w + o);
        if (w == 2) {
            const __m512i mm = _mm512_set1_epi16(0x7FFF);
            __m512i m0 = _mm512_and_si512(_mm512_loadu_si512((const void *)bp), mm);
            __m512i m1 = _mm512_and_si512(_mm512_loadu_si512((const void *)(bp + 64)), mm);
            for (uint32_t k = 1; k < K; k++) {
                uint64_t g = (uint64_t)_mm512_cmpge_epu16_mask(m0, t[k]) | (uint64_t)_mm512_cmpge_epu16_mask(m1, t[k]) << 32;
                cm[k - 1][b] = prev & ~g;
                prev = g;
            }
        } else if (w == 4) {
            const __m512i mm = _mm512_set1_epi32(0x7FFFFFFF);
            __m512i m[4];
            for (int i = 0; i < 4; i++) m[i] = _mm512_and_si512(_mm512_loadu_si512((const void *)(bp + 64 * i)), mm);
            for (uint32_t k = 1; k < K; k++) {
                uint64_t g = 0;
                for (int i = 0; i < 4; i++) g |= (uint64_t)_mm512_cmpge_epu32_mask(m[i], t[k]) << (16 * i);
                cm[k - 1][b] = prev & ~g;
                prev = g;
            }
        } else {
            __m512i m = _mm512_and_si512(_mm512_loadu_si512((const void *)bp), _mm512_set1_epi8(0x7F));
            for (uint32_t k = 1; k < K; k++) {
                uint64_t g = _mm512_cmpge_epu8_mask(m, t[k]);
                cm[k - 1][b] = prev & ~g;
                prev = g;
            }
        }
        cm[K - 1][b] = prev;
    }
    if (full < nblk) { /* a short last block, element by element */
        uint64_t prev = (1ull << (nel - 64 * full)) - 1, ge[FERRY_DELTA_CLASSES_MAX];
        delta_masks_scalar(base + (size_t)full * 64 * w, NULL, w, nel - 64 * full, lower + 1, K - 1, NULL, ge, K);
        for (uint32_t k = 1; k < K; k++) {
            cm[k - 1][full] = prev & ~ge[k - 1];
            prev = ge[k - 1];
        }
        cm[K - 1][full] = prev;
    }
    for (uint32_t k = 0; k < K; k++)
        for (uint32_t b = nblk; b < DELTA_MASK_BATCH; b++) cm[k][b] = 0;
}
#else
typedef struct class_prefix {
    const uint16_t *up;
} class_prefix_t;

APPLY_ATTR static inline uint32_t class_prefix(const uint64_t *cm, uint32_t nblk, class_prefix_t *p, uint16_t *up) {
    uint32_t run = 0;
    for (uint32_t b = 0; b < nblk; b++) {
        run += (uint32_t)__builtin_popcountll(cm[b]);
        up[b + 1] = (uint16_t)run;
    }
    for (uint32_t b = nblk; b < DELTA_MASK_BATCH; b++) up[b + 1] = UINT16_MAX; /* never at or below a rank */
    p->up = up;
    return run;
}

APPLY_ATTR static inline uint32_t apply_block_of(const class_prefix_t *p, uint32_t t) {
    uint32_t b = 0;
    for (uint32_t i = 1; i <= DELTA_MASK_BATCH; i++) b += p->up[i] <= t;
    return b;
}
#endif

APPLY_ATTR static inline uint32_t apply_select(uint64_t m, uint32_t r) {
#ifdef APPLY_AVX512
    return (uint32_t)__builtin_ctzll(_pdep_u64(1ull << r, m));
#else
    return select_bit(m, r);
#endif
}

APPLY_ATTR APPLY_LINKAGE void APPLY_BATCHES_FN(apply_job_t *j) {
    const delta_chunk_t *h = j->h;
    uint32_t w = h->width, K = h->classes;
    uint8_t *base = j->base;
    delta_change_t *out = j->log;
    size_t n = 0;
    uint32_t lower[FERRY_DELTA_CLASSES_MAX], next[FERRY_DELTA_CLASSES_MAX] = {0};
    uint64_t seen[FERRY_DELTA_CLASSES_MAX] = {0};
    for (uint32_t k = 0; k < K; k++) lower[k] = h->cls[k].lower;
    uint64_t cmask[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH];
    /* up[k][b + 1]: class elements in the batch's blocks 0..b; up[k][0] = 0 */
    uint16_t up[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH + 8];
#ifndef APPLY_AVX512
    uint64_t gebuf[DELTA_MASK_BATCH][FERRY_DELTA_CLASSES_MAX + 1]; /* per block: elements at or above each class */
#endif
    for (uint32_t k = 0; k < K; k++) up[k][0] = 0;
    j->bad_class = UINT32_MAX;
    for (uint32_t at = 0; at < h->elems; at += 64 * DELTA_MASK_BATCH) {
        uint32_t nel = h->elems - at < 64 * DELTA_MASK_BATCH ? h->elems - at : 64 * DELTA_MASK_BATCH;
        uint32_t nblk = (nel + 63) / 64;
#ifndef APPLY_AVX512
        /* the next batch on its way from memory while this one decodes: the
           hardware prefetcher alone leaves the kernel waiting */
        if (nel == 64 * DELTA_MASK_BATCH) {
            const uint8_t *pf = base + ((size_t)at + nel) * w, *pend = base + (size_t)h->elems * w;
            for (size_t o = 0; o < (size_t)nel * w && pf + o < pend; o += 64) __builtin_prefetch(pf + o);
        }
#endif
#ifdef APPLY_AVX512
        class_masks(base + (size_t)at * w, w, nel, lower, K, cmask, (size_t)(h->elems - at) * w);
#else
        j->masks(base + (size_t)at * w, NULL, w, nel, lower + 1, K - 1, NULL, &gebuf[0][1], FERRY_DELTA_CLASSES_MAX + 1);
        for (uint32_t b = 0; b < nblk; b++) {
            uint32_t nb = nel - 64 * b < 64 ? nel - 64 * b : 64;
            gebuf[b][0] = nb == 64 ? ~0ull : (1ull << nb) - 1;
            gebuf[b][K] = 0;
        }
        /* a second loop: reading gebuf right after the kernel's stores would
           stall on store forwarding */
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t b = 0; b < nblk; b++) cmask[k][b] = gebuf[b][k] & ~gebuf[b][k + 1];
#endif
        for (uint32_t k = 0; k < K; k++) {
            uint16_t *u = up[k];
            class_prefix_t pre;
            uint32_t run = class_prefix(cmask[k], nblk, &pre, u);
            uint64_t end = seen[k] + run;
            const uint32_t *rank = j->rank[k];
            const int64_t *dl = j->delta[k];
            uint32_t i = next[k];
            /* rank[] ends with a sentinel above every class count */
            for (; rank[i] < end; i++) {
                uint32_t t = (uint32_t)(rank[i] - seen[k]);
                uint32_t b = apply_block_of(&pre, t);
                uint32_t pos = at + 64 * b + apply_select(cmask[k][b], t - u[b]);
                uint32_t old = elem_get(base, w, pos), v;
                if (!elem_unord(elem_ord(old, w) + dl[i], w, &v)) {
                    j->bad_class = k;
                    goto done;
                }
                elem_put(base, w, pos, v);
                out[n].pos = pos;
                out[n].val = old;
                n++;
            }
            next[k] = i;
            seen[k] = end;
        }
        if (j->hash) XXH3_64bits_update(j->hash, base + (size_t)at * w, (size_t)nel * w);
    }
done:
    j->n = n;
    for (uint32_t k = 0; k < K; k++) {
        j->seen[k] = seen[k];
        j->placed[k] = next[k];
    }
}

#undef APPLY_BATCHES_FN
#undef APPLY_ATTR
#undef APPLY_LINKAGE
