/* The file channel's reader: from the version its buffers hold, the chain
 * of deltas or the newest snapshot and the deltas after it, whichever reads
 * fewer bytes; every step verified, each version applied whole or not at all. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/hash.h"
#include "channel/channel_internal.h"

#define FILE_MAX (1ull << 40)
#define ATTEMPTS 4 /* a file removed between reading the manifest and opening it: read again */

struct ferry_channel_reader {
    ferry_ctx_t *ctx;
    char *dir;
};

ferry_status_t ferry_channel_reader_create(ferry_ctx_t *ctx, const char *dir, ferry_channel_reader_t **out) {
    if (!ctx || !dir || !out) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_channel_reader_t *r = ferry_calloc(ctx, 1, sizeof *r);
    if (!r || !(r->dir = ferry_strdup(ctx, dir))) {
        ferry_free(ctx, r);
        return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "channel: out of memory");
    }
    r->ctx = ctx;
    *out = r;
    return FERRY_OK;
}

void ferry_channel_reader_destroy(ferry_channel_reader_t *r) {
    if (!r) return;
    ferry_free(r->ctx, r->dir);
    ferry_free(r->ctx, r);
}

/* Index of the first entry after version `from` whose deltas chain from it
 * to the newest; SIZE_MAX when they do not. *bytes: what the chain reads. */
static size_t chain_from(const chan_manifest_t *m, uint64_t from, uint64_t *bytes) {
    size_t i = 0;
    while (i < m->n && m->v[i].version <= from) i++;
    if (i == m->n) return SIZE_MAX;
    uint64_t prev = from, b = 0;
    for (size_t k = i; k < m->n; k++) {
        if (!m->v[k].delta[0] || m->v[k].base != prev) return SIZE_MAX;
        b += m->v[k].delta_bytes;
        prev = m->v[k].version;
    }
    *bytes = b;
    return i;
}

/* Reads and parses one file of the channel, which must hold exactly the
 * reader's tensors (by name); counts its bytes. On success the caller frees
 * *data and *sf. */
static ferry_status_t read_file(ferry_channel_reader_t *r, const char *name, const ferry_channel_tensor_t *t, size_t n,
                                uint64_t *bytes, uint8_t **data, size_t *len, ferry_safetensors_t **sf) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(r->ctx);
    char path[4096];
    *sf = NULL;
    if (!chan_path(path, sizeof path, r->dir, name)) return ferry_fail(err, FERRY_ERR_LIMIT, "channel: path too long");
    ferry_status_t st = chan_file_read(r->ctx, path, FILE_MAX, data, len);
    if (st != FERRY_OK) return st;
    *bytes += *len;
    st = ferry_safetensors_parse(r->ctx, *data, *len, sf);
    if (st == FERRY_OK && ferry_safetensors_count(*sf) != n)
        st = ferry_fail(err, FERRY_ERR_MISMATCH, "channel: %s holds %zu tensors, the reader %zu", name,
                        ferry_safetensors_count(*sf), n);
    for (size_t i = 0; st == FERRY_OK && i < n; i++)
        if (!ferry_safetensors_find(*sf, t[i].name))
            st = ferry_fail(err, FERRY_ERR_MISMATCH, "channel: %s has nothing for \"%s\"", name, t[i].name);
    if (st != FERRY_OK) {
        ferry_safetensors_destroy(*sf);
        ferry_free(r->ctx, *data);
        *sf = NULL;
        *data = NULL;
    }
    return st;
}

static ferry_status_t load_snapshot(ferry_channel_reader_t *r, const chan_version_t *v, ferry_channel_tensor_t *t,
                                    size_t n, uint64_t *bytes) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(r->ctx);
    uint8_t *data;
    size_t len;
    ferry_safetensors_t *sf;
    ferry_status_t st = read_file(r, v->snapshot, t, n, bytes, &data, &len, &sf);
    if (st != FERRY_OK) return st;
    /* all checks before any copy, so a bad snapshot leaves the buffers alone */
    for (size_t i = 0; st == FERRY_OK && i < n; i++) {
        const ferry_safetensors_tensor_t *x = ferry_safetensors_find(sf, t[i].name);
        uint64_t sum;
        if (x->dtype != t[i].dtype || x->ndim != t[i].ndim || x->bytes != t[i].bytes ||
            memcmp(x->shape, t[i].shape, x->ndim * sizeof x->shape[0]))
            st = ferry_fail(err, FERRY_ERR_MISMATCH, "channel: %s: tensor \"%s\" is shaped differently", v->snapshot,
                            t[i].name);
        else if (!chan_version_sum(v, t[i].name, &sum) || XXH3_64bits(x->data, x->bytes) != sum)
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "channel: %s: tensor \"%s\" does not match the manifest's checksum",
                            v->snapshot, t[i].name);
    }
    for (size_t i = 0; st == FERRY_OK && i < n; i++) {
        const ferry_safetensors_tensor_t *x = ferry_safetensors_find(sf, t[i].name);
        memcpy(t[i].data, x->data, x->bytes);
    }
    ferry_safetensors_destroy(sf);
    ferry_free(r->ctx, data);
    return st;
}

/* Frames and whole tensors carry their own checksums, which
 * ferry_delta_file_apply checks; all or nothing. */
static ferry_status_t apply_delta(ferry_channel_reader_t *r, const chan_version_t *v, ferry_channel_tensor_t *t,
                                  size_t n, uint64_t *bytes) {
    uint8_t *data;
    size_t len;
    ferry_safetensors_t *sf;
    ferry_status_t st = read_file(r, v->delta, t, n, bytes, &data, &len, &sf);
    if (st != FERRY_OK) return st;
    ferry_safetensors_destroy(sf);
    st = ferry_delta_file_apply(r->ctx, data, len, t, n, v->base);
    if (st != FERRY_OK) {
        char why[FERRY_ERR_TEXT];
        snprintf(why, sizeof why, "%s", ferry_ctx_error(r->ctx));
        ferry_fail(ferry_ctx_errbuf(r->ctx), st, "channel: %s: %s", v->delta, why);
    }
    ferry_free(r->ctx, data);
    return st;
}

ferry_status_t ferry_channel_update(ferry_channel_reader_t *r, ferry_channel_tensor_t *t, size_t n,
                                    uint64_t *version, ferry_channel_update_info_t *info) {
    if (!r || !version) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *err = ferry_ctx_errbuf(r->ctx);
    if (!t || n == 0 || !ferry_delta_file_bound(t, n))
        return ferry_fail(err, FERRY_ERR_INVALID_ARGUMENT, "channel: no tensors, or a malformed one");
    ferry_channel_update_info_t in = {.from = *version, .to = *version};
    ferry_status_t st = FERRY_OK;
    for (int attempt = 0; attempt < ATTEMPTS; attempt++) {
        chan_manifest_t m;
        st = chan_manifest_read(r->ctx, r->dir, &m);
        if (st != FERRY_OK) break;
        if (m.n == 0) {
            chan_manifest_clear(r->ctx, &m);
            st = ferry_fail(err, FERRY_ERR_NOT_FOUND, "channel: nothing published in %s yet", r->dir);
            break;
        }
        uint64_t newest = m.v[m.n - 1].version;
        if (*version == newest) {
            chan_manifest_clear(r->ctx, &m);
            break;
        }
        /* the cheaper of: the chain from here, or the newest snapshot and its chain */
        uint64_t chain_bytes = 0, snap_bytes = 0, tail = 0;
        size_t chain = *version == FERRY_CHANNEL_NONE || *version > newest ? SIZE_MAX
                                                                            : chain_from(&m, *version, &chain_bytes);
        size_t snap = SIZE_MAX, snap_chain = SIZE_MAX;
        for (size_t i = m.n; i-- > 0;)
            if (m.v[i].snapshot[0]) {
                snap = i;
                break;
            }
        if (snap != SIZE_MAX) {
            snap_chain = snap + 1 == m.n ? m.n : chain_from(&m, m.v[snap].version, &tail);
            snap_bytes = m.v[snap].snapshot_bytes + tail;
        }
        bool use_snap = snap != SIZE_MAX && snap_chain != SIZE_MAX && (chain == SIZE_MAX || snap_bytes < chain_bytes);
        if (!use_snap && chain == SIZE_MAX) {
            chan_manifest_clear(r->ctx, &m);
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "channel: %s offers no way from version %" PRIu64 " to %" PRIu64,
                            r->dir, *version, newest);
            break;
        }
        size_t from = chain;
        if (use_snap) {
            st = load_snapshot(r, &m.v[snap], t, n, &in.bytes_read);
            if (st == FERRY_OK) {
                *version = m.v[snap].version;
                in.snapshots = 1;
            }
            from = snap + 1;
        }
        for (size_t k = from; st == FERRY_OK && k < m.n; k++) {
            st = apply_delta(r, &m.v[k], t, n, &in.bytes_read);
            if (st == FERRY_OK) {
                *version = m.v[k].version;
                in.deltas++;
            }
        }
        chan_manifest_clear(r->ctx, &m);
        if (st != FERRY_ERR_NOT_FOUND) break; /* a file gone: the writer moved on; read the manifest again */
        if (attempt + 1 == ATTEMPTS)
            st = ferry_fail(err, FERRY_ERR_BUSY, "channel: the writer collected files faster than %s could be read",
                            r->dir);
    }
    in.to = *version;
    if (info) *info = in;
    return st;
}
