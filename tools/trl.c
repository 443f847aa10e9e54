/* TRL sparse weight patches, both directions; see trl.h. */
#include "trl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void trl_bufs_free(trl_bufs_t *b) {
    for (size_t i = 0; i < b->n; i++) free(b->p[i]);
    free(b->p);
    memset(b, 0, sizeof *b);
}

static void *keep(trl_bufs_t *b, size_t bytes) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 16;
        void **p = realloc(b->p, cap * sizeof *p);
        if (!p) return NULL;
        b->p = p;
        b->cap = cap;
    }
    void *x = malloc(bytes ? bytes : 1);
    if (x) b->p[b->n++] = x;
    return x;
}

/* Elements of t that differ from u, as flat indices (caller frees). */
static uint64_t *changed_indices(const ferry_safetensors_tensor_t *t, const ferry_safetensors_tensor_t *u,
                                 uint64_t *m) {
    size_t esz = ferry_dtype_size(t->dtype);
    const uint8_t *a = t->data, *b = u->data;
    uint64_t n = 0;
    for (uint64_t i = 0; i < t->elems; i++) n += memcmp(a + i * esz, b + i * esz, esz) != 0;
    uint64_t *idx = malloc((n ? n : 1) * sizeof *idx);
    if (!idx) return NULL;
    n = 0;
    for (uint64_t i = 0; i < t->elems; i++)
        if (memcmp(a + i * esz, b + i * esz, esz)) idx[n++] = i;
    *m = n;
    return idx;
}

int trl_encode(const ferry_safetensors_t *base, const ferry_safetensors_t *next, bool gap, uint64_t next_version,
               ferry_safetensors_writer_t *w, trl_bufs_t *bufs, trl_stats_t *s, char *err, size_t errlen) {
    memset(s, 0, sizeof *s);
    for (size_t i = 0; i < ferry_safetensors_count(next); i++) {
        const ferry_safetensors_tensor_t *u = ferry_safetensors_at(next, i);
        const ferry_safetensors_tensor_t *t = ferry_safetensors_find(base, u->name);
        s->elems += u->elems;
        uint64_t m = 0;
        uint64_t *idx = t ? changed_indices(t, u, &m) : NULL;
        if (!idx) {
            snprintf(err, errlen, "\"%s\": %s", u->name, t ? "out of memory" : "not in the base");
            return -1;
        }
        if (m == 0) {
            free(idx);
            continue;
        }
        if (u->elems > INT32_MAX) {
            snprintf(err, errlen, "\"%s\" has %llu elements, more than TRL's int32 indices address", u->name,
                     (unsigned long long)u->elems);
            free(idx);
            return -1;
        }
        s->tensors_changed++;
        s->changed += m;
        size_t esz = ferry_dtype_size(u->dtype);
        uint64_t max_gap = 0;
        for (uint64_t k = 0; k < m; k++) {
            uint64_t g = k ? idx[k] - idx[k - 1] : idx[0];
            if (g > max_gap) max_gap = g;
        }
        ferry_dtype_t idt = !gap ? FERRY_DTYPE_I32 : max_gap <= 0xFFFF ? FERRY_DTYPE_U16 : FERRY_DTYPE_U32;
        size_t isz = ferry_dtype_size(idt), nl = strlen(u->name) + 5;
        uint8_t *ib = keep(bufs, m * isz), *vb = keep(bufs, m * esz);
        char *in = keep(bufs, nl), *vn = keep(bufs, nl);
        if (!ib || !vb || !in || !vn) {
            free(idx);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        for (uint64_t k = 0; k < m; k++) {
            uint64_t v = gap ? (k ? idx[k] - idx[k - 1] : idx[0]) : idx[k];
            if (isz == 2) {
                uint16_t x = (uint16_t)v;
                memcpy(ib + k * 2, &x, 2);
            } else {
                uint32_t x = (uint32_t)v;
                memcpy(ib + k * 4, &x, 4);
            }
            memcpy(vb + k * esz, (const uint8_t *)u->data + idx[k] * esz, esz);
        }
        free(idx);
        snprintf(in, nl, "%s.idx", u->name);
        snprintf(vn, nl, "%s.val", u->name);
        int64_t shape[1] = {(int64_t)m};
        if (ferry_safetensors_writer_add(w, in, idt, 1, shape, ib, m * isz) != FERRY_OK ||
            ferry_safetensors_writer_add(w, vn, u->dtype, 1, shape, vb, m * esz) != FERRY_OK) {
            snprintf(err, errlen, "cannot add the patch tensors of \"%s\"", u->name);
            return -1;
        }
    }
    char num[64];
    ferry_safetensors_writer_meta(w, "format", TRL_FORMAT_NAME);
    ferry_safetensors_writer_meta(w, "version", "1");
    ferry_safetensors_writer_meta(w, "sparse", "True");
    snprintf(num, sizeof num, "%llu", (unsigned long long)next_version);
    ferry_safetensors_writer_meta(w, "model_version", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)s->tensors_changed);
    ferry_safetensors_writer_meta(w, "num_changed_params", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)s->changed);
    ferry_safetensors_writer_meta(w, "total_changed_elements", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)s->elems);
    ferry_safetensors_writer_meta(w, "total_elements", num);
    snprintf(num, sizeof num, "%.9g", s->elems ? 1.0 - (double)s->changed / (double)s->elems : 1.0);
    ferry_safetensors_writer_meta(w, "sparsity", num);
    ferry_safetensors_writer_meta(w, "encoding", gap ? "gap_delta" : "raw");
    return 0;
}

/* Index k of a patch's idx tensor (isz bytes each), UINT64_MAX when negative. */
static uint64_t index_at(const ferry_safetensors_tensor_t *ix, size_t isz, uint64_t k) {
    const uint8_t *p = (const uint8_t *)ix->data + k * isz;
    if (isz == 2) {
        uint16_t x;
        memcpy(&x, p, 2);
        return x;
    }
    if (isz == 4) {
        uint32_t x;
        memcpy(&x, p, 4);
        return ix->dtype == FERRY_DTYPE_I32 && (int32_t)x < 0 ? UINT64_MAX : x;
    }
    int64_t x;
    memcpy(&x, p, 8);
    return x < 0 ? UINT64_MAX : (uint64_t)x;
}

int trl_apply(const ferry_safetensors_t *base, const ferry_safetensors_t *patch, uint8_t *const *regions, char *err,
              size_t errlen) {
    const char *enc = ferry_safetensors_meta(patch, "encoding");
    bool gap = enc && !strcmp(enc, "gap_delta");
    if (enc && !gap && strcmp(enc, "raw")) {
        snprintf(err, errlen, "TRL patch encoding \"%s\" (raw or gap_delta known)", enc);
        return -1;
    }
    size_t used = 0;
    for (size_t i = 0; i < ferry_safetensors_count(base); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(base, i);
        size_t nl = strlen(t->name) + 5;
        char *in = malloc(nl), *vn = malloc(nl);
        if (!in || !vn) {
            free(in), free(vn);
            snprintf(err, errlen, "out of memory");
            return -1;
        }
        snprintf(in, nl, "%s.idx", t->name);
        snprintf(vn, nl, "%s.val", t->name);
        const ferry_safetensors_tensor_t *ix = ferry_safetensors_find(patch, in);
        const ferry_safetensors_tensor_t *vx = ferry_safetensors_find(patch, vn);
        free(in), free(vn);
        if (!ix && !vx) continue;
        used += 2;
        size_t esz = ferry_dtype_size(t->dtype), isz = ix ? ferry_dtype_size(ix->dtype) : 0;
        bool idt_ok = ix && (gap ? (ix->dtype == FERRY_DTYPE_U16 || ix->dtype == FERRY_DTYPE_U32)
                                 : (ix->dtype == FERRY_DTYPE_I32 || ix->dtype == FERRY_DTYPE_I64));
        if (!ix || !vx || !idt_ok || vx->dtype != t->dtype || ix->elems != vx->elems || ix->ndim != 1 ||
            vx->ndim != 1) {
            snprintf(err, errlen, "\"%s\": the patch needs %s.idx (%s) and %s.val (%s), 1-d of one length", t->name,
                     t->name, gap ? "U16/U32 gaps" : "I32 indices", t->name, ferry_dtype_name(t->dtype));
            return -1;
        }
        uint64_t prev = 0;
        for (uint64_t k = 0; k < ix->elems; k++) {
            uint64_t v = index_at(ix, isz, k);
            uint64_t pos = gap ? (k ? prev + v : v) : v;
            if (v == UINT64_MAX || pos >= t->elems || (k && (gap ? v == 0 : pos <= prev))) {
                snprintf(err, errlen, "\"%s\": index %llu is out of range or out of order", t->name,
                         (unsigned long long)k);
                return -1;
            }
            prev = pos;
            memcpy(regions[i] + pos * esz, (const uint8_t *)vx->data + k * esz, esz);
        }
    }
    if (used != ferry_safetensors_count(patch)) {
        snprintf(err, errlen, "the patch holds %zu tensors that name no tensor of the base",
                 ferry_safetensors_count(patch) - used);
        return -1;
    }
    return 0;
}
