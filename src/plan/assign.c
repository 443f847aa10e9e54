/* Stage 4: which source holder serves each reader.
 * Fragments whose source holders are the same ranks and whose readers are
 * the same ranks form a route (typically: one tensor-parallel position of
 * the trainer and one rank of every engine replica). A route is cut into as
 * few parts as even balance needs (usually one), and each (reader, part) is
 * read from one holder, so a reader takes long contiguous spans from each
 * source and the readers of one source read identical packed bytes. Routes
 * with a single holder are forced; the other units are placed largest first
 * (LPT) on the holder with the fewest bytes so far, then the least loaded
 * host, then one on the reader's own host, then a rotation that staggers
 * readers over holders. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

/* The holder ranks of b, interned; neighbouring boxes usually have the same
 * holders (all experts of one rank), so compare with the previous box first. */
static uint32_t box_set(ferry_plan_t *p, plan_side_t *s, plan_box_t *b, const plan_box_t *prev) {
    if (prev && prev->holder_count == b->holder_count) {
        uint32_t h = 0;
        while (h < b->holder_count &&
               s->holder_rank[b->first_holder + h] == s->holder_rank[prev->first_holder + h])
            h++;
        if (h == b->holder_count) return prev->set;
    }
    return plan_sets_intern(p->ctx, &p->sets, s->holder_rank + b->first_holder, b->holder_count);
}

static ferry_status_t intern_sets(ferry_plan_t *p) {
    plan_side_t *sides[2] = {&p->src, &p->dst};
    for (int i = 0; i < 2; i++) {
        plan_side_t *s = sides[i];
        for (size_t b = 0; b < s->nboxes; b++)
            if ((s->boxes[b].set = box_set(p, s, &s->boxes[b], b ? &s->boxes[b - 1] : NULL)) == PLAN_NONE)
                return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory interning holders");
    }
    return FERRY_OK;
}

/* Groups fragments into routes, numbered by first appearance. */
static ferry_status_t make_routes(ferry_plan_t *p) {
    size_t nslots = 1024;
    while (nslots < 2 * (p->nfrags + 1)) nslots *= 2;
    uint32_t *slots = ferry_calloc(p->ctx, nslots, sizeof *slots);
    size_t cap = 0;
    if (!slots) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory grouping routes");
    ferry_status_t st = FERRY_OK;
    for (size_t f = 0; f < p->nfrags; f++) {
        plan_frag_t *fr = &p->frags[f];
        uint32_t ss = p->src.boxes[fr->cell].set, ds = p->dst.boxes[fr->dbox].set;
        uint32_t q = plan_is_quant(p, p->dst.boxes[fr->dbox].tensor);
        size_t k = (size_t)plan_mix64((((uint64_t)ss << 32) | ds) ^ ((uint64_t)q << 63)) & (nslots - 1);
        for (; slots[k]; k = (k + 1) & (nslots - 1)) {
            plan_route_t *r = &p->routes[slots[k] - 1];
            if (r->src_set == ss && r->dst_set == ds && r->quant == q) break;
        }
        if (!slots[k]) {
            if (ferry_grow(p->ctx, (void **)&p->routes, sizeof *p->routes, &cap, p->nroutes + 1)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory grouping routes");
                break;
            }
            plan_route_t *r = &p->routes[p->nroutes];
            memset(r, 0, sizeof *r);
            r->src_set = ss;
            r->dst_set = ds;
            r->quant = q;
            r->holders = p->sets.first[ss + 1] - p->sets.first[ss];
            r->readers = p->sets.first[ds + 1] - p->sets.first[ds];
            slots[k] = (uint32_t)++p->nroutes;
        }
        fr->route = slots[k] - 1;
        p->routes[fr->route].weight += fr->bytes;
        p->routes[fr->route].frag_count++;
    }
    ferry_free(p->ctx, slots);
    return st;
}

/* A unit: part c of route r, for all its readers. */
typedef struct {
    uint64_t bytes;
    uint32_t route, chunk;
} unit_t;

static int cmp_unit(const void *x, const void *y) {
    const unit_t *a = x, *b = y;
    if (a->bytes != b->bytes) return a->bytes > b->bytes ? -1 : 1;
    if (a->route != b->route) return a->route < b->route ? -1 : 1;
    return a->chunk < b->chunk ? -1 : a->chunk > b->chunk;
}

static uint32_t set_len(const ferry_plan_t *p, uint32_t set) {
    return p->sets.first[set + 1] - p->sets.first[set];
}

static const uint32_t *set_items(const ferry_plan_t *p, uint32_t set) {
    return p->sets.items + p->sets.first[set];
}

static _Thread_local const plan_frag_t *g_frags;

static int cmp_frag_bytes(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    if (g_frags[a].bytes != g_frags[b].bytes) return g_frags[a].bytes > g_frags[b].bytes ? -1 : 1;
    return a < b ? -1 : a > b;
}

/* Route-major fragment order and each route's parts. */
static ferry_status_t cut_routes(ferry_plan_t *p) {
    size_t nf = p->nfrags, nr = p->nroutes;
    p->route_order = ferry_alloc(p->ctx, (nf ? nf : 1) * sizeof *p->route_order);
    if (!p->route_order) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory ordering routes");
    uint32_t at = 0;
    p->nchunks = 0;
    p->nassign = 0;
    for (size_t r = 0; r < nr; r++) {
        plan_route_t *rt = &p->routes[r];
        rt->first_frag = at;
        at += rt->frag_count;
        uint32_t k = rt->holders, m = rt->readers;
        /* whole routes are balanced enough once each holder has 20+ readers;
           an FP8 route's parts each have one holder for all readers (each
           block quantized once), so it takes a part per holder */
        uint32_t c = rt->quant ? k : k > 1 && (uint64_t)m < 20ull * k ? k / (uint32_t)ferry_gcd_u64(k, m) : 1;
        if (c > rt->frag_count) c = rt->frag_count;
        if (c > PLAN_MAX_CHUNKS) c = PLAN_MAX_CHUNKS;
        if (c == 0) c = 1;
        rt->chunks = c;
        rt->first_chunk = (uint32_t)p->nchunks;
        rt->first_assign = (uint32_t)p->nassign;
        p->nchunks += c;
        p->nassign += (size_t)c * m;
        if (p->nassign > UINT32_MAX)
            return ferry_fail(&p->err, FERRY_ERR_LIMIT,
                              "more than 2^32 (reader, route part) pairs, reached at a route from %u "
                              "source ranks to %u destination pieces", k, m);
    }
    uint32_t *fill = ferry_alloc(p->ctx, (nr ? nr : 1) * sizeof *fill);
    p->chunk_bytes = ferry_calloc(p->ctx, p->nchunks ? p->nchunks : 1, sizeof *p->chunk_bytes);
    if (!fill || !p->chunk_bytes) {
        ferry_free(p->ctx, fill);
        return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory ordering routes");
    }
    for (size_t r = 0; r < nr; r++) fill[r] = p->routes[r].first_frag;
    for (size_t f = 0; f < nf; f++) p->route_order[fill[p->frags[f].route]++] = (uint32_t)f;
    ferry_free(p->ctx, fill);
    /* Parts of a route: fragments largest first into the lightest part
     * (LPT), then the route's fragments reordered part by part, so each part
     * is one contiguous span of the holder's pack area. */
    uint32_t *tmp = NULL, *seg = NULL;
    size_t cap_tmp = 0, cap_seg = 0;
    ferry_status_t st = FERRY_OK;
    for (size_t r = 0; r < nr && st == FERRY_OK; r++) {
        const plan_route_t *rt = &p->routes[r];
        uint32_t n = rt->frag_count, c = rt->chunks;
        uint32_t *order = p->route_order + rt->first_frag;
        uint64_t *part = p->chunk_bytes + rt->first_chunk;
        if (c == 1) {
            for (uint32_t i = 0; i < n; i++) p->frags[order[i]].chunk = 0;
            part[0] = rt->weight;
            continue;
        }
        if (ferry_grow(p->ctx, (void **)&tmp, sizeof *tmp, &cap_tmp, n) ||
            ferry_grow(p->ctx, (void **)&seg, sizeof *seg, &cap_seg, n)) {
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory cutting routes");
            break;
        }
        memcpy(tmp, order, n * sizeof *tmp);
        g_frags = p->frags;
        qsort(tmp, n, sizeof *tmp, cmp_frag_bytes);
        for (uint32_t i = 0; i < n; i++) {
            uint32_t best = 0;
            for (uint32_t q = 1; q < c; q++)
                if (part[q] < part[best]) best = q;
            p->frags[tmp[i]].chunk = (uint16_t)best;
            part[best] += p->frags[tmp[i]].bytes;
        }
        uint32_t put = 0; /* stable by part: route order kept inside each part */
        for (uint32_t q = 0; q < c; q++)
            for (uint32_t i = 0; i < n; i++)
                if (p->frags[order[i]].chunk == q) seg[put++] = order[i];
        memcpy(order, seg, n * sizeof *seg);
    }
    ferry_free(p->ctx, tmp);
    ferry_free(p->ctx, seg);
    return st;
}

/* Large units: every reader of a unit takes the same bytes, so greedy
 * placement deals readers round-robin over the holders in load order; sort
 * once instead of scanning all holders per reader (the reader's own host is
 * not preferred here). */
typedef struct {
    uint64_t load, host_load;
    uint32_t turn, h;
} holder_key_t;

static int cmp_holder_key(const void *x, const void *y) {
    const holder_key_t *a = x, *b = y;
    if (a->load != b->load) return a->load < b->load ? -1 : 1;
    if (a->host_load != b->host_load) return a->host_load < b->host_load ? -1 : 1;
    return a->turn < b->turn ? -1 : a->turn > b->turn;
}

#define PLAN_EXACT_PLACEMENT 4096 /* readers x holders of a unit placed one by one */

static void place_unit_dealt(ferry_plan_t *p, uint32_t ri, uint32_t c, holder_key_t *keys) {
    plan_route_t *r = &p->routes[ri];
    const uint32_t *hold = set_items(p, r->src_set);
    uint32_t k = r->holders, m = r->readers;
    uint64_t bytes = p->chunk_bytes[r->first_chunk + c];
    uint32_t want = (uint32_t)(((uint64_t)c * m + ri) % k);
    for (uint32_t h = 0; h < k; h++) {
        uint32_t s = hold[h];
        keys[h] = (holder_key_t){p->src_load[s], p->host_load[p->src_host[s]], (h + k - want) % k, h};
    }
    qsort(keys, k, sizeof *keys, cmp_holder_key);
    for (uint32_t j = 0; j < m; j++) {
        uint32_t h = keys[j % k].h, s = hold[h];
        p->assign[r->first_assign + c * m + j] = h;
        p->src_load[s] += bytes;
        p->host_load[p->src_host[s]] += bytes;
    }
}

/* An FP8 route's part: one holder, the least loaded (then by host, then a
 * rotation), quantizes it and serves every reader. */
static void place_quant_unit(ferry_plan_t *p, uint32_t ri, uint32_t c) {
    plan_route_t *r = &p->routes[ri];
    const uint32_t *hold = set_items(p, r->src_set);
    uint32_t k = r->holders, m = r->readers, want = (uint32_t)(((uint64_t)c + ri) % k), best = 0;
    uint64_t bytes = p->chunk_bytes[r->first_chunk + c], bkey[3] = {UINT64_MAX, UINT64_MAX, UINT64_MAX};
    for (uint32_t h = 0; h < k; h++) {
        uint32_t s = hold[h];
        uint64_t key[3] = {p->src_load[s], p->host_load[p->src_host[s]], (h + k - want) % k};
        if (key[0] < bkey[0] || (key[0] == bkey[0] && (key[1] < bkey[1] || (key[1] == bkey[1] && key[2] < bkey[2])))) {
            best = h;
            memcpy(bkey, key, sizeof key);
        }
    }
    for (uint32_t j = 0; j < m; j++) p->assign[r->first_assign + c * m + j] = best;
    p->src_load[hold[best]] += bytes * m;
    p->host_load[p->src_host[hold[best]]] += bytes * m;
}

/* Chooses holders for the readers of part c of route ri; loads are updated. */
static void place_unit(ferry_plan_t *p, uint32_t ri, uint32_t c, holder_key_t *keys) {
    plan_route_t *r = &p->routes[ri];
    const uint32_t *hold = set_items(p, r->src_set), *read = set_items(p, r->dst_set);
    uint32_t k = r->holders, m = r->readers;
    uint64_t bytes = p->chunk_bytes[r->first_chunk + c];
    if (r->quant) {
        place_quant_unit(p, ri, c);
        return;
    }
    if ((uint64_t)m * k > PLAN_EXACT_PLACEMENT) {
        place_unit_dealt(p, ri, c, keys);
        return;
    }
    for (uint32_t j = 0; j < m; j++) {
        /* rotation: readers, and the parts of one reader, start on different holders */
        uint32_t want = (uint32_t)(((uint64_t)c * m + j + ri) % k);
        uint32_t rhost = p->dst_host[read[j]];
        uint32_t best = 0;
        uint64_t bkey[4] = {UINT64_MAX, UINT64_MAX, UINT64_MAX, UINT64_MAX};
        for (uint32_t h = 0; h < k; h++) {
            uint32_t s = hold[h];
            uint64_t key[4] = {p->src_load[s], p->host_load[p->src_host[s]],
                               p->src_host[s] == rhost ? 0u : 1u, (h + k - want) % k};
            int less = 0;
            for (int u = 0; u < 4; u++)
                if (key[u] != bkey[u]) {
                    less = key[u] < bkey[u];
                    break;
                }
            if (less) {
                best = h;
                memcpy(bkey, key, sizeof key);
            }
        }
        uint32_t s = hold[best];
        p->assign[r->first_assign + c * m + j] = best;
        p->src_load[s] += bytes;
        p->host_load[p->src_host[s]] += bytes;
    }
}

ferry_status_t plan_assign(ferry_plan_t *p) {
    ferry_status_t st = intern_sets(p);
    if (st) return st;
    if ((st = make_routes(p)) != FERRY_OK) return st;
    if ((st = cut_routes(p)) != FERRY_OK) return st;
    unit_t *units = ferry_alloc(p->ctx, (p->nchunks ? p->nchunks : 1) * sizeof *units);
    p->assign = ferry_alloc(p->ctx, (p->nassign ? p->nassign : 1) * sizeof *p->assign);
    uint64_t *forced = ferry_calloc(p->ctx, p->src.world ? p->src.world : 1, sizeof *forced);
    uint8_t *capable = ferry_calloc(p->ctx, p->src.world ? p->src.world : 1, 1);
    uint32_t maxk = 1;
    for (size_t r = 0; r < p->nroutes; r++)
        if (p->routes[r].holders > maxk) maxk = p->routes[r].holders;
    holder_key_t *keys = ferry_alloc(p->ctx, maxk * sizeof *keys);
    if (!units || !p->assign || !forced || !capable || !keys) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory assigning routes");
        goto out;
    }
    /* forced routes first, so the flexible units see those loads */
    size_t nflex = 0;
    uint64_t total = 0;
    for (uint32_t r = 0; r < p->nroutes; r++) {
        const plan_route_t *rt = &p->routes[r];
        uint32_t m = rt->readers, k = rt->holders;
        const uint32_t *hold = set_items(p, rt->src_set), *read = set_items(p, rt->dst_set);
        total += rt->weight * m;
        for (uint32_t j = 0; j < m; j++) p->dst_load[read[j]] += rt->weight;
        for (uint32_t h = 0; h < k; h++) capable[hold[h]] = 1;
        if (k == 1) {
            place_unit(p, r, 0, keys);
            forced[hold[0]] += rt->weight * m;
            continue;
        }
        for (uint32_t c = 0; c < rt->chunks; c++) {
            unit_t *u = &units[nflex++];
            u->bytes = p->chunk_bytes[rt->first_chunk + c] * (rt->quant ? m : 1); /* (placed whole) */
            u->route = r;
            u->chunk = c;
        }
    }
    qsort(units, nflex, sizeof *units, cmp_unit);
    for (size_t i = 0; i < nflex; i++) place_unit(p, units[i].route, units[i].chunk, keys);

    /* Lower bound on the busiest source: the mean over all that can serve;
     * each rank's forced load; and for every holder set G, the bytes that
     * only G can serve (its routes plus its members' forced loads) spread
     * evenly over G. */
    uint64_t lb = 0, ncap = 0;
    uint64_t *set_bytes = ferry_calloc(p->ctx, p->sets.count ? p->sets.count : 1, sizeof *set_bytes);
    if (!set_bytes) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory assigning routes");
        goto out;
    }
    for (uint32_t r = 0; r < p->nroutes; r++)
        set_bytes[p->routes[r].src_set] += p->routes[r].weight * set_len(p, p->routes[r].dst_set);
    for (uint32_t g = 0; g < p->sets.count; g++) {
        if (!set_bytes[g]) continue;
        uint32_t k = set_len(p, g);
        const uint32_t *hold = set_items(p, g);
        uint64_t sum = set_bytes[g];
        for (uint32_t h = 0; h < k && k > 1; h++) sum += forced[hold[h]];
        if ((sum + k - 1) / k > lb) lb = (sum + k - 1) / k;
    }
    ferry_free(p->ctx, set_bytes);
    for (uint32_t s = 0; s < p->src.world; s++) {
        if (forced[s] > lb) lb = forced[s];
        ncap += capable[s];
        if (p->src_load[s] > p->stats.src_max) p->stats.src_max = p->src_load[s];
        if (p->src_load[s]) p->stats.src_serving++;
    }
    if (ncap && (total + ncap - 1) / ncap > lb) lb = (total + ncap - 1) / ncap;
    for (uint32_t h = 0; h < p->nhosts; h++)
        if (p->host_load[h] > p->stats.src_host_max) p->stats.src_host_max = p->host_load[h];
    p->stats.src_lower_bound = lb;
    p->stats.bytes = total;
    p->stats.fragments = p->nfrags;
    p->stats.routes = p->nroutes;
out:
    ferry_free(p->ctx, keys);
    ferry_free(p->ctx, units);
    ferry_free(p->ctx, forced);
    ferry_free(p->ctx, capable);
    return st;
}
