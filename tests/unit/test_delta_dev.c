/* The GPU apply's stream readers (codec/delta_dev.h: the bit reader, a
 * format 1 class, a format 2 length table and sub-stream), run on the CPU
 * as the kernels run them, with the write pass's rules done plainly here
 * (a change's rank among its class's elements, within its sub-block in
 * format 2; class counts; value ranges; the result's checksum). Against
 * ferry_delta_chunk_apply: the same result for every delta, and for every
 * resealed bit flip of a few records the same verdict (applied, or refused
 * as CORRUPT or MISMATCH). CI has no GPU: this is how the GPU's decoding
 * is checked there. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/codec_internal.h"
#define DK_TABLES_ONLY
#include "codec/delta_dev.h"
#include "common/hash.h"
#include "delta_rand.h"
#include "ferry/ctx.h"
#include "synth.h"

static ferry_delta_codec_t *codec;

/* What the GPU passes decide for one sparse chunk record applied to base
 * (elems elements of width w), in place: FERRY_OK with base the result, or
 * CORRUPT / MISMATCH with base as it was. The record's checksum is good. */
static ferry_status_t gpu_rules(const uint8_t *rec, size_t len, uint32_t w, uint8_t *base, uint32_t elems) {
    delta_chunk_t h;
    ferry_errbuf_t err;
    if (delta_chunk_parse(rec, len, w, false, &h, &err) != FERRY_OK) return FERRY_ERR_CORRUPT; /* the host's peek */
    if (h.elems != elems) return FERRY_ERR_MISMATCH;
    const uint32_t K = h.classes, S = h.sub_log2;
    uint8_t *orig = malloc((size_t)elems * w + 1);
    uint32_t *rank[FERRY_DELTA_CLASSES_MAX] = {0}, nsub = S ? delta_nsub(elems, S) : 1;
    int64_t *dl[FERRY_DELTA_CLASSES_MAX] = {0};
    dk_sub_t *subs[FERRY_DELTA_CLASSES_MAX] = {0};
    CHECK(orig);
    memcpy(orig, base, (size_t)elems * w);
    bool decoded = true;
    const uint8_t *p = h.payload;
    for (uint32_t k = 0; k < K; k++) {
        const delta_class_t *q = &h.cls[k];
        dk_class_t e = {.stream = (uint64_t)(uintptr_t)p, .change0 = 0, .lower = q->lower, .count = q->count,
                        .changed = q->changed, .nonunit = q->nonunit, .len = q->len, .k_gap = q->k_gap,
                        .k_nu = q->k_nu, .k_mag = q->k_mag, .len_bits = q->len_bits,
                        .nsub = S && q->changed ? nsub : 0};
        p += q->len;
        /* the slots delta_cuda.c reserves */
        uint64_t slots = q->changed;
        if (e.nsub) {
            uint64_t table = delta_table_bytes(nsub, q->len_bits);
            slots = table > q->len ? 0 : (q->len - table) * 8 / (2 + q->k_gap);
        }
        rank[k] = calloc(slots + 1, sizeof *rank[k]);
        dl[k] = calloc(slots + 1, sizeof *dl[k]);
        subs[k] = calloc(nsub, sizeof *subs[k]);
        CHECK(rank[k] && dl[k] && subs[k]);
        if (!e.nsub) {
            if (!S) decoded &= decode_class(&e, rank[k], dl[k]);
            continue;
        }
        uint64_t slot_end, class_end;
        if (!dk_table(&e, k, true, subs[k], &slot_end, &class_end)) {
            decoded = false;
            continue;
        }
        CHECK(slot_end <= class_end && class_end == slots); /* the host's reservation holds every sub-stream's */
        uint32_t sum = 0, nu_sum = 0;
        for (uint32_t b = 0; b < nsub; b++) {
            uint32_t nu = 0;
            if (!decode_sub(&e, &subs[k][b], 1u << S, rank[k] + subs[k][b].slot, dl[k] + subs[k][b].slot, &nu)) {
                decoded = false;
                break;
            }
            CHECK(subs[k][b].slot + subs[k][b].count <= slot_end);
            sum += subs[k][b].count;
            nu_sum += nu;
        }
        decoded &= sum == q->changed && nu_sum == q->nonunit; /* dk_place's check of the sums */
    }
    ferry_status_t st = FERRY_OK;
    if (!decoded) {
        st = FERRY_ERR_CORRUPT;
        goto blame;
    }
    /* the write pass: each element's class and rank (local to its sub-block
       in format 2); a change is written where its rank is met */
    uint64_t seen[FERRY_DELTA_CLASSES_MAX] = {0}, before[FERRY_DELTA_CLASSES_MAX] = {0};
    uint32_t ci[FERRY_DELTA_CLASSES_MAX] = {0}, placed[FERRY_DELTA_CLASSES_MAX] = {0}, cend[FERRY_DELTA_CLASSES_MAX];
    const uint32_t *rk[FERRY_DELTA_CLASSES_MAX];
    const int64_t *dd[FERRY_DELTA_CLASSES_MAX];
    const uint32_t shift = delta_bucket_shift(w);
    for (uint32_t i = 0; i < elems; i++) {
        if (i == 0 || (S && (i & ((1u << S) - 1)) == 0))
            for (uint32_t k = 0; k < K; k++) { /* a new run of ranks */
                if (i) placed[k] += ci[k];
                const dk_sub_t *sb = S && h.cls[k].changed ? &subs[k][i >> S] : NULL;
                rk[k] = rank[k] + (sb ? sb->slot : 0);
                dd[k] = dl[k] + (sb ? sb->slot : 0);
                cend[k] = sb ? sb->count : S ? 0 : h.cls[k].changed;
                ci[k] = 0;
                before[k] = 0;
            }
        uint32_t v = elem_get(base, w, i), b = (v & mag_mask(w)) >> shift, k = 0;
        for (uint32_t j = 1; j < K; j++) k += b >= h.cls[j].lower >> shift;
        if (ci[k] < cend[k] && rk[k][ci[k]] == before[k]) {
            uint32_t nv;
            if (!elem_unord(elem_ord(v, w) + dd[k][ci[k]], w, &nv)) {
                st = FERRY_ERR_CORRUPT;
                goto blame;
            }
            elem_put(base, w, i, nv);
            ci[k]++;
        }
        before[k]++;
        seen[k]++;
    }
    for (uint32_t k = 0; k < K && st == FERRY_OK; k++) {
        if (seen[k] != h.cls[k].count) st = FERRY_ERR_MISMATCH;
        else if (placed[k] + ci[k] != h.cls[k].changed) st = FERRY_ERR_CORRUPT;
    }
    if (st == FERRY_OK && XXH3_64bits(base, (size_t)elems * w) != h.next_sum) st = FERRY_ERR_CORRUPT;
blame: /* restored; a corrupt verdict on a region that is not the base is a mismatch */
    if (st != FERRY_OK) {
        memcpy(base, orig, (size_t)elems * w);
        if (st == FERRY_ERR_CORRUPT && XXH3_64bits(base, (size_t)elems * w) != h.base_sum) st = FERRY_ERR_MISMATCH;
    }
    for (uint32_t k = 0; k < K; k++) free(rank[k]), free(dl[k]), free(subs[k]);
    free(orig);
    return st;
}

/* Every chunk of a delta: the GPU rules and the CPU apply agree. */
static void check_delta(const uint8_t *d, size_t len, uint32_t w, const uint8_t *base, const uint8_t *next,
                        uint64_t n, const char *what) {
    ferry_delta_info_t info;
    CHECK_OK(ferry_delta_peek(codec, d, len, &info), ferry_delta_codec_detail(codec));
    uint8_t *region = malloc(n * w + 1);
    CHECK(region);
    memcpy(region, base, n * w);
    size_t sparse = 0;
    for (uint32_t c = 0; c < info.chunks; c++) {
        const void *rec;
        size_t rl;
        CHECK_OK(ferry_delta_chunk_get(codec, d, len, c, &rec, &rl), ferry_delta_codec_detail(codec));
        if (((const uint8_t *)rec)[0] != CHUNK_SPARSE) continue; /* raw and unchanged chunks: no streams */
        uint32_t elems = get_u32((const uint8_t *)rec + 4);
        CHECK_EQ_INT(gpu_rules(rec, rl, w, region + (size_t)c * info.chunk_elems * w, elems), FERRY_OK);
        sparse++;
    }
    for (uint32_t c = 0; c < info.chunks; c++) { /* the other chunks as the delta has them */
        uint64_t at = (uint64_t)c * info.chunk_elems, e = n - at < info.chunk_elems ? n - at : info.chunk_elems;
        const void *rec;
        size_t rl;
        CHECK_OK(ferry_delta_chunk_get(codec, d, len, c, &rec, &rl), ferry_delta_codec_detail(codec));
        if (((const uint8_t *)rec)[0] != CHUNK_SPARSE) memcpy(region + at * w, next + at * w, e * w);
    }
    CHECK(memcmp(region, next, n * w) == 0);
    printf("%s, format %u: %zu sparse chunks decoded by the GPU's readers as the CPU applies them\n", what,
           info.format, sparse);
    free(region);
}

/* A delta of n elements, format fmt, chunks of chunk elements. */
static uint8_t *encode(ferry_dtype_t dt, const void *base, const void *next, uint64_t n, uint32_t fmt, uint32_t chunk,
                       size_t *len) {
    size_t cap = ferry_delta_bound(dt, n, chunk);
    uint8_t *d = malloc(cap);
    CHECK(d);
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_FORMAT | (chunk ? FERRY_DELTA_PARAM_CHUNK_ELEMS : 0),
                              .dtype = dt, .format = fmt, .chunk_elems = chunk};
    CHECK_OK(ferry_delta_encode(codec, &p, base, next, n, d, cap, len), ferry_delta_codec_detail(codec));
    return d;
}

/* Random patterns of width w, a share p changed (a tenth by up to 300 steps). */
static void make_random(uint8_t *base, uint8_t *next, uint32_t w, uint64_t n, double p, uint64_t seed) {
    delta_make_random(base, next, w, n, p, 299, seed);
}

int main(void) {
    ferry_ctx_t *ctx;
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(ctx, &codec) == FERRY_OK);
    /* synthetic Adam steps at three learning rates, 3 chunks (the last partial) */
    const uint64_t n = (2u << 20) + 12345;
    uint16_t *b16 = malloc(n * 2), *n16 = malloc(n * 2);
    float *a = malloc(4 * n * sizeof(float));
    CHECK(b16 && n16 && a);
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    for (int l = 0; l < 3; l++) {
        delta_synth_t s;
        delta_synth_init(&s, n, false, lrs[l], 7, a, a + n, a + 2 * n, a + 3 * n);
        for (int st = 0; st < 3; st++) delta_synth_step_range(&s, 0, n), delta_synth_next(&s);
        delta_synth_bf16(&s, b16, 0, n);
        delta_synth_step_range(&s, 0, n);
        delta_synth_next(&s);
        delta_synth_bf16(&s, n16, 0, n);
        for (uint32_t fmt = 1; fmt <= 2; fmt++) {
            size_t len;
            uint8_t *d = encode(FERRY_DTYPE_BF16, b16, n16, n, fmt, 0, &len);
            char what[64];
            snprintf(what, sizeof what, "bf16 Adam lr %.0e", lrs[l]);
            check_delta(d, len, 2, (uint8_t *)b16, (uint8_t *)n16, n, what);
            free(d);
        }
    }
    /* random changes with non-unit ones, every width, small chunks */
    static const struct {
        ferry_dtype_t dt;
        double p;
        uint32_t chunk;
    } r[] = {{FERRY_DTYPE_F32, 0.05, 16384}, {FERRY_DTYPE_F16, 0.3, 8192}, {FERRY_DTYPE_F8_E4M3, 0.1, 65536},
             {FERRY_DTYPE_BF16, 0.02, 4096}};
    uint8_t *rb = malloc(300000 * 4), *rn = malloc(300000 * 4);
    CHECK(rb && rn);
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        uint32_t w = delta_width(r[i].dt);
        make_random(rb, rn, w, 300000, r[i].p, 100 + i);
        for (uint32_t fmt = 1; fmt <= 2; fmt++) {
            size_t len;
            uint8_t *d = encode(r[i].dt, rb, rn, 300000, fmt, r[i].chunk, &len);
            check_delta(d, len, w, rb, rn, 300000, ferry_dtype_name(r[i].dt));
            free(d);
        }
    }
    /* every bit of a record flipped and the record resealed: the GPU's rules
       and the CPU apply give the same verdict, and the same result */
    /* (the last case: 32768 elements at 20%, four sub-blocks of 2^13, every
       7th bit) */
    static const struct {
        uint32_t fmt, elems, stride;
        double p;
    } fl[] = {{1, 16384, 1, 0.03}, {2, 16384, 1, 0.03}, {2, 32768, 7, 0.2}};
    for (size_t f = 0; f < sizeof fl / sizeof fl[0]; f++) {
        const uint32_t fmt = fl[f].fmt, E = fl[f].elems;
        make_random(rb, rn, 2, E, fl[f].p, 5);
        static uint8_t rec[40 + 8 * 24 + 32768 * 2], flip[sizeof rec];
        static uint8_t r1[32768 * 2], r2[32768 * 2];
        size_t rl;
        CHECK_OK(ferry_delta_chunk_encode(codec, FERRY_DTYPE_BF16, 0, fmt == 2 ? FERRY_DELTA_CHUNK_FORMAT2 : 0, rb, rn,
                                          E, rec, sizeof rec, &rl, NULL, NULL),
                 ferry_delta_codec_detail(codec));
        CHECK(rec[0] == CHUNK_SPARSE);
        if (f == 2) CHECK_EQ_INT(rec[3], 13);
        size_t agree = 0, applied = 0;
        for (size_t bit = 0; bit < rl * 8; bit += fl[f].stride) {
            if (bit / 8 >= 32 && bit / 8 < 40) continue; /* the record checksum itself */
            memcpy(flip, rec, rl);
            flip[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            put_u64(flip + 32, delta_record_sum(flip, rl));
            memcpy(r1, rb, E * 2);
            memcpy(r2, rb, E * 2);
            ferry_status_t cpu = ferry_delta_chunk_apply(codec, FERRY_DTYPE_BF16, flip, rl, r1, E);
            if (cpu == FERRY_OK) ferry_delta_codec_commit(codec);
            if (cpu == FERRY_ERR_UNSUPPORTED) cpu = FERRY_ERR_CORRUPT; /* an unknown byte 3: the host's peek */
            ferry_status_t gpu = gpu_rules(flip, rl, 2, r2, E);
            if (cpu != gpu)
                fprintf(stderr, "format %u, bit %zu (byte %zu): CPU %s, GPU rules %s\n", fmt, bit, bit / 8,
                        ferry_status_name(cpu), ferry_status_name(gpu));
            CHECK(cpu == gpu);
            CHECK(memcmp(r1, r2, E * 2) == 0);
            applied += cpu == FERRY_OK;
            agree++;
        }
        printf("format %u, %u elements: %zu resealed bit flips of a %zu-byte record, the same verdict and result on "
               "both (%zu applied: flips that change no decoded value)\n",
               fmt, E, agree, rl, applied);
    }
    free(rb);
    free(rn);
    free(a);
    free(b16);
    free(n16);
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    return 0;
}
