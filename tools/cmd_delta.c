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
 * "{name}.val" (the new values) with format "sparse_weight_patch" (trl.c).
 * apply writes OUT in one pass: the header with NEXT's metadata, BASE's
 * tensors read once into the new file's mapping, the delta applied there in
 * place, then fsync and rename; on any failure the temporary file goes. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "cli.h"
#include "synth.h"
#include "trl.h"

#define DELTA_FORMAT_NAME "ferry_delta"

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
            "          against xxh3 checksums and refused on any other base; OUT gets NEXT's tensor\n"
            "          order and metadata (a ferry delta carries them) and appears only if every\n"
            "          tensor applied\n"
            "  inspect density, bytes per changed element (positions / values) per tensor\n"
            "  synth   two bf16 checkpoints S-1 and S Adam steps from the same init (default\n"
            "          4M elements in 4 tensors plus a norm, lr 1e-6, 5 steps; --elems 1K..4G with\n"
            "          K, M, G = powers of 1024, --tensors 1..1000, --steps 1..1000, --lr in (0, 1);\n"
            "          metadata \"step\")\n"
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
    size_t n = ferry_safetensors_count(next->st), n_meta = 0;
    while (ferry_safetensors_meta_key(next->st, n_meta)) n_meta++;
    ferry_tensor_ref_t *b = refs_of(base->st, NULL), *u = refs_of(next->st, NULL);
    ferry_delta_meta_t *meta = calloc(n_meta + 1, sizeof *meta); /* NEXT's own metadata travels with the delta */
    for (size_t k = 0; meta && k < n_meta; k++) {
        meta[k].key = ferry_safetensors_meta_key(next->st, k);
        meta[k].value = ferry_safetensors_meta(next->st, meta[k].key);
    }
    size_t cap = u && meta ? ferry_delta_file_bound_meta(u, n, meta, n_meta) : 0, len = 0;
    uint8_t *buf = cap ? malloc(cap) : NULL;
    int rc = -1;
    ferry_status_t st = b && buf ? ferry_delta_file_build_meta(ctx, b, u, n, bv, nv, meta, n_meta, buf, cap, &len,
                                                               &s->changed)
                                 : FERRY_ERR_NO_MEMORY;
    if (st != FERRY_OK)
        fprintf(stderr, "ferry delta encode: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
    else if (cli_write_atomic(out, buf, len) == 0)
        rc = 0, s->bytes = len;
    for (size_t i = 0; i < n; i++) s->elems += ferry_safetensors_at(next->st, i)->elems;
    free(buf), free(b), free(u), free(meta);
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
    trl_bufs_t bufs = {0};
    enc_stats_t s = {0};
    uint64_t size = 0;
    double t0 = cli_now_s();
    if (check_pair(&base, paths[0], &next, paths[1]) != 0 || ferry_safetensors_writer_create(ctx, &w) != FERRY_OK)
        goto out;
    if (trl) {
        trl_stats_t ts;
        char why[256];
        if (trl_encode(base.st, next.st, !strcmp(format, "trl-gap"), nv, w, &bufs, &ts, why, sizeof why) != 0) {
            fprintf(stderr, "ferry delta encode: %s\n", why);
            goto out;
        }
        s.elems = ts.elems, s.changed = ts.changed;
        if (write_file(ctx, w, out, &size) != 0) goto out;
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
    trl_bufs_free(&bufs);
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

/* The output file: made under a temporary name in OUT's directory, mapped
 * for writing, and renamed to OUT only once complete and on disk. */
typedef struct out_file {
    char *tmp;
    int fd;
    uint8_t *map;
    size_t len;
} out_file_t;

static void out_discard(out_file_t *o) {
    if (o->map) munmap(o->map, o->len);
    if (o->fd >= 0) close(o->fd);
    if (o->tmp) unlink(o->tmp);
    free(o->tmp);
    o->map = NULL, o->fd = -1, o->tmp = NULL;
}

static int out_create(out_file_t *o, const char *path, size_t len) {
    size_t n = strlen(path) + 32;
    *o = (out_file_t){.fd = -1, .len = len, .tmp = malloc(n)};
    if (!o->tmp) return -1;
    snprintf(o->tmp, n, "%s.tmp.%d", path, (int)getpid());
    o->fd = open(o->tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (o->fd < 0) {
        fprintf(stderr, "ferry delta apply: cannot create %s: %s\n", o->tmp, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    /* the blocks reserved now: a full disk is an error here, not a SIGBUS
       on a store into the mapping later */
    int e = posix_fallocate(o->fd, 0, (off_t)len);
    if (e == EOPNOTSUPP || e == EINVAL) e = ftruncate(o->fd, (off_t)len) ? errno : 0;
    if (e) {
        fprintf(stderr, "ferry delta apply: cannot size %s to %zu bytes: %s\n", o->tmp, len, strerror(e));
        out_discard(o);
        return -1;
    }
    o->map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, o->fd, 0);
    if (o->map == MAP_FAILED) {
        o->map = NULL;
        fprintf(stderr, "ferry delta apply: cannot map %s: %s\n", o->tmp, strerror(errno));
        out_discard(o);
        return -1;
    }
    return 0;
}

static int out_publish(out_file_t *o, const char *path) {
    int rc = msync(o->map, o->len, MS_SYNC);
    munmap(o->map, o->len);
    o->map = NULL;
    if (rc != 0 || fsync(o->fd) != 0) {
        fprintf(stderr, "ferry delta apply: writing %s: %s\n", o->tmp, strerror(errno));
        return -1;
    }
    rc = close(o->fd);
    o->fd = -1;
    if (rc != 0 || rename(o->tmp, path) != 0) {
        fprintf(stderr, "ferry delta apply: publishing %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* the rename itself reaches the disk with the directory */
    char *slash = strrchr(o->tmp, '/');
    if (slash) *slash = '\0';
    int dfd = open(slash ? (slash == o->tmp ? "/" : o->tmp) : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) {
        fsync(dfd);
        close(dfd);
    }
    free(o->tmp);
    o->tmp = NULL;
    return 0;
}

/* len bytes of fd at off into dst. */
static int read_at(int fd, uint8_t *dst, uint64_t len, uint64_t off) {
    while (len > 0) {
        ssize_t r = pread(fd, dst, len > (1u << 30) ? (1u << 30) : (size_t)len, (off_t)off);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        dst += r, off += (uint64_t)r, len -= (uint64_t)r;
    }
    return 0;
}

/* The output's tensors and metadata into w: a ferry delta gives NEXT's
 * tensor order (the file's) and, where it carries them, NEXT's metadata;
 * otherwise BASE's order and metadata stay (*base_meta set). */
static int plan_output(const loaded_t *base, const loaded_t *patch, bool trl, ferry_safetensors_writer_t *w,
                       bool *base_meta) {
    const ferry_safetensors_t *order = trl ? base->st : patch->st;
    if (!trl && ferry_safetensors_count(patch->st) != ferry_safetensors_count(base->st)) {
        fprintf(stderr, "ferry delta apply: the delta has %zu tensors, the base %zu\n",
                ferry_safetensors_count(patch->st), ferry_safetensors_count(base->st));
        return -1;
    }
    for (size_t i = 0; i < ferry_safetensors_count(order); i++) {
        const char *name = ferry_safetensors_at(order, i)->name;
        const ferry_safetensors_tensor_t *t = ferry_safetensors_find(base->st, name);
        if (!t) {
            fprintf(stderr, "ferry delta apply: the delta holds \"%s\", which the base does not\n", name);
            return -1;
        }
        /* the data pointer is not read: the header goes out alone */
        if (ferry_safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->bytes) != FERRY_OK)
            return -1;
    }
    const char *nm = trl ? NULL : ferry_safetensors_meta(patch->st, "next_metadata");
    *base_meta = nm == NULL;
    if (nm) {
        json_t *o = json_loads(nm, JSON_REJECT_DUPLICATES, NULL), *v;
        const char *k;
        bool ok = json_is_object(o);
        json_object_foreach(o, k, v) ok = ok && json_is_string(v) &&
                                          ferry_safetensors_writer_meta(w, k, json_string_value(v)) == FERRY_OK;
        json_decref(o);
        if (!ok) {
            fprintf(stderr,
                    "ferry delta apply: metadata \"next_metadata\" of the delta is not a JSON map of strings\n");
            return -1;
        }
        return 0;
    }
    for (size_t k = 0;; k++) {
        const char *key = ferry_safetensors_meta_key(base->st, k);
        if (!key) break;
        ferry_safetensors_writer_meta(w, key, ferry_safetensors_meta(base->st, key));
    }
    return 0;
}

/* Writes OUT in one pass: the header, BASE's tensors read into the new
 * file's mapping (one copy and no other buffer: about the tensors' size in
 * memory), the patch applied there in place, then synced and renamed. */
static int apply_to_file(ferry_ctx_t *ctx, const loaded_t *base, const char *base_path, const loaded_t *patch,
                         bool trl, uint64_t bv, const char *out, bool *base_meta) {
    ferry_safetensors_writer_t *w = NULL;
    ferry_safetensors_t *ost = NULL;
    out_file_t o = {.fd = -1};
    int bfd = -1, rc = -1;
    size_t n = ferry_safetensors_count(base->st), hlen = 0;
    uint8_t **regions = calloc(n + 1, sizeof *regions);
    ferry_tensor_ref_t *refs = NULL;
    if (!regions || ferry_safetensors_writer_create(ctx, &w) != FERRY_OK ||
        plan_output(base, patch, trl, w, base_meta) != 0)
        goto out;
    uint64_t size = ferry_safetensors_writer_size(w);
    if (!size || size > SIZE_MAX || out_create(&o, out, (size_t)size) != 0) goto out;
    ferry_status_t st = ferry_safetensors_writer_header(w, o.map, o.len, &hlen);
    if (st == FERRY_OK) st = ferry_safetensors_parse(ctx, o.map, o.len, &ost);
    if (st != FERRY_OK) {
        fprintf(stderr, "ferry delta apply: writing %s: %s (%s)\n", out, ferry_ctx_error(ctx), ferry_status_name(st));
        goto out;
    }
    bfd = open(base_path, O_RDONLY | O_CLOEXEC);
    if (bfd < 0) {
        fprintf(stderr, "ferry delta apply: cannot open %s: %s\n", base_path, strerror(errno));
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        const ferry_safetensors_tensor_t *u = ferry_safetensors_at(ost, i);
        const ferry_safetensors_tensor_t *t = ferry_safetensors_find(base->st, u->name);
        uint64_t at = (uint64_t)((const uint8_t *)t->data - (const uint8_t *)base->map.data);
        errno = 0;
        if (read_at(bfd, (uint8_t *)u->data, u->bytes, at) != 0) {
            fprintf(stderr, "ferry delta apply: reading %s: %s\n", base_path, errno ? strerror(errno) : "cut short");
            goto out;
        }
        regions[i] = (uint8_t *)u->data; /* in OUT's order, which is BASE's for a TRL patch */
    }
    if (trl) {
        char why[512];
        if (trl_apply(base->st, patch->st, regions, why, sizeof why) != 0) {
            fprintf(stderr, "ferry delta apply: %s\n", why);
            goto out;
        }
    } else {
        refs = refs_of(ost, regions);
        st = refs ? ferry_delta_file_apply(ctx, patch->map.data, patch->map.len, refs, n, bv) : FERRY_ERR_NO_MEMORY;
        if (st != FERRY_OK) {
            fprintf(stderr, "ferry delta apply: %s (%s)\n", ferry_ctx_error(ctx), ferry_status_name(st));
            goto out;
        }
    }
    rc = out_publish(&o, out);
out:
    if (rc != 0) out_discard(&o);
    if (bfd >= 0) close(bfd);
    free(refs);
    free(regions);
    ferry_safetensors_destroy(ost);
    ferry_safetensors_writer_destroy(w);
    return rc;
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
    double t0 = cli_now_s();
    const char *format = ferry_safetensors_meta(patch.st, "format");
    bool trl = format && !strcmp(format, TRL_FORMAT_NAME), base_meta = false;
    int rc = CLI_FAIL;
    if (!trl && (!format || strcmp(format, DELTA_FORMAT_NAME))) {
        fprintf(stderr, "ferry delta apply: %s is neither a ferry delta nor a TRL patch (metadata format: %s)\n",
                paths[1], format ? format : "none");
    } else if (apply_to_file(ctx, &base, paths[0], &patch, trl, bv, out, &base_meta) == 0) {
        printf("%s: %s applied to %s (%zu tensors), %s; %s, %.2f s\n", out, trl ? "TRL patch" : "ferry delta",
               paths[0], ferry_safetensors_count(base.st),
               trl ? "not verified: TRL patches carry no checksum"
                   : "every chunk and whole tensor verified against its xxh3",
               base_meta ? "BASE's metadata kept (the patch carries none of NEXT's)" : "NEXT's metadata",
               cli_now_s() - t0);
        rc = CLI_OK;
    }
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
    /* each file says which step it holds, as trainers' checkpoints do: a
       checkpoint rebuilt from BASE and a delta must say NEXT's */
    char step[32];
    snprintf(step, sizeof step, "%llu", (unsigned long long)(steps - 1));
    ferry_safetensors_writer_meta(wb, "format", "pt");
    ferry_safetensors_writer_meta(wb, "step", step);
    snprintf(step, sizeof step, "%llu", (unsigned long long)steps);
    ferry_safetensors_writer_meta(wn, "format", "pt");
    ferry_safetensors_writer_meta(wn, "step", step);
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
