#include <stdio.h>
#include <string.h>
#include <xxhash.h>

#include "layout/layout_internal.h"

#define LAYOUT_MAX_WORLD (1u << 24)

ferry_status_t ferry_layout_create(ferry_ctx_t *ctx, const ferry_model_t *model,
                                   uint32_t world_size, ferry_layout_t **out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (!model || !out)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "ferry_layout_create: NULL argument");
    if (world_size == 0 || world_size > LAYOUT_MAX_WORLD)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_layout_create: world size %u is outside [1, %u]", world_size,
                          LAYOUT_MAX_WORLD);
    ferry_layout_t *l = ferry_calloc(ctx, 1, sizeof *l);
    if (!l) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory");
    l->ctx = ctx;
    l->model = model;
    l->world = world_size;
    l->rank_first = ferry_calloc(ctx, (size_t)world_size + 1, sizeof *l->rank_first);
    l->rank_info = ferry_calloc(ctx, world_size, sizeof *l->rank_info);
    if (!l->rank_first || !l->rank_info) {
        ferry_layout_destroy(l);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory for %u ranks", world_size);
    }
    *out = l;
    return FERRY_OK;
}

void ferry_layout_destroy(ferry_layout_t *l) {
    if (!l) return;
    ferry_ctx_t *ctx = l->ctx;
    ferry_free(ctx, l->pieces);
    ferry_free(ctx, l->rank_first);
    ferry_free(ctx, l->buffers);
    ferry_free(ctx, l->names);
    ferry_free(ctx, l->rank_info);
    ferry_free(ctx, l);
}

ferry_status_t layout_push_buffer(ferry_layout_t *l, uint32_t rank, const char *name,
                                  ferry_dtype_t dtype, uint32_t ndim, const int64_t *shape,
                                  uint64_t size, uint32_t *index) {
    if (l->nbuffers >= UINT32_MAX - 1)
        return ferry_fail(&l->err, FERRY_ERR_LIMIT, "more than 2^32 buffers");
    size_t len = strlen(name) + 1;
    if (ferry_grow(l->ctx, (void **)&l->names, 1, &l->names_cap, l->names_len + len) ||
        ferry_grow(l->ctx, (void **)&l->buffers, sizeof *l->buffers, &l->cap_buffers,
                   l->nbuffers + 1))
        return ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory adding buffer %s", name);
    layout_buffer_t *b = &l->buffers[l->nbuffers];
    memset(b, 0, sizeof *b);
    b->name_off = l->names_len;
    b->rank = rank;
    b->size = size;
    b->dtype = dtype;
    b->ndim = ndim;
    for (uint32_t d = 0; d < ndim && d < FERRY_MAX_DIMS; d++) b->shape[d] = shape[d];
    memcpy(l->names + l->names_len, name, len);
    l->names_len += len;
    *index = (uint32_t)l->nbuffers++;
    return FERRY_OK;
}

ferry_status_t ferry_layout_add_buffer(ferry_layout_t *l, uint32_t rank, const char *name,
                                       ferry_dtype_t dtype, uint64_t size, uint32_t *index) {
    if (!l) return FERRY_ERR_INVALID_ARGUMENT;
    if (!name || !name[0] || !index)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_layout_add_buffer: name and index must be given");
    if (rank >= l->world)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "buffer %s: rank %u is outside the world of %u ranks", name, rank,
                          l->world);
    if (ferry_dtype_size(dtype) == 0)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT, "buffer %s: invalid dtype %d", name,
                          (int)dtype);
    if (size == 0 || size % ferry_dtype_size(dtype) != 0)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "buffer %s: size %llu is not a positive multiple of the %s element size",
                          name, (unsigned long long)size, ferry_dtype_name(dtype));
    int64_t shape[1] = {(int64_t)(size / ferry_dtype_size(dtype))};
    return layout_push_buffer(l, rank, name, dtype, 1, shape, size, index);
}

ferry_status_t layout_check_piece(ferry_layout_t *l, const ferry_piece_t *p) {
    const ferry_model_t *m = l->model;
    if (p->tensor >= m->ntensors)
        return ferry_fail(&l->err, FERRY_ERR_NOT_FOUND, "piece names tensor %u; the model has %zu",
                          p->tensor, m->ntensors);
    const model_tensor_t *t = &m->tensors[p->tensor];
    const char *tname = model_tensor_name(m, p->tensor);
    char box[256];
    ferry_box_format(&p->box, box, sizeof box);
    if (p->box.ndim != t->ndim)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "piece of %s: box %s has %u dimensions, the tensor %u", tname, box,
                          p->box.ndim, t->ndim);
    ferry_box_t whole = ferry_box_of_shape(t->ndim, t->shape);
    if (ferry_box_numel(&p->box) == 0 || !ferry_box_contains(&whole, &p->box))
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "piece of %s: box %s is empty or outside the tensor", tname, box);
    if (p->rank >= l->world)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "piece of %s %s: rank %u is outside the world of %u ranks", tname, box,
                          p->rank, l->world);
    if (p->buffer >= l->nbuffers || l->buffers[p->buffer].rank != p->rank)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "piece of %s %s: buffer %u is not a buffer of rank %u", tname, box,
                          p->buffer, p->rank);
    const layout_buffer_t *b = &l->buffers[p->buffer];
    if (b->dtype != FERRY_DTYPE_U8 && b->dtype != t->dtype)
        return ferry_fail(&l->err, FERRY_ERR_MISMATCH,
                          "piece of %s %s: buffer %s holds %s, the tensor is %s", tname, box,
                          layout_buffer_name(l, p->buffer), ferry_dtype_name(b->dtype),
                          ferry_dtype_name(t->dtype));
    uint64_t esz = ferry_dtype_size(t->dtype), last = 0, tmp;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (p->strides[d] < 0)
            return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                              "piece of %s %s: negative stride %lld", tname, box,
                              (long long)p->strides[d]);
        if (ferry_mul_u64((uint64_t)(p->box.extent[d] - 1), (uint64_t)p->strides[d], &tmp) ||
            ferry_add_u64(last, tmp, &last))
            return ferry_fail(&l->err, FERRY_ERR_LIMIT, "piece of %s %s: strides overflow", tname, box);
    }
    uint64_t end;
    if (ferry_mul_u64(last + 1, esz, &end) || ferry_add_u64(end, p->byte_offset, &end) ||
        end > b->size)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "piece of %s %s: bytes up to offset %llu fall outside buffer %s of %llu "
                          "bytes",
                          tname, box, (unsigned long long)end, layout_buffer_name(l, p->buffer),
                          (unsigned long long)b->size);
    if (b->dtype == FERRY_DTYPE_U8 && p->byte_offset % esz != 0)
        return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT,
                          "piece of %s %s: byte offset %llu is not aligned to %llu-byte elements",
                          tname, box, (unsigned long long)p->byte_offset, (unsigned long long)esz);
    return FERRY_OK;
}

ferry_status_t layout_push_piece(ferry_layout_t *l, const ferry_piece_t *p) {
    ferry_status_t st = layout_check_piece(l, p);
    if (st != FERRY_OK) return st;
    if (ferry_grow(l->ctx, (void **)&l->pieces, sizeof *l->pieces, &l->cap_pieces, l->npieces + 1))
        return ferry_fail(&l->err, FERRY_ERR_NO_MEMORY, "out of memory adding a piece");
    ferry_piece_t *q = &l->pieces[l->npieces++];
    *q = *p;
    /* canonical form: unused dimensions are zero, so digests and equality are exact */
    for (uint32_t d = p->box.ndim; d < FERRY_MAX_DIMS; d++)
        q->box.offset[d] = q->box.extent[d] = q->strides[d] = 0;
    return FERRY_OK;
}

void layout_index_ranks(ferry_layout_t *l) {
    memset(l->rank_first, 0, ((size_t)l->world + 1) * sizeof *l->rank_first);
    for (size_t i = 0; i < l->npieces; i++) l->rank_first[l->pieces[i].rank + 1]++;
    for (uint32_t r = 0; r < l->world; r++) l->rank_first[r + 1] += l->rank_first[r];
}

ferry_status_t ferry_layout_add_piece(ferry_layout_t *l, const ferry_piece_t *p) {
    if (!l) return FERRY_ERR_INVALID_ARGUMENT;
    if (!p) return ferry_fail(&l->err, FERRY_ERR_INVALID_ARGUMENT, "ferry_layout_add_piece: NULL piece");
    ferry_status_t st = layout_push_piece(l, p);
    if (st != FERRY_OK) return st;
    /* keep pieces grouped by rank: move the new piece to the end of its rank */
    size_t at = l->rank_first[p->rank + 1];
    if (at < l->npieces - 1) {
        ferry_piece_t tmp = l->pieces[l->npieces - 1];
        memmove(&l->pieces[at + 1], &l->pieces[at], (l->npieces - 1 - at) * sizeof tmp);
        l->pieces[at] = tmp;
    }
    for (uint32_t r = p->rank + 1; r <= l->world; r++) l->rank_first[r]++;
    return FERRY_OK;
}

const ferry_model_t *ferry_layout_model(const ferry_layout_t *l) { return l->model; }
uint32_t ferry_layout_world_size(const ferry_layout_t *l) { return l->world; }
size_t ferry_layout_piece_count(const ferry_layout_t *l) { return l->npieces; }
const ferry_piece_t *ferry_layout_pieces(const ferry_layout_t *l) { return l->pieces; }
uint32_t ferry_layout_buffer_count(const ferry_layout_t *l) { return (uint32_t)l->nbuffers; }
const char *ferry_layout_error(const ferry_layout_t *l) { return l ? l->err.text : ""; }

const ferry_parallel_t *ferry_layout_parallel(const ferry_layout_t *l) {
    return l->has_parallel ? &l->parallel : NULL;
}

bool ferry_layout_buffer(const ferry_layout_t *l, uint32_t index, ferry_buffer_info_t *out) {
    if (!l || index >= l->nbuffers || !out) return false;
    const layout_buffer_t *b = &l->buffers[index];
    memset(out, 0, sizeof *out);
    out->name = layout_buffer_name(l, index);
    out->rank = b->rank;
    out->size = b->size;
    out->dtype = b->dtype;
    out->ndim = b->ndim;
    for (uint32_t d = 0; d < b->ndim; d++) out->shape[d] = b->shape[d];
    return true;
}

void ferry_layout_rank_pieces(const ferry_layout_t *l, uint32_t rank, size_t *first,
                              size_t *count) {
    if (rank >= l->world) {
        *first = *count = 0;
        return;
    }
    *first = l->rank_first[rank];
    *count = l->rank_first[rank + 1] - l->rank_first[rank];
}

bool ferry_layout_rank_info(const ferry_layout_t *l, uint32_t rank, ferry_rank_info_t *out) {
    if (!l || rank >= l->world || !out) return false;
    *out = l->rank_info[rank];
    return true;
}

static void h_u64(XXH3_state_t *s, uint64_t v) {
    unsigned char b[8];
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
    XXH3_64bits_update(s, b, sizeof b);
}

static void h_str(XXH3_state_t *s, const char *str) {
    size_t n = strlen(str);
    h_u64(s, n);
    XXH3_64bits_update(s, str, n);
}

uint64_t ferry_layout_digest(const ferry_layout_t *l) {
    XXH3_state_t *s = XXH3_createState();
    if (!s) return 0;
    XXH3_64bits_reset(s);
    const ferry_model_t *m = l->model;
    h_u64(s, m->ntensors);
    for (size_t i = 0; i < m->ntensors; i++) {
        const model_tensor_t *t = &m->tensors[i];
        h_str(s, model_tensor_name(m, (uint32_t)i));
        /* quant kind and flags ride in the dtype word, zero for plain
         * tensors (their digests stay what they were); the partner follows
         * only when the word says so */
        h_u64(s, (uint64_t)t->dtype | (uint64_t)t->quant << 32 | (uint64_t)t->quant_flags << 40);
        if (t->quant != FERRY_QUANT_NONE) h_u64(s, ((uint64_t)t->partner << 16) | FERRY_FP8_BLOCK);
        h_u64(s, t->ndim);
        for (uint32_t d = 0; d < t->ndim; d++) h_u64(s, (uint64_t)t->shape[d]);
    }
    h_u64(s, l->world);
    h_u64(s, l->nbuffers);
    for (size_t i = 0; i < l->nbuffers; i++) {
        const layout_buffer_t *b = &l->buffers[i];
        h_str(s, layout_buffer_name(l, (uint32_t)i));
        h_u64(s, b->rank);
        h_u64(s, b->size);
        h_u64(s, (uint64_t)b->dtype);
    }
    h_u64(s, l->npieces);
    for (size_t i = 0; i < l->npieces; i++) {
        const ferry_piece_t *p = &l->pieces[i];
        h_u64(s, p->tensor);
        h_u64(s, p->rank);
        h_u64(s, p->buffer);
        h_u64(s, p->byte_offset);
        h_u64(s, p->box.ndim);
        for (uint32_t d = 0; d < p->box.ndim; d++) {
            h_u64(s, (uint64_t)p->box.offset[d]);
            h_u64(s, (uint64_t)p->box.extent[d]);
            h_u64(s, (uint64_t)p->strides[d]);
        }
    }
    uint64_t h = XXH3_64bits_digest(s);
    XXH3_freeState(s);
    return h;
}
