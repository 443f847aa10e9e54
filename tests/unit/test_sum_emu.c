/* ferry sum's GPU algorithm on the CPU: the device functions of
 * common/sum_xxh3.h compiled here and checked against xxhash (every short
 * length class, seeds, the derived secret), and the kernels' warp routine
 * (common/sum.cu: warp_long) emulated lane by lane with the same helpers and
 * the same indexing, so an algorithm error shows here before a GPU run.
 * Every load the emulation makes is checked: aligned, and overlapping the
 * input (4-byte words for scalar reads, 16-byte vectors for the warp's). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#define XXH_STATIC_LINKING_ONLY
#include <xxhash.h>

#include "check.h"

/* the input range every load must overlap */
static const uint8_t *g_lo, *g_hi;
static uint64_t g_loads;

static uint32_t checked_ld32(const uint8_t *p) {
    if (((uintptr_t)p & 3) || !(p + 4 > g_lo && p < g_hi)) {
        fprintf(stderr, "4-byte load at %p outside [%p, %p) or unaligned\n", (const void *)p, (const void *)g_lo,
                (const void *)g_hi);
        exit(1);
    }
    g_loads++;
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}
#define SUMX_LD32(p) checked_ld32((const uint8_t *)(p))
#include "common/sum_xxh3.h"
#define FERRY_HASH_IMPL
#include "common/sum.h"

static const uint8_t ksec[192] = {SUMX_KSECRET_BYTES};

typedef struct vec {
    uint32_t x, y, z, w;
} vec_t;

static vec_t ld_vec(uint64_t x) {
    const uint8_t *p = (const uint8_t *)(uintptr_t)x;
    if ((x & 15) || !(p + 16 > g_lo && p < g_hi)) {
        fprintf(stderr, "vector load at %p outside [%p, %p) or unaligned\n", (const void *)p, (const void *)g_lo,
                (const void *)g_hi);
        exit(1);
    }
    g_loads++;
    vec_t v;
    memcpy(&v, p, 16);
    return v;
}

/* common/sum.cu's warp_long, its 32 lanes run one after another between
   the shuffles. */
static uint64_t emu_warp_long(const uint8_t *p, uint64_t len, const uint8_t *sec) {
    enum { G = SUMX_GROUP };
    static sumx_keys_t k[32];
    uint64_t acc0[32], acc1[32];
    for (unsigned t = 0; t < 32; t++) {
        sumx_lane_keys(sec, t, &k[t]);
        acc0[t] = sumx_init_acc(2 * (t & 3));
        acc1[t] = sumx_init_acc(2 * (t & 3) + 1);
    }
    const uint64_t nfull = sumx_nfull(len);
    const unsigned nstr = sumx_nstr(len);
    const unsigned a = (unsigned)((uintptr_t)p & 15);
    const uint64_t base = (uint64_t)(uintptr_t)p - a, end = (uint64_t)(uintptr_t)p + len;
    const vec_t zero = {0, 0, 0, 0};
    static vec_t v[G][2][32];
    vec_t vx[32];
    for (uint64_t k0 = 0; k0 <= nfull; k0 += G) {
        for (unsigned t = 0; t < 32; t++) {
            for (int g = 0; g < G; g++)
                for (int h = 0; h < 2; h++) {
                    uint64_t x = base + 1024 * (k0 + g) + 512 * h + 16 * t;
                    v[g][h][t] = k0 + g <= nfull && x < end ? ld_vec(x) : zero;
                }
            vx[t] = zero;
            if (a && t == 0) {
                uint64_t x = base + 1024 * (k0 + G);
                if (x < end) vx[t] = ld_vec(x);
            }
        }
        for (int g = 0; g < G; g++) {
            const uint64_t kb = k0 + g;
            if (kb > nfull) break;
            const unsigned ns = kb < nfull ? 16 : nstr;
            uint64_t s0[32] = {0}, s1[32] = {0};
            for (int h = 0; h < 2; h++) {
                vec_t d[32], src[32];
                for (unsigned t = 0; t < 32; t++) {
                    d[t] = v[g][h][t];
                    vec_t next0 = h == 0 ? v[g][1][t] : g + 1 < G ? v[g + 1][0][t] : vx[t];
                    src[t] = t == 0 ? next0 : d[t];
                }
                if (a) {
                    vec_t out[32];
                    for (unsigned t = 0; t < 32; t++) {
                        vec_t nb = src[(t + 1) & 31]; /* __shfl_sync(src, (t + 1) & 31) */
                        uint32_t c[8] = {d[t].x, d[t].y, d[t].z, d[t].w, nb.x, nb.y, nb.z, nb.w}, o[4];
                        sumx_combine(c, a, o);
                        out[t] = (vec_t){o[0], o[1], o[2], o[3]};
                    }
                    memcpy(d, out, sizeof d);
                }
                for (unsigned t = 0; t < 32; t++)
                    if (8 * (unsigned)h + (t >> 2) < ns)
                        sumx_contrib(d[t].x | (uint64_t)d[t].y << 32, d[t].z | (uint64_t)d[t].w << 32, k[t].k[h][0],
                                     k[t].k[h][1], &s0[t], &s1[t]);
            }
            if (kb == nfull)
                for (unsigned t = 0; t < 4; t++) {
                    const uint8_t *x = p + len - 64 + 16 * t;
                    sumx_contrib(sumx_rd64(x), sumx_rd64(x + 8), sumx_last_key(sec, t, 0), sumx_last_key(sec, t, 1), &s0[t], &s1[t]);
                }
            for (unsigned m = 4; m < 32; m <<= 1) { /* s += __shfl_xor_sync(s, m) */
                uint64_t n0[32], n1[32];
                for (unsigned t = 0; t < 32; t++) {
                    n0[t] = s0[t] + s0[t ^ m];
                    n1[t] = s1[t] + s1[t ^ m];
                }
                memcpy(s0, n0, sizeof s0);
                memcpy(s1, n1, sizeof s1);
            }
            for (unsigned t = 0; t < 32; t++) {
                acc0[t] += s0[t];
                acc1[t] += s1[t];
                if (kb < nfull) {
                    acc0[t] = sumx_scramble(acc0[t], k[t].scr[0]);
                    acc1[t] = sumx_scramble(acc1[t], k[t].scr[1]);
                }
            }
        }
    }
    uint64_t mm[32];
    for (unsigned t = 0; t < 32; t++) mm[t] = sumx_fold64(acc0[t] ^ sumx_merge_key(sec, t, 0), acc1[t] ^ sumx_merge_key(sec, t, 1));
    for (unsigned m = 1; m < 4; m <<= 1) {
        uint64_t n[32];
        for (unsigned t = 0; t < 32; t++) n[t] = mm[t] + mm[t ^ m];
        memcpy(mm, n, sizeof mm);
    }
    uint64_t r = sumx_avalanche(len * SUMX_PRIME64_1 + mm[0]);
    for (unsigned t = 1; t < 32; t++) CHECK(sumx_avalanche(len * SUMX_PRIME64_1 + mm[t]) == r); /* every lane */
    return r;
}

/* kernel 1's hash of one leaf */
static uint64_t emu_leaf(const uint8_t *p, uint64_t len) {
    g_lo = p;
    g_hi = p + len;
    return len > SUMX_SHORT_MAX ? emu_warp_long(p, len, ksec) : sumx_xxh3_short(p, len, ksec, 0);
}

/* kernels 1 and 2 on one region; the leaf hashes at 8 bytes past a
   16-aligned address when odd_table (as hashes + first_leaf may be) */
static uint64_t emu_region(const uint8_t *p, uint64_t len, bool odd_table) {
    if (len <= SUMX_LEAF) return emu_leaf(p, len);
    uint64_t n = (len + SUMX_LEAF - 1) / SUMX_LEAF;
    uint64_t *table = aligned_alloc(16, 16 * (n / 2 + 2));
    CHECK(table);
    uint64_t *hashes = table + (odd_table ? 1 : 0);
    for (uint64_t i = 0; i < n; i++) {
        uint64_t off = i * SUMX_LEAF;
        hashes[i] = emu_leaf(p + off, len - off < SUMX_LEAF ? len - off : SUMX_LEAF);
    }
    const uint8_t *h = (const uint8_t *)hashes;
    g_lo = h;
    g_hi = h + 8 * n;
    uint64_t s;
    if (8 * n <= SUMX_SHORT_MAX) {
        s = sumx_xxh3_short(h, 8 * n, ksec, len);
    } else {
        uint8_t custom[192];
        for (unsigned i = 0; i < 12; i++) sumx_custom_secret16(ksec, i, len, custom);
        s = emu_warp_long(h, 8 * n, custom);
    }
    free(table);
    return s;
}

#define BUF_LEN ((size_t)3 << 20)

int main(void) {
    uint8_t *buf = malloc(BUF_LEN + 64);
    CHECK(buf);
    for (size_t i = 0; i < BUF_LEN + 64; i++) buf[i] = (uint8_t)(rng_next() >> 56);
    uint8_t *data = buf + 32; /* regions lie in data; loads may touch the aligned words around them */
    static const uint64_t seeds[] = {0, 1, 241, 65537, 0x9E3779B185EBCA87ull, 0xffffffffffffffffull};

    /* the short paths, every length, offset and a few seeds */
    for (unsigned len = 0; len <= SUMX_SHORT_MAX; len++)
        for (unsigned off = 0; off < 16; off++)
            for (size_t s = 0; s < sizeof seeds / sizeof seeds[0]; s++) {
                const uint8_t *p = data + 1000 * off + len;
                g_lo = p;
                g_hi = p + len;
                uint64_t got = sumx_xxh3_short(p, len, ksec, seeds[s]), want = XXH3_64bits_withSeed(p, len, seeds[s]);
                if (got != want) {
                    fprintf(stderr, "short: len %u offset %u seed %016llx: %016llx, xxhash %016llx\n", len, off,
                            (unsigned long long)seeds[s], (unsigned long long)got, (unsigned long long)want);
                    return 1;
                }
            }

    /* the warp routine, default secret: every length to 3 KiB, the block and
       stripe edges, whole leaves; every offset mod 16 */
    uint64_t lens[4096];
    size_t nl = 0;
    for (uint64_t l = 241; l <= 3072; l++) lens[nl++] = l;
    for (uint64_t b = 4; b <= 64; b += 3)
        for (int d = -65; d <= 65; d += 13) lens[nl++] = 1024 * b + (uint64_t)(int64_t)d;
    lens[nl++] = 65535;
    lens[nl++] = 65536;
    for (size_t i = 0; i < nl; i++)
        for (unsigned off = 0; off < 16; off += (lens[i] <= 3072 ? 5 : 1)) {
            const uint8_t *p = data + 4096 * off + off;
            uint64_t got = emu_leaf(p, lens[i]), want = XXH3_64bits(p, lens[i]);
            if (got != want) {
                fprintf(stderr, "warp: len %llu offset %u: %016llx, xxhash %016llx\n", (unsigned long long)lens[i], off,
                        (unsigned long long)got, (unsigned long long)want);
                return 1;
            }
        }

    /* the warp routine with the secret derived from a seed (kernel 2 on more
       than 30 leaves): every 8-byte table length to 4 KiB, and larger */
    for (uint64_t l = 248; l <= 4096 + 8 * 80; l += 8)
        for (size_t s = 1; s < sizeof seeds / sizeof seeds[0]; s++)
            for (unsigned off = 0; off < 16; off += 8) {
                const uint8_t *p = data + 333 * s + off - ((uintptr_t)(data + 333 * s) & 15);
                uint8_t custom[192];
                for (unsigned i = 0; i < 12; i++) sumx_custom_secret16(ksec, i, seeds[s], custom);
                g_lo = p;
                g_hi = p + l;
                uint64_t got = emu_warp_long(p, l, custom), want = XXH3_64bits_withSeed(p, l, seeds[s]);
                if (got != want) {
                    fprintf(stderr, "seeded warp: len %llu offset %u seed %016llx: %016llx, xxhash %016llx\n",
                            (unsigned long long)l, off, (unsigned long long)seeds[s], (unsigned long long)got,
                            (unsigned long long)want);
                    return 1;
                }
            }

    /* whole regions, kernels 1 and 2, against ferry_sum */
    static const uint64_t rlens[] = {0,           1,           17,         240,        241,        65535,
                                     65536,       65537,       65536 + 64, 65536 + 65, 131072,     200000,
                                     30 * 65536,  30 * 65536 + 1, 31 * 65536, 33 * 65536 - 1, BUF_LEN - 64};
    for (size_t i = 0; i < sizeof rlens / sizeof rlens[0]; i++)
        for (unsigned off = 0; off < 16; off += 3) {
            const uint8_t *p = data + off;
            uint64_t got = emu_region(p, rlens[i], off & 1), want = ferry_sum(p, rlens[i]);
            if (got != want) {
                fprintf(stderr, "region: len %llu offset %u: %016llx, ferry_sum %016llx\n",
                        (unsigned long long)rlens[i], off, (unsigned long long)got, (unsigned long long)want);
                return 1;
            }
        }
    free(buf);
    printf("ok (%llu loads checked)\n", (unsigned long long)g_loads);
    return 0;
}
