/* ferry sum on the CPU (common/sum.h has the definition). Leaves are hashed
 * with ferry's xxh3 (the AVX2 build where the CPU has it); a whole leaf in
 * one piece is hashed in one call, only a leaf split across updates goes
 * through xxh3's streaming state. */
#include "common/sum.h"

#include <string.h>

#include "common/bytes.h"

#define TREE_BATCH (sizeof ((ferry_sum_state_t *)0)->buf / 8) /* leaf hashes per tree update */

void ferry_sum_reset(ferry_sum_state_t *st, uint64_t len) {
    memset(st, 0, sizeof *st); /* a seeded reset reads the state's old seed */
    st->len = len;
    XXH3_64bits_reset(&st->leaf);
    if (len > FERRY_SUM_LEAF) XXH3_64bits_reset_withSeed(&st->tree, len);
}

static void push_leaf(ferry_sum_state_t *st, uint64_t h) {
    ferry_put_le(st->buf + 8 * st->nbuf, h, 8);
    if (++st->nbuf == TREE_BATCH) {
        XXH3_64bits_update(&st->tree, st->buf, sizeof st->buf);
        st->nbuf = 0;
    }
}

void ferry_sum_update(ferry_sum_state_t *st, const void *p, size_t n) {
    const uint8_t *b = p;
    if (st->len <= FERRY_SUM_LEAF) { /* one leaf: plain xxh3 */
        if (n) XXH3_64bits_update(&st->leaf, b, n);
        st->fed += n;
        return;
    }
    while (n) {
        uint64_t start = st->fed - st->in_leaf; /* of the current leaf */
        uint64_t size = st->len > start && st->len - start < FERRY_SUM_LEAF ? st->len - start : FERRY_SUM_LEAF;
        if (st->in_leaf == 0 && n >= size) { /* a whole leaf here */
            push_leaf(st, XXH3_64bits(b, size));
            b += size;
            n -= size;
            st->fed += size;
            continue;
        }
        size_t take = n < size - st->in_leaf ? n : (size_t)(size - st->in_leaf);
        if (st->in_leaf == 0) XXH3_64bits_reset(&st->leaf);
        XXH3_64bits_update(&st->leaf, b, take);
        b += take;
        n -= take;
        st->fed += take;
        st->in_leaf += take;
        if (st->in_leaf == size) {
            push_leaf(st, XXH3_64bits_digest(&st->leaf));
            st->in_leaf = 0;
        }
    }
}

uint64_t ferry_sum_digest(const ferry_sum_state_t *st) {
    if (st->len <= FERRY_SUM_LEAF) return XXH3_64bits_digest(&st->leaf);
    XXH3_state_t tree; /* the leaf hashes still buffered, fed to a copy */
    memcpy(&tree, &st->tree, sizeof tree);
    if (st->nbuf) XXH3_64bits_update(&tree, st->buf, 8 * (size_t)st->nbuf);
    return XXH3_64bits_digest(&tree);
}

uint64_t ferry_sum(const void *p, size_t len) {
    if (len <= FERRY_SUM_LEAF) return XXH3_64bits(len ? p : "", len);
    uint64_t nleaves = (len + FERRY_SUM_LEAF - 1) / FERRY_SUM_LEAF;
    if (nleaves <= 30) { /* H fits xxh3's short input (240 bytes) */
        uint8_t h[240];
        for (uint64_t i = 0; i < nleaves; i++) {
            uint64_t off = i * FERRY_SUM_LEAF, size = len - off < FERRY_SUM_LEAF ? len - off : FERRY_SUM_LEAF;
            ferry_put_le(h + 8 * i, XXH3_64bits((const uint8_t *)p + off, size), 8);
        }
        return XXH3_64bits_withSeed(h, 8 * nleaves, len);
    }
    ferry_sum_state_t st;
    ferry_sum_reset(&st, len);
    ferry_sum_update(&st, p, len);
    return ferry_sum_digest(&st);
}
