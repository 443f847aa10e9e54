/* The sparse delta codec: exact round trips on random, adversarial and
 * realistic data for every dtype; damaged, truncated and wrong-base deltas
 * refused with the region untouched; the chunk-level calls giving the same
 * bytes as the whole-region ones; rollback; the size goal on RL-like data. */
#include <math.h>
#include <sys/mman.h>
#include <unistd.h>

#include "check.h"
#include "codec/codec_internal.h"
#include "synth.h"
#include "common/hash.h"

static ferry_ctx_t *ctx;
static ferry_delta_codec_t *codec;

static const ferry_dtype_t dtypes[] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3,
                                       FERRY_DTYPE_F8_E5M2};

static void fill_random(uint8_t *p, size_t bytes) {
    for (size_t i = 0; i < bytes; i++) p[i] = (uint8_t)rng_next();
}

/* Encodes base -> next, checks inspect, applies onto a copy of base and
 * compares with next; returns the delta's size. */
static size_t round_trip(ferry_dtype_t dt, const void *base, const void *next, uint64_t n, uint32_t chunk,
                         uint32_t classes, ferry_delta_info_t *info_out) {
    uint32_t w = delta_width(dt);
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_VERSIONS, .dtype = dt, .base_version = 7,
                              .next_version = 8};
    if (chunk) {
        p.field_mask |= FERRY_DELTA_PARAM_CHUNK_ELEMS;
        p.chunk_elems = chunk;
    }
    if (classes) {
        p.field_mask |= FERRY_DELTA_PARAM_MAX_CLASSES;
        p.max_classes = classes;
    }
    size_t cap = ferry_delta_bound(dt, n, chunk), len = 0;
    CHECK(cap > 0);
    uint8_t *d = malloc(cap);
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, n, d, cap, &len), ferry_delta_codec_detail(codec));
    CHECK(len <= cap);
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_inspect(codec, d, len, &info), ferry_delta_codec_detail(codec));
    CHECK_EQ_INT(info.elems, n);
    CHECK_EQ_INT(info.dtype, dt);
    CHECK_EQ_INT(info.base_version, 7);
    CHECK_EQ_INT(info.next_version, 8);
    CHECK_EQ_INT(info.bytes_total, len);
    CHECK_EQ_INT(info.bytes_header + info.bytes_positions + info.bytes_values + info.bytes_raw, len);
    uint64_t changed = 0;
    for (uint64_t i = 0; i < n; i++) changed += elem_get(base, w, i) != elem_get(next, w, i);
    CHECK_EQ_INT(info.changed, changed);
    uint64_t bs, ns;
    CHECK_OK(ferry_delta_region_sum(dt, base, n, chunk, &bs), "");
    CHECK_OK(ferry_delta_region_sum(dt, next, n, chunk, &ns), "");
    CHECK(info.base_sum == bs && info.next_sum == ns);
    /* the peek: everything inspect says but the position/value split */
    ferry_delta_info_t pk, ai;
    CHECK_OK(ferry_delta_peek(codec, d, len, &pk), ferry_delta_codec_detail(codec));
    CHECK(pk.bytes_positions == 0 && pk.bytes_values == 0);
    pk.bytes_positions = info.bytes_positions, pk.bytes_values = info.bytes_values;
    CHECK(memcmp(&pk, &info, sizeof pk) == 0);

    uint8_t *region = malloc(n * w + 1);
    memcpy(region, base, n * w);
    CHECK_OK(ferry_delta_apply(codec, d, len, region, n, 7, &ai), ferry_delta_codec_detail(codec));
    CHECK(memcmp(region, next, n * w) == 0);
    ai.bytes_positions = info.bytes_positions, ai.bytes_values = info.bytes_values;
    CHECK(memcmp(&ai, &info, sizeof ai) == 0); /* apply's info is the peek's */
    free(region);
    free(d);
    if (info_out) *info_out = info;
    return len;
}

/* bases and nexts with every kind of change the codec must carry exactly */
static void test_round_trips(void) {
    for (size_t t = 0; t < sizeof dtypes / sizeof *dtypes; t++) {
        ferry_dtype_t dt = dtypes[t];
        uint32_t w = delta_width(dt);
        const uint64_t sizes[] = {1, 2, 63, 64, 65, 1023, 1024, 1025, 4096, 5000, 9000};
        for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
            uint64_t n = sizes[s];
            uint8_t *base = malloc(n * w), *next = malloc(n * w);
            fill_random(base, n * w);
            /* none changed */
            memcpy(next, base, n * w);
            ferry_delta_info_t info;
            round_trip(dt, base, next, n, 1024, 0, &info);
            CHECK_EQ_INT(info.chunks_unchanged, info.chunks);
            round_trip(dt, base, next, n, 0, 0, NULL);
            /* all changed: raw chunks */
            fill_random(next, n * w);
            for (uint64_t i = 0; i < n; i++)
                if (elem_get(next, w, i) == elem_get(base, w, i)) elem_put(next, w, i, elem_get(base, w, i) ^ 1);
            round_trip(dt, base, next, n, 1024, 0, NULL);
            /* sparse: ~3% change, mostly one ulp, some far */
            memcpy(next, base, n * w);
            for (uint64_t i = 0; i < n; i++) {
                uint64_t r = rng_next() % 1000;
                uint32_t v = elem_get(base, w, i), nv = v;
                if (r < 20) nv = v + 1;
                else if (r < 27) nv = v - 1;
                else if (r < 29) nv = v + 2 + (uint32_t)(rng_next() % 50);
                else if (r < 30) nv = (uint32_t)rng_next();
                if (w < 4) nv &= (1u << (8 * w)) - 1;
                elem_put(next, w, i, nv);
            }
            for (uint32_t k = 1; k <= FERRY_DELTA_CLASSES_MAX; k *= 2) round_trip(dt, base, next, n, 1024, k, NULL);
            round_trip(dt, base, next, n, 0, 0, NULL); /* chunks of several batches, the last one short */
            /* a single change, at the start and at the end (huge gaps) */
            memcpy(next, base, n * w);
            elem_put(next, w, 0, elem_get(base, w, 0) ^ 0x1);
            round_trip(dt, base, next, n, 0, 0, NULL);
            memcpy(next, base, n * w);
            elem_put(next, w, n - 1, elem_get(base, w, n - 1) ^ (1u << (8 * w - 1)));
            round_trip(dt, base, next, n, 0, 0, NULL);
            free(base);
            free(next);
        }
    }
}

/* -0/+0, NaN payloads, infinities and the extremes of the ordered view */
static void test_special_values(void) {
    const uint16_t b16[] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFFF, 0x7F7F, 0x0001, 0x8001, 0x3F80};
    const uint16_t n16[] = {0x8000, 0x0000, 0xFF80, 0x7F80, 0x7FC2, 0x0000, 0xFF7F, 0x8001, 0x0001, 0x3F81};
    uint16_t base[4096], next[4096];
    for (int rep = 0; rep < 4; rep++) {
        memset(base, 0, sizeof base);
        memcpy(next, base, sizeof next);
        for (size_t i = 0; i < 10; i++) {
            size_t at = rep * 1000 + i * 37;
            base[at] = b16[i];
            next[at] = n16[i];
        }
        round_trip(FERRY_DTYPE_BF16, base, next, 4096, 1024, 0, NULL);
    }
    /* fp32: the largest ulp distances there are */
    uint32_t fb[2048], fn[2048];
    for (size_t i = 0; i < 2048; i++) fb[i] = fn[i] = 0x3F800000u + (uint32_t)i;
    fb[5] = 0x7FFFFFFFu; /* +NaN with a full payload -> -NaN full payload: |d| = 2^32 - 1 */
    fn[5] = 0xFFFFFFFFu;
    fb[900] = 0x00000000u;
    fn[900] = 0x80000000u; /* +0 -> -0 */
    fb[1500] = 0xFF800000u;
    fn[1500] = 0x7F800000u;
    round_trip(FERRY_DTYPE_F32, fb, fn, 2048, 1024, 0, NULL);
}

/* 5 Adam steps on synthetic masters: the density is RL-like and the delta
 * meets the size goal (<= 0.90 B per changed element at lr 1e-6). */
static void test_realistic(void) {
    const size_t n = 1u << 20;
    float *w = malloc(n * 4), *m = malloc(n * 4), *v = malloc(n * 4), *dir = malloc(n * 4);
    uint16_t *b0 = malloc(n * 2), *b1 = malloc(n * 2);
    delta_synth_t s;
    delta_synth_init(&s, n, false, 1e-6, 42, w, m, v, dir);
    for (int t = 0; t < 5; t++) {
        delta_synth_bf16(&s, b0, 0, n);
        delta_synth_step_range(&s, 0, n);
        delta_synth_next(&s);
    }
    delta_synth_bf16(&s, b1, 0, n);
    ferry_delta_info_t info;
    size_t len = round_trip(FERRY_DTYPE_BF16, b0, b1, n, 0, 0, &info);
    double density = (double)info.changed / n, per = (double)len / info.changed;
    printf("realistic lr 1e-6 step 5: %.2f%% changed, %.3f B per changed element (positions %.3f, values %.3f)\n",
           100 * density, per, (double)info.bytes_positions / info.changed, (double)info.bytes_values / info.changed);
    CHECK(density > 0.01 && density < 0.04);
    CHECK(per <= 0.90);
    /* one class only (no base conditioning) costs markedly more */
    size_t flat = round_trip(FERRY_DTYPE_BF16, b0, b1, n, 0, 1, NULL);
    CHECK(flat > len * 11 / 10);
    free(w), free(m), free(v), free(dir), free(b0), free(b1);
}

/* encodes a sparse 3-chunk bf16 delta for the refusal tests */
static uint8_t *make_delta(uint16_t *base, uint16_t *next, size_t n, size_t *len) {
    for (size_t i = 0; i < n; i++) base[i] = next[i] = (uint16_t)(0x3C00 + rng_next() % 2048);
    for (size_t i = 0; i < n; i += 29) next[i]++;
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS | FERRY_DELTA_PARAM_VERSIONS,
                              .dtype = FERRY_DTYPE_BF16, .chunk_elems = 1024, .base_version = 3, .next_version = 4};
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, n, 1024);
    uint8_t *d = malloc(cap);
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, n, d, cap, len), ferry_delta_codec_detail(codec));
    return d;
}

static void test_refusals(void) {
    enum { N = 3000 };
    uint16_t base[N], next[N], region[N];
    size_t len;
    uint8_t *d = make_delta(base, next, N, &len);
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_inspect(codec, d, len, &info), ferry_delta_codec_detail(codec));
    CHECK_EQ_INT(info.chunks_sparse, 3);

    /* every single-byte flip and every truncation is refused, region intact */
    uint8_t *bad = malloc(len);
    for (size_t at = 0; at < len; at++) {
        memcpy(bad, d, len);
        bad[at] ^= (uint8_t)(1u << (at % 8));
        memcpy(region, base, sizeof region);
        ferry_status_t st = ferry_delta_apply(codec, bad, len, region, N, 3, NULL);
        CHECK(st == FERRY_ERR_CORRUPT || st == FERRY_ERR_UNSUPPORTED || st == FERRY_ERR_MISMATCH);
        CHECK(ferry_delta_codec_detail(codec)[0] != '\0');
        CHECK(memcmp(region, base, sizeof region) == 0);
    }
    for (size_t cut = 0; cut < len; cut += (cut < 100 ? 1 : 37)) {
        memcpy(region, base, sizeof region);
        CHECK_FAILS(ferry_delta_apply(codec, d, cut, region, N, 3, NULL), FERRY_ERR_CORRUPT,
                    ferry_delta_codec_detail(codec), "");
        CHECK(memcmp(region, base, sizeof region) == 0);
    }
    /* as callers run it, the peek then the apply: the peek takes damage it
       does not read (records' bodies and streams), the apply refuses all of
       it before writing; the peek refuses the rest */
    size_t peeked = 0, header_end = DELTA_FRAME_HEADER + 3 * 4;
    bool in_stream[N * 2] = {false}; /* the delta's bytes that are class streams */
    CHECK(len <= sizeof in_stream);
    for (size_t i = 0, off = header_end; i < 3; off += get_u32(d + DELTA_FRAME_HEADER + 4 * i), i++) {
        size_t pay = off + CHUNK_HEADER + (size_t)d[off + 2] * CLASS_ENTRY;
        for (size_t k = 0; k < get_u32(d + off + 12); k++) in_stream[pay + k] = true;
    }
    ferry_delta_info_t pk;
    for (size_t at = 0; at < len; at++) {
        memcpy(bad, d, len);
        bad[at] ^= 0x20;
        ferry_status_t pst = ferry_delta_peek(codec, bad, len, &pk);
        if (at < header_end) CHECK(pst != FERRY_OK); /* under the header checksum */
        if (in_stream[at]) CHECK(pst == FERRY_OK);    /* not read */
        if (pst != FERRY_OK) {
            CHECK(ferry_delta_codec_detail(codec)[0] != '\0');
            continue;
        }
        peeked++;
        memcpy(region, base, sizeof region);
        CHECK_FAILS(ferry_delta_apply(codec, bad, len, region, N, 3, NULL), FERRY_ERR_CORRUPT,
                    ferry_delta_codec_detail(codec), "checksum");
        CHECK(memcmp(region, base, sizeof region) == 0);
    }
    CHECK(peeked > 0);
    free(bad);

    /* another base: refused as a mismatch, region untouched; a late chunk
       failing undoes the chunks before it */
    memcpy(region, base, sizeof region);
    region[2500] ^= 0x10;
    uint16_t before[N];
    memcpy(before, region, sizeof before);
    CHECK_FAILS(ferry_delta_apply(codec, d, len, region, N, 3, NULL), FERRY_ERR_MISMATCH,
                ferry_delta_codec_detail(codec), "chunk 2");
    CHECK(memcmp(region, before, sizeof region) == 0);
    CHECK_FAILS(ferry_delta_apply(codec, d, len, region, N, 2, NULL), FERRY_ERR_MISMATCH,
                ferry_delta_codec_detail(codec), "from version 3 applied to version 2");
    CHECK_FAILS(ferry_delta_apply(codec, d, len, region, N - 1, 3, NULL), FERRY_ERR_MISMATCH,
                ferry_delta_codec_detail(codec), "region of 2999");
    CHECK(memcmp(region, before, sizeof region) == 0);
    /* the right base, any version accepted */
    memcpy(region, base, sizeof region);
    CHECK_OK(ferry_delta_apply(codec, d, len, region, N, FERRY_DELTA_ANY_BASE, NULL), ferry_delta_codec_detail(codec));
    CHECK(memcmp(region, next, sizeof region) == 0);
    /* applying twice: the region is now the next version, not the base */
    CHECK_FAILS(ferry_delta_apply(codec, d, len, region, N, 3, NULL), FERRY_ERR_MISMATCH,
                ferry_delta_codec_detail(codec), "not this delta's base");
    CHECK(memcmp(region, next, sizeof region) == 0);

    /* a class bound that is not a whole magnitude bucket, sealed with a
       valid record checksum: refused before anything is written */
    {
        static uint8_t rec[40 + 8 * 24 + 16384];
        static uint16_t b1[8192], n1[8192], r1[8192];
        for (int i = 0; i < 8192; i++) { /* small magnitudes change, large ones never: two classes or more */
            b1[i] = n1[i] = (uint16_t)(0x3000 + (i % 8) * 0x100);
            if (i % 8 < 2 && i % 3 == 0) n1[i]++;
        }
        size_t rl;
        CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, 0, b1, n1, 8192, rec, sizeof rec, &rl, NULL, NULL),
                 ferry_delta_codec_detail(codec));
        CHECK(rec[0] == CHUNK_SPARSE && rec[2] >= 2);
        /* every bit of the record flipped and the record resealed: the
           class streams reach the decoder, which refuses each with the
           region intact, or (a flip in a stream's last padding bits)
           applies the same changes */
        static uint8_t flip[sizeof rec];
        for (size_t bit = 0; bit < rl * 8; bit++) {
            if (bit / 8 >= 32 && bit / 8 < 40) continue; /* the record checksum itself */
            memcpy(flip, rec, rl);
            flip[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            put_u64(flip + 32, delta_record_sum(flip, rl));
            memcpy(r1, b1, sizeof b1);
            ferry_status_t st = ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, flip, rl, r1, 8192);
            if (st == FERRY_OK) {
                CHECK(memcmp(r1, n1, sizeof n1) == 0);
                ferry_delta_codec_commit(codec);
            } else {
                CHECK(st == FERRY_ERR_CORRUPT || st == FERRY_ERR_MISMATCH || st == FERRY_ERR_UNSUPPORTED);
                CHECK(memcmp(r1, b1, sizeof b1) == 0);
            }
        }
        /* class 0 claims more changes than its bytes can code (each takes a
           Rice code of k_gap + 1 bits and a sign bit), the chunk header and
           the class's count agreeing: refused by the parse, so no reader
           reserves room for them (a GPU reader reserves 12 bytes each) */
        static uint8_t big[sizeof rec];
        memcpy(big, rec, rl);
        uint8_t *e0 = big + CHUNK_HEADER;
        uint32_t claim = get_u32(e0 + 16) * 8 / (2 + e0[20]) + 1, more = claim - get_u32(e0 + 8);
        CHECK(claim <= get_u32(e0 + 4)); /* still within the class's elements */
        put_u32(e0 + 8, claim);
        put_u32(big + 8, get_u32(big + 8) + more);
        put_u64(big + 32, delta_record_sum(big, rl));
        memcpy(r1, b1, sizeof b1);
        CHECK_FAILS(ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, big, rl, r1, 8192), FERRY_ERR_CORRUPT,
                    ferry_delta_codec_detail(codec), "more than its");
        CHECK(memcmp(r1, b1, sizeof b1) == 0);
        put_u32(rec + CHUNK_HEADER + CLASS_ENTRY, get_u32(rec + CHUNK_HEADER + CLASS_ENTRY) + 1);
        put_u64(rec + 32, delta_record_sum(rec, rl));
        memcpy(r1, b1, sizeof b1);
        CHECK_FAILS(ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, rec, rl, r1, 8192), FERRY_ERR_CORRUPT,
                    ferry_delta_codec_detail(codec), "not a whole magnitude bucket");
        CHECK(memcmp(r1, b1, sizeof b1) == 0);
    }

    /* bad arguments */
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS, .dtype = FERRY_DTYPE_BF16,
                              .chunk_elems = 1000};
    size_t l2;
    CHECK_FAILS(ferry_delta_encode(codec, &p, base, next, N, region, sizeof region, &l2), FERRY_ERR_INVALID_ARGUMENT,
                ferry_delta_codec_detail(codec), "power of two");
    p.field_mask = 0;
    p.dtype = FERRY_DTYPE_F64;
    CHECK_FAILS(ferry_delta_encode(codec, &p, base, next, N, region, sizeof region, &l2), FERRY_ERR_UNSUPPORTED,
                ferry_delta_codec_detail(codec), "F64");
    p.dtype = FERRY_DTYPE_BF16;
    CHECK_FAILS(ferry_delta_encode(codec, &p, base, next, N, region, 100, &l2), FERRY_ERR_LIMIT,
                ferry_delta_codec_detail(codec), "room");
    free(d);
}

/* The peek reads headers only: with a one-chunk delta's streams on pages
 * that cannot be read it still answers (inspect would fault there). */
static void test_peek_reads_headers(void) {
    enum { N = 20000 };
    static uint16_t base[N], next[N];
    for (int i = 0; i < N; i++) base[i] = next[i] = (uint16_t)(0x3C00 + rng_next() % 2048);
    for (int i = 0; i < N; i += 3) next[i]++;
    ferry_delta_params_t p = {.dtype = FERRY_DTYPE_BF16};
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, N, 0), len;
    uint8_t *d = malloc(cap);
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, N, d, cap, &len), ferry_delta_codec_detail(codec));
    CHECK(d[DELTA_FRAME_HEADER + 4] == CHUNK_SPARSE);
    size_t heads = DELTA_FRAME_HEADER + 4 + CHUNK_HEADER + (size_t)d[DELTA_FRAME_HEADER + 4 + 2] * CLASS_ENTRY;
    long pg = sysconf(_SC_PAGESIZE);
    size_t span = ((heads + (size_t)pg - 1) / (size_t)pg + (len - heads) / (size_t)pg + 2) * (size_t)pg;
    uint8_t *m = mmap(NULL, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK(m != MAP_FAILED);
    size_t first = ((heads + (size_t)pg - 1) / (size_t)pg) * (size_t)pg; /* the streams start here */
    uint8_t *at = m + first - heads;
    memcpy(at, d, len);
    CHECK(mprotect(m + first, span - first, PROT_NONE) == 0);
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_peek(codec, at, len, &info), ferry_delta_codec_detail(codec));
    CHECK_EQ_INT(info.changed, (N + 2) / 3);
    CHECK_EQ_INT(info.chunks_sparse, 1);
    munmap(m, span);
    free(d);
}

/* delta_peek_each (the GPU apply's one walk of a frame's records): each
 * record's header in order, as the peek checked it; on a damaged record it
 * fails as the peek does, having seen only the records before it. */
typedef struct seen {
    uint32_t n, sparse, raw;
    uint64_t changed;
    const uint8_t *d;  /* the frame */
    const uint8_t *at; /* where the next record must be */
} seen_t;
static void note_chunk(void *arg, uint32_t i, const uint8_t *rec, size_t len, const delta_chunk_t *h) {
    seen_t *z = arg;
    if (!z->at) z->at = z->d + DELTA_FRAME_HEADER + 4 * (size_t)get_u32(z->d + 20); /* after the chunk table */
    /* chunk i's record, as the chunk table places it */
    CHECK(i == z->n && rec == z->at && len == get_u32(z->d + DELTA_FRAME_HEADER + 4 * (size_t)i) &&
          rec[0] == h->mode && h->payload > rec && h->payload <= rec + len);
    z->at += len;
    z->n++;
    z->sparse += h->mode == CHUNK_SPARSE;
    z->raw += h->mode == CHUNK_RAW;
    z->changed += h->changed;
}
static void test_peek_each(void) {
    enum { CH = 4096, N = 4 * CH };
    static uint16_t base[N], next[N];
    for (int i = 0; i < N; i++) base[i] = next[i] = (uint16_t)(0x3C00 + rng_next() % 2048);
    for (int i = 0; i < CH; i += 5) next[i]++;                          /* chunk 0: sparse */
    for (int i = 2 * CH; i < 3 * CH; i++) next[i] = (uint16_t)rng_next(); /* chunk 2: raw */
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS, .dtype = FERRY_DTYPE_BF16,
                              .chunk_elems = CH};
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, N, CH), len;
    uint8_t *d = malloc(cap);
    CHECK(d);
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, N, d, cap, &len), ferry_delta_codec_detail(codec));
    ferry_delta_info_t info, pk;
    seen_t z = {.d = d};
    CHECK_OK(delta_peek_each(codec, d, len, &info, note_chunk, &z), ferry_delta_codec_detail(codec));
    CHECK(z.at == d + len); /* every record, to the frame's end */
    CHECK_OK(ferry_delta_peek(codec, d, len, &pk), ferry_delta_codec_detail(codec));
    CHECK(z.n == info.chunks && z.n == 4 && z.sparse == info.chunks_sparse && z.raw == info.chunks_raw &&
          z.changed == info.changed && info.changed == pk.changed && z.sparse == 1 && z.raw == 1);
    /* the third record's header damaged: refused as the peek refuses it, after two records */
    size_t off = DELTA_FRAME_HEADER + 4 * (size_t)info.chunks;
    for (uint32_t c = 0; c < 2; c++) off += get_u32(d + DELTA_FRAME_HEADER + 4 * (size_t)c);
    d[off] ^= 0xFF; /* the mode byte */
    memset(&z, 0, sizeof z);
    z.d = d;
    ferry_status_t st = delta_peek_each(codec, d, len, &info, note_chunk, &z);
    CHECK(st == FERRY_ERR_CORRUPT && ferry_delta_peek(codec, d, len, &pk) == st && z.n == 2);
    free(d);
}

/* Chunk sums carried from one encode to the next: the next encode writes
 * the same bytes without hashing its base; a wrong sum gets a delta
 * refused, never applied wrongly. */
static void test_chunk_sums(void) {
    enum { N = 5000, C = 1024, K = 5 };
    static uint16_t v0[N], v1[N], v2[N], region[N];
    for (int i = 0; i < N; i++) v0[i] = v1[i] = v2[i] = (uint16_t)(0x3C00 + rng_next() % 2048);
    for (int i = 0; i < N; i += 13) v1[i]++;
    for (int i = 0; i < N; i += 7) v2[i] = (uint16_t)(v1[i] - 1);
    for (int i = 2 * C; i < 3 * C; i++) v2[i] = (uint16_t)rng_next(); /* chunk 2 goes raw */
    CHECK_EQ_INT(ferry_delta_chunk_count(N, C), K);
    CHECK_EQ_INT(ferry_delta_chunk_count(N, 0), 1);
    CHECK_EQ_INT(ferry_delta_chunk_count(N, 1000), 0);
    uint64_t sums1[K], sums2[K];
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS | FERRY_DELTA_PARAM_NEXT_CHUNK_SUMS,
                              .dtype = FERRY_DTYPE_BF16, .chunk_elems = C, .next_chunk_sums = sums1};
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, N, C), la, lb;
    uint8_t *a = malloc(cap), *b = malloc(cap);
    CHECK_OK(ferry_delta_encode(codec, &p, v0, v1, N, a, cap, &la), ferry_delta_codec_detail(codec));
    for (int i = 0; i < K; i++) {
        uint32_t n = i < K - 1 ? C : N - (K - 1) * C;
        CHECK(sums1[i] == XXH3_64bits(v1 + i * C, (size_t)n * 2));
    }
    /* v1 -> v2 with v1's sums given, and without */
    p.next_chunk_sums = sums2;
    CHECK_OK(ferry_delta_encode(codec, &p, v1, v2, N, a, cap, &la), ferry_delta_codec_detail(codec));
    p.field_mask |= FERRY_DELTA_PARAM_BASE_CHUNK_SUMS;
    p.base_chunk_sums = sums1;
    CHECK_OK(ferry_delta_encode(codec, &p, v1, v2, N, b, cap, &lb), ferry_delta_codec_detail(codec));
    CHECK(la == lb && memcmp(a, b, la) == 0);
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_inspect(codec, b, lb, &info), ferry_delta_codec_detail(codec));
    CHECK_EQ_INT(info.chunks_raw, 1);
    /* a wrong base sum: the raw chunk refuses the right base, nothing changes */
    uint64_t wrong[K];
    memcpy(wrong, sums1, sizeof wrong);
    wrong[2] ^= 1;
    p.base_chunk_sums = wrong;
    CHECK_OK(ferry_delta_encode(codec, &p, v1, v2, N, b, cap, &lb), ferry_delta_codec_detail(codec));
    memcpy(region, v1, sizeof region);
    CHECK_FAILS(ferry_delta_apply(codec, b, lb, region, N, FERRY_DELTA_ANY_BASE, NULL), FERRY_ERR_MISMATCH,
                ferry_delta_codec_detail(codec), "base checksum differs");
    CHECK(memcmp(region, v1, sizeof region) == 0);
    /* bad arguments */
    p.base_chunk_sums = NULL;
    CHECK_FAILS(ferry_delta_encode(codec, &p, v1, v2, N, b, cap, &lb), FERRY_ERR_INVALID_ARGUMENT,
                ferry_delta_codec_detail(codec), "chunk sums");
    CHECK_FAILS(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, FERRY_DELTA_BASE_SUM_GIVEN, v1, v2, C, b, cap,
                                         &lb, NULL, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_delta_codec_detail(codec), "needs base_sum");
    CHECK_FAILS(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, 4, v1, v2, C, b, cap, &lb, NULL, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_delta_codec_detail(codec), "flags 0x4");
    free(a), free(b);
}

/* chunks encoded one by one and assembled give the same delta; chunks
 * applied one by one can be rolled back */
static void test_chunk_api(void) {
    enum { N = 5000, C = 1024 };
    uint16_t base[N], next[N], region[N];
    size_t len;
    uint8_t *d = make_delta(base, next, N, &len);
    const void *recs[5];
    size_t lens[5];
    uint8_t *bufs[5];
    for (uint32_t i = 0; i < 5; i++) {
        uint32_t n = i < 4 ? C : N - 4 * C;
        size_t cap = ferry_delta_chunk_bound(FERRY_DTYPE_BF16, n);
        bufs[i] = malloc(cap);
        CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, 0, base + i * C, next + i * C, n, bufs[i], cap,
                                          &lens[i], NULL, NULL),
                 ferry_delta_codec_detail(codec));
        recs[i] = bufs[i];
    }
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS | FERRY_DELTA_PARAM_VERSIONS,
                              .dtype = FERRY_DTYPE_BF16, .chunk_elems = C, .base_version = 3, .next_version = 4};
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, N, C), l2;
    uint8_t *d2 = malloc(cap);
    CHECK_OK(ferry_delta_assemble(codec, &p, N, recs, lens, d2, cap, &l2), ferry_delta_codec_detail(codec));
    /* make_delta used 3000 elements; re-encode 5000 whole for comparison */
    uint8_t *d3 = malloc(cap);
    size_t l3;
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, N, d3, cap, &l3), ferry_delta_codec_detail(codec));
    CHECK(l2 == l3 && memcmp(d2, d3, l2) == 0);

    memcpy(region, base, sizeof region);
    for (uint32_t i = 0; i < 5; i++) {
        const void *rec;
        size_t rl;
        CHECK_OK(ferry_delta_chunk_get(codec, d2, l2, i, &rec, &rl), ferry_delta_codec_detail(codec));
        CHECK(rl == lens[i]);
        CHECK_OK(ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, rec, rl, region + i * C, i < 4 ? C : N - 4 * C),
                 ferry_delta_codec_detail(codec));
    }
    CHECK(memcmp(region, next, sizeof region) == 0);
    ferry_delta_codec_rollback(codec);
    CHECK(memcmp(region, base, sizeof region) == 0);
    /* after a commit nothing is undone */
    for (uint32_t i = 0; i < 5; i++) {
        const void *rec;
        size_t rl;
        CHECK_OK(ferry_delta_chunk_get(codec, d2, l2, i, &rec, &rl), ferry_delta_codec_detail(codec));
        CHECK_OK(ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, rec, rl, region + i * C, i < 4 ? C : N - 4 * C),
                 ferry_delta_codec_detail(codec));
    }
    ferry_delta_codec_commit(codec);
    ferry_delta_codec_rollback(codec);
    CHECK(memcmp(region, next, sizeof region) == 0);
    CHECK_FAILS(ferry_delta_chunk_get(codec, d2, l2, 5, &recs[0], &lens[0]), FERRY_ERR_INVALID_ARGUMENT,
                ferry_delta_codec_detail(codec), "chunk 5");
    for (int i = 0; i < 5; i++) free(bufs[i]);
    free(d), free(d2), free(d3);
}

/* the vector and scalar block kernels agree on every width and threshold */
static void test_kernels(void) {
    delta_masks_fn kernels[4];
    size_t nk = delta_masks_kernels(kernels, 4);
    CHECK(nk >= 1 && kernels[nk - 1] == delta_masks_scalar && kernels[0] == delta_masks_at(delta_level_best()));
    /* several blocks per call, the last one partial at times */
    static uint8_t base[5 * 64 * 4], next[5 * 64 * 4];
    for (int rep = 0; rep < 6000; rep++) {
        delta_masks_fn fast = kernels[(size_t)rep % nk];
        uint32_t w = (uint32_t[]){1, 2, 4}[rep / 4 % 3];
        uint32_t n = rep % 5 ? 64 * (1 + (uint32_t)(rng_next() % 5)) : 1 + (uint32_t)(rng_next() % 320);
        fill_random(base, (size_t)n * w);
        memcpy(next, base, (size_t)n * w);
        for (uint32_t i = 0; i < n * w; i++)
            if (rng_next() % 8 == 0) next[i] ^= (uint8_t)rng_next();
        uint32_t thr[7], nthr = (uint32_t)(rng_next() % 8), stride = 7 + (uint32_t)(rng_next() % 3);
        for (uint32_t j = 0; j < nthr; j++) { /* mostly in range; also 0, the top, and beyond the width */
            uint32_t edge[5] = {0, mag_mask(w), mag_mask(w) + 1, 0xFFFFFFFFu, w < 4 ? 1u << (8 * w) : 0x80000001u};
            thr[j] = rng_next() % 4 ? 1 + (uint32_t)(rng_next() % mag_mask(w)) : edge[rng_next() % 5];
        }
        uint64_t c1[5], c2[5], g1[5 * 9], g2[5 * 9];
        fast(base, next, w, n, thr, nthr, c1, g1, stride);
        delta_masks_scalar(base, next, w, n, thr, nthr, c2, g2, stride);
        for (uint32_t b = 0; 64 * b < n; b++) {
            CHECK(c1[b] == c2[b]);
            for (uint32_t j = 0; j < nthr; j++) CHECK(g1[b * stride + j] == g2[b * stride + j]);
        }
        /* thresholds only, no next */
        fast(base, NULL, w, n, thr, nthr, NULL, g1, stride);
        for (uint32_t b = 0; 64 * b < n; b++)
            for (uint32_t j = 0; j < nthr; j++) CHECK(g1[b * stride + j] == g2[b * stride + j]);
    }
    /* select_bit against a plain loop */
    for (int rep = 0; rep < 100000; rep++) {
        uint64_t m = rng_next() & rng_next();
        if (!m) continue;
        uint32_t r = (uint32_t)(rng_next() % (uint64_t)__builtin_popcountll(m)), want = 0, seen = 0;
        for (uint32_t b = 0; b < 64; b++)
            if ((m >> b) & 1) {
                if (seen == r) {
                    want = b;
                    break;
                }
                seen++;
            }
        CHECK_EQ_INT(select_bit(m, r), want);
    }
}

/* delta files: frames for bf16, whole tensors (with their checksums) for
 * dtypes the codec does not take; all or nothing; the file's base version */
/* Encodes with the codec's kernels as they are; the caller sets them. */
static uint8_t *encode_with(ferry_dtype_t dt, const void *base, const void *next, uint64_t n, uint32_t chunk,
                            size_t *len) {
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS, .dtype = dt, .chunk_elems = chunk};
    size_t cap = ferry_delta_bound(dt, n, chunk);
    uint8_t *d = malloc(cap);
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, n, d, cap, len), ferry_delta_codec_detail(codec));
    return d;
}

/* Every kernel level writes exactly the generic level's bytes: a delta
 * must not depend on the CPU that made it. */
static void test_encoders(void) {
    const size_t cap = 200000;
    uint32_t *base = malloc(cap * 4), *next = malloc(cap * 4);
    static const ferry_dtype_t dts[] = {FERRY_DTYPE_BF16, FERRY_DTYPE_F16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3};
    for (int rep = 0; rep < 300; rep++) {
        ferry_dtype_t dt = dts[rep % 4];
        uint32_t w = delta_width(dt);
        uint64_t n = rep % 7 == 0 ? 1 + rng_next() % 100 : 1 + rng_next() % (rep % 4 == 2 ? cap / 4 : cap);
        uint32_t chunk = 1u << (10 + rng_next() % 8);
        uint32_t every = (uint32_t[]){1, 2, 7, 50, 300, 100000}[rep % 6];
        for (uint64_t i = 0; i < n; i++) {
            /* weights near N(0, 0.02) mostly (for 16-bit elements), every bit pattern at times */
            uint32_t b = rep % 5 == 0 || w != 2
                             ? (uint32_t)rng_next()
                             : 0x3A00 + (uint32_t)(rng_next() % 0x600) + (uint32_t)(rng_next() % 2) * 0x8000;
            uint32_t x = b;
            if (rng_next() % every == 0) x = rng_next() % 9 ? b + (rng_next() % 2 ? 1 : -1) : (uint32_t)rng_next();
            elem_put((uint8_t *)base, w, i, b);
            elem_put((uint8_t *)next, w, i, x);
        }
        size_t l1 = 0;
        uint8_t *d1 = NULL;
        for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
            if (!delta_codec_level(codec, (delta_level_t)l)) continue;
            size_t l2;
            uint8_t *d2 = encode_with(dt, base, next, n, chunk, &l2);
            if (!d1) {
                d1 = d2, l1 = l2;
                continue;
            }
            CHECK_EQ_INT(l1, l2);
            CHECK(memcmp(d1, d2, l1) == 0);
            free(d2);
        }
        free(d1);
    }
    delta_codec_level(codec, delta_level_best());
    free(base), free(next);
}

static void test_delta_file(void) {
    enum { N = 3000 };
    static uint16_t wb[N], wn[N], wr[N];
    int32_t ib[64], in[64], ir[64];
    for (int i = 0; i < N; i++) wb[i] = wn[i] = (uint16_t)(0x3C00 + i % 700);
    for (int i = 0; i < N; i += 31) wn[i]++;
    for (int i = 0; i < 64; i++) ib[i] = i, in[i] = i * 3;
    ferry_tensor_ref_t base[2] = {{.name = "w", .dtype = FERRY_DTYPE_BF16, .ndim = 1, .shape = {N}, .data = wb, .bytes = sizeof wb},
                                  {.name = "step", .dtype = FERRY_DTYPE_I32, .ndim = 1, .shape = {64}, .data = ib, .bytes = sizeof ib}};
    ferry_tensor_ref_t next[2] = {base[0], base[1]}, reg[2] = {base[0], base[1]};
    next[0].data = wn, next[1].data = in, reg[0].data = wr, reg[1].data = ir;
    size_t cap = ferry_delta_file_bound(next, 2), len;
    uint8_t *f = malloc(cap);
    uint64_t changed;
    CHECK_OK(ferry_delta_file_build(ctx, base, next, 2, 7, 8, f, cap, &len, &changed), ferry_ctx_error(ctx));
    memcpy(wr, wb, sizeof wr), memcpy(ir, ib, sizeof ir);
    CHECK_OK(ferry_delta_file_apply(ctx, f, len, reg, 2, 7), ferry_ctx_error(ctx));
    CHECK(!memcmp(wr, wn, sizeof wr) && !memcmp(ir, in, sizeof ir));
    /* the whole I32 tensor is checked: one byte changed in it is refused, nothing applied */
    ferry_safetensors_t *st;
    CHECK_OK(ferry_safetensors_parse(ctx, f, len, &st), ferry_ctx_error(ctx));
    size_t at = (size_t)((const uint8_t *)ferry_safetensors_find(st, "step")->data - f);
    ferry_safetensors_destroy(st);
    f[at + 5] ^= 0x40;
    memcpy(wr, wb, sizeof wr), memcpy(ir, ib, sizeof ir);
    CHECK_FAILS(ferry_delta_file_apply(ctx, f, len, reg, 2, 7), FERRY_ERR_CORRUPT, ferry_ctx_error(ctx),
                "\"step\" does not match its checksum");
    CHECK(!memcmp(wr, wb, sizeof wr) && !memcmp(ir, ib, sizeof ir));
    f[at + 5] ^= 0x40;
    /* a file of whole tensors only still names its base */
    size_t cap2 = ferry_delta_file_bound(&next[1], 1), len2;
    uint8_t *f2 = malloc(cap2);
    CHECK_OK(ferry_delta_file_build(ctx, &base[1], &next[1], 1, 5, 6, f2, cap2, &len2, NULL), ferry_ctx_error(ctx));
    CHECK_FAILS(ferry_delta_file_apply(ctx, f2, len2, &reg[1], 1, 99), FERRY_ERR_MISMATCH, ferry_ctx_error(ctx),
                "from version 5, not 99");
    CHECK(!memcmp(ir, ib, sizeof ir));
    free(f), free(f2);
}

/* A copy of delta file f with metadata key set to value (NULL: removed). */
static uint8_t *with_meta(const uint8_t *f, size_t len, const char *key, const char *value, size_t *out_len) {
    ferry_safetensors_t *st;
    ferry_safetensors_writer_t *w;
    CHECK_OK(ferry_safetensors_parse(ctx, f, len, &st), ferry_ctx_error(ctx));
    CHECK_OK(ferry_safetensors_writer_create(ctx, &w), ferry_ctx_error(ctx));
    for (size_t i = 0; i < ferry_safetensors_count(st); i++) {
        const ferry_safetensors_tensor_t *t = ferry_safetensors_at(st, i);
        CHECK_OK(ferry_safetensors_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data, t->bytes), "");
    }
    for (size_t k = 0; ferry_safetensors_meta_key(st, k); k++) {
        const char *mk = ferry_safetensors_meta_key(st, k);
        if (strcmp(mk, key)) CHECK_OK(ferry_safetensors_writer_meta(w, mk, ferry_safetensors_meta(st, mk)), "");
    }
    if (value) CHECK_OK(ferry_safetensors_writer_meta(w, key, value), "");
    size_t cap = ferry_safetensors_writer_size(w);
    uint8_t *o = malloc(cap);
    CHECK_OK(ferry_safetensors_writer_write(w, o, cap, out_len), ferry_ctx_error(ctx));
    ferry_safetensors_writer_destroy(w);
    ferry_safetensors_destroy(st);
    return o;
}

/* NEXT's metadata travels in "next_metadata" (in its order); a malformed one
 * or a base_version that is not plain digits is refused with nothing
 * written; the safetensors writer's header alone is the full file's prefix. */
static void test_delta_file_meta(void) {
    enum { N = 3000 };
    static uint16_t wb[N], wn[N], wr[N];
    for (int i = 0; i < N; i++) wb[i] = wn[i] = (uint16_t)(0x3C00 + i % 700);
    for (int i = 0; i < N; i += 17) wn[i]--;
    ferry_tensor_ref_t base = {.name = "w", .dtype = FERRY_DTYPE_BF16, .ndim = 1, .shape = {N}, .data = wb,
                               .bytes = sizeof wb};
    ferry_tensor_ref_t next = base, reg = base;
    next.data = wn, reg.data = wr;
    const ferry_delta_meta_t meta[3] = {{"step", "5"}, {"format", "pt"}, {"note", "a \"quoted\"\tvalue"}};
    size_t cap = ferry_delta_file_bound_meta(&next, 1, meta, 3), len;
    CHECK(cap > ferry_delta_file_bound(&next, 1));
    uint8_t *f = malloc(cap);
    uint64_t changed;
    CHECK_OK(ferry_delta_file_build_meta(ctx, &base, &next, 1, 4, 5, meta, 3, f, cap, &len, &changed),
             ferry_ctx_error(ctx));
    CHECK_EQ_INT(changed, (N + 16) / 17);
    ferry_safetensors_t *st;
    CHECK_OK(ferry_safetensors_parse(ctx, f, len, &st), ferry_ctx_error(ctx));
    CHECK(!strcmp(ferry_safetensors_meta(st, "next_metadata"),
                  "{\"step\":\"5\",\"format\":\"pt\",\"note\":\"a \\\"quoted\\\"\\tvalue\"}"));
    ferry_safetensors_destroy(st);
    memcpy(wr, wb, sizeof wr);
    CHECK_OK(ferry_delta_file_apply(ctx, f, len, &reg, 1, 4), ferry_ctx_error(ctx));
    CHECK(!memcmp(wr, wn, sizeof wr));
    /* repeated keys are refused */
    const ferry_delta_meta_t twice[2] = {{"step", "5"}, {"step", "6"}};
    CHECK_FAILS(ferry_delta_file_build_meta(ctx, &base, &next, 1, 4, 5, twice, 2, f, cap, &len, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), "repeated");
    CHECK_OK(ferry_delta_file_build_meta(ctx, &base, &next, 1, 4, 5, meta, 3, f, cap, &len, NULL),
             ferry_ctx_error(ctx));
    /* malformed metadata: refused, nothing applied */
    static const char *const bad_meta[] = {"[1]", "{\"step\":5}", "{\"a\":\"1\",\"a\":\"2\"}", "not json"};
    for (size_t i = 0; i < sizeof bad_meta / sizeof *bad_meta; i++) {
        size_t bl;
        uint8_t *b = with_meta(f, len, "next_metadata", bad_meta[i], &bl);
        memcpy(wr, wb, sizeof wr);
        CHECK_FAILS(ferry_delta_file_apply(ctx, b, bl, &reg, 1, 4), FERRY_ERR_CORRUPT, ferry_ctx_error(ctx),
                    "next_metadata");
        CHECK(!memcmp(wr, wb, sizeof wr));
        free(b);
    }
    static const char *const bad_versions[] = {"-4", " 4", "+4", "4x", "", "18446744073709551620"};
    for (size_t i = 0; i < sizeof bad_versions / sizeof *bad_versions; i++) {
        size_t bl;
        uint8_t *b = with_meta(f, len, "base_version", bad_versions[i], &bl);
        memcpy(wr, wb, sizeof wr);
        CHECK_FAILS(ferry_delta_file_apply(ctx, b, bl, &reg, 1, 4), FERRY_ERR_CORRUPT, ferry_ctx_error(ctx),
                    "base_version");
        CHECK(!memcmp(wr, wb, sizeof wr));
        free(b);
    }
    /* the header alone is the whole file's first bytes; the data follows in the order added */
    ferry_safetensors_writer_t *w;
    CHECK_OK(ferry_safetensors_writer_create(ctx, &w), "");
    CHECK_OK(ferry_safetensors_writer_add(w, "a", FERRY_DTYPE_BF16, 1, (int64_t[]){N}, wn, sizeof wn), "");
    CHECK_OK(ferry_safetensors_writer_add(w, "b", FERRY_DTYPE_BF16, 1, (int64_t[]){N}, wb, sizeof wb), "");
    CHECK_OK(ferry_safetensors_writer_meta(w, "step", "5"), "");
    size_t size = ferry_safetensors_writer_size(w), full, head;
    uint8_t *x = malloc(size), *y = malloc(size);
    CHECK_OK(ferry_safetensors_writer_write(w, x, size, &full), ferry_ctx_error(ctx));
    CHECK_FAILS(ferry_safetensors_writer_header(w, y, 16, &head), FERRY_ERR_LIMIT, ferry_ctx_error(ctx), "room");
    CHECK_OK(ferry_safetensors_writer_header(w, y, size, &head), ferry_ctx_error(ctx));
    CHECK(head + 2 * sizeof wn == full && !memcmp(x, y, head));
    memcpy(y + head, wn, sizeof wn);
    memcpy(y + head + sizeof wn, wb, sizeof wb);
    CHECK(!memcmp(x, y, full));
    ferry_safetensors_writer_destroy(w);
    free(x), free(y), free(f);
}

int main(void) {
    CHECK_OK(ferry_ctx_create(NULL, &ctx, NULL, 0), "ctx");
    CHECK_OK(ferry_delta_codec_create(ctx, &codec), "codec");
    test_delta_file();
    test_delta_file_meta();
    test_peek_reads_headers();
    test_peek_each();
    test_kernels();
    test_encoders();
    /* the whole suite at every kernel level this CPU runs, best last */
    for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
        if (!delta_codec_level(codec, (delta_level_t)l)) {
            printf("kernel level %s: not on this CPU\n", delta_level_name((delta_level_t)l));
            continue;
        }
        test_round_trips();
        test_special_values();
        test_refusals();
        test_chunk_api();
        test_chunk_sums();
        test_realistic();
    }
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    return 0;
}
