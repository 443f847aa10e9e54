/* The delta frame: a header naming dtype, size, chunking, versions and
 * region checksums, a table of chunk record lengths, then the records.
 * Region checksums are xxh3 over the chunks' xxh3 values (little-endian),
 * so chunks hash in parallel and the frame needs no second pass. */
#include "codec/codec_internal.h"
#include "common/hash.h"

static uint32_t chunk_count(uint64_t elems, uint32_t chunk) { return (uint32_t)((elems + chunk - 1) / chunk); }

/* Elements of chunk i (the last one may be short). */
static uint32_t chunk_elems_at(uint64_t elems, uint32_t chunk, uint32_t i) {
    uint64_t at = (uint64_t)i * chunk;
    return (uint32_t)(elems - at < chunk ? elems - at : chunk);
}

static bool chunk_ok(uint32_t chunk) {
    return chunk >= FERRY_DELTA_CHUNK_MIN && chunk <= FERRY_DELTA_CHUNK_MAX && (chunk & (chunk - 1)) == 0;
}

/* Region sums fit chunks of at most 2^32 - 1: larger regions are refused. */
static bool elems_ok(uint64_t elems, uint32_t chunk) { return elems / chunk < UINT32_MAX - 1; }

size_t ferry_delta_bound(ferry_dtype_t dtype, uint64_t elems, uint32_t chunk) {
    uint32_t w = delta_width(dtype);
    if (chunk == 0) chunk = FERRY_DELTA_CHUNK_DEFAULT;
    if (!w || !chunk_ok(chunk) || !elems_ok(elems, chunk)) return 0;
    uint64_t n = chunk_count(elems, chunk);
    uint64_t b = DELTA_FRAME_HEADER + n * (4 + CHUNK_HEADER) + elems * w;
    return b > SIZE_MAX ? 0 : (size_t)b;
}

/* xxh3 over the per-chunk sums, streamed 512 at a time */
typedef struct sum_fold {
    XXH3_state_t st;
    uint8_t buf[8 * 512];
    size_t n;
} sum_fold_t;

static void fold_init(sum_fold_t *f) {
    XXH3_64bits_reset(&f->st);
    f->n = 0;
}
static void fold_add(sum_fold_t *f, uint64_t s) {
    put_u64(f->buf + f->n, s);
    f->n += 8;
    if (f->n == sizeof f->buf) {
        XXH3_64bits_update(&f->st, f->buf, f->n);
        f->n = 0;
    }
}
static uint64_t fold_end(sum_fold_t *f) {
    XXH3_64bits_update(&f->st, f->buf, f->n);
    return XXH3_64bits_digest(&f->st);
}

uint32_t ferry_delta_chunk_count(uint64_t elems, uint32_t chunk) {
    if (chunk == 0) chunk = FERRY_DELTA_CHUNK_DEFAULT;
    return chunk_ok(chunk) && elems_ok(elems, chunk) ? chunk_count(elems, chunk) : 0;
}

ferry_status_t ferry_delta_region_sum(ferry_dtype_t dtype, const void *data, uint64_t elems, uint32_t chunk,
                                      uint64_t *out) {
    uint32_t w = delta_width(dtype);
    if (chunk == 0) chunk = FERRY_DELTA_CHUNK_DEFAULT;
    if (!out || !w || !chunk_ok(chunk) || !elems_ok(elems, chunk) || (!data && elems)) {
        if (out) *out = 0;
        return FERRY_ERR_INVALID_ARGUMENT;
    }
    sum_fold_t f;
    fold_init(&f);
    for (uint32_t i = 0; i < chunk_count(elems, chunk); i++) {
        uint64_t at = (uint64_t)i * chunk, n = chunk_elems_at(elems, chunk, i);
        fold_add(&f, XXH3_64bits((const uint8_t *)data + at * w, n * w));
    }
    *out = fold_end(&f);
    return FERRY_OK;
}

static uint64_t header_sum(const uint8_t *d, uint32_t chunks) {
    uint64_t h = XXH3_64bits(d, 56);
    return XXH3_64bits_withSeed(d + DELTA_FRAME_HEADER, (size_t)chunks * 4, h);
}

static ferry_status_t check_params(ferry_delta_codec_t *c, const ferry_delta_params_t *p, uint64_t elems,
                                   uint32_t *chunk, uint32_t *classes, uint32_t *format) {
    if (!p) return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "delta params are NULL");
    if (!delta_width(p->dtype))
        return delta_fail(c, FERRY_ERR_UNSUPPORTED, "delta of dtype %s: only bf16, f16, f32 and f8 are supported",
                          ferry_dtype_name(p->dtype));
    *chunk = (p->field_mask & FERRY_DELTA_PARAM_CHUNK_ELEMS) ? p->chunk_elems : FERRY_DELTA_CHUNK_DEFAULT;
    if (!chunk_ok(*chunk))
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "chunk_elems %u is not a power of two in [%u, %u]", *chunk,
                          FERRY_DELTA_CHUNK_MIN, FERRY_DELTA_CHUNK_MAX);
    *classes = (p->field_mask & FERRY_DELTA_PARAM_MAX_CLASSES) ? p->max_classes : FERRY_DELTA_CLASSES_MAX;
    if (*classes < 1 || *classes > FERRY_DELTA_CLASSES_MAX)
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "max_classes %u (1 to %u allowed)", *classes,
                          FERRY_DELTA_CLASSES_MAX);
    *format = (p->field_mask & FERRY_DELTA_PARAM_FORMAT) ? p->format : DELTA_FORMAT;
    if (*format < 1 || *format > DELTA_FORMAT_MAX)
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "delta format %u (1 or %u allowed)", *format,
                          DELTA_FORMAT_MAX);
    if (!elems_ok(elems, *chunk))
        return delta_fail(c, FERRY_ERR_LIMIT, "%llu elements need more than 2^32 chunks of %u",
                          (unsigned long long)elems, *chunk);
    return FERRY_OK;
}

static void write_frame_header(uint8_t *d, const ferry_delta_params_t *p, uint32_t format, uint64_t elems,
                               uint32_t chunk, uint32_t chunks, uint64_t bsum, uint64_t nsum) {
    memset(d, 0, DELTA_FRAME_HEADER);
    put_u32(d, DELTA_MAGIC);
    d[4] = (uint8_t)format;
    d[6] = (uint8_t)p->dtype;
    put_u64(d + 8, elems);
    put_u32(d + 16, chunk);
    put_u32(d + 20, chunks);
    if (p->field_mask & FERRY_DELTA_PARAM_VERSIONS) {
        put_u64(d + 24, p->base_version);
        put_u64(d + 32, p->next_version);
    }
    put_u64(d + 40, bsum);
    put_u64(d + 48, nsum);
    put_u64(d + 56, header_sum(d, chunks));
}

void delta_frame_header_put(uint8_t *d, uint32_t format, ferry_dtype_t dtype, uint64_t elems, uint32_t chunk,
                            uint64_t base_version, uint64_t next_version, const uint64_t *base_sums,
                            const uint64_t *next_sums) {
    uint32_t chunks = chunk_count(elems, chunk);
    sum_fold_t fb, fn;
    fold_init(&fb);
    fold_init(&fn);
    for (uint32_t i = 0; i < chunks; i++) {
        fold_add(&fb, base_sums[i]);
        fold_add(&fn, next_sums[i]);
    }
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS, .dtype = dtype,
                              .base_version = base_version, .next_version = next_version};
    write_frame_header(d, &p, format, elems, chunk, chunks, fold_end(&fb), fold_end(&fn));
}

ferry_status_t ferry_delta_encode(ferry_delta_codec_t *c, const ferry_delta_params_t *p, const void *base,
                                  const void *next, uint64_t elems, void *dst_, size_t cap, size_t *len) {
    if (!c) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    uint32_t chunk, classes, format;
    ferry_status_t st = check_params(c, p, elems, &chunk, &classes, &format);
    if (st != FERRY_OK) return st;
    if (!dst_ || !len || (elems && (!base || !next)))
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "delta encode: a NULL buffer");
    bool known = p->field_mask & FERRY_DELTA_PARAM_BASE_CHUNK_SUMS;
    if ((known && !p->base_chunk_sums) || ((p->field_mask & FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS) && !p->next_chunk_sums))
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "delta encode: chunk sums asked for but NULL");
    uint8_t *dst = dst_;
    uint32_t w = delta_width(p->dtype), chunks = chunk_count(elems, chunk);
    size_t off = DELTA_FRAME_HEADER + (size_t)chunks * 4;
    if (cap < off) return delta_fail(c, FERRY_ERR_LIMIT, "delta encode: %zu bytes of room, more needed", cap);
    sum_fold_t fb, fn;
    fold_init(&fb);
    fold_init(&fn);
    for (uint32_t i = 0; i < chunks; i++) {
        uint64_t at = (uint64_t)i * chunk;
        uint32_t n = chunk_elems_at(elems, chunk, i);
        size_t rl;
        uint64_t bs = known ? p->base_chunk_sums[i] : 0, ns;
        uint32_t flags = (known ? FERRY_DELTA_BASE_SUM_GIVEN : 0) | (format == 2 ? FERRY_DELTA_CHUNK_FORMAT2 : 0);
        st = ferry_delta_chunk_encode(c, p->dtype, classes, flags,
                                      (const uint8_t *)base + at * w, (const uint8_t *)next + at * w, n, dst + off,
                                      cap - off, &rl, &bs, &ns);
        if (st != FERRY_OK) return st;
        if (p->field_mask & FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS) p->next_chunk_sums[i] = ns;
        put_u32(dst + DELTA_FRAME_HEADER + (size_t)i * 4, (uint32_t)rl);
        fold_add(&fb, bs);
        fold_add(&fn, ns);
        off += rl;
    }
    write_frame_header(dst, p, format, elems, chunk, chunks, fold_end(&fb), fold_end(&fn));
    *len = off;
    return FERRY_OK;
}

ferry_status_t ferry_delta_assemble(ferry_delta_codec_t *c, const ferry_delta_params_t *p, uint64_t elems,
                                    const void *const *recs, const size_t *lens, void *dst_, size_t cap,
                                    size_t *len) {
    if (!c) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    uint32_t chunk, classes, format;
    ferry_status_t st = check_params(c, p, elems, &chunk, &classes, &format);
    if (st != FERRY_OK) return st;
    uint32_t w = delta_width(p->dtype), chunks = chunk_count(elems, chunk);
    if (!dst_ || !len || (chunks && (!recs || !lens)))
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "delta assemble: a NULL argument");
    uint8_t *dst = dst_;
    size_t off = DELTA_FRAME_HEADER + (size_t)chunks * 4;
    if (cap < off) return delta_fail(c, FERRY_ERR_LIMIT, "delta assemble: %zu bytes of room, more needed", cap);
    sum_fold_t fb, fn;
    fold_init(&fb);
    fold_init(&fn);
    for (uint32_t i = 0; i < chunks; i++) {
        uint32_t n = chunk_elems_at(elems, chunk, i);
        delta_chunk_t h;
        st = delta_chunk_parse(recs[i], lens[i], w, true, &h, &c->err);
        if (st != FERRY_OK) return st;
        if (h.elems != n)
            return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "chunk %u holds %u elements, the region's chunk %u", i,
                              h.elems, n);
        if (h.mode == CHUNK_SPARSE && (h.sub_log2 != 0) != (format == 2))
            return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "chunk %u is a format %u record, the delta format %u", i,
                              h.sub_log2 ? 2 : 1, format);
        if (cap - off < lens[i])
            return delta_fail(c, FERRY_ERR_LIMIT, "delta assemble: %zu bytes of room, more needed", cap);
        memcpy(dst + off, recs[i], lens[i]);
        put_u32(dst + DELTA_FRAME_HEADER + (size_t)i * 4, (uint32_t)lens[i]);
        fold_add(&fb, h.base_sum);
        fold_add(&fn, h.next_sum);
        off += lens[i];
    }
    write_frame_header(dst, p, format, elems, chunk, chunks, fold_end(&fb), fold_end(&fn));
    *len = off;
    return FERRY_OK;
}

/* Checks the frame header and chunk table; *w gets the element width. */
static ferry_status_t frame_parse(ferry_delta_codec_t *c, const uint8_t *d, size_t len, ferry_delta_info_t *info,
                                  uint32_t *w) {
    memset(info, 0, sizeof *info);
    if (!d || len < DELTA_FRAME_HEADER)
        return delta_fail(c, FERRY_ERR_CORRUPT, "delta of %zu bytes, shorter than its %u-byte header", len,
                          DELTA_FRAME_HEADER);
    if (get_u32(d) != DELTA_MAGIC) return delta_fail(c, FERRY_ERR_CORRUPT, "not a ferry delta (bad magic)");
    if (d[4] < 1 || d[4] > DELTA_FORMAT_MAX || d[5] != 0)
        return delta_fail(c, FERRY_ERR_UNSUPPORTED, "delta format %u (this ferry reads formats 1 to %u)",
                          (unsigned)get_u32(d + 4) & 0xFFFFu, DELTA_FORMAT_MAX);
    info->format = d[4];
    if (d[7] != 0) return delta_fail(c, FERRY_ERR_CORRUPT, "delta header's reserved byte is not 0");
    info->dtype = (ferry_dtype_t)d[6];
    *w = d[6] < FERRY_DTYPE_COUNT ? delta_width(info->dtype) : 0;
    if (!*w) return delta_fail(c, FERRY_ERR_CORRUPT, "delta of unknown or unsupported dtype code %u", d[6]);
    info->elems = get_u64(d + 8);
    info->chunk_elems = get_u32(d + 16);
    info->chunks = get_u32(d + 20);
    info->base_version = get_u64(d + 24);
    info->next_version = get_u64(d + 32);
    info->base_sum = get_u64(d + 40);
    info->next_sum = get_u64(d + 48);
    if (!chunk_ok(info->chunk_elems) || !elems_ok(info->elems, info->chunk_elems) ||
        info->chunks != chunk_count(info->elems, info->chunk_elems))
        return delta_fail(c, FERRY_ERR_CORRUPT, "delta header: %llu elements in %u chunks of %u do not fit",
                          (unsigned long long)info->elems, info->chunks, info->chunk_elems);
    uint64_t table = (uint64_t)info->chunks * 4;
    if (DELTA_FRAME_HEADER + table > len)
        return delta_fail(c, FERRY_ERR_CORRUPT, "delta of %zu bytes is cut inside its chunk table", len);
    if (header_sum(d, info->chunks) != get_u64(d + 56))
        return delta_fail(c, FERRY_ERR_CORRUPT, "delta header checksum mismatch (damaged bytes)");
    uint64_t total = DELTA_FRAME_HEADER + table;
    for (uint32_t i = 0; i < info->chunks; i++) total += get_u32(d + DELTA_FRAME_HEADER + (size_t)i * 4);
    if (total != len)
        return delta_fail(c, FERRY_ERR_CORRUPT, "delta is %zu bytes but its chunk table says %llu", len,
                          (unsigned long long)total);
    info->bytes_total = len;
    info->bytes_header = DELTA_FRAME_HEADER + table;
    return FERRY_OK;
}

/* How far a delta is read before it is used. */
typedef enum {
    READ_HEADERS, /* frame header, chunk table, chunk headers and class tables: ferry_delta_peek */
    READ_RECORDS, /* and every record's checksum: apply, before it writes anything */
    READ_STREAMS  /* and every class stream walked: ferry_delta_inspect */
} read_depth_t;

/* Checks the frame and every chunk record as deep as asked and fills *info
 * (bytes_positions and bytes_values only at READ_STREAMS). */
static ferry_status_t inspect(ferry_delta_codec_t *c, const void *delta, size_t len, ferry_delta_info_t *info,
                              read_depth_t depth, delta_each_fn each, void *ctx) {
    uint32_t w;
    const uint8_t *d = delta;
    ferry_status_t st = frame_parse(c, d, len, info, &w);
    if (st != FERRY_OK) return st;
    sum_fold_t fb, fn;
    fold_init(&fb);
    fold_init(&fn);
    size_t off = DELTA_FRAME_HEADER + (size_t)info->chunks * 4;
    delta_ahead_t ahead = delta_ahead_start(d, info->chunks);
    for (uint32_t i = 0; i < info->chunks; i++) {
        uint32_t rl = get_u32(d + DELTA_FRAME_HEADER + (size_t)i * 4);
        uint64_t n = chunk_elems_at(info->elems, info->chunk_elems, i);
        delta_chunk_t h;
        if (depth == READ_HEADERS) delta_ahead_step(&ahead); /* deeper reads take whole records anyway */
        st = delta_chunk_parse(d + off, rl, w, depth >= READ_RECORDS, &h, &c->err);
        if (st != FERRY_OK) {
            char why[sizeof c->err.text];
            memcpy(why, c->err.text, sizeof why);
            return delta_fail(c, st, "chunk %u: %s", i, why);
        }
        if (h.elems != n)
            return delta_fail(c, FERRY_ERR_CORRUPT, "chunk %u holds %u elements, not %llu", i, h.elems,
                              (unsigned long long)n);
        if (h.mode == CHUNK_SPARSE && (h.sub_log2 != 0) != (info->format == 2))
            return delta_fail(c, FERRY_ERR_CORRUPT, "chunk %u is a format %u record in a format %u delta", i,
                              h.sub_log2 ? 2 : 1, info->format);
        fold_add(&fb, h.base_sum);
        fold_add(&fn, h.next_sum);
        info->changed += h.changed;
        info->bytes_header += CHUNK_HEADER + (uint64_t)h.classes * CLASS_ENTRY;
        if (h.mode == CHUNK_UNCHANGED) info->chunks_unchanged++;
        if (h.mode == CHUNK_RAW) {
            info->chunks_raw++;
            info->bytes_raw += h.payload_len;
        }
        if (h.mode == CHUNK_SPARSE && depth >= READ_STREAMS) {
            const uint8_t *sp = h.payload;
            for (uint32_t k = 0; k < h.classes; k++) {
                uint64_t pb, vb;
                if (!delta_class_walk(&h, k, sp, &pb, &vb))
                    return delta_fail(c, FERRY_ERR_CORRUPT, "chunk %u, class %u: malformed stream", i, k);
                /* the last byte's padding counts with the positions */
                info->bytes_values += vb / 8;
                info->bytes_positions += h.cls[k].len - vb / 8;
                sp += h.cls[k].len;
            }
        }
        if (h.mode == CHUNK_SPARSE) info->chunks_sparse++;
        if (each) each(ctx, i, d + off, rl, &h);
        off += rl;
    }
    if (fold_end(&fb) != info->base_sum || fold_end(&fn) != info->next_sum)
        return delta_fail(c, FERRY_ERR_CORRUPT, "delta's region checksums do not match its chunks");
    return FERRY_OK;
}

ferry_status_t ferry_delta_inspect(ferry_delta_codec_t *c, const void *delta, size_t len, ferry_delta_info_t *info) {
    if (!c || !info) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    return inspect(c, delta, len, info, READ_STREAMS, NULL, NULL);
}

ferry_status_t delta_peek_each(ferry_delta_codec_t *c, const void *delta, size_t len, ferry_delta_info_t *info,
                               delta_each_fn each, void *ctx) {
    if (!c || !info) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    return inspect(c, delta, len, info, READ_HEADERS, each, ctx);
}

ferry_status_t ferry_delta_peek(ferry_delta_codec_t *c, const void *delta, size_t len, ferry_delta_info_t *info) {
    return delta_peek_each(c, delta, len, info, NULL, NULL);
}

ferry_status_t ferry_delta_chunk_get(ferry_delta_codec_t *c, const void *delta, size_t len, uint32_t i,
                                     const void **chunk, size_t *chunk_len) {
    if (!c || !chunk || !chunk_len) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    ferry_delta_info_t info;
    uint32_t w;
    ferry_status_t st = frame_parse(c, delta, len, &info, &w);
    if (st != FERRY_OK) return st;
    if (i >= info.chunks)
        return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "chunk %u of a delta with %u chunks", i, info.chunks);
    const uint8_t *d = delta;
    size_t off = DELTA_FRAME_HEADER + (size_t)info.chunks * 4;
    for (uint32_t j = 0; j < i; j++) off += get_u32(d + DELTA_FRAME_HEADER + (size_t)j * 4);
    *chunk = d + off;
    *chunk_len = get_u32(d + DELTA_FRAME_HEADER + (size_t)i * 4);
    return FERRY_OK;
}

ferry_status_t delta_apply_logged(ferry_delta_codec_t *c, const void *delta, size_t len, void *region,
                                  uint64_t elems, uint64_t base_version, ferry_delta_info_t *info) {
    ferry_status_t st = inspect(c, delta, len, info, READ_RECORDS, NULL, NULL);
    if (st != FERRY_OK) return st;
    if (info->elems != elems)
        return delta_fail(c, FERRY_ERR_MISMATCH, "delta of %llu elements applied to a region of %llu",
                          (unsigned long long)info->elems, (unsigned long long)elems);
    if (base_version != FERRY_DELTA_ANY_BASE && info->base_version != base_version)
        return delta_fail(c, FERRY_ERR_MISMATCH, "delta from version %llu applied to version %llu",
                          (unsigned long long)info->base_version, (unsigned long long)base_version);
    if (elems && !region) return delta_fail(c, FERRY_ERR_INVALID_ARGUMENT, "delta apply: NULL region");
    size_t mark = c->undo_n; /* chunks applied by earlier calls stay as they are */
    uint32_t w = delta_width(info->dtype);
    const uint8_t *d = delta;
    size_t off = DELTA_FRAME_HEADER + (size_t)info->chunks * 4;
    for (uint32_t i = 0; i < info->chunks; i++) {
        uint32_t rl = get_u32(d + DELTA_FRAME_HEADER + (size_t)i * 4);
        uint64_t at = (uint64_t)i * info->chunk_elems;
        uint32_t n = chunk_elems_at(elems, info->chunk_elems, i);
        st = ferry_delta_chunk_apply(c, info->dtype, d + off, rl, (uint8_t *)region + at * w, n);
        if (st != FERRY_OK) {
            char why[sizeof c->err.text];
            memcpy(why, c->err.text, sizeof why);
            delta_rollback_to(c, mark);
            return delta_fail(c, st, "chunk %u: %s", i, why);
        }
        off += rl;
    }
    return FERRY_OK;
}

ferry_status_t ferry_delta_apply(ferry_delta_codec_t *c, const void *delta, size_t len, void *region,
                                 uint64_t elems, uint64_t base_version, ferry_delta_info_t *info_out) {
    if (!c) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_err_clear(&c->err);
    size_t mark = c->undo_n;
    ferry_delta_info_t info;
    ferry_status_t st = delta_apply_logged(c, delta, len, region, elems, base_version, &info);
    if (st != FERRY_OK) return st;
    delta_truncate(c, mark);
    if (info_out) *info_out = info; /* as ferry_delta_peek gives it: no second walk of the streams */
    return FERRY_OK;
}
