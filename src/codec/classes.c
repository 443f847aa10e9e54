/* Magnitude classes. Whether an element changes depends strongly on its
 * size: a bf16 ulp doubles with every binade while an Adam step does not, so
 * small weights change far more often than large ones. The decoder knows
 * every base element, so positions are coded per class of base magnitude,
 * each class with its own gap statistics. The classes are contiguous ranges
 * of magnitude buckets (the exponent field, roughly), chosen per chunk by a
 * small dynamic program that minimizes the positions' entropy plus each
 * class's header cost, in integer fixed point (the same on every machine). */
#include "codec/codec_internal.h"

#define BUCKETS 256
#define GROUPS_MAX 48
#define FRAC DELTA_LOG2_FRAC /* costs are bits in fixed point: 2^-16 of a bit */
#define CLASS_COST ((uint64_t)(8 * (CLASS_ENTRY + 6)) << FRAC) /* table entry + stream tails */

uint64_t delta_log2_fixed(uint64_t x) {
    uint32_t e = 63u - (uint32_t)__builtin_clzll(x);
    uint64_t y = e >= 62 ? x >> (e - 62) : x << (62 - e); /* [2^62, 2^63): 1.y in Q62 */
    uint64_t r = (uint64_t)e << FRAC;
    for (uint32_t bit = 1u << (FRAC - 1); bit; bit >>= 1) {
        unsigned __int128 sq = (unsigned __int128)y * y; /* Q124 */
        y = (uint64_t)(sq >> 62);                        /* back to Q62, in [2^62, 2^64) */
        if (y >= (1ull << 63)) {
            y >>= 1;
            r |= bit;
        }
    }
    return r;
}

/* x * log2(x) in fixed point (0 for x = 0). */
static uint64_t xlog2x(uint64_t x) { return x ? x * delta_log2_fixed(x) : 0; }

/* n * H(m / n) in fixed-point bits: the entropy of m changes among n
 * elements, as n log n - m log m - (n - m) log (n - m). */
static uint64_t pos_bits(uint64_t n, uint64_t m) {
    if (m == 0 || m >= n) return 0;
    uint64_t a = xlog2x(n), b = xlog2x(m) + xlog2x(n - m);
    return a > b ? a - b : 0;
}

uint32_t delta_classes_choose(const uint64_t *hist_all, const uint64_t *hist_chg, uint32_t max_classes,
                              uint32_t bucket_shift, uint32_t *lower) {
    /* the non-empty buckets, merged pairwise until few enough for the DP */
    uint64_t n[BUCKETS], m[BUCKETS];
    uint32_t first[BUCKETS], g = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        if (hist_all[b] == 0 && hist_chg[b] == 0) continue;
        n[g] = hist_all[b] > hist_chg[b] ? hist_all[b] : hist_chg[b];
        m[g] = hist_chg[b];
        first[g] = b;
        g++;
    }
    lower[0] = 0;
    if (max_classes <= 1 || g <= 1) return 1;
    while (g > GROUPS_MAX) {
        uint32_t h = 0;
        for (uint32_t i = 0; i < g; i += 2) {
            n[h] = n[i] + (i + 1 < g ? n[i + 1] : 0);
            m[h] = m[i] + (i + 1 < g ? m[i + 1] : 0);
            first[h] = first[i];
            h++;
        }
        g = h;
    }
    uint64_t cn[GROUPS_MAX + 1] = {0}, cm[GROUPS_MAX + 1] = {0};
    for (uint32_t i = 0; i < g; i++) {
        cn[i + 1] = cn[i] + n[i];
        cm[i + 1] = cm[i] + m[i];
    }
    uint32_t K = max_classes < g ? max_classes : g;
    /* cost[j][i]: groups [j, i) as one class, computed once for every k
       (the logarithms were most of the DP's time) */
    uint64_t cost[GROUPS_MAX][GROUPS_MAX + 1];
    for (uint32_t j = 0; j < g; j++)
        for (uint32_t i = j + 1; i <= g; i++) cost[j][i] = pos_bits(cn[i] - cn[j], cm[i] - cm[j]) + CLASS_COST;
    /* best[k][i]: cheapest split of groups [0, i) into k classes */
    uint64_t best[FERRY_DELTA_CLASSES_MAX + 1][GROUPS_MAX + 1];
    uint32_t from[FERRY_DELTA_CLASSES_MAX + 1][GROUPS_MAX + 1];
    for (uint32_t k = 0; k <= K; k++)
        for (uint32_t i = 0; i <= g; i++) best[k][i] = UINT64_MAX;
    best[0][0] = 0;
    for (uint32_t k = 1; k <= K; k++)
        for (uint32_t i = k; i <= g; i++)
            for (uint32_t j = k - 1; j < i; j++) {
                if (best[k - 1][j] == UINT64_MAX) continue;
                uint64_t c = best[k - 1][j] + cost[j][i];
                if (c < best[k][i]) {
                    best[k][i] = c;
                    from[k][i] = j;
                }
            }
    uint32_t kbest = 1;
    for (uint32_t k = 2; k <= K; k++)
        if (best[k][g] < best[kbest][g]) kbest = k;
    /* walk back: class c starts at group cut[c] */
    uint32_t i = g;
    for (uint32_t k = kbest; k >= 1; k--) {
        uint32_t j = from[k][i];
        lower[k - 1] = k == 1 ? 0 : first[j] << bucket_shift;
        i = j;
    }
    return kbest;
}
