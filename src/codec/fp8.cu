/* FP8 block quantization on the GPU (codec/fp8_cuda.h): a block of 256
 * threads per 128 x 128 block of the weight; each thread takes half a row
 * at a time (64 elements), the block reduces the amax, thread 0 makes the
 * scale (fp8_rules.h, as the CPU), then every element is scaled and
 * rounded. Reads the weight twice (the second from L2: 32-64 KiB a block). */
#include <cuda_runtime.h>
#include <stdint.h>

#include "codec/fp8_cuda.h"
#include "codec/fp8_rules.h"

#define THREADS 256u
#define B FERRY_FP8_BLOCK

static __device__ __forceinline__ float load(const uint8_t *src, uint32_t w, uint64_t i) {
    return w == 2 ? f8_float((uint32_t)((const uint16_t *)src)[i] << 16) : ((const float *)src)[i];
}

__global__ void __launch_bounds__(THREADS) fp8_quantize(const uint8_t *src, uint64_t src_ld, uint32_t w, uint64_t rows,
                                                        uint64_t cols, int ue8m0, uint8_t *dst, uint64_t dst_ld,
                                                        float *scale_inv, uint64_t scale_ld) {
    __shared__ float wmax[THREADS / 32];
    __shared__ float inv;
    const uint64_t r0 = (uint64_t)blockIdx.y * B, c0 = (uint64_t)blockIdx.x * B;
    const uint64_t r1 = rows - r0 < B ? rows : r0 + B, c1 = cols - c0 < B ? cols : c0 + B;
    const unsigned tid = threadIdx.x;
    /* thread t: rows r0 + t / 2, r0 + t / 2 + 128 / 2 ...; columns half (t & 1) of the block */
    float m = 0.0f;
    for (uint64_t r = r0 + tid / 2; r < r1; r += THREADS / 2)
        for (uint64_t c = c0 + (tid & 1) * (B / 2); c < c1 && c < c0 + ((tid & 1) + 1) * (B / 2); c++) {
            float x = fabsf(load(src, w, r * src_ld + c));
            if (x != x || x > m) m = x; /* a NaN sticks, as torch's amax */
        }
    for (unsigned o = 16; o; o >>= 1) {
        float y = __shfl_xor_sync(0xffffffffu, m, o);
        if (y != y || y > m) m = y;
    }
    if ((tid & 31) == 0) wmax[tid / 32] = m;
    __syncthreads();
    if (tid == 0) {
        float a = wmax[0];
        for (unsigned i = 1; i < THREADS / 32; i++)
            if (wmax[i] != wmax[i] || wmax[i] > a) a = wmax[i];
        float s = f8_scale(a, ue8m0);
        scale_inv[(uint64_t)blockIdx.y * scale_ld + blockIdx.x] = s;
        inv = 1.0f / s;
    }
    __syncthreads();
    const float iv = inv;
    for (uint64_t r = r0 + tid / 2; r < r1; r += THREADS / 2)
        for (uint64_t c = c0 + (tid & 1) * (B / 2); c < c1 && c < c0 + ((tid & 1) + 1) * (B / 2); c++)
            dst[r * dst_ld + c] = f8_e4m3(load(src, w, r * src_ld + c) * iv);
}

extern "C" ferry_status_t ferry_fp8_cuda_block_quantize_ld(ferry_dtype_t dtype, const void *src, uint64_t src_ld,
                                                           uint64_t rows, uint64_t cols, uint32_t flags, uint8_t *dst,
                                                           uint64_t dst_ld, float *scale_inv, uint64_t scale_ld,
                                                           cudaStream_t stream) {
    if (dtype != FERRY_DTYPE_BF16 && dtype != FERRY_DTYPE_F32) return FERRY_ERR_UNSUPPORTED;
    if (flags & ~(uint32_t)FERRY_FP8_UE8M0) return FERRY_ERR_INVALID_ARGUMENT;
    if (!rows || !cols) return FERRY_OK;
    const uint64_t by = (rows + B - 1) / B, bx = (cols + B - 1) / B;
    /* grid y holds 65535 block rows (8 M rows: no weight is that tall) */
    if (!src || !dst || !scale_inv || by > 65535u || bx > 0x7FFFFFFFu || !f8_fits(rows, cols, src_ld) ||
        !f8_fits(rows, cols, dst_ld) || !f8_fits(by, bx, scale_ld))
        return FERRY_ERR_INVALID_ARGUMENT;
    dim3 grid((unsigned)bx, (unsigned)by);
    fp8_quantize<<<grid, THREADS, 0, stream>>>((const uint8_t *)src, src_ld, dtype == FERRY_DTYPE_BF16 ? 2 : 4, rows,
                                               cols, (flags & FERRY_FP8_UE8M0) != 0, dst, dst_ld, scale_inv, scale_ld);
    return cudaGetLastError() == cudaSuccess ? FERRY_OK : FERRY_ERR_IO;
}

extern "C" ferry_status_t ferry_fp8_cuda_block_quantize(ferry_dtype_t dtype, const void *src, uint64_t rows,
                                                        uint64_t cols, uint32_t flags, uint8_t *dst, float *scale_inv,
                                                        cudaStream_t stream) {
    return ferry_fp8_cuda_block_quantize_ld(dtype, src, cols, rows, cols, flags, dst, cols, scale_inv, (cols + B - 1) / B,
                                            stream);
}
