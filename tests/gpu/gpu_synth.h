/* The GPU benchmarks' synthetic Adam steps (tools/synth.h) on 16 host
 * threads, and a median. Header only: each test is one program. */
#ifndef FERRY_TESTS_GPU_SYNTH_H
#define FERRY_TESTS_GPU_SYNTH_H

#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

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
