/* ferry delta: sparse deltas between two safetensors checkpoints.
 *   encode  BASE NEXT -o OUT   a ferry delta file (or a TRL sparse patch)
 *   apply   BASE PATCH -o OUT  either kind, every ferry chunk verified
 *   inspect FILE               density and bytes per changed element
 *   synth   BASE NEXT          two synthetic checkpoints one Adam step apart
 *
 * A ferry delta file is itself a safetensors file: metadata format
 * "ferry_delta" with the versions, and per tensor one U8 tensor of the same
 * name holding the codec's frame (docs/delta-format.md), or, for dtypes the
 * codec does not take, the next tensor itself (listed in metadata "dense").
 * TRL's sparse patches hold "{name}.idx" (I32 indices, or U16/U32 gaps) and
 * "{name}.val" (the new values) with format "sparse_weight_patch". */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "synth.h"

#define DELTA_FORMAT_NAME "ferry_delta"
#define TRL_FORMAT_NAME "sparse_weight_patch"

static void usage(FILE *f) {
    fprintf(f,
            "usage: ferry delta encode BASE NEXT -o OUT [--format ferry|trl-raw|trl-gap]\n"
            "                          [--base-version V] [--next-version V]\n"
            "       ferry delta apply BASE PATCH -o OUT [--base-version V]\n"
            "       ferry delta inspect FILE\n"
            "       ferry delta synth BASE NEXT [--elems N] [--tensors K] [--lr LR] [--steps S]\n"
            "  BASE, NEXT and OUT are safetensors checkpoints with the same tensors.\n"
            "  encode  writes a ferry delta file (default) or a Hugging Face TRL sparse patch:\n"
            "          trl-raw (int32 indices) or trl-gap (uint16/uint32 gaps), bf16 etc. values\n"
            "  apply   applies either kind onto BASE; ferry deltas are verified chunk by chunk\n"
            "          against xxh3 checksums and refused on any other base; nothing is written\n"
            "          unless every tensor applied\n"
            "  inspect density, bytes per changed element (positions / values) per tensor\n"
            "  synth   two bf16 checkpoints S-1 and S Adam steps from the same init (default\n"
            "          4M elements in 4 tensors plus a norm, lr 1e-6, 5 steps; --elems 1K..4G with\n"
            "          K, M, G = powers of 1024, --tensors 1..1000, --steps 1..1000, --lr in (0, 1))\n"
            "  Files are written to a temporary name and renamed, so no torn file is seen.\n"
            "  Inputs must be regular files; outputs are checked (their directory takes new\n"
            "  files, an existing output is a regular file) before any work.\n");
}

typedef struct loaded {
    cli_map_t map;
    ferry_safetensors_t *st;
} loaded_t;

static int load(ferry_ctx_t *ctx, const char *path, loaded_t *l) {
    memset(l, 0, sizeof *l);
    if (cli_map_file(path, &l->map) != 0) return -1;
    ferry_status_t st = ferry_safetensors_parse(ctx, l->map.data, l->map.len, &l->st);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry delta: %s: %s (%s)\n", path, ferry_ctx_error(ctx), ferry_status_name(st));
        cli_unmap_file(&l->map);
        return -1;
    }
    return 0;
}

static void unload(loaded_t *l) {
    ferry_safetensors_destroy(l->st);
    cli_unmap_file(&l->map);
}

static bool same_shape(const ferry_safetensors_tensor_t *a, const ferry_safetensors_tensor_t *b) {
    if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
    for (uint32_t d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d]) return false;
    return true;
}

/* The two checkpoints hold the same tensors with the same dtypes and shapes. */
static int check_pair(const loaded_t *a, const char *an, const loaded_t *b, const char *bn) {
    if (ferry_safetensors_count(a->st) != ferry_safetensors_count(b->st)) {
        fprintf(stderr, "ferry delta: %s has %zu tensors, %s has %zu\n", an, ferry_safetensors_count(a->st), bn,
                ferry_safetensors_count(b->st));
        return -1;
    }
    for (size_t i = 0; i < ferry_safetensors_count(a->st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(a->st, i);
        const ferry_safetensors_tensor_t *u = ferry_safetensors_find(b->st, t->name);
        if (!u) {
            fprintf(stderr, "ferry delta: tensor \"%s\" of %s is not in %s\n", t->name, an, bn);
            return -1;
        }
        if (!same_shape(t, u)) {
            fprintf(stderr, "ferry delta: tensor \"%s\" differs in dtype or shape between %s and %s\n", t->name, an,
                    bn);
            return -1;
        }
    }
    return 0;
}

static int write_file(ferry_ctx_t *ctx, ferry_safetensors_writer_t *w, const char *path, uint64_t *size_out) {
    uint64_t size = ferry_safetensors_writer_size(w);
    uint8_t *buf = size ? malloc(size) : NULL;
    size_t len = 0;
    ferry_status_t st = buf ? ferry_safetensors_writer_write(w, buf, size, &len) : FERRY_ERR_NO_MEMORY;
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry delta: writing %s: %s (%s)\n", path, ferry_ctx_error(ctx), ferry_status_name(st));
        free(buf);
        return -1;
    }
    int rc = cli_write_atomic(path, buf, len);
    free(buf);
    if (size_out) *size_out = len;
    return rc;
}

/* One step of a subcommand's arguments: a positional one (into paths, at
 * most two; returns 0) or an option with its value (*opt, *val; *i moves
 * past the value; returns 1); -1 after printing a usage error. */
static int next_arg(const char *cmd, int argc, char **argv, int *i, const char **paths, int *np, const char **opt,
                    const char **val) {
    const char *a = argv[*i];
    if (a[0] != '-') {
        if (*np == 2) {
            fprintf(stderr, "ferry delta %s: unexpected argument %s\n", cmd, a);
            return -1;
        }
        paths[(*np)++] = a;
        return 0;
    }
    if (*i + 1 >= argc) {
        fprintf(stderr, "ferry delta %s: %s needs a value\n", cmd, a);
        return -1;
    }
    *opt = a;
    *val = argv[++*i];
    return 1;
}

/* ---- encode ---- */

typedef struct enc_stats {
    uint64_t elems, changed, bytes;
} enc_stats_t;

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

static int encode_trl(ferry_ctx_t *ctx, const loaded_t *base, const loaded_t *next, bool gap, uint64_t next_version,
                      ferry_safetensors_writer_t *w, void ***owned, size_t *n_owned, enc_stats_t *s) {
    uint64_t tensors_changed = 0;
    for (size_t i = 0; i < ferry_safetensors_count(next->st); i++) {
        const ferry_safetensors_tensor_t *u = ferry_safetensors_at(next->st, i);
        const ferry_safetensors_tensor_t *t = ferry_safetensors_find(base->st, u->name);
        s->elems += u->elems;
        uint64_t m = 0;
        uint64_t *idx = changed_indices(t, u, &m);
        if (!idx) return -1;
        if (m == 0) {
            free(idx);
            continue;
        }
        if (u->elems > INT32_MAX) {
            fprintf(stderr, "ferry delta: \"%s\" has %llu elements, more than TRL's int32 indices address\n",
                    u->name, (unsigned long long)u->elems);
            free(idx);
            return -1;
        }
        tensors_changed++;
        s->changed += m;
        size_t esz = ferry_dtype_size(u->dtype);
        uint64_t max_gap = 0;
        for (uint64_t k = 0; k < m; k++) {
            uint64_t g = k ? idx[k] - idx[k - 1] : idx[0];
            if (g > max_gap) max_gap = g;
        }
        ferry_dtype_t idt = !gap ? FERRY_DTYPE_I32 : max_gap <= 0xFFFF ? FERRY_DTYPE_U16 : FERRY_DTYPE_U32;
        size_t isz = ferry_dtype_size(idt);
        uint8_t *ib = malloc(m * isz), *vb = malloc(m * esz);
        (*owned)[(*n_owned)++] = ib;
        (*owned)[(*n_owned)++] = vb;
        if (!ib || !vb) {
            free(idx);
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
        size_t nl = strlen(u->name) + 5;
        char *in = malloc(nl), *vn = malloc(nl);
        if (!in || !vn) {
            free(in), free(vn);
            return -1;
        }
        snprintf(in, nl, "%s.idx", u->name);
        snprintf(vn, nl, "%s.val", u->name);
        int64_t shape[1] = {(int64_t)m};
        ferry_status_t st = ferry_safetensors_writer_add(w, in, idt, 1, shape, ib, m * isz);
        if (st == FERRY_OK) st = ferry_safetensors_writer_add(w, vn, u->dtype, 1, shape, vb, m * esz);
        free(in), free(vn);
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry delta: %s\n", ferry_ctx_error(ctx));
            return -1;
        }
    }
    char num[64];
    ferry_safetensors_writer_meta(w, "format", TRL_FORMAT_NAME);
    ferry_safetensors_writer_meta(w, "version", "1");
    ferry_safetensors_writer_meta(w, "sparse", "True");
    snprintf(num, sizeof num, "%llu", (unsigned long long)next_version);
    ferry_safetensors_writer_meta(w, "model_version", num);
    snprintf(num, sizeof num, "%llu", (unsigned long long)tensors_changed);
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

/* References to a parsed file's tensors (data borrowed; caller frees the array). */
static ferry_tensor_ref_t *refs_of(const ferry_safetensors_t *st, uint8_t **data) {
    size_t n = ferry_safetensors_count(st);
    ferry_tensor_ref_t *r = calloc(n + 1, sizeof *r);
    for (size_t i = 0; r && i < n; i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(st, i);
        r[i] = (ferry_tensor_ref_t){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .bytes = t->bytes,
                                    .data = data ? data[i] : (void *)t->data};
        memcpy(r[i].shape, t->shape, sizeof r[i].shape);
    }
    return r;
}

static int encode_ferry(ferry_ctx_t *ctx, const loaded_t *base, const loaded_t *next, uint64_t bv, uint64_t nv,
                        const char *out, enc_stats_t *s) {
    size_t n = ferry_safetensors_count(next->st);
    ferry_tensor_ref_t *b = refs_of(base->st, NULL), *u = refs_of(next->st, NULL);
    size_t cap = u ? ferry_delta_file_bound(u, n) : 0, len = 0;
    uint8_t *buf = cap ? malloc(cap) : NULL;
    int rc = -1;
    ferry_status_t st = b && buf ? ferry_delta_file_build(ctx, b, u, n, bv, nv, buf, cap, &len, &s->changed)
                                 : FERRY_ERR_NO_MEMORY;
    if (st != FERRY_OK)
        fprintf(stderr, "ferry delta encode: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
    else if (cli_write_atomic(out, buf, len) == 0)
        rc = 0, s->bytes = len;
    for (size_t i = 0; i < n; i++) s->elems += ferry_safetensors_at(next->st, i)->elems;
    free(buf), free(b), free(u);
    return rc;
}

static int delta_encode(ferry_ctx_t *ctx, int argc, char **argv) {
    const char *paths[2] = {0}, *out = NULL, *format = "ferry";
    uint64_t bv = 0, nv = 1;
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a, *v;
        int k = next_arg("encode", argc, argv, &i, paths, &np, &a, &v);
        if (k < 0) return CLI_USAGE;
        if (k == 0) continue;
        if (!strcmp(a, "-o")) {
            if (cli_check_output(v, "-o") != 0) return CLI_USAGE;
            out = v;
        } else if (!strcmp(a, "--format")) format = v;
        else if (!strcmp(a, "--base-version") || !strcmp(a, "--next-version")) {
            if (!cli_u64(a, v, 0, UINT64_MAX - 1, a[2] == 'b' ? &bv : &nv)) return CLI_USAGE;
        } else {
            fprintf(stderr, "ferry delta encode: unknown option %s\n", a);
            return CLI_USAGE;
        }
    }
    if (np != 2 || !out) {
        fprintf(stderr, "ferry delta encode: needs BASE, NEXT and -o OUT\n");
        return CLI_USAGE;
    }
    bool trl = !strcmp(format, "trl-raw") || !strcmp(format, "trl-gap");
    if (!trl && strcmp(format, "ferry")) {
        fprintf(stderr, "ferry delta encode: --format %s: ferry, trl-raw or trl-gap\n", format);
        return CLI_USAGE;
    }
    loaded_t base, next;
    if (load(ctx, paths[0], &base) != 0) return CLI_FAIL;
    if (load(ctx, paths[1], &next) != 0) {
        unload(&base);
        return CLI_FAIL;
    }
    int rc = CLI_FAIL;
    ferry_safetensors_writer_t *w = NULL;
    size_t n_owned = 0, cap_owned = 2 * ferry_safetensors_count(next.st) + 1;
    void **owned = calloc(cap_owned, sizeof *owned);
    enc_stats_t s = {0};
    uint64_t size = 0;
    double t0 = cli_now_s();
    if (!owned || check_pair(&base, paths[0], &next, paths[1]) != 0 ||
        ferry_safetensors_writer_create(ctx, &w) != FERRY_OK)
        goto out;
    if (trl) {
        if (encode_trl(ctx, &base, &next, !strcmp(format, "trl-gap"), nv, w, &owned, &n_owned, &s) != 0 ||
            write_file(ctx, w, out, &size) != 0)
            goto out;
    } else {
        if (encode_ferry(ctx, &base, &next, bv, nv, out, &s) != 0) goto out;
        size = s.bytes;
    }
    printf("%s: %s delta of %zu tensors, %llu of %llu elements changed (%.3f%%), %llu bytes, %.3f B per changed "
           "element, %.2f s\n",
           out, format, ferry_safetensors_count(next.st), (unsigned long long)s.changed, (unsigned long long)s.elems,
           s.elems ? 100.0 * (double)s.changed / (double)s.elems : 0.0, (unsigned long long)size,
           s.changed ? (double)size / (double)s.changed : 0.0, cli_now_s() - t0);
    rc = CLI_OK;
out:
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    ferry_safetensors_writer_destroy(w);
    unload(&base);
    unload(&next);
    return rc;
}

/* ---- apply ---- */

static bool in_dense_list(json_t *dense, const char *name) {
    size_t i;
    json_t *v;
    if (!json_is_array(dense)) return false;
    json_array_foreach(dense, i, v) if (json_is_string(v) && !strcmp(json_string_value(v), name)) return true;
    return false;
}

/* Applies a ferry delta file onto the copies in regions[] (one per base tensor). */
static int apply_ferry(ferry_ctx_t *ctx, const loaded_t *base, const loaded_t *patch, uint64_t bv,
                       uint8_t **regions) {
    if (ferry_safetensors_count(patch->st) != ferry_safetensors_count(base->st)) {
        fprintf(stderr, "ferry delta apply: the delta has %zu tensors, the base %zu\n",
                ferry_safetensors_count(patch->st), ferry_safetensors_count(base->st));
        return -1;
    }
    ferry_tensor_ref_t *r = refs_of(base->st, regions);
    ferry_status_t st = r ? ferry_delta_file_apply(ctx, patch->map.data, patch->map.len, r,
                                                   ferry_safetensors_count(base->st), bv)
                          : FERRY_ERR_NO_MEMORY;
    free(r);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry delta apply: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
        return -1;
    }
    return 0;
}

/* Applies a TRL sparse patch: indices bounds-checked and strictly increasing. */
static int apply_trl(const loaded_t *base, const loaded_t *patch, uint8_t **regions) {
    const char *enc = ferry_safetensors_meta(patch->st, "encoding");
    bool gap = enc && !strcmp(enc, "gap_delta");
    if (enc && !gap && strcmp(enc, "raw")) {
        fprintf(stderr, "ferry delta apply: TRL patch encoding \"%s\" (raw or gap_delta known)\n", enc);
        return -1;
    }
    size_t used = 0;
    for (size_t i = 0; i < ferry_safetensors_count(base->st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(base->st, i);
        size_t nl = strlen(t->name) + 5;
        char *in = malloc(nl), *vn = malloc(nl);
        if (!in || !vn) {
            free(in), free(vn);
            return -1;
        }
        snprintf(in, nl, "%s.idx", t->name);
        snprintf(vn, nl, "%s.val", t->name);
        const ferry_safetensors_tensor_t *ix = ferry_safetensors_find(patch->st, in),
                                         *vx = ferry_safetensors_find(patch->st, vn);
        free(in), free(vn);
        if (!ix && !vx) continue;
        used += 2;
        size_t esz = ferry_dtype_size(t->dtype), isz = ix ? ferry_dtype_size(ix->dtype) : 0;
        bool idt_ok = ix && (gap ? (ix->dtype == FERRY_DTYPE_U16 || ix->dtype == FERRY_DTYPE_U32)
                                 : (ix->dtype == FERRY_DTYPE_I32 || ix->dtype == FERRY_DTYPE_I64));
        if (!ix || !vx || !idt_ok || vx->dtype != t->dtype || ix->elems != vx->elems) {
            fprintf(stderr,
                    "ferry delta apply: \"%s\": the patch needs %s.idx (%s) and %s.val (%s) of one length\n",
                    t->name, t->name, gap ? "U16/U32 gaps" : "I32 indices", t->name, ferry_dtype_name(t->dtype));
            return -1;
        }
        uint64_t prev = 0;
        for (uint64_t k = 0; k < ix->elems; k++) {
            const uint8_t *p = (const uint8_t *)ix->data + k * isz;
            uint64_t v;
            if (isz == 2) {
                uint16_t x;
                memcpy(&x, p, 2);
                v = x;
            } else if (isz == 4) {
                uint32_t x;
                memcpy(&x, p, 4);
                v = ix->dtype == FERRY_DTYPE_I32 && (int32_t)x < 0 ? UINT64_MAX : x;
            } else {
                int64_t x;
                memcpy(&x, p, 8);
                v = x < 0 ? UINT64_MAX : (uint64_t)x;
            }
            uint64_t pos = gap ? (k ? prev + v : v) : v;
            if (v == UINT64_MAX || pos >= t->elems || (k && (gap ? v == 0 : pos <= prev))) {
                fprintf(stderr, "ferry delta apply: \"%s\": index %llu is out of range or out of order\n", t->name,
                        (unsigned long long)k);
                return -1;
            }
            prev = pos;
            memcpy(regions[i] + pos * esz, (const uint8_t *)vx->data + k * esz, esz);
        }
    }
    if (used != ferry_safetensors_count(patch->st)) {
        fprintf(stderr, "ferry delta apply: the patch holds %zu tensors that name no tensor of the base\n",
                ferry_safetensors_count(patch->st) - used);
        return -1;
    }
    return 0;
}

static int delta_apply(ferry_ctx_t *ctx, int argc, char **argv) {
    const char *paths[2] = {0}, *out = NULL;
    uint64_t bv = FERRY_DELTA_ANY_BASE;
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a, *v;
        int k = next_arg("apply", argc, argv, &i, paths, &np, &a, &v);
        if (k < 0) return CLI_USAGE;
        if (k == 0) continue;
        if (!strcmp(a, "-o")) {
            if (cli_check_output(v, "-o") != 0) return CLI_USAGE;
            out = v;
        } else if (!strcmp(a, "--base-version")) {
            if (!cli_u64(a, v, 0, UINT64_MAX - 1, &bv)) return CLI_USAGE;
        } else {
            fprintf(stderr, "ferry delta apply: unknown option %s\n", a);
            return CLI_USAGE;
        }
    }
    if (np != 2 || !out) {
        fprintf(stderr, "ferry delta apply: needs BASE, PATCH and -o OUT\n");
        return CLI_USAGE;
    }
    loaded_t base, patch;
    if (load(ctx, paths[0], &base) != 0) return CLI_FAIL;
    if (load(ctx, paths[1], &patch) != 0) {
        unload(&base);
        return CLI_FAIL;
    }
    const char *format = ferry_safetensors_meta(patch.st, "format");
    size_t n = ferry_safetensors_count(base.st);
    uint8_t **regions = calloc(n + 1, sizeof *regions);
    ferry_safetensors_writer_t *w = NULL;
    int rc = CLI_FAIL;
    double t0 = cli_now_s();
    bool ok = regions != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(base.st, i);
        regions[i] = malloc(t->bytes ? t->bytes : 1);
        ok = regions[i] != NULL;
        if (ok && t->bytes) memcpy(regions[i], t->data, t->bytes);
    }
    if (!ok) {
        fprintf(stderr, "ferry delta apply: out of memory\n");
        goto out;
    }
    if (!format || (strcmp(format, DELTA_FORMAT_NAME) && strcmp(format, TRL_FORMAT_NAME))) {
        fprintf(stderr, "ferry delta apply: %s is neither a ferry delta nor a TRL patch (metadata format: %s)\n",
                paths[1], format ? format : "none");
        goto out;
    }
    bool trl = !strcmp(format, TRL_FORMAT_NAME);
    if ((trl ? apply_trl(&base, &patch, regions) : apply_ferry(ctx, &base, &patch, bv, regions)) != 0) goto out;
    if (ferry_safetensors_writer_create(ctx, &w) != FERRY_OK) goto out;
    for (size_t i = 0; i < n; i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(base.st, i);
        if (ferry_safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape, regions[i], t->bytes) != FERRY_OK)
            goto out;
    }
    /* the base's own metadata carries over */
    for (size_t k = 0;; k++) {
        const char *key = ferry_safetensors_meta_key(base.st, k);
        if (!key) break;
        ferry_safetensors_writer_meta(w, key, ferry_safetensors_meta(base.st, key));
    }
    if (write_file(ctx, w, out, NULL) != 0) goto out;
    printf("%s: %s applied to %s (%zu tensors), %s, %.2f s\n", out, trl ? "TRL patch" : "ferry delta", paths[0], n,
           trl ? "not verified: TRL patches carry no checksum" : "every chunk and whole tensor verified against its xxh3",
           cli_now_s() - t0);
    rc = CLI_OK;
out:
    for (size_t i = 0; regions && i < n; i++) free(regions[i]);
    free(regions);
    ferry_safetensors_writer_destroy(w);
    unload(&base);
    unload(&patch);
    return rc;
}

/* ---- inspect ---- */

static const char *or_unknown(const char *s) { return s ? s : "?"; }

static int inspect_ferry(ferry_ctx_t *ctx, const loaded_t *f) {
    ferry_delta_codec_t *codec;
    if (ferry_delta_codec_create(ctx, &codec) != FERRY_OK) return CLI_FAIL;
    printf("ferry delta, version %s -> %s\n", or_unknown(ferry_safetensors_meta(f->st, "base_version")),
           or_unknown(ferry_safetensors_meta(f->st, "next_version")));
    printf("%-48s %-8s %12s %8s %10s %7s %7s %7s\n", "tensor", "dtype", "elements", "changed", "bytes", "B/chg",
           "pos", "val");
    uint64_t te = 0, tc = 0, tb = 0, tp = 0, tv = 0;
    int rc = CLI_OK;
    const char *dl = ferry_safetensors_meta(f->st, "dense");
    json_t *dense = dl ? json_loads(dl, 0, NULL) : NULL;
    for (size_t i = 0; i < ferry_safetensors_count(f->st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(f->st, i);
        ferry_delta_info_t in;
        if (in_dense_list(dense, t->name)) {
            printf("%-48s %-8s %12llu %8s %10llu (dense)\n", t->name, ferry_dtype_name(t->dtype),
                   (unsigned long long)t->elems, "-", (unsigned long long)t->bytes);
            tb += t->bytes;
            continue;
        }
        ferry_status_t st = t->dtype == FERRY_DTYPE_U8 ? ferry_delta_inspect(codec, t->data, t->bytes, &in)
                                                       : FERRY_ERR_CORRUPT;
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry delta inspect: \"%s\": %s (%s)\n", t->name,
                    t->dtype == FERRY_DTYPE_U8 ? ferry_delta_codec_detail(codec) : "not a U8 frame",
                    ferry_status_name(st));
            rc = CLI_FAIL;
            continue;
        }
        double m = in.changed ? (double)in.changed : 1.0;
        if (!in.changed) {
            printf("%-48s %-8s %12llu %7.3f%% %10llu %7s\n", t->name, ferry_dtype_name(in.dtype),
                   (unsigned long long)in.elems, 0.0, (unsigned long long)t->bytes, "-");
            te += in.elems, tb += t->bytes;
            continue;
        }
        printf("%-48s %-8s %12llu %7.3f%% %10llu %7.3f %7.3f %7.3f\n", t->name, ferry_dtype_name(in.dtype),
               (unsigned long long)in.elems, in.elems ? 100.0 * (double)in.changed / (double)in.elems : 0.0,
               (unsigned long long)t->bytes, (double)t->bytes / m, (double)in.bytes_positions / m,
               (double)in.bytes_values / m);
        te += in.elems, tc += in.changed, tb += t->bytes, tp += in.bytes_positions, tv += in.bytes_values;
    }
    double m = tc ? (double)tc : 1.0;
    printf("%-48s %-8s %12llu %7.3f%% %10llu %7.3f %7.3f %7.3f\n", "total", "", (unsigned long long)te,
           te ? 100.0 * (double)tc / (double)te : 0.0, (unsigned long long)tb, (double)tb / m, (double)tp / m,
           (double)tv / m);
    ferry_delta_codec_destroy(codec);
    json_decref(dense);
    return rc;
}

static int inspect_trl(const loaded_t *f) {
    printf("TRL sparse patch, model_version %s, encoding %s\n", or_unknown(ferry_safetensors_meta(f->st, "model_version")),
           or_unknown(ferry_safetensors_meta(f->st, "encoding")));
    printf("%-48s %-8s %8s %10s %7s %7s\n", "tensor", "index", "changed", "bytes", "B/chg", "index");
    uint64_t tc = 0, tb = 0, ti = 0;
    for (size_t i = 0; i < ferry_safetensors_count(f->st); i++) {
        const ferry_safetensors_tensor_t *ix = ferry_safetensors_at(f->st, i);
        size_t l = strlen(ix->name);
        if (l < 4 || strcmp(ix->name + l - 4, ".idx")) continue;
        char *vn = strdup(ix->name);
        if (!vn) return CLI_FAIL;
        memcpy(vn + l - 4, ".val", 4);
        const ferry_safetensors_tensor_t *vx = ferry_safetensors_find(f->st, vn);
        free(vn);
        uint64_t bytes = ix->bytes + (vx ? vx->bytes : 0), m = ix->elems ? ix->elems : 1;
        printf("%-48.*s %-8s %8llu %10llu %7.3f %7.3f\n", (int)(l - 4), ix->name, ferry_dtype_name(ix->dtype),
               (unsigned long long)ix->elems, (unsigned long long)bytes, (double)bytes / (double)m,
               (double)ix->bytes / (double)m);
        tc += ix->elems, tb += bytes, ti += ix->bytes;
    }
    double m = tc ? (double)tc : 1.0;
    printf("%-48s %-8s %8llu %10llu %7.3f %7.3f\n", "total", "", (unsigned long long)tc, (unsigned long long)tb,
           (double)tb / m, (double)ti / m);
    return CLI_OK;
}

static int delta_inspect(ferry_ctx_t *ctx, int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "ferry delta inspect: needs one FILE\n");
        return CLI_USAGE;
    }
    loaded_t f;
    if (load(ctx, argv[1], &f) != 0) return CLI_FAIL;
    const char *format = ferry_safetensors_meta(f.st, "format");
    int rc;
    if (format && !strcmp(format, DELTA_FORMAT_NAME)) {
        rc = inspect_ferry(ctx, &f);
    } else if (format && !strcmp(format, TRL_FORMAT_NAME)) {
        rc = inspect_trl(&f);
    } else {
        printf("safetensors checkpoint, %zu tensors\n", ferry_safetensors_count(f.st));
        for (size_t i = 0; i < ferry_safetensors_count(f.st); i++) {
            const ferry_safetensors_tensor_t *t = ferry_safetensors_at(f.st, i);
            printf("%-48s %-8s %12llu elements %12llu bytes\n", t->name, ferry_dtype_name(t->dtype),
                   (unsigned long long)t->elems, (unsigned long long)t->bytes);
        }
        rc = CLI_OK;
    }
    unload(&f);
    return rc;
}

/* ---- synth ---- */

static int delta_synth(ferry_ctx_t *ctx, int argc, char **argv) {
    const char *paths[2] = {0};
    uint64_t elems = 4u << 20, tensors = 4, steps = 5;
    double lr = 1e-6;
    int np = 0;
    for (int i = 1; i < argc; i++) {
        const char *a, *v;
        int k = next_arg("synth", argc, argv, &i, paths, &np, &a, &v);
        if (k < 0) return CLI_USAGE;
        if (k == 0) continue;
        bool ok;
        if (!strcmp(a, "--elems")) ok = cli_size(a, v, 1024, 1ull << 32, &elems);
        else if (!strcmp(a, "--tensors")) ok = cli_u64(a, v, 1, 1000, &tensors);
        else if (!strcmp(a, "--steps")) ok = cli_u64(a, v, 1, 1000, &steps);
        else if (!strcmp(a, "--lr")) ok = cli_f64(a, v, (cli_range_t){0, 1, true, true}, &lr);
        else {
            fprintf(stderr, "ferry delta synth: unknown option %s\n", a);
            return CLI_USAGE;
        }
        if (!ok) return CLI_USAGE;
    }
    if (np != 2) {
        fprintf(stderr, "ferry delta synth: needs BASE and NEXT output paths\n");
        return CLI_USAGE;
    }
    if (cli_check_output(paths[0], "BASE") != 0 || cli_check_output(paths[1], "NEXT") != 0) return CLI_USAGE;
    const int64_t cols = 1024;
    uint64_t rows = (elems / tensors + cols - 1) / cols;
    size_t per = (size_t)(rows * cols);
    size_t count = (size_t)tensors + 1; /* and one norm */
    uint16_t **b = calloc(count, sizeof *b), **n = calloc(count, sizeof *n);
    float *w = malloc(per * 4), *m = malloc(per * 4), *v = malloc(per * 4), *d = malloc(per * 4);
    ferry_safetensors_writer_t *wb = NULL, *wn = NULL;
    int rc = CLI_FAIL;
    if (!b || !n || !w || !m || !v || !d || ferry_safetensors_writer_create(ctx, &wb) != FERRY_OK ||
        ferry_safetensors_writer_create(ctx, &wn) != FERRY_OK)
        goto out;
    for (size_t k = 0; k < count; k++) {
        bool norm = k == count - 1;
        size_t len = norm ? (size_t)cols : per;
        b[k] = malloc(len * 2), n[k] = malloc(len * 2);
        if (!b[k] || !n[k]) goto out;
        delta_synth_t s;
        delta_synth_init(&s, len, norm, lr, 1000 + k, w, m, v, d);
        for (uint64_t t = 0; t < steps; t++) {
            if (t + 1 == steps) delta_synth_bf16(&s, b[k], 0, len);
            delta_synth_step_range(&s, 0, len);
            delta_synth_next(&s);
        }
        delta_synth_bf16(&s, n[k], 0, len);
        char name[64];
        if (norm)
            snprintf(name, sizeof name, "model.norm.weight");
        else
            snprintf(name, sizeof name, "model.layers.%zu.mlp.weight", k);
        int64_t shape[2] = {norm ? cols : (int64_t)rows, cols};
        uint32_t nd = norm ? 1 : 2;
        if (ferry_safetensors_writer_add(wb, name, FERRY_DTYPE_BF16, nd, norm ? shape + 1 : shape, b[k], len * 2) ||
            ferry_safetensors_writer_add(wn, name, FERRY_DTYPE_BF16, nd, norm ? shape + 1 : shape, n[k], len * 2))
            goto out;
    }
    if (write_file(ctx, wb, paths[0], NULL) != 0 || write_file(ctx, wn, paths[1], NULL) != 0) goto out;
    printf("%s, %s: %zu bf16 tensors, Adam steps %llu and %llu at lr %g\n", paths[0], paths[1], count,
           (unsigned long long)(steps - 1), (unsigned long long)steps, lr);
    rc = CLI_OK;
out:
    if (rc != CLI_OK && ferry_ctx_error(ctx)[0]) fprintf(stderr, "ferry delta synth: %s\n", ferry_ctx_error(ctx));
    for (size_t k = 0; b && n && k < count; k++) free(b[k]), free(n[k]);
    free(b), free(n), free(w), free(m), free(v), free(d);
    ferry_safetensors_writer_destroy(wb);
    ferry_safetensors_writer_destroy(wn);
    return rc;
}

int cmd_delta(int argc, char **argv) {
    if (argc < 2 || !strcmp(argv[1], "--help")) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? CLI_USAGE : CLI_OK;
    }
    for (int i = 2; i < argc; i++)
        if (!strcmp(argv[i], "--help")) {
            usage(stdout);
            return CLI_OK;
        }
    static char who[64];
    snprintf(who, sizeof who, "ferry delta %s", argv[1]);
    cli_parse_set_who(who);
    ferry_ctx_t *ctx = cli_ctx();
    if (!ctx) return CLI_FAIL;
    int rc;
    if (!strcmp(argv[1], "encode")) rc = delta_encode(ctx, argc - 1, argv + 1);
    else if (!strcmp(argv[1], "apply")) rc = delta_apply(ctx, argc - 1, argv + 1);
    else if (!strcmp(argv[1], "inspect")) rc = delta_inspect(ctx, argc - 1, argv + 1);
    else if (!strcmp(argv[1], "synth")) rc = delta_synth(ctx, argc - 1, argv + 1);
    else {
        fprintf(stderr, "ferry delta: unknown subcommand \"%s\" (encode, apply, inspect, synth)\n", argv[1]);
        rc = CLI_USAGE;
    }
    ferry_ctx_destroy(ctx);
    return rc;
}
