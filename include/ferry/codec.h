/* ferry: lossless sparse deltas between two versions of a tensor region.
 *
 * A delta turns a region's base bit patterns into its next ones, exactly:
 * elements are compared as integers (never as floats), so -0/+0, NaN
 * payloads and infinities round-trip. Between RL steps only a few percent of
 * bf16 elements change, mostly by one ulp, so a delta is a small fraction of
 * a byte per element; docs/delta-format.md gives the format.
 *
 * The region is cut into independent chunks (default 1 Mi elements) so
 * threads can encode and apply them in parallel, each with its own codec.
 * Every chunk carries an xxh3 of its base and of its next contents, and an
 * xxh3 of its own bytes: a delta is checked before anything is written, and
 * every applied chunk is verified against its next checksum; a chunk that
 * does not verify is reverted, so the region is never left half applied.
 *
 * The codec is pure: caller buffers, no I/O, no threads.
 */
#ifndef FERRY_CODEC_H
#define FERRY_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/layout.h"
#include "ferry/safetensors.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* Encoder and applier state: scratch memory, the undo log of applied chunks
 * and the detail text of the last failure. One thread at a time per codec;
 * use one codec per thread for parallel work. */
typedef struct ferry_delta_codec ferry_delta_codec_t;

/* Ownership: caller owns *out (ferry_delta_codec_destroy); ctx must outlive it.
 * Errors: detail on ctx. Thread-safety: one thread at a time per ctx. */
ferry_status_t ferry_delta_codec_create(ferry_ctx_t *ctx, ferry_delta_codec_t **out);
void ferry_delta_codec_destroy(ferry_delta_codec_t *codec);

/* The detail text of the codec's last failure ("" after a success); owned by
 * the codec, valid until its next call. */
const char *ferry_delta_codec_detail(const ferry_delta_codec_t *codec);

/* Defaults and bounds of ferry_delta_params_t's fields. */
#define FERRY_DELTA_CHUNK_DEFAULT (1u << 20)
#define FERRY_DELTA_CHUNK_MIN (1u << 10)
#define FERRY_DELTA_CHUNK_MAX (1u << 24)
#define FERRY_DELTA_CLASSES_MAX 8u

enum {
    FERRY_DELTA_PARAM_CHUNK_ELEMS = 1u << 0,
    FERRY_DELTA_PARAM_MAX_CLASSES = 1u << 1,
    FERRY_DELTA_PARAM_VERSIONS = 1u << 2,
    FERRY_DELTA_PARAM_BASE_CHUNK_SUMS = 1u << 3,
    FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS = 1u << 4,
    FERRY_DELTA_PARAM_FORMAT = 1u << 5
};

/* Delta formats (docs/delta-format.md): 1, the default, codes each magnitude
 * class as one stream; 2 cuts each class stream at sub-blocks of the chunk
 * and records where each piece starts, so the pieces decode independently
 * (a GPU decodes them in parallel), for about 1-3% more bytes. Readers take
 * both. */
#define FERRY_DELTA_FORMAT_DEFAULT 1u
#define FERRY_DELTA_FORMAT_MAX 2u

typedef struct ferry_delta_params {
    uint64_t field_mask;      /* FERRY_DELTA_PARAM_* of the fields set */
    ferry_dtype_t dtype;      /* required: BF16, F16, F32, F8_E4M3 or F8_E5M2 */
    uint32_t chunk_elems;     /* elements per chunk, a power of two in [MIN, MAX] */
    uint32_t max_classes;     /* 1..FERRY_DELTA_CLASSES_MAX magnitude classes (default max);
                                 1 codes positions without looking at the base */
    uint64_t base_version;    /* recorded in the delta; apply can insist on it */
    uint64_t next_version;
    /* BASE_CHUNK_SUMS: the xxh3 of each chunk of base (ferry_delta_chunk_count
       entries), as the next_chunk_sums of the encode that produced base gave
       them; the encoder then does not hash base. They must be right: with a
       wrong one readers refuse the delta as for another base (a raw chunk
       checks it), never apply it wrongly. */
    const uint64_t *base_chunk_sums;
    /* NEXT_CHUNK_SUMS: gets the xxh3 of each chunk of next. It may be
       base_chunk_sums itself: chunk i's base sum is read before its next
       sum is written. */
    uint64_t *next_chunk_sums;
    /* FORMAT: the format written, 1 (the default) or 2; anything else is
       FERRY_ERR_INVALID_ARGUMENT. ferry_delta_assemble writes it in the
       frame and refuses records of the other format. */
    uint32_t format;
} ferry_delta_params_t;

/* What a delta holds, from its header and chunk records (no base needed). */
typedef struct ferry_delta_info {
    ferry_dtype_t dtype;
    uint32_t format;          /* the frame's format, 1 or 2 */
    uint64_t elems;           /* elements in the region */
    uint32_t chunk_elems;
    uint32_t chunks;
    uint64_t base_version;
    uint64_t next_version;
    uint64_t base_sum;        /* region checksums, see ferry_delta_region_sum */
    uint64_t next_sum;
    uint64_t changed;         /* elements that differ */
    uint32_t chunks_unchanged, chunks_sparse, chunks_raw;
    uint64_t bytes_total;     /* the whole delta */
    uint64_t bytes_header;    /* frame header, chunk table and chunk headers */
    uint64_t bytes_positions; /* coded positions of sparse chunks */
    uint64_t bytes_values;    /* coded values of sparse chunks */
    uint64_t bytes_raw;       /* dense payloads of raw chunks */
} ferry_delta_info_t;

/* Largest delta ferry_delta_encode can produce for n elements of dtype at
 * chunk_elems per chunk (0 for the default); 0 when the arguments are out of
 * range. Thread-safe. */
size_t ferry_delta_bound(ferry_dtype_t dtype, uint64_t elems, uint32_t chunk_elems);

/* Chunks of a region of elems elements at chunk_elems per chunk (0 for the
 * default); 0 when the arguments are out of range. Thread-safe. */
uint32_t ferry_delta_chunk_count(uint64_t elems, uint32_t chunk_elems);

/* The region checksum of n elements of dtype as deltas record it (xxh3 over
 * the xxh3 of each chunk); 0 and FERRY_ERR_INVALID_ARGUMENT when the
 * arguments are out of range. Thread-safe. */
ferry_status_t ferry_delta_region_sum(ferry_dtype_t dtype, const void *data, uint64_t elems,
                                      uint32_t chunk_elems, uint64_t *out);

/* Encodes the change from base to next (elems elements each) into dst
 * (capacity cap; ferry_delta_bound is always enough) and sets *len.
 * FERRY_ERR_LIMIT when cap is too small. Errors: detail on the codec. */
ferry_status_t ferry_delta_encode(ferry_delta_codec_t *codec, const ferry_delta_params_t *params,
                                  const void *base, const void *next, uint64_t elems, void *dst,
                                  size_t cap, size_t *len);

/* Checks a delta's framing and every checksum that needs no base, walks
 * every coded stream, and fills *info (with the position/value split). For
 * reports: it costs about as much as applying the delta. FERRY_ERR_CORRUPT
 * names what is wrong. Errors: detail on the codec. */
ferry_status_t ferry_delta_inspect(ferry_delta_codec_t *codec, const void *delta, size_t len,
                                   ferry_delta_info_t *info);

/* What a caller checks before applying: reads only the frame header, the
 * chunk table and each chunk's header and class table (O(chunks), like
 * zstd's ZSTD_getFrameHeader), and fills *info except bytes_positions and
 * bytes_values (0). Checked, all bounds-checked against len: the magic and
 * format, the header checksum (which covers dtype, elements, versions,
 * region sums and the chunk table), the records' lengths adding up to len,
 * each chunk header's fields and the region sums against the chunks'. Not
 * checked: the records' checksums and coded streams, which
 * ferry_delta_apply and ferry_delta_chunk_apply verify themselves before
 * and while they write, so a delta that peeks well may still be refused as
 * FERRY_ERR_CORRUPT there, with the region left as it was. *info is set
 * only on success. FERRY_ERR_CORRUPT or FERRY_ERR_UNSUPPORTED (format) name
 * what is wrong. Errors: detail on the codec. Thread-safety: one thread at
 * a time per codec. */
ferry_status_t ferry_delta_peek(ferry_delta_codec_t *codec, const void *delta, size_t len, ferry_delta_info_t *info);

/* Applies a delta in place onto region (elems elements of the delta's dtype)
 * and verifies every chunk's result: before writing anything it checks what
 * ferry_delta_peek checks and every record's checksum, and each coded
 * stream as it decodes it. base_version: the version the caller holds, or
 * FERRY_DELTA_ANY_BASE to skip that check. On any failure the region is
 * exactly as before. FERRY_ERR_MISMATCH: the delta is for another base
 * (version, size, dtype or contents); FERRY_ERR_CORRUPT: the delta's bytes
 * are damaged. *info (if not NULL) is filled on success as ferry_delta_peek
 * fills it. Callers peek first to check dtype, size and versions: apply
 * needs no ferry_delta_inspect before it. Errors: detail on the codec. */
#define FERRY_DELTA_ANY_BASE UINT64_MAX
ferry_status_t ferry_delta_apply(ferry_delta_codec_t *codec, const void *delta, size_t len, void *region,
                                 uint64_t elems, uint64_t base_version, ferry_delta_info_t *info);

/* ---- Chunk-level calls, for spreading one region over threads ----
 *
 * Chunk i of a region covers elements [i * chunk_elems, min(elems, (i + 1) *
 * chunk_elems)). To encode in parallel, each thread encodes its chunks with
 * ferry_delta_chunk_encode into buffers of ferry_delta_chunk_bound bytes;
 * ferry_delta_assemble then writes the delta. To apply in parallel,
 * ferry_delta_chunk_get finds each chunk's record and each thread applies
 * its chunks with ferry_delta_chunk_apply: a chunk that fails is reverted at
 * once; the chunks a codec applied stay logged until ferry_delta_codec_commit
 * (keep them) or ferry_delta_codec_rollback (restore their base contents, in
 * reverse order). ferry_delta_apply does exactly this on one thread. */

size_t ferry_delta_chunk_bound(ferry_dtype_t dtype, uint32_t elems);

/* Encodes one chunk (elems <= FERRY_DELTA_CHUNK_MAX elements) into dst.
 * max_classes as in ferry_delta_params_t (0: default). *base_sum (if not
 * NULL) gets the xxh3 of the base chunk and *next_sum that of the next one.
 * With flags FERRY_DELTA_BASE_SUM_GIVEN, *base_sum holds the base chunk's
 * xxh3 on entry instead (see base_chunk_sums) and the base is not hashed.
 * With FERRY_DELTA_CHUNK_FORMAT2 the record is format 2's (a sparse one
 * has sub-block streams; unchanged and raw records are the same in both
 * formats); assemble it with params.format 2. */
#define FERRY_DELTA_BASE_SUM_GIVEN 1u
#define FERRY_DELTA_CHUNK_FORMAT2 2u
ferry_status_t ferry_delta_chunk_encode(ferry_delta_codec_t *codec, ferry_dtype_t dtype, uint32_t max_classes,
                                        uint32_t flags, const void *base, const void *next, uint32_t elems,
                                        void *dst, size_t cap, size_t *len, uint64_t *base_sum,
                                        uint64_t *next_sum);

/* Writes a delta from already encoded chunk records, in chunk order; the
 * region sums come from the records. The frame's format is params->format
 * (default 1): a sparse record of the other format is
 * FERRY_ERR_INVALID_ARGUMENT. */
ferry_status_t ferry_delta_assemble(ferry_delta_codec_t *codec, const ferry_delta_params_t *params,
                                    uint64_t elems, const void *const *chunks, const size_t *chunk_lens,
                                    void *dst, size_t cap, size_t *len);

/* Chunk i's record inside a delta that ferry_delta_peek accepted. */
ferry_status_t ferry_delta_chunk_get(ferry_delta_codec_t *codec, const void *delta, size_t len, uint32_t i,
                                     const void **chunk, size_t *chunk_len);

/* Applies one chunk record onto base (elems elements of dtype), verifying the
 * result; on failure the chunk is restored and nothing stays logged for it. */
ferry_status_t ferry_delta_chunk_apply(ferry_delta_codec_t *codec, ferry_dtype_t dtype, const void *chunk,
                                       size_t chunk_len, void *base, uint32_t elems);

/* Forgets (commit) or undoes (rollback) every chunk applied since the last
 * commit or rollback. Rollback cannot fail. */
void ferry_delta_codec_commit(ferry_delta_codec_t *codec);
void ferry_delta_codec_rollback(ferry_delta_codec_t *codec);

/* ---- Delta files: a whole set of tensors ----
 *
 * A delta file is a safetensors file (docs/delta-format.md, "Delta files"):
 * metadata format "ferry_delta" with the versions, and per tensor a U8
 * tensor of the same name holding its delta frame, or, for dtypes the codec
 * does not take, the next tensor whole (listed in metadata "dense"). */

/* A named tensor in memory. */
typedef struct ferry_tensor_ref {
    const char *name;
    ferry_dtype_t dtype;
    uint32_t ndim;
    int64_t shape[FERRY_MAX_DIMS];
    void *data;
    uint64_t bytes; /* elements times the dtype's size */
} ferry_tensor_ref_t;

/* Bytes ferry_delta_file_build may need for these tensors; 0 if they are
 * malformed. Thread-safe. */
size_t ferry_delta_file_bound(const ferry_tensor_ref_t *next, size_t n);

/* Writes the delta file turning base[i] into next[i] (the same names,
 * dtypes and shapes, in any order; the file keeps next's order) into dst
 * and sets *len; *changed (if not NULL) gets the elements that differ, as
 * the encoded chunks' headers count them (no second walk of the frames).
 * Errors: detail on ctx. */
ferry_status_t ferry_delta_file_build(ferry_ctx_t *ctx, const ferry_tensor_ref_t *base, const ferry_tensor_ref_t *next,
                                      size_t n, uint64_t base_version, uint64_t next_version, void *dst, size_t cap,
                                      size_t *len, uint64_t *changed);

/* One entry of a checkpoint's safetensors metadata ("__metadata__"). */
typedef struct ferry_delta_meta {
    const char *key, *value;
} ferry_delta_meta_t;

/* ferry_delta_file_bound for a file that also carries n_meta entries of
 * next's metadata; 0 if anything is malformed. Thread-safe. */
size_t ferry_delta_file_bound_meta(const ferry_tensor_ref_t *next, size_t n, const ferry_delta_meta_t *meta,
                                   size_t n_meta);

/* ferry_delta_file_build that also records next's own metadata (meta[0,
 * n_meta), keys unique, UTF-8) as the file's metadata "next_metadata", a
 * JSON map in that order, so that the checkpoint rebuilt from base and this
 * file carries next's metadata rather than base's (ferry delta apply writes
 * it). cap: ferry_delta_file_bound_meta is always enough. Errors: detail on
 * ctx. */
ferry_status_t ferry_delta_file_build_meta(ferry_ctx_t *ctx, const ferry_tensor_ref_t *base,
                                           const ferry_tensor_ref_t *next, size_t n, uint64_t base_version,
                                           uint64_t next_version, const ferry_delta_meta_t *meta, size_t n_meta,
                                           void *dst, size_t cap, size_t *len, uint64_t *changed);

/* Applies a delta file in place onto t[0, n) (every tensor of the file must
 * be among them, with its dtype and shape). base_version as in
 * ferry_delta_apply. All or nothing: on any failure every tensor is as
 * before. Each frame is peeked (dtype, size, version) before any tensor is
 * written and verified as it is applied (ferry_delta_apply). Metadata
 * "next_metadata", where present, must be a JSON map of strings.
 * FERRY_ERR_MISMATCH: another base; FERRY_ERR_CORRUPT: damaged.
 * Errors: detail on ctx. */
ferry_status_t ferry_delta_file_apply(ferry_ctx_t *ctx, const void *file, size_t len, ferry_tensor_ref_t *t,
                                      size_t n, uint64_t base_version);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
