/* safetensors in memory: a bounds-checked parser over the caller's buffer
 * and a writer; see include/ferry/safetensors.h. JSON through jansson. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec_internal.h"
#include "ferry/safetensors.h"

typedef struct meta_kv {
    char *key, *value;
} meta_kv_t;

struct ferry_safetensors {
    ferry_ctx_t *ctx;
    ferry_safetensors_tensor_t *t;
    size_t n;
    meta_kv_t *meta;
    size_t n_meta;
    char *names; /* all names, NUL-separated */
};

static int cmp_offset(const void *a, const void *b) {
    const ferry_safetensors_tensor_t *x = a, *y = b;
    uintptr_t p = (uintptr_t)x->data, q = (uintptr_t)y->data;
    return p < q ? -1 : p > q;
}

void ferry_safetensors_destroy(ferry_safetensors_t *st) {
    if (!st) return;
    for (size_t i = 0; i < st->n_meta; i++) {
        ferry_free(st->ctx, st->meta[i].key);
        ferry_free(st->ctx, st->meta[i].value);
    }
    ferry_free(st->ctx, st->meta);
    ferry_free(st->ctx, st->names);
    ferry_free(st->ctx, st->t);
    ferry_free(st->ctx, st);
}

static ferry_status_t parse_tensor(ferry_errbuf_t *err, const char *name, json_t *v, uint64_t data_len,
                                   const uint8_t *data, ferry_safetensors_tensor_t *t) {
    if (!json_is_object(v)) return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: \"%s\" is not an object", name);
    json_t *dt = json_object_get(v, "dtype"), *shape = json_object_get(v, "shape"),
           *off = json_object_get(v, "data_offsets");
    if (!json_is_string(dt) || !json_is_array(shape) || !json_is_array(off) || json_array_size(off) != 2)
        return ferry_fail(err, FERRY_ERR_CORRUPT,
                          "safetensors: \"%s\" needs a string dtype, a shape array and two data_offsets", name);
    if (json_object_size(v) != 3)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: \"%s\" has keys beside dtype, shape, data_offsets",
                          name);
    if (!ferry_dtype_parse(json_string_value(dt), &t->dtype) || strcmp(ferry_dtype_name(t->dtype), json_string_value(dt)))
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "safetensors: \"%s\" has dtype \"%s\", which ferry does not know",
                          name, json_string_value(dt));
    size_t nd = json_array_size(shape);
    if (nd > FERRY_MAX_DIMS)
        return ferry_fail(err, FERRY_ERR_LIMIT, "safetensors: \"%s\" has %zu dimensions (at most %d)", name, nd,
                          FERRY_MAX_DIMS);
    t->ndim = (uint32_t)nd;
    uint64_t elems = 1;
    for (size_t d = 0; d < nd; d++) {
        json_t *x = json_array_get(shape, d);
        if (!json_is_integer(x) || json_integer_value(x) < 0)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: \"%s\" shape[%zu] is not a non-negative integer",
                              name, d);
        uint64_t e = (uint64_t)json_integer_value(x);
        if (e && elems > UINT64_MAX / e)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: \"%s\" shape overflows", name);
        t->shape[d] = (int64_t)e;
        elems *= e;
    }
    json_t *b = json_array_get(off, 0), *e = json_array_get(off, 1);
    if (!json_is_integer(b) || !json_is_integer(e) || json_integer_value(b) < 0 ||
        json_integer_value(e) < json_integer_value(b) || (uint64_t)json_integer_value(e) > data_len)
        return ferry_fail(err, FERRY_ERR_CORRUPT,
                          "safetensors: \"%s\" data_offsets are not a range inside the %llu data bytes", name,
                          (unsigned long long)data_len);
    uint64_t begin = (uint64_t)json_integer_value(b), end = (uint64_t)json_integer_value(e);
    uint64_t esz = ferry_dtype_size(t->dtype);
    if (elems > UINT64_MAX / esz || elems * esz != end - begin)
        return ferry_fail(err, FERRY_ERR_CORRUPT,
                          "safetensors: \"%s\" holds %llu bytes but its shape and dtype need %llu", name,
                          (unsigned long long)(end - begin), (unsigned long long)(elems * esz));
    t->elems = elems;
    t->bytes = end - begin;
    t->data = data + begin;
    return FERRY_OK;
}

ferry_status_t ferry_safetensors_parse(ferry_ctx_t *ctx, const void *file, size_t len, ferry_safetensors_t **out) {
    if (!ctx || !out) return FERRY_ERR_INVALID_ARGUMENT;
    *out = NULL;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (!file && len) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "safetensors: NULL buffer");
    const uint8_t *f = file;
    if (len < 8) return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: %zu bytes, shorter than the length field", len);
    uint64_t hl = get_u64(f);
    if (hl > FERRY_SAFETENSORS_HEADER_MAX)
        return ferry_fail(err, FERRY_ERR_LIMIT, "safetensors: header of %llu bytes (at most %u)",
                          (unsigned long long)hl, FERRY_SAFETENSORS_HEADER_MAX);
    if (hl > len - 8)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: header of %llu bytes in a %zu-byte file",
                          (unsigned long long)hl, len);
    if (hl < 2 || f[8] != '{')
        return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: the header does not start with '{'");
    json_error_t je;
    json_t *root = json_loadb((const char *)f + 8, (size_t)hl, JSON_REJECT_DUPLICATES | JSON_DISABLE_EOF_CHECK, &je);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: header JSON: %s (at byte %d)",
                          root ? "not an object" : je.text, root ? 0 : je.position);
    }
    /* after the JSON only padding spaces may follow */
    for (size_t i = (size_t)je.position; i < hl; i++)
        if (f[8 + i] != ' ') {
            json_decref(root);
            return ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: byte %zu after the header JSON is not a space", i);
        }
    ferry_status_t st = FERRY_OK;
    ferry_safetensors_t *s = ferry_calloc(ctx, 1, sizeof *s);
    size_t n = json_object_size(root), names_len = 0;
    const char *key;
    json_t *v;
    if (!s) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "safetensors: out of memory");
        goto out;
    }
    s->ctx = ctx;
    json_object_foreach(root, key, v) names_len += strlen(key) + 1;
    s->t = ferry_calloc(ctx, n ? n : 1, sizeof *s->t);
    s->names = ferry_alloc(ctx, names_len ? names_len : 1);
    if (!s->t || !s->names) {
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "safetensors: out of memory for %zu tensors", n);
        goto out;
    }
    const uint8_t *data = f + 8 + hl;
    uint64_t data_len = len - 8 - hl;
    char *np = s->names;
    json_object_foreach(root, key, v) {
        if (!strcmp(key, "__metadata__")) {
            if (!json_is_object(v)) {
                st = ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: __metadata__ is not an object");
                goto out;
            }
            s->meta = ferry_calloc(ctx, json_object_size(v) + 1, sizeof *s->meta);
            if (!s->meta) {
                st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "safetensors: out of memory");
                goto out;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(v, mk, mv) {
                if (!json_is_string(mv)) {
                    st = ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: __metadata__ \"%s\" is not a string", mk);
                    goto out;
                }
                meta_kv_t *kv = &s->meta[s->n_meta++];
                kv->key = ferry_strdup(ctx, mk);
                kv->value = ferry_strdup(ctx, json_string_value(mv));
                if (!kv->key || !kv->value) {
                    st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "safetensors: out of memory");
                    goto out;
                }
            }
            continue;
        }
        size_t kl = strlen(key);
        memcpy(np, key, kl + 1);
        ferry_safetensors_tensor_t *t = &s->t[s->n];
        t->name = np;
        np += kl + 1;
        st = parse_tensor(err, key, v, data_len, data, t);
        if (st != FERRY_OK) goto out;
        s->n++;
    }
    /* ranges cover the data exactly, in order, without overlap */
    qsort(s->t, s->n, sizeof *s->t, cmp_offset);
    uint64_t at = 0;
    for (size_t i = 0; i < s->n; i++) {
        uint64_t b = (uint64_t)((const uint8_t *)s->t[i].data - data);
        if (b != at) {
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: \"%s\" starts at data byte %llu, expected %llu (%s)",
                            s->t[i].name, (unsigned long long)b, (unsigned long long)at,
                            b < at ? "overlap" : "a hole");
            goto out;
        }
        at += s->t[i].bytes;
    }
    if (at != data_len) {
        st = ferry_fail(err, FERRY_ERR_CORRUPT, "safetensors: tensors cover %llu of %llu data bytes",
                        (unsigned long long)at, (unsigned long long)data_len);
        goto out;
    }
out:
    json_decref(root);
    if (st != FERRY_OK) {
        ferry_safetensors_destroy(s);
        return st;
    }
    *out = s;
    return FERRY_OK;
}

size_t ferry_safetensors_count(const ferry_safetensors_t *st) { return st ? st->n : 0; }

const ferry_safetensors_tensor_t *ferry_safetensors_at(const ferry_safetensors_t *st, size_t i) {
    return st && i < st->n ? &st->t[i] : NULL;
}

const ferry_safetensors_tensor_t *ferry_safetensors_find(const ferry_safetensors_t *st, const char *name) {
    for (size_t i = 0; st && name && i < st->n; i++)
        if (!strcmp(st->t[i].name, name)) return &st->t[i];
    return NULL;
}

const char *ferry_safetensors_meta(const ferry_safetensors_t *st, const char *key) {
    for (size_t i = 0; st && key && i < st->n_meta; i++)
        if (!strcmp(st->meta[i].key, key)) return st->meta[i].value;
    return NULL;
}

const char *ferry_safetensors_meta_key(const ferry_safetensors_t *st, size_t i) {
    return st && i < st->n_meta ? st->meta[i].key : NULL;
}

/* ---- writer ---- */
typedef struct wtensor {
    char *name;
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
    const void *data;
    uint64_t bytes;
} wtensor_t;

struct ferry_safetensors_writer {
    ferry_ctx_t *ctx;
    wtensor_t *t;
    size_t n, cap;
    json_t *meta;
    char *header; /* built by size(); padded */
    size_t header_len;
};

ferry_status_t ferry_safetensors_writer_create(ferry_ctx_t *ctx, ferry_safetensors_writer_t **out) {
    if (!ctx || !out) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_safetensors_writer_t *w = ferry_calloc(ctx, 1, sizeof *w);
    if (!w || !(w->meta = json_object())) {
        ferry_free(ctx, w);
        return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "safetensors writer: out of memory");
    }
    w->ctx = ctx;
    *out = w;
    return FERRY_OK;
}

void ferry_safetensors_writer_destroy(ferry_safetensors_writer_t *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n; i++) ferry_free(w->ctx, w->t[i].name);
    ferry_free(w->ctx, w->t);
    json_decref(w->meta);
    free(w->header);
    ferry_free(w->ctx, w);
}

ferry_status_t ferry_safetensors_writer_add(ferry_safetensors_writer_t *w, const char *name, ferry_dtype_t dtype,
                                            uint32_t ndim, const int64_t *shape, const void *data, uint64_t bytes) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(w->ctx);
    if (!name || !*name || !strcmp(name, "__metadata__") || ndim > FERRY_MAX_DIMS || (ndim && !shape) ||
        (bytes && !data) || !ferry_dtype_size(dtype))
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                          "safetensors writer: tensor \"%s\": bad name, dtype, shape or NULL data",
                          name ? name : "(null)");
    uint64_t elems = 1;
    for (uint32_t d = 0; d < ndim; d++) {
        if (shape[d] < 0 || (shape[d] && elems > UINT64_MAX / (uint64_t)shape[d]))
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "safetensors writer: \"%s\" has a bad shape", name);
        elems *= (uint64_t)shape[d];
    }
    if (elems > UINT64_MAX / ferry_dtype_size(dtype) || elems * ferry_dtype_size(dtype) != bytes)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                          "safetensors writer: \"%s\" has %llu bytes, its shape and dtype need %llu", name,
                          (unsigned long long)bytes, (unsigned long long)(elems * ferry_dtype_size(dtype)));
    for (size_t i = 0; i < w->n; i++)
        if (!strcmp(w->t[i].name, name))
            return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "safetensors writer: \"%s\" added twice", name);
    if (w->n == w->cap) {
        size_t cap = w->cap ? 2 * w->cap : 16;
        wtensor_t *t = ferry_realloc(w->ctx, w->t, cap * sizeof *t);
        if (!t) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "safetensors writer: out of memory");
        w->t = t;
        w->cap = cap;
    }
    wtensor_t *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    if (!(t->name = ferry_strdup(w->ctx, name)))
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "safetensors writer: out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    for (uint32_t d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->data = data;
    t->bytes = bytes;
    w->n++;
    free(w->header);
    w->header = NULL;
    return FERRY_OK;
}

ferry_status_t ferry_safetensors_writer_meta(ferry_safetensors_writer_t *w, const char *key, const char *value) {
    if (!w || !key || !value) return FERRY_ERR_INVALID_ARGUMENT;
    if (json_object_set_new(w->meta, key, json_string(value)) != 0)
        return ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_INVALID_ARGUMENT,
                          "safetensors writer: metadata \"%s\" is not valid UTF-8", key);
    free(w->header);
    w->header = NULL;
    return FERRY_OK;
}

/* Builds the padded header once per change. */
static bool build_header(ferry_safetensors_writer_t *w) {
    if (w->header) return true;
    json_t *root = json_object();
    if (!root) return false;
    bool ok = true;
    if (json_object_size(w->meta)) ok = json_object_set(root, "__metadata__", w->meta) == 0;
    uint64_t at = 0;
    for (size_t i = 0; ok && i < w->n; i++) {
        json_t *shape = json_array();
        for (uint32_t d = 0; shape && d < w->t[i].ndim; d++) json_array_append_new(shape, json_integer(w->t[i].shape[d]));
        json_t *e = json_pack("{s:s, s:o, s:[I,I]}", "dtype", ferry_dtype_name(w->t[i].dtype), "shape", shape,
                              "data_offsets", (json_int_t)at, (json_int_t)(at + w->t[i].bytes));
        ok = e && json_object_set_new(root, w->t[i].name, e) == 0;
        at += w->t[i].bytes;
    }
    char *text = ok ? json_dumps(root, JSON_COMPACT) : NULL;
    json_decref(root);
    if (!text) return false;
    size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7;
    char *h = realloc(text, padded + 1);
    if (!h) {
        free(text);
        return false;
    }
    memset(h + tl, ' ', padded - tl);
    h[padded] = '\0';
    w->header = h;
    w->header_len = padded;
    return true;
}

uint64_t ferry_safetensors_writer_size(const ferry_safetensors_writer_t *wc) {
    ferry_safetensors_writer_t *w = (ferry_safetensors_writer_t *)wc;
    if (!w || !build_header(w)) return 0;
    uint64_t size = 8 + w->header_len;
    for (size_t i = 0; i < w->n; i++) size += w->t[i].bytes;
    return size;
}

/* The file's size, once its header is built and within the limit. */
static ferry_status_t checked_size(ferry_safetensors_writer_t *w, uint64_t *size) {
    *size = ferry_safetensors_writer_size(w);
    if (!*size)
        return ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_INVALID_ARGUMENT,
                          "safetensors writer: cannot encode the header (tensor names must be UTF-8) or out of memory");
    if (w->header_len > FERRY_SAFETENSORS_HEADER_MAX)
        return ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_LIMIT, "safetensors writer: a %zu-byte header (at most %u)",
                          w->header_len, FERRY_SAFETENSORS_HEADER_MAX);
    return FERRY_OK;
}

ferry_status_t ferry_safetensors_writer_header(ferry_safetensors_writer_t *w, void *dst, size_t cap, size_t *len) {
    if (!w || !dst || !len) return FERRY_ERR_INVALID_ARGUMENT;
    uint64_t size;
    ferry_status_t st = checked_size(w, &size);
    if (st != FERRY_OK) return st;
    if (8 + w->header_len > cap)
        return ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_LIMIT, "safetensors writer: %zu bytes of room, %zu needed",
                          cap, 8 + w->header_len);
    put_u64(dst, w->header_len);
    memcpy((uint8_t *)dst + 8, w->header, w->header_len);
    *len = 8 + w->header_len;
    return FERRY_OK;
}

ferry_status_t ferry_safetensors_writer_write(ferry_safetensors_writer_t *w, void *dst_, size_t cap, size_t *len) {
    if (!w || !dst_ || !len) return FERRY_ERR_INVALID_ARGUMENT;
    uint64_t size;
    ferry_status_t st = checked_size(w, &size);
    if (st != FERRY_OK) return st;
    if (size > cap)
        return ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_LIMIT, "safetensors writer: %zu bytes of room, %llu needed",
                          cap, (unsigned long long)size);
    uint8_t *dst = dst_;
    put_u64(dst, w->header_len);
    memcpy(dst + 8, w->header, w->header_len);
    uint64_t at = 8 + w->header_len;
    for (size_t i = 0; i < w->n; i++) {
        if (w->t[i].bytes) memcpy(dst + at, w->t[i].data, w->t[i].bytes);
        at += w->t[i].bytes;
    }
    *len = (size_t)size;
    return FERRY_OK;
}
