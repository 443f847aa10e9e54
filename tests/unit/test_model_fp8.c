/* FP8 block-quantized tensors in model specs:
 * - deepseek-v3 / kimi-k2 under FERRY_MODEL_QUANT_AUTO: exactly vLLM's
 *   Fp8Config linears (attention projections, dense, shared and routed
 *   expert MLPs, the MTP layer's too) are F8_E4M3 with an F32
 *   `..._scale_inv` of ceil(rows/128) x ceil(cols/128); embeddings, norms,
 *   lm_head, router gate and bias, eh_proj stay; counts and scale totals
 *   against a hand count of the checkpoint's shapes; NONE and the defaults
 *   unchanged;
 * - quantization_config: scale_fmt, ignored_layers / modules_to_not_convert
 *   (module prefixes on component boundaries), FP8 without a config, and
 *   every field ferry cannot honour refused naming the field and value;
 * - ferry_model_add_fp8 / ferry_model_link_fp8 on custom specs: shapes of
 *   2-d and 3-d weights, every refusal, a failed call changing nothing;
 * - ferry_layout_digest covers the quant kind, partner and flags. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

static uint32_t find(const ferry_model_t *m, const char *name) {
    uint32_t i = UINT32_MAX;
    if (!ferry_model_find(m, name, &i)) {
        fprintf(stderr, "model %s: no tensor %s\n", ferry_model_name(m), name);
        exit(1);
    }
    return i;
}

/* `name` is an fp8 weight [d0, d1] with flags, its scale `name`_scale_inv
 * F32 [ceil(d0/128), ceil(d1/128)] names it back. */
static void expect_fp8_at(int line, const ferry_model_t *m, const char *name, int64_t d0, int64_t d1,
                          uint32_t flags) {
    uint32_t w = find(m, name), s;
    char sname[300];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    s = find(m, sname);
    ferry_tensor_info_t tw, ts;
    ferry_tensor_quant_t qw, qs;
    CHECK(ferry_model_tensor(m, w, &tw) && ferry_model_tensor(m, s, &ts));
    CHECK(ferry_model_tensor_quant(m, w, &qw) && ferry_model_tensor_quant(m, s, &qs));
    bool ok = tw.dtype == FERRY_DTYPE_F8_E4M3 && tw.ndim == 2 && tw.shape[0] == d0 && tw.shape[1] == d1 &&
              ts.dtype == FERRY_DTYPE_F32 && ts.ndim == 2 && ts.shape[0] == cdiv(d0, 128) &&
              ts.shape[1] == cdiv(d1, 128) && qw.kind == FERRY_QUANT_FP8_BLOCK && qw.partner == s &&
              qs.kind == FERRY_QUANT_FP8_SCALE && qs.partner == w && qw.flags == flags && qs.flags == flags &&
              qw.block[0] == 128 && qw.block[1] == 128 && qs.block[0] == 128 && qs.block[1] == 128;
    if (!ok) {
        fprintf(stderr,
                "%s:%d: %s: %s [%lld, %lld] kind %d partner %u flags %u; scale %s [%lld, %lld] kind %d partner %u; "
                "expected F8_E4M3 [%lld, %lld] with F32 [%lld, %lld], flags %u\n",
                __FILE__, line, name, ferry_dtype_name(tw.dtype), (long long)tw.shape[0], (long long)tw.shape[1],
                qw.kind, qw.partner, qw.flags, ferry_dtype_name(ts.dtype), (long long)ts.shape[0],
                (long long)ts.shape[1], qs.kind, qs.partner, (long long)d0, (long long)d1, (long long)cdiv(d0, 128),
                (long long)cdiv(d1, 128), flags);
        exit(1);
    }
}

/* `name` is a plain tensor of dtype dt and has no scale. */
static void expect_plain_at(int line, const ferry_model_t *m, const char *name, ferry_dtype_t dt) {
    uint32_t i = find(m, name);
    ferry_tensor_info_t t;
    ferry_tensor_quant_t q;
    CHECK(ferry_model_tensor(m, i, &t) && ferry_model_tensor_quant(m, i, &q));
    char sname[300];
    snprintf(sname, sizeof sname, "%s_scale_inv", name);
    if (t.dtype != dt || q.kind != FERRY_QUANT_NONE || q.partner != UINT32_MAX || q.flags != 0 ||
        q.block[0] != 0 || ferry_model_find(m, sname, NULL)) {
        fprintf(stderr, "%s:%d: %s is %s kind %d (scale %s); expected plain %s\n", __FILE__, line, name,
                ferry_dtype_name(t.dtype), q.kind, ferry_model_find(m, sname, NULL) ? "present" : "absent",
                ferry_dtype_name(dt));
        exit(1);
    }
}

#define EXPECT_FP8(m, name, d0, d1, fl) expect_fp8_at(__LINE__, (m), (name), (d0), (d1), (fl))
#define EXPECT_PLAIN(m, name, dt) expect_plain_at(__LINE__, (m), (name), (dt))

static char *layer(char *buf, int64_t l, const char *suffix) {
    snprintf(buf, 256, "model.layers.%lld.%.200s", (long long)l, suffix);
    return buf;
}

/* Every pair consistent, whatever the spec: weights F8_E4M3 2-d/3-d,
 * scales F32 of the block shape, partners naming each other, scales after
 * every plain and fp8 tensor; returns the number of scale floats. */
static uint64_t check_pairs(const ferry_model_t *m, uint32_t *nfp8) {
    uint64_t floats = 0;
    uint32_t n = ferry_model_tensor_count(m), first_scale = UINT32_MAX, weights = 0;
    for (uint32_t i = 0; i < n; i++) {
        ferry_tensor_info_t t, p;
        ferry_tensor_quant_t q, pq;
        CHECK(ferry_model_tensor(m, i, &t) && ferry_model_tensor_quant(m, i, &q));
        if (q.kind == FERRY_QUANT_NONE) {
            CHECK(first_scale == UINT32_MAX); /* the scales come last */
            continue;
        }
        CHECK(ferry_model_tensor(m, q.partner, &p) && ferry_model_tensor_quant(m, q.partner, &pq));
        CHECK(pq.partner == i && pq.flags == q.flags);
        if (q.kind == FERRY_QUANT_FP8_BLOCK) {
            CHECK(first_scale == UINT32_MAX);
            CHECK(pq.kind == FERRY_QUANT_FP8_SCALE && t.dtype == FERRY_DTYPE_F8_E4M3 && p.dtype == FERRY_DTYPE_F32);
            CHECK(t.ndim == 2 && p.ndim == 2);
            CHECK(p.shape[0] == cdiv(t.shape[0], 128) && p.shape[1] == cdiv(t.shape[1], 128));
            char want[300];
            snprintf(want, sizeof want, "%s_scale_inv", t.name);
            CHECK(!strcmp(p.name, want));
            weights++;
        } else {
            CHECK(q.kind == FERRY_QUANT_FP8_SCALE && pq.kind == FERRY_QUANT_FP8_BLOCK);
            if (first_scale == UINT32_MAX) first_scale = i;
            floats += (uint64_t)t.shape[0] * (uint64_t)t.shape[1];
        }
    }
    CHECK_EQ_INT(weights, ferry_model_quant_count(m));
    CHECK_EQ_INT(n - (first_scale == UINT32_MAX ? n : first_scale), weights);
    *nfp8 = weights;
    return floats;
}

/* Scale floats of one MLA attention block, a dense MLP, an MoE MLP
 * (E experts + 1 shared of inter 2048), counted by hand from the
 * checkpoint's shapes (hidden 7168 = 56 blocks, q_lora 1536 = 12,
 * kv_a 576 rows = 5 blocks, kv_lora 512 = 4). */
static uint64_t mla_scales(int64_t heads) {
    return 12 * 56                     /* q_a_proj [1536, 7168] */
           + (heads * 192 / 128) * 12  /* q_b_proj [heads*192, 1536] */
           + 5 * 56                    /* kv_a_proj_with_mqa [576, 7168] */
           + (heads * 256 / 128) * 4   /* kv_b_proj [heads*256, 512] */
           + 56 * (heads * 128 / 128); /* o_proj [7168, heads*128] */
}
static const uint64_t dense_scales = 3 * 144 * 56; /* gate/up [18432, 7168], down [7168, 18432] */
static uint64_t moe_scales(int64_t E) { return (uint64_t)(E + 1) * 3 * 16 * 56; }

static void check_deepseek_fp8(const ferry_model_t *m, const ferry_model_t *plain, int64_t heads, int64_t E,
                               int64_t first_dense, int64_t layers) {
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    char s[256], s2[256];
    /* plain tensors keep their indices: the scales come after them */
    uint32_t np = ferry_model_tensor_count(plain);
    for (uint32_t i = 0; i < np; i++) {
        ferry_tensor_info_t a, b;
        CHECK(ferry_model_tensor(plain, i, &a) && ferry_model_tensor(m, i, &b));
        CHECK(!strcmp(a.name, b.name) && a.ndim == b.ndim && !memcmp(a.shape, b.shape, sizeof a.shape));
    }
    uint32_t nfp8;
    uint64_t floats = check_pairs(m, &nfp8);
    int64_t moe_layers = layers - first_dense;
    CHECK_EQ_INT(nfp8, layers * 5 + first_dense * 3 + moe_layers * (E * 3 + 3));
    CHECK_EQ_INT(ferry_model_tensor_count(m), np + nfp8);
    CHECK(floats == (uint64_t)layers * mla_scales(heads) + (uint64_t)first_dense * dense_scales +
                        (uint64_t)moe_layers * moe_scales(E));
    CHECK(ferry_model_param_count(m) == ferry_model_param_count(plain) + floats);
    /* bytes: every fp8 element 1 byte instead of 2, plus 4 per scale */
    uint64_t fp8_elems = 0;
    for (uint32_t i = 0; i < np; i++) {
        ferry_tensor_info_t t;
        ferry_tensor_quant_t q;
        ferry_model_tensor(m, i, &t);
        ferry_model_tensor_quant(m, i, &q);
        if (q.kind == FERRY_QUANT_FP8_BLOCK) fp8_elems += (uint64_t)t.shape[0] * (uint64_t)t.shape[1];
    }
    CHECK(ferry_model_byte_size(m) == ferry_model_byte_size(plain) - fp8_elems + 4 * floats);

    /* the fp8 ones (table 1 of the design memo), with their scale shapes */
    for (int64_t l = 0; l < layers; l += (l == first_dense ? layers - 1 - first_dense : 1)) {
        EXPECT_FP8(m, layer(s, l, "self_attn.q_a_proj.weight"), 1536, 7168, 0);
        EXPECT_FP8(m, layer(s, l, "self_attn.q_b_proj.weight"), heads * 192, 1536, 0);
        EXPECT_FP8(m, layer(s, l, "self_attn.kv_a_proj_with_mqa.weight"), 576, 7168, 0); /* 4.5 row blocks */
        EXPECT_FP8(m, layer(s, l, "self_attn.kv_b_proj.weight"), heads * 256, 512, 0);
        EXPECT_FP8(m, layer(s, l, "self_attn.o_proj.weight"), 7168, heads * 128, 0);
        EXPECT_PLAIN(m, layer(s, l, "input_layernorm.weight"), bf);
        EXPECT_PLAIN(m, layer(s, l, "post_attention_layernorm.weight"), bf);
        EXPECT_PLAIN(m, layer(s, l, "self_attn.q_a_layernorm.weight"), bf);
        EXPECT_PLAIN(m, layer(s, l, "self_attn.kv_a_layernorm.weight"), bf);
        if (l < first_dense) {
            EXPECT_FP8(m, layer(s, l, "mlp.gate_proj.weight"), 18432, 7168, 0);
            EXPECT_FP8(m, layer(s, l, "mlp.up_proj.weight"), 18432, 7168, 0);
            EXPECT_FP8(m, layer(s, l, "mlp.down_proj.weight"), 7168, 18432, 0);
        } else {
            EXPECT_PLAIN(m, layer(s, l, "mlp.gate.weight"), bf);
            EXPECT_PLAIN(m, layer(s, l, "mlp.gate.e_score_correction_bias"), FERRY_DTYPE_F32);
            EXPECT_FP8(m, layer(s, l, "mlp.shared_experts.gate_proj.weight"), 2048, 7168, 0);
            EXPECT_FP8(m, layer(s, l, "mlp.shared_experts.up_proj.weight"), 2048, 7168, 0);
            EXPECT_FP8(m, layer(s, l, "mlp.shared_experts.down_proj.weight"), 7168, 2048, 0);
            EXPECT_FP8(m, layer(s, l, "mlp.experts.0.gate_proj.weight"), 2048, 7168, 0);
            snprintf(s2, sizeof s2, "mlp.experts.%lld.down_proj.weight", (long long)(E - 1));
            EXPECT_FP8(m, layer(s, l, s2), 7168, 2048, 0);
            snprintf(s2, sizeof s2, "mlp.experts.%lld.up_proj.weight", (long long)(E - 1));
            EXPECT_FP8(m, layer(s, l, s2), 2048, 7168, 0);
        }
    }
    EXPECT_PLAIN(m, "model.embed_tokens.weight", bf);
    EXPECT_PLAIN(m, "model.norm.weight", bf);
    EXPECT_PLAIN(m, "lm_head.weight", bf);
}

static void test_bundled(ferry_ctx_t *ctx) {
    ferry_model_options_t none = {.field_mask = FERRY_MODEL_OPT_QUANT, .quant = FERRY_MODEL_QUANT_NONE};
    ferry_model_options_t autoq = {.field_mask = FERRY_MODEL_OPT_QUANT, .quant = FERRY_MODEL_QUANT_AUTO};
    ferry_model_options_t auto_mtp = {.field_mask = FERRY_MODEL_OPT_QUANT | FERRY_MODEL_OPT_MTP,
                                      .quant = FERRY_MODEL_QUANT_AUTO, .include_mtp = true};
    ferry_model_options_t mtp = {.field_mask = FERRY_MODEL_OPT_MTP, .include_mtp = true};
    ferry_model_options_t unmasked = {.field_mask = 0, .quant = FERRY_MODEL_QUANT_AUTO};

    /* NONE (asked for, or left out, or not masked in): the trainer's spec of docs/layouts.md */
    ferry_model_t *plain = test_model(ctx, "deepseek-v3", NULL);
    const ferry_model_options_t *nones[2] = {&none, &unmasked};
    for (int k = 0; k < 2; k++) {
        ferry_model_t *m = test_model(ctx, "deepseek-v3", nones[k]);
        CHECK(ferry_model_param_count(m) == 671026419200ull);
        CHECK_EQ_INT(ferry_model_quant_count(m), 0);
        CHECK_EQ_INT(ferry_model_tensor_count(m), ferry_model_tensor_count(plain));
        EXPECT_PLAIN(m, "model.layers.3.self_attn.q_b_proj.weight", FERRY_DTYPE_BF16);
        ferry_model_destroy(m);
    }
    CHECK_EQ_INT(ferry_model_quant_count(plain), 0);

    /* AUTO: the config's quantization_config (fp8, e4m3, [128, 128], dynamic) */
    ferry_model_t *m = test_model(ctx, "deepseek-v3", &autoq);
    check_deepseek_fp8(m, plain, 128, 256, 3, 61);
    /* the CLI's figures (docs/fp8.md): 45032 weights, 40,838,232 scale floats */
    uint32_t nfp8;
    CHECK(check_pairs(m, &nfp8) == 40838232ull);
    CHECK_EQ_INT(nfp8, 45032);
    ferry_model_destroy(m);
    ferry_model_destroy(plain);

    /* with MTP: layer 61's attention and MoE too; its eh_proj, enorm, hnorm,
     * shared head and embedding stay bf16 (vLLM's DeepSeekMTP) */
    plain = test_model(ctx, "deepseek-v3", &mtp);
    m = test_model(ctx, "deepseek-v3", &auto_mtp);
    check_deepseek_fp8(m, plain, 128, 256, 3, 62);
    char s[256];
    EXPECT_FP8(m, layer(s, 61, "self_attn.q_a_proj.weight"), 1536, 7168, 0);
    EXPECT_FP8(m, layer(s, 61, "mlp.experts.255.down_proj.weight"), 7168, 2048, 0);
    EXPECT_PLAIN(m, layer(s, 61, "eh_proj.weight"), FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, layer(s, 61, "enorm.weight"), FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, layer(s, 61, "hnorm.weight"), FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, layer(s, 61, "embed_tokens.weight"), FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, layer(s, 61, "shared_head.head.weight"), FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, layer(s, 61, "shared_head.norm.weight"), FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, layer(s, 61, "mlp.gate.weight"), FERRY_DTYPE_BF16);
    /* an fp8 spec is an engine's: trainer layouts refuse it (engine layouts:
     * test_builders, layout_matrix.txt) */
    ferry_parallel_t p = ferry_parallel_defaults(FERRY_SIDE_TRAIN);
    ferry_layout_t *l = NULL;
    CHECK_FAILS(ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l), FERRY_ERR_UNSUPPORTED, ferry_ctx_error(ctx),
                "trainer layouts hold the unquantized weights");
    CHECK(l == NULL);
    ferry_model_destroy(m);
    ferry_model_destroy(plain);

    /* kimi-k2: 64 heads, 384 experts, one dense layer */
    plain = test_model(ctx, "kimi-k2", NULL);
    CHECK(ferry_model_param_count(plain) == 1026408232448ull);
    m = test_model(ctx, "kimi-k2", &autoq);
    check_deepseek_fp8(m, plain, 64, 384, 1, 61);
    CHECK(check_pairs(m, &nfp8) == 62495192ull);
    CHECK_EQ_INT(nfp8, 69608);
    ferry_model_destroy(m);
    ferry_model_destroy(plain);

    /* AUTO on a config without quantization_config: the plain spec */
    m = test_model(ctx, "qwen3-8b", &autoq);
    CHECK_EQ_INT(ferry_model_quant_count(m), 0);
    CHECK(ferry_model_param_count(m) == 8190735360ull);
    ferry_model_destroy(m);
}

/* ---- quantization_config on a small deepseek config ---------------------- */

#define DS_HEAD                                                                                    \
    "{\"model_type\": \"deepseek_v3\", \"hidden_size\": 256, \"num_hidden_layers\": 12, "          \
    "\"num_attention_heads\": 4, \"intermediate_size\": 384, \"vocab_size\": 1024, "               \
    "\"q_lora_rank\": 192, \"kv_lora_rank\": 128, \"qk_nope_head_dim\": 32, \"qk_rope_head_dim\": 64, " \
    "\"v_head_dim\": 32, \"n_routed_experts\": 4, \"num_experts_per_tok\": 2, "                    \
    "\"moe_intermediate_size\": 128, \"first_k_dense_replace\": 1, \"n_shared_experts\": 1, "      \
    "\"topk_method\": \"noaux_tc\""

static ferry_model_t *ds(ferry_ctx_t *ctx, const char *json, ferry_model_quant_t quant, uint32_t flags) {
    ferry_model_options_t o = {.field_mask = FERRY_MODEL_OPT_QUANT, .quant = quant, .quant_flags = flags};
    ferry_model_t *m = NULL;
    CHECK_OK(ferry_model_from_hf_config(ctx, "ds", json, strlen(json), &o, &m), ferry_ctx_error(ctx));
    uint32_t n;
    check_pairs(m, &n);
    return m;
}

static void refused(ferry_ctx_t *ctx, const char *json, ferry_model_quant_t quant, ferry_status_t want,
                    const char *needle, const char *needle2) {
    ferry_model_options_t o = {.field_mask = FERRY_MODEL_OPT_QUANT, .quant = quant};
    ferry_model_t *m = NULL;
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "ds", json, strlen(json), &o, &m), want, ferry_ctx_error(ctx),
                needle);
    CHECK(m == NULL);
    if (needle2 && !strstr(ferry_ctx_error(ctx), needle2)) {
        fprintf(stderr, "detail \"%s\" does not name \"%s\"\n", ferry_ctx_error(ctx), needle2);
        exit(1);
    }
}

static void test_quant_config(ferry_ctx_t *ctx) {
    const char *fp8q = DS_HEAD ", \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
                               "\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}";
    const char *noq = DS_HEAD "}";
    char s[256];
    /* 12 layers: 1 dense + 11 MoE, each 5 attention linears; dense 3; MoE 4 x 3 + shared 3 */
    const uint32_t all = 12 * 5 + 3 + 11 * 15;
    ferry_model_t *m = ds(ctx, fp8q, FERRY_MODEL_QUANT_AUTO, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), all);
    /* kv_a [128 + 64, 256]: 1.5 row blocks -> 2; q_b [4 * 96, 192] -> [3, 2] */
    EXPECT_FP8(m, layer(s, 0, "self_attn.kv_a_proj_with_mqa.weight"), 192, 256, 0);
    EXPECT_FP8(m, layer(s, 0, "self_attn.q_b_proj.weight"), 384, 192, 0);
    EXPECT_FP8(m, layer(s, 11, "mlp.experts.3.down_proj.weight"), 256, 128, 0);
    EXPECT_PLAIN(m, layer(s, 11, "mlp.gate.weight"), FERRY_DTYPE_BF16);
    ferry_model_destroy(m);

    /* NONE never reads it, even broken; AUTO without one is plain */
    const char *broken = DS_HEAD ", \"quantization_config\": {\"quant_method\": \"gptq\", \"bits\": 4}}";
    m = ds(ctx, broken, FERRY_MODEL_QUANT_NONE, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), 0);
    ferry_model_destroy(m);
    m = ds(ctx, DS_HEAD ", \"quantization_config\": 7}", FERRY_MODEL_QUANT_NONE, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), 0);
    ferry_model_destroy(m);
    m = ds(ctx, noq, FERRY_MODEL_QUANT_AUTO, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), 0);
    ferry_model_destroy(m);
    m = ds(ctx, DS_HEAD ", \"quantization_config\": null}", FERRY_MODEL_QUANT_AUTO, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), 0);
    ferry_model_destroy(m);

    /* FP8 without a config: the same linears; the option's flags apply */
    m = ds(ctx, noq, FERRY_MODEL_QUANT_FP8, FERRY_FP8_UE8M0);
    CHECK_EQ_INT(ferry_model_quant_count(m), all);
    EXPECT_FP8(m, layer(s, 3, "self_attn.o_proj.weight"), 256, 128, FERRY_FP8_UE8M0);
    ferry_model_destroy(m);

    /* scale_fmt ue8m0 (DeepSeek-V3.1) */
    m = ds(ctx,
           DS_HEAD ", \"quantization_config\": {\"activation_scheme\": \"dynamic\", \"fmt\": \"e4m3\", "
                   "\"quant_method\": \"fp8\", \"scale_fmt\": \"ue8m0\", \"weight_block_size\": [128, 128]}}",
           FERRY_MODEL_QUANT_AUTO, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), all);
    EXPECT_FP8(m, layer(s, 0, "mlp.down_proj.weight"), 256, 384, FERRY_FP8_UE8M0);
    ferry_model_destroy(m);

    /* ignored_layers and modules_to_not_convert: module prefixes, on
     * component boundaries, both lists together */
    m = ds(ctx,
           DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                   "\"ignored_layers\": [\"model.layers.1\", \"model.layers.0.mlp.gate\", "
                   "\"model.layers.2.self_attn.q_a_proj\", \"model.layers.3.mlp.experts.\"], "
                   "\"modules_to_not_convert\": [\"model.layers.4.mlp.shared_experts.down_proj.weight\", "
                   "\"model.layers.5.mlp.experts.1\"]}}",
           FERRY_MODEL_QUANT_AUTO, 0);
    const ferry_dtype_t bf = FERRY_DTYPE_BF16;
    EXPECT_PLAIN(m, layer(s, 1, "self_attn.q_a_proj.weight"), bf); /* all of layer 1 */
    EXPECT_PLAIN(m, layer(s, 1, "mlp.experts.0.up_proj.weight"), bf);
    EXPECT_FP8(m, layer(s, 10, "self_attn.q_a_proj.weight"), 192, 256, 0); /* "model.layers.1" is not 10 */
    EXPECT_FP8(m, layer(s, 11, "mlp.experts.0.up_proj.weight"), 128, 256, 0);
    EXPECT_FP8(m, layer(s, 0, "mlp.gate_proj.weight"), 384, 256, 0); /* "mlp.gate" is not gate_proj */
    EXPECT_PLAIN(m, layer(s, 2, "self_attn.q_a_proj.weight"), bf);
    EXPECT_FP8(m, layer(s, 2, "self_attn.q_b_proj.weight"), 384, 192, 0);
    EXPECT_PLAIN(m, layer(s, 3, "mlp.experts.2.gate_proj.weight"), bf); /* a prefix ending in '.' */
    EXPECT_FP8(m, layer(s, 3, "mlp.shared_experts.gate_proj.weight"), 128, 256, 0);
    EXPECT_PLAIN(m, layer(s, 4, "mlp.shared_experts.down_proj.weight"), bf); /* a whole tensor name */
    EXPECT_FP8(m, layer(s, 4, "mlp.shared_experts.up_proj.weight"), 128, 256, 0);
    EXPECT_PLAIN(m, layer(s, 5, "mlp.experts.1.down_proj.weight"), bf);
    EXPECT_FP8(m, layer(s, 5, "mlp.experts.0.down_proj.weight"), 256, 128, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), all - 20 /* layer 1 */ - 1 - 12 - 1 - 3);
    ferry_model_destroy(m);

    /* what ferry cannot honour: refused, naming the field and its value */
    const ferry_model_quant_t AUTO = FERRY_MODEL_QUANT_AUTO;
    const ferry_status_t UNS = FERRY_ERR_UNSUPPORTED, BAD = FERRY_ERR_INVALID_CONFIG;
    refused(ctx, broken, AUTO, UNS, "quantization_config.quant_method = \"gptq\" is not supported", NULL);
    refused(ctx, broken, FERRY_MODEL_QUANT_FP8, UNS, "quant_method = \"gptq\"", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"fmt\": \"e5m2\", "
                         "\"weight_block_size\": [128, 128]}}",
            AUTO, UNS, "quantization_config.fmt = \"e5m2\"", "deepseek_v3");
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"static\", "
                         "\"weight_block_size\": [128, 128]}}",
            AUTO, UNS, "quantization_config.activation_scheme = \"static\"", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [64, 64]}}",
            AUTO, UNS, "quantization_config.weight_block_size = [64,64]", "[128, 128] only");
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128]}}",
            AUTO, UNS, "weight_block_size = [128]", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": \"128\"}}",
            AUTO, UNS, "weight_block_size = \"128\"", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\"}}", AUTO, UNS,
            "no weight_block_size: per-tensor fp8 is not supported", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                         "\"scale_fmt\": \"e8m0\"}}",
            AUTO, UNS, "quantization_config.scale_fmt = \"e8m0\"", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": 7}", AUTO, BAD, "quantization_config must be an object", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"fmt\": \"e4m3\"}}", AUTO, BAD,
            "quantization_config has no quant_method", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": 8}}", AUTO, BAD,
            "quantization_config.quant_method must be a string", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                         "\"ignored_layers\": \"lm_head\"}}",
            AUTO, BAD, "quantization_config.ignored_layers must be a list", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                         "\"modules_to_not_convert\": [\"lm_head\", 3]}}",
            AUTO, BAD, "quantization_config.modules_to_not_convert[1] is not a module name", NULL);
    refused(ctx, DS_HEAD ", \"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128], "
                         "\"ignored_layers\": [\"\"]}}",
            AUTO, BAD, "quantization_config.ignored_layers[0] is not a module name", NULL);
    /* other model types: refused under AUTO with an fp8 config, and under FP8 */
    const char *qwen = "{\"model_type\": \"qwen3\", \"hidden_size\": 128, \"num_hidden_layers\": 1, "
                       "\"num_attention_heads\": 2, \"intermediate_size\": 256, \"vocab_size\": 100, "
                       "\"quantization_config\": {\"quant_method\": \"fp8\", \"weight_block_size\": [128, 128]}}";
    refused(ctx, qwen, AUTO, UNS, "fp8 engine specs are generated for deepseek_v3 and kimi_k2 only", "qwen3");
    refused(ctx, qwen, FERRY_MODEL_QUANT_FP8, UNS, "deepseek_v3 and kimi_k2 only", NULL);
    ferry_model_options_t o = {.field_mask = FERRY_MODEL_OPT_QUANT};
    m = NULL;
    CHECK_OK(ferry_model_from_hf_config(ctx, "q", qwen, strlen(qwen), &o, &m), ferry_ctx_error(ctx));
    ferry_model_destroy(m); /* NONE: fine */
    /* bad options */
    o.quant = (ferry_model_quant_t)7;
    m = NULL;
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "ds", fp8q, strlen(fp8q), &o, &m), FERRY_ERR_INVALID_ARGUMENT,
                ferry_ctx_error(ctx), "invalid quant 7");
    o.quant = FERRY_MODEL_QUANT_AUTO;
    o.quant_flags = 2;
    CHECK_FAILS(ferry_model_from_hf_config(ctx, "ds", fp8q, strlen(fp8q), &o, &m), FERRY_ERR_INVALID_ARGUMENT,
                ferry_ctx_error(ctx), "unknown quant_flags 0x2");
    CHECK(m == NULL);
}

/* ---- custom specs ----------------------------------------------------------- */

static void test_custom(ferry_ctx_t *ctx) {
    ferry_model_t *m = NULL;
    CHECK_OK(ferry_model_create(ctx, "c", &m), ferry_ctx_error(ctx));
    const int64_t s2[2] = {300, 200}, s3[3] = {4, 256, 129}, s1[1] = {128}, s4[4] = {2, 2, 128, 128};
    uint32_t w2, w3, wf, v, b1, b4, b16, bi8, sc = 99;
    CHECK_OK(ferry_model_add_tensor(m, "w2", FERRY_DTYPE_BF16, 2, s2, &w2), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "w3", FERRY_DTYPE_F32, 3, s3, &w3), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "wf", FERRY_DTYPE_F8_E4M3, 2, s2, &wf), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "v", FERRY_DTYPE_BF16, 1, s1, &v), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "b4", FERRY_DTYPE_BF16, 4, s4, &b4), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "b16", FERRY_DTYPE_F16, 2, s2, &b16), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "bi8", FERRY_DTYPE_I8, 2, s2, &bi8), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "taken", FERRY_DTYPE_BF16, 2, s2, &b1), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "taken_scale_inv", FERRY_DTYPE_F32, 1, s1, NULL), ferry_model_error(m));
    uint64_t bytes = ferry_model_byte_size(m);

    /* 2-d BF16 [300, 200] -> F8_E4M3 with F32 [3, 2] */
    CHECK_OK(ferry_model_add_fp8(m, w2, 0, &sc), ferry_model_error(m));
    CHECK_EQ_INT(sc, 9);
    EXPECT_FP8(m, "w2", 300, 200, 0);
    CHECK(ferry_model_byte_size(m) == bytes - 300 * 200 + 3 * 2 * 4);
    /* 3-d F32 [4, 256, 129]: the leading dim kept, [4, 2, 2]; UE8M0 */
    CHECK_OK(ferry_model_add_fp8(m, w3, FERRY_FP8_UE8M0, &sc), ferry_model_error(m));
    ferry_tensor_info_t t;
    ferry_tensor_quant_t q;
    CHECK(ferry_model_tensor(m, sc, &t) && !strcmp(t.name, "w3_scale_inv"));
    CHECK(t.dtype == FERRY_DTYPE_F32 && t.ndim == 3 && t.shape[0] == 4 && t.shape[1] == 2 && t.shape[2] == 2);
    CHECK(ferry_model_tensor(m, w3, &t) && t.dtype == FERRY_DTYPE_F8_E4M3 && t.shape[2] == 129);
    CHECK(ferry_model_tensor_quant(m, w3, &q) && q.kind == FERRY_QUANT_FP8_BLOCK && q.partner == sc &&
          q.flags == FERRY_FP8_UE8M0);
    /* already F8_E4M3; scale index may be NULL */
    CHECK_OK(ferry_model_add_fp8(m, wf, 0, NULL), ferry_model_error(m));
    EXPECT_FP8(m, "wf", 300, 200, 0);
    CHECK_EQ_INT(ferry_model_quant_count(m), 3);

    /* refusals: nothing changes */
    uint32_t n = ferry_model_tensor_count(m);
    bytes = ferry_model_byte_size(m);
    CHECK_FAILS(ferry_model_add_fp8(m, v, 0, &sc), FERRY_ERR_UNSUPPORTED, ferry_model_error(m),
                "tensor v has 1 dimensions");
    CHECK_FAILS(ferry_model_add_fp8(m, b4, 0, &sc), FERRY_ERR_UNSUPPORTED, ferry_model_error(m),
                "tensor b4 has 4 dimensions");
    CHECK_FAILS(ferry_model_add_fp8(m, b16, 0, &sc), FERRY_ERR_UNSUPPORTED, ferry_model_error(m),
                "tensor b16 is F16; fp8 weights are quantized from BF16 or F32");
    CHECK_FAILS(ferry_model_add_fp8(m, bi8, 0, &sc), FERRY_ERR_UNSUPPORTED, ferry_model_error(m), "bi8 is I8");
    CHECK_FAILS(ferry_model_add_fp8(m, w2, 0, &sc), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "tensor w2 is already fp8 block-quantized");
    CHECK_FAILS(ferry_model_add_fp8(m, 9, 0, &sc), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "tensor w2_scale_inv is already an fp8 scale tensor");
    CHECK_FAILS(ferry_model_add_fp8(m, n, 0, &sc), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "is not in model c");
    CHECK_FAILS(ferry_model_add_fp8(m, b1, 4, &sc), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "unknown flags 0x4");
    CHECK_FAILS(ferry_model_add_fp8(m, b1, 0, &sc), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "taken_scale_inv is already in model c");
    CHECK(ferry_model_add_fp8(NULL, 0, 0, &sc) == FERRY_ERR_INVALID_ARGUMENT);
    CHECK_EQ_INT(ferry_model_tensor_count(m), n);
    CHECK(ferry_model_byte_size(m) == bytes);
    CHECK_EQ_INT(ferry_model_quant_count(m), 3);
    CHECK(ferry_model_tensor_quant(m, b1, &q) && q.kind == FERRY_QUANT_NONE);
    CHECK(ferry_model_tensor(m, b1, &t) && t.dtype == FERRY_DTYPE_BF16);
    EXPECT_PLAIN(m, "b16", FERRY_DTYPE_F16);
    CHECK(!ferry_model_tensor_quant(m, n, &q));
    CHECK(!ferry_model_tensor_quant(NULL, 0, &q));
    CHECK_EQ_INT(ferry_model_quant_count(NULL), 0);
    ferry_model_destroy(m);

    /* ferry_model_link_fp8: a pair already in the spec (a checkpoint's list) */
    CHECK_OK(ferry_model_create(ctx, "k", &m), ferry_ctx_error(ctx));
    const int64_t ss[2] = {3, 2}, bad[2] = {3, 3}, e3[3] = {2, 300, 200}, es[3] = {2, 3, 2};
    uint32_t w, s, s_bad, s_bf, wb, x3, xs;
    CHECK_OK(ferry_model_add_tensor(m, "w", FERRY_DTYPE_F8_E4M3, 2, s2, &w), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "s", FERRY_DTYPE_F32, 2, ss, &s), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "s_bad", FERRY_DTYPE_F32, 2, bad, &s_bad), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "s_bf", FERRY_DTYPE_BF16, 2, ss, &s_bf), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "wb", FERRY_DTYPE_BF16, 2, s2, &wb), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "x3", FERRY_DTYPE_F8_E4M3, 3, e3, &x3), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "xs", FERRY_DTYPE_F32, 3, es, &xs), ferry_model_error(m));
    CHECK_FAILS(ferry_model_link_fp8(m, w, s_bad, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "scale tensor s_bad of w is F32 [3, 3]; expected F32 [3, 2]");
    CHECK_FAILS(ferry_model_link_fp8(m, w, s_bf, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "is BF16 [3, 2]");
    CHECK_FAILS(ferry_model_link_fp8(m, w, xs, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "F32 [2, 3, 2]; expected F32 [3, 2]");
    CHECK_FAILS(ferry_model_link_fp8(m, wb, s, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "weight wb is BF16, not F8_E4M3");
    CHECK_FAILS(ferry_model_link_fp8(m, w, w, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "the weight itself");
    CHECK_FAILS(ferry_model_link_fp8(m, w, 99, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "not in the model");
    CHECK_FAILS(ferry_model_link_fp8(m, w, s, 8), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "unknown flags 0x8");
    CHECK_EQ_INT(ferry_model_quant_count(m), 0);
    CHECK_OK(ferry_model_link_fp8(m, w, s, FERRY_FP8_UE8M0), ferry_model_error(m));
    CHECK_OK(ferry_model_link_fp8(m, x3, xs, 0), ferry_model_error(m));
    CHECK(ferry_model_tensor_quant(m, s, &q) && q.kind == FERRY_QUANT_FP8_SCALE && q.partner == w &&
          q.flags == FERRY_FP8_UE8M0);
    CHECK_FAILS(ferry_model_link_fp8(m, x3, s, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "x3 is already fp8 block-quantized");
    CHECK_OK(ferry_model_add_tensor(m, "y", FERRY_DTYPE_F8_E4M3, 2, s2, &wb), ferry_model_error(m));
    CHECK_FAILS(ferry_model_link_fp8(m, wb, s, 0), FERRY_ERR_INVALID_ARGUMENT, ferry_model_error(m),
                "tensor s is already an fp8 scale tensor");
    CHECK_EQ_INT(ferry_model_quant_count(m), 2);
    ferry_model_destroy(m);
}

/* ---- digests ---------------------------------------------------------------- */

/* A one-rank layout over a custom model holding a [256, 256] F8_E4M3
 * weight and a [2, 2] F32 scale, linked with flags (or not, flags < 0). */
static uint64_t pair_digest(ferry_ctx_t *ctx, int flags) {
    ferry_model_t *m;
    CHECK_OK(ferry_model_create(ctx, "d", &m), ferry_ctx_error(ctx));
    const int64_t sw[2] = {256, 256}, ss[2] = {2, 2};
    uint32_t w, s, bw, bs;
    CHECK_OK(ferry_model_add_tensor(m, "w", FERRY_DTYPE_F8_E4M3, 2, sw, &w), ferry_model_error(m));
    CHECK_OK(ferry_model_add_tensor(m, "w_scale_inv", FERRY_DTYPE_F32, 2, ss, &s), ferry_model_error(m));
    if (flags >= 0) CHECK_OK(ferry_model_link_fp8(m, w, s, (uint32_t)flags), ferry_model_error(m));
    ferry_layout_t *l;
    CHECK_OK(ferry_layout_create(ctx, m, 1, &l), ferry_ctx_error(ctx));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "w", FERRY_DTYPE_F8_E4M3, 256 * 256, &bw), ferry_layout_error(l));
    CHECK_OK(ferry_layout_add_buffer(l, 0, "s", FERRY_DTYPE_F32, 16, &bs), ferry_layout_error(l));
    ferry_piece_t p = {.tensor = w, .buffer = bw, .box = ferry_box_of_shape(2, sw), .strides = {256, 1}};
    CHECK_OK(ferry_layout_add_piece(l, &p), ferry_layout_error(l));
    ferry_piece_t q = {.tensor = s, .buffer = bs, .box = ferry_box_of_shape(2, ss), .strides = {2, 1}};
    CHECK_OK(ferry_layout_add_piece(l, &q), ferry_layout_error(l));
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    uint64_t d = ferry_layout_digest(l);
    ferry_layout_destroy(l);
    ferry_model_destroy(m);
    return d;
}

static void test_digest(ferry_ctx_t *ctx) {
    uint64_t plain = pair_digest(ctx, -1), linked = pair_digest(ctx, 0), ue = pair_digest(ctx, FERRY_FP8_UE8M0);
    CHECK(plain != linked && linked != ue && plain != ue);
    CHECK(linked == pair_digest(ctx, 0));
}

int main(void) {
    ferry_ctx_t *ctx = test_ctx();
    test_bundled(ctx);
    test_quant_config(ctx);
    test_custom(ctx);
    test_digest(ctx);
    ferry_ctx_destroy(ctx);
    printf("test_model_fp8: deepseek-v3/kimi-k2 fp8 specs, quantization_config, custom pairs, digests\n");
    return 0;
}
