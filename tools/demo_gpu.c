/* `ferry demo --device cuda` helpers (demo_gpu.h). */
#include "demo_gpu.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

#ifdef FERRY_CUDA
#include <cuda_runtime_api.h>
#endif

bool demo_gpu_parse(const char *s, int *device) {
    if (!strcmp(s, "cpu")) *device = DEMO_DEVICE_CPU;
    else if (!strcmp(s, "cuda")) *device = DEMO_DEVICE_SPREAD;
    else if (!strncmp(s, "cuda:", 5)) {
        uint32_t n;
        if (!cli_u32("--device cuda:N", s + 5, 0, 1023, &n)) return false;
        *device = (int)n;
    } else {
        fprintf(stderr, "--device: \"%s\" is none of cpu, cuda, cuda:N\n", s);
        return false;
    }
    return true;
}

const char *demo_gpu_name(int device, char *buf, size_t size) {
    if (device == DEMO_DEVICE_CPU) snprintf(buf, size, "cpu");
    else if (device == DEMO_DEVICE_SPREAD) snprintf(buf, size, "cuda (writers from GPU 0, readers from GPU 1)");
    else snprintf(buf, size, "cuda:%d", device);
    return buf;
}

#ifndef FERRY_CUDA

int demo_gpu_pick(int device, bool writer, uint32_t rank, char *err, size_t size) {
    (void)device, (void)writer, (void)rank;
    snprintf(err, size, "this ferry was built without CUDA (no nvcc at build time): --device cuda is not available");
    return -1;
}
bool demo_gpu_copy(void *dev, void *host, size_t n, bool to_gpu, char *err, size_t size) {
    (void)dev, (void)host, (void)n, (void)to_gpu;
    snprintf(err, size, "built without CUDA");
    return false;
}
demo_gpu_copy_bench_t *demo_gpu_bench_create(int src, int dst, size_t n, char *err, size_t size) {
    (void)src, (void)dst, (void)n;
    snprintf(err, size, "built without CUDA");
    return NULL;
}
double demo_gpu_bench_run(demo_gpu_copy_bench_t *b) {
    (void)b;
    return -1;
}
void demo_gpu_bench_destroy(demo_gpu_copy_bench_t *b) { (void)b; }
int demo_gpu_count(void) { return 0; }
bool demo_gpu_weights(void *dbuf, const demo_gpu_piece_t *p, char *err, size_t size) {
    (void)dbuf, (void)p;
    snprintf(err, size, "built without CUDA");
    return false;
}
bool demo_gpu_wait(char *err, size_t size) {
    snprintf(err, size, "built without CUDA");
    return false;
}

#else

int demo_gpu_count(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    return n;
}

int demo_gpu_pick(int device, bool writer, uint32_t rank, char *err, size_t size) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        snprintf(err, size, "no usable GPU: %s", e != cudaSuccess ? cudaGetErrorString(e) : "none found");
        return -1;
    }
    int d = device >= 0 ? device : (int)((writer ? rank : rank + 1) % (uint32_t)n);
    if (d >= n) {
        snprintf(err, size, "--device cuda:%d: this host has %d GPU%s", d, n, n == 1 ? "" : "s");
        return -1;
    }
    if ((e = cudaSetDevice(d)) != cudaSuccess) {
        snprintf(err, size, "cudaSetDevice(%d): %s", d, cudaGetErrorString(e));
        return -1;
    }
    return d;
}

bool demo_gpu_copy(void *dev, void *host, size_t n, bool to_gpu, char *err, size_t size) {
    cudaError_t e = to_gpu ? cudaMemcpy(dev, host, n, cudaMemcpyHostToDevice) : cudaMemcpy(host, dev, n, cudaMemcpyDeviceToHost);
    if (e != cudaSuccess) snprintf(err, size, "copying %zu bytes %s the GPU: %s", n, to_gpu ? "to" : "from", cudaGetErrorString(e));
    return e == cudaSuccess;
}

struct demo_gpu_copy_bench {
    int src, dst;
    void *a, *b;
    size_t n;
    cudaEvent_t t0, t1;
};

demo_gpu_copy_bench_t *demo_gpu_bench_create(int src, int dst, size_t n, char *err, size_t size) {
    demo_gpu_copy_bench_t *b = calloc(1, sizeof *b);
    if (!b) return NULL;
    b->src = src;
    b->dst = dst;
    b->n = n;
    cudaError_t e = cudaSetDevice(src);
    if (e == cudaSuccess) e = cudaMalloc(&b->a, n);
    if (e == cudaSuccess) e = cudaMemset(b->a, 1, n);
    if (e == cudaSuccess) e = cudaSetDevice(dst);
    if (e == cudaSuccess) e = cudaMalloc(&b->b, n);
    if (e == cudaSuccess && src != dst) {
        e = cudaDeviceEnablePeerAccess(src, 0);
        if (e == cudaErrorPeerAccessAlreadyEnabled) e = cudaSuccess;
    }
    if (e == cudaSuccess) e = cudaEventCreate(&b->t0);
    if (e == cudaSuccess) e = cudaEventCreate(&b->t1);
    if (e != cudaSuccess) {
        snprintf(err, size, "GPU %d -> %d copy baseline: %s", src, dst, cudaGetErrorString(e));
        demo_gpu_bench_destroy(b);
        return NULL;
    }
    demo_gpu_bench_run(b); /* warm */
    return b;
}

double demo_gpu_bench_run(demo_gpu_copy_bench_t *b) {
    if (!b) return -1;
    cudaSetDevice(b->dst);
    float ms = 0;
    cudaEventRecord(b->t0, 0);
    cudaError_t e = b->src == b->dst ? cudaMemcpyAsync(b->b, b->a, b->n, cudaMemcpyDeviceToDevice, 0)
                                     : cudaMemcpyPeerAsync(b->b, b->dst, b->a, b->src, b->n, 0);
    cudaEventRecord(b->t1, 0);
    if (e != cudaSuccess || cudaEventSynchronize(b->t1) != cudaSuccess || cudaEventElapsedTime(&ms, b->t0, b->t1) != cudaSuccess ||
        ms <= 0)
        return -1;
    return (double)b->n / (ms * 1e-3) / 1e9;
}

void demo_gpu_bench_destroy(demo_gpu_copy_bench_t *b) {
    if (!b) return;
    if (b->a) cudaSetDevice(b->src), cudaFree(b->a);
    if (b->b) cudaSetDevice(b->dst), cudaFree(b->b);
    if (b->t0) cudaEventDestroy(b->t0);
    if (b->t1) cudaEventDestroy(b->t1);
    free(b);
}

#endif
