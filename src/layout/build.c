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
    uint64_t numel = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] <= 0) {
            build_fail(b, FERRY_ERR_INTERNAL, "parameter %s: dimension %u is %lld", name, d,
                       (long long)shape[d]);
            return q;
        }
        numel *= (uint64_t)shape[d];
    }
    bool transposed = ndim >= 2 && b->p->transpose[0] && fnmatch(b->p->transpose, name, 0) == 0;
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
        int64_t stored[3] = {shape[0], shape[1], shape[2]};
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

void place(builder_t *b, const param_t *q, uint32_t t, const ferry_box_t *box,
           const int64_t *origin, const uint32_t *map) {
    if (!q->valid || b->st != FERRY_OK) return;
    ferry_piece_t p;
    memset(&p, 0, sizeof p);
    p.tensor = t;
    p.box = *box;
    p.rank = b->rank;
    p.buffer = q->buffer;
    int64_t elem = 0;
    for (uint32_t k = 0; k < q->ndim; k++) elem += origin[k] * q->stride[k];
    for (uint32_t d = 0; d < box->ndim; d++) p.strides[d] = q->stride[map[d]];
    p.byte_offset = q->base + (uint64_t)elem * ferry_dtype_size(q->dtype);
    ferry_status_t st = layout_push_piece(b->l, &p);
    if (st != FERRY_OK) pass_through_layout_error(b, st);
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
    param_t q = param_open(b, mt->dtype, mt->ndim, mt->shape[0], mt->ndim > 1 ? mt->shape[1] : 0, 0,
                           "%s", buffer);
    place_whole(b, &q, ti);
}

void emit_split_rows(builder_t *b, const char *buffer, const char *tensor, int64_t rows_total,
                     int64_t cols, uint32_t split, uint32_t index) {
    int64_t n = rows_total / split;
    param_t q = param_open(b, b->a->dtype, cols ? 2 : 1, n, cols, 0, "%s", buffer);
    place_rows(b, &q, build_tensor(b, "%s", tensor), (int64_t)index * n, n, 0, 0);
}

void emit_split_cols(builder_t *b, const char *buffer, const char *tensor, int64_t rows,
                     int64_t cols_total, uint32_t split, uint32_t index) {
    int64_t n = cols_total / split;
    param_t q = param_open(b, b->a->dtype, 2, rows, n, 0, "%s", buffer);
    place_cols(b, &q, build_tensor(b, "%s", tensor), (int64_t)index * n, n, 0, 0);
}

void emit_vocab_shard(builder_t *b, const char *buffer, const char *tensor, int64_t rows,
                      uint32_t index) {
    int64_t v = b->a->vocab_size, r0 = (int64_t)index * rows;
    int64_t n = r0 + rows <= v ? rows : v - r0;
    param_t q = param_open(b, b->a->dtype, 2, rows, b->a->hidden_size, 0, "%s", buffer);
    place_rows(b, &q, build_tensor(b, "%s", tensor), r0, n, 0, 0);
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
    if (model->nquant)
        /* the builders do not place scale tensors yet: refuse rather than
         * give a layout that leaves them uncovered */
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED,
                          "model %s declares %u fp8 block-quantized tensors; the layout builders do not "
                          "lay out fp8 engines yet (add pieces by hand, or generate the spec with quant none)",
                          model->name, model->nquant);
    if (parallel->side != FERRY_SIDE_TRAIN && parallel->side != FERRY_SIDE_INFER)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "parallel config: side must be train or infer");
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
