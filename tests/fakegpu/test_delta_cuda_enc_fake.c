/* The GPU delta encoder's host code (codec/delta_cuda_enc.c) on the CPU,
 * in CI: against the model of the CUDA runtime in fake_cuda.c and the CPU
 * passes of ek_cpu.c (and, for the round trips, the apply's: dk_cpu.c).
 * (The kernels themselves run on a GPU host only:
 * tests/gpu/test_delta_cuda_enc.c; their decisions and bits are checked on
 * the CPU by test_delta_enc_dev.c.)
 *
 * 1. tests/gpu/test_delta_cuda_enc.c itself, every case, once per order the
 *    model runs queued work in (only when waited for, as enqueued, at
 *    random): frames byte-identical to the CPU encoder's, in one slice, a
 *    chunk at a time and a few chunks at a time, kept on the device and
 *    copied out; each encode leaves nothing queued and no CUDA error.
 * 2. Failures injected into a batch encoded in several slices (raw,
 *    unchanged and sparse chunks, base sums given, a region that is not
 *    16-aligned): each allocation in turn (once, and from there on), each
 *    operation (enqueue or synchronisation), each timing read. Every time:
 *    NO_MEMORY or IO with every item saying so (a timing read: no failure,
 *    the frames right), nothing left queued or as the last error, and the
 *    object encodes the same batch right after, byte for byte. */
#include "fake_cuda.h"

#include <stdio.h>

/* Every encode of the GPU test's cases: nothing left queued when it
   returns, nothing left as the last CUDA error. */
#undef ferry_delta_cuda_encode
#define ferry_delta_cuda_encode checked_encode
#include "codec/delta_cuda_enc.h" /* declares checked_encode */

int gpu_test_main(int argc, char **argv); /* the GPU test's main */
#define main gpu_test_main
#define setvbuf(f, b, m, n) ((void)0) /* set once, by this main, before any output */
#include "../gpu/test_delta_cuda_enc.c"
#include "fake_test.h"
#undef setvbuf
#undef main
#undef ferry_delta_cuda_encode

ferry_status_t fake_ferry_delta_cuda_encode(ferry_delta_cuda_enc_t *e, ferry_delta_cuda_enc_item_t *items, size_t n,
                                            cudaStream_t stream, ferry_errbuf_t *err);

ferry_status_t checked_encode(ferry_delta_cuda_enc_t *e, ferry_delta_cuda_enc_item_t *items, size_t n,
                              cudaStream_t stream, ferry_errbuf_t *err) {
    const ferry_status_t st = fake_ferry_delta_cuda_encode(e, items, n, stream, err);
    fake_check_quiet("an encode", -1, st);
    return st;
}

/* ---- failures injected ----------------------------------------------------------- */

enum { N = 5 };

static void inj_batch(tcase_t **t) {
    t[0] = tcase_new("bf16 random 3%", FERRY_DTYPE_BF16, 40000, 4096, 0);
    make_random(t[0], 0.03, 300, 1);
    t[1] = tcase_new("f32 random 5%, at +4 bytes", FERRY_DTYPE_F32, 30000, 4096, 4);
    make_random(t[1], 0.05, 10, 2);
    t[2] = tcase_new("bf16 dense: raw chunks", FERRY_DTYPE_BF16, 9000, 4096, 0);
    make_random(t[2], 0.9, 1000, 3);
    t[3] = tcase_new("bf16 unchanged", FERRY_DTYPE_BF16, 5000, 1024, 0);
    make_random(t[3], 0, 1, 4);
    t[4] = tcase_new("f16 random 1%, base sums given", FERRY_DTYPE_F16, 50000, 8192, 2);
    t[4]->give_sums = true;
    make_random(t[4], 0.01, 50, 5);
    for (int i = 0; i < N; i++) tcase_ready(t[i]);
}

/* Each item's frame is the CPU encoder's. */
static void inj_frames_right(tcase_t **t, const ferry_delta_cuda_enc_item_t *items, const char *what, long nth) {
    for (int i = 0; i < N; i++)
        if (items[i].status != FERRY_OK || items[i].len != t[i]->cpu_len ||
            memcmp(t[i]->gpu, t[i]->cpu, t[i]->cpu_len) != 0) {
            fprintf(stderr, "%s %ld: item %d (%s) %s, its frame %zu bytes (the CPU's %zu)%s\n", what, nth, i,
                    t[i]->what, ferry_status_name(items[i].status), items[i].len, t[i]->cpu_len,
                    items[i].status == FERRY_OK ? ", differs" : "");
            exit(1);
        }
}

/* The batch encoded by a fresh object (slices of at most 1500 changes)
   with the nth allocation, operation or timing read failing (-1: none).
   Returns what the call returned; *count: the allocations, operations or
   timing reads it made. */
static tcase_t *g_inj[N]; /* made once (the encoder only reads the regions) */

static ferry_status_t inj_run(uint64_t seed, enum fake_inj kind, bool sticky, long nth, long *count) {
    ferry_errbuf_t err = {{0}};
    tcase_t **t = g_inj;
    ferry_delta_cuda_enc_item_t items[N];
    ferry_delta_cuda_enc_t *enc = NULL;
    CHECK_OK(fake_ferry_delta_cuda_enc_create(0, &enc, &err), err.text);
    fake_ferry_delta_cuda_enc_set_slice_max(enc, 1500, 16);
    for (int i = 0; i < N; i++) items[i] = item_of(t[i]), memset(t[i]->gpu, 0, t[i]->cap);
    fake_cuda_reset(seed);
    const long before = fake_inj_count(kind), fired = fake_cuda_injected();
    fake_inj_arm(kind, sticky, nth);
    const ferry_status_t st = fake_ferry_delta_cuda_encode(enc, items, N, g_stream, &err);
    *count = fake_inj_count(kind) - before;
    fake_inj_fired(fired, kind, sticky, nth);
    fake_check_quiet(fake_inj_names[kind], nth, st);
    if (nth < 0 || kind == FAKE_INJ_TIMING || st == FERRY_OK) {
        CHECK(st == FERRY_OK);
        inj_frames_right(t, items, fake_inj_names[kind], nth);
    } else {
        const ferry_status_t want = kind == FAKE_INJ_OP ? FERRY_ERR_IO : FERRY_ERR_NO_MEMORY;
        if (st != want) {
            fprintf(stderr, "%s %ld failed: the call returned %s (%s), not %s\n", fake_inj_names[kind], nth,
                    ferry_status_name(st), err.text, ferry_status_name(want));
            exit(1);
        }
        for (int i = 0; i < N; i++) CHECK(items[i].status == want);
    }
    /* the same object, the same batch, no failure: the CPU's frames */
    fake_cuda_reset(seed);
    for (int i = 0; i < N; i++) items[i] = item_of(t[i]), memset(t[i]->gpu, 0, t[i]->cap);
    CHECK_OK(fake_ferry_delta_cuda_encode(enc, items, N, g_stream, &err), err.text);
    fake_check_quiet("after", nth, FERRY_OK);
    inj_frames_right(t, items, "after", nth);
    fake_ferry_delta_cuda_enc_destroy(enc);
    return st;
}

static void test_injected(uint64_t seed, bool sticky) {
    long allocs = 0, ops = 0, timings = 0, n;
    inj_run(seed, FAKE_INJ_ALLOC, sticky, -1, &allocs);
    inj_run(seed, FAKE_INJ_OP, sticky, -1, &ops);
    inj_run(seed, FAKE_INJ_TIMING, sticky, -1, &timings);
    unsigned nomem = 0, io = 0;
    for (long i = 0; i < allocs; i++) nomem += inj_run(seed, FAKE_INJ_ALLOC, sticky, i, &n) == FERRY_ERR_NO_MEMORY;
    for (long i = 0; i < ops; i++) io += inj_run(seed, FAKE_INJ_OP, sticky, i, &n) == FERRY_ERR_IO;
    for (long i = 0; i < timings; i++) inj_run(seed, FAKE_INJ_TIMING, sticky, i, &n);
    CHECK(allocs > 0 && nomem == (unsigned)allocs && io == (unsigned)ops && timings > 0);
    printf("queued work run %s: each of %ld allocations failed in turn (%s): NO_MEMORY; each of %ld operations: "
           "IO; each of %ld timing reads: no failure, the frames right; nothing left queued or as the last error, "
           "the object's frames right after\n",
           fake_order(seed), allocs,
           sticky ? "and every one after" : "once", ops, timings);
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    const bool only_injected = argc > 1 && !strcmp(argv[1], "--injected"); /* part 2 alone */
    if (!only_injected && fake_gpu_cases(gpu_test_main, argv, "tests/gpu/test_delta_cuda_enc.c")) return 1;
    char detail[256];
    CHECK(ferry_ctx_create(NULL, &g_ctx, detail, sizeof detail) == FERRY_OK);
    CHECK(ferry_delta_codec_create(g_ctx, &g_codec) == FERRY_OK);
    CUDA_OK(cudaStreamCreate(&g_stream));
    inj_batch(g_inj);
    for (uint64_t seed = 3; seed < 9; seed++) test_injected(seed, seed >= 6); /* each order, once and sticky */
    for (int i = 0; i < N; i++) tcase_free(g_inj[i]);
    cudaStreamDestroy(g_stream);
    ferry_delta_codec_destroy(g_codec);
    ferry_ctx_destroy(g_ctx);
    CHECK(fake_cuda_live_bytes() == 0);
    printf("the GPU encoder's host code on the model of CUDA: all cases passed\n");
    return 0;
}
