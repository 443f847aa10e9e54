/* Magnitude classes. Whether an element changes depends strongly on its
 * size: a bf16 ulp doubles with every binade while an Adam step does not, so
 * small weights change far more often than large ones. The decoder knows
 * every base element, so positions are coded per class of base magnitude,
 * each class with its own gap statistics. The classes are contiguous ranges
 * of magnitude buckets (the exponent field, roughly), chosen per chunk by a
 * small dynamic program that minimizes the positions' entropy plus each
 * class's header cost, in integer fixed point (the same on every machine). */
#include "codec/codec_internal.h"
#include "codec/enc_rules.h"

_Static_assert(ER_LOG2_FRAC == DELTA_LOG2_FRAC && ER_CLASSES_MAX == FERRY_DELTA_CLASSES_MAX &&
                   ER_SUB_LOG2_MIN == DELTA_SUB_LOG2_MIN && CLASS_ENTRY == 24,
               "enc_rules.h's constants");

uint64_t delta_log2_fixed(uint64_t x) { return er_log2_fixed(x); }

uint32_t delta_classes_choose(const uint32_t *sample, uint32_t stride, const uint32_t *chg, uint32_t max_classes,
                              uint32_t bucket_shift, uint32_t *lower) {
    er_groups_t gr;
    er_scratch_t w;
    er_groups_make(sample, stride, chg, &gr, &w);
    /* each group range's cost once for every k (the logarithms are most of
       the DP's time) */
    uint64_t cost[ER_GROUPS_MAX * (ER_GROUPS_MAX + 1) / 2];
    if (max_classes > 1 && gr.g > 1)
        for (uint32_t j = 0; j < gr.g; j++)
            for (uint32_t i = j + 1; i <= gr.g; i++) cost[er_cost_index(gr.g, j, i)] = er_class_cost(&gr, j, i);
    return er_classes_dp(&gr, cost, max_classes, bucket_shift, lower, &w);
}
