/* The plan digest: xxh3 over what every rank must agree on. It covers the
 * canonical inputs (tensors with dtype and shape, destination boxes and source cells with their
 * holder ranks, order-free sums over the pieces' buffer addresses, the
 * parameters) and the global decisions (routes, assignments, pack areas);
 * never piece indices or anything a local plan leaves out, so local and
 * global plans match. */
#include <string.h>
#include <xxhash.h>

#include "plan/plan_internal.h"

/* Words are gathered and hashed in blocks: xxh3's streaming update is slow
 * for the many 8-byte inputs a plan has. */
typedef struct {
    XXH3_state_t *state;
    uint64_t buf[512];
    size_t n;
} hasher_t;

static void h_flush(hasher_t *h) {
    XXH3_64bits_update(h->state, h->buf, h->n * sizeof h->buf[0]);
    h->n = 0;
}

static void h_u64(hasher_t *h, uint64_t v) {
    if (h->n == sizeof h->buf / sizeof h->buf[0]) h_flush(h);
    h->buf[h->n++] = v;
}

static void h_bytes(hasher_t *h, const void *data, size_t len) {
    h_flush(h);
    XXH3_64bits_update(h->state, data, len);
}


void plan_digest(ferry_plan_t *p) {
    hasher_t hs, *s = &hs;
    hs.n = 0;
    hs.state = XXH3_createState();
    if (!hs.state) { /* no memory for 600 bytes of state: a digest nobody can match */
        p->digest = 0;
        return;
    }
    XXH3_64bits_reset(hs.state);
    h_u64(s, 0x66657272792d706cull); /* format tag: bump when the plan's meaning changes */
    h_u64(s, p->bucket_bytes);
    h_u64(s, p->pack_below);
    if (p->pack_limit) { /* (plans without a limit keep their digests) */
        h_u64(s, 0x7061636b6c696d74ull);
        h_u64(s, p->pack_limit);
        h_u64(s, p->gather_min_run);
    }
    h_bytes(s, p->src_host, p->src.world * sizeof *p->src_host);
    h_bytes(s, p->dst_host, p->dst.world * sizeof *p->dst_host);
    uint32_t nt = ferry_model_tensor_count(p->dst_model);
    for (uint32_t t = 0; t < nt; t++) {
        if (p->dst.tensor_first[t] == p->dst.tensor_first[t + 1]) continue;
        ferry_tensor_info_t ti;
        ferry_model_tensor(p->dst_model, t, &ti);
        h_u64(s, XXH3_64bits(ti.name, strlen(ti.name)));
        h_u64(s, (uint64_t)ti.dtype);
        if (plan_is_quant(p, t)) /* quantized from the source (plain plans keep their digests) */
            h_u64(s, 0x6670380000000000ull ^ ((uint64_t)p->dst_partner[t] << 8) ^ p->dst_qflags[t]);
        h_u64(s, ti.ndim);
        for (uint32_t d = 0; d < ti.ndim; d++) h_u64(s, (uint64_t)ti.shape[d]);
        for (uint32_t b = p->dst.tensor_first[t]; b < p->dst.tensor_first[t + 1]; b++) {
            const plan_box_t *db = &p->dst.boxes[b];
            h_u64(s, db->k0);
            h_u64(s, db->k1);
            h_u64(s, db->set);
        }
        for (uint32_t c = p->src.tensor_first[t]; c < p->src.tensor_first[t + 1]; c++) {
            const plan_box_t *cb = &p->src.boxes[c];
            h_u64(s, cb->k0);
            h_u64(s, cb->k1);
            h_u64(s, cb->set);
        }
    }
    h_u64(s, p->src_address_sum);
    h_u64(s, p->dst_address_sum);
    h_bytes(s, p->sets.first, (p->sets.count + 1) * sizeof *p->sets.first);
    h_bytes(s, p->sets.items, p->sets.nitems * sizeof *p->sets.items);
    for (size_t f = 0; f < p->nfrags; f++) {
        h_u64(s, ((uint64_t)p->frags[f].cell << 32) | p->frags[f].dbox);
        h_u64(s, p->frags[f].route);
    }
    h_bytes(s, p->assign, p->nassign * sizeof *p->assign);
    h_bytes(s, p->pack_size, p->src.world * sizeof *p->pack_size);
    h_flush(s);
    p->digest = XXH3_64bits_digest(hs.state);
    XXH3_freeState(hs.state);
}
