/* `ferry demo --device cuda`: where each worker's GPU is, and moving its
 * buffers between the GPU and the host copies the demo computes and checks
 * (the optimizer step and the checks run on the CPU; ferry moves GPU
 * memory). Builds without CUDA refuse --device cuda with a clear message. */
#ifndef FERRY_TOOLS_DEMO_GPU_H
#define FERRY_TOOLS_DEMO_GPU_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

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

#endif
