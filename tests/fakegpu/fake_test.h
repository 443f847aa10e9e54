/* What the fakegpu tests share (test_delta_cuda_fake.c,
 * test_delta_cuda_enc_fake.c): the GPU test's cases run once per order of
 * the model's queues, failures armed and checked, and the state a call
 * must leave. Header only: each test is one program. */
#ifndef FERRY_TESTS_FAKE_TEST_H
#define FERRY_TESTS_FAKE_TEST_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>

#include "check.h"
#include "fake_cuda.h"

/* The order fake_cuda_reset(seed) picks. */
static inline const char *fake_order(uint64_t seed) {
    return seed % 3 == 0 ? "lazily" : seed % 3 == 1 ? "eagerly" : "at random";
}

/* tests/gpu's test (its main, argv[0] alone: the test, not the benchmark)
 * in each order; under ASan not eagerly (CI's time: eagerly is nearly how
 * a GPU runs it, and the release build runs it). 0, or its failure. */
static inline int fake_gpu_cases(int (*gpu_main)(int, char **), char **argv, const char *file) {
    for (uint64_t seed = 0; seed < 3; seed++) {
#ifdef __SANITIZE_ADDRESS__
        if (seed == 1) continue;
#endif
        fake_cuda_reset(seed);
        printf("-- %s, queued work run %s --\n", file, fake_order(seed));
        const int rc = gpu_main(1, argv);
        if (rc) return rc;
    }
    return 0;
}

/* A call's return: nothing left queued, no CUDA error left behind (the
   caller's next launch would take it for its own). */
static inline void fake_check_quiet(const char *what, long nth, ferry_status_t st) {
    if (fake_cuda_pending() || cudaPeekAtLastError() != cudaSuccess) {
        fprintf(stderr, "%s %ld: the call returned %s with %zu operations queued and the CUDA error %s behind\n",
                what, nth, ferry_status_name(st), fake_cuda_pending(), cudaGetErrorName(cudaPeekAtLastError()));
        exit(1);
    }
}

/* ---- failures on demand ------------------------------------------------------------ */

enum fake_inj { FAKE_INJ_ALLOC, FAKE_INJ_OP, FAKE_INJ_TIMING };
static const char *const fake_inj_names[] = {"allocation", "operation", "timing read"};

/* Allocations, operations or timing reads so far. */
static inline long fake_inj_count(enum fake_inj k) {
    return k == FAKE_INJ_ALLOC ? fake_cuda_allocs() : k == FAKE_INJ_OP ? fake_cuda_ops() : fake_cuda_timings();
}

/* The nth of kind k from now fails (-1: none; an allocation once, or
   from there on when sticky). */
static inline void fake_inj_arm(enum fake_inj k, bool sticky, long nth) {
    if (k == FAKE_INJ_ALLOC) fake_cuda_fail_alloc(nth, sticky);
    else if (k == FAKE_INJ_OP) fake_cuda_fail_op(nth);
    else fake_cuda_fail_timing(nth);
}

/* The failure armed happened, once (sticky allocations: at least once),
   since fake_cuda_injected() was `before`. */
static inline void fake_inj_fired(long before, enum fake_inj k, bool sticky, long nth) {
    const long got = fake_cuda_injected() - before;
    CHECK(nth < 0 ? got == 0 : sticky && k == FAKE_INJ_ALLOC ? got >= 1 : got == 1);
}

#endif
