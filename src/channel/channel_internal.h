/* The file channel's shared parts: the manifest, file names, whole-file
 * reads and atomic writes. docs/channel.md describes the directory. */
#ifndef FERRY_CHANNEL_INTERNAL_H
#define FERRY_CHANNEL_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

#include "common/internal.h"
#include "ferry/channel.h"
#include "ferry/codec.h"

#define CHANNEL_MANIFEST "manifest.json"
#define CHANNEL_MANIFEST_MAX (64u << 20)
#define CHANNEL_VERSIONS_MAX 100000u
#define CHANNEL_FILE_MAX 96u

typedef struct chan_sum {
    char *name;
    uint64_t sum; /* xxh3-64 of the tensor's bytes */
} chan_sum_t;

typedef struct chan_version {
    uint64_t version;
    char snapshot[CHANNEL_FILE_MAX]; /* "" when none */
    uint64_t snapshot_bytes;
    char delta[CHANNEL_FILE_MAX];    /* "" when none */
    uint64_t delta_bytes;
    uint64_t base;                   /* the delta's base version */
    chan_sum_t *sums;
    size_t n_sums;
} chan_version_t;

typedef struct chan_manifest {
    chan_version_t *v; /* ascending versions */
    size_t n, cap;
} chan_manifest_t;

/* Parses manifest text (no I/O): every field type-checked, file names
 * checked by chan_name_ok, versions ascending, sums 16 hex digits, counts
 * and size bounded. `what` names the text's source in errors. On failure
 * *m is empty. */
ferry_status_t chan_manifest_parse(ferry_ctx_t *ctx, const char *what, const void *text, size_t len,
                                   chan_manifest_t *m);
/* The text chan_manifest_parse reads back as *m; *text is freed with free(). */
ferry_status_t chan_manifest_format(ferry_ctx_t *ctx, const chan_manifest_t *m, char **text);
/* Reads dir's manifest: *m empty (FERRY_OK) when there is none yet. */
ferry_status_t chan_manifest_read(ferry_ctx_t *ctx, const char *dir, chan_manifest_t *m);
/* Writes it atomically (temporary file, fsync, rename, directory fsync). */
ferry_status_t chan_manifest_write(ferry_ctx_t *ctx, const char *dir, const chan_manifest_t *m);
void chan_manifest_clear(ferry_ctx_t *ctx, chan_manifest_t *m);
void chan_version_clear(ferry_ctx_t *ctx, chan_version_t *v);
/* The sum a version recorded for a tensor, or false. */
bool chan_version_sum(const chan_version_t *v, const char *name, uint64_t *sum);

/* dir/name into buf; false when it does not fit. */
bool chan_path(char *buf, size_t size, const char *dir, const char *name);
/* Reads a whole file into memory (ferry_alloc); FERRY_ERR_NOT_FOUND when it
 * is gone (a reader then re-reads the manifest). */
ferry_status_t chan_file_read(ferry_ctx_t *ctx, const char *path, uint64_t max, uint8_t **data, size_t *len);
/* Writes a whole file atomically. */
ferry_status_t chan_file_write(ferry_ctx_t *ctx, const char *dir, const char *name, const void *data, size_t len);
/* A file name the manifest may use: letters, digits, '.', '_', '-', not
 * starting with '.', so no manifest can name a path outside the directory. */
bool chan_name_ok(const char *name);

#endif
