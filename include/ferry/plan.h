/* ferry: the resharding planner.
 *
 * Given where a trainer holds the weights (a source layout) and where the
 * engine ranks want them (a destination layout), the planner computes the
 * byte copies that move them: every element of every destination piece is
 * written exactly once, from one of the source ranks that holds it, chosen
 * so that no source rank (or host) serves much more than the others.
 *
 * The planner is pure: no I/O, no threads, no clocks. Equal inputs give an
 * identical plan on every machine, and every rank may compute only its own
 * copies (ferry_plan_params_t.only_*) from the same global layouts; the
 * decisions that need the whole picture (which source serves whom, the pack
 * area of every source) are made globally and cheaply, so a local plan
 * agrees with the global one and carries the same digest.
 *
 * Vocabulary:
 *  - op: one box of one tensor copied from one source piece into one
 *    destination piece (both named by index, with byte offset and strides).
 *  - pack: a source side that is not one contiguous run (or an op too small
 *    to ship alone) is gathered by the source rank into its pack area, in
 *    row-major box order; every reader of that data reads the same packed
 *    bytes, so packing cost does not grow with the number of engine replicas.
 *  - bucket: consecutive ops of one (source, destination) pair that are
 *    adjacent on the source side (in the pack area or in one buffer) and are
 *    read with one transfer of at most bucket_bytes (an op larger than that
 *    is a bucket of its own).
 *  - pair: all ops and buckets from one source rank to one destination rank.
 */
#ifndef FERRY_PLAN_H
#define FERRY_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "ferry/ctx.h"
#include "ferry/layout.h"
#include "ferry/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#pragma GCC visibility push(default)

/* ---- parameters -------------------------------------------------------- */

/* Which fields of ferry_plan_params_t are set; unset fields take defaults. */
enum {
    FERRY_PLAN_PARAM_SRC_HOSTS = 1u << 0,    /* default: every source rank its own host */
    FERRY_PLAN_PARAM_DST_HOSTS = 1u << 1,    /* default: no destination shares a source's host */
    FERRY_PLAN_PARAM_BUCKET_BYTES = 1u << 2, /* default: 4 MiB */
    FERRY_PLAN_PARAM_PACK_BELOW = 1u << 3,   /* default: 64 KiB */
    FERRY_PLAN_PARAM_ONLY = 1u << 4,         /* default: the global plan */
    FERRY_PLAN_PARAM_PACK_LIMIT = 1u << 5,   /* default: 0, no limit */
    FERRY_PLAN_PARAM_GATHER_MIN_RUN = 1u << 6 /* default: FERRY_PLAN_GATHER_MIN_RUN */
};

#define FERRY_PLAN_DEFAULT_BUCKET_BYTES (4u << 20)
#define FERRY_PLAN_DEFAULT_PACK_BELOW (64u << 10)
/* With a pack_limit, a strided source whose contiguous runs are shorter than
 * this (gather_min_run's default) is packed even past the limit: read run by run it would cost a
 * transfer descriptor (and, across hosts, a network read) per few elements
 * (a transposed weight: one per element). */
#define FERRY_PLAN_GATHER_MIN_RUN 64u

typedef struct ferry_plan_params {
    uint64_t field_mask;
    /* Host label of every source rank (src world size entries) and of every
     * destination rank (dst world size entries). Labels are compared across
     * the two arrays: equal labels mean the same machine. Load is balanced
     * per source host as well as per source rank; among equally loaded
     * sources a reader prefers one on its own host. */
    const uint32_t *src_hosts;
    const uint32_t *dst_hosts;
    /* Largest transfer that groups several ops; larger ops travel alone. */
    uint64_t bucket_bytes;
    /* Ops smaller than this are packed even when their source is contiguous,
     * so that they travel in buckets; 0 packs only non-contiguous sources. */
    uint64_t pack_below;
    /* Most bytes one source rank's pack area holds; 0: no limit. The pack
     * area is memory the source rank takes beside its buffers (on its GPU,
     * for a GPU member), as large as the strided data it serves when not
     * limited (a column split of row-parallel weights: a third of a model).
     * Fragments are packed in the plan's order while they fit; one that
     * does not is left in place: a contiguous one is read directly (and may
     * share a bucket with source-adjacent direct ops), a strided one becomes
     * a FERRY_OP_GATHER (its reader reads it run by run). Exception: a
     * strided source whose runs are shorter than gather_min_run is packed
     * anyway, past the limit (ferry_plan_pack_bytes tells the
     * area's size). A nonzero limit is part of the plan's digest. */
    uint64_t pack_limit;
    /* With a pack_limit: the shortest source run (bytes) a strided fragment
     * may be read in; shorter ones are packed past the limit (0 or 1: any
     * run). Part of the digest when pack_limit is. */
    uint64_t gather_min_run;
    /* Process-local plan: only the ops whose source rank (FERRY_SIDE_TRAIN)
     * or destination rank (FERRY_SIDE_INFER) is only_rank. */
    ferry_side_t only_side;
    uint32_t only_rank;
} ferry_plan_params_t;

/* ---- output ------------------------------------------------------------ */

enum {
    FERRY_OP_PACK = 1u << 0,   /* the source rank gathers the box into its pack area */
    FERRY_OP_SCATTER = 1u << 1, /* the destination box is not one contiguous run */
    FERRY_OP_GATHER = 1u << 2,  /* the source box is not one contiguous run and not packed (pack_limit):
                                   its reader reads it run by run, row-major */
    FERRY_OP_QUANT = 1u << 3    /* (with PACK) bytes a quant op wrote in the source's pack area: an FP8
                                   destination's fp8 weight box, or its block scales (tensor: the scale
                                   tensor, box in block units); the source piece is the weight's */
};

typedef struct ferry_copy_op {
    uint32_t tensor;       /* index in the destination layout's model */
    uint32_t flags;        /* FERRY_OP_* */
    ferry_box_t box;       /* in the tensor's index space */
    uint32_t src_rank;
    uint32_t src_buffer;   /* buffer index in the source layout */
    size_t src_piece;      /* piece index in the source layout */
    uint64_t src_offset;   /* byte offset of the box's first element in src_buffer */
    int64_t src_strides[FERRY_MAX_DIMS];
    uint32_t dst_rank;
    uint32_t dst_buffer;   /* buffer index in the destination layout */
    size_t dst_piece;      /* piece index in the destination layout */
    uint64_t dst_offset;
    int64_t dst_strides[FERRY_MAX_DIMS];
    uint64_t bytes;
    uint64_t run_bytes;    /* longest row-major run contiguous on both sides */
    uint64_t runs;         /* bytes / run_bytes: copies a strided transfer needs */
    uint64_t pack_offset;  /* FERRY_OP_PACK: start of the packed box in src_rank's pack area */
} ferry_copy_op_t;

enum {
    FERRY_BUCKET_PACKED = 1u << 0, /* read from the source's pack area at src_offset */
    FERRY_BUCKET_DIRECT = 1u << 1, /* lands as is at dst_buffer/dst_offset (else: staged, then scattered) */
    FERRY_BUCKET_GATHER = 1u << 2  /* one FERRY_OP_GATHER op, read run by run from src_offset under its
                                      src_strides: bytes is its row-major size, not one contiguous read */
};

/* What a source rank computes into its pack area before serving an FP8
 * destination (ferry/fp8.h): the block-aligned box of the weight, read from
 * its own piece (src_offset, src_strides, in src_dtype: BF16 or F32), as
 * float8_e4m3fn bytes row-major at fp8_offset and the box's block scales,
 * fp32 row-major (ceil(rows / 128) x ceil(cols / 128) over the last two
 * dimensions, per leading index) at scale_offset, 4-aligned. Each box of
 * each weight is quantized by one source rank once per version, for every
 * reader of it (engine replicas read the same bytes). */
typedef struct ferry_quant_op {
    uint32_t tensor;        /* the fp8 weight, in the destination model */
    uint32_t scale_tensor;  /* its weight_scale_inv */
    ferry_box_t box;        /* of the weight: block-aligned in its last two dimensions */
    uint32_t src_rank;
    uint32_t src_buffer;
    size_t src_piece;
    uint64_t src_offset;    /* byte offset of the box's first element in src_buffer */
    int64_t src_strides[FERRY_MAX_DIMS];
    ferry_dtype_t src_dtype;
    uint32_t flags;         /* FERRY_FP8_UE8M0 */
    uint64_t fp8_offset;    /* in src_rank's pack area */
    uint64_t scale_offset;
} ferry_quant_op_t;

typedef struct ferry_plan_bucket {
    size_t first_op;       /* ops [first_op, first_op + op_count) of the plan */
    size_t op_count;
    uint32_t flags;        /* FERRY_BUCKET_* */
    uint32_t src_buffer;   /* unless PACKED */
    uint64_t src_offset;   /* in src_buffer, or in the pack area if PACKED */
    uint64_t bytes;        /* one contiguous read of this many bytes */
    uint32_t dst_buffer;   /* if DIRECT */
    uint64_t dst_offset;   /* if DIRECT */
} ferry_plan_bucket_t;

typedef struct ferry_plan_pair {
    uint32_t src_rank;
    uint32_t dst_rank;
    size_t first_op, op_count;         /* into ferry_plan_ops */
    size_t first_bucket, bucket_count; /* into ferry_plan_buckets */
    uint64_t bytes;
} ferry_plan_pair_t;

typedef struct ferry_plan_stats {
    /* global: the same in every local plan */
    uint64_t bytes;          /* bytes all destination pieces receive */
    uint64_t fragments;      /* distinct (source cell, destination box) intersections */
    uint64_t routes;         /* distinct (source holders, destination holders) sets balanced as one */
    uint64_t pack_bytes;     /* sum of every source rank's pack area */
    uint64_t src_max;        /* most bytes one source rank serves */
    uint64_t src_lower_bound;/* no assignment can make src_max smaller than this */
    uint64_t src_host_max;   /* most bytes one source host serves */
    uint32_t src_serving;    /* source ranks that serve at least one byte */
    /* of the ops this plan holds (all, or one rank's) */
    uint64_t ops;
    uint64_t runs;           /* contiguous runs before packing, summed over ops */
    uint64_t packed_ops;
    uint64_t gather_ops;     /* FERRY_OP_GATHER: strided and not packed (pack_limit) */
    uint64_t buckets;        /* transfers */
    uint64_t pairs;
    uint64_t op_bytes;       /* bytes of these ops */
    uint64_t quant_ops;      /* quant ops this plan holds (a writer's, or all) */
    uint64_t quant_bytes;    /* their fp8 and scale bytes */
} ferry_plan_stats_t;

typedef struct ferry_plan ferry_plan_t;

/* Plans the copies from src to dst. Tensors are matched by name; each one the
 * destination holds must exist in the source with the same dtype and shape
 * (or, for an FP8 destination weight (ferry_model_tensor_quant), the same
 * shape in BF16 or F32: its source quantizes it, see ferry_quant_op_t; its
 * scale tensor has no source: its pieces take the scales of the weight
 * pieces they mirror, on the same rank),
 * and every element of every destination piece must be held by some source
 * piece; source boxes may overlap (any holder may serve). A destination rank
 * may hold an element twice (a tied embedding kept as two parameters), but
 * two of its pieces with overlapping boxes must not share bytes of a buffer
 * (FERRY_ERR_INVALID_ARGUMENT). Failures name the
 * tensor and the box (FERRY_ERR_COVERAGE, FERRY_ERR_MISMATCH,
 * FERRY_ERR_INVALID_ARGUMENT); detail on ctx. Both layouts must hold every
 * rank's pieces, also for a local plan.
 * Ownership: caller owns *out; the layouts may be destroyed after the call.
 * Thread-safety: one thread at a time per ctx; layouts only read. */
ferry_status_t ferry_plan_build(ferry_ctx_t *ctx, const ferry_layout_t *src,
                                const ferry_layout_t *dst, const ferry_plan_params_t *params,
                                ferry_plan_t **out);

/* Destroys a plan; NULL is accepted. */
void ferry_plan_destroy(ferry_plan_t *plan);

/* Ops, buckets and pairs. Pairs are ordered by destination rank, and for one
 * destination in its staggered reading order (readers start on different
 * sources); a pair's ops and buckets are contiguous. Pointers belong to the
 * plan. Thread-safety: any number of readers. */
size_t ferry_plan_op_count(const ferry_plan_t *plan);
const ferry_copy_op_t *ferry_plan_ops(const ferry_plan_t *plan);
size_t ferry_plan_bucket_count(const ferry_plan_t *plan);
const ferry_plan_bucket_t *ferry_plan_buckets(const ferry_plan_t *plan);
size_t ferry_plan_pair_count(const ferry_plan_t *plan);
const ferry_plan_pair_t *ferry_plan_pairs(const ferry_plan_t *plan);

/* Quant ops (FP8 destinations): a source rank's, for a local writer plan;
 * every rank's, for a global one; none for a reader's. Sorted by source
 * rank, then pack offset. Pointers belong to the plan. Thread-safety: any
 * number of readers. */
size_t ferry_plan_quant_op_count(const ferry_plan_t *plan);
const ferry_quant_op_t *ferry_plan_quant_ops(const ferry_plan_t *plan);

/* Global figures, known to every local plan: bytes a source rank serves, a
 * destination rank receives, the size of a source rank's pack area (0 for
 * ranks out of range). Thread-safety: any number of readers. */
uint64_t ferry_plan_src_bytes(const ferry_plan_t *plan, uint32_t src_rank);
uint64_t ferry_plan_dst_bytes(const ferry_plan_t *plan, uint32_t dst_rank);
uint64_t ferry_plan_pack_bytes(const ferry_plan_t *plan, uint32_t src_rank);
void ferry_plan_stats(const ferry_plan_t *plan, ferry_plan_stats_t *out);

/* xxh3-64 over the inputs that every rank must agree on and the global
 * decisions: equal digests mean identical global plans, and a local plan has
 * the digest of the global plan it is part of. Thread-safety: any. */
uint64_t ferry_plan_digest(const ferry_plan_t *plan);

/* Checks the plan against the layouts it was built from, independently of
 * how it was built: every op names pieces of its ranks whose boxes contain
 * the op's box, with offsets and strides that address it, the same tensor
 * and dtype on both sides; and the ops tile every destination piece the plan
 * is responsible for (all, or the reader's) exactly once. Errors name the
 * piece and box; detail on the plan (FERRY_ERR_COVERAGE, FERRY_ERR_MISMATCH).
 * Thread-safety: one thread at a time per plan. */
ferry_status_t ferry_plan_verify(ferry_plan_t *plan, const ferry_layout_t *src,
                                 const ferry_layout_t *dst);

const char *ferry_plan_error(const ferry_plan_t *plan);

#pragma GCC visibility pop

#ifdef __cplusplus
}
#endif
#endif
