/* Applying one chunk: a walk over the chunk in batches that finds each
 * change's element from the base's magnitude classes and writes it in
 * place, keeping the old values as the undo log and hashing each batch for
 * the chunk's next checksum. The walk has a portable build here, which
 * takes each class's changes decoded beforehand in rank order (no base
 * needed), and AVX-512 ones, format 1's in apply_avx512.c and format 2's
 * in apply2_avx512.c, which read the class streams as they go, so that
 * decoding one change overlaps placing the last. A chunk that fails is
 * restored before the error returns. */
#include "codec/class_dec.h"
#include "codec/codec_internal.h"
#include "common/hash.h"

/* For the portable walk, before it starts: one class's changes in rank
 * order, rank[] (within the class; a sentinel above every rank after the
 * last) and delta[] (in elem_ord steps). Needs no base. False when the
 * stream is malformed or a rank falls past the class's elements. */
DELTA_HOT_BODY bool decode_class(const delta_class_t *e, const uint8_t *stream, uint32_t *rank, int64_t *delta) {
    class_cursor_t q;
    class_cursor_start(&q, e, stream);
    bool past = false;
    const uint32_t n = e->changed, k = e->k_gap;
    uint32_t i = 0;
    const uint32_t k_nu = e->k_nu, k_mag = e->k_mag;
    while (i < n) {
        /* Changes in a tight loop, read off a 64-bit window of the stream
           refilled without a branch (whole bytes; bits above the count are
           the stream's next bits, so OR-ing them in again is harmless): a
           one-ulp change and the gap to the next, or a non-unit change with
           its magnitude and the run to the next non-unit one when all of it
           fits the window. It stops before the last change, a code longer
           than the window, or the stream's last 8 bytes. */
        bitr_t *r = &q.br;
        if (i + 1 < n && r->end - r->p >= 8) {
            uint64_t acc = r->acc, target = q.target;
            uint32_t nb = r->n, nu_left = q.nu_left, nu_at = nu_left ? q.nu_next : UINT32_MAX;
            const uint8_t *p = r->p, *last = r->end - 8;
            while (i + 1 < n && p <= last) {
                acc |= get_u64(p) << nb;
                p += (63 - nb) >> 3;
                nb |= 56;
                if (i != nu_at) { /* a one-ulp change: the sign, then the gap */
                    if (!gap_step(&acc, &nb, &target, 1, k, 1, e->count, &past, &rank[i], &delta[i])) break;
                    i++;
                    continue;
                }
                int64_t mag;
                uint32_t head, nu_new;
                if (!nu_head(acc, nb, k_mag, k_nu, nu_left, i, e->changed, &mag, &head, &nu_new)) break;
                if (!gap_step(&acc, &nb, &target, head, k, mag, e->count, &past, &rank[i], &delta[i])) break;
                nu_at = nu_new;
                past |= nu_at == UINT32_MAX - 1;
                nu_left--;
                i++;
            }
            class_cursor_put(&q, e, acc, nb, p, target, i, nu_left, nu_at);
        }
        if (i >= n) break;
        past |= q.target >= e->count;
        rank[i] = (uint32_t)q.target;
        delta[i] = next_value(&q, e);
        i++;
    }
    rank[n] = UINT32_MAX;
    return !past && class_cursor_sound(&q, e);
}
DELTA_V3 static bool decode_class_v3(const delta_class_t *e, const uint8_t *stream, uint32_t *rank, int64_t *delta) {
    return decode_class(e, stream, rank, delta);
}
static bool decode_class_base(const delta_class_t *e, const uint8_t *stream, uint32_t *rank, int64_t *delta) {
    return decode_class(e, stream, rank, delta);
}

/* The portable batch walk (x86-64-v3 and baseline builds): per batch of 64
 * blocks the class masks from the masks kernel, each class's running counts
 * in a table, each change's block by counting the table's entries at or
 * below its rank (no branch per block), its element by broadword select. */
DELTA_HOT_BODY void apply_batches(apply_job_t *j) {
    const delta_chunk_t *h = j->h;
    uint32_t w = h->width, K = h->classes;
    uint8_t *base = j->base;
    size_t n = 0;
    uint32_t lower[FERRY_DELTA_CLASSES_MAX], next[FERRY_DELTA_CLASSES_MAX] = {0};
    uint64_t seen[FERRY_DELTA_CLASSES_MAX] = {0};
    for (uint32_t k = 0; k < K; k++) lower[k] = h->cls[k].lower;
    uint64_t gebuf[DELTA_MASK_BATCH][FERRY_DELTA_CLASSES_MAX + 1]; /* per block: elements at or above each class */
    uint64_t cmask[FERRY_DELTA_CLASSES_MAX][DELTA_MASK_BATCH];
    uint16_t up[DELTA_MASK_BATCH + 1]; /* up[b + 1]: the class's elements in blocks 0..b */
    up[0] = 0;
    j->bad_class = j->bad_stream = UINT32_MAX;
    for (uint32_t at = 0; at < h->elems; at += 64 * DELTA_MASK_BATCH) {
        uint32_t nel = h->elems - at < 64 * DELTA_MASK_BATCH ? h->elems - at : 64 * DELTA_MASK_BATCH;
        uint32_t nblk = (nel + 63) / 64;
        /* the next batch on its way from memory while this one decodes: the
           hardware prefetcher alone leaves the kernel waiting */
        if (h->elems - at >= 2 * 64 * DELTA_MASK_BATCH) {
            const uint8_t *pf = base + ((size_t)at + nel) * w;
            for (size_t o = 0; o < (size_t)nel * w; o += 64) __builtin_prefetch(pf + o);
        }
        j->masks(base + (size_t)at * w, NULL, w, nel, lower + 1, K - 1, NULL, &gebuf[0][1], FERRY_DELTA_CLASSES_MAX + 1);
        for (uint32_t b = 0; b < nblk; b++) {
            gebuf[b][0] = delta_block_valid(nel, b);
            gebuf[b][K] = 0;
        }
        /* a second loop: reading gebuf right after the kernel's stores would
           stall on store forwarding */
        for (uint32_t k = 0; k < K; k++)
            for (uint32_t b = 0; b < nblk; b++) cmask[k][b] = gebuf[b][k] & ~gebuf[b][k + 1];
        for (uint32_t k = 0; k < K; k++) {
            uint32_t run = 0;
            for (uint32_t b = 0; b < nblk; b++) {
                run += (uint32_t)__builtin_popcountll(cmask[k][b]);
                up[b + 1] = (uint16_t)run;
            }
            for (uint32_t b = nblk; b < DELTA_MASK_BATCH; b++) up[b + 1] = UINT16_MAX; /* above every rank */
            uint64_t end = seen[k] + run;
            const uint32_t *rank = j->rank[k];
            const int64_t *dl = j->delta[k];
            uint32_t i = next[k];
            for (; rank[i] < end; i++) { /* rank[] ends with a sentinel above every count */
                uint32_t t = (uint32_t)(rank[i] - seen[k]), b = 0;
                for (uint32_t x = 1; x <= DELTA_MASK_BATCH; x++) b += up[x] <= t;
                uint32_t pos = at + 64 * b + select_bit(cmask[k][b], t - up[b]);
                if (!delta_apply_one(base, w, pos, dl[i], &j->log[n])) {
                    j->bad_class = k;
                    goto done;
                }
                n++;
            }
            next[k] = i;
            seen[k] = end;
        }
        XXH3_64bits_update(j->hash, base + (size_t)at * w, (size_t)nel * w);
    }
done:
    apply_job_finish(j, n, seen, next);
}
DELTA_V3 static void apply_batches_v3(apply_job_t *j) { apply_batches(j); }
static void apply_batches_base(apply_job_t *j) { apply_batches(j); }

apply_batches_fn delta_apply_batches_at(delta_level_t level) {
    uint32_t cpu = ferry_cpu();
#if defined(FERRY_CPU_X86)
    if (level >= DELTA_LEVEL_AVX512 && (cpu & FERRY_CPU_AVX512_CODEC)) return delta_apply_batches_avx512;
#endif
    if (level >= DELTA_LEVEL_AVX2 && (cpu & FERRY_CPU_V3)) return apply_batches_v3;
    return apply_batches_base;
}

bool delta_apply_batches_decode(apply_batches_fn f) {
#if defined(FERRY_CPU_X86)
    return f == delta_apply_batches_avx512 || f == delta_apply_batches_avx512_fmt2;
#else
    (void)f;
    return false;
#endif
}

/* A format 2 chunk's classes against the record: each class's elements
 * per sub-block counted from the base into c->sub (reading only), and
 * MISMATCH when a class's total differs from its entry's; else st. */
static ferry_status_t check_class_counts(ferry_delta_codec_t *c, const delta_chunk_t *h, const uint8_t *base,
                                         ferry_status_t st) {
    const uint32_t K = h->classes, nsub = delta_nsub(h->elems, h->sub_log2);
    uint32_t lower[FERRY_DELTA_CLASSES_MAX] = {0}; /* zeroed: the compiler cannot see K <= 8 */
    for (uint32_t k = 0; k < K; k++) lower[k] = h->cls[k].lower;
    delta_count_subblocks(c, base, h->width, h->elems, K, lower, h->sub_log2, c->sub);
    for (uint32_t k = 0; k < K; k++) {
        uint64_t seen = 0;
        for (uint32_t b = 0; b < nsub; b++) seen += c->sub[(size_t)k * nsub + b];
        if (seen != h->cls[k].count)
            return delta_fail(c, FERRY_ERR_MISMATCH,
                              "the region is not this delta's base: magnitude class %u holds %llu elements, "
                              "the delta's base had %u",
                              k, (unsigned long long)seen, h->cls[k].count);
    }
    return st;
}

/* Decodes a sparse chunk's changes and writes them in place, logging
 * (position, old value) in c->log[c->log_n, ...), and hashing the result
 * into *next_sum. Safe: a batch's classes are taken before any of its
 * elements is written, and later batches are untouched. On a failure
 * everything written is restored. */
static ferry_status_t decode_sparse(ferry_delta_codec_t *c, const delta_chunk_t *h, uint8_t *base, size_t *n_out,
                                    uint64_t *next_sum) {
    uint32_t K = h->classes;
    size_t slots = (size_t)h->changed + K;
    /* the AVX-512 level has a walk per format, each reading the streams as
       it places; below it the portable walk places changes decoded first */
    apply_batches_fn walk = !h->sub_log2 ? c->apply_batches : c->v3 ? apply_batches_v3 : apply_batches_base;
#if defined(FERRY_CPU_X86)
    if (h->sub_log2 && c->apply_batches == delta_apply_batches_avx512) walk = delta_apply_batches_avx512_fmt2;
#endif
    bool decodes = delta_apply_batches_decode(walk); /* else the changes decoded here first */
    uint32_t nsub = h->sub_log2 ? delta_nsub(h->elems, h->sub_log2) : 0;
    if (!delta_grow(c, (void **)&c->log, &c->log_cap, c->log_n + h->changed, sizeof *c->log) ||
        (!decodes && (!delta_grow(c, (void **)&c->dec_rank, &c->dec_rank_cap, slots, sizeof *c->dec_rank) ||
                      !delta_grow(c, (void **)&c->dec_delta, &c->dec_delta_cap, slots, sizeof *c->dec_delta))) ||
        !delta_grow(c, (void **)&c->sub, &c->sub_cap, (size_t)K * nsub, sizeof *c->sub))
        return delta_fail(c, FERRY_ERR_NO_MEMORY, "delta apply: out of memory for %u changes", h->changed);
    apply_job_t j = {.h = h, .base = base, .masks = c->masks, .log = c->log + c->log_n};
    /* format 2 decoded first: each class's elements per sub-block, before
       anything is written, where a sub-stream's local ranks start. Its
       walk counts them as it goes instead, and on a refusal counts them
       after, so that a class count wrong for the base is MISMATCH on
       every path, whatever else is wrong. */
    ferry_status_t st = FERRY_OK;
    if (h->sub_log2 && !decodes && (st = check_class_counts(c, h, base, FERRY_OK)) != FERRY_OK) return st;
    const uint8_t *p = h->payload;
    size_t off = 0;
    for (uint32_t k = 0; k < K; k++) {
        const delta_class_t *e = &h->cls[k];
        j.stream[k] = p;
        if (h->sub_log2 && decodes) {
            uint64_t first;
            j.sub_len[k] = c->sub + (size_t)k * nsub;
            if (!delta_class2_table(h, k, p, c->sub + (size_t)k * nsub, &first))
                return check_class_counts(c, h, base,
                                          delta_fail(c, FERRY_ERR_CORRUPT, "class %u: its length table wrong", k));
        } else if (h->sub_log2) {
            j.rank[k] = c->dec_rank + off;
            j.delta[k] = c->dec_delta + off;
            if (!delta_class2_decode(h, k, p, c->sub + (size_t)k * nsub, c->dec_rank + off, c->dec_delta + off,
                                     NULL, NULL))
                return delta_fail(c, FERRY_ERR_CORRUPT,
                                  "class %u: stream malformed, cut short or too long, its length table wrong, or a "
                                  "change past the class's elements in its sub-block",
                                  k);
            off += e->changed + 1;
        } else if (!decodes) {
            j.rank[k] = c->dec_rank + off;
            j.delta[k] = c->dec_delta + off;
            if (!(c->v3 ? decode_class_v3 : decode_class_base)(e, p, c->dec_rank + off, c->dec_delta + off))
                return delta_fail(c, FERRY_ERR_CORRUPT, "class %u: stream malformed, cut short or too long", k);
            off += e->changed + 1;
        }
        p += e->len;
    }
    XXH3_state_t hs;
    XXH3_64bits_reset(&hs);
    j.hash = &hs;
    walk(&j);
    if (j.bad_class != UINT32_MAX)
        st = delta_fail(c, FERRY_ERR_CORRUPT, "class %u: a value change out of the element's range", j.bad_class);
    else if (j.bad_stream != UINT32_MAX && h->sub_log2)
        st = delta_fail(c, FERRY_ERR_CORRUPT,
                        "class %u: stream malformed, cut short or too long, or a change past the class's elements "
                        "in its sub-block",
                        j.bad_stream);
    else if (j.bad_stream != UINT32_MAX)
        st = delta_fail(c, FERRY_ERR_CORRUPT, "class %u: stream malformed, cut short or too long", j.bad_stream);
    for (uint32_t k = 0; k < K && st == FERRY_OK; k++) {
        if (j.seen[k] != h->cls[k].count)
            st = delta_fail(c, FERRY_ERR_MISMATCH,
                            "the region is not this delta's base: magnitude class %u holds %llu elements, "
                            "the delta's base had %u",
                            k, (unsigned long long)j.seen[k], h->cls[k].count);
        else if (j.placed[k] != h->cls[k].changed) /* a rank past the class's elements */
            st = delta_fail(c, FERRY_ERR_CORRUPT, "class %u: stream malformed, a change past the class's elements",
                            k);
    }
    if (st == FERRY_OK) {
        *n_out = j.n;
        *next_sum = XXH3_64bits_digest(&hs);
        return FERRY_OK;
    }
    delta_undo_changes(base, h->width, j.log, j.n);
    if (h->sub_log2 && decodes && st == FERRY_ERR_CORRUPT) st = check_class_counts(c, h, base, st);
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
    ferry_status_t st = delta_chunk_parse(chunk, chunk_len, w, true, &h, &c->err);
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
    uint64_t sum = 0;
    st = decode_sparse(c, &h, base, &n, &sum);
    /* a stream that decodes badly against this region may be sound and the
       region the wrong base: the base checksum tells (only on this path) */
    if (st == FERRY_ERR_CORRUPT && XXH3_64bits(base, bytes) != h.base_sum) return blame(c, &h, base);
    if (st != FERRY_OK) return st;
    delta_change_t *ch = c->log + c->log_n; /* written; old values kept */
    if (sum != h.next_sum) {
        delta_undo_changes(base, w, ch, n);
        return blame(c, &h, base);
    }
    u->count = n;
    c->log_n += n;
    c->undo_n++;
    return FERRY_OK;
}
