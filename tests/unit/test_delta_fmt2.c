/* Format 2 of the sparse delta codec (class streams cut at sub-blocks, a
 * length table per class): exact round trips for every dtype, chunk size
 * and density at every kernel level, the same bytes from every level and
 * from the chunk calls; the sub-block size the spec's rule picks; raw and
 * unchanged chunks in a format 2 frame; damaged streams, length tables and
 * wrong bases refused with the region restored byte for byte; format 1 vs
 * format 2 sizes on synthetic Adam data (printed). */
#include "check.h"
#include "codec/codec_internal.h"
#include "common/hash.h"
#include "synth.h"

static ferry_ctx_t *ctx;
static ferry_delta_codec_t *codec;

static const ferry_dtype_t dtypes[] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3,
                                       FERRY_DTYPE_F8_E5M2};

static ferry_delta_params_t params(ferry_dtype_t dt, uint32_t chunk, uint32_t classes, uint32_t format) {
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS | FERRY_DELTA_PARAM_FORMAT, .dtype = dt,
                              .base_version = 7, .next_version = 8, .format = format};
    if (chunk) p.field_mask |= FERRY_DELTA_PARAM_CHUNK_ELEMS, p.chunk_elems = chunk;
    if (classes) p.field_mask |= FERRY_DELTA_PARAM_MAX_CLASSES, p.max_classes = classes;
    return p;
}

static uint8_t *encode(ferry_dtype_t dt, const void *base, const void *next, uint64_t n, uint32_t chunk,
                       uint32_t classes, uint32_t format, size_t *len) {
    ferry_delta_params_t p = params(dt, chunk, classes, format);
    size_t cap = ferry_delta_bound(dt, n, chunk);
    CHECK(cap > 0);
    uint8_t *d = malloc(cap);
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, n, d, cap, len), ferry_delta_codec_detail(codec));
    return d;
}

/* The records of a frame: offsets and lengths (at most 64 chunks). */
static uint32_t records(const uint8_t *d, size_t *off, uint32_t *len) {
    uint32_t chunks = get_u32(d + 20);
    CHECK(chunks <= 64);
    size_t at = DELTA_FRAME_HEADER + (size_t)chunks * 4;
    for (uint32_t i = 0; i < chunks; i++) {
        off[i] = at;
        len[i] = get_u32(d + DELTA_FRAME_HEADER + 4 * i);
        at += len[i];
    }
    return chunks;
}

/* Checks every sparse record of a format 2 frame: byte 3 is the spec's S
 * for its changed count, the other records' byte 3 is 0; counts the
 * classes' empty sub-streams (with changes elsewhere) into *empty. */
static void check_records(const uint8_t *d, uint32_t w, uint32_t *empty) {
    size_t off[64];
    uint32_t len[64], chunks = records(d, off, len);
    for (uint32_t i = 0; i < chunks; i++) {
        delta_chunk_t h;
        ferry_errbuf_t err;
        CHECK_OK(delta_chunk_parse(d + off[i], len[i], w, true, &h, &err), err.text);
        if (h.mode != CHUNK_SPARSE) {
            CHECK_EQ_INT(d[off[i] + 3], 0);
            continue;
        }
        uint32_t S = 15;
        while (S > 12 && ((uint64_t)h.changed << S) > 2048ull * h.elems) S--;
        CHECK_EQ_INT(h.sub_log2, S);
        uint32_t nsub = delta_nsub(h.elems, S);
        const uint8_t *p = h.payload;
        for (uint32_t k = 0; k < h.classes; k++) {
            const delta_class_t *e = &h.cls[k];
            if (e->changed) {
                const uint8_t *tab = p + e->len - delta_table_bytes(nsub, e->len_bits);
                bitr_t r;
                bitr_init(&r, tab, delta_table_bytes(nsub, e->len_bits));
                for (uint32_t b = 0; b < nsub; b++) *empty += bitr_bits(&r, e->len_bits) == 0;
            }
            p += e->len;
        }
    }
}

/* Encodes base -> next in format 2 (and checks the chunk calls give the
 * same bytes), inspects, peeks and applies onto a copy of base; returns the
 * delta's size. */
static size_t round_trip2(ferry_dtype_t dt, const void *base, const void *next, uint64_t n, uint32_t chunk,
                          uint32_t classes, ferry_delta_info_t *info_out, uint32_t *empty) {
    uint32_t w = delta_width(dt), cs = chunk ? chunk : FERRY_DELTA_CHUNK_DEFAULT;
    size_t len;
    uint8_t *d = encode(dt, base, next, n, chunk, classes, 2, &len);
    CHECK_EQ_INT(get_u32(d + 4) & 0xFFFF, 2);
    uint32_t none = 0;
    check_records(d, w, empty ? empty : &none);
    ferry_delta_info_t info, pk, ai;
    CHECK_OK(ferry_delta_inspect(codec, d, len, &info), ferry_delta_codec_detail(codec));
    CHECK_EQ_INT(info.format, 2);
    CHECK_EQ_INT(info.elems, n);
    CHECK_EQ_INT(info.bytes_total, len);
    CHECK_EQ_INT(info.bytes_header + info.bytes_positions + info.bytes_values + info.bytes_raw, len);
    uint64_t changed = 0;
    for (uint64_t i = 0; i < n; i++) changed += elem_get(base, w, i) != elem_get(next, w, i);
    CHECK_EQ_INT(info.changed, changed);
    CHECK_OK(ferry_delta_peek(codec, d, len, &pk), ferry_delta_codec_detail(codec));
    pk.bytes_positions = info.bytes_positions, pk.bytes_values = info.bytes_values;
    CHECK(memcmp(&pk, &info, sizeof pk) == 0);
    uint8_t *region = malloc(n * w + 1);
    memcpy(region, base, n * w);
    CHECK_OK(ferry_delta_apply(codec, d, len, region, n, 7, &ai), ferry_delta_codec_detail(codec));
    CHECK(memcmp(region, next, n * w) == 0);
    /* chunk by chunk with the flag, then assembled: the same bytes */
    uint32_t chunks = ferry_delta_chunk_count(n, chunk);
    const void **recs = malloc(sizeof *recs * chunks);
    size_t *lens = malloc(sizeof *lens * chunks);
    uint8_t *buf = malloc(len + (size_t)chunks * CHUNK_HEADER), *at = buf;
    for (uint32_t i = 0; i < chunks; i++) {
        uint32_t ne = (uint32_t)((uint64_t)i * cs + cs <= n ? cs : n - (uint64_t)i * cs);
        CHECK_OK(ferry_delta_chunk_encode(codec, dt, classes, FERRY_DELTA_CHUNK_FORMAT2,
                                          (const uint8_t *)base + (size_t)i * cs * w,
                                          (const uint8_t *)next + (size_t)i * cs * w, ne, at,
                                          ferry_delta_chunk_bound(dt, ne), &lens[i], NULL, NULL),
                 ferry_delta_codec_detail(codec));
        recs[i] = at;
        at += lens[i];
    }
    ferry_delta_params_t p = params(dt, chunk, classes, 2);
    uint8_t *d2 = malloc(len);
    size_t l2;
    CHECK_OK(ferry_delta_assemble(codec, &p, n, recs, lens, d2, len, &l2), ferry_delta_codec_detail(codec));
    CHECK(l2 == len && memcmp(d, d2, len) == 0);
    free(recs), free(lens), free(buf), free(d2), free(region), free(d);
    if (info_out) *info_out = info;
    return len;
}

static void fill_random(uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_next();
}

/* next: base with about permille/1000 of the elements changed, mostly by
 * one ulp, some by more, a few arbitrary */
static void make_next(uint32_t w, const uint8_t *base, uint8_t *next, uint64_t n, uint32_t permille) {
    memcpy(next, base, n * w);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rng_next() % 1000;
        if (r >= permille) continue;
        uint32_t v = elem_get(base, w, i), nv;
        uint64_t x = rng_next() % 100;
        nv = x < 60 ? v + 1 : x < 88 ? v - 1 : x < 97 ? v + 2 + (uint32_t)(rng_next() % 50) : (uint32_t)rng_next();
        if (w < 4) nv &= (1u << (8 * w)) - 1;
        elem_put(next, w, i, nv);
    }
}

/* weight-like bases (a few binades) so classes matter */
static void make_base(ferry_dtype_t dt, uint8_t *base, uint64_t n) {
    uint32_t w = delta_width(dt);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t r = rng_next();
        uint32_t s = (uint32_t)(r & 1), v;
        switch (dt) {
        case FERRY_DTYPE_BF16: v = s << 15 | (uint32_t)(0x38 + (r >> 40) % 8) << 7 | (uint32_t)(r >> 8 & 0x7F); break;
        case FERRY_DTYPE_F16: v = s << 15 | (uint32_t)(6 + (r >> 40) % 8) << 10 | (uint32_t)(r >> 8 & 0x3FF); break;
        case FERRY_DTYPE_F32: v = s << 31 | (uint32_t)(116 + (r >> 40) % 8) << 23 | (uint32_t)(r >> 8 & 0x7FFFFF); break;
        default: v = (uint32_t)(r >> 8) & 0xFF; break;
        }
        elem_put(base, w, i, v);
    }
}

static void test_round_trips(void) {
    for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
        ferry_dtype_t dt = dtypes[t];
        uint32_t w = delta_width(dt);
        /* sizes and chunk sizes: partial chunks, partial sub-blocks, 1 to several sub-blocks */
        static const struct { uint64_t n; uint32_t chunk; } shapes[] = {
            {1, 1024}, {1000, 1024}, {5000, 1024}, {4096, 4096}, {9000, 8192}, {40000, 16384},
            {70000, 65536}, {140000, 1u << 17}, {300000, 0}};
        static const uint32_t density[] = {5, 30, 150, 300, 450};
        for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
            uint64_t n = shapes[s].n;
            if (w == 4 && n > 150000) continue; /* the largest only for narrower types: time under ASan */
            uint8_t *base = malloc(n * w), *next = malloc(n * w);
            for (size_t x = 0; x < sizeof density / sizeof *density; x++) {
                if (x % 2) make_base(dt, base, n);
                else fill_random(base, n * w);
                make_next(w, base, next, n, density[x]);
                round_trip2(dt, base, next, n, shapes[s].chunk, 0, NULL, NULL);
                if (x == 1) round_trip2(dt, base, next, n, shapes[s].chunk, 1, NULL, NULL); /* one class */
            }
            /* a single change at the end (a huge gap in the last sub-block) */
            memcpy(next, base, n * w);
            elem_put(next, w, n - 1, elem_get(base, w, n - 1) ^ 1);
            round_trip2(dt, base, next, n, shapes[s].chunk, 0, NULL, NULL);
            free(base), free(next);
        }
    }
    /* the largest chunk and sub-block sizes: 2^20 elements in one chunk, and
       a chunk of 2^20 split at 2^12 by a dense change */
    uint32_t n = 1u << 20;
    uint8_t *base = malloc(n * 2), *next = malloc(n * 2);
    make_base(FERRY_DTYPE_BF16, base, n);
    make_next(2, base, next, n, 20);
    round_trip2(FERRY_DTYPE_BF16, base, next, n, 1u << 20, 0, NULL, NULL);
    make_next(2, base, next, n, 400);
    round_trip2(FERRY_DTYPE_BF16, base, next, n, 1u << 20, 0, NULL, NULL);
    free(base), free(next);
}

/* sub-streams without changes between ones with: two classes whose changes
 * sit in the first and the last sub-block only */
static void test_empty_substreams(void) {
    enum { N = 1 << 17 };
    static uint16_t base[N], next[N];
    for (int i = 0; i < N; i++) base[i] = next[i] = (uint16_t)(i % 2 ? 0x3C00 + i % 97 : 0x3000 + i % 89);
    for (int i = 0; i < N / 4; i += 37) next[i] = (uint16_t)(base[i] + (i % 3 ? 1 : 5)); /* both classes */
    for (int i = 3 * N / 4 + 1; i < N; i += 74) next[i] = (uint16_t)(base[i] - 1);       /* odd: one class */
    uint32_t empty = 0;
    round_trip2(FERRY_DTYPE_BF16, base, next, N, N, 0, NULL, &empty);
    CHECK(empty >= 4);
}

/* raw and unchanged chunks in a format 2 frame, and the sparse ones */
static void test_mixed_chunks(void) {
    enum { C = 4096, N = 4 * C + 100 };
    static uint16_t base[N], next[N];
    make_base(FERRY_DTYPE_BF16, (uint8_t *)base, N);
    memcpy(next, base, sizeof next);
    for (int i = C; i < 2 * C; i++) next[i] = (uint16_t)rng_next();          /* raw */
    for (int i = 2 * C; i < N; i += 11) next[i] = (uint16_t)(next[i] + 1);   /* sparse, the last short */
    ferry_delta_info_t info;
    round_trip2(FERRY_DTYPE_BF16, base, next, N, C, 0, &info, NULL);
    CHECK_EQ_INT(info.chunks_unchanged, 1);
    CHECK_EQ_INT(info.chunks_raw, 1);
    CHECK_EQ_INT(info.chunks_sparse, 3);
}

/* Every level writes the generic level's bytes, in format 2 too. */
static void test_levels_agree(void) {
    const size_t cap = 150000;
    uint8_t *base = malloc(cap * 4), *next = malloc(cap * 4);
    for (int rep = 0; rep < 40; rep++) {
        ferry_dtype_t dt = dtypes[rep % 5];
        uint32_t w = delta_width(dt);
        uint64_t n = 1 + rng_next() % cap;
        uint32_t chunk = 1u << (10 + rng_next() % 8);
        if (rep % 3) make_base(dt, base, n);
        else fill_random(base, n * w);
        make_next(w, base, next, n, (uint32_t[]){3, 20, 100, 300, 480}[rep % 5]);
        size_t l1 = 0;
        uint8_t *d1 = NULL;
        for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
            if (!delta_codec_level(codec, (delta_level_t)l)) continue;
            size_t l2;
            uint8_t *d2 = encode(dt, base, next, n, chunk, 0, 2, &l2);
            if (!d1) {
                d1 = d2, l1 = l2;
                continue;
            }
            CHECK_EQ_INT(l1, l2);
            CHECK(memcmp(d1, d2, l1) == 0);
            free(d2);
        }
        /* and every level applies it */
        uint8_t *region = malloc(n * w);
        for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
            if (!delta_codec_level(codec, (delta_level_t)l)) continue;
            memcpy(region, base, n * w);
            CHECK_OK(ferry_delta_apply(codec, d1, l1, region, n, 7, NULL), ferry_delta_codec_detail(codec));
            CHECK(memcmp(region, next, n * w) == 0);
        }
        free(region), free(d1);
    }
    delta_codec_level(codec, delta_level_best());
    free(base), free(next);
}

/* Arguments and frames: format in params, mixed formats, unknown formats. */
static void test_formats(void) {
    enum { N = 20000, C = 8192 };
    static uint16_t base[N], next[N];
    make_base(FERRY_DTYPE_BF16, (uint8_t *)base, N);
    make_next(2, (const uint8_t *)base, (uint8_t *)next, N, 40);
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, N, C), l1, l2;
    uint8_t *d = malloc(cap);
    for (uint32_t f = 0; f < 5; f += (f == 0 ? 3 : 1)) { /* 0, 3, 4 */
        ferry_delta_params_t p = params(FERRY_DTYPE_BF16, C, 0, f);
        CHECK_FAILS(ferry_delta_encode(codec, &p, base, next, N, d, cap, &l1), FERRY_ERR_INVALID_ARGUMENT,
                    ferry_delta_codec_detail(codec), "format");
    }
    /* format 1 unless asked */
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS, .dtype = FERRY_DTYPE_BF16, .chunk_elems = C};
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, N, d, cap, &l1), ferry_delta_codec_detail(codec));
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_peek(codec, d, l1, &info), ferry_delta_codec_detail(codec));
    CHECK_EQ_INT(info.format, 1);
    CHECK_EQ_INT(d[DELTA_FRAME_HEADER + 3 * 4 + 3], 0);
    /* records of one format assembled as the other are refused */
    uint8_t *r1 = malloc(ferry_delta_chunk_bound(FERRY_DTYPE_BF16, C)), *r2 = malloc(ferry_delta_chunk_bound(FERRY_DTYPE_BF16, C));
    size_t rl1, rl2;
    CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, 0, base, next, C, r1,
                                      ferry_delta_chunk_bound(FERRY_DTYPE_BF16, C), &rl1, NULL, NULL), "");
    CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, FERRY_DELTA_CHUNK_FORMAT2, base, next, C, r2,
                                      ferry_delta_chunk_bound(FERRY_DTYPE_BF16, C), &rl2, NULL, NULL), "");
    CHECK(r1[3] == 0 && r2[3] >= 12);
    ferry_delta_params_t p1 = params(FERRY_DTYPE_BF16, C, 0, 1), p2 = params(FERRY_DTYPE_BF16, C, 0, 2);
    const void *recs[1] = {r1};
    size_t lens[1] = {rl1};
    CHECK_FAILS(ferry_delta_assemble(codec, &p2, C, recs, lens, d, cap, &l2), FERRY_ERR_INVALID_ARGUMENT,
                ferry_delta_codec_detail(codec), "format 1 record");
    recs[0] = r2, lens[0] = rl2;
    CHECK_FAILS(ferry_delta_assemble(codec, &p1, C, recs, lens, d, cap, &l2), FERRY_ERR_INVALID_ARGUMENT,
                ferry_delta_codec_detail(codec), "format 2 record");
    /* a frame that says format 1 around a format 2 record: corrupt (its header resealed) */
    CHECK_OK(ferry_delta_assemble(codec, &p2, C, recs, lens, d, cap, &l2), ferry_delta_codec_detail(codec));
    uint8_t *region = malloc(C * 2);
    memcpy(region, base, C * 2);
    CHECK_OK(ferry_delta_apply(codec, d, l2, region, C, 7, NULL), ferry_delta_codec_detail(codec));
    CHECK(memcmp(region, next, C * 2) == 0);
    d[4] = 1;
    put_u64(d + 56, XXH3_64bits_withSeed(d + DELTA_FRAME_HEADER, 4, XXH3_64bits(d, 56)));
    memcpy(region, base, C * 2);
    CHECK_FAILS(ferry_delta_apply(codec, d, l2, region, C, 7, NULL), FERRY_ERR_CORRUPT,
                ferry_delta_codec_detail(codec), "format 2 record in a format 1 delta");
    CHECK(memcmp(region, base, C * 2) == 0);
    /* formats past 2: unsupported */
    d[4] = 3;
    put_u64(d + 56, XXH3_64bits_withSeed(d + DELTA_FRAME_HEADER, 4, XXH3_64bits(d, 56)));
    CHECK_FAILS(ferry_delta_peek(codec, d, l2, &info), FERRY_ERR_UNSUPPORTED, ferry_delta_codec_detail(codec),
                "format 3");
    /* byte 3 of a sparse record outside 12..24, of a raw record not 0; byte 23 in format 1 */
    delta_chunk_t h;
    ferry_errbuf_t err;
    static const uint8_t bad3[] = {1, 11, 25, 255};
    for (size_t i = 0; i < sizeof bad3; i++) {
        uint8_t keep = r2[3];
        r2[3] = bad3[i];
        put_u64(r2 + 32, delta_record_sum(r2, rl2));
        CHECK(delta_chunk_parse(r2, rl2, 2, true, &h, &err) == FERRY_ERR_CORRUPT);
        r2[3] = keep;
    }
    put_u64(r2 + 32, delta_record_sum(r2, rl2));
    CHECK_OK(delta_chunk_parse(r2, rl2, 2, true, &h, &err), err.text);
    CHECK(r1[0] == CHUNK_SPARSE && r1[CHUNK_HEADER + 23] == 0);
    r1[CHUNK_HEADER + 23] = 3;
    put_u64(r1 + 32, delta_record_sum(r1, rl1));
    CHECK(delta_chunk_parse(r1, rl1, 2, true, &h, &err) == FERRY_ERR_CORRUPT);
    /* W too wide for its stream, or over 32 */
    for (uint32_t k = 0; k < r2[2]; k++) {
        uint8_t *e = r2 + CHUNK_HEADER + k * CLASS_ENTRY;
        if (!get_u32(e + 8)) continue;
        uint8_t keep = e[23];
        e[23] = 33;
        put_u64(r2 + 32, delta_record_sum(r2, rl2));
        CHECK(delta_chunk_parse(r2, rl2, 2, true, &h, &err) == FERRY_ERR_CORRUPT);
        e[23] = 0;
        put_u64(r2 + 32, delta_record_sum(r2, rl2));
        CHECK(delta_chunk_parse(r2, rl2, 2, true, &h, &err) == FERRY_ERR_CORRUPT);
        e[23] = keep;
        break;
    }
    free(r1), free(r2), free(region), free(d);
}

/* Damaged format 2 streams and tables, resealed so only the decoder can
 * tell, and wrong bases: refused, the region as it was byte for byte; or,
 * where the damage makes another valid stream, caught by the next sum. */
static void test_corruption(void) {
    enum { N = 3 * 16384 + 1000, C = 16384 };
    static uint16_t base[N], next[N], region[N];
    make_base(FERRY_DTYPE_BF16, (uint8_t *)base, N);
    /* chunk 0 sparse at S = 12 (dense), chunks 1, 2 at S = 13 and 15, the last short */
    make_next(2, (const uint8_t *)base, (uint8_t *)next, C, 300);
    make_next(2, (const uint8_t *)(base + C), (uint8_t *)(next + C), C, 140);
    make_next(2, (const uint8_t *)(base + 2 * C), (uint8_t *)(next + 2 * C), N - 2 * C, 20);
    size_t len;
    uint8_t *d = encode(FERRY_DTYPE_BF16, base, next, N, C, 0, 2, &len), *bad = malloc(len);
    size_t off[64];
    uint32_t rl[64], chunks = records(d, off, rl);
    CHECK_EQ_INT(chunks, 4);
    CHECK(d[off[0] + 3] == 12 && d[off[1] + 3] == 13 && d[off[2] + 3] == 15);
    int refused = 0, tables = 0;
    for (uint32_t c = 0; c < chunks; c++) {
        delta_chunk_t h;
        ferry_errbuf_t err;
        CHECK_OK(delta_chunk_parse(d + off[c], rl[c], 2, true, &h, &err), err.text);
        size_t pay = off[c] + CHUNK_HEADER + (size_t)h.classes * CLASS_ENTRY, plen = h.payload_len;
        uint32_t nsub = delta_nsub(h.elems, h.sub_log2);
        /* bit flips anywhere in the streams, the record resealed */
        for (int rep = 0; rep < 150; rep++) {
            memcpy(bad, d, len);
            size_t at = pay + rng_next() % plen;
            bad[at] ^= (uint8_t)(1u << (rng_next() % 8));
            if (rep % 4 == 0) bad[pay + rng_next() % plen] ^= (uint8_t)(1u << (rng_next() % 8));
            put_u64(bad + off[c] + 32, delta_record_sum(bad + off[c], rl[c]));
            memcpy(region, base, sizeof region);
            ferry_status_t st = ferry_delta_apply(codec, bad, len, region, N, 7, NULL);
            if (st == FERRY_OK) {
                CHECK(memcmp(region, next, sizeof region) == 0);
            } else {
                CHECK(st == FERRY_ERR_CORRUPT);
                CHECK(ferry_delta_codec_detail(codec)[0] != '\0');
                CHECK(memcmp(region, base, sizeof region) == 0);
                refused++;
            }
        }
        /* each class's length table: an entry moved by one or more bits
           (another entry less so the total holds), or made longer */
        const uint8_t *p = d + pay;
        for (uint32_t k = 0; k < h.classes; k++) {
            const delta_class_t *e = &h.cls[k];
            if (e->changed == 0) continue;
            uint32_t W = e->len_bits;
            size_t tb = delta_table_bytes(nsub, W), tab = (size_t)(p - d) + e->len - tb;
            for (int rep = 0; rep < 30; rep++) {
                memcpy(bad, d, len);
                uint32_t b1 = (uint32_t)(rng_next() % nsub), b2 = (uint32_t)(rng_next() % nsub);
                uint32_t by = 1 + (uint32_t)(rng_next() % 9);
                bitr_t r;
                bitr_init(&r, bad + tab, tb);
                uint32_t v[4096];
                for (uint32_t b = 0; b < nsub; b++) v[b] = bitr_bits(&r, W);
                if (rep % 3 == 0 || nsub == 1) v[b1] += by; /* the total off */
                else if (v[b2] >= by && b1 != b2) v[b1] += by, v[b2] -= by; /* a boundary moved */
                else v[b1] ^= 1;
                bitw_t wr;
                bitw_init(&wr, bad + tab, tb);
                for (uint32_t b = 0; b < nsub; b++) bitw_put(&wr, v[b] & (W == 32 ? ~0u : (1u << W) - 1), W);
                bitw_finish(&wr);
                put_u64(bad + off[c] + 32, delta_record_sum(bad + off[c], rl[c]));
                memcpy(region, base, sizeof region);
                ferry_status_t st = ferry_delta_apply(codec, bad, len, region, N, 7, NULL);
                if (memcmp(bad, d, len) == 0) continue; /* the edit changed nothing */
                CHECK(st == FERRY_ERR_CORRUPT);
                CHECK(memcmp(region, base, sizeof region) == 0);
                tables++;
            }
            p += e->len;
        }
    }
    printf("format 2 damage: %d stream flips and %d table edits refused\n", refused, tables);
    CHECK(refused > 100 && tables > 10);
    /* a wrong base: refused as another base, nothing applied */
    for (int rep = 0; rep < 50; rep++) {
        memcpy(region, base, sizeof region);
        size_t at = rng_next() % N;
        region[at] = (uint16_t)(region[at] ^ (rep % 2 ? 0x4000 : 0x0001));
        uint16_t keep[N];
        memcpy(keep, region, sizeof keep);
        ferry_status_t st = ferry_delta_apply(codec, d, len, region, N, 7, NULL);
        CHECK(st == FERRY_ERR_MISMATCH);
        CHECK(memcmp(region, keep, sizeof keep) == 0);
    }
    /* through the chunk call: a class count wrong for the base */
    memcpy(region, base, sizeof region);
    for (int i = 0; i < C; i += 3) region[i] ^= 0x0800;
    uint16_t keep0[C];
    memcpy(keep0, region, sizeof keep0);
    CHECK_FAILS(ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, d + off[0], rl[0], region, C), FERRY_ERR_MISMATCH,
                ferry_delta_codec_detail(codec), "not this delta's base");
    CHECK(memcmp(region, keep0, sizeof keep0) == 0);
    free(bad), free(d);
}

/* Applies record rec (rl bytes) with ferry_delta_chunk_apply onto a copy
 * of region (E bf16 elements) at every level this CPU runs: the same status
 * at each, the region the next contents on success (then rolled back) and
 * untouched on a refusal. Returns the status. */
static ferry_status_t apply_levels(const uint8_t *rec, size_t rl, const uint16_t *region, const uint16_t *next,
                                   uint32_t E) {
    uint16_t *r = malloc((size_t)E * 2);
    ferry_status_t first = FERRY_OK;
    bool any = false;
    for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
        if (!delta_codec_level(codec, (delta_level_t)l)) continue;
        memcpy(r, region, (size_t)E * 2);
        ferry_status_t st = ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, rec, rl, r, E);
        if (st == FERRY_OK) {
            CHECK(memcmp(r, next, (size_t)E * 2) == 0);
            ferry_delta_codec_rollback(codec);
        } else {
            CHECK(memcmp(r, region, (size_t)E * 2) == 0);
        }
        if (any && st != first)
            fprintf(stderr, "level %s: %s, the first level: %s\n", delta_level_name((delta_level_t)l),
                    ferry_status_name(st), ferry_status_name(first));
        CHECK(!any || st == first);
        first = st, any = true;
    }
    delta_codec_level(codec, delta_level_best());
    free(r);
    return first;
}

/* Damaged format 2 records applied at every level to the base and to wrong
 * bases: the same status from each (format 2's AVX-512 walk decodes as it
 * places and counts the classes as it goes, or after a refusal; the
 * portable walk decodes and counts first). The damage: a bit flipped
 * anywhere, class entries' change counts moved between classes (so that a
 * class's stream holds more changes than its entry says, found where its
 * last sub-stream starts, or fewer); a length table entry off; each
 * resealed. The wrong bases: one whose classes hold other counts, one whose
 * classes are right but its contents not. The chunk has a partial last
 * sub-block and batch. */
static void test_levels_refuse_alike(void) {
    enum { E = 3 * 8192 + 1000 };
    static uint16_t base[E], next[E], wrong1[E], wrong2[E];
    static uint8_t rec[40 + 8 * 24 + E * 2], bad[sizeof rec];
    make_base(FERRY_DTYPE_BF16, (uint8_t *)base, E);
    for (int i = 0; i < E; i++) { /* smaller elements change more often (0.5% to 40%): several classes */
        uint32_t b = (uint32_t)(base[i] >> 7) & 7, x = (uint32_t)(rng_next() % 100);
        next[i] = base[i];
        if (rng_next() % 1000 < 5 + 8 * (7 - b) * (7 - b))
            next[i] = (uint16_t)(x < 60   ? base[i] + 1u
                                 : x < 88 ? base[i] - 1u
                                          : base[i] + 2u + (uint32_t)(rng_next() % 50));
    }
    memcpy(wrong1, base, sizeof base);
    for (int i = 5; i < E; i += 97) wrong1[i] ^= 0x0800; /* other binades: other class counts */
    memcpy(wrong2, base, sizeof base);
    wrong2[E / 2] ^= 1; /* the same classes */
    size_t rl;
    CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, FERRY_DELTA_CHUNK_FORMAT2, base, next, E, rec,
                                      sizeof rec, &rl, NULL, NULL),
             ferry_delta_codec_detail(codec));
    delta_chunk_t h;
    ferry_errbuf_t err;
    CHECK_OK(delta_chunk_parse(rec, rl, 2, true, &h, &err), err.text);
    CHECK(h.mode == CHUNK_SPARSE && h.sub_log2 == 13 && h.classes >= 3);
    const uint16_t *regions[3] = {base, wrong1, wrong2};
    CHECK(apply_levels(rec, rl, base, next, E) == FERRY_OK);
    CHECK(apply_levels(rec, rl, wrong1, next, E) == FERRY_ERR_MISMATCH);
    CHECK(apply_levels(rec, rl, wrong2, next, E) == FERRY_ERR_MISMATCH);
    int verdicts[3][3] = {{0}};
    /* bits flipped anywhere but the record checksum */
    for (int rep = 0; rep < 400; rep++) {
        memcpy(bad, rec, rl);
        size_t bit;
        do bit = rng_next() % (rl * 8);
        while (bit / 8 >= 32 && bit / 8 < 40);
        bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        put_u64(bad + 32, delta_record_sum(bad, rl));
        for (int g = 0; g < 3; g++) {
            ferry_status_t st = apply_levels(bad, rl, regions[g], next, E);
            verdicts[g][st == FERRY_OK ? 0 : st == FERRY_ERR_CORRUPT ? 1 : 2]++;
        }
    }
    /* change counts moved between classes: by one, and by the count of the
       donor's last sub-stream with changes */
    const uint32_t nsub = delta_nsub(E, h.sub_log2);
    uint32_t *sub = malloc(sizeof *sub * h.classes * nsub), lower[FERRY_DELTA_CLASSES_MAX];
    for (uint32_t k = 0; k < h.classes; k++) lower[k] = h.cls[k].lower;
    delta_count_subblocks(codec, (const uint8_t *)base, 2, E, h.classes, lower, h.sub_log2, sub);
    const uint8_t *p = h.payload;
    int moved = 0;
    for (uint32_t a = 0; a < h.classes; a++) {
        const delta_class_t *e = &h.cls[a];
        uint32_t *rank = malloc(sizeof *rank * (e->changed + 1));
        int64_t *dl = malloc(sizeof *dl * (e->changed + 1));
        CHECK(delta_class2_decode(&h, a, p, sub + (size_t)a * nsub, rank, dl, NULL, NULL));
        uint64_t before = 0, last = 0;
        for (uint32_t b = 0; b < nsub; b++) { /* the changes of the last sub-block with any */
            uint64_t in = 0;
            for (uint32_t i = 0; i < e->changed; i++) in += rank[i] >= before && rank[i] < before + sub[a * nsub + b];
            if (in) last = in;
            before += sub[a * nsub + b];
        }
        uint32_t b2 = (a + 1) % h.classes;
        for (uint64_t m = 1; m <= last; m += last - 1 ? last - 1 : 1) {
            for (int dir = 0; dir < 2; dir++) {
                uint32_t from = dir ? b2 : a, to = dir ? a : b2;
                memcpy(bad, rec, rl);
                uint8_t *ef = bad + CHUNK_HEADER + from * CLASS_ENTRY, *et = bad + CHUNK_HEADER + to * CLASS_ENTRY;
                if (get_u32(ef + 8) < m + get_u32(ef + 12) || get_u32(et + 8) + m > get_u32(et + 4)) continue;
                put_u32(ef + 8, get_u32(ef + 8) - (uint32_t)m);
                put_u32(et + 8, get_u32(et + 8) + (uint32_t)m);
                put_u64(bad + 32, delta_record_sum(bad, rl));
                for (int g = 0; g < 3; g++) {
                    ferry_status_t st = apply_levels(bad, rl, regions[g], next, E);
                    CHECK(st == (g ? FERRY_ERR_MISMATCH : FERRY_ERR_CORRUPT));
                }
                moved++;
            }
        }
        free(rank), free(dl);
        /* a length table entry one more, the next one less (the sum kept) */
        uint32_t W = e->len_bits;
        size_t tb = delta_table_bytes(nsub, W), tab = (size_t)(p - rec) + e->len - tb;
        for (uint32_t b = 0; b + 1 < nsub && W; b++) {
            memcpy(bad, rec, rl);
            bitr_t r;
            bitr_init(&r, bad + tab, tb);
            uint32_t v[64];
            for (uint32_t x = 0; x < nsub; x++) v[x] = bitr_bits(&r, W);
            if (!v[b + 1] || v[b] + 1 >= (1u << W)) continue;
            v[b]++, v[b + 1]--;
            bitw_t wr;
            bitw_init(&wr, bad + tab, tb);
            for (uint32_t x = 0; x < nsub; x++) bitw_put(&wr, v[x], W);
            bitw_finish(&wr);
            put_u64(bad + 32, delta_record_sum(bad, rl));
            for (int g = 0; g < 3; g++) {
                ferry_status_t st = apply_levels(bad, rl, regions[g], next, E);
                CHECK(st == (g ? FERRY_ERR_MISMATCH : FERRY_ERR_CORRUPT));
            }
        }
        p += e->len;
    }
    free(sub);
    CHECK(moved >= 4);
    for (int g = 0; g < 3; g++)
        printf("format 2 levels alike, %s: flips applied %d, corrupt %d, mismatch %d\n",
               g == 0 ? "the base" : g == 1 ? "other class counts" : "the same classes", verdicts[g][0],
               verdicts[g][1], verdicts[g][2]);
    CHECK(verdicts[0][1] > 100 && verdicts[1][2] > 100);
}

/* Synthetic Adam steps at three learning rates: format 2's cost against format 1. */
static void test_sizes(void) {
    const size_t n = 1u << 21;
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *dir = malloc(n * 4);
    uint16_t *b0 = malloc(n * 2), *b1 = malloc(n * 2);
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    for (size_t li = 0; li < 3; li++) {
        delta_synth_t s;
        delta_synth_init(&s, n, false, lrs[li], 42, w, m, v, dir);
        for (int t = 0; t < 5; t++) {
            delta_synth_bf16(&s, b0, 0, n);
            delta_synth_step_range(&s, 0, n);
            delta_synth_next(&s);
        }
        delta_synth_bf16(&s, b1, 0, n);
        ferry_delta_info_t info;
        size_t l2 = round_trip2(FERRY_DTYPE_BF16, b0, b1, n, 0, 0, &info, NULL), l1;
        uint8_t *d1 = encode(FERRY_DTYPE_BF16, b0, b1, n, 0, 0, 1, &l1);
        free(d1);
        double p1 = (double)l1 / info.changed, p2 = (double)l2 / info.changed;
        printf("synthetic Adam lr %g step 5: %.2f%% changed; format 1 %.4f, format 2 %.4f B per changed element "
               "(%+.2f%%)\n",
               lrs[li], 100.0 * info.changed / n, p1, p2, 100 * (p2 / p1 - 1));
        CHECK(l2 > l1 && p2 < p1 * 1.05);
    }
    free(w), free(m), free(v), free(dir), free(b0), free(b1);
}

int main(void) {
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    CHECK_OK(ferry_delta_codec_create(ctx, &codec), "codec");
    test_formats();
    test_levels_agree();
    test_levels_refuse_alike();
    for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
        if (!delta_codec_level(codec, (delta_level_t)l)) {
            printf("kernel level %s: not on this CPU\n", delta_level_name((delta_level_t)l));
            continue;
        }
        test_round_trips();
        test_empty_substreams();
        test_mixed_chunks();
        test_corruption();
    }
    test_sizes();
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    return 0;
}
