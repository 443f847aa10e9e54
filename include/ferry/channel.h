/* ferry: the file channel, for readers decoupled from the trainer.
 *
 * A writer publishes versions of a set of named tensors into a directory (a
 * shared filesystem or a mounted bucket): full snapshots as standard
 * safetensors files every few versions, a ferry delta file
 * (docs/delta-format.md) for every version after the first, and a manifest
 * naming versions, their files, bases and checksums. Every file is written
 * under a temporary name and renamed into place, the manifest last, so a
 * reader never sees a torn file or a manifest naming a missing one; files no
 * reader can need any more are removed after the manifest stops naming them.
 *
 * A reader follows the directory: from the version its buffers hold it
 * applies the chain of deltas, or loads the newest snapshot and the deltas
 * after it, whichever reads fewer bytes. Every step is verified (snapshots
 * against the manifest's checksums, deltas chunk by chunk); a version is
 * applied to all tensors or to none, so the buffers always hold one whole,
 * verified version. docs/channel.md describes the directory.
 */
#ifndef FERRY_CHANNEL_H
#define FERRY_CHANNEL_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/codec.h"
#include "ferry/ctx.h"
#include "ferry/layout.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* One tensor: the writer's current contents, or a reader's buffer. */
typedef ferry_tensor_ref_t ferry_channel_tensor_t;

enum {
    FERRY_CHANNEL_PARAM_SNAPSHOT_EVERY = 1u << 0,
    FERRY_CHANNEL_PARAM_KEEP = 1u << 1
};

typedef struct ferry_channel_params {
    uint64_t field_mask;
    uint32_t snapshot_every; /* a full snapshot every N versions (default 10; the first always) */
    uint32_t keep;           /* readers up to this many versions behind get deltas (default 4) */
} ferry_channel_params_t;

typedef struct ferry_channel_writer ferry_channel_writer_t;

/* Opens (creating if needed) dir for publishing. An existing channel is
 * continued: its versions stay, leftovers of a killed writer are removed, and
 * the first publish writes a snapshot. One writer per directory.
 * Ownership: caller owns *out (ferry_channel_writer_destroy).
 * Errors: detail on ctx. Thread-safety: one thread at a time per writer. */
ferry_status_t ferry_channel_writer_create(ferry_ctx_t *ctx, const char *dir, const ferry_channel_params_t *params,
                                           ferry_channel_writer_t **out);
void ferry_channel_writer_destroy(ferry_channel_writer_t *w);

/* Publishes version (greater than the last, at most 2^63 - 1) of the tensors (the same names,
 * dtypes and shapes every time). The writer keeps a copy as the next base
 * (host memory: the tensors' size). Errors: detail on ctx. */
ferry_status_t ferry_channel_publish(ferry_channel_writer_t *w, uint64_t version, const ferry_channel_tensor_t *t,
                                     size_t n);

typedef struct ferry_channel_reader ferry_channel_reader_t;

/* Ownership: caller owns *out (ferry_channel_reader_destroy). */
ferry_status_t ferry_channel_reader_create(ferry_ctx_t *ctx, const char *dir, ferry_channel_reader_t **out);
void ferry_channel_reader_destroy(ferry_channel_reader_t *r);

#define FERRY_CHANNEL_NONE UINT64_MAX /* the buffers hold no version yet */

/* What an update did. */
typedef struct ferry_channel_update_info {
    uint64_t from, to;       /* versions before and after */
    uint32_t snapshots;      /* 0 or 1 */
    uint32_t deltas;         /* deltas applied */
    uint64_t bytes_read;     /* of snapshot and delta files */
} ferry_channel_update_info_t;

/* Brings the buffers (names, dtypes and shapes as published) from *version
 * (FERRY_CHANNEL_NONE for none) to the newest published version, and sets
 * *version. FERRY_ERR_NOT_FOUND: nothing published yet; FERRY_ERR_BUSY: the
 * writer kept collecting files before they could be read. On a failure the
 * buffers hold the version *version says, whole and verified; it may differ
 * from the one before the call (newer, or an older snapshot when the chain
 * was broken and a later step failed). FERRY_ERR_CORRUPT or
 * FERRY_ERR_MISMATCH name the file. Errors: detail on ctx. Thread-safety:
 * one thread at a time per reader. */
ferry_status_t ferry_channel_update(ferry_channel_reader_t *r, ferry_channel_tensor_t *t, size_t n,
                                    uint64_t *version, ferry_channel_update_info_t *info);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
