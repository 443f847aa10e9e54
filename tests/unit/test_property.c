/* Property tests over many random (architecture, parallel config) pairs:
 * every layout that builds must (1) validate, (2) pass an independent
 * element-by-element simulation: each element written to buffer bytes no
 * other element uses, every element held, and equally often within a
 * tensor, (3) build identically twice and rank by rank, and (4) have every
 * single-piece mutation caught by the validator. */
#include <stdint.h>

#include "check.h"

static uint64_t rnd(void) { return rng_next(); }
static int64_t pick(const int64_t *v, size_t n) { return v[rnd() % n]; }
#define PICK(...) pick((const int64_t[]){__VA_ARGS__}, sizeof((const int64_t[]){__VA_ARGS__}) / 8)

/* A random small config.json for one of the supported families. */
static void random_config(char *buf, size_t size) {
    int fam = (int)(rnd() % 5);
    int64_t kv = PICK(1, 2, 4), qpg = PICK(1, 2), heads = kv * qpg;
    int64_t hidden = PICK(8, 16), inter = PICK(8, 16, 32), layers = 1 + (int64_t)(rnd() % 6);
    int64_t vocab = 17 + (int64_t)(rnd() % 200);
    const char *tie = rnd() % 2 ? "true" : "false";
    int n = 0;
    switch (fam) {
    case 0:
    case 1:
    case 2: {
        static const char *types[] = {"llama", "qwen2", "qwen3"};
        n = snprintf(buf, size,
                     "{\"model_type\":\"%s\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
                     "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":%lld,"
                     "\"vocab_size\":%lld,\"intermediate_size\":%lld,\"tie_word_embeddings\":%s,"
                     "\"attention_bias\":%s,\"mlp_bias\":%s}",
                     types[fam], (long long)hidden, (long long)layers, (long long)heads, (long long)kv,
                     (long long)PICK(2, 4), (long long)vocab, (long long)inter, tie,
                     rnd() % 2 ? "true" : "false", rnd() % 3 == 0 ? "true" : "false");
        break;
    }
    case 3:
        n = snprintf(buf, size,
                     "{\"model_type\":\"qwen3_moe\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
                     "\"num_attention_heads\":%lld,\"num_key_value_heads\":%lld,\"head_dim\":4,"
                     "\"vocab_size\":%lld,\"intermediate_size\":%lld,\"tie_word_embeddings\":%s,"
                     "\"num_experts\":%lld,\"num_experts_per_tok\":1,\"moe_intermediate_size\":%lld,"
                     "\"decoder_sparse_step\":%lld,\"mlp_only_layers\":[%s]}",
                     (long long)hidden, (long long)layers, (long long)heads, (long long)kv,
                     (long long)vocab, (long long)inter, tie, (long long)PICK(2, 4, 8),
                     (long long)PICK(4, 8, 16), (long long)PICK(1, 1, 2), rnd() % 2 ? "0" : "");
        break;
    default:
        n = snprintf(buf, size,
                     "{\"model_type\":\"deepseek_v3\",\"hidden_size\":%lld,\"num_hidden_layers\":%lld,"
                     "\"num_attention_heads\":%lld,\"vocab_size\":%lld,\"intermediate_size\":%lld,"
                     "\"tie_word_embeddings\":%s,\"q_lora_rank\":%s,\"kv_lora_rank\":%lld,"
                     "\"qk_nope_head_dim\":%lld,\"qk_rope_head_dim\":2,\"v_head_dim\":%lld,"
                     "\"n_routed_experts\":%lld,\"n_shared_experts\":%lld,\"num_experts_per_tok\":1,"
                     "\"moe_intermediate_size\":%lld,\"first_k_dense_replace\":%lld,"
                     "\"topk_method\":\"%s\",\"num_nextn_predict_layers\":1}",
                     (long long)hidden, (long long)layers, (long long)heads, (long long)vocab,
                     (long long)inter, tie, rnd() % 2 ? "null" : "6", (long long)PICK(4, 8),
                     (long long)PICK(2, 4), (long long)PICK(2, 4), (long long)PICK(2, 4, 8),
                     (long long)PICK(0, 1, 2), (long long)PICK(4, 8), (long long)(rnd() % 3),
                     rnd() % 2 ? "noaux_tc" : "greedy");
        break;
    }
    CHECK(n > 0 && (size_t)n < size);
}

static void random_spec(ferry_side_t side, char *buf, size_t size) {
    if (side == FERRY_SIDE_TRAIN) {
        int n = snprintf(buf, size, "tp=%lld,pp=%lld,dp=%lld,ep=%lld,etp=%lld,cp=%lld",
                         (long long)PICK(1, 2, 4), (long long)PICK(1, 1, 2, 3), (long long)PICK(1, 2),
                         (long long)PICK(1, 1, 2, 4), (long long)PICK(1, 1, 2), (long long)PICK(1, 1, 2));
        if (rnd() % 4 == 0) n += snprintf(buf + n, size - (size_t)n, ",vpp=2");
        if (rnd() % 5 == 0) n += snprintf(buf + n, size - (size_t)n, ",pp_first=1");
        if (rnd() % 5 == 0) n += snprintf(buf + n, size - (size_t)n, ",experts=grouped_t");
        if (rnd() % 5 == 0) n += snprintf(buf + n, size - (size_t)n, ",buffers=flat");
        if (rnd() % 3 == 0) n += snprintf(buf + n, size - (size_t)n, ",vocab_multiple=%lld", (long long)PICK(1, 8, 32));
    } else {
        int n = snprintf(buf, size, "tp=%lld,ep=%lld,dp=%lld,replicas=%lld", (long long)PICK(1, 2, 4, 8),
                         (long long)PICK(1, 1, 2, 4), (long long)PICK(1, 1, 2), (long long)PICK(1, 2));
        if (rnd() % 4 == 0) n += snprintf(buf + n, size - (size_t)n, ",transpose=*proj*");
        if (rnd() % 5 == 0) n += snprintf(buf + n, size - (size_t)n, ",buffers=flat");
        if (rnd() % 3 == 0) n += snprintf(buf + n, size - (size_t)n, ",vocab_multiple=%lld", (long long)PICK(1, 16));
    }
}

static size_t dtype_size_of(const ferry_model_t *m, uint32_t t) {
    ferry_tensor_info_t ti;
    ferry_model_tensor(m, t, &ti);
    return ferry_dtype_size(ti.dtype);
}

/* Independent simulation: every byte written at most once, counts per
 * element uniform within a tensor and at least 1. */
static void simulate(const ferry_model_t *m, const ferry_layout_t *l) {
    uint32_t nt = ferry_model_tensor_count(m), nb = ferry_layout_buffer_count(l);
    uint64_t *base = calloc(nt + 1, sizeof *base);
    CHECK(base);
    for (uint32_t t = 0; t < nt; t++) {
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, t, &ti);
        uint64_t e = 1;
        for (uint32_t d = 0; d < ti.ndim; d++) e *= (uint64_t)ti.shape[d];
        base[t + 1] = base[t] + e;
    }
    uint32_t *count = calloc(base[nt] ? base[nt] : 1, sizeof *count);
    int64_t **owner = calloc(nb ? nb : 1, sizeof *owner);
    CHECK(count && owner);
    for (uint32_t b = 0; b < nb; b++) {
        ferry_buffer_info_t bi;
        CHECK(ferry_layout_buffer(l, b, &bi));
        owner[b] = malloc(bi.size * sizeof **owner);
        CHECK(owner[b]);
        for (uint64_t i = 0; i < bi.size; i++) owner[b][i] = -1;
    }
    const ferry_piece_t *pieces = ferry_layout_pieces(l);
    for (size_t i = 0; i < ferry_layout_piece_count(l); i++) {
        const ferry_piece_t *p = &pieces[i];
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, p->tensor, &ti);
        size_t esz = dtype_size_of(m, p->tensor);
        int64_t idx[FERRY_MAX_DIMS] = {0};
        int64_t numel = ferry_box_numel(&p->box);
        for (int64_t e = 0; e < numel; e++) {
            uint64_t off = p->byte_offset, lin = 0;
            for (uint32_t d = 0; d < p->box.ndim; d++) {
                off += (uint64_t)(idx[d] * p->strides[d]) * esz;
                lin = lin * (uint64_t)ti.shape[d] + (uint64_t)(p->box.offset[d] + idx[d]);
            }
            uint64_t id = base[p->tensor] + lin;
            for (size_t k = 0; k < esz; k++) {
                if (owner[p->buffer][off + k] != -1) {
                    fprintf(stderr, "byte %llu of buffer %u written twice (tensor %s)\n",
                            (unsigned long long)(off + k), p->buffer, ti.name);
                    exit(1);
                }
                owner[p->buffer][off + k] = (int64_t)id;
            }
            count[id]++;
            for (int d = (int)p->box.ndim - 1; d >= 0; d--) { /* odometer */
                if (++idx[d] < p->box.extent[d]) break;
                idx[d] = 0;
            }
        }
    }
    for (uint32_t t = 0; t < nt; t++) {
        for (uint64_t id = base[t]; id < base[t + 1]; id++) {
            if (count[id] == 0 || count[id] != count[base[t]]) {
                ferry_tensor_info_t ti;
                ferry_model_tensor(m, t, &ti);
                fprintf(stderr, "tensor %s element %llu held %u times (first element %u)\n", ti.name,
                        (unsigned long long)(id - base[t]), count[id], count[base[t]]);
                exit(1);
            }
        }
    }
    for (uint32_t b = 0; b < nb; b++) free(owner[b]);
    free(owner);
    free(count);
    free(base);
}

/* The rank-only build must produce exactly the full build's pieces of that rank. */
static void check_local(ferry_ctx_t *ctx, const ferry_model_t *m, const ferry_layout_t *full,
                        uint32_t rank) {
    ferry_layout_t *one = NULL;
    CHECK_OK(ferry_layout_build(ctx, m, ferry_layout_parallel(full), rank, &one), ferry_ctx_error(ctx));
    size_t f1, c1, f2, c2;
    ferry_layout_rank_pieces(full, rank, &f1, &c1);
    ferry_layout_rank_pieces(one, rank, &f2, &c2);
    CHECK_EQ_INT(c2, c1);
    CHECK_EQ_INT(ferry_layout_piece_count(one), c1);
    for (size_t i = 0; i < c1; i++) {
        const ferry_piece_t *a = &ferry_layout_pieces(full)[f1 + i], *b = &ferry_layout_pieces(one)[f2 + i];
        CHECK(a->tensor == b->tensor && ferry_box_equal(&a->box, &b->box));
        CHECK(a->byte_offset == b->byte_offset && a->rank == b->rank);
        CHECK(memcmp(a->strides, b->strides, sizeof a->strides) == 0);
        ferry_buffer_info_t ba, bb;
        ferry_layout_buffer(full, a->buffer, &ba);
        ferry_layout_buffer(one, b->buffer, &bb);
        CHECK(strcmp(ba.name, bb.name) == 0 && ba.size == bb.size);
    }
    ferry_layout_destroy(one);
}

/* Copies a layout by hand, applying one mutation to piece `victim`:
 * 0 drop it, 1 shrink its box by one along dim 0, 2 shift its box by one. */
static ferry_status_t mutated_copy(ferry_ctx_t *ctx, const ferry_model_t *m, const ferry_layout_t *l,
                                   size_t victim, int kind, ferry_layout_t **out) {
    ferry_layout_t *c = NULL;
    CHECK_OK(ferry_layout_create(ctx, m, ferry_layout_world_size(l), &c), ferry_ctx_error(ctx));
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi;
        ferry_layout_buffer(l, b, &bi);
        uint32_t idx;
        CHECK_OK(ferry_layout_add_buffer(c, bi.rank, bi.name, bi.dtype, bi.size, &idx), ferry_layout_error(c));
        CHECK_EQ_INT(idx, b);
    }
    for (size_t i = 0; i < ferry_layout_piece_count(l); i++) {
        ferry_piece_t p = ferry_layout_pieces(l)[i];
        if (i == victim) {
            if (kind == 0) continue;
            if (kind == 1) p.box.extent[0] -= 1;
            if (kind == 2) p.box.offset[0] += 1;
        }
        ferry_status_t st = ferry_layout_add_piece(c, &p);
        if (st != FERRY_OK) { /* e.g. a shifted box falls outside the tensor: also caught */
            ferry_layout_destroy(c);
            return st;
        }
    }
    *out = c;
    return FERRY_OK;
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    int built = 0, rejected = 0, mutations = 0;
    char cfg[2048], spec[256];
    for (int iter = 0; iter < 2000; iter++) {
        random_config(cfg, sizeof cfg);
        ferry_model_options_t opts = {.field_mask = FERRY_MODEL_OPT_MTP, .include_mtp = rnd() % 2 == 0};
        ferry_model_t *m = NULL;
        CHECK_OK(ferry_model_from_hf_config(ctx, "random", cfg, strlen(cfg), &opts, &m), ferry_ctx_error(ctx));
        ferry_side_t side = rnd() % 2 ? FERRY_SIDE_TRAIN : FERRY_SIDE_INFER;
        random_spec(side, spec, sizeof spec);
        ferry_parallel_t par;
        CHECK_OK(ferry_parallel_parse(ctx, side, spec, &par), ferry_ctx_error(ctx));
        ferry_layout_t *l = NULL;
        ferry_status_t st = ferry_layout_build(ctx, m, &par, FERRY_ALL_RANKS, &l);
        if (st != FERRY_OK) {
            /* configurations that do not fit the model are refused with a reason */
            CHECK(st == FERRY_ERR_INVALID_CONFIG || st == FERRY_ERR_UNSUPPORTED);
            CHECK(ferry_ctx_error(ctx)[0] != '\0');
            rejected++;
            ferry_model_destroy(m);
            continue;
        }
        built++;
        ferry_coverage_t cov;
        st = ferry_layout_validate(l, &cov);
        if (st != FERRY_OK) fprintf(stderr, "config %s\nspec %s\n", cfg, spec);
        CHECK_OK(st, ferry_layout_error(l));
        CHECK(cov.min_replicas >= 1);
        simulate(m, l);
        ferry_layout_t *again = NULL;
        CHECK_OK(ferry_layout_build(ctx, m, &par, FERRY_ALL_RANKS, &again), ferry_ctx_error(ctx));
        CHECK(ferry_layout_digest(again) == ferry_layout_digest(l));
        ferry_layout_destroy(again);
        check_local(ctx, m, l, (uint32_t)(rnd() % ferry_layout_world_size(l)));
        if (iter % 4 == 0 && ferry_layout_piece_count(l) > 0) {
            size_t victim = rnd() % ferry_layout_piece_count(l);
            int kind = (int)(rnd() % 3);
            ferry_layout_t *c = NULL;
            ferry_piece_t v = ferry_layout_pieces(l)[victim];
            /* A tensor every holder keeps whole (a norm) stays uniformly covered
             * when one holder drops it: no layout-only check can tell that from
             * a layout that replicates it less, so drops are only required to be
             * caught for tensors split into several boxes. */
            bool split = false;
            for (size_t i = 0; i < ferry_layout_piece_count(l); i++) {
                const ferry_piece_t *q = &ferry_layout_pieces(l)[i];
                if (q->tensor == v.tensor && !ferry_box_equal(&q->box, &v.box)) split = true;
            }
            if (kind == 0 && !split) kind = 1 + (int)(rnd() % 2);
            if (mutated_copy(ctx, m, l, victim, kind, &c) == FERRY_OK) {
                /* shrinking an extent-1 box removes it: same as dropping */
                st = ferry_layout_validate(c, NULL);
                if (st != FERRY_ERR_COVERAGE) {
                    fprintf(stderr, "mutation %d of piece %zu (tensor %u, extent0 %lld) not caught: %s\n",
                            kind, victim, v.tensor, (long long)v.box.extent[0], ferry_status_name(st));
                    exit(1);
                }
                ferry_layout_destroy(c);
            }
            mutations++;
        }
        ferry_layout_destroy(l);
        ferry_model_destroy(m);
    }
    printf("%d layouts built and checked, %d configurations refused, %d mutations caught\n", built,
           rejected, mutations);
    CHECK(built >= 400 && mutations >= 100);
    ferry_ctx_destroy(ctx);
    return 0;
}
