/* The CPU features ferry's kernels choose by, detected once per process,
 * and the target attributes those kernels are built with. Every run-time
 * choice of a SIMD path goes through here (codec kernels, xxh3 build,
 * streaming copy), so a build for another CPU or a sanitizer changes one
 * place. Kernels are picked by explicit calls, never by ifunc resolvers
 * (target_clones): those run before ThreadSanitizer's runtime is up and
 * crash it. */
#ifndef FERRY_COMMON_CPU_H
#define FERRY_COMMON_CPU_H

#include <stdbool.h>
#include <stdint.h>

enum {
    FERRY_CPU_AVX2 = 1u << 0,
    /* x86-64-v3's integer part: AVX2, BMI1, BMI2, LZCNT, POPCNT (the
       portable hot loops' second build) */
    FERRY_CPU_V3 = 1u << 1,
    FERRY_CPU_AVX512F = 1u << 2,
    FERRY_CPU_AVX512BW = 1u << 3,
    /* AVX-512 BW, VBMI, VBMI2, VPOPCNTDQ with BMI2: the codec's AVX-512
       encoder and apply walk */
    FERRY_CPU_AVX512_CODEC = 1u << 4,
    FERRY_CPU_KNOWN = 1u << 31 /* set once detected */
};

#if defined(__x86_64__) && defined(__GNUC__)
#define FERRY_CPU_X86 1
#define FERRY_TARGET_AVX2 __attribute__((target("avx2")))
/* As ISA flags rather than "arch=x86-64-v3": a function with another arch
   does not inline ordinary (not always_inline) helpers. No FMA: a fused
   multiply-add could round differently, and encoders must write the same
   bytes on every CPU. */
#define FERRY_TARGET_V3 __attribute__((target("avx2,bmi,bmi2,lzcnt,popcnt")))
#define FERRY_TARGET_AVX512F __attribute__((target("avx512f")))
#define FERRY_TARGET_AVX512BW __attribute__((target("avx512f,avx512bw")))
#define FERRY_TARGET_AVX512_CODEC \
    __attribute__((target("avx512f,avx512bw,avx512vbmi,avx512vbmi2,avx512vpopcntdq,bmi,bmi2,lzcnt,popcnt")))
#endif

/* Detects the features (first call) and caches them; use ferry_cpu(). */
uint32_t ferry_cpu_detect(void);
extern uint32_t ferry_cpu_bits; /* 0 until detected; read through ferry_cpu() */

/* FERRY_CPU_* bits of this CPU. One load after the first call.
 * Thread-safety: any thread (racing first calls compute the same bits). */
static inline uint32_t ferry_cpu(void) {
    uint32_t b = __atomic_load_n(&ferry_cpu_bits, __ATOMIC_RELAXED);
    return b ? b : ferry_cpu_detect();
}

static inline bool ferry_cpu_has(uint32_t features) { return (ferry_cpu() & features) == features; }

#endif
