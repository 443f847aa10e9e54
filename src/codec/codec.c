/* The codec object: scratch, the undo log, detail text; record checks. */
#include <stdarg.h>
#include <stdio.h>

#include "codec/codec_internal.h"
#include "common/hash.h"

ferry_status_t delta_fail(ferry_delta_codec_t *c, ferry_status_t st, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->err.text, sizeof c->err.text, fmt, ap);
    va_end(ap);
    return st;
}

bool delta_grow(ferry_delta_codec_t *c, void **items, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 1024;
    while (n < need) n *= 2;
    if (n > SIZE_MAX / elem) return false;
    void *p = ferry_realloc(c->ctx, *items, n * elem);
    if (!p) return false;
    *items = p;
    *cap = n;
    return true;
}

uint32_t delta_width(ferry_dtype_t dtype) {
    switch (dtype) {
    case FERRY_DTYPE_BF16:
    case FERRY_DTYPE_F16: return 2;
    case FERRY_DTYPE_F32: return 4;
    case FERRY_DTYPE_F8_E4M3:
    case FERRY_DTYPE_F8_E5M2: return 1;
    default: return 0;
    }
}

ferry_status_t ferry_delta_codec_create(ferry_ctx_t *ctx, ferry_delta_codec_t **out) {
    if (!ctx || !out) return FERRY_ERR_INVALID_ARGUMENT;
    *out = NULL;
    ferry_delta_codec_t *c = ferry_calloc(ctx, 1, sizeof *c);
    if (!c) return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "delta codec: out of memory");
    c->ctx = ctx;
    delta_codec_level(c, delta_level_best());
    *out = c;
    return FERRY_OK;
}

bool delta_level_runs(delta_level_t level) {
    uint32_t cpu = ferry_cpu();
    switch (level) {
    case DELTA_LEVEL_GENERIC: return true;
    case DELTA_LEVEL_AVX2: return (cpu & FERRY_CPU_V3) != 0;
    case DELTA_LEVEL_AVX512: return (cpu & FERRY_CPU_V3) && (cpu & FERRY_CPU_AVX512BW);
    default: return false;
    }
}

delta_level_t delta_level_best(void) {
    for (int l = DELTA_LEVELS - 1; l > DELTA_LEVEL_GENERIC; l--)
        if (delta_level_runs((delta_level_t)l)) return (delta_level_t)l;
    return DELTA_LEVEL_GENERIC;
}

bool delta_codec_level(ferry_delta_codec_t *c, delta_level_t level) {
    if (!delta_level_runs(level)) return false;
    c->level = level;
    c->v3 = level >= DELTA_LEVEL_AVX2;
    c->masks = delta_masks_at(level);
    c->apply_batches = delta_apply_batches_at(level);
    memset(&c->enc, 0, sizeof c->enc);
    if (level >= DELTA_LEVEL_AVX512) delta_enc_kernels_pick(&c->enc);
    return true;
}

void ferry_delta_codec_destroy(ferry_delta_codec_t *c) {
    if (!c) return;
    ferry_free(c->ctx, c->pos);
    ferry_free(c->ctx, c->off);
    ferry_free(c->ctx, c->order);
    ferry_free(c->ctx, c->val);
    ferry_free(c->ctx, c->sign);
    ferry_free(c->ctx, c->cval);
    ferry_free(c->ctx, c->csign);
    ferry_free(c->ctx, c->cls);
    ferry_free(c->ctx, c->dec_rank);
    ferry_free(c->ctx, c->dec_delta);
    ferry_free(c->ctx, c->log);
    ferry_free(c->ctx, c->arena);
    ferry_free(c->ctx, c->undo);
    ferry_free(c->ctx, c);
}

const char *ferry_delta_codec_detail(const ferry_delta_codec_t *c) { return c ? c->err.text : ""; }

void ferry_delta_codec_commit(ferry_delta_codec_t *c) {
    if (!c) return;
    c->log_n = c->arena_n = c->undo_n = 0;
}

void delta_rollback_to(ferry_delta_codec_t *c, size_t mark) {
    for (size_t u = c->undo_n; u-- > mark;) {
        const delta_undo_t *d = &c->undo[u];
        if (d->raw_off != SIZE_MAX) {
            memcpy(d->base, c->arena + d->raw_off, (size_t)d->elems * d->width);
        } else {
            delta_undo_changes(d->base, d->width, c->log + d->first, d->count);
        }
    }
    delta_truncate(c, mark);
}

void delta_truncate(ferry_delta_codec_t *c, size_t mark) {
    if (mark >= c->undo_n) return;
    c->log_n = c->undo[mark].first;
    size_t arena = c->arena_n;
    for (size_t u = mark; u < c->undo_n; u++)
        if (c->undo[u].raw_off != SIZE_MAX && c->undo[u].raw_off < arena) arena = c->undo[u].raw_off;
    c->arena_n = arena;
    c->undo_n = mark;
}

void ferry_delta_codec_rollback(ferry_delta_codec_t *c) {
    if (c) delta_rollback_to(c, 0);
}

uint64_t delta_record_sum(const uint8_t *rec, size_t len) {
    uint64_t h = XXH3_64bits(rec, 32);
    return XXH3_64bits_withSeed(rec + CHUNK_HEADER, len - CHUNK_HEADER, h);
}

ferry_status_t delta_chunk_parse(const void *rec_, size_t len, uint32_t width, bool verify, delta_chunk_t *o,
                                 ferry_errbuf_t *err) {
    const uint8_t *rec = rec_;
    memset(o, 0, sizeof *o);
    if (len < CHUNK_HEADER)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk record of %zu bytes, shorter than its %u-byte header", len,
                          CHUNK_HEADER);
    o->mode = rec[0];
    o->width = rec[1];
    o->classes = rec[2];
    o->elems = get_u32(rec + 4);
    o->changed = get_u32(rec + 8);
    o->payload_len = get_u32(rec + 12);
    o->base_sum = get_u64(rec + 16);
    o->next_sum = get_u64(rec + 24);
    o->rec_sum = get_u64(rec + 32);
    if (o->mode > CHUNK_RAW) return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk mode %u is not 0, 1 or 2", o->mode);
    if (o->width != width)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk of %u-byte elements in a delta of %u-byte elements",
                          o->width, width);
    if (rec[3] != 0) return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk header's reserved byte is %u, not 0", rec[3]);
    if (o->elems == 0 || o->elems > FERRY_DELTA_CHUNK_MAX)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk of %u elements (1 to %u allowed)", o->elems,
                          FERRY_DELTA_CHUNK_MAX);
    if (o->changed > o->elems)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk says %u of its %u elements changed", o->changed, o->elems);
    uint32_t want_classes = o->mode == CHUNK_SPARSE ? o->classes : 0;
    if (o->mode == CHUNK_SPARSE && (o->classes < 1 || o->classes > FERRY_DELTA_CLASSES_MAX))
        return ferry_fail(err, FERRY_ERR_CORRUPT, "sparse chunk with %u classes (1 to %u allowed)", o->classes,
                          FERRY_DELTA_CLASSES_MAX);
    if (o->classes != want_classes)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk of mode %u with %u classes", o->mode, o->classes);
    uint64_t table = (uint64_t)o->classes * CLASS_ENTRY;
    if ((uint64_t)CHUNK_HEADER + table + o->payload_len != len)
        return ferry_fail(err, FERRY_ERR_CORRUPT,
                          "chunk record is %zu bytes but its header and %u classes say %llu", len, o->classes,
                          (unsigned long long)(CHUNK_HEADER + table + o->payload_len));
    if (verify && delta_record_sum(rec, len) != o->rec_sum)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk record checksum mismatch (damaged bytes)");
    o->payload = rec + CHUNK_HEADER + table;
    if (o->mode == CHUNK_UNCHANGED) {
        if (o->changed != 0 || o->payload_len != 0 || o->base_sum != o->next_sum)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "unchanged chunk with changes, payload or differing sums");
        return FERRY_OK;
    }
    if (o->mode == CHUNK_RAW) {
        if ((uint64_t)o->elems * width != o->payload_len)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "raw chunk of %u elements has a %u-byte payload", o->elems,
                              o->payload_len);
        return FERRY_OK;
    }
    if (o->changed == 0) return ferry_fail(err, FERRY_ERR_CORRUPT, "sparse chunk with no changes");
    uint64_t count = 0, changed = 0, payload = 0;
    for (uint32_t c = 0; c < o->classes; c++) {
        const uint8_t *e = rec + CHUNK_HEADER + (size_t)c * CLASS_ENTRY;
        delta_class_t *k = &o->cls[c];
        k->lower = get_u32(e);
        k->count = get_u32(e + 4);
        k->changed = get_u32(e + 8);
        k->nonunit = get_u32(e + 12);
        k->len = get_u32(e + 16);
        k->k_gap = e[20];
        k->k_nu = e[21];
        k->k_mag = e[22];
        if (e[23]) return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u entry has a non-zero reserved byte", c);
        if ((c == 0 && k->lower != 0) || (c > 0 && k->lower <= o->cls[c - 1].lower) || k->lower > mag_mask(width))
            return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u's lower bound %u is out of order or range", c,
                              k->lower);
        if (k->lower & ((1u << delta_bucket_shift(width)) - 1))
            return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u's lower bound %#x is not a whole magnitude bucket", c,
                              k->lower);
        if (k->changed > k->count || k->nonunit > k->changed)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u: %u of %u changed, %u of them by more than an ulp", c,
                              k->changed, k->count, k->nonunit);
        if (k->k_gap > 24 || k->k_nu > 24 || k->k_mag > 4)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u: code parameters %u/%u/%u out of range", c, k->k_gap,
                              k->k_nu, k->k_mag);
        if (k->changed == 0 && k->len)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u has no changes but coded bytes", c);
        count += k->count;
        changed += k->changed;
        payload += k->len;
    }
    if (count != o->elems || changed != o->changed || payload != o->payload_len)
        return ferry_fail(err, FERRY_ERR_CORRUPT,
                          "class table does not add up: %llu elements, %llu changed, %llu bytes (header: %u, %u, %u)",
                          (unsigned long long)count, (unsigned long long)changed, (unsigned long long)payload,
                          o->elems, o->changed, o->payload_len);
    return FERRY_OK;
}

bool delta_class_walk(const delta_class_t *e, const uint8_t *stream, uint64_t *pos_bits, uint64_t *val_bits) {
    bitr_t r;
    bitr_init(&r, stream, e->len);
    uint64_t pb = 0, vb = 0, rank = 0, t;
    uint32_t nu_left = e->nonunit, nu_next = 0;
    if (nu_left) {
        t = bitr_tell(&r);
        nu_next = bitr_rice(&r, e->k_nu, e->changed);
        vb += bitr_tell(&r) - t;
    }
    for (uint32_t j = 0; j < e->changed && !r.overrun; j++) {
        t = bitr_tell(&r);
        rank += bitr_rice(&r, e->k_gap, e->count) + (j ? 1 : 0);
        uint64_t t2 = bitr_tell(&r);
        pb += t2 - t;
        bitr_bits(&r, 1);
        if (nu_left && j == nu_next) {
            bitr_expg(&r, e->k_mag);
            if (--nu_left) {
                nu_next += bitr_rice(&r, e->k_nu, e->changed) + 1;
                if (nu_next >= e->changed) return false;
            }
        }
        vb += bitr_tell(&r) - t2;
    }
    if (r.overrun || nu_left || rank >= e->count || bitr_tell(&r) + 7 < (uint64_t)e->len * 8) return false;
    *pos_bits = pb;
    *val_bits = vb;
    return true;
}
