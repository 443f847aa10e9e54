/* FP8 block quantization (include/ferry/fp8.h) against its torch reference,
 * byte for byte: the golden files tests/golden/fp8/make_golden.py wrote
 * with torch (DeepGEMM's per_block_cast_to_fp8): bf16 and fp32 weights,
 * whole and partial blocks, an all-zero and a tiny block (the 1e-4 floor),
 * large values, with and without UE8M0 scales; and torch's float8_e4m3fn
 * conversion of every rounding edge (midpoints and an ulp either side,
 * subnormals, +-448 and past it, infinities, NaN). Then the refusals. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "codec/fp8_rules.h"
#include "ferry/fp8.h"
#include "ferry/layout.h"

/* Every shard of the case's weight that starts at a multiple of 128 in both
 * dimensions (origins 0 and 128, extents to the end or one block), through
 * ferry_fp8_block_quantize_ld from inside the whole weight into padded rows:
 * the whole weight's bytes and scales there. Returns the shards checked. */
static int shards(const char *name, ferry_dtype_t dtype, const uint8_t *x, uint64_t rows, uint64_t cols, uint32_t flags,
                  const uint8_t *q, const uint8_t *s) {
    const uint64_t B = FERRY_FP8_BLOCK, esz = dtype == FERRY_DTYPE_BF16 ? 2 : 4, bcols = (cols + B - 1) / B;
    int n = 0;
    for (uint64_t r0 = 0; r0 < rows && r0 <= B; r0 += B)
        for (uint64_t c0 = 0; c0 < cols && c0 <= B; c0 += B)
            for (int er = 0; er < 2; er++)
                for (int ec = 0; ec < 2; ec++) {
                    uint64_t nr = er ? B : rows - r0, nc = ec ? B : cols - c0;
                    if (r0 + nr > rows || c0 + nc > cols || (er && rows - r0 == B) || (ec && cols - c0 == B))
                        continue; /* past the weight, or the same shard again */
                    const uint64_t nbr = (nr + B - 1) / B, nbc = (nc + B - 1) / B, dld = nc + 5, sld = nbc + 2;
                    uint8_t *gq = calloc(nr * dld, 1);
                    float *gs = calloc(nbr * sld, sizeof *gs);
                    CHECK(gq && gs);
                    CHECK_OK(ferry_fp8_block_quantize_ld(dtype, x + (r0 * cols + c0) * esz, cols, nr, nc, flags, gq, dld,
                                                         gs, sld),
                             name);
                    for (uint64_t r = 0; r < nr; r++)
                        if (memcmp(gq + r * dld, q + (r0 + r) * cols + c0, nc) != 0) {
                            fprintf(stderr, "%s: shard at (%llu, %llu) of %llu x %llu: row %llu differs\n", name,
                                    (unsigned long long)r0, (unsigned long long)c0, (unsigned long long)nr,
                                    (unsigned long long)nc, (unsigned long long)r);
                            exit(1);
                        }
                    for (uint64_t b = 0; b < nbr; b++)
                        if (memcmp(gs + b * sld, s + 4 * ((r0 / B + b) * bcols + c0 / B), 4 * nbc) != 0) {
                            fprintf(stderr, "%s: shard at (%llu, %llu): scales of block row %llu differ\n", name,
                                    (unsigned long long)r0, (unsigned long long)c0, (unsigned long long)b);
                            exit(1);
                        }
                    free(gq), free(gs);
                    n++;
                }
    return n;
}

/* Golden file fp8/<name>.<ext>; a missing one fails the test. */
static uint8_t *slurp(const char *name, const char *ext, size_t *len) {
    char path[512];
    snprintf(path, sizeof path, "%s/fp8/%s.%s", FERRY_TEST_GOLDEN, name, ext);
    uint8_t *p = test_read_file(path, len);
    if (!p) {
        fprintf(stderr, "cannot open %s\n", path);
        exit(1);
    }
    return p;
}

int main(void) {
    size_t len, n;
    /* the conversion alone */
    uint8_t *in = slurp("cvt", "in", &len), *want = slurp("cvt", "fp8", &n);
    CHECK(len == 4 * n);
    for (size_t i = 0; i < n; i++) {
        float f;
        memcpy(&f, in + 4 * i, 4);
        uint8_t got = ferry_fp8_e4m3_from_f32(f), rule = f8_e4m3(f); /* layout's, and the kernels' (fp8_rules.h) */
        if (got != want[i] || rule != want[i]) {
            fprintf(stderr, "conversion of %a: 0x%02x (fp8_rules.h 0x%02x), torch 0x%02x\n", (double)f, got, rule,
                    want[i]);
            return 1;
        }
    }
    printf("ok: %zu conversions as torch's (ferry_fp8_e4m3_from_f32 and fp8_rules.h)\n", n);
    free(in);
    free(want);
    /* the cases */
    char path[512];
    snprintf(path, sizeof path, "%s/fp8/cases.txt", FERRY_TEST_GOLDEN);
    FILE *f = fopen(path, "r");
    CHECK(f);
    char name[64], dt[8];
    unsigned long long rows, cols;
    int ue8m0, cases = 0, nshards = 0;
    while (fscanf(f, "%63s %7s %llu %llu %d", name, dt, &rows, &cols, &ue8m0) == 5) {
        ferry_dtype_t dtype = strcmp(dt, "bf16") ? FERRY_DTYPE_F32 : FERRY_DTYPE_BF16;
        size_t il, ql, sl;
        uint8_t *x = slurp(name, "in", &il), *q = slurp(name, "fp8", &ql), *s = slurp(name, "scale", &sl);
        CHECK(il == rows * cols * (dtype == FERRY_DTYPE_BF16 ? 2 : 4) && ql == rows * cols &&
              sl == 4 * ferry_fp8_scale_count(rows, cols));
        uint8_t *gq = malloc(ql + 1);
        float *gs = malloc(sl + 4);
        CHECK(gq && gs);
        CHECK_OK(ferry_fp8_block_quantize(dtype, x, rows, cols, ue8m0 ? FERRY_FP8_UE8M0 : 0, gq, gs), name);
        if (memcmp(gs, s, sl) != 0) {
            for (size_t i = 0; i < sl / 4; i++) {
                float w;
                memcpy(&w, s + 4 * i, 4);
                if (memcmp(&w, &gs[i], 4)) fprintf(stderr, "%s: scale %zu is %a, torch's %a\n", name, i, (double)gs[i], (double)w);
            }
            return 1;
        }
        for (size_t i = 0; i < ql; i++)
            if (gq[i] != q[i]) {
                fprintf(stderr, "%s: element %zu (row %llu) is 0x%02x, torch's 0x%02x\n", name, i,
                        (unsigned long long)(i / cols), gq[i], q[i]);
                return 1;
            }
        int ns = shards(name, dtype, x, rows, cols, ue8m0 ? FERRY_FP8_UE8M0 : 0, q, s);
        nshards += ns;
        printf("ok: %s (%llu x %llu %s%s) as torch's, and %d block-aligned shards of it\n", name, rows, cols, dt,
               ue8m0 ? ", ue8m0" : "", ns);
        cases++;
        free(x), free(q), free(s), free(gq), free(gs);
    }
    fclose(f);
    CHECK(cases == 8 && nshards >= 40);
    /* refusals */
    uint8_t d[4];
    float sc[1];
    uint16_t w[4] = {0};
    CHECK(ferry_fp8_block_quantize(FERRY_DTYPE_F16, w, 2, 2, 0, d, sc) == FERRY_ERR_UNSUPPORTED);
    CHECK(ferry_fp8_block_quantize(FERRY_DTYPE_BF16, w, 2, 2, 2, d, sc) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_block_quantize(FERRY_DTYPE_BF16, NULL, 2, 2, 0, d, sc) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_block_quantize(FERRY_DTYPE_BF16, w, 2, 2, 0, d, NULL) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_block_quantize(FERRY_DTYPE_BF16, NULL, 0, 5, 0, NULL, NULL) == FERRY_OK);
    CHECK(ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16, w, 1, 2, 2, 0, d, 2, sc, 1) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16, w, 2, 2, 2, 0, d, 1, sc, 1) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16, w, 2, 2, 2, 0, d, 2, sc, 0) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16, w, 2, 2, 2, 0, d, 2, sc, 1) == FERRY_OK);
    CHECK(ferry_fp8_block_quantize_ld(FERRY_DTYPE_BF16, w, 1ull << 62, 3, 2, 0, d, 2, sc, 1) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(ferry_fp8_scale_count(200, 130) == 4 && ferry_fp8_scale_count(0, 7) == 0 && ferry_fp8_scale_count(1, 1) == 1);
    printf("test_fp8: %d cases and the conversion bit-exact with torch; refusals\n", cases);
    return 0;
}
