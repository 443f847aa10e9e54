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
    ferry_free(c->ctx, c->sub);
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
    /* byte 3: reserved (0) but in a format 2 sparse record, where it is S */
    if (rec[3] != 0 && o->mode != CHUNK_SPARSE)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "chunk header's reserved byte is %u, not 0", rec[3]);
    if (rec[3] != 0 && (rec[3] < DELTA_SUB_LOG2_MIN || rec[3] > DELTA_SUB_LOG2_MAX))
        return ferry_fail(err, FERRY_ERR_CORRUPT,
                          "sparse chunk's byte 3 is %u: neither format 1's 0 nor a format 2 sub-block size (%u to %u)",
                          rec[3], DELTA_SUB_LOG2_MIN, DELTA_SUB_LOG2_MAX);
    o->sub_log2 = rec[3];
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
    /* the encoder writes raw whenever sparse is not smaller; this also
       bounds what a reader reserves for the chunk's changes */
    if (o->payload_len >= (uint64_t)o->elems * width)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "sparse chunk's %u-byte payload is not smaller than its contents",
                          o->payload_len);
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
        if (e[23] && !o->sub_log2)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "class %u entry has a non-zero reserved byte", c);
        k->len_bits = e[23];
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
        uint64_t codes = k->len; /* bytes of codes: the stream, less a format 2 length table */
        if (o->sub_log2) { /* format 2: the length table fits the stream, after at least a byte of codes */
            uint64_t tb = delta_table_bytes(delta_nsub(o->elems, o->sub_log2), k->len_bits);
            if (k->len_bits > 32 || (k->changed == 0 && k->len_bits != 0) ||
                (k->changed && (k->len_bits == 0 || tb >= k->len)))
                return ferry_fail(err, FERRY_ERR_CORRUPT,
                                  "class %u: a length table of %u-bit entries does not fit its %u-byte stream", c,
                                  k->len_bits, k->len);
            codes = k->len - (k->changed ? tb : 0);
        }
        /* every change takes a Rice code of k_gap + 1 bits or more and a sign
           bit, in both formats: a reader may reserve room by this */
        if ((uint64_t)k->changed * (2 + k->k_gap) > 8 * codes)
            return ferry_fail(err, FERRY_ERR_CORRUPT,
                              "class %u claims %u changes, more than its %llu bytes of codes hold", c, k->changed,
                              (unsigned long long)codes);
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

bool delta_class_walk(const delta_chunk_t *h, uint32_t k, const uint8_t *stream, uint64_t *pos_bits,
                      uint64_t *val_bits) {
    if (h->sub_log2) return delta_class2_decode(h, k, stream, NULL, NULL, NULL, pos_bits, val_bits);
    const delta_class_t *e = &h->cls[k];
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

bool delta_class2_table(const delta_chunk_t *h, uint32_t k, const uint8_t *stream, uint32_t *lens,
                        uint64_t *first_out) {
    const delta_class_t *e = &h->cls[k];
    const uint32_t nsub = delta_nsub(h->elems, h->sub_log2), W = e->len_bits;
    if (e->changed == 0) { /* no stream, no table (delta_chunk_parse) */
        if (lens) memset(lens, 0, sizeof *lens * nsub);
        *first_out = 0;
        return e->len == 0 && W == 0;
    }
    uint64_t tbytes = delta_table_bytes(nsub, W);
    if (W == 0 || W > 32 || tbytes >= e->len) return false;
    const uint64_t first = e->len - tbytes; /* bytes of the sub-streams */
    /* the longest entry is W bits long, the entries add up to the first
       part's bits less its padding, the table's padding is zero */
    bitr_t tr;
    bitr_init(&tr, stream + first, tbytes);
    uint64_t sum = 0;
    uint32_t any = 0;
    for (uint32_t b = 0; b < nsub; b++) {
        uint32_t v = bitr_bits(&tr, W);
        if (lens) lens[b] = v;
        sum += v;
        any |= v;
    }
    uint32_t tpad = (uint32_t)(tbytes * 8 - (uint64_t)nsub * W);
    if ((tpad && bitr_bits(&tr, tpad) != 0) || tr.overrun || 32u - (uint32_t)__builtin_clz(any | 1u) != W ||
        any == 0 || sum > first * 8 || sum + 8 <= first * 8)
        return false;
    *first_out = first;
    return true;
}

bool delta_class2_decode(const delta_chunk_t *h, uint32_t k, const uint8_t *stream, const uint32_t *sub_count,
                         uint32_t *rank, int64_t *delta, uint64_t *pos_bits, uint64_t *val_bits) {
    const delta_class_t *e = &h->cls[k];
    const uint32_t S = h->sub_log2, nsub = delta_nsub(h->elems, S), W = e->len_bits;
    uint64_t pb = 0, vb = 0, first;
    if (!delta_class2_table(h, k, stream, NULL, &first)) return false;
    if (e->changed == 0) {
        if (rank) rank[0] = UINT32_MAX;
        if (pos_bits) *pos_bits = 0, *val_bits = 0;
        return true;
    }
    const uint64_t tbytes = e->len - first;
    const uint8_t *tab = stream + first;
    bitr_t tr;
    /* the sub-streams, one after another */
    bitr_init(&tr, tab, tbytes);
    bitr_t r;
    bitr_init(&r, stream, first);
    uint64_t end = 0, before = 0;
    uint32_t j = 0, nu_seen = 0;
    for (uint32_t b = 0; b < nsub; b++) {
        uint32_t lb = bitr_bits(&tr, W);
        uint64_t at = (uint64_t)b << S;
        uint32_t sub_elems = (uint32_t)(h->elems - at < (1ull << S) ? h->elems - at : 1ull << S);
        uint32_t avail = sub_count ? sub_count[b] : sub_elems < e->count ? sub_elems : e->count;
        end += lb;
        if (lb) {
            uint64_t nu_next = UINT64_MAX, target = 0, t;
            uint32_t m = 0;
            if (e->nonunit) {
                t = bitr_tell(&r);
                nu_next = bitr_rice(&r, e->k_nu, sub_elems);
                vb += bitr_tell(&r) - t;
            }
            for (uint64_t pos = bitr_tell(&r); pos < end; pos = bitr_tell(&r)) {
                if (j >= e->changed) return false; /* more changes than the class has */
                if (!pos_bits && m != nu_next) {
                    /* a one-ulp change whose gap and sign are in the window
                       and in the sub-stream: read straight from it (the
                       general reader below gives the same values and
                       verdicts) */
                    bitr_refill(&r);
                    const uint64_t acc = r.acc;
                    const uint32_t kg = e->k_gap, real = r.n > r.pad ? r.n - r.pad : 0;
                    const uint32_t q = acc ? (uint32_t)__builtin_ctzll(acc) : 64, used = q + 2 + kg;
                    if (acc && used <= real && pos + used <= end) {
                        if (q > (avail >> kg)) return false; /* bitr_rice's overrun */
                        uint64_t g = (uint64_t)q << kg | ((acc >> (q + 1)) & ((1ull << kg) - 1));
                        target = m ? target + g + 1 : g;
                        if (target >= avail) return false; /* past the class's elements in the sub-block */
                        const uint32_t neg = (uint32_t)(acc >> (q + 1 + kg)) & 1;
                        bitr_skip(&r, used);
                        if (rank) {
                            rank[j] = (uint32_t)(before + target);
                            delta[j] = neg ? -1 : 1;
                        }
                        m++;
                        j++;
                        continue;
                    }
                }
                t = bitr_tell(&r);
                uint64_t g = bitr_rice(&r, e->k_gap, avail);
                target = m ? target + g + 1 : g;
                uint64_t t2 = bitr_tell(&r);
                pb += t2 - t;
                if (target >= avail) return false; /* past the class's elements in the sub-block */
                int64_t a = 1;
                uint32_t neg = bitr_bits(&r, 1);
                if (m == nu_next) {
                    a = (int64_t)bitr_expg(&r, e->k_mag) + 2;
                    nu_next = (uint64_t)m + 1 + bitr_rice(&r, e->k_nu, sub_elems);
                    if (++nu_seen > e->nonunit) return false;
                }
                vb += bitr_tell(&r) - t2;
                if (r.overrun || bitr_tell(&r) > end) return false; /* a code past its sub-stream */
                if (rank) {
                    rank[j] = (uint32_t)(before + target);
                    delta[j] = neg ? -a : a;
                }
                m++;
                j++;
            }
            if (m == 0 || r.overrun || bitr_tell(&r) != end || (e->nonunit && nu_next != m)) return false;
        }
        if (sub_count) before += sub_count[b];
    }
    /* every change met; the first part's padding is zero */
    uint32_t pad = (uint32_t)(first * 8 - end);
    if (j != e->changed || nu_seen != e->nonunit || (pad && bitr_bits(&r, pad) != 0) || r.overrun) return false;
    if (rank) rank[j] = UINT32_MAX;
    if (pos_bits) *pos_bits = pb, *val_bits = vb;
    return true;
}

DELTA_HOT_BODY void count_subblocks(delta_masks_fn masks, const uint8_t *base, uint32_t w, uint32_t elems, uint32_t K,
                                    const uint32_t *lower, uint32_t sub_log2, uint32_t *out) {
    const uint32_t nsub = delta_nsub(elems, sub_log2), batch = 64 * DELTA_MASK_BATCH;
    uint64_t ge[DELTA_MASK_BATCH * FERRY_DELTA_CLASSES_MAX];
    memset(out, 0, sizeof *out * K * nsub);
    /* sub-blocks are whole batches (2^12 and up), bar the chunk's last */
    for (uint32_t at = 0; at < elems; at += batch) {
        uint32_t nel = elems - at < batch ? elems - at : batch, b = at >> sub_log2;
        uint32_t cge[FERRY_DELTA_CLASSES_MAX + 1] = {0}; /* elements at or above class k's bound */
        cge[0] = nel;
        if (K > 1) {
            masks(base + (size_t)at * w, NULL, w, nel, lower + 1, K - 1, NULL, ge, FERRY_DELTA_CLASSES_MAX);
            for (uint32_t blk = 0; 64 * blk < nel; blk++) {
                uint64_t valid = delta_block_valid(nel, blk);
                for (uint32_t k = 1; k < K; k++)
                    cge[k] += (uint32_t)__builtin_popcountll(ge[blk * FERRY_DELTA_CLASSES_MAX + k - 1] & valid);
            }
        }
        for (uint32_t k = 0; k < K; k++) out[k * nsub + b] += cge[k] - cge[k + 1];
    }
}
/* built twice, like the codec's other loops: the popcounts are one
   instruction only in the x86-64-v3 build */
DELTA_V3 static void count_subblocks_v3(delta_masks_fn masks, const uint8_t *base, uint32_t w, uint32_t elems,
                                        uint32_t K, const uint32_t *lower, uint32_t sub_log2, uint32_t *out) {
    count_subblocks(masks, base, w, elems, K, lower, sub_log2, out);
}
static void count_subblocks_base(delta_masks_fn masks, const uint8_t *base, uint32_t w, uint32_t elems, uint32_t K,
                                 const uint32_t *lower, uint32_t sub_log2, uint32_t *out) {
    count_subblocks(masks, base, w, elems, K, lower, sub_log2, out);
}
void delta_count_subblocks(const ferry_delta_codec_t *c, const uint8_t *base, uint32_t w, uint32_t elems, uint32_t K,
                           const uint32_t *lower, uint32_t sub_log2, uint32_t *out) {
    (c->v3 ? count_subblocks_v3 : count_subblocks_base)(c->masks, base, w, elems, K, lower, sub_log2, out);
}
