/* xxh3-64 written out for ferry sum's GPU kernels (common/sum.cu), step by
 * step as xxhash.h 0.8 computes it, with loads that never touch a byte
 * outside the aligned 4-byte words of the input (regions start at any byte;
 * no unaligned wide loads on a GPU). Host and device code alike: the unit
 * test test_sum_emu.c compiles the same functions on the CPU and checks them
 * against xxhash, beside a CPU emulation of the kernels' warp algorithm.
 *
 * The warp algorithm (xxh3's long input, > 240 bytes): a 1 KiB block is 16
 * stripes of 64 bytes; word j (8 bytes) of stripe s adds to accumulator j a
 * product keyed by secret[8s + 8j], and itself to accumulator j^1. Within a
 * block those are plain sums, so the 32 lanes of a warp take 16 bytes each
 * per half block (lane t: stripe 8h + t/4, words 2(t%4) and 2(t%4)+1, so a
 * lane feeds accumulators 2(t%4) and 2(t%4)+1 only), the 8 lanes with the
 * same t%4 add up their sums (shuffles), and every lane keeps the two
 * accumulators of its pair and scrambles them at each block's end. */
#ifndef FERRY_COMMON_SUM_XXH3_H
#define FERRY_COMMON_SUM_XXH3_H

#include <stdint.h>

#ifdef __CUDACC__
#define SUMX_FN static __host__ __device__ __forceinline__
#else
#define SUMX_FN static inline
#endif

/* An aligned 4-byte load (the test replaces it with one that checks where
   it reads). */
#ifndef SUMX_LD32
#define SUMX_LD32(p) (*(const uint32_t *)(const void *)(p))
#endif

#define SUMX_LEAF ((uint64_t)65536)
#define SUMX_SHORT_MAX 240u /* xxh3's short inputs: one scalar pass */
#define SUMX_GROUP 4        /* blocks a warp loads at once (4 KiB in flight) */

#define SUMX_PRIME32_1 0x9E3779B1u
#define SUMX_PRIME32_2 0x85EBCA77u
#define SUMX_PRIME32_3 0xC2B2AE3Du
#define SUMX_PRIME64_1 0x9E3779B185EBCA87ull
#define SUMX_PRIME64_2 0xC2B2AE3D27D4EB4Full
#define SUMX_PRIME64_3 0x165667B19E3779F9ull
#define SUMX_PRIME64_4 0x85EBCA77C2B2AE63ull
#define SUMX_PRIME64_5 0x27D4EB2F165667C5ull

/* xxh3's default secret (XXH3_kSecret), 192 bytes */
#define SUMX_KSECRET_BYTES \
    0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c, \
    0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f, \
    0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21, \
    0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c, \
    0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3, \
    0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8, \
    0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d, \
    0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64, \
    0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb, \
    0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e, \
    0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce, \
    0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e

/* ---- arithmetic ---------------------------------------------------------------- */

/* The low 32 bits of hi:lo >> sh (sh < 32). */
SUMX_FN uint32_t sumx_fsr(uint32_t lo, uint32_t hi, unsigned sh) {
#ifdef __CUDA_ARCH__
    return __funnelshift_r(lo, hi, sh);
#else
    return (uint32_t)((((uint64_t)hi << 32) | lo) >> sh);
#endif
}

/* The 128-bit product of a and b, its halves xor'ed (XXH3_mul128_fold64). */
SUMX_FN uint64_t sumx_fold64(uint64_t a, uint64_t b) {
#ifdef __CUDA_ARCH__
    return (a * b) ^ __umul64hi(a, b);
#else
    unsigned __int128 m = (unsigned __int128)a * b;
    return (uint64_t)m ^ (uint64_t)(m >> 64);
#endif
}

SUMX_FN uint32_t sumx_swap32(uint32_t x) {
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}
SUMX_FN uint64_t sumx_swap64(uint64_t x) {
    return (uint64_t)sumx_swap32((uint32_t)x) << 32 | sumx_swap32((uint32_t)(x >> 32));
}
SUMX_FN uint64_t sumx_rotl64(uint64_t x, unsigned r) { return (x << r) | (x >> (64 - r)); }

SUMX_FN uint64_t sumx_avalanche(uint64_t h) { /* XXH3_avalanche */
    h ^= h >> 37;
    h *= 0x165667919E3779F9ull;
    return h ^ (h >> 32);
}
SUMX_FN uint64_t sumx_avalanche64(uint64_t h) { /* XXH64_avalanche */
    h ^= h >> 33;
    h *= SUMX_PRIME64_2;
    h ^= h >> 29;
    h *= SUMX_PRIME64_3;
    return h ^ (h >> 32);
}
SUMX_FN uint64_t sumx_rrmxmx(uint64_t h, uint64_t len) { /* XXH3_rrmxmx */
    h ^= sumx_rotl64(h, 49) ^ sumx_rotl64(h, 24);
    h *= 0x9FB21C651E98DF25ull;
    h ^= (h >> 35) + len;
    h *= 0x9FB21C651E98DF25ull;
    return h ^ (h >> 28);
}

/* ---- reads ---------------------------------------------------------------------- */

/* Input bytes as little-endian words, at any address: aligned 4-byte loads
   only, each overlapping the bytes asked for. */
SUMX_FN uint32_t sumx_rd32(const uint8_t *p) {
    unsigned a = (unsigned)((uintptr_t)p & 3);
    uint32_t w0 = SUMX_LD32(p - a);
    return a ? sumx_fsr(w0, SUMX_LD32(p - a + 4), 8 * a) : w0;
}
SUMX_FN uint64_t sumx_rd64(const uint8_t *p) { return sumx_rd32(p) | (uint64_t)sumx_rd32(p + 4) << 32; }
SUMX_FN uint32_t sumx_rd8(const uint8_t *p) {
    unsigned a = (unsigned)((uintptr_t)p & 3);
    return (SUMX_LD32(p - a) >> (8 * a)) & 0xffu;
}

/* Secret bytes (shared memory on a GPU), any offset. */
SUMX_FN uint64_t sumx_sec64(const uint8_t *s, unsigned off) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | s[off + (unsigned)i];
    return v;
}
SUMX_FN uint32_t sumx_sec32(const uint8_t *s, unsigned off) { return (uint32_t)sumx_sec64(s, off); }

/* Bytes [16i, 16i + 16) of the secret xxh3 derives from a seed for long
   inputs (XXH3_initCustomSecret), from the default secret ks. */
SUMX_FN void sumx_custom_secret16(const uint8_t *ks, unsigned i, uint64_t seed, uint8_t *out) {
    uint64_t lo = sumx_sec64(ks, 16 * i) + seed, hi = sumx_sec64(ks, 16 * i + 8) - seed;
    for (unsigned b = 0; b < 8; b++) {
        out[16 * i + b] = (uint8_t)(lo >> (8 * b));
        out[16 * i + 8 + b] = (uint8_t)(hi >> (8 * b));
    }
}

/* ---- short inputs (<= 240 bytes): one thread ----------------------------------- */

SUMX_FN uint64_t sumx_mix16(const uint8_t *p, const uint8_t *sec, unsigned off, uint64_t seed) {
    return sumx_fold64(sumx_rd64(p) ^ (sumx_sec64(sec, off) + seed), sumx_rd64(p + 8) ^ (sumx_sec64(sec, off + 8) - seed));
}

/* XXH3_64bits_withSeed(p, len, seed) for len <= 240, sec the default secret
   (short inputs use it whatever the seed). */
SUMX_FN uint64_t sumx_xxh3_short(const uint8_t *p, uint64_t len, const uint8_t *sec, uint64_t seed) {
    if (len == 0) return sumx_avalanche64(seed ^ (sumx_sec64(sec, 56) ^ sumx_sec64(sec, 64)));
    if (len <= 3) {
        uint32_t c1 = sumx_rd8(p), c2 = sumx_rd8(p + (len >> 1)), c3 = sumx_rd8(p + len - 1);
        uint32_t combined = (c1 << 16) | (c2 << 24) | c3 | ((uint32_t)len << 8);
        uint64_t bitflip = (uint64_t)(sumx_sec32(sec, 0) ^ sumx_sec32(sec, 4)) + seed;
        return sumx_avalanche64((uint64_t)combined ^ bitflip);
    }
    if (len <= 8) {
        uint64_t s = seed ^ (uint64_t)sumx_swap32((uint32_t)seed) << 32;
        uint32_t in1 = sumx_rd32(p), in2 = sumx_rd32(p + len - 4);
        uint64_t bitflip = (sumx_sec64(sec, 8) ^ sumx_sec64(sec, 16)) - s;
        uint64_t in64 = in2 + ((uint64_t)in1 << 32);
        return sumx_rrmxmx(in64 ^ bitflip, len);
    }
    if (len <= 16) {
        uint64_t bitflip1 = (sumx_sec64(sec, 24) ^ sumx_sec64(sec, 32)) + seed;
        uint64_t bitflip2 = (sumx_sec64(sec, 40) ^ sumx_sec64(sec, 48)) - seed;
        uint64_t lo = sumx_rd64(p) ^ bitflip1, hi = sumx_rd64(p + len - 8) ^ bitflip2;
        return sumx_avalanche(len + sumx_swap64(lo) + hi + sumx_fold64(lo, hi));
    }
    uint64_t acc = len * SUMX_PRIME64_1;
    if (len <= 128) {
        if (len > 32) {
            if (len > 64) {
                if (len > 96) {
                    acc += sumx_mix16(p + 48, sec, 96, seed);
                    acc += sumx_mix16(p + len - 64, sec, 112, seed);
                }
                acc += sumx_mix16(p + 32, sec, 64, seed);
                acc += sumx_mix16(p + len - 48, sec, 80, seed);
            }
            acc += sumx_mix16(p + 16, sec, 32, seed);
            acc += sumx_mix16(p + len - 32, sec, 48, seed);
        }
        acc += sumx_mix16(p, sec, 0, seed);
        acc += sumx_mix16(p + len - 16, sec, 16, seed);
        return sumx_avalanche(acc);
    }
    /* 129..240 */
    unsigned rounds = (unsigned)len / 16;
    for (unsigned i = 0; i < 8; i++) acc += sumx_mix16(p + 16 * i, sec, 16 * i, seed);
    acc = sumx_avalanche(acc);
    for (unsigned i = 8; i < rounds; i++) acc += sumx_mix16(p + 16 * i, sec, 16 * (i - 8) + 3, seed);
    acc += sumx_mix16(p + len - 16, sec, 136 - 17, seed);
    return sumx_avalanche(acc);
}

/* ---- long inputs (> 240 bytes): one warp ----------------------------------------- */

/* xxh3's initial accumulator j (XXH3_INIT_ACC) */
SUMX_FN uint64_t sumx_init_acc(unsigned j) {
    switch (j) {
    case 0: return SUMX_PRIME32_3;
    case 1: return SUMX_PRIME64_1;
    case 2: return SUMX_PRIME64_2;
    case 3: return SUMX_PRIME64_3;
    case 4: return SUMX_PRIME64_4;
    case 5: return SUMX_PRIME32_2;
    case 6: return SUMX_PRIME64_5;
    default: return SUMX_PRIME32_1;
    }
}

/* A lane's keys, fixed for a whole input. Lane t owns accumulators
   j0 = 2(t%4) and j0 + 1. */
typedef struct sumx_keys {
    uint64_t k[2][2]; /* block half h: for its words j0, j0+1 of stripe 8h + t/4 */
    uint64_t scr[2];  /* scramble keys of j0, j0+1 */
} sumx_keys_t;

SUMX_FN void sumx_lane_keys(const uint8_t *sec, unsigned t, sumx_keys_t *k) {
    unsigned q = t & 3, r8 = t >> 2;
    for (unsigned h = 0; h < 2; h++) {
        unsigned off = 8 * (8 * h + r8 + 2 * q); /* 8 * stripe + 8 * j0 */
        k->k[h][0] = sumx_sec64(sec, off);
        k->k[h][1] = sumx_sec64(sec, off + 8);
    }
    k->scr[0] = sumx_sec64(sec, 128 + 16 * q); /* secret + 192 - 64, word j */
    k->scr[1] = sumx_sec64(sec, 136 + 16 * q);
}
/* The last stripe's key of accumulator j0 + i (secret + 192 - 64 - 7, word j),
   read when needed (registers are what bounds a warp's loads in flight). */
SUMX_FN uint64_t sumx_last_key(const uint8_t *sec, unsigned t, unsigned i) { return sumx_sec64(sec, 121 + 16 * (t & 3) + 8 * i); }
/* The merge's key for accumulator j0 + i (secret + 11, pair t%4). */
SUMX_FN uint64_t sumx_merge_key(const uint8_t *sec, unsigned t, unsigned i) { return sumx_sec64(sec, 11 + 16 * (t & 3) + 8 * i); }

/* Words j0, j0+1 of a stripe (d0, d1) added to the sums of accumulators
   j0 (s0) and j0+1 (s1): XXH3_accumulate_512 for two lanes. */
SUMX_FN void sumx_contrib(uint64_t d0, uint64_t d1, uint64_t k0, uint64_t k1, uint64_t *s0, uint64_t *s1) {
    uint64_t x0 = d0 ^ k0, x1 = d1 ^ k1;
    *s0 += (uint64_t)(uint32_t)x0 * (uint32_t)(x0 >> 32) + d1;
    *s1 += (uint64_t)(uint32_t)x1 * (uint32_t)(x1 >> 32) + d0;
}

SUMX_FN uint64_t sumx_scramble(uint64_t acc, uint64_t key) {
    acc ^= acc >> 47;
    acc ^= key;
    return acc * SUMX_PRIME32_1;
}

/* Bytes [a, a + 16) of the 32 bytes c[0..8) (a < 16): how a lane gets its
   16 bytes from two aligned vectors when the input is not 16-aligned. */
SUMX_FN void sumx_combine(const uint32_t c[8], unsigned a, uint32_t d[4]) {
    unsigned w = a >> 2, sh = 8 * (a & 3);
    uint32_t e[5];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int i = 0; i < 5; i++) e[i] = w == 0 ? c[i] : w == 1 ? c[i + 1] : w == 2 ? c[i + 2] : c[i + 3];
#ifdef __CUDA_ARCH__
#pragma unroll
#endif
    for (int i = 0; i < 4; i++) d[i] = sumx_fsr(e[i], e[i + 1], sh);
}

/* Blocks of a long input: nfull full 1 KiB blocks (each scrambled), then
   one last block of nstr stripes (maybe 0), then the last stripe
   [len - 64, len) (XXH3_hashLong_internal_loop). */
SUMX_FN uint64_t sumx_nfull(uint64_t len) { return (len - 1) / 1024; }
SUMX_FN unsigned sumx_nstr(uint64_t len) { return (unsigned)(((len - 1) - 1024 * sumx_nfull(len)) / 64); }

#endif
