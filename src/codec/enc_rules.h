/* The encoder's decisions (docs/delta-format.md), host and device code
 * alike: the magnitude classes' dynamic program, the Rice parameters'
 * first guesses and final choice, format 2's sub-block size. Every one is
 * integer arithmetic, so the CPU encoder (chunk_enc.c, classes.c) and the
 * GPU encoder (delta_enc.cu) take the same decisions from the same counts
 * and write the same bytes. */
#ifndef FERRY_CODEC_ENC_RULES_H
#define FERRY_CODEC_ENC_RULES_H

#include <stdint.h>

#ifdef __CUDACC__
#define ER_HD static __host__ __device__ __forceinline__
#else
#define ER_HD static inline
#endif
#ifdef __CUDA_ARCH__
#define ER_CLZ64(x) ((uint32_t)__clzll((long long)(x)))
#else
#define ER_CLZ64(x) ((uint32_t)__builtin_clzll(x))
#endif

#define ER_BUCKETS 256u
#define ER_GROUPS_MAX 48u /* buckets are merged pairwise until at most this many: the DP's size */
#define ER_CLASSES_MAX 8u /* FERRY_DELTA_CLASSES_MAX */
#define ER_LOG2_FRAC 16u  /* costs are bits in fixed point: 2^-16 of a bit */
#define ER_CLASS_COST ((uint64_t)(8 * (24 + 6)) << ER_LOG2_FRAC) /* a class table entry + stream tails */
#define ER_SUB_LOG2_MIN 12u
#define ER_SUB_LOG2_MAX_CHOSEN 15u
#define ER_SUB_CHANGES 2048u /* format 2: changes per sub-block, on average, at most */

/* log2(x) for x >= 1, ER_LOG2_FRAC fractional bits, truncated: squaring
 * the mantissa in Q62 once per bit. */
ER_HD uint64_t er_log2_fixed(uint64_t x) {
    uint32_t e = 63u - ER_CLZ64(x);
    uint64_t y = e >= 62 ? x >> (e - 62) : x << (62 - e); /* [2^62, 2^63): 1.y in Q62 */
    uint64_t r = (uint64_t)e << ER_LOG2_FRAC;
    for (uint32_t bit = 1u << (ER_LOG2_FRAC - 1); bit; bit >>= 1) {
        unsigned __int128 sq = (unsigned __int128)y * y; /* Q124 */
        y = (uint64_t)(sq >> 62);                        /* back to Q62, in [2^62, 2^64) */
        if (y >= (1ull << 63)) {
            y >>= 1;
            r |= bit;
        }
    }
    return r;
}

ER_HD uint64_t er_xlog2x(uint64_t x) { return x ? x * er_log2_fixed(x) : 0; }

/* n * H(m / n) in fixed-point bits: the entropy of m changes among n
 * elements, as n log n - m log m - (n - m) log (n - m). */
ER_HD uint64_t er_pos_bits(uint64_t n, uint64_t m) {
    if (m == 0 || m >= n) return 0;
    uint64_t a = er_xlog2x(n), b = er_xlog2x(m) + er_xlog2x(n - m);
    return a > b ? a - b : 0;
}

/* The DP's input: the non-empty buckets, merged pairwise until at most
 * ER_GROUPS_MAX groups; cn/cm are prefix sums of elements and changes. */
typedef struct er_groups {
    uint64_t cn[ER_GROUPS_MAX + 1], cm[ER_GROUPS_MAX + 1];
    uint32_t first[ER_GROUPS_MAX]; /* each group's first bucket */
    uint32_t g;
} er_groups_t;

/* The working memory of er_groups_make and er_classes_dp (9 KiB: a GPU
 * keeps it in shared memory). */
typedef struct er_scratch {
    uint64_t n[ER_BUCKETS], m[ER_BUCKETS];
    uint32_t first[ER_BUCKETS];
    uint64_t best[ER_CLASSES_MAX + 1][ER_GROUPS_MAX + 1]; /* cheapest split of groups [0, i) into k classes */
    uint8_t from[ER_CLASSES_MAX + 1][ER_GROUPS_MAX + 1];
} er_scratch_t;

/* From the 256 buckets' counts of a sample of every stride-th element
 * (sample) and of the changed elements (chg). */
ER_HD void er_groups_make(const uint32_t *sample, uint32_t stride, const uint32_t *chg, er_groups_t *gr,
                          er_scratch_t *w) {
    uint64_t *n = w->n, *m = w->m;
    uint32_t *first = w->first, g = 0;
    for (uint32_t b = 0; b < ER_BUCKETS; b++) {
        uint64_t all = (uint64_t)stride * sample[b];
        if (all == 0 && chg[b] == 0) continue;
        n[g] = all > chg[b] ? all : chg[b];
        m[g] = chg[b];
        first[g] = b;
        g++;
    }
    while (g > ER_GROUPS_MAX) {
        uint32_t h = 0;
        for (uint32_t i = 0; i < g; i += 2) {
            n[h] = n[i] + (i + 1 < g ? n[i + 1] : 0);
            m[h] = m[i] + (i + 1 < g ? m[i + 1] : 0);
            first[h] = first[i];
            h++;
        }
        g = h;
    }
    gr->cn[0] = gr->cm[0] = 0;
    for (uint32_t i = 0; i < g; i++) {
        gr->cn[i + 1] = gr->cn[i] + n[i];
        gr->cm[i + 1] = gr->cm[i] + m[i];
        gr->first[i] = first[i];
    }
    gr->g = g;
}

/* The cost of groups [j, i) as one class (j < i). */
ER_HD uint64_t er_class_cost(const er_groups_t *gr, uint32_t j, uint32_t i) {
    return er_pos_bits(gr->cn[i] - gr->cn[j], gr->cm[i] - gr->cm[j]) + ER_CLASS_COST;
}

/* Index of cost[j][i] in a triangle of g groups, row j holding i = j+1..g. */
ER_HD uint32_t er_cost_index(uint32_t g, uint32_t j, uint32_t i) {
    return j * g - j * (j - 1) / 2 + (i - j - 1);
}
ER_HD uint32_t er_cost_entries(uint32_t g) { return g * (g + 1) / 2; }
/* The (j, i) of entry x of that triangle. */
ER_HD void er_cost_pair(uint32_t g, uint32_t x, uint32_t *j, uint32_t *i) {
    uint32_t r = 0;
    while (x >= g - r) x -= g - r++;
    *j = r;
    *i = r + 1 + x;
}

/* The cheapest split of the groups into at most max_classes classes, from
 * the costs (er_cost_index order); lower[c] gets class c's smallest
 * magnitude (bucket << bucket_shift; lower[0] = 0). Returns the classes. */
ER_HD uint32_t er_classes_dp(const er_groups_t *gr, const uint64_t *cost, uint32_t max_classes, uint32_t bucket_shift,
                             uint32_t *lower, er_scratch_t *w) {
    const uint32_t g = gr->g;
    lower[0] = 0;
    if (max_classes <= 1 || g <= 1) return 1;
    uint32_t K = max_classes < g ? max_classes : g;
    uint64_t(*best)[ER_GROUPS_MAX + 1] = w->best;
    uint8_t(*from)[ER_GROUPS_MAX + 1] = w->from;
    for (uint32_t k = 0; k <= K; k++)
        for (uint32_t i = 0; i <= g; i++) best[k][i] = UINT64_MAX;
    best[0][0] = 0;
    for (uint32_t k = 1; k <= K; k++)
        for (uint32_t i = k; i <= g; i++)
            for (uint32_t j = k - 1; j < i; j++) {
                if (best[k - 1][j] == UINT64_MAX) continue;
                uint64_t c = best[k - 1][j] + cost[er_cost_index(g, j, i)];
                if (c < best[k][i]) {
                    best[k][i] = c;
                    from[k][i] = (uint8_t)j;
                }
            }
    uint32_t kbest = 1;
    for (uint32_t k = 2; k <= K; k++)
        if (best[k][g] < best[kbest][g]) kbest = k;
    /* walk back: class c starts at group from[..] */
    uint32_t i = g;
    for (uint32_t k = kbest; k >= 1; k--) {
        uint32_t j = from[k][i];
        lower[k - 1] = k == 1 ? 0 : gr->first[j] << bucket_shift;
        i = j;
    }
    return kbest;
}

/* Rice parameter near the optimum for geometric gaps of mean num / den:
 * floor(log2(mean * ln 2)), 0 for a mean up to 1; the caller then tries it
 * and its two neighbours on the real gaps. ln 2 as 69314718 / 10^8. */
ER_HD int er_rice_guess(uint64_t num, uint64_t den) {
    if (den == 0 || num <= den) return 0;
    unsigned __int128 a = (unsigned __int128)num * 69314718u, b = (unsigned __int128)den * 100000000u;
    int e = 0;
    while ((b << (e + 1)) <= a) e++;
    return a >= b ? e : 0;
}

/* Bits of ExpGolomb(v, k). */
ER_HD uint32_t er_expg_len(uint64_t v, uint32_t k) {
    uint32_t len = 64u - ER_CLZ64(v + (1ull << k));
    return 2u * len - 1 - k;
}

/* A class's code parameters from its bit counts: of the three Rice
 * parameters around each guess (g0 for the gaps of its mk changes, n0 for
 * the runs between non-unit changes, `runs` of them), the one that spends
 * the fewest bits (the first of equals, 24 at most), and of the five
 * exp-Golomb orders for the magnitudes likewise. */
ER_HD void er_choose_params(const uint64_t gap_bits[3], const uint64_t nu_bits[3], const uint64_t mag_bits[5],
                            uint64_t mk, uint64_t runs, int g0, int n0, uint32_t *k_gap, uint32_t *k_nu,
                            uint32_t *k_mag) {
    uint64_t best = UINT64_MAX, best_nu = UINT64_MAX;
    *k_gap = *k_nu = *k_mag = 0;
    for (int e = 0; e < 3; e++) {
        uint64_t kk = (uint64_t)(g0 - 1 + e), bits = gap_bits[e] + mk * (1 + kk);
        if (kk <= 24 && bits < best) best = bits, *k_gap = (uint32_t)kk;
        kk = (uint64_t)(n0 - 1 + e), bits = nu_bits[e] + runs * (1 + kk);
        if (kk <= 24 && bits < best_nu) best_nu = bits, *k_nu = (uint32_t)kk;
    }
    for (uint32_t e = 1; e < 5; e++)
        if (mag_bits[e] < mag_bits[*k_mag]) *k_mag = e;
}

/* Format 2's sub-block size for a chunk of elems elements of which m
 * changed: the largest 2^S, S from 15 down to 12, whose sub-blocks hold at
 * most 2048 changes on average; 12 when none does. */
ER_HD uint32_t er_sub_log2(uint64_t m, uint32_t elems) {
    uint32_t S = ER_SUB_LOG2_MAX_CHOSEN;
    while (S > ER_SUB_LOG2_MIN && (m << S) > (uint64_t)ER_SUB_CHANGES * elems) S--;
    return S;
}

#endif
