/* Golden deltas pin formats 1 and 2 (fmt2-*: the same kinds of regions,
 * and larger ones whose chunks have several sub-blocks): small regions of every dtype the codec takes
 * (tests/golden/delta/NAME.base, NAME.next: the raw little-endian element
 * bytes; NAME.delta: the frame), with sparse, raw and unchanged chunks and
 * several chunks each. The encoder at every kernel level this CPU runs must
 * write exactly NAME.delta from NAME.base and NAME.next, and the decoder must
 * turn NAME.base into NAME.next with it. A change to the bytes the encoder
 * writes, or to what the decoder accepts, fails here.
 * FERRY_UPDATE_GOLDEN=1 makes the regions again (from a fixed seed) and
 * rewrites all three files; review their diff before committing. */
#include "check.h"
#include "codec/codec_internal.h"

typedef enum { GEN_WEIGHTS, GEN_MIXED, GEN_SPECIAL, GEN_DENSE, GEN_BINADES } gen_t;

typedef struct golden_case {
    const char *name;
    ferry_dtype_t dtype;
    uint32_t elems, chunk, classes; /* classes 0: the default */
    gen_t gen;
    uint32_t want_unchanged, want_sparse, want_raw; /* chunk kinds the case is made to have */
    uint32_t format;                                /* 0: the default, 1 */
} golden_case_t;

static const golden_case_t cases[] = {
    {"bf16-chunks", FERRY_DTYPE_BF16, 4100, 1024, 0, GEN_MIXED, 2, 2, 1, 0},
    {"bf16-weights", FERRY_DTYPE_BF16, 3000, 1024, 0, GEN_WEIGHTS, 0, 3, 0, 0},
    {"bf16-one-class", FERRY_DTYPE_BF16, 2000, 1024, 1, GEN_WEIGHTS, 0, 2, 0, 0},
    {"bf16-special", FERRY_DTYPE_BF16, 1500, 1024, 0, GEN_SPECIAL, 0, 2, 0, 0},
    {"f16-chunks", FERRY_DTYPE_F16, 3100, 1024, 0, GEN_MIXED, 1, 2, 1, 0},
    {"f32-chunks", FERRY_DTYPE_F32, 3100, 1024, 0, GEN_MIXED, 1, 2, 1, 0},
    {"f8e4m3-chunks", FERRY_DTYPE_F8_E4M3, 4096, 1024, 0, GEN_MIXED, 1, 2, 1, 0},
    {"f8e5m2-weights", FERRY_DTYPE_F8_E5M2, 2500, 1024, 0, GEN_WEIGHTS, 0, 3, 0, 0},
    /* format 2: these regions come after format 1's, so the fixed seed
       makes format 1's the same as ever */
    {"fmt2-bf16-chunks", FERRY_DTYPE_BF16, 4100, 1024, 0, GEN_MIXED, 2, 2, 1, 2},
    {"fmt2-bf16-dense", FERRY_DTYPE_BF16, 20000, 16384, 0, GEN_DENSE, 0, 2, 0, 2},       /* S = 12: 4 sub-blocks */
    {"fmt2-bf16-one-class", FERRY_DTYPE_BF16, 2000, 1024, 1, GEN_WEIGHTS, 0, 2, 0, 2},
    {"fmt2-bf16-special", FERRY_DTYPE_BF16, 1500, 1024, 0, GEN_SPECIAL, 0, 2, 0, 2},
    {"fmt2-f16-chunks", FERRY_DTYPE_F16, 3100, 1024, 0, GEN_MIXED, 1, 2, 1, 2},
    {"fmt2-f32-dense", FERRY_DTYPE_F32, 9000, 8192, 0, GEN_DENSE, 0, 2, 0, 2},          /* S = 12: 2 sub-blocks */
    {"fmt2-f8e4m3-chunks", FERRY_DTYPE_F8_E4M3, 4096, 1024, 0, GEN_MIXED, 1, 2, 1, 2},
    {"fmt2-f8e5m2-weights", FERRY_DTYPE_F8_E5M2, 70000, 65536, 0, GEN_WEIGHTS, 0, 2, 0, 2}, /* S = 15: 2 sub-blocks */
    {"fmt2-bf16-binades", FERRY_DTYPE_BF16, 40000, 32768, 0, GEN_BINADES, 0, 2, 0, 2}, /* 4 classes, S = 13: 4 sub-blocks */
};

/* The bit pattern of a weight near N(0, 0.02): sign, an exponent a few
 * binades below 1, any mantissa; for 8-bit floats the exponent's top. */
static uint32_t weight(ferry_dtype_t dt) {
    uint64_t r = rng_next();
    uint32_t sign = (uint32_t)(r & 1), mant = (uint32_t)(r >> 8);
    switch (dt) {
    case FERRY_DTYPE_BF16: return sign << 15 | (uint32_t)(0x3C + (r >> 40) % 4) << 7 | (mant & 0x7F);
    case FERRY_DTYPE_F16: return sign << 15 | (uint32_t)(9 + (r >> 40) % 4) << 10 | (mant & 0x3FF);
    case FERRY_DTYPE_F32: return sign << 31 | (uint32_t)(120 + (r >> 40) % 4) << 23 | (mant & 0x7FFFFF);
    default: return sign << 7 | (uint32_t)(1 + (r >> 40) % 4) << (dt == FERRY_DTYPE_F8_E4M3 ? 3 : 2) | (mant & 3);
    }
}

/* next = base moved by d steps of the order-preserving view (kept in range). */
static uint32_t moved(uint32_t v, uint32_t w, int64_t d) {
    uint32_t out;
    if (elem_unord(elem_ord(v, w) + d, w, &out)) return out;
    if (elem_unord(elem_ord(v, w) - d, w, &out)) return out;
    return v ^ 1u;
}

static void make(const golden_case_t *c, uint8_t *base, uint8_t *next) {
    uint32_t w = delta_width(c->dtype);
    for (uint32_t i = 0; i < c->elems; i++) {
        uint32_t b = weight(c->dtype), x = b;
        uint32_t chunk = i / c->chunk;
        uint64_t r = rng_next();
        if (c->gen == GEN_SPECIAL) {
            /* zeros of both signs, infinities and NaN payloads, changed among themselves */
            static const uint32_t sp[6] = {0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0xFFA5};
            if (r % 5 == 0) b = sp[(r >> 8) % 6];
            x = b;
            if (r % 7 == 0) x = (r >> 16) % 2 ? sp[(r >> 24) % 6] : moved(b, w, 1);
        } else if (c->gen == GEN_MIXED && chunk == 0) {
            /* unchanged */
        } else if (c->gen == GEN_MIXED && chunk == 2) {
            x = (uint32_t)rng_next() & (w == 4 ? 0xFFFFFFFFu : (1u << (8 * w)) - 1); /* all new: raw */
        } else if (c->gen == GEN_MIXED && chunk == 3) {
            if (r % 2) x = moved(b, w, (r >> 8) % 2 ? 1 : -1); /* dense: half of them */
        } else if (c->gen == GEN_BINADES) {
            /* bf16 over 8 binades, smaller ones changing more often (as
               under Adam), so that several classes pay */
            uint32_t e = (uint32_t)(r >> 40) % 8;
            b = x = (uint32_t)(r & 1) << 15 | (0x38 + e) << 7 | (uint32_t)(r >> 8 & 0x7F);
            if ((r >> 20) % 1024 < (600u >> e)) x = moved(b, w, (r >> 32) % 9 ? ((r >> 36) % 2 ? 1 : -1) : 3);
        } else if (c->gen == GEN_DENSE) {
            if (r % 10 < 3) x = moved(b, w, (r >> 8) % 9 ? ((r >> 12) % 2 ? 1 : -1) : (int64_t)((r >> 16) % 40) - 20);
        } else if (r % 31 == 0) {
            x = moved(b, w, (r >> 8) % 9 ? ((r >> 12) % 2 ? 1 : -1) : (int64_t)((r >> 16) % 40) - 20);
        }
        elem_put(base, w, i, b);
        elem_put(next, w, i, x);
    }
}

static void spill(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f && fwrite(p, 1, n, f) == n && fclose(f) == 0);
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    ferry_delta_codec_t *codec;
    CHECK_OK(ferry_delta_codec_create(ctx, &codec), "codec");
    bool update = getenv("FERRY_UPDATE_GOLDEN") && strcmp(getenv("FERRY_UPDATE_GOLDEN"), "1") == 0;
    int failed = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof *cases; ci++) {
        const golden_case_t *c = &cases[ci];
        uint32_t w = delta_width(c->dtype);
        size_t rb = (size_t)c->elems * w, nb, nn, nd;
        char pb[1024], pn[1024], pd[1024];
        snprintf(pb, sizeof pb, "%s/delta/%s.base", FERRY_TEST_GOLDEN, c->name);
        snprintf(pn, sizeof pn, "%s/delta/%s.next", FERRY_TEST_GOLDEN, c->name);
        snprintf(pd, sizeof pd, "%s/delta/%s.delta", FERRY_TEST_GOLDEN, c->name);
        ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_CHUNK_ELEMS | FERRY_DELTA_PARAM_VERSIONS,
                                  .dtype = c->dtype, .chunk_elems = c->chunk, .base_version = 41 + ci,
                                  .next_version = 42 + ci};
        if (c->classes) {
            p.field_mask |= FERRY_DELTA_PARAM_MAX_CLASSES;
            p.max_classes = c->classes;
        }
        if (c->format) {
            p.field_mask |= FERRY_DELTA_PARAM_FORMAT;
            p.format = c->format;
        }
        size_t cap = ferry_delta_bound(c->dtype, c->elems, c->chunk), len = 0;
        uint8_t *base, *next, *golden, *d = malloc(cap), *region = malloc(rb);
        if (update) {
            base = malloc(rb), next = malloc(rb);
            make(c, base, next);
            CHECK_OK(ferry_delta_encode(codec, &p, base, next, c->elems, d, cap, &len), ferry_delta_codec_detail(codec));
            spill(pb, base, rb), spill(pn, next, rb), spill(pd, d, len);
            free(base), free(next);
            printf("%s: wrote %s.{base,next,delta} (%zu-byte delta)\n", c->name, c->name, len);
        }
        base = test_read_file(pb, &nb), next = test_read_file(pn, &nn), golden = test_read_file(pd, &nd);
        if (!base || !next || !golden) {
            fprintf(stderr, "%s: missing %s, %s or %s (FERRY_UPDATE_GOLDEN=1 makes them)\n", c->name, pb, pn, pd);
            return 1;
        }
        CHECK(nb == rb && nn == rb);
        /* the chunk kinds the case stands for are there */
        ferry_delta_info_t info;
        CHECK_OK(ferry_delta_peek(codec, golden, nd, &info), ferry_delta_codec_detail(codec));
        CHECK(info.dtype == c->dtype && info.elems == c->elems && info.chunks == (c->elems + c->chunk - 1) / c->chunk);
        CHECK_EQ_INT(info.format, c->format ? c->format : 1);
        if (info.chunks_unchanged != c->want_unchanged || info.chunks_sparse != c->want_sparse ||
            info.chunks_raw != c->want_raw) {
            fprintf(stderr, "%s: %u unchanged, %u sparse, %u raw chunks; the case wants %u, %u, %u\n", c->name,
                    info.chunks_unchanged, info.chunks_sparse, info.chunks_raw, c->want_unchanged, c->want_sparse,
                    c->want_raw);
            failed++;
        }
        /* every kernel level writes exactly the golden bytes */
        for (int l = DELTA_LEVEL_GENERIC; l < DELTA_LEVELS; l++) {
            if (!delta_codec_level(codec, (delta_level_t)l)) continue;
            CHECK_OK(ferry_delta_encode(codec, &p, base, next, c->elems, d, cap, &len),
                     ferry_delta_codec_detail(codec));
            if (len != nd || memcmp(d, golden, nd) != 0) {
                fprintf(stderr, "%s: the %s encoder wrote %zu bytes that differ from %s (%zu bytes)\n", c->name,
                        delta_level_name((delta_level_t)l), len, pd, nd);
                failed++;
            }
            /* and every level applies them */
            memcpy(region, base, rb);
            CHECK_OK(ferry_delta_apply(codec, golden, nd, region, c->elems, p.base_version, NULL),
                     ferry_delta_codec_detail(codec));
            CHECK(memcmp(region, next, rb) == 0);
        }
        delta_codec_level(codec, delta_level_best());
        free(base), free(next), free(golden), free(d), free(region);
    }
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    if (failed) fprintf(stderr, "%d golden checks failed (a format change needs FERRY_UPDATE_GOLDEN=1 and review)\n", failed);
    return failed ? 1 : 0;
}
