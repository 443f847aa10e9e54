/* Megatron-style trainer layouts: TP (fused QKV per KV group, fused gate_up
 * per rank, column/row-parallel linears, vocab-parallel embedding and output
 * layer padded to a multiple of vocab_multiple * tp), PP with even or uneven
 * splits and VPP chunks, CP and DP replicas, EP/ETP grouped experts.
 * Rank order is Megatron's default "tp-cp-ep-dp-pp": rank = tp + TP*(cp +
 * CP*(dp + DP*pp)); the expert mesh reuses the same ranks of a stage as
 * etp + ETP*(ep + EP*edp). Buffer names follow Megatron-core (TE spec). */
#include <stdio.h>
#include <string.h>

#include "layout/build.h"

typedef struct {
    uint32_t tp, cp, dp, pp, etp, ep, edp;
} coords_t;

typedef struct {
    builder_t *b;
    coords_t c;
    int64_t vocab_rows; /* padded vocab rows per TP rank */
} train_t;

static void emit_vocab_parallel(train_t *t, const char *buffer, const char *tensor) {
    emit_vocab_shard(t->b, buffer, tensor, t->vocab_rows, t->c.tp);
}

/* column-parallel: rows split over TP */
static void emit_column(train_t *t, const char *buffer, const char *tensor, int64_t rows_total,
                        int64_t cols) {
    emit_split_rows(t->b, buffer, tensor, rows_total, cols, t->b->p->tp, t->c.tp);
}

/* row-parallel: columns split over TP */
static void emit_row(train_t *t, const char *buffer, const char *tensor, int64_t rows,
                     int64_t cols_total) {
    emit_split_cols(t->b, buffer, tensor, rows, cols_total, t->b->p->tp, t->c.tp);
}

/* fused QKV: per KV group g, [q heads of g; k head g; v head g] */
static void emit_qkv(train_t *t, const char *pre, const char *hf, const char *kind, bool bias) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    int64_t d = a->head_dim, groups = a->num_kv_heads / b->p->tp, qpg = a->num_heads / a->num_kv_heads;
    int64_t rows_per_group = (qpg + 2) * d;
    param_t q = param_open(b, a->dtype, bias ? 1 : 2, groups * rows_per_group,
                           bias ? 0 : a->hidden_size, 0, "%s.self_attention.linear_qkv.%s", pre, kind);
    uint32_t tq = build_tensor(b, "%s.self_attn.q_proj.%s", hf, kind);
    uint32_t tk = build_tensor(b, "%s.self_attn.k_proj.%s", hf, kind);
    uint32_t tv = build_tensor(b, "%s.self_attn.v_proj.%s", hf, kind);
    for (int64_t j = 0; j < groups; j++) {
        int64_t g = (int64_t)t->c.tp * groups + j, row = j * rows_per_group;
        place_rows(b, &q, tq, g * qpg * d, qpg * d, 0, row);
        place_rows(b, &q, tk, g * d, d, 0, row + qpg * d);
        place_rows(b, &q, tv, g * d, d, 0, row + (qpg + 1) * d);
    }
}

/* fused gate_up of a TP-split MLP: [gate shard; up shard] */
static void emit_gate_up(train_t *t, const char *buffer, const char *hf, int64_t inter,
                         const char *kind) {
    builder_t *b = t->b;
    bool bias = strcmp(kind, "bias") == 0;
    int64_t n = inter / b->p->tp;
    param_t q = param_open(b, b->a->dtype, bias ? 1 : 2, 2 * n, bias ? 0 : b->a->hidden_size, 0,
                           "%s", buffer);
    place_rows(b, &q, build_tensor(b, "%s.gate_proj.%s", hf, kind), (int64_t)t->c.tp * n, n, 0, 0);
    place_rows(b, &q, build_tensor(b, "%s.up_proj.%s", hf, kind), (int64_t)t->c.tp * n, n, 0, n);
}

static void emit_dense_mlp(train_t *t, const char *pre, const char *hf_mlp, int64_t inter, bool bias,
                           const char *mcore) {
    char buf[256];
    snprintf(buf, sizeof buf, "%s.%s.linear_fc1.weight", pre, mcore);
    emit_gate_up(t, buf, hf_mlp, inter, "weight");
    if (bias) {
        snprintf(buf, sizeof buf, "%s.%s.linear_fc1.bias", pre, mcore);
        emit_gate_up(t, buf, hf_mlp, inter, "bias");
    }
    char tn[256];
    snprintf(buf, sizeof buf, "%s.%s.linear_fc2.weight", pre, mcore);
    snprintf(tn, sizeof tn, "%s.down_proj.weight", hf_mlp);
    emit_row(t, buf, tn, t->b->a->hidden_size, inter);
    if (bias) {
        snprintf(buf, sizeof buf, "%s.%s.linear_fc2.bias", pre, mcore);
        snprintf(tn, sizeof tn, "%s.down_proj.bias", hf_mlp);
        emit_replicated(t->b, buf, tn);
    }
}

static void emit_experts(train_t *t, const char *pre, const char *hf) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    int64_t el = a->num_experts / b->p->ep, ip = a->moe_intermediate_size / b->p->etp;
    int64_t e0 = (int64_t)t->c.ep * el, i0 = (int64_t)t->c.etp * ip, h = a->hidden_size;
    if (!b->p->experts_transposed) {
        /* TE grouped experts: fc1 [E_local, 2I', H] (gate then up), fc2 [E_local, H, I'] */
        param_t w1 = param_open(b, a->dtype, 3, el, 2 * ip, h, "%s.mlp.experts.linear_fc1.weight", pre);
        param_t w2 = param_open(b, a->dtype, 3, el, h, ip, "%s.mlp.experts.linear_fc2.weight", pre);
        for (int64_t j = 0; j < el && b->st == FERRY_OK; j++) {
            long long e = (long long)(e0 + j);
            place_rows(b, &w1, build_tensor(b, "%s.mlp.experts.%lld.gate_proj.weight", hf, e), i0, ip, j, 0);
            place_rows(b, &w1, build_tensor(b, "%s.mlp.experts.%lld.up_proj.weight", hf, e), i0, ip, j, ip);
            place_cols(b, &w2, build_tensor(b, "%s.mlp.experts.%lld.down_proj.weight", hf, e), i0, ip, j, 0);
        }
        return;
    }
    /* legacy GroupedMLP: weight1 [H, E_local*2I'] and weight2 [E_local*I', H], i.e. the
     * per-expert matrices stored transposed and concatenated */
    param_t w1 = param_open(b, a->dtype, 2, h, el * 2 * ip, 0, "%s.mlp.experts.weight1", pre);
    param_t w2 = param_open(b, a->dtype, 2, el * ip, h, 0, "%s.mlp.experts.weight2", pre);
    static const uint32_t swap[2] = {1, 0};
    for (int64_t j = 0; j < el && b->st == FERRY_OK; j++) {
        long long e = (long long)(e0 + j);
        uint32_t tg = build_tensor(b, "%s.mlp.experts.%lld.gate_proj.weight", hf, e);
        uint32_t tu = build_tensor(b, "%s.mlp.experts.%lld.up_proj.weight", hf, e);
        uint32_t td = build_tensor(b, "%s.mlp.experts.%lld.down_proj.weight", hf, e);
        ferry_box_t bx = {.ndim = 2, .offset = {i0, 0}, .extent = {ip, h}};
        int64_t o1[2] = {0, j * 2 * ip};
        place(b, &w1, tg, &bx, o1, swap);
        int64_t o2[2] = {0, j * 2 * ip + ip};
        place(b, &w1, tu, &bx, o2, swap);
        ferry_box_t bd = {.ndim = 2, .offset = {0, i0}, .extent = {h, ip}};
        int64_t o3[2] = {j * ip, 0};
        place(b, &w2, td, &bd, o3, swap);
    }
}

static void emit_mla(train_t *t, const char *pre, const char *hf) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    char buf[256], tn[256];
    int64_t nh = a->num_heads, qk = a->qk_nope_head_dim + a->qk_rope_head_dim;
#define NAMES(bufname, tname)                               \
    (snprintf(buf, sizeof buf, "%s.self_attention.%s", pre, bufname), \
     snprintf(tn, sizeof tn, "%s.self_attn.%s", hf, tname))
    if (a->q_lora_rank) {
        NAMES("linear_q_down_proj.weight", "q_a_proj.weight");
        emit_replicated(t->b, buf, tn);
        NAMES("linear_q_up_proj.layer_norm_weight", "q_a_layernorm.weight");
        emit_replicated(t->b, buf, tn);
        NAMES("linear_q_up_proj.weight", "q_b_proj.weight");
        emit_column(t, buf, tn, nh * qk, a->q_lora_rank);
    } else {
        NAMES("linear_q_proj.weight", "q_proj.weight");
        emit_column(t, buf, tn, nh * qk, a->hidden_size);
    }
    NAMES("linear_kv_down_proj.weight", "kv_a_proj_with_mqa.weight");
    emit_replicated(t->b, buf, tn);
    NAMES("linear_kv_up_proj.layer_norm_weight", "kv_a_layernorm.weight");
    emit_replicated(t->b, buf, tn);
    NAMES("linear_kv_up_proj.weight", "kv_b_proj.weight");
    emit_column(t, buf, tn, nh * (a->qk_nope_head_dim + a->v_head_dim), a->kv_lora_rank);
    NAMES("linear_proj.weight", "o_proj.weight");
    emit_row(t, buf, tn, a->hidden_size, nh * a->v_head_dim);
#undef NAMES
}

static void emit_layer(train_t *t, const char *pre, int64_t l) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    char hf[64], buf[256], tn[256];
    snprintf(hf, sizeof hf, "model.layers.%lld", (long long)l);
    bool moe = ferry_arch_layer_is_moe(a, l);
    if (a->family == FERRY_FAMILY_DEEPSEEK) {
        snprintf(buf, sizeof buf, "%s.input_layernorm.weight", pre);
        snprintf(tn, sizeof tn, "%s.input_layernorm.weight", hf);
        emit_replicated(t->b, buf, tn);
        emit_mla(t, pre, hf);
    } else {
        snprintf(buf, sizeof buf, "%s.self_attention.linear_qkv.layer_norm_weight", pre);
        snprintf(tn, sizeof tn, "%s.input_layernorm.weight", hf);
        emit_replicated(t->b, buf, tn);
        emit_qkv(t, pre, hf, "weight", false);
        if (a->qkv_bias) emit_qkv(t, pre, hf, "bias", true);
        if (a->qk_norm) {
            snprintf(buf, sizeof buf, "%s.self_attention.q_layernorm.weight", pre);
            snprintf(tn, sizeof tn, "%s.self_attn.q_norm.weight", hf);
            emit_replicated(t->b, buf, tn);
            snprintf(buf, sizeof buf, "%s.self_attention.k_layernorm.weight", pre);
            snprintf(tn, sizeof tn, "%s.self_attn.k_norm.weight", hf);
            emit_replicated(t->b, buf, tn);
        }
        snprintf(buf, sizeof buf, "%s.self_attention.linear_proj.weight", pre);
        snprintf(tn, sizeof tn, "%s.self_attn.o_proj.weight", hf);
        emit_row(t, buf, tn, a->hidden_size, a->num_heads * a->head_dim);
        if (a->o_bias) {
            snprintf(buf, sizeof buf, "%s.self_attention.linear_proj.bias", pre);
            snprintf(tn, sizeof tn, "%s.self_attn.o_proj.bias", hf);
            emit_replicated(t->b, buf, tn);
        }
    }
    snprintf(tn, sizeof tn, "%s.post_attention_layernorm.weight", hf);
    char mlp[128];
    snprintf(mlp, sizeof mlp, "%s.mlp", hf);
    if (!moe) {
        snprintf(buf, sizeof buf, "%s.mlp.linear_fc1.layer_norm_weight", pre);
        emit_replicated(t->b, buf, tn);
        emit_dense_mlp(t, pre, mlp, a->intermediate_size, a->mlp_bias, "mlp");
        return;
    }
    snprintf(buf, sizeof buf, "%s.pre_mlp_layernorm.weight", pre);
    emit_replicated(t->b, buf, tn);
    snprintf(buf, sizeof buf, "%s.mlp.router.weight", pre);
    snprintf(tn, sizeof tn, "%s.mlp.gate.weight", hf);
    emit_replicated(t->b, buf, tn);
    if (a->expert_bias) {
        snprintf(buf, sizeof buf, "%s.mlp.router.expert_bias", pre);
        snprintf(tn, sizeof tn, "%s.mlp.gate.e_score_correction_bias", hf);
        emit_replicated(t->b, buf, tn);
    }
    emit_experts(t, pre, hf);
    if (a->num_shared_experts) {
        snprintf(mlp, sizeof mlp, "%s.mlp.shared_experts", hf);
        emit_dense_mlp(t, pre, mlp, a->moe_intermediate_size * a->num_shared_experts, false,
                       "mlp.shared_experts");
    }
}

/* DeepSeek MTP block i on the last stage (Megatron's mtp.layers.i). */
static void emit_mtp(train_t *t, int64_t i) {
    builder_t *b = t->b;
    const ferry_arch_t *a = b->a;
    int64_t l = a->num_layers + i;
    char pre[96], buf[256], tn[256];
    snprintf(pre, sizeof pre, "mtp.layers.%lld", (long long)i);
#define MTP(bufname, tname) \
    (snprintf(buf, sizeof buf, "%s.%s", pre, bufname), \
     snprintf(tn, sizeof tn, "model.layers.%lld.%s", (long long)l, tname))
    MTP("enorm.weight", "enorm.weight");
    emit_replicated(t->b, buf, tn);
    MTP("hnorm.weight", "hnorm.weight");
    emit_replicated(t->b, buf, tn);
    MTP("eh_proj.weight", "eh_proj.weight");
    emit_column(t, buf, tn, a->hidden_size, 2 * a->hidden_size);
    MTP("final_layernorm.weight", "shared_head.norm.weight");
    emit_replicated(t->b, buf, tn);
    MTP("embedding.word_embeddings.weight", "embed_tokens.weight");
    emit_vocab_parallel(t, buf, tn);
    MTP("output_layer.weight", "shared_head.head.weight");
    emit_vocab_parallel(t, buf, tn);
#undef MTP
    char lp[128];
    snprintf(lp, sizeof lp, "%s.transformer_layer", pre);
    emit_layer(t, lp, l);
}

/* Layers of each (stage, virtual chunk): chunk c = v*pp + stage holds
 * layers [first[c], first[c] + count[c]). */
static void split_layers(builder_t *b, int64_t *first, int64_t *count) {
    const ferry_parallel_t *p = b->p;
    int64_t L = b->a->num_layers;
    uint32_t pp = p->pp, chunks = p->pp * p->vpp;
    bool uneven = p->num_pp_layers || p->pp_first || p->pp_last;
    if (uneven && p->vpp > 1) {
        build_fail(b, FERRY_ERR_UNSUPPORTED,
                   "vpp=%u with an uneven pipeline split (pp_layers/pp_first/pp_last) is not "
                   "supported; use an even split",
                   p->vpp);
        return;
    }
    if (p->num_pp_layers && (p->pp_first || p->pp_last)) {
        build_fail(b, FERRY_ERR_INVALID_CONFIG, "give either pp_layers or pp_first/pp_last, not both");
        return;
    }
    if (p->num_pp_layers) {
        if (p->num_pp_layers != pp) {
            build_fail(b, FERRY_ERR_INVALID_CONFIG, "pp_layers lists %u stages but pp = %u",
                       p->num_pp_layers, pp);
            return;
        }
        int64_t sum = 0;
        for (uint32_t s = 0; s < pp; s++) {
            first[s] = sum;
            count[s] = p->pp_layers[s];
            sum += p->pp_layers[s];
        }
        if (sum != L)
            build_fail(b, FERRY_ERR_INVALID_CONFIG,
                       "pp_layers adds up to %lld layers; model %s has num_hidden_layers = %lld",
                       (long long)sum, b->m->name, (long long)L);
        return;
    }
    if (uneven) {
        int64_t fixed = (int64_t)p->pp_first + p->pp_last;
        uint32_t middle = pp - (p->pp_first ? 1 : 0) - (p->pp_last ? 1 : 0);
        if (pp < 2 || fixed > L) {
            build_fail(b, FERRY_ERR_INVALID_CONFIG,
                       "pp_first=%u, pp_last=%u do not fit pp = %u stages and %lld layers",
                       p->pp_first, p->pp_last, pp, (long long)L);
            return;
        }
        int64_t rest = L - fixed, per = middle ? rest / middle : 0;
        if ((middle && rest % middle) || (!middle && rest)) {
            build_fail(b, FERRY_ERR_INVALID_CONFIG,
                       "the %lld layers left after pp_first=%u and pp_last=%u do not divide evenly "
                       "over the %u middle stages",
                       (long long)rest, p->pp_first, p->pp_last, middle);
            return;
        }
        int64_t at = 0;
        for (uint32_t s = 0; s < pp; s++) {
            count[s] = (s == 0 && p->pp_first) ? p->pp_first
                       : (s == pp - 1 && p->pp_last) ? p->pp_last : per;
            first[s] = at;
            at += count[s];
        }
        return;
    }
    if (L % chunks != 0) {
        build_fail(b, FERRY_ERR_INVALID_CONFIG,
                   "model %s: num_hidden_layers = %lld is not divisible by pp*vpp = %u; give "
                   "pp_first/pp_last or pp_layers=a+b+...",
                   b->m->name, (long long)L, chunks);
        return;
    }
    for (uint32_t c = 0; c < chunks; c++) {
        count[c] = L / chunks;
        first[c] = (int64_t)c * (L / chunks);
    }
}

static void check_sizes(builder_t *b) {
    const ferry_arch_t *a = b->a;
    const ferry_parallel_t *p = b->p;
    build_div(b, a->num_heads, "num_attention_heads", p->tp, "tp");
    if (a->family != FERRY_FAMILY_DEEPSEEK)
        build_div(b, a->num_kv_heads, "num_key_value_heads", p->tp, "tp");
    bool any_dense = false, any_moe = false;
    for (int64_t l = 0; l < a->num_layers + a->num_mtp_layers; l++) {
        if (ferry_arch_layer_is_moe(a, l)) any_moe = true;
        else any_dense = true;
    }
    if (any_dense) build_div(b, a->intermediate_size, "intermediate_size", p->tp, "tp");
    if (any_moe) {
        build_div(b, a->num_experts, "num_experts", p->ep, "ep");
        build_div(b, a->moe_intermediate_size, "moe_intermediate_size", p->etp, "etp");
        build_div(b, (int64_t)p->tp * p->cp * p->dp, "tp*cp*dp", (int64_t)p->ep * p->etp, "ep*etp");
        if (a->num_shared_experts)
            build_div(b, a->moe_intermediate_size * a->num_shared_experts,
                      "moe_intermediate_size*n_shared_experts", p->tp, "tp");
    } else if (p->ep > 1 || p->etp > 1) {
        build_fail(b, FERRY_ERR_INVALID_CONFIG, "model %s has no experts; ep and etp must be 1",
                   b->m->name);
    }
    if (a->num_mtp_layers) build_div(b, a->hidden_size, "hidden_size (MTP eh_proj)", p->tp, "tp");
}

ferry_status_t build_train(builder_t *b) {
    const ferry_parallel_t *p = b->p;
    const ferry_arch_t *a = b->a;
    check_sizes(b);
    if (p->vpp > 1 && p->pp == 1)
        build_fail(b, FERRY_ERR_INVALID_CONFIG, "vpp=%u needs pp > 1", p->vpp);
    if (b->st != FERRY_OK) return b->st;
    uint32_t chunks = p->pp * p->vpp;
    int64_t *first = ferry_calloc(b->l->ctx, chunks, sizeof *first);
    int64_t *count = ferry_calloc(b->l->ctx, chunks, sizeof *count);
    if (!first || !count) {
        build_fail(b, FERRY_ERR_NO_MEMORY, "out of memory");
        goto out;
    }
    split_layers(b, first, count);
    if (b->st != FERRY_OK) goto out;
    train_t t = {.b = b};
    int64_t multiple = (int64_t)p->vocab_multiple * p->tp;
    t.vocab_rows = round_up(a->vocab_size, multiple) / p->tp;
    uint32_t stage_size = p->tp * p->cp * p->dp;
    uint32_t world = ferry_parallel_world_size(p);
    for (uint32_t r = 0; r < world && b->st == FERRY_OK; r++) {
        coords_t c;
        c.tp = r % p->tp;
        c.cp = (r / p->tp) % p->cp;
        c.dp = (r / (p->tp * p->cp)) % p->dp;
        c.pp = r / stage_size;
        uint32_t s = r % stage_size;
        c.etp = s % p->etp;
        c.ep = (s / p->etp) % p->ep;
        c.edp = s / (p->etp * p->ep);
        t.c = c;
        ferry_rank_info_t *ri = &b->l->rank_info[r];
        ri->replica = c.dp;
        ri->tp = c.tp;
        ri->pp = c.pp;
        ri->cp = c.cp;
        ri->ep = c.ep;
        ri->etp = c.etp;
        ri->edp = c.edp;
        ri->first_layer = (uint32_t)first[c.pp];
        build_begin_rank(b, r);
        if (c.pp == 0) emit_vocab_parallel(&t, "embedding.word_embeddings.weight", "model.embed_tokens.weight");
        for (uint32_t v = 0; v < p->vpp; v++) {
            uint32_t ch = v * p->pp + c.pp;
            ri->num_layers += (uint32_t)count[ch];
            for (int64_t l = first[ch]; l < first[ch] + count[ch] && b->st == FERRY_OK; l++) {
                char pre[64];
                snprintf(pre, sizeof pre, "decoder.layers.%lld", (long long)l);
                emit_layer(&t, pre, l);
            }
        }
        if (c.pp == p->pp - 1) {
            for (int64_t i = 0; i < a->num_mtp_layers; i++) emit_mtp(&t, i);
            emit_replicated(b, "decoder.final_layernorm.weight", "model.norm.weight");
            /* Tied embeddings: with pp > 1 the last stage keeps its own copy as the
             * output layer (Megatron's shared embedding); with pp == 1 it is the same
             * parameter as the embedding and has no buffer of its own. */
            if (!a->tie_embeddings)
                emit_vocab_parallel(&t, "output_layer.weight", "lm_head.weight");
            else if (p->pp > 1)
                emit_vocab_parallel(&t, "output_layer.weight", "model.embed_tokens.weight");
        }
        build_end_rank(b);
    }
out:
    ferry_free(b->l->ctx, first);
    ferry_free(b->l->ctx, count);
    return b->st;
}
