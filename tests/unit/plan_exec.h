/* Shared by the planner tests (test_plan_*.c): random tiny models and
 * layouts, and an in-memory executor that runs a plan the two ways a
 * transport would (op by op, and pack area + buckets) and checks every
 * destination byte against the logical tensors.
 *
 * Memory is simulated with one 64-bit tag per byte instead of a value per
 * element: a tag names the logical (tensor, element, byte) the byte holds,
 * so a single misplaced byte is caught even for 1- and 2-byte dtypes, whose
 * values could not be distinct. Replicas of an element carry equal tags.
 * Everything here is checked against ferry_layout_* accessors and plan.h
 * definitions only, never against planner internals. */
#ifndef FERRY_TESTS_PLAN_EXEC_H
#define FERRY_TESTS_PLAN_EXEC_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "check.h"
#include "ferry/plan.h"

/* ---- failure reporting ----------------------------------------------------- */

/* What the current case is (model, specs, params): printed with any failure. */
static char pe_case[4096];

/* The plan being checked: with FERRY_TEST_DUMP=1 a failure prints it. */
static const ferry_plan_t *pe_dump_plan;
static const ferry_layout_t *pe_dump_src, *pe_dump_dst;
static inline void pe_dump(void);

static inline void pe_fail(const char *file, int line, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "%s:%d: ", file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  case: %s\n", pe_case);
    if (getenv("FERRY_TEST_DUMP")) pe_dump();
    exit(1);
}
#define PE_FAIL(...) pe_fail(__FILE__, __LINE__, __VA_ARGS__)
#define PE_CHECK(cond, ...)                                                                       \
    do {                                                                                          \
        if (!(cond)) pe_fail(__FILE__, __LINE__, "check failed: " #cond ": " __VA_ARGS__);        \
    } while (0)

/* ---- randomness ------------------------------------------------------------ */

static inline uint64_t pe_rnd(uint64_t n) { return n ? rng_next() % n : 0; }
static inline int64_t pe_pick(const int64_t *v, size_t n) { return v[pe_rnd(n)]; }
#define PE_PICK(...) \
    pe_pick((const int64_t[]){__VA_ARGS__}, sizeof((const int64_t[]){__VA_ARGS__}) / sizeof(int64_t))

static inline void pe_shuffle(size_t *v, size_t n) {
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)pe_rnd(i), t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

/* ---- small helpers over boxes and strides ------------------------------------ */

static inline ferry_tensor_info_t pe_tensor(const ferry_model_t *m, uint32_t t) {
    ferry_tensor_info_t ti;
    if (!ferry_model_tensor(m, t, &ti)) PE_FAIL("tensor %u out of range", t);
    return ti;
}

/* Row-major odometer over a box's local indices; false once it wraps. */
static inline bool pe_next(int64_t *idx, const ferry_box_t *b) {
    for (int d = (int)b->ndim - 1; d >= 0; d--) {
        if (++idx[d] < b->extent[d]) return true;
        idx[d] = 0;
    }
    return false;
}

/* Byte address of local element idx (plus a per-dim shift) under strides. */
static inline uint64_t pe_addr(uint64_t off, const int64_t *strides, const int64_t *idx,
                               const int64_t *shift, uint32_t ndim, size_t esz) {
    int64_t e = 0;
    for (uint32_t d = 0; d < ndim; d++) e += (idx[d] + (shift ? shift[d] : 0)) * strides[d];
    return off + (uint64_t)e * esz;
}

/* Row-major linear index in the tensor of local element idx of box b. */
static inline uint64_t pe_lin(const ferry_tensor_info_t *ti, const ferry_box_t *b, const int64_t *idx) {
    uint64_t lin = 0;
    for (uint32_t d = 0; d < ti->ndim; d++) lin = lin * (uint64_t)ti->shape[d] + (uint64_t)(b->offset[d] + idx[d]);
    return lin;
}

/* True if the box's row-major element order is one contiguous run. Dims of
 * extent 1 never break contiguity, whatever their stride. */
static inline bool pe_contig(const ferry_box_t *b, const int64_t *s) {
    int64_t want = 1;
    for (int d = (int)b->ndim - 1; d >= 0; d--) {
        if (b->extent[d] == 1) continue;
        if (s[d] != want) return false;
        want *= b->extent[d];
    }
    return true;
}

/* Elements in the longest row-major run contiguous under both strides. */
static inline int64_t pe_run_elems(const ferry_box_t *b, const int64_t *s1, const int64_t *s2) {
    int64_t run = 1;
    for (int d = (int)b->ndim - 1; d >= 0; d--) {
        if (b->extent[d] == 1) continue;
        if (s1[d] != run || s2[d] != run) break;
        run *= b->extent[d];
    }
    return run;
}

static inline const char *pe_box_str(const ferry_box_t *b, char *buf, size_t size) {
    ferry_box_format(b, buf, size);
    return buf;
}

static inline uint64_t pe_pack_below(const ferry_plan_params_t *p) {
    return p && (p->field_mask & FERRY_PLAN_PARAM_PACK_BELOW) ? p->pack_below : FERRY_PLAN_DEFAULT_PACK_BELOW;
}
static inline uint64_t pe_gather_min_run(const ferry_plan_params_t *p) {
    return p && (p->field_mask & FERRY_PLAN_PARAM_GATHER_MIN_RUN) ? p->gather_min_run : FERRY_PLAN_GATHER_MIN_RUN;
}
static inline uint64_t pe_bucket_bytes(const ferry_plan_params_t *p) {
    return p && (p->field_mask & FERRY_PLAN_PARAM_BUCKET_BYTES) ? p->bucket_bytes
                                                                 : FERRY_PLAN_DEFAULT_BUCKET_BYTES;
}

/* Field-wise equality of two ops (no memcmp: struct padding is unspecified). */
static inline bool pe_op_equal(const ferry_copy_op_t *a, const ferry_copy_op_t *b, bool pieces) {
    if (a->tensor != b->tensor || a->flags != b->flags || !ferry_box_equal(&a->box, &b->box) ||
        a->src_rank != b->src_rank || a->src_buffer != b->src_buffer || a->src_offset != b->src_offset ||
        a->dst_rank != b->dst_rank || a->dst_buffer != b->dst_buffer || a->dst_offset != b->dst_offset ||
        a->bytes != b->bytes || a->run_bytes != b->run_bytes || a->runs != b->runs)
        return false;
    if ((a->flags & FERRY_OP_PACK) && a->pack_offset != b->pack_offset) return false;
    if (pieces && (a->src_piece != b->src_piece || a->dst_piece != b->dst_piece)) return false;
    for (uint32_t d = 0; d < a->box.ndim; d++)
        if (a->src_strides[d] != b->src_strides[d] || a->dst_strides[d] != b->dst_strides[d]) return false;
    return true;
}

/* Total order over ops, piece indices included (for multiset comparison). */
static inline int pe_cmp_u64(uint64_t a, uint64_t b) { return a < b ? -1 : a > b; }
static inline int pe_op_cmp(const void *pa, const void *pb) {
    const ferry_copy_op_t *a = pa, *b = pb;
    int c;
    if ((c = pe_cmp_u64(a->dst_rank, b->dst_rank)) || (c = pe_cmp_u64(a->dst_piece, b->dst_piece)) ||
        (c = pe_cmp_u64(a->src_rank, b->src_rank)) || (c = pe_cmp_u64(a->src_piece, b->src_piece)) ||
        (c = pe_cmp_u64(a->tensor, b->tensor)) || (c = pe_cmp_u64(a->box.ndim, b->box.ndim)))
        return c;
    for (uint32_t d = 0; d < a->box.ndim; d++)
        if ((c = pe_cmp_u64((uint64_t)a->box.offset[d], (uint64_t)b->box.offset[d])) ||
            (c = pe_cmp_u64((uint64_t)a->box.extent[d], (uint64_t)b->box.extent[d])))
            return c;
    if ((c = pe_cmp_u64(a->src_offset, b->src_offset)) || (c = pe_cmp_u64(a->dst_offset, b->dst_offset)) ||
        (c = pe_cmp_u64(a->flags, b->flags)) || (c = pe_cmp_u64(a->pack_offset, b->pack_offset)))
        return c;
    return 0;
}

static inline void pe_op_desc(const ferry_model_t *dm, const ferry_copy_op_t *op, char *buf, size_t size) {
    char box[256];
    ferry_tensor_info_t ti = pe_tensor(dm, op->tensor);
    snprintf(buf, size, "%s %s src r%u piece %zu buf %u +%llu -> dst r%u piece %zu buf %u +%llu flags %u",
             ti.name, pe_box_str(&op->box, box, sizeof box), op->src_rank, op->src_piece, op->src_buffer,
             (unsigned long long)op->src_offset, op->dst_rank, op->dst_piece, op->dst_buffer,
             (unsigned long long)op->dst_offset, op->flags);
}

/* Prints the layouts' pieces and the plan being checked (debugging aid). */
static inline void pe_dump(void) {
    char box[256], d[512];
    const ferry_layout_t *ls[2] = {pe_dump_src, pe_dump_dst};
    for (int side = 0; side < 2; side++) {
        if (!ls[side]) continue;
        const ferry_model_t *m = ferry_layout_model(ls[side]);
        for (size_t i = 0; i < ferry_layout_piece_count(ls[side]); i++) {
            const ferry_piece_t *p = &ferry_layout_pieces(ls[side])[i];
            fprintf(stderr, "  %s piece %zu: %s %s rank %u buf %u +%llu strides", side ? "dst" : "src", i,
                    pe_tensor(m, p->tensor).name, pe_box_str(&p->box, box, sizeof box), p->rank, p->buffer,
                    (unsigned long long)p->byte_offset);
            for (uint32_t k = 0; k < p->box.ndim; k++) fprintf(stderr, " %lld", (long long)p->strides[k]);
            fprintf(stderr, "\n");
        }
    }
    const ferry_plan_t *plan = pe_dump_plan;
    if (!plan || !pe_dump_dst) return;
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        const ferry_copy_op_t *op = &ferry_plan_ops(plan)[i];
        pe_op_desc(ferry_layout_model(pe_dump_dst), op, d, sizeof d);
        fprintf(stderr, "  op %zu: %s bytes %llu pack_offset %llu\n", i, d, (unsigned long long)op->bytes,
                (unsigned long long)op->pack_offset);
    }
    for (size_t j = 0; j < ferry_plan_bucket_count(plan); j++) {
        const ferry_plan_bucket_t *b = &ferry_plan_buckets(plan)[j];
        fprintf(stderr, "  bucket %zu: ops %zu+%zu flags %u src buf %u +%llu bytes %llu dst buf %u +%llu\n", j,
                b->first_op, b->op_count, b->flags, b->src_buffer, (unsigned long long)b->src_offset,
                (unsigned long long)b->bytes, b->dst_buffer, (unsigned long long)b->dst_offset);
    }
    for (size_t p = 0; p < ferry_plan_pair_count(plan); p++) {
        const ferry_plan_pair_t *q = &ferry_plan_pairs(plan)[p];
        fprintf(stderr, "  pair %zu: %u->%u ops %zu+%zu buckets %zu+%zu bytes %llu\n", p, q->src_rank, q->dst_rank,
                q->first_op, q->op_count, q->first_bucket, q->bucket_count, (unsigned long long)q->bytes);
    }
    for (uint32_t r = 0; r < ferry_layout_world_size(pe_dump_src); r++)
        fprintf(stderr, "  src rank %u: serves %llu, pack area %llu\n", r,
                (unsigned long long)ferry_plan_src_bytes(plan, r), (unsigned long long)ferry_plan_pack_bytes(plan, r));
}

/* ---- random tiny models and parallel configurations (as test_property.c) ----- */

/* A random small config.json of one of the supported families. */
static inline void pe_random_config(char *buf, size_t size) {
    int fam = (int)pe_rnd(5);
    int64_t kv = PE_PICK(1, 2, 4), qpg = PE_PICK(1, 2), heads = kv * qpg;
    int64_t hidden = PE_PICK(8, 16), inter = PE_PICK(8, 16), layers = 1 + (int64_t)pe_rnd(3);
    int64_t vocab = 17 + (int64_t)pe_rnd(100);
    const char *tie = pe_rnd(2) ? "true" : "false";
    int n = 0;
    if (fam < 3) {
        static const char *types[] = {"llama", "qwen2", "qwen3"};
        n = snprintf(buf, size,
                     "{\"model_type\":\"%s\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
                     "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,"
                     "\"vocab_size\":%lld,\"intermediate_size\":%lld,\"tie_word_embeddings\":%s,"
                     "\"attention_bias\":%s}",
                     types[fam], (long long)hidden, (long long)layers, (long long)heads, (long long)kv,
                     (long long)PE_PICK(2, 4), (long long)vocab, (long long)inter, tie,
                     pe_rnd(2) ? "true" : "false");
    } else if (fam == 3) {
        n = snprintf(buf, size,
                     "{\"model_type\":\"qwen3_moe\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
                     "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":4,"
                     "\"vocab_size\":%lld,\"intermediate_size\":%lld,\"tie_word_embeddings\":%s,"
                     "\"num_experts\":%lld,\"num_experts_per_tok\":1,\"moe_intermediate_size\":%lld,"
                     "\"decoder_sparse_step\":1,\"mlp_only_layers\":[%s]}",
                     (long long)hidden, (long long)layers, (long long)heads, (long long)kv, (long long)vocab,
                     (long long)inter, tie, (long long)PE_PICK(2, 4), (long long)PE_PICK(4, 8),
                     pe_rnd(2) ? "0" : "");
    } else {
        n = snprintf(buf, size,
                     "{\"model_type\":\"deepseek_v3\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
                     "\"num_attention_heads\":%lld,\"vocab_size\":%lld,\"intermediate_size\":%lld,"
                     "\"tie_word_embeddings\":%s,\"q_lora_rank\":%s,\"kv_lora_rank\":4,"
                     "\"qk_nope_head_dim\":%lld,\"qk_rope_head_dim\":2,\"v_head_dim\":2,"
                     "\"n_routed_experts\":%lld,\"n_shared_experts\":%lld,\"num_experts_per_tok\":1,"
                     "\"moe_intermediate_size\":4,\"first_k_dense_replace\":%lld,"
                     "\"num_nextn_predict_layers\":1}",
                     (long long)hidden, (long long)layers, (long long)heads, (long long)vocab, (long long)inter,
                     tie, pe_rnd(2) ? "null" : "6", (long long)PE_PICK(2, 4), (long long)PE_PICK(2, 4),
                     (long long)PE_PICK(0, 1), (long long)pe_rnd(2));
    }
    CHECK(n > 0 && (size_t)n < size);
}

static inline void pe_random_spec(ferry_side_t side, char *buf, size_t size) {
    int n;
    if (side == FERRY_SIDE_TRAIN) {
        n = snprintf(buf, size, "tp=%lld,pp=%lld,dp=%lld,ep=%lld,etp=%lld,cp=%lld", (long long)PE_PICK(1, 2, 4),
                     (long long)PE_PICK(1, 1, 2), (long long)PE_PICK(1, 2), (long long)PE_PICK(1, 1, 2, 4),
                     (long long)PE_PICK(1, 1, 2), (long long)PE_PICK(1, 1, 2));
        if (pe_rnd(4) == 0) n += snprintf(buf + n, size - (size_t)n, ",vpp=2");
        if (pe_rnd(5) == 0) n += snprintf(buf + n, size - (size_t)n, ",experts=grouped_t");
        if (pe_rnd(4) == 0) n += snprintf(buf + n, size - (size_t)n, ",buffers=flat");
        if (pe_rnd(3) == 0) n += snprintf(buf + n, size - (size_t)n, ",vocab_multiple=%lld", (long long)PE_PICK(1, 8));
    } else {
        n = snprintf(buf, size, "tp=%lld,ep=%lld,dp=%lld,replicas=%lld", (long long)PE_PICK(1, 2, 4),
                     (long long)PE_PICK(1, 1, 2), (long long)PE_PICK(1, 1, 2), (long long)PE_PICK(1, 2, 3));
        if (pe_rnd(3) == 0) n += snprintf(buf + n, size - (size_t)n, ",transpose=*proj*");
        if (pe_rnd(4) == 0) n += snprintf(buf + n, size - (size_t)n, ",buffers=flat");
        if (pe_rnd(3) == 0) n += snprintf(buf + n, size - (size_t)n, ",vocab_multiple=%lld", (long long)PE_PICK(1, 16));
    }
    CHECK(n > 0 && (size_t)n < size);
}

/* A trainer layout and an engine layout of one random tiny model, each side
 * with its own model object (tensors are matched by name). The source may
 * include MTP layers the destination lacks. Retries configs until both build. */
static inline void pe_built_pair(ferry_ctx_t *ctx, ferry_model_t **sm, ferry_model_t **dm, ferry_layout_t **src,
                                 ferry_layout_t **dst) {
    char cfg[2048], tspec[256], ispec[256];
    for (int tries = 0; tries < 200; tries++) {
        pe_random_config(cfg, sizeof cfg);
        bool mtp = pe_rnd(2);
        ferry_dtype_t dt = (ferry_dtype_t)PE_PICK(FERRY_DTYPE_BF16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3);
        ferry_model_options_t so = {.field_mask = FERRY_MODEL_OPT_MTP | FERRY_MODEL_OPT_DTYPE, .dtype = dt,
                                    .include_mtp = mtp};
        ferry_model_options_t dopt = so;
        dopt.include_mtp = mtp && pe_rnd(2);
        CHECK_OK(ferry_model_from_hf_config(ctx, "tiny", cfg, strlen(cfg), &so, sm), ferry_ctx_error(ctx));
        CHECK_OK(ferry_model_from_hf_config(ctx, "tiny", cfg, strlen(cfg), &dopt, dm), ferry_ctx_error(ctx));
        pe_random_spec(FERRY_SIDE_TRAIN, tspec, sizeof tspec);
        pe_random_spec(FERRY_SIDE_INFER, ispec, sizeof ispec);
        ferry_parallel_t tp, ip;
        CHECK_OK(ferry_parallel_parse(ctx, FERRY_SIDE_TRAIN, tspec, &tp), ferry_ctx_error(ctx));
        CHECK_OK(ferry_parallel_parse(ctx, FERRY_SIDE_INFER, ispec, &ip), ferry_ctx_error(ctx));
        *src = *dst = NULL;
        if (ferry_layout_build(ctx, *sm, &tp, FERRY_ALL_RANKS, src) == FERRY_OK &&
            ferry_layout_build(ctx, *dm, &ip, FERRY_ALL_RANKS, dst) == FERRY_OK) {
            snprintf(pe_case, sizeof pe_case, "built %s %s mtp=%d/%d train %s -> infer %s", cfg,
                     ferry_dtype_name(dt), (int)so.include_mtp, (int)dopt.include_mtp, tspec, ispec);
            return;
        }
        ferry_layout_destroy(*src);
        ferry_model_destroy(*sm);
        ferry_model_destroy(*dm);
    }
    PE_FAIL("no random config pair built in 200 tries");
}

/* ---- hand-made models and layouts ---------------------------------------------- */

/* A random custom model: 1..4 tensors of 1..3 dims (sometimes 0 or 4) in
 * BF16/F32/F8_E4M3. If
 * *sm is requested separately, it holds the same tensors in another order
 * plus one the destination does not have, so indices differ between sides. */
static inline void pe_hand_models(ferry_ctx_t *ctx, bool separate, ferry_model_t **sm, ferry_model_t **dm) {
    uint32_t n = 1 + (uint32_t)pe_rnd(4);
    char names[5][24];
    ferry_dtype_t dts[5];
    uint32_t ndims[5];
    int64_t shapes[5][4];
    for (uint32_t t = 0; t < n; t++) {
        snprintf(names[t], sizeof names[t], "w%u.weight", t);
        dts[t] = (ferry_dtype_t)PE_PICK(FERRY_DTYPE_BF16, FERRY_DTYPE_F32, FERRY_DTYPE_F8_E4M3);
        ndims[t] = (uint32_t)PE_PICK(0, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 4);
        for (uint32_t d = 0; d < ndims[t]; d++)
            shapes[t][d] = 1 + (int64_t)pe_rnd(ndims[t] == 1 ? 24 : ndims[t] == 2 ? 10 : ndims[t] == 3 ? 5 : 3);
    }
    CHECK_OK(ferry_model_create(ctx, "hand", dm), ferry_ctx_error(ctx));
    for (uint32_t t = 0; t < n; t++)
        CHECK_OK(ferry_model_add_tensor(*dm, names[t], dts[t], ndims[t], shapes[t], NULL), ferry_model_error(*dm));
    if (!separate) {
        *sm = *dm;
        return;
    }
    snprintf(names[n], sizeof names[n], "extra.bias");
    dts[n] = FERRY_DTYPE_F32;
    ndims[n] = 1;
    shapes[n][0] = 3;
    size_t order[5] = {0, 1, 2, 3, 4};
    pe_shuffle(order, n + 1);
    CHECK_OK(ferry_model_create(ctx, "hand-src", sm), ferry_ctx_error(ctx));
    for (uint32_t i = 0; i <= n; i++) {
        size_t t = order[i];
        CHECK_OK(ferry_model_add_tensor(*sm, names[t], dts[t], ndims[t], shapes[t], NULL), ferry_model_error(*sm));
    }
}

/* A hand-made layout before it is added: pieces name buffers of bufs[]. */
typedef struct pe_hand {
    uint32_t world;
    size_t npieces, cap;
    ferry_piece_t *pieces;
    uint32_t nbufs;
    uint32_t *buf_rank;
    ferry_dtype_t *buf_dtype;
    uint64_t *buf_size;
} pe_hand_t;

static inline void pe_hand_free(pe_hand_t *h) {
    free(h->pieces);
    free(h->buf_rank);
    free(h->buf_dtype);
    free(h->buf_size);
    memset(h, 0, sizeof *h);
}

/* Random binary-space tiling of box b, up to 2^depth leaves. */
static inline void pe_tile(const ferry_box_t *b, int depth, ferry_box_t *out, size_t *n, size_t cap) {
    uint32_t dims[FERRY_MAX_DIMS], nd = 0;
    for (uint32_t d = 0; d < b->ndim; d++)
        if (b->extent[d] > 1) dims[nd++] = d;
    if (depth <= 0 || nd == 0 || *n + 2 > cap) {
        out[(*n)++] = *b;
        return;
    }
    uint32_t d = dims[pe_rnd(nd)];
    int64_t cut = 1 + (int64_t)pe_rnd((uint64_t)b->extent[d] - 1);
    ferry_box_t lo = *b, hi = *b;
    lo.extent[d] = cut;
    hi.offset[d] += cut;
    hi.extent[d] -= cut;
    pe_tile(&lo, depth - 1 - (int)pe_rnd(2), out, n, cap);
    pe_tile(&hi, depth - 1 - (int)pe_rnd(2), out, n, cap);
}

/* A random non-empty sub-box. */
static inline ferry_box_t pe_sub_box(const ferry_box_t *b) {
    ferry_box_t s = *b;
    for (uint32_t d = 0; d < b->ndim; d++) {
        s.extent[d] = 1 + (int64_t)pe_rnd((uint64_t)b->extent[d]);
        s.offset[d] = b->offset[d] + (int64_t)pe_rnd((uint64_t)(b->extent[d] - s.extent[d] + 1));
    }
    return s;
}

/* May rank r take box b of tensor t? Destinations (and, with `strict`,
 * sources) must not hold two different overlapping boxes of a tensor on one
 * rank; `strict` also refuses an identical second box on the same rank. */
static inline bool pe_hand_fits(const pe_hand_t *h, uint32_t t, uint32_t r, const ferry_box_t *b, bool is_src,
                                bool strict) {
    for (size_t i = 0; i < h->npieces; i++) {
        const ferry_piece_t *p = &h->pieces[i];
        if (p->tensor != t || p->rank != r) continue;
        bool eq = ferry_box_equal(&p->box, b), ov = ferry_box_intersect(&p->box, b, NULL);
        if (strict && ov) return false;
        if (!is_src && ov && !eq) return false;
    }
    return true;
}

static inline void pe_hand_push(pe_hand_t *h, uint32_t t, uint32_t r, const ferry_box_t *b) {
    if (h->npieces == h->cap) {
        h->cap = h->cap ? 2 * h->cap : 32;
        h->pieces = realloc(h->pieces, h->cap * sizeof *h->pieces);
        CHECK(h->pieces);
    }
    ferry_piece_t *p = &h->pieces[h->npieces++];
    memset(p, 0, sizeof *p);
    p->tensor = t;
    p->rank = r;
    p->box = *b;
}

/* Random pieces of every tensor of m over `world` ranks. Sources: 1..3
 * independent tilings (so boxes of different copies overlap partially), some
 * extra random sub-boxes, and sometimes rank 0 holding everything while the
 * other ranks hold row blocks. Destinations: 1..3 tilings (replicas), each
 * tile on a rank that holds no different overlapping box, some tiles dropped
 * (a destination need not hold the whole model). `strict`: no rank holds two
 * overlapping boxes of a tensor (so piece order cannot matter). Then storage:
 * per rank either one flat U8 buffer with pieces at unaligned offsets, or a
 * buffer per piece; strides row-major, permuted (transposed) and/or padded. */
static inline void pe_hand_gen(const ferry_model_t *m, uint32_t world, bool is_src, bool strict, pe_hand_t *h) {
    memset(h, 0, sizeof *h);
    h->world = world;
    for (uint32_t t = 0; t < ferry_model_tensor_count(m); t++) {
        ferry_tensor_info_t ti = pe_tensor(m, t);
        ferry_box_t whole = ferry_box_of_shape(ti.ndim, ti.shape), tiles[16];
        uint32_t copies = 1 + (uint32_t)pe_rnd(3);
        for (uint32_t c = 0; c < copies; c++) {
            size_t n = 0;
            pe_tile(&whole, (int)pe_rnd(4), tiles, &n, 16);
            for (size_t i = 0; i < n; i++) {
                if (!is_src && c > 0 && pe_rnd(5) == 0) continue; /* dropped destination tile */
                uint32_t r0 = (uint32_t)pe_rnd(world), k;
                for (k = 0; k < world; k++)
                    if (pe_hand_fits(h, t, (r0 + k) % world, &tiles[i], is_src, strict)) break;
                if (k < world) pe_hand_push(h, t, (r0 + k) % world, &tiles[i]);
                else if (is_src && c == 0) PE_FAIL("first source copy must fit"); /* cannot happen */
            }
        }
        if (is_src && pe_rnd(3) == 0)
            for (uint64_t e = 1 + pe_rnd(3); e > 0; e--) {
                ferry_box_t s = pe_sub_box(&whole);
                uint32_t r = (uint32_t)pe_rnd(world);
                if (pe_hand_fits(h, t, r, &s, true, strict)) pe_hand_push(h, t, r, &s);
            }
        if (is_src && !strict && world > 1 && pe_rnd(4) == 0) {
            /* rank 0 holds the whole tensor, ranks 1.. hold row blocks of it */
            pe_hand_push(h, t, 0, &whole);
            int64_t rows = whole.extent[0], blocks = world - 1 < rows ? world - 1 : rows;
            for (int64_t k = 0; k < blocks; k++) {
                ferry_box_t b = whole;
                b.offset[0] = rows * k / blocks;
                b.extent[0] = rows * (k + 1) / blocks - b.offset[0];
                pe_hand_push(h, t, 1 + (uint32_t)k, &b);
            }
        }
    }
    /* storage */
    h->buf_rank = calloc(h->npieces + world + 1, sizeof *h->buf_rank);
    h->buf_dtype = calloc(h->npieces + world + 1, sizeof *h->buf_dtype);
    h->buf_size = calloc(h->npieces + world + 1, sizeof *h->buf_size);
    CHECK(h->buf_rank && h->buf_dtype && h->buf_size);
    for (uint32_t r = 0; r < world; r++) {
        bool flat = pe_rnd(3) == 0;
        uint32_t flat_buf = UINT32_MAX;
        uint64_t cursor = 0;
        for (size_t i = 0; i < h->npieces; i++) {
            ferry_piece_t *p = &h->pieces[i];
            if (p->rank != r) continue;
            ferry_tensor_info_t ti = pe_tensor(m, p->tensor);
            uint64_t esz = ferry_dtype_size(ti.dtype);
            size_t perm[FERRY_MAX_DIMS] = {0, 1, 2, 3, 4, 5, 6, 7};
            if (p->box.ndim > 1 && pe_rnd(2)) pe_shuffle(perm, p->box.ndim); /* transposed storage */
            int64_t s = 1;
            for (int j = (int)p->box.ndim - 1; j >= 0; j--) {
                p->strides[perm[j]] = s;
                s *= p->box.extent[perm[j]] + (pe_rnd(3) == 0 ? (int64_t)pe_rnd(3) : 0); /* padding */
            }
            uint64_t footprint = (uint64_t)s * esz;
            if (flat) {
                if (flat_buf == UINT32_MAX) {
                    flat_buf = h->nbufs++;
                    h->buf_rank[flat_buf] = r;
                    h->buf_dtype[flat_buf] = FERRY_DTYPE_U8;
                }
                cursor = (cursor + esz - 1) / esz * esz + pe_rnd(3) * esz; /* element-aligned, often odd */
                p->buffer = flat_buf;
                p->byte_offset = cursor;
                cursor += footprint;
                h->buf_size[flat_buf] = cursor + pe_rnd(4);
            } else {
                uint32_t b = h->nbufs++;
                uint64_t lead = pe_rnd(3);
                h->buf_rank[b] = r;
                h->buf_dtype[b] = ti.dtype;
                h->buf_size[b] = (lead + pe_rnd(3)) * esz + footprint;
                p->buffer = b;
                p->byte_offset = lead * esz;
            }
        }
    }
}

/* Adds buffers in order and pieces in `order` (NULL: generated order). */
static inline ferry_layout_t *pe_hand_layout(ferry_ctx_t *ctx, const ferry_model_t *m, const pe_hand_t *h,
                                             const size_t *order) {
    ferry_layout_t *l = NULL;
    CHECK_OK(ferry_layout_create(ctx, m, h->world, &l), ferry_ctx_error(ctx));
    for (uint32_t b = 0; b < h->nbufs; b++) {
        char name[32];
        uint32_t idx;
        snprintf(name, sizeof name, "buf%u", b);
        CHECK_OK(ferry_layout_add_buffer(l, h->buf_rank[b], name, h->buf_dtype[b], h->buf_size[b], &idx),
                 ferry_layout_error(l));
        CHECK_EQ_INT(idx, b);
    }
    for (size_t i = 0; i < h->npieces; i++)
        CHECK_OK(ferry_layout_add_piece(l, &h->pieces[order ? order[i] : i]), ferry_layout_error(l));
    return l;
}

/* ---- simulated memory --------------------------------------------------------- */

#define PE_POISON UINT64_MAX      /* destination bytes before the plan runs */
#define PE_JUNK (1ull << 63)      /* source bytes no piece describes */
#define PE_NO_TENSOR 0x7fffffu    /* source tensors the destination model lacks */

/* Tag of byte `byte` of logical element `lin` of the destination model's
 * tensor `tid` (0-based index + 1). */
static inline uint64_t pe_tag(uint32_t tid, uint64_t lin, size_t byte) {
    return ((uint64_t)tid << 40) | (lin << 3) | (uint64_t)byte;
}

typedef struct pe_mem {
    uint32_t n;
    uint64_t *size;
    uint64_t **tag;
    uint8_t **writes; /* how many times the plan wrote each byte (saturating) */
} pe_mem_t;

static inline void pe_mem_init(pe_mem_t *mem, const ferry_layout_t *l, bool poison) {
    mem->n = ferry_layout_buffer_count(l);
    mem->size = calloc(mem->n + 1, sizeof *mem->size);
    mem->tag = calloc(mem->n + 1, sizeof *mem->tag);
    mem->writes = calloc(mem->n + 1, sizeof *mem->writes);
    CHECK(mem->size && mem->tag && mem->writes);
    for (uint32_t b = 0; b < mem->n; b++) {
        ferry_buffer_info_t bi;
        CHECK(ferry_layout_buffer(l, b, &bi));
        mem->size[b] = bi.size;
        mem->tag[b] = malloc(bi.size * sizeof **mem->tag + 1);
        mem->writes[b] = calloc(bi.size + 1, 1);
        CHECK(mem->tag[b] && mem->writes[b]);
        for (uint64_t i = 0; i < bi.size; i++) mem->tag[b][i] = poison ? PE_POISON : PE_JUNK | ((uint64_t)b << 32) | i;
    }
}

static inline void pe_mem_free(pe_mem_t *mem) {
    for (uint32_t b = 0; b < mem->n; b++) {
        free(mem->tag[b]);
        free(mem->writes[b]);
    }
    free(mem->size);
    free(mem->tag);
    free(mem->writes);
}

static inline void pe_mem_reset_dst(pe_mem_t *mem) {
    for (uint32_t b = 0; b < mem->n; b++) {
        memset(mem->writes[b], 0, mem->size[b]);
        for (uint64_t i = 0; i < mem->size[b]; i++) mem->tag[b][i] = PE_POISON;
    }
}

static inline uint32_t pe_tid(const ferry_model_t *dm, const char *name) {
    uint32_t t;
    return ferry_model_find(dm, name, &t) ? t + 1 : PE_NO_TENSOR;
}

/* Writes every source piece's logical bytes into its buffer. */
static inline void pe_fill_src(pe_mem_t *mem, const ferry_layout_t *src, const ferry_model_t *dm) {
    const ferry_model_t *sm = ferry_layout_model(src);
    const ferry_piece_t *ps = ferry_layout_pieces(src);
    for (size_t i = 0; i < ferry_layout_piece_count(src); i++) {
        const ferry_piece_t *p = &ps[i];
        ferry_tensor_info_t ti = pe_tensor(sm, p->tensor);
        size_t esz = ferry_dtype_size(ti.dtype);
        uint32_t tid = pe_tid(dm, ti.name);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        do {
            uint64_t a = pe_addr(p->byte_offset, p->strides, idx, NULL, p->box.ndim, esz), lin = pe_lin(&ti, &p->box, idx);
            for (size_t k = 0; k < esz; k++) mem->tag[p->buffer][a + k] = pe_tag(tid, lin, k);
        } while (pe_next(idx, &p->box));
    }
}

/* Every byte of every destination piece of rank `only` (FERRY_ALL_RANKS: all)
 * holds its logical byte and was written exactly once; every other byte was
 * never written. */
static inline void pe_check_dst(const pe_mem_t *mem, const ferry_layout_t *dst, uint32_t only, const char *how) {
    const ferry_model_t *dm = ferry_layout_model(dst);
    const ferry_piece_t *ps = ferry_layout_pieces(dst);
    uint8_t **covered = calloc(mem->n + 1, sizeof *covered);
    CHECK(covered);
    for (uint32_t b = 0; b < mem->n; b++) CHECK((covered[b] = calloc(mem->size[b] + 1, 1)) != NULL);
    for (size_t i = 0; i < ferry_layout_piece_count(dst); i++) {
        const ferry_piece_t *p = &ps[i];
        if (only != FERRY_ALL_RANKS && p->rank != only) continue;
        ferry_tensor_info_t ti = pe_tensor(dm, p->tensor);
        size_t esz = ferry_dtype_size(ti.dtype);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        do {
            uint64_t a = pe_addr(p->byte_offset, p->strides, idx, NULL, p->box.ndim, esz), lin = pe_lin(&ti, &p->box, idx);
            for (size_t k = 0; k < esz; k++) {
                uint64_t got = mem->tag[p->buffer][a + k], want = pe_tag(p->tensor + 1, lin, k);
                if (got != want || mem->writes[p->buffer][a + k] != 1) {
                    char box[256];
                    PE_FAIL("%s: dst piece %zu (%s %s, rank %u buffer %u) element %llu byte %zu at +%llu: "
                            "tag %llx (want %llx), written %u times (want 1)",
                            how, i, ti.name, pe_box_str(&p->box, box, sizeof box), p->rank, p->buffer,
                            (unsigned long long)lin, k, (unsigned long long)(a + k), (unsigned long long)got,
                            (unsigned long long)want, mem->writes[p->buffer][a + k]);
                }
                covered[p->buffer][a + k] = 1;
            }
        } while (pe_next(idx, &p->box));
    }
    for (uint32_t b = 0; b < mem->n; b++) {
        for (uint64_t i = 0; i < mem->size[b]; i++)
            if (!covered[b][i] && (mem->writes[b][i] != 0 || mem->tag[b][i] != PE_POISON))
                PE_FAIL("%s: dst buffer %u byte %llu belongs to no piece of the plan's ranks but was written", how, b,
                        (unsigned long long)i);
        free(covered[b]);
    }
    free(covered);
}

/* ---- op-level checks and execution -------------------------------------------- */

/* Fields of one op against the pieces it names and plan.h's definitions. */
static inline void pe_check_op(const ferry_copy_op_t *op, size_t i, const ferry_layout_t *src,
                               const ferry_layout_t *dst, const ferry_plan_params_t *params) {
    const ferry_model_t *sm = ferry_layout_model(src), *dm = ferry_layout_model(dst);
    char d[512];
    PE_CHECK(op->tensor < ferry_model_tensor_count(dm), "op %zu", i);
    pe_op_desc(dm, op, d, sizeof d);
    ferry_tensor_info_t ti = pe_tensor(dm, op->tensor);
    ferry_box_t whole = ferry_box_of_shape(ti.ndim, ti.shape);
    PE_CHECK(op->box.ndim == ti.ndim && ferry_box_numel(&op->box) > 0 && ferry_box_contains(&whole, &op->box),
             "op %zu %s", i, d);
    PE_CHECK(op->src_piece < ferry_layout_piece_count(src) && op->dst_piece < ferry_layout_piece_count(dst),
             "op %zu %s", i, d);
    const ferry_piece_t *sp = &ferry_layout_pieces(src)[op->src_piece];
    const ferry_piece_t *dp = &ferry_layout_pieces(dst)[op->dst_piece];
    ferry_tensor_info_t sti = pe_tensor(sm, sp->tensor);
    PE_CHECK(strcmp(sti.name, ti.name) == 0 && sti.dtype == ti.dtype, "op %zu %s: source piece is %s", i, d, sti.name);
    PE_CHECK(sp->rank == op->src_rank && sp->buffer == op->src_buffer, "op %zu %s", i, d);
    PE_CHECK(dp->tensor == op->tensor && dp->rank == op->dst_rank && dp->buffer == op->dst_buffer, "op %zu %s", i, d);
    PE_CHECK(ferry_box_contains(&sp->box, &op->box) && ferry_box_contains(&dp->box, &op->box), "op %zu %s", i, d);
    size_t esz = ferry_dtype_size(ti.dtype);
    PE_CHECK(op->bytes == (uint64_t)ferry_box_numel(&op->box) * esz, "op %zu %s: bytes %llu", i, d,
             (unsigned long long)op->bytes);
    int64_t run = pe_run_elems(&op->box, op->src_strides, op->dst_strides);
    PE_CHECK(op->run_bytes == (uint64_t)run * esz && op->runs * op->run_bytes == op->bytes,
             "op %zu %s: run_bytes %llu runs %llu, want run_bytes %llu", i, d, (unsigned long long)op->run_bytes,
             (unsigned long long)op->runs, (unsigned long long)((uint64_t)run * esz));
    PE_CHECK((op->flags & ~(uint32_t)(FERRY_OP_PACK | FERRY_OP_SCATTER | FERRY_OP_GATHER)) == 0, "op %zu %s", i, d);
    bool scatter = !pe_contig(&op->box, op->dst_strides);
    PE_CHECK(!!(op->flags & FERRY_OP_SCATTER) == scatter, "op %zu %s: SCATTER flag, dst contiguous=%d", i, d,
             !scatter);
    bool contig = pe_contig(&op->box, op->src_strides), pack = !contig || op->bytes < pe_pack_below(params);
    bool limited = params && (params->field_mask & FERRY_PLAN_PARAM_PACK_LIMIT) && params->pack_limit;
    if (limited) /* the pack area may be full: what is not packed is read whole, or run by run if strided
                    in runs of FERRY_PLAN_GATHER_MIN_RUN bytes or more */
        PE_CHECK((!(op->flags & FERRY_OP_PACK) || pack) &&
                     !!(op->flags & FERRY_OP_GATHER) == (!contig && !(op->flags & FERRY_OP_PACK)) &&
                     (!(op->flags & FERRY_OP_GATHER) ||
                      (uint64_t)pe_run_elems(&op->box, op->src_strides, op->src_strides) * esz >= pe_gather_min_run(params)),
                 "op %zu %s: PACK/GATHER flags, src contiguous=%d pack_below=%llu pack_limit %llu", i, d, contig,
                 (unsigned long long)pe_pack_below(params), (unsigned long long)params->pack_limit);
    else
        PE_CHECK(!!(op->flags & FERRY_OP_PACK) == pack && !(op->flags & FERRY_OP_GATHER),
                 "op %zu %s: PACK flag, src contiguous=%d pack_below=%llu", i, d, contig,
                 (unsigned long long)pe_pack_below(params));
}

/* Runs every op element by element (the reference a strided copy engine
 * would do), checking that the op's offset/strides address exactly the
 * bytes its pieces' offset/strides address. */
static inline void pe_exec_ops(const ferry_plan_t *plan, const ferry_layout_t *src, const ferry_layout_t *dst,
                               const ferry_plan_params_t *params, const pe_mem_t *smem, pe_mem_t *dmem) {
    const ferry_model_t *dm = ferry_layout_model(dst);
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        const ferry_copy_op_t *op = &ops[i];
        pe_check_op(op, i, src, dst, params);
        const ferry_piece_t *sp = &ferry_layout_pieces(src)[op->src_piece];
        const ferry_piece_t *dp = &ferry_layout_pieces(dst)[op->dst_piece];
        size_t esz = ferry_dtype_size(pe_tensor(dm, op->tensor).dtype);
        int64_t sshift[FERRY_MAX_DIMS], dshift[FERRY_MAX_DIMS], idx[FERRY_MAX_DIMS] = {0};
        for (uint32_t d = 0; d < op->box.ndim; d++) {
            sshift[d] = op->box.offset[d] - sp->box.offset[d];
            dshift[d] = op->box.offset[d] - dp->box.offset[d];
        }
        do {
            uint64_t sa = pe_addr(op->src_offset, op->src_strides, idx, NULL, op->box.ndim, esz);
            uint64_t da = pe_addr(op->dst_offset, op->dst_strides, idx, NULL, op->box.ndim, esz);
            if (sa != pe_addr(sp->byte_offset, sp->strides, idx, sshift, sp->box.ndim, esz) ||
                da != pe_addr(dp->byte_offset, dp->strides, idx, dshift, dp->box.ndim, esz)) {
                char d[512];
                pe_op_desc(dm, op, d, sizeof d);
                PE_FAIL("op %zu %s: offset/strides address other bytes than its pieces", i, d);
            }
            PE_CHECK(sa + esz <= smem->size[op->src_buffer] && da + esz <= dmem->size[op->dst_buffer], "op %zu", i);
            for (size_t k = 0; k < esz; k++) {
                dmem->tag[op->dst_buffer][da + k] = smem->tag[op->src_buffer][sa + k];
                if (dmem->writes[op->dst_buffer][da + k] < 255) dmem->writes[op->dst_buffer][da + k]++;
            }
        } while (pe_next(idx, &op->box));
    }
}

/* ---- pairs, buckets, pack area ---------------------------------------------- */

/* Pairs ordered by destination, unique, and tiling the op and bucket arrays;
 * each pair's buckets cover exactly its ops in order; bucket sizes; the ops
 * of a bucket adjacent on the source side (pack area or one buffer). */
static inline void pe_check_structure(const ferry_plan_t *plan, const ferry_plan_params_t *params) {
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(plan);
    const ferry_plan_pair_t *pr = ferry_plan_pairs(plan);
    size_t nops = ferry_plan_op_count(plan), nbk = ferry_plan_bucket_count(plan), npr = ferry_plan_pair_count(plan);
    uint8_t *op_seen = calloc(nops + 1, 1), *bk_seen = calloc(nbk + 1, 1);
    CHECK(op_seen && bk_seen);
    uint64_t limit = pe_bucket_bytes(params), pack_below = pe_pack_below(params);
    for (size_t p = 0; p < npr; p++) {
        const ferry_plan_pair_t *q = &pr[p];
        PE_CHECK(p == 0 || pr[p - 1].dst_rank <= q->dst_rank, "pair %zu: pairs not ordered by destination", p);
        for (size_t o = 0; o < p; o++)
            PE_CHECK(pr[o].src_rank != q->src_rank || pr[o].dst_rank != q->dst_rank, "pairs %zu and %zu repeat %u->%u",
                     o, p, q->src_rank, q->dst_rank);
        PE_CHECK(q->op_count > 0 && q->bucket_count > 0 && q->first_op + q->op_count <= nops &&
                     q->first_bucket + q->bucket_count <= nbk,
                 "pair %zu", p);
        uint64_t bytes = 0;
        for (size_t i = q->first_op; i < q->first_op + q->op_count; i++) {
            PE_CHECK(!op_seen[i]++, "op %zu in two pairs", i);
            PE_CHECK(ops[i].src_rank == q->src_rank && ops[i].dst_rank == q->dst_rank, "op %zu of pair %zu", i, p);
            bytes += ops[i].bytes;
        }
        PE_CHECK(bytes == q->bytes, "pair %zu: bytes %llu, its ops %llu", p, (unsigned long long)q->bytes,
                 (unsigned long long)bytes);
        size_t next = q->first_op;
        for (size_t j = q->first_bucket; j < q->first_bucket + q->bucket_count; j++) {
            const ferry_plan_bucket_t *b = &bk[j];
            PE_CHECK(!bk_seen[j]++, "bucket %zu in two pairs", j);
            PE_CHECK(b->first_op == next && b->op_count > 0 && b->first_op + b->op_count <= q->first_op + q->op_count,
                     "bucket %zu of pair %zu does not continue its ops", j, p);
            next += b->op_count;
            PE_CHECK((b->flags & ~(uint32_t)(FERRY_BUCKET_PACKED | FERRY_BUCKET_DIRECT | FERRY_BUCKET_GATHER)) == 0,
                     "bucket %zu", j);
            if (b->flags & FERRY_BUCKET_GATHER) /* one strided op past the pack limit, alone */
                PE_CHECK(b->op_count == 1 && (ops[b->first_op].flags & FERRY_OP_GATHER) && !(b->flags & FERRY_BUCKET_PACKED),
                         "bucket %zu: GATHER with %zu ops, op flags %u", j, b->op_count, ops[b->first_op].flags);
            else
                for (size_t i = b->first_op; i < b->first_op + b->op_count; i++)
                    PE_CHECK(!(ops[i].flags & FERRY_OP_GATHER), "bucket %zu: op %zu is GATHER, the bucket is not", j, i);
            uint64_t cursor = 0;
            for (size_t i = b->first_op; i < b->first_op + b->op_count; i++) {
                const ferry_copy_op_t *op = &ops[i];
                if (b->flags & FERRY_BUCKET_PACKED)
                    PE_CHECK((op->flags & FERRY_OP_PACK) && op->pack_offset == b->src_offset + cursor,
                             "bucket %zu op %zu: packed ops not adjacent in the pack area", j, i);
                else
                    PE_CHECK(!(op->flags & FERRY_OP_PACK) && op->src_buffer == b->src_buffer &&
                                 op->src_offset == b->src_offset + cursor,
                             "bucket %zu op %zu: unpacked ops not adjacent in one source buffer", j, i);
                if (b->flags & FERRY_BUCKET_DIRECT) PE_CHECK(op->dst_buffer == b->dst_buffer, "bucket %zu op %zu", j, i);
                /* an op that can land in place is never staged (it would be copied
                   twice), unless it is small and packed with others */
                if (!(op->flags & FERRY_OP_SCATTER) && !((op->flags & FERRY_OP_PACK) && op->bytes < pack_below))
                    PE_CHECK(b->flags & FERRY_BUCKET_DIRECT, "bucket %zu op %zu: a direct op in a staged bucket", j, i);
                cursor += op->bytes;
            }
            PE_CHECK(cursor == b->bytes, "bucket %zu: bytes %llu, its ops %llu", j, (unsigned long long)b->bytes,
                     (unsigned long long)cursor);
            PE_CHECK(b->bytes <= limit || b->op_count == 1, "bucket %zu: %llu bytes in %zu ops over bucket_bytes %llu", j,
                     (unsigned long long)b->bytes, b->op_count, (unsigned long long)limit);
        }
        PE_CHECK(next == q->first_op + q->op_count, "pair %zu: buckets cover %zu of %zu ops", p, next - q->first_op,
                 q->op_count);
    }
    for (size_t i = 0; i < nops; i++) PE_CHECK(op_seen[i] == 1, "op %zu belongs to no pair", i);
    for (size_t j = 0; j < nbk; j++) PE_CHECK(bk_seen[j] == 1, "bucket %zu belongs to no pair", j);
    free(op_seen);
    free(bk_seen);
}

/* Packing deduplicates across replicas: PACK ops that read the same bytes
 * of one source rank for destination pieces with the same box (engine
 * replicas of one piece) share one pack_offset, so packing does not grow
 * with the number of replicas. (Readers whose destination boxes differ may
 * get separate packs of equal bytes: fragments are per destination box.) */
static const ferry_copy_op_t *pe_sort_ops;
static const ferry_piece_t *pe_sort_dst;
static inline int pe_box_cmp(const ferry_box_t *a, const ferry_box_t *b) {
    int c;
    if ((c = pe_cmp_u64(a->ndim, b->ndim))) return c;
    for (uint32_t d = 0; d < a->ndim; d++)
        if ((c = pe_cmp_u64((uint64_t)a->offset[d], (uint64_t)b->offset[d])) ||
            (c = pe_cmp_u64((uint64_t)a->extent[d], (uint64_t)b->extent[d])))
            return c;
    return 0;
}
static inline int pe_src_key_cmp(const void *pa, const void *pb) {
    const ferry_copy_op_t *a = &pe_sort_ops[*(const size_t *)pa], *b = &pe_sort_ops[*(const size_t *)pb];
    int c;
    if ((c = pe_cmp_u64(a->src_rank, b->src_rank)) || (c = pe_cmp_u64(a->src_buffer, b->src_buffer)) ||
        (c = pe_cmp_u64(a->src_offset, b->src_offset)) || (c = pe_cmp_u64(a->tensor, b->tensor)) ||
        (c = pe_box_cmp(&a->box, &b->box)))
        return c;
    return pe_box_cmp(&pe_sort_dst[a->dst_piece].box, &pe_sort_dst[b->dst_piece].box);
}

/* The source ranks' pack areas, filled by pe_pack_ops. A region is
 * (pack_offset, bytes); regions may overlap only if identical. */
typedef struct pe_pack {
    uint32_t n;
    uint64_t *size;
    uint64_t **tag;
    uint64_t **region;
} pe_pack_t;

static inline void pe_pack_init(pe_pack_t *pk, const ferry_plan_t *plan, const ferry_layout_t *src) {
    pk->n = ferry_layout_world_size(src);
    pk->size = calloc(pk->n, sizeof *pk->size);
    pk->tag = calloc(pk->n, sizeof *pk->tag);
    pk->region = calloc(pk->n, sizeof *pk->region);
    CHECK(pk->size && pk->tag && pk->region);
    for (uint32_t r = 0; r < pk->n; r++) {
        pk->size[r] = ferry_plan_pack_bytes(plan, r);
        pk->tag[r] = malloc(pk->size[r] * sizeof **pk->tag + 1);
        pk->region[r] = calloc(pk->size[r] + 1, sizeof **pk->region);
        CHECK(pk->tag[r] && pk->region[r]);
        for (uint64_t i = 0; i < pk->size[r]; i++) pk->tag[r][i] = PE_POISON;
    }
}

static inline void pe_pack_free(pe_pack_t *pk) {
    for (uint32_t r = 0; r < pk->n; r++) {
        free(pk->tag[r]);
        free(pk->region[r]);
    }
    free(pk->size);
    free(pk->tag);
    free(pk->region);
}

/* What a source rank does before readers come: gather every PACK op's box,
 * in row-major box order, to pack_offset of its pack area. */
static inline void pe_pack_ops(pe_pack_t *pk, const ferry_plan_t *plan, const ferry_layout_t *dst,
                               const pe_mem_t *smem) {
    const ferry_model_t *dm = ferry_layout_model(dst);
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    size_t nops = ferry_plan_op_count(plan);
    for (size_t i = 0; i < nops; i++) {
        const ferry_copy_op_t *op = &ops[i];
        if (!(op->flags & FERRY_OP_PACK)) continue;
        uint32_t r = op->src_rank;
        PE_CHECK(r < pk->n && op->pack_offset + op->bytes <= pk->size[r],
                 "op %zu: pack region [%llu, +%llu) outside pack area of %llu bytes", i,
                 (unsigned long long)op->pack_offset, (unsigned long long)op->bytes, (unsigned long long)pk->size[r]);
        size_t esz = ferry_dtype_size(pe_tensor(dm, op->tensor).dtype);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        uint64_t pos = op->pack_offset, id = ((op->pack_offset + 1) << 24) ^ op->bytes;
        do {
            uint64_t sa = pe_addr(op->src_offset, op->src_strides, idx, NULL, op->box.ndim, esz);
            for (size_t k = 0; k < esz; k++, pos++) {
                uint64_t v = smem->tag[op->src_buffer][sa + k];
                if (pk->region[r][pos] && (pk->region[r][pos] != id || pk->tag[r][pos] != v))
                    PE_FAIL("op %zu: pack region at %llu (%llu bytes) of source rank %u overlaps another one", i,
                            (unsigned long long)op->pack_offset, (unsigned long long)op->bytes, r);
                pk->region[r][pos] = id;
                pk->tag[r][pos] = v;
            }
        } while (pe_next(idx, &op->box));
    }
    size_t *by_src = malloc((nops + 1) * sizeof *by_src), n = 0;
    CHECK(by_src);
    for (size_t i = 0; i < nops; i++)
        if (ops[i].flags & FERRY_OP_PACK) by_src[n++] = i;
    pe_sort_ops = ops;
    pe_sort_dst = ferry_layout_pieces(dst);
    qsort(by_src, n, sizeof *by_src, pe_src_key_cmp);
    for (size_t k = 1; k < n; k++)
        if (pe_src_key_cmp(&by_src[k - 1], &by_src[k]) == 0)
            PE_CHECK(ops[by_src[k - 1]].pack_offset == ops[by_src[k]].pack_offset,
                     "ops %zu and %zu pack the same source box for replicas of one destination box to two places",
                     by_src[k - 1], by_src[k]);
    free(by_src);
}

/* What a reader does: every bucket is one contiguous read (from the pack
 * area if PACKED, else from src_buffer), distributed to its ops in order,
 * each op's bytes in row-major box order; a DIRECT bucket's bytes must land
 * exactly as they are at dst_buffer/dst_offset. */
static inline void pe_run_buckets(const ferry_plan_t *plan, const ferry_layout_t *src, const ferry_layout_t *dst,
                                  const pe_pack_t *pk, const pe_mem_t *smem, pe_mem_t *dmem) {
    const ferry_model_t *dm = ferry_layout_model(dst);
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    const ferry_plan_bucket_t *bk = ferry_plan_buckets(plan);
    const ferry_plan_pair_t *pr = ferry_plan_pairs(plan);
    uint64_t *stage = NULL;
    size_t stage_cap = 0;
    for (size_t p = 0; p < ferry_plan_pair_count(plan); p++) {
        const ferry_plan_pair_t *q = &pr[p];
        for (size_t j = q->first_bucket; j < q->first_bucket + q->bucket_count; j++) {
            const ferry_plan_bucket_t *b = &bk[j];
            if (b->bytes > stage_cap) {
                stage_cap = b->bytes;
                stage = realloc(stage, stage_cap * sizeof *stage);
                CHECK(stage);
            }
            const uint64_t *from;
            if (b->flags & FERRY_BUCKET_PACKED) {
                PE_CHECK(q->src_rank < pk->n && b->src_offset + b->bytes <= pk->size[q->src_rank],
                         "bucket %zu reads past the pack area", j);
                from = pk->tag[q->src_rank] + b->src_offset;
            } else {
                ferry_buffer_info_t bi;
                PE_CHECK(ferry_layout_buffer(src, b->src_buffer, &bi) && bi.rank == q->src_rank &&
                             b->src_offset + b->bytes <= bi.size,
                         "bucket %zu: source buffer %u +%llu", j, b->src_buffer, (unsigned long long)b->src_offset);
                from = smem->tag[b->src_buffer] + b->src_offset;
            }
            if (b->flags & FERRY_BUCKET_GATHER) { /* run by run under the op's source strides */
                const ferry_copy_op_t *op = &ops[b->first_op];
                size_t esz = ferry_dtype_size(pe_tensor(dm, op->tensor).dtype);
                ferry_buffer_info_t bi;
                ferry_layout_buffer(src, b->src_buffer, &bi);
                int64_t idx[FERRY_MAX_DIMS] = {0};
                uint64_t at = 0;
                do {
                    uint64_t sa = pe_addr(b->src_offset, op->src_strides, idx, NULL, op->box.ndim, esz);
                    PE_CHECK(sa + esz <= bi.size, "bucket %zu: gathers past its source buffer", j);
                    for (size_t k = 0; k < esz; k++) stage[at++] = from[sa - b->src_offset + k];
                } while (pe_next(idx, &op->box));
            } else {
                memcpy(stage, from, b->bytes * sizeof *stage);
            }
            uint64_t cursor = 0;
            for (size_t i = b->first_op; i < b->first_op + b->op_count; i++) {
                const ferry_copy_op_t *op = &ops[i];
                size_t esz = ferry_dtype_size(pe_tensor(dm, op->tensor).dtype);
                int64_t idx[FERRY_MAX_DIMS] = {0};
                do {
                    uint64_t da = pe_addr(op->dst_offset, op->dst_strides, idx, NULL, op->box.ndim, esz);
                    if ((b->flags & FERRY_BUCKET_DIRECT) && da != b->dst_offset + cursor)
                        PE_FAIL("bucket %zu is DIRECT but op %zu's byte %llu goes to +%llu, not +%llu", j, i,
                                (unsigned long long)cursor, (unsigned long long)da,
                                (unsigned long long)(b->dst_offset + cursor));
                    PE_CHECK(da + esz <= dmem->size[op->dst_buffer], "op %zu", i);
                    for (size_t k = 0; k < esz; k++, cursor++) {
                        dmem->tag[op->dst_buffer][da + k] = stage[cursor];
                        if (dmem->writes[op->dst_buffer][da + k] < 255) dmem->writes[op->dst_buffer][da + k]++;
                    }
                } while (pe_next(idx, &op->box));
            }
        }
    }
    free(stage);
}

/* Executes a whole plan through pack areas and buckets and checks the
 * destination (`only`: one reader's rank for its local plan). */
static inline void pe_exec_buckets(const ferry_plan_t *plan, const ferry_layout_t *src, const ferry_layout_t *dst,
                                   const pe_mem_t *smem, pe_mem_t *dmem, uint32_t only) {
    pe_pack_t pk;
    pe_pack_init(&pk, plan, src);
    pe_pack_ops(&pk, plan, dst, smem);
    pe_run_buckets(plan, src, dst, &pk, smem, dmem);
    pe_pack_free(&pk);
    pe_check_dst(dmem, dst, only, "pack+buckets");
}

/* ---- statistics ---------------------------------------------------------------- */

/* Per-plan figures (of the ops the plan holds) against its own arrays. */
static inline void pe_check_local_stats(const ferry_plan_t *plan) {
    ferry_plan_stats_t st;
    ferry_plan_stats(plan, &st);
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    uint64_t runs = 0, packed = 0, bytes = 0, gathered = 0;
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        runs += ops[i].runs;
        packed += !!(ops[i].flags & FERRY_OP_PACK);
        gathered += !!(ops[i].flags & FERRY_OP_GATHER);
        bytes += ops[i].bytes;
    }
    PE_CHECK(st.ops == ferry_plan_op_count(plan) && st.runs == runs && st.packed_ops == packed &&
                 st.buckets == ferry_plan_bucket_count(plan) && st.pairs == ferry_plan_pair_count(plan) &&
                 st.op_bytes == bytes && st.gather_ops == gathered,
             "ops %llu runs %llu packed %llu buckets %llu pairs %llu op_bytes %llu", (unsigned long long)st.ops,
             (unsigned long long)st.runs, (unsigned long long)st.packed_ops, (unsigned long long)st.buckets,
             (unsigned long long)st.pairs, (unsigned long long)st.op_bytes);
}

/* Global figures of a global plan against its ops and the layouts. */
static inline void pe_check_global_stats(const ferry_plan_t *plan, const ferry_layout_t *src,
                                         const ferry_layout_t *dst, const ferry_plan_params_t *params) {
    ferry_plan_stats_t st;
    ferry_plan_stats(plan, &st);
    uint32_t ns = ferry_layout_world_size(src), nd = ferry_layout_world_size(dst);
    const ferry_copy_op_t *ops = ferry_plan_ops(plan);
    uint64_t *sb = calloc(ns, sizeof *sb), *db = calloc(nd, sizeof *db), *want_db = calloc(nd, sizeof *want_db);
    uint64_t *pack_end = calloc(ns, sizeof *pack_end);
    CHECK(sb && db && want_db && pack_end);
    uint64_t total = 0;
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        sb[ops[i].src_rank] += ops[i].bytes;
        db[ops[i].dst_rank] += ops[i].bytes;
        total += ops[i].bytes;
        if ((ops[i].flags & FERRY_OP_PACK) && ops[i].pack_offset + ops[i].bytes > pack_end[ops[i].src_rank])
            pack_end[ops[i].src_rank] = ops[i].pack_offset + ops[i].bytes;
    }
    /* per source rank: bytes of distinct pack regions of strided sources with
       runs too short to gather (packed past a pack_limit) */
    uint64_t *short_packed = calloc(ns, sizeof *short_packed);
    size_t *shorts = calloc(ferry_plan_op_count(plan) + 1, sizeof *shorts), nshort = 0;
    CHECK(short_packed && shorts);
    for (size_t i = 0; i < ferry_plan_op_count(plan); i++) {
        const ferry_copy_op_t *op = &ops[i];
        uint64_t esz = op->bytes / (uint64_t)ferry_box_numel(&op->box);
        int64_t run = pe_run_elems(&op->box, op->src_strides, op->src_strides);
        if ((op->flags & FERRY_OP_PACK) && run != ferry_box_numel(&op->box) &&
            (uint64_t)run * esz < pe_gather_min_run(params)) {
            bool seen = false;
            for (size_t k = 0; k < nshort && !seen; k++)
                seen = ops[shorts[k]].src_rank == op->src_rank && ops[shorts[k]].pack_offset == op->pack_offset;
            if (!seen) {
                shorts[nshort++] = i;
                short_packed[op->src_rank] += op->bytes;
            }
        }
    }
    free(shorts);
    const ferry_model_t *dm = ferry_layout_model(dst);
    uint64_t piece_bytes = 0;
    for (size_t i = 0; i < ferry_layout_piece_count(dst); i++) {
        const ferry_piece_t *p = &ferry_layout_pieces(dst)[i];
        uint64_t b = (uint64_t)ferry_box_numel(&p->box) * ferry_dtype_size(pe_tensor(dm, p->tensor).dtype);
        piece_bytes += b;
        want_db[p->rank] += b;
    }
    PE_CHECK(st.bytes == piece_bytes && total == piece_bytes, "stats.bytes %llu, ops %llu, dst pieces %llu",
             (unsigned long long)st.bytes, (unsigned long long)total, (unsigned long long)piece_bytes);
    uint64_t sum_s = 0, sum_d = 0, max_s = 0, sum_pack = 0;
    uint32_t serving = 0;
    for (uint32_t r = 0; r < ns; r++) {
        uint64_t b = ferry_plan_src_bytes(plan, r), pb = ferry_plan_pack_bytes(plan, r);
        PE_CHECK(b == sb[r], "src_bytes(%u) = %llu, its ops %llu", r, (unsigned long long)b, (unsigned long long)sb[r]);
        PE_CHECK(pb >= pack_end[r], "pack_bytes(%u) = %llu < end of a region %llu", r, (unsigned long long)pb,
                 (unsigned long long)pack_end[r]);
        PE_CHECK(pb == 0 || pack_end[r] > 0, "pack_bytes(%u) = %llu but nothing is packed", r, (unsigned long long)pb);
        if (params && (params->field_mask & FERRY_PLAN_PARAM_PACK_LIMIT) && params->pack_limit)
            PE_CHECK(pb <= params->pack_limit + short_packed[r],
                     "pack_bytes(%u) = %llu over pack_limit %llu (+ %llu of short-run sources, packed anyway)", r,
                     (unsigned long long)pb, (unsigned long long)params->pack_limit,
                     (unsigned long long)short_packed[r]);
        sum_s += b;
        sum_pack += pb;
        serving += b > 0;
        if (b > max_s) max_s = b;
    }
    for (uint32_t r = 0; r < nd; r++) {
        uint64_t b = ferry_plan_dst_bytes(plan, r);
        PE_CHECK(b == db[r] && b == want_db[r], "dst_bytes(%u) = %llu, its ops %llu, its pieces %llu", r,
                 (unsigned long long)b, (unsigned long long)db[r], (unsigned long long)want_db[r]);
        sum_d += b;
    }
    PE_CHECK(ferry_plan_src_bytes(plan, ns) == 0 && ferry_plan_dst_bytes(plan, nd) == 0 &&
                 ferry_plan_pack_bytes(plan, ns) == 0 && ferry_plan_pack_bytes(plan, UINT32_MAX) == 0,
             "figures of out-of-range ranks");
    PE_CHECK(sum_s == st.bytes && sum_d == st.bytes, "src sum %llu dst sum %llu bytes %llu", (unsigned long long)sum_s,
             (unsigned long long)sum_d, (unsigned long long)st.bytes);
    PE_CHECK(st.src_max == max_s && st.src_lower_bound <= st.src_max && st.src_serving == serving,
             "src_max %llu (max %llu) lower bound %llu serving %u (%u)", (unsigned long long)st.src_max,
             (unsigned long long)max_s, (unsigned long long)st.src_lower_bound, st.src_serving, serving);
    PE_CHECK(st.pack_bytes == sum_pack, "stats.pack_bytes %llu, sum %llu", (unsigned long long)st.pack_bytes,
             (unsigned long long)sum_pack);
    /* per-host load: labels are arbitrary numbers; default one host per rank */
    uint64_t host_max = 0;
    for (uint32_t r = 0; r < ns; r++) {
        uint64_t h = 0;
        for (uint32_t o = 0; o < ns; o++) {
            bool same = params && (params->field_mask & FERRY_PLAN_PARAM_SRC_HOSTS)
                            ? params->src_hosts[o] == params->src_hosts[r]
                            : o == r;
            if (same) h += sb[o];
        }
        if (h > host_max) host_max = h;
    }
    PE_CHECK(st.src_host_max == host_max, "src_host_max %llu, want %llu", (unsigned long long)st.src_host_max,
             (unsigned long long)host_max);
    /* each fragment reaches at least one destination holder through one op,
     * and each route groups at least one fragment */
    PE_CHECK(st.bytes == 0 || (st.fragments > 0 && st.routes > 0), "fragments %llu routes %llu",
             (unsigned long long)st.fragments, (unsigned long long)st.routes);
    PE_CHECK(st.routes <= st.fragments && st.fragments <= ferry_plan_op_count(plan), "fragments %llu routes %llu ops %zu",
             (unsigned long long)st.fragments, (unsigned long long)st.routes, ferry_plan_op_count(plan));
    free(sb);
    free(db);
    free(want_db);
    free(pack_end);
    free(short_packed);
}

/* The first tensor (name) that some destination rank holds as two
 * different overlapping boxes, which plan.h makes the planner refuse;
 * NULL if none. Engine builders produce this for tied embeddings under
 * DP attention (embedding split over attention TP, lm_head over full TP). */
/* One past the last byte a piece addresses. */
static inline uint64_t pe_span_end(const ferry_layout_t *l, const ferry_piece_t *q) {
    uint64_t last = 0;
    for (uint32_t d = 0; d < q->box.ndim; d++) last += (uint64_t)(q->box.extent[d] - 1) * (uint64_t)q->strides[d];
    return q->byte_offset + (last + 1) * ferry_dtype_size(pe_tensor(ferry_layout_model(l), q->tensor).dtype);
}

/* The tensor of two pieces of one destination rank whose boxes overlap and
 * whose byte spans in one buffer meet (which plan.h refuses), or NULL. */
static inline const char *pe_dst_overlap(const ferry_layout_t *dst) {
    const ferry_piece_t *ps = ferry_layout_pieces(dst);
    for (uint32_t r = 0; r < ferry_layout_world_size(dst); r++) {
        size_t first, count;
        ferry_layout_rank_pieces(dst, r, &first, &count);
        for (size_t i = first; i < first + count; i++)
            for (size_t j = first; j < i; j++)
                if (ps[i].tensor == ps[j].tensor && ps[i].buffer == ps[j].buffer &&
                    ferry_box_intersect(&ps[i].box, &ps[j].box, NULL) && ps[i].byte_offset < pe_span_end(dst, &ps[j]) &&
                    ps[j].byte_offset < pe_span_end(dst, &ps[i]))
                    return pe_tensor(ferry_layout_model(dst), ps[i].tensor).name;
    }
    return NULL;
}

/* plan.h: "no assignment can make src_max smaller than src_lower_bound".
 * Independent check for small source worlds: every destination byte may be
 * served by any source rank holding its element; by max-flow/min-cut the
 * best fractional assignment has max load T* = max over rank sets G of
 * (bytes only ranks in G hold) / |G|, and no assignment beats T*, so a
 * valid bound is at most ceil(T*), and src_max is at least ceil(T*). */
static inline void pe_check_lower_bound(const ferry_plan_t *plan, const ferry_layout_t *src, const ferry_layout_t *dst) {
    uint32_t ns = ferry_layout_world_size(src);
    if (ns > 12) return;
    const ferry_model_t *sm = ferry_layout_model(src), *dm = ferry_layout_model(dst);
    uint64_t *w = calloc((size_t)1 << ns, sizeof *w); /* bytes by exact holder set */
    CHECK(w);
    for (size_t i = 0; i < ferry_layout_piece_count(dst); i++) {
        const ferry_piece_t *dp = &ferry_layout_pieces(dst)[i];
        ferry_tensor_info_t ti = pe_tensor(dm, dp->tensor);
        int64_t numel = ferry_box_numel(&dp->box);
        uint16_t *mask = calloc((size_t)numel + 1, sizeof *mask);
        CHECK(mask);
        for (size_t j = 0; j < ferry_layout_piece_count(src); j++) {
            const ferry_piece_t *sp = &ferry_layout_pieces(src)[j];
            ferry_box_t x;
            if (strcmp(pe_tensor(sm, sp->tensor).name, ti.name) != 0 || !ferry_box_intersect(&sp->box, &dp->box, &x))
                continue;
            int64_t idx[FERRY_MAX_DIMS] = {0};
            do { /* local index of x's element within dp's box, row-major */
                int64_t k = 0;
                for (uint32_t d = 0; d < dp->box.ndim; d++)
                    k = k * dp->box.extent[d] + (x.offset[d] - dp->box.offset[d] + idx[d]);
                mask[k] |= (uint16_t)(1u << sp->rank);
            } while (pe_next(idx, &x));
        }
        for (int64_t k = 0; k < numel; k++) w[mask[k]] += ferry_dtype_size(ti.dtype);
        free(mask);
    }
    for (uint32_t b = 0; b < ns; b++) /* w[G] = bytes whose holder set is inside G */
        for (size_t g = 0; g < ((size_t)1 << ns); g++)
            if (g & ((size_t)1 << b)) w[g] += w[g ^ ((size_t)1 << b)];
    ferry_plan_stats_t st;
    ferry_plan_stats(plan, &st);
    uint64_t best = 0; /* ceil(T*) */
    for (size_t g = 1; g < ((size_t)1 << ns); g++) {
        uint64_t k = (uint64_t)__builtin_popcountll(g), t = (w[g] + k - 1) / k;
        if (t > best) best = t;
    }
    PE_CHECK(st.src_lower_bound <= best && st.src_max >= best,
             "src_lower_bound %llu, src_max %llu, best possible max load %llu", (unsigned long long)st.src_lower_bound,
             (unsigned long long)st.src_max, (unsigned long long)best);
    free(w);
}

/* Everything test_plan_reference checks about one global plan. */
static inline void pe_check_plan(ferry_plan_t *plan, const ferry_layout_t *src, const ferry_layout_t *dst,
                                 const ferry_plan_params_t *params) {
    pe_dump_plan = plan;
    ferry_status_t st = ferry_plan_verify(plan, src, dst);
    if (st != FERRY_OK) PE_FAIL("ferry_plan_verify: %s (%s)", ferry_status_name(st), ferry_plan_error(plan));
    pe_check_structure(plan, params);
    pe_check_local_stats(plan);
    pe_check_global_stats(plan, src, dst, params);
    pe_check_lower_bound(plan, src, dst);
    pe_mem_t smem, dmem;
    pe_mem_init(&smem, src, false);
    pe_mem_init(&dmem, dst, true);
    pe_fill_src(&smem, src, ferry_layout_model(dst));
    pe_exec_ops(plan, src, dst, params, &smem, &dmem);
    pe_check_dst(&dmem, dst, FERRY_ALL_RANKS, "op by op");
    pe_mem_reset_dst(&dmem);
    pe_exec_buckets(plan, src, dst, &smem, &dmem, FERRY_ALL_RANKS);
    pe_mem_free(&smem);
    pe_mem_free(&dmem);
    pe_dump_plan = NULL;
}

/* Random planner parameters: tiny buckets, packing everything or only
 * non-contiguous sources, random host labels shared across the two sides. */
typedef struct pe_params {
    ferry_plan_params_t p;
    uint32_t src_hosts[512], dst_hosts[512];
} pe_params_t;

static inline void pe_random_params(pe_params_t *pp, uint32_t nsrc, uint32_t ndst) {
    CHECK(nsrc <= 512 && ndst <= 512);
    memset(pp, 0, sizeof *pp);
    ferry_plan_params_t *p = &pp->p;
    if (pe_rnd(4)) {
        p->field_mask |= FERRY_PLAN_PARAM_BUCKET_BYTES;
        p->bucket_bytes = pe_rnd(8) ? 64 + pe_rnd(4033) : 1; /* 1: every op a bucket of its own */
    }
    if (pe_rnd(4)) {
        p->field_mask |= FERRY_PLAN_PARAM_PACK_BELOW;
        p->pack_below = (uint64_t)PE_PICK(0, 0, 1 << 20, 1 + (int64_t)pe_rnd(256));
    }
    uint32_t hosts = 1 + (uint32_t)pe_rnd(3);
    if (pe_rnd(2)) {
        p->field_mask |= FERRY_PLAN_PARAM_SRC_HOSTS;
        for (uint32_t r = 0; r < nsrc; r++) pp->src_hosts[r] = 100 + (uint32_t)pe_rnd(hosts);
        p->src_hosts = pp->src_hosts;
    }
    if (pe_rnd(2)) {
        p->field_mask |= FERRY_PLAN_PARAM_DST_HOSTS;
        for (uint32_t r = 0; r < ndst; r++) pp->dst_hosts[r] = 100 + (uint32_t)pe_rnd(hosts + 1);
        p->dst_hosts = pp->dst_hosts;
    }
    if (pe_rnd(3) == 0) { /* a pack area too small for some strided sources: they are gathered */
        p->field_mask |= FERRY_PLAN_PARAM_PACK_LIMIT;
        p->pack_limit = (uint64_t)PE_PICK(0, 1, 1 + (int64_t)pe_rnd(512), 1 + (int64_t)pe_rnd(4096));
        if (pe_rnd(4)) { /* tiny models have short rows: gather them too, mostly */
            p->field_mask |= FERRY_PLAN_PARAM_GATHER_MIN_RUN;
            p->gather_min_run = (uint64_t)PE_PICK(0, 1, 4, 16);
        }
    }
}

static inline void pe_params_desc(const ferry_plan_params_t *p, char *buf, size_t size) {
    if (!p) {
        snprintf(buf, size, "params NULL");
        return;
    }
    snprintf(buf, size, "mask %llx bucket_bytes %llu pack_below %llu pack_limit %llu gather_min_run %llu",
             (unsigned long long)p->field_mask, (unsigned long long)p->bucket_bytes, (unsigned long long)p->pack_below,
             (unsigned long long)p->pack_limit, (unsigned long long)p->gather_min_run);
}

#endif
