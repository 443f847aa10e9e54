/* The channel manifest (JSON) and the channel's file I/O. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sync/channel_internal.h"

bool chan_path(char *buf, size_t size, const char *dir, const char *name) {
    int n = snprintf(buf, size, "%s/%s", dir, name);
    return n > 0 && (size_t)n < size;
}

bool chan_name_ok(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n >= CHANNEL_FILE_MAX || name[0] == '.') return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_' ||
              c == '-'))
            return false;
    }
    return true;
}

ferry_status_t chan_file_read(ferry_ctx_t *ctx, const char *path, uint64_t max, uint8_t **data, size_t *len) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    *data = NULL;
    *len = 0;
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC); /* a FIFO must not block the open */
    if (fd < 0)
        return ferry_fail(err, errno == ENOENT ? FERRY_ERR_NOT_FOUND : FERRY_ERR_IO, "channel: cannot open %s: %s",
                          path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode) || (uint64_t)sb.st_size > max) {
        close(fd);
        return ferry_fail(err, FERRY_ERR_LIMIT, "channel: %s is not a regular file of at most %" PRIu64 " bytes",
                          path, max);
    }
    size_t n = (size_t)sb.st_size;
    uint8_t *p = ferry_alloc(ctx, n ? n : 1);
    if (!p) {
        close(fd);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory for %zu bytes of %s", n, path);
    }
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(fd, p + got, n - got);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            ferry_free(ctx, p);
            close(fd);
            return ferry_fail(err, FERRY_ERR_IO, "channel: reading %s: %s", path, r ? strerror(errno) : "short file");
        }
        got += (size_t)r;
    }
    close(fd);
    *data = p;
    *len = n;
    return FERRY_OK;
}

static void fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

ferry_status_t chan_file_write(ferry_ctx_t *ctx, const char *dir, const char *name, const void *data, size_t len) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    char path[4096], tmp[4200];
    if (!chan_path(path, sizeof path, dir, name) ||
        snprintf(tmp, sizeof tmp, "%s.tmp.%d", path, (int)getpid()) >= (int)sizeof tmp)
        return ferry_fail(err, FERRY_ERR_LIMIT, "channel: path %s/%s is too long", dir, name);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return ferry_fail(err, FERRY_ERR_IO, "channel: cannot create %s: %s", tmp, strerror(errno));
    const uint8_t *p = data;
    size_t left = len;
    while (left) {
        ssize_t w = write(fd, p, left);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) {
            int e = errno;
            close(fd);
            unlink(tmp);
            return ferry_fail(err, FERRY_ERR_IO, "channel: writing %s: %s", tmp, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0 || close(fd) != 0 || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return ferry_fail(err, FERRY_ERR_IO, "channel: publishing %s: %s", path, strerror(e));
    }
    fsync_dir(dir);
    return FERRY_OK;
}

void chan_version_clear(ferry_ctx_t *ctx, chan_version_t *v) {
    for (size_t i = 0; i < v->n_sums; i++) ferry_free(ctx, v->sums[i].name);
    ferry_free(ctx, v->sums);
    memset(v, 0, sizeof *v);
}

void chan_manifest_clear(ferry_ctx_t *ctx, chan_manifest_t *m) {
    for (size_t i = 0; i < m->n; i++) chan_version_clear(ctx, &m->v[i]);
    ferry_free(ctx, m->v);
    memset(m, 0, sizeof *m);
}

bool chan_version_sum(const chan_version_t *v, const char *name, uint64_t *sum) {
    for (size_t i = 0; i < v->n_sums; i++)
        if (!strcmp(v->sums[i].name, name)) {
            *sum = v->sums[i].sum;
            return true;
        }
    return false;
}

static bool get_u64_field(json_t *o, const char *key, uint64_t *out) {
    json_t *x = json_object_get(o, key);
    if (!json_is_integer(x) || json_integer_value(x) < 0) return false;
    *out = (uint64_t)json_integer_value(x);
    return true;
}

/* An optional file name field: absent gives "". */
static bool get_name_field(json_t *o, const char *key, char *out) {
    json_t *x = json_object_get(o, key);
    out[0] = '\0';
    if (!x) return true;
    if (!json_is_string(x) || !chan_name_ok(json_string_value(x))) return false;
    strcpy(out, json_string_value(x));
    return true;
}

ferry_status_t chan_manifest_read(ferry_ctx_t *ctx, const char *dir, chan_manifest_t *m) {
    ferry_errbuf_t *err = ferry_ctx_errbuf(ctx);
    memset(m, 0, sizeof *m);
    char path[4096];
    if (!chan_path(path, sizeof path, dir, CHANNEL_MANIFEST))
        return ferry_fail(err, FERRY_ERR_LIMIT, "channel: directory path too long");
    uint8_t *text;
    size_t len;
    ferry_status_t st = chan_file_read(ctx, path, CHANNEL_MANIFEST_MAX, &text, &len);
    if (st == FERRY_ERR_NOT_FOUND) return FERRY_OK;
    if (st != FERRY_OK) return st;
    json_error_t je;
    json_t *root = json_loadb((const char *)text, len, JSON_REJECT_DUPLICATES, &je);
    ferry_free(ctx, text);
    json_t *fmt = root ? json_object_get(root, "format") : NULL, *vs = root ? json_object_get(root, "versions") : NULL;
    uint64_t fv = 0;
    if (!root || !json_is_string(fmt) || strcmp(json_string_value(fmt), "ferry_channel") || !json_is_array(vs) ||
        !get_u64_field(root, "format_version", &fv)) {
        json_decref(root);
        return ferry_fail(err, FERRY_ERR_CORRUPT, "channel: %s is not a ferry channel manifest%s%s", path,
                          root ? "" : ": ", root ? "" : je.text);
    }
    if (fv != 1) {
        json_decref(root);
        return ferry_fail(err, FERRY_ERR_UNSUPPORTED, "channel: manifest format %" PRIu64 " (this ferry reads 1)", fv);
    }
    size_t n = json_array_size(vs);
    if (n > CHANNEL_VERSIONS_MAX) {
        json_decref(root);
        return ferry_fail(err, FERRY_ERR_LIMIT, "channel: manifest lists %zu versions (at most %u)", n,
                          CHANNEL_VERSIONS_MAX);
    }
    m->v = ferry_calloc(ctx, n ? n : 1, sizeof *m->v);
    m->cap = n;
    if (!m->v) {
        json_decref(root);
        return ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
    }
    for (size_t i = 0; i < n && st == FERRY_OK; i++) {
        json_t *e = json_array_get(vs, i), *sums = json_object_get(e, "sums");
        chan_version_t *v = &m->v[i];
        m->n++;
        if (!json_is_object(e) || !get_u64_field(e, "version", &v->version) || !get_name_field(e, "snapshot", v->snapshot) ||
            !get_name_field(e, "delta", v->delta) || !json_is_object(sums) ||
            (v->snapshot[0] && !get_u64_field(e, "snapshot_bytes", &v->snapshot_bytes)) ||
            (v->delta[0] && (!get_u64_field(e, "delta_bytes", &v->delta_bytes) || !get_u64_field(e, "base", &v->base))) ||
            (i > 0 && v->version <= m->v[i - 1].version)) {
            st = ferry_fail(err, FERRY_ERR_CORRUPT, "channel: manifest entry %zu is malformed or out of order", i);
            break;
        }
        v->sums = ferry_calloc(ctx, json_object_size(sums) + 1, sizeof *v->sums);
        if (!v->sums) {
            st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
            break;
        }
        const char *key;
        json_t *x;
        json_object_foreach(sums, key, x) {
            const char *hex = json_is_string(x) ? json_string_value(x) : "";
            bool ok = strlen(hex) == 16;
            for (size_t q = 0; ok && q < 16; q++)
                ok = (hex[q] >= '0' && hex[q] <= '9') || (hex[q] >= 'a' && hex[q] <= 'f');
            unsigned long long s = ok ? strtoull(hex, NULL, 16) : 0;
            if (!ok) {
                st = ferry_fail(err, FERRY_ERR_CORRUPT, "channel: manifest entry %zu: sum of \"%s\" is not 16 hex digits",
                                i, key);
                break;
            }
            chan_sum_t *cs = &v->sums[v->n_sums++];
            cs->name = ferry_strdup(ctx, key);
            cs->sum = s;
            if (!cs->name) {
                st = ferry_fail(err, FERRY_ERR_NO_MEMORY, "channel: out of memory");
                break;
            }
        }
    }
    json_decref(root);
    if (st != FERRY_OK) chan_manifest_clear(ctx, m);
    return st;
}

ferry_status_t chan_manifest_write(ferry_ctx_t *ctx, const char *dir, const chan_manifest_t *m) {
    json_t *root = json_object(), *vs = json_array();
    bool ok = root && vs && json_object_set_new(root, "format", json_string("ferry_channel")) == 0 &&
              json_object_set_new(root, "format_version", json_integer(1)) == 0;
    for (size_t i = 0; ok && i < m->n; i++) {
        const chan_version_t *v = &m->v[i];
        json_t *e = json_object(), *sums = json_object();
        ok = e && sums && json_object_set_new(e, "version", json_integer((json_int_t)v->version)) == 0;
        if (ok && v->snapshot[0])
            ok = json_object_set_new(e, "snapshot", json_string(v->snapshot)) == 0 &&
                 json_object_set_new(e, "snapshot_bytes", json_integer((json_int_t)v->snapshot_bytes)) == 0;
        if (ok && v->delta[0])
            ok = json_object_set_new(e, "delta", json_string(v->delta)) == 0 &&
                 json_object_set_new(e, "delta_bytes", json_integer((json_int_t)v->delta_bytes)) == 0 &&
                 json_object_set_new(e, "base", json_integer((json_int_t)v->base)) == 0;
        for (size_t k = 0; ok && k < v->n_sums; k++) {
            char hex[17];
            snprintf(hex, sizeof hex, "%016" PRIx64, v->sums[k].sum);
            ok = json_object_set_new(sums, v->sums[k].name, json_string(hex)) == 0;
        }
        ok = ok && json_object_set_new(e, "sums", sums) == 0 && json_array_append_new(vs, e) == 0;
        if (!ok) {
            json_decref(e);
            json_decref(sums);
        }
    }
    ok = ok && json_object_set(root, "versions", vs) == 0;
    char *text = ok ? json_dumps(root, JSON_INDENT(1)) : NULL;
    json_decref(vs);
    json_decref(root);
    if (!text) return ferry_fail(ferry_ctx_errbuf(ctx), FERRY_ERR_NO_MEMORY, "channel: out of memory for the manifest");
    ferry_status_t st = chan_file_write(ctx, dir, CHANNEL_MANIFEST, text, strlen(text));
    free(text);
    return st;
}
