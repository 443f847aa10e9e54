/* Model specs: the five bundled Hugging Face configs (parameter totals,
 * tensor counts, exact checkpoint names/dtypes/shapes, MoE layer rules,
 * architecture fields), small synthetic configs for the per-family options,
 * and hand-built custom specs (ferry_model_create + ferry_model_add_tensor). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* ---- helpers ------------------------------------------------------------ */

/* The tensor `name` exists with this dtype and shape (d1 == 0: 1-d). */
static void expect_tensor_at(int line, const ferry_model_t *m, const char *name, ferry_dtype_t dtype,
                             int64_t d0, int64_t d1) {
    uint32_t idx = UINT32_MAX;
    ferry_tensor_info_t t;
    if (!ferry_model_find(m, name, &idx) || !ferry_model_tensor(m, idx, &t)) {
        fprintf(stderr, "%s:%d: model %s: tensor %s is missing\n", __FILE__, line,
                ferry_model_name(m), name);
        exit(1);
    }
    uint32_t ndim = d1 ? 2 : 1;
    if (strcmp(t.name, name) != 0 || t.dtype != dtype || t.ndim != ndim || t.shape[0] != d0 ||
        (ndim == 2 && t.shape[1] != d1)) {
        fprintf(stderr,
                "%s:%d: model %s: tensor %s is %s %s ndim %u [%lld, %lld]; expected %s %s ndim %u "
                "[%lld, %lld]\n",
                __FILE__, line, ferry_model_name(m), name, t.name, ferry_dtype_name(t.dtype), t.ndim,
                (long long)t.shape[0], (long long)(t.ndim > 1 ? t.shape[1] : 0), name,
                ferry_dtype_name(dtype), ndim, (long long)d0, (long long)d1);
        exit(1);
    }
}

static void expect_absent_at(int line, const ferry_model_t *m, const char *name) {
    if (ferry_model_find(m, name, NULL)) {
        fprintf(stderr, "%s:%d: model %s: tensor %s should not exist\n", __FILE__, line,
                ferry_model_name(m), name);
        exit(1);
    }
}

#define EXPECT_TENSOR(m, name, dt, d0, d1) expect_tensor_at(__LINE__, (m), (name), (dt), (d0), (d1))
#define EXPECT_ABSENT(m, name) expect_absent_at(__LINE__, (m), (name))

/* Layer-scoped variants: "model.layers.<l>.<suffix>". */
static void expect_layer_tensor_at(int line, const ferry_model_t *m, int64_t l, const char *suffix,
                                   ferry_dtype_t dt, int64_t d0, int64_t d1) {
    char name[256];
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, suffix);
    expect_tensor_at(line, m, name, dt, d0, d1);
}

static void expect_layer_absent_at(int line, const ferry_model_t *m, int64_t l, const char *suffix) {
    char name[256];
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, suffix);
    expect_absent_at(line, m, name);
}

#define EXPECT_LT(m, l, suffix, dt, d0, d1) \
    expect_layer_tensor_at(__LINE__, (m), (l), (suffix), (dt), (d0), (d1))
#define EXPECT_LA(m, l, suffix) expect_layer_absent_at(__LINE__, (m), (l), (suffix))

static bool layer_has(const ferry_model_t *m, int64_t l, const char *suffix) {
    char name[256];
    snprintf(name, sizeof name, "model.layers.%lld.%s", (long long)l, suffix);
    return ferry_model_find(m, name, NULL);
}

/* Every tensor has this dtype, except names containing `except` (may be NULL). */
static void expect_all_dtype(const ferry_model_t *m, ferry_dtype_t dt, const char *except) {
    for (uint32_t i = 0; i < ferry_model_tensor_count(m); i++) {
        ferry_tensor_info_t t;
        CHECK(ferry_model_tensor(m, i, &t));
        if (except && strstr(t.name, except)) continue;
        if (t.dtype != dt) {
            fprintf(stderr, "model %s: tensor %s is %s, expected %s\n", ferry_model_name(m), t.name,
                    ferry_dtype_name(t.dtype), ferry_dtype_name(dt));
            exit(1);
        }
    }
}

/* Index i finds itself by name, names are unique, sum of numels matches;
 * every tensor has 1..max_ndim dimensions. */
static void expect_consistent_ndim(const ferry_model_t *m, uint32_t max_ndim) {
    uint64_t params = 0;
    for (uint32_t i = 0; i < ferry_model_tensor_count(m); i++) {
        ferry_tensor_info_t t;
        CHECK(ferry_model_tensor(m, i, &t));
        uint32_t j = UINT32_MAX;
        CHECK(ferry_model_find(m, t.name, &j));
        CHECK_EQ_INT(j, i);
        CHECK(t.ndim >= 1 && t.ndim <= max_ndim);
        uint64_t n = 1;
        for (uint32_t d = 0; d < t.ndim; d++) {
            CHECK(t.shape[d] > 0);
            n *= (uint64_t)t.shape[d];
        }
        params += n;
    }
    ferry_tensor_info_t t;
    CHECK(!ferry_model_tensor(m, ferry_model_tensor_count(m), &t));
    CHECK(params == ferry_model_param_count(m));
}

/* Specs generated from config.json hold only 1-d and 2-d tensors. */
static void expect_consistent(const ferry_model_t *m) { expect_consistent_ndim(m, 2); }

static ferry_model_t *from_json(ferry_ctx_t *ctx, const char *name, const char *json,
                                const ferry_model_options_t *opts) {
    ferry_model_t *m = NULL;
    ferry_status_t st = ferry_model_from_hf_config(ctx, name, json, strlen(json), opts, &m);
    if (st != FERRY_OK) {
        fprintf(stderr, "config %s: %s: %s\n", name, ferry_status_name(st), ferry_ctx_error(ctx));
        exit(1);
    }
    CHECK(m != NULL);
    CHECK(strcmp(ferry_model_name(m), name) == 0);
    expect_consistent(m);
    return m;
}

static void check_within(const char *what, uint64_t got, double want, double rel) {
    double g = (double)got;
    if (g < want * (1.0 - rel) || g > want * (1.0 + rel)) {
        fprintf(stderr, "%s: %llu parameters, expected %.4g within %.1f%%\n", what,
                (unsigned long long)got, want, rel * 100);
        exit(1);
    }
}

/* ---- bundled dense: qwen3-0.6b, qwen3-8b -------------------------------- */

static void test_qwen3_0_6b(ferry_ctx_t *ctx) {
    ferry_model_t *m = test_model(ctx, "qwen3-0.6b", NULL);
    expect_consistent(m);
    CHECK(strcmp(ferry_model_name(m), "qwen3-0.6b") == 0);
    /* keras-hub qwen3_presets.py "params": 596049920 (tied embeddings counted once) */
    CHECK(ferry_model_param_count(m) == 596049920ull);
    CHECK(ferry_model_byte_size(m) == 2ull * 596049920ull);
    /* embed + 28 x (2 norms, q/k/v/o, q_norm, k_norm, gate/up/down) + final norm, tied */
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + 28 * 11 + 1);

    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_DENSE);
    CHECK(strcmp(a->model_type, "qwen3") == 0);
    CHECK_EQ_INT(a->dtype, FERRY_DTYPE_BF16);
    CHECK_EQ_INT(a->vocab_size, 151936);
    CHECK_EQ_INT(a->hidden_size, 1024);
    CHECK_EQ_INT(a->num_layers, 28);
    CHECK_EQ_INT(a->num_mtp_layers, 0);
    CHECK_EQ_INT(a->num_heads, 16);
    CHECK_EQ_INT(a->num_kv_heads, 8);
    CHECK_EQ_INT(a->head_dim, 128); /* explicit; hidden/heads would be 64 */
    CHECK_EQ_INT(a->intermediate_size, 3072);
    CHECK(a->tie_embeddings);
    CHECK(!a->qkv_bias && !a->o_bias && !a->mlp_bias);
    CHECK(a->qk_norm);
    CHECK_EQ_INT(a->num_experts, 0);
    for (int64_t l = 0; l < 28; l++) CHECK(!ferry_arch_layer_is_moe(a, l));

    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_TENSOR(m, "model.embed_tokens.weight", bf, 151936, 1024);
    EXPECT_TENSOR(m, "model.norm.weight", bf, 1024, 0);
    EXPECT_ABSENT(m, "lm_head.weight"); /* tie_word_embeddings: true */
    for (int64_t l = 0; l < 28; l += 27) {
        EXPECT_LT(m, l, "input_layernorm.weight", bf, 1024, 0);
        EXPECT_LT(m, l, "post_attention_layernorm.weight", bf, 1024, 0);
        EXPECT_LT(m, l, "self_attn.q_proj.weight", bf, 2048, 1024);
        EXPECT_LT(m, l, "self_attn.k_proj.weight", bf, 1024, 1024);
        EXPECT_LT(m, l, "self_attn.v_proj.weight", bf, 1024, 1024);
        EXPECT_LT(m, l, "self_attn.o_proj.weight", bf, 1024, 2048);
        EXPECT_LT(m, l, "self_attn.q_norm.weight", bf, 128, 0);
        EXPECT_LT(m, l, "self_attn.k_norm.weight", bf, 128, 0);
        EXPECT_LT(m, l, "mlp.gate_proj.weight", bf, 3072, 1024);
        EXPECT_LT(m, l, "mlp.up_proj.weight", bf, 3072, 1024);
        EXPECT_LT(m, l, "mlp.down_proj.weight", bf, 1024, 3072);
        EXPECT_LA(m, l, "self_attn.q_proj.bias");
        EXPECT_LA(m, l, "self_attn.o_proj.bias");
        EXPECT_LA(m, l, "mlp.gate_proj.bias");
        EXPECT_LA(m, l, "mlp.gate.weight");
    }
    EXPECT_ABSENT(m, "model.layers.28.input_layernorm.weight");
    EXPECT_ABSENT(m, "model.layers.0.self_attn.q_proj");
    EXPECT_ABSENT(m, "");
    ferry_model_destroy(m);
}

static void test_qwen3_8b(ferry_ctx_t *ctx) {
    ferry_model_t *m = test_model(ctx, "qwen3-8b", NULL);
    expect_consistent(m);
    /* keras-hub qwen3_presets.py "params": 8190735360 */
    CHECK(ferry_model_param_count(m) == 8190735360ull);
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + 36 * 11 + 1 + 1);
    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_DENSE);
    CHECK_EQ_INT(a->hidden_size, 4096);
    CHECK_EQ_INT(a->num_layers, 36);
    CHECK_EQ_INT(a->num_heads, 32);
    CHECK_EQ_INT(a->num_kv_heads, 8);
    CHECK_EQ_INT(a->head_dim, 128);
    CHECK_EQ_INT(a->intermediate_size, 12288);
    CHECK(!a->tie_embeddings);
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_TENSOR(m, "model.embed_tokens.weight", bf, 151936, 4096);
    EXPECT_TENSOR(m, "lm_head.weight", bf, 151936, 4096);
    EXPECT_TENSOR(m, "model.norm.weight", bf, 4096, 0);
    EXPECT_LT(m, 35, "self_attn.q_proj.weight", bf, 4096, 4096);
    EXPECT_LT(m, 35, "self_attn.k_proj.weight", bf, 1024, 4096);
    EXPECT_LT(m, 35, "self_attn.v_proj.weight", bf, 1024, 4096);
    EXPECT_LT(m, 35, "self_attn.o_proj.weight", bf, 4096, 4096);
    EXPECT_LT(m, 35, "self_attn.q_norm.weight", bf, 128, 0);
    EXPECT_LT(m, 35, "mlp.gate_proj.weight", bf, 12288, 4096);
    EXPECT_LT(m, 35, "mlp.down_proj.weight", bf, 4096, 12288);
    EXPECT_LA(m, 36, "mlp.gate_proj.weight");
    /* the lm_head is the last tensor */
    ferry_tensor_info_t t;
    CHECK(ferry_model_tensor(m, ferry_model_tensor_count(m) - 1, &t));
    CHECK(strcmp(t.name, "lm_head.weight") == 0);
    CHECK(ferry_model_tensor(m, 0, &t));
    CHECK(strcmp(t.name, "model.embed_tokens.weight") == 0);
    ferry_model_destroy(m);
}

/* ---- bundled qwen3_moe: qwen3-30b-a3b ------------------------------------ */

static void test_qwen3_30b_a3b(ferry_ctx_t *ctx) {
    ferry_model_t *m = test_model(ctx, "qwen3-30b-a3b", NULL);
    expect_consistent(m);
    /* model card: 30.5B total (computed 30,532,122,624) */
    check_within("qwen3-30b-a3b", ferry_model_param_count(m), 30.5e9, 0.01);
    CHECK(ferry_model_param_count(m) == 30532122624ull);
    const int64_t L = 48, E = 128;
    /* embed + L x (2 norms, q/k/v/o, q/k norm, router, E x 3) + norm + lm_head */
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + L * (2 + 6 + 1 + E * 3) + 1 + 1);

    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_QWEN3_MOE);
    CHECK(strcmp(a->model_type, "qwen3_moe") == 0);
    CHECK_EQ_INT(a->vocab_size, 151936);
    CHECK_EQ_INT(a->hidden_size, 2048);
    CHECK_EQ_INT(a->num_layers, L);
    CHECK_EQ_INT(a->num_heads, 32);
    CHECK_EQ_INT(a->num_kv_heads, 4);
    CHECK_EQ_INT(a->head_dim, 128);
    CHECK_EQ_INT(a->intermediate_size, 6144);
    CHECK_EQ_INT(a->num_experts, E);
    CHECK_EQ_INT(a->experts_per_token, 8);
    CHECK_EQ_INT(a->moe_intermediate_size, 768);
    CHECK_EQ_INT(a->num_shared_experts, 0);
    CHECK_EQ_INT(a->sparse_step, 1);
    CHECK(!a->expert_bias);
    CHECK(a->qk_norm);
    CHECK(!a->tie_embeddings);

    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_TENSOR(m, "lm_head.weight", bf, 151936, 2048);
    EXPECT_TENSOR(m, "model.layers.47.mlp.gate.weight", bf, 128, 2048);
    EXPECT_TENSOR(m, "model.layers.0.mlp.experts.127.down_proj.weight", bf, 2048, 768);
    EXPECT_TENSOR(m, "model.layers.0.mlp.experts.0.gate_proj.weight", bf, 768, 2048);
    EXPECT_TENSOR(m, "model.layers.0.mlp.experts.0.up_proj.weight", bf, 768, 2048);
    EXPECT_ABSENT(m, "model.layers.0.mlp.experts.128.down_proj.weight");
    EXPECT_TENSOR(m, "model.layers.0.self_attn.q_proj.weight", bf, 4096, 2048);
    EXPECT_TENSOR(m, "model.layers.0.self_attn.k_proj.weight", bf, 512, 2048);
    EXPECT_TENSOR(m, "model.layers.0.self_attn.o_proj.weight", bf, 2048, 4096);
    EXPECT_TENSOR(m, "model.layers.0.self_attn.k_norm.weight", bf, 128, 0);
    /* decoder_sparse_step 1, mlp_only_layers []: every layer is MoE */
    for (int64_t l = 0; l < L; l++) {
        bool moe = (l + 1) % 1 == 0;
        CHECK(ferry_arch_layer_is_moe(a, l) == moe);
        CHECK(layer_has(m, l, "mlp.gate.weight") == moe);
        CHECK(!layer_has(m, l, "mlp.gate_proj.weight"));
        CHECK(!layer_has(m, l, "mlp.shared_experts.gate_proj.weight"));
        CHECK(!layer_has(m, l, "mlp.gate.e_score_correction_bias"));
    }
    for (uint32_t i = 0; i < ferry_model_tensor_count(m); i++) {
        ferry_tensor_info_t t;
        CHECK(ferry_model_tensor(m, i, &t));
        if (strstr(t.name, "mlp.gate_proj") || strstr(t.name, "shared_expert")) {
            fprintf(stderr, "qwen3-30b-a3b: unexpected tensor %s\n", t.name);
            exit(1);
        }
    }
    ferry_model_destroy(m);
}

/* ---- bundled MLA + MoE: deepseek-v3, kimi-k2 ----------------------------- */

/* Tensors of one MLA (q_lora) attention block: 7; dense layer: 2 norms + 7 +
 * 3; MoE layer: 2 norms + 7 + router (+ bias) + E x 3 + shared 3. */
static int64_t deepseek_tensor_count(int64_t L, int64_t first_dense, int64_t E, int64_t mtp) {
    int64_t dense = 2 + 7 + 3, moe = 2 + 7 + 2 + E * 3 + 3;
    return 1 + first_dense * dense + (L - first_dense) * moe + mtp * (moe + 6) + 1 + 1;
}

static void check_mla_layer(const ferry_model_t *m, int64_t l, int64_t heads) {
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_LT(m, l, "input_layernorm.weight", bf, 7168, 0);
    EXPECT_LT(m, l, "post_attention_layernorm.weight", bf, 7168, 0);
    EXPECT_LT(m, l, "self_attn.q_a_proj.weight", bf, 1536, 7168);
    EXPECT_LT(m, l, "self_attn.q_a_layernorm.weight", bf, 1536, 0);
    EXPECT_LT(m, l, "self_attn.q_b_proj.weight", bf, heads * (128 + 64), 1536);
    EXPECT_LT(m, l, "self_attn.kv_a_proj_with_mqa.weight", bf, 512 + 64, 7168);
    EXPECT_LT(m, l, "self_attn.kv_a_layernorm.weight", bf, 512, 0);
    EXPECT_LT(m, l, "self_attn.kv_b_proj.weight", bf, heads * (128 + 128), 512);
    EXPECT_LT(m, l, "self_attn.o_proj.weight", bf, 7168, heads * 128);
    EXPECT_LA(m, l, "self_attn.q_proj.weight");
    EXPECT_LA(m, l, "self_attn.k_proj.weight");
    EXPECT_LA(m, l, "self_attn.q_norm.weight");
}

static void check_moe_layer(const ferry_model_t *m, int64_t l, int64_t E) {
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    char s[128];
    EXPECT_LT(m, l, "mlp.gate.weight", bf, E, 7168);
    /* stored in F32 in the published checkpoints */
    EXPECT_LT(m, l, "mlp.gate.e_score_correction_bias", FERRY_DTYPE_F32, E, 0);
    snprintf(s, sizeof s, "mlp.experts.%lld.gate_proj.weight", (long long)(E - 1));
    EXPECT_LT(m, l, s, bf, 2048, 7168);
    snprintf(s, sizeof s, "mlp.experts.%lld.up_proj.weight", (long long)(E - 1));
    EXPECT_LT(m, l, s, bf, 2048, 7168);
    snprintf(s, sizeof s, "mlp.experts.%lld.down_proj.weight", (long long)(E - 1));
    EXPECT_LT(m, l, s, bf, 7168, 2048);
    snprintf(s, sizeof s, "mlp.experts.%lld.up_proj.weight", (long long)E);
    EXPECT_LA(m, l, s);
    EXPECT_LT(m, l, "mlp.experts.0.up_proj.weight", bf, 2048, 7168);
    EXPECT_LT(m, l, "mlp.shared_experts.gate_proj.weight", bf, 2048, 7168);
    EXPECT_LT(m, l, "mlp.shared_experts.up_proj.weight", bf, 2048, 7168);
    EXPECT_LT(m, l, "mlp.shared_experts.down_proj.weight", bf, 7168, 2048);
    EXPECT_LA(m, l, "mlp.gate_proj.weight");
}

static void check_dense_ds_layer(const ferry_model_t *m, int64_t l) {
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_LT(m, l, "mlp.gate_proj.weight", bf, 18432, 7168);
    EXPECT_LT(m, l, "mlp.up_proj.weight", bf, 18432, 7168);
    EXPECT_LT(m, l, "mlp.down_proj.weight", bf, 7168, 18432);
    EXPECT_LA(m, l, "mlp.gate.weight");
    EXPECT_LA(m, l, "mlp.experts.0.up_proj.weight");
    EXPECT_LA(m, l, "mlp.shared_experts.gate_proj.weight");
}

static void check_deepseek_arch(const ferry_arch_t *a, const char *type, int64_t vocab,
                                int64_t heads, int64_t E, int64_t first_dense) {
    CHECK_EQ_INT(a->family, FERRY_FAMILY_DEEPSEEK);
    CHECK(strcmp(a->model_type, type) == 0);
    CHECK_EQ_INT(a->dtype, FERRY_DTYPE_BF16);
    CHECK_EQ_INT(a->vocab_size, vocab);
    CHECK_EQ_INT(a->hidden_size, 7168);
    CHECK_EQ_INT(a->num_layers, 61);
    CHECK_EQ_INT(a->num_heads, heads);
    CHECK_EQ_INT(a->num_kv_heads, heads);
    CHECK_EQ_INT(a->intermediate_size, 18432);
    CHECK_EQ_INT(a->num_experts, E);
    CHECK_EQ_INT(a->experts_per_token, 8);
    CHECK_EQ_INT(a->moe_intermediate_size, 2048);
    CHECK_EQ_INT(a->num_shared_experts, 1);
    CHECK(a->expert_bias); /* topk_method noaux_tc */
    CHECK_EQ_INT(a->q_lora_rank, 1536);
    CHECK_EQ_INT(a->kv_lora_rank, 512);
    CHECK_EQ_INT(a->qk_nope_head_dim, 128);
    CHECK_EQ_INT(a->qk_rope_head_dim, 64);
    CHECK_EQ_INT(a->v_head_dim, 128);
    CHECK_EQ_INT(a->first_k_dense, first_dense);
    CHECK_EQ_INT(a->moe_layer_freq, 1);
    CHECK(!a->tie_embeddings);
    CHECK(!a->qkv_bias && !a->o_bias && !a->mlp_bias && !a->qk_norm);
    /* DeepSeek rule: n_routed_experts and l >= first_k_dense_replace and
     * l % moe_layer_freq == 0 */
    for (int64_t l = 0; l < 61; l++) CHECK(ferry_arch_layer_is_moe(a, l) == (l >= first_dense));
    CHECK(!ferry_arch_layer_is_moe(a, -1));
}

static void test_deepseek_v3(ferry_ctx_t *ctx) {
    ferry_model_t *m = test_model(ctx, "deepseek-v3", NULL);
    expect_consistent(m);
    /* README: 671B main model weights (computed 671,026,419,200) */
    check_within("deepseek-v3", ferry_model_param_count(m), 671e9, 0.01);
    CHECK(ferry_model_param_count(m) == 671026419200ull);
    CHECK_EQ_INT(ferry_model_tensor_count(m), deepseek_tensor_count(61, 3, 256, 0));
    const ferry_arch_t *a = ferry_model_arch(m);
    check_deepseek_arch(a, "deepseek_v3", 129280, 128, 256, 3);
    CHECK_EQ_INT(a->num_mtp_layers, 0);
    for (int64_t l = 0; l < 61; l++)
        CHECK(layer_has(m, l, "mlp.gate.weight") == ferry_arch_layer_is_moe(a, l));

    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_TENSOR(m, "model.embed_tokens.weight", bf, 129280, 7168);
    EXPECT_TENSOR(m, "model.norm.weight", bf, 7168, 0);
    EXPECT_TENSOR(m, "lm_head.weight", bf, 129280, 7168);
    for (int64_t l = 0; l < 3; l++) {
        check_mla_layer(m, l, 128);
        check_dense_ds_layer(m, l);
    }
    check_mla_layer(m, 3, 128);
    check_moe_layer(m, 3, 256);
    check_mla_layer(m, 60, 128);
    check_moe_layer(m, 60, 256);
    /* explicit shapes from the brief */
    EXPECT_TENSOR(m, "model.layers.3.self_attn.q_b_proj.weight", bf, 24576, 1536);
    EXPECT_TENSOR(m, "model.layers.3.self_attn.kv_a_proj_with_mqa.weight", bf, 576, 7168);
    EXPECT_TENSOR(m, "model.layers.3.self_attn.kv_b_proj.weight", bf, 32768, 512);
    EXPECT_TENSOR(m, "model.layers.3.self_attn.o_proj.weight", bf, 7168, 16384);
    EXPECT_TENSOR(m, "model.layers.3.mlp.gate.weight", bf, 256, 7168);
    EXPECT_TENSOR(m, "model.layers.3.mlp.experts.255.up_proj.weight", bf, 2048, 7168);
    /* without MTP: nothing of layer 61 */
    for (uint32_t i = 0; i < ferry_model_tensor_count(m); i++) {
        ferry_tensor_info_t t;
        CHECK(ferry_model_tensor(m, i, &t));
        CHECK(strncmp(t.name, "model.layers.61.", 16) != 0);
    }
    ferry_model_destroy(m);

    /* the MTP option present but off changes nothing */
    ferry_model_options_t off = {.field_mask = FERRY_MODEL_OPT_MTP, .include_mtp = false};
    m = test_model(ctx, "deepseek-v3", &off);
    CHECK(ferry_model_param_count(m) == 671026419200ull);
    EXPECT_ABSENT(m, "model.layers.61.eh_proj.weight");
    ferry_model_destroy(m);
    /* include_mtp without its field_mask bit is ignored */
    ferry_model_options_t unmasked = {.field_mask = 0, .include_mtp = true};
    m = test_model(ctx, "deepseek-v3", &unmasked);
    EXPECT_ABSENT(m, "model.layers.61.eh_proj.weight");
    ferry_model_destroy(m);

    /* with MTP: README 685B = 671B main + 14B MTP (computed 684,489,845,504) */
    ferry_model_options_t mtp = {.field_mask = FERRY_MODEL_OPT_MTP, .include_mtp = true};
    m = test_model(ctx, "deepseek-v3", &mtp);
    expect_consistent(m);
    check_within("deepseek-v3 + MTP", ferry_model_param_count(m), 685e9, 0.01);
    CHECK(ferry_model_param_count(m) == 684489845504ull);
    CHECK_EQ_INT(ferry_model_tensor_count(m), deepseek_tensor_count(61, 3, 256, 1));
    a = ferry_model_arch(m);
    CHECK_EQ_INT(a->num_layers, 61);
    CHECK_EQ_INT(a->num_mtp_layers, 1);
    EXPECT_TENSOR(m, "model.layers.61.eh_proj.weight", bf, 7168, 14336);
    EXPECT_TENSOR(m, "model.layers.61.enorm.weight", bf, 7168, 0);
    EXPECT_TENSOR(m, "model.layers.61.hnorm.weight", bf, 7168, 0);
    EXPECT_TENSOR(m, "model.layers.61.shared_head.norm.weight", bf, 7168, 0);
    EXPECT_TENSOR(m, "model.layers.61.shared_head.head.weight", bf, 129280, 7168);
    EXPECT_TENSOR(m, "model.layers.61.embed_tokens.weight", bf, 129280, 7168);
    /* the MTP layer is a full MoE decoder layer */
    check_mla_layer(m, 61, 128);
    check_moe_layer(m, 61, 256);
    EXPECT_ABSENT(m, "model.layers.62.input_layernorm.weight");
    EXPECT_TENSOR(m, "lm_head.weight", bf, 129280, 7168);
    ferry_model_destroy(m);
}

static void test_kimi_k2(ferry_ctx_t *ctx) {
    ferry_model_t *m = test_model(ctx, "kimi-k2", NULL);
    expect_consistent(m);
    /* weights in the published checkpoint (without FP8 scales) */
    CHECK(ferry_model_param_count(m) == 1026408232448ull);
    CHECK_EQ_INT(ferry_model_tensor_count(m), deepseek_tensor_count(61, 1, 384, 0));
    const ferry_arch_t *a = ferry_model_arch(m);
    check_deepseek_arch(a, "kimi_k2", 163840, 64, 384, 1);
    for (int64_t l = 0; l < 61; l++)
        CHECK(layer_has(m, l, "mlp.gate.weight") == ferry_arch_layer_is_moe(a, l));
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_TENSOR(m, "model.embed_tokens.weight", bf, 163840, 7168);
    EXPECT_TENSOR(m, "lm_head.weight", bf, 163840, 7168);
    EXPECT_TENSOR(m, "model.layers.0.self_attn.q_b_proj.weight", bf, 12288, 1536);
    EXPECT_TENSOR(m, "model.layers.0.self_attn.kv_b_proj.weight", bf, 16384, 512);
    EXPECT_TENSOR(m, "model.layers.0.self_attn.o_proj.weight", bf, 7168, 8192);
    check_mla_layer(m, 0, 64);
    check_dense_ds_layer(m, 0);
    check_mla_layer(m, 1, 64);
    check_moe_layer(m, 1, 384);
    check_moe_layer(m, 60, 384);
    EXPECT_TENSOR(m, "model.layers.1.mlp.experts.383.down_proj.weight", bf, 7168, 2048);
    EXPECT_ABSENT(m, "model.layers.61.input_layernorm.weight");
    ferry_model_destroy(m);

    /* num_nextn_predict_layers is 0: asking for MTP adds nothing */
    ferry_model_options_t mtp = {.field_mask = FERRY_MODEL_OPT_MTP, .include_mtp = true};
    m = test_model(ctx, "kimi-k2", &mtp);
    CHECK(ferry_model_param_count(m) == 1026408232448ull);
    CHECK_EQ_INT(ferry_model_arch(m)->num_mtp_layers, 0);
    ferry_model_destroy(m);
}

/* ---- synthetic configs ---------------------------------------------------- */

static void test_llama_biases(ferry_ctx_t *ctx) {
    ferry_model_t *m = from_json(ctx, "llama-bias",
                                 "{\"model_type\": \"llama\", \"hidden_size\": 64, "
                                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 4, "
                                 "\"num_key_value_heads\": 2, \"head_dim\": 16, "
                                 "\"intermediate_size\": 128, \"vocab_size\": 1000, "
                                 "\"attention_bias\": true, \"mlp_bias\": true, "
                                 "\"torch_dtype\": \"bfloat16\"}",
                                 NULL);
    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_DENSE);
    CHECK(a->qkv_bias && a->o_bias && a->mlp_bias && !a->qk_norm && !a->tie_embeddings);
    /* embed + 2 x (2 norms, q/k/v/o + 4 biases, 3 mlp + 3 biases) + norm + lm_head */
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + 2 * (2 + 8 + 6) + 1 + 1);
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    for (int64_t l = 0; l < 2; l++) {
        EXPECT_LT(m, l, "self_attn.q_proj.weight", bf, 64, 64);
        EXPECT_LT(m, l, "self_attn.k_proj.weight", bf, 32, 64);
        EXPECT_LT(m, l, "self_attn.v_proj.weight", bf, 32, 64);
        EXPECT_LT(m, l, "self_attn.o_proj.weight", bf, 64, 64);
        EXPECT_LT(m, l, "self_attn.q_proj.bias", bf, 64, 0);
        EXPECT_LT(m, l, "self_attn.k_proj.bias", bf, 32, 0);
        EXPECT_LT(m, l, "self_attn.v_proj.bias", bf, 32, 0);
        EXPECT_LT(m, l, "self_attn.o_proj.bias", bf, 64, 0);
        EXPECT_LT(m, l, "mlp.gate_proj.weight", bf, 128, 64);
        EXPECT_LT(m, l, "mlp.up_proj.weight", bf, 128, 64);
        EXPECT_LT(m, l, "mlp.down_proj.weight", bf, 64, 128);
        EXPECT_LT(m, l, "mlp.gate_proj.bias", bf, 128, 0);
        EXPECT_LT(m, l, "mlp.up_proj.bias", bf, 128, 0);
        EXPECT_LT(m, l, "mlp.down_proj.bias", bf, 64, 0);
        EXPECT_LA(m, l, "self_attn.q_norm.weight");
    }
    EXPECT_TENSOR(m, "lm_head.weight", bf, 1000, 64);
    ferry_model_destroy(m);

    /* defaults: no biases */
    m = from_json(ctx, "llama-nobias",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                  "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 1000}",
                  NULL);
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + 1 * (2 + 4 + 3) + 1 + 1);
    EXPECT_LA(m, 0, "self_attn.q_proj.bias");
    EXPECT_LA(m, 0, "self_attn.o_proj.bias");
    EXPECT_LA(m, 0, "mlp.gate_proj.bias");
    /* no num_key_value_heads: MHA */
    CHECK_EQ_INT(ferry_model_arch(m)->num_kv_heads, 4);
    EXPECT_LT(m, 0, "self_attn.k_proj.weight", FERRY_DTYPE_BF16, 64, 64);
    ferry_model_destroy(m);
}

static void test_llama_head_dim(ferry_ctx_t *ctx) {
    /* no head_dim: hidden / heads = 96 / 6 = 16 */
    ferry_model_t *m = from_json(ctx, "llama-hd",
                                 "{\"model_type\": \"llama\", \"hidden_size\": 96, "
                                 "\"num_hidden_layers\": 1, \"num_attention_heads\": 6, "
                                 "\"num_key_value_heads\": 2, \"intermediate_size\": 256, "
                                 "\"vocab_size\": 500, \"head_dim\": null}",
                                 NULL);
    CHECK_EQ_INT(ferry_model_arch(m)->head_dim, 16);
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_LT(m, 0, "self_attn.q_proj.weight", bf, 96, 96);
    EXPECT_LT(m, 0, "self_attn.k_proj.weight", bf, 32, 96);
    EXPECT_LT(m, 0, "self_attn.v_proj.weight", bf, 32, 96);
    EXPECT_LT(m, 0, "self_attn.o_proj.weight", bf, 96, 96);
    ferry_model_destroy(m);

    /* a real number with an integral value is accepted: 4096.0 */
    m = from_json(ctx, "llama-real",
                  "{\"model_type\": \"llama\", \"hidden_size\": 4096.0, "
                  "\"num_hidden_layers\": 1.0, \"num_attention_heads\": 32, "
                  "\"num_key_value_heads\": 8, \"intermediate_size\": 11008, "
                  "\"vocab_size\": 32000.0}",
                  NULL);
    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->hidden_size, 4096);
    CHECK_EQ_INT(a->num_layers, 1);
    CHECK_EQ_INT(a->vocab_size, 32000);
    CHECK_EQ_INT(a->head_dim, 128);
    EXPECT_TENSOR(m, "model.embed_tokens.weight", bf, 32000, 4096);
    EXPECT_LT(m, 0, "self_attn.q_proj.weight", bf, 4096, 4096);
    EXPECT_LT(m, 0, "self_attn.k_proj.weight", bf, 1024, 4096);
    EXPECT_LT(m, 0, "mlp.down_proj.weight", bf, 4096, 11008);
    ferry_model_destroy(m);
}

static void test_qwen2(ferry_ctx_t *ctx) {
    ferry_model_t *m = from_json(ctx, "qwen2",
                                 "{\"model_type\": \"qwen2\", \"hidden_size\": 128, "
                                 "\"num_hidden_layers\": 2, \"num_attention_heads\": 8, "
                                 "\"num_key_value_heads\": 2, \"intermediate_size\": 320, "
                                 "\"vocab_size\": 2000, \"tie_word_embeddings\": false}",
                                 NULL);
    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_DENSE);
    CHECK(a->qkv_bias && !a->o_bias && !a->qk_norm && !a->mlp_bias);
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + 2 * (2 + 4 + 3 + 3) + 1 + 1);
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    for (int64_t l = 0; l < 2; l++) {
        EXPECT_LT(m, l, "self_attn.q_proj.weight", bf, 128, 128);
        EXPECT_LT(m, l, "self_attn.k_proj.weight", bf, 32, 128);
        EXPECT_LT(m, l, "self_attn.q_proj.bias", bf, 128, 0);
        EXPECT_LT(m, l, "self_attn.k_proj.bias", bf, 32, 0);
        EXPECT_LT(m, l, "self_attn.v_proj.bias", bf, 32, 0);
        EXPECT_LA(m, l, "self_attn.o_proj.bias");
        EXPECT_LA(m, l, "self_attn.q_norm.weight");
        EXPECT_LA(m, l, "mlp.gate_proj.bias");
    }
    EXPECT_TENSOR(m, "lm_head.weight", bf, 2000, 128);
    ferry_model_destroy(m);
}

static void test_qwen3_moe_sparse(ferry_ctx_t *ctx) {
    /* HF Qwen3Moe: layer l is MoE iff l not in mlp_only_layers and
     * num_experts > 0 and (l + 1) % decoder_sparse_step == 0.
     * 6 layers, step 2, mlp_only_layers [1]: MoE layers are 3 and 5. */
    ferry_model_t *m = from_json(ctx, "qwen3-moe-sparse",
                                 "{\"model_type\": \"qwen3_moe\", \"hidden_size\": 64, "
                                 "\"num_hidden_layers\": 6, \"num_attention_heads\": 4, "
                                 "\"num_key_value_heads\": 2, \"head_dim\": 32, "
                                 "\"intermediate_size\": 192, \"moe_intermediate_size\": 48, "
                                 "\"num_experts\": 4, \"num_experts_per_tok\": 2, "
                                 "\"decoder_sparse_step\": 2, \"mlp_only_layers\": [1], "
                                 "\"vocab_size\": 300}",
                                 NULL);
    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_QWEN3_MOE);
    CHECK_EQ_INT(a->sparse_step, 2);
    CHECK_EQ_INT(a->num_experts, 4);
    const bool want_moe[6] = {false, false, false, true, false, true};
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    int64_t n_moe = 0;
    for (int64_t l = 0; l < 6; l++) {
        CHECK(ferry_arch_layer_is_moe(a, l) == want_moe[l]);
        EXPECT_LT(m, l, "self_attn.q_proj.weight", bf, 128, 64);
        EXPECT_LT(m, l, "self_attn.q_norm.weight", bf, 32, 0);
        if (want_moe[l]) {
            n_moe++;
            EXPECT_LT(m, l, "mlp.gate.weight", bf, 4, 64);
            EXPECT_LT(m, l, "mlp.experts.3.gate_proj.weight", bf, 48, 64);
            EXPECT_LT(m, l, "mlp.experts.3.down_proj.weight", bf, 64, 48);
            EXPECT_LA(m, l, "mlp.experts.4.gate_proj.weight");
            EXPECT_LA(m, l, "mlp.gate_proj.weight");
        } else {
            EXPECT_LT(m, l, "mlp.gate_proj.weight", bf, 192, 64);
            EXPECT_LT(m, l, "mlp.down_proj.weight", bf, 64, 192);
            EXPECT_LA(m, l, "mlp.gate.weight");
            EXPECT_LA(m, l, "mlp.experts.0.gate_proj.weight");
        }
    }
    CHECK_EQ_INT(ferry_model_tensor_count(m),
                 1 + 6 * (2 + 6) + n_moe * (1 + 4 * 3) + (6 - n_moe) * 3 + 1 + 1);
    ferry_model_destroy(m);
}

static void test_deepseek_small(ferry_ctx_t *ctx) {
    /* q_lora_rank null: plain q_proj [heads * (nope + rope), hidden];
     * n_shared_experts absent: no shared experts; no topk_method: no
     * e_score_correction_bias; tied embeddings: no lm_head. */
    ferry_model_t *m = from_json(ctx, "ds-small",
                                 "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, "
                                 "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
                                 "\"num_key_value_heads\": 4, \"intermediate_size\": 512, "
                                 "\"vocab_size\": 1024, \"q_lora_rank\": null, "
                                 "\"kv_lora_rank\": 64, \"qk_nope_head_dim\": 32, "
                                 "\"qk_rope_head_dim\": 16, \"v_head_dim\": 24, "
                                 "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "
                                 "\"moe_intermediate_size\": 96, \"first_k_dense_replace\": 1, "
                                 "\"moe_layer_freq\": 1, \"tie_word_embeddings\": true, "
                                 "\"num_nextn_predict_layers\": 1}",
                                 NULL);
    const ferry_arch_t *a = ferry_model_arch(m);
    CHECK_EQ_INT(a->family, FERRY_FAMILY_DEEPSEEK);
    CHECK_EQ_INT(a->q_lora_rank, 0);
    CHECK_EQ_INT(a->num_shared_experts, 0);
    CHECK(!a->expert_bias);
    CHECK(a->tie_embeddings);
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_ABSENT(m, "lm_head.weight");
    EXPECT_TENSOR(m, "model.embed_tokens.weight", bf, 1024, 256);
    for (int64_t l = 0; l < 3; l++) {
        EXPECT_LT(m, l, "self_attn.q_proj.weight", bf, 4 * (32 + 16), 256);
        EXPECT_LA(m, l, "self_attn.q_a_proj.weight");
        EXPECT_LA(m, l, "self_attn.q_a_layernorm.weight");
        EXPECT_LA(m, l, "self_attn.q_b_proj.weight");
        EXPECT_LT(m, l, "self_attn.kv_a_proj_with_mqa.weight", bf, 64 + 16, 256);
        EXPECT_LT(m, l, "self_attn.kv_a_layernorm.weight", bf, 64, 0);
        EXPECT_LT(m, l, "self_attn.kv_b_proj.weight", bf, 4 * (32 + 24), 64);
        EXPECT_LT(m, l, "self_attn.o_proj.weight", bf, 256, 4 * 24);
        EXPECT_LA(m, l, "mlp.shared_experts.gate_proj.weight");
        EXPECT_LA(m, l, "mlp.gate.e_score_correction_bias");
        CHECK(ferry_arch_layer_is_moe(a, l) == (l >= 1));
    }
    EXPECT_LT(m, 0, "mlp.gate_proj.weight", bf, 512, 256);
    EXPECT_LT(m, 1, "mlp.gate.weight", bf, 8, 256);
    EXPECT_LT(m, 2, "mlp.experts.7.down_proj.weight", bf, 256, 96);
    /* embed + dense(2 + 5 + 3) + 2 x moe(2 + 5 + 1 + 8 x 3) + norm */
    CHECK_EQ_INT(ferry_model_tensor_count(m), 1 + 10 + 2 * 32 + 1);
    EXPECT_LA(m, 3, "eh_proj.weight");
    ferry_model_destroy(m);

    /* same config, moe_layer_freq 2, first_k_dense 0: layers 0 and 2 are MoE */
    m = from_json(ctx, "ds-freq",
                  "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, "
                  "\"num_hidden_layers\": 3, \"num_attention_heads\": 4, "
                  "\"intermediate_size\": 512, \"vocab_size\": 1024, \"kv_lora_rank\": 64, "
                  "\"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 16, \"v_head_dim\": 24, "
                  "\"n_routed_experts\": 8, \"num_experts_per_tok\": 2, "
                  "\"moe_intermediate_size\": 96, \"moe_layer_freq\": 2, "
                  "\"n_shared_experts\": 2, \"topk_method\": \"noaux_tc\"}",
                  NULL);
    a = ferry_model_arch(m);
    for (int64_t l = 0; l < 3; l++) {
        bool moe = l % 2 == 0;
        CHECK(ferry_arch_layer_is_moe(a, l) == moe);
        CHECK(layer_has(m, l, "mlp.gate.weight") == moe);
        CHECK(layer_has(m, l, "mlp.gate_proj.weight") == !moe);
    }
    /* n_shared_experts 2: one shared MLP of 2 x moe_intermediate_size */
    EXPECT_LT(m, 0, "mlp.shared_experts.gate_proj.weight", bf, 192, 256);
    EXPECT_LT(m, 0, "mlp.shared_experts.down_proj.weight", bf, 256, 192);
    EXPECT_LT(m, 2, "mlp.gate.e_score_correction_bias", FERRY_DTYPE_F32, 8, 0);
    EXPECT_TENSOR(m, "lm_head.weight", bf, 1024, 256);
    ferry_model_destroy(m);
}

static void test_dtypes(ferry_ctx_t *ctx) {
    const char *f32_cfg =
        "{\"model_type\": \"qwen3\", \"hidden_size\": 64, \"num_hidden_layers\": 2, "
        "\"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 16, "
        "\"intermediate_size\": 128, \"vocab_size\": 1000, \"torch_dtype\": \"float32\"}";
    ferry_model_t *m = from_json(ctx, "f32", f32_cfg, NULL);
    CHECK_EQ_INT(ferry_model_arch(m)->dtype, FERRY_DTYPE_F32);
    expect_all_dtype(m, FERRY_DTYPE_F32, NULL);
    CHECK(ferry_model_byte_size(m) == 4 * ferry_model_param_count(m));
    EXPECT_LT(m, 1, "self_attn.k_norm.weight", FERRY_DTYPE_F32, 16, 0);
    ferry_model_destroy(m);

    /* FERRY_MODEL_OPT_DTYPE overrides torch_dtype */
    ferry_model_options_t o = {.field_mask = FERRY_MODEL_OPT_DTYPE, .dtype = FERRY_DTYPE_F16};
    m = from_json(ctx, "f32-as-f16", f32_cfg, &o);
    CHECK_EQ_INT(ferry_model_arch(m)->dtype, FERRY_DTYPE_F16);
    expect_all_dtype(m, FERRY_DTYPE_F16, NULL);
    CHECK(ferry_model_byte_size(m) == 2 * ferry_model_param_count(m));
    ferry_model_destroy(m);

    /* dtype set but its field_mask bit clear: ignored */
    ferry_model_options_t unmasked = {.field_mask = 0, .dtype = FERRY_DTYPE_F16};
    m = from_json(ctx, "f32-unmasked", f32_cfg, &unmasked);
    expect_all_dtype(m, FERRY_DTYPE_F32, NULL);
    ferry_model_destroy(m);

    /* the override applies to bundled models too, except the F32 router bias */
    ferry_model_options_t f32 = {.field_mask = FERRY_MODEL_OPT_DTYPE, .dtype = FERRY_DTYPE_F32};
    m = test_model(ctx, "qwen3-0.6b", &f32);
    expect_all_dtype(m, FERRY_DTYPE_F32, NULL);
    CHECK(ferry_model_byte_size(m) == 4ull * 596049920ull);
    ferry_model_destroy(m);
    ferry_model_options_t fp8 = {.field_mask = FERRY_MODEL_OPT_DTYPE | FERRY_MODEL_OPT_MTP,
                                 .dtype = FERRY_DTYPE_F8_E4M3, .include_mtp = true};
    m = test_model(ctx, "deepseek-v3", &fp8);
    expect_all_dtype(m, FERRY_DTYPE_F8_E4M3, "e_score_correction_bias");
    EXPECT_LT(m, 61, "mlp.gate.e_score_correction_bias", FERRY_DTYPE_F32, 256, 0);
    EXPECT_LT(m, 61, "eh_proj.weight", FERRY_DTYPE_F8_E4M3, 7168, 14336);
    ferry_model_destroy(m);

    /* torch names with a "torch." prefix and safetensors names are accepted */
    m = from_json(ctx, "f16",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                  "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 100, "
                  "\"torch_dtype\": \"torch.float16\"}",
                  NULL);
    expect_all_dtype(m, FERRY_DTYPE_F16, NULL);
    ferry_model_destroy(m);

    /* no torch_dtype: bf16 */
    m = from_json(ctx, "nodtype",
                  "{\"model_type\": \"llama\", \"hidden_size\": 64, \"num_hidden_layers\": 1, "
                  "\"num_attention_heads\": 4, \"intermediate_size\": 128, \"vocab_size\": 100}",
                  NULL);
    expect_all_dtype(m, FERRY_DTYPE_BF16, NULL);
    ferry_model_destroy(m);

    /* an invalid override dtype is an argument error */
    ferry_model_options_t bad = {.field_mask = FERRY_MODEL_OPT_DTYPE,
                                 .dtype = (ferry_dtype_t)FERRY_DTYPE_COUNT};
    ferry_model_t *out = NULL;
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "bad", f32_cfg, strlen(f32_cfg), &bad, &out),
                FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx), "dtype");
    CHECK(out == NULL);
}

/* ---- custom specs ---------------------------------------------------------- */

static void test_custom(ferry_ctx_t *ctx) {
    ferry_model_t *m = NULL;
    CHECK_OK(ferry_model_create(ctx, "custom-spec", &m), ferry_ctx_error(ctx));
    CHECK(m != NULL);
    CHECK(strcmp(ferry_model_name(m), "custom-spec") == 0);
    CHECK_EQ_INT(ferry_model_arch(m)->family, FERRY_FAMILY_CUSTOM);
    CHECK_EQ_INT(ferry_model_tensor_count(m), 0);
    CHECK(ferry_model_param_count(m) == 0);
    CHECK(!ferry_model_find(m, "w", NULL));
    CHECK(strcmp(ferry_model_error(m), "") == 0);

    const int64_t s23[2] = {2, 3}, s5[1] = {5};
    uint32_t idx = 99;
    CHECK_OK(ferry_model_add_tensor(m, "layer.w", FERRY_DTYPE_BF16, 2, s23, &idx),
             ferry_model_error(m));
    CHECK_EQ_INT(idx, 0);
    CHECK_OK(ferry_model_add_tensor(m, "layer.b", FERRY_DTYPE_F32, 1, s5, &idx),
             ferry_model_error(m));
    CHECK_EQ_INT(idx, 1);
    CHECK_OK(ferry_model_add_tensor(m, "no.index", FERRY_DTYPE_U8, 1, s5, NULL),
             ferry_model_error(m));
    CHECK_EQ_INT(ferry_model_tensor_count(m), 3);

    uint32_t found = 99;
    CHECK(ferry_model_find(m, "layer.w", &found));
    CHECK_EQ_INT(found, 0);
    CHECK(ferry_model_find(m, "layer.b", &found));
    CHECK_EQ_INT(found, 1);
    CHECK(ferry_model_find(m, "no.index", NULL));
    CHECK(!ferry_model_find(m, "layer", &found));
    CHECK(!ferry_model_find(m, "layer.w.", &found));
    CHECK_EQ_INT(found, 1); /* untouched on a miss */
    ferry_tensor_info_t t;
    CHECK(ferry_model_tensor(m, 0, &t));
    CHECK(strcmp(t.name, "layer.w") == 0);
    CHECK_EQ_INT(t.dtype, FERRY_DTYPE_BF16);
    CHECK_EQ_INT(t.ndim, 2);
    CHECK_EQ_INT(t.shape[0], 2);
    CHECK_EQ_INT(t.shape[1], 3);
    CHECK(ferry_model_tensor(m, 1, &t));
    CHECK_EQ_INT(t.dtype, FERRY_DTYPE_F32);
    CHECK_EQ_INT(t.ndim, 1);
    CHECK_EQ_INT(t.shape[0], 5);
    CHECK(!ferry_model_tensor(m, 3, &t));
    CHECK(ferry_model_param_count(m) == 6 + 5 + 5);
    CHECK(ferry_model_byte_size(m) == 6 * 2 + 5 * 4 + 5);

    /* duplicate name */
    CHECK_FAILS(ferry_model_add_tensor(m, "layer.w", FERRY_DTYPE_BF16, 2, s23, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "layer.w");
    CHECK(strstr(ferry_model_error(m), "custom-spec") != NULL);
    /* same name with another dtype/shape is still a duplicate */
    CHECK_FAILS(ferry_model_add_tensor(m, "layer.b", FERRY_DTYPE_F16, 1, s5, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "layer.b");
    /* zero, negative dimensions */
    const int64_t zero[2] = {4, 0}, neg[2] = {-1, 4};
    CHECK_FAILS(ferry_model_add_tensor(m, "zero.dim", FERRY_DTYPE_BF16, 2, zero, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "zero.dim");
    CHECK_FAILS(ferry_model_add_tensor(m, "neg.dim", FERRY_DTYPE_BF16, 2, neg, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "neg.dim");
    /* more than FERRY_MAX_DIMS dimensions */
    const int64_t nine[9] = {1, 1, 1, 1, 1, 1, 1, 1, 1};
    CHECK_FAILS(ferry_model_add_tensor(m, "nine.dims", FERRY_DTYPE_BF16, 9, nine, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "nine.dims");
    /* exactly FERRY_MAX_DIMS is fine */
    CHECK_OK(ferry_model_add_tensor(m, "eight.dims", FERRY_DTYPE_BF16, 8, nine, &idx),
             ferry_model_error(m));
    CHECK_EQ_INT(idx, 3);
    CHECK(ferry_model_tensor(m, 3, &t));
    CHECK_EQ_INT(t.ndim, 8);
    /* invalid dtypes */
    CHECK_FAILS(ferry_model_add_tensor(m, "bad.dtype", (ferry_dtype_t)FERRY_DTYPE_COUNT, 1, s5,
                                       NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "bad.dtype");
    CHECK_FAILS(ferry_model_add_tensor(m, "neg.dtype", (ferry_dtype_t)-1, 1, s5, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "dtype");
    /* empty / NULL name, NULL shape */
    CHECK_FAILS(ferry_model_add_tensor(m, "", FERRY_DTYPE_BF16, 1, s5, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "name");
    CHECK_FAILS(ferry_model_add_tensor(m, NULL, FERRY_DTYPE_BF16, 1, s5, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "name");
    CHECK_FAILS(ferry_model_add_tensor(m, "null.shape", FERRY_DTYPE_BF16, 2, NULL, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "null.shape");
    /* none of the failures added anything */
    CHECK_EQ_INT(ferry_model_tensor_count(m), 4);
    CHECK(!ferry_model_find(m, "zero.dim", NULL));
    CHECK(!ferry_model_find(m, "nine.dims", NULL));
    CHECK(!ferry_model_find(m, "bad.dtype", NULL));
    CHECK(ferry_model_param_count(m) == 6 + 5 + 5 + 1);

    /* many tensors: the name index grows and every name still resolves */
    for (int i = 0; i < 3000; i++) {
        char name[64];
        snprintf(name, sizeof name, "many.%d.weight", i);
        const int64_t shp[2] = {i + 1, 2};
        CHECK_OK(ferry_model_add_tensor(m, name, FERRY_DTYPE_F16, 2, shp, &idx),
                 ferry_model_error(m));
        CHECK_EQ_INT(idx, 4 + i);
    }
    for (int i = 0; i < 3000; i++) {
        char name[64];
        snprintf(name, sizeof name, "many.%d.weight", i);
        CHECK(ferry_model_find(m, name, &found));
        CHECK_EQ_INT(found, 4 + i);
        CHECK(ferry_model_tensor(m, found, &t));
        CHECK_EQ_INT(t.shape[0], i + 1);
    }
    CHECK(ferry_model_find(m, "layer.w", &found));
    CHECK_EQ_INT(found, 0);
    CHECK_FAILS(ferry_model_add_tensor(m, "many.1234.weight", FERRY_DTYPE_F16, 1, s5, NULL),
                FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m), "many.1234.weight");
    expect_consistent_ndim(m, FERRY_MAX_DIMS);
    ferry_model_destroy(m);
    ferry_model_destroy(NULL);

    /* NULL arguments */
    m = NULL;
    CHECK(ferry_model_create(ctx, NULL, &m) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK(m == NULL);
    CHECK(ferry_model_add_tensor(NULL, "x", FERRY_DTYPE_BF16, 1, s5, NULL) ==
          FERRY_ERR_INVALID_ARGUMENT);
    CHECK(strcmp(ferry_model_error(NULL), "") == 0);
}

/* Runs last: a failure here crashes (UBSan aborts on the NULL store). */
static void test_create_null_out(ferry_ctx_t *ctx) {
    // Regression (fixed): before the fix, ferry_model_create(ctx, "x",
    // NULL) stores through the NULL out pointer (src/layout/model.c,
    // ferry_model_create: `*out = m;`; model_new only checked its own, never
    // NULL, out) and leaks the spec; UBSan: "model.c:32:10: runtime error:
    // store to null pointer". Expected FERRY_ERR_INVALID_ARGUMENT with a detail
    // naming "out", as ferry_model_from_hf_config does.
    CHECK_FAILS(ferry_model_create(ctx, "x", NULL), FERRY_ERR_INVALID_ARGUMENT,
                ferry_ctx_error(ctx), "out");
}

static void test_missing_file(ferry_ctx_t *ctx) {
    const char *path = "/nonexistent-ferry-h2-dir/no-such-model.json";
    ferry_model_t *m = NULL;
    CHECK_FAILS(ferry_model_from_hf_config_file(ctx, path, NULL, &m), FERRY_ERR_NOT_FOUND,
                ferry_ctx_error(ctx), path);
    CHECK(m == NULL);
    char path2[1024];
    snprintf(path2, sizeof path2, "%s/does-not-exist.json", FERRY_TEST_MODELS);
    CHECK_FAILS(ferry_model_from_hf_config_file(ctx, path2, NULL, &m), FERRY_ERR_NOT_FOUND,
                ferry_ctx_error(ctx), path2);
    CHECK(m == NULL);
    /* a directory is not a config: some error, no model */
    ferry_status_t st = ferry_model_from_hf_config_file(ctx, FERRY_TEST_MODELS, NULL, &m);
    CHECK(st != FERRY_OK);
    CHECK(m == NULL);
    CHECK(strstr(ferry_ctx_error(ctx), FERRY_TEST_MODELS) != NULL);
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    test_qwen3_0_6b(ctx);
    test_qwen3_8b(ctx);
    test_qwen3_30b_a3b(ctx);
    test_deepseek_v3(ctx);
    test_kimi_k2(ctx);
    test_llama_biases(ctx);
    test_llama_head_dim(ctx);
    test_qwen2(ctx);
    test_qwen3_moe_sparse(ctx);
    test_deepseek_small(ctx);
    test_dtypes(ctx);
    test_custom(ctx);
    test_missing_file(ctx);
    test_create_null_out(ctx);
    ferry_ctx_destroy(ctx);
    return 0;
}
