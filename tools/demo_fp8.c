/* `ferry demo --quant`: an fp8 engine's pieces checked against the
 * reference. The trainer's bf16 weights are demo_weights.h's; the engine
 * must hold each 128 x 128 block of the whole weight quantized as
 * ferry_fp8_block_quantize does it (docs/fp8.md), and its scale. The
 * reader recomputes every block its piece touches from the bf16
 * reference, whole (a block is quantized as one, wherever shards cut). */
#include <stdlib.h>
#include <string.h>

#include "demo_weights.h"
#include "demo_worker.h"
#include "ferry/fp8.h"

/* Block (e, br, bc) of weight wt (rows x cols, E = 1 for 2-d) quantized
 * from the reference of version v: its bytes into rowq, the block row's
 * bytes (rows of cols), at the block's column; its scale into *scale. */
static void ref_block(const demo_tensor_t *t, const ferry_tensor_info_t *wt, uint32_t flags, uint64_t e, uint64_t br,
                      uint64_t bc, uint16_t *tmp, uint8_t *rowq, float *scale) {
    uint32_t nd = wt->ndim;
    uint64_t rows = (uint64_t)wt->shape[nd - 2], cols = (uint64_t)wt->shape[nd - 1];
    uint64_t r0 = br * FERRY_FP8_BLOCK, c0 = bc * FERRY_FP8_BLOCK;
    uint64_t nr = rows - r0 < FERRY_FP8_BLOCK ? rows - r0 : FERRY_FP8_BLOCK;
    uint64_t nc = cols - c0 < FERRY_FP8_BLOCK ? cols - c0 : FERRY_FP8_BLOCK;
    for (uint64_t r = 0; r < nr; r++)
        for (uint64_t c = 0; c < nc; c++)
            tmp[r * nc + c] = demo_bf16(demo_master(t, (e * rows + r0 + r) * cols + c0 + c));
    /* (cannot fail: a block of at most 128 x 128 bf16, known flags, lds at least the rows) */
    (void)ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16, tmp, nc, nr, nc, flags, rowq + c0, cols, scale, 1);
}

/* What a piece's walk knows: its tensor, and the row of blocks (e, br)
 * computed so far, each block once (pieces are walked row by row: a row of
 * elements crosses every block of its block row). */
typedef struct fp8_walk {
    const ferry_tensor_info_t *ti, *wt;
    const demo_tensor_t *t;
    uint32_t flags;
    bool is_scale;
    const uint8_t *buf, *old;
    uint16_t *tmp;
    uint8_t *rowq;    /* the block row's fp8 bytes: 128 rows of the weight's cols */
    float *rows;      /* its scales, one per block column */
    uint8_t *have;    /* per block column: computed */
    uint64_t e, br;   /* the block row held (e UINT64_MAX: none yet) */
    uint64_t bad, diff;
} fp8_walk_t;

/* Element lin (row-major in its tensor) at byte addr of the buffer. */
static void fp8_elem(fp8_walk_t *k, uint64_t lin, uint64_t addr) {
    uint32_t nd = k->ti->ndim;
    uint64_t cols = (uint64_t)k->ti->shape[nd - 1], rows = nd >= 2 ? (uint64_t)k->ti->shape[nd - 2] : 1;
    uint64_t c = lin % cols, r = (lin / cols) % rows, e = lin / cols / rows;
    uint64_t br = k->is_scale ? r : r / FERRY_FP8_BLOCK, bc = k->is_scale ? c : c / FERRY_FP8_BLOCK;
    uint64_t wcols = (uint64_t)k->wt->shape[k->wt->ndim - 1];
    if (e != k->e || br != k->br) {
        memset(k->have, 0, (wcols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK);
        k->e = e;
        k->br = br;
    }
    if (!k->have[bc]) {
        ref_block(k->t, k->wt, k->flags, e, br, bc, k->tmp, k->rowq, &k->rows[bc]);
        k->have[bc] = 1;
    }
    const uint8_t *at = k->buf + addr;
    if (k->is_scale) {
        k->bad += memcmp(at, &k->rows[bc], 4) != 0;
        if (k->old) k->diff += memcmp(k->old + addr, at, 4) != 0;
    } else {
        k->bad += *at != k->rowq[(r % FERRY_FP8_BLOCK) * wcols + c];
        if (k->old) k->diff += k->old[addr] != *at;
    }
}

uint64_t demo_fp8_piece_pass(worker_t *w, const ferry_piece_t *p, const ferry_tensor_info_t *ti,
                             const ferry_tensor_quant_t *tq, uint64_t v, const uint8_t *buf, const uint8_t *old,
                             uint64_t *diff) {
    fp8_walk_t k = {.ti = ti, .flags = tq->flags, .is_scale = tq->kind == FERRY_QUANT_FP8_SCALE, .buf = buf,
                    .old = old, .e = UINT64_MAX};
    ferry_tensor_info_t wt; /* the weight: its name seeds the reference, its shape makes the blocks */
    if (k.is_scale) ferry_model_tensor(w->model, tq->partner, &wt);
    else wt = *ti;
    demo_tensor_t t = demo_tensor(w->o.seed, wt.name, w->o.lr, v);
    k.wt = &wt;
    k.t = &t;
    uint64_t wcols = (uint64_t)wt.shape[wt.ndim - 1], nbc = (wcols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
    k.tmp = malloc(FERRY_FP8_BLOCK * FERRY_FP8_BLOCK * sizeof *k.tmp);
    k.rowq = malloc(FERRY_FP8_BLOCK * wcols);
    k.rows = malloc(nbc * sizeof *k.rows);
    k.have = malloc(nbc);
    if (!k.tmp || !k.rowq || !k.rows || !k.have)
        k.bad = (uint64_t)ferry_box_numel(&p->box); /* counted as unverified */
    else if (k.is_scale) DEMO_FOR_EACH(ti, p, 4, fp8_elem(&k, lin, addr));
    else DEMO_FOR_EACH(ti, p, 1, fp8_elem(&k, lin, addr));
    free(k.tmp);
    free(k.rowq);
    free(k.rows);
    free(k.have);
    if (diff) *diff += k.diff;
    return k.bad;
}
