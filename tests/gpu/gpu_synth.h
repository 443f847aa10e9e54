/* The GPU benchmarks' synthetic Adam steps (tools/synth.h) on 16 host
 * threads, and a median. Header only: each test is one program. */
#ifndef FERRY_TESTS_GPU_SYNTH_H
#define FERRY_TESTS_GPU_SYNTH_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "synth.h"

typedef struct synth_job {
    delta_synth_t *s;
    size_t from, to;
    uint16_t *out;
} synth_job_t;

static void *synth_thread(void *arg) {
    synth_job_t *j = arg;
    if (j->out) delta_synth_bf16(j->s, j->out, j->from, j->to);
    else delta_synth_step_range(j->s, j->from, j->to);
    return NULL;
}

/* One Adam step (out NULL) or a bf16 snapshot, on 16 threads. */
static inline void synth_par(delta_synth_t *s, uint16_t *out) {
    enum { T = 16 };
    pthread_t th[T];
    synth_job_t j[T];
    for (int i = 0; i < T; i++) {
        j[i] = (synth_job_t){s, s->n * i / T, s->n * (i + 1) / T, out};
        CHECK(pthread_create(&th[i], NULL, synth_thread, &j[i]) == 0);
    }
    for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
    if (!out) delta_synth_next(s);
}

/* bf16 snapshots of synthetic Adam masters (n elements, lr, seed) after
 * `steps` steps (base) and one more (next), on one thread. Each result is
 * kept to the end of the process and copied again when asked for again:
 * the tests make the same cases for every format, and
 * tests/fakegpu runs them once per order of its model's queues, where the
 * steps on the CPU were most of the run's time. */
static inline void synth_bf16_pair(uint64_t n, double lr, uint32_t steps, uint64_t seed, void *base, void *next) {
    typedef struct {
        uint64_t n, seed;
        double lr;
        uint32_t steps;
        uint16_t *base, *next;
    } kept_t;
    static kept_t kept[8];
    enum { KEPT = sizeof kept / sizeof kept[0] };
    size_t i = 0;
    for (; i < KEPT && kept[i].base; i++)
        if (kept[i].n == n && kept[i].seed == seed && kept[i].lr == lr && kept[i].steps == steps) {
            memcpy(base, kept[i].base, n * 2);
            memcpy(next, kept[i].next, n * 2);
            return;
        }
    float *a = malloc(4 * n * sizeof(float));
    CHECK(a);
    delta_synth_t s;
    delta_synth_init(&s, n, false, lr, seed, a, a + n, a + 2 * n, a + 3 * n);
    for (uint32_t k = 0; k < steps; k++) {
        delta_synth_step_range(&s, 0, n);
        delta_synth_next(&s);
    }
    delta_synth_bf16(&s, base, 0, n);
    delta_synth_step_range(&s, 0, n);
    delta_synth_next(&s);
    delta_synth_bf16(&s, next, 0, n);
    free(a);
    if (i < KEPT) {
        kept_t k = {n, seed, lr, steps, malloc(n * 2), malloc(n * 2)};
        CHECK(k.base && k.next);
        memcpy(k.base, base, n * 2);
        memcpy(k.next, next, n * 2);
        kept[i] = k;
    }
}

/* The median of v[0..n), which it sorts. */
static inline double median(double *v, int n) {
    for (int i = 0; i < n; i++)
        for (int k = i + 1; k < n; k++)
            if (v[k] < v[i]) {
                double x = v[i];
                v[i] = v[k];
                v[k] = x;
            }
    return v[n / 2];
}

#endif
