/* The GPU encoder's steps (codec/delta_enc_dev.h: classes, totals, the
 * walks that count and write each sub-stream, the record layout and
 * header), run on the CPU in the order and with the tables of the kernels
 * of delta_enc.cu, with the parts that are about the GPU (the block scans
 * of the rank pass) done plainly here. Against ferry_delta_chunk_encode in
 * format 2: the same record, byte for byte, for every dtype, three learning
 * rates of synthetic Adam steps, random changes with large value changes,
 * dense changes (raw records), no changes, partial and small chunks, and
 * every max_classes. CI has no GPU: this is how the GPU encoder's decisions
 * and bits are checked there. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/codec_internal.h"
#include "codec/delta_enc_dev.h"
#include "common/hash.h"
#include "delta_rand.h"
#include "ferry/ctx.h"
#include "synth.h"

static ferry_delta_codec_t *codec;

/* One chunk as the GPU passes encode it; returns its record in rec (room
 * for the raw record and 8 bytes). */
static size_t emu_chunk(uint32_t w, const uint8_t *base, const uint8_t *next, uint32_t elems, uint32_t max_classes,
                        uint8_t *rec) {
    static ek_chunk_t c; /* static: gcc -O2 takes the class table's reads of it for uninitialized */
    memset(&c, 0, sizeof c);
    c.elems = elems;
    c.width = w;
    c.max_classes = max_classes;
    /* scan: changes, histograms of changed buckets and of a sample */
    uint32_t sample[256] = {0}, hist_chg[256] = {0};
    const uint32_t stride = elems >= (1u << 16) ? 64 : 1;
    for (uint32_t i = 0; i < elems; i++) {
        uint32_t b = elem_get(base, w, i), n = elem_get(next, w, i);
        if (i % stride == 0) sample[ek_bucket(b, w)]++;
        if (b != n) c.changed++, hist_chg[ek_bucket(b, w)]++;
    }
    c.next_sum = XXH3_64bits(next, (size_t)elems * w);
    c.base_sum = c.changed ? XXH3_64bits(base, (size_t)elems * w) : c.next_sum;
    ek_sub_t *subs = NULL;
    uint64_t *list = NULL;
    uint16_t *runs = NULL;
    if (c.changed) {
        /* classes: the groups, every cost (a warp computes them), the DP */
        er_groups_t gr;
        static er_scratch_t ws;
        er_groups_make(sample, stride, hist_chg, &gr, &ws);
        static uint64_t cost[ER_GROUPS_MAX * (ER_GROUPS_MAX + 1) / 2];
        for (uint32_t x = 0; x < er_cost_entries(gr.g); x++) {
            uint32_t j, i; /* entry x's groups, as the warp's lanes find theirs */
            er_cost_pair(gr.g, x, &j, &i);
            CHECK(er_cost_index(gr.g, j, i) == x);
            cost[x] = er_class_cost(&gr, j, i);
        }
        c.classes = er_classes_dp(&gr, cost, max_classes, w == 1 ? 0 : w == 2 ? 7 : 23, c.lower, &ws);
        /* the host: sub-block size */
        c.sub_log2 = er_sub_log2(c.changed, elems);
        c.nsub = (elems + (1u << c.sub_log2) - 1) >> c.sub_log2;
        subs = calloc((size_t)c.nsub * EK_CLASSES, sizeof *subs);
        list = malloc((size_t)c.changed * sizeof *list);
        runs = calloc(c.changed, sizeof *runs);
        ek_subblk_t *blk = calloc(c.nsub, sizeof *blk);
        CHECK(subs && list && runs && blk);
        /* rank: each change's rank among its class's elements of its
           sub-block; counts per class and sub-block */
        uint8_t class_of[256];
        ek_class_table(&c, class_of);
        uint32_t m = 0;
        for (uint32_t b = 0; b < c.nsub; b++) {
            blk[b].first = m;
            uint32_t cnt[EK_CLASSES] = {0};
            uint32_t end = (b + 1) << c.sub_log2;
            if (end > elems) end = elems;
            for (uint32_t i = b << c.sub_log2; i < end; i++) {
                uint32_t bv = elem_get(base, w, i), nv = elem_get(next, w, i), k = class_of[ek_bucket(bv, w)];
                ek_sub_t *s = &subs[b * EK_CLASSES + k];
                if (bv != nv) {
                    uint32_t val, sign;
                    ek_change(bv, nv, w, &val, &sign);
                    list[m++] = ek_entry(cnt[k], k, sign, val);
                    s->m++;
                    s->nu += val != 0;
                }
                cnt[k]++;
            }
            for (uint32_t k = 0; k < EK_CLASSES; k++) subs[b * EK_CLASSES + k].count = cnt[k];
            blk[b].m = m - blk[b].first;
        }
        CHECK(m == c.changed);
        ek_totals(&c, subs);
        /* part: per sub-block and class, one walk of its changes */
        for (uint32_t b = 0; b < c.nsub; b++)
            for (uint32_t k = 0; k < c.classes; k++) {
                ek_part_t p;
                ek_part_init(&p);
                for (uint32_t x = blk[b].first; x < blk[b].first + blk[b].m; x++)
                    if (ek_entry_class(list[x]) == k) ek_part_change(&p, list[x], x, c.g0[k], c.n0[k], runs);
                ek_part_end(&p, c.nonunit[k], c.n0[k], runs, &subs[b * EK_CLASSES + k]);
            }
        ek_choose(&c, subs);
        if (c.mode == EK_SPARSE) {
            /* write: the record area zeroed, every sub-stream ORed in */
            memset(rec, 0, c.rec_len + 8);
            uint32_t *words = (uint32_t *)rec;
            for (uint32_t b = 0; b < c.nsub; b++)
                for (uint32_t k = 0; k < c.classes; k++) {
                    const ek_sub_t *s = &subs[b * EK_CLASSES + k];
                    ek_wr_t wr;
                    ek_wr_begin(&wr, &c, k, s, 0, words);
                    for (uint32_t x = blk[b].first; x < blk[b].first + blk[b].m; x++)
                        if (ek_entry_class(list[x]) == k) ek_wr_change(&wr, list[x], runs[x], words);
                    ek_wr_end(&wr, &c, k, b, s, 0, words);
                }
        }
        free(blk);
    } else {
        ek_choose(&c, NULL);
    }
    /* head, raw contents, seal */
    ek_head(&c, rec);
    if (c.mode == EK_RAW) memcpy(rec + EK_HEADER, next, (size_t)elems * w);
    put_u64(rec + 32, delta_record_sum(rec, c.rec_len));
    free(subs);
    free(list);
    free(runs);
    return c.rec_len;
}

static int cases, modes[3];

static void check_chunk(ferry_dtype_t dt, const uint8_t *base, const uint8_t *next, uint32_t elems,
                        uint32_t max_classes, const char *what) {
    uint32_t w = delta_width(dt);
    size_t cap = ferry_delta_chunk_bound(dt, elems) + 8, len;
    uint8_t *want = malloc(cap), *got = malloc(cap);
    CHECK(want && got);
    CHECK_OK(ferry_delta_chunk_encode(codec, dt, max_classes, FERRY_DELTA_CHUNK_FORMAT2, base, next, elems, want, cap,
                                      &len, NULL, NULL),
             ferry_delta_codec_detail(codec));
    size_t gl = emu_chunk(w, base, next, elems, max_classes ? max_classes : EK_CLASSES, got);
    if (gl != len || memcmp(want, got, len) != 0) {
        size_t at = 0;
        while (at < len && at < gl && want[at] == got[at]) at++;
        fprintf(stderr, "%s (%s, %u elements, max_classes %u): the GPU's steps wrote %zu bytes, the CPU %zu; "
                        "first difference at byte %zu (mode %u, classes %u)\n",
                what, ferry_dtype_name(dt), elems, max_classes, gl, len, at, want[0], want[2]);
        exit(1);
    }
    cases++;
    modes[want[0] < 3 ? want[0] : 0]++;
    free(want);
    free(got);
}

static void make_random(uint8_t *base, uint8_t *next, uint32_t w, uint64_t n, double p, uint32_t big,
                        uint64_t seed) {
    delta_make_random(base, next, w, n, p, big, seed);
}

int main(void) {
    ferry_ctx_t *ctx;
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(ctx, &codec) == FERRY_OK);
    /* synthetic Adam steps at three learning rates: a whole chunk of 2^20
       and a partial one */
    const uint32_t n = (1u << 20) + 54321;
    uint16_t *b16 = malloc((size_t)n * 2), *n16 = malloc((size_t)n * 2);
    float *a = malloc(4 * (size_t)n * sizeof(float));
    CHECK(b16 && n16 && a);
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    for (int l = 0; l < 3; l++) {
        delta_synth_t s;
        delta_synth_init(&s, n, false, lrs[l], 7, a, a + n, a + 2 * (size_t)n, a + 3 * (size_t)n);
        for (int st = 0; st < 3; st++) delta_synth_step_range(&s, 0, n), delta_synth_next(&s);
        delta_synth_bf16(&s, b16, 0, n);
        delta_synth_step_range(&s, 0, n);
        delta_synth_next(&s);
        delta_synth_bf16(&s, n16, 0, n);
        char what[64];
        snprintf(what, sizeof what, "bf16 Adam lr %.0e", lrs[l]);
        check_chunk(FERRY_DTYPE_BF16, (uint8_t *)b16, (uint8_t *)n16, 1u << 20, 0, what);
        check_chunk(FERRY_DTYPE_BF16, (uint8_t *)(b16 + (1u << 20)), (uint8_t *)(n16 + (1u << 20)), n - (1u << 20), 0,
                    what);
        if (l == 0)
            for (uint32_t mc = 1; mc < EK_CLASSES; mc++)
                check_chunk(FERRY_DTYPE_BF16, (uint8_t *)b16, (uint8_t *)n16, 1u << 18, mc, "max_classes");
        /* unchanged */
        check_chunk(FERRY_DTYPE_BF16, (uint8_t *)b16, (uint8_t *)b16, 1u << 16, 0, "unchanged");
    }
    /* random changes, every width, chunks from 1024 elements up; dense ones
       come out raw */
    static const struct {
        ferry_dtype_t dt;
        double p;
        uint32_t big, elems;
    } r[] = {{FERRY_DTYPE_F32, 0.05, 300, 16384},      {FERRY_DTYPE_F32, 0.02, 1u << 30, 200000},
             {FERRY_DTYPE_F16, 0.3, 300, 8192},        {FERRY_DTYPE_F8_E4M3, 0.1, 40, 65536},
             {FERRY_DTYPE_F8_E5M2, 0.01, 100, 1024},   {FERRY_DTYPE_BF16, 0.02, 300, 4096},
             {FERRY_DTYPE_BF16, 0.001, 300, 1u << 20}, {FERRY_DTYPE_BF16, 0.9, 300, 100000},
             {FERRY_DTYPE_BF16, 0.5, 30000, 70000},    {FERRY_DTYPE_F32, 1.0, 5, 5000}};
    uint8_t *rb = malloc((1u << 20) * 4), *rn = malloc((1u << 20) * 4);
    CHECK(rb && rn);
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        make_random(rb, rn, delta_width(r[i].dt), r[i].elems, r[i].p, r[i].big, 100 + i);
        check_chunk(r[i].dt, rb, rn, r[i].elems, 0, "random");
    }
    /* unrelated contents: raw records */
    uint64_t seed = 77;
    for (uint32_t i = 0; i < 50000 * 4; i++) rn[i] = (uint8_t)rng(&seed);
    check_chunk(FERRY_DTYPE_BF16, rb, rn, 100000, 0, "unrelated bf16");
    check_chunk(FERRY_DTYPE_F32, rb, rn, 50000, 0, "unrelated f32");
    /* one change, in the last element; one in the first */
    make_random(rb, rn, 2, 300000, 0, 1, 9);
    rn[2 * 299999] ^= 1;
    check_chunk(FERRY_DTYPE_BF16, rb, rn, 300000, 0, "last element");
    rn[2 * 299999] ^= 1;
    rn[0] ^= 1;
    check_chunk(FERRY_DTYPE_BF16, rb, rn, 300000, 0, "first element");
    CHECK(modes[EK_UNCHANGED] > 0 && modes[EK_SPARSE] > 0 && modes[EK_RAW] > 0);
    printf("test_delta_enc_dev: %d chunks (%d sparse, %d raw, %d unchanged) encoded by the GPU encoder's steps, "
           "byte-identical to the CPU's\n",
           cases, modes[EK_SPARSE], modes[EK_RAW], modes[EK_UNCHANGED]);
    free(rb);
    free(rn);
    free(a);
    free(b16);
    free(n16);
    ferry_delta_codec_destroy(codec);
    ferry_ctx_destroy(ctx);
    return 0;
}
