/* One member's layout on the wire: see rank_layout.h. */
#include <stdbool.h>
#include <string.h>

#include "meta/proto.h"
#include "meta/rank_layout.h"

ferry_status_t meta_rank_layout_encode(ferry_ctx_t *ctx, const meta_rank_layout_t *rl, uint8_t **out, size_t *len,
                                       ferry_errbuf_t *err) {
    size_t nt = rl->n_tensors, nb = rl->n_buffers;
    FerryMeta__Tensor *tens = ferry_calloc(ctx, nt ? nt : 1, sizeof *tens);
    FerryMeta__Tensor **tenp = ferry_calloc(ctx, nt ? nt : 1, sizeof *tenp);
    FerryMeta__Buffer *bufs = ferry_calloc(ctx, nb ? nb : 1, sizeof *bufs);
    FerryMeta__Buffer **bufp = ferry_calloc(ctx, nb ? nb : 1, sizeof *bufp);
    ferry_status_t st = FERRY_OK;
    if (!tens || !tenp || !bufs || !bufp) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory encoding the layout");
        goto done;
    }
    for (size_t t = 0; t < nt; t++) {
        ferry_meta__tensor__init(&tens[t]);
        tens[t].name = (char *)rl->tensors[t].name;
        tens[t].dtype = rl->tensors[t].dtype;
        tens[t].n_shape = rl->tensors[t].ndim;
        tens[t].shape = (int64_t *)rl->tensors[t].shape;
        if (rl->tensors[t].quant) { /* plain tensors encode as they always did */
            tens[t].quant = rl->tensors[t].quant;
            tens[t].quant_partner = (char *)(rl->tensors[t].quant_partner ? rl->tensors[t].quant_partner : "");
            tens[t].quant_flags = rl->tensors[t].quant_flags;
        }
        tenp[t] = &tens[t];
    }
    for (size_t b = 0; b < nb; b++) {
        ferry_meta__buffer__init(&bufs[b]);
        bufs[b].name = (char *)rl->buffers[b].name;
        bufs[b].dtype = rl->buffers[b].dtype;
        bufs[b].size = rl->buffers[b].size;
        bufp[b] = &bufs[b];
    }
    FerryMeta__Pieces pc = FERRY_META__PIECES__INIT;
    pc.n_tensor = pc.n_buffer = pc.n_byte_offset = pc.n_ndim = rl->n_pieces;
    pc.tensor = (uint32_t *)rl->tensor;
    pc.buffer = (uint32_t *)rl->buffer;
    pc.byte_offset = (uint64_t *)rl->byte_offset;
    pc.ndim = (uint32_t *)rl->ndim;
    pc.n_box = rl->n_box;
    pc.box = (int64_t *)rl->box;
    pc.n_strides = rl->n_strides;
    pc.strides = (int64_t *)rl->strides;
    FerryMeta__RankLayout m = FERRY_META__RANK_LAYOUT__INIT;
    m.rank = rl->rank;
    m.host = (char *)(rl->host ? rl->host : "");
    m.n_tensors = nt;
    m.tensors = tenp;
    m.n_buffers = nb;
    m.buffers = bufp;
    m.pieces = &pc; /* present even when empty: the bytes stay what they always were */
    size_t n = protobuf_c_message_get_packed_size(&m.base);
    uint8_t *buf = ferry_alloc(ctx, n ? n : 1);
    if (!buf) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory encoding a %zu-byte layout", n);
        goto done;
    }
    protobuf_c_message_pack(&m.base, buf);
    *out = buf;
    *len = n;
done:
    ferry_free(ctx, tens);
    ferry_free(ctx, tenp);
    ferry_free(ctx, bufs);
    ferry_free(ctx, bufp);
    return st;
}

/* Checks one decoded RankLayout's shape before anything in it is used. */
static ferry_status_t check_rank_layout(const FerryMeta__RankLayout *rl, uint32_t want_rank, const char *what,
                                        ferry_errbuf_t *err) {
    if (rl->rank != want_rank)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "%s layout %u says it is rank %u", what, want_rank, rl->rank);
    if (rl->host && strlen(rl->host) > META_MAX_NAME)
        return ferry_fail(err, FERRY_ERR_LIMIT, "%s %u: host name too long", what, want_rank);
    const FerryMeta__Pieces *p = rl->pieces;
    size_t np = p ? p->n_tensor : 0;
    if (p && (p->n_buffer != np || p->n_byte_offset != np || p->n_ndim != np))
        return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: piece columns of different lengths", what, want_rank);
    size_t dims = 0;
    for (size_t i = 0; i < np; i++) {
        if (p->ndim[i] > META_MAX_DIMS)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: piece %zu has %u dims", what, want_rank, i, p->ndim[i]);
        if (p->tensor[i] >= rl->n_tensors || p->buffer[i] >= rl->n_buffers)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: piece %zu names tensor %u of %zu, buffer %u of %zu",
                              what, want_rank, i, p->tensor[i], rl->n_tensors, p->buffer[i], rl->n_buffers);
        dims += p->ndim[i];
    }
    if (p && (p->n_box != 2 * dims || p->n_strides != dims))
        return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: box/stride columns do not match the dims", what, want_rank);
    for (size_t t = 0; t < rl->n_tensors; t++) {
        const FerryMeta__Tensor *tt = rl->tensors[t];
        if (!tt->name || !*tt->name || strlen(tt->name) > META_MAX_TENSOR_NAME || tt->n_shape > META_MAX_DIMS)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: tensor %zu is malformed", what, want_rank, t);
        bool partner = tt->quant_partner && *tt->quant_partner;
        if ((tt->quant != 0) != partner || (tt->quant == 0 && tt->quant_flags != 0) ||
            (partner && strlen(tt->quant_partner) > META_MAX_TENSOR_NAME))
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: tensor %s has a malformed quant %u (partner \"%.64s\")",
                              what, want_rank, tt->name, tt->quant, partner ? tt->quant_partner : "");
    }
    for (size_t b = 0; b < rl->n_buffers; b++)
        if (!rl->buffers[b]->name || strlen(rl->buffers[b]->name) > META_MAX_TENSOR_NAME)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u: buffer %zu is malformed", what, want_rank, b);
    return FERRY_OK;
}

ferry_status_t meta_rank_layout_decode(ferry_ctx_t *ctx, const uint8_t *data, size_t len, uint32_t want_rank,
                                       const char *what, meta_rank_layout_t **out, ferry_errbuf_t *err) {
    ProtobufCAllocator pa = meta_allocator(ctx);
    FerryMeta__RankLayout *m = ferry_meta__rank_layout__unpack(&pa, len, len ? data : (const uint8_t *)"");
    if (!m) return ferry_fail(err, FERRY_ERR_CORRUPT, "%s %u's layout (%zu bytes) does not decode", what, want_rank, len);
    ferry_status_t st = check_rank_layout(m, want_rank, what, err);
    if (st != FERRY_OK) {
        ferry_meta__rank_layout__free_unpacked(m, &pa);
        return st;
    }
    size_t total = meta_carve_size(0, 1, sizeof(meta_rank_layout_t));
    total = meta_carve_size(total, 1, sizeof(struct meta_reply_priv));
    total = meta_carve_size(total, m->n_tensors, sizeof(meta_rank_tensor_t));
    total = meta_carve_size(total, m->n_buffers, sizeof(meta_rank_buffer_t));
    uint8_t *block = total < SIZE_MAX ? ferry_calloc(ctx, 1, total) : NULL, *at = block;
    if (!block) {
        ferry_meta__rank_layout__free_unpacked(m, &pa);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory decoding %s %u's layout", what, want_rank);
    }
    const uint8_t *end = block + total;
    meta_rank_layout_t *rl = meta_carve(&at, end, sizeof *rl);
    rl->priv = meta_carve(&at, end, sizeof *rl->priv);
    meta_rank_tensor_t *tens = meta_carve(&at, end, m->n_tensors * sizeof *tens);
    meta_rank_buffer_t *bufs = meta_carve(&at, end, m->n_buffers * sizeof *bufs);
    rl->priv->ctx = ctx;
    rl->priv->msg = &m->base;
    rl->rank = m->rank;
    rl->host = m->host ? m->host : "";
    for (size_t t = 0; t < m->n_tensors; t++)
        tens[t] = (meta_rank_tensor_t){m->tensors[t]->name,          m->tensors[t]->dtype,
                                       (uint32_t)m->tensors[t]->n_shape, m->tensors[t]->shape,
                                       m->tensors[t]->quant,         m->tensors[t]->quant_partner,
                                       m->tensors[t]->quant_flags};
    for (size_t b = 0; b < m->n_buffers; b++)
        bufs[b] = (meta_rank_buffer_t){m->buffers[b]->name, m->buffers[b]->dtype, m->buffers[b]->size};
    rl->tensors = tens;
    rl->n_tensors = m->n_tensors;
    rl->buffers = bufs;
    rl->n_buffers = m->n_buffers;
    const FerryMeta__Pieces *p = m->pieces;
    if (p) {
        rl->n_pieces = p->n_tensor;
        rl->tensor = p->tensor;
        rl->buffer = p->buffer;
        rl->byte_offset = p->byte_offset;
        rl->ndim = p->ndim;
        rl->box = p->box;
        rl->n_box = p->n_box;
        rl->strides = p->strides;
        rl->n_strides = p->n_strides;
    }
    *out = rl;
    return FERRY_OK;
}

void meta_rank_layout_free(meta_rank_layout_t *rl) {
    if (!rl) return;
    ferry_ctx_t *ctx = rl->priv->ctx;
    meta_free(ctx, rl->priv->msg);
    ferry_free(ctx, rl);
}
