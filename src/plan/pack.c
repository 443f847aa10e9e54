/* Stage 5: the pack area of every source rank.
 * A source rank packs a fragment it serves when the fragment is not one
 * contiguous run of its buffer, or when it is small enough to travel in a
 * bucket with others. Slots are laid out route by route, fragment by
 * fragment, with no padding, so the fragments one reader takes from one
 * source form one contiguous span, and all readers assigned to the same
 * holder read the same slot (packing cost does not grow with replicas).
 * Computed for all sources: a reader needs the offsets of its sources.
 * With a pack_limit, a fragment that would take a rank's area past it is
 * not packed there (emit makes it a direct read or a FERRY_OP_GATHER),
 * unless its source runs are too short to read one by one: such fragments
 * are packed past the limit. An FP8 weight's fragments always have a slot on
 * the holder that quantizes them (quant.c), 4-aligned, past any limit. */
#include <string.h>

#include "plan/plan_internal.h"

/* Whether the fragment, not packed, can be read from source piece `piece`
 * well: in one read, or run by run with runs of gather_min_run bytes or
 * more. */
static bool readable_unpacked(const ferry_plan_t *p, const plan_frag_t *fr, const plan_box_t *cell, uint32_t piece) {
    ferry_box_t box;
    plan_box_intersect(cell->box, p->dst.boxes[fr->dbox].box, &box);
    int64_t numel = ferry_box_numel(&box), run = plan_run_elems(&box, p->src.pieces[piece].strides, NULL);
    if (numel <= 0 || run == numel) return true;
    return (uint64_t)run * (fr->bytes / (uint64_t)numel) >= p->gather_min_run;
}

ferry_status_t plan_pack(ferry_plan_t *p) {
    size_t nf = p->nfrags;
    p->frag_pack_first = ferry_alloc(p->ctx, (nf ? nf : 1) * sizeof *p->frag_pack_first);
    uint8_t *used = NULL;
    size_t cap_used = 0;
    ferry_status_t st = FERRY_OK;
    if (!p->frag_pack_first) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory laying out pack areas");
        goto out;
    }
    size_t nslots = 0;
    for (size_t f = 0; f < nf; f++) {
        p->frag_pack_first[f] = (uint32_t)nslots;
        nslots += p->src.boxes[p->frags[f].cell].holder_count;
        if (nslots > UINT32_MAX) {
            st = ferry_fail(&p->err, FERRY_ERR_LIMIT,
                            "more than 2^32 (fragment, source holder) pairs (reached at tensor %s)",
                            plan_tensor_name(p, p->dst.boxes[p->frags[f].dbox].tensor));
            goto out;
        }
    }
    p->pack_slot = ferry_alloc(p->ctx, (nslots ? nslots : 1) * sizeof *p->pack_slot);
    if (!p->pack_slot) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory laying out pack areas");
        goto out;
    }
    uint32_t cur_route = PLAN_NONE, cur_chunk = 0;
    for (size_t i = 0; i < nf; i++) {
        uint32_t f = p->route_order[i];
        const plan_frag_t *fr = &p->frags[f];
        const plan_box_t *cell = &p->src.boxes[fr->cell];
        const plan_route_t *rt = &p->routes[fr->route];
        uint32_t k = cell->holder_count;
        if (fr->route != cur_route || fr->chunk != cur_chunk) { /* which holders serve this part */
            cur_route = fr->route;
            cur_chunk = fr->chunk;
            if (ferry_grow(p->ctx, (void **)&used, 1, &cap_used, k)) {
                st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory laying out pack areas");
                goto out;
            }
            memset(used, 0, k);
            const uint32_t *as = p->assign + rt->first_assign + (size_t)fr->chunk * rt->readers;
            for (uint32_t j = 0; j < rt->readers; j++) used[as[j]] = 1;
        }
        /* A fragment that is a whole unrefined cell is a whole holder piece,
         * whose density the index computed; only cut fragments need strides. */
        if (rt->quant) { /* quantized there: always a slot (fp8 bytes, then 4-aligned scales), past any limit */
            for (uint32_t h = 0; h < k; h++) {
                uint64_t *slot = &p->pack_slot[p->frag_pack_first[f] + h];
                *slot = UINT64_MAX;
                if (!used[h]) continue;
                uint32_t rank = p->src.holder_rank[cell->first_holder + h];
                *slot = (p->pack_size[rank] + 3) & ~(uint64_t)3;
                p->pack_size[rank] = *slot + fr->bytes;
            }
            continue;
        }
        bool refined = p->ncell_boxes && cell->box >= p->cell_boxes && cell->box < p->cell_boxes + p->ncell_boxes;
        bool cut = refined || !fr->whole, have_box = false;
        ferry_box_t box;
        const int64_t *last_strides = NULL; /* replicas mostly share strides: check once */
        bool contiguous = false;
        for (uint32_t h = 0; h < k; h++) {
            uint64_t *slot = &p->pack_slot[p->frag_pack_first[f] + h];
            *slot = UINT64_MAX;
            if (!used[h]) continue;
            uint32_t piece = p->src.holders[cell->first_holder + h];
            if (fr->bytes >= p->pack_below) {
                if (!cut) {
                    contiguous = p->src.piece_dense[piece];
                } else {
                    const int64_t *strides = p->src.pieces[piece].strides;
                    if (!have_box) {
                        plan_box_intersect(cell->box, p->dst.boxes[fr->dbox].box, &box);
                        have_box = true;
                    }
                    if (!last_strides || memcmp(last_strides, strides, box.ndim * sizeof *strides) != 0) {
                        contiguous = plan_run_elems(&box, strides, NULL) == ferry_box_numel(&box);
                        last_strides = strides;
                    }
                }
                if (contiguous) continue;
            }
            uint32_t rank = p->src.holder_rank[cell->first_holder + h];
            bool fits = p->pack_size[rank] <= p->pack_limit && fr->bytes <= p->pack_limit - p->pack_size[rank];
            if (p->pack_limit && !fits && readable_unpacked(p, fr, cell, piece)) continue;
            *slot = p->pack_size[rank];
            p->pack_size[rank] += fr->bytes;
        }
    }
    for (uint32_t s = 0; s < p->src.world; s++) p->stats.pack_bytes += p->pack_size[s];
out:
    ferry_free(p->ctx, used);
    return st;
}
