/* The GPU delta apply's host code (codec/delta_cuda.c) on the CPU, in CI:
 * against the model of the CUDA runtime in fake_cuda.c and the CPU passes
 * of dk_cpu.c. (The kernels themselves run on a GPU host only:
 * tests/gpu/test_delta_cuda.c; their stream readers are checked on the CPU
 * by test_delta_dev.c.)
 *
 * 1. tests/gpu/test_delta_cuda.c itself, every case, once per order the
 *    model runs queued work in: lazily (only what is waited for), eagerly
 *    (as enqueued) and at random. A missing wait between streams, or host
 *    memory a queued copy or pull reads changed before it runs, fails here.
 * 2. Failures injected into a batch that is applied in parts (a fresh
 *    object, a group per item, a first region of raw chunks only), with
 *    regions refused in each part: each allocation in turn fails (once: the
 *    call may fall back and succeed; from there on: NO_MEMORY), then each
 *    enqueued operation in turn (IO). Every time: nothing is left queued
 *    on return, an item reported NO_MEMORY holds what it held before the
 *    call, the others hold what a call without failures gives them, and
 *    the object applies the same batch correctly right after. */
#include "fake_cuda.h"

#include <stdio.h>

/* Every apply of the GPU test's cases: nothing left queued when it
   returns, nothing left as the last CUDA error. */
#undef ferry_delta_cuda_apply
#define ferry_delta_cuda_apply checked_apply
#include "codec/delta_cuda.h" /* declares checked_apply */

int gpu_test_main(int argc, char **argv); /* the GPU test's main */
#define main gpu_test_main
#define setvbuf(f, b, m, n) ((void)0) /* set once, by this main, before any output */
#include "../gpu/test_delta_cuda.c"
#include "fake_test.h"
#undef setvbuf
#undef main
#undef ferry_delta_cuda_apply

ferry_status_t fake_ferry_delta_cuda_apply(ferry_delta_cuda_t *d, ferry_delta_cuda_item_t *items, size_t n,
                                          cudaStream_t stream, ferry_errbuf_t *err);
ferry_status_t checked_apply(ferry_delta_cuda_t *d, ferry_delta_cuda_item_t *items, size_t n, cudaStream_t stream,
                             ferry_errbuf_t *err) {
    const ferry_status_t st = fake_ferry_delta_cuda_apply(d, items, n, stream, err);
    fake_check_quiet("an apply", -1, st);
    return st;
}

enum { N = 5 };

/* test_parts' batch: the raw region first, wrong base; another version;
   a wrong base; two good ones. pre[i]: each region before the call. */
static void inj_batch(tcase_t **t, ferry_delta_cuda_item_t *items, uint8_t **pre) {
    for (int i = 0; i < N; i++) {
        t[i] = tcase_new("injected", FERRY_DTYPE_BF16, i == 0 ? 2 * 4096 : 5 * 4096 + 100);
        make_random(t[i], 0.02, 900 + (uint64_t)i);
        if (i == 0) {
            uint64_t s = 9;
            for (uint64_t x = 0; x < t[i]->n; x++) elem_put(t[i]->next, 2, x, (uint32_t)rng(&s) & 0xFFFF);
        }
        tcase_encode(t[i], 4096, 0, 0);
        items[i] = item_of(t[i]);
    }
    spoil_base_raw(t[0], &items[0]);
    spoil_version(t[2], &items[2]);
    spoil_base_sparse(t[3], &items[3]);
    for (int i = 0; i < N; i++) pre[i] = t[i]->base; /* the spoilers wrote the regions from base */
}

static void inj_restore(tcase_t **t, uint8_t **pre) {
    for (int i = 0; i < N; i++) CUDA_OK(cudaMemcpy(t[i]->dev, pre[i], t[i]->n * 2, cudaMemcpyHostToDevice));
}

static const ferry_status_t want_clean[N] = {FERRY_ERR_MISMATCH, FERRY_OK, FERRY_ERR_MISMATCH, FERRY_ERR_MISMATCH,
                                             FERRY_OK};

/* The outcome of a call with failures injected (st: what it returned). */
static void inj_check(tcase_t **t, ferry_delta_cuda_item_t *items, uint8_t **pre, ferry_status_t st,
                      const char *what, long nth) {
    fake_check_quiet(what, nth, st);
    for (int i = 0; i < N; i++) {
        const ferry_status_t s = items[i].status;
        bool ok;
        if (st == FERRY_ERR_IO) ok = s == FERRY_ERR_IO; /* every region unknown */
        else if (s == FERRY_ERR_NO_MEMORY) ok = st == FERRY_ERR_NO_MEMORY && region_is(t[i], pre[i], "region before");
        else ok = s == want_clean[i] && region_is(t[i], s == FERRY_OK ? t[i]->next : pre[i], "expected region");
        if (!ok) {
            fprintf(stderr, "%s %ld: the call returned %s, item %d %s (a call without failures: %s)\n", what, nth,
                    ferry_status_name(st), i, ferry_status_name(s), ferry_status_name(want_clean[i]));
            exit(1);
        }
    }
}

/* The batch applied on a fresh object with the nth allocation, operation
   or timing read failing (-1: none; allocations once, or from there on
   when sticky). Returns what the call returned; *count: the allocations,
   operations or timing reads it made. */
static ferry_status_t inj_run(uint64_t seed, enum fake_inj kind, bool sticky, long nth, long *count) {
    ferry_errbuf_t err = {{0}};
    tcase_t *t[N];
    ferry_delta_cuda_item_t items[N];
    uint8_t *pre[N];
    g_format = 2;
    inj_batch(t, items, pre);
    ferry_delta_cuda_t *fresh = NULL;
    CHECK_OK(fake_ferry_delta_cuda_create(0, &fresh, &err), err.text);
    fake_ferry_delta_cuda_set_group_min(fresh, 1);
    fake_cuda_reset(seed);
    const long before = fake_inj_count(kind), fired = fake_cuda_injected();
    fake_inj_arm(kind, sticky, nth);
    const ferry_status_t st = fake_ferry_delta_cuda_apply(fresh, items, N, g_stream, &err);
    *count = fake_inj_count(kind) - before;
    fake_inj_fired(fired, kind, sticky, nth);
    inj_check(t, items, pre, st, fake_inj_names[kind], nth);
    if (nth < 0 || kind == FAKE_INJ_TIMING) CHECK(st == FERRY_ERR_MISMATCH); /* a timing that fails is no failure */
    else CHECK(st == FERRY_ERR_MISMATCH || st == (kind == FAKE_INJ_OP ? FERRY_ERR_IO : FERRY_ERR_NO_MEMORY));
    /* the same object, the same batch, no failure: as a call without them */
    fake_cuda_reset(seed);
    inj_restore(t, pre);
    for (int i = 0; i < N; i++) items[i] = item_of(t[i]), items[i].base_version = i == 2 ? 6 : t[i]->version;
    CHECK(fake_ferry_delta_cuda_apply(fresh, items, N, g_stream, &err) == FERRY_ERR_MISMATCH);
    inj_check(t, items, pre, FERRY_ERR_MISMATCH, "after", nth);
    fake_ferry_delta_cuda_destroy(fresh);
    for (int i = 0; i < N; i++) tcase_free(t[i]);
    return st;
}

static void test_injected(uint64_t seed, bool sticky) {
    long allocs = 0, ops = 0, timings = 0, n;
    inj_run(seed, FAKE_INJ_ALLOC, sticky, -1, &allocs);
    inj_run(seed, FAKE_INJ_OP, sticky, -1, &ops);
    inj_run(seed, FAKE_INJ_TIMING, sticky, -1, &timings);
    unsigned fell_back = 0, io = 0, nomem = 0;
    for (long i = 0; i < allocs; i++) {
        ferry_status_t st = inj_run(seed, FAKE_INJ_ALLOC, sticky, i, &n);
        fell_back += st != FERRY_ERR_NO_MEMORY, nomem += st == FERRY_ERR_NO_MEMORY;
    }
    for (long i = 0; i < ops; i++) io += inj_run(seed, FAKE_INJ_OP, sticky, i, &n) == FERRY_ERR_IO;
    for (long i = 0; i < timings; i++) inj_run(seed, FAKE_INJ_TIMING, sticky, i, &n);
    CHECK(io == (unsigned)ops && nomem > 0 && timings > 0);
    printf("queued work run %s: each of %ld allocations failed in turn (%s): %u calls NO_MEMORY with their regions "
           "as they were, %u went on; each of %ld operations failed in turn: IO; each of %ld timing reads: no "
           "failure; nothing left queued or as the last error, the object sound after\n",
           fake_order(seed), allocs,
           sticky ? "and every one after" : "once", nomem, fell_back, ops, timings);
}

/* ---- the host's own time ------------------------------------------------------------ */

static int cmp_double(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* --host-bench: the CPU time ferry_delta_cuda_apply takes before it first
   waits for the GPU (checks, tables, enqueues: what decides how soon each
   group's passes can start on a GPU), per chunk record, on a warm object:
   4 bf16 regions of 2^24 elements, synthetic Adam at lr 1e-6, format 2,
   chunks of 2^16 (1024 records), in the model's lazy order (nothing runs
   before that wait), the kernels skipped after a first call that runs
   them (the calls' results then do not count). Median of 201 and the
   quartiles. Not a GPU figure: this machine's CPU, for comparing builds
   of delta_cuda.c. */
static int host_bench(void) {
    enum { R = 4, REPS = 201 };
    const uint64_t n = 1u << 24;
    tcase_t *t[R];
    ferry_delta_cuda_item_t items[R];
    g_format = 2;
    size_t records = 0;
    for (int i = 0; i < R; i++) {
        t[i] = tcase_new("bench", FERRY_DTYPE_BF16, n);
        make_synth(t[i], 1e-6, 3, 40 + (uint64_t)i);
        tcase_encode(t[i], 1u << 16, 0, 0);
        items[i] = item_of(t[i]);
        records += get_u32(t[i]->delta + 20);
    }
    ferry_errbuf_t err = {{0}};
    double host[REPS], first[REPS];
    for (int r = -1; r < REPS; r++) { /* the first call grows the object's tables, and applies */
        fake_cuda_reset(0);
        fake_cuda_mark();
        const ferry_status_t st = fake_ferry_delta_cuda_apply(g_gpu, items, R, g_stream, &err);
        if (r < 0) CHECK_OK(st, err.text);
        fake_cuda_skip_kernels(true);
        ferry_delta_cuda_times_t tm;
        fake_ferry_delta_cuda_last_times(g_gpu, &tm);
        if (r >= 0) host[r] = fake_cuda_mark_to_wait_s(), first[r] = tm.host_s;
    }
    qsort(host, REPS, sizeof host[0], cmp_double);
    qsort(first, REPS, sizeof first[0], cmp_double);
    fake_cuda_skip_kernels(false);
    printf("host time before the first wait: %.3f ms (quartiles %.3f-%.3f) for %zu records: %.3f us a record; the "
           "first group's checks and tables (times.host_s): %.3f ms (%.3f-%.3f)\n",
           1e3 * host[REPS / 2], 1e3 * host[REPS / 4], 1e3 * host[3 * REPS / 4], records,
           1e6 * host[REPS / 2] / (double)records, 1e3 * first[REPS / 2], 1e3 * first[REPS / 4],
           1e3 * first[3 * REPS / 4]);
    for (int i = 0; i < R; i++) tcase_free(t[i]);
    return 0;
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc > 1 && !strcmp(argv[1], "--host-bench")) {
        char detail[256];
        ferry_errbuf_t err = {{0}};
        CHECK(ferry_ctx_create(NULL, &g_ctx, detail, sizeof detail) == FERRY_OK);
        CHECK(ferry_delta_codec_create(g_ctx, &g_codec) == FERRY_OK);
        CHECK_OK(fake_ferry_delta_cuda_create(0, &g_gpu, &err), err.text);
        CUDA_OK(cudaStreamCreate(&g_stream));
        const int rc = host_bench();
        fake_ferry_delta_cuda_destroy(g_gpu);
        cudaStreamDestroy(g_stream);
        ferry_delta_codec_destroy(g_codec);
        ferry_ctx_destroy(g_ctx);
        return rc;
    }
    const bool only_injected = argc > 1 && !strcmp(argv[1], "--injected"); /* part 2 alone */
    if (!only_injected && fake_gpu_cases(gpu_test_main, argv, "tests/gpu/test_delta_cuda.c")) return 1;
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &g_ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(g_ctx, &g_codec) == FERRY_OK);
    CUDA_OK(cudaStreamCreate(&g_stream));
    for (uint64_t seed = 3; seed < 9; seed++) test_injected(seed, seed >= 6); /* each order, once and sticky */
    cudaStreamDestroy(g_stream);
    ferry_delta_codec_destroy(g_codec);
    ferry_ctx_destroy(g_ctx);
    CHECK(fake_cuda_live_bytes() == 0);
    printf("the GPU apply's host code on the model of CUDA: all cases passed\n");
    return 0;
}
