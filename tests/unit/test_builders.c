/* Layout builders against independent reference constructions: each test
 * materialises a rank's buffer from the pieces (element ids of the logical
 * tensors) and compares it with the buffer built the way Megatron or vLLM
 * builds it from the Hugging Face tensors. */
#include <stdint.h>

#include "check.h"
#include "ferry/fp8.h"
#include "ferry/plan.h"

#define PAD (-1)

static ferry_ctx_t *ctx;

static ferry_model_t *model_q(const char *json, ferry_model_quant_t quant) {
    ferry_model_options_t opts = {.field_mask = FERRY_MODEL_OPT_QUANT, .quant = quant};
    ferry_model_t *m = NULL;
    CHECK_OK(ferry_model_from_hf_config(ctx, "tiny", json, strlen(json), &opts, &m), ferry_ctx_error(ctx));
    return m;
}

static ferry_model_t *model(const char *json) { return model_q(json, FERRY_MODEL_QUANT_NONE); }

/* id of element (row, col) of a tensor: distinct across tensors */
static int64_t eid(const ferry_model_t *m, const char *tensor, int64_t row, int64_t col) {
    uint32_t t;
    if (!ferry_model_find(m, tensor, &t)) {
        fprintf(stderr, "no tensor %s\n", tensor);
        exit(1);
    }
    ferry_tensor_info_t ti;
    ferry_model_tensor(m, t, &ti);
    int64_t cols = ti.ndim > 1 ? ti.shape[1] : 1;
    CHECK(row < ti.shape[0] && col < cols);
    return ((int64_t)t << 32) | (row * cols + col);
}

/* The buffer's element slots filled with element ids (PAD where no piece writes). */
static int64_t *materialise(const ferry_layout_t *l, uint32_t rank, const char *buffer, size_t *n) {
    const ferry_model_t *m = ferry_layout_model(l);
    uint32_t b = UINT32_MAX;
    ferry_buffer_info_t bi;
    for (uint32_t i = 0; i < ferry_layout_buffer_count(l); i++) {
        ferry_layout_buffer(l, i, &bi);
        if (bi.rank == rank && strcmp(bi.name, buffer) == 0) {
            b = i;
            break;
        }
    }
    if (b == UINT32_MAX) {
        fprintf(stderr, "rank %u has no buffer %s\n", rank, buffer);
        exit(1);
    }
    ferry_layout_buffer(l, b, &bi);
    size_t esz = ferry_dtype_size(bi.dtype);
    *n = bi.size / esz;
    int64_t *slots = malloc(*n * sizeof *slots);
    CHECK(slots);
    for (size_t i = 0; i < *n; i++) slots[i] = PAD;
    size_t first, count;
    ferry_layout_rank_pieces(l, rank, &first, &count);
    for (size_t i = first; i < first + count; i++) {
        const ferry_piece_t *p = &ferry_layout_pieces(l)[i];
        if (p->buffer != b) continue;
        ferry_tensor_info_t ti;
        ferry_model_tensor(m, p->tensor, &ti);
        CHECK(ti.dtype == bi.dtype && p->byte_offset % esz == 0);
        int64_t cols = ti.ndim > 1 ? ti.shape[1] : 1;
        int64_t ec = ti.ndim > 1 ? p->box.extent[1] : 1, oc = ti.ndim > 1 ? p->box.offset[1] : 0;
        for (int64_t r = 0; r < p->box.extent[0]; r++)
            for (int64_t c = 0; c < ec; c++) {
                size_t slot = p->byte_offset / esz + (size_t)(r * p->strides[0] + (ti.ndim > 1 ? c * p->strides[1] : 0));
                CHECK(slot < *n && slots[slot] == PAD);
                slots[slot] = ((int64_t)p->tensor << 32) | ((p->box.offset[0] + r) * cols + oc + c);
            }
    }
    return slots;
}

static void expect_buffer(const ferry_layout_t *l, uint32_t rank, const char *buffer, const int64_t *want,
                          size_t nwant) {
    size_t n;
    int64_t *got = materialise(l, rank, buffer, &n);
    if (n != nwant) {
        fprintf(stderr, "rank %u %s: %zu slots, expected %zu\n", rank, buffer, n, nwant);
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        if (got[i] != want[i]) {
            fprintf(stderr, "rank %u %s: slot %zu holds %llx, expected %llx\n", rank, buffer, i,
                    (unsigned long long)got[i], (unsigned long long)want[i]);
            exit(1);
        }
    }
    free(got);
}

/* llama-like: 4 heads, 2 KV heads, head_dim 2, hidden 4, intermediate 8, vocab 10 */
static const char *tiny_dense =
    "{\"model_type\":\"qwen3\",\"hidden_size\":4,\"num_hidden_layers\":4,\"num_attention_heads\":4,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"vocab_size\":10,\"intermediate_size\":8,"
    "\"tie_word_embeddings\":true}";

static void test_train_dense(void) {
    ferry_model_t *m = model(tiny_dense);
    ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,pp=2,vocab_multiple=4");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    int64_t want[64];
    /* Megatron fused QKV: q_proj.view(kv=2, qpg*d=4, H), k/v.view(2, 2, H);
     * group g = [q[g]; k[g]; v[g]], groups split over TP (rank r holds group r) */
    for (uint32_t r = 0; r < 2; r++) {
        size_t n = 0;
        for (int64_t i = 0; i < 4; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.self_attn.q_proj.weight", r * 4 + i, c);
        for (int64_t i = 0; i < 2; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.self_attn.k_proj.weight", r * 2 + i, c);
        for (int64_t i = 0; i < 2; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.self_attn.v_proj.weight", r * 2 + i, c);
        expect_buffer(l, r, "decoder.layers.0.self_attention.linear_qkv.weight", want, n);
        /* fused fc1: [gate rows of rank; up rows of rank] */
        n = 0;
        for (int64_t i = 0; i < 4; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.mlp.gate_proj.weight", r * 4 + i, c);
        for (int64_t i = 0; i < 4; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.mlp.up_proj.weight", r * 4 + i, c);
        expect_buffer(l, r, "decoder.layers.0.mlp.linear_fc1.weight", want, n);
        /* row-parallel o_proj: columns [r*4, r*4+4) */
        n = 0;
        for (int64_t i = 0; i < 4; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.self_attn.o_proj.weight", i, r * 4 + c);
        expect_buffer(l, r, "decoder.layers.0.self_attention.linear_proj.weight", want, n);
        /* vocab 10 padded to a multiple of 4*tp = 8 -> 16 rows, 8 per rank; rank 1 has
         * rows 8, 9 and 6 padding rows */
        n = 0;
        for (int64_t i = 0; i < 8; i++)
            for (int64_t c = 0; c < 4; c++)
                want[n++] = r * 8 + i < 10 ? eid(m, "model.embed_tokens.weight", r * 8 + i, c) : PAD;
        expect_buffer(l, r, "embedding.word_embeddings.weight", want, n);
        /* tied embeddings with pp > 1: the last stage keeps its own copy as output layer */
        expect_buffer(l, 2 + r, "output_layer.weight", want, n);
    }
    /* stage 0 holds layers 0-1, stage 1 layers 2-3 and the final norm */
    ferry_rank_info_t ri;
    CHECK(ferry_layout_rank_info(l, 2, &ri));
    CHECK_EQ_INT(ri.pp, 1);
    CHECK_EQ_INT(ri.first_layer, 2);
    CHECK_EQ_INT(ri.num_layers, 2);
    size_t n;
    free(materialise(l, 3, "decoder.layers.3.self_attention.k_layernorm.weight", &n));
    free(materialise(l, 3, "decoder.final_layernorm.weight", &n));
    ferry_layout_destroy(l);

    /* VPP: chunk c = v*pp + stage holds layers [c, c+1): stage 0 has layers 0 and 2 */
    l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "pp=2,vpp=2");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    free(materialise(l, 0, "decoder.layers.2.mlp.linear_fc2.weight", &n));
    free(materialise(l, 1, "decoder.layers.3.mlp.linear_fc2.weight", &n));
    CHECK(ferry_layout_rank_info(l, 0, &ri) && ri.num_layers == 2);
    ferry_layout_destroy(l);

    /* uneven pipeline: pp_layers=1+3 */
    l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "pp=2,pp_layers=1+3");
    CHECK(ferry_layout_rank_info(l, 1, &ri) && ri.num_layers == 3 && ri.first_layer == 1);
    free(materialise(l, 1, "decoder.layers.1.mlp.linear_fc2.weight", &n));
    ferry_layout_destroy(l);

    /* flat buffers: one buffer per rank, each parameter 256-byte aligned, same contents */
    ferry_layout_t *per = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2");
    ferry_layout_t *flat = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,buffers=flat");
    CHECK_OK(ferry_layout_validate(flat, NULL), ferry_layout_error(flat));
    CHECK_EQ_INT(ferry_layout_buffer_count(flat), 2);
    CHECK_EQ_INT(ferry_layout_piece_count(flat), ferry_layout_piece_count(per));
    for (size_t i = 0; i < ferry_layout_piece_count(flat); i++) {
        const ferry_piece_t *a = &ferry_layout_pieces(per)[i], *b = &ferry_layout_pieces(flat)[i];
        CHECK(a->tensor == b->tensor && ferry_box_equal(&a->box, &b->box));
        CHECK(memcmp(a->strides, b->strides, sizeof a->strides) == 0);
        CHECK(b->byte_offset >= a->byte_offset);
    }
    ferry_layout_destroy(per);
    ferry_layout_destroy(flat);
    ferry_model_destroy(m);
}

/* 4 experts, hidden 4, moe intermediate 4 */
static const char *tiny_moe =
    "{\"model_type\":\"qwen3_moe\",\"hidden_size\":4,\"num_hidden_layers\":2,\"num_attention_heads\":2,"
    "\"num_key_value_heads\":2,\"head_dim\":2,\"vocab_size\":16,\"intermediate_size\":8,"
    "\"num_experts\":4,\"num_experts_per_tok\":2,\"moe_intermediate_size\":4}";

static void test_train_experts(void) {
    ferry_model_t *m = model(tiny_moe);
    int64_t want[256];
    char name[128];
    /* ep=2 over tp=2: rank r holds experts 2r, 2r+1; fc1 [E_local, 2I, H] = gate then up */
    ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,ep=2");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    for (uint32_t r = 0; r < 2; r++) {
        size_t n = 0;
        for (int64_t j = 0; j < 2; j++) {
            int e = (int)(2 * r + j);
            for (int part = 0; part < 2; part++) {
                snprintf(name, sizeof name, "model.layers.1.mlp.experts.%d.%s_proj.weight", e, part ? "up" : "gate");
                for (int64_t i = 0; i < 4; i++)
                    for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, name, i, c);
            }
        }
        expect_buffer(l, r, "decoder.layers.1.mlp.experts.linear_fc1.weight", want, n);
        n = 0;
        for (int64_t j = 0; j < 2; j++) {
            snprintf(name, sizeof name, "model.layers.1.mlp.experts.%d.down_proj.weight", (int)(2 * r + j));
            for (int64_t h = 0; h < 4; h++)
                for (int64_t i = 0; i < 4; i++) want[n++] = eid(m, name, h, i);
        }
        expect_buffer(l, r, "decoder.layers.1.mlp.experts.linear_fc2.weight", want, n);
    }
    ferry_layout_destroy(l);

    /* legacy GroupedMLP, etp=2: weight1 [H, E*2I'] with element (h, j*2I' + i) =
     * gate_j[i0 + i][h] (then up), weight2 [E*I', H] with (j*I' + i, h) = down_j[h][i0 + i] */
    l = test_layout(ctx, m, FERRY_SIDE_TRAIN, "tp=2,etp=2,experts=grouped_t");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    for (uint32_t r = 0; r < 2; r++) {
        size_t n = 0;
        for (int64_t h = 0; h < 4; h++)
            for (int64_t j = 0; j < 4; j++)
                for (int part = 0; part < 2; part++)
                    for (int64_t i = 0; i < 2; i++) {
                        snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s_proj.weight", (int)j,
                                 part ? "up" : "gate");
                        want[n++] = eid(m, name, r * 2 + i, h);
                    }
        expect_buffer(l, r, "decoder.layers.0.mlp.experts.weight1", want, n);
        n = 0;
        for (int64_t j = 0; j < 4; j++)
            for (int64_t i = 0; i < 2; i++)
                for (int64_t h = 0; h < 4; h++) {
                    snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.down_proj.weight", (int)j);
                    want[n++] = eid(m, name, h, r * 2 + i);
                }
        expect_buffer(l, r, "decoder.layers.0.mlp.experts.weight2", want, n);
    }
    ferry_layout_destroy(l);
    ferry_model_destroy(m);
}

static void test_infer(void) {
    int64_t want[256];
    char name[128];
    /* vLLM qkv_proj [q; k; v] per rank; tp=4 > 2 KV heads: rank r holds KV head r/2 */
    ferry_model_t *m = model(tiny_dense);
    ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=4,vocab_multiple=1");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    for (uint32_t r = 0; r < 4; r++) {
        size_t n = 0;
        for (int64_t i = 0; i < 2; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.1.self_attn.q_proj.weight", r * 2 + i, c);
        for (int64_t i = 0; i < 2; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.1.self_attn.k_proj.weight", (r / 2) * 2 + i, c);
        for (int64_t i = 0; i < 2; i++)
            for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.1.self_attn.v_proj.weight", (r / 2) * 2 + i, c);
        expect_buffer(l, r, "model.layers.1.self_attn.qkv_proj.weight", want, n);
        n = 0;
        for (int part = 0; part < 2; part++)
            for (int64_t i = 0; i < 2; i++)
                for (int64_t c = 0; c < 4; c++)
                    want[n++] = eid(m, part ? "model.layers.1.mlp.up_proj.weight" : "model.layers.1.mlp.gate_proj.weight",
                                    r * 2 + i, c);
        expect_buffer(l, r, "model.layers.1.mlp.gate_up_proj.weight", want, n);
    }
    ferry_layout_destroy(l);

    /* DP attention: tp=4, dp=2 -> attention over 2 ranks, replicated; MLP over 4.
     * Tied embeddings split 2 ways for attention groups, LM head 4 ways. */
    l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=4,dp=2,vocab_multiple=1");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    size_t n0, n2;
    int64_t *a0 = materialise(l, 0, "model.layers.0.self_attn.qkv_proj.weight", &n0);
    int64_t *a2 = materialise(l, 2, "model.layers.0.self_attn.qkv_proj.weight", &n2);
    CHECK(n0 == n2 && memcmp(a0, a2, n0 * sizeof *a0) == 0);
    free(a0);
    free(a2);
    size_t n = 0;
    for (int64_t i = 0; i < 3; i++)
        for (int64_t c = 0; c < 4; c++) want[n++] = 3 + i < 10 ? eid(m, "model.embed_tokens.weight", 3 + i, c) : PAD;
    expect_buffer(l, 1, "lm_head.weight", want, n);
    ferry_layout_destroy(l);

    /* transposed storage: o_proj [4, 4] per rank stored [cols, rows]; tp=2 -> rank 1 has
     * columns [4, 8); qkv_proj [8, 4] is stored [4, 8] */
    l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=2,transpose=*proj*");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    n = 0;
    for (int64_t c = 0; c < 4; c++)
        for (int64_t row = 0; row < 4; row++) want[n++] = eid(m, "model.layers.0.self_attn.o_proj.weight", row, 4 + c);
    expect_buffer(l, 1, "model.layers.0.self_attn.o_proj.weight", want, n);
    ferry_buffer_info_t bi;
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_layout_buffer(l, b, &bi);
        if (!strcmp(bi.name, "model.layers.0.self_attn.qkv_proj.weight")) CHECK(bi.shape[0] == 4 && bi.shape[1] == 8);
    }
    ferry_layout_destroy(l);
    ferry_model_destroy(m);

    /* FusedMoE: ep=2 over tp=2 -> w13 [2 experts, 2I, H]; ep=1 -> all experts, I/2 each */
    m = model(tiny_moe);
    l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=2,ep=1");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    n = 0;
    for (int64_t e = 0; e < 4; e++)
        for (int64_t h = 0; h < 4; h++)
            for (int64_t i = 0; i < 2; i++) {
                snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.down_proj.weight", (int)e);
                want[n++] = eid(m, name, h, 2 + i);
            }
    expect_buffer(l, 1, "model.layers.0.mlp.experts.w2_weight", want, n);
    ferry_layout_destroy(l);
    l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=2,ep=2");
    n = 0;
    for (int64_t e = 2; e < 4; e++)
        for (int part = 0; part < 2; part++)
            for (int64_t i = 0; i < 4; i++)
                for (int64_t c = 0; c < 4; c++) {
                    snprintf(name, sizeof name, "model.layers.0.mlp.experts.%d.%s_proj.weight", (int)e, part ? "up" : "gate");
                    want[n++] = eid(m, name, i, c);
                }
    expect_buffer(l, 1, "model.layers.0.mlp.experts.w13_weight", want, n);
    ferry_layout_destroy(l);
    ferry_model_destroy(m);

    /* MLA: fused_qkv_a_proj = [q_a_proj; kv_a_proj_with_mqa], replicated */
    m = model("{\"model_type\":\"deepseek_v3\",\"hidden_size\":4,\"num_hidden_layers\":1,"
              "\"num_attention_heads\":2,\"vocab_size\":8,\"intermediate_size\":4,\"q_lora_rank\":3,"
              "\"kv_lora_rank\":2,\"qk_nope_head_dim\":2,\"qk_rope_head_dim\":1,\"v_head_dim\":2}");
    l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=2");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    n = 0;
    for (int64_t i = 0; i < 3; i++)
        for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.self_attn.q_a_proj.weight", i, c);
    for (int64_t i = 0; i < 3; i++)
        for (int64_t c = 0; c < 4; c++) want[n++] = eid(m, "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", i, c);
    expect_buffer(l, 1, "model.layers.0.self_attn.fused_qkv_a_proj.weight", want, n);
    /* kv_b_proj per head [nope; v] = 4 rows per head; rank 1 holds head 1 */
    n = 0;
    for (int64_t i = 0; i < 4; i++)
        for (int64_t c = 0; c < 2; c++) want[n++] = eid(m, "model.layers.0.self_attn.kv_b_proj.weight", 4 + i, c);
    expect_buffer(l, 1, "model.layers.0.self_attn.kv_b_proj.weight", want, n);
    ferry_layout_destroy(l);
    ferry_model_destroy(m);
}

/* tiny MLA with quantization_config (tests/golden/tiny-mla-fp8.json): hidden
 * 320 = 2.5 blocks, q_lora_rank 128, kv_a 128 + 64 = 192 = 1.5 blocks (the
 * last part of fused_qkv_a_proj, as DeepSeek-V3's 576), 4 heads of q 192 and
 * kv_b 256 rows, intermediate 512, 4 experts of 256, 2 shared experts */
static const char *tiny_mla_fp8 =
    "{\"model_type\":\"deepseek_v3\",\"hidden_size\":320,\"num_hidden_layers\":2,\"num_attention_heads\":4,"
    "\"vocab_size\":300,\"intermediate_size\":512,\"q_lora_rank\":128,\"kv_lora_rank\":128,"
    "\"qk_nope_head_dim\":128,\"qk_rope_head_dim\":64,\"v_head_dim\":128,\"n_routed_experts\":4,"
    "\"n_shared_experts\":2,\"num_experts_per_tok\":2,\"moe_intermediate_size\":256,"
    "\"first_k_dense_replace\":1,\"topk_method\":\"noaux_tc\",\"quantization_config\":{\"activation_scheme\":"
    "\"dynamic\",\"fmt\":\"e4m3\",\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]%s}}";

static ferry_model_t *fp8_model(const char *extra_qcfg) {
    char json[2048];
    snprintf(json, sizeof json, tiny_mla_fp8, extra_qcfg);
    return model_q(json, FERRY_MODEL_QUANT_AUTO);
}

/* the same config as a trainer reads it (quant none: quantization_config ignored) */
static ferry_model_t *fp8_model_plain(void) {
    char json[2048];
    snprintf(json, sizeof json, tiny_mla_fp8, "");
    return model_q(json, FERRY_MODEL_QUANT_NONE);
}

static bool find_buffer(const ferry_layout_t *l, uint32_t rank, const char *name, ferry_buffer_info_t *out) {
    for (uint32_t i = 0; i < ferry_layout_buffer_count(l); i++) {
        ferry_layout_buffer(l, i, out);
        if (out->rank == rank && strcmp(out->name, name) == 0) return true;
    }
    return false;
}

/* vLLM's checkpoint form, derived independently of the builder: wherever a
 * rank's fp8 parameter holds element (r, c) of weight W, its _scale_inv
 * parameter holds, at (r/128, c/128) (same expert index), the element
 * (r'/128, c'/128) of W's scale, (r', c') being the element's index in W;
 * every scale slot is so named, and the scale parameter is
 * [.., ceil(rows/128), ceil(cols/128)]. Returns the fp8 parameters checked. */
static int check_scales_follow(const ferry_layout_t *l, uint32_t rank) {
    const ferry_model_t *m = ferry_layout_model(l);
    int params = 0;
    for (uint32_t b = 0; b < ferry_layout_buffer_count(l); b++) {
        ferry_buffer_info_t bi, si;
        ferry_layout_buffer(l, b, &bi);
        if (bi.rank != rank || bi.dtype != FERRY_DTYPE_F8_E4M3) continue;
        char sname[300];
        snprintf(sname, sizeof sname, "%s_scale_inv", bi.name);
        if (!find_buffer(l, rank, sname, &si)) {
            fprintf(stderr, "rank %u: fp8 parameter %s has no %s\n", rank, bi.name, sname);
            exit(1);
        }
        CHECK(si.dtype == FERRY_DTYPE_F32 && si.ndim == bi.ndim && (bi.ndim == 2 || bi.ndim == 3));
        int64_t lead = bi.ndim == 3 ? bi.shape[0] : 1, rows = bi.shape[bi.ndim - 2], cols = bi.shape[bi.ndim - 1];
        int64_t srows = (rows + 127) / 128, scols = (cols + 127) / 128;
        CHECK(si.shape[si.ndim - 2] == srows && si.shape[si.ndim - 1] == scols && (bi.ndim == 2 || si.shape[0] == lead));
        size_t nw, ns;
        int64_t *w = materialise(l, rank, bi.name, &nw), *sc = materialise(l, rank, sname, &ns);
        CHECK(nw == (size_t)(lead * rows * cols) && ns == (size_t)(lead * srows * scols));
        bool *named = calloc(ns, 1);
        CHECK(named);
        for (size_t i = 0; i < nw; i++) {
            CHECK(w[i] != PAD); /* an fp8 parameter has no padding */
            int64_t e = (int64_t)i / (rows * cols), r = ((int64_t)i / cols) % rows, c = (int64_t)i % cols;
            uint32_t t = (uint32_t)(w[i] >> 32);
            ferry_tensor_info_t ti;
            ferry_tensor_quant_t q;
            CHECK(ferry_model_tensor(m, t, &ti) && ferry_model_tensor_quant(m, t, &q));
            CHECK(q.kind == FERRY_QUANT_FP8_BLOCK && ti.ndim == 2);
            int64_t el = w[i] & 0xffffffff, tr = el / ti.shape[1], tc = el % ti.shape[1];
            int64_t want = ((int64_t)q.partner << 32) | ((tr / 128) * ((ti.shape[1] + 127) / 128) + tc / 128);
            size_t at = (size_t)(e * srows * scols + (r / 128) * scols + c / 128);
            if (sc[at] != want) {
                fprintf(stderr, "rank %u %s: slot %zu holds %llx, expected %llx (weight slot %zu)\n", rank, sname, at,
                        (unsigned long long)sc[at], (unsigned long long)want, i);
                exit(1);
            }
            named[at] = true;
        }
        for (size_t i = 0; i < ns; i++) CHECK(named[i]);
        free(named);
        free(w);
        free(sc);
        params++;
    }
    return params;
}

static void test_infer_fp8(void) {
    ferry_model_t *m = fp8_model(""), *plain = fp8_model_plain();
    CHECK(ferry_model_quant_count(m) > 0);
    static const char *const specs[] = {"tp=2,ep=2", "tp=4,dp=2,ep=2", "tp=2,ep=1,replicas=2", "tp=1",
                                        "tp=4,dp=4,ep=4", "tp=4,dp=2,ep=2,buffers=flat"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_INFER, specs[i]);
        CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
        bool flat = strstr(specs[i], "flat") != NULL;
        for (uint32_t r = 0; r < ferry_layout_world_size(l) && !flat; r++) {
            /* per layer: fused_qkv_a, q_b, kv_b, o_proj, and gate_up/down (dense), w13/w2 and
             * the shared experts' gate_up/down */
            CHECK_EQ_INT(check_scales_follow(l, r), 2 * 4 + 2 + 2 + 2);
        }
        /* the fp8 weights sit where the bf16 engine puts them: the same pieces
         * (tensor, box, strides, element offset) in buffers of the same names */
        ferry_layout_t *pl = test_layout(ctx, plain, FERRY_SIDE_INFER, specs[i]);
        size_t k = 0;
        for (size_t j = 0; j < ferry_layout_piece_count(l) && !flat; j++) {
            const ferry_piece_t *a = &ferry_layout_pieces(l)[j];
            ferry_tensor_info_t ti;
            ferry_tensor_quant_t q;
            ferry_model_tensor(m, a->tensor, &ti);
            ferry_model_tensor_quant(m, a->tensor, &q);
            if (q.kind == FERRY_QUANT_FP8_SCALE) continue;
            CHECK(k < ferry_layout_piece_count(pl));
            const ferry_piece_t *p = &ferry_layout_pieces(pl)[k++];
            ferry_buffer_info_t ba, bp;
            ferry_layout_buffer(l, a->buffer, &ba);
            ferry_layout_buffer(pl, p->buffer, &bp);
            CHECK(a->tensor == p->tensor && a->rank == p->rank && ferry_box_equal(&a->box, &p->box));
            CHECK(memcmp(a->strides, p->strides, sizeof a->strides) == 0 && !strcmp(ba.name, bp.name));
            CHECK(a->byte_offset / ferry_dtype_size(ti.dtype) == p->byte_offset / 2);
            CHECK(ba.dtype == (q.kind == FERRY_QUANT_FP8_BLOCK ? FERRY_DTYPE_F8_E4M3 : bp.dtype));
        }
        CHECK(flat || k == ferry_layout_piece_count(pl));
        ferry_layout_destroy(pl);
        ferry_layout_destroy(l);
    }

    /* vLLM's per-rank scale shapes (memo table): tp=2, ep=2 */
    ferry_layout_t *l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=2,ep=2");
    static const struct {
        const char *name;
        uint32_t ndim;
        int64_t shape[3];
    } want[] = {
        {"model.layers.0.self_attn.fused_qkv_a_proj.weight_scale_inv", 2, {1 + 2, 3}}, /* q_a 1 block, kv_a 1.5 */
        {"model.layers.0.self_attn.q_b_proj.weight_scale_inv", 2, {2 * 192 / 128, 1}},
        {"model.layers.0.self_attn.kv_b_proj.weight_scale_inv", 2, {2 * 256 / 128, 1}},
        {"model.layers.0.self_attn.o_proj.weight_scale_inv", 2, {3, 2}},
        {"model.layers.0.mlp.gate_up_proj.weight_scale_inv", 2, {2 * 256 / 128, 3}},
        {"model.layers.0.mlp.down_proj.weight_scale_inv", 2, {3, 2}},
        {"model.layers.1.mlp.experts.w13_weight_scale_inv", 3, {2, 2 * 256 / 128, 3}},
        {"model.layers.1.mlp.experts.w2_weight_scale_inv", 3, {2, 3, 2}},
        {"model.layers.1.mlp.shared_experts.gate_up_proj.weight_scale_inv", 2, {2 * 256 / 128, 3}},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        ferry_buffer_info_t bi;
        CHECK(find_buffer(l, 1, want[i].name, &bi));
        CHECK(bi.dtype == FERRY_DTYPE_F32 && bi.ndim == want[i].ndim);
        for (uint32_t d = 0; d < bi.ndim; d++) CHECK(bi.shape[d] == want[i].shape[d]);
    }
    /* what vLLM keeps unquantized has no scale: embeddings, norms, router, LM head */
    static const char *const bf16[] = {"model.embed_tokens.weight", "model.layers.1.mlp.gate.weight",
                                       "model.layers.0.self_attn.kv_a_layernorm.weight", "lm_head.weight"};
    for (size_t i = 0; i < sizeof bf16 / sizeof bf16[0]; i++) {
        ferry_buffer_info_t bi;
        char sname[200];
        snprintf(sname, sizeof sname, "%s_scale_inv", bf16[i]);
        CHECK(find_buffer(l, 0, bf16[i], &bi) && bi.dtype == FERRY_DTYPE_BF16 && !find_buffer(l, 0, sname, &bi));
    }

    /* one-rank builds place the same pieces */
    ferry_parallel_t p;
    CHECK_OK(ferry_parallel_parse(ctx, FERRY_SIDE_INFER, "tp=2,ep=2", &p), ferry_ctx_error(ctx));
    ferry_layout_t *one = NULL;
    CHECK_OK(ferry_layout_build(ctx, m, &p, 1, &one), ferry_ctx_error(ctx));
    size_t f1, c1, f, c;
    ferry_layout_rank_pieces(one, 1, &f1, &c1);
    ferry_layout_rank_pieces(l, 1, &f, &c);
    CHECK(c1 == c);
    for (size_t i = 0; i < c; i++) {
        const ferry_piece_t *a = &ferry_layout_pieces(one)[f1 + i], *b = &ferry_layout_pieces(l)[f + i];
        CHECK(a->tensor == b->tensor && ferry_box_equal(&a->box, &b->box) && a->byte_offset == b->byte_offset);
    }
    ferry_layout_destroy(one);

    /* a bf16 trainer into it: the writers quantize (quant ops), every block
     * once, and the plan verifies against both layouts */
    ferry_layout_t *train = test_layout(ctx, plain, FERRY_SIDE_TRAIN, "tp=2");
    ferry_plan_t *plan = NULL;
    CHECK_OK(ferry_plan_build(ctx, train, l, NULL, &plan), ferry_ctx_error(ctx));
    CHECK_OK(ferry_plan_verify(plan, train, l), ferry_plan_error(plan));
    uint64_t blocks = 0, need = 0;
    for (size_t i = 0; i < ferry_plan_quant_op_count(plan); i++) {
        const ferry_quant_op_t *q = &ferry_plan_quant_ops(plan)[i];
        uint32_t nd = q->box.ndim;
        blocks += (nd == 3 ? (uint64_t)q->box.extent[0] : 1) *
                  ferry_fp8_scale_count((uint64_t)q->box.extent[nd - 2], (uint64_t)q->box.extent[nd - 1]);
    }
    for (uint32_t t = 0; t < ferry_model_tensor_count(m); t++) {
        ferry_tensor_quant_t tq;
        ferry_tensor_info_t ti;
        if (!ferry_model_tensor_quant(m, t, &tq) || tq.kind != FERRY_QUANT_FP8_BLOCK) continue;
        ferry_model_tensor(m, t, &ti);
        need += (ti.ndim == 3 ? (uint64_t)ti.shape[0] : 1) *
                ferry_fp8_scale_count((uint64_t)ti.shape[ti.ndim - 2], (uint64_t)ti.shape[ti.ndim - 1]);
    }
    CHECK(ferry_plan_quant_op_count(plan) > 0 && blocks == need); /* the engine holds every block: each once */
    ferry_plan_destroy(plan);
    ferry_layout_destroy(train);
    ferry_layout_destroy(l);

    /* a module quantization_config leaves out stays bf16, with no scale */
    ferry_model_destroy(m);
    m = fp8_model(",\"ignored_layers\":[\"model.layers.0.mlp\"]");
    l = test_layout(ctx, m, FERRY_SIDE_INFER, "tp=2");
    CHECK_OK(ferry_layout_validate(l, NULL), ferry_layout_error(l));
    ferry_buffer_info_t bi;
    CHECK(find_buffer(l, 0, "model.layers.0.mlp.gate_up_proj.weight", &bi) && bi.dtype == FERRY_DTYPE_BF16);
    CHECK(!find_buffer(l, 0, "model.layers.0.mlp.gate_up_proj.weight_scale_inv", &bi));
    CHECK_EQ_INT(check_scales_follow(l, 0), 2 * 4 + 2 + 2);
    ferry_layout_destroy(l);
    ferry_model_destroy(m);
    ferry_model_destroy(plain);
}

static void expect_refused(const char *json, ferry_side_t side, const char *spec, ferry_status_t want,
                           const char *needle) {
    ferry_model_t *m = model(json);
    ferry_parallel_t p;
    CHECK_OK(ferry_parallel_parse(ctx, side, spec, &p), ferry_ctx_error(ctx));
    ferry_layout_t *l = NULL;
    CHECK_FAILS(ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l), want, ferry_ctx_error(ctx), needle);
    CHECK(l == NULL);
    ferry_model_destroy(m);
}

static void test_errors(void) {
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "tp=3", FERRY_ERR_INVALID_CONFIG,
                   "num_attention_heads = 4 is not divisible by tp = 3");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "tp=4", FERRY_ERR_INVALID_CONFIG,
                   "num_key_value_heads = 2 is not divisible by tp = 4");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "pp=3", FERRY_ERR_INVALID_CONFIG,
                   "num_hidden_layers = 4 is not divisible by pp*vpp = 3");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "pp=2,pp_layers=1+1", FERRY_ERR_INVALID_CONFIG,
                   "pp_layers adds up to 2 layers");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "pp=2,pp_layers=1+1+2", FERRY_ERR_INVALID_CONFIG,
                   "pp_layers lists 3 stages but pp = 2");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "pp=2,vpp=2,pp_first=1", FERRY_ERR_UNSUPPORTED,
                   "uneven pipeline split");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "vpp=2", FERRY_ERR_INVALID_CONFIG, "vpp=2 needs pp > 1");
    expect_refused(tiny_dense, FERRY_SIDE_TRAIN, "ep=2,dp=2", FERRY_ERR_INVALID_CONFIG, "has no experts");
    expect_refused(tiny_dense, FERRY_SIDE_INFER, "tp=4,dp=3", FERRY_ERR_INVALID_CONFIG,
                   "tp = 4 is not divisible by dp");
    expect_refused(tiny_dense, FERRY_SIDE_INFER, "tp=3", FERRY_ERR_INVALID_CONFIG, "num_attention_heads");
    expect_refused(tiny_moe, FERRY_SIDE_TRAIN, "ep=4", FERRY_ERR_INVALID_CONFIG,
                   "tp*cp*dp = 1 is not divisible by ep*etp = 4");
    expect_refused(tiny_moe, FERRY_SIDE_INFER, "tp=2,ep=3", FERRY_ERR_INVALID_CONFIG, "tp = 2 is not divisible by ep = 3");
    /* a hand-made spec has no architecture to build from */
    ferry_model_t *custom = NULL;
    CHECK_OK(ferry_model_create(ctx, "custom", &custom), ferry_ctx_error(ctx));
    ferry_parallel_t p = ferry_parallel_defaults(FERRY_SIDE_TRAIN);
    ferry_layout_t *l = NULL;
    CHECK_FAILS(ferry_layout_build(ctx, custom, &p, FERRY_ALL_RANKS, &l), FERRY_ERR_UNSUPPORTED,
                ferry_ctx_error(ctx), "tensor by tensor");
    ferry_model_destroy(custom);
    ferry_model_t *m = model(tiny_dense);
    CHECK_FAILS(ferry_layout_build(ctx, m, &p, 1, &l), FERRY_ERR_INVALID_ARGUMENT, ferry_ctx_error(ctx),
                "rank 1 is outside the world of 1 ranks");
    ferry_model_destroy(m);
}

static void expect_refused_fp8(const char *json, ferry_side_t side, const char *spec, const char *needle) {
    ferry_model_t *m = model_q(json, FERRY_MODEL_QUANT_AUTO);
    CHECK(ferry_model_quant_count(m) > 0);
    ferry_parallel_t p;
    CHECK_OK(ferry_parallel_parse(ctx, side, spec, &p), ferry_ctx_error(ctx));
    ferry_layout_t *l = NULL;
    CHECK_FAILS(ferry_layout_build(ctx, m, &p, FERRY_ALL_RANKS, &l), FERRY_ERR_UNSUPPORTED, ferry_ctx_error(ctx), needle);
    CHECK(l == NULL);
    /* the same refusal whichever rank is built alone */
    uint32_t last = ferry_parallel_world_size(&p) - 1;
    CHECK_FAILS(ferry_layout_build(ctx, m, &p, last, &l), FERRY_ERR_UNSUPPORTED, ferry_ctx_error(ctx), needle);
    ferry_model_destroy(m);
}

/* vLLM's refusals of fp8 shards that cut a block (validate_fp8_block_shape,
 * Fp8MoEMethod), in its words */
static void test_errors_fp8(void) {
    char json[2048];
    snprintf(json, sizeof json, tiny_mla_fp8, "");
    /* column parallel: 4 heads over attention tp 4 leaves q_b 192 rows */
    expect_refused_fp8(json, FERRY_SIDE_INFER, "tp=4",
                       "fp8 parameter model.layers.0.self_attn.q_b_proj.weight: Weight output_partition_size = 192 "
                       "is not divisible by weight quantization block_n = 128");
    /* ... which DP attention avoids, but experts over tp/ep = 4 leave 64 */
    expect_refused_fp8(json, FERRY_SIDE_INFER, "tp=4,dp=2,ep=1",
                       "fp8 experts model.layers.1.mlp.experts (w13_weight): The output_size of gate's and up's "
                       "weight = 64 is not divisible by weight quantization block_n = 128");
    /* row parallel: o_proj's input of 1 head x v_head_dim 64 */
    expect_refused_fp8("{\"model_type\":\"deepseek_v3\",\"hidden_size\":256,\"num_hidden_layers\":1,"
                       "\"num_attention_heads\":4,\"vocab_size\":64,\"intermediate_size\":512,\"q_lora_rank\":128,"
                       "\"kv_lora_rank\":128,\"qk_nope_head_dim\":64,\"qk_rope_head_dim\":64,\"v_head_dim\":64,"
                       "\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}}",
                       FERRY_SIDE_INFER, "tp=4",
                       "fp8 parameter model.layers.0.self_attn.o_proj.weight: Weight input_size_per_partition = 64 "
                       "is not divisible by weight quantization block_k = 128");
    /* a merged parameter: only its last part may end in a partial block
     * (kv_a's 192 may, q_a's 192 may not), whatever the tp */
    expect_refused_fp8("{\"model_type\":\"deepseek_v3\",\"hidden_size\":256,\"num_hidden_layers\":1,"
                       "\"num_attention_heads\":2,\"vocab_size\":64,\"intermediate_size\":256,\"q_lora_rank\":192,"
                       "\"kv_lora_rank\":128,\"qk_nope_head_dim\":64,\"qk_rope_head_dim\":64,\"v_head_dim\":128,"
                       "\"quantization_config\":{\"quant_method\":\"fp8\",\"weight_block_size\":[128,128]}}",
                       FERRY_SIDE_INFER, "tp=1",
                       "fp8 parameter model.layers.0.self_attn.fused_qkv_a_proj.weight: Weight output_partition_size "
                       "= 192 is not divisible by weight quantization block_n = 128");
    /* transposed fp8 storage (v1), the weight or its scale */
    expect_refused_fp8(json, FERRY_SIDE_INFER, "tp=2,transpose=*q_b_proj*",
                       "transpose=*q_b_proj* matches fp8 parameter model.layers.0.self_attn.q_b_proj.weight;");
    expect_refused_fp8(json, FERRY_SIDE_INFER, "tp=2,ep=2,transpose=*w2_weight_scale_inv",
                       "matches fp8 parameter model.layers.1.mlp.experts.w2_weight_scale_inv;");
    /* shards of one fused layer at two precisions */
    snprintf(json, sizeof json, tiny_mla_fp8, ",\"ignored_layers\":[\"model.layers.1.self_attn.q_a_proj\"]");
    expect_refused_fp8(json, FERRY_SIDE_INFER, "tp=2",
                       "fused parameter model.layers.1.self_attn.fused_qkv_a_proj.weight holds fp8 "
                       "model.layers.1.self_attn.kv_a_proj_with_mqa.weight and unquantized "
                       "model.layers.1.self_attn.q_a_proj.weight");
    snprintf(json, sizeof json, tiny_mla_fp8, ",\"ignored_layers\":[\"model.layers.1.mlp.experts.3\"]");
    expect_refused_fp8(json, FERRY_SIDE_INFER, "tp=2,ep=2",
                       "fused parameter model.layers.1.mlp.experts.w13_weight holds fp8 "
                       "model.layers.1.mlp.experts.2.gate_proj.weight and unquantized "
                       "model.layers.1.mlp.experts.3.gate_proj.weight");
    /* a trainer holds what it trains */
    snprintf(json, sizeof json, tiny_mla_fp8, "");
    expect_refused_fp8(json, FERRY_SIDE_TRAIN, "tp=2", "trainer layouts hold the unquantized weights");
}

int main(void) {
    ctx = test_ctx();
    test_train_dense();
    test_train_experts();
    test_infer();
    test_errors();
    test_infer_fp8();
    test_errors_fp8();
    ferry_ctx_destroy(ctx);
    return 0;
}
