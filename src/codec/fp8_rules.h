/* The arithmetic of FP8 block quantization (ferry/fp8.h), host and device
 * code alike, so the CPU (fp8.c) and the GPU (fp8.cu) give the same bytes:
 * a block's scale from its amax, and float -> float8_e4m3fn as torch
 * converts. */
#ifndef FERRY_CODEC_FP8_RULES_H
#define FERRY_CODEC_FP8_RULES_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define F8_HD static __host__ __device__ __forceinline__
#else
#define F8_HD static inline
#endif

F8_HD uint32_t f8_bits(float f) {
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}
F8_HD float f8_float(uint32_t b) {
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* float -> float8_e4m3fn: round to nearest even; past 448 (infinities too)
 * +-448, as torch saturates; NaN 0x7F (with its sign bit). */
F8_HD uint8_t f8_e4m3(float f) {
    uint32_t b = f8_bits(f), a = b & 0x7FFFFFFFu;
    uint8_t sign = (uint8_t)((b >> 24) & 0x80u);
    if (a > 0x7F800000u) return (uint8_t)(sign | 0x7Fu);
    if (a < (121u << 23)) { /* below 2^-6: steps of 2^-9 */
        float q = rintf(f8_float(a) * 512.0f); /* exact scaling, then to nearest even: 0..8 (8: the least normal) */
        return (uint8_t)(sign | (uint8_t)q);
    }
    uint32_t r = a - ((127u - 7u) << 23); /* the exponent rebiased, then 3 mantissa bits to nearest even */
    r = (r + 0x7FFFFu + ((r >> 20) & 1u)) >> 20;
    return (uint8_t)(sign | (r > 0x7Eu ? 0x7Eu : r));
}

/* 2^ceil(log2(s)) for a positive normal s, with log2 rounded to float as
 * torch's is: a few ulps above a power of two the logarithm rounds down to
 * the integer, and so does its ceiling. The logarithm's fraction in double
 * decides the float rounding (the same on every machine). */
F8_HD float f8_ue8m0(float s) {
    uint32_t b = f8_bits(s), m = b & 0x7FFFFFu;
    int k = (int)((b >> 23) & 0xFFu) - 127;
    if (m == 0) return s;                                                        /* a power of two */
    float lg = (float)((double)k + log2(1.0 + (double)m / 8388608.0));           /* log2(s), rounded to float */
    return ldexpf(1.0f, (int)ceilf(lg));
}

/* A block's scale (weight_scale_inv) from its amax: at least 1e-4 (NaN
 * stays), over 448 in float, UE8M0 when asked. */
F8_HD float f8_scale(float amax, int ue8m0) {
    if (!(amax >= 1e-4f) && amax == amax) amax = 1e-4f;
    float s = amax / 448.0f;
    return ue8m0 && s == s ? f8_ue8m0(s) : s;
}

/* Whether rows rows of cols elements, ld apart, stay below 2^62 elements
 * (the leading dimensions' check of both quantizers). */
F8_HD int f8_fits(uint64_t rows, uint64_t cols, uint64_t ld) {
    const uint64_t lim = 1ull << 62;
    return cols <= ld && cols <= lim && (rows <= 1 || (ld <= lim && rows - 1 <= (lim - cols) / ld));
}

#endif
