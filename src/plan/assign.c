/* Stage 4: which source holder serves each reader.
 * Fragments whose source holders are the same ranks and whose readers are
 * the same ranks form a route (typically: one tensor-parallel position of
 * the trainer and one rank of every engine replica). A route is assigned as
 * a whole, so a reader reads everything of a route from one source and the
 * readers of one source read identical packed bytes. Routes with a single
 * holder are forced; the others are placed largest first (LPT) on the holder
 * with the fewest bytes so far, then the least loaded host, then one on the
 * reader's own host, then a rotation that staggers readers over holders. */
#include <stdlib.h>
#include <string.h>

#include "plan/plan_internal.h"

/* The holder ranks of b, interned; neighbouring boxes usually have the same
 * holders (all experts of one rank), so compare with the previous box first. */
static uint32_t box_set(ferry_plan_t *p, plan_side_t *s, plan_box_t *b, uint32_t *scratch,
                        const plan_box_t *prev) {
    if (prev && prev->holder_count == b->holder_count) {
        uint32_t h = 0;
        while (h < b->holder_count &&
               s->holder_rank[b->first_holder + h] == s->holder_rank[prev->first_holder + h])
            h++;
        if (h == b->holder_count) return prev->set;
    }
    (void)scratch;
    return plan_sets_intern(p->ctx, &p->sets, s->holder_rank + b->first_holder, b->holder_count);
}

static ferry_status_t intern_sets(ferry_plan_t *p) {
    size_t maxh = 1;
    for (size_t b = 0; b < p->src.nboxes; b++)
        if (p->src.boxes[b].holder_count > maxh) maxh = p->src.boxes[b].holder_count;
    for (size_t b = 0; b < p->dst.nboxes; b++)
        if (p->dst.boxes[b].holder_count > maxh) maxh = p->dst.boxes[b].holder_count;
    uint32_t *scratch = ferry_alloc(p->ctx, maxh * sizeof *scratch);
    if (!scratch) return ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory interning holders");
    ferry_status_t st = FERRY_OK;
    plan_side_t *sides[2] = {&p->src, &p->dst};
    for (int i = 0; i < 2 && st == FERRY_OK; i++) {
        plan_side_t *s = sides[i];
        for (size_t b = 0; b < s->nboxes && st == FERRY_OK; b++)
            if ((s->boxes[b].set = box_set(p, s, &s->boxes[b], scratch, b ? &s->boxes[b - 1] : NULL)) ==
                PLAN_NONE)
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory interning holders");
    }
    ferry_free(p->ctx, scratch);
    return st;
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
        size_t k = (size_t)plan_mix64(((uint64_t)ss << 32) | ds) & (nslots - 1);
        for (; slots[k]; k = (k + 1) & (nslots - 1)) {
            plan_route_t *r = &p->routes[slots[k] - 1];
            if (r->src_set == ss && r->dst_set == ds) break;
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
            r->src_cell = fr->cell;
            r->dst_box = fr->dbox;
            slots[k] = (uint32_t)++p->nroutes;
        }
        fr->route = slots[k] - 1;
        p->routes[fr->route].weight += fr->bytes;
    }
    ferry_free(p->ctx, slots);
    return st;
}

static _Thread_local const plan_route_t *g_routes;

static int cmp_route_weight(const void *x, const void *y) {
    uint32_t a = *(const uint32_t *)x, b = *(const uint32_t *)y;
    if (g_routes[a].weight != g_routes[b].weight) return g_routes[a].weight > g_routes[b].weight ? -1 : 1;
    return a < b ? -1 : a > b;
}

static uint32_t set_len(const ferry_plan_t *p, uint32_t set) {
    return p->sets.first[set + 1] - p->sets.first[set];
}

static const uint32_t *set_items(const ferry_plan_t *p, uint32_t set) {
    return p->sets.items + p->sets.first[set];
}

/* Chooses holders for the readers of route ri; loads are updated. */
static void place_route(ferry_plan_t *p, uint32_t ri) {
    plan_route_t *r = &p->routes[ri];
    const uint32_t *hold = set_items(p, r->src_set), *read = set_items(p, r->dst_set);
    uint32_t k = set_len(p, r->src_set), m = set_len(p, r->dst_set);
    for (uint32_t j = 0; j < m; j++) {
        uint32_t want = (uint32_t)((j + ri) % k); /* rotation: readers start on different holders */
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
        p->assign[r->first_assign + j] = best;
        p->src_load[s] += r->weight;
        p->host_load[p->src_host[s]] += r->weight;
    }
}

ferry_status_t plan_assign(ferry_plan_t *p) {
    ferry_status_t st = intern_sets(p);
    if (st) return st;
    if ((st = make_routes(p)) != FERRY_OK) return st;
    p->nassign = 0;
    for (size_t r = 0; r < p->nroutes; r++) {
        p->routes[r].first_assign = (uint32_t)p->nassign;
        p->nassign += set_len(p, p->routes[r].dst_set);
    }
    uint32_t *order = ferry_alloc(p->ctx, (p->nroutes ? p->nroutes : 1) * sizeof *order);
    p->assign = ferry_alloc(p->ctx, (p->nassign ? p->nassign : 1) * sizeof *p->assign);
    uint64_t *forced = ferry_calloc(p->ctx, p->src.world ? p->src.world : 1, sizeof *forced);
    uint8_t *capable = ferry_calloc(p->ctx, p->src.world ? p->src.world : 1, 1);
    if (!order || !p->assign || !forced || !capable) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory assigning routes");
        goto out;
    }
    /* forced routes first, so the flexible ones see those loads */
    size_t nflex = 0;
    uint64_t total = 0;
    for (uint32_t r = 0; r < p->nroutes; r++) {
        const plan_route_t *rt = &p->routes[r];
        uint32_t m = set_len(p, rt->dst_set), k = set_len(p, rt->src_set);
        const uint32_t *hold = set_items(p, rt->src_set), *read = set_items(p, rt->dst_set);
        total += rt->weight * m;
        for (uint32_t j = 0; j < m; j++) p->dst_load[read[j]] += rt->weight;
        for (uint32_t h = 0; h < k; h++) capable[hold[h]] = 1;
        if (k == 1) {
            place_route(p, r);
            forced[hold[0]] += rt->weight * m;
        } else {
            order[nflex++] = r;
        }
    }
    g_routes = p->routes;
    qsort(order, nflex, sizeof *order, cmp_route_weight);
    for (size_t i = 0; i < nflex; i++) place_route(p, order[i]);

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
    ferry_free(p->ctx, order);
    ferry_free(p->ctx, forced);
    ferry_free(p->ctx, capable);
    return st;
}
