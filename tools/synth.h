/* Realistic RL weight updates for tests and benchmarks of the delta codec.
 *
 * fp32 master weights ~ N(0, 0.02) (norm-like tensors: 1 + N(0, 0.02)) take
 * Adam steps (beta1 0.9, beta2 0.999, eps 1e-8) on noisy gradients
 * g = 0.3 * d_i + N(0, 1), with d_i ~ N(0, 1) fixed per element, so the
 * first step is lr * sign(g) and later ones shrink and wander, as in RL
 * fine-tuning. Snapshots are cast to bf16 with round-to-nearest-even. At
 * lr 1e-6 about 4% of bf16 elements change at the first step and 2% by the
 * fifth, ~89% of them by one ulp.
 *
 * Deterministic in (seed, element index, step); pure: caller buffers. */
#ifndef FERRY_TOOLS_SYNTH_H
#define FERRY_TOOLS_SYNTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct delta_synth {
    size_t n;
    float *w, *m, *v, *d; /* master, Adam moments, gradient direction: n each */
    double lr;
    uint32_t step;
    uint64_t seed;
} delta_synth_t;

/* Starts masters at step 0; norm picks 1 + N(0, 0.02). The four arrays of n
 * floats are the caller's and must outlive s. */
void delta_synth_init(delta_synth_t *s, size_t n, bool norm, double lr, uint64_t seed, float *w, float *m,
                      float *v, float *d);
/* One Adam step on elements [from, to) (so threads can split it); advance
 * the step counter with delta_synth_next once every range is done. */
void delta_synth_step_range(delta_synth_t *s, size_t from, size_t to);
void delta_synth_next(delta_synth_t *s);
/* bf16 (round to nearest even) of masters [from, to) into out[from, to). */
void delta_synth_bf16(const delta_synth_t *s, uint16_t *out, size_t from, size_t to);
uint16_t delta_synth_f32_to_bf16(float f);

#endif
