/* How ferry_delta_cuda_apply (delta_cuda.c) splits a batch into groups of
 * consecutive items, each group's passes starting once its own frames are
 * on the device: pure arithmetic on the items' frame sizes, apart from the
 * CUDA code so that CPU tests check it (test_delta_groups.c). */
#ifndef FERRY_CODEC_DELTA_GROUPS_H
#define FERRY_CODEC_DELTA_GROUPS_H

#include <stddef.h>

/* Items [0, n) into at most `want` groups of about equal bytes. bytes[i]:
 * item i's frame bytes on the device, 0 for an item that does not apply;
 * total: their sum, > 0. Each group is cut at the item boundary nearest
 * its share of total (after item i when the next applying item's middle
 * lies past it), so that two items of any sizes make two groups; a cut
 * comes only between applying items, so every group holds one. Writes
 * first[0..g] (first[0] = 0, first[g] = n; group k is items [first[k],
 * first[k + 1])) and returns g, the groups: 1 <= g <= want (want >= 1),
 * and g <= the applying items. */
static inline size_t delta_groups(const size_t *bytes, size_t n, size_t want, size_t total, size_t *first) {
    size_t g = 0, acc = 0, i = 0;
    first[0] = 0;
    while (i < n && !bytes[i]) i++; /* the first that applies */
    while (i < n && g + 1 < want) {
        size_t j = i + 1; /* the next that applies */
        while (j < n && !bytes[j]) j++;
        if (j == n) break;
        acc += bytes[i];
        if ((2 * acc + bytes[j]) * want >= 2 * (g + 1) * total) first[++g] = i + 1;
        i = j;
    }
    first[g + 1] = n;
    return g + 1;
}

#endif
