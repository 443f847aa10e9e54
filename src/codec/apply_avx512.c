/* The batch walk of a sparse apply for CPUs with AVX-512 (BW, VBMI,
 * VPOPCNTDQ) and BMI2; picked at run time (delta_apply_batches_pick). Per
 * batch of 64 blocks: one compare per class threshold gives the masks of
 * elements at or above it (ge rows, straight from the mask registers; for
 * 16-bit elements one byte compare of 64 magnitude buckets); their running
 * counts come as vectors of 64 u16, and a class's counts are the
 * difference of two rows. Each change's block is then two compares of its
 * rank against those vectors, its element one PDEP (fast on every AVX-512
 * CPU). The walk reads each class's stream itself, a change at a time with
 * the decoder's fast step (class_dec.h), instead of taking changes decoded
 * beforehand: decoding is a chain of dependent shifts, placing is not, and
 * in one loop the core overlaps the two (+6% on realistic deltas). Format
 * 2 has its own walk, which reads its sub-streams the same way
 * (apply2_avx512.c). Built once per element width so the element code is
 * straight-line. The batch rows are apply_rows.h's. */
#include "codec/apply_rows.h"
#include "codec/class_dec.h"
#include "codec/codec_internal.h"
#include "common/hash.h"

#if defined(FERRY_CPU_X86)
AVX512 static inline __attribute__((always_inline)) void walk(apply_job_t *j, const uint32_t w) {
    const delta_chunk_t *h = j->h;
    const uint32_t K = h->classes;
    uint8_t *base = j->base;
    size_t n = 0;
    delta_change_t *const log = j->log; /* in a register: stores to base could alias j->log */
    uint32_t placed[FERRY_DELTA_CLASSES_MAX];
    class_cursor_t cur[FERRY_DELTA_CLASSES_MAX];
    uint64_t seen[FERRY_DELTA_CLASSES_MAX] = {0};
    walk_rows_t rows;
    rows_init(&rows, h, w);
    j->bad_class = j->bad_stream = UINT32_MAX;
    for (uint32_t k = 0; k < K; k++) class_cursor_start(&cur[k], &h->cls[k], j->stream[k]);
    for (uint32_t at = 0; at < h->elems; at += 64 * DELTA_MASK_BATCH) {
        uint32_t nel = h->elems - at < 64 * DELTA_MASK_BATCH ? h->elems - at : 64 * DELTA_MASK_BATCH;
        rows_batch(&rows, base + (size_t)at * w, w, nel, K, (size_t)(h->elems - at) * w);
        /* the previous batch, all written, into the checksum: meanwhile the
           stores above reach the cache, so the loads below of single
           counts need not wait on them (a narrow load from a wide store
           does not forward) */
        if (at) XXH3_64bits_update(j->hash, base + (size_t)(at - 64 * DELTA_MASK_BATCH) * w, (size_t)64 * DELTA_MASK_BATCH * w);
        for (uint32_t k = 0; k < K; k++) {
            uint64_t end = seen[k] + rows.run[k];
            class_cursor_t *q = &cur[k];
            if (q->target >= end) { /* no change of this class in the batch */
                seen[k] = end;
                continue;
            }
            const uint16_t *u = rows.up[k];
            const __m512i lo = _mm512_loadu_si512((const void *)(u + 1)), hi = _mm512_loadu_si512((const void *)(u + 33));
            const uint64_t *g0 = rows.ge[k], *g1 = rows.ge[k + 1];
            const delta_class_t *e = &h->cls[k];
            const uint32_t nch = e->changed, kg = e->k_gap, k_nu = e->k_nu, k_mag = e->k_mag;
            /* the cursor in registers: the stream's next change decodes
               while the previous one is placed (the two do not wait on
               each other) */
            bitr_t *r = &q->br;
            const uint8_t *sp = r->p, *rend = r->end;
            uint64_t acc = r->acc, target = q->target;
            uint32_t nb = r->n, i = q->j, nu_left = q->nu_left, nu_at = nu_left ? q->nu_next : UINT32_MAX;
            bool unused = false;
            while (target < end) {
                uint32_t t = (uint32_t)(target - seen[k]), rk;
                int64_t d;
                /* the decoder's fast step (decode_class): a 64-bit window
                   refilled without a branch, before the class's last
                   change and the stream's last 8 bytes */
                if (i + 1 < nch && rend - sp >= 8) {
                    acc |= get_u64(sp) << nb;
                    sp += (63 - nb) >> 3;
                    nb |= 56;
                    if (i != nu_at) {
                        if (gap_step(&acc, &nb, &target, 1, kg, 1, e->count, &unused, &rk, &d)) {
                            i++;
                            goto place;
                        }
                    } else {
                        int64_t mag;
                        uint32_t head, nu_new;
                        if (nu_head(acc, nb, k_mag, k_nu, nu_left, i, nch, &mag, &head, &nu_new) &&
                            gap_step(&acc, &nb, &target, head, kg, mag, e->count, &unused, &rk, &d)) {
                            if (nu_new == UINT32_MAX - 1) { /* a run past the class's changes */
                                j->bad_stream = k;
                                goto done;
                            }
                            nu_at = nu_new;
                            nu_left--;
                            i++;
                            goto place;
                        }
                    }
                }
                /* the general reader, on the cursor in memory */
                class_cursor_put(q, e, acc, nb, sp, target, i, nu_left, nu_at);
                d = next_value(q, e);
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
                nu_at = nu_left ? q->nu_next : UINT32_MAX;
            place:;
                uint32_t pos = at + rows_place(u, lo, hi, g0, g1, t);
                if (!delta_apply_one(base, w, pos, d, &log[n])) {
                    j->bad_class = k;
                    goto done;
                }
                n++;
            }
            class_cursor_put(q, e, acc, nb, sp, target, i, nu_left, nu_at);
            seen[k] = end;
        }
        if (at + nel == h->elems) XXH3_64bits_update(j->hash, base + (size_t)at * w, (size_t)nel * w);
    }
    /* every change placed: each stream must end there */
    for (uint32_t k = 0; k < K; k++)
        if (cur[k].left == 0 && !class_cursor_sound(&cur[k], &h->cls[k])) {
            j->bad_stream = k;
            break;
        }
done: /* after a failure the counts are not used: the chunk is undone */
    for (uint32_t k = 0; k < K; k++) placed[k] = cur[k].j;
    apply_job_finish(j, n, seen, placed);
}

AVX512 void delta_apply_batches_avx512(apply_job_t *j) {
    switch (j->h->width) {
    case 1: walk(j, 1); break;
    case 2: walk(j, 2); break;
    default: walk(j, 4); break;
    }
}
#endif
