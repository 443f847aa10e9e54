/* Fuzz target: the planner on small hand-made layouts decoded from the input.
 * Any layout the layout module accepts must either plan, with a plan that
 * ferry_plan_verify accepts and that, executed element by element, puts the
 * right value into every destination element exactly once; or fail with a
 * status and a detail text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "ferry/ferry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

typedef struct {
    const uint8_t *p;
    size_t n;
} input_t;

static unsigned take(input_t *in, unsigned mod) {
    if (in->n == 0) return 0;
    unsigned v = *in->p++;
    in->n--;
    return mod ? v % mod : v;
}

#define MAX_T 3

typedef struct {
    char name[8];
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[3];
} spec_t;

/* The value of element `linear` of tensor t, as esize bytes. */
static void value_of(uint32_t t, int64_t linear, size_t esize, uint8_t *out) {
    uint64_t h = ((uint64_t)t << 40) ^ (uint64_t)linear;
    h *= 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    memcpy(out, &h, esize);
}

/* Visits every element of box (row-major); idx holds the index. */
static int next_index(const ferry_box_t *b, int64_t *idx) {
    for (uint32_t d = b->ndim; d-- > 0;) {
        if (++idx[d] < b->offset[d] + b->extent[d]) return 1;
        idx[d] = b->offset[d];
    }
    return 0;
}

static int64_t linear_of(const spec_t *s, const int64_t *idx) {
    int64_t l = 0;
    for (uint32_t d = 0; d < s->ndim; d++) l = l * s->shape[d] + idx[d];
    return l;
}

static uint64_t addr_of(const ferry_piece_t *q, const int64_t *idx, size_t esize) {
    uint64_t e = 0;
    for (uint32_t d = 0; d < q->box.ndim; d++) e += (uint64_t)(idx[d] - q->box.offset[d]) * (uint64_t)q->strides[d];
    return q->byte_offset + e * esize;
}

/* Adds a piece of tensor t on rank with its own buffer; storage from the input. */
static void add_piece(ferry_layout_t *l, const spec_t *sp, uint32_t t, uint32_t rank, input_t *in) {
    ferry_piece_t q;
    memset(&q, 0, sizeof q);
    q.tensor = t;
    q.rank = rank;
    q.box.ndim = sp[t].ndim;
    for (uint32_t d = 0; d < sp[t].ndim; d++) {
        int64_t n = sp[t].shape[d];
        q.box.offset[d] = take(in, (unsigned)n);
        q.box.extent[d] = 1 + take(in, (unsigned)(n - q.box.offset[d]));
    }
    /* strides: row-major, or transposed (first two dims swapped), with padding */
    unsigned kind = take(in, 3), pad = take(in, 3);
    int64_t stride = 1;
    for (uint32_t d = q.box.ndim; d-- > 0;) {
        q.strides[d] = stride;
        stride *= q.box.extent[d] + (d == q.box.ndim - 1 ? pad : 0);
    }
    if (kind == 1 && q.box.ndim >= 2) {
        q.strides[q.box.ndim - 1] = q.box.extent[q.box.ndim - 2];
        q.strides[q.box.ndim - 2] = 1;
        int64_t s = q.box.extent[q.box.ndim - 1] * q.box.extent[q.box.ndim - 2];
        for (uint32_t d = q.box.ndim - 2; d-- > 0;) {
            q.strides[d] = s;
            s *= q.box.extent[d];
        }
        stride = s;
    }
    size_t esize = ferry_dtype_size(sp[t].dtype);
    q.byte_offset = (uint64_t)take(in, 4) * esize;
    uint32_t b;
    if (ferry_layout_add_buffer(l, rank, sp[t].name, sp[t].dtype, q.byte_offset + (uint64_t)stride * esize, &b))
        return;
    q.buffer = b;
    (void)ferry_layout_add_piece(l, &q); /* refused pieces are simply absent */
}

static void check_plan(const ferry_plan_t *plan, const ferry_layout_t *src, const ferry_layout_t *dst,
                       const spec_t *sp) {
    uint32_t nb = ferry_layout_buffer_count(dst), sb = ferry_layout_buffer_count(src);
    uint8_t **mem = calloc(nb + 1, sizeof *mem), **smem = calloc(sb + 1, sizeof *smem);
    uint8_t **writes = calloc(nb + 1, sizeof *writes);
    if (!mem || !smem || !writes) abort();
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(dst, b, &bi);
        mem[b] = calloc(bi.size + 1, 1);
        writes[b] = calloc(bi.size + 1, 1);
        if (!mem[b] || !writes[b]) abort();
    }
    for (uint32_t b = 0; b < sb; b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(src, b, &bi);
        smem[b] = calloc(bi.size + 1, 1);
        if (!smem[b]) abort();
    }
    /* sources hold their elements' values */
    for (size_t i = 0; i < ferry_layout_piece_count(src); i++) {
        const ferry_piece_t *q = &ferry_layout_pieces(src)[i];
        size_t es = ferry_dtype_size(sp[q->tensor].dtype);
        int64_t idx[FERRY_MAX_DIMS];
        for (uint32_t d = 0; d < q->box.ndim; d++) idx[d] = q->box.offset[d];
        do value_of(q->tensor, linear_of(&sp[q->tensor], idx), es, smem[q->buffer] + addr_of(q, idx, es));
        while (next_index(&q->box, idx));
    }
    /* execute every op element by element through its strides */
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        const ferry_copy_op_t *op = &ops[i];
        size_t es = ferry_dtype_size(sp[op->tensor].dtype);
        int64_t idx[FERRY_MAX_DIMS];
        for (uint32_t d = 0; d < op->box.ndim; d++) idx[d] = op->box.offset[d];
        do {
            uint64_t s = op->src_offset, t = op->dst_offset;
            for (uint32_t d = 0; d < op->box.ndim; d++) {
                s += (uint64_t)(idx[d] - op->box.offset[d]) * (uint64_t)op->src_strides[d] * es;
                t += (uint64_t)(idx[d] - op->box.offset[d]) * (uint64_t)op->dst_strides[d] * es;
            }
            memcpy(mem[op->dst_buffer] + t, smem[op->src_buffer] + s, es);
            for (size_t k = 0; k < es; k++)
                if (writes[op->dst_buffer][t + k]++ != 0) abort(); /* written twice */
        } while (next_index(&op->box, idx));
    }
    /* every destination element holds its value, written once */
    for (size_t i = 0; i < ferry_layout_piece_count(dst); i++) {
        const ferry_piece_t *q = &ferry_layout_pieces(dst)[i];
        size_t es = ferry_dtype_size(sp[q->tensor].dtype);
        int64_t idx[FERRY_MAX_DIMS];
        for (uint32_t d = 0; d < q->box.ndim; d++) idx[d] = q->box.offset[d];
        do {
            uint8_t want[8];
            uint64_t a = addr_of(q, idx, es);
            value_of(q->tensor, linear_of(&sp[q->tensor], idx), es, want);
            if (memcmp(mem[q->buffer] + a, want, es) != 0 || writes[q->buffer][a] != 1) abort();
        } while (next_index(&q->box, idx));
    }
    for (uint32_t b = 0; b < nb; b++) free(mem[b]), free(writes[b]);
    for (uint32_t b = 0; b < sb; b++) free(smem[b]);
    free(mem);
    free(smem);
    free(writes);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > 512) return 0;
    input_t in = {data, size};
    ferry_ctx_t *ctx = NULL;
    if (ferry_ctx_create(NULL, &ctx, NULL, 0) != FERRY_OK) abort();
    spec_t sp[MAX_T];
    uint32_t nt = 1 + take(&in, MAX_T);
    ferry_model_t *m = NULL;
    if (ferry_model_create(ctx, "fuzz", &m) != FERRY_OK) abort();
    static const ferry_dtype_t dtypes[3] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3};
    for (uint32_t t = 0; t < nt; t++) {
        memset(&sp[t], 0, sizeof sp[t]);
        sp[t].name[0] = (char)('a' + t);
        sp[t].dtype = dtypes[take(&in, 3)];
        sp[t].ndim = take(&in, 4);
        for (uint32_t d = 0; d < sp[t].ndim; d++) sp[t].shape[d] = 1 + take(&in, 6);
        uint32_t idx;
        if (ferry_model_add_tensor(m, sp[t].name, sp[t].dtype, sp[t].ndim, sp[t].shape, &idx) != FERRY_OK)
            abort();
    }
    uint32_t sw = 1 + take(&in, 4), dw = 1 + take(&in, 4);
    ferry_layout_t *src = NULL, *dst = NULL;
    if (ferry_layout_create(ctx, m, sw, &src) != FERRY_OK || ferry_layout_create(ctx, m, dw, &dst) != FERRY_OK)
        abort();
    ferry_plan_params_t params;
    memset(&params, 0, sizeof params);
    unsigned flags = take(&in, 0);
    uint32_t src_hosts[4], dst_hosts[4];
    for (uint32_t r = 0; r < 4; r++) src_hosts[r] = take(&in, 3), dst_hosts[r] = take(&in, 3);
    if (flags & 1) params.field_mask |= FERRY_PLAN_PARAM_SRC_HOSTS | FERRY_PLAN_PARAM_DST_HOSTS;
    params.src_hosts = src_hosts;
    params.dst_hosts = dst_hosts;
    if (flags & 2) params.field_mask |= FERRY_PLAN_PARAM_BUCKET_BYTES, params.bucket_bytes = 1 + take(&in, 64);
    if (flags & 4) params.field_mask |= FERRY_PLAN_PARAM_PACK_BELOW, params.pack_below = take(&in, 0);
    while (in.n > 0) {
        unsigned side = take(&in, 2);
        ferry_layout_t *l = side ? dst : src;
        uint32_t rank = take(&in, side ? dw : sw), t = take(&in, nt);
        add_piece(l, sp, t, rank, &in);
    }
    ferry_plan_t *plan = NULL;
    ferry_status_t st = ferry_plan_build(ctx, src, dst, &params, &plan);
    if (st == FERRY_OK) {
        if (ferry_plan_verify(plan, src, dst) != FERRY_OK) abort();
        check_plan(plan, src, dst, sp);
        ferry_plan_destroy(plan);
    } else if (ferry_ctx_error(ctx)[0] == '\0' || plan != NULL) {
        abort();
    }
    ferry_layout_destroy(src);
    ferry_layout_destroy(dst);
    ferry_model_destroy(m);
    ferry_ctx_destroy(ctx);
    return 0;
}
