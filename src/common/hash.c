/* Picks an xxh3 build per call (the CPU check is one load). */
#define FERRY_HASH_IMPL /* the library's own names below */
#include "common/hash.h"

#include "common/cpu.h"

#ifdef FERRY_HASH_AVX2
XXH64_hash_t ferry_xxh3_64(const void *data, size_t len) {
    return ferry_cpu_has(FERRY_CPU_AVX2) ? ferry_xxh3_64_avx2(data, len) : XXH3_64bits(data, len);
}

XXH64_hash_t ferry_xxh3_64_seed(const void *data, size_t len, XXH64_hash_t seed) {
    return ferry_cpu_has(FERRY_CPU_AVX2) ? ferry_xxh3_64_seed_avx2(data, len, seed)
                                         : XXH3_64bits_withSeed(data, len, seed);
}

XXH_errorcode ferry_xxh3_64_update(XXH3_state_t *state, const void *data, size_t len) {
    return ferry_cpu_has(FERRY_CPU_AVX2) ? ferry_xxh3_64_update_avx2(state, data, len)
                                         : XXH3_64bits_update(state, data, len);
}
#endif
