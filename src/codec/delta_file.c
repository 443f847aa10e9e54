/* Delta files: one safetensors file with a delta frame per tensor (or the
 * tensor whole, for dtypes the codec does not take); see codec.h. Applying
 * is all or nothing across tensors: sparse chunks go through one codec's
 * undo log, dense tensors keep a copy of their old contents. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include <inttypes.h>

#include "codec/codec_internal.h"
#include "common/hash.h"
#include "ferry/safetensors.h"

#define FILE_FORMAT "ferry_delta"

static bool same_shape(const ferry_tensor_ref_t *a, uint32_t ndim, const int64_t *shape, ferry_dtype_t dtype) {
    if (a->dtype != dtype || a->ndim != ndim) return false;
    for (uint32_t d = 0; d < ndim; d++)
        if (a->shape[d] != shape[d]) return false;
    return true;
}

static bool ref_ok(const ferry_tensor_ref_t *t) {
    if (!t->name || !ferry_dtype_size(t->dtype) || t->ndim > FERRY_MAX_DIMS || (t->bytes && !t->data)) return false;
    uint64_t e = 1;
    for (uint32_t d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || (t->shape[d] && e > UINT64_MAX / (uint64_t)t->shape[d])) return false;
        e *= (uint64_t)t->shape[d];
    }
    return e <= UINT64_MAX / ferry_dtype_size(t->dtype) && e * ferry_dtype_size(t->dtype) == t->bytes;
}

size_t ferry_delta_file_bound(const ferry_tensor_ref_t *next, size_t n) {
    uint64_t b = 1024;
    for (size_t i = 0; next && i < n; i++) {
        if (!ref_ok(&next[i])) return 0;
        uint64_t elems = next[i].bytes / ferry_dtype_size(next[i].dtype);
        size_t fb = ferry_delta_bound(next[i].dtype, elems, 0);
        b += (fb ? fb : next[i].bytes) + 2 * strlen(next[i].name) + 160 + 16 * FERRY_MAX_DIMS;
    }
    return b > SIZE_MAX ? 0 : (size_t)b;
}

static const ferry_tensor_ref_t *find_ref(const ferry_tensor_ref_t *t, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (!strcmp(t[i].name, name)) return &t[i];
    return NULL;
}

size_t ferry_delta_file_bound_meta(const ferry_tensor_ref_t *next, size_t n, const ferry_delta_meta_t *meta,
                                   size_t n_meta) {
    uint64_t b = ferry_delta_file_bound(next, n);
    if (!b || (n_meta && !meta)) return 0;
    b += 64; /* the key and the map's braces */
    for (size_t i = 0; i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value) return 0;
        /* JSON-escaped in the map (a control byte takes 6), the map escaped
           again as a string of the header (a quote or backslash doubles) */
        b += 12 * (strlen(meta[i].key) + strlen(meta[i].value)) + 16;
    }
    return b > SIZE_MAX ? 0 : (size_t)b;
}

/* next's metadata as the JSON map "next_metadata" holds; NULL (detail on err) when malformed. */
static char *meta_json(ferry_errbuf_t *err, const ferry_delta_meta_t *meta, size_t n_meta) {
    json_t *o = json_object();
    bool ok = o != NULL;
    for (size_t i = 0; ok && i < n_meta; i++) {
        if (!meta[i].key || !meta[i].value || json_object_get(o, meta[i].key)) {
            ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta file: next's metadata entry %zu is NULL or repeated", i);
            json_decref(o);
            return NULL;
        }
        ok = json_object_set_new(o, meta[i].key, json_string(meta[i].value)) == 0;
    }
    char *text = ok ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!text) ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta file: next's metadata is not valid UTF-8");
    return text;
}

ferry_status_t ferry_delta_file_build(ferry_ctx_t *ctx, const ferry_tensor_ref_t *base, const ferry_tensor_ref_t *next,
                                      size_t n, uint64_t bv, uint64_t nv, void *dst, size_t cap, size_t *len,
                                      uint64_t *changed) {
    return ferry_delta_file_build_meta(ctx, base, next, n, bv, nv, NULL, 0, dst, cap, len, changed);
}

ferry_status_t ferry_delta_file_build_meta(ferry_ctx_t *ctx, const ferry_tensor_ref_t *base,
                                           const ferry_tensor_ref_t *next, size_t n, uint64_t bv, uint64_t nv,
                                           const ferry_delta_meta_t *meta, size_t n_meta, void *dst, size_t cap,
                                           size_t *len, uint64_t *changed) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if ((n && (!base || !next)) || !dst || !len || (n_meta && !meta))
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta file: NULL tensors, metadata or output");
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_ref_t *b = find_ref(base, n, next[i].name);
        if (!ref_ok(&next[i]) || !b || !ref_ok(b) || !same_shape(b, next[i].ndim, next[i].shape, next[i].dtype))
            return ferry_fail(err, FERRY_ERR_MISMATCH,
                              "delta file: tensor \"%s\" is malformed, missing from the base or shaped differently",
                              next[i].name ? next[i].name : "(null)");
    }
    ferry_delta_codec_t *codec = NULL;
    ferry_safetensors_writer_t *w = NULL;
    uint8_t **frames = ferry_calloc(ctx, n + 1, sizeof *frames);
    json_t *dense = json_array(), *dense_sums = json_object();
    ferry_status_t st = FERRY_OK;
    uint64_t total_changed = 0;
    if (!frames || !dense || !dense_sums) st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta file: out of memory");
    if (st == FERRY_OK) st = ferry_delta_codec_create(ctx, &codec);
    if (st == FERRY_OK) st = ferry_safetensors_writer_create(ctx, &w);
    for (size_t i = 0; st == FERRY_OK && i < n; i++) {
        const ferry_tensor_ref_t *u = &next[i], *b = find_ref(base, n, u->name);
        uint64_t elems = u->bytes / ferry_dtype_size(u->dtype);
        size_t fcap = ferry_delta_bound(u->dtype, elems, 0);
        if (fcap == 0) { /* a dtype the codec does not take: whole, with its xxh3 */
            char hex[17];
            snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)XXH3_64bits(u->data, u->bytes));
            json_array_append_new(dense, json_string(u->name));
            json_object_set_new(dense_sums, u->name, json_string(hex));
            st = ferry_safetensors_writer_add(w, u->name, u->dtype, u->ndim, u->shape, u->data, u->bytes);
            if (changed && memcmp(b->data, u->data, u->bytes)) total_changed += elems; /* an upper bound */
            continue;
        }
        frames[i] = ferry_alloc(ctx, fcap);
        if (!frames[i]) {
            st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta file: out of memory for \"%s\"", u->name);
            break;
        }
        ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS, .dtype = u->dtype, .base_version = bv,
                                  .next_version = nv};
        size_t fl = 0;
        ferry_delta_info_t info;
        st = ferry_delta_encode(codec, &p, b->data, u->data, elems, frames[i], fcap, &fl);
        /* the changed count from the chunk headers: no second walk of the frame */
        if (st == FERRY_OK) st = ferry_delta_peek(codec, frames[i], fl, &info);
        if (st != FERRY_OK) {
            ferry_fail(err, st, "delta file: \"%s\": %s", u->name, ferry_delta_codec_detail(codec));
            break;
        }
        total_changed += info.changed;
        int64_t shape[1] = {(int64_t)fl};
        st = ferry_safetensors_writer_add(w, u->name, FERRY_DTYPE_U8, 1, shape, frames[i], fl);
    }
    if (st == FERRY_OK) {
        char num[32], *dl = json_dumps(dense, JSON_COMPACT);
        ferry_safetensors_writer_meta(w, "format", FILE_FORMAT);
        ferry_safetensors_writer_meta(w, "format_version", "1");
        snprintf(num, sizeof num, "%llu", (unsigned long long)bv);
        ferry_safetensors_writer_meta(w, "base_version", num);
        snprintf(num, sizeof num, "%llu", (unsigned long long)nv);
        ferry_safetensors_writer_meta(w, "next_version", num);
        st = dl ? ferry_safetensors_writer_meta(w, "dense", dl) : FERRY_ERR_NO_MEMORY;
        free(dl);
        char *ds = st == FERRY_OK ? json_dumps(dense_sums, JSON_COMPACT) : NULL;
        if (st == FERRY_OK) st = ds ? ferry_safetensors_writer_meta(w, "dense_sums", ds) : FERRY_ERR_NO_MEMORY;
        free(ds);
    }
    if (st == FERRY_OK && n_meta) {
        char *nm = meta_json(err, meta, n_meta);
        st = nm ? ferry_safetensors_writer_meta(w, "next_metadata", nm) : FERRY_ERR_INVALID_ARGUMENT;
        free(nm);
    }
    if (st == FERRY_OK) st = ferry_safetensors_writer_write(w, dst, cap, len);
    if (st == FERRY_OK && changed) *changed = total_changed;
    for (size_t i = 0; frames && i < n; i++) ferry_free(ctx, frames[i]);
    ferry_free(ctx, frames);
    json_decref(dense);
    json_decref(dense_sums);
    ferry_safetensors_writer_destroy(w);
    ferry_delta_codec_destroy(codec);
    return st;
}

/* A version as the file writes it: decimal digits only, no sign or space, in range. */
static bool parse_version(const char *s, uint64_t *out) {
    uint64_t v = 0;
    if (!s || !*s) return false;
    for (; *s; s++) {
        if (*s < '0' || *s > '9' || v > (UINT64_MAX - (uint64_t)(*s - '0')) / 10) return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    *out = v;
    return true;
}

/* "next_metadata": a JSON map of strings. */
static bool meta_map_ok(const char *text) {
    json_t *o = json_loads(text, JSON_REJECT_DUPLICATES, NULL), *v;
    const char *k;
    bool ok = json_is_object(o);
    json_object_foreach(o, k, v) ok = ok && json_is_string(v);
    json_decref(o);
    return ok;
}

static bool in_list(json_t *list, const char *name) {
    size_t i;
    json_t *v;
    if (!json_is_array(list)) return false;
    json_array_foreach(list, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
    return false;
}

ferry_status_t ferry_delta_file_apply(ferry_ctx_t *ctx, const void *file, size_t len, ferry_tensor_ref_t *t, size_t n,
                                      uint64_t bv) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    if (n && !t) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "delta file: NULL tensors");
    ferry_safetensors_t *st_file = NULL;
    ferry_status_t st = ferry_safetensors_parse(ctx, file, len, &st_file);
    if (st != FERRY_OK) return st;
    const char *format = ferry_safetensors_meta(st_file, "format"), *dl = ferry_safetensors_meta(st_file, "dense");
    const char *dsl = ferry_safetensors_meta(st_file, "dense_sums"), *bvs = ferry_safetensors_meta(st_file, "base_version");
    const char *nml = ferry_safetensors_meta(st_file, "next_metadata");
    json_t *dense = dl ? json_loads(dl, 0, NULL) : NULL, *dense_sums = dsl ? json_loads(dsl, 0, NULL) : NULL;
    ferry_delta_codec_t *codec = NULL;
    size_t count = ferry_safetensors_count(st_file);
    uint8_t **saved = ferry_calloc(ctx, count + 1, sizeof *saved); /* old contents of dense tensors */
    ferry_tensor_ref_t **target = ferry_calloc(ctx, count + 1, sizeof *target);
    if (!format || strcmp(format, FILE_FORMAT))
        st = ferry_fail(err, FERRY_ERR_CORRUPT, "delta file: metadata format is \"%s\", not \"%s\"",
                        format ? format : "(none)", FILE_FORMAT);
    else if (!json_is_array(dense))
        st = ferry_fail(err, FERRY_ERR_CORRUPT, "delta file: metadata \"dense\" is not a JSON list");
    else if (json_array_size(dense) && !json_is_object(dense_sums))
        st = ferry_fail(err, FERRY_ERR_CORRUPT, "delta file: metadata \"dense_sums\" is missing or not a JSON map");
    else if (nml && !meta_map_ok(nml))
        st = ferry_fail(err, FERRY_ERR_CORRUPT,
                        "delta file: metadata \"next_metadata\" is not a JSON map of strings");
    else if (bv != FERRY_DELTA_ANY_BASE) {
        /* the file's own base version, for tensors that travel whole too */
        uint64_t fbv;
        if (!parse_version(bvs, &fbv))
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "delta file: metadata \"base_version\" is missing or malformed");
        else if (fbv != bv)
            st = ferry_fail(err, FERRY_ERR_MISMATCH, "delta file: from version %llu, not %llu",
                            (unsigned long long)fbv, (unsigned long long)bv);
    }
    if (st == FERRY_OK && (!saved || !target))
        st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta file: out of memory");
    if (st == FERRY_OK) st = ferry_delta_codec_create(ctx, &codec);
    /* check everything first: names, shapes, frame headers and versions */
    for (size_t i = 0; st == FERRY_OK && i < count; i++) {
        const ferry_safetensors_tensor_t *d = ferry_safetensors_at(st_file, i);
        for (size_t j = 0; j < n && !target[i]; j++)
            if (t[j].name && !strcmp(t[j].name, d->name)) target[i] = &t[j];
        ferry_tensor_ref_t *x = target[i];
        if (!x || !ref_ok(x)) {
            st = ferry_fail(err, FERRY_ERR_MISMATCH, "delta file: \"%s\" names no given tensor (or a malformed one)",
                            d->name);
        } else if (in_list(dense, d->name)) {
            json_t *hs = json_object_get(dense_sums, d->name);
            char hex[17];
            snprintf(hex, sizeof hex, "%016" PRIx64, (uint64_t)XXH3_64bits(d->data, d->bytes));
            if (!same_shape(x, d->ndim, d->shape, d->dtype))
                st = ferry_fail(err, FERRY_ERR_MISMATCH, "delta file: dense \"%s\" differs in dtype or shape",
                                d->name);
            else if (!json_is_string(hs) || strcmp(json_string_value(hs), hex))
                st = ferry_fail(err, FERRY_ERR_CORRUPT, "delta file: dense \"%s\" does not match its checksum",
                                d->name);
        } else {
            ferry_delta_info_t info;
            if (d->dtype != FERRY_DTYPE_U8 || d->ndim != 1) {
                st = ferry_fail(err, FERRY_ERR_CORRUPT, "delta file: \"%s\" is not a U8 frame", d->name);
            } else if ((st = ferry_delta_peek(codec, d->data, d->bytes, &info)) != FERRY_OK) {
                ferry_fail(err, st, "delta file: \"%s\": %s", d->name, ferry_delta_codec_detail(codec));
            } else if (info.dtype != x->dtype || info.elems * ferry_dtype_size(x->dtype) != x->bytes) {
                st = ferry_fail(err, FERRY_ERR_MISMATCH, "delta file: \"%s\" is a delta of %llu %s elements", d->name,
                                (unsigned long long)info.elems, ferry_dtype_name(info.dtype));
            } else if (bv != FERRY_DELTA_ANY_BASE && info.base_version != bv) {
                st = ferry_fail(err, FERRY_ERR_MISMATCH, "delta file: \"%s\" is from version %llu, not %llu", d->name,
                                (unsigned long long)info.base_version, (unsigned long long)bv);
            }
        }
    }
    /* then apply, undoing everything on the first failure */
    for (size_t i = 0; st == FERRY_OK && i < count; i++) {
        const ferry_safetensors_tensor_t *d = ferry_safetensors_at(st_file, i);
        ferry_tensor_ref_t *x = target[i];
        if (in_list(dense, d->name)) {
            saved[i] = ferry_alloc(ctx, x->bytes ? x->bytes : 1);
            if (!saved[i]) {
                st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "delta file: out of memory for an undo copy");
                break;
            }
            memcpy(saved[i], x->data, x->bytes);
            memcpy(x->data, d->data, x->bytes);
            continue;
        }
        ferry_delta_info_t info;
        st = delta_apply_logged(codec, d->data, d->bytes, x->data, x->bytes / ferry_dtype_size(x->dtype), bv, &info);
        if (st != FERRY_OK) ferry_fail(err, st, "delta file: \"%s\": %s", d->name, ferry_delta_codec_detail(codec));
    }
    if (st != FERRY_OK && codec) {
        ferry_delta_codec_rollback(codec);
        for (size_t i = 0; i < count; i++)
            if (saved[i]) memcpy(target[i]->data, saved[i], target[i]->bytes);
    }
    ferry_delta_codec_commit(codec);
    for (size_t i = 0; saved && i < count; i++) ferry_free(ctx, saved[i]);
    ferry_free(ctx, saved);
    ferry_free(ctx, target);
    ferry_delta_codec_destroy(codec);
    json_decref(dense);
    json_decref(dense_sums);
    ferry_safetensors_destroy(st_file);
    return st;
}
