/* vLLM/SGLang-style engine layouts. An engine instance has tp ranks; with
 * dp > 1 (DP attention) attention runs tensor-parallel over tp/dp ranks and
 * is replicated across the dp groups, while MLPs, experts and the LM head
 * span all tp ranks. Experts: ep groups of tp/ep ranks; each group holds
 * num_experts/ep experts, split (tp/ep)-ways along the intermediate size, as
 * fused w13 [E_local, 2I', H] and w2 [E_local, H, I']. Fused qkv_proj is
 * [q; k; v] per rank; KV heads are replicated when attention TP exceeds
 * num_key_value_heads. Buffer names are the engine's parameter names. */
#include <stdio.h>
#include <string.h>

#include "layout/build.h"

typedef struct {
    builder_t *b;
    uint32_t local;   /* rank within the instance */
    uint32_t attn_tp; /* ranks per attention group */
    uint32_t a_rank;  /* rank within the attention group */
    uint32_t moe_tp;  /* ranks per expert group */
} infer_t;

/* vocabulary split `split` ways, padded to a multiple of lcm(vocab_multiple, split) */
static void emit_vocab(infer_t *t, const char *buffer, const char *tensor, uint32_t split,
                       uint32_t index) {
    builder_t *b = t->b;
    int64_t mult = b->p->vocab_multiple, lcm = mult / (int64_t)ferry_gcd_u64((uint64_t)mult, split) * split;
    emit_vocab_shard(b, buffer, tensor, round_up(b->a->vocab_size, lcm) / split, index);
}

static void emit_qkv(infer_t *t, const char *hf, const char *kind) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    bool bias = strcmp(kind, "bias") == 0;
    int64_t d = a->head_dim, nq = a->num_heads / t->attn_tp;
    int64_t nkv, kv0;
    if (t->attn_tp >= a->num_kv_heads) { /* each KV head replicated attn_tp/num_kv times */
        nkv = 1;
        kv0 = t->a_rank / (t->attn_tp / a->num_kv_heads);
    } else {
        nkv = a->num_kv_heads / t->attn_tp;
        kv0 = (int64_t)t->a_rank * nkv;
    }
    char name[256];
    snprintf(name, sizeof name, "%s.self_attn.qkv_proj.%s", hf, kind);
    uint32_t ts[3] = {build_tensor(b, "%s.self_attn.q_proj.%s", hf, kind),
                      build_tensor(b, "%s.self_attn.k_proj.%s", hf, kind),
                      build_tensor(b, "%s.self_attn.v_proj.%s", hf, kind)};
    if (build_quant_group(b, name, ts, 3))
        build_fp8_out_parts(b, name, (const int64_t[]){nq * d, nkv * d, nkv * d}, 3, t->attn_tp);
    param_t q = param_open_q(b, ts[0], bias ? 1 : 2, (nq + 2 * nkv) * d, bias ? 0 : a->hidden_size, 0, "%s",
                             name);
    place_rows(b, &q, ts[0], (int64_t)t->a_rank * nq * d, nq * d, 0, 0);
    place_rows(b, &q, ts[1], kv0 * d, nkv * d, 0, nq * d);
    place_rows(b, &q, ts[2], kv0 * d, nkv * d, 0, (nq + nkv) * d);
}

static void emit_gate_up(infer_t *t, const char *hf_mlp, int64_t inter, const char *kind) {
    builder_t *b = t->b;
    bool bias = strcmp(kind, "bias") == 0;
    int64_t n = inter / b->p->tp, r0 = (int64_t)t->local * n;
    char name[256];
    snprintf(name, sizeof name, "%s.gate_up_proj.%s", hf_mlp, kind);
    uint32_t ts[2] = {build_tensor(b, "%s.gate_proj.%s", hf_mlp, kind),
                      build_tensor(b, "%s.up_proj.%s", hf_mlp, kind)};
    if (build_quant_group(b, name, ts, 2)) build_fp8_out_parts(b, name, (const int64_t[]){n, n}, 2, b->p->tp);
    param_t q = param_open_q(b, ts[0], bias ? 1 : 2, 2 * n, bias ? 0 : b->a->hidden_size, 0, "%s", name);
    place_rows(b, &q, ts[0], r0, n, 0, 0);
    place_rows(b, &q, ts[1], r0, n, 0, n);
}

static void emit_mlp(infer_t *t, const char *hf_mlp, int64_t inter, bool bias) {
    char buf[256], tn[256];
    emit_gate_up(t, hf_mlp, inter, "weight");
    if (bias) emit_gate_up(t, hf_mlp, inter, "bias");
    snprintf(buf, sizeof buf, "%s.down_proj.weight", hf_mlp);
    emit_split_cols(t->b, buf, buf, t->b->a->hidden_size, inter, t->b->p->tp, t->local);
    if (bias) {
        snprintf(tn, sizeof tn, "%s.down_proj.bias", hf_mlp);
        emit_replicated(t->b, tn, tn);
    }
}

/* vLLM's Fp8MoEMethod: the per-rank intermediate size must hold whole blocks
 * (w13's gate and up parts; w2's input when the experts are split) */
static void check_fp8_experts(infer_t *t, const char *hf, int64_t ip) {
    builder_t *b = t->b;
    if (ip % FERRY_FP8_BLOCK != 0)
        build_fail(b, FERRY_ERR_UNSUPPORTED,
                   "model %s: fp8 experts %s.mlp.experts (w13_weight): The output_size of gate's and up's "
                   "weight = %lld is not divisible by weight quantization block_n = %u (vLLM refuses "
                   "moe_intermediate_size / (tp/ep) = %lld / %u)",
                   b->m->name, hf, (long long)ip, FERRY_FP8_BLOCK, (long long)b->a->moe_intermediate_size,
                   t->moe_tp);
}

static void emit_experts(infer_t *t, const char *hf) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    int64_t el = a->num_experts / b->p->ep, ip = a->moe_intermediate_size / t->moe_tp;
    int64_t e0 = (int64_t)(t->local / t->moe_tp) * el, i0 = (int64_t)(t->local % t->moe_tp) * ip;
    int64_t h = a->hidden_size;
    char w13n[256], w2n[256];
    snprintf(w13n, sizeof w13n, "%s.mlp.experts.w13_weight", hf);
    snprintf(w2n, sizeof w2n, "%s.mlp.experts.w2_weight", hf);
    /* one FusedMoE layer, one quantization: every local expert's three
     * linears alike (checked on every rank, so every expert is seen) */
    uint32_t first = build_tensor(b, "%s.mlp.experts.%lld.gate_proj.weight", hf, (long long)e0);
    for (int64_t j = 0; b->m->nquant && j < el && b->st == FERRY_OK; j++) {
        static const char *const lin[3] = {"gate", "up", "down"};
        for (int k = 0; k < 3 && b->st == FERRY_OK; k++) {
            uint32_t ts[2] = {first, build_tensor(b, "%s.mlp.experts.%lld.%s_proj.weight", hf,
                                                  (long long)(e0 + j), lin[k])};
            build_quant_group(b, k == 2 ? w2n : w13n, ts, 2);
        }
    }
    if (b->st != FERRY_OK) return;
    if (build_is_fp8(b, first)) check_fp8_experts(t, hf, ip);
    param_t w13 = param_open_q(b, first, 3, el, 2 * ip, h, "%s", w13n);
    param_t w2 = param_open_q(b, first, 3, el, h, ip, "%s", w2n);
    for (int64_t j = 0; j < el && b->st == FERRY_OK; j++) {
        long long e = (long long)(e0 + j);
        place_rows(b, &w13, build_tensor(b, "%s.mlp.experts.%lld.gate_proj.weight", hf, e), i0, ip, j, 0);
        place_rows(b, &w13, build_tensor(b, "%s.mlp.experts.%lld.up_proj.weight", hf, e), i0, ip, j, ip);
        place_cols(b, &w2, build_tensor(b, "%s.mlp.experts.%lld.down_proj.weight", hf, e), i0, ip, j, 0);
    }
}

static void emit_mla(infer_t *t, const char *hf) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    char buf[256];
    int64_t nh = a->num_heads, qk = a->qk_nope_head_dim + a->qk_rope_head_dim, h = a->hidden_size;
    int64_t kva = a->kv_lora_rank + a->qk_rope_head_dim;
    if (a->q_lora_rank) {
        /* q_a_proj and kv_a_proj_with_mqa fused into one replicated matrix */
        char name[256];
        snprintf(name, sizeof name, "%s.self_attn.fused_qkv_a_proj.weight", hf);
        uint32_t ts[2] = {build_tensor(b, "%s.self_attn.q_a_proj.weight", hf),
                          build_tensor(b, "%s.self_attn.kv_a_proj_with_mqa.weight", hf)};
        /* replicated and merged: kv_a (576 = 4.5 blocks in DeepSeek-V3) may
         * end in a partial block, being the last part */
        if (build_quant_group(b, name, ts, 2))
            build_fp8_out_parts(b, name, (const int64_t[]){a->q_lora_rank, kva}, 2, 1);
        param_t q = param_open_q(b, ts[0], 2, a->q_lora_rank + kva, h, 0, "%s", name);
        place_whole(b, &q, ts[0]);
        place_rows(b, &q, ts[1], 0, kva, 0, a->q_lora_rank);
        snprintf(buf, sizeof buf, "%s.self_attn.q_a_layernorm.weight", hf);
        emit_replicated(t->b, buf, buf);
        snprintf(buf, sizeof buf, "%s.self_attn.q_b_proj.weight", hf);
        emit_split_rows(t->b, buf, buf, nh * qk, a->q_lora_rank, t->attn_tp, t->a_rank);
    } else {
        snprintf(buf, sizeof buf, "%s.self_attn.q_proj.weight", hf);
        emit_split_rows(t->b, buf, buf, nh * qk, h, t->attn_tp, t->a_rank);
        snprintf(buf, sizeof buf, "%s.self_attn.kv_a_proj_with_mqa.weight", hf);
        emit_replicated(t->b, buf, buf);
    }
    snprintf(buf, sizeof buf, "%s.self_attn.kv_a_layernorm.weight", hf);
    emit_replicated(t->b, buf, buf);
    snprintf(buf, sizeof buf, "%s.self_attn.kv_b_proj.weight", hf);
    emit_split_rows(t->b, buf, buf, nh * (a->qk_nope_head_dim + a->v_head_dim), a->kv_lora_rank,
                    t->attn_tp, t->a_rank);
    snprintf(buf, sizeof buf, "%s.self_attn.o_proj.weight", hf);
    emit_split_cols(t->b, buf, buf, h, nh * a->v_head_dim, t->attn_tp, t->a_rank);
}

static void emit_layer(infer_t *t, int64_t l) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    char hf[64], buf[256];
    snprintf(hf, sizeof hf, "model.layers.%lld", (long long)l);
    snprintf(buf, sizeof buf, "%s.input_layernorm.weight", hf);
    emit_replicated(t->b, buf, buf);
    if (a->family == FERRY_FAMILY_DEEPSEEK) {
        emit_mla(t, hf);
    } else {
        emit_qkv(t, hf, "weight");
        if (a->qkv_bias) emit_qkv(t, hf, "bias");
        if (a->qk_norm) {
            snprintf(buf, sizeof buf, "%s.self_attn.q_norm.weight", hf);
            emit_replicated(t->b, buf, buf);
            snprintf(buf, sizeof buf, "%s.self_attn.k_norm.weight", hf);
            emit_replicated(t->b, buf, buf);
        }
        snprintf(buf, sizeof buf, "%s.self_attn.o_proj.weight", hf);
        emit_split_cols(t->b, buf, buf, a->hidden_size, a->num_heads * a->head_dim, t->attn_tp, t->a_rank);
        if (a->o_bias) {
            snprintf(buf, sizeof buf, "%s.self_attn.o_proj.bias", hf);
            emit_replicated(t->b, buf, buf);
        }
    }
    snprintf(buf, sizeof buf, "%s.post_attention_layernorm.weight", hf);
    emit_replicated(t->b, buf, buf);
    char mlp[128];
    snprintf(mlp, sizeof mlp, "%s.mlp", hf);
    if (!ferry_arch_layer_is_moe(a, l)) {
        emit_mlp(t, mlp, a->intermediate_size, a->mlp_bias);
        return;
    }
    snprintf(buf, sizeof buf, "%s.mlp.gate.weight", hf);
    emit_replicated(t->b, buf, buf);
    if (a->expert_bias) {
        snprintf(buf, sizeof buf, "%s.mlp.gate.e_score_correction_bias", hf);
        emit_replicated(t->b, buf, buf);
    }
    emit_experts(t, hf);
    if (a->num_shared_experts) {
        snprintf(mlp, sizeof mlp, "%s.mlp.shared_experts", hf);
        emit_mlp(t, mlp, a->moe_intermediate_size * a->num_shared_experts, false);
    }
}

/* DeepSeek MTP layer (vLLM's DeepSeekMTP keeps the checkpoint names). */
static void emit_mtp(infer_t *t, int64_t l) {
    builder_t *b = t->b;
    char buf[256];
    emit_layer(t, l);
    snprintf(buf, sizeof buf, "model.layers.%lld.embed_tokens.weight", (long long)l);
    emit_vocab(t, buf, buf, t->attn_tp, t->a_rank);
    static const char *const repl[] = {"enorm.weight", "hnorm.weight", "eh_proj.weight",
                                       "shared_head.norm.weight"};
    for (size_t i = 0; i < sizeof repl / sizeof repl[0]; i++) {
        snprintf(buf, sizeof buf, "model.layers.%lld.%s", (long long)l, repl[i]);
        emit_replicated(t->b, buf, buf);
    }
    snprintf(buf, sizeof buf, "model.layers.%lld.shared_head.head.weight", (long long)l);
    emit_vocab(t, buf, buf, b->p->tp, t->local);
}

static void check_sizes(builder_t *b, uint32_t attn_tp) {
    const ferry_arch_t *a = b->a;
    const ferry_parallel_t *p = b->p;
    build_div(b, p->tp, "tp", p->dp, "dp (DP-attention groups)");
    if (b->st != FERRY_OK) return;
    build_div(b, a->num_heads, "num_attention_heads", attn_tp, "attention tp (tp/dp)");
    if (a->family != FERRY_FAMILY_DEEPSEEK) {
        if (attn_tp >= a->num_kv_heads)
            build_div(b, attn_tp, "attention tp (tp/dp)", a->num_kv_heads, "num_key_value_heads");
        else
            build_div(b, a->num_kv_heads, "num_key_value_heads", attn_tp, "attention tp (tp/dp)");
    }
    bool any_dense = false, any_moe = false;
    for (int64_t l = 0; l < a->num_layers + a->num_mtp_layers; l++) {
        if (ferry_arch_layer_is_moe(a, l)) any_moe = true;
        else any_dense = true;
    }
    if (any_dense) build_div(b, a->intermediate_size, "intermediate_size", p->tp, "tp");
    if (any_moe) {
        build_div(b, p->tp, "tp", p->ep, "ep");
        build_div(b, a->num_experts, "num_experts", p->ep, "ep");
        build_div(b, a->moe_intermediate_size, "moe_intermediate_size", p->tp / p->ep, "tp/ep");
        if (a->num_shared_experts)
            build_div(b, a->moe_intermediate_size * a->num_shared_experts,
                      "moe_intermediate_size*n_shared_experts", p->tp, "tp");
    } else if (p->ep > 1) {
        build_fail(b, FERRY_ERR_INVALID_CONFIG, "model %s has no experts; ep must be 1", b->m->name);
    }
}

ferry_status_t build_infer(builder_t *b) {
    const ferry_parallel_t *p = b->p;
    const ferry_arch_t *a = b->a;
    uint32_t attn_tp = p->dp && p->tp % p->dp == 0 ? p->tp / p->dp : 1;
    check_sizes(b, attn_tp);
    if (b->st != FERRY_OK) return b->st;
    infer_t t = {.b = b, .attn_tp = attn_tp, .moe_tp = p->tp / p->ep};
    uint32_t world = ferry_parallel_world_size(p);
    for (uint32_t r = 0; r < world && b->st == FERRY_OK; r++) {
        t.local = r % p->tp;
        t.a_rank = t.local % attn_tp;
        ferry_rank_info_t *ri = &b->l->rank_info[r];
        ri->replica = r / p->tp;
        ri->tp = t.local;
        ri->dp_attn = t.local / attn_tp;
        ri->ep = t.local / t.moe_tp;
        ri->etp = t.local % t.moe_tp;
        ri->num_layers = (uint32_t)a->num_layers;
        build_begin_rank(b, r);
        emit_vocab(&t, "model.embed_tokens.weight", "model.embed_tokens.weight", attn_tp, t.a_rank);
        for (int64_t l = 0; l < a->num_layers && b->st == FERRY_OK; l++) emit_layer(&t, l);
        for (int64_t i = 0; i < a->num_mtp_layers && b->st == FERRY_OK; i++)
            emit_mtp(&t, a->num_layers + i);
        emit_replicated(b, "model.norm.weight", "model.norm.weight");
        /* tied embeddings share the embedding parameter, unless DP attention
         * splits the embedding differently from the LM head */
        if (!a->tie_embeddings)
            emit_vocab(&t, "lm_head.weight", "lm_head.weight", p->tp, t.local);
        else if (attn_tp != p->tp)
            emit_vocab(&t, "lm_head.weight", "model.embed_tokens.weight", p->tp, t.local);
        build_end_rank(b);
    }
    return b->st;
}
