/* The plan object: parameters, the stages in order, accessors. */
#include <string.h>

#include "plan/plan_internal.h"

static void plan_free_work(ferry_plan_t *p) {
    ferry_ctx_t *c = p->ctx;
    plan_side_t *sides[2] = {&p->src, &p->dst};
    for (int i = 0; i < 2; i++) {
        plan_side_t *s = sides[i];
        ferry_free(c, s->piece_tensor);
        ferry_free(c, s->piece_box);
        ferry_free(c, s->holders);
        ferry_free(c, s->holder_rank);
        ferry_free(c, s->piece_dense);
        ferry_free(c, s->boxes);
        ferry_free(c, s->tensor_first);
        uint32_t world = s->world; /* the accessors still answer per rank */
        memset(s, 0, sizeof *s);
        s->world = world;
    }
    ferry_free(c, p->cell_boxes);
    ferry_free(c, p->frags);
    plan_sets_free(c, &p->sets);
    ferry_free(c, p->routes);
    ferry_free(c, p->assign);
    ferry_free(c, p->route_order);
    ferry_free(c, p->chunk_bytes);
    ferry_free(c, p->frag_pack_first);
    ferry_free(c, p->pack_slot);
    ferry_free(c, p->host_load);
    ferry_free(c, p->src_host);
    ferry_free(c, p->dst_host);
    ferry_free(c, p->sort_keys);
    ferry_free(c, p->dst_quant);
    ferry_free(c, p->dst_partner);
    ferry_free(c, p->dst_qflags);
    ferry_free(c, p->scale_piece);
    ferry_free(c, p->sort_ops);
    p->sort_keys = NULL;
    p->sort_ops = NULL;
    p->dst_quant = NULL; /* (plan_is_quant answers false from here on) */
    p->dst_partner = NULL;
    p->dst_qflags = NULL;
    p->scale_piece = NULL;
    p->cap_sort_keys = p->cap_sort_ops = 0;
    p->cell_boxes = NULL;
    p->frags = NULL;
    p->routes = NULL;
    p->assign = NULL;
    p->route_order = NULL;
    p->chunk_bytes = NULL;
    p->frag_pack_first = NULL;
    p->pack_slot = NULL;
    p->host_load = NULL;
    p->src_host = p->dst_host = NULL;
}

void ferry_plan_destroy(ferry_plan_t *p) {
    if (!p) return;
    plan_free_work(p);
    ferry_free(p->ctx, p->pack_size);
    ferry_free(p->ctx, p->src_load);
    ferry_free(p->ctx, p->dst_load);
    ferry_free(p->ctx, p->ops);
    ferry_free(p->ctx, p->qops);
    ferry_free(p->ctx, p->buckets);
    ferry_free(p->ctx, p->pairs);
    ferry_free(p->ctx, p);
}

static ferry_status_t read_params(ferry_plan_t *p, const ferry_plan_params_t *pp) {
    uint64_t known = FERRY_PLAN_PARAM_SRC_HOSTS | FERRY_PLAN_PARAM_DST_HOSTS |
                     FERRY_PLAN_PARAM_BUCKET_BYTES | FERRY_PLAN_PARAM_PACK_BELOW |
                     FERRY_PLAN_PARAM_ONLY | FERRY_PLAN_PARAM_PACK_LIMIT | FERRY_PLAN_PARAM_GATHER_MIN_RUN;
    p->bucket_bytes = FERRY_PLAN_DEFAULT_BUCKET_BYTES;
    p->pack_below = FERRY_PLAN_DEFAULT_PACK_BELOW;
    p->gather_min_run = FERRY_PLAN_GATHER_MIN_RUN;
    if (!pp) return FERRY_OK;
    if (pp->field_mask & ~known)
        return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                          "plan params: unknown field_mask bits 0x%llx",
                          (unsigned long long)(pp->field_mask & ~known));
    if ((pp->field_mask & FERRY_PLAN_PARAM_SRC_HOSTS) && !pp->src_hosts)
        return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                          "plan params: FERRY_PLAN_PARAM_SRC_HOSTS set but src_hosts is NULL");
    if ((pp->field_mask & FERRY_PLAN_PARAM_DST_HOSTS) && !pp->dst_hosts)
        return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                          "plan params: FERRY_PLAN_PARAM_DST_HOSTS set but dst_hosts is NULL");
    if (pp->field_mask & FERRY_PLAN_PARAM_SRC_HOSTS) p->src_hosts_in = pp->src_hosts;
    if (pp->field_mask & FERRY_PLAN_PARAM_DST_HOSTS) p->dst_hosts_in = pp->dst_hosts;
    if (pp->field_mask & FERRY_PLAN_PARAM_BUCKET_BYTES) {
        if (pp->bucket_bytes == 0)
            return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                              "plan params: bucket_bytes must be at least 1");
        p->bucket_bytes = pp->bucket_bytes;
    }
    if (pp->field_mask & FERRY_PLAN_PARAM_PACK_BELOW) p->pack_below = pp->pack_below;
    if (pp->field_mask & FERRY_PLAN_PARAM_PACK_LIMIT) p->pack_limit = pp->pack_limit;
    if (pp->field_mask & FERRY_PLAN_PARAM_GATHER_MIN_RUN) p->gather_min_run = pp->gather_min_run;
    if (pp->field_mask & FERRY_PLAN_PARAM_ONLY) {
        if (pp->only_side != FERRY_SIDE_TRAIN && pp->only_side != FERRY_SIDE_INFER)
            return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                              "plan params: only_side must be FERRY_SIDE_TRAIN (a source rank) "
                              "or FERRY_SIDE_INFER (a destination rank), not %d",
                              (int)pp->only_side);
        uint32_t world = pp->only_side == FERRY_SIDE_TRAIN ? p->src.world : p->dst.world;
        if (pp->only_rank >= world)
            return ferry_fail(&p->err, FERRY_ERR_INVALID_ARGUMENT,
                              "plan params: only_rank %u is not a %s rank (world size %u)",
                              pp->only_rank, pp->only_side == FERRY_SIDE_TRAIN ? "source" : "destination",
                              world);
        p->only = true;
        p->only_side = pp->only_side;
        p->only_rank = pp->only_rank;
    }
    return FERRY_OK;
}

/* Host labels -> dense ids over the source hosts; destination ranks on no
 * source host get PLAN_NONE (they are never "local" to a source). */
static ferry_status_t map_hosts(ferry_plan_t *p) {
    uint32_t ns = p->src.world, nd = p->dst.world;
    p->src_host = ferry_alloc(p->ctx, (ns ? ns : 1) * sizeof *p->src_host);
    p->dst_host = ferry_alloc(p->ctx, (nd ? nd : 1) * sizeof *p->dst_host);
    uint32_t *labels = ferry_alloc(p->ctx, (ns ? ns : 1) * sizeof *labels);
    ferry_status_t st = FERRY_OK;
    if (!p->src_host || !p->dst_host || !labels) {
        st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory mapping hosts");
        goto out;
    }
    p->nhosts = 0;
    for (uint32_t r = 0; r < ns; r++) {
        if (!p->src_hosts_in) {
            p->src_host[r] = r;
            continue;
        }
        /* dense ids in order of first appearance; world sizes are modest
         * (thousands), a linear search over distinct hosts is enough */
        uint32_t h = 0;
        while (h < p->nhosts && labels[h] != p->src_hosts_in[r]) h++;
        if (h == p->nhosts) labels[p->nhosts++] = p->src_hosts_in[r];
        p->src_host[r] = h;
    }
    if (!p->src_hosts_in) p->nhosts = ns;
    for (uint32_t r = 0; r < nd; r++) {
        p->dst_host[r] = PLAN_NONE;
        if (!p->dst_hosts_in || !p->src_hosts_in) continue;
        for (uint32_t h = 0; h < p->nhosts; h++)
            if (labels[h] == p->dst_hosts_in[r]) p->dst_host[r] = h;
    }
out:
    ferry_free(p->ctx, labels);
    return st;
}

ferry_status_t ferry_plan_build(ferry_ctx_t *ctx, const ferry_layout_t *src,
                                const ferry_layout_t *dst, const ferry_plan_params_t *params,
                                ferry_plan_t **out) {
    if (!ctx) return FERRY_ERR_INVALID_ARGUMENT;
    ferry_errbuf_t *cerr = ferry_ctx_errbuf(ctx);
    if (!src || !dst || !out)
        return ferry_fail(cerr, FERRY_ERR_INVALID_ARGUMENT,
                          "ferry_plan_build: src, dst and out must not be NULL");
    ferry_plan_t *p = ferry_calloc(ctx, 1, sizeof *p);
    if (!p) return ferry_fail(cerr, FERRY_ERR_NO_MEMORY, "out of memory creating a plan");
    p->ctx = ctx;
    p->src_model = ferry_layout_model(src);
    p->dst_model = ferry_layout_model(dst);
    p->src.layout = src;
    p->src.pieces = ferry_layout_pieces(src);
    p->src.npieces = ferry_layout_piece_count(src);
    p->src.world = ferry_layout_world_size(src);
    p->dst.layout = dst;
    p->dst.pieces = ferry_layout_pieces(dst);
    p->dst.npieces = ferry_layout_piece_count(dst);
    p->dst.world = ferry_layout_world_size(dst);
    ferry_status_t st = read_params(p, params);
    if (st == FERRY_OK && (p->src.npieces > UINT32_MAX / 2 || p->dst.npieces > UINT32_MAX / 2))
        st = ferry_fail(&p->err, FERRY_ERR_LIMIT, "more than %u pieces on one side", UINT32_MAX / 2);
    if (st == FERRY_OK) st = map_hosts(p);
    if (st == FERRY_OK) {
        size_t ns = p->src.world ? p->src.world : 1, nd = p->dst.world ? p->dst.world : 1;
        p->src_load = ferry_calloc(ctx, ns, sizeof *p->src_load);
        p->dst_load = ferry_calloc(ctx, nd, sizeof *p->dst_load);
        p->pack_size = ferry_calloc(ctx, ns, sizeof *p->pack_size);
        p->host_load = ferry_calloc(ctx, p->nhosts ? p->nhosts : 1, sizeof *p->host_load);
        if (!p->src_load || !p->dst_load || !p->pack_size || !p->host_load)
            st = ferry_fail(&p->err, FERRY_ERR_NO_MEMORY, "out of memory creating a plan");
    }
    if (st == FERRY_OK) st = plan_index(p);
    if (st == FERRY_OK) st = plan_cells(p);
    if (st == FERRY_OK) st = plan_quant_check(p);
    if (st == FERRY_OK) st = plan_fragments(p);
    if (st == FERRY_OK) st = plan_assign(p);
    if (st == FERRY_OK) st = plan_pack(p);
    if (st == FERRY_OK) st = plan_emit(p);
    if (st == FERRY_OK) plan_digest(p);
    if (st != FERRY_OK) {
        ferry_fail(cerr, st, "%s", p->err.text);
        ferry_plan_destroy(p);
        return st;
    }
    plan_free_work(p); /* the plan keeps only its output */
    ferry_err_clear(&p->err);
    *out = p;
    return FERRY_OK;
}

size_t ferry_plan_op_count(const ferry_plan_t *p) { return p->nops; }
const ferry_copy_op_t *ferry_plan_ops(const ferry_plan_t *p) { return p->ops; }
size_t ferry_plan_quant_op_count(const ferry_plan_t *p) { return p->nqops; }
const ferry_quant_op_t *ferry_plan_quant_ops(const ferry_plan_t *p) { return p->qops; }
size_t ferry_plan_bucket_count(const ferry_plan_t *p) { return p->nbuckets; }
const ferry_plan_bucket_t *ferry_plan_buckets(const ferry_plan_t *p) { return p->buckets; }
size_t ferry_plan_pair_count(const ferry_plan_t *p) { return p->npairs; }
const ferry_plan_pair_t *ferry_plan_pairs(const ferry_plan_t *p) { return p->pairs; }

uint64_t ferry_plan_src_bytes(const ferry_plan_t *p, uint32_t r) {
    return r < p->src.world ? p->src_load[r] : 0;
}
uint64_t ferry_plan_dst_bytes(const ferry_plan_t *p, uint32_t r) {
    return r < p->dst.world ? p->dst_load[r] : 0;
}
uint64_t ferry_plan_pack_bytes(const ferry_plan_t *p, uint32_t r) {
    return r < p->src.world ? p->pack_size[r] : 0;
}
void ferry_plan_stats(const ferry_plan_t *p, ferry_plan_stats_t *out) { *out = p->stats; }
uint64_t ferry_plan_digest(const ferry_plan_t *p) { return p->digest; }
const char *ferry_plan_error(const ferry_plan_t *p) { return p->err.text; }
