/* xxhash's inline implementation, compiled with -mavx2 (CMakeLists.txt) so
 * xxh3 takes its AVX2 path. Its state struct is the library's, field for
 * field (the same header), so states move freely between the builds. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <stddef.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

#ifndef __AVX2__
#error "hash_avx2.c must be compiled with -mavx2"
#endif

/* prototypes as common/hash.h gives them, without including it (its names
   would clash with the inline build's) */
XXH64_hash_t ferry_xxh3_64_avx2(const void *data, size_t len);
XXH64_hash_t ferry_xxh3_64_seed_avx2(const void *data, size_t len, XXH64_hash_t seed);
XXH_errorcode ferry_xxh3_64_update_avx2(void *state, const void *data, size_t len);

XXH64_hash_t ferry_xxh3_64_avx2(const void *data, size_t len) { return XXH3_64bits(data, len); }

XXH64_hash_t ferry_xxh3_64_seed_avx2(const void *data, size_t len, XXH64_hash_t seed) {
    return XXH3_64bits_withSeed(data, len, seed);
}

XXH_errorcode ferry_xxh3_64_update_avx2(void *state, const void *data, size_t len) {
    return XXH3_64bits_update((XXH3_state_t *)state, data, len);
}
#endif
