/* `--gpu` for the sync tests that also run with every buffer in GPU memory
 * (label gpu, scripts/gpu-test.sh): whether it was given, and the readers'
 * GPU (1 where there are two, else 0; writers use 0). Without a usable GPU,
 * or a build without CUDA, the test says why and exits 77 (skipped). */
#ifndef FERRY_TESTS_GPU_ARG_H
#define FERRY_TESTS_GPU_ARG_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#ifdef FERRY_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda.h"
#endif

static inline bool gpu_arg(int argc, char **argv, int *reader_device) {
    *reader_device = 0;
    if (argc < 2 || strcmp(argv[1], "--gpu") != 0) return false;
#ifdef FERRY_CUDA
    ferry_errbuf_t err;
    if (ferry_cuda_init(&err) != FERRY_OK) {
        printf("skipped: %s\n", err.text);
        exit(77);
    }
    int n = 0;
    CHECK(cudaGetDeviceCount(&n) == cudaSuccess && n > 0);
    *reader_device = n > 1 ? 1 : 0;
    return true;
#else
    printf("skipped: this build has no CUDA\n");
    exit(77);
#endif
}

#endif
