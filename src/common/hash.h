/* xxh3 (64-bit) for bulk checksums: weights in sync, delta chunks, tables.
 * Every implementation gives the same value, so members on different CPUs
 * agree. On x86-64 ferry builds xxhash's own inline AVX2 code and uses it
 * where the CPU has AVX2: on the hosts measured it beats both the library's
 * baseline (SSE2) build and its AVX-512 dispatch (docs/benchmarks.md). The
 * calls keep xxhash's names; like <xxh_x86dispatch.h>, this header maps the
 * bulk ones to ferry's dispatchers. State objects stay the library's. */
#ifndef FERRY_COMMON_HASH_H
#define FERRY_COMMON_HASH_H

#ifndef XXH_STATIC_LINKING_ONLY
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#endif
#include <stddef.h>
#include <xxhash.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define FERRY_HASH_AVX2 1
/* Thread-safety: any thread. */
XXH64_hash_t ferry_xxh3_64(const void *data, size_t len);
XXH64_hash_t ferry_xxh3_64_seed(const void *data, size_t len, XXH64_hash_t seed);
XXH_errorcode ferry_xxh3_64_update(XXH3_state_t *state, const void *data, size_t len);
/* The AVX2 builds (hash_avx2.c); only on CPUs with AVX2. */
XXH64_hash_t ferry_xxh3_64_avx2(const void *data, size_t len);
XXH64_hash_t ferry_xxh3_64_seed_avx2(const void *data, size_t len, XXH64_hash_t seed);
XXH_errorcode ferry_xxh3_64_update_avx2(void *state, const void *data, size_t len); /* an XXH3_state_t */
#ifndef FERRY_HASH_IMPL
#define XXH3_64bits ferry_xxh3_64
#define XXH3_64bits_withSeed ferry_xxh3_64_seed
#define XXH3_64bits_update ferry_xxh3_64_update
#endif
#endif

#endif
