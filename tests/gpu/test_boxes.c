/* GPU box copies (src/sync/strided.cu): batches of random gathers,
 * scatters and strided-to-strided copies (tests/unit/box_cases.h) in device
 * and pinned host memory, byte for byte against the CPU functions of
 * strided.c, with the bytes between and around the boxes untouched; many
 * batches in flight on two streams while the table buffers grow; single
 * 512 MiB jobs at every alignment; bad batches refused.
 * `gpu_test_boxes --bench`: copy bandwidth beside cudaMemcpyAsync.
 * Exits 77 where there is no usable GPU. */
#include <cuda_runtime_api.h>
#include <stdlib.h>
#include <string.h>

#include "box_cases.h"
#include "check.h"
#include "common/cuda.h"
#include "sync/strided_cuda.h"

#define CU(call)                                                                                              \
    do {                                                                                                      \
        cudaError_t e_ = (call);                                                                              \
        if (e_ != cudaSuccess) {                                                                              \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call, cudaGetErrorName(e_),          \
                    cudaGetErrorString(e_));                                                                  \
            exit(1);                                                                                          \
        }                                                                                                     \
    } while (0)

#define MIB (1ull << 20)

static ferry_errbuf_t err;

static void fill_random(uint8_t *p, uint64_t n) {
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t x = rng_next();
        memcpy(p + i, &x, 8);
    }
    for (; i < n; i++) p[i] = (uint8_t)rng_next();
}

static void fill_guard(uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++) p[i] = (uint8_t)(i * 131 + 7);
}

static void *gpu_alloc(uint64_t n, bool pinned) {
    void *p = NULL;
    if (pinned) CU(cudaHostAlloc(&p, n, cudaHostAllocDefault));
    else CU(cudaMalloc(&p, n));
    return p;
}

static void gpu_free(void *p, bool pinned) {
    if (pinned) CU(cudaFreeHost(p));
    else CU(cudaFree(p));
}

static void *host_alloc(uint64_t n) {
    void *p = malloc(n);
    CHECK(p);
    return p;
}

/* Batches of random cases over one pair of arenas: all enqueued (batch k on
 * streams[k % nstreams]), then checked once. Returns the number of cases. */
static size_t run_cases(sync_cuda_boxes_t *b, const char *name, const box_gen_t *g, const size_t *batch_sizes,
                        size_t nbatches, uint64_t arena, bool src_pinned, bool dst_pinned, cudaStream_t *streams,
                        int nstreams) {
    uint8_t *src_h = host_alloc(arena), *want = host_alloc(arena), *got = host_alloc(arena);
    uint8_t *src = gpu_alloc(arena, src_pinned), *dst = gpu_alloc(arena, dst_pinned);
    fill_random(src_h, arena);
    fill_guard(want, arena);
    CU(cudaMemcpy(src, src_h, arena, cudaMemcpyDefault));
    CU(cudaMemcpy(dst, want, arena, cudaMemcpyDefault));
    CU(cudaDeviceSynchronize()); /* the streams below do not wait for the legacy stream */
    size_t total = 0;
    for (size_t k = 0; k < nbatches; k++) total += batch_sizes[k];
    box_case_t *cs = calloc(total, sizeof *cs);
    sync_box_copy_t *jobs = calloc(total, sizeof *jobs);
    CHECK(cs && jobs);
    uint64_t cursor = 0, bytes = 0;
    size_t n = 0, batches = 0, last_dev_bytes = 0;
    for (size_t k = 0; k < nbatches; k++) {
        size_t first = n;
        while (n - first < batch_sizes[k] && box_case_rand(&cs[n], g, &cursor, arena, arena)) {
            box_case_ref(&cs[n], want, src_h);
            jobs[n] = box_case_job(&cs[n], dst, src);
            bytes += box_numel(&cs[n].box) * cs[n].esz;
            n++;
        }
        if (n == first) break;
        CHECK_OK(sync_cuda_boxes_enqueue(b, jobs + first, n - first, streams[k % (size_t)nstreams], &err), err.text);
        /* the batch was read before the call returned: scribbling on it changes nothing */
        memset(jobs + first, 0xff, (n - first) * sizeof *jobs);
        size_t dev_bytes = sync_cuda_boxes_device_bytes(b);
        CHECK(dev_bytes >= last_dev_bytes && dev_bytes > 0);
        last_dev_bytes = dev_bytes;
        batches++;
    }
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(got, dst, arena, cudaMemcpyDefault));
    char what[256];
    snprintf(what, sizeof what, "%s: %zu cases in %zu batches (%llu bytes; src %s, dst %s)", name, n, batches,
             (unsigned long long)bytes, src_pinned ? "pinned host" : "device", dst_pinned ? "pinned host" : "device");
    box_compare(what, got, want, arena, cs, n);
    printf("%s: ok (table buffers %zu bytes of device memory)\n", what, sync_cuda_boxes_device_bytes(b));
    free(cs), free(jobs), free(src_h), free(want), free(got);
    gpu_free(src, src_pinned);
    gpu_free(dst, dst_pinned);
    return n;
}

static void random_cases(sync_cuda_boxes_t *b) {
    cudaStream_t s[2];
    CU(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
    CU(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));
    box_gen_t mixed = {4096, false, false}, cols = {20000, true, false}, longr = {150000, false, true},
              tiny = {64, false, false};
    size_t one[1] = {5000};
    CHECK(run_cases(b, "mixed", &mixed, one, 1, 64 * MIB, false, false, s, 1) >= 3000);
    CHECK(run_cases(b, "columns", &cols, one, 1, 64 * MIB, false, false, s, 1) >= 1000);
    one[0] = 400;
    CHECK(run_cases(b, "long runs", &longr, one, 1, 64 * MIB, false, false, s, 1) >= 100);
    one[0] = 20000;
    CHECK(run_cases(b, "tiny", &tiny, one, 1, 16 * MIB, false, false, s, 1) == 20000);
    /* many batches in flight on two streams, the table buffers growing and
     * shrinking batch sizes reusing them */
    size_t sizes[40];
    for (size_t k = 0; k < 40; k++) sizes[k] = 1 + (k * k * 37 + k * 11) % 2500;
    box_gen_t small = {512, false, false};
    run_cases(b, "batches", &small, sizes, 40, 128 * MIB, false, false, s, 2);
    one[0] = 600;
    run_cases(b, "pinned source", &mixed, one, 1, 16 * MIB, true, false, s, 1);
    run_cases(b, "pinned destination", &mixed, one, 1, 16 * MIB, false, true, s, 1);
    CU(cudaStreamDestroy(s[0]));
    CU(cudaStreamDestroy(s[1]));
}

/* Single 512 MiB jobs: contiguous at several alignments, and a gather of
 * half of every 16 KiB row. */
static void huge(sync_cuda_boxes_t *b) {
    const uint64_t N = 512 * MIB, pad = 64;
    uint8_t *src_h = host_alloc(N + pad), *want = host_alloc(N + pad), *got = host_alloc(N + pad);
    uint8_t *src, *dst;
    CU(cudaMalloc((void **)&src, N + pad));
    CU(cudaMalloc((void **)&dst, N + pad));
    fill_random(src_h, N + pad);
    CU(cudaMemcpy(src, src_h, N + pad, cudaMemcpyHostToDevice));
    static const struct {
        uint32_t dst_at, src_at, esz;
    } v[] = {{0, 0, 8}, {5, 5, 1}, {0, 3, 1}, {8, 0, 4}, {6, 2, 2}};
    for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
        int64_t one = 1;
        ferry_box_t box = {.ndim = 1, .extent = {(int64_t)(N / v[i].esz)}};
        memset(want, 0xa5, N + pad);
        sync_gather(want + v[i].dst_at, src_h + v[i].src_at, 0, &one, &box, v[i].esz);
        CU(cudaMemset(dst, 0xa5, N + pad));
        sync_box_copy_t job = {dst + v[i].dst_at, NULL, src + v[i].src_at, &one, box, v[i].esz};
        CHECK_OK(sync_cuda_boxes_enqueue(b, &job, 1, 0, &err), err.text);
        CU(cudaDeviceSynchronize());
        CU(cudaMemcpy(got, dst, N + pad, cudaMemcpyDeviceToHost));
        char what[128];
        snprintf(what, sizeof what, "512 MiB contiguous, dst +%u, src +%u, esz %u", v[i].dst_at, v[i].src_at, v[i].esz);
        box_compare(what, got, want, N + pad, NULL, 0);
        printf("%s: ok\n", what);
    }
    /* rows of 16 KiB, columns 1..4097 of bf16: 8 KiB of each (2 bytes past the row start) */
    int64_t strides[2] = {8192, 1};
    ferry_box_t box = {.ndim = 2, .extent = {(int64_t)(N / 16384), 4096}};
    memset(want, 0xa5, N + pad);
    sync_gather(want, src_h, 2, strides, &box, 2);
    CU(cudaMemset(dst, 0xa5, N + pad));
    sync_box_copy_t job = {dst, NULL, src + 2, strides, box, 2};
    CHECK_OK(sync_cuda_boxes_enqueue(b, &job, 1, 0, &err), err.text);
    CU(cudaDeviceSynchronize());
    CU(cudaMemcpy(got, dst, N + pad, cudaMemcpyDeviceToHost));
    box_compare("256 MiB gather of half rows", got, want, N + pad, NULL, 0);
    printf("256 MiB gather of half rows (8 KiB of 16 KiB, 2 bytes in): ok\n");
    CU(cudaFree(src));
    CU(cudaFree(dst));
    free(src_h), free(want), free(got);
}

static void refusals(ferry_ctx_t *ctx, sync_cuda_boxes_t *b) {
    int ndev = 0;
    CU(cudaGetDeviceCount(&ndev));
    sync_cuda_boxes_t *none = NULL;
    CHECK_FAILS(sync_cuda_boxes_create(ctx, ndev, &none, &err), FERRY_ERR_UNSUPPORTED, err.text, "there are");
    CHECK(none == NULL);
    sync_cuda_boxes_destroy(NULL);

    uint8_t *d;
    CU(cudaMalloc((void **)&d, 4096));
    CU(cudaMemset(d, 0x5a, 4096));
    ferry_box_t box = {.ndim = 1, .extent = {64}};
    sync_box_copy_t jobs[2] = {{d, NULL, d + 2048, NULL, box, 4}, {d + 512, NULL, d + 3072, NULL, box, 3}};
    CHECK_FAILS(sync_cuda_boxes_enqueue(b, jobs, 2, 0, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "box copy 1: esz 3 is not 1, 2, 4 or 8");
    CHECK_OK(sync_cuda_boxes_enqueue(b, jobs, 0, 0, &err), err.text);
    jobs[0].box.extent[0] = 0; /* nothing to move */
    CHECK_OK(sync_cuda_boxes_enqueue(b, jobs, 1, 0, &err), err.text);
    CU(cudaDeviceSynchronize());
    uint8_t got[4096];
    CU(cudaMemcpy(got, d, sizeof got, cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < sizeof got; i++) CHECK(got[i] == 0x5a); /* the refused batch queued nothing */
    CU(cudaFree(d));
    printf("refusals: ok\n");
}

/* ---- --bench ---- */

typedef struct bench_op {
    sync_cuda_boxes_t *b;
    const sync_box_copy_t *jobs;
    size_t n;
    uint8_t *dst;
    const uint8_t *src;
    uint64_t bytes, count; /* memcpy: count copies of bytes each, at stride apart */
    uint64_t width, dpitch, spitch, rows; /* memcpy2d */
    const uint32_t *perm;
} bench_op_t;

typedef void (*bench_fn)(const bench_op_t *op, cudaStream_t s);

static void op_ferry(const bench_op_t *op, cudaStream_t s) {
    CHECK_OK(sync_cuda_boxes_enqueue(op->b, op->jobs, op->n, s, &err), err.text);
}
static void op_memcpy(const bench_op_t *op, cudaStream_t s) {
    for (uint64_t i = 0; i < op->count; i++) {
        uint64_t from = op->perm ? op->perm[i] : i;
        CU(cudaMemcpyAsync(op->dst + i * op->bytes, op->src + from * op->bytes, op->bytes, cudaMemcpyDeviceToDevice, s));
    }
}
static void op_memcpy2d(const bench_op_t *op, cudaStream_t s) {
    CU(cudaMemcpy2DAsync(op->dst, op->dpitch, op->src, op->spitch, op->width, op->rows, cudaMemcpyDeviceToDevice, s));
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Median of 5 (after one warm-up) of GB/s (1e9 bytes copied per second,
 * from events around the call: the call's host work counts), and of the
 * call's own host time in ms. */
static double bench(bench_fn fn, const bench_op_t *op, uint64_t bytes, double *host_ms) {
    cudaStream_t s;
    cudaEvent_t a, z;
    CU(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CU(cudaEventCreate(&a));
    CU(cudaEventCreate(&z));
    double gbs[5], host[5];
    for (int i = -1; i < 5; i++) {
        CU(cudaDeviceSynchronize());
        CU(cudaEventRecord(a, s));
        double t0 = now_s();
        fn(op, s);
        double t1 = now_s();
        CU(cudaEventRecord(z, s));
        CU(cudaEventSynchronize(z));
        float ms = 0;
        CU(cudaEventElapsedTime(&ms, a, z));
        if (i >= 0) {
            gbs[i] = (double)bytes / (ms * 1e-3) / 1e9;
            host[i] = (t1 - t0) * 1e3;
        }
    }
    qsort(gbs, 5, sizeof gbs[0], cmp_double);
    qsort(host, 5, sizeof host[0], cmp_double);
    if (host_ms) *host_ms = host[2];
    CU(cudaEventDestroy(a));
    CU(cudaEventDestroy(z));
    CU(cudaStreamDestroy(s));
    return gbs[2];
}

static void run_bench(sync_cuda_boxes_t *b) {
    printf("bench: GB/s = 1e9 bytes copied per second (each byte read once and written once), median of 5;\n"
           "ferry's time is from before its enqueue call (table build and upload included) to the copy's end\n");
    const uint64_t G = 1ull << 30;
    uint8_t *src, *dst;
    double host_ms, f, m, m2;

    /* 1 GiB contiguous, one job */
    CU(cudaMalloc((void **)&src, 2 * G));
    CU(cudaMalloc((void **)&dst, G));
    ferry_box_t box1 = {.ndim = 1, .extent = {(int64_t)(G / 8)}};
    sync_box_copy_t job = {dst, NULL, src, NULL, box1, 8};
    bench_op_t op = {.b = b, .jobs = &job, .n = 1, .dst = dst, .src = src, .bytes = G, .count = 1};
    f = bench(op_ferry, &op, G, &host_ms);
    m = bench(op_memcpy, &op, G, NULL);
    printf("contiguous 1 GiB, 1 job:              ferry %7.1f GB/s (enqueue %.3f ms) | cudaMemcpyAsync %7.1f GB/s\n", f,
           host_ms, m);

    /* 1 GiB gather of half rows: 8 KiB of each 16 KiB row (bf16) */
    int64_t rows16[2] = {8192, 1};
    ferry_box_t half = {.ndim = 2, .extent = {(int64_t)(G / 8192), 4096}};
    sync_box_copy_t gjob = {dst, NULL, src, rows16, half, 2};
    op = (bench_op_t){.b = b, .jobs = &gjob, .n = 1, .dst = dst, .src = src, .bytes = G, .count = 1,
                      .width = 8192, .dpitch = 8192, .spitch = 16384, .rows = G / 8192};
    f = bench(op_ferry, &op, G, &host_ms);
    m = bench(op_memcpy, &op, G, NULL);
    m2 = bench(op_memcpy2d, &op, G, NULL);
    printf("1 GiB of half rows (8 of 16 KiB):     ferry %7.1f GB/s (enqueue %.3f ms) | cudaMemcpyAsync (1 GiB "
           "contiguous) %7.1f GB/s | cudaMemcpy2DAsync %7.1f GB/s\n",
           f, host_ms, m, m2);

    /* 1 GiB of 256-byte rows out of 512-byte rows: many tiny runs */
    int64_t rows512[2] = {128, 1};
    ferry_box_t quarter = {.ndim = 2, .extent = {(int64_t)(G / 256), 64}};
    sync_box_copy_t tjob = {dst, NULL, src, rows512, quarter, 4};
    op = (bench_op_t){.b = b, .jobs = &tjob, .n = 1, .dst = dst, .src = src, .bytes = G, .count = 1,
                      .width = 256, .dpitch = 256, .spitch = 512, .rows = G / 256};
    f = bench(op_ferry, &op, G, &host_ms);
    m2 = bench(op_memcpy2d, &op, G, NULL);
    printf("1 GiB of 256-byte rows (of 512):      ferry %7.1f GB/s (enqueue %.3f ms) | cudaMemcpy2DAsync %7.1f GB/s\n",
           f, host_ms, m2);

    /* 100k jobs of 4 KiB, each from a random 4 KiB block */
    enum { NJ = 100000, JB = 4096 };
    sync_box_copy_t *jobs = calloc(NJ, sizeof *jobs);
    uint32_t *perm = calloc(NJ, sizeof *perm);
    CHECK(jobs && perm);
    for (uint32_t i = 0; i < NJ; i++) perm[i] = i;
    for (uint32_t i = NJ - 1; i > 0; i--) {
        uint32_t k = (uint32_t)(rng_next() % (i + 1)), t = perm[i];
        perm[i] = perm[k];
        perm[k] = t;
    }
    ferry_box_t box4k = {.ndim = 1, .extent = {JB / 4}};
    for (uint32_t i = 0; i < NJ; i++)
        jobs[i] = (sync_box_copy_t){dst + (uint64_t)i * JB, NULL, src + (uint64_t)perm[i] * JB, NULL, box4k, 4};
    const uint64_t total = (uint64_t)NJ * JB;
    op = (bench_op_t){.b = b, .jobs = jobs, .n = NJ, .dst = dst, .src = src, .bytes = total, .count = 1};
    f = bench(op_ferry, &op, total, &host_ms);
    m = bench(op_memcpy, &op, total, NULL);
    bench_op_t many = {.dst = dst, .src = src, .bytes = JB, .count = NJ, .perm = perm};
    double many_ms;
    m2 = bench(op_memcpy, &many, total, &many_ms);
    printf("100k jobs of 4 KiB (%.0f MB):         ferry %7.1f GB/s (enqueue %.3f ms) | cudaMemcpyAsync (one "
           "copy of all) %7.1f GB/s | 100k cudaMemcpyAsync %7.1f GB/s (calls %.1f ms)\n",
           (double)total / 1e6, f, host_ms, m, m2, many_ms);
    free(jobs), free(perm);
    CU(cudaFree(src));
    CU(cudaFree(dst));
}

int main(int argc, char **argv) {
    bool bench_mode = argc > 1 && strcmp(argv[1], "--bench") == 0;
    if (argc > 1 && !bench_mode) {
        fprintf(stderr, "usage: %s [--bench]\n", argv[0]);
        return 2;
    }
    if (ferry_cuda_init(&err) != FERRY_OK) {
        printf("skipped: %s\n", err.text);
        return 77;
    }
    CU(cudaSetDevice(0));
    struct cudaDeviceProp prop;
    CU(cudaGetDeviceProperties(&prop, 0));
    printf("device 0: %s\n", prop.name);
    ferry_ctx_t *ctx = test_ctx();
    sync_cuda_boxes_t *b = NULL;
    CHECK_OK(sync_cuda_boxes_create(ctx, 0, &b, &err), err.text);
    if (bench_mode) {
        run_bench(b);
    } else {
        refusals(ctx, b);
        random_cases(b);
        huge(b);
    }
    sync_cuda_boxes_destroy(b);
    ferry_ctx_destroy(ctx);
    return 0;
}
