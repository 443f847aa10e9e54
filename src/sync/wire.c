/* A member's layout on the wire (the columns of meta/rank_layout.h, which
 * encodes and decodes them) and the global layouts rebuilt from every
 * member's. Decoding trusts nothing: meta checks counts, column lengths,
 * dims and indices before anything is used, and the layout API checks every
 * piece against its buffer. */
#include <stdlib.h>
#include <string.h>

#include "meta/rank_layout.h"
#include "sync/sync_internal.h"

_Static_assert(META_MAX_DIMS == FERRY_MAX_DIMS, "a layout's dims must fit the metadata protocol's");

ferry_status_t sync_wire_encode(ferry_ctx_t *ctx, const ferry_layout_t *local, uint32_t rank, const char *host,
                                uint8_t **out, size_t *len, ferry_errbuf_t *err) {
    const ferry_model_t *model = ferry_layout_model(local);
    size_t first, np;
    ferry_layout_rank_pieces(local, rank, &first, &np);
    const ferry_piece_t *ps = np ? ferry_layout_pieces(local) + first : NULL;
    uint32_t nt = ferry_model_tensor_count(model), nb = ferry_layout_buffer_count(local);
    size_t dims = 0;
    for (size_t i = 0; i < np; i++) dims += ps[i].box.ndim;
    /* wire tensor index of each model tensor a piece names (UINT32_MAX: unused) */
    uint32_t *tmap = ferry_alloc(ctx, (nt ? nt : 1) * sizeof *tmap);
    meta_rank_tensor_t *tens = ferry_calloc(ctx, nt ? nt : 1, sizeof *tens);
    meta_rank_buffer_t *bufs = ferry_calloc(ctx, nb ? nb : 1, sizeof *bufs);
    uint32_t *bmap = ferry_alloc(ctx, (nb ? nb : 1) * sizeof *bmap);
    uint32_t *c_t = ferry_alloc(ctx, (np ? np : 1) * sizeof *c_t), *c_b = ferry_alloc(ctx, (np ? np : 1) * sizeof *c_b);
    uint32_t *c_n = ferry_alloc(ctx, (np ? np : 1) * sizeof *c_n);
    uint64_t *c_o = ferry_alloc(ctx, (np ? np : 1) * sizeof *c_o);
    int64_t *c_box = ferry_alloc(ctx, (2 * dims + 1) * sizeof *c_box), *c_s = ferry_alloc(ctx, (dims + 1) * sizeof *c_s);
    int64_t *shapes = ferry_alloc(ctx, ((size_t)nt * FERRY_MAX_DIMS + 1) * sizeof *shapes);
    ferry_status_t st = FERRY_OK;
    if (!tmap || !tens || !bufs || !bmap || !c_t || !c_b || !c_n || !c_o || !c_box || !c_s || !shapes) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory encoding the layout");
        goto done;
    }
    for (uint32_t t = 0; t < nt; t++) tmap[t] = UINT32_MAX;
    size_t ntw = 0, nbw = 0, at_box = 0, at_s = 0;
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        bmap[b] = UINT32_MAX;
        if (!ferry_layout_buffer(local, b, &bi) || bi.rank != rank) continue;
        bufs[nbw] = (meta_rank_buffer_t){bi.name, (uint32_t)bi.dtype, bi.size};
        bmap[b] = (uint32_t)nbw++;
    }
    for (size_t i = 0; i < np; i++) {
        const ferry_piece_t *p = &ps[i];
        /* a named fp8 tensor brings its partner along, piece or not, so the
         * pair can be linked again on the other side */
        for (uint32_t k = 0, t = p->tensor; k < 2 && t != UINT32_MAX && tmap[t] == UINT32_MAX; k++) {
            ferry_tensor_info_t ti;
            ferry_tensor_quant_t q;
            ferry_model_tensor(model, t, &ti);
            ferry_model_tensor_quant(model, t, &q);
            int64_t *shape = shapes + (size_t)ntw * FERRY_MAX_DIMS;
            memcpy(shape, ti.shape, ti.ndim * sizeof *ti.shape);
            ferry_tensor_info_t pi = {0};
            if (q.kind != FERRY_QUANT_NONE) ferry_model_tensor(model, q.partner, &pi);
            tens[ntw] = (meta_rank_tensor_t){ti.name, (uint32_t)ti.dtype, ti.ndim, shape, (uint32_t)q.kind,
                                             q.kind != FERRY_QUANT_NONE ? pi.name : NULL, q.flags};
            tmap[t] = (uint32_t)ntw++;
            t = q.kind != FERRY_QUANT_NONE ? q.partner : UINT32_MAX;
        }
        c_t[i] = tmap[p->tensor];
        c_b[i] = bmap[p->buffer];
        c_o[i] = p->byte_offset;
        c_n[i] = p->box.ndim;
        for (uint32_t d = 0; d < p->box.ndim; d++) c_box[at_box++] = p->box.offset[d];
        for (uint32_t d = 0; d < p->box.ndim; d++) c_box[at_box++] = p->box.extent[d];
        for (uint32_t d = 0; d < p->box.ndim; d++) c_s[at_s++] = p->strides[d];
    }
    meta_rank_layout_t rl = {.rank = rank,
                             .host = host,
                             .tensors = tens,
                             .n_tensors = ntw,
                             .buffers = bufs,
                             .n_buffers = nbw,
                             .n_pieces = np,
                             .tensor = c_t,
                             .buffer = c_b,
                             .byte_offset = c_o,
                             .ndim = c_n,
                             .box = c_box,
                             .n_box = at_box,
                             .strides = c_s,
                             .n_strides = at_s};
    st = meta_rank_layout_encode(ctx, &rl, out, len, err);
done:
    ferry_free(ctx, tmap);
    ferry_free(ctx, tens);
    ferry_free(ctx, bufs);
    ferry_free(ctx, bmap);
    ferry_free(ctx, c_t);
    ferry_free(ctx, c_b);
    ferry_free(ctx, c_n);
    ferry_free(ctx, c_o);
    ferry_free(ctx, c_box);
    ferry_free(ctx, c_s);
    ferry_free(ctx, shapes);
    return st;
}

void sync_side_free(ferry_ctx_t *ctx, sync_side_t *side) {
    ferry_layout_destroy(side->layout);
    ferry_model_destroy(side->model);
    ferry_free(ctx, side->buf_base);
    ferry_free(ctx, side->hosts);
    memset(side, 0, sizeof *side);
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp((*(const meta_rank_tensor_t *const *)a)->name, (*(const meta_rank_tensor_t *const *)b)->name);
}

/* Links the fp8 pairs the wire tensors (sorted, duplicates agreeing) name,
 * then checks that every tensor is what its entry says: a scale names the
 * weight that names it, a plain tensor is nobody's partner. */
static ferry_status_t link_quant(ferry_model_t *model, const meta_rank_tensor_t *const *all, size_t n,
                                 const char *what, ferry_errbuf_t *err) {
    for (size_t i = 0; i < n; i++) {
        const meta_rank_tensor_t *a = all[i];
        if (!a->quant || (i > 0 && strcmp(a->name, all[i - 1]->name) == 0)) continue;
        uint32_t self = 0, other = 0;
        ferry_model_find(model, a->name, &self);
        if (!ferry_model_find(model, a->quant_partner, &other))
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s tensor %s is fp8 with partner %.200s, which no %s names",
                              what, a->name, a->quant_partner, what);
        if (a->quant != FERRY_QUANT_FP8_BLOCK) continue; /* linked from its weight */
        ferry_status_t st = ferry_model_link_fp8(model, self, other, a->quant_flags);
        if (st != FERRY_OK)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "%s tensor %s: %s", what, a->name, ferry_model_error(model));
    }
    for (size_t i = 0; i < n; i++) {
        const meta_rank_tensor_t *a = all[i];
        uint32_t self = 0, other = UINT32_MAX;
        ferry_model_find(model, a->name, &self);
        if (a->quant) ferry_model_find(model, a->quant_partner, &other);
        ferry_tensor_quant_t q;
        ferry_model_tensor_quant(model, self, &q);
        if ((uint32_t)q.kind != a->quant || q.partner != other || q.flags != a->quant_flags)
            return ferry_fail(err, FERRY_ERR_CORRUPT,
                              "%s tensor %s: the fp8 pairs do not match (it says quant %u, partner \"%.200s\")",
                              what, a->name, a->quant, a->quant ? a->quant_partner : "");
    }
    return FERRY_OK;
}

ferry_status_t sync_wire_decode(ferry_ctx_t *ctx, const meta_bytes_t *blobs, size_t n, const char *what,
                                sync_side_t *side, char ***hosts_out, ferry_errbuf_t *err) {
    memset(side, 0, sizeof *side);
    meta_rank_layout_t **rls = ferry_calloc(ctx, n ? n : 1, sizeof *rls);
    char **hosts = ferry_calloc(ctx, n ? n : 1, sizeof *hosts);
    const meta_rank_tensor_t **all = NULL;
    uint32_t **tidx = ferry_calloc(ctx, n ? n : 1, sizeof *tidx); /* per rank: wire tensor -> model index */
    ferry_status_t st = FERRY_OK;
    size_t total_t = 0;
    if (!rls || !hosts || !tidx) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory decoding layouts");
        goto done;
    }
    for (size_t r = 0; r < n; r++) {
        st = meta_rank_layout_decode(ctx, blobs[r].data, blobs[r].len, (uint32_t)r, what, &rls[r], err);
        if (st != FERRY_OK) goto done;
        hosts[r] = ferry_strdup(ctx, rls[r]->host);
        if (!hosts[r]) {
            st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory decoding layouts");
            goto done;
        }
        total_t += rls[r]->n_tensors;
    }
    /* the side's tensors: the union of every rank's, sorted by name, each
     * name with one dtype and shape */
    all = ferry_calloc(ctx, total_t ? total_t : 1, sizeof *all);
    if (!all) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory decoding layouts");
        goto done;
    }
    size_t k = 0;
    for (size_t r = 0; r < n; r++)
        for (size_t t = 0; t < rls[r]->n_tensors; t++) all[k++] = &rls[r]->tensors[t];
    qsort(all, total_t, sizeof *all, cmp_tensor_name);
    if ((st = ferry_model_create(ctx, what, &side->model)) != FERRY_OK) {
        st = ferry_fail(err, st, "%s", ferry_ctx_error(ctx));
        goto done;
    }
    for (size_t i = 0; i < total_t; i++) {
        if (i > 0 && strcmp(all[i]->name, all[i - 1]->name) == 0) {
            const meta_rank_tensor_t *a = all[i], *b = all[i - 1];
            bool same = a->dtype == b->dtype && a->ndim == b->ndim &&
                        (a->ndim == 0 || memcmp(a->shape, b->shape, a->ndim * sizeof *a->shape) == 0);
            if (!same) {
                st = ferry_fail(err, FERRY_ERR_MISMATCH, "%ss disagree on tensor %s's dtype or shape", what, a->name);
                goto done;
            }
            if (a->quant != b->quant || a->quant_flags != b->quant_flags ||
                (a->quant && strcmp(a->quant_partner, b->quant_partner) != 0)) {
                st = ferry_fail(err, FERRY_ERR_MISMATCH, "%ss disagree on tensor %s's fp8 quantization", what, a->name);
                goto done;
            }
            continue;
        }
        if (all[i]->quant > FERRY_QUANT_FP8_SCALE) {
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "%s tensor %s: quant %u", what, all[i]->name, all[i]->quant);
            goto done;
        }
        if (all[i]->dtype > 255) {
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "%s tensor %s: dtype %u", what, all[i]->name, all[i]->dtype);
            goto done;
        }
        st = ferry_model_add_tensor(side->model, all[i]->name, (ferry_dtype_t)all[i]->dtype, all[i]->ndim,
                                    all[i]->shape, NULL);
        if (st != FERRY_OK) {
            st = ferry_fail(err, st, "%s tensor %s: %s", what, all[i]->name, ferry_model_error(side->model));
            goto done;
        }
    }
    if ((st = link_quant(side->model, all, total_t, what, err)) != FERRY_OK) goto done;
    side->world = (uint32_t)n;
    side->buf_base = ferry_calloc(ctx, n + 1, sizeof *side->buf_base);
    if (!side->buf_base || (st = ferry_layout_create(ctx, side->model, (uint32_t)n, &side->layout)) != FERRY_OK) {
        st = ferry_fail(err, st ? st : FERRY_ERR_NO_MEMORY, "cannot create the %s layout: %s", what, ferry_ctx_error(ctx));
        goto done;
    }
    uint32_t nbuf = 0;
    for (size_t r = 0; r < n; r++) {
        const meta_rank_layout_t *rl = rls[r];
        side->buf_base[r] = nbuf;
        tidx[r] = ferry_alloc(ctx, (rl->n_tensors ? rl->n_tensors : 1) * sizeof **tidx);
        if (!tidx[r]) {
            st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "out of memory decoding layouts");
            goto done;
        }
        for (size_t t = 0; t < rl->n_tensors; t++) ferry_model_find(side->model, rl->tensors[t].name, &tidx[r][t]);
        for (size_t b = 0; b < rl->n_buffers; b++) {
            const meta_rank_buffer_t *bb = &rl->buffers[b];
            uint32_t idx;
            st = ferry_layout_add_buffer(side->layout, (uint32_t)r, bb->name, (ferry_dtype_t)bb->dtype, bb->size, &idx);
            if (st != FERRY_OK) {
                st = ferry_fail(err, st, "%s %zu buffer %s: %s", what, r, bb->name, ferry_layout_error(side->layout));
                goto done;
            }
            nbuf++;
        }
        const meta_rank_layout_t *pc = rl; /* its piece columns */
        size_t at_box = 0, at_s = 0;
        for (size_t i = 0; i < pc->n_pieces; i++) {
            ferry_piece_t p;
            memset(&p, 0, sizeof p);
            p.tensor = tidx[r][pc->tensor[i]];
            p.rank = (uint32_t)r;
            p.buffer = side->buf_base[r] + pc->buffer[i];
            p.byte_offset = pc->byte_offset[i];
            p.box.ndim = pc->ndim[i];
            for (uint32_t d = 0; d < p.box.ndim; d++) p.box.offset[d] = pc->box[at_box + d];
            for (uint32_t d = 0; d < p.box.ndim; d++) p.box.extent[d] = pc->box[at_box + p.box.ndim + d];
            for (uint32_t d = 0; d < p.box.ndim; d++) p.strides[d] = pc->strides[at_s + d];
            at_box += 2u * p.box.ndim;
            at_s += p.box.ndim;
            st = ferry_layout_add_piece(side->layout, &p);
            if (st != FERRY_OK) {
                st = ferry_fail(err, st, "%s %zu piece %zu: %s", what, r, i, ferry_layout_error(side->layout));
                goto done;
            }
        }
    }
    side->buf_base[n] = nbuf;
done:
    for (size_t r = 0; rls && r < n; r++) {
        meta_rank_layout_free(rls[r]);
        if (tidx) ferry_free(ctx, tidx[r]);
    }
    ferry_free(ctx, rls);
    ferry_free(ctx, tidx);
    ferry_free(ctx, all);
    if (st != FERRY_OK) {
        for (size_t r = 0; hosts && r < n; r++) ferry_free(ctx, hosts[r]);
        ferry_free(ctx, hosts);
        sync_side_free(ctx, side);
        return st;
    }
    *hosts_out = hosts;
    return FERRY_OK;
}
