/* CPU feature detection, once per process: see cpu.h. */
#include "common/cpu.h"

#if defined(FERRY_CPU_X86)
#include <cpuid.h>
#endif

uint32_t ferry_cpu_bits;

uint32_t ferry_cpu_detect(void) {
    uint32_t b = FERRY_CPU_KNOWN;
#if defined(FERRY_CPU_X86)
    __builtin_cpu_init();
    unsigned a, bx, c, d;
    /* LZCNT (CPUID 0x80000001 ECX bit 5) has no __builtin_cpu_supports name in every compiler */
    bool lzcnt = __get_cpuid(0x80000001u, &a, &bx, &c, &d) && (c & (1u << 5));
    if (__builtin_cpu_supports("avx2")) b |= FERRY_CPU_AVX2;
    if ((b & FERRY_CPU_AVX2) && __builtin_cpu_supports("bmi") && __builtin_cpu_supports("bmi2") &&
        __builtin_cpu_supports("popcnt") && lzcnt)
        b |= FERRY_CPU_V3;
    if (__builtin_cpu_supports("avx512f")) b |= FERRY_CPU_AVX512F;
    if ((b & FERRY_CPU_AVX512F) && __builtin_cpu_supports("avx512bw")) b |= FERRY_CPU_AVX512BW;
    if ((b & FERRY_CPU_AVX512BW) && (b & FERRY_CPU_V3) && __builtin_cpu_supports("avx512vbmi") &&
        __builtin_cpu_supports("avx512vbmi2") && __builtin_cpu_supports("avx512vpopcntdq"))
        b |= FERRY_CPU_AVX512_CODEC;
#endif
    __atomic_store_n(&ferry_cpu_bits, b, __ATOMIC_RELAXED);
    return b;
}
