/* ferry: block-scaled FP8, as FP8 engines hold weights.
 *
 * DeepSeek-V3, Kimi-K2 and vLLM's fp8 block quantization keep a weight of
 * rows x cols as float8_e4m3fn values and an fp32 `weight_scale_inv` of
 * ceil(rows / 128) x ceil(cols / 128): each 128 x 128 block b is stored as
 * round(x / s_b) and read back as fp8 * s_b. ferry converts a trainer's
 * bf16 or fp32 weight to that form on the writer's side, exactly as the
 * reference does (DeepGEMM's per_block_cast_to_fp8, in torch; kept in
 * tests/golden/fp8/make_golden.py):
 *
 *   amax_b = max(max |x| over the block, 1e-4)      (fp32; 1e-4: all-zero blocks)
 *   s_b    = amax_b / 448                           (fp32, correctly rounded)
 *            with FERRY_FP8_UE8M0: 2^ceil(log2(s_b)) (log2 in fp32, as torch's)
 *   q      = e4m3(float(x) * (1 / s_b))             (fp32 product, then
 *                                                    ferry_fp8_e4m3_from_f32, ferry/layout.h)
 *
 * Pure: caller buffers, no I/O, no threads; reentrant. */
#ifndef FERRY_FP8_H
#define FERRY_FP8_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/layout.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* FERRY_FP8_BLOCK (128) and the flag FERRY_FP8_UE8M0 are in ferry/layout.h:
 * model specs declare tensors FP8 block-quantized with them too. */

/* Scales of a rows x cols weight: ceil(rows / 128) * ceil(cols / 128). */
uint64_t ferry_fp8_scale_count(uint64_t rows, uint64_t cols);

/* Quantizes the row-major rows x cols weight at src (FERRY_DTYPE_BF16 or
 * FERRY_DTYPE_F32) into dst (rows * cols float8_e4m3fn bytes, row-major)
 * and scale_inv (ferry_fp8_scale_count floats, row-major by block), bit for
 * bit as the reference above. flags: 0 or FERRY_FP8_UE8M0. Errors:
 * FERRY_ERR_UNSUPPORTED (another dtype), FERRY_ERR_INVALID_ARGUMENT (a NULL
 * buffer with rows * cols > 0, unknown flags, a size past 2^62 elements). */
ferry_status_t ferry_fp8_block_quantize(ferry_dtype_t dtype, const void *src, uint64_t rows, uint64_t cols,
                                        uint32_t flags, uint8_t *dst, float *scale_inv);

/* The same for a rows x cols matrix whose rows lie apart: row r of the
 * weight starts at element r * src_ld of src, its bytes go to r * dst_ld of
 * dst, and row b of blocks' scales to b * scale_ld of scale_inv (each ld at
 * least the row's length: cols, cols, ceil(cols / 128)). Blocks start at the
 * matrix's first row and column. So a shard of a larger weight that starts
 * at multiples of 128 in both dimensions, as FP8 engines' shards do, comes
 * out as that part of the whole weight's quantization, bit for bit: a
 * writer quantizes each engine shard where the weight is, into where the
 * engine wants it. Errors as ferry_fp8_block_quantize's, and
 * FERRY_ERR_INVALID_ARGUMENT for an ld shorter than its row. */
ferry_status_t ferry_fp8_block_quantize_ld(ferry_dtype_t dtype, const void *src, uint64_t src_ld, uint64_t rows,
                                           uint64_t cols, uint32_t flags, uint8_t *dst, uint64_t dst_ld,
                                           float *scale_inv, uint64_t scale_ld);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
