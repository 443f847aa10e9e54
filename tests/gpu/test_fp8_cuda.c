/* FP8 block quantization on the GPU (codec/fp8_cuda.h) gives exactly the
 * CPU's bytes (ferry_fp8_block_quantize, itself checked against torch by
 * test_fp8): the golden cases of tests/golden/fp8 against torch's own
 * bytes, then large random bf16 and fp32 weights (partial blocks, with and
 * without UE8M0) against the CPU's; and the refusals.
 *
 *   gpu_test_fp8_cuda   (exit 77 without a usable GPU) */
#include <stdlib.h>
#include <string.h>

#include "codec/fp8_cuda.h"
#include "delta_rand.h"
#include "ferry/fp8.h"
#include "gpu_check.h"

/* Quantizes on the GPU and on the CPU; the bytes must agree. */
static void check(const char *what, ferry_dtype_t dt, const void *w, uint64_t rows, uint64_t cols, uint32_t flags,
                  const uint8_t *want_q, const float *want_s) {
    size_t in = rows * cols * (dt == FERRY_DTYPE_BF16 ? 2 : 4), ns = ferry_fp8_scale_count(rows, cols);
    uint8_t *q = malloc(rows * cols + 1), *cq = malloc(rows * cols + 1), *dw, *dq;
    float *s = malloc(4 * ns + 4), *cs = malloc(4 * ns + 4), *ds;
    CHECK(q && cq && s && cs);
    CUDA_OK(cudaMalloc((void **)&dw, in + 1));
    CUDA_OK(cudaMalloc((void **)&dq, rows * cols + 1));
    CUDA_OK(cudaMalloc((void **)&ds, 4 * ns + 4));
    CUDA_OK(cudaMemcpy(dw, w, in, cudaMemcpyHostToDevice));
    CHECK_OK(ferry_fp8_cuda_block_quantize(dt, dw, rows, cols, flags, dq, ds, 0), what);
    CUDA_OK(cudaMemcpy(q, dq, rows * cols, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(s, ds, 4 * ns, cudaMemcpyDeviceToHost));
    if (!want_q) {
        CHECK_OK(ferry_fp8_block_quantize(dt, w, rows, cols, flags, cq, cs), what);
        want_q = cq;
        want_s = cs;
    }
    if (memcmp(s, want_s, 4 * ns) != 0 || memcmp(q, want_q, rows * cols) != 0) {
        size_t i = 0;
        while (i < rows * cols && q[i] == want_q[i]) i++;
        fprintf(stderr, "%s: the GPU's bytes differ (first value at %zu; scales %s)\n", what, i,
                memcmp(s, want_s, 4 * ns) ? "differ" : "agree");
        exit(1);
    }
    printf("ok: %s (%llu x %llu)\n", what, (unsigned long long)rows, (unsigned long long)cols);
    cudaFree(dw), cudaFree(dq), cudaFree(ds);
    free(q), free(cq), free(s), free(cs);
}

/* A shard (nr x nc at r0, c0) of a rows x cols weight quantized where it
 * lies, into padded rows (ferry_fp8_cuda_block_quantize_ld): the CPU's
 * bytes (ferry_fp8_block_quantize_ld), padding untouched on both. */
static void check_shard(ferry_dtype_t dt, const uint8_t *w, uint64_t rows, uint64_t cols, uint64_t r0, uint64_t c0,
                        uint64_t nr, uint64_t nc, uint32_t flags) {
    const uint64_t esz = dt == FERRY_DTYPE_BF16 ? 2 : 4, dld = nc + 3, nbr = (nr + 127) / 128, sld = (nc + 127) / 128 + 1;
    uint8_t *q = malloc(nr * dld), *cq = malloc(nr * dld), *dw, *dq;
    float *s = malloc(4 * nbr * sld), *cs = malloc(4 * nbr * sld), *ds;
    CHECK(q && cq && s && cs);
    memset(cq, 0xAB, nr * dld);
    memset(cs, 0xAB, 4 * nbr * sld);
    CUDA_OK(cudaMalloc((void **)&dw, rows * cols * esz));
    CUDA_OK(cudaMalloc((void **)&dq, nr * dld));
    CUDA_OK(cudaMalloc((void **)&ds, 4 * nbr * sld));
    CUDA_OK(cudaMemcpy(dw, w, rows * cols * esz, cudaMemcpyHostToDevice));
    CUDA_OK(cudaMemset(dq, 0xAB, nr * dld));
    CUDA_OK(cudaMemset(ds, 0xAB, 4 * nbr * sld));
    const uint64_t at = (r0 * cols + c0) * esz;
    CHECK_OK(ferry_fp8_cuda_block_quantize_ld(dt, dw + at, cols, nr, nc, flags, dq, dld, ds, sld, 0), "shard");
    CHECK_OK(ferry_fp8_block_quantize_ld(dt, w + at, cols, nr, nc, flags, cq, dld, cs, sld), "shard (CPU)");
    CUDA_OK(cudaMemcpy(q, dq, nr * dld, cudaMemcpyDeviceToHost));
    CUDA_OK(cudaMemcpy(s, ds, 4 * nbr * sld, cudaMemcpyDeviceToHost));
    CHECK(memcmp(q, cq, nr * dld) == 0 && memcmp(s, cs, 4 * nbr * sld) == 0);
    printf("ok: a %llu x %llu shard at (%llu, %llu) in place, padded rows\n", (unsigned long long)nr,
           (unsigned long long)nc, (unsigned long long)r0, (unsigned long long)c0);
    cudaFree(dw), cudaFree(dq), cudaFree(ds);
    free(q), free(cq), free(s), free(cs);
}

/* Golden file fp8/<name>.<ext> (test_fp8's). */
static uint8_t *slurp(const char *name, const char *ext) {
    char path[512];
    size_t n;
    snprintf(path, sizeof path, "%s/fp8/%s.%s", FERRY_TEST_GOLDEN, name, ext);
    uint8_t *p = test_read_file(path, &n);
    CHECK(p);
    return p;
}

int main(void) {
    gpu_require();
    CUDA_OK(cudaSetDevice(0));
    /* torch's bytes */
    static const struct {
        const char *name;
        ferry_dtype_t dt;
        uint64_t rows, cols;
        uint32_t flags;
    } g[] = {{"bf16_256x384", FERRY_DTYPE_BF16, 256, 384, 0},
             {"bf16_256x384_ue8m0", FERRY_DTYPE_BF16, 256, 384, FERRY_FP8_UE8M0},
             {"bf16_200x130", FERRY_DTYPE_BF16, 200, 130, 0},
             {"bf16_300x257_ue8m0", FERRY_DTYPE_BF16, 300, 257, FERRY_FP8_UE8M0},
             {"f32_256x256", FERRY_DTYPE_F32, 256, 256, 0},
             {"f32_129x500_ue8m0", FERRY_DTYPE_F32, 129, 500, FERRY_FP8_UE8M0},
             {"bf16_1x7", FERRY_DTYPE_BF16, 1, 7, 0},
             {"f32_ue8m0_edges", FERRY_DTYPE_F32, 1, 128 * 200, FERRY_FP8_UE8M0}};
    for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) {
        uint8_t *x = slurp(g[i].name, "in"), *q = slurp(g[i].name, "fp8"), *s = slurp(g[i].name, "scale");
        check(g[i].name, g[i].dt, x, g[i].rows, g[i].cols, g[i].flags, q, (const float *)s);
        free(x), free(q), free(s);
    }
    /* large random weights against the CPU */
    const uint64_t rows = 3000, cols = 5000;
    uint8_t *w = malloc(rows * cols * 4), *scratch = malloc(rows * cols * 4);
    CHECK(w && scratch);
    delta_make_random(w, scratch, 4, rows * cols, 0, 1, 42);
    for (uint64_t i = 0; i < rows * cols; i++) { /* weight-like fp32 from the random bits: sign, exponent 2^-20..2^3 */
        uint32_t v;
        memcpy(&v, w + 4 * i, 4);
        v = (v & 0x807FFFFFu) | ((107u + (v >> 23) % 24u) << 23);
        memcpy(w + 4 * i, &v, 4);
    }
    check("random f32", FERRY_DTYPE_F32, w, rows, cols, 0, NULL, NULL);
    check("random f32, ue8m0", FERRY_DTYPE_F32, w, rows, cols, FERRY_FP8_UE8M0, NULL, NULL);
    check_shard(FERRY_DTYPE_F32, w, rows, cols, 1024, 2048, 1000, 1500, 0);
    check_shard(FERRY_DTYPE_F32, w, rows, cols, 2944, 4992, 56, 8, FERRY_FP8_UE8M0); /* the weight's last corner */
    for (uint64_t i = 0; i < rows * cols; i++) memcpy(w + 2 * i, w + 4 * i + 2, 2); /* bf16: the high halves */
    check("random bf16", FERRY_DTYPE_BF16, w, rows, cols - 1, 0, NULL, NULL);
    check("random bf16, ue8m0", FERRY_DTYPE_BF16, w, rows - 7, cols, FERRY_FP8_UE8M0, NULL, NULL);
    check_shard(FERRY_DTYPE_BF16, w, rows, cols, 128, 0, 640, 5000, 0);
    free(w), free(scratch);
    /* refusals */
    uint8_t *dq;
    CUDA_OK(cudaMalloc((void **)&dq, 64));
    CHECK(ferry_fp8_cuda_block_quantize(FERRY_DTYPE_F16, dq, 2, 2, 0, dq, (float *)dq, 0) == FERRY_ERR_UNSUPPORTED);
    CHECK(ferry_fp8_cuda_block_quantize(FERRY_DTYPE_BF16, dq, 2, 2, 4, dq, (float *)dq, 0) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_cuda_block_quantize(FERRY_DTYPE_BF16, NULL, 2, 2, 0, dq, (float *)dq, 0) ==
          FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_cuda_block_quantize_ld(FERRY_DTYPE_BF16, dq, 1, 2, 2, 0, dq, 2, (float *)dq, 1, 0) ==
          FERRY_ERR_INVALID_ARGUMENT); /* a source row shorter than the matrix's */
    cudaFree(dq);
    printf("fp8 block quantization on the GPU: the CPU's and torch's bytes\n");
    return 0;
}
