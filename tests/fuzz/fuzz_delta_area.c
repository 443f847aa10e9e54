/* Fuzz target: a writer's delta area as readers read it (sync/delta_area.h),
 * the bytes another process writes into memory this one maps or reads. The
 * input is the whole area (its size is the region's size).
 *
 * A refusal must leave a detail. An accepted area must hold together: every
 * entry's blob after the index and inside the area, every frame inside its
 * blob. The reader's piecewise calls (header, each entry, its blob) must
 * agree with the whole-area parse, and so must a reader's search for its
 * chain: from any entry's base, that entry and its reader's later ones (in
 * the order the checks enforce), and FERRY_ERR_LIMIT when that is more
 * steps than allowed. And it must round-trip: the entries and
 * their frames, encoded again, parse to the same entries and the same frame
 * bytes, and that encoding is a fixed point (encoding its parse gives the
 * same bytes). Never a crash, a read outside the input or a leak. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sync/delta_area.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FAIL(why)                                                                   \
    do {                                                                            \
        fprintf(stderr, "fuzz_delta_area: %s (%zu-byte input)\n", (why), size);     \
        abort();                                                                    \
    } while (0)

/* The pairs an accepted area describes (frames point into area). */
static sync_delta_pair_t *pairs_of(const uint8_t *area, const sync_delta_entry_t *es, uint32_t n, uint64_t **lens) {
    sync_delta_pair_t *ps = calloc(n ? n : 1, sizeof *ps);
    uint64_t total = 0;
    for (uint32_t i = 0; i < n; i++) total += es[i].ops;
    *lens = calloc(total ? total : 1, sizeof **lens);
    if (!ps || !*lens) abort();
    uint64_t *l = *lens;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *blob = area + es[i].blob;
        for (uint32_t k = 0; k < es[i].ops; k++) l[k] = sync_delta_frame_len(blob, k);
        ps[i] = (sync_delta_pair_t){es[i].dst_rank, es[i].ops, es[i].base_version, blob + 8 * (uint64_t)es[i].ops, l};
        l += es[i].ops;
    }
    return ps;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    /* its own allocation of exactly the input's size: a read past it is caught */
    uint8_t *area = malloc(size ? size : 1);
    if (!area) abort();
    if (size) memcpy(area, data, size);
    else area[0] = 0; /* nothing reads it; the optimizer cannot tell */
    uint32_t room = (uint32_t)(size / SYNC_DELTA_ENTRY + 1); /* more entries than can fit */
    sync_delta_entry_t *es = calloc(room, sizeof *es);
    if (!es) abort();
    sync_delta_header_t h;
    ferry_errbuf_t err;
    err.text[0] = '\0';
    ferry_status_t st = sync_delta_area_parse(area, size, &h, es, room, &err);

    /* the reader's way: header, then each entry, then each blob */
    bool piecewise = false;
    if (size >= SYNC_DELTA_HEADER) {
        sync_delta_header_t ph;
        ferry_errbuf_t perr;
        piecewise = sync_delta_header_parse(area, size, &ph, &perr) == FERRY_OK;
        for (uint32_t i = 0; piecewise && i < ph.entries; i++) {
            sync_delta_entry_t e;
            piecewise = sync_delta_entry_parse(area + SYNC_DELTA_HEADER, i, &ph, size, &e, &perr) == FERRY_OK &&
                        sync_delta_blob_parse(area + e.blob, e.blob_len, e.ops, &perr) == FERRY_OK;
            if (!piecewise && perr.text[0] == '\0') FAIL("a piecewise refusal left no detail");
        }
    }
    if (piecewise != (st == FERRY_OK)) FAIL("the piecewise and whole-area parses disagree");
    if (st != FERRY_OK) {
        if (err.text[0] == '\0') FAIL("a refused area left no detail");
        free(es);
        free(area);
        return 0;
    }

    /* what it accepted holds together */
    for (uint32_t i = 0; i < h.entries; i++) {
        const sync_delta_entry_t *e = &es[i];
        if (e->blob < sync_delta_index_end(h.entries) || e->blob > size || e->blob_len > size - e->blob)
            FAIL("an accepted blob lies outside the area or over the index");
        uint64_t at = 8 * (uint64_t)e->ops;
        for (uint32_t k = 0; k < e->ops; k++) at += sync_delta_frame_len(area + e->blob, k);
        if (at != e->blob_len) FAIL("an accepted blob's frames do not fill it exactly");
    }

    /* a reader holding an entry's base: its steps from there */
    for (uint32_t i = 0; i < h.entries; i++) {
        uint32_t last = i, n = 0;
        while (last + 1 < h.entries && es[last + 1].dst_rank == es[i].dst_rank) last++;
        uint32_t want = last - i + 1;
        sync_delta_entry_t *steps = calloc(want, sizeof *steps);
        if (!steps) abort();
        const uint8_t *index = area + SYNC_DELTA_HEADER;
        if (sync_delta_chain_find(index, &h, size, es[i].dst_rank, es[i].base_version, steps, want, &n, &err) !=
                FERRY_OK || n != want)
            FAIL("a reader's chain differs from the whole-area parse");
        for (uint32_t k = 0; k < n; k++)
            if (steps[k].dst_rank != es[i + k].dst_rank || steps[k].ops != es[i + k].ops ||
                steps[k].base_version != es[i + k].base_version || steps[k].blob != es[i + k].blob ||
                steps[k].blob_len != es[i + k].blob_len)
                FAIL("a reader's chain has other steps than the whole-area parse");
        if (want > 1 && sync_delta_chain_find(index, &h, size, es[i].dst_rank, es[i].base_version, steps, want - 1,
                                              &n, &err) != FERRY_ERR_LIMIT)
            FAIL("a chain longer than allowed was not refused");
        free(steps);
    }

    /* round trip */
    uint64_t *lens1;
    sync_delta_pair_t *p1 = pairs_of(area, es, h.entries, &lens1);
    uint64_t need = sync_delta_area_size(p1, h.entries); /* entries may share a blob: can exceed size */
    if (need == UINT64_MAX) FAIL("an accepted area's size overflows");
    uint8_t *a2 = malloc(need ? need : 1);
    uint64_t len2;
    if (!a2 || sync_delta_area_encode(h.version, p1, h.entries, a2, need, &len2, &err) != FERRY_OK || len2 != need)
        FAIL("an accepted area does not re-encode");
    sync_delta_header_t h2;
    sync_delta_entry_t *es2 = calloc(h.entries + 1, sizeof *es2);
    if (!es2) abort();
    if (sync_delta_area_parse(a2, len2, &h2, es2, h.entries, &err) != FERRY_OK) FAIL("a re-encoded area does not parse");
    if (h2.version != h.version || h2.entries != h.entries) FAIL("a round trip changed the header");
    uint64_t *lens2;
    sync_delta_pair_t *p2 = pairs_of(a2, es2, h2.entries, &lens2);
    for (uint32_t i = 0; i < h.entries; i++) {
        if (p1[i].dst_rank != p2[i].dst_rank || p1[i].ops != p2[i].ops || p1[i].base_version != p2[i].base_version)
            FAIL("a round trip changed an entry");
        uint64_t frames = 0;
        for (uint32_t k = 0; k < p1[i].ops; k++) {
            if (p1[i].frame_len[k] != p2[i].frame_len[k]) FAIL("a round trip changed a frame length");
            frames += p1[i].frame_len[k];
        }
        if (frames && memcmp(p1[i].frames, p2[i].frames, frames) != 0) FAIL("a round trip changed a frame");
    }
    uint8_t *a3 = malloc(need ? need : 1);
    uint64_t len3;
    if (!a3 || sync_delta_area_encode(h2.version, p2, h2.entries, a3, need, &len3, &err) != FERRY_OK ||
        len3 != len2 || memcmp(a2, a3, len2) != 0)
        FAIL("the canonical encoding is not a fixed point");

    free(a3);
    free(p2);
    free(lens2);
    free(es2);
    free(a2);
    free(p1);
    free(lens1);
    free(es);
    free(area);
    return 0;
}
