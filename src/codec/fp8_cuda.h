/* FP8 block quantization (ferry/fp8.h) of weights in GPU memory, on the
 * GPU: the same bytes as ferry_fp8_block_quantize (the arithmetic is
 * codec/fp8_rules.h's on both). A block of threads per 128 x 128 block:
 * its amax, its scale, its values. Internal, for the sync engine's writers
 * that quantize for FP8 engines. Builds without CUDA have none of this. */
#ifndef FERRY_CODEC_FP8_CUDA_H
#define FERRY_CODEC_FP8_CUDA_H

#ifdef FERRY_CUDA
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "ferry/fp8.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Enqueues the quantization of the row-major rows x cols weight at src
 * (device memory, FERRY_DTYPE_BF16 or FERRY_DTYPE_F32) into dst (rows * cols
 * bytes) and scale_inv (ferry_fp8_scale_count floats) on stream; returns
 * without waiting. Errors: FERRY_ERR_UNSUPPORTED (another dtype),
 * FERRY_ERR_INVALID_ARGUMENT (flags, NULL buffers, more than 65535 * 128
 * rows), FERRY_ERR_IO (the launch failed). */
ferry_status_t ferry_fp8_cuda_block_quantize(ferry_dtype_t dtype, const void *src, uint64_t rows, uint64_t cols,
                                             uint32_t flags, uint8_t *dst, float *scale_inv, cudaStream_t stream);

/* The same for a matrix whose rows lie apart (ferry_fp8_block_quantize_ld's
 * leading dimensions, in device memory): a writer's engine shard quantized
 * where it lies in the whole weight. */
ferry_status_t ferry_fp8_cuda_block_quantize_ld(ferry_dtype_t dtype, const void *src, uint64_t src_ld, uint64_t rows,
                                                uint64_t cols, uint32_t flags, uint8_t *dst, uint64_t dst_ld,
                                                float *scale_inv, uint64_t scale_ld, cudaStream_t stream);

#ifdef __cplusplus
}
#endif
#endif
#endif
