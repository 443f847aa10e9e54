/* The demo's weights (demo_weights.h) computed on a GPU member's GPU, in its
 * own buffers: the same bits demo_weights_pass writes on the host, at memory
 * speed, so `ferry bench sync --device cuda` can take a real RL-like step per
 * version (as the host takes seconds per GiB, it used to keep version 1) and
 * `ferry demo --device cuda` checks these kernels against the host. */
#include <cuda_runtime_api.h>
#include <stdio.h>

extern "C" {
#include "demo_gpu.h"
}

#define CHUNK 1024 /* elements of a row per block */

/* Block b: row b / chunks of the piece's box (all dims but the last),
 * elements [c * CHUNK, (c + 1) * CHUNK) of it, c = b % chunks. */
static __global__ void __launch_bounds__(256) demo_weights_k(demo_gpu_piece_t p, uint8_t *buf, uint64_t rows,
                                                             uint64_t chunks) {
    const uint32_t nd = p.ndim;
    const int64_t inner = nd ? p.extent[nd - 1] : 1;
    const int64_t its = nd ? p.tstride[nd - 1] : 0, istr = nd ? p.pstride[nd - 1] : 0;
    const uint64_t esz = p.f32 ? 4 : 2;
    for (uint64_t b = blockIdx.x; b < rows * chunks; b += gridDim.x) {
        uint64_t row = b / chunks, c = b % chunks;
        uint64_t lin0 = nd ? (uint64_t)(p.offset[nd - 1] * p.tstride[nd - 1]) : 0, addr0 = p.byte_offset;
        for (int d = (int)nd - 2; d >= 0; d--) { /* the row's index, last dims fastest */
            int64_t i = (int64_t)(row % (uint64_t)p.extent[d]);
            row /= (uint64_t)p.extent[d];
            lin0 += (uint64_t)((p.offset[d] + i) * p.tstride[d]);
            addr0 += (uint64_t)(i * p.pstride[d]) * esz;
        }
        int64_t end = (int64_t)(c + 1) * CHUNK < inner ? (int64_t)(c + 1) * CHUNK : inner;
        for (int64_t k = (int64_t)c * CHUNK + threadIdx.x; k < end; k += blockDim.x) {
            uint64_t lin = lin0 + (uint64_t)(k * its);
            uint8_t *at = buf + addr0 + (uint64_t)(k * istr) * esz;
            float f = demo_master(&p.t, lin);
            if (p.f32) memcpy(at, &f, 4);
            else *(uint16_t *)at = demo_bf16(f);
        }
    }
}

extern "C" bool demo_gpu_weights(void *dbuf, const demo_gpu_piece_t *p, char *err, size_t size) {
    uint64_t rows = 1;
    for (uint32_t d = 0; d + 1 < p->ndim; d++) rows *= (uint64_t)p->extent[d];
    uint64_t inner = p->ndim ? (uint64_t)p->extent[p->ndim - 1] : 1, chunks = (inner + CHUNK - 1) / CHUNK;
    if (rows * chunks == 0) return true;
    uint64_t blocks = rows * chunks < (1u << 20) ? rows * chunks : (1u << 20);
    demo_weights_k<<<(unsigned)blocks, 256>>>(*p, (uint8_t *)dbuf, rows, chunks);
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) snprintf(err, size, "computing weights on the GPU: %s", cudaGetErrorString(e));
    return e == cudaSuccess;
}

extern "C" bool demo_gpu_wait(char *err, size_t size) {
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) snprintf(err, size, "computing weights on the GPU: %s", cudaGetErrorString(e));
    return e == cudaSuccess;
}
