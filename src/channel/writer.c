/* The file channel's writer: snapshots, deltas against the last published
 * version (kept in memory), the manifest last, then garbage collection. */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/hash.h"
#include "channel/channel_internal.h"

struct ferry_channel_writer {
    ferry_ctx_t *ctx;
    char *dir;
    uint32_t snapshot_every, keep;
    chan_manifest_t m;
    ferry_tensor_ref_t *base; /* the last published tensors (owned copies); NULL before the first */
    size_t n;
    uint32_t since_snapshot;  /* versions published since this writer's last snapshot */
    bool base_fresh;          /* base allocated but holding no published version */
};

static void free_base(ferry_channel_writer_t *w) {
    for (size_t i = 0; w->base && i < w->n; i++) {
        ferry_free(w->ctx, (char *)w->base[i].name);
        ferry_free(w->ctx, w->base[i].data);
    }
    ferry_free(w->ctx, w->base);
    w->base = NULL;
    w->n = 0;
}

/* A file this channel writes: the manifest, v<20 digits>.safetensors or
 * .delta, or a temporary one of those (".tmp.<pid>" appended). */
static bool channel_file(const char *name, bool *tmp) {
    const char *t = strstr(name, ".tmp.");
    size_t len = t ? (size_t)(t - name) : strlen(name);
    *tmp = t != NULL;
    if (len == strlen(CHANNEL_MANIFEST) && !strncmp(name, CHANNEL_MANIFEST, len)) return true;
    if (len < 21 || name[0] != 'v') return false;
    for (size_t i = 1; i < 21; i++)
        if (name[i] < '0' || name[i] > '9') return false;
    return (len == 21 + 12 && !strncmp(name + 21, ".safetensors", 12)) || (len == 21 + 6 && !strncmp(name + 21, ".delta", 6));
}

static bool named_by(const chan_manifest_t *m, const char *name) {
    for (size_t i = 0; i < m->n; i++)
        if (!strcmp(m->v[i].snapshot, name) || !strcmp(m->v[i].delta, name)) return true;
    return false;
}

/* Removes what a killed writer left: its temporary files, and snapshots or
 * deltas it renamed into place but no manifest came to name (or that a
 * collection stopped naming before it could remove them). Only this
 * channel's own file names are touched. */
static void remove_leftovers(const char *dir, const chan_manifest_t *m) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        bool tmp;
        if (!channel_file(e->d_name, &tmp) || (!tmp && (!strcmp(e->d_name, CHANNEL_MANIFEST) || named_by(m, e->d_name))))
            continue;
        char path[4096];
        if (chan_path(path, sizeof path, dir, e->d_name)) unlink(path);
    }
    closedir(d);
}

ferry_status_t ferry_channel_writer_create(ferry_ctx_t *ctx, const char *dir, const ferry_channel_params_t *p,
                                           ferry_channel_writer_t **out) {
    if (!ctx || !dir || !out) return FERRY_ERR_INVALID_ARGUMENT;
    *out = NULL;
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    uint32_t every = p && (p->field_mask & FERRY_CHANNEL_PARAM_SNAPSHOT_EVERY) ? p->snapshot_every : 10;
    uint32_t keep = p && (p->field_mask & FERRY_CHANNEL_PARAM_KEEP) ? p->keep : 4;
    if (every < 1 || keep < 1 || keep > 10000)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "channel: snapshot_every %u and keep %u must be >= 1", every,
                          keep);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return ferry_fail(err, FERRY_ERR_IO, "channel: cannot create %s: %s", dir, strerror(errno));
    ferry_channel_writer_t *w = ferry_calloc(ctx, 1, sizeof *w);
    if (!w || !(w->dir = ferry_strdup(ctx, dir))) {
        ferry_free(ctx, w);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
    }
    w->ctx = ctx;
    w->snapshot_every = every;
    w->keep = keep;
    ferry_status_t st = chan_manifest_read(ctx, dir, &w->m);
    if (st != FERRY_OK) {
        ferry_channel_writer_destroy(w);
        return st;
    }
    remove_leftovers(dir, &w->m);
    *out = w;
    return FERRY_OK;
}

void ferry_channel_writer_destroy(ferry_channel_writer_t *w) {
    if (!w) return;
    free_base(w);
    chan_manifest_clear(w->ctx, &w->m);
    ferry_free(w->ctx, w->dir);
    ferry_free(w->ctx, w);
}

static bool same_set(const ferry_tensor_ref_t *a, const ferry_tensor_ref_t *b, size_t n) {
    for (size_t i = 0; i < n; i++) {
        const ferry_tensor_ref_t *x = NULL;
        for (size_t j = 0; j < n && !x; j++)
            if (!strcmp(b[j].name, a[i].name)) x = &b[j];
        if (!x || x->dtype != a[i].dtype || x->ndim != a[i].ndim || x->bytes != a[i].bytes ||
            memcmp(x->shape, a[i].shape, a[i].ndim * sizeof a[i].shape[0]))
            return false;
    }
    return true;
}

static ferry_status_t write_snapshot(ferry_channel_writer_t *w, uint64_t version, const ferry_tensor_ref_t *t,
                                     size_t n, chan_version_t *v) {
    ferry_safetensors_writer_t *sw;
    ferry_status_t st = ferry_safetensors_writer_create(w->ctx, &sw);
    for (size_t i = 0; st == FERRY_OK && i < n; i++)
        st = ferry_safetensors_writer_add(sw, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, t[i].data, t[i].bytes);
    char num[32];
    snprintf(num, sizeof num, "%" PRIu64, version);
    if (st == FERRY_OK) st = ferry_safetensors_writer_meta(sw, "format", "pt");
    if (st == FERRY_OK) st = ferry_safetensors_writer_meta(sw, "ferry_version", num);
    uint64_t size = st == FERRY_OK ? ferry_safetensors_writer_size(sw) : 0;
    uint8_t *buf = size ? ferry_alloc(w->ctx, size) : NULL;
    size_t len = 0;
    if (st == FERRY_OK && !buf) st = ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_NO_MEMORY, "channel: out of memory");
    if (st == FERRY_OK) st = ferry_safetensors_writer_write(sw, buf, size, &len);
    snprintf(v->snapshot, sizeof v->snapshot, "v%020" PRIu64 ".safetensors", version);
    if (st == FERRY_OK) st = chan_file_write(w->ctx, w->dir, v->snapshot, buf, len);
    v->snapshot_bytes = len;
    if (st != FERRY_OK) v->snapshot[0] = '\0';
    ferry_free(w->ctx, buf);
    ferry_safetensors_writer_destroy(sw);
    return st;
}

static ferry_status_t write_delta(ferry_channel_writer_t *w, uint64_t version, const ferry_tensor_ref_t *t, size_t n,
                                  chan_version_t *v) {
    size_t cap = ferry_delta_file_bound(t, n), len = 0;
    uint8_t *buf = cap ? ferry_alloc(w->ctx, cap) : NULL;
    if (!buf) return ferry_fail(ferry_ctx_errbuf(w->ctx), FERRY_ERR_NO_MEMORY, "channel: out of memory for a delta");
    uint64_t base_version = w->m.v[w->m.n - 1].version;
    ferry_status_t st = ferry_delta_file_build(w->ctx, w->base, t, n, base_version, version, buf, cap, &len, NULL);
    snprintf(v->delta, sizeof v->delta, "v%020" PRIu64 ".delta", version);
    if (st == FERRY_OK) st = chan_file_write(w->ctx, w->dir, v->delta, buf, len);
    v->delta_bytes = len;
    v->base = base_version;
    if (st != FERRY_OK) v->delta[0] = '\0';
    ferry_free(w->ctx, buf);
    return st;
}

/* Keeps the versions readers may still need: the last `keep` (for chains)
 * and everything from the newest snapshot on; the manifest stops naming the
 * rest first, then their files go. */
static void collect(ferry_channel_writer_t *w) {
    size_t first = w->m.n > w->keep ? w->m.n - w->keep : 0, snap = w->m.n;
    for (size_t i = w->m.n; i-- > 0;)
        if (w->m.v[i].snapshot[0]) {
            snap = i;
            break;
        }
    if (snap < first) first = snap;
    if (first == 0) return;
    chan_manifest_t keep = {.v = w->m.v + first, .n = w->m.n - first};
    if (chan_manifest_write(w->ctx, w->dir, &keep) != FERRY_OK) return; /* retried next publish */
    for (size_t i = 0; i < first; i++) {
        char path[4096];
        if (w->m.v[i].snapshot[0] && chan_path(path, sizeof path, w->dir, w->m.v[i].snapshot)) unlink(path);
        if (w->m.v[i].delta[0] && chan_path(path, sizeof path, w->dir, w->m.v[i].delta)) unlink(path);
        chan_version_clear(w->ctx, &w->m.v[i]);
    }
    memmove(w->m.v, w->m.v + first, (w->m.n - first) * sizeof *w->m.v);
    w->m.n -= first;
}

ferry_status_t ferry_channel_publish(ferry_channel_writer_t *w, uint64_t version, const ferry_channel_tensor_t *t,
                                     size_t n) {
    if (!w) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(w->ctx);
    if (!t || n == 0) return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "channel: publish of no tensors");
    if (w->m.n && version <= w->m.v[w->m.n - 1].version)
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "channel: version %" PRIu64 " is not after %" PRIu64,
                          version, w->m.v[w->m.n - 1].version);
    if (version > (uint64_t)INT64_MAX) /* the manifest's JSON integers are signed */
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "channel: version %" PRIu64 " is above 2^63 - 1", version);
    if (!ferry_delta_file_bound(t, n))
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT,
                          "channel: a tensor without a name or data, or whose bytes do not match its shape");
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < i; j++)
            if (t[i].name && t[j].name && !strcmp(t[i].name, t[j].name))
                return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "channel: tensor \"%s\" given twice", t[i].name);
    }
    if (w->base && !w->base_fresh && (n != w->n || !same_set(t, w->base, n)))
        return ferry_fail(err, FERRY_ERR_MISMATCH,
                          "channel: the tensors differ from the last version's (names, dtypes or shapes)");
    /* the base copy first, so that running out of memory publishes nothing */
    if (!w->base) {
        w->base = ferry_calloc(w->ctx, n, sizeof *w->base);
        for (size_t i = 0; w->base && i < n; i++) {
            w->base[i] = t[i];
            w->base[i].name = ferry_strdup(w->ctx, t[i].name);
            w->base[i].data = ferry_alloc(w->ctx, t[i].bytes ? t[i].bytes : 1);
            w->n = i + 1;
            if (!w->base[i].name || !w->base[i].data) break;
        }
        if (!w->base || w->n != n || !w->base[n - 1].name || !w->base[n - 1].data) {
            free_base(w);
            return ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory for the base copy");
        }
        w->base_fresh = true; /* holds nothing published yet */
    }
    if (w->m.n == w->m.cap) {
        size_t cap = w->m.cap ? 2 * w->m.cap : 16;
        chan_version_t *v = ferry_realloc(w->ctx, w->m.v, cap * sizeof *v);
        if (!v) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
        w->m.v = v;
        w->m.cap = cap;
    }
    chan_version_t v = {.version = version};
    v.sums = ferry_calloc(w->ctx, n, sizeof *v.sums);
    if (!v.sums) return ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
    ferry_status_t st = FERRY_OK;
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        v.sums[i].name = ferry_strdup(w->ctx, t[i].name ? t[i].name : "");
        v.sums[i].sum = t[i].data ? XXH3_64bits(t[i].data, t[i].bytes) : 0;
        v.n_sums++;
        if (!v.sums[i].name) st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
    }
    if (st == FERRY_OK && (w->base_fresh || w->since_snapshot + 1 >= w->snapshot_every))
        st = write_snapshot(w, version, t, n, &v);
    if (st == FERRY_OK && !w->base_fresh && w->m.n) st = write_delta(w, version, t, n, &v);
    if (st == FERRY_OK) {
        w->m.v[w->m.n++] = v;
        st = chan_manifest_write(w->ctx, w->dir, &w->m);
        if (st != FERRY_OK) w->m.n--;
    }
    if (st != FERRY_OK) {
        /* files written for this version are not named by any manifest */
        char path[4096];
        if (v.snapshot[0] && chan_path(path, sizeof path, w->dir, v.snapshot)) unlink(path);
        if (v.delta[0] && chan_path(path, sizeof path, w->dir, v.delta)) unlink(path);
        chan_version_clear(w->ctx, &v);
        return st;
    }
    w->since_snapshot = v.snapshot[0] ? 0 : w->since_snapshot + 1;
    w->base_fresh = false;
    /* the new base */
    for (size_t i = 0; i < n; i++) {
        ferry_tensor_ref_t *b = NULL;
        for (size_t j = 0; j < n && !b; j++)
            if (!strcmp(w->base[j].name, t[i].name)) b = &w->base[j];
        memcpy(b->data, t[i].data, t[i].bytes);
    }
    collect(w);
    return FERRY_OK;
}
