/* The FP8 test job shared by test_plan_fp8 and test_sync_fp8: a bf16
 * trainer (2 data-parallel replicas x 2 tensor-parallel ranks: rows split,
 * experts split, one replica's weight in padded rows) and an fp8 engine (2
 * replicas x 2 ranks: columns split, one expert tensor split by rows, the
 * scales mirroring every weight piece), with their whole tensors. */
#ifndef FERRY_TESTS_FP8_JOB_H
#define FERRY_TESTS_FP8_JOB_H

#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "ferry/ferry.h"
#include "ferry/fp8.h"

enum { T_W1, T_W2, T_E, T_NORM, NT };
static const char *const names[NT] = {"w1", "w2", "e", "norm"};
static const uint32_t ndims[NT] = {2, 2, 3, 1};
static const int64_t shapes[NT][3] = {{640, 384}, {300, 257}, {4, 256, 384}, {384}};

static inline ferry_model_t *make_model(ferry_ctx_t *ctx, bool fp8, uint32_t *scale) {
    ferry_model_t *m;
    CHECK_OK(ferry_model_create(ctx, fp8 ? "engine" : "trainer", &m), ferry_ctx_error(ctx));
    for (uint32_t t = 0; t < NT; t++) {
        uint32_t idx;
        CHECK_OK(ferry_model_add_tensor(m, names[t], FERRY_DTYPE_BF16, ndims[t], shapes[t], &idx),
                 ferry_model_error(m));
        CHECK(idx == t);
    }
    for (uint32_t t = 0; fp8 && t < T_NORM; t++)
        CHECK_OK(ferry_model_add_fp8(m, t, t == T_W2 ? FERRY_FP8_UE8M0 : 0, &scale[t]), ferry_model_error(m));
    return m;
}

static inline int64_t numel_of(uint32_t t) {
    int64_t n = 1;
    for (uint32_t d = 0; d < ndims[t]; d++) n *= shapes[t][d];
    return n;
}

/* Adds a piece of tensor t with box (off, ext) on rank, in a buffer of its
 * own: row-major, or with `pad` unused elements after each row, or (pad -1,
 * 2-d) column-major: a transposed weight. */
static inline void add_piece(ferry_layout_t *l, uint32_t rank, uint32_t t, ferry_dtype_t dt, uint32_t nd, const int64_t *off,
                      const int64_t *ext, int64_t pad) {
    ferry_piece_t pc;
    memset(&pc, 0, sizeof pc);
    pc.tensor = t;
    pc.box.ndim = nd;
    for (uint32_t d = 0; d < nd; d++) pc.box.offset[d] = off[d], pc.box.extent[d] = ext[d];
    int64_t at = 1;
    for (int d = (int)nd - 1; d >= 0; d--) {
        pc.strides[d] = at;
        at *= ext[d] + (d == (int)nd - 1 && pad > 0 ? pad : 0);
    }
    if (pad < 0 && nd == 2) pc.strides[0] = 1, pc.strides[1] = ext[0];
    int64_t span = 1 + (ext[0] - 1) * pc.strides[0];
    for (uint32_t d = 1; d < nd; d++) span += (ext[d] - 1) * pc.strides[d];
    char name[64];
    snprintf(name, sizeof name, "r%u.t%u.%lld", rank, t, (long long)off[0]);
    CHECK_OK(ferry_layout_add_buffer(l, rank, name, dt, (uint64_t)span * ferry_dtype_size(dt), &pc.buffer),
             ferry_layout_error(l));
    pc.rank = rank;
    CHECK_OK(ferry_layout_add_piece(l, &pc), ferry_layout_error(l));
}

/* The trainer: ranks 2d + k hold row (or expert) half k of every weight;
 * replica 1's w1 in padded rows. mode 1 (cut): w1 split at row 320 (inside
 * a block); mode 2: replica 0's w1 transposed (column-major). */
static inline ferry_layout_t *trainer(ferry_ctx_t *ctx, const ferry_model_t *m, int mode) {
    bool cut = mode == 1;
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 4, &l), ferry_ctx_error(ctx));
    for (uint32_t r = 0; r < 4; r++) {
        uint32_t k = r % 2, dp = r / 2;
        int64_t w1r = cut ? 320 : 384, w2r = 128;
        int64_t o1[2] = {k ? w1r : 0, 0}, e1[2] = {k ? 640 - w1r : w1r, 384};
        add_piece(l, r, T_W1, FERRY_DTYPE_BF16, 2, o1, e1, dp ? 16 : mode == 2 ? -1 : 0);
        int64_t o2[2] = {k ? w2r : 0, 0}, e2[2] = {k ? 300 - w2r : w2r, 257};
        add_piece(l, r, T_W2, FERRY_DTYPE_BF16, 2, o2, e2, 0);
        int64_t o3[3] = {2 * k, 0, 0}, e3[3] = {2, 256, 384};
        add_piece(l, r, T_E, FERRY_DTYPE_BF16, 3, o3, e3, 0);
        int64_t o4[1] = {0}, e4[1] = {384};
        add_piece(l, r, T_NORM, FERRY_DTYPE_BF16, 1, o4, e4, 0);
    }
    return l;
}

/* A weight piece and the scale piece that mirrors it (unless no_scale). */
static inline void add_fp8_piece(ferry_layout_t *l, uint32_t rank, uint32_t t, uint32_t scale, uint32_t nd, const int64_t *off,
                          const int64_t *ext, bool no_scale) {
    add_piece(l, rank, t, FERRY_DTYPE_F8_E4M3, nd, off, ext, 0);
    if (no_scale) return;
    int64_t so[3], se[3];
    for (uint32_t d = 0; d < nd; d++) {
        so[d] = off[d], se[d] = ext[d];
        if (d + 2 >= nd) so[d] = off[d] / 128, se[d] = (off[d] + ext[d] + 127) / 128 - off[d] / 128;
    }
    add_piece(l, rank, scale, FERRY_DTYPE_F32, nd, so, se, 0);
}

/* The engine: ranks 2r + k hold column half k of w1 and w2, row half k of
 * e. bad 1: rank 0's w2 has no scale piece; 2: an extra scale piece; 3:
 * rank 0's w1 cut at column 200 (inside a block). */
static inline ferry_layout_t *engine(ferry_ctx_t *ctx, const ferry_model_t *m, const uint32_t *scale, int bad) {
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 4, &l), ferry_ctx_error(ctx));
    for (uint32_t r = 0; r < 4; r++) {
        uint32_t k = r % 2;
        int64_t c1 = bad == 3 ? 200 : 256;
        int64_t o1[2] = {0, k ? c1 : 0}, e1[2] = {640, k ? 384 - c1 : c1};
        add_fp8_piece(l, r, T_W1, scale[T_W1], 2, o1, e1, false);
        int64_t o2[2] = {0, k ? 128 : 0}, e2[2] = {300, k ? 129 : 128};
        add_fp8_piece(l, r, T_W2, scale[T_W2], 2, o2, e2, bad == 1 && r == 0);
        int64_t o3[3] = {0, 128 * k, 0}, e3[3] = {4, 128, 384};
        add_fp8_piece(l, r, T_E, scale[T_E], 3, o3, e3, false);
        int64_t o4[1] = {0}, e4[1] = {384};
        add_piece(l, r, T_NORM, FERRY_DTYPE_BF16, 1, o4, e4, 0);
    }
    if (bad == 2) {
        int64_t so[2] = {0, 0}, se[2] = {1, 1};
        add_piece(l, 1, scale[T_W2], FERRY_DTYPE_F32, 2, so, se, 0);
    }
    return l;
}

/* Byte offset, in a piece's buffer, of tensor element idx (inside its box). */
static inline uint64_t piece_at(const ferry_piece_t *q, const int64_t *idx, size_t esz) {
    uint64_t at = 0;
    for (uint32_t d = 0; d < q->box.ndim; d++) at += (uint64_t)((idx[d] - q->box.offset[d]) * q->strides[d]);
    return q->byte_offset + at * esz;
}

/* Calls body for every element of box (idx: its tensor coordinates, i: its
 * row-major rank in the box). */
#define FOR_BOX(box, idx, i, ...)                                                                              \
    do {                                                                                                       \
        int64_t idx[FERRY_MAX_DIMS] = {0}, n_ = ferry_box_numel(&(box));                                       \
        for (int64_t i = 0; i < n_; i++) {                                                                     \
            int64_t r_ = i;                                                                                    \
            for (int d_ = (int)(box).ndim - 1; d_ >= 0; d_--) {                                                \
                idx[d_] = (box).offset[d_] + r_ % (box).extent[d_];                                            \
                r_ /= (box).extent[d_];                                                                        \
            }                                                                                                  \
            __VA_ARGS__;                                                                                       \
        }                                                                                                      \
    } while (0)


/* Whole tensors of version v: bf16 weight-like values (an outlier now and
 * then, so blocks' scales differ), and the quantization of each fp8 one
 * (per expert for 3-d), as the engine must end up holding them. */
typedef struct fp8_whole {
    uint16_t *full[NT];
    uint8_t *q[NT];
    float *s[NT];
} fp8_whole_t;

static inline void fp8_whole_make(fp8_whole_t *w, uint64_t v) {
    uint64_t seed = 7 + 1000003 * v;
    for (uint32_t t = 0; t < NT; t++) {
        int64_t n = numel_of(t);
        if (!w->full[t]) CHECK((w->full[t] = malloc(2 * n)) && (w->q[t] = malloc(n)) && (w->s[t] = malloc(4 * n)));
        for (int64_t i = 0; i < n; i++) {
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            float f = (float)((int64_t)(seed >> 40) - (1 << 23)) / (float)(1 << 23) * 0.05f;
            if (i % 997 == 0) f *= 40;
            w->full[t][i] = ferry_bf16_from_f32(f);
        }
        if (t == T_NORM) continue;
        int64_t lead = ndims[t] == 3 ? shapes[t][0] : 1, rows = shapes[t][ndims[t] - 2], cols = shapes[t][ndims[t] - 1];
        uint64_t per_s = ferry_fp8_scale_count((uint64_t)rows, (uint64_t)cols);
        for (int64_t e = 0; e < lead; e++)
            CHECK_OK(ferry_fp8_block_quantize(FERRY_DTYPE_BF16, w->full[t] + e * rows * cols, rows, cols,
                                              t == T_W2 ? FERRY_FP8_UE8M0 : 0, w->q[t] + e * rows * cols,
                                              w->s[t] + e * per_s),
                     names[t]);
    }
}

static inline void fp8_whole_free(fp8_whole_t *w) {
    for (uint32_t t = 0; t < NT; t++) free(w->full[t]), free(w->q[t]), free(w->s[t]);
}

/* Fills the trainer's buffers (bufs[i]: buffer i, in layout order) with its
 * pieces of the whole tensors: rank `rank`'s, or every rank's (UINT32_MAX). */
static inline void fp8_fill_trainer(const ferry_layout_t *src, uint8_t **bufs, uint32_t rank, const fp8_whole_t *w) {
    const ferry_piece_t *sp = ferry_layout_pieces(src);
    for (size_t i = 0; i < ferry_layout_piece_count(src); i++) {
        const ferry_piece_t *pc = &sp[i];
        if (rank != UINT32_MAX && pc->rank != rank) continue;
        const int64_t *sh = shapes[pc->tensor];
        uint32_t nd = ndims[pc->tensor];
        FOR_BOX(pc->box, idx, el, {
            int64_t lin = 0;
            for (uint32_t d = 0; d < nd; d++) lin = lin * sh[d] + idx[d];
            memcpy(bufs[pc->buffer] + piece_at(pc, idx, 2), &w->full[pc->tensor][lin], 2);
        });
    }
}

/* Whether engine rank `rank` (every rank: UINT32_MAX) holds, in bufs, the
 * whole tensors' quantization (and the plain tensors as they are); says
 * the first difference. */
static inline bool fp8_engine_ok(const ferry_layout_t *dst, uint8_t *const *bufs, uint32_t rank, const fp8_whole_t *w,
                                 size_t *checked) {
    const ferry_model_t *em = ferry_layout_model(dst);
    const ferry_piece_t *dp = ferry_layout_pieces(dst);
    for (size_t i = 0; i < ferry_layout_piece_count(dst); i++) {
        const ferry_piece_t *pc = &dp[i];
        if (rank != UINT32_MAX && pc->rank != rank) continue;
        ferry_tensor_info_t ti;
        ferry_tensor_quant_t tq;
        ferry_model_tensor(em, pc->tensor, &ti);
        ferry_model_tensor_quant(em, pc->tensor, &tq);
        uint32_t t = tq.kind == FERRY_QUANT_FP8_SCALE ? tq.partner : pc->tensor, nd = ti.ndim;
        bool ok = true;
        FOR_BOX(pc->box, idx, el, {
            int64_t lin = 0;
            for (uint32_t d = 0; d < nd; d++) lin = lin * ti.shape[d] + idx[d];
            const uint8_t *got = bufs[pc->buffer] + piece_at(pc, idx, ferry_dtype_size(ti.dtype));
            const void *want = tq.kind == FERRY_QUANT_FP8_SCALE ? (const void *)&w->s[t][lin]
                               : tq.kind == FERRY_QUANT_FP8_BLOCK ? (const void *)&w->q[t][lin]
                                                                  : (const void *)&w->full[t][lin];
            if (ok && memcmp(got, want, ferry_dtype_size(ti.dtype)) != 0) {
                fprintf(stderr, "engine rank %u, %s element %lld differs\n", pc->rank, ti.name, (long long)lin);
                ok = false;
            }
        });
        if (!ok) return false;
        if (checked) (*checked)++;
    }
    return true;
}

#endif
