/* Magnitude classes. Whether an element changes depends strongly on its
 * size: a bf16 ulp doubles with every binade while an Adam step does not, so
 * small weights change far more often than large ones. The decoder knows
 * every base element, so positions are coded per class of base magnitude,
 * each class with its own gap statistics. The classes are contiguous ranges
 * of magnitude buckets (the exponent field, roughly), chosen per chunk by a
 * small dynamic program that minimizes the positions' entropy plus each
 * class's header cost. */
#include <math.h>

#include "codec/codec_internal.h"

#define BUCKETS 256
#define GROUPS_MAX 48
#define CLASS_COST_BITS (8.0 * (CLASS_ENTRY + 6)) /* table entry + stream tails */

/* n * H(m / n) in bits: the entropy of m changes among n elements. */
static double pos_bits(double n, double m) {
    if (m <= 0 || n <= 0) return 0;
    if (m >= n) return 0;
    double p = m / n;
    return -n * (p * log2(p) + (1 - p) * log2(1 - p));
}

uint32_t delta_classes_choose(const double *hist_all, const double *hist_chg, uint32_t max_classes,
                              uint32_t bucket_shift, uint32_t *lower) {
    /* the non-empty buckets, merged pairwise until few enough for the DP */
    double n[BUCKETS], m[BUCKETS];
    uint32_t first[BUCKETS], g = 0;
    for (uint32_t b = 0; b < BUCKETS; b++) {
        if (hist_all[b] <= 0 && hist_chg[b] <= 0) continue;
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
    double cn[GROUPS_MAX + 1] = {0}, cm[GROUPS_MAX + 1] = {0};
    for (uint32_t i = 0; i < g; i++) {
        cn[i + 1] = cn[i] + n[i];
        cm[i + 1] = cm[i] + m[i];
    }
    uint32_t K = max_classes < g ? max_classes : g;
    /* cost[j][i]: groups [j, i) as one class, computed once for every k
       (the logarithms were most of the DP's time) */
    double cost[GROUPS_MAX][GROUPS_MAX + 1];
    for (uint32_t j = 0; j < g; j++)
        for (uint32_t i = j + 1; i <= g; i++) cost[j][i] = pos_bits(cn[i] - cn[j], cm[i] - cm[j]) + CLASS_COST_BITS;
    /* best[k][i]: cheapest split of groups [0, i) into k classes */
    double best[FERRY_DELTA_CLASSES_MAX + 1][GROUPS_MAX + 1];
    uint32_t from[FERRY_DELTA_CLASSES_MAX + 1][GROUPS_MAX + 1];
    for (uint32_t k = 0; k <= K; k++)
        for (uint32_t i = 0; i <= g; i++) best[k][i] = INFINITY;
    best[0][0] = 0;
    for (uint32_t k = 1; k <= K; k++)
        for (uint32_t i = k; i <= g; i++)
            for (uint32_t j = k - 1; j < i; j++) {
                if (!isfinite(best[k - 1][j])) continue;
                double c = best[k - 1][j] + cost[j][i];
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
