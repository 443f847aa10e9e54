#include <fnmatch.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "layout/build.h"

void build_fail(builder_t *b, ferry_status_t st, const char *fmt, ...) {
    if (b->st != FERRY_OK) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(b->err->text, sizeof b->err->text, fmt, ap);
    va_end(ap);
    b->st = st;
}

int64_t build_div(builder_t *b, int64_t num, const char *num_name, int64_t den, const char *den_name) {
    if (den <= 0 || num % den != 0) {
        build_fail(b, FERRY_ERR_INVALID_CONFIG,
                   "model %s: %s = %lld is not divisible by %s = %lld", b->m->name, num_name,
                   (long long)num, den_name, (long long)den);
        return 0;
    }
    return num / den;
}

void build_begin_rank(builder_t *b, uint32_t rank) {
    b->rank = rank;
    b->emit = b->only_rank == FERRY_ALL_RANKS || b->only_rank == rank;
    b->flat_buffer = UINT32_MAX;
}

void build_end_rank(builder_t *b) { b->flat_buffer = UINT32_MAX; }

static void pass_through_layout_error(builder_t *b, ferry_status_t st) {
    build_fail(b, st, "%s", b->l->err.text);
}

static bool name_transposed(const builder_t *b, uint32_t ndim, const char *name) {
    return ndim >= 2 && b->p->transpose[0] && fnmatch(b->p->transpose, name, 0) == 0;
}

/* Opens a parameter named `name` of shape[ndim] (emitted rank, no failure yet). */
static param_t param_core(builder_t *b, ferry_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                          const char *name) {
    param_t q;
    memset(&q, 0, sizeof q);
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            build_fail(b, FERRY_ERR_INTERNAL, "parameter %s: dimension %u is %lld", name, d,
                       (long long)shape[d]);
            return q;
        }
        numel *= (uint64_t)shape[d];
    }
    bool transposed = name_transposed(b, ndim, name);
    snprintf(q.name, sizeof q.name, "%s", name);
    q.dtype = dtype;
    q.ndim = ndim;
    int64_t stride = 1;
    for (int d = (int)ndim - 1; d >= 0; d--) {
        q.shape[d] = shape[d];
        q.stride[d] = stride;
        stride *= shape[d];
    }
    if (transposed) { /* storage [.., C, R] for a logical [.., R, C] */
        int64_t r = shape[ndim - 2];
        q.stride[ndim - 1] = r;
        q.stride[ndim - 2] = 1;
    }
    uint64_t bytes = numel * ferry_dtype_size(dtype);
    ferry_status_t st;
    if (b->p->buffers == FERRY_BUFFERS_FLAT) {
        if (b->flat_buffer == UINT32_MAX) {
            int64_t zero = 0;
            st = layout_push_buffer(b->l, b->rank, "flat", FERRY_DTYPE_U8, 1, &zero, 0,
                                    &b->flat_buffer);
            if (st != FERRY_OK) {
                pass_through_layout_error(b, st);
                return q;
            }
        }
        layout_buffer_t *fb = &b->l->buffers[b->flat_buffer];
        q.buffer = b->flat_buffer;
        q.base = (uint64_t)round_up((int64_t)fb->size, BUILD_FLAT_ALIGN);
        fb->size = q.base + bytes;
        fb->shape[0] = (int64_t)fb->size;
    } else {
        int64_t stored[3] = {shape[0], ndim > 1 ? shape[1] : 0, ndim > 2 ? shape[2] : 0};
        if (transposed) {
            stored[ndim - 2] = shape[ndim - 1];
            stored[ndim - 1] = shape[ndim - 2];
        }
        st = layout_push_buffer(b->l, b->rank, name, dtype, ndim, stored, bytes, &q.buffer);
        if (st != FERRY_OK) {
            pass_through_layout_error(b, st);
            return q;
        }
        q.base = 0;
    }
    q.valid = true;
    return q;
}

param_t param_open(builder_t *b, ferry_dtype_t dtype, uint32_t ndim, int64_t d0, int64_t d1,
                   int64_t d2, const char *fmt, ...) {
    param_t q;
    memset(&q, 0, sizeof q);
    if (!b->emit || b->st != FERRY_OK) return q;
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    int64_t shape[3] = {d0, d1, d2};
    return param_core(b, dtype, ndim, shape, name);
}

static int64_t blocks_of(int64_t n) { return (n + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK; }

param_t param_open_q(builder_t *b, uint32_t t, uint32_t ndim, int64_t d0, int64_t d1, int64_t d2,
                     const char *fmt, ...) {
    param_t q;
    memset(&q, 0, sizeof q);
    if (b->st != FERRY_OK) return q;
    char name[256], sname[280];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    bool quant = build_is_fp8(b, t);
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    if (quant && ndim < 2) {
        build_fail(b, FERRY_ERR_INTERNAL, "fp8 parameter %s has %u dimension(s)", name, ndim);
        return q;
    }
    if (quant && (name_transposed(b, ndim, name) || name_transposed(b, ndim, sname))) {
        /* decided on every rank so that a one-rank build refuses alike */
        build_fail(b, FERRY_ERR_UNSUPPORTED,
                   "model %s: transpose=%s matches fp8 parameter %s; fp8 weights and their "
                   "weight_scale_inv are stored untransposed (as vLLM loads them)",
                   b->m->name, b->p->transpose, name_transposed(b, ndim, name) ? name : sname);
        return q;
    }
    if (!b->emit) return q;
    int64_t shape[3] = {d0, d1, d2};
    q = param_core(b, b->m->tensors[t].dtype, ndim, shape, name);
    if (!q.valid || !quant) return q;
    /* vLLM's BlockQuantScaleParameter: [.., ceil(rows/128), ceil(cols/128)] */
    int64_t sshape[3] = {d0, d1, d2};
    sshape[ndim - 2] = blocks_of(shape[ndim - 2]);
    sshape[ndim - 1] = blocks_of(shape[ndim - 1]);
    param_t s = param_core(b, FERRY_DTYPE_F32, ndim, sshape, sname);
    if (!s.valid) {
        q.valid = false;
        return q;
    }
    q.quant = true;
    q.sbuffer = s.buffer;
    q.sbase = s.base;
    memcpy(q.sstride, s.stride, sizeof q.sstride);
    return q;
}

bool build_quant_group(builder_t *b, const char *param, const uint32_t *ts, size_t n) {
    if (b->st != FERRY_OK || n == 0) return false;
    bool first = build_is_fp8(b, ts[0]);
    for (size_t i = 1; i < n; i++) {
        if (build_is_fp8(b, ts[i]) == first) continue;
        uint32_t q = first ? ts[0] : ts[i], plain = first ? ts[i] : ts[0];
        build_fail(b, FERRY_ERR_UNSUPPORTED,
                   "model %s: fused parameter %s holds fp8 %s and unquantized %s; vLLM quantizes all "
                   "shards of a fused layer alike (quantization_config's ignored_layers must name all "
                   "of them or none)",
                   b->m->name, param, model_tensor_name(b->m, q), model_tensor_name(b->m, plain));
        return false;
    }
    return first;
}

void build_fp8_out_parts(builder_t *b, const char *param, const int64_t *parts, size_t n, uint32_t split) {
    /* vLLM checks every part of a split parameter, all but the last of an
     * unsplit merged one, nothing else */
    size_t check = split > 1 ? n : n - 1;
    for (size_t i = 0; i < check && b->st == FERRY_OK; i++)
        if (parts[i] % FERRY_FP8_BLOCK != 0)
            build_fail(b, FERRY_ERR_UNSUPPORTED,
                       "model %s: fp8 parameter %s: Weight output_partition_size = %lld is not divisible by "
                       "weight quantization block_n = %u (vLLM refuses %s)",
                       b->m->name, param, (long long)parts[i], FERRY_FP8_BLOCK,
                       split > 1 ? "a tensor-parallel split that cuts a scale block"
                                 : "a merged parameter whose parts but the last cut a scale block");
}

void build_fp8_in_part(builder_t *b, const char *param, int64_t in_part, uint32_t split) {
    if (split > 1 && in_part % FERRY_FP8_BLOCK != 0)
        build_fail(b, FERRY_ERR_UNSUPPORTED,
                   "model %s: fp8 parameter %s: Weight input_size_per_partition = %lld is not divisible by "
                   "weight quantization block_k = %u (vLLM refuses a row-parallel split that cuts a scale "
                   "block)",
                   b->m->name, param, (long long)in_part, FERRY_FP8_BLOCK);
}

uint32_t build_tensor(builder_t *b, const char *fmt, ...) {
    char name[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name, sizeof name, fmt, ap);
    va_end(ap);
    uint32_t t = 0;
    if (!ferry_model_find(b->m, name, &t))
        build_fail(b, FERRY_ERR_INTERNAL, "model %s has no tensor %s", b->m->name, name);
    return t;
}

static void push_piece(builder_t *b, uint32_t buffer, uint64_t base, const int64_t *stride, uint32_t pndim,
                       ferry_dtype_t dtype, uint32_t t, const ferry_box_t *box, const int64_t *origin,
                       const uint32_t *map) {
    ferry_piece_t p;
    memset(&p, 0, sizeof p);
    p.tensor = t;
    p.box = *box;
    p.rank = b->rank;
    p.buffer = buffer;
    int64_t elem = 0;
    for (uint32_t k = 0; k < pndim; k++) elem += origin[k] * stride[k];
    for (uint32_t d = 0; d < box->ndim; d++) p.strides[d] = stride[map[d]];
    p.byte_offset = base + (uint64_t)elem * ferry_dtype_size(dtype);
    ferry_status_t st = layout_push_piece(b->l, &p);
    if (st != FERRY_OK) pass_through_layout_error(b, st);
}

/* blocks(box) of t's scale at origin / 128 in q's scale parameter */
static void place_scale(builder_t *b, const param_t *q, uint32_t t, const ferry_box_t *box,
                        const int64_t *origin, const uint32_t *map) {
    const model_tensor_t *mt = &b->m->tensors[t];
    ferry_box_t sb = *box;
    int64_t so[3] = {origin[0], q->ndim > 1 ? origin[1] : 0, q->ndim > 2 ? origin[2] : 0};
    const int64_t B = FERRY_FP8_BLOCK;
    for (uint32_t d = box->ndim - 2; d < box->ndim; d++) {
        int64_t off = box->offset[d], end = off + box->extent[d];
        if (off % B != 0 || (end % B != 0 && end != mt->shape[d]) || origin[map[d]] % B != 0) {
            char bx[160];
            ferry_box_format(box, bx, sizeof bx);
            build_fail(b, FERRY_ERR_UNSUPPORTED,
                       "model %s: fp8 parameter %s: %s %s at element %lld of dimension %u cuts a "
                       "128-element scale block (vLLM refuses such shards)",
                       b->m->name, q->name, model_tensor_name(b->m, t), bx, (long long)origin[map[d]],
                       map[d]);
            return;
        }
        sb.offset[d] = off / B;
        sb.extent[d] = blocks_of(end) - off / B;
        so[map[d]] = origin[map[d]] / B;
    }
    push_piece(b, q->sbuffer, q->sbase, q->sstride, q->ndim, FERRY_DTYPE_F32, mt->partner, &sb, so, map);
}

void place(builder_t *b, const param_t *q, uint32_t t, const ferry_box_t *box,
           const int64_t *origin, const uint32_t *map) {
    if (!q->valid || b->st != FERRY_OK) return;
    if (build_is_fp8(b, t) != q->quant) { /* the builders check groups first; a last guard */
        build_fail(b, FERRY_ERR_UNSUPPORTED,
                   "model %s: parameter %s is %s but tensor %s is %s; vLLM quantizes all shards of a "
                   "fused layer alike",
                   b->m->name, q->name, q->quant ? "fp8" : "unquantized", model_tensor_name(b->m, t),
                   q->quant ? "not" : "fp8");
        return;
    }
    push_piece(b, q->buffer, q->base, q->stride, q->ndim, q->dtype, t, box, origin, map);
    if (q->quant && b->st == FERRY_OK) place_scale(b, q, t, box, origin, map);
}

static ferry_box_t tensor_box(const builder_t *b, uint32_t t) {
    const model_tensor_t *mt = &b->m->tensors[t];
    return ferry_box_of_shape(mt->ndim, mt->shape);
}

/* maps a tensor of tndim dims onto the last tndim dims of the param */
static void trailing_map(const param_t *q, uint32_t tndim, uint32_t *map) {
    for (uint32_t d = 0; d < tndim; d++) map[d] = q->ndim - tndim + d;
}

void place_rows(builder_t *b, const param_t *q, uint32_t t, int64_t row0, int64_t nrows,
                int64_t lead, int64_t dst_row) {
    if (!q->valid || b->st != FERRY_OK || nrows <= 0) return;
    ferry_box_t box = tensor_box(b, t);
    box.offset[0] = row0;
    box.extent[0] = nrows;
    int64_t origin[3] = {0, 0, 0};
    uint32_t map[2];
    trailing_map(q, box.ndim, map);
    origin[map[0]] = dst_row;
    if (q->ndim == box.ndim + 1) origin[0] = lead;
    place(b, q, t, &box, origin, map);
}

void place_cols(builder_t *b, const param_t *q, uint32_t t, int64_t col0, int64_t ncols,
                int64_t lead, int64_t dst_col) {
    if (!q->valid || b->st != FERRY_OK || ncols <= 0) return;
    ferry_box_t box = tensor_box(b, t);
    box.offset[1] = col0;
    box.extent[1] = ncols;
    int64_t origin[3] = {0, 0, 0};
    uint32_t map[2];
    trailing_map(q, 2, map);
    origin[map[1]] = dst_col;
    if (q->ndim == 3) origin[0] = lead;
    place(b, q, t, &box, origin, map);
}

void place_whole(builder_t *b, const param_t *q, uint32_t t) {
    if (!q->valid || b->st != FERRY_OK) return;
    ferry_box_t box = tensor_box(b, t);
    int64_t origin[3] = {0, 0, 0};
    uint32_t map[2];
    trailing_map(q, box.ndim, map);
    place(b, q, t, &box, origin, map);
}

void emit_replicated(builder_t *b, const char *buffer, const char *tensor) {
    uint32_t ti = build_tensor(b, "%s", tensor);
    if (b->st != FERRY_OK) return;
    const model_tensor_t *mt = &b->m->tensors[ti];
    param_t q = param_open_q(b, ti, mt->ndim, mt->shape[0], mt->ndim > 1 ? mt->shape[1] : 0,
                             mt->ndim > 2 ? mt->shape[2] : 0, "%s", buffer);
    place_whole(b, &q, ti);
}

void emit_split_rows(builder_t *b, const char *buffer, const char *tensor, int64_t rows_total,
                     int64_t cols, uint32_t split, uint32_t index) {
    int64_t n = rows_total / split;
    uint32_t t = build_tensor(b, "%s", tensor);
    if (b->st == FERRY_OK && build_is_fp8(b, t)) build_fp8_out_parts(b, buffer, &n, 1, split);
    param_t q = param_open_q(b, t, cols ? 2 : 1, n, cols, 0, "%s", buffer);
    place_rows(b, &q, t, (int64_t)index * n, n, 0, 0);
}

void emit_split_cols(builder_t *b, const char *buffer, const char *tensor, int64_t rows,
                     int64_t cols_total, uint32_t split, uint32_t index) {
    int64_t n = cols_total / split;
    uint32_t t = build_tensor(b, "%s", tensor);
    if (b->st == FERRY_OK && build_is_fp8(b, t)) build_fp8_in_part(b, buffer, n, split);
    param_t q = param_open_q(b, t, 2, rows, n, 0, "%s", buffer);
    place_cols(b, &q, t, (int64_t)index * n, n, 0, 0);
}

void emit_vocab_shard(builder_t *b, const char *buffer, const char *tensor, int64_t rows,
                      uint32_t index) {
    int64_t v = b->a->vocab_size, r0 = (int64_t)index * rows;
    int64_t n = r0 + rows <= v ? rows : v - r0;
    uint32_t t = build_tensor(b, "%s", tensor);
    param_t q = param_open_q(b, t, 2, rows, b->a->hidden_size, 0, "%s", buffer);
    place_rows(b, &q, t, r0, n, 0, 0);
}

ferry_status_t ferry_layout_build(ferry_ctx_t *ctx, const ferry_model_t *model,
                                  const ferry_parallel_t *parallel, uint32_t rank,
                                  ferry_layout_t **out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (!model || !parallel || !out)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry_layout_build: NULL argument");
    if (model->arch.family == FERRY_FAMILY_CUSTOM)
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                          "model %s was built tensor by tensor; layout builders need a spec from a "
                          "config.json (add pieces by hand instead)",
                          model->name);
    if (parallel->side != FERRY_SIDE_TRAIN && parallel->side != FERRY_SIDE_INFER)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "parallel config: side must be train or infer");
    if (model->nquant && parallel->side == FERRY_SIDE_TRAIN)
        /* a trainer holds what it trains (bf16/fp32); fp8 and scales exist
         * only on the engine side, quantized on the way */
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                          "model %s declares %u fp8 block-quantized tensors; trainer layouts hold the "
                          "unquantized weights: build the trainer's spec with quant none (fp8 specs are "
                          "for engine layouts)",
                          model->name, model->nquant);
    uint32_t world = ferry_parallel_world_size(parallel);
    if (world == 0 || world > (1u << 24))
        return ferry_fail(err, FERRY_ERR_LIMIT, "parallel config spans more than 2^24 ranks");
    if (rank != FERRY_ALL_RANKS && rank >= world)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                          "rank %u is outside the world of %u ranks", rank, world);
    ferry_layout_t *l;
    ferry_status_t st = ferry_layout_create(ctx, model, world, &l);
    if (st != FERRY_OK) return st;
    l->has_parallel = true;
    l->parallel = *parallel;
    builder_t b = {.l = l, .m = model, .a = &model->arch, .p = &l->parallel, .only_rank = rank,
                   .flat_buffer = UINT32_MAX, .st = FERRY_OK, .err = err};
    st = parallel->side == FERRY_SIDE_TRAIN ? build_train(&b) : build_infer(&b);
    if (st != FERRY_OK) {
        ferry_layout_destroy(l);
        return st;
    }
    layout_index_ranks(l);
    ferry_log(ctx, FERRY_LOG_DEBUG, "layout of %s: %u ranks, %zu buffers, %zu pieces", model->name,
              world, l->nbuffers, l->npieces);
    *out = l;
    return FERRY_OK;
}
