/* The delta area's bytes: see delta_area.h. */
#include <stdio.h>
#include <string.h>

#include "common/bytes.h"
#include "sync/delta_area.h"

void sync_delta_header_put(uint8_t *area, const sync_delta_header_t *h) {
    ferry_put_le(area, SYNC_DELTA_MAGIC, 4);
    ferry_put_le(area + 4, h->entries, 4);
    ferry_put_le(area + 8, h->version, 8);
}

void sync_delta_entry_put(uint8_t *area, uint32_t i, const sync_delta_entry_t *e) {
    uint8_t *p = area + sync_delta_index_end(i);
    ferry_put_le(p, e->dst_rank, 4);
    ferry_put_le(p + 4, e->ops, 4);
    ferry_put_le(p + 8, e->base_version, 8);
    ferry_put_le(p + 16, e->blob, 8);
    ferry_put_le(p + 24, e->blob_len, 8);
}

void sync_delta_frame_len_put(uint8_t *blob, uint32_t k, uint64_t len) { ferry_put_le(blob + 8 * (uint64_t)k, len, 8); }

uint64_t sync_delta_frame_len(const uint8_t *blob, uint32_t k) { return ferry_get_le(blob + 8 * (uint64_t)k, 8); }

ferry_status_t sync_delta_header_parse(const uint8_t hdr[SYNC_DELTA_HEADER], uint64_t area_size,
                                       sync_delta_header_t *h, ferry_errbuf_t *err) {
    if (area_size < SYNC_DELTA_HEADER)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area of %llu bytes has no room for its %u-byte header",
                          (unsigned long long)area_size, SYNC_DELTA_HEADER);
    uint32_t magic = (uint32_t)ferry_get_le(hdr, 4), entries = (uint32_t)ferry_get_le(hdr + 4, 4);
    if (magic != SYNC_DELTA_MAGIC)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area magic %08x, expected %08x (\"FDTA\")", magic,
                          SYNC_DELTA_MAGIC);
    if (entries > SYNC_DELTA_MAX_ENTRIES)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area says %u entries, the limit is %u", entries,
                          SYNC_DELTA_MAX_ENTRIES);
    if (sync_delta_index_end(entries) > area_size)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area's %u entries end at byte %llu, past its %llu bytes",
                          entries, (unsigned long long)sync_delta_index_end(entries), (unsigned long long)area_size);
    h->entries = entries;
    h->version = ferry_get_le(hdr + 8, 8);
    return FERRY_OK;
}

/* Entry i's fields, unchecked. */
static sync_delta_entry_t entry_get(const uint8_t *index, uint32_t i) {
    const uint8_t *p = index + (uint64_t)i * SYNC_DELTA_ENTRY;
    return (sync_delta_entry_t){.dst_rank = (uint32_t)ferry_get_le(p, 4),
                                .ops = (uint32_t)ferry_get_le(p + 4, 4),
                                .base_version = ferry_get_le(p + 8, 8),
                                .blob = ferry_get_le(p + 16, 8),
                                .blob_len = ferry_get_le(p + 24, 8)};
}

ferry_status_t sync_delta_entry_parse(const uint8_t *index, uint32_t i, const sync_delta_header_t *h,
                                      uint64_t area_size, sync_delta_entry_t *e, ferry_errbuf_t *err) {
    if (i >= h->entries)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area entry %u of %u", i, h->entries);
    sync_delta_entry_t x = entry_get(index, i);
    uint64_t first = sync_delta_index_end(h->entries);
    if (x.blob < first)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area entry %u: its blob at byte %llu overlaps the %llu bytes "
                          "of header and entries", i, (unsigned long long)x.blob, (unsigned long long)first);
    if (x.blob > area_size || x.blob_len > area_size - x.blob)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area entry %u: its blob of %llu bytes at byte %llu is past "
                          "the area's %llu bytes", i, (unsigned long long)x.blob_len, (unsigned long long)x.blob,
                          (unsigned long long)area_size);
    if (x.blob_len < 8 * (uint64_t)x.ops)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area entry %u: a blob of %llu bytes cannot hold the lengths "
                          "of %u frames", i, (unsigned long long)x.blob_len, x.ops);
    /* a step leads to a later version: at the latest the area's */
    if (x.base_version >= h->version)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area entry %u: base version %llu is not below the area's "
                          "version %llu", i, (unsigned long long)x.base_version, (unsigned long long)h->version);
    if (i > 0) { /* sorted, so a reader finds its steps adjacent and in order, each base once */
        sync_delta_entry_t y = entry_get(index, i - 1);
        if (x.dst_rank < y.dst_rank || (x.dst_rank == y.dst_rank && x.base_version <= y.base_version))
            return ferry_fail(err, FERRY_ERR_CORRUPT,
                              "delta area entry %u (reader %u, base %llu) does not follow entry %u (reader %u, base "
                              "%llu): entries go by reader, then base version", i, x.dst_rank,
                              (unsigned long long)x.base_version, i - 1, y.dst_rank,
                              (unsigned long long)y.base_version);
        if (x.dst_rank == y.dst_rank && x.ops != y.ops)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "delta area entries %u and %u: reader %u's steps have %u and %u "
                              "ops", i - 1, i, x.dst_rank, y.ops, x.ops);
    }
    *e = x;
    return FERRY_OK;
}

ferry_status_t sync_delta_chain_find(const uint8_t *index, const sync_delta_header_t *h, uint64_t area_size,
                                     uint32_t dst_rank, uint64_t held, sync_delta_entry_t *steps, uint32_t max_steps,
                                     uint32_t *n, ferry_errbuf_t *err) {
    uint32_t k = 0;
    bool found = false;
    for (uint32_t i = 0; i < h->entries; i++) {
        sync_delta_entry_t e;
        ferry_status_t st = sync_delta_entry_parse(index, i, h, area_size, &e, err);
        if (st != FERRY_OK) return st;
        if (e.dst_rank > dst_rank) break; /* sorted: no more of ours */
        if (e.dst_rank < dst_rank || (!found && e.base_version != held)) continue;
        found = true;
        if (k == max_steps)
            return ferry_fail(err, FERRY_ERR_LIMIT, "reader %u's chain from version %llu has more than %u steps",
                              dst_rank, (unsigned long long)held, max_steps);
        steps[k++] = e;
    }
    *n = k;
    return FERRY_OK;
}

ferry_status_t sync_delta_blob_parse(const uint8_t *blob, uint64_t blob_len, uint32_t ops, ferry_errbuf_t *err) {
    uint64_t table = 8 * (uint64_t)ops;
    if (blob_len < table)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta blob of %llu bytes cannot hold the lengths of %u frames",
                          (unsigned long long)blob_len, ops);
    uint64_t left = blob_len - table;
    for (uint32_t k = 0; k < ops; k++) {
        uint64_t len = sync_delta_frame_len(blob, k);
        if (len > left)
            return ferry_fail(err, FERRY_ERR_CORRUPT, "delta blob: frame %u of %u is %llu bytes, %llu are left", k, ops,
                              (unsigned long long)len, (unsigned long long)left);
        left -= len;
    }
    if (left)
        return ferry_fail(err, FERRY_ERR_CORRUPT, "delta blob: %llu bytes after its %u frames",
                          (unsigned long long)left, ops);
    return FERRY_OK;
}

uint64_t sync_delta_area_size(const sync_delta_pair_t *pairs, uint32_t n) {
    uint64_t size = sync_delta_index_end(n);
    for (uint32_t i = 0; i < n; i++) {
        uint64_t add = 8 * (uint64_t)pairs[i].ops;
        for (uint32_t k = 0; k < pairs[i].ops; k++) {
            if (pairs[i].frame_len[k] > UINT64_MAX - add) return UINT64_MAX;
            add += pairs[i].frame_len[k];
        }
        if (add > UINT64_MAX - size) return UINT64_MAX;
        size += add;
    }
    return size;
}

ferry_status_t sync_delta_area_encode(uint64_t version, const sync_delta_pair_t *pairs, uint32_t n, uint8_t *out,
                                      uint64_t cap, uint64_t *len, ferry_errbuf_t *err) {
    if (n > SYNC_DELTA_MAX_ENTRIES)
        return ferry_fail(err, FERRY_ERR_LIMIT, "delta area: %u entries, the limit is %u", n, SYNC_DELTA_MAX_ENTRIES);
    uint64_t size = sync_delta_area_size(pairs, n);
    if (size > cap)
        return ferry_fail(err, FERRY_ERR_LIMIT, "delta area needs %llu bytes, %llu given", (unsigned long long)size,
                          (unsigned long long)cap);
    uint64_t at = sync_delta_index_end(n);
    for (uint32_t i = 0; i < n; i++) {
        const sync_delta_pair_t *p = &pairs[i];
        uint64_t blob = at, frames = 0;
        for (uint32_t k = 0; k < p->ops; k++) {
            sync_delta_frame_len_put(out + blob, k, p->frame_len[k]);
            frames += p->frame_len[k];
        }
        at += 8 * (uint64_t)p->ops;
        if (frames) memcpy(out + at, p->frames, frames);
        at += frames;
        sync_delta_entry_t e = {p->dst_rank, p->ops, p->base_version, blob, at - blob};
        sync_delta_entry_put(out, i, &e);
    }
    sync_delta_header_t h = {n, version};
    sync_delta_header_put(out, &h);
    *len = at;
    return FERRY_OK;
}

ferry_status_t sync_delta_area_parse(const uint8_t *area, uint64_t size, sync_delta_header_t *h,
                                     sync_delta_entry_t *entries, uint32_t max_entries, ferry_errbuf_t *err) {
    sync_delta_header_t hh;
    ferry_status_t st = sync_delta_header_parse(area, size, &hh, err);
    if (st != FERRY_OK) return st;
    if (hh.entries > max_entries)
        return ferry_fail(err, FERRY_ERR_LIMIT, "delta area has %u entries, room for %u", hh.entries, max_entries);
    for (uint32_t i = 0; i < hh.entries; i++) {
        sync_delta_entry_t e;
        st = sync_delta_entry_parse(area + SYNC_DELTA_HEADER, i, &hh, size, &e, err);
        if (st != FERRY_OK) return st;
        st = sync_delta_blob_parse(area + e.blob, e.blob_len, e.ops, err);
        if (st != FERRY_OK) {
            char why[FERRY_ERR_TEXT];
            snprintf(why, sizeof why, "%s", err->text);
            return ferry_fail(err, st, "delta area entry %u (reader %u): %s", i, e.dst_rank, why);
        }
        entries[i] = e;
    }
    *h = hh;
    return FERRY_OK;
}

bool sync_delta_dtype(size_t esz, uint64_t bytes, ferry_dtype_t *dt, uint64_t *elems) {
    /* widths the codec takes; 8-byte elements travel as pairs of 4 */
    size_t width = esz == 8 ? 4 : esz;
    switch (width) {
    case 1: *dt = FERRY_DTYPE_F8_E4M3; break;
    case 2: *dt = FERRY_DTYPE_BF16; break;
    case 4: *dt = FERRY_DTYPE_F32; break;
    default: return false;
    }
    if (bytes % width) return false;
    *elems = bytes / width;
    return true;
}
