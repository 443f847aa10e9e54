/* The floor under any verified delta encoder, for ferry bench delta: read
 * base and next once, find where they differ (here only which 64-byte lines
 * do) and checksum next, 2 KiB at a time like ferry's encoder. Built with
 * AVX2 on x86-64 (CMakeLists.txt), with xxhash inline so that xxh3 takes
 * the path ferry's own checksums take; elsewhere it is not measured. */
#include "bench_floor.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <string.h>
#define XXH_INLINE_ALL
#include <xxhash.h>

bool bench_encode_floor_runs(void) { return __builtin_cpu_supports("avx2"); }

uint64_t bench_encode_floor(const uint8_t *base, const uint8_t *next, uint64_t bytes) {
    XXH3_state_t st;
    XXH3_64bits_reset(&st);
    uint64_t lines = 0;
    for (uint64_t at = 0; at < bytes; at += 2048) {
        uint64_t len = bytes - at < 2048 ? bytes - at : 2048;
        if (bytes - at > 3 * 2048) /* two pieces ahead on their way, as ferry's encoder does */
            for (uint64_t o = 0; o < 2048; o += 64) {
                __builtin_prefetch(base + at + 2 * 2048 + o);
                __builtin_prefetch(next + at + 2 * 2048 + o);
            }
        for (uint64_t o = 0; o + 64 <= len; o += 64) {
            uint64_t x = 0, a[8], b[8];
            memcpy(a, base + at + o, 64);
            memcpy(b, next + at + o, 64);
            for (int i = 0; i < 8; i++) x |= a[i] ^ b[i];
            lines += x != 0;
        }
        XXH3_64bits_update(&st, next + at, len);
    }
    return lines + (XXH3_64bits_digest(&st) & 1); /* used, so none of it is optimized away */
}
#else
bool bench_encode_floor_runs(void) { return false; }

uint64_t bench_encode_floor(const uint8_t *base, const uint8_t *next, uint64_t bytes) {
    (void)base, (void)next, (void)bytes;
    return 0;
}
#endif
