/* The delta area of a sync-mode writer (docs/sync.md "Deltas"): one
 * registered region, rewritten per version, that readers behind read their
 * deltas from. Pure: bytes in, bytes out; every integer little-endian
 * (common/bytes.h) whatever the host.
 *
 *   header (16 bytes): u32 magic "FDTA", u32 entries, u64 version
 *   entries (32 bytes each, right after the header):
 *       u32 dst_rank, u32 ops, u64 base_version, u64 blob offset, u64 blob length
 *   blobs (each after the entries, inside the area), one per entry:
 *       u64 frame length per op, then the ops' delta frames back to back
 *       (docs/delta-format.md); the lengths add up to the blob exactly.
 *
 * An entry is one *step* of one reader's chain: its ops' deltas from
 * base_version to the next version the writer published. A reader has one
 * entry per step it is offered (one when only the version before is kept),
 * so the entries are sorted by (dst_rank, base_version), strictly: a
 * reader's steps are adjacent, oldest first, each base at most once. Step
 * k of a reader leads to step k+1's base_version, its last step to the
 * header's version, so every base_version is below that version; a
 * reader's steps all have the same ops. The entry checks enforce all of
 * this (each entry against the one before it).
 *
 * The writer builds an area in place (its frames are encoded straight into
 * it) with the _put calls; a reader reads the header, then the entries,
 * then its own blobs, and checks each with the _parse calls (its steps with
 * sync_delta_chain_find) before using anything in it.
 * sync_delta_area_encode / sync_delta_area_parse do a whole area at once
 * (tests, fuzzing). */
#ifndef FERRY_SYNC_DELTA_AREA_H
#define FERRY_SYNC_DELTA_AREA_H

#include <stdbool.h>
#include <stdint.h>

#include "common/internal.h"
#include "ferry/layout.h"

#define SYNC_DELTA_MAGIC 0x41544446u /* "FDTA" as a little-endian u32 */
#define SYNC_DELTA_HEADER 16u
#define SYNC_DELTA_ENTRY 32u
#define SYNC_DELTA_MAX_ENTRIES (1u << 20) /* readers times the steps each is offered */

typedef struct sync_delta_header {
    uint32_t entries; /* 0: no deltas (also while the writer rewrites the area) */
    uint64_t version; /* the version the deltas lead to */
} sync_delta_header_t;

typedef struct sync_delta_entry {
    uint32_t dst_rank;     /* the reader the blob is for */
    uint32_t ops;          /* its ops in plan order, one frame each */
    uint64_t base_version; /* the version the deltas apply to (they lead to the next step's, or the header's) */
    uint64_t blob, blob_len; /* where its blob is in the area */
} sync_delta_entry_t;

/* Bytes of the header and n entries: where blobs may start. */
static inline uint64_t sync_delta_index_end(uint32_t n) {
    return SYNC_DELTA_HEADER + (uint64_t)n * SYNC_DELTA_ENTRY;
}

/* ---- writing in place ------------------------------------------------------ */

/* The 16 header bytes at area. */
void sync_delta_header_put(uint8_t *area, const sync_delta_header_t *h);
/* Entry i's 32 bytes (after the header). */
void sync_delta_entry_put(uint8_t *area, uint32_t i, const sync_delta_entry_t *e);
/* Op k's frame length in a blob's length table. */
void sync_delta_frame_len_put(uint8_t *blob, uint32_t k, uint64_t len);

/* ---- reading, each piece checked ---------------------------------------------- */

/* The header of an area of area_size bytes (what the transport says the
 * region holds): the magic, and the entries fitting the area and the limit.
 * Errors (FERRY_ERR_CORRUPT) name what is wrong. */
ferry_status_t sync_delta_header_parse(const uint8_t hdr[SYNC_DELTA_HEADER], uint64_t area_size,
                                       sync_delta_header_t *h, ferry_errbuf_t *err);
/* Entry i of the h->entries entries whose bytes (entries * 32) are at
 * index (h: the parsed header): its blob after the entries, inside the
 * area, long enough for its length table; its base_version below
 * h->version; after entry i - 1 in (dst_rank, base_version) order, with
 * the same ops if for the same reader. */
ferry_status_t sync_delta_entry_parse(const uint8_t *index, uint32_t i, const sync_delta_header_t *h,
                                      uint64_t area_size, sync_delta_entry_t *e, ferry_errbuf_t *err);
/* Reader dst_rank's steps from version held to h->version, in the index of
 * a parsed header h: its entries from the one whose base_version is held to
 * its last, into steps (oldest first; step k leads to step k + 1's
 * base_version, the last to h->version). Each entry read is checked as
 * sync_delta_entry_parse checks it (those of readers after dst_rank are not
 * read). *n = 0 when the reader has no step from held: nothing for it.
 * FERRY_ERR_LIMIT when it has more than max_steps from held (the reader
 * pulls whole); FERRY_ERR_CORRUPT names a malformed entry. */
ferry_status_t sync_delta_chain_find(const uint8_t *index, const sync_delta_header_t *h, uint64_t area_size,
                                     uint32_t dst_rank, uint64_t held, sync_delta_entry_t *steps, uint32_t max_steps,
                                     uint32_t *n, ferry_errbuf_t *err);
/* A blob of ops frames: its length table inside it, every frame inside it
 * (no overflow), the lengths adding up to the blob exactly. After this,
 * frame k is sync_delta_frame_len(blob, k) bytes at the offset that the
 * table and the frames before it take. */
ferry_status_t sync_delta_blob_parse(const uint8_t *blob, uint64_t blob_len, uint32_t ops, ferry_errbuf_t *err);
/* Op k's frame length (of a checked blob). */
uint64_t sync_delta_frame_len(const uint8_t *blob, uint32_t k);

/* ---- whole areas ----------------------------------------------------------- */

/* One step of one reader's deltas: ops frames, back to back in frames
 * (frame_len[k] bytes each). */
typedef struct sync_delta_pair {
    uint32_t dst_rank, ops;
    uint64_t base_version;
    const uint8_t *frames;
    const uint64_t *frame_len;
} sync_delta_pair_t;

/* Bytes an area of these pairs takes (UINT64_MAX if it overflows). */
uint64_t sync_delta_area_size(const sync_delta_pair_t *pairs, uint32_t n);
/* Writes the area: header, entries, then each pair's blob in order (the
 * pairs in the entries' order, (dst_rank, base_version), for the area to
 * parse). FERRY_ERR_LIMIT if it needs more than cap bytes or more entries
 * than the limit; *len gets its size. */
ferry_status_t sync_delta_area_encode(uint64_t version, const sync_delta_pair_t *pairs, uint32_t n, uint8_t *out,
                                      uint64_t cap, uint64_t *len, ferry_errbuf_t *err);
/* Checks a whole area: the header, every entry and every blob. entries:
 * room for max_entries (more is FERRY_ERR_LIMIT). */
ferry_status_t sync_delta_area_parse(const uint8_t *area, uint64_t size, sync_delta_header_t *h,
                                     sync_delta_entry_t *entries, uint32_t max_entries, ferry_errbuf_t *err);

/* ---- element widths ------------------------------------------------------- */

/* The codec dtype that carries elements of esz bytes losslessly (any bit
 * patterns: the codec compares integers) and the codec elements in bytes;
 * false when there is none. */
bool sync_delta_dtype(size_t esz, uint64_t bytes, ferry_dtype_t *dt, uint64_t *elems);

#endif
