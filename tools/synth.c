/* Adam on synthetic gradients; see synth.h. */
#include "synth.h"

#include <math.h>
#include <string.h>

static inline uint64_t mix(uint64_t x) { /* splitmix64 */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* A standard normal from 64 random bits (Box-Muller, one output). */
static inline double gauss(uint64_t h) {
    double u1 = ((double)(h >> 11) + 1.0) * (1.0 / 9007199254740993.0);
    double u2 = (double)(mix(h) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

void delta_synth_init(delta_synth_t *s, size_t n, bool norm, double lr, uint64_t seed, float *w, float *m,
                      float *v, float *d) {
    *s = (delta_synth_t){.n = n, .w = w, .m = m, .v = v, .d = d, .lr = lr, .step = 0, .seed = mix(seed)};
    for (size_t i = 0; i < n; i++) {
        w[i] = (float)((norm ? 1.0 : 0.0) + 0.02 * gauss(mix(s->seed ^ (i * 4 + 1))));
        d[i] = (float)gauss(mix(s->seed ^ (i * 4 + 2)));
        m[i] = v[i] = 0;
    }
}

void delta_synth_step_range(delta_synth_t *s, size_t from, size_t to) {
    uint32_t t = s->step + 1;
    double c1 = 1.0 - pow(0.9, t), c2 = 1.0 - pow(0.999, t);
    uint64_t salt = mix(s->seed ^ ((uint64_t)t << 40));
    for (size_t i = from; i < to && i < s->n; i++) {
        double g = 0.3 * s->d[i] + gauss(mix(salt ^ (i * 4 + 3)));
        s->m[i] = (float)(0.9 * s->m[i] + 0.1 * g);
        s->v[i] = (float)(0.999 * s->v[i] + 0.001 * g * g);
        double u = (s->m[i] / c1) / (sqrt(s->v[i] / c2) + 1e-8);
        s->w[i] = (float)(s->w[i] - s->lr * u);
    }
}

void delta_synth_next(delta_synth_t *s) { s->step++; }

uint16_t delta_synth_f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void delta_synth_bf16(const delta_synth_t *s, uint16_t *out, size_t from, size_t to) {
    for (size_t i = from; i < to && i < s->n; i++) out[i] = delta_synth_f32_to_bf16(s->w[i]);
}
