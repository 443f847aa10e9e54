/* Deltas encoded on the GPU (codec/delta_cuda_enc.h) are ferry_delta_encode's
 * format 2 frames, byte for byte: regions of every dtype, synthetic Adam
 * steps at three learning rates, random changes with large value changes,
 * unrelated contents (raw chunks), unchanged regions, partial and small
 * chunks, one to eight classes, base checksums given (and wrong ones for an
 * unchanged region, where the base sum is next's), regions at addresses
 * that are not 16-aligned, an empty region; all in one batch, planned and
 * written in one slice, a chunk at a time, and a few chunks at a time
 * (ferry_delta_cuda_enc_set_slice_max). Each frame
 * then applies on the CPU (ferry_delta_apply) and on the GPU
 * (ferry_delta_cuda_apply) to the next version; encoded again with the
 * frames kept on the device, each copied out on its own, the same. Refusals (a dtype without
 * deltas, a NULL region, a bad chunk size, too little room) leave the
 * batch's other items encoded.
 *
 *   gpu_test_delta_cuda_enc          the test (exit 77 without a usable GPU)
 *   gpu_test_delta_cuda_enc --bench  encode of synthetic Adam steps at lr
 *                                    1e-6, 3e-6 and 1e-5 (bf16, 16 regions
 *                                    of 256M elements: 8 GiB) beside a
 *                                    same-GPU copy of one version's bytes,
 *                                    medians of 5; also with the base's
 *                                    chunk sums given, and the floors (a
 *                                    read of old + new, of base alone:
 *                                    tests/gpu/floor.h)
 *   gpu_test_delta_cuda_enc --bench N  the same with slices of up to N
 *                                    changes (and N / 256 sub-blocks)
 *                                    instead of the default 2^26 and 2^18
 *                                    (0xffffffffffff: the whole batch in
 *                                    one slice, as before 2026-11-29) */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>

#include "codec/codec_internal.h"
#include "codec/delta_cuda.h"
#include "codec/delta_cuda_enc.h"
#include "common/hash.h"
#include "ferry/ctx.h"
#include "floor.h"
#include "gpu_check.h"
#include "gpu_synth.h"
#include "delta_rand.h"
#include "synth.h"

static ferry_ctx_t *g_ctx;
static ferry_delta_codec_t *g_codec;
static ferry_delta_cuda_enc_t *g_enc;
static ferry_delta_cuda_t *g_apply;
static cudaStream_t g_stream;

/* One region: its versions on the host, on the GPU (at offset `off` from a
   16-aligned allocation), and the frames. */
typedef struct tcase {
    const char *what;
    ferry_dtype_t dtype;
    uint64_t n;
    uint32_t w, chunk, classes;
    size_t off;
    uint8_t *base, *next; /* host */
    uint8_t *d_base_alloc, *d_next_alloc, *d_base, *d_next;
    bool give_sums;
    bool wrong_sums; /* the given sums with their lowest bit flipped: only for unchanged chunks */
    uint64_t *base_sums, *next_sums;
    uint8_t *cpu, *gpu; /* frames */
    size_t cpu_len, cap;
} tcase_t;

static void make_random(tcase_t *t, double p, uint32_t big, uint64_t seed) {
    delta_make_random(t->base, t->next, t->w, t->n, p, big, seed);
}

/* bf16 of synthetic Adam masters at steps 3 and 4. */
static void make_synth(tcase_t *t, double lr, uint64_t seed) {
    synth_bf16_pair(t->n, lr, 3, seed, t->base, t->next);
}

static tcase_t *tcase_new(const char *what, ferry_dtype_t dtype, uint64_t n, uint32_t chunk, size_t off) {
    tcase_t *t = calloc(1, sizeof *t);
    CHECK(t);
    t->what = what;
    t->dtype = dtype;
    t->n = n;
    t->w = delta_width(dtype);
    t->chunk = chunk;
    t->off = off;
    size_t bytes = n * t->w;
    t->base = malloc(bytes + 1);
    t->next = malloc(bytes + 1);
    CHECK(t->base && t->next);
    CUDA_OK(cudaMalloc((void **)&t->d_base_alloc, bytes + off + 1));
    CUDA_OK(cudaMalloc((void **)&t->d_next_alloc, bytes + off + 1));
    t->d_base = t->d_base_alloc + off;
    t->d_next = t->d_next_alloc + off;
    return t;
}

/* The CPU's frame, the versions uploaded, room for the GPU's frame. */
static void tcase_ready(tcase_t *t) {
    size_t bytes = t->n * t->w;
    CUDA_OK(cudaMemcpy(t->d_base, t->base, bytes, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemcpy(t->d_next, t->next, bytes, cudaMemcpyHostToDevice));
    t->cap = ferry_delta_bound(t->dtype, t->n, t->chunk);
    t->cpu = malloc(t->cap);
    t->gpu = malloc(t->cap);
    CHECK(t->cpu && t->gpu);
    uint32_t chunks = ferry_delta_chunk_count(t->n, t->chunk);
    t->base_sums = calloc(chunks + 1, 8);
    t->next_sums = calloc(chunks + 1, 8);
    CHECK(t->base_sums && t->next_sums);
    if (t->give_sums) /* the base's chunk sums, as a writer keeps them from the last encode */
        for (uint32_t c = 0; c < chunks; c++) {
            uint64_t at = (uint64_t)c * (t->chunk ? t->chunk : FERRY_DELTA_CHUNK_DEFAULT);
            uint64_t len = t->n - at < (t->chunk ? t->chunk : FERRY_DELTA_CHUNK_DEFAULT)
                               ? t->n - at
                               : (t->chunk ? t->chunk : FERRY_DELTA_CHUNK_DEFAULT);
            t->base_sums[c] = XXH3_64bits(t->base + at * t->w, len * t->w) ^ t->wrong_sums;
        }
    ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_FORMAT | FERRY_DELTA_PARAM_VERSIONS |
                                            (t->chunk ? FERRY_DELTA_PARAM_CHUNK_ELEMS : 0) |
                                            (t->classes ? FERRY_DELTA_PARAM_MAX_CLASSES : 0),
                              .dtype = t->dtype, .format = 2, .chunk_elems = t->chunk, .max_classes = t->classes,
                              .base_version = 7, .next_version = 8};
    CHECK_OK(ferry_delta_encode(g_codec, &p, t->base, t->next, t->n, t->cpu, t->cap, &t->cpu_len),
             ferry_delta_codec_detail(g_codec));
}

static ferry_delta_cuda_enc_item_t item_of(tcase_t *t) {
    return (ferry_delta_cuda_enc_item_t){.base = t->d_base, .next = t->d_next, .dtype = t->dtype, .elems = t->n,
                                         .chunk_elems = t->chunk, .max_classes = t->classes, .base_version = 7,
                                         .next_version = 8, .base_chunk_sums = t->give_sums ? t->base_sums : NULL,
                                         .next_chunk_sums = t->next_sums, .dst = t->gpu, .cap = t->cap};
}

static void tcase_free(tcase_t *t) {
    cudaFree(t->d_base_alloc);
    cudaFree(t->d_next_alloc);
    free(t->base);
    free(t->next);
    free(t->cpu);
    free(t->gpu);
    free(t->base_sums);
    free(t->next_sums);
    free(t);
}

/* The GPU's frame is the CPU's; it applies on the CPU and on the GPU. */
static void check_frame(tcase_t *t, const ferry_delta_cuda_enc_item_t *it) {
    if (it->status != FERRY_OK) {
        fprintf(stderr, "%s: not encoded: %s\n", t->what, ferry_status_name(it->status));
        exit(1);
    }
    if (it->len != t->cpu_len || memcmp(t->cpu, t->gpu, t->cpu_len) != 0) {
        size_t at = 0;
        while (at < it->len && at < t->cpu_len && t->cpu[at] == t->gpu[at]) at++;
        fprintf(stderr, "%s: the GPU's frame (%zu bytes) differs from the CPU's (%zu) at byte %zu\n", t->what,
                it->len, t->cpu_len, at);
        exit(1);
    }
    uint32_t chunks = ferry_delta_chunk_count(t->n, t->chunk);
    for (uint32_t c = 0; c < chunks; c++) {
        uint64_t ch = t->chunk ? t->chunk : FERRY_DELTA_CHUNK_DEFAULT, at = c * ch;
        uint64_t len = t->n - at < ch ? t->n - at : ch;
        CHECK(t->next_sums[c] == XXH3_64bits(t->next + at * t->w, len * t->w));
    }
    size_t bytes = t->n * t->w;
    uint8_t *r = malloc(bytes + 1);
    CHECK(r);
    memcpy(r, t->base, bytes);
    CHECK_OK(ferry_delta_apply(g_codec, t->gpu, it->len, r, t->n, 7, NULL), ferry_delta_codec_detail(g_codec));
    CHECK(memcmp(r, t->next, bytes) == 0);
    /* on the GPU, into the base's copy */
    ferry_delta_cuda_item_t a = {.delta = t->gpu, .len = it->len, .region = t->d_base, .dtype = t->dtype,
                                 .elems = t->n, .base_version = 7};
    ferry_errbuf_t err = {{0}};
    CHECK_OK(ferry_delta_cuda_apply(g_apply, &a, 1, g_stream, &err), err.text);
    CUDA_OK(cudaMemcpy(r, t->d_base, bytes, cudaMemcpyDeviceToHost));
    CHECK(memcmp(r, t->next, bytes) == 0);
    CUDA_OK(cudaMemcpy(t->d_base, t->base, bytes, cudaMemcpyHostToDevice)); /* as it was */
    free(r);
}

static void test_batch(void) {
    tcase_t *t[32];
    int n = 0;
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    static const char *lr_names[] = {"bf16 Adam lr 1e-6", "bf16 Adam lr 3e-6", "bf16 Adam lr 1e-5"};
    for (int l = 0; l < 3; l++) {
        t[n] = tcase_new(lr_names[l], FERRY_DTYPE_BF16, (3u << 20) + 4321, 0, 0);
        make_synth(t[n], lrs[l], 11 + l);
        n++;
    }
    static const struct {
        const char *what;
        ferry_dtype_t dt;
        double p;
        uint32_t big, chunk, classes;
        uint64_t n;
        size_t off;
        bool sums;
    } r[] = {
        {"f32, large changes", FERRY_DTYPE_F32, 0.02, 1u << 30, 0, 0, 1500000, 4, false},
        {"f32, small chunks", FERRY_DTYPE_F32, 0.05, 300, 16384, 0, 100000, 0, true},
        {"f16, 30% changed", FERRY_DTYPE_F16, 0.3, 300, 8192, 0, 200000, 2, false},
        {"f8 e4m3", FERRY_DTYPE_F8_E4M3, 0.1, 40, 65536, 0, 300000, 1, false},
        {"f8 e5m2, chunks of 1024", FERRY_DTYPE_F8_E5M2, 0.01, 100, 1024, 0, 50000, 3, false},
        {"bf16, one class", FERRY_DTYPE_BF16, 0.02, 300, 0, 1, 1u << 20, 0, false},
        {"bf16, three classes, base sums given", FERRY_DTYPE_BF16, 0.02, 300, 0, 3, 2u << 20, 6, true},
        {"bf16, 90% changed", FERRY_DTYPE_BF16, 0.9, 300, 65536, 0, 300000, 0, false},
        {"bf16, sparse 0.01%", FERRY_DTYPE_BF16, 0.0001, 300, 0, 0, 1u << 20, 2, false},
        {"bf16, unchanged", FERRY_DTYPE_BF16, 0, 1, 0, 0, 1500000, 0, true},
        {"bf16, one element", FERRY_DTYPE_BF16, 1.0, 300, 0, 0, 1, 0, false},
        {"bf16, empty", FERRY_DTYPE_BF16, 0, 1, 0, 0, 0, 0, false},
    };
    for (size_t i = 0; i < sizeof r / sizeof r[0]; i++) {
        t[n] = tcase_new(r[i].what, r[i].dt, r[i].n, r[i].chunk, r[i].off);
        t[n]->classes = r[i].classes;
        t[n]->give_sums = r[i].sums;
        make_random(t[n], r[i].p, r[i].big, 500 + i);
        n++;
    }
    /* unchanged, with wrong base sums given: an unchanged chunk's base sum
       is next's, whatever was given, as the CPU encoder has it (the
       CPU's frame here is made without them) */
    t[n] = tcase_new("bf16, unchanged, wrong base sums given", FERRY_DTYPE_BF16, 300000, 65536, 0);
    t[n]->give_sums = t[n]->wrong_sums = true;
    make_random(t[n], 0, 1, 602);
    n++;
    /* unrelated contents: raw chunks */
    t[n] = tcase_new("bf16, unrelated contents", FERRY_DTYPE_BF16, 200000, 65536, 0);
    make_random(t[n], 0, 1, 600);
    uint64_t s = 601;
    for (uint64_t i = 0; i < 200000 * 2; i++) t[n]->next[i] = (uint8_t)rng(&s);
    n++;
    for (int i = 0; i < n; i++) tcase_ready(t[i]);
    /* the batch in one slice (the default budget), then with the plan and
       write passes a chunk at a time, then a few chunks at a time; the last
       two on new encoders, whose record area grows between slices (the
       records of the slices before kept) */
    static const struct {
        const char *what;
        uint64_t changes, blks;
    } slices[] = {{"one slice", 0, 0}, {"a slice per chunk", 1, 1}, {"slices of up to 200000 changes", 200000, 24}};
    for (size_t v = 0; v < sizeof slices / sizeof slices[0]; v++) {
        ferry_delta_cuda_enc_t *enc = g_enc;
        ferry_errbuf_t err = {{0}};
        if (v) {
            CHECK_OK(ferry_delta_cuda_enc_create(0, &enc, &err), err.text);
            ferry_delta_cuda_enc_set_slice_max(enc, slices[v].changes, slices[v].blks);
        }
        ferry_delta_cuda_enc_item_t items[32];
        for (int i = 0; i < n; i++) {
            memset(t[i]->gpu, 0, t[i]->cap);
            memset(t[i]->next_sums, 0, ferry_delta_chunk_count(t[i]->n, t[i]->chunk) * sizeof(uint64_t));
            items[i] = item_of(t[i]);
        }
        CHECK_OK(ferry_delta_cuda_encode(enc, items, (size_t)n, g_stream, &err), err.text);
        for (int i = 0; i < n; i++) check_frame(t[i], &items[i]);
        ferry_delta_cuda_enc_times_t tm;
        ferry_delta_cuda_enc_last_times(enc, &tm);
        CHECK(tm.scan_s > 0 && tm.plan_s > 0 && tm.write_s > 0);
        printf("ok: %d regions in one batch, %s, every GPU frame the CPU's (scan %.2f ms, plan %.2f ms, write %.2f "
               "ms, %.1f MiB of device memory)\n",
               n, slices[v].what, tm.scan_s * 1e3, tm.plan_s * 1e3, tm.write_s * 1e3,
               ferry_delta_cuda_enc_device_bytes(enc) / 1048576.0);
        /* the same batch again, the frames kept on the device and copied out
           one by one once their lengths are known (as a writer places them) */
        for (int i = 0; i < n; i++) {
            memset(t[i]->gpu, 0, t[i]->cap);
            items[i] = item_of(t[i]);
            items[i].dst = NULL;
        }
        CHECK_OK(ferry_delta_cuda_encode(enc, items, (size_t)n, g_stream, &err), err.text);
        for (int i = n - 1; i >= 0; i--) {
            CHECK(items[i].len == t[i]->cpu_len);
            CHECK(ferry_delta_cuda_enc_copy(enc, (size_t)i, t[i]->gpu, items[i].len - 1, &err) == FERRY_ERR_LIMIT);
            CHECK_OK(ferry_delta_cuda_enc_copy(enc, (size_t)i, t[i]->gpu, items[i].len, &err), err.text);
            check_frame(t[i], &items[i]);
        }
        CHECK(ferry_delta_cuda_enc_copy(enc, (size_t)n, t[0]->gpu, t[0]->cap, &err) == FERRY_ERR_INVALID_ARGUMENT);
        printf("ok: the same batch again, %s, frames kept on the device and copied out\n", slices[v].what);
        if (v) ferry_delta_cuda_enc_destroy(enc);
    }
    for (int i = 0; i < n; i++) tcase_free(t[i]);
}

/* Items refused beside ones that encode. */
static void test_refusals(void) {
    tcase_t *good = tcase_new("good", FERRY_DTYPE_BF16, 300000, 0, 0);
    make_random(good, 0.02, 300, 700);
    tcase_ready(good);
    ferry_delta_cuda_enc_item_t it[5];
    for (int i = 0; i < 5; i++) it[i] = item_of(good);
    static uint8_t small[200];
    it[0].dtype = FERRY_DTYPE_I32;
    it[1].next = NULL;
    it[2].chunk_elems = 3000;
    it[3].dst = small, it[3].cap = sizeof small; /* the header fits, the records do not */
    ferry_errbuf_t err = {{0}};
    ferry_status_t st = ferry_delta_cuda_encode(g_enc, it, 5, g_stream, &err);
    CHECK(st == FERRY_ERR_UNSUPPORTED && strstr(err.text, "delta 1 of 5"));
    CHECK(it[0].status == FERRY_ERR_UNSUPPORTED && it[1].status == FERRY_ERR_INVALID_ARGUMENT &&
          it[2].status == FERRY_ERR_INVALID_ARGUMENT && it[3].status == FERRY_ERR_LIMIT);
    check_frame(good, &it[4]);
    printf("ok: refusals (%s) leave the batch's other items encoded\n", err.text);
    tcase_free(good);
}

/* Batches in which nothing changed (no slice has a chunk with changes, so
   no plan pass runs), of one empty region (no chunks), and of no items. */
static void test_quiet_batches(void) {
    tcase_t *t[3];
    t[0] = tcase_new("bf16, a batch with nothing changed", FERRY_DTYPE_BF16, 1500000, 0, 0);
    t[0]->give_sums = true;
    t[1] = tcase_new("f32, a batch with nothing changed", FERRY_DTYPE_F32, 70000, 16384, 0);
    t[2] = tcase_new("bf16, a batch of an empty region", FERRY_DTYPE_BF16, 0, 0, 0);
    for (int i = 0; i < 3; i++) {
        make_random(t[i], 0, 1, 800 + (uint64_t)i);
        tcase_ready(t[i]);
    }
    ferry_delta_cuda_enc_item_t items[2] = {item_of(t[0]), item_of(t[1])};
    ferry_errbuf_t err = {{0}};
    CHECK_OK(ferry_delta_cuda_encode(g_enc, items, 2, g_stream, &err), err.text);
    for (int i = 0; i < 2; i++) check_frame(t[i], &items[i]);
    items[0] = item_of(t[2]);
    CHECK_OK(ferry_delta_cuda_encode(g_enc, items, 1, g_stream, &err), err.text);
    check_frame(t[2], &items[0]);
    CHECK_OK(ferry_delta_cuda_encode(g_enc, NULL, 0, g_stream, &err), err.text);
    printf("ok: a batch with nothing changed, one of an empty region, one of no items\n");
    for (int i = 0; i < 3; i++) tcase_free(t[i]);
}

/* ---- the benchmark ----------------------------------------------------------- */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int bench(void) {
    const uint64_t n = (uint64_t)256 << 20;
    enum { R = 16, REPS = 5 };
    const size_t bytes = n * 2;
    float *a = malloc(4 * n * sizeof(float));
    uint16_t *b0 = malloc(bytes), *b1 = malloc(bytes);
    uint8_t *base[R], *next[R], *copy, *dst[R];
    CHECK(a && b0 && b1);
    size_t cap = ferry_delta_bound(FERRY_DTYPE_BF16, n, 0);
    for (int r = 0; r < R; r++) {
        CUDA_OK(cudaMalloc((void **)&base[r], bytes));
        CUDA_OK(cudaMalloc((void **)&next[r], bytes));
        CUDA_OK(cudaMallocHost((void **)&dst[r], cap / 4)); /* deltas are far smaller than raw */
    }
    CUDA_OK(cudaMalloc((void **)&copy, (size_t)R * bytes));
    cudaEvent_t e0, e1;
    CUDA_OK(cudaEventCreate(&e0));
    CUDA_OK(cudaEventCreate(&e1));
    static const double lrs[] = {1e-6, 3e-6, 1e-5};
    printf("bench: encode of %d bf16 regions of %llu M elements (%.1f GiB per version), format 2, synthetic Adam "
           "steps 4 -> 5, medians of %d\n",
           R, (unsigned long long)(n >> 20), (double)R * bytes / (1u << 30), REPS);
    for (int l = 0; l < 3; l++) {
        delta_synth_t s;
        delta_synth_init(&s, n, false, lrs[l], 42, a, a + n, a + 2 * n, a + 3 * n);
        for (int st = 0; st < 4; st++) synth_par(&s, NULL);
        synth_par(&s, b0);
        synth_par(&s, NULL);
        synth_par(&s, b1);
        for (int r = 0; r < R; r++) {
            CUDA_OK(cudaMemcpy(base[r], b0, bytes, cudaMemcpyHostToDevice));
            CUDA_OK(cudaMemcpy(next[r], b1, bytes, cudaMemcpyHostToDevice));
        }
        /* the base's chunk sums, for the sync writer's case from its second
           delta on (base_chunk_sums given): an encode of base against itself */
        const uint32_t nsum = (uint32_t)((n + FERRY_DELTA_CHUNK_DEFAULT - 1) / FERRY_DELTA_CHUNK_DEFAULT);
        uint64_t *bsums = malloc((size_t)R * nsum * sizeof *bsums);
        CHECK(bsums);
        ferry_delta_cuda_enc_item_t it[R];
        for (int r = 0; r < R; r++)
            it[r] = (ferry_delta_cuda_enc_item_t){.base = base[r], .next = base[r], .dtype = FERRY_DTYPE_BF16,
                                                  .elems = n, .dst = dst[r], .cap = cap / 4,
                                                  .next_chunk_sums = bsums + (size_t)r * nsum};
        ferry_errbuf_t err0 = {{0}};
        CHECK_OK(ferry_delta_cuda_encode(g_enc, it, R, g_stream, &err0), err0.text);
        double t_enc[REPS], t_copy[REPS], t_scan[REPS], t_plan[REPS], t_write[REPS], t_d2h[REPS], t_given[REPS],
            t_gscan[REPS];
        size_t total = 0;
        for (int rep = -1; rep < REPS; rep++) { /* a warm-up first */
            for (int g = 0; g < 2; g++) { /* without, then with the base's sums */
                for (int r = 0; r < R; r++)
                    it[r] = (ferry_delta_cuda_enc_item_t){.base = base[r], .next = next[r], .dtype = FERRY_DTYPE_BF16,
                                                          .elems = n, .dst = dst[r], .cap = cap / 4,
                                                          .base_chunk_sums = g ? bsums + (size_t)r * nsum : NULL};
                ferry_errbuf_t err = {{0}};
                CUDA_OK(cudaStreamSynchronize(g_stream));
                double t0 = now();
                CHECK_OK(ferry_delta_cuda_encode(g_enc, it, R, g_stream, &err), err.text);
                double t1 = now();
                if (rep < 0) continue;
                ferry_delta_cuda_enc_times_t tm;
                ferry_delta_cuda_enc_last_times(g_enc, &tm);
                if (g) {
                    t_given[rep] = t1 - t0, t_gscan[rep] = tm.scan_s;
                    continue;
                }
                t_enc[rep] = t1 - t0;
                t_scan[rep] = tm.scan_s, t_plan[rep] = tm.plan_s, t_write[rep] = tm.write_s, t_d2h[rep] = tm.copy_s;
                total = 0;
                for (int r = 0; r < R; r++) total += it[r].len;
            }
            CUDA_OK(cudaEventRecord(e0, g_stream));
            for (int r = 0; r < R; r++)
                CUDA_OK(cudaMemcpyAsync(copy + (size_t)r * bytes, next[r], bytes, cudaMemcpyDeviceToDevice,
                                        g_stream));
            CUDA_OK(cudaEventRecord(e1, g_stream));
            CUDA_OK(cudaEventSynchronize(e1));
            if (rep < 0) continue;
            float ms = 0;
            CUDA_OK(cudaEventElapsedTime(&ms, e0, e1));
            t_copy[rep] = ms / 1e3;
        }
        free(bsums);
        /* the frames are right: the first region's against the CPU's */
        size_t len;
        uint8_t *cpu = malloc(cap);
        CHECK(cpu);
        ferry_delta_params_t p = {.field_mask = FERRY_DELTA_PARAM_FORMAT, .dtype = FERRY_DTYPE_BF16, .format = 2};
        CHECK_OK(ferry_delta_encode(g_codec, &p, b0, b1, n, cpu, cap, &len), ferry_delta_codec_detail(g_codec));
        CHECK(len == it[0].len && memcmp(cpu, dst[0], len) == 0);
        free(cpu);
        double *v[] = {t_enc, t_copy, t_scan, t_plan, t_write, t_d2h, t_given, t_gscan};
        for (int x = 0; x < 8; x++) median(v[x], REPS); /* sorted: [0] the least, [REPS - 1] the most */
        uint64_t changed = 0;
        for (uint64_t i = 0; i < n; i++) changed += b0[i] != b1[i];
        printf("lr %.0e: %.2f%% changed, %.3f bytes per changed element; encode %.4f s (range %.4f-%.4f): scan %.1f "
               "ms, plan %.1f ms, write %.1f ms, frames to host %.1f ms; same-GPU copy of one version %.4f s; "
               "old+new read at %.0f GB/s, the copy moves %.0f GB/s: %.2fx\n",
               lrs[l], 100.0 * changed / n, (double)total / ((double)changed * R), t_enc[REPS / 2], t_enc[0],
               t_enc[REPS - 1], t_scan[REPS / 2] * 1e3, t_plan[REPS / 2] * 1e3, t_write[REPS / 2] * 1e3,
               t_d2h[REPS / 2] * 1e3, t_copy[REPS / 2], 2.0 * R * bytes / t_enc[REPS / 2] / 1e9,
               2.0 * R * bytes / t_copy[REPS / 2] / 1e9, t_copy[REPS / 2] / t_enc[REPS / 2]);
        printf("  with the base's chunk sums given (the sync writer from its second delta): encode %.4f s (range "
               "%.4f-%.4f), scan %.1f ms: %.2fx\n",
               t_given[REPS / 2], t_given[0], t_given[REPS - 1], t_gscan[REPS / 2] * 1e3,
               t_copy[REPS / 2] / t_given[REPS / 2]);
        printf("  device memory held by the encoder: %.1f MiB\n", ferry_delta_cuda_enc_device_bytes(g_enc) / 1048576.0);
        if (l == 0) { /* the floors: what any encoder reads, in the same run */
            const void *bb[R], *nn[R];
            for (int r = 0; r < R; r++) bb[r] = base[r], nn[r] = next[r];
            uint64_t differ = 0, none = 0;
            double t2 = gpu_floor_read(bb, nn, R, bytes, REPS, g_stream, &differ);
            double t1 = gpu_floor_read(bb, NULL, R, bytes, REPS, g_stream, &none);
            CHECK(t2 > 0 && t1 > 0 && differ > 0);
            printf("floor: reading old + new once (16-byte loads at full occupancy, counting the vectors that "
                   "differ) %.4f s, %.0f GB/s: %.2fx; reading base alone %.4f s (%.0f GB/s). Any encoder reads old "
                   "+ new: at best %.2fx. This format's ranks (a change's place among its class's elements) read "
                   "base once more: %.4f s, at best %.2fx\n",
                   t2, 2.0 * R * bytes / t2 / 1e9, t_copy[REPS / 2] / t2, t1, (double)R * bytes / t1 / 1e9,
                   t_copy[REPS / 2] / t2, t2 + t1, t_copy[REPS / 2] / (t2 + t1));
        }
    }
    for (int r = 0; r < R; r++) cudaFree(base[r]), cudaFree(next[r]), cudaFreeHost(dst[r]);
    cudaFree(copy);
    free(a);
    free(b0);
    free(b1);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* each figure as it comes, even into a file */
    gpu_require();
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &g_ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(g_ctx, &g_codec) == FERRY_OK);
    ferry_errbuf_t err = {{0}};
    CHECK_OK(ferry_delta_cuda_enc_create(0, &g_enc, &err), err.text);
    CHECK_OK(ferry_delta_cuda_create(0, &g_apply, &err), err.text);
    CUDA_OK(cudaSetDevice(0));
    CUDA_OK(cudaStreamCreate(&g_stream));
    int rc = 0;
    if (argc > 1 && !strcmp(argv[1], "--bench")) {
        if (argc > 2) { /* a slice's budget in changes (sub-blocks: 1/256 of it), as A/B against the default */
            const uint64_t ch = strtoull(argv[2], NULL, 0);
            ferry_delta_cuda_enc_set_slice_max(g_enc, ch, ch >> 8 ? ch >> 8 : 1);
            printf("slices of up to %llu changes\n", (unsigned long long)ch);
        }
        rc = bench();
    } else {
        test_batch();
        test_refusals();
        test_quiet_batches();
        printf("delta encode on the GPU: all cases passed\n");
    }
    ferry_delta_cuda_enc_destroy(g_enc);
    ferry_delta_cuda_destroy(g_apply);
    cudaStreamDestroy(g_stream);
    ferry_delta_codec_destroy(g_codec);
    ferry_ctx_destroy(g_ctx);
    return rc;
}
