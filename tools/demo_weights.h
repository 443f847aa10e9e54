/* Deterministic RL-like weights for `ferry demo` and `ferry bench sync`.
 *
 * Element i of tensor T at version v is a pure function of (seed, T's name,
 * i, v), so a writer can produce any rank's share and a reader can check
 * its buffers against an independent reference without talking to anyone:
 *   w0      ~ N(0, 0.02) (norm weights: 1 + N(0, 0.02)), from a hash of i;
 *   master  = fp32(w0 + lr * g_i * C_v), an Adam-like trajectory: a fixed
 *             per-element direction g_i in +-[0.5, 1.5) and step sizes
 *             1/sqrt(s) (the first step is lr * sign, later ones shrink),
 *             C_v = sum over s = 1..v-1 of 1/sqrt(s) (version 1: no step);
 *   stored  = bf16(master), round to nearest even (or the fp32 master for
 *             F32 tensors).
 * At lr 1e-6 about 1% of bf16 elements change per step, as in RL.
 * The element functions also compile as CUDA device code (demo_gpu_weights.cu
 * computes GPU members' weights where they live); the one expression that
 * rounds is written with explicit round-to-nearest operations, so that no
 * compiler fuses it into an FMA and both give the same bits. */
#ifndef FERRY_TOOLS_DEMO_WEIGHTS_H
#define FERRY_TOOLS_DEMO_WEIGHTS_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ferry/layout.h"

#ifdef __CUDACC__
#define DEMO_FN static inline __host__ __device__
#else
#define DEMO_FN static inline
#endif
#if defined(__CUDA_ARCH__)
#define DEMO_DADD(a, b) __dadd_rn(a, b)
#define DEMO_DMUL(a, b) __dmul_rn(a, b)
#else
#define DEMO_DADD(a, b) ((a) + (b))
#define DEMO_DMUL(a, b) ((a) * (b))
#endif

typedef struct demo_tensor {
    uint64_t seed;   /* from the run's seed and the tensor's name */
    double center;   /* 0, or 1 for norm weights */
    double shift;    /* lr * C_v */
} demo_tensor_t;

DEMO_FN uint64_t demo_mix(uint64_t x) { /* splitmix64 */
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static inline double demo_step_sum(uint64_t version) {
    double c = 0;
    for (uint64_t s = 1; s < version; s++) c += 1.0 / sqrt((double)s);
    return c;
}

static inline demo_tensor_t demo_tensor(uint64_t seed, const char *name, double lr, uint64_t version) {
    uint64_t h = demo_mix(seed);
    for (const char *p = name; *p; p++) h = demo_mix(h ^ (uint8_t)*p);
    demo_tensor_t t = {h, strstr(name, "norm") ? 1.0 : 0.0, lr * demo_step_sum(version)};
    return t;
}

DEMO_FN float demo_master(const demo_tensor_t *t, uint64_t i) {
    uint64_t h = demo_mix(t->seed ^ i);
    /* Irwin-Hall of three 16-bit uniforms: mean 1.5, sd 0.5 (in 65536ths) */
    double z = ((double)(h & 0xFFFF) + (double)((h >> 16) & 0xFFFF) + (double)((h >> 32) & 0xFFFF)) / 65536.0;
    z = (z - 1.5) * 2.0;
    double dir = 0.5 + (double)((h >> 48) & 0x7FFF) / 32768.0;
    if (h >> 63) dir = -dir;
    return (float)DEMO_DADD(DEMO_DADD(t->center, DEMO_DMUL(0.02, z)), DEMO_DMUL(t->shift, dir));
}

DEMO_FN uint16_t demo_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 0x40); /* quiet NaN */
    u += 0x7FFFu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* Calls fn(ctx, lin, addr) for every element of a piece: lin is its
 * row-major index in the tensor, addr its byte offset in the buffer. */
#define DEMO_FOR_EACH(ti, piece, esz, BODY)                                                          \
    do {                                                                                            \
        const ferry_piece_t *p_ = (piece);                                                          \
        int64_t ts_[FERRY_MAX_DIMS], idx_[FERRY_MAX_DIMS] = {0};                                    \
        uint32_t nd_ = p_->box.ndim;                                                                \
        int64_t acc_ = 1;                                                                           \
        for (int d_ = (int)nd_ - 1; d_ >= 0; d_--) {                                                \
            ts_[d_] = acc_;                                                                         \
            acc_ *= (ti)->shape[d_];                                                                \
        }                                                                                           \
        int64_t inner_ = nd_ ? p_->box.extent[nd_ - 1] : 1;                                         \
        int64_t istr_ = nd_ ? p_->strides[nd_ - 1] : 0, its_ = nd_ ? ts_[nd_ - 1] : 0;              \
        for (;;) {                                                                                  \
            uint64_t lin0_ = 0, addr0_ = p_->byte_offset;                                           \
            for (uint32_t d_ = 0; d_ < nd_; d_++) {                                                 \
                lin0_ += (uint64_t)((p_->box.offset[d_] + idx_[d_]) * ts_[d_]);                     \
                addr0_ += (uint64_t)(idx_[d_] * p_->strides[d_]) * (esz);                           \
            }                                                                                       \
            for (int64_t k_ = 0; k_ < inner_; k_++) {                                               \
                uint64_t lin = lin0_ + (uint64_t)(k_ * its_);                                       \
                uint64_t addr = addr0_ + (uint64_t)(k_ * istr_) * (esz);                            \
                BODY;                                                                               \
            }                                                                                       \
            int d_ = (int)nd_ - 2;                                                                  \
            for (; d_ >= 0; d_--) {                                                                 \
                if (++idx_[d_] < p_->box.extent[d_]) break;                                         \
                idx_[d_] = 0;                                                                       \
            }                                                                                       \
            if (d_ < 0) break;                                                                      \
        }                                                                                           \
    } while (0)

#endif
