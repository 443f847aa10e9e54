/* Internal state of the planner, shared by its stages:
 *   index.c     pieces -> distinct boxes per tensor, with their holders
 *   cells.c     source boxes -> disjoint source cells (refines overlaps)
 *   fragment.c  destination box x source cells -> fragments (sweep)
 *   assign.c    fragments -> routes -> which source holder serves each reader
 *   pack.c      the pack area of every source rank
 *   emit.c      ops, pairs and buckets for the ranks asked for
 *   digest.c    the plan digest
 *   verify.c    the independent check of a finished plan
 * Everything before emit.c is global (every rank computes it identically and
 * cheaply); emit.c is where a local plan does only its own work. */
#ifndef FERRY_PLAN_PLAN_INTERNAL_H
#define FERRY_PLAN_PLAN_INTERNAL_H

#include <stdbool.h>

#include "common/internal.h"
#include "ferry/plan.h"

#define PLAN_NONE UINT32_MAX
/* Refining overlapping source boxes of one tensor makes at most this many cells. */
#define PLAN_MAX_CELLS_PER_TENSOR (1u << 20)

/* A distinct (tensor, box) of one side and the pieces that hold it. */
typedef struct plan_box {
    const ferry_box_t *box;   /* points into a piece or into the refined-box arena */
    uint64_t k0, k1;          /* plan_box_key of the box */
    uint32_t tensor;          /* destination model index */
    uint32_t first_holder;    /* into side.holders: piece indices, canonical order */
    uint32_t holder_count;
    uint32_t set;             /* interned rank-list id (routes are keyed on it) */
    uint32_t first_frag;      /* destination boxes: their fragments are frags[first_frag, +frag_count) */
    uint32_t frag_count;
} plan_box_t;

typedef struct plan_side {
    const ferry_layout_t *layout;
    const ferry_piece_t *pieces;
    size_t npieces;
    uint32_t world;
    uint32_t *piece_tensor;   /* destination-model tensor of each piece, PLAN_NONE if unused */
    uint32_t *piece_box;      /* distinct box (dst) or source box (src) of each piece */
    uint32_t *holders;        /* piece indices grouped by box */
    uint32_t *holder_rank;    /* rank of each holder (saves touching the piece) */
    uint8_t *piece_dense;     /* source side: the piece is one row-major run over its box */
    size_t nholders;
    plan_box_t *boxes;
    size_t nboxes;
    uint32_t *tensor_first;   /* boxes of tensor t: [tensor_first[t], tensor_first[t+1]) */
} plan_side_t;

typedef struct plan_frag {
    uint32_t cell;            /* source cell */
    uint32_t dbox;            /* destination box */
    uint32_t route;
    uint16_t chunk;           /* which part of its route */
    uint16_t whole;           /* the fragment is its whole cell */
    uint64_t bytes;
} plan_frag_t;

/* A route's fragments are dealt into `chunks` parts of about equal bytes:
 * k / gcd(k, m) of them for k holders and m readers, so that
 * the m * chunks (reader, part) units can be spread evenly over the holders
 * even when m is not a multiple of k (or k > m: more trainer replicas than
 * engines). Each unit is read from one holder. */
typedef struct plan_route {
    uint32_t src_set, dst_set;
    uint32_t quant;           /* an FP8 weight's fragments: each part served to every reader by one holder */
    uint32_t holders, readers;
    uint64_t weight;          /* bytes one reader receives over this route */
    uint32_t chunks;
    uint32_t first_chunk;     /* chunk_bytes[first_chunk + c] */
    uint32_t first_assign;    /* assign[first_assign + c * readers + j]: holder serving reader j, part c */
    uint32_t first_frag;      /* route_order[first_frag .. + frag_count) */
    uint32_t frag_count;
} plan_route_t;

#define PLAN_MAX_CHUNKS 64

/* Interned lists of ranks (holder sets). */
typedef struct plan_sets {
    uint32_t *items;
    size_t nitems, cap_items;
    uint32_t *first;          /* list i: items[first[i] .. first[i+1]) */
    size_t count, cap;
    uint32_t *slots;          /* open addressing: list id + 1 */
    size_t nslots;
} plan_sets_t;

struct ferry_plan {
    ferry_ctx_t *ctx;
    ferry_errbuf_t err;
    /* params in force */
    uint64_t bucket_bytes, pack_below, pack_limit, gather_min_run;
    bool only;
    ferry_side_t only_side;
    uint32_t only_rank;
    const uint32_t *src_hosts_in, *dst_hosts_in; /* only during build */
    uint32_t *src_host;       /* dense host id per source rank */
    uint32_t nhosts;
    uint32_t *dst_host;       /* dense host id per destination rank, PLAN_NONE if not a source host */
    const ferry_model_t *dst_model, *src_model;

    plan_side_t src, dst;     /* src.boxes are the source cells */
    ferry_box_t *cell_boxes;  /* refined cells' boxes */
    size_t ncell_boxes, cap_cell_boxes;
    uint32_t *cell_holders;   /* extra holder lists of refined cells */

    plan_frag_t *frags;
    size_t nfrags, cap_frags;
    plan_sets_t sets;
    plan_route_t *routes;
    size_t nroutes;
    uint32_t *assign;
    size_t nassign;
    uint64_t *chunk_bytes;
    size_t nchunks;
    uint32_t *route_order;    /* fragments, route-major (pack order) */

    /* pack slot of (fragment, holder): pack_slot[frag_pack_first[f] + h] */
    uint32_t *frag_pack_first;
    uint64_t *pack_slot;      /* UINT64_MAX: not packed */
    uint64_t *pack_size;      /* per source rank */

    uint64_t *src_load, *dst_load, *host_load;

    void *sort_keys;          /* emit.c's scratch */
    ferry_copy_op_t *sort_ops;
    size_t cap_sort_keys, cap_sort_ops;

    ferry_copy_op_t *ops;
    size_t nops, cap_ops;
    ferry_plan_bucket_t *buckets;
    size_t nbuckets, cap_buckets;
    ferry_plan_pair_t *pairs;
    size_t npairs, cap_pairs;

    /* FP8 destinations (ferry_model_tensor_quant of the destination model) */
    uint32_t nquant;          /* FP8_BLOCK tensors the destination holds */
    uint8_t *dst_quant;       /* per destination tensor: FERRY_QUANT_* */
    uint32_t *dst_partner;    /* per destination tensor: its scale (of a weight) or weight (of a scale) */
    uint32_t *dst_qflags;     /* per destination tensor: FERRY_FP8_* of the pair */
    uint32_t *scale_piece;    /* per destination piece of an fp8 weight: its scale piece (same rank) */
    ferry_quant_op_t *qops;
    size_t nqops, cap_qops;

    ferry_plan_stats_t stats;
    uint64_t src_address_sum; /* order-free hashes of the pieces' addresses */
    uint64_t dst_address_sum;
    uint64_t digest;
};

/* stages, in order; each returns FERRY_OK or fails with detail on plan->err */
ferry_status_t plan_index(ferry_plan_t *p);
/* quant.c: after index, the destination's FP8 pairs: which scale piece
 * mirrors each weight piece; after cells, that every source cell and
 * destination box of an fp8 weight keeps 128 x 128 blocks whole. */
ferry_status_t plan_quant_pairs(ferry_plan_t *p);
ferry_status_t plan_quant_check(ferry_plan_t *p);
ferry_status_t plan_cells(ferry_plan_t *p);
ferry_status_t plan_fragments(ferry_plan_t *p);
ferry_status_t plan_assign(ferry_plan_t *p);
ferry_status_t plan_pack(ferry_plan_t *p);
ferry_status_t plan_emit(ferry_plan_t *p);
void plan_digest(ferry_plan_t *p);

/* helpers */
static inline bool plan_is_quant(const ferry_plan_t *p, uint32_t tensor) {
    return p->dst_quant && p->dst_quant[tensor] == FERRY_QUANT_FP8_BLOCK;
}
/* The block box of a weight box: its last two dimensions in units of 128
 * blocks (ceil for extents that reach past a multiple), others as they are. */
ferry_box_t plan_block_box(const ferry_box_t *b);
/* Whether box b of a tensor of `shape` keeps 128 x 128 blocks whole: in its
 * last two dimensions it starts at a multiple of 128 and ends at one or at
 * the tensor's end. */
bool plan_block_aligned(const ferry_box_t *b, const int64_t *shape);
/* Bytes of a quant slot for weight box b: fp8 bytes padded to 4, then the scales. */
uint64_t plan_quant_fp8_bytes(const ferry_box_t *b);
uint64_t plan_quant_scale_bytes(const ferry_box_t *b);
const char *plan_tensor_name(const ferry_plan_t *p, uint32_t tensor);
size_t plan_tensor_esize(const ferry_plan_t *p, uint32_t tensor);
int plan_box_cmp(const ferry_box_t *a, const ferry_box_t *b);
/* A 128-bit key of a box: exact (and k1 != UINT64_MAX) for boxes of up to two
 * dimensions with coordinates below 2^32, else a hash with k1 == UINT64_MAX
 * whose matches must be checked. Returns whether it is exact. */
bool plan_box_key(const ferry_box_t *b, uint64_t *k0, uint64_t *k1);
/* A 64-bit finaliser (murmur3's): the planner's hash tables and digests. */
static inline uint64_t plan_mix64(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

/* ferry_box_intersect for boxes of one tensor (same ndim, validated
 * coordinates): the planner's inner loops call it millions of times. */
static inline bool plan_box_intersect(const ferry_box_t *a, const ferry_box_t *b, ferry_box_t *out) {
    ferry_box_t r;
    r.ndim = a->ndim;
    for (uint32_t d = 0; d < a->ndim; d++) {
        int64_t lo = a->offset[d] > b->offset[d] ? a->offset[d] : b->offset[d];
        int64_t ea = a->offset[d] + a->extent[d], eb = b->offset[d] + b->extent[d];
        int64_t hi = ea < eb ? ea : eb;
        if (hi <= lo) return false;
        r.offset[d] = lo;
        r.extent[d] = hi - lo;
    }
    if (out) {
        for (uint32_t d = a->ndim; d < FERRY_MAX_DIMS; d++) r.offset[d] = r.extent[d] = 0;
        *out = r;
    }
    return true;
}
/* Byte offset of sub-box `box` inside piece q (box must lie inside q->box). */
uint64_t plan_piece_offset(const ferry_piece_t *q, const ferry_box_t *box, size_t esize);
/* Elements in the longest row-major run of `box` that is contiguous under
 * strides a (and b, if not NULL). */
int64_t plan_run_elems(const ferry_box_t *box, const int64_t *a, const int64_t *b);
/* Interns a list of ranks; returns its id or PLAN_NONE on no memory. */
uint32_t plan_sets_intern(ferry_ctx_t *ctx, plan_sets_t *s, const uint32_t *items, size_t n);
void plan_sets_free(ferry_ctx_t *ctx, plan_sets_t *s);
/* Writes into *out a part of `box` that none of the n boxes covers and
 * returns 1; 0 if they cover it; -1 without memory. */
int plan_box_uncovered(ferry_ctx_t *ctx, const ferry_box_t *box, const ferry_box_t *const *parts, size_t n,
                       ferry_box_t *out);
/* The dimension along which the n boxes have the most distinct offsets;
 * order[0..n) gets the box indices sorted by offset along it. */
uint32_t plan_sort_split_dim(const ferry_box_t *const *boxes, size_t n, uint32_t *order);
/* Indices of two overlapping boxes among n (sweep on the dimension with the
 * most distinct offsets); false if all are disjoint. scratch holds n entries. */
bool plan_boxes_overlap(const ferry_box_t *const *boxes, size_t n, uint32_t *scratch, size_t *i,
                        size_t *j);

#endif
