/* `ferry demo --device cuda`: where each worker's GPU is, and moving its
 * buffers between the GPU and the host copies the demo computes and checks
 * (the optimizer step and the checks run on the CPU; ferry moves GPU
 * memory). Builds without CUDA refuse --device cuda with a clear message. */
#ifndef FERRY_TOOLS_DEMO_GPU_H
#define FERRY_TOOLS_DEMO_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "demo_weights.h"

/* demo_opts_t.device: the host, every worker spread over the GPUs, or all on one. */
#define DEMO_DEVICE_CPU (-2)
#define DEMO_DEVICE_SPREAD (-1)

/* Parses cpu | cuda | cuda:N into *device; false (said on stderr) if bad. */
bool demo_gpu_parse(const char *s, int *device);
/* "cpu", "cuda (spread)" or "cuda:N". */
const char *demo_gpu_name(int device, char *buf, size_t size);

/* The GPU a worker uses: spread puts writers on GPUs 0, 1, ... and readers
 * on 1, 2, ... (so a writer and a reader of the same rank sit on different
 * GPUs where there are two or more). -1 with err set if there is none. */
int demo_gpu_pick(int device, bool writer, uint32_t rank, char *err, size_t size);

/* Copies n bytes between a host and a device buffer (to_gpu: host ->
 * device); false with err set on failure. */
bool demo_gpu_copy(void *dev, void *host, size_t n, bool to_gpu, char *err, size_t size);

/* GPU baselines for `ferry bench sync --device cuda`, measured in the
 * parent: a peer copy from GPU src to GPU dst (a same-GPU copy when equal)
 * of n bytes, in GB/s (bytes moved per second); < 0 if it cannot run. */
typedef struct demo_gpu_copy_bench demo_gpu_copy_bench_t;
demo_gpu_copy_bench_t *demo_gpu_bench_create(int src, int dst, size_t n, char *err, size_t size);
double demo_gpu_bench_run(demo_gpu_copy_bench_t *b);
void demo_gpu_bench_destroy(demo_gpu_copy_bench_t *b);
/* GPUs this process sees (0 without CUDA). */
int demo_gpu_count(void);

/* One piece of the demo's weights (demo_weights.h) to compute on the GPU:
 * element idx of its box (row-major over extent) is tensor element
 * sum((offset[d] + idx[d]) * tstride[d]), written at byte
 * byte_offset + sum(idx[d] * pstride[d]) * element size of the buffer. */
typedef struct demo_gpu_piece {
    demo_tensor_t t;
    int f32; /* the fp32 master, else its bf16 */
    uint32_t ndim;
    int64_t extent[FERRY_MAX_DIMS], offset[FERRY_MAX_DIMS], tstride[FERRY_MAX_DIMS], pstride[FERRY_MAX_DIMS];
    uint64_t byte_offset;
} demo_gpu_piece_t;
/* Enqueues the computation of piece p into the current device's buffer dbuf
 * (the same bits demo_weights_pass writes); demo_gpu_wait waits for all of
 * them. false with err set on failure (or without CUDA). */
bool demo_gpu_weights(void *dbuf, const demo_gpu_piece_t *p, char *err, size_t size);
bool demo_gpu_wait(char *err, size_t size);

#endif
