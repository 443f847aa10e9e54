/* `ferry bench xport --device cuda`: the GPU buffers of the owner and the
 * reader, the owner's filled with a pattern and the reader's checked against
 * it, so the bench times real transfers. Each process picks its GPU after
 * the fork (demo_gpu_pick) before calling these; they use the current
 * device. Without CUDA every call fails (the bench refuses --device cuda
 * before it gets here). */
#ifndef FERRY_TOOLS_BENCH_GPU_H
#define FERRY_TOOLS_BENCH_GPU_H

#include <stdbool.h>
#include <stddef.h>

/* n bytes of device memory, zeroed; NULL with err set on failure. */
void *bench_gpu_alloc(size_t n, char *err, size_t size);
void bench_gpu_free(void *p);
/* Writes the pattern into the n bytes at p (device memory). */
bool bench_gpu_fill(void *p, size_t n, char *err, size_t size);
/* Whether bytes spread over [0, n) of p (device memory, got from a buffer
 * that bench_gpu_fill wrote) hold the pattern; false with err naming the
 * first wrong byte. */
bool bench_gpu_check(const void *p, size_t n, char *err, size_t size);

#endif
