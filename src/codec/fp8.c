/* Block-scaled FP8 (include/ferry/fp8.h): bf16 or fp32 weights to
 * float8_e4m3fn with a scale per 128 x 128 block, bit for bit as the torch
 * reference. Two passes per row of blocks: the blocks' amax, then the
 * scaled values. The arithmetic is fp8_rules.h's, which the GPU's kernel
 * (fp8.cu) shares. */
#include "ferry/fp8.h"

#include "codec/fp8_rules.h"

#include <math.h>
#include <string.h>


uint64_t ferry_fp8_scale_count(uint64_t rows, uint64_t cols) {
    return ((rows + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK) * ((cols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK);
}

static float load(ferry_dtype_t dtype, const uint8_t *src, uint64_t i) {
    if (dtype == FERRY_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, src + 2 * i, 2);
        return f8_float((uint32_t)h << 16);
    }
    float f;
    memcpy(&f, src + 4 * i, 4);
    return f;
}

ferry_status_t ferry_fp8_block_quantize_ld(ferry_dtype_t dtype, const void *src_, uint64_t src_ld, uint64_t rows,
                                           uint64_t cols, uint32_t flags, uint8_t *dst, uint64_t dst_ld,
                                           float *scale_inv, uint64_t scale_ld) {
    if (dtype != FERRY_DTYPE_BF16 && dtype != FERRY_DTYPE_F32) return FERRY_ERR_UNSUPPORTED;
    if (flags & ~(uint32_t)FERRY_FP8_UE8M0) return FERRY_ERR_INVALID_ARGUMENT;
    if (!rows || !cols) return FERRY_OK;
    const uint64_t bcols = (cols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
    const uint64_t brows = (rows + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK;
    if (!src_ || !dst || !scale_inv || !f8_fits(rows, cols, src_ld) || !f8_fits(rows, cols, dst_ld) ||
        !f8_fits(brows, bcols, scale_ld))
        return FERRY_ERR_INVALID_ARGUMENT;
    const uint8_t *src = src_;
    float amax[64], inv[64]; /* per block of a row of blocks, 64 at a time */
    for (uint64_t r0 = 0; r0 < rows; r0 += FERRY_FP8_BLOCK) {
        uint64_t r1 = rows - r0 < FERRY_FP8_BLOCK ? rows : r0 + FERRY_FP8_BLOCK;
        for (uint64_t b0 = 0; b0 < bcols; b0 += 64) {
            uint64_t b1 = bcols - b0 < 64 ? bcols : b0 + 64, c0 = b0 * FERRY_FP8_BLOCK;
            uint64_t c1 = b1 * FERRY_FP8_BLOCK < cols ? b1 * FERRY_FP8_BLOCK : cols;
            for (uint64_t b = b0; b < b1; b++) amax[b - b0] = 0.0f;
            for (uint64_t r = r0; r < r1; r++)
                for (uint64_t c = c0; c < c1; c++) {
                    float x = fabsf(load(dtype, src, r * src_ld + c)), *m = &amax[c / FERRY_FP8_BLOCK - b0];
                    if (x != x || x > *m) *m = x; /* a NaN sticks (x > NaN is false), as torch's amax */
                }
            for (uint64_t b = b0; b < b1; b++) {
                float s = f8_scale(amax[b - b0], (flags & FERRY_FP8_UE8M0) != 0);
                scale_inv[(r0 / FERRY_FP8_BLOCK) * scale_ld + b] = s;
                inv[b - b0] = 1.0f / s;
            }
            for (uint64_t r = r0; r < r1; r++)
                for (uint64_t c = c0; c < c1; c++)
                    dst[r * dst_ld + c] = f8_e4m3(load(dtype, src, r * src_ld + c) * inv[c / FERRY_FP8_BLOCK - b0]);
        }
    }
    return FERRY_OK;
}

ferry_status_t ferry_fp8_block_quantize(ferry_dtype_t dtype, const void *src, uint64_t rows, uint64_t cols,
                                        uint32_t flags, uint8_t *dst, float *scale_inv) {
    return ferry_fp8_block_quantize_ld(dtype, src, cols, rows, cols, flags, dst, cols, scale_inv,
                                       (cols + FERRY_FP8_BLOCK - 1) / FERRY_FP8_BLOCK);
}
