/* ferry sum on the GPU (common/sum_cuda.h) equals ferry_sum on the CPU,
 * bit for bit: every length 0..1000, lengths around 64 KiB leaves and their
 * multiples (up to the 30/31-leaf switch of the top level), a few MiB and
 * 300 MiB, at start offsets 0..15, thousands of regions in one batch; the
 * leaves of the long regions also one by one, so a mismatch says whether
 * the leaf kernel or the top level is wrong. Then the API's edges: batches
 * of 0 regions, grow-only scratch, refusals.
 *
 *   gpu_test_sum           the test (exit 77 without a usable GPU)
 *   gpu_test_sum --bench   GB/s: 1 GiB in 64 MiB and in 1 MiB regions
 *                          (aligned, and at offset 2), a device-to-device
 *                          cudaMemcpy of 1 GiB, and ferry_sum on the CPU;
 *                          medians of 5 */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "common/sum.h"
#include "common/sum_cuda.h"
#include "gpu_check.h"

#define MIB ((uint64_t)1 << 20)
#define LEAF ((uint64_t)65536)

typedef struct want {
    uint64_t off, len; /* in the buffer */
    const char *what;
} want_t;

static uint8_t *g_host, *g_dev;
static uint64_t g_size;
static ferry_sum_cuda_t *g_sum;
static cudaStream_t g_stream;

/* Sums wants[0..n) on the GPU and on the CPU; prints every mismatch (up
   to 30). Returns the number of mismatches. */
static size_t run_batch(const want_t *wants, size_t n, const char *name) {
    ferry_sum_region_t *rg = calloc(n ? n : 1, sizeof *rg);
    uint64_t *got = calloc(n ? n : 1, sizeof *got);
    CHECK(rg && got);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++) {
        CHECK(wants[i].off + wants[i].len <= g_size);
        rg[i] = (ferry_sum_region_t){g_dev + wants[i].off, wants[i].len};
        bytes += wants[i].len;
    }
    ferry_errbuf_t err = {{0}};
    double t0 = now_s();
    CHECK_OK(ferry_sum_cuda_enqueue(g_sum, rg, n, g_stream, &err), err.text);
    CHECK_OK(ferry_sum_cuda_collect(g_sum, got, &err), err.text);
    double t1 = now_s();
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t want = ferry_sum(g_host + wants[i].off, wants[i].len);
        if (got[i] == want) continue;
        if (bad++ < 30)
            fprintf(stderr, "%s: region %zu (%s) len %llu at offset %llu (address %% 16 = %llu, %llu leaves): GPU %016llx, CPU %016llx\n",
                    name, i, wants[i].what, (unsigned long long)wants[i].len, (unsigned long long)wants[i].off,
                    (unsigned long long)(wants[i].off & 15),
                    (unsigned long long)(wants[i].len <= LEAF ? 1 : (wants[i].len + LEAF - 1) / LEAF),
                    (unsigned long long)got[i], (unsigned long long)want);
    }
    printf("%s: %zu regions, %.1f MiB, %zu mismatches (GPU %.3f s with the tables' copies)\n", name, n,
           (double)bytes / MIB, bad, t1 - t0);
    free(rg);
    free(got);
    return bad;
}

static double median5(double *v) {
    for (int i = 0; i < 5; i++)
        for (int j = i + 1; j < 5; j++)
            if (v[j] < v[i]) {
                double t = v[i];
                v[i] = v[j];
                v[j] = t;
            }
    return v[2];
}

static int bench(void) {
    const uint64_t total = (uint64_t)1 << 30;
    uint8_t *src = NULL, *dst = NULL;
    CUDA_OK(cudaMalloc((void **)&src, total + 64));
    CUDA_OK(cudaMalloc((void **)&dst, total));
    CUDA_OK(cudaMemset(src, 0x5a, total + 64)); /* xxh3's speed does not depend on the bytes */
    ferry_errbuf_t err = {{0}};
    struct {
        uint64_t region, offset;
    } cases[] = {{64 * MIB, 0}, {MIB, 0}, {64 * MIB, 2}, {MIB, 2}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = (size_t)(total / cases[c].region);
        ferry_sum_region_t *rg = calloc(n, sizeof *rg);
        uint64_t *out = calloc(n, sizeof *out);
        CHECK(rg && out);
        for (size_t i = 0; i < n; i++) rg[i] = (ferry_sum_region_t){src + cases[c].offset + i * cases[c].region, cases[c].region};
        double t[5];
        for (int rep = -1; rep < 5; rep++) { /* one warm-up */
            CUDA_OK(cudaStreamSynchronize(g_stream));
            double t0 = now_s();
            CHECK_OK(ferry_sum_cuda_enqueue(g_sum, rg, n, g_stream, &err), err.text);
            CHECK_OK(ferry_sum_cuda_collect(g_sum, out, &err), err.text);
            if (rep >= 0) t[rep] = now_s() - t0;
        }
        double m = median5(t);
        printf("ferry sum on the GPU: 1 GiB in %zu regions of %llu MiB at offset %llu: %.4f s, %.0f GB/s\n", n,
               (unsigned long long)(cases[c].region / MIB), (unsigned long long)cases[c].offset, m, (double)total / m / 1e9);
        free(rg);
        free(out);
    }
    double t[5];
    for (int rep = -1; rep < 5; rep++) {
        CUDA_OK(cudaDeviceSynchronize());
        double t0 = now_s();
        CUDA_OK(cudaMemcpyAsync(dst, src, total, cudaMemcpyDeviceToDevice, g_stream));
        CUDA_OK(cudaStreamSynchronize(g_stream));
        if (rep >= 0) t[rep] = now_s() - t0;
    }
    double m = median5(t);
    printf("cudaMemcpy device to device, 1 GiB: %.4f s, %.0f GB/s copied (%.0f GB/s read + written)\n", m,
           (double)total / m / 1e9, 2.0 * (double)total / m / 1e9);
    printf("ferry sum's device memory: %zu bytes\n", ferry_sum_cuda_device_bytes(g_sum));
    CUDA_OK(cudaFree(src));
    CUDA_OK(cudaFree(dst));
    uint8_t *host = malloc(total);
    CHECK(host);
    memset(host, 0x5a, total);
    volatile uint64_t sink = 0;
    for (int rep = -1; rep < 5; rep++) {
        double t0 = now_s();
        sink += ferry_sum(host, total);
        if (rep >= 0) t[rep] = now_s() - t0;
    }
    (void)sink;
    m = median5(t);
    printf("ferry_sum on the CPU (one thread), 1 GiB: %.4f s, %.1f GB/s\n", m, (double)total / m / 1e9);
    free(host);
    return 0;
}

int main(int argc, char **argv) {
    bool do_bench = argc > 1 && strcmp(argv[1], "--bench") == 0;
    if (argc > 1 && !do_bench) {
        fprintf(stderr, "usage: %s [--bench]\n", argv[0]);
        return 2;
    }
    ferry_errbuf_t err = {{0}};
    if (ferry_cuda_init(&err) != FERRY_OK) {
        printf("skipped: %s\n", err.text);
        return 77;
    }
    int device = 0;
    CUDA_OK(cudaGetDevice(&device));
    struct cudaDeviceProp prop;
    CUDA_OK(cudaGetDeviceProperties(&prop, device));
    printf("GPU %d: %s\n", device, prop.name);
    CUDA_OK(cudaStreamCreate(&g_stream));
    CHECK_OK(ferry_sum_cuda_create(device, &g_sum, &err), err.text);
    if (do_bench) return bench();

    /* refusals */
    CHECK_FAILS(ferry_sum_cuda_create(-1, &(ferry_sum_cuda_t *){NULL}, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "no GPU -1");
    CHECK_FAILS(ferry_sum_cuda_collect(g_sum, NULL, &err), FERRY_ERR_INVALID_ARGUMENT, err.text, "nothing enqueued");
    ferry_sum_region_t null_region = {NULL, 5};
    CHECK_FAILS(ferry_sum_cuda_enqueue(g_sum, &null_region, 1, g_stream, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "region 0 has 5 bytes and no pointer");
    CHECK_FAILS(ferry_sum_cuda_enqueue(g_sum, NULL, 3, g_stream, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "regions is NULL");
    /* an empty batch; an empty region without a pointer */
    CHECK_OK(ferry_sum_cuda_enqueue(g_sum, NULL, 0, g_stream, &err), err.text);
    CHECK_FAILS(ferry_sum_cuda_enqueue(g_sum, NULL, 0, g_stream, &err), FERRY_ERR_INVALID_ARGUMENT, err.text,
                "not collected");
    CHECK_OK(ferry_sum_cuda_collect(g_sum, NULL, &err), err.text);
    ferry_sum_region_t empty = {NULL, 0};
    uint64_t s0 = 0;
    CHECK_OK(ferry_sum_cuda_enqueue(g_sum, &empty, 1, g_stream, &err), err.text);
    CHECK_OK(ferry_sum_cuda_collect(g_sum, &s0, &err), err.text);
    CHECK(s0 == ferry_sum("", 0));
    CHECK(ferry_sum_cuda_device_bytes(g_sum) > 0);

    /* random bytes, on both sides */
    g_size = 320 * MIB;
    g_host = malloc(g_size);
    CHECK(g_host);
    for (uint64_t i = 0; i < g_size; i += 8) {
        uint64_t r = rng_next();
        memcpy(g_host + i, &r, 8);
    }
    CUDA_OK(cudaMalloc((void **)&g_dev, g_size));
    CUDA_OK(cudaMemcpy(g_dev, g_host, g_size, cudaMemcpyHostToDevice));

    size_t cap = 40000, n = 0, bad = 0;
    want_t *w = calloc(cap, sizeof *w);
    CHECK(w);
#define ADD(o, l, wh)                                                                                          \
    do {                                                                                                       \
        CHECK(n < cap);                                                                                        \
        w[n++] = (want_t){(o), (l), (wh)};                                                                     \
    } while (0)
    /* every length to 1000, two offsets mod 16 each, spread over the buffer */
    for (uint64_t len = 0; len <= 1000; len++) {
        uint64_t at = (rng_next() % (g_size / 2)) & ~(uint64_t)15;
        ADD(at + len % 16, len, "short");
        ADD(at + 4096 + (len * 7 + 3) % 16, len, "short");
    }
    /* around leaves, blocks and the top level's short/long switch (30/31 leaves) */
    static const int64_t deltas[] = {-1025, -1024, -1023, -65, -64, -63, -1, 0, 1, 63, 64, 65, 240, 241, 1023, 1024, 1025};
    static const uint64_t leaves[] = {1, 2, 3, 29, 30, 31, 32, 33, 64};
    for (size_t i = 0; i < sizeof leaves / sizeof leaves[0]; i++)
        for (size_t d = 0; d < sizeof deltas / sizeof deltas[0]; d++)
            for (uint64_t off = 0; off < 16; off += 5) {
                uint64_t len = (uint64_t)((int64_t)(leaves[i] * LEAF) + deltas[d]);
                uint64_t at = (rng_next() % (g_size - 8 * MIB)) & ~(uint64_t)15;
                ADD(at + off, len, "around leaves");
            }
    /* random lengths to 256 KiB at every offset */
    for (int i = 0; i < 3000; i++) {
        uint64_t len = rng_next() % (4 * LEAF), at = (rng_next() % (g_size - 4 * LEAF - 16)) & ~(uint64_t)15;
        ADD(at + (uint64_t)i % 16, len, "random");
    }
    /* a few MiB */
    for (uint64_t off = 0; off < 16; off++) ADD(off * 3 * MIB + off, 3 * MIB - 5 + off, "MiB");
    size_t batch1 = n;
    bad += run_batch(w, n, "batch 1");
    /* 300 MiB, at offsets 0, 3 and 13 (the last a byte short) */
    n = 0;
    ADD(0, 300 * MIB, "300 MiB");
    ADD(3, 300 * MIB, "300 MiB");
    ADD(13, 300 * MIB - 1, "300 MiB");
    ADD(8 * MIB + 2, 7, "short beside them");
    bad += run_batch(w, n, "batch 2 (300 MiB)");
    /* every leaf of the long regions of batch 1 as a region of its own: the
       leaf kernel alone (a region of one leaf is its plain xxh3) */
    want_t *first = calloc(batch1, sizeof *first);
    CHECK(first);
    memcpy(first, w, batch1 * sizeof *w);
    n = 0;
    for (size_t i = 0; i < batch1 && n + 100 < cap; i++)
        if (first[i].len > LEAF)
            for (uint64_t o = 0; o < first[i].len && n < cap; o += LEAF)
                ADD(first[i].off + o, first[i].len - o < LEAF ? first[i].len - o : LEAF, "a leaf alone");
    bad += run_batch(w, n, "leaves alone");
    /* batch 1 again: the scratch is reused, and smaller batches after a
       larger one work */
    size_t bytes = ferry_sum_cuda_device_bytes(g_sum);
    bad += run_batch(first, batch1, "batch 1 again");
    bad += run_batch(first, 10, "batch 1's first 10");
    CHECK(ferry_sum_cuda_device_bytes(g_sum) == bytes);
    free(first);
    free(w);
    CUDA_OK(cudaFree(g_dev));
    free(g_host);
    ferry_sum_cuda_destroy(g_sum);
    CUDA_OK(cudaStreamDestroy(g_stream));
    if (bad) {
        fprintf(stderr, "%zu mismatches\n", bad);
        return 1;
    }
    printf("ok\n");
    return 0;
}
