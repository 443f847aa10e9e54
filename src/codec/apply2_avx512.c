/* Format 2's batch walk for CPUs with AVX-512 (as apply_avx512.c's for
 * format 1, whose batch rows it shares: apply_rows.h). Its own file so
 * that format 1's walk is built as before (see apply_rows.h). */
#include "codec/apply_rows.h"
#include "codec/class_dec.h"
#include "codec/codec_internal.h"
#include "common/hash.h"

#if defined(FERRY_CPU_X86)
/* Format 2's walk: the same batches, each class's sub-streams read as it
 * places (sub_cursor_t), so format 2 too decodes its next change while
 * placing this one, and writes no decoded arrays. Sub-blocks are whole
 * batches (S >= 12), so a class's cursor restarts only at a batch's start:
 * there the last sub-stream must be done (a change it still holds has a
 * local rank at or past the class's elements in its sub-block) and the
 * next one's first codes are read. The fast step is format 1's, bounded
 * also by the sub-stream's end, and takes a sub-stream's last change too;
 * anything odd takes the general reader. */
AVX512 static inline __attribute__((always_inline)) void walk2(apply_job_t *j, const uint32_t w) {
    const delta_chunk_t *h = j->h;
    const uint32_t K = h->classes, S = h->sub_log2, nsub = delta_nsub(h->elems, S);
    uint8_t *base = j->base;
    size_t n = 0;
    delta_change_t *const log = j->log; /* in a register: stores to base could alias j->log */
    uint32_t placed[FERRY_DELTA_CLASSES_MAX];
    sub_cursor_t cur[FERRY_DELTA_CLASSES_MAX];
    uint64_t seen[FERRY_DELTA_CLASSES_MAX] = {0};
    walk_rows_t rows;
    rows_init(&rows, h, w);
    j->bad_class = j->bad_stream = UINT32_MAX;
    for (uint32_t k = 0; k < K; k++) sub_cursor_init(&cur[k], &h->cls[k], j->stream[k]);
    for (uint32_t at = 0; at < h->elems; at += 64 * DELTA_MASK_BATCH) {
        uint32_t nel = h->elems - at < 64 * DELTA_MASK_BATCH ? h->elems - at : 64 * DELTA_MASK_BATCH;
        rows_batch(&rows, base + (size_t)at * w, w, nel, K, (size_t)(h->elems - at) * w);
        if (at)
            XXH3_64bits_update(j->hash, base + (size_t)(at - 64 * DELTA_MASK_BATCH) * w,
                               (size_t)64 * DELTA_MASK_BATCH * w);
        if (!(at & ((1u << S) - 1))) { /* a sub-block starts */
            const uint32_t b = at >> S, sub_elems = h->elems - at < (1u << S) ? h->elems - at : 1u << S;
            for (uint32_t k = 0; k < K; k++)
                if (cur[k].target != UINT64_MAX ||
                    !sub_cursor_begin(&cur[k], &h->cls[k], j->sub_len[k][b], sub_elems, seen[k])) {
                    j->bad_stream = k;
                    goto done;
                }
        }
        for (uint32_t k = 0; k < K; k++) {
            uint64_t end = seen[k] + rows.run[k];
            sub_cursor_t *q = &cur[k];
            if (q->target >= end) { /* no change of this class in the batch */
                seen[k] = end;
                continue;
            }
            const uint16_t *u = rows.up[k];
            const __m512i lo = _mm512_loadu_si512((const void *)(u + 1)),
                          hi = _mm512_loadu_si512((const void *)(u + 33));
            const uint64_t *g0 = rows.ge[k], *g1 = rows.ge[k + 1];
            const delta_class_t *e = &h->cls[k];
            const uint32_t nch = e->changed, kg = e->k_gap, k_nu = e->k_nu, k_mag = e->k_mag, nonunit = e->nonunit;
            bitr_t *r = &q->br;
            const uint8_t *sp = r->p, *rend = r->end;
            uint64_t acc = r->acc, target = q->target;
            uint32_t nb = r->n, i = q->j, nu_left = q->nu_left, nu_at = q->nu_at;
            int64_t rem = (int64_t)(q->end - bitr_tell(r)); /* bits left in the sub-stream */
            while (target < end) {
                uint32_t t = (uint32_t)(target - seen[k]);
                int64_t d;
                if (i + 1 < nch && rend - sp >= 8) {
                    acc |= get_u64(sp) << nb;
                    sp += (63 - nb) >> 3;
                    nb |= 56;
                    if (i != nu_at) {
                        if (sub_gap_step(&acc, &nb, &rem, &target, 1, kg, 1, &d)) {
                            i++;
                            goto place;
                        }
                        if (rem == 1 && (!nonunit || nu_at == i + 1)) {
                            /* the sub-stream's last change: its sign bit ends
                               it, and the non-unit index points past it */
                            int64_t neg = -(int64_t)(acc & 1);
                            d = (1 ^ neg) - neg;
                            acc >>= 1, nb--, rem = 0;
                            target = UINT64_MAX;
                            i++;
                            goto place;
                        }
                    } else if (nu_left) {
                        /* the run after a non-unit change is always there in
                           format 2 (nu_left 2 reads it); read from the window
                           it is under 2^30 (its code fits 63 bits), so the
                           index neither wraps nor meets the bound. One past
                           the sub-stream's changes is refused at its end. */
                        int64_t mag;
                        uint32_t head, nu_new;
                        if (nu_head(acc, nb, k_mag, k_nu, 2, i, UINT32_MAX, &mag, &head, &nu_new)) {
                            if (sub_gap_step(&acc, &nb, &rem, &target, head, kg, mag, &d)) {
                                nu_at = nu_new;
                                nu_left--;
                                i++;
                                goto place;
                            }
                            if (rem == (int64_t)head && nu_new == i + 1) { /* the sub-stream's last change */
                                int64_t neg = -(int64_t)(acc & 1);
                                d = (mag ^ neg) - neg;
                                acc >>= head, nb -= head, rem = 0;
                                target = UINT64_MAX;
                                nu_at = nu_new;
                                nu_left--;
                                i++;
                                goto place;
                            }
                        }
                    }
                }
                /* the general reader, on the cursor in memory */
                sub_cursor_put(q, acc, nb, sp, target, i, nu_left, nu_at);
                d = sub_next_value(q, e);
                if (r->overrun) {
                    j->bad_stream = k;
                    goto done;
                }
                acc = r->acc;
                nb = r->n;
                sp = r->p;
                target = q->target;
                i = q->j;
                nu_left = q->nu_left;
                nu_at = q->nu_at;
                rem = (int64_t)(q->end - bitr_tell(r));
            place:;
                uint32_t pos = at + rows_place(u, lo, hi, g0, g1, t);
                if (!delta_apply_one(base, w, pos, d, &log[n])) {
                    j->bad_class = k;
                    goto done;
                }
                n++;
            }
            sub_cursor_put(q, acc, nb, sp, target, i, nu_left, nu_at);
            seen[k] = end;
        }
        if (at + nel == h->elems) XXH3_64bits_update(j->hash, base + (size_t)at * w, (size_t)nel * w);
    }
    /* every sub-block walked: each class's last sub-stream ended, and its
       stream with it */
    for (uint32_t k = 0; k < K; k++) {
        const delta_class_t *e = &h->cls[k];
        if (!sub_cursor_sound(&cur[k], e, e->len - delta_table_bytes(nsub, e->len_bits))) {
            j->bad_stream = k;
            break;
        }
    }
done: /* after a failure the counts are not used: the chunk is undone */
    for (uint32_t k = 0; k < K; k++) placed[k] = cur[k].j;
    apply_job_finish(j, n, seen, placed);
}

AVX512 void delta_apply_batches_avx512_fmt2(apply_job_t *j) {
    switch (j->h->width) {
    case 1: walk2(j, 1); break;
    case 2: walk2(j, 2); break;
    default: walk2(j, 4); break;
    }
}
#endif
